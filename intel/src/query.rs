//! The queries: symbols, callers, neighbors, risk, changed-now, explain, handoff (search
//! is in `search.rs`). Each answers with a serialisable report; the CLI renders it as
//! JSON or for people.

use crate::error::IntelError;
use crate::extract::{Parser, Symbol, SymbolKind};
use crate::files;
use crate::history::{CoChange, CommitNote, History, HistoryView};
use crate::lang::Language;
use crate::risk::{self, RiskAssessment, RiskInputs, RiskReason};
use crate::store::{ContentTable, FileRecord, Meta};
use crate::visible::Visibility;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A symbol name declared by more files than this is too common to say who uses whom.
pub const DECLARERS_MAX: usize = 3;
/// Symbol names shorter than this (characters) are not used to link files.
pub const LINK_NAME_CHARS_MIN: usize = 3;
/// Neighbours shown by default.
pub const NEIGHBORS_DEFAULT: usize = 10;
/// Recent commits shown by `explain`.
pub const RECENT_COMMITS_SHOWN: usize = 5;
/// Commits listed by `handoff` at most.
pub const HANDOFF_COMMITS_MAX: usize = 100;
/// Untouched neighbours listed per changed file.
pub const UNTOUCHED_NEIGHBORS_MAX: usize = 5;
/// A reference line is cut to this many characters.
pub const LINE_TEXT_CHARS_MAX: usize = 200;

/// Stems too generic to pair a test file with a source file by name.
const GENERIC_STEMS: [&str; 9] = [
    "mod", "lib", "main", "index", "__init__", "init", "util", "utils", "common",
];

/// A loaded index.
pub struct Snapshot {
    /// The repository's working tree.
    pub root: PathBuf,
    /// `meta.json`.
    pub meta: Meta,
    /// The content half.
    pub content: ContentTable,
    /// The git half.
    pub history: History,
    view: HistoryView,
    by_path: HashMap<String, usize>,
    skipped: std::collections::HashSet<String>,
    /// "Now" for recency (seconds since the Unix epoch).
    pub now: i64,
}

/// `palm symbols FILE`.
#[derive(Clone, Debug, Serialize)]
pub struct SymbolsReport {
    /// Repository-relative path.
    pub path: String,
    /// Its language.
    pub language: Language,
    /// `tree-sitter` or `line-based`.
    pub parser: Parser,
    /// Lines.
    pub lines: u32,
    /// Declared symbols in source order.
    pub symbols: Vec<Symbol>,
}

/// Where a name is declared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Definition {
    /// File.
    pub path: String,
    /// Line.
    pub line: u32,
    /// Kind.
    pub kind: SymbolKind,
    /// Enclosing type or module.
    pub parent: Option<String>,
}

/// One line that references a name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReferenceSite {
    /// File.
    pub path: String,
    /// Line.
    pub line: u32,
    /// The line's text, trimmed.
    pub text: String,
}

/// `palm callers NAME`.
#[derive(Clone, Debug, Serialize)]
pub struct CallersReport {
    /// The name looked for.
    pub name: String,
    /// Where it is declared.
    pub definitions: Vec<Definition>,
    /// Lines that reference it (declarations excluded), by path and line.
    pub references: Vec<ReferenceSite>,
    /// Distinct files among `references`.
    pub files: usize,
}

/// A co-change neighbour.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Neighbor {
    /// The other file.
    pub path: String,
    /// Commits that changed both.
    pub count: u32,
    /// Recency-weighted count (half-life 30 days), 3 decimals.
    pub weight: f64,
    /// Newest commit that changed both (seconds since the Unix epoch).
    pub last_together: i64,
}

/// `palm neighbors FILE`.
#[derive(Clone, Debug, Serialize)]
pub struct NeighborsReport {
    /// The file.
    pub path: String,
    /// Commits that changed it.
    pub commits: u32,
    /// Files that change with it, strongest first.
    pub neighbors: Vec<Neighbor>,
}

