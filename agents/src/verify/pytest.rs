//! pytest's terminal output: the `FAILED path::test - msg` / `ERROR path::test` lines of
//! the short test summary (the failure names; the file is the node id's path), the
//! `____ test ____` sections under `=== FAILURES ===` / `=== ERRORS ===` (the `E   ...`
//! lines are the message, the last `path.py:12: AssertionError` line in the node id's
//! file is the line), `path::test FAILED` lines of `-v`, and the closing
//! `=== 2 failed, 2 passed in 0.05s ===` line for the counts.

use super::{Found, add_counts, count_of, failure, parse_location, same_file};
use std::collections::{HashMap, HashSet};

/// Whether the text looks like pytest's output.
pub(super) fn sniff(text: &str) -> bool {
    text.lines().any(|line| {
        let t = line.trim();
        t.starts_with("==")
            && t.ends_with("==")
            && (t.contains(" test session starts ")
                || t.contains(" short test summary info ")
                || t.contains(" FAILURES ")
                || summary_counts(t).is_some())
    })
}

/// `(passed, failed + errors)` from a closing line, `=`-framed or bare (`-q`).
fn summary_counts(line: &str) -> Option<(Option<u64>, Option<u64>)> {
    let inner = line.trim().trim_matches('=').trim();
    if !inner.starts_with(|c: char| c.is_ascii_digit()) && !inner.starts_with("no tests ran") {
        return None;
    }
    let (counts, time) = inner.rsplit_once(" in ")?;
    if !time.trim_end().ends_with('s') {
        return None;
    }
    let passed = count_of(counts, &["passed"]);
    let failed = add_counts(
        count_of(counts, &["failed"]),
        count_of(counts, &["error", "errors"]),
    );
    let any = passed.is_some()
        || failed.is_some()
        || count_of(
            counts,
            &[
                "skipped",
                "deselected",
                "xfailed",
                "xpassed",
                "warnings",
                "warning",
            ],
        )
        .is_some();
    any.then_some((passed, failed))
}

/// A failure section: its message lines (`E   ...`) and its `path:line:` lines.
#[derive(Default)]
struct Section<'a> {
    errors: Vec<&'a str>,
    locations: Vec<(&'a str, u32, &'a str)>,
}

pub(super) fn parse(text: &str) -> Found {
    let mut found = Found::default();
    // (node id, short message) in order of appearance.
    let mut nodes: Vec<(&str, &str)> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut sections: HashMap<&str, Section> = HashMap::new();
    let mut section_order: Vec<&str> = Vec::new();
    let mut in_failures = false;
    let mut current: Option<&str> = None;

    for raw in text.lines() {
        let line = raw.trim_end();
        let t = line.trim_start();
        if t.starts_with("==") && t.ends_with("==") {
            current = None;
            in_failures = t.contains(" FAILURES ") || t.contains(" ERRORS ");
            if let Some((passed, failed)) = summary_counts(t) {
                found.passed = passed;
                found.failed = failed;
            }
            continue;
        }
        if let Some((passed, failed)) = summary_counts(t)
            && !t.contains("::")
        {
            found.passed = passed;
            found.failed = failed;
            continue;
        }
        if let Some(rest) = line
            .strip_prefix("FAILED ")
            .or_else(|| line.strip_prefix("ERROR "))
        {
            let (node, message) = rest.split_once(" - ").unwrap_or((rest, ""));
            let node = node.trim();
            if !node.is_empty() && seen.insert(node) {
                nodes.push((node, message));
            }
            continue;
        }
        if in_failures && t.starts_with("__") && t.ends_with("__") {
            let title = t.trim_matches('_').trim();
            if !title.is_empty() {
                current = Some(title);
                if !sections.contains_key(title) {
                    section_order.push(title);
                }
                sections.entry(title).or_default();
                continue;
            }
        }
        if let Some(title) = current {
            let section = sections.entry(title).or_default();
            if let Some(error) = line.strip_prefix('E')
                && (error.is_empty() || error.starts_with(' '))
            {
                // pytest pads `E` to the code's indentation with (ASCII) spaces.
                let pad = error.bytes().take_while(|&b| b == b' ').count();
                section.errors.push(&error[pad.min(7)..]);
                continue;
            }
            if !line.starts_with(' ')
                && let Some((location, rest)) = location_line(line)
            {
                section.locations.push((location.0, location.1, rest));
            }
            continue;
        }
        // `-v`: `tests/test_x.py::test_a FAILED   [ 50%]`.
        if let Some((node, status)) = line.split_once(' ')
            && node.contains("::")
            && matches!(status.split_whitespace().next(), Some("FAILED" | "ERROR"))
            && seen.insert(node)
        {
            nodes.push((node, ""));
        }
    }

    if nodes.is_empty() {
        // No summary and no `-v`: the sections are all there is.
        for title in section_order {
            let section = &sections[title];
            let (file, line) = section
                .locations
                .last()
                .map_or((None, None), |&(f, l, _)| (Some(f), Some(l)));
            found
                .failures
                .push(failure(title, file, line, &section_message(section, "")));
        }
        return found;
    }

    for (node, short) in nodes {
        let (file, test) = node.split_once("::").unwrap_or((node, ""));
        let title = test.replace("::", ".");
        let section = [
            title.clone(),
            format!("ERROR at setup of {title}"),
            format!("ERROR at teardown of {title}"),
            format!("ERROR collecting {file}"),
        ]
        .iter()
        .find_map(|t| sections.get(t.as_str()));
        let line = section.and_then(|s| {
            s.locations
                .iter()
                .rev()
                .find(|(f, _, _)| same_file(f, file))
                .map(|&(_, l, _)| l)
        });
        let message = section.map_or_else(|| short.to_string(), |s| section_message(s, short));
        found
            .failures
            .push(failure(node, Some(file), line, &message));
    }
    found
}

