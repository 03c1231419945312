//! `cargo test` output: libtest's human format (`test foo ... FAILED`, the
//! `---- foo stdout ----` sections and their `thread 'foo' panicked at src/lib.rs:10:9:`
//! lines), libtest's JSON format (`--format json`: `{"type":"test","event":"failed",...}`
//! lines, whose `stdout` holds the panic), and cargo-nextest's human format
//! (`FAIL [ 0.004s] crate tests::foo` lines and the indented output under them).

use super::{Found, MESSAGE_BYTES_MAX, add_counts, count_of, failure, parse_location};
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// Whether the text looks like libtest's or nextest's output.
pub(super) fn sniff(text: &str) -> bool {
    text.lines().any(|line| {
        let t = line.trim();
        t.starts_with("test result: ")
            || (t.starts_with("test ") && t.contains(" ... FAILED"))
            || is_json_event(t)
            || is_nextest_summary(t)
    })
}

pub(super) fn parse(text: &str) -> Found {
    if let Some(found) = parse_json(text) {
        return found;
    }
    if text
        .lines()
        .any(|l| is_nextest_summary(l.trim()) || nextest_status(l).is_some())
    {
        return parse_nextest(text);
    }
    parse_human(text)
}

/// A libtest JSON line, by its look (cheap; the real check is the JSON parse): libtest
/// writes `{ "type": "test", ...` or `{ "type": "suite", ...`.
fn is_json_event(t: &str) -> bool {
    let Some(rest) = t.strip_prefix('{') else {
        return false;
    };
    let rest = rest.trim_start();
    let Some(rest) = rest.strip_prefix("\"type\"") else {
        return false;
    };
    let rest = rest
        .trim_start()
        .strip_prefix(':')
        .unwrap_or("")
        .trim_start();
    rest.starts_with("\"test\"") || rest.starts_with("\"suite\"")
}

fn is_nextest_summary(t: &str) -> bool {
    t.starts_with("Summary [") && t.contains(" tests run: ")
        || t.starts_with("Starting ") && t.contains(" tests across ")
}

/// What a panic line and the lines under it say.
struct Panic {
    thread: String,
    file: String,
    line: u32,
    message: String,
}

/// The first panic in `lines`: `thread 'x' (123) panicked at src/lib.rs:27:9:` followed
/// by the message (Rust 1.73+), or `thread 'x' panicked at 'msg', src/lib.rs:27:9`.
fn find_panic(lines: &[&str]) -> Option<Panic> {
    find_panic_at(lines).map(|(_, p)| p)
}

/// [`find_panic`], with the index of the panic line.
fn find_panic_at(lines: &[&str]) -> Option<(usize, Panic)> {
    for (i, raw) in lines.iter().enumerate() {
        let t = raw.trim_start();
        let Some(rest) = t.strip_prefix("thread '") else {
            continue;
        };
        let Some((thread, after)) = rest.split_once('\'') else {
            continue;
        };
        let Some((_, at)) = after.split_once("panicked at ") else {
            continue;
        };
        let at = at.trim_end();
        if let Some(old) = at.strip_prefix('\'') {
            // Before Rust 1.73: the message in quotes, then the location.
            let Some((message, location)) = old.rsplit_once("', ") else {
                continue;
            };
            let Some((file, line)) = parse_location(location) else {
                continue;
            };
            return Some((
                i,
                Panic {
                    thread: thread.to_string(),
                    file: file.to_string(),
                    line,
                    message: message.to_string(),
                },
            ));
        }
        let Some((file, line)) = parse_location(at.strip_suffix(':').unwrap_or(at)) else {
            continue;
        };
        let indent = raw.len() - t.len();
        let mut message: Vec<&str> = Vec::new();
        let mut bytes = 0;
        for next in &lines[i + 1..] {
            let body = next.trim_start();
            if body.starts_with("note: ")
                || body.starts_with("stack backtrace:")
                || body.starts_with("thread '")
                || (body.starts_with("test ") && body.contains(" ... "))
                || bytes > MESSAGE_BYTES_MAX
            {
                break;
            }
            let kept = next.get(indent..).unwrap_or(body).trim_end();
            bytes += kept.len() + 1;
            message.push(kept);
        }
        while message.last().is_some_and(|l| l.is_empty()) {
            message.pop();
        }
        return Some((
            i,
            Panic {
                thread: thread.to_string(),
                file: file.to_string(),
                line,
                message: message.join("\n"),
            },
        ));
    }
    None
}

