//! The verify step's parsers against output captured from real runs of each tool on a
//! tiny project with two passing and two failing tests (one failing by assertion, one by
//! panic or exception); `tests/fixtures/verify/README.md` says how each was made.

use palm_agents::verify::{Failure, Parsed, Parser, parse, signature};

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/verify/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What a failure must be: its name, file and line exactly, and words of its message.
struct Want {
    name: &'static str,
    file: &'static str,
    line: u32,
    message: &'static [&'static str],
}

fn check(parsed: &Parsed, parser: Parser, wants: &[Want], counts: (u64, u64)) {
    assert_eq!(parsed.parser, parser, "{parsed:#?}");
    let names: Vec<&str> = parsed.failures.iter().map(|f| f.name.as_str()).collect();
    let wanted: Vec<&str> = wants.iter().map(|w| w.name).collect();
    assert_eq!(names, wanted, "{parsed:#?}");
    for (f, w) in parsed.failures.iter().zip(wants) {
        assert_eq!(f.file.as_deref(), Some(w.file), "{f:#?}");
        assert_eq!(f.line, Some(w.line), "{f:#?}");
        assert!(!f.message.trim().is_empty(), "{f:#?}");
        for words in w.message {
            assert!(f.message.contains(words), "{words:?} not in {f:#?}");
        }
    }
    assert_eq!(
        (parsed.passed, parsed.failed),
        (Some(counts.0), Some(counts.1))
    );
}

const RUST: [Want; 2] = [
    Want {
        name: "tests::explodes",
        file: "src/lib.rs",
        line: 27,
        message: &["boom: the list had 0 items"],
    },
    Want {
        name: "tests::wrong_sum",
        file: "src/lib.rs",
        line: 21,
        message: &[
            "assertion `left == right` failed: two plus two",
            "left: 4",
            "right: 5",
        ],
    },
];

#[test]
fn cargo_human() {
    let log = fixture("cargo-human.txt");
    let parsed = parse(Parser::Cargo, "cargo test", &log, None);
    check(&parsed, Parser::Cargo, &RUST, (2, 2));
    // The backtrace is not part of the message.
    assert!(
        parsed
            .failures
            .iter()
            .all(|f| !f.message.contains("stack backtrace"))
    );
    assert_eq!(
        parsed.failures[1].message,
        "assertion `left == right` failed: two plus two\n  left: 4\n right: 5"
    );
}

#[test]
fn cargo_json() {
    let log = fixture("cargo-json.txt");
    let parsed = parse(Parser::Cargo, "cargo test", &log, None);
    check(&parsed, Parser::Cargo, &RUST, (2, 2));
    assert_eq!(parsed.failures[0].message, "boom: the list had 0 items");
}

#[test]
fn cargo_nextest() {
    let log = fixture("cargo-nextest.txt");
    let parsed = parse(Parser::Cargo, "cargo nextest run", &log, None);
    check(&parsed, Parser::Cargo, &RUST, (2, 2));
    assert_eq!(parsed.failures[0].message, "boom: the list had 0 items");
}

#[test]
fn pytest_terminal() {
    let log = fixture("pytest.txt");
    let parsed = parse(Parser::Pytest, "python -m pytest", &log, None);
    check(
        &parsed,
        Parser::Pytest,
        &[
            Want {
                name: "tests/test_calc.py::test_parse_age_raises",
                file: "tests/test_calc.py",
                line: 17,
                message: &["ValueError: invalid literal for int() with base 10: 'forty'"],
            },
            Want {
                name: "tests/test_calc.py::test_wrong_sum",
                file: "tests/test_calc.py",
                line: 13,
                message: &["assert 4 == 5", "where 4 = add(2, 2)"],
            },
        ],
        (2, 2),
    );
}