/// `palm risk FILE`.
#[derive(Clone, Debug, Serialize)]
pub struct RiskReport {
    /// The file.
    pub path: String,
    /// 0..=100.
    pub score: u32,
    /// `low`, `medium`, `high`.
    pub level: &'static str,
    /// Why, strongest first.
    pub reasons: Vec<RiskReason>,
    /// The numbers behind it.
    pub inputs: RiskInputs,
}

/// A score and level only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RiskSummary {
    /// 0..=100.
    pub score: u32,
    /// `low`, `medium`, `high`.
    pub level: &'static str,
}

/// One working-tree change.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    /// The file.
    pub path: String,
    /// `modified`, `added`, `deleted`, `renamed`, `untracked`, `typechange`.
    pub status: &'static str,
    /// True when the change is in the git index (staged).
    pub staged: bool,
    /// Its risk.
    pub risk: RiskSummary,
    /// Files that usually change with it but are not changed now.
    pub neighbors_untouched: Vec<Neighbor>,
}

/// `palm changed-now`.
#[derive(Clone, Debug, Serialize)]
pub struct ChangedNowReport {
    /// HEAD.
    pub head: Option<String>,
    /// Changes, by path.
    pub changes: Vec<Change>,
}

/// One import with where it leads.
#[derive(Clone, Debug, Serialize)]
pub struct ImportEdge {
    /// As written.
    pub module: String,
    /// Line.
    pub line: u32,
    /// The file it resolves to.
    pub resolved: Option<String>,
}

/// A file that depends on another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UsedBy {
    /// The dependent file.
    pub path: String,
    /// True when it imports the file.
    pub imports: bool,
    /// The file's symbols it references.
    pub names: Vec<String>,
}

/// A commit, briefly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CommitBrief {
    /// Full id.
    pub id: String,
    /// Seconds since the Unix epoch.
    pub time: i64,
    /// Author name.
    pub author: String,
    /// Subject line.
    pub subject: String,
}

/// A symbol, briefly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SymbolBrief {
    /// Kind.
    pub kind: SymbolKind,
    /// Name.
    pub name: String,
    /// Line.
    pub line: u32,
}

/// `palm explain FILE`.
#[derive(Clone, Debug, Serialize)]
pub struct ExplainReport {
    /// The file.
    pub path: String,
    /// Its language.
    pub language: Language,
    /// `tree-sitter` or `line-based`.
    pub parser: Parser,
    /// Lines.
    pub lines: u32,
    /// What it declares.
    pub declares: Vec<SymbolBrief>,
    /// What it imports.
    pub imports: Vec<ImportEdge>,
    /// Who uses it.
    pub used_by: Vec<UsedBy>,
    /// What changes with it.
    pub cochanges: Vec<Neighbor>,
    /// Its tests.
    pub tests: Vec<String>,
    /// Its newest commits, newest first.
    pub recent_commits: Vec<CommitBrief>,
    /// Its risk.
    pub risk: RiskReport,
    /// Commands worth running after changing it.
    pub checks: Vec<String>,
}

/// One changed file in a handoff.
#[derive(Clone, Debug, Serialize)]
pub struct HandoffFile {
    /// The file.
    pub path: String,
    /// `added`, `modified`, `deleted`, `renamed`, `untracked`, `typechange`.
    pub status: &'static str,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// Its risk.
    pub risk: RiskSummary,
}

/// A neighbour of the change that the change did not touch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UntouchedNeighbor {
    /// The untouched file.
    pub path: String,
    /// The changed file it usually changes with.
    pub with: String,
    /// Commits that changed both.
    pub count: u32,
}

