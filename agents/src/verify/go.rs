//! `go test` output: the `-json` events (`{"Action":"fail","Package":...,"Test":...}`,
//! whose `output` events carry the test's log lines, `    foo_test.go:12: message`, or its
//! panic and stack), and the plain output (`--- FAIL: TestX (0.00s)` and the lines under
//! it, `FAIL\tpkg\t0.01s`). A failing subtest stands for its parents; a package that
//! failed with no failing test (a build error, a crash in `TestMain`) is a failure named
//! after the package.

use super::{Failure, Found, dedent, failure, frame_location, parse_location};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

/// Lines kept per test or package (the first ones).
const OUTPUT_LINES_MAX: usize = 400;
/// Bytes kept per test or package.
const OUTPUT_BYTES_MAX: usize = 64 * 1024;

/// Whether the text looks like `go test` output.
pub(super) fn sniff(text: &str) -> bool {
    text.lines().any(|line| {
        let t = line.trim_start();
        (t.starts_with('{') && t.contains("\"Action\":") && t.contains("\"Package\":"))
            || t.starts_with("--- FAIL: ")
            || t.starts_with("FAIL\t")
            || t.starts_with("ok  \t")
    })
}

/// One `go test -json` event (unknown fields ignored).
#[derive(Deserialize)]
struct Event {
    #[serde(rename = "Action")]
    action: String,
    #[serde(rename = "Package", default)]
    package: Option<String>,
    #[serde(rename = "Test", default)]
    test: Option<String>,
    #[serde(rename = "Output", default)]
    output: Option<String>,
}

/// Lines kept under a cap.
#[derive(Default)]
struct Output {
    lines: Vec<String>,
    bytes: usize,
}

impl Output {
    fn push(&mut self, line: &str) {
        if self.lines.len() < OUTPUT_LINES_MAX && self.bytes < OUTPUT_BYTES_MAX {
            self.bytes += line.len();
            self.lines.push(line.to_string());
        }
    }
}

/// A test seen in the output.
#[derive(Default)]
struct TestRun {
    package: Option<String>,
    name: String,
    output: Output,
    failed: bool,
    passed: bool,
}

/// A package seen in the output.
#[derive(Default)]
struct Package {
    output: Output,
    failed: bool,
}

#[derive(Default)]
struct Run {
    tests: Vec<TestRun>,
    index: HashMap<(Option<String>, String), usize>,
    packages: Vec<(String, Package)>,
    package_index: HashMap<String, usize>,
    /// Lines outside any event (the compiler's errors go to stderr).
    stray: Output,
}

impl Run {
    fn test(&mut self, package: Option<&str>, name: &str) -> &mut TestRun {
        let key = (package.map(str::to_string), name.to_string());
        let at = match self.index.get(&key) {
            Some(&at) => at,
            None => {
                self.tests.push(TestRun {
                    package: key.0.clone(),
                    name: key.1.clone(),
                    ..TestRun::default()
                });
                self.index.insert(key, self.tests.len() - 1);
                self.tests.len() - 1
            }
        };
        &mut self.tests[at]
    }

    fn package(&mut self, name: &str) -> &mut Package {
        let at = match self.package_index.get(name) {
            Some(&at) => at,
            None => {
                self.packages.push((name.to_string(), Package::default()));
                self.package_index
                    .insert(name.to_string(), self.packages.len() - 1);
                self.packages.len() - 1
            }
        };
        &mut self.packages[at].1
    }
}

pub(super) fn parse(text: &str) -> Found {
    let mut run = Run::default();
    let mut json = false;
    for line in text.lines() {
        let t = line.trim();
        let event = t
            .starts_with('{')
            .then(|| serde_json::from_str::<Event>(t).ok())
            .flatten();
        let Some(event) = event else {
            if t.contains(".go:") {
                run.stray.push(line);
            }
            continue;
        };
        json = true;
        let package = event.package.as_deref().filter(|p| !p.is_empty());
        let output = event
            .output
            .as_deref()
            .map(|o| o.strip_suffix('\n').unwrap_or(o));
        match (event.test.as_deref(), package) {
            (Some(test), _) => {
                let entry = run.test(package, test);
                match event.action.as_str() {
                    "output" => {
                        if let Some(o) = output {
                            entry.output.push(o);
                        }
                    }
                    "fail" => entry.failed = true,
                    "pass" => entry.passed = true,
                    _ => {}
                }
            }
            (None, Some(package)) => {
                let entry = run.package(package);
                match event.action.as_str() {
                    "output" => {
                        if let Some(o) = output {
                            entry.output.push(o);
                        }
                    }
                    "fail" => entry.failed = true,
                    _ => {}
                }
            }
            (None, None) => {
                if let Some(o) = output
                    && o.contains(".go:")
                {
                    run.stray.push(o);
                }
            }
        }
    }
    if !json {
        run = parse_plain(text);
    }
    finish(run)
}