#[test]
fn junit_from_pytest() {
    let report = fixture("junit-pytest.xml");
    let log = fixture("pytest.txt");
    let want = [
        Want {
            name: "tests.test_calc.test_parse_age_raises",
            file: "tests/test_calc.py",
            line: 17,
            message: &["ValueError: invalid literal for int() with base 10: 'forty'"],
        },
        Want {
            name: "tests.test_calc.test_wrong_sum",
            file: "tests/test_calc.py",
            line: 13,
            message: &["assert 4 == 5", "where 4 = add(2, 2)"],
        },
    ];
    // The report is what is read when there is one, whatever the log says...
    let parsed = parse(
        Parser::Junit,
        "pytest --junitxml=report.xml",
        &log,
        Some(&report),
    );
    check(&parsed, Parser::Junit, &want, (2, 2));
    // ...and JUnit XML printed to the log is found there too.
    let parsed = parse(Parser::Junit, "cat report.xml", &report, None);
    check(&parsed, Parser::Junit, &want, (2, 2));
}

const GO: [Want; 2] = [
    Want {
        name: "example.com/calc.TestThirdPanics",
        file: "/tmp/vfx/go/calc_test.go",
        line: 24,
        message: &["panic: runtime error: index out of range [2] with length 1"],
    },
    Want {
        name: "example.com/calc.TestWrongSum",
        file: "calc_test.go",
        line: 19,
        message: &["Add(2, 2) = 4, want 5"],
    },
];

#[test]
fn go_test_json() {
    let log = fixture("go-test.json");
    let parsed = parse(Parser::Go, "go test -json ./...", &log, None);
    check(&parsed, Parser::Go, &GO, (2, 2));
    assert!(!parsed.failures[0].message.contains("[recovered]"));
    assert_eq!(parsed.failures[1].message, "Add(2, 2) = 4, want 5");
}

#[test]
fn jest_default_reporter() {
    let log = fixture("jest.txt");
    let parsed = parse(Parser::Jest, "npx jest", &log, None);
    check(
        &parsed,
        Parser::Jest,
        &[
            Want {
                name: "parseAge throws",
                file: "sum.test.js",
                line: 18,
                message: &["TypeError: not a number: forty"],
            },
            Want {
                name: "sum › wrong sum",
                file: "sum.test.js",
                line: 13,
                message: &[
                    "expect(received).toBe(expected)",
                    "Expected: 5",
                    "Received: 4",
                ],
            },
        ],
        (2, 2),
    );
    // The message stops before the code frame.
    assert!(parsed.failures.iter().all(|f| !f.message.contains('|')));
}

#[test]
fn jest_json_wins_over_the_human_output_beside_it() {
    let log = fixture("jest-json.txt");
    let parsed = parse(Parser::Jest, "npx jest --json", &log, None);
    check(
        &parsed,
        Parser::Jest,
        &[
            Want {
                name: "parseAge throws",
                file: "/tmp/vfx/js/sum.test.js",
                line: 18,
                message: &["TypeError: not a number: forty"],
            },
            Want {
                name: "sum › wrong sum",
                file: "/tmp/vfx/js/sum.test.js",
                line: 13,
                message: &[
                    "expect(received).toBe(expected)",
                    "Expected: 5",
                    "Received: 4",
                ],
            },
        ],
        (2, 2),
    );
    assert!(
        parsed
            .failures
            .iter()
            .all(|f| !f.message.contains("node_modules"))
    );
}

#[test]
fn tap_from_node() {
    let log = fixture("tap-node.txt");
    let parsed = parse(Parser::Tap, "node --test --test-reporter=tap", &log, None);
    // `sum` failed only through its subtest; `todo later` is a TODO and `skipped for now`
    // a SKIP: none of them is a failure.
    check(
        &parsed,
        Parser::Tap,
        &[
            Want {
                name: "parseAge throws",
                file: "/tmp/vfx/node/calc.test.js",
                line: 19,
                message: &["TypeError: not a number: forty"],
            },
            Want {
                name: "sum > wrong sum",
                file: "/tmp/vfx/node/calc.test.js",
                line: 10,
                message: &["Expected values to be strictly equal", "4 !== 5"],
            },
        ],
        (2, 2),
    );
}

