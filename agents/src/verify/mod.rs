//! The test-output parsers of the `verify` step: what failed, where, and why.
//!
//! A verify step runs the project's tests (a shell command) and keeps the log. [`parse`]
//! reads that log, and the report file the user named (JUnit XML, a JSON report), into a
//! list of [`Failure`]s (test name, file, line, message) and the passed/failed counts the
//! output states. [`signature`] turns the failing set into a short stable id, so two runs
//! failing the same tests are recognised as the same failure.
//!
//! One module per format: [`Parser::Cargo`] (libtest's human and JSON output,
//! cargo-nextest's human output), [`Parser::Pytest`], [`Parser::Go`] (`go test -json`,
//! and the plain output), [`Parser::Jest`] (the default reporter and `--json`),
//! [`Parser::Tap`] (TAP 13/14) and [`Parser::Junit`] (JUnit XML). [`Parser::Auto`] picks
//! one from the command, else from the log itself.
//!
//! All input is untrusted: every parser is linear in its input, never panics, skips what
//! it does not understand, and bounds what it keeps ([`FAILURES_MAX`],
//! [`MESSAGE_BYTES_MAX`]).

mod cargo;
mod go;
mod jest;
mod junit;
mod pytest;
mod tap;

use regex::Regex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::sync::LazyLock;

/// At most this many failures are kept in [`Parsed::failures`]: more are dropped, keeping
/// the first ones in sorted order (by name, then file, then line). [`Parsed::failed`]
/// still says how many the output reported.
pub const FAILURES_MAX: usize = 500;

/// A failure's message (and, as a guard against absurd input, its name and file) is cut
/// to at most this many bytes, on a char boundary.
pub const MESSAGE_BYTES_MAX: usize = 4096;

/// The test-output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Parser {
    /// Guess from the command, else from the log.
    Auto,
    /// `cargo test` (libtest's human or JSON output) and cargo-nextest.
    Cargo,
    /// pytest's terminal output.
    Pytest,
    /// `go test -json` (and go test's plain output).
    Go,
    /// jest's default reporter and its `--json` output.
    Jest,
    /// The Test Anything Protocol, 13 or 14.
    Tap,
    /// JUnit XML.
    Junit,
}

impl Parser {
    /// Every parser's name, as [`Parser::parse_name`] takes them.
    pub const NAMES: [&'static str; 7] = ["auto", "cargo", "pytest", "go", "jest", "tap", "junit"];

    /// The parser of this name (`auto`, `cargo`, `pytest`, `go`, `jest`, `tap`, `junit`).
    pub fn parse_name(name: &str) -> Option<Parser> {
        let name = name.trim();
        [
            Parser::Auto,
            Parser::Cargo,
            Parser::Pytest,
            Parser::Go,
            Parser::Jest,
            Parser::Tap,
            Parser::Junit,
        ]
        .into_iter()
        .find(|p| p.as_str().eq_ignore_ascii_case(name))
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Parser::Auto => "auto",
            Parser::Cargo => "cargo",
            Parser::Pytest => "pytest",
            Parser::Go => "go",
            Parser::Jest => "jest",
            Parser::Tap => "tap",
            Parser::Junit => "junit",
        }
    }
}

/// One failing test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The test's name as its runner names it (`tests::wrong_sum`,
    /// `tests/test_calc.py::test_wrong_sum`, `example.com/calc.TestWrongSum`,
    /// `sum › wrong sum`, ...).
    pub name: String,
    /// The file where it failed, as the output spells it (relative or absolute).
    pub file: Option<String>,
    /// The line in `file`.
    pub line: Option<u32>,
    /// Why: the assertion or panic message, at most [`MESSAGE_BYTES_MAX`] bytes.
    pub message: String,
}

/// What a log says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Parsed {
    /// The parser actually used: [`Parser::Auto`] resolved, or left as `Auto` when no
    /// format was recognised.
    pub parser: Parser,
    /// The failures, sorted by name then file then line, deduplicated, at most
    /// [`FAILURES_MAX`].
    pub failures: Vec<Failure>,
    /// Tests passed, when the output says.
    pub passed: Option<u64>,
    /// Tests failed, when the output says.
    pub failed: Option<u64>,
    /// [`signature`] of every failure found, before the cap.
    pub signature: String,
    /// Distinct failures found, before the cap.
    pub total: usize,
}

