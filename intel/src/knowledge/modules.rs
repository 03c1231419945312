//! The modules of a repository, found with no model: packages named by their manifests
//! (Cargo, npm, Go, Python, Maven/Gradle), top-level directories outside any package,
//! and directories inside either that hold enough code to stand on their own. Each file
//! belongs to its deepest module. For each module the index gives its files and
//! languages, its purpose (the module docs or README it opens with, cited), its surface
//! (declared symbols ranked by how many files elsewhere reference them, each cited at its
//! line), its dependencies both ways (resolved imports), owners, churn, risk hotspots,
//! tests and recent commits.

use super::cite::{self, Citation};
use super::{CommitRef, Module, ModuleRisk, Owner, Purpose, Surface};
use crate::extract::SymbolKind;
use crate::files;
use crate::lang::Language;
use crate::query::Snapshot;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A directory inside a module becomes a module of its own from this many code files.
pub const SUBMODULE_FILES_MIN: usize = 4;
/// Surface symbols kept per module.
pub const SURFACE_MAX: usize = 12;
/// Owners kept per module.
pub const OWNERS_MAX: usize = 3;
/// Files whose full risk is assessed per module (the most churned ones).
pub const HOTSPOT_CANDIDATES: usize = 5;
/// Hotspots kept per module.
pub const HOTSPOTS_MAX: usize = 3;
/// Recent commits kept per module.
pub const RECENT_MAX: usize = 3;
/// Test files listed per module.
pub const TESTS_MAX: usize = 20;
/// A purpose is cut to this many characters.
pub const PURPOSE_CHARS_MAX: usize = 480;

/// A package's manifest: its file name and how its kind is called.
const MANIFESTS: &[(&str, &str)] = &[
    ("Cargo.toml", "cargo"),
    ("package.json", "npm"),
    ("go.mod", "go"),
    ("pyproject.toml", "python"),
    ("setup.py", "python"),
    ("pom.xml", "maven"),
    ("build.gradle", "gradle"),
    ("build.gradle.kts", "gradle"),
];

/// Directories that hold a package's code without naming a part of it.
const SOURCE_DIRS: &[&str] = &["src", "lib", "pkg", "internal", "app"];

struct Root {
    path: String,
    name: String,
    kind: &'static str,
}

/// The name a manifest gives its package, when it names one (a Cargo workspace's root
/// manifest names none, and is no package).
fn package_name(root: &std::path::Path, path: &str, kind: &str) -> Option<String> {
    let text = std::fs::read_to_string(root.join(path)).ok()?;
    let dir_name = || {
        path.rsplit_once('/')
            .map(|(d, _)| d.rsplit('/').next().unwrap_or(d).to_owned())
    };
    let quoted = |line: &str| -> Option<String> {
        let value = line.split_once('=')?.1.trim();
        let value = value.trim_matches(|c| c == '"' || c == '\'');
        (!value.is_empty()).then(|| value.to_owned())
    };
    match kind {
        "cargo" | "python" if path.ends_with(".toml") => {
            let mut section = "";
            for line in text.lines() {
                let line = line.trim();
                if line.starts_with('[') {
                    section = line;
                } else if matches!(section, "[package]" | "[project]" | "[tool.poetry]")
                    && line.starts_with("name")
                    && line[4..].trim_start().starts_with('=')
                {
                    return quoted(line);
                }
            }
            None
        }
        "npm" => serde_json::from_str::<serde_json::Value>(&text)
            .ok()?
            .get("name")?
            .as_str()
            .map(str::to_owned)
            .or_else(dir_name),
        "go" => text
            .lines()
            .find_map(|l| l.trim().strip_prefix("module "))
            .map(|m| m.trim().to_owned()),
        _ => dir_name().or_else(|| Some(root_name(root))),
    }
}

fn root_name(root: &std::path::Path) -> String {
    root.file_name()
        .map_or_else(|| ".".to_owned(), |n| n.to_string_lossy().into_owned())
}

fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