/// Every fixture, the command that made it, its parser, and its report when it has one.
fn all() -> Vec<(&'static str, &'static str, Parser, Option<&'static str>)> {
    vec![
        (
            "cargo-human.txt",
            "RUST_BACKTRACE=1 cargo test",
            Parser::Cargo,
            None,
        ),
        (
            "cargo-json.txt",
            "RUSTC_BOOTSTRAP=1 cargo test -- -Z unstable-options --format json --report-time",
            Parser::Cargo,
            None,
        ),
        (
            "cargo-nextest.txt",
            "cargo nextest run",
            Parser::Cargo,
            None,
        ),
        ("pytest.txt", "python -m pytest", Parser::Pytest, None),
        (
            "pytest.txt",
            "python -m pytest --junitxml=report.xml",
            Parser::Junit,
            Some("junit-pytest.xml"),
        ),
        ("go-test.json", "go test -json ./...", Parser::Go, None),
        ("jest.txt", "npx jest", Parser::Jest, None),
        ("jest.txt", "npm test", Parser::Jest, None),
        ("jest-json.txt", "npx jest --json", Parser::Jest, None),
        (
            "tap-node.txt",
            "node --test --test-reporter=tap",
            Parser::Tap,
            None,
        ),
    ]
}

#[test]
fn auto_picks_the_parser_from_the_command_or_the_log() {
    for (log, cmd, want, report) in all() {
        let text = fixture(log);
        let report = report.map(fixture);
        let with_cmd = parse(Parser::Auto, cmd, &text, report.as_deref());
        assert_eq!(with_cmd.parser, want, "{log} run by {cmd}");
        assert_eq!(with_cmd.failures.len(), 2, "{log} run by {cmd}");
        // Without the command, the log (or report) alone says it.
        let sniffed = parse(Parser::Auto, "", &text, report.as_deref());
        assert_eq!(sniffed.parser, want, "{log} alone");
        assert_eq!(sniffed.failures, with_cmd.failures, "{log} alone");
        // The explicit parser reads the same.
        assert_eq!(
            parse(want, cmd, &text, report.as_deref()),
            with_cmd,
            "{log} as {want:?}"
        );
    }
}

#[test]
fn the_wrong_parser_finds_nothing() {
    for (log, cmd, right, report) in all() {
        if report.is_some() {
            continue;
        }
        let text = fixture(log);
        for wrong in [
            Parser::Cargo,
            Parser::Pytest,
            Parser::Go,
            Parser::Jest,
            Parser::Tap,
            Parser::Junit,
        ] {
            if wrong == right {
                continue;
            }
            let parsed = parse(wrong, cmd, &text, None);
            assert_eq!(parsed.parser, wrong);
            assert!(
                parsed.failures.is_empty(),
                "{log} read as {wrong:?}: {parsed:#?}"
            );
        }
    }
}

fn failures_of(log: &str, cmd: &str) -> Vec<Failure> {
    parse(Parser::Auto, cmd, &fixture(log), None).failures
}

#[test]
fn signatures_name_the_failing_set() {
    let human = failures_of("cargo-human.txt", "cargo test");
    let json = failures_of("cargo-json.txt", "cargo test");
    let nextest = failures_of("cargo-nextest.txt", "cargo nextest run");
    let sig = signature(&human);
    assert_eq!(sig.len(), 16);
    assert!(
        sig.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{sig}"
    );
    // Two different runs failing the same tests, in different formats.
    assert_eq!(sig, signature(&json));
    assert_eq!(sig, signature(&nextest));
    assert_eq!(
        signature(&failures_of("jest.txt", "npx jest")),
        signature(&failures_of("jest-json.txt", "npx jest --json"))
    );
    // Another failing set: fewer tests, or other tests.
    assert_ne!(sig, signature(&human[..1]));
    assert_ne!(sig, signature(&failures_of("pytest.txt", "pytest")));
    assert_ne!(
        signature(&failures_of("go-test.json", "go test -json")),
        signature(&failures_of("tap-node.txt", "node --test"))
    );
    assert_eq!(signature(&[]), "");
}

#[test]
fn parsed_serializes_with_snake_case_parser_names() {
    let parsed = parse(
        Parser::Auto,
        "go test -json ./...",
        &fixture("go-test.json"),
        None,
    );
    let json = serde_json::to_value(&parsed).expect("serializes");
    assert_eq!(json["parser"], "go");
    assert_eq!(json["failures"][1]["line"], 19);
    assert_eq!(json["passed"], 2);
}