/// `palm handoff [BASE]`.
#[derive(Clone, Debug, Serialize)]
pub struct HandoffReport {
    /// The base as given (or chosen).
    pub base: String,
    /// The base commit.
    pub base_commit: String,
    /// HEAD.
    pub head: String,
    /// Commits after the base, newest first.
    pub commits: Vec<CommitBrief>,
    /// Files changed since the base (committed or not), by path.
    pub changed: Vec<HandoffFile>,
    /// Changed files at medium or high risk, riskiest first.
    pub risky: Vec<RiskReport>,
    /// Files that usually change with the changed ones but did not.
    pub untouched_neighbors: Vec<UntouchedNeighbor>,
    /// Commands to run before handing off.
    pub checks: Vec<String>,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn neighbor(edge: CoChange) -> Neighbor {
    Neighbor {
        path: edge.path,
        count: edge.count,
        weight: round3(edge.weight),
        last_together: edge.last,
    }
}

fn brief(commit: &CommitNote) -> CommitBrief {
    CommitBrief {
        id: commit.id.clone(),
        time: commit.time,
        author: commit.author.clone(),
        subject: commit.subject.clone(),
    }
}

/// The stem of a file name with test markers removed (`test_shapes.py` → `shapes`).
fn test_stem(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = name.split('.').next().unwrap_or(name);
    let stem = stem.strip_prefix("test_").unwrap_or(stem);
    let stem = stem
        .strip_suffix("_tests")
        .or_else(|| stem.strip_suffix("_test"))
        .or_else(|| stem.strip_suffix("Tests"))
        .or_else(|| stem.strip_suffix("Test"))
        .unwrap_or(stem);
    stem.to_owned()
}

/// Languages whose names can refer to each other.
pub(crate) fn family(language: Language) -> u8 {
    match language {
        Language::Rust => 0,
        Language::Python => 1,
        Language::Go => 2,
        Language::JavaScript | Language::TypeScript | Language::Tsx => 3,
        Language::Java => 4,
        Language::C | Language::Cpp => 5,
        Language::Text => 6,
    }
}

fn plain_stem(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.split('.').next().unwrap_or(name)
}

impl Snapshot {
    /// Wraps loaded tables.
    pub fn new(
        root: PathBuf,
        meta: Meta,
        content: ContentTable,
        history: History,
        now: i64,
    ) -> Snapshot {
        let view = history.view();
        let by_path = content
            .records
            .iter()
            .enumerate()
            .map(|(i, r)| (r.path.clone(), i))
            .collect();
        let skipped = content.skipped.iter().map(|s| s.path.clone()).collect();
        Snapshot {
            root,
            meta,
            content,
            history,
            view,
            by_path,
            skipped,
            now,
        }
    }

    /// The per-path lookups of the history.
    pub fn history_view(&self) -> &HistoryView {
        &self.view
    }

    /// The record of an indexed file.
    pub fn record(&self, path: &str) -> Option<&FileRecord> {
        self.by_path.get(path).map(|&i| &self.content.records[i])
    }

    /// True when the path is indexed, skipped, in the history or on disk.
    fn known(&self, path: &str) -> bool {
        self.record(path).is_some()
            || self.skipped.contains(path)
            || !self.history.commits_of(&self.view, path).is_empty()
            || self.root.join(path).is_file()
    }

    fn require_known(&self, path: &str) -> Result<(), IntelError> {
        if self.known(path) {
            Ok(())
        } else {
            Err(IntelError::UnknownFile {
                path: path.to_owned(),
            })
        }
    }

    /// `palm callers NAME`.
    pub fn callers(&self, name: &str) -> CallersReport {
        let name = name
            .rsplit("::")
            .next()
            .unwrap_or(name)
            .rsplit('.')
            .next()
            .unwrap_or(name)
            .to_owned();
        let mut definitions = Vec::new();
        let mut references = Vec::new();
        let mut files = BTreeSet::new();
        for record in &self.content.records {
            for symbol in record.facts.symbols.iter().filter(|s| s.name == name) {
                definitions.push(Definition {
                    path: record.path.clone(),
                    line: symbol.line,
                    kind: symbol.kind,
                    parent: symbol.parent.clone(),
                });
            }
            let Some(lines) = record.facts.references.get(&name) else {
                continue;
            };
            files.insert(record.path.clone());
            let text = std::fs::read_to_string(self.root.join(&record.path)).unwrap_or_default();
            let source: Vec<&str> = text.lines().collect();
            for &line in lines {
                let text = source
                    .get(line as usize - 1)
                    .map(|l| l.trim().chars().take(LINE_TEXT_CHARS_MAX).collect())
                    .unwrap_or_default();
                references.push(ReferenceSite {
                    path: record.path.clone(),
                    line,
                    text,
                });
            }
        }
        CallersReport {
            name,
            definitions,
            references,
            files: files.len(),
        }
    }