/// A failure from the lines a test printed (its section, its JSON `stdout`, its nextest
/// block): the panic when there is one, else the printed text.
fn failure_from_output(name: &str, output: &[&str]) -> super::Failure {
    match find_panic(output) {
        Some(p) => failure(name, Some(&p.file), Some(p.line), &p.message),
        None => failure(name, None, None, &super::dedent(output)),
    }
}

/// libtest's `--format json`; `None` when the text has no libtest event.
fn parse_json(text: &str) -> Option<Found> {
    let mut found = Found::default();
    let mut seen = false;
    for line in text.lines() {
        let t = line.trim();
        if !is_json_event(t) {
            continue;
        }
        let Ok(event) = serde_json::from_str::<Value>(t) else {
            continue;
        };
        let kind = event.get("type").and_then(Value::as_str);
        let what = event.get("event").and_then(Value::as_str);
        match (kind, what) {
            (Some("test"), Some(what)) => {
                seen = true;
                if what != "failed" {
                    continue;
                }
                let Some(name) = event.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let stdout = event.get("stdout").and_then(Value::as_str).unwrap_or("");
                let mut output: Vec<&str> = stdout.lines().collect();
                if let Some(message) = event.get("message").and_then(Value::as_str) {
                    output.extend(message.lines());
                }
                found.failures.push(failure_from_output(name, &output));
            }
            (Some("suite"), Some("ok" | "failed")) => {
                seen = true;
                let n = |k: &str| event.get(k).and_then(Value::as_u64);
                found.passed = add_counts(found.passed, n("passed"));
                found.failed = add_counts(found.failed, n("failed"));
            }
            (Some("suite"), _) => seen = true,
            _ => {}
        }
    }
    seen.then_some(found)
}

/// Ends the open section (if any) at line `end`.
fn close<'a>(
    open: &mut Option<(&'a str, usize)>,
    sections: &mut HashMap<&'a str, (usize, usize)>,
    end: usize,
) {
    if let Some((name, start)) = open.take() {
        sections.entry(name).or_insert((start, end));
    }
}

