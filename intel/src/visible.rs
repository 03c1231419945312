//! Which files could see another file's names: the rule that keeps "who uses a file"
//! from counting a word that merely looks like one of its symbols.
//!
//! A file B uses a file A by a name only if B could reach A's declaration of it:
//!
//! - Rust: B is in A's crate (the directory of the nearest `Cargo.toml`, with `tests/`,
//!   `benches/` and `examples/` as crates of their own), or B `use`s a file of A's crate,
//!   or B's package depends on A's library in its `Cargo.toml` (or B is one of the
//!   library's own tests, benches, examples) and B names the crate in a path
//!   (`alpha::gadget::Gizmo` without a `use`). A name that B binds with a `use`
//!   of something outside A's crate (`use std::process::Command`) is B's own, not A's.
//! - Go and Java: B is in A's directory (package), or imports a file of it.
//! - Python, JavaScript, TypeScript: B imports a file of A's directory (the module or
//!   its package); sharing a directory alone makes no name visible in these languages.
//! - C and C++: B includes a file of A's directory or a header with A's stem (`foo.h`
//!   for `foo.c`, wherever it lives), since that is how declarations travel there.
//!
//! This module owns the rule only; which names are distinctive enough to link files, and
//! the report, stay in `query.rs`.

use crate::lang::Language;
use crate::resolve;
use crate::store::FileRecord;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn stem_of(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.split('.').next().unwrap_or(name)
}

/// A Rust compilation unit: the package directory, and which of its own-crate
/// subdirectories (`tests`, `benches`, `examples`) the file sits in, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RustUnit {
    package: String,
    part: Option<&'static str>,
}

/// A package's `Cargo.toml`, as far as visibility needs it.
#[derive(Clone, Debug, Default)]
struct Manifest {
    /// The name code uses for the package's library (`palm-intel` → `palm_intel`);
    /// `None` without a `src/lib.rs`, since a binary's names are out of other crates'
    /// reach whatever they write.
    crate_name: Option<String>,
    /// Dependencies: (the name code uses, the package it is), both with `_` for `-`.
    dependencies: Vec<(String, String)>,
}

/// The visibility rule for one target file, with caches for the files asked about.
pub(crate) struct Visibility<'s> {
    root: &'s Path,
    language: Language,
    dir: String,
    stem: String,
    rust_unit: Option<RustUnit>,
    units: HashMap<String, RustUnit>,
    manifests: HashMap<String, Manifest>,
}

impl<'s> Visibility<'s> {
    /// The rule for the names declared by `target` (a path of the repository at `root`).
    pub(crate) fn new(root: &'s Path, target: &str, language: Language) -> Visibility<'s> {
        let mut visibility = Visibility {
            root,
            language,
            dir: dir_of(target).to_owned(),
            stem: stem_of(target).to_owned(),
            rust_unit: None,
            units: HashMap::new(),
            manifests: HashMap::new(),
        };
        if language == Language::Rust {
            visibility.rust_unit = Some(visibility.rust_unit_of(target));
        }
        visibility
    }

    /// True when `record` could see the target's declarations.
    pub(crate) fn sees(&mut self, record: &FileRecord) -> bool {
        let imported_dirs = || record.resolved.iter().flatten().map(|f| dir_of(f));
        match self.language {
            Language::Rust => self.rust_sees(record),
            Language::Go | Language::Java => {
                dir_of(&record.path) == self.dir || imported_dirs().any(|d| d == self.dir)
            }
            Language::Python | Language::JavaScript | Language::TypeScript | Language::Tsx => {
                imported_dirs().any(|d| d == self.dir)
            }
            Language::C | Language::Cpp => record
                .resolved
                .iter()
                .flatten()
                .any(|f| dir_of(f) == self.dir || stem_of(f) == self.stem),
            Language::Text => false,
        }
    }

    /// Names `record` binds with a `use` of something outside the target's crate: in
    /// that file the word means the other thing (Rust only; elsewhere, empty).
    pub(crate) fn shadowed(&mut self, record: &FileRecord) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        if self.language != Language::Rust || record.language != Language::Rust {
            return names;
        }
        for (import, resolved) in record.facts.imports.iter().zip(&record.resolved) {
            // `mod x;` declares a module of this crate; it binds no foreign name.
            if import.module.starts_with("mod ") {
                continue;
            }
            let outside = match resolved {
                None => true,
                Some(file) => Some(self.rust_unit_of(file)) != self.rust_unit,
            };
            if outside && let Some(last) = import.module.rsplit("::").next() {
                names.insert(last.to_owned());
            }
        }
        names
    }

    fn rust_sees(&mut self, record: &FileRecord) -> bool {
        let Some(target) = self.rust_unit.clone() else {
            return false;
        };
        let unit = self.rust_unit_of(&record.path);
        if unit == target {
            return true;
        }
        for file in record.resolved.iter().flatten() {
            if self.rust_unit_of(file) == target {
                return true;
            }
        }
        // A path through the crate's name (`alpha::gadget::Gizmo`) needs no `use`, but
        // only a package that depends on the target's (or the target's own tests,
        // benches and examples) can write one, and only into a library.
        if target.part.is_some() {
            return false;
        }
        let Some(target_crate) = self.manifest(&target.package).crate_name else {
            return false;
        };
        if unit.package == target.package {
            return record.facts.references.contains_key(&target_crate);
        }
        self.manifest(&unit.package)
            .dependencies
            .iter()
            .any(|(code_name, package)| {
                *package == target_crate && record.facts.references.contains_key(code_name)
            })
    }