    /// `palm neighbors FILE`.
    pub fn neighbors(&self, path: &str, limit: usize) -> Result<NeighborsReport, IntelError> {
        self.require_known(path)?;
        let commits = self.history.commits_of(&self.view, path).len() as u32;
        let neighbors = self
            .current_cochanges(path)
            .into_iter()
            .take(limit)
            .map(neighbor)
            .collect();
        Ok(NeighborsReport {
            path: path.to_owned(),
            commits,
            neighbors,
        })
    }

    /// Co-changes with files that still exist and that people edit (not skipped ones:
    /// lock files, vendored code and binaries change with everything and mean nothing).
    fn current_cochanges(&self, path: &str) -> Vec<CoChange> {
        self.history
            .cochanges(&self.view, path, self.now)
            .into_iter()
            .filter(|c| {
                self.record(&c.path).is_some()
                    || (!self.skipped.contains(&c.path)
                        && files::skip_by_path(&c.path).is_none()
                        && self.root.join(&c.path).is_file())
            })
            .collect()
    }

    /// Files that import `path` or reference its distinctive symbols.
    pub fn used_by(&self, path: &str) -> Vec<UsedBy> {
        let Some(target) = self.record(path) else {
            return Vec::new();
        };
        let mut declarers: HashMap<&str, usize> = HashMap::new();
        for record in &self.content.records {
            let names: BTreeSet<&str> = record
                .facts
                .symbols
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            for name in names {
                *declarers.entry(name).or_default() += 1;
            }
        }
        let linked: BTreeSet<&str> = target
            .facts
            .symbols
            .iter()
            .filter(|s| s.kind != SymbolKind::Section && s.kind != SymbolKind::Module)
            .map(|s| s.name.as_str())
            .filter(|n| n.chars().count() >= LINK_NAME_CHARS_MIN)
            .filter(|n| declarers.get(n).copied().unwrap_or(0) <= DECLARERS_MAX)
            .collect();
        // A name links a file only if that file could see the target's declaration of it
        // (same crate or package, an import into it, a dependency named in a path: the
        // rule is in `visible.rs`); a word that merely looks like a symbol links nothing.
        let mut visibility = Visibility::new(&self.root, path, target.language);
        let mut out = Vec::new();
        for record in &self.content.records {
            // A text file that mentions a name (docs, fixtures) does not depend on it.
            if record.path == path || record.language == Language::Text {
                continue;
            }
            // Names link files of one language family only (`area` in Python does not
            // use `area` in Rust); imports are resolved within a language anyway.
            if family(record.language) != family(target.language) {
                continue;
            }
            let imports = record.resolved.iter().any(|r| r.as_deref() == Some(path));
            let own: BTreeSet<&str> = record
                .facts
                .symbols
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            let names: Vec<String> = if visibility.sees(record) {
                let shadowed = visibility.shadowed(record);
                linked
                    .iter()
                    .filter(|n| !own.contains(**n) && !shadowed.contains(**n))
                    .filter(|n| record.facts.references.contains_key(**n))
                    .map(|n| (*n).to_owned())
                    .collect()
            } else {
                Vec::new()
            };
            if imports || !names.is_empty() {
                out.push(UsedBy {
                    path: record.path.clone(),
                    imports,
                    names,
                });
            }
        }
        out
    }

