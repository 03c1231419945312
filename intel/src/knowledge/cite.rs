//! Citations: what a claim points at (lines of a file, or a commit) and the fingerprint
//! of what was there when the claim was made, so `palm knowledge audit` can tell a claim
//! whose evidence still reads the same from one whose cited lines were edited since.
//!
//! A line citation keeps a SHA-256 digest of the cited lines (trailing white space cut,
//! so a re-indent of the end of a line or CRLF checkouts do not count as edits) and an
//! excerpt of the first line, for people. Checking a citation reads the file again:
//! the same digest at the same lines holds; the same lines found elsewhere in the file
//! have moved (the claim holds, its line number is stale); anything else has changed.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Files larger than this (bytes) are not read to make or check a citation.
pub const CITED_FILE_BYTES_MAX: u64 = 8 * 1024 * 1024;
/// A range citation covers at most this many lines.
pub const CITED_LINES_MAX: u32 = 400;
/// Excerpts are cut to this many characters.
pub const EXCERPT_CHARS_MAX: usize = 160;

/// What a claim points at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Citation {
    /// Repository-relative path of the cited file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// First cited line (from 1); absent: the file as a whole (its existence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Last cited line, when more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u32>,
    /// A cited commit (full hex id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The first cited line as it read (or the commit's subject), for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
    /// SHA-256 (hex, 128 bits) of the cited lines as they read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl Citation {
    /// `path:12`, `path:12-30`, `path` or `commit 1a2b3c4d`.
    pub fn label(&self) -> String {
        match (&self.file, &self.commit) {
            (Some(file), _) => match (self.line, self.end_line) {
                (Some(line), Some(end)) if end > line => format!("{file}:{line}-{end}"),
                (Some(line), _) => format!("{file}:{line}"),
                _ => file.clone(),
            },
            (None, Some(commit)) => format!("commit {}", short(commit)),
            (None, None) => "(nothing)".to_owned(),
        }
    }

    /// A citation of a commit.
    pub fn commit(id: &str, subject: &str) -> Citation {
        Citation {
            commit: Some(id.to_owned()),
            excerpt: Some(excerpt(subject)),
            ..Citation::default()
        }
    }
}