/// go test's plain output.
fn parse_plain(text: &str) -> Run {
    let mut run = Run::default();
    let mut current: Option<usize> = None;
    // Tests not yet tied to a package (go prints the package after them).
    let mut pending: Vec<usize> = Vec::new();
    let mut loose = Output::default();
    for line in text.lines() {
        let t = line.trim_start();
        let header = ["=== RUN ", "=== CONT ", "=== NAME ", "=== PAUSE "]
            .iter()
            .find_map(|h| t.strip_prefix(h));
        if let Some(name) = header {
            let name = name.trim();
            if !name.is_empty() {
                current = Some(touch(&mut run, &mut pending, name));
            }
            continue;
        }
        let result = ["--- FAIL: ", "--- PASS: ", "--- SKIP: "]
            .iter()
            .find_map(|h| t.strip_prefix(h).map(|rest| (rest, *h)));
        if let Some((rest, status)) = result {
            let name = rest.split(" (").next().unwrap_or(rest).trim();
            if name.is_empty() {
                continue;
            }
            let at = touch(&mut run, &mut pending, name);
            if let Some(test) = run.tests.get_mut(at) {
                test.failed |= status == "--- FAIL: ";
                test.passed |= status == "--- PASS: ";
            }
            current = Some(at);
            continue;
        }
        let package_line = ["FAIL\t", "ok  \t", "ok\t", "?   \t"]
            .iter()
            .find_map(|p| t.strip_prefix(p).map(|rest| (rest, p.starts_with("FAIL"))));
        if let Some((rest, failed)) = package_line {
            let package = rest.split(['\t', ' ']).next().unwrap_or(rest).to_string();
            if package.is_empty() {
                continue;
            }
            // Tie the tests seen since the last package line to this one.
            for at in pending.drain(..) {
                if let Some(test) = run.tests.get_mut(at) {
                    run.index.remove(&(None, test.name.clone()));
                    test.package = Some(package.clone());
                    run.index
                        .insert((Some(package.clone()), test.name.clone()), at);
                }
            }
            let mut output = std::mem::take(&mut loose);
            output.push(t);
            let entry = run.package(&package);
            entry.failed |= failed;
            for l in output.lines {
                entry.output.push(&l);
            }
            current = None;
            continue;
        }
        if t == "FAIL" || t == "PASS" || t.is_empty() && current.is_none() {
            continue;
        }
        match current.and_then(|at| run.tests.get_mut(at)) {
            Some(test) => test.output.push(line),
            None => {
                if t.contains(".go:") {
                    run.stray.push(line);
                }
                loose.push(line);
            }
        }
    }
    run
}

/// The index of the test `name` not yet tied to a package, made (and marked pending)
/// when new.
fn touch(run: &mut Run, pending: &mut Vec<usize>, name: &str) -> usize {
    if let Some(&at) = run.index.get(&(None, name.to_string())) {
        return at;
    }
    run.test(None, name);
    let at = run.tests.len() - 1;
    pending.push(at);
    at
}

/// Whether `sorted` holds a name under `name/`.
fn has_child(sorted: &[&str], name: &str) -> bool {
    let prefix = format!("{name}/");
    let at = sorted.partition_point(|n| *n < prefix.as_str());
    sorted.get(at).is_some_and(|n| n.starts_with(&prefix))
}