    /// Test files of `path` (and the file itself when it holds inline tests).
    pub fn tests_for(&self, path: &str, used_by: &[UsedBy]) -> Vec<String> {
        let mut tests = BTreeSet::new();
        if let Some(record) = self.record(path) {
            let inline = record
                .facts
                .symbols
                .iter()
                .any(|s| s.kind == SymbolKind::Module && s.name == "tests");
            if inline {
                tests.insert(path.to_owned());
            }
        }
        if files::is_test_path(path) {
            return tests.into_iter().collect();
        }
        for user in used_by {
            if files::is_test_path(&user.path) {
                tests.insert(user.path.clone());
            }
        }
        let stem = plain_stem(path);
        if stem.chars().count() >= LINK_NAME_CHARS_MIN && !GENERIC_STEMS.contains(&stem) {
            for record in &self.content.records {
                if record.path != path
                    && files::is_test_path(&record.path)
                    && record.language == Language::detect(path)
                    && test_stem(&record.path) == stem
                {
                    tests.insert(record.path.clone());
                }
            }
        }
        tests.into_iter().collect()
    }

    fn risk_of(&self, path: &str) -> RiskReport {
        let activity = self.history.activity(&self.view, path, self.now);
        let used_by = self.used_by(path);
        let tests = self.tests_for(path, &used_by);
        let coupled = self
            .current_cochanges(path)
            .iter()
            .filter(|c| c.count >= risk::COUPLING_COMMITS_MIN)
            .count() as u32;
        let record = self.record(path);
        let testable =
            record.is_some_and(|r| r.language != Language::Text) && !files::is_test_path(path);
        let inputs = RiskInputs {
            churn: activity.churn,
            touches_30d: activity.touches_30d,
            authors: activity.authors,
            last_touched: activity.last_touched,
            fan_in: used_by.len() as u32,
            coupled_files: coupled,
            lines: record.map_or(0, |r| r.facts.lines),
            tests: tests.len() as u32,
            testable,
        };
        let RiskAssessment {
            score,
            level,
            reasons,
        } = risk::assess(&inputs);
        RiskReport {
            path: path.to_owned(),
            score,
            level,
            reasons,
            inputs,
        }
    }

    /// `palm risk FILE`.
    pub fn risk(&self, path: &str) -> Result<RiskReport, IntelError> {
        self.require_known(path)?;
        Ok(self.risk_of(path))
    }

    fn summary(&self, path: &str) -> RiskSummary {
        let report = self.risk_of(path);
        RiskSummary {
            score: report.score,
            level: report.level,
        }
    }

    /// Commands worth running after changing `path`.
    pub fn checks(&self, path: &str, tests: &[String]) -> Vec<String> {
        let mut checks = Vec::new();
        let exists = |p: &str| self.record(p).is_some() || self.root.join(p).is_file();
        let ancestors = |p: &str| -> Vec<String> {
            let mut dirs = Vec::new();
            let mut dir = p.rsplit_once('/').map_or("", |(d, _)| d).to_owned();
            loop {
                dirs.push(dir.clone());
                if dir.is_empty() {
                    break;
                }
                dir = dir.rsplit_once('/').map_or("", |(d, _)| d).to_owned();
            }
            dirs
        };
        let at = |dir: &str, name: &str| {
            if dir.is_empty() {
                name.to_owned()
            } else {
                format!("{dir}/{name}")
            }
        };
        let language = Language::detect(path);
        match language {
            Language::Rust => {
                let manifest = ancestors(path)
                    .into_iter()
                    .map(|d| at(&d, "Cargo.toml"))
                    .find(|m| exists(m));
                let package = manifest
                    .as_ref()
                    .and_then(|m| std::fs::read_to_string(self.root.join(m)).ok())
                    .and_then(|text| package_name(&text));
                let base = match &package {
                    Some(name) => format!("cargo test -p {name}"),
                    None => "cargo test".to_owned(),
                };
                let crate_dir = manifest
                    .as_deref()
                    .map(|m| m.trim_end_matches("Cargo.toml").trim_end_matches('/'))
                    .unwrap_or("");
                // The crate's own tests first, then each integration test by name.
                checks.push(base.clone());
                let tests_dir = at(crate_dir, "tests/");
                for test in tests.iter().chain(std::iter::once(&path.to_owned())) {
                    if let Some(rest) = test.strip_prefix(&tests_dir)
                        && !rest.contains('/')
                    {
                        let check = format!("{base} --test {}", plain_stem(rest));
                        if !checks.contains(&check) {
                            checks.push(check);
                        }
                    }
                }
            }
            Language::Python => {
                if tests.is_empty() {
                    checks.push("python -m pytest".to_owned());
                } else {
                    checks.push(format!("python -m pytest {}", tests.join(" ")));
                }
            }
            Language::Go => {
                let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
                checks.push(if dir.is_empty() {
                    "go test .".to_owned()
                } else {
                    format!("go test ./{dir}")
                });
            }
            Language::JavaScript | Language::TypeScript | Language::Tsx => {
                let package = ancestors(path)
                    .into_iter()
                    .find(|d| exists(&at(d, "package.json")));
                match package.as_deref() {
                    Some("") | None => checks.push("npm test".to_owned()),
                    Some(dir) => checks.push(format!("npm test --prefix {dir}")),
                }
                if language != Language::JavaScript {
                    checks.push("npx tsc --noEmit".to_owned());
                }
            }
            Language::Java => {
                let classes: Vec<&str> = tests.iter().map(|t| plain_stem(t)).collect();
                if exists("pom.xml") {
                    if classes.is_empty() {
                        checks.push("mvn test".to_owned());
                    } else {
                        checks.push(format!("mvn test -Dtest={}", classes.join(",")));
                    }
                } else if exists("build.gradle") || exists("build.gradle.kts") {
                    checks.push("gradle test".to_owned());
                }
            }
            Language::C | Language::Cpp => {
                if exists("CMakeLists.txt") {
                    checks.push("ctest --test-dir build".to_owned());
                } else if exists("Makefile") {
                    checks.push("make test".to_owned());
                }
            }
            Language::Text => {}
        }
        checks
    }

