//! The line-based fallback for text files in no language with a grammar: Markdown and
//! `=` headings and TOML/INI sections become `section` symbols, lines that open with a
//! common definition keyword (`def`, `function`, `fn`, `class`, ...) or a shell function
//! (`name() {`) become functions or classes, and every identifier-like word is a
//! reference. Output is labelled `line-based` wherever it is shown.

use super::{FileFacts, Symbol, SymbolKind, add_reference, collapse, count_lines};

/// Extracts what can be seen line by line. `#` headings count only in Markdown files
/// (elsewhere `# ...` is a comment).
pub fn extract(path: &str, text: &str) -> FileFacts {
    let lower = path.to_ascii_lowercase();
    let markdown = [".md", ".markdown", ".mdx"]
        .iter()
        .any(|e| lower.ends_with(e));
    let mut facts = FileFacts {
        lines: count_lines(text),
        ..FileFacts::default()
    };
    let mut occurrences = 0usize;
    for (index, line) in text.lines().enumerate() {
        let number = u32::try_from(index + 1).unwrap_or(u32::MAX);
        if let Some((kind, name)) = definition(line, markdown) {
            facts.symbols.push(Symbol {
                kind,
                name: name.to_owned(),
                parent: None,
                signature: collapse(line.trim(), super::SIGNATURE_CHARS_MAX),
                doc: None,
                line: number,
                end_line: number,
            });
        }
        for word in words(line) {
            add_reference(&mut facts, &mut occurrences, word, number);
        }
    }
    facts
}

fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| {
            w.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
        })
}

fn identifier(text: &str) -> Option<&str> {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .unwrap_or(text.len());
    let name = text[..end].trim_end_matches('.');
    name.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        .then_some(name)
}

fn definition(line: &str, markdown: bool) -> Option<(SymbolKind, &str)> {
    let trimmed = line.trim_start();
    if trimmed.starts_with('#') && !markdown {
        return None;
    }
    if let Some(heading) = trimmed.strip_prefix('#') {
        // Markdown headings (`# Title`), not shell comments (`#comment`) or `#!`.
        let title = heading.trim_start_matches('#');
        if title.starts_with(' ') && line.starts_with('#') {
            let title = title.trim();
            return (!title.is_empty()).then_some((SymbolKind::Section, title));
        }
        return None;
    }
    if line.starts_with('[') && line.trim_end().ends_with(']') {
        let name = line.trim().trim_matches(['[', ']']).trim();
        return (!name.is_empty()).then_some((SymbolKind::Section, name));
    }
    let mut rest = trimmed;
    for prefix in [
        "export ", "pub ", "public ", "private ", "static ", "async ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    for (keyword, kind) in [
        ("def ", SymbolKind::Function),
        ("function ", SymbolKind::Function),
        ("func ", SymbolKind::Function),
        ("fn ", SymbolKind::Function),
        ("fun ", SymbolKind::Function),
        ("sub ", SymbolKind::Function),
        ("proc ", SymbolKind::Function),
        ("class ", SymbolKind::Class),
        ("module ", SymbolKind::Module),
        ("interface ", SymbolKind::Interface),
        ("struct ", SymbolKind::Struct),
        ("enum ", SymbolKind::Enum),
        ("trait ", SymbolKind::Trait),
    ] {
        if let Some(after) = rest.strip_prefix(keyword) {
            return identifier(after.trim_start()).map(|name| (kind, name));
        }
    }
    // Shell: `name() {` at the start of a line.
    if let Some((name, after)) = line.split_once("()")
        && after.trim_start().starts_with('{')
        && !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
    {
        return Some((SymbolKind::Function, name));
    }
    None
}