fn is_under(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || (path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/')
}

/// Finds the modules and assigns each file to one; returns the modules (sorted by path)
/// and each file's module index.
pub fn cluster(snapshot: &Snapshot, paths: &[String]) -> (Vec<Module>, HashMap<String, usize>) {
    let root = &snapshot.root;
    // 1. Packages.
    let mut roots: Vec<Root> = Vec::new();
    for path in paths {
        let name = path.rsplit('/').next().unwrap_or(path);
        let Some(&(_, kind)) = MANIFESTS.iter().find(|(m, _)| *m == name) else {
            continue;
        };
        let dir = parent_dir(path).to_owned();
        if roots.iter().any(|r| r.path == dir) {
            continue;
        }
        if let Some(name) = package_name(root, path, kind) {
            roots.push(Root {
                path: dir,
                name,
                kind,
            });
        }
    }
    // 2. Top-level directories outside any package, and the root itself.
    let mut top: BTreeSet<String> = BTreeSet::new();
    for path in paths {
        if roots.iter().any(|r| is_under(path, &r.path)) {
            continue;
        }
        match path.split_once('/') {
            Some((dir, _)) => {
                top.insert(dir.to_owned());
            }
            None => {
                top.insert(String::new());
            }
        }
    }
    for dir in top {
        if roots.iter().any(|r| r.path == dir) {
            continue;
        }
        let name = if dir.is_empty() {
            root_name(root)
        } else {
            dir.clone()
        };
        roots.push(Root {
            path: dir,
            name,
            kind: "directory",
        });
    }
    // 3. Directories inside a module that hold enough code of their own.
    let is_code = |p: &str| {
        snapshot
            .record(p)
            .is_some_and(|r| r.language != Language::Text)
    };
    let deepest = |roots: &[Root], path: &str| -> Option<usize> {
        roots
            .iter()
            .enumerate()
            .filter(|(_, r)| is_under(path, &r.path))
            .max_by_key(|(_, r)| r.path.len())
            .map(|(i, _)| i)
    };
    let mut subs: Vec<Root> = Vec::new();
    for (index, module) in roots.iter().enumerate() {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for path in paths {
            if deepest(&roots, path) != Some(index) || !is_code(path) {
                continue;
            }
            let rest = if module.path.is_empty() {
                path.as_str()
            } else {
                &path[module.path.len() + 1..]
            };
            let mut parts: Vec<&str> = rest.split('/').collect();
            parts.pop();
            // `src/bt/x.rs` stands for `bt`; a file directly in `src/` stays in the module.
            let first_real = parts
                .iter()
                .position(|p| !SOURCE_DIRS.contains(p))
                .filter(|&i| i <= 1 && (i == 0 || SOURCE_DIRS.contains(&parts[0])));
            if let Some(i) = first_real {
                let dir = parts[..=i].join("/");
                *counts.entry(dir).or_default() += 1;
            }
        }
        for (dir, count) in counts {
            if count < SUBMODULE_FILES_MIN {
                continue;
            }
            let path = if module.path.is_empty() {
                dir.clone()
            } else {
                format!("{}/{dir}", module.path)
            };
            if roots.iter().any(|r| r.path == path) {
                continue;
            }
            let leaf = dir.rsplit('/').next().unwrap_or(&dir);
            subs.push(Root {
                name: format!("{}/{leaf}", module.name),
                path,
                kind: "directory",
            });
        }
    }
    roots.extend(subs);
    roots.sort_by(|a, b| a.path.cmp(&b.path));
    // Two packages may share a name (two `utils`): the later ones take their path.
    let mut seen = BTreeSet::new();
    for r in &mut roots {
        if !seen.insert(r.name.clone()) {
            r.name = if r.path.is_empty() {
                ".".into()
            } else {
                r.path.clone()
            };
            seen.insert(r.name.clone());
        }
    }
    let mut of: HashMap<String, usize> = HashMap::new();
    for path in paths {
        if let Some(i) = deepest(&roots, path) {
            of.insert(path.clone(), i);
        }
    }
    let modules = roots
        .into_iter()
        .map(|r| Module {
            name: r.name,
            path: if r.path.is_empty() {
                ".".into()
            } else {
                r.path
            },
            kind: r.kind.to_owned(),
            ..Module::default()
        })
        .collect();
    (modules, of)
}

/// Fills each module's facts from the index.
pub fn describe(
    snapshot: &Snapshot,
    modules: &mut [Module],
    of: &HashMap<String, usize>,
    paths: &[String],
) {
    let mut files_of: Vec<Vec<&str>> = vec![Vec::new(); modules.len()];
    for path in paths {
        if let Some(&m) = of.get(path) {
            files_of[m].push(path);
        }
    }
    // Pass 1: dependencies between modules (resolved imports), both ways.
    let mut depends: Vec<BTreeMap<usize, usize>> = vec![BTreeMap::new(); modules.len()];
    for (index, files) in files_of.iter().enumerate() {
        for path in files {
            let Some(record) = snapshot.record(path) else {
                continue;
            };
            for target in record.resolved.iter().flatten() {
                if let Some(&m) = of.get(target)
                    && m != index
                {
                    *depends[index].entry(m).or_default() += 1;
                }
            }
        }
    }
    let mut importers: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); modules.len()];
    for (index, targets) in depends.iter().enumerate() {
        for &m in targets.keys() {
            importers[m].insert(index);
        }
    }
    // Files that reference each name: (module, language family) of each.
    let mut referenced: HashMap<&str, Vec<(usize, u8)>> = HashMap::new();
    for record in &snapshot.content.records {
        if record.language == Language::Text {
            continue;
        }
        let Some(&m) = of.get(&record.path) else {
            continue;
        };
        let family = crate::query::family(record.language);
        for name in record.facts.references.keys() {
            referenced
                .entry(name.as_str())
                .or_default()
                .push((m, family));
        }
    }
    let view = snapshot.history_view();
    for (index, module) in modules.iter_mut().enumerate() {
        let files = &files_of[index];
        module.files = files.len();
        let mut languages: BTreeMap<String, usize> = BTreeMap::new();
        let mut surface: Vec<Surface> = Vec::new();
        let mut tests = Vec::new();
        // A name counts as used elsewhere in the modules that import this one (a name
        // alone says little: `derive` and `lines` are everywhere); a module nobody
        // imports from (a language whose imports the index cannot resolve) counts every
        // other module of the same language family.
        let users = &importers[index];
        for path in files {
            if files::is_test_path(path) {
                tests.push((*path).to_owned());
            }
            let Some(record) = snapshot.record(path) else {
                continue;
            };
            module.lines += u64::from(record.facts.lines);
            if record.language == Language::Text {
                continue;
            }
            *languages
                .entry(format!("{:?}", record.language).to_lowercase())
                .or_default() += 1;
            if files::is_test_path(path) {
                continue;
            }
            let family = crate::query::family(record.language);
            for symbol in &record.facts.symbols {
                if symbol.parent.is_some()
                    || matches!(
                        symbol.kind,
                        SymbolKind::Section | SymbolKind::Module | SymbolKind::Method
                    )
                    || !is_public(record.language, &symbol.name, &symbol.signature)
                {
                    continue;
                }
                let references = referenced.get(symbol.name.as_str()).map_or(0, |refs| {
                    refs.iter()
                        .filter(|&&(m, f)| {
                            m != index && f == family && (users.is_empty() || users.contains(&m))
                        })
                        .count()
                });
                surface.push(Surface {
                    name: symbol.name.clone(),
                    kind: symbol.kind.name().to_owned(),
                    signature: cite::excerpt(&symbol.signature),
                    references: references as u32,
                    cite: Citation {
                        file: Some((*path).to_owned()),
                        line: Some(symbol.line),
                        ..Citation::default()
                    },
                });
            }
        }
        surface.sort_by(|a, b| {
            b.references
                .cmp(&a.references)
                .then(a.cite.file.cmp(&b.cite.file))
                .then(a.cite.line.cmp(&b.cite.line))
        });
        surface.truncate(SURFACE_MAX);
        // Fingerprint each cited declaration line, so an audit sees it edited.
        let mut read: HashMap<String, Vec<String>> = HashMap::new();
        surface.retain_mut(|s| {
            let (Some(file), Some(line)) = (s.cite.file.clone(), s.cite.line) else {
                return false;
            };
            let lines = read
                .entry(file.clone())
                .or_insert_with(|| cite::read_lines(&snapshot.root, &file).unwrap_or_default());
            match cite::cite_lines(&file, lines, line, line) {
                Ok(c) => {
                    s.cite = c;
                    true
                }
                Err(_) => false,
            }
        });
        module.surface = surface;
        module.languages = languages;
        module.depends_index = depends[index].keys().copied().collect();
        tests.truncate(TESTS_MAX);
        module.tests = tests;
        // History: the commits that touched any of its files.
        let mut commits: BTreeMap<usize, ()> = BTreeMap::new();
        let mut authors: BTreeMap<String, u32> = BTreeMap::new();
        let mut churn_of: Vec<(u32, &str)> = Vec::new();
        for path in files {
            let touched = view.indices_of(path);
            churn_of.push((touched.len() as u32, path));
            for &position in touched {
                if snapshot.history.commits[position as usize].merge {
                    continue;
                }
                commits.insert(position as usize, ());
            }
        }
        for &position in commits.keys() {
            let commit = &snapshot.history.commits[position];
            *authors.entry(commit.author.clone()).or_default() += 1;
        }
        module.churn = commits.len() as u32;
        module.touches_30d = commits
            .keys()
            .filter(|&&p| {
                snapshot.now - snapshot.history.commits[p].time <= crate::history::RECENT_WINDOW_S
            })
            .count() as u32;
        let mut owners: Vec<Owner> = authors
            .into_iter()
            .map(|(name, commits)| Owner { name, commits })
            .collect();
        owners.sort_by(|a, b| b.commits.cmp(&a.commits).then(a.name.cmp(&b.name)));
        owners.truncate(OWNERS_MAX);
        module.owners = owners;
        module.recent = commits
            .keys()
            .rev()
            .take(RECENT_MAX)
            .map(|&p| {
                let c = &snapshot.history.commits[p];
                CommitRef {
                    id: c.id.clone(),
                    time: c.time,
                    author: c.author.clone(),
                    subject: c.subject.clone(),
                }
            })
            .collect();
        // Risk: assessed in full for the most churned code files only (it is costly).
        churn_of.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let mut hotspots: Vec<ModuleRisk> = churn_of
            .iter()
            .filter(|(_, p)| {
                snapshot
                    .record(p)
                    .is_some_and(|r| r.language != Language::Text)
            })
            .take(HOTSPOT_CANDIDATES)
            .filter_map(|(_, p)| snapshot.risk(p).ok())
            .map(|r| ModuleRisk {
                path: r.path,
                score: r.score,
                level: r.level.to_owned(),
            })
            .collect();
        hotspots.sort_by(|a, b| b.score.cmp(&a.score).then(a.path.cmp(&b.path)));
        hotspots.truncate(HOTSPOTS_MAX);
        module.risk = hotspots.first().map_or(0, |h| h.score);
        module.risk_level = crate::risk::level(module.risk).to_owned();
        module.hotspots = hotspots;
        module.purpose = purpose(snapshot, module, files);
    }
    // Names of dependencies, and who depends on each module.
    let names: Vec<String> = modules.iter().map(|m| m.name.clone()).collect();
    let mut used_by: Vec<BTreeSet<String>> = vec![BTreeSet::new(); modules.len()];
    for (index, module) in modules.iter_mut().enumerate() {
        module.depends_on = module
            .depends_index
            .iter()
            .map(|&m| names[m].clone())
            .collect();
        for &m in &module.depends_index {
            used_by[m].insert(names[index].clone());
        }
    }
    for (module, users) in modules.iter_mut().zip(used_by) {
        module.used_by = users.into_iter().collect();
    }
}