/// Parses a test run's output.
///
/// `cmd` is the shell command that produced `log`: [`Parser::Auto`] guesses from it
/// (`cargo test`/`cargo nextest` → cargo, `pytest`/`python -m pytest` → pytest,
/// `go test` → go, `jest`/`npx jest` → jest, `npm test` and the like → jest when the log
/// is jest's), else sniffs the log (libtest JSON lines or `test result:` lines, pytest's
/// `=====` summary, go test -json `{"Action":` lines, jest's `Tests:` summary or `--json`
/// object, `TAP version`/`ok N`/`not ok N`, `<testsuite`/`<testsuites`).
///
/// `report` is the text of an extra report file the user named (JUnit XML is usually
/// written to a file, not stdout). When its format is recognised (the named parser's, or
/// else any), the report is what is parsed; otherwise the log is.
pub fn parse(parser: Parser, cmd: &str, log: &str, report: Option<&str>) -> Parsed {
    if let Some(report) = report.filter(|r| !r.trim().is_empty()) {
        let report = strip_ansi(report);
        let format = if parser != Parser::Auto && sniff(parser, &report) {
            Some(parser)
        } else {
            sniff_any(&report)
        };
        if let Some(format) = format {
            return finish(format, run(format, &report));
        }
    }
    let log = strip_ansi(log);
    let format = match parser {
        Parser::Auto => auto(cmd, &log),
        explicit => explicit,
    };
    if format == Parser::Auto {
        return finish(Parser::Auto, Found::default());
    }
    finish(format, run(format, &log))
}

/// A stable id of the failing set: the first 16 hex digits of the SHA-256 of the sorted,
/// deduplicated failure names (files, lines and messages change from run to run and are
/// left out). Empty when there are no failures.
pub fn signature(failures: &[Failure]) -> String {
    let mut names: Vec<&str> = failures.iter().map(|f| f.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        return String::new();
    }
    let mut hasher = Sha256::new();
    for name in names {
        // Length-prefixed, so no two different sets hash the same bytes.
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
    }
    hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What one format's parser found, before sorting and capping.
#[derive(Debug, Default)]
struct Found {
    failures: Vec<Failure>,
    passed: Option<u64>,
    failed: Option<u64>,
}

fn run(format: Parser, text: &str) -> Found {
    match format {
        Parser::Auto => Found::default(),
        Parser::Cargo => cargo::parse(text),
        Parser::Pytest => pytest::parse(text),
        Parser::Go => go::parse(text),
        Parser::Jest => jest::parse(text),
        Parser::Tap => tap::parse(text),
        Parser::Junit => junit::parse(text),
    }
}

fn sniff(format: Parser, text: &str) -> bool {
    match format {
        Parser::Auto => false,
        Parser::Cargo => cargo::sniff(text),
        Parser::Pytest => pytest::sniff(text),
        Parser::Go => go::sniff(text),
        Parser::Jest => jest::sniff(text),
        Parser::Tap => tap::sniff(text),
        Parser::Junit => junit::sniff(text),
    }
}

/// The first format whose marks the text bears, the most specific marks first.
fn sniff_any(text: &str) -> Option<Parser> {
    [
        Parser::Go,
        Parser::Cargo,
        Parser::Junit,
        Parser::Pytest,
        Parser::Jest,
        Parser::Tap,
    ]
    .into_iter()
    .find(|&p| sniff(p, text))
}

/// [`Parser::Auto`]'s choice: the command's tool when the log bears its marks, else what
/// the log looks like, else the command's tool all the same, else `Auto`.
fn auto(cmd: &str, log: &str) -> Parser {
    let guess = guess_from_command(cmd, log);
    if let Some(guess) = guess
        && sniff(guess, log)
    {
        return guess;
    }
    sniff_any(log).or(guess).unwrap_or(Parser::Auto)
}

/// The test runner a shell command runs, by its words: each `;`/`&&`/`||`/`|` segment is
/// looked at in turn.
fn guess_from_command(cmd: &str, log: &str) -> Option<Parser> {
    for segment in cmd.split(['\n', ';', '&', '|']) {
        let words: Vec<&str> = segment
            .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '`' | '"' | '\''))
            .filter(|w| !w.is_empty())
            .collect();
        let base = |w: &str| -> String { w.rsplit('/').next().unwrap_or(w).to_ascii_lowercase() };
        let after = |i: usize, wanted: &[&str]| words[i + 1..].iter().any(|w| wanted.contains(w));
        for (i, word) in words.iter().enumerate() {
            let word = base(word);
            match word.as_str() {
                "cargo" if after(i, &["test", "t", "nextest"]) => return Some(Parser::Cargo),
                "cargo-nextest" => return Some(Parser::Cargo),
                "go" if after(i, &["test"]) => return Some(Parser::Go),
                "pytest" | "py.test" => return Some(Parser::Pytest),
                "-m" if words.get(i + 1).is_some_and(|w| *w == "pytest") => {
                    return Some(Parser::Pytest);
                }
                "jest" => return Some(Parser::Jest),
                "npm" | "yarn" | "pnpm" | "bun" if after(i, &["test", "t"]) && jest::sniff(log) => {
                    return Some(Parser::Jest);
                }
                _ => {}
            }
        }
    }
    None
}

