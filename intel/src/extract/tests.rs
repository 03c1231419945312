//! Extraction checked per language on small sources: one `check` helper, many cases.

use super::*;

fn symbols(language: Language, text: &str) -> Vec<String> {
    let (_, facts) = Extractor::new().extract(language, "x", text);
    facts
        .symbols
        .iter()
        .map(|s| match &s.parent {
            Some(parent) => format!(
                "{} {}::{} {}-{}",
                s.kind.name(),
                parent,
                s.name,
                s.line,
                s.end_line
            ),
            None => format!("{} {} {}-{}", s.kind.name(), s.name, s.line, s.end_line),
        })
        .collect()
}

fn imports(language: Language, text: &str) -> Vec<String> {
    let (_, facts) = Extractor::new().extract(language, "x", text);
    facts
        .imports
        .iter()
        .map(|i| format!("{}@{}", i.module, i.line))
        .collect()
}

#[test]
fn rust_items_methods_docs_and_imports() {
    let src = "use crate::store::{Store, redb::RedbStore as R};\nmod job;\n\n/// Opens things.\n/// Twice.\n#[derive(Debug)]\npub struct Opener { x: u32 }\n\nimpl Opener {\n    /// New one.\n    pub fn new() -> Self { Opener { x: 1 } }\n}\n\npub trait Open {\n    fn open(&self);\n    fn close(&self) {}\n}\n\nfn free(a: u32,\n        b: u32) -> u32 {\n    fn inner() {}\n    a + b\n}\nenum E { A }\nmacro_rules! m { () => {} }\n";
    assert_eq!(
        symbols(Language::Rust, src),
        [
            "module job 2-2",
            "struct Opener 7-7",
            "method Opener::new 11-11",
            "trait Open 14-17",
            "method Open::open 15-15",
            "method Open::close 16-16",
            "function free 19-23",
            "function inner 21-21",
            "enum E 24-24",
            "macro m 25-25",
        ]
    );
    assert_eq!(
        imports(Language::Rust, src),
        [
            "crate::store::Store@1",
            "crate::store::redb::RedbStore@1",
            "mod job@2"
        ]
    );
    let (_, facts) = Extractor::new().extract(Language::Rust, "x.rs", src);
    let opener = &facts.symbols[1];
    assert_eq!(opener.doc.as_deref(), Some("Opens things.\nTwice."));
    assert_eq!(opener.signature, "pub struct Opener");
    assert_eq!(facts.symbols[6].signature, "fn free(a: u32, b: u32) -> u32");
    assert_eq!(facts.references.get("Opener"), Some(&vec![9, 11]));
    assert!(!facts.references.contains_key("free"));
}

#[test]
fn python_classes_methods_docstrings() {
    let src = "import os.path\nfrom .util import helper\nfrom . import sibling\n\nclass Shape:\n    \"\"\"A shape.\"\"\"\n    @property\n    def area(self):\n        return helper()\n\ndef main():\n    pass\n";
    assert_eq!(
        symbols(Language::Python, src),
        [
            "class Shape 5-9",
            "method Shape::area 8-9",
            "function main 11-12"
        ]
    );
    assert_eq!(
        imports(Language::Python, src),
        ["os.path@1", ".util@2", ".sibling@3"]
    );
    let (_, facts) = Extractor::new().extract(Language::Python, "x.py", src);
    assert_eq!(facts.symbols[0].doc.as_deref(), Some("A shape."));
}

#[test]
fn go_types_and_methods() {
    let src = "package main\n\nimport (\n\t\"fmt\"\n\t\"example.com/m/util\"\n)\n\n// Server serves.\ntype Server struct{ n int }\n\ntype Runner interface {\n\tRun() error\n}\n\nfunc (s *Server) Run() error { return nil }\n\nfunc main() { fmt.Println(util.X) }\n";
    assert_eq!(
        symbols(Language::Go, src),
        [
            "struct Server 9-9",
            "interface Runner 11-13",
            "method Runner::Run 12-12",
            "method Server::Run 15-15",
            "function main 17-17",
        ]
    );
    assert_eq!(
        imports(Language::Go, src),
        ["fmt@4", "example.com/m/util@5"]
    );
    let (_, facts) = Extractor::new().extract(Language::Go, "x.go", src);
    assert_eq!(facts.symbols[0].doc.as_deref(), Some("Server serves."));
}

