//! jest's output: the default reporter (`FAIL path` headers, `● Suite › test name`
//! blocks with the message, a code frame `> 5 | ...` and the stack
//! `at Object.<anonymous> (path/sum.test.js:5:17)`, the `Tests: 2 failed, 2 passed`
//! summary), and `--json` (`{"testResults":[{"name": file, "assertionResults":[...]}]}`,
//! on a line of the log or as the report file). When both are there, the JSON wins.

use super::{Failure, Found, dedent, failure, frame_location, same_file};
use serde_json::Value;

/// The name of a failed test the report does not name.
const UNNAMED: &str = "(unnamed test)";

/// Whether the text looks like jest's output.
pub(super) fn sniff(text: &str) -> bool {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') && trimmed.contains("\"testResults\"") {
        return true;
    }
    text.lines().any(|line| {
        let t = line.trim();
        (t.starts_with("Tests:") && t.ends_with(" total"))
            || (t.starts_with('{')
                && t.contains("\"testResults\"")
                && t.contains("\"numFailedTests\""))
    })
}

pub(super) fn parse(text: &str) -> Found {
    let trimmed = text.trim();
    if trimmed.starts_with('{')
        && let Ok(report) = serde_json::from_str::<Value>(trimmed)
        && let Some(found) = parse_json(&report)
    {
        return found;
    }
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('{')
            && t.contains("\"testResults\"")
            && let Ok(report) = serde_json::from_str::<Value>(t)
            && let Some(found) = parse_json(&report)
        {
            return found;
        }
    }
    parse_human(text)
}