/// Sorts, deduplicates, caps and stamps the parser.
fn finish(parser: Parser, found: Found) -> Parsed {
    let mut failures = found.failures;
    failures.sort_by(|a, b| (&a.name, &a.file, a.line).cmp(&(&b.name, &b.file, b.line)));
    failures.dedup_by(|b, a| a.name == b.name && a.file == b.file && a.line == b.line);
    // The signature and the count see every failure: two runs that differ only past the
    // cap must not look alike.
    let signature = signature(&failures);
    let total = failures.len();
    failures.truncate(FAILURES_MAX);
    Parsed {
        parser,
        failures,
        passed: found.passed,
        failed: found.failed,
        signature,
        total,
    }
}

/// A failure, every field bounded and cleaned of terminal colours.
fn failure(name: &str, file: Option<&str>, line: Option<u32>, message: &str) -> Failure {
    let clean = |s: &str| truncate(strip_ansi(s).trim(), MESSAGE_BYTES_MAX);
    Failure {
        name: clean(name),
        file: file.map(clean).filter(|f| !f.is_empty()),
        line: line.filter(|&l| l > 0),
        message: clean(message),
    }
}

/// `s` cut to at most `max` bytes, on a char boundary.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// `text` without ANSI escape sequences (colours, cursor moves, OSC links).
fn strip_ansi(text: &str) -> Cow<'_, str> {
    if !text.contains('\u{1b}') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            // CSI: parameters, then one final byte in @..~.
            Some('[') => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            // OSC: up to BEL or ESC \.
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' {
                        if chars.peek() == Some(&'\\') {
                            chars.next();
                        }
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    Cow::Owned(out)
}

/// `path:line` or `path:line:col` (the whole string) split into path and line.
fn parse_location(s: &str) -> Option<(&str, u32)> {
    let s = s.trim();
    let mut parts = s.rsplitn(3, ':');
    let last = parts.next()?;
    let middle = parts.next()?;
    let numeric = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if let Some(first) = parts.next()
        && numeric(last)
        && numeric(middle)
        && !first.is_empty()
        && !first.starts_with(':')
    {
        return Some((first, middle.parse().ok()?));
    }
    if numeric(last) {
        // `path:line`, where path may itself hold a colon (`C:\x.rs:3`).
        let (path, line) = s.rsplit_once(':')?;
        if !path.is_empty() && !path.starts_with(':') {
            return Some((path, line.parse().ok()?));
        }
    }
    None
}

