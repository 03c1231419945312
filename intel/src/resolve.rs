//! Import resolution: from an import as written to a file of the repository, where the
//! language's rules allow it without running its build tool.
//!
//! - Rust: `mod x;`, `crate::`, `self::`, `super::` and workspace crates by their
//!   `Cargo.toml` name (longest module prefix that is a file wins).
//! - Python: relative imports, and absolute ones against every ancestor directory of the
//!   importing file (how scripts and `src/` layouts find their packages).
//! - Go: packages under a `go.mod` module path (the first non-test file of the package).
//! - JavaScript/TypeScript: relative specifiers with the usual extensions and `index.*`.
//! - Java: the file whose path ends with the package path.
//! - C/C++: `#include "x"` next to the file, else a unique-suffix match.
//!
//! Standard libraries and external packages stay unresolved (`None`).

use crate::lang::Language;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// Lookups over the repository's file set.
pub struct Resolver {
    paths: BTreeSet<String>,
    by_name: HashMap<String, Vec<String>>,
    by_dir: HashMap<String, Vec<String>>,
    rust_crates: BTreeMap<String, String>,
    rust_roots: Vec<String>,
    go_modules: Vec<(String, String)>,
}

const JS_EXTENSIONS: [&str; 8] = [
    ".ts", ".tsx", ".d.ts", ".js", ".jsx", ".mjs", ".cjs", ".json",
];

fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn join(dir: &str, rest: &str) -> String {
    if dir.is_empty() {
        rest.to_owned()
    } else {
        format!("{dir}/{rest}")
    }
}

/// Joins and normalises `.` and `..`; `None` when it climbs above the root.
fn normalize(dir: &str, relative: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(parts.join("/"))
}