/// The first 8 characters of a commit id.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// A line cut to `EXCERPT_CHARS_MAX` characters, trimmed.
pub fn excerpt(line: &str) -> String {
    let line = line.trim();
    match line.char_indices().nth(EXCERPT_CHARS_MAX) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// The digest of some lines (each with its trailing white space cut).
pub fn digest_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> String {
    let mut hasher = Sha256::new();
    for line in lines {
        hasher.update(line.trim_end().as_bytes());
        hasher.update(b"\n");
    }
    let sum = hasher.finalize();
    sum[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A file's lines, or why it cannot be read as text.
pub fn read_lines(root: &Path, file: &str) -> Result<Vec<String>, String> {
    let path = root.join(file);
    let meta = std::fs::metadata(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "the file no longer exists".to_owned(),
        _ => format!("cannot read it: {e}"),
    })?;
    if !meta.is_file() {
        return Err("it is not a file".to_owned());
    }
    if meta.len() > CITED_FILE_BYTES_MAX {
        return Err(format!(
            "it is larger than {} MiB",
            CITED_FILE_BYTES_MAX / (1024 * 1024)
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("cannot read it: {e}"))?;
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// A citation of lines `line..=end` of `file`, fingerprinted from `lines` (the file's
/// lines as read). The error says what is wrong with the reference.
pub fn cite_lines(file: &str, lines: &[String], line: u32, end: u32) -> Result<Citation, String> {
    if line == 0 || end < line {
        return Err(format!(
            "{file}:{line}-{end}: lines count from 1, first to last"
        ));
    }
    if end as usize > lines.len() {
        return Err(format!("{file}:{end}: the file has {} lines", lines.len()));
    }
    if end - line + 1 > CITED_LINES_MAX {
        return Err(format!(
            "{file}:{line}-{end}: cite at most {CITED_LINES_MAX} lines"
        ));
    }
    let cited = &lines[line as usize - 1..end as usize];
    Ok(Citation {
        file: Some(file.to_owned()),
        line: Some(line),
        end_line: (end > line).then_some(end),
        commit: None,
        excerpt: Some(excerpt(&cited[0])),
        digest: Some(digest_lines(cited.iter().map(String::as_str))),
    })
}

/// What became of a citation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Verdict {
    /// The cited lines read as they did (or the file or commit is there).
    Holds,
    /// The cited lines read the same, at other lines now.
    Moved {
        /// Where they start now.
        line: u32,
    },
    /// The cited lines read differently, and are nowhere else in the file.
    Changed {
        /// The cited lines as they read now, joined by ⏎ and cut (absent past the end of
        /// the file).
        #[serde(skip_serializing_if = "Option::is_none")]
        now: Option<String>,
    },
    /// The file or commit is gone, or cannot be read.
    Missing {
        /// Why.
        reason: String,
    },
}

impl Verdict {
    /// `holds`, `moved`, `changed` or `missing`.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Moved { .. } => "moved",
            Verdict::Changed { .. } => "changed",
            Verdict::Missing { .. } => "missing",
        }
    }

    /// True when the evidence no longer reads as it did (changed or missing).
    pub fn flagged(&self) -> bool {
        matches!(self, Verdict::Changed { .. } | Verdict::Missing { .. })
    }
}

/// Checks a citation against the working tree (`root`) and the repository.
pub fn check(root: &Path, repo: &git2::Repository, citation: &Citation) -> Verdict {
    if let Some(file) = &citation.file {
        let lines = match read_lines(root, file) {
            Ok(lines) => lines,
            Err(reason) => return Verdict::Missing { reason },
        };
        let (Some(line), Some(digest)) = (citation.line, &citation.digest) else {
            return Verdict::Holds;
        };
        let end = citation.end_line.unwrap_or(line).max(line);
        let span = (end - line + 1) as usize;
        let at = |start: usize| -> Option<String> {
            let window = lines.get(start..start + span)?;
            Some(digest_lines(window.iter().map(String::as_str)))
        };
        if at(line as usize - 1).as_deref() == Some(digest.as_str()) {
            return Verdict::Holds;
        }
        // The nearest place the same lines read the same, if any.
        let wanted = line as usize - 1;
        let mut found: Option<usize> = None;
        for start in 0..lines.len().saturating_sub(span - 1) {
            if at(start).as_deref() == Some(digest.as_str())
                && found.is_none_or(|f| start.abs_diff(wanted) < f.abs_diff(wanted))
            {
                found = Some(start);
            }
        }
        return match found {
            Some(start) => Verdict::Moved {
                line: start as u32 + 1,
            },
            None => Verdict::Changed {
                now: (wanted < lines.len()).then(|| {
                    let window = &lines[wanted..(wanted + span).min(lines.len())];
                    excerpt(
                        &window
                            .iter()
                            .map(|l| l.trim())
                            .collect::<Vec<_>>()
                            .join(" ⏎ "),
                    )
                }),
            },
        };
    }
    if let Some(commit) = &citation.commit {
        let found = git2::Oid::from_str(commit)
            .ok()
            .and_then(|oid| repo.find_commit(oid).ok());
        return match found {
            Some(_) => Verdict::Holds,
            None => Verdict::Missing {
                reason: format!("commit {} is no longer in the repository", short(commit)),
            },
        };
    }
    Verdict::Missing {
        reason: "the citation names neither a file nor a commit".to_owned(),
    }
}

/// Parses `path`, `path:LINE` or `path:LINE-END` (a commit is told apart by the caller).
pub fn parse_reference(text: &str) -> (String, Option<(u32, u32)>) {
    if let Some((file, range)) = text.rsplit_once(':') {
        let parsed = match range.split_once('-') {
            Some((a, b)) => a.parse::<u32>().ok().zip(b.parse::<u32>().ok()),
            None => range.parse::<u32>().ok().map(|l| (l, l)),
        };
        if let Some(range) = parsed {
            return (file.to_owned(), Some(range));
        }
    }
    (text.to_owned(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn labels_say_file_lines_or_commit() {
        let file = lines("a\nb\nc\n");
        assert_eq!(cite_lines("x.rs", &file, 2, 2).unwrap().label(), "x.rs:2");
        assert_eq!(cite_lines("x.rs", &file, 1, 3).unwrap().label(), "x.rs:1-3");
        assert_eq!(
            Citation::commit("0123456789abcdef", "s").label(),
            "commit 01234567"
        );
        assert_eq!(
            cite_lines("x.rs", &file, 3, 4).unwrap_err(),
            "x.rs:4: the file has 3 lines"
        );
        assert!(cite_lines("x.rs", &file, 0, 1).is_err());
    }

    #[test]
    fn trailing_white_space_is_not_an_edit() {
        assert_eq!(digest_lines(["fn a() {  "]), digest_lines(["fn a() {\r"]));
        assert_ne!(digest_lines(["fn a() {"]), digest_lines(["fn  a() {"]));
    }

    #[test]
    fn references_parse() {
        assert_eq!(
            parse_reference("a/b.rs:12"),
            ("a/b.rs".into(), Some((12, 12)))
        );
        assert_eq!(
            parse_reference("a/b.rs:3-9"),
            ("a/b.rs".into(), Some((3, 9)))
        );
        assert_eq!(parse_reference("a/b.rs"), ("a/b.rs".into(), None));
        assert_eq!(parse_reference("c:\\x"), ("c:\\x".into(), None));
    }
}