/// The `E` lines, else the summary's message, else what the last location line says.
fn section_message(section: &Section, short: &str) -> String {
    if !section.errors.is_empty() {
        return section.errors.join("\n");
    }
    if !short.is_empty() {
        return short.to_string();
    }
    section
        .locations
        .last()
        .map_or_else(String::new, |&(_, _, rest)| rest.to_string())
}

/// `path.py:12: AssertionError` → ((`path.py`, 12), `AssertionError`).
fn location_line(line: &str) -> Option<((&str, u32), &str)> {
    let (head, rest) = match line.find(": ") {
        Some(at) => (&line[..at], line[at + 2..].trim()),
        None => (line.strip_suffix(':')?, ""),
    };
    if head.contains(' ') {
        return None;
    }
    let (path, line) = parse_location(head)?;
    path.contains('.').then_some(((path, line), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_lines() {
        assert_eq!(
            location_line("tests/test_calc.py:13: AssertionError"),
            Some((("tests/test_calc.py", 13), "AssertionError"))
        );
        assert_eq!(
            location_line("tests/test_calc.py:17: "),
            Some((("tests/test_calc.py", 17), ""))
        );
        assert_eq!(location_line("x = a: 1"), None);
        assert_eq!(location_line("E   assert 1"), None);
        assert_eq!(location_line("a.py:: x"), None);
    }

    #[test]
    fn summaries() {
        assert_eq!(
            summary_counts("========= 2 failed, 2 passed in 0.05s =========="),
            Some((Some(2), Some(2)))
        );
        assert_eq!(
            summary_counts("1 failed, 1 error in 1.00s"),
            Some((None, Some(2)))
        );
        assert_eq!(
            summary_counts("== 3 passed, 1 warning in 0.1s =="),
            Some((Some(3), None))
        );
        assert_eq!(summary_counts("== 12 things in Rome =="), None);
        assert_eq!(summary_counts("====="), None);
    }

    #[test]
    fn sections_alone_still_give_failures() {
        let log = "=== FAILURES ===\n___ test_x ___\n\n    def test_x():\n>       assert 0\nE       assert 0\n\n\
                   t/test_a.py:3: AssertionError\n=== 1 failed in 0.01s ===\n";
        let found = parse(log);
        assert_eq!(found.failures.len(), 1);
        let f = &found.failures[0];
        assert_eq!(
            (f.name.as_str(), f.file.as_deref(), f.line),
            ("test_x", Some("t/test_a.py"), Some(3))
        );
        assert_eq!(f.message, "assert 0");
        assert_eq!(found.failed, Some(1));
    }

    #[test]
    fn class_tests_and_setup_errors_find_their_sections() {
        let log = "=== ERRORS ===\n___ ERROR at setup of test_db ___\nE   RuntimeError: no db\n\
                   t/conftest.py:4: RuntimeError\n\
                   === FAILURES ===\n___ TestK.test_m[1-2] ___\nE   assert 1 == 2\nt/test_k.py:9: AssertionError\n\
                   === short test summary info ===\n\
                   FAILED t/test_k.py::TestK::test_m[1-2] - assert 1 == 2\nERROR t/test_d.py::test_db - RuntimeError: no db\n\
                   === 1 failed, 1 error in 0.2s ===\n";
        let found = parse(log);
        assert_eq!(found.failures.len(), 2);
        let k = &found.failures[0];
        assert_eq!(k.name, "t/test_k.py::TestK::test_m[1-2]");
        assert_eq!((k.file.as_deref(), k.line), (Some("t/test_k.py"), Some(9)));
        let d = &found.failures[1];
        assert_eq!(d.name, "t/test_d.py::test_db");
        // The error's location is in conftest.py, not the node's file: no line is claimed.
        assert_eq!((d.file.as_deref(), d.line), (Some("t/test_d.py"), None));
        assert_eq!(d.message, "RuntimeError: no db");
        assert_eq!((found.passed, found.failed), (None, Some(2)));
    }
}