    /// The unit of a Rust file: the directory of the nearest `Cargo.toml` above it (the
    /// root when there is none), with `tests/`, `benches/` and `examples/` apart.
    fn rust_unit_of(&mut self, path: &str) -> RustUnit {
        let dir = dir_of(path);
        if let Some(unit) = self.units.get(dir) {
            return unit.clone();
        }
        let mut package = dir;
        while !package.is_empty() && !self.root.join(package).join("Cargo.toml").is_file() {
            package = dir_of(package);
        }
        let inner = dir[package.len()..].trim_start_matches('/');
        let part = match inner.split('/').next() {
            Some("tests") => Some("tests"),
            Some("benches") => Some("benches"),
            Some("examples") => Some("examples"),
            _ => None,
        };
        let unit = RustUnit {
            package: package.to_owned(),
            part,
        };
        self.units.insert(dir.to_owned(), unit.clone());
        unit
    }

    fn manifest(&mut self, package: &str) -> Manifest {
        if let Some(manifest) = self.manifests.get(package) {
            return manifest.clone();
        }
        let dir = self.root.join(package);
        let has_library = dir.join("src").join("lib.rs").is_file();
        let manifest = match std::fs::read_to_string(dir.join("Cargo.toml")) {
            Ok(text) => Manifest {
                crate_name: resolve::package_name(&text)
                    .filter(|_| has_library)
                    .map(|n| n.replace('-', "_")),
                dependencies: rust_dependencies(&text),
            },
            // No manifest (or an unreadable one): nothing declared, nothing reachable by
            // a crate path; the same-crate and import rules still apply.
            Err(_) => Manifest::default(),
        };
        self.manifests.insert(package.to_owned(), manifest.clone());
        manifest
    }
}

/// The dependencies a `Cargo.toml` declares in any `*dependencies` table (normal, dev,
/// build, per target), as (the name code uses, the package), `-` read as `_`. Handles
/// `name = ...`, `name.workspace = true`, `[dependencies.name]` and `package = "..."`
/// renames written on the same line or in the dotted table.
pub(crate) fn rust_dependencies(manifest: &str) -> Vec<(String, String)> {
    let normalize = |name: &str| name.trim().trim_matches('"').replace('-', "_");
    let package_of = |text: &str| -> Option<String> {
        let at = text.find("package")?;
        let value = text[at + "package".len()..]
            .trim_start()
            .strip_prefix('=')?;
        let value = value.trim_start().strip_prefix('"')?;
        value.split('"').next().map(normalize)
    };
    let mut out: Vec<(String, String)> = Vec::new();
    // Inside `[dependencies]`-like tables, every key is a dependency; inside a
    // `[dependencies.name]` table, the keys describe that one dependency.
    let mut in_table = false;
    let mut dotted: Option<usize> = None;
    for line in manifest.lines() {
        let line = line.split(" #").next().unwrap_or(line).trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            in_table = false;
            dotted = None;
            // What a workspace offers its members to inherit is no dependency of anyone.
            if header.starts_with("workspace.") {
                continue;
            }
            if header.ends_with("dependencies") {
                in_table = true;
            } else if let Some((table, name)) = header.rsplit_once('.')
                && table.ends_with("dependencies")
            {
                let name = normalize(name);
                out.push((name.clone(), name));
                dotted = Some(out.len() - 1);
            }
            continue;
        }
        if let Some(index) = dotted {
            if line.starts_with("package")
                && let Some(package) = package_of(line)
            {
                out[index].1 = package;
            }
            continue;
        }
        if !in_table {
            continue;
        }
        let key = line
            .split(['=', '.'])
            .next()
            .map(normalize)
            .unwrap_or_default();
        if key.is_empty() {
            continue;
        }
        let package = package_of(line).unwrap_or_else(|| key.clone());
        out.push((key, package));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_of_a_manifest() {
        let manifest = "[package]\nname = \"gamma\"\n\n[dependencies]\nalpha = { path = \"../alpha\" }\nserde.workspace = true\nrenamed = { package = \"palm-core\", path = \"../core\" } # a comment\n\n[dev-dependencies]\ntempfile = \"3\"\n\n[target.'cfg(unix)'.dependencies]\nlibc = \"0.2\"\n\n[dependencies.old-style]\nversion = \"1\"\npackage = \"new-style\"\n\n[features]\ndefault = []\n";
        assert_eq!(
            rust_dependencies(manifest),
            [
                ("alpha", "alpha"),
                ("serde", "serde"),
                ("renamed", "palm_core"),
                ("tempfile", "tempfile"),
                ("libc", "libc"),
                ("old_style", "new_style"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
    }

    #[test]
    fn what_a_workspace_offers_is_no_dependency() {
        // `[workspace.dependencies]` lists what members may inherit, not what a root
        // package depends on.
        let manifest = "[workspace]\nmembers = [\"a\"]\n\n[workspace.dependencies]\nalpha = { path = \"alpha\" }\n\n[workspace.dependencies.beta]\npath = \"beta\"\n";
        assert!(rust_dependencies(manifest).is_empty());
    }
}