/// The module's own words about itself: the docs its entry file opens with, else its
/// README's first paragraph; cited at the lines they come from.
fn purpose(snapshot: &Snapshot, module: &Module, files: &[&str]) -> Option<Purpose> {
    let dir = if module.path == "." {
        ""
    } else {
        module.path.as_str()
    };
    let at = |name: &str| {
        if dir.is_empty() {
            name.to_owned()
        } else {
            format!("{dir}/{name}")
        }
    };
    let entries = [
        "src/lib.rs",
        "src/main.rs",
        "lib.rs",
        "mod.rs",
        "main.rs",
        "__init__.py",
        "doc.go",
        "index.ts",
        "index.js",
        "README.md",
        "readme.md",
        "README",
    ];
    for entry in entries {
        let path = at(entry);
        if !files.contains(&path.as_str()) {
            continue;
        }
        let Some(record) = snapshot.record(&path) else {
            continue;
        };
        let Some(passage) = record
            .facts
            .prose
            .iter()
            .find(|p| p.text.split_whitespace().count() >= 3)
        else {
            continue;
        };
        let Ok(lines) = cite::read_lines(&snapshot.root, &path) else {
            continue;
        };
        let span = passage.text.lines().count().max(1) as u32;
        let end = (passage.line + span - 1).min(lines.len() as u32);
        let Ok(citation) = cite::cite_lines(&path, &lines, passage.line, end.max(passage.line))
        else {
            continue;
        };
        let text: String = passage
            .text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let text = match text.char_indices().nth(PURPOSE_CHARS_MAX) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text,
        };
        return Some(Purpose {
            text,
            cite: citation,
        });
    }
    None
}

/// True when a symbol is visible outside its file or package by its language's rules
/// (Rust `pub`, Go capitalized, Python without a leading underscore, Java `public`).
fn is_public(language: Language, name: &str, signature: &str) -> bool {
    match language {
        Language::Rust => signature.trim_start().starts_with("pub"),
        Language::Go => name.chars().next().is_some_and(char::is_uppercase),
        Language::Python => !name.starts_with('_'),
        Language::Java => signature.contains("public"),
        _ => true,
    }
}