fn finish(run: Run) -> Found {
    let mut found = Found::default();
    // Names per package, sorted, for the subtest checks.
    let mut all: HashMap<Option<&str>, Vec<&str>> = HashMap::new();
    let mut failing: HashMap<Option<&str>, Vec<&str>> = HashMap::new();
    for test in &run.tests {
        let package = test.package.as_deref();
        all.entry(package).or_default().push(&test.name);
        if test.failed {
            failing.entry(package).or_default().push(&test.name);
        }
    }
    for names in all.values_mut().chain(failing.values_mut()) {
        names.sort_unstable();
    }
    let mut passed = 0u64;
    let mut failed = 0u64;
    let mut counted = false;
    let mut failing_packages: HashSet<Option<&str>> = HashSet::new();
    for test in &run.tests {
        let package = test.package.as_deref();
        if test.failed {
            counted = true;
            let children = failing.get(&package).map_or(&[][..], Vec::as_slice);
            if !has_child(children, &test.name) {
                failed += 1;
                failing_packages.insert(package);
                found.failures.push(test_failure(test));
            }
        } else if test.passed {
            counted = true;
            let children = all.get(&package).map_or(&[][..], Vec::as_slice);
            if !has_child(children, &test.name) {
                passed += 1;
            }
        }
    }
    for (name, package) in &run.packages {
        if package.failed && !failing_packages.contains(&Some(name.as_str())) {
            found
                .failures
                .push(package_failure(name, package, &run.stray));
        }
    }
    if counted {
        found.passed = Some(passed);
        found.failed = Some(failed);
    }
    found
}

/// `calc_test.go:19: message` → (`calc_test.go`, 19, `message`).
fn log_line(line: &str) -> Option<(&str, u32, &str)> {
    let t = line.trim();
    let (head, message) = match t.find(": ") {
        Some(at) => (&t[..at], &t[at + 2..]),
        None => (t.strip_suffix(':')?, ""),
    };
    if head.contains(' ') {
        return None;
    }
    let (path, line) = parse_location(head)?;
    path.ends_with(".go").then_some((path, line, message))
}

fn is_framing(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("=== ") || t.starts_with("--- ")
}

