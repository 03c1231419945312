//! Prose a file holds for people, indexed for `palm search`: the paragraphs of a
//! Markdown file, a Rust module's `//!` docs, a Python module's docstring, a Go package
//! comment. Each passage keeps its first line, so a hit points at it. Bounded: at most
//! [`PASSAGE_BYTES_MAX`] per passage and [`PROSE_BYTES_MAX`] per file.

use super::Passage;
use crate::lang::Language;

/// The most text one passage keeps (bytes, cut at a character boundary).
pub const PASSAGE_BYTES_MAX: usize = 2 * 1024;
/// The most prose one file contributes (bytes).
pub const PROSE_BYTES_MAX: usize = 64 * 1024;

/// The passages of a file.
pub fn passages(language: Language, path: &str, text: &str) -> Vec<Passage> {
    let markdown = [".md", ".markdown", ".mdx"]
        .iter()
        .any(|ext| path.to_ascii_lowercase().ends_with(ext));
    let found = if markdown {
        paragraphs(text)
    } else {
        match language {
            Language::Rust => comment_block(text, |line| {
                line.strip_prefix("//!")
                    .map(|rest| rest.strip_prefix(' ').unwrap_or(rest))
            }),
            Language::Python => docstring(text),
            Language::Go => go_package_comment(text),
            _ => Vec::new(),
        }
    };
    bound(found)
}

fn bound(passages: Vec<Passage>) -> Vec<Passage> {
    let mut total = 0;
    let mut kept = Vec::new();
    for mut passage in passages {
        if passage.text.len() > PASSAGE_BYTES_MAX {
            let mut end = PASSAGE_BYTES_MAX;
            while !passage.text.is_char_boundary(end) {
                end -= 1;
            }
            passage.text.truncate(end);
        }
        total += passage.text.len();
        if total > PROSE_BYTES_MAX {
            break;
        }
        kept.push(passage);
    }
    kept
}

/// Markdown: runs of non-blank lines (a heading starts its own).
fn paragraphs(text: &str) -> Vec<Passage> {
    let mut out: Vec<Passage> = Vec::new();
    let mut current: Option<Passage> = None;
    for (index, line) in text.lines().enumerate() {
        let number = index as u32 + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            out.extend(current.take());
            if trimmed.is_empty() {
                continue;
            }
        }
        match &mut current {
            Some(passage) => {
                passage.text.push('\n');
                passage.text.push_str(trimmed);
            }
            None => {
                current = Some(Passage {
                    line: number,
                    text: trimmed.to_owned(),
                })
            }
        }
    }
    out.extend(current);
    out
}

/// Consecutive lines a prefix marks (`//!`), as one passage per block.
fn comment_block(text: &str, strip: impl Fn(&str) -> Option<&str>) -> Vec<Passage> {
    let mut out = Vec::new();
    let mut current: Option<Passage> = None;
    for (index, line) in text.lines().enumerate() {
        match strip(line.trim_start()) {
            Some(rest) => match &mut current {
                Some(passage) => {
                    passage.text.push('\n');
                    passage.text.push_str(rest);
                }
                None => {
                    current = Some(Passage {
                        line: index as u32 + 1,
                        text: rest.to_owned(),
                    })
                }
            },
            None => out.extend(current.take()),
        }
    }
    out.extend(current);
    out
}

/// A module docstring: the first statement, when it is a triple-quoted string.
fn docstring(text: &str) -> Vec<Passage> {
    let mut lines = text.lines().enumerate().skip_while(|(_, l)| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#')
    });
    let Some((start, first)) = lines.next() else {
        return Vec::new();
    };
    let first = first.trim_start();
    let first = first.trim_start_matches(['r', 'R', 'u', 'U']);
    let Some(quote) = ["\"\"\"", "'''"].into_iter().find(|q| first.starts_with(q)) else {
        return Vec::new();
    };
    let body = &first[3..];
    if let Some(end) = body.find(quote) {
        return vec![Passage {
            line: start as u32 + 1,
            text: body[..end].trim().to_owned(),
        }];
    }
    let mut text_out = body.trim().to_owned();
    for (_, line) in lines {
        if let Some(end) = line.find(quote) {
            text_out.push('\n');
            text_out.push_str(line[..end].trim());
            break;
        }
        text_out.push('\n');
        text_out.push_str(line.trim());
    }
    vec![Passage {
        line: start as u32 + 1,
        text: text_out.trim().to_owned(),
    }]
}

/// The `//` comment block right above `package`.
fn go_package_comment(text: &str) -> Vec<Passage> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(package) = lines
        .iter()
        .position(|l| l.trim_start().starts_with("package "))
    else {
        return Vec::new();
    };
    let mut start = package;
    while start > 0 && lines[start - 1].trim_start().starts_with("//") {
        start -= 1;
    }
    if start == package {
        return Vec::new();
    }
    let text: Vec<&str> = lines[start..package]
        .iter()
        .map(|l| {
            let rest = l.trim_start().trim_start_matches("//");
            rest.strip_prefix(' ').unwrap_or(rest)
        })
        .collect();
    vec![Passage {
        line: start as u32 + 1,
        text: text.join("\n"),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passages_of_each_kind_keep_their_line() {
        let md = passages(
            Language::Text,
            "docs/a.md",
            "# Title\n\nFirst paragraph\nstill first.\n\n## Next\nSecond one.\n",
        );
        let found: Vec<(u32, &str)> = md.iter().map(|p| (p.line, p.text.as_str())).collect();
        assert_eq!(
            found,
            vec![
                (1, "# Title"),
                (3, "First paragraph\nstill first."),
                (6, "## Next\nSecond one.")
            ]
        );
        let rust = passages(
            Language::Rust,
            "a.rs",
            "//! Module docs\n//! about sagas.\n\nuse x;\n/// not module docs\nfn f() {}\n",
        );
        assert_eq!(
            (rust[0].line, rust[0].text.as_str()),
            (1, "Module docs\nabout sagas.")
        );
        assert_eq!(rust.len(), 1);
        let py = passages(
            Language::Python,
            "a.py",
            "#!/usr/bin/env python3\n\"\"\"Reconcile\nledgers.\"\"\"\nimport os\n",
        );
        assert_eq!(
            (py[0].line, py[0].text.as_str()),
            (2, "Reconcile\nledgers.")
        );
        let go = passages(
            Language::Go,
            "a.go",
            "// Package flux moves\n// things.\npackage flux\n",
        );
        assert_eq!(
            (go[0].line, go[0].text.as_str()),
            (1, "Package flux moves\nthings.")
        );
        let long = "x".repeat(PASSAGE_BYTES_MAX * 2);
        assert_eq!(
            passages(Language::Text, "a.md", &long)[0].text.len(),
            PASSAGE_BYTES_MAX
        );
    }
}