/// The location in a stack frame: `at fn (path:line:col)`, `at path:line:col`,
/// `fn (path:line:col)`, Go's `/path/x.go:24 +0x1d`.
fn frame_location(frame: &str) -> Option<(&str, u32)> {
    let frame = frame.trim();
    let frame = frame.strip_prefix("at ").unwrap_or(frame);
    let inner = match (frame.rfind('('), frame.ends_with(')')) {
        (Some(open), true) => &frame[open + 1..frame.len() - 1],
        _ => frame.split(' ').next().unwrap_or(frame),
    };
    let (path, line) = parse_location(inner)?;
    if path.starts_with("node:") || path.contains('<') || path.contains(' ') {
        return None;
    }
    Some((path, line))
}

/// Whether two spellings of a path name the same file (`./a/b.js`, `a/b.js`,
/// `/abs/a/b.js`).
fn same_file(a: &str, b: &str) -> bool {
    let norm = |p: &str| -> String {
        let p = p.replace('\\', "/");
        p.strip_prefix("./").unwrap_or(&p).to_string()
    };
    let (a, b) = (norm(a), norm(b));
    if a.is_empty() || b.is_empty() {
        return false;
    }
    a == b || a.ends_with(&format!("/{b}")) || b.ends_with(&format!("/{a}"))
}

/// Every `path.ext:line` in `text`, in order.
fn locations_in(text: &str) -> Vec<(String, u32)> {
    static LOCATION: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"((?:[A-Za-z]:)?[\w.@+~/\\-]*\w\.[A-Za-z][\w]*):(\d+)")
            .expect("a valid pattern")
    });
    LOCATION
        .captures_iter(text)
        .filter_map(|c| {
            let path = c.get(1)?.as_str();
            let line = c.get(2)?.as_str().parse().ok()?;
            Some((path.to_string(), line))
        })
        .collect()
}

/// The sum of the numbers before `word` in a summary like `2 failed, 2 passed in 0.05s`
/// or `2 passed; 2 failed; 0 ignored`; `None` when `word` is not there.
fn count_of(summary: &str, words: &[&str]) -> Option<u64> {
    let mut total: Option<u64> = None;
    for piece in summary.split([',', ';']) {
        let mut tokens = piece.split_whitespace();
        let (Some(number), Some(word)) = (tokens.next(), tokens.next()) else {
            continue;
        };
        let word = word.trim_end_matches(|c: char| !c.is_alphanumeric());
        if let Ok(n) = number.parse::<u64>()
            && words.contains(&word)
        {
            total = Some(total.unwrap_or(0).saturating_add(n));
        }
    }
    total
}