fn test_failure(test: &TestRun) -> Failure {
    let name = match &test.package {
        Some(package) => format!("{package}.{}", test.name),
        None => test.name.clone(),
    };
    let lines: Vec<&str> = test.output.lines.iter().map(String::as_str).collect();

    // `t.Error`/`t.Fatal` lines, with their continuation lines.
    let mut first: Option<(&str, u32)> = None;
    let mut messages: Vec<String> = Vec::new();
    let mut log_indent: Option<usize> = None;
    for line in &lines {
        if is_framing(line) {
            log_indent = None;
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        if let Some((file, number, message)) = log_line(line) {
            first.get_or_insert((file, number));
            messages.push(message.to_string());
            log_indent = Some(indent);
        } else if let Some(base) = log_indent
            && indent > base
            && let Some(last) = messages.last_mut()
        {
            last.push('\n');
            last.push_str(line.trim());
        } else {
            log_indent = None;
        }
    }
    if let Some((file, number)) = first {
        return failure(&name, Some(file), Some(number), &messages.join("\n"));
    }

    // A panic: its first line, and the test function's frame in the stack.
    if let Some(at) = lines
        .iter()
        .position(|l| l.trim_start().starts_with("panic: "))
    {
        let message = lines[at].trim();
        let message = match message.rfind(" [recovered") {
            Some(cut) if message.ends_with(']') => &message[..cut],
            _ => message,
        };
        let top = test.name.split('/').next().unwrap_or(&test.name);
        let function = match &test.package {
            Some(package) => format!("{package}.{top}"),
            None => format!(".{top}"),
        };
        let frames = &lines[at..];
        let in_test = frames.windows(2).find_map(|pair| {
            let f = pair[0].trim();
            let named = match &test.package {
                Some(_) => {
                    f.starts_with(&format!("{function}(")) || f.starts_with(&format!("{function}."))
                }
                None => f.contains(&format!("{function}(")) || f.contains(&format!("{function}.")),
            };
            named.then(|| frame_location(pair[1])).flatten()
        });
        let location = in_test.or_else(|| {
            frames
                .iter()
                .filter_map(|l| frame_location(l))
                .find(|(path, _)| path.ends_with("_test.go"))
        });
        let (file, number) = location.map_or((None, None), |(f, l)| (Some(f), Some(l)));
        return failure(&name, file, number, message);
    }

    let body: Vec<&str> = lines.iter().copied().filter(|l| !is_framing(l)).collect();
    let message = dedent(&body);
    let message = if message.is_empty() {
        lines
            .iter()
            .find(|l| l.trim_start().starts_with("--- FAIL"))
            .map_or("", |l| l.trim())
    } else {
        message.as_str()
    };
    failure(&name, None, None, message)
}

fn package_failure(name: &str, package: &Package, stray: &Output) -> Failure {
    let is_status = |l: &&String| {
        let t = l.trim();
        t == "FAIL" || t.starts_with("FAIL\t") || t.starts_with("FAIL ")
    };
    let mut body: Vec<&str> = package
        .output
        .lines
        .iter()
        .filter(|l| !is_status(l))
        .map(String::as_str)
        .collect();
    body.extend(stray.lines.iter().map(String::as_str));
    let mut message = dedent(&body);
    if message.is_empty() {
        let status: Vec<&str> = package.output.lines.iter().map(String::as_str).collect();
        message = dedent(&status);
    }
    let location = body.iter().find_map(|l| log_line(l));
    let (file, number) = location.map_or((None, None), |(f, l, _)| (Some(f), Some(l)));
    failure(name, file, number, &message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(action: &str, test: Option<&str>, output: Option<&str>) -> String {
        let mut v = serde_json::json!({"Action": action, "Package": "p/q"});
        if let Some(t) = test {
            v["Test"] = t.into();
        }
        if let Some(o) = output {
            v["Output"] = o.into();
        }
        v.to_string()
    }

    #[test]
    fn subtests_stand_for_their_parents() {
        let log = [
            ev(
                "output",
                Some("TestA/one"),
                Some("    a_test.go:7: one broke\n"),
            ),
            ev("output", Some("TestA/one"), Some("        more detail\n")),
            ev("fail", Some("TestA/one"), None),
            ev("pass", Some("TestA/two"), None),
            ev("fail", Some("TestA"), None),
            ev("pass", Some("TestB"), None),
            ev("fail", None, None),
        ]
        .join("\n");
        let found = parse(&log);
        assert_eq!(found.failures.len(), 1, "{:?}", found.failures);
        let f = &found.failures[0];
        assert_eq!(f.name, "p/q.TestA/one");
        assert_eq!((f.file.as_deref(), f.line), (Some("a_test.go"), Some(7)));
        assert_eq!(f.message, "one broke\nmore detail");
        assert_eq!((found.passed, found.failed), (Some(2), Some(1)));
    }

    #[test]
    fn a_package_failing_alone_is_a_failure() {
        let log = format!(
            "# p/q\n./q.go:9:2: undefined: x\n{}\n{}\n",
            ev("output", None, Some("FAIL\tp/q [build failed]\n")),
            ev("fail", None, None)
        );
        let found = parse(&log);
        assert_eq!(found.failures.len(), 1);
        let f = &found.failures[0];
        assert_eq!(f.name, "p/q");
        assert_eq!((f.file.as_deref(), f.line), (Some("./q.go"), Some(9)));
        assert!(f.message.contains("undefined: x"), "{}", f.message);
    }

    #[test]
    fn plain_output() {
        let log = "--- FAIL: TestWrong (0.00s)\n    x_test.go:12: got 4, want 5\n\
                   --- FAIL: TestOther (0.00s)\n    x_test.go:20: nope\nFAIL\n\
                   FAIL\texample.com/x\t0.003s\nok  \texample.com/y\t0.002s\n";
        let found = parse(log);
        let names: Vec<&str> = found.failures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            ["example.com/x.TestWrong", "example.com/x.TestOther"]
        );
        assert_eq!(found.failures[0].line, Some(12));
        assert_eq!(found.failures[1].message, "nope");
    }

    #[test]
    fn has_child_is_exact() {
        let names = ["TestA", "TestA-b", "TestA.c", "TestA/x", "TestAB"];
        assert!(has_child(&names, "TestA"));
        assert!(!has_child(&names, "TestAB"));
        assert!(!has_child(&names, "TestA-b"));
        assert!(!has_child(&[], "TestA"));
    }
}
