//! Languages: detection from a file name, and the tree-sitter grammar of each.
//!
//! Detection is by extension only (no content sniffing): it is fast, predictable and what
//! every editor does. A text file in no known language is `Language::Text` and gets the
//! line-based fallback in `extract::fallback`.

use serde::{Deserialize, Serialize};

/// A language the index knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Rust (`.rs`).
    Rust,
    /// Python (`.py`, `.pyi`).
    Python,
    /// Go (`.go`).
    Go,
    /// JavaScript (`.js`, `.jsx`, `.mjs`, `.cjs`).
    JavaScript,
    /// TypeScript (`.ts`, `.mts`, `.cts`).
    TypeScript,
    /// TypeScript with JSX (`.tsx`).
    Tsx,
    /// Java (`.java`).
    Java,
    /// C (`.c`, `.h`).
    C,
    /// C++ (`.cc`, `.cpp`, `.cxx`, `.hpp`, `.hh`, `.hxx`, `.h++`).
    Cpp,
    /// Any other text file: line-based fallback, no grammar.
    Text,
}

/// Every language with a grammar (all but `Text`).
pub const PARSED_LANGUAGES: [Language; 9] = [
    Language::Rust,
    Language::Python,
    Language::Go,
    Language::JavaScript,
    Language::TypeScript,
    Language::Tsx,
    Language::Java,
    Language::C,
    Language::Cpp,
];

impl Language {
    /// The language of a path, from its extension; `Text` when none matches.
    pub fn detect(path: &str) -> Language {
        let name = path.rsplit('/').next().unwrap_or(path);
        let extension = match name.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() => ext.to_ascii_lowercase(),
            _ => return Language::Text,
        };
        match extension.as_str() {
            "rs" => Language::Rust,
            "py" | "pyi" => Language::Python,
            "go" => Language::Go,
            "js" | "jsx" | "mjs" | "cjs" => Language::JavaScript,
            "ts" | "mts" | "cts" => Language::TypeScript,
            "tsx" => Language::Tsx,
            "java" => Language::Java,
            "c" | "h" => Language::C,
            "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" | "h++" | "c++" | "ipp" | "tpp" => {
                Language::Cpp
            }
            _ => Language::Text,
        }
    }

    /// The lowercase name used in JSON and in the human output.
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::Go => "go",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Tsx => "tsx",
            Language::Java => "java",
            Language::C => "c",
            Language::Cpp => "cpp",
            Language::Text => "text",
        }
    }

    /// The tree-sitter grammar, or `None` for `Text`.
    pub fn grammar(self) -> Option<tree_sitter::Language> {
        Some(match self {
            Language::Rust => tree_sitter_rust::LANGUAGE.into(),
            Language::Python => tree_sitter_python::LANGUAGE.into(),
            Language::Go => tree_sitter_go::LANGUAGE.into(),
            Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Language::Java => tree_sitter_java::LANGUAGE.into(),
            Language::C => tree_sitter_c::LANGUAGE.into(),
            Language::Cpp => tree_sitter_cpp::LANGUAGE.into(),
            Language::Text => return None,
        })
    }

    /// True for the JavaScript family (shared extraction rules).
    pub fn is_javascript_family(self) -> bool {
        matches!(
            self,
            Language::JavaScript | Language::TypeScript | Language::Tsx
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_by_extension() {
        assert_eq!(Language::detect("src/lib.rs"), Language::Rust);
        assert_eq!(Language::detect("a/b/App.TSX"), Language::Tsx);
        assert_eq!(Language::detect("x.h"), Language::C);
        assert_eq!(Language::detect("x.hpp"), Language::Cpp);
        assert_eq!(Language::detect("Makefile"), Language::Text);
        assert_eq!(Language::detect(".bashrc"), Language::Text);
        assert_eq!(Language::detect("notes.md"), Language::Text);
    }

    #[test]
    fn every_grammar_loads_into_this_tree_sitter() {
        for language in PARSED_LANGUAGES {
            let grammar = language.grammar().expect("parsed languages have a grammar");
            let mut parser = tree_sitter::Parser::new();
            parser
                .set_language(&grammar)
                .unwrap_or_else(|e| panic!("{}: {e}", language.name()));
            assert!(parser.parse("x", None).is_some(), "{}", language.name());
        }
    }
}