/// Adds two optional counts: `None` only when both are.
fn add_counts(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

/// The lines of `lines`, with the smallest common indentation removed and the blank
/// lines at either end dropped, joined.
fn dedent(lines: &[&str]) -> String {
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let body: Vec<&str> = lines
        .iter()
        .map(|l| l.get(indent..).unwrap_or_else(|| l.trim_start()).trim_end())
        .collect();
    let start = body
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(body.len());
    let end = body
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(start, |e| e + 1);
    body[start..end].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str) -> Failure {
        failure(name, Some("a.rs"), Some(1), "m")
    }

    #[test]
    fn names_round_trip() {
        for name in Parser::NAMES {
            let p = Parser::parse_name(name).expect("a known name");
            assert_eq!(p.as_str(), name);
            let json = serde_json::to_string(&p).expect("serializes");
            assert_eq!(json, format!("\"{name}\""));
        }
        assert_eq!(Parser::parse_name("nope"), None);
        assert_eq!(Parser::parse_name(""), None);
        assert_eq!(Parser::parse_name(" Cargo "), Some(Parser::Cargo));
    }

    #[test]
    fn signature_is_order_and_duplicate_blind() {
        let one = signature(&[f("a"), f("b"), f("a")]);
        let two = signature(&[f("b"), f("a")]);
        assert_eq!(one, two);
        assert_eq!(one.len(), 16);
        assert!(
            one.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(one, signature(&[f("a")]));
        // No two sets share bytes by concatenation.
        assert_ne!(signature(&[f("ab"), f("c")]), signature(&[f("a"), f("bc")]));
        assert_eq!(signature(&[]), "");
        let mut moved = f("a");
        moved.line = Some(99);
        moved.message = "other".into();
        assert_eq!(signature(&[moved, f("b")]), two);
    }

    #[test]
    fn truncate_stays_on_char_boundaries() {
        let s = "é".repeat(10); // 20 bytes
        assert_eq!(truncate(&s, 5), "éé");
        assert_eq!(truncate(&s, 100), s);
        assert_eq!(truncate("abc", 0), "");
        let long = failure("n", None, None, &"ü".repeat(MESSAGE_BYTES_MAX));
        assert!(long.message.len() <= MESSAGE_BYTES_MAX);
        assert!(long.message.len() > MESSAGE_BYTES_MAX - 4);
    }

    #[test]
    fn ansi_is_stripped() {
        assert_eq!(strip_ansi("\u{1b}[31mred\u{1b}[0m text"), "red text");
        assert_eq!(
            strip_ansi("a\u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{1b}\\b"),
            "alinkb"
        );
        assert_eq!(strip_ansi("dangling \u{1b}["), "dangling ");
        assert_eq!(strip_ansi("\u{1b}"), "");
    }

    #[test]
    fn locations_parse() {
        assert_eq!(parse_location("src/lib.rs:27:9"), Some(("src/lib.rs", 27)));
        assert_eq!(parse_location("calc.go:8"), Some(("calc.go", 8)));
        assert_eq!(parse_location(r"C:\x\y.rs:3:1"), Some((r"C:\x\y.rs", 3)));
        assert_eq!(parse_location("nothing"), None);
        assert_eq!(parse_location(":1:2"), None);
        assert_eq!(parse_location("a.rs:99999999999"), None);
        assert_eq!(
            frame_location("at Object.toBe (sum.test.js:13:23)"),
            Some(("sum.test.js", 13))
        );
        assert_eq!(frame_location("at node:internal/x:1:2"), None);
        assert_eq!(
            frame_location("\t/tmp/a_test.go:24 +0x1d"),
            Some(("/tmp/a_test.go", 24))
        );
        assert_eq!(
            locations_in("see tests/test_calc.py:13: and calc.py:6"),
            vec![("tests/test_calc.py".into(), 13), ("calc.py".into(), 6)]
        );
        assert!(same_file("./sum.test.js", "sum.test.js"));
        assert!(same_file("/tmp/x/sum.test.js", "sum.test.js"));
        assert!(!same_file("/tmp/x/notsum.test.js", "sum.test.js"));
        assert!(!same_file("", "a"));
    }

    #[test]
    fn counts_parse() {
        assert_eq!(
            count_of("2 failed, 2 passed in 0.05s", &["passed"]),
            Some(2)
        );
        assert_eq!(
            count_of("2 passed; 3 failed; 0 ignored", &["failed"]),
            Some(3)
        );
        assert_eq!(
            count_of("1 failed, 2 errors", &["failed", "error", "errors"]),
            Some(3)
        );
        assert_eq!(count_of("nothing here", &["passed"]), None);
        assert_eq!(
            count_of("18446744073709551615 passed, 5 passed", &["passed"]),
            Some(u64::MAX)
        );
        assert_eq!(add_counts(None, Some(2)), Some(2));
        assert_eq!(add_counts(None, None), None);
    }

    #[test]
    fn commands_are_guessed() {
        let g = |c: &str| guess_from_command(c, "");
        assert_eq!(g("cargo test --workspace"), Some(Parser::Cargo));
        assert_eq!(g("cargo nextest run"), Some(Parser::Cargo));
        assert_eq!(g("RUST_LOG=x cargo t"), Some(Parser::Cargo));
        assert_eq!(g("cargo build && go test ./..."), Some(Parser::Go));
        assert_eq!(g("python -m pytest -q"), Some(Parser::Pytest));
        assert_eq!(g("/venv/bin/pytest tests"), Some(Parser::Pytest));
        assert_eq!(g("npx jest --ci"), Some(Parser::Jest));
        assert_eq!(g("npm test"), None);
        assert_eq!(
            guess_from_command("npm test", "Tests:  1 failed, 1 total"),
            Some(Parser::Jest)
        );
        assert_eq!(g("make check"), None);
        assert_eq!(g(""), None);
        assert_eq!(g("cargo build"), None);
    }

    #[test]
    fn nothing_recognised_stays_auto() {
        let p = parse(Parser::Auto, "make", "all good\n", None);
        assert_eq!(p.parser, Parser::Auto);
        assert!(p.failures.is_empty());
        assert_eq!((p.passed, p.failed), (None, None));
        // The command alone is enough to name the parser.
        assert_eq!(
            parse(Parser::Auto, "cargo test", "error[E0425]\n", None).parser,
            Parser::Cargo
        );
        // A blank report is no report.
        assert_eq!(
            parse(Parser::Auto, "make", "", Some("  \n")).parser,
            Parser::Auto
        );
    }

    #[test]
    fn finish_sorts_dedups_and_caps() {
        let mut failures: Vec<Failure> = (0..FAILURES_MAX + 50)
            .rev()
            .map(|i| failure(&format!("t{i:05}"), Some("f"), Some(1), "m"))
            .collect();
        failures.push(failure("t00000", Some("f"), Some(1), "duplicate"));
        failures.push(failure("t00000", Some("f"), Some(2), "other line"));
        let parsed = finish(
            Parser::Tap,
            Found {
                failures,
                passed: None,
                failed: Some(9),
            },
        );
        assert_eq!(parsed.failures.len(), FAILURES_MAX);
        assert_eq!(parsed.failures[0].name, "t00000");
        assert_eq!(parsed.failures[0].message, "m");
        assert_eq!(parsed.failures[1].line, Some(2));
        assert_eq!(parsed.failures[2].name, "t00001");
        assert_eq!(
            parsed.failures[FAILURES_MAX - 1].name,
            format!("t{:05}", FAILURES_MAX - 2)
        );
        assert_eq!(parsed.failed, Some(9));
    }
}

/// Every parser against input no real tool writes: empty, cut short, garbage, huge.
#[cfg(test)]
mod robustness {
    use super::*;
    use std::time::{Duration, Instant};

    const ALL: [Parser; 7] = [
        Parser::Auto,
        Parser::Cargo,
        Parser::Pytest,
        Parser::Go,
        Parser::Jest,
        Parser::Tap,
        Parser::Junit,
    ];

    const FIXTURES: [&str; 9] = [
        include_str!("../../tests/fixtures/verify/cargo-human.txt"),
        include_str!("../../tests/fixtures/verify/cargo-json.txt"),
        include_str!("../../tests/fixtures/verify/cargo-nextest.txt"),
        include_str!("../../tests/fixtures/verify/pytest.txt"),
        include_str!("../../tests/fixtures/verify/junit-pytest.xml"),
        include_str!("../../tests/fixtures/verify/go-test.json"),
        include_str!("../../tests/fixtures/verify/jest.txt"),
        include_str!("../../tests/fixtures/verify/jest-json.txt"),
        include_str!("../../tests/fixtures/verify/tap-node.txt"),
    ];

    /// A small deterministic generator (xorshift64).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// What holds for any result.
    fn well_formed(parsed: &Parsed) {
        assert!(parsed.failures.len() <= FAILURES_MAX);
        for pair in parsed.failures.windows(2) {
            let key = |f: &Failure| (f.name.clone(), f.file.clone(), f.line);
            assert!(
                key(&pair[0]) < key(&pair[1]),
                "sorted and deduplicated: {pair:?}"
            );
        }
        for f in &parsed.failures {
            assert!(f.message.len() <= MESSAGE_BYTES_MAX);
            assert!(f.name.len() <= MESSAGE_BYTES_MAX);
            assert_ne!(f.line, Some(0));
        }
    }

    #[test]
    fn empty_input_finds_nothing() {
        for p in ALL {
            for parsed in [
                parse(p, "", "", None),
                parse(p, "cargo test", "\n\n", Some("")),
            ] {
                assert!(parsed.failures.is_empty(), "{p:?}");
                assert_eq!((parsed.passed, parsed.failed), (None, None), "{p:?}");
            }
            assert_eq!(parse(p, "", "", None).parser, p);
        }
    }

    #[test]
    fn a_truncated_last_line_loses_only_that_line() {
        let json = FIXTURES[1];
        let cut = json
            .find("\"tests::explodes\", \"event\": \"failed\"")
            .expect("in the fixture");
        let parsed = parse(Parser::Auto, "cargo test", &json[..cut + 20], None);
        assert_eq!(parsed.parser, Parser::Cargo);
        let names: Vec<&str> = parsed.failures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["tests::wrong_sum"]);
        assert_eq!(parsed.failures[0].line, Some(21));

        let go = FIXTURES[5];
        let cut = go.rfind(
            "\"Action\":\"fail\",\"Package\":\"example.com/calc\",\"Test\":\"TestThirdPanics\"",
        );
        let parsed = parse(
            Parser::Go,
            "",
            &go[..cut.expect("in the fixture") + 10],
            None,
        );
        let names: Vec<&str> = parsed.failures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["example.com/calc.TestWrongSum"]);

        let tap = FIXTURES[8];
        let cut = tap
            .find("TestContext.<anonymous> (/tmp/vfx/node/calc.test.js:19")
            .expect("in the fixture");
        let parsed = parse(Parser::Tap, "", &tap[..cut + 30], None);
        let names: Vec<&str> = parsed.failures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["parseAge throws", "sum > wrong sum"]);
    }

    #[test]
    fn every_cut_of_every_fixture_parses() {
        for text in FIXTURES {
            let mut cut = 0;
            while cut <= text.len() {
                if text.is_char_boundary(cut) {
                    for p in ALL {
                        let parsed = parse(p, "", &text[..cut], None);
                        well_formed(&parsed);
                        assert!(parsed.failures.len() <= 3, "{p:?} at {cut}: {parsed:?}");
                    }
                }
                cut += 7;
            }
        }
    }

    const GARBAGE_ROUNDS: usize = 300;

    #[test]
    fn garbage_never_panics() {
        const TOKENS: [&str; 53] = [
            "\u{3000}",
            "\u{a0}",
            "\u{85}",
            "\r",
            "E  \u{3000}",
            "not ok ",
            "ok ",
            "1..",
            "---",
            "...",
            "  ",
            "    ",
            "\n",
            "\n",
            "\n",
            "{",
            "}",
            "\"Action\":\"fail\",",
            "\"Package\":",
            "{ \"type\": \"test\", ",
            "\"event\": \"failed\"",
            "<testsuite>",
            "<testcase name='a'>",
            "</testcase>",
            "<failure",
            "/>",
            "● ",
            " › ",
            "FAILED ",
            "thread '",
            "' panicked at ",
            ":",
            "12",
            "é",
            "\u{1b}[31m",
            "=== RUN ",
            "____ t ____",
            "E   ",
            "--- FAIL: ",
            "at (",
            ")",
            "x.py:3: ",
            "a_test.go:4: ",
            "test result: ",
            "Tests: ",
            "\t",
            "#",
            "\\",
            "'",
            "\"",
            "---- t stdout ----",
            "=== FAILURES ===",
            "FAIL\tpkg\t0.1s",
        ];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..GARBAGE_ROUNDS {
            let mut text = String::new();
            for _ in 0..rng.below(600) {
                text.push_str(TOKENS[rng.below(TOKENS.len())]);
            }
            for p in ALL {
                well_formed(&parse(p, "", &text, None));
                well_formed(&parse(p, "", "", Some(&text)));
            }
        }
    }

    /// 10 MB of lowercase words, digits and punctuation: no runner's marks.
    fn junk(bytes: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789 .,:;/_-=+()[]{}<>";
        let mut rng = Rng(42);
        let mut out = String::with_capacity(bytes + 200);
        while out.len() < bytes {
            for _ in 0..rng.below(120) {
                out.push(char::from(ALPHABET[rng.below(ALPHABET.len())]));
            }
            out.push('\n');
        }
        out
    }

    #[test]
    fn ten_megabytes_of_junk_is_quick_and_empty() {
        let junk = junk(10 << 20);
        let start = Instant::now();
        for p in ALL {
            let parsed = parse(p, "make test", &junk, None);
            assert!(
                parsed.failures.is_empty(),
                "{p:?}: {:?}",
                parsed.failures.first()
            );
        }
        let parsed = parse(Parser::Auto, "", "", Some(&junk));
        assert!(parsed.failures.is_empty());
        assert_eq!(parsed.parser, Parser::Auto);
        // Seven parsers over 10 MB each, unoptimised: seconds, not minutes.
        let took = start.elapsed();
        assert!(took < Duration::from_secs(20), "took {took:?}");
    }

    #[test]
    fn adversarial_shapes_stay_linear() {
        let n = 50_000;
        let cases: Vec<(Parser, String)> = vec![
            (Parser::Junit, "<testsuite>".repeat(n)),
            (
                Parser::Jest,
                format!("{}{}", "{\"testResults\":".repeat(n), "\n"),
            ),
            (
                Parser::Cargo,
                format!(
                    "test x ... FAILED\n{}",
                    "thread 'y' panicked at a.rs:1:1:\nm\n".repeat(n)
                ),
            ),
            (
                Parser::Jest,
                "FAIL a.test.js\n  ● t\n    at (a.test.js:1:1)\n".repeat(n),
            ),
            (
                Parser::Tap,
                (0..2000)
                    .map(|d| format!("{}not ok {d} - t\n", " ".repeat(2000 - d)))
                    .collect(),
            ),
            (
                Parser::Pytest,
                format!(
                    "=== FAILURES ===\n{}",
                    "___ t ___\nE   x\na.py:1: E\nFAILED a.py::t - x\n".repeat(n)
                ),
            ),
            (
                Parser::Go,
                "--- FAIL: TestA (0.00s)\nFAIL\tp\t0.1s\n".repeat(n),
            ),
            (
                Parser::Go,
                (0..n)
                    .map(|i| {
                        format!("--- FAIL: TestA (0s)\n--- FAIL: TestA/b (0s)\nFAIL\tp{i}\t1s\n")
                    })
                    .collect(),
            ),
            (
                Parser::Tap,
                format!(
                    "not ok 1 - deep\n  ---\n{}  ...\n",
                    (0..2000)
                        .map(|d| format!("  {}k:\n", " ".repeat(d)))
                        .collect::<String>()
                ),
            ),
            (
                Parser::Pytest,
                format!(
                    "=== FAILURES ===\n___ t ___\n{}",
                    "E  \u{3000}\u{3000}\u{3000}x\n".repeat(n)
                ),
            ),
        ];
        for (p, text) in cases {
            let start = Instant::now();
            let parsed = parse(p, "", &text, None);
            well_formed(&parsed);
            let took = start.elapsed();
            assert!(took < Duration::from_secs(10), "{p:?} took {took:?}");
        }
    }

    #[test]
    fn a_huge_failure_count_is_capped() {
        let n = 10_000;
        let mut log: String = (0..n)
            .rev()
            .map(|i| {
                format!(
                    "{{ \"type\": \"test\", \"name\": \"t{i:05}\", \"event\": \"failed\", \"stdout\": \"thread 't{i:05}' panicked at src/lib.rs:{}:1:\\nno\\n\" }}\n",
                    i + 1
                )
            })
            .collect();
        log.push_str(&format!(
            "{{ \"type\": \"suite\", \"event\": \"failed\", \"passed\": 1, \"failed\": {n} }}\n"
        ));
        let parsed = parse(Parser::Auto, "cargo test", &log, None);
        assert_eq!(parsed.parser, Parser::Cargo);
        assert_eq!(parsed.failures.len(), FAILURES_MAX);
        assert_eq!(parsed.failures[0].name, "t00000");
        assert_eq!(parsed.failures[0].line, Some(1));
        assert_eq!(
            parsed.failures[FAILURES_MAX - 1].name,
            format!("t{:05}", FAILURES_MAX - 1)
        );
        assert_eq!((parsed.passed, parsed.failed), (Some(1), Some(n)));

        let tap: String = (1..=3000)
            .map(|i| format!("not ok {i} - case {i:04}\n"))
            .collect();
        let parsed = parse(
            Parser::Tap,
            "",
            &format!("TAP version 14\n{tap}1..3000\n"),
            None,
        );
        assert_eq!(parsed.failures.len(), FAILURES_MAX);
        assert_eq!(parsed.failed, Some(3000));
    }
}