/// libtest's human output.
fn parse_human(text: &str) -> Found {
    #[derive(PartialEq)]
    enum State {
        Normal,
        List,
        Section,
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Found::default();
    let mut failed: Vec<&str> = Vec::new();
    let mut named: HashSet<&str> = HashSet::new();
    // Each section's name and its lines' range.
    let mut sections: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut open: Option<(&str, usize)> = None;
    let mut state = State::Normal;
    for (i, raw) in lines.iter().enumerate() {
        let line = raw.trim_end();
        if let Some(header) = line
            .strip_prefix("---- ")
            .and_then(|l| l.strip_suffix(" ----"))
        {
            let name = header
                .strip_suffix(" stdout")
                .or_else(|| header.strip_suffix(" stderr"))
                .unwrap_or(header);
            close(&mut open, &mut sections, i);
            open = Some((name, i + 1));
            state = State::Section;
            continue;
        }
        if line == "failures:" {
            close(&mut open, &mut sections, i);
            state = State::List;
            continue;
        }
        if let Some(summary) = line.trim_start().strip_prefix("test result: ") {
            // `FAILED. 2 passed; 2 failed; ...`
            let summary = summary
                .split_once(". ")
                .map_or(summary, |(_, counts)| counts);
            close(&mut open, &mut sections, i);
            state = State::Normal;
            found.passed = add_counts(found.passed, count_of(summary, &["passed"]));
            found.failed = add_counts(found.failed, count_of(summary, &["failed"]));
            continue;
        }
        if state == State::Section {
            continue;
        }
        if let Some(rest) = line.strip_prefix("test ")
            && let Some((name, status)) = rest.rsplit_once(" ... ")
        {
            if status.starts_with("FAILED") && named.insert(name) {
                failed.push(name);
            }
            continue;
        }
        // `cargo test -q` prints no per-test lines: the closing list names the failures.
        if state == State::List
            && let Some(name) = line.strip_prefix("    ")
            && !name.starts_with(' ')
            && !name.is_empty()
            && named.insert(name)
        {
            failed.push(name);
        }
    }
    close(&mut open, &mut sections, lines.len());

    // Panics printed outside any section (`--nocapture`): libtest names the thread after
    // the test.
    let mut loose: HashMap<String, Panic> = HashMap::new();
    if failed.iter().any(|n| !sections.contains_key(n)) {
        let mut rest: &[&str] = &lines;
        while let Some((at, p)) = find_panic_at(rest) {
            rest = rest.get(at + 1..).unwrap_or(&[]);
            loose.entry(p.thread.clone()).or_insert(p);
        }
    }

    for name in failed {
        let f = match (sections.get(name), loose.get(name)) {
            (Some(&(start, end)), _) => {
                failure_from_output(name, lines.get(start..end).unwrap_or(&[]))
            }
            (None, Some(p)) => failure(name, Some(&p.file), Some(p.line), &p.message),
            (None, None) => failure(name, None, None, ""),
        };
        found.failures.push(f);
    }
    found
}

/// A nextest status line: `FAIL [   0.007s] (3/4) crate tests::name`, as
/// (status, test name without the binary id).
fn nextest_status(line: &str) -> Option<(&str, &str)> {
    let t = line.trim();
    let (status, rest) = t.split_once(' ')?;
    let known = matches!(
        status,
        "PASS" | "FAIL" | "TIMEOUT" | "ABORT" | "LEAK" | "LEAK-FAIL"
    ) || status.starts_with("SIG");
    if !known || !status.bytes().all(|b| b.is_ascii_uppercase() || b == b'-') {
        return None;
    }
    let rest = rest.trim_start().strip_prefix('[')?;
    let (_, rest) = rest.split_once(']')?;
    let mut rest = rest.trim_start();
    if rest.starts_with('(')
        && let Some((_, after)) = rest.split_once(')')
    {
        rest = after.trim_start();
    }
    let (_binary, name) = rest.split_once(' ')?;
    let name = name.trim();
    (!name.is_empty()).then_some((status, name))
}

/// cargo-nextest's human output.
fn parse_nextest(text: &str) -> Found {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Found::default();
    // Names already found, so the closing list's repeats cost one lookup each.
    let mut named: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if let Some(summary) = t.strip_prefix("Summary [")
            && let Some((_, counts)) = summary.split_once(" tests run: ")
        {
            found.passed = count_of(counts, &["passed"]);
            found.failed = add_counts(count_of(counts, &["failed"]), count_of(counts, &["timed"]));
            continue;
        }
        let Some((status, name)) = nextest_status(line) else {
            continue;
        };
        if matches!(status, "PASS" | "LEAK") {
            continue;
        }
        let block_end = lines[i + 1..]
            .iter()
            .position(|l| {
                let t = l.trim();
                nextest_status(l).is_some()
                    || t.starts_with("Summary [")
                    || t.starts_with('─')
                    || t.starts_with("Cancelling")
                    || t.starts_with("Canceling")
            })
            .map_or(lines.len(), |p| i + 1 + p);
        let block = &lines[i + 1..block_end];
        let mut f = failure_from_output(name, block);
        if f.file.is_none() && f.message.is_empty() {
            f.message = format!("{status} (nextest)");
        }
        // The closing list repeats the status lines with no output under them.
        if f.file.is_none() && named.contains(&f.name) {
            continue;
        }
        named.insert(f.name.clone());
        found.failures.push(f);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_and_new_panic_lines() {
        let new = [
            "thread 'a::b' panicked at src/x.rs:3:5:",
            "boom",
            "note: run with",
        ];
        let p = find_panic(&new).expect("a panic");
        assert_eq!(
            (p.thread.as_str(), p.file.as_str(), p.line),
            ("a::b", "src/x.rs", 3)
        );
        assert_eq!(p.message, "boom");
        let old = ["thread 'a::b' panicked at 'it broke', src/x.rs:7:9"];
        let p = find_panic(&old).expect("a panic");
        assert_eq!(
            (p.file.as_str(), p.line, p.message.as_str()),
            ("src/x.rs", 7, "it broke")
        );
        assert!(find_panic(&["thread 'x' panicked at nowhere"]).is_none());
        assert!(find_panic(&["thread '"]).is_none());
    }

    #[test]
    fn quiet_mode_names_come_from_the_list() {
        let log = "running 2 tests\n.F\nfailures:\n\n---- t::b stdout ----\n\
                   thread 't::b' panicked at src/lib.rs:9:5:\nno\n\n\nfailures:\n    t::b\n\n\
                   test result: FAILED. 1 passed; 1 failed; 0 ignored\n";
        let found = parse(log);
        assert_eq!(found.failures.len(), 1);
        assert_eq!(found.failures[0].name, "t::b");
        assert_eq!(found.failures[0].line, Some(9));
        assert_eq!(found.failures[0].message, "no");
        assert_eq!((found.passed, found.failed), (Some(1), Some(1)));
    }

    #[test]
    fn nocapture_panics_are_matched_by_thread_name() {
        let log = "running 1 test\nthread 'x::y' panicked at src/a.rs:4:1:\nbad\n\
                   test x::y ... FAILED\n\nfailures:\n\nfailures:\n    x::y\n\n\
                   test result: FAILED. 0 passed; 1 failed;\n";
        let found = parse(log);
        assert_eq!(
            found.failures.len(),
            1,
            "the list repeats the name: {found:?}"
        );
        assert_eq!(found.failures[0].name, "x::y");
        assert_eq!(found.failures[0].line, Some(4));
        assert_eq!(found.failures[0].message, "bad");
    }

    #[test]
    fn test_results_of_several_binaries_add_up() {
        let log =
            "test result: ok. 3 passed; 0 failed;\ntest result: FAILED. 1 passed; 2 failed;\n";
        let found = parse(log);
        assert_eq!((found.passed, found.failed), (Some(4), Some(2)));
    }

    #[test]
    fn json_lines_are_known_by_their_first_key() {
        assert!(is_json_event("{ \"type\": \"test\", \"event\": \"ok\" }"));
        assert!(is_json_event("{\"type\":\"suite\"}"));
        assert!(!is_json_event("{\"title\": \"test\", \"type\": \"x\"}"));
        assert!(!is_json_event("{ \"type\": \"other\" }"));
        assert!(!is_json_event("{"));
    }

    #[test]
    fn garbage_json_lines_are_skipped() {
        let log = "{ \"type\": \"test\", \"event\": \"failed\", \"name\": \n\
                   { \"type\": \"test\", \"event\": \"failed\", \"name\": 7 }\n\
                   { \"type\": \"test\", \"event\": \"failed\", \"name\": \"ok::one\", \"stdout\": 3 }\n";
        let found = parse(log);
        assert_eq!(found.failures.len(), 1);
        assert_eq!(found.failures[0].name, "ok::one");
        assert_eq!(found.failures[0].file, None);
    }
}