/// jest's `--json` report; `None` when it is not one.
fn parse_json(report: &Value) -> Option<Found> {
    let results = report.get("testResults")?.as_array()?;
    let mut found = Found::default();
    for suite in results {
        let file = suite
            .get("name")
            .or_else(|| suite.get("testFilePath"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let empty = Vec::new();
        let assertions = suite
            .get("assertionResults")
            .or_else(|| suite.get("testResults"))
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        let mut any = false;
        for a in assertions {
            if a.get("status").and_then(Value::as_str) != Some("failed") {
                continue;
            }
            any = true;
            found.failures.push(json_failure(a, file));
        }
        let suite_failed = suite.get("status").and_then(Value::as_str) == Some("failed");
        let message = suite
            .get("message")
            .or_else(|| suite.get("failureMessage"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if !any && suite_failed && !message.trim().is_empty() {
            let (line, text) = message_and_line(message, file);
            found
                .failures
                .push(failure("Test suite failed to run", Some(file), line, &text));
        }
    }
    let n = |k: &str| report.get(k).and_then(Value::as_u64);
    found.passed = n("numPassedTests");
    found.failed = n("numFailedTests");
    Some(found)
}

fn json_failure(a: &Value, file: &str) -> Failure {
    let title = a.get("title").and_then(Value::as_str).unwrap_or("");
    let ancestors: Vec<&str> = a
        .get("ancestorTitles")
        .and_then(Value::as_array)
        .map(|t| t.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let name = if title.is_empty() {
        a.get("fullName")
            .and_then(Value::as_str)
            .filter(|n| !n.trim().is_empty())
            .unwrap_or(UNNAMED)
            .to_string()
    } else {
        let mut parts = ancestors;
        parts.push(title);
        parts.join(" › ")
    };
    let messages: Vec<&str> = a
        .get("failureMessages")
        .and_then(Value::as_array)
        .map(|m| m.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let joined = messages.join("\n");
    let (stack_line, message) = message_and_line(&joined, file);
    let located = a
        .get("location")
        .and_then(|l| l.get("line"))
        .and_then(Value::as_u64)
        .and_then(|l| u32::try_from(l).ok());
    failure(&name, Some(file), stack_line.or(located), &message)
}

/// A failure message split into its text (the lines before the stack) and the line of
/// the first frame in `file`.
fn message_and_line(message: &str, file: &str) -> (Option<u32>, String) {
    let lines: Vec<&str> = message.lines().collect();
    let stack = lines
        .iter()
        .position(|l| l.trim_start().starts_with("at "))
        .unwrap_or(lines.len());
    let line = lines[stack..]
        .iter()
        .filter_map(|l| frame_location(l))
        .find(|(path, _)| same_file(path, file))
        .map(|(_, l)| l);
    (line, dedent(&lines[..stack]))
}

/// A code frame line: `> 13 |     expect(...)`, as its number and whether it is marked.
fn code_frame(line: &str) -> Option<(u32, bool)> {
    let t = line.trim_start();
    let (marked, t) = match t.strip_prefix('>') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, t),
    };
    let (number, rest) = t.split_once(' ')?;
    if !rest.trim_start().starts_with('|') {
        return None;
    }
    Some((number.parse().ok()?, marked))
}

/// jest's default reporter.
fn parse_human(text: &str) -> Found {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Found::default();
    let mut suite: Option<&str> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("FAIL ").or_else(|| t.strip_prefix("PASS "))
            && !line.starts_with(' ')
        {
            suite = rest.split_whitespace().next();
        }
        if let Some(tests) = t.strip_prefix("Tests:") {
            found.passed = super::count_of(tests, &["passed"]);
            found.failed = super::count_of(tests, &["failed"]);
        }
        let Some(title) = t.strip_prefix("● ") else {
            i += 1;
            continue;
        };
        let title = title.trim();
        let indent = line.len() - line.trim_start().len();
        let end = lines[i + 1..]
            .iter()
            .position(|l| {
                let body = l.trim_start();
                let depth = l.len() - body.len();
                (!l.is_empty() && depth == 0) || (body.starts_with("● ") && depth <= indent)
            })
            .map_or(lines.len(), |p| i + 1 + p);
        let block = &lines[i + 1..end];
        i = end;
        if title.starts_with("Console") || title.is_empty() {
            continue;
        }
        found.failures.push(block_failure(title, suite, block));
    }
    found
}

fn block_failure(title: &str, suite: Option<&str>, block: &[&str]) -> Failure {
    let body_end = block
        .iter()
        .position(|l| code_frame(l).is_some() || l.trim_start().starts_with("at "))
        .unwrap_or(block.len());
    let message = dedent(&block[..body_end]);
    let frames: Vec<(&str, u32)> = block
        .iter()
        .filter_map(|l| {
            l.trim_start()
                .starts_with("at ")
                .then(|| frame_location(l))
                .flatten()
        })
        .collect();
    let in_suite = suite.and_then(|s| frames.iter().find(|(p, _)| same_file(p, s)));
    let outside_deps = || frames.iter().find(|(p, _)| !p.contains("node_modules"));
    let (file, line) = match in_suite.or_else(outside_deps) {
        Some(&(path, line)) => (Some(path), Some(line)),
        None => {
            let marked = block.iter().filter_map(|l| code_frame(l)).find(|&(_, m)| m);
            (suite, marked.map(|(n, _)| n))
        }
    };
    failure(title, file, line, &message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_frames() {
        assert_eq!(code_frame("    > 13 |     expect(x)"), Some((13, true)));
        assert_eq!(code_frame("      11 |"), Some((11, false)));
        assert_eq!(code_frame("         |   ^"), None);
        assert_eq!(code_frame("Expected: 5"), None);
    }

    #[test]
    fn a_block_without_a_stack_uses_the_code_frame() {
        let log = "FAIL src/a.test.js\n  ● adds\n\n    expected 1\n\n    > 4 |   x();\n      |   ^\n\n\
                   Tests:       1 failed, 1 total\n";
        let found = parse(log);
        assert_eq!(found.failures.len(), 1);
        let f = &found.failures[0];
        assert_eq!(
            (f.name.as_str(), f.file.as_deref(), f.line),
            ("adds", Some("src/a.test.js"), Some(4))
        );
        assert_eq!(f.message, "expected 1");
        assert_eq!((found.passed, found.failed), (None, Some(1)));
    }

    #[test]
    fn a_suite_that_failed_to_run() {
        let report = serde_json::json!({
            "numFailedTests": 0, "numPassedTests": 0,
            "testResults": [{"name": "/r/b.test.js", "status": "failed", "assertionResults": [],
                "message": "SyntaxError: Unexpected token\n    at /r/b.test.js:3:1"}]
        });
        let found = parse(&report.to_string());
        assert_eq!(found.failures.len(), 1);
        let f = &found.failures[0];
        assert_eq!(f.name, "Test suite failed to run");
        assert_eq!((f.file.as_deref(), f.line), (Some("/r/b.test.js"), Some(3)));
        assert_eq!(f.message, "SyntaxError: Unexpected token");
    }

    #[test]
    fn json_with_wrong_types_is_not_a_report() {
        let found = parse("{\"testResults\": 5}\n");
        assert!(found.failures.is_empty());
        let found =
            parse("{\"testResults\": [{\"assertionResults\": [{\"status\": \"failed\"}]}]}");
        assert_eq!(found.failures.len(), 1);
        assert_eq!(found.failures[0].name, UNNAMED);
    }
}