#[test]
fn javascript_and_typescript() {
    let js = "import { a } from './a.js';\nconst b = require('../b');\n/** Adds. */\nexport function add(x, y) { return x + y; }\nclass Box {\n  open() {}\n}\nconst twice = (x) => x * 2;\n";
    assert_eq!(
        symbols(Language::JavaScript, js),
        [
            "function add 4-4",
            "class Box 5-7",
            "method Box::open 6-6",
            "function twice 8-8"
        ]
    );
    assert_eq!(imports(Language::JavaScript, js), ["./a.js@1", "../b@2"]);
    let (_, facts) = Extractor::new().extract(Language::JavaScript, "x.js", js);
    assert_eq!(facts.symbols[0].doc.as_deref(), Some("Adds."));
    let ts = "export interface Shape {\n  area(): number;\n}\nexport type Id = string;\nexport enum Color { Red }\nexport abstract class Base {\n  abstract run(): void;\n}\n";
    assert_eq!(
        symbols(Language::TypeScript, ts),
        [
            "interface Shape 1-3",
            "method Shape::area 2-2",
            "type Id 4-4",
            "enum Color 5-5",
            "class Base 6-8",
            "method Base::run 7-7",
        ]
    );
    let tsx = "export function App() { return <div>hi</div>; }\n";
    assert_eq!(symbols(Language::Tsx, tsx), ["function App 1-1"]);
}

#[test]
fn java_c_and_cpp() {
    let java = "import java.util.List;\n/** Greets. */\npublic class Greeter {\n  public Greeter() {}\n  public String greet(String n) { return n; }\n}\ninterface Named { String name(); }\nenum Mode { A }\n";
    assert_eq!(
        symbols(Language::Java, java),
        [
            "class Greeter 3-6",
            "method Greeter::Greeter 4-4",
            "method Greeter::greet 5-5",
            "interface Named 7-7",
            "method Named::name 7-7",
            "enum Mode 8-8",
        ]
    );
    assert_eq!(imports(Language::Java, java), ["java.util.List@1"]);
    let c = "#include <stdio.h>\n#include \"util.h\"\n#define MAX 3\n#define UTIL_H\nint add(int a);\nstruct point { int x; };\ntypedef struct point point_t;\n/* Adds. */\nstatic int *add(int a) { return 0; }\nenum color { RED };\n";
    assert_eq!(
        symbols(Language::C, c),
        [
            "macro MAX 3-3",
            "function add 5-5",
            "struct point 6-6",
            "type point_t 7-7",
            "function add 9-9",
            "enum color 10-10",
        ]
    );
    assert_eq!(imports(Language::C, c), ["<stdio.h>@1", "util.h@2"]);
    let cpp = "namespace geo {\nclass Shape {\n public:\n  virtual double area() const;\n  int id() { return 1; }\n};\ndouble Shape::area() const { return 0; }\n}\ntemplate <typename T> T twice(T x) { return x; }\n";
    assert_eq!(
        symbols(Language::Cpp, cpp),
        [
            "module geo 1-8",
            "class Shape 2-6",
            "method Shape::area 4-4",
            "method Shape::id 5-5",
            "method Shape::area 7-7",
            "function twice 9-9",
        ]
    );
}

#[test]
fn line_based_fallback() {
    let md = "# Title\n\nSome text about open_store.\n\n## Usage\n";
    let (parser, facts) = Extractor::new().extract(Language::Text, "README.md", md);
    assert_eq!(parser, Parser::LineBased);
    let names: Vec<_> = facts
        .symbols
        .iter()
        .map(|s| (s.kind, s.name.as_str(), s.line))
        .collect();
    assert_eq!(
        names,
        [
            (SymbolKind::Section, "Title", 1),
            (SymbolKind::Section, "Usage", 5)
        ]
    );
    assert_eq!(facts.references.get("open_store"), Some(&vec![3]));
    let sh = "#!/bin/sh\n# comment\nbuild() {\n  make\n}\n";
    let (_, facts) = Extractor::new().extract(Language::Text, "build.sh", sh);
    assert_eq!(facts.symbols.len(), 1);
    assert_eq!(facts.symbols[0].name, "build");
}

#[test]
fn rust_super_inside_an_inline_module_is_this_file() {
    let src = "mod tests {\n    use super::*;\n    use super::super::x::Y;\n    mod deeper {\n        use super::super::Z;\n    }\n}\n";
    assert_eq!(
        imports(Language::Rust, src),
        ["self@2", "super::x::Y@3", "self::Z@5"]
    );
}

#[test]
fn rust_use_trees_expand() {
    use super::syntax::expand_rust_use;
    assert_eq!(
        expand_rust_use("a::{b,c::{d,e as f},self}"),
        ["a::b", "a::c::d", "a::c::e", "a"]
    );
    assert_eq!(expand_rust_use("std::io::*"), ["std::io"]);
}