impl Resolver {
    /// Builds the lookups; reads `Cargo.toml` and `go.mod` files under `root`.
    pub fn new<'a>(root: &Path, paths: impl IntoIterator<Item = &'a str>) -> Resolver {
        let paths: BTreeSet<String> = paths.into_iter().map(str::to_owned).collect();
        let mut by_name: HashMap<String, Vec<String>> = HashMap::new();
        let mut by_dir: HashMap<String, Vec<String>> = HashMap::new();
        let mut rust_crates = BTreeMap::new();
        let mut rust_roots = Vec::new();
        let mut go_modules = Vec::new();
        for path in &paths {
            let name = path.rsplit('/').next().unwrap_or(path);
            by_name
                .entry(name.to_owned())
                .or_default()
                .push(path.clone());
            by_dir
                .entry(dir_of(path).to_owned())
                .or_default()
                .push(path.clone());
            if name == "Cargo.toml" {
                let dir = dir_of(path);
                let src = join(dir, "src");
                if paths.contains(&join(&src, "lib.rs")) || paths.contains(&join(&src, "main.rs")) {
                    rust_roots.push(src.clone());
                    if let Some(crate_name) = read(root, path).as_deref().and_then(package_name) {
                        rust_crates.insert(crate_name.replace('-', "_"), src);
                    }
                }
            } else if name == "go.mod"
                && let Some(module) = read(root, path).as_deref().and_then(go_module)
            {
                go_modules.push((module, dir_of(path).to_owned()));
            }
        }
        // Longest roots first, so a file finds its innermost crate.
        rust_roots.sort_by_key(|r| std::cmp::Reverse(r.len()));
        Resolver {
            paths,
            by_name,
            by_dir,
            rust_crates,
            rust_roots,
            go_modules,
        }
    }

    fn exists(&self, path: &str) -> bool {
        self.paths.contains(path)
    }

    /// The file an import of `from` refers to, if it is in the repository.
    pub fn resolve(&self, from: &str, language: Language, module: &str) -> Option<String> {
        let found = match language {
            Language::Rust => self.rust(from, module),
            Language::Python => self.python(from, module),
            Language::Go => self.go(module),
            Language::JavaScript | Language::TypeScript | Language::Tsx => {
                self.javascript(from, module)
            }
            Language::Java => self.java(module),
            Language::C | Language::Cpp => self.c(from, module),
            Language::Text => None,
        };
        found.filter(|f| f != from)
    }

    /// The directory holding the submodules of the module a Rust file defines.
    fn rust_module_dir(from: &str) -> String {
        let dir = dir_of(from);
        let name = from.rsplit('/').next().unwrap_or(from);
        match name {
            "lib.rs" | "main.rs" | "mod.rs" => dir.to_owned(),
            _ => join(dir, name.trim_end_matches(".rs")),
        }
    }

    fn rust_module_file(&self, dir: &str, segments: &[&str]) -> Option<String> {
        for n in (1..=segments.len()).rev() {
            let base = join(dir, &segments[..n].join("/"));
            for candidate in [format!("{base}.rs"), format!("{base}/mod.rs")] {
                if self.exists(&candidate) {
                    return Some(candidate);
                }
            }
        }
        None
    }

    /// The file that defines the module whose submodules live in `dir`.
    fn rust_dir_module(&self, dir: &str) -> Option<String> {
        [
            join(dir, "mod.rs"),
            format!("{dir}.rs"),
            join(dir, "lib.rs"),
            join(dir, "main.rs"),
        ]
        .into_iter()
        .find(|c| self.exists(c))
    }

    fn rust(&self, from: &str, module: &str) -> Option<String> {
        if let Some(name) = module.strip_prefix("mod ") {
            return self.rust_module_file(&Self::rust_module_dir(from), &[name]);
        }
        let segments: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        let (&first, rest) = segments.split_first()?;
        match first {
            "crate" => {
                let root = self
                    .rust_roots
                    .iter()
                    .find(|r| from.starts_with(&format!("{r}/")))?;
                self.rust_module_file(root, rest).or_else(|| {
                    ["lib.rs", "main.rs"]
                        .iter()
                        .map(|f| join(root, f))
                        .find(|f| self.exists(f))
                })
            }
            "self" => self.rust_module_file(&Self::rust_module_dir(from), rest),
            "super" => {
                let current = Self::rust_module_dir(from);
                let mut dir = dir_of(&current).to_owned();
                let mut rest = rest;
                while let Some((&"super", tail)) = rest.split_first() {
                    dir = dir_of(&dir).to_owned();
                    rest = tail;
                }
                self.rust_module_file(&dir, rest)
                    .or_else(|| self.rust_dir_module(&dir))
            }
            name => {
                let root = self.rust_crates.get(name)?;
                self.rust_module_file(root, rest).or_else(|| {
                    ["lib.rs", "main.rs"]
                        .iter()
                        .map(|f| join(root, f))
                        .find(|f| self.exists(f))
                })
            }
        }
    }

    fn python_module(&self, base: &str, dotted: &str) -> Option<String> {
        let relative = dotted.replace('.', "/");
        if relative.is_empty() {
            let init = join(base, "__init__.py");
            return self.exists(&init).then_some(init);
        }
        let file = join(base, &relative);
        [
            format!("{file}.py"),
            format!("{file}/__init__.py"),
            format!("{file}.pyi"),
        ]
        .into_iter()
        .find(|c| self.exists(c))
    }

    fn python(&self, from: &str, module: &str) -> Option<String> {
        let dots = module.len() - module.trim_start_matches('.').len();
        let rest = &module[dots..];
        if dots > 0 {
            let mut base = dir_of(from).to_owned();
            for _ in 1..dots {
                base = dir_of(&base).to_owned();
            }
            return self.python_module(&base, rest);
        }
        let mut dir = dir_of(from).to_owned();
        loop {
            if let Some(found) = self.python_module(&dir, rest) {
                return Some(found);
            }
            if let Some(found) = self.python_module(&join(&dir, "src"), rest) {
                return Some(found);
            }
            if dir.is_empty() {
                return None;
            }
            dir = dir_of(&dir).to_owned();
        }
    }

    fn go(&self, module: &str) -> Option<String> {
        let (prefix, dir) = self
            .go_modules
            .iter()
            .filter(|(m, _)| module == m || module.starts_with(&format!("{m}/")))
            .max_by_key(|(m, _)| m.len())?;
        let package = join(dir, module[prefix.len()..].trim_start_matches('/'));
        let package = package.trim_end_matches('/');
        self.by_dir
            .get(package)?
            .iter()
            .find(|p| p.ends_with(".go") && !p.ends_with("_test.go"))
            .cloned()
    }

    fn javascript(&self, from: &str, module: &str) -> Option<String> {
        if !(module.starts_with("./")
            || module.starts_with("../")
            || module == "."
            || module == "..")
        {
            return None;
        }
        let base = normalize(dir_of(from), module)?;
        if self.exists(&base) {
            return Some(base);
        }
        // TypeScript sources import their compiled names (`./a.js` for `a.ts`).
        let stem = ["js", "jsx", "mjs", "cjs"]
            .iter()
            .find_map(|e| base.strip_suffix(&format!(".{e}")))
            .unwrap_or(&base);
        JS_EXTENSIONS
            .iter()
            .map(|e| format!("{stem}{e}"))
            .chain(JS_EXTENSIONS.iter().map(|e| format!("{base}/index{e}")))
            .find(|c| self.exists(c))
    }

    fn java(&self, module: &str) -> Option<String> {
        let segments: Vec<&str> = module.split('.').collect();
        if segments.last() == Some(&"*") {
            let dir_suffix = segments[..segments.len() - 1].join("/");
            let mut dirs: Vec<&String> = self
                .by_dir
                .keys()
                .filter(|d| *d == &dir_suffix || d.ends_with(&format!("/{dir_suffix}")))
                .collect();
            dirs.sort();
            return dirs
                .first()
                .and_then(|d| self.by_dir.get(*d))
                .and_then(|files| files.iter().find(|f| f.ends_with(".java")).cloned());
        }
        for n in (1..=segments.len()).rev() {
            let suffix = format!("{}.java", segments[..n].join("/"));
            if let Some(found) = self.suffix_match(&suffix) {
                return Some(found);
            }
        }
        None
    }

    fn suffix_match(&self, suffix: &str) -> Option<String> {
        let name = suffix.rsplit('/').next().unwrap_or(suffix);
        let mut found: Vec<&String> = self
            .by_name
            .get(name)?
            .iter()
            .filter(|p| *p == suffix || p.ends_with(&format!("/{suffix}")))
            .collect();
        found.sort_by_key(|p| (p.len(), p.as_str()));
        found.first().map(|p| (*p).clone())
    }

    fn c(&self, from: &str, module: &str) -> Option<String> {
        if module.starts_with('<') {
            return None;
        }
        if let Some(local) = normalize(dir_of(from), module)
            && self.exists(&local)
        {
            return Some(local);
        }
        self.suffix_match(module.trim_start_matches("./"))
    }
}

