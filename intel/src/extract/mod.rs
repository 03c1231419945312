//! The content half of a file: its symbols, its imports and the identifiers it references.
//!
//! `extract` is a pure function of (language, text): the index caches its result by the
//! content hash, so the same bytes are never parsed twice. Import *resolution* to files
//! needs the whole file set and lives in `resolve.rs`; this module records imports as
//! written.

mod fallback;
pub mod prose;
mod syntax;

use crate::lang::Language;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A doc comment longer than this is cut (characters).
pub const DOC_CHARS_MAX: usize = 600;
/// A signature longer than this is cut (characters).
pub const SIGNATURE_CHARS_MAX: usize = 200;
/// At most this many reference occurrences are kept per file; the rest are counted.
pub const REFERENCES_PER_FILE_MAX: usize = 40_000;
/// At most this many symbols are kept per file.
pub const SYMBOLS_PER_FILE_MAX: usize = 20_000;
/// Identifiers shorter than this (bytes) are not recorded as references.
pub const REFERENCE_BYTES_MIN: usize = 2;

/// What a symbol is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SymbolKind {
    /// A free function.
    Function,
    /// A function inside an impl, class, trait or interface (or a C++ `A::f`).
    Method,
    /// A struct or union.
    Struct,
    /// A class (Python, JavaScript, TypeScript, Java, C++).
    Class,
    /// An interface (Go, TypeScript, Java).
    Interface,
    /// An enum.
    Enum,
    /// A Rust trait.
    Trait,
    /// A type alias or typedef.
    Type,
    /// A module or namespace.
    Module,
    /// A macro.
    Macro,
    /// A constant or static.
    Constant,
    /// A heading or section (line-based fallback).
    Section,
}

impl SymbolKind {
    /// The lowercase name used in JSON and in the human output.
    pub fn name(self) -> &'static str {
        match self {
            SymbolKind::Function => "function",
            SymbolKind::Method => "method",
            SymbolKind::Struct => "struct",
            SymbolKind::Class => "class",
            SymbolKind::Interface => "interface",
            SymbolKind::Enum => "enum",
            SymbolKind::Trait => "trait",
            SymbolKind::Type => "type",
            SymbolKind::Module => "module",
            SymbolKind::Macro => "macro",
            SymbolKind::Constant => "constant",
            SymbolKind::Section => "section",
        }
    }

    /// Functions, methods and the type-like kinds: what "definitions" means when the
    /// index is compared with ctags.
    pub fn is_definition(self) -> bool {
        matches!(
            self,
            SymbolKind::Function
                | SymbolKind::Method
                | SymbolKind::Struct
                | SymbolKind::Class
                | SymbolKind::Interface
                | SymbolKind::Enum
                | SymbolKind::Trait
        )
    }
}

/// One declared symbol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Symbol {
    /// What it is.
    pub kind: SymbolKind,
    /// Its name as written (last segment for qualified C++ names).
    pub name: String,
    /// The enclosing type, trait, class or namespace, when there is one.
    pub parent: Option<String>,
    /// The declaration up to its body, whitespace collapsed.
    pub signature: String,
    /// The doc comment (or Python docstring), markers stripped.
    pub doc: Option<String>,
    /// First line (1-based).
    pub line: u32,
    /// Last line (1-based, inclusive).
    pub end_line: u32,
}

/// One import as written in the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawImport {
    /// The imported module or path as written (`crate::store::Store`, `./util`, `os.path`).
    pub module: String,
    /// Line (1-based).
    pub line: u32,
}

/// Which extractor produced the facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Parser {
    /// A tree-sitter grammar.
    TreeSitter,
    /// The line-based fallback (no grammar for this language).
    LineBased,
}

impl Parser {
    /// The name used in JSON and the human output.
    pub fn name(self) -> &'static str {
        match self {
            Parser::TreeSitter => "tree-sitter",
            Parser::LineBased => "line-based",
        }
    }
}

/// Everything the content half knows about one file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFacts {
    /// Lines in the file.
    pub lines: u32,
    /// Declared symbols, in source order.
    pub symbols: Vec<Symbol>,
    /// Imports, in source order.
    pub imports: Vec<RawImport>,
    /// Referenced identifiers: name → lines (ascending, deduplicated), excluding the
    /// names of the file's own declarations at their declaration site.
    pub references: BTreeMap<String, Vec<u32>>,
    /// Reference occurrences dropped by `REFERENCES_PER_FILE_MAX`.
    pub references_dropped: u32,
    /// True when the grammar reported syntax errors (the facts are best effort).
    pub syntax_errors: bool,
    /// Prose for people (Markdown paragraphs, module docs), for search.
    pub prose: Vec<Passage>,
}

/// A passage of prose and the line it starts on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passage {
    /// Its first line (from 1).
    pub line: u32,
    /// Its text.
    pub text: String,
}

/// Reusable per-thread parsing state (one tree-sitter parser per language).
#[derive(Default)]
pub struct Extractor {
    parsers: BTreeMap<Language, tree_sitter::Parser>,
}

impl Extractor {
    /// A fresh extractor.
    pub fn new() -> Extractor {
        Extractor::default()
    }

    /// Extracts the facts of a file's text; returns which parser was used. The path
    /// only tells the fallback which flavour of text it reads (Markdown headings).
    pub fn extract(&mut self, language: Language, path: &str, text: &str) -> (Parser, FileFacts) {
        let (parser, mut facts) = self.facts(language, path, text);
        facts.prose = prose::passages(language, path, text);
        (parser, facts)
    }

    fn facts(&mut self, language: Language, path: &str, text: &str) -> (Parser, FileFacts) {
        let Some(grammar) = language.grammar() else {
            return (Parser::LineBased, fallback::extract(path, text));
        };
        let parser = self.parsers.entry(language).or_insert_with(|| {
            let mut parser = tree_sitter::Parser::new();
            // Grammars are checked to load by a unit test (`lang.rs`); a failure here is
            // a build problem, and the fallback below still answers.
            let _ = parser.set_language(&grammar);
            parser
        });
        match parser.parse(text, None) {
            Some(tree) => (Parser::TreeSitter, syntax::extract(language, text, &tree)),
            None => (Parser::LineBased, fallback::extract(path, text)),
        }
    }
}

/// Counts lines the way editors do (a final line without a newline counts).
pub fn count_lines(text: &str) -> u32 {
    let newlines = text.bytes().filter(|&b| b == b'\n').count();
    let last = usize::from(!text.is_empty() && !text.ends_with('\n'));
    u32::try_from(newlines + last).unwrap_or(u32::MAX)
}

/// Adds one reference occurrence, honouring the per-file bound.
fn add_reference(facts: &mut FileFacts, occurrences: &mut usize, name: &str, line: u32) {
    if name.len() < REFERENCE_BYTES_MIN {
        return;
    }
    if *occurrences >= REFERENCES_PER_FILE_MAX {
        facts.references_dropped = facts.references_dropped.saturating_add(1);
        return;
    }
    *occurrences += 1;
    // Most occurrences repeat a name already seen: look up before allocating a key.
    match facts.references.get_mut(name) {
        Some(lines) => {
            if lines.last() != Some(&line) {
                lines.push(line);
            }
        }
        None => {
            facts.references.insert(name.to_owned(), vec![line]);
        }
    }
}

/// Collapses runs of whitespace and cuts to `max` characters.
fn collapse(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    let mut count = 0;
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
            count += 1;
        }
        for c in word.chars() {
            if count >= max {
                out.push('…');
                return out;
            }
            out.push(c);
            count += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests;