    /// `palm explain FILE`.
    pub fn explain(
        &self,
        path: &str,
        current: (Language, Parser, crate::extract::FileFacts),
        resolved: Vec<Option<String>>,
    ) -> ExplainReport {
        let (language, parser, facts) = current;
        let used_by = self.used_by(path);
        let tests = self.tests_for(path, &used_by);
        let checks = self.checks(path, &tests);
        let mut recent: Vec<&CommitNote> = self.history.commits_of(&self.view, path);
        recent.reverse();
        ExplainReport {
            path: path.to_owned(),
            language,
            parser,
            lines: facts.lines,
            declares: facts
                .symbols
                .iter()
                .map(|s| SymbolBrief {
                    kind: s.kind,
                    name: s.name.clone(),
                    line: s.line,
                })
                .collect(),
            imports: facts
                .imports
                .iter()
                .zip(resolved.into_iter().chain(std::iter::repeat(None)))
                .map(|(i, r)| ImportEdge {
                    module: i.module.clone(),
                    line: i.line,
                    resolved: r,
                })
                .collect(),
            used_by,
            cochanges: self
                .current_cochanges(path)
                .into_iter()
                .take(RECENT_COMMITS_SHOWN)
                .map(neighbor)
                .collect(),
            tests,
            recent_commits: recent
                .into_iter()
                .take(RECENT_COMMITS_SHOWN)
                .map(brief)
                .collect(),
            risk: self.risk_of(path),
            checks,
        }
    }