fn read(root: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(root.join(path)).ok()
}

/// `name = "..."` in the `[package]` table of a Cargo.toml.
pub(crate) fn package_name(manifest: &str) -> Option<String> {
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

fn go_module(go_mod: &str) -> Option<String> {
    go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("module "))
        .map(|m| m.trim().trim_matches('"').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(paths: &[&str]) -> Resolver {
        Resolver::new(Path::new("/nonexistent"), paths.iter().copied())
    }

    #[test]
    fn rust_modules() {
        let r = resolver(&[
            "a/src/lib.rs",
            "a/src/store/mod.rs",
            "a/src/store/redb.rs",
            "a/src/job.rs",
            "a/Cargo.toml",
        ]);
        assert_eq!(
            r.resolve("a/src/lib.rs", Language::Rust, "mod job")
                .as_deref(),
            Some("a/src/job.rs")
        );
        assert_eq!(
            r.resolve("a/src/lib.rs", Language::Rust, "mod store")
                .as_deref(),
            Some("a/src/store/mod.rs")
        );
        assert_eq!(
            r.resolve(
                "a/src/job.rs",
                Language::Rust,
                "crate::store::redb::RedbStore"
            )
            .as_deref(),
            Some("a/src/store/redb.rs")
        );
        assert_eq!(
            r.resolve("a/src/store/redb.rs", Language::Rust, "super::Store")
                .as_deref(),
            Some("a/src/store/mod.rs")
        );
        assert_eq!(
            r.resolve("a/src/store/mod.rs", Language::Rust, "self::redb::X")
                .as_deref(),
            Some("a/src/store/redb.rs")
        );
        assert_eq!(
            r.resolve("a/src/job.rs", Language::Rust, "std::io::Read"),
            None
        );
    }

    #[test]
    fn python_js_java_c() {
        let r = resolver(&[
            "pkg/__init__.py",
            "pkg/util.py",
            "app.py",
            "web/a.ts",
            "web/lib/index.ts",
            "src/com/acme/Util.java",
            "c/util.h",
            "c/main.c",
        ]);
        assert_eq!(
            r.resolve("app.py", Language::Python, "pkg.util").as_deref(),
            Some("pkg/util.py")
        );
        assert_eq!(
            r.resolve("pkg/__init__.py", Language::Python, ".util")
                .as_deref(),
            Some("pkg/util.py")
        );
        assert_eq!(r.resolve("app.py", Language::Python, "os.path"), None);
        assert_eq!(
            r.resolve("web/a.ts", Language::TypeScript, "./lib")
                .as_deref(),
            Some("web/lib/index.ts")
        );
        assert_eq!(
            r.resolve("web/lib/index.ts", Language::TypeScript, "../a.js")
                .as_deref(),
            Some("web/a.ts")
        );
        assert_eq!(
            r.resolve("x/Main.java", Language::Java, "com.acme.Util")
                .as_deref(),
            Some("src/com/acme/Util.java")
        );
        assert_eq!(
            r.resolve("c/main.c", Language::C, "util.h").as_deref(),
            Some("c/util.h")
        );
        assert_eq!(r.resolve("c/main.c", Language::C, "<stdio.h>"), None);
    }
}
