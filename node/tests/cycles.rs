//! No import cycle of more than [`CYCLE_MAX`] modules in any crate of the workspace (a
//! module is a file; `crate::a::b` and `super::x` paths outside comments are its
//! imports). A few modules that talk both ways (two actors messaging each other, an
//! organ and its helper) are fine; a web of them is how a crate stops being layered —
//! the node shell once had 13 of its 25 modules in one cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The largest import cycle any crate may have.
const CYCLE_MAX: usize = 3;

const CRATES: &[&str] = &[
    "actors",
    "topology",
    "transport",
    "sim",
    "intel",
    "api",
    "shell",
    "mcp",
    "node",
    "agents",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a::b` for `src/a/b.rs` or `src/a/b/mod.rs`; "" for the crate root.
fn module_name(src: &Path, file: &Path) -> String {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    if parts.first().map(String::as_str) == Some("bin") {
        return format!("bin::{}", parts[1..].join("::"));
    }
    parts.join("::")
}

fn idents(text: &str, at: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = &text[at..];
    while let Some(after) = rest.strip_prefix("::") {
        let len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if len == 0 {
            break;
        }
        out.push(after[..len].to_owned());
        rest = &after[len..];
    }
    out
}

fn resolve(modules: &BTreeSet<String>, parts: &[String]) -> Option<String> {
    (1..=parts.len())
        .rev()
        .map(|k| parts[..k].join("::"))
        .find(|candidate| modules.contains(candidate))
}

fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let names: BTreeMap<String, PathBuf> = files
        .iter()
        .map(|f| (module_name(src, f), f.clone()))
        .collect();
    let modules: BTreeSet<String> = names.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    for (name, file) in &names {
        // Comments are not imports (a doc link to `crate::x` is not a dependency).
        let text: String = std::fs::read_to_string(file)
            .expect("read")
            .lines()
            .map(|line| line.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        let mut out = BTreeSet::new();
        for (at, _) in text.match_indices("crate::") {
            let parts = idents(&text, at + "crate".len());
            if let Some(target) = resolve(&modules, &parts) {
                out.insert(target);
            }
        }
        for (at, _) in text.match_indices("super::") {
            // `super` of `a::b` (a/b.rs or a/b/mod.rs) is `a`.
            let mut base: Vec<String> = name.split("::").map(str::to_owned).collect();
            base.pop();
            base.extend(idents(&text, at + "super".len()));
            if let Some(target) = resolve(&modules, &base) {
                out.insert(target);
            }
        }
        out.remove(name);
        out.remove("");
        edges.insert(name.clone(), out);
    }
    edges
}

/// Strongly connected components (Tarjan), largest first.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, node: &'a str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on.remove(top);
                    component.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                self.out.push(component);
            }
        }
    }
    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for node in graph.keys() {
        if !tarjan.index.contains_key(node.as_str()) {
            tarjan.visit(node);
        }
    }
    let mut out = tarjan.out;
    out.sort_by_key(|c| std::cmp::Reverse(c.len()));
    out
}

#[test]
fn no_crate_has_an_import_cycle_over_three_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace");
    let mut problems = Vec::new();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        let graph = graph(&src);
        assert!(
            graph.len() > 1,
            "{krate}: no modules found under {}",
            src.display()
        );
        let largest = cycles(&graph).into_iter().next().unwrap_or_default();
        if largest.len() > CYCLE_MAX {
            problems.push(format!(
                "{krate}: a cycle of {} modules (at most {CYCLE_MAX}): {largest:?}",
                largest.len()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let edge = |a: &str, b: &[&str]| (a.to_owned(), b.iter().map(|s| (*s).to_owned()).collect());
    let graph: BTreeMap<String, BTreeSet<String>> = [
        edge("a", &["b"]),
        edge("b", &["c"]),
        edge("c", &["d", "a"]),
        edge("d", &["a"]),
        edge("e", &["a"]),
    ]
    .into_iter()
    .collect();
    let found = cycles(&graph);
    assert_eq!(found[0].len(), 4, "{found:?}");
    assert!(found.iter().skip(1).all(|c| c.len() == 1));
}