    /// `palm changed-now`, from the working tree's status.
    pub fn changed_now(&self, repo: &git2::Repository) -> Result<ChangedNowReport, IntelError> {
        let mut options = git2::StatusOptions::new();
        options
            .include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(false)
            .exclude_submodules(true);
        let mut changed: BTreeMap<String, (&'static str, bool)> = BTreeMap::new();
        for entry in repo.statuses(Some(&mut options))?.iter() {
            let Ok(path) = entry.path() else { continue };
            if files::is_own(path) {
                continue;
            }
            let s = entry.status();
            let status = if s.is_index_renamed() || s.is_wt_renamed() {
                "renamed"
            } else if s.is_index_deleted() || s.is_wt_deleted() {
                "deleted"
            } else if s.is_index_new() {
                "added"
            } else if s.is_wt_new() {
                "untracked"
            } else if s.is_index_typechange() || s.is_wt_typechange() {
                "typechange"
            } else if s.is_index_modified() || s.is_wt_modified() {
                "modified"
            } else {
                continue;
            };
            let staged = s.is_index_new()
                || s.is_index_modified()
                || s.is_index_deleted()
                || s.is_index_renamed()
                || s.is_index_typechange();
            changed.insert(path.to_owned(), (status, staged));
        }
        let changes = changed
            .iter()
            .map(|(path, &(status, staged))| Change {
                path: path.clone(),
                status,
                staged,
                risk: self.summary(path),
                neighbors_untouched: self
                    .current_cochanges(path)
                    .into_iter()
                    .filter(|c| !changed.contains_key(&c.path))
                    .take(UNTOUCHED_NEIGHBORS_MAX)
                    .map(neighbor)
                    .collect(),
            })
            .collect();
        let head = repo
            .head()
            .ok()
            .and_then(|h| h.peel_to_commit().ok())
            .map(|c| c.id().to_string());
        Ok(ChangedNowReport { head, changes })
    }

    /// `palm handoff [BASE]`.
    pub fn handoff(
        &self,
        repo: &git2::Repository,
        base: Option<&str>,
    ) -> Result<HandoffReport, IntelError> {
        let head = repo
            .head()
            .ok()
            .and_then(|h| h.peel_to_commit().ok())
            .ok_or_else(|| IntelError::NoCommits {
                root: self.root.clone(),
            })?;
        let (base_name, base_commit) = match base {
            Some(revision) => {
                let commit = repo
                    .revparse_single(revision)
                    .and_then(|o| o.peel_to_commit())
                    .map_err(|_| IntelError::BadRevision {
                        revision: revision.to_owned(),
                    })?;
                (revision.to_owned(), commit)
            }
            None => default_base(repo, &head),
        };
        let mut walk = repo.revwalk()?;
        walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::TIME)?;
        walk.push(head.id())?;
        walk.hide(base_commit.id())?;
        let mut commits = Vec::new();
        for id in walk.take(HANDOFF_COMMITS_MAX) {
            let commit = repo.find_commit(id?)?;
            commits.push(CommitBrief {
                id: commit.id().to_string(),
                time: commit.time().seconds(),
                author: commit.author().name().unwrap_or("").to_owned(),
                subject: commit.summary().ok().flatten().unwrap_or("").to_owned(),
            });
        }
        let base_tree = base_commit.tree()?;
        let mut options = git2::DiffOptions::new();
        options
            .include_untracked(true)
            .recurse_untracked_dirs(true)
            .show_untracked_content(true)
            .ignore_submodules(true);
        let diff = repo.diff_tree_to_workdir_with_index(Some(&base_tree), Some(&mut options))?;
        let mut changed = Vec::new();
        for (index, delta) in diff.deltas().enumerate() {
            let Some(path) = delta
                .new_file()
                .path()
                .or_else(|| delta.old_file().path())
                .and_then(|p| p.to_str())
            else {
                continue;
            };
            if files::is_own(path) {
                continue;
            }
            let status = match delta.status() {
                git2::Delta::Added => "added",
                git2::Delta::Deleted => "deleted",
                git2::Delta::Renamed => "renamed",
                git2::Delta::Untracked => "untracked",
                git2::Delta::Typechange => "typechange",
                _ => "modified",
            };
            let (added, removed) = git2::Patch::from_diff(&diff, index)
                .ok()
                .flatten()
                .and_then(|p| p.line_stats().ok())
                .map_or((0, 0), |(_, a, r)| (a, r));
            changed.push(HandoffFile {
                path: path.to_owned(),
                status,
                added,
                removed,
                risk: self.summary(path),
            });
        }
        changed.sort_by(|a, b| a.path.cmp(&b.path));
        let touched: BTreeSet<&str> = changed.iter().map(|c| c.path.as_str()).collect();
        let mut risky: Vec<RiskReport> = changed
            .iter()
            .filter(|c| c.status != "deleted")
            .map(|c| self.risk_of(&c.path))
            .filter(|r| r.score >= risk::MEDIUM_SCORE_MIN)
            .collect();
        risky.sort_by(|a, b| b.score.cmp(&a.score).then(a.path.cmp(&b.path)));
        let mut untouched: BTreeMap<String, UntouchedNeighbor> = BTreeMap::new();
        let mut checks: Vec<String> = Vec::new();
        for file in &changed {
            for edge in self.current_cochanges(&file.path) {
                if touched.contains(edge.path.as_str()) {
                    continue;
                }
                let keep = untouched
                    .get(&edge.path)
                    .is_none_or(|u| u.count < edge.count);
                if keep {
                    untouched.insert(
                        edge.path.clone(),
                        UntouchedNeighbor {
                            path: edge.path.clone(),
                            with: file.path.clone(),
                            count: edge.count,
                        },
                    );
                }
            }
            if file.status != "deleted" {
                let used_by = self.used_by(&file.path);
                let tests = self.tests_for(&file.path, &used_by);
                for check in self.checks(&file.path, &tests) {
                    if !checks.contains(&check) {
                        checks.push(check);
                    }
                }
            }
        }
        let mut untouched_neighbors: Vec<UntouchedNeighbor> = untouched.into_values().collect();
        untouched_neighbors.sort_by(|a, b| b.count.cmp(&a.count).then(a.path.cmp(&b.path)));
        Ok(HandoffReport {
            base: base_name,
            base_commit: base_commit.id().to_string(),
            head: head.id().to_string(),
            commits,
            changed,
            risky,
            untouched_neighbors,
            checks,
        })
    }
}

/// The default handoff base: where HEAD left `main` (or `master`), else HEAD itself
/// (only the uncommitted changes).
fn default_base<'r>(
    repo: &'r git2::Repository,
    head: &git2::Commit<'r>,
) -> (String, git2::Commit<'r>) {
    for name in ["main", "master", "origin/main", "origin/master"] {
        let Ok(object) = repo.revparse_single(name) else {
            continue;
        };
        let Ok(trunk) = object.peel_to_commit() else {
            continue;
        };
        if trunk.id() == head.id() {
            break;
        }
        if let Ok(base) = repo.merge_base(head.id(), trunk.id())
            && base != head.id()
            && let Ok(commit) = repo.find_commit(base)
        {
            return (name.to_owned(), commit);
        }
    }
    ("HEAD".to_owned(), head.clone())
}

fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if in_package
            && let Some(value) = line.strip_prefix("name")
            && let Some(value) = value.trim_start().strip_prefix('=')
        {
            return Some(value.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// Resolves a FILE argument to a repository-relative path: absolute paths must lie
/// inside `root`; relative ones are taken from `cwd` when `cwd` is inside the
/// repository, else from the repository's root.
pub fn relative_path(root: &Path, cwd: &Path, argument: &Path) -> Result<String, IntelError> {
    let cwd_inside = cwd.starts_with(root);
    let joined = if argument.is_absolute() {
        argument.to_owned()
    } else if cwd_inside {
        cwd.join(argument)
    } else {
        root.join(argument)
    };
    // Canonicalise what exists (symlinked temp dirs); normalise the rest by hand.
    let normalized = match joined.canonicalize() {
        Ok(path) => path,
        Err(_) => {
            let mut out = PathBuf::new();
            for part in joined.components() {
                match part {
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    std::path::Component::CurDir => {}
                    other => out.push(other),
                }
            }
            match (
                out.parent().and_then(|p| p.canonicalize().ok()),
                out.file_name(),
            ) {
                (Some(parent), Some(name)) => parent.join(name),
                _ => out,
            }
        }
    };
    let outside = || IntelError::OutsideRepository {
        path: argument.to_owned(),
        root: root.to_owned(),
    };
    let relative = normalized.strip_prefix(root).map_err(|_| outside())?;
    let text = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    if text.is_empty() || files::is_own(&text) || text == ".git" || text.starts_with(".git/") {
        return Err(outside());
    }
    Ok(text)
}
