//! The secret scan of a patch: the lines it adds are checked for cloud keys, private keys,
//! API tokens and passwords written as literals. A patch with a finding is `blocked`: it
//! is kept, listed with its findings, and never applied.
//!
//! Findings name the kind, the file and the line in the new file, and show the match
//! masked (its first four characters), so the report itself leaks nothing.

use regex::Regex;
use serde::Serialize;
use std::sync::OnceLock;

/// One thing that looks like a secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What it looks like (`aws_access_key`, `private_key`, ...).
    pub kind: &'static str,
    /// The file.
    pub path: String,
    /// Its line in the new file.
    pub line: u64,
    /// The match, masked.
    pub excerpt: String,
}

/// The patterns, by kind.
const PATTERNS: [(&str, &str); 10] = [
    ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    (
        "aws_secret_key",
        r"(?i)aws_?secret_?access_?key\s*[:=]\s*[A-Za-z0-9/+=]{40}",
    ),
    ("private_key", r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----"),
    (
        "github_token",
        r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}\b",
    ),
    ("github_token", r"\bgithub_pat_[A-Za-z0-9_]{22,}"),
    ("slack_token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    ("api_key", r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("stripe_key", r"\b(?:sk|rk)_live_[0-9A-Za-z]{24,}"),
    (
        "password",
        r#"(?i)\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token)\b["']?\s*[:=]\s*["'][^"'\s$]{6,}["']"#,
    ),
];

fn patterns() -> &'static [(&'static str, Regex)] {
    static COMPILED: OnceLock<Vec<(&'static str, Regex)>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        PATTERNS
            .into_iter()
            .map(|(kind, pattern)| (kind, Regex::new(pattern).expect("a valid pattern")))
            .collect()
    })
}

/// All the patterns at once: one pass tells whether a text holds any (most hold none).
fn any_pattern() -> &'static regex::RegexSet {
    static SET: OnceLock<regex::RegexSet> = OnceLock::new();
    SET.get_or_init(|| {
        regex::RegexSet::new(PATTERNS.iter().map(|(_, p)| *p)).expect("valid patterns")
    })
}

/// Scans the lines a unified diff (`git diff`) adds.
pub fn scan_diff(diff: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut path = String::new();
    let mut line = 0u64;
    for text in diff.lines() {
        if let Some(rest) = text.strip_prefix("+++ ") {
            path = rest.strip_prefix("b/").unwrap_or(rest).to_owned();
            continue;
        }
        if text.starts_with("--- ") || text.starts_with("diff --git ") {
            continue;
        }
        if let Some(header) = text.strip_prefix("@@ ") {
            // `@@ -a,b +c,d @@`: the new file's lines start at c.
            line = header
                .split_whitespace()
                .find_map(|part| part.strip_prefix('+'))
                .and_then(|range| range.split(',').next())
                .and_then(|start| start.parse::<u64>().ok())
                .unwrap_or(1)
                .saturating_sub(1);
            continue;
        }
        if let Some(added) = text.strip_prefix('+') {
            line += 1;
            findings.extend(scan_line(added, &path, line));
        } else if text.starts_with(' ') {
            line += 1;
        }
    }
    findings
}

/// Scans one line of a file.
pub fn scan_line(text: &str, path: &str, line: u64) -> Vec<Finding> {
    let mut found = Vec::new();
    for (kind, pattern) in patterns() {
        for hit in pattern.find_iter(text) {
            let shown: String = hit.as_str().chars().take(4).collect();
            found.push(Finding {
                kind,
                path: path.to_owned(),
                line,
                excerpt: format!("{shown}…"),
            });
        }
    }
    found
}

/// `text` with every match replaced by `[redacted:KIND]` (the session index keeps no
/// secret a transcript held).
pub fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    let mut out = std::borrow::Cow::Borrowed(text);
    if !any_pattern().is_match(text) {
        return out;
    }
    for (kind, pattern) in patterns() {
        if pattern.is_match(&out) {
            let replaced = pattern
                .replace_all(&out, format!("[redacted:{kind}]").as_str())
                .into_owned();
            out = std::borrow::Cow::Owned(replaced);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_lines_with_secrets_are_found_where_they_are() {
        let diff = "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -10,2 +10,4 @@ def f():\n context\n+AWS_KEY = \"AKIAIOSFODNN7EXAMPLE\"\n-removed = \"AKIAIOSFODNN7EXAMPL2\"\n+password = \"hunter2hunter2\"\n+password = os.environ[\"PW\"]\n";
        let findings = scan_diff(diff);
        let kinds: Vec<(&str, &str, u64)> = findings
            .iter()
            .map(|f| (f.kind, f.path.as_str(), f.line))
            .collect();
        assert_eq!(
            kinds,
            vec![("aws_access_key", "app.py", 11), ("password", "app.py", 12)]
        );
        assert_eq!(findings[0].excerpt, "AKIA…");
        assert!(scan_line("-----BEGIN OPENSSH PRIVATE KEY-----", "k", 1)[0].kind == "private_key");
        assert!(scan_line("let x = 42; // nothing here", "a.rs", 1).is_empty());
    }

    #[test]
    fn redaction_leaves_no_secret_and_the_rest_as_it_was() {
        let text =
            "export AWS=AKIAIOSFODNN7EXAMPLE and token ghp_abcdefghijklmnopqrstuvwxyz0123456789 ok";
        let clean = redact(text);
        assert_eq!(
            clean,
            "export AWS=[redacted:aws_access_key] and token [redacted:github_token] ok"
        );
        assert!(matches!(
            redact("nothing here"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
