//! Repo intelligence end to end: the real `palm` binary on a fixture repository made by
//! the test (several languages, a scripted history), every query's answer asserted; bad
//! input; and a 1,000-file repository where changing one file reparses only that file.

#[path = "intel/fixture.rs"]
mod fixture;

use fixture::{DAY_S, build, git, now_s, write};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr)
        })
    }
}

/// Runs `palm ARGS` in `cwd`.
fn palm_in(cwd: &Path, args: &[&str]) -> Ran {
    let data = cwd.join(".palm-test-data");
    let output = Command::new(env!("CARGO_BIN_EXE_palm"))
        .current_dir(cwd)
        .arg("--data")
        .arg(&data)
        .args(args)
        .env_remove("PALM_HOME")
        .env("PALM_LOG", "warn")
        .env("NO_COLOR", "1")
        .output()
        .expect("run palm");
    Ran {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn ok_json(cwd: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let ran = palm_in(cwd, &all);
    assert_eq!(ran.code, 0, "palm {args:?}: {}", ran.stderr);
    ran.json()
}

fn compact_symbols(report: &Value) -> Vec<String> {
    report["symbols"]
        .as_array()
        .expect("symbols")
        .iter()
        .map(|s| {
            let name = match s["parent"].as_str() {
                Some(parent) => format!("{parent}::{}", s["name"].as_str().unwrap_or("")),
                None => s["name"].as_str().unwrap_or("").to_owned(),
            };
            format!(
                "{} {} {}-{}",
                s["kind"].as_str().unwrap_or(""),
                name,
                s["line"],
                s["end_line"]
            )
        })
        .collect()
}

fn weight(days: &[i64]) -> f64 {
    let w: f64 = days.iter().map(|d| 0.5f64.powf(*d as f64 / 30.0)).sum();
    (w * 1000.0).round() / 1000.0
}

fn assert_neighbors(actual: &Value, expected: &[(&str, u32, &[i64])], times: &[i64]) {
    let list = actual.as_array().expect("neighbors");
    let got: Vec<(String, u64)> = list
        .iter()
        .map(|n| {
            (
                n["path"].as_str().unwrap_or("").to_owned(),
                n["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = expected
        .iter()
        .map(|(p, c, _)| ((*p).to_owned(), u64::from(*c)))
        .collect();
    assert_eq!(got, want);
    for (n, (_, _, days)) in list.iter().zip(expected) {
        let w = n["weight"].as_f64().expect("weight");
        assert!((w - weight(days)).abs() <= 0.002, "{n} vs {days:?}");
        let newest = days.iter().min().expect("a day");
        let step = times
            .iter()
            .position(|t| now_s() - t >= newest * DAY_S - 120);
        assert!(step.is_some());
    }
}

#[test]
fn fixture_queries_answer_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().canonicalize().expect("canonical");
    let times = build(&repo);
    let index = ok_json(&repo, &["index"]);
    assert_eq!(index["root"], json!(repo.display().to_string()));
    assert_eq!(index["files"], json!(14));
    assert_eq!(index["parsed"], json!(14));
    assert_eq!(index["reused"], json!(0));
    assert_eq!(index["full"], json!(true));
    assert_eq!(
        index["skipped"],
        json!({"binary": 1, "vendored": 1, "generated": 1, "oversized": 1, "total": 4})
    );
    assert_eq!(
        index["languages"],
        json!({"c": 2, "cpp": 1, "go": 1, "java": 1, "javascript": 1, "python": 2,
               "rust": 3, "text": 2, "typescript": 1})
    );
    assert_eq!(index["line_based"], json!(2));
    assert_eq!(index["symbols"], json!(32));
    assert_eq!(index["imports"], json!(10));
    assert_eq!(index["imports_resolved"], json!(7));
    assert_eq!(index["commits"], json!(5));
    assert_eq!(index["new_commits"], json!(5));
    assert_eq!(index["warnings"], json!([]));
    assert!(repo.join(".palm/index/meta.json").is_file());
    assert!(repo.join(".palm/index/search").is_dir());
    // .palm/ ignores itself: the working tree stays clean.
    let status = Command::new("git")
        .current_dir(&repo)
        .args(["status", "--porcelain"])
        .output()
        .expect("git status");
    assert_eq!(String::from_utf8_lossy(&status.stdout), "");

    // A second run reuses everything.
    let again = ok_json(&repo, &["index"]);
    assert_eq!(
        (
            again["parsed"].clone(),
            again["reused"].clone(),
            again["new_commits"].clone()
        ),
        (json!(0), json!(14), json!(0))
    );

    // symbols, every language.
    let cases: &[(&str, &str, &str, &[&str])] = &[
        (
            "src/shapes.rs",
            "rust",
            "tree-sitter",
            &[
                "trait Shape 4-7",
                "method Shape::area 6-6",
                "struct Circle 10-12",
                "method Circle::area 16-21",
            ],
        ),
        (
            "src/lib.rs",
            "rust",
            "tree-sitter",
            &["module shapes 3-3", "function total_area 8-10"],
        ),
        (
            "py/geometry.py",
            "python",
            "tree-sitter",
            &[
                "class Polygon 5-12",
                "method Polygon::__init__ 8-9",
                "method Polygon::sides 11-12",
                "function perimeter 15-17",
            ],
        ),
        (
            "go/server.go",
            "go",
            "tree-sitter",
            &[
                "struct Server 6-8",
                "interface Handler 11-13",
                "method Handler::Serve 12-12",
                "function NewServer 16-18",
                "method Server::Start 21-24",
            ],
        ),
        (
            "web/app.ts",
            "typescript",
            "tree-sitter",
            &[
                "interface Config 4-6",
                "class App 8-12",
                "method App::run 9-11",
            ],
        ),
        (
            "web/util.js",
            "javascript",
            "tree-sitter",
            &["function helper 2-4"],
        ),
        (
            "java/Greeter.java",
            "java",
            "tree-sitter",
            &["class Greeter 6-10", "method Greeter::greet 7-9"],
        ),
        ("c/util.h", "c", "tree-sitter", &["function add 3-3"]),
        ("c/util.c", "c", "tree-sitter", &["function add 4-6"]),
        (
            "cpp/shape.cpp",
            "cpp",
            "tree-sitter",
            &[
                "module geo 1-8",
                "class Shape 2-5",
                "method Shape::area 4-4",
                "method Shape::area 7-7",
            ],
        ),
        (
            "README.md",
            "text",
            "line-based",
            &["section Fixture 1-1", "section Usage 5-5"],
        ),
    ];
    for (file, language, parser, expected) in cases {
        let report = ok_json(&repo, &["symbols", file]);
        assert_eq!(report["path"], json!(file));
        assert_eq!(report["language"], json!(language), "{file}");
        assert_eq!(report["parser"], json!(parser), "{file}");
        assert_eq!(compact_symbols(&report), *expected, "{file}");
    }
    let shapes = ok_json(&repo, &["symbols", "src/shapes.rs"]);
    assert_eq!(
        shapes["symbols"][3],
        json!({"kind": "method", "name": "area", "parent": "Circle",
               "signature": "fn area(&self) -> f64", "doc": "Its area; zero for a zero radius.",
               "line": 16, "end_line": 21})
    );
    let server = ok_json(&repo, &["symbols", "go/server.go"]);
    assert_eq!(
        server["symbols"][0]["signature"],
        json!("type Server struct")
    );
    assert_eq!(
        server["symbols"][0]["doc"],
        json!("Server answers requests.")
    );
    let polygon = ok_json(&repo, &["symbols", "py/geometry.py"]);
    assert_eq!(
        polygon["symbols"][0]["doc"],
        json!("A closed shape with many sides.")
    );
    // From a subdirectory, FILE is relative to it.
    let from_src = ok_json(&repo.join("src"), &["symbols", "shapes.rs"]);
    assert_eq!(from_src["path"], json!("src/shapes.rs"));

    // callers.
    let callers = ok_json(&repo, &["callers", "area"]);
    assert_eq!(
        callers,
        json!({
            "name": "area",
            "definitions": [
                {"path": "cpp/shape.cpp", "line": 4, "kind": "method", "parent": "Shape"},
                {"path": "cpp/shape.cpp", "line": 7, "kind": "method", "parent": "Shape"},
                {"path": "src/shapes.rs", "line": 6, "kind": "method", "parent": "Shape"},
                {"path": "src/shapes.rs", "line": 16, "kind": "method", "parent": "Circle"},
            ],
            "references": [
                {"path": "src/lib.rs", "line": 9, "text": "circles.iter().map(|c| c.area()).sum()"},
                {"path": "tests/shapes_test.rs", "line": 5, "text": "assert_eq!(Circle { radius: 0.0 }.area(), 0.0);"},
            ],
            "files": 2,
        })
    );
    let helper = ok_json(&repo, &["callers", "helper"]);
    assert_eq!(
        helper["references"],
        json!([
            {"path": "web/app.ts", "line": 1, "text": "import { helper } from './util';"},
            {"path": "web/app.ts", "line": 10, "text": "helper(config.name);"},
        ])
    );
    assert_eq!(
        ok_json(&repo, &["callers", "nothing_is_called_this"])["references"],
        json!([])
    );

    // search: ranked files and commits, with snippets and the matching symbols.
    let search = ok_json(&repo, &["search", "circle area"]);
    let order: Vec<String> = search["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| match h["kind"].as_str() {
            Some("commit") => format!("commit {}", h["snippet"].as_str().unwrap_or("")),
            _ => h["path"].as_str().unwrap_or("").to_owned(),
        })
        .collect();
    assert_eq!(
        order,
        [
            "src/shapes.rs",
            "src/lib.rs",
            "cpp/shape.cpp",
            "tests/shapes_test.rs",
            "commit **Circle** **area** is zero for a zero radius",
            "commit Add the **circle** and the crate",
            // Found by its prose, with the line of the passage.
            "README.md",
        ]
    );
    let readme = search["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .find(|h| h["path"] == "README.md")
        .expect("README hit");
    assert!(readme["line"].as_u64().is_some_and(|l| l >= 1), "{readme}");
    assert!(
        readme["snippet"]
            .as_str()
            .unwrap_or_default()
            .contains("**"),
        "{readme}"
    );
    assert_eq!(
        search["hits"][0]["symbols"],
        json!([
            {"name": "area", "kind": "method", "line": 6},
            {"name": "Circle", "kind": "struct", "line": 10},
            {"name": "area", "kind": "method", "line": 16},
        ])
    );
    assert_eq!(
        search["hits"][0]["snippet"],
        json!(
            "pub trait Shape ⏎ fn **area**(&self) -> f64; ⏎ pub struct **Circle** ⏎ fn **area**(&self) -> f64"
        )
    );
    let scores: Vec<f64> = search["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["score"].as_f64().unwrap_or(0.0))
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    let greet = ok_json(&repo, &["search", "greet", "--limit", "1"]);
    assert_eq!(greet["hits"].as_array().map(Vec::len), Some(1));
    assert_eq!(greet["hits"][0]["path"], json!("java/Greeter.java"));

    // neighbors: co-change, strongest first (lock files, vendored code and binaries left out).
    let neighbors = ok_json(&repo, &["neighbors", "src/shapes.rs"]);
    assert_eq!(neighbors["commits"], json!(3));
    assert_neighbors(
        &neighbors["neighbors"],
        &[
            ("src/lib.rs", 2, &[60, 5]),
            ("tests/shapes_test.rs", 1, &[10]),
            ("Cargo.toml", 1, &[60]),
            ("README.md", 1, &[60]),
        ],
        &times,
    );

    // risk: the formula of docs/intel.md on this file's numbers.
    let risk = ok_json(&repo, &["risk", "src/shapes.rs"]);
    let mut risk_without_time = risk.clone();
    risk_without_time["inputs"]["last_touched"] = json!(null);
    assert_eq!(
        risk_without_time,
        json!({
            "path": "src/shapes.rs",
            "score": 17,
            "level": "low",
            "reasons": [
                {"factor": "churn", "points": 7.1, "detail": "changed in 3 commits"},
                {"factor": "recent", "points": 4.0, "detail": "2 changes in the last 30 days"},
                {"factor": "authors", "points": 2.5, "detail": "2 distinct authors"},
                {"factor": "fan_in", "points": 2.0, "detail": "used by 2 files"},
                {"factor": "coupling", "points": 1.0, "detail": "changes together with 1 file (≥ 2 shared commits)"},
                {"factor": "size", "points": 0.2, "detail": "22 lines"},
            ],
            "inputs": {"churn": 3, "touches_30d": 2, "authors": 2, "last_touched": null,
                       "fan_in": 2, "coupled_files": 1, "lines": 22, "tests": 1, "testable": true},
        })
    );
    assert_eq!(risk["inputs"]["last_touched"], json!(times[3]));
    let untested = ok_json(&repo, &["risk", "go/server.go"]);
    assert_eq!(untested["score"], json!(16));
    assert_eq!(
        untested["reasons"][0],
        json!({"factor": "untested", "points": 10.0, "detail": "no tests found"})
    );

    // explain.
    let explain = ok_json(&repo, &["explain", "src/shapes.rs"]);
    assert_eq!(
        explain["declares"],
        json!([
            {"kind": "trait", "name": "Shape", "line": 4},
            {"kind": "method", "name": "area", "line": 6},
            {"kind": "struct", "name": "Circle", "line": 10},
            {"kind": "method", "name": "area", "line": 16},
        ])
    );
    assert_eq!(
        explain["used_by"],
        json!([
            {"path": "src/lib.rs", "imports": true, "names": ["Circle", "Shape", "area"]},
            {"path": "tests/shapes_test.rs", "imports": true, "names": ["Circle", "area"]},
        ])
    );
    assert_eq!(explain["tests"], json!(["tests/shapes_test.rs"]));
    let subjects: Vec<&str> = explain["recent_commits"]
        .as_array()
        .expect("commits")
        .iter()
        .map(|c| c["subject"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        subjects,
        [
            "Introduce the Shape trait",
            "Circle area is zero for a zero radius",
            "Add the circle and the crate"
        ]
    );
    assert_eq!(explain["risk"]["score"], json!(17));
    assert_eq!(
        explain["checks"],
        json!([
            "cargo test -p fixture",
            "cargo test -p fixture --test shapes_test"
        ])
    );
    assert_eq!(explain["cochanges"].as_array().map(Vec::len), Some(4));
    let lib = ok_json(&repo, &["explain", "src/lib.rs"]);
    assert_eq!(
        lib["imports"],
        json!([
            {"module": "mod shapes", "line": 3, "resolved": "src/shapes.rs"},
            {"module": "crate::shapes::Circle", "line": 5, "resolved": "src/shapes.rs"},
            {"module": "crate::shapes::Shape", "line": 5, "resolved": "src/shapes.rs"},
        ])
    );
    let app = ok_json(&repo, &["explain", "web/app.ts"]);
    assert_eq!(
        app["imports"],
        json!([{"module": "./util", "line": 1, "resolved": "web/util.js"}])
    );
    assert_eq!(app["checks"], json!(["npm test", "npx tsc --noEmit"]));
    let geometry = ok_json(&repo, &["explain", "py/geometry.py"]);
    assert_eq!(geometry["tests"], json!(["py/test_geometry.py"]));
    assert_eq!(
        geometry["checks"],
        json!(["python -m pytest py/test_geometry.py"])
    );

    // A branch with one commit, then uncommitted work.
    git(&repo, &["checkout", "-q", "-b", "feature"], &[]);
    let mut geometry_py = fixture::GEOMETRY_PY.to_owned();
    geometry_py.push_str("\n\ndef area(points):\n    \"\"\"Shoelace area.\"\"\"\n    return 0.0\n");
    write(&repo, "py/geometry.py", geometry_py.as_bytes());
    git(
        &repo,
        &["commit", "-q", "-am", "Polygons know their area"],
        &[
            ("GIT_AUTHOR_NAME", "dave".into()),
            ("GIT_AUTHOR_EMAIL", "dave@example.com".into()),
            ("GIT_COMMITTER_NAME", "dave".into()),
            ("GIT_COMMITTER_EMAIL", "dave@example.com".into()),
        ],
    );
    let stale = palm_in(&repo, &["risk", "py/geometry.py", "--json"]);
    assert_eq!(stale.code, 0);
    assert!(
        stale.stderr.contains("run `palm index` to update it"),
        "{}",
        stale.stderr
    );
    let update = ok_json(&repo, &["index"]);
    assert_eq!(
        (
            update["parsed"].clone(),
            update["reused"].clone(),
            update["new_commits"].clone(),
            update["full"].clone()
        ),
        (json!(1), json!(13), json!(1), json!(false))
    );
    let mut shapes_rs = fixture::SHAPES_RS_V3.to_owned();
    shapes_rs.push_str("// edited\n");
    write(&repo, "src/shapes.rs", shapes_rs.as_bytes());
    write(&repo, "notes.txt", b"todo\n");

    let changed = ok_json(&repo, &["changed-now"]);
    let changes = changed["changes"].as_array().expect("changes");
    let summary: Vec<(String, String, bool, u64)> = changes
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or("").to_owned(),
                c["status"].as_str().unwrap_or("").to_owned(),
                c["staged"].as_bool().unwrap_or(true),
                c["risk"]["score"].as_u64().unwrap_or(999),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("notes.txt".to_owned(), "untracked".to_owned(), false, 0),
            ("src/shapes.rs".to_owned(), "modified".to_owned(), false, 17),
        ]
    );
    assert_neighbors(
        &changes[1]["neighbors_untouched"],
        &[
            ("src/lib.rs", 2, &[60, 5]),
            ("tests/shapes_test.rs", 1, &[10]),
            ("Cargo.toml", 1, &[60]),
            ("README.md", 1, &[60]),
        ],
        &times,
    );

    let handoff = ok_json(&repo, &["handoff"]);
    assert_eq!(handoff["base"], json!("main"));
    let commits: Vec<&str> = handoff["commits"]
        .as_array()
        .expect("commits")
        .iter()
        .map(|c| c["subject"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(commits, ["Polygons know their area"]);
    assert_eq!(
        handoff["changed"],
        json!([
            {"path": "notes.txt", "status": "untracked", "added": 1, "removed": 0, "risk": {"score": 0, "level": "low"}},
            {"path": "py/geometry.py", "status": "modified", "added": 5, "removed": 0, "risk": {"score": 13, "level": "low"}},
            {"path": "src/shapes.rs", "status": "modified", "added": 1, "removed": 0, "risk": {"score": 17, "level": "low"}},
        ])
    );
    assert_eq!(handoff["risky"], json!([]));
    assert_eq!(
        handoff["untouched_neighbors"],
        json!([
            {"path": "src/lib.rs", "with": "src/shapes.rs", "count": 2},
            {"path": "Cargo.toml", "with": "src/shapes.rs", "count": 1},
            {"path": "README.md", "with": "src/shapes.rs", "count": 1},
            {"path": "py/test_geometry.py", "with": "py/geometry.py", "count": 1},
            {"path": "tests/shapes_test.rs", "with": "src/shapes.rs", "count": 1},
        ])
    );
    assert_eq!(
        handoff["checks"],
        json!([
            "python -m pytest py/test_geometry.py",
            "cargo test -p fixture",
            "cargo test -p fixture --test shapes_test"
        ])
    );
    let since = ok_json(&repo, &["handoff", "HEAD~3"]);
    let subjects: Vec<&str> = since["commits"]
        .as_array()
        .expect("commits")
        .iter()
        .map(|c| c["subject"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        subjects,
        [
            "Polygons know their area",
            "Add the Go server, the web app, the Java greeter and C helpers",
            "Introduce the Shape trait"
        ]
    );

    // The human forms say the same things.
    let human = palm_in(&repo, &["risk", "src/shapes.rs"]);
    assert_eq!(human.code, 0);
    assert!(
        human.stdout.starts_with("src/shapes.rs  17 (low)\n"),
        "{}",
        human.stdout
    );
    assert!(human.stdout.contains("churn     changed in 3 commits"));
    for args in [
        &["symbols", "src/shapes.rs"][..],
        &["callers", "area"],
        &["search", "circle"],
        &["neighbors", "src/shapes.rs"],
        &["changed-now"],
        &["explain", "src/shapes.rs"],
        &["handoff"],
        &["index"],
    ] {
        let ran = palm_in(&repo, args);
        assert_eq!(ran.code, 0, "{args:?}: {}", ran.stderr);
        assert!(!ran.stdout.is_empty(), "{args:?}");
        assert!(
            serde_json::from_str::<Value>(&ran.stdout).is_err(),
            "{args:?} printed JSON"
        );
    }
}

fn one_line_error(ran: &Ran, code: i32, needle: &str) {
    assert_eq!(
        ran.code, code,
        "stdout {} stderr {}",
        ran.stdout, ran.stderr
    );
    let first = ran.stderr.lines().next().unwrap_or("");
    assert!(first.starts_with("palm: error: "), "{}", ran.stderr);
    assert!(first.contains(needle), "{first:?} lacks {needle:?}");
    assert!(!ran.stderr.contains("panicked"), "{}", ran.stderr);
}

#[test]
fn bad_input_gets_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    let plain = root.join("plain");
    std::fs::create_dir_all(&plain).expect("mkdir");

    // Not a git repository (by cwd and by --repo).
    one_line_error(&palm_in(&plain, &["index"]), 2, "not a git repository");
    let repo_flag = plain.display().to_string();
    one_line_error(
        &palm_in(&root, &["symbols", "x.rs", "--repo", &repo_flag]),
        2,
        "not a git repository",
    );
    let json = palm_in(&plain, &["callers", "x", "--json"]);
    assert_eq!(json.code, 2);
    assert_eq!(json.json()["error"]["kind"], json!("not_a_repository"));

    // An empty repository: index works (and says so); handoff needs a commit.
    let empty = root.join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    git(&empty, &["init", "-q"], &[]);
    let index = palm_in(&empty, &["index", "--json"]);
    assert_eq!(index.code, 0, "{}", index.stderr);
    let report = index.json();
    assert_eq!(report["files"], json!(0));
    assert_eq!(report["commits"], json!(0));
    assert_eq!(
        report["warnings"],
        json!(["the repository has no commits yet: the git half is empty"])
    );
    one_line_error(&palm_in(&empty, &["handoff"]), 2, "has no commits yet");
    assert_eq!(ok_json(&empty, &["changed-now"])["changes"], json!([]));

    // A repository with files.
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    build(&repo);
    write(&repo, "notes.xyz", b"def frobnicate\nplain words\n");
    // No index yet: a query builds one.
    let first = palm_in(&repo, &["callers", "area", "--json"]);
    assert_eq!(first.code, 0);
    assert!(first.stderr.contains("no index yet"), "{}", first.stderr);
    assert_eq!(first.json()["files"], json!(2));
    // A path outside the repository, absolute or climbing out.
    let outside = root.join("plain/x.rs").display().to_string();
    one_line_error(
        &palm_in(&repo, &["symbols", &outside]),
        2,
        "outside the repository",
    );
    one_line_error(
        &palm_in(&repo, &["risk", "../plain/x.rs"]),
        2,
        "outside the repository",
    );
    // Unknown files, binary files, a bad revision, an empty query.
    one_line_error(
        &palm_in(&repo, &["risk", "src/missing.rs"]),
        2,
        "no such file",
    );
    one_line_error(
        &palm_in(&repo, &["symbols", "src/missing.rs"]),
        2,
        "no such file",
    );
    one_line_error(
        &palm_in(&repo, &["symbols", "assets/logo.bin"]),
        2,
        "not indexed (binary file)",
    );
    one_line_error(
        &palm_in(&repo, &["symbols", "gen/big.txt"]),
        2,
        "not indexed (larger than 1024 KiB)",
    );
    one_line_error(
        &palm_in(&repo, &["handoff", "no-such-branch"]),
        2,
        "not a commit",
    );
    one_line_error(&palm_in(&repo, &["search", "  "]), 2, "empty");
    // A file in a language without a grammar: the labelled fallback, and a warning.
    let unknown = palm_in(&repo, &["symbols", "notes.xyz", "--json"]);
    assert_eq!(unknown.code, 0);
    assert!(
        unknown
            .stderr
            .starts_with("palm: warning: notes.xyz: no grammar"),
        "{}",
        unknown.stderr
    );
    let report = unknown.json();
    assert_eq!(report["parser"], json!("line-based"));
    assert_eq!(report["language"], json!("text"));
    assert_eq!(compact_symbols(&report), ["function frobnicate 1-1"]);

    // A corrupt index is rebuilt with a warning, for every part of it.
    for (file, garbage) in [
        ("files.bin", &b"\xff\xff\xff\xff garbage"[..]),
        ("history.bin", b"\x01"),
        ("meta.json", b"{ not json"),
    ] {
        write(&repo, &format!(".palm/index/{file}"), garbage);
        let ran = palm_in(&repo, &["callers", "area", "--json"]);
        assert_eq!(ran.code, 0, "{file}: {}", ran.stderr);
        assert!(
            ran.stderr.contains("corrupt") && ran.stderr.contains("rebuilt"),
            "{file}: {}",
            ran.stderr
        );
        assert_eq!(ran.json()["files"], json!(2), "{file}");
        let index = ok_json(&repo, &["index"]);
        assert_eq!(
            index["parsed"],
            json!(0),
            "{file}: the rebuild left a usable index"
        );
    }
    // A damaged shard of the content half, found by a query or by `palm index`.
    let shard = std::fs::read_dir(repo.join(".palm/index/shards"))
        .expect("shards")
        .flatten()
        .map(|e| e.path())
        .min()
        .expect("a shard");
    std::fs::write(&shard, b"\xff\xff\xff").expect("damage a shard");
    let ran = palm_in(&repo, &["risk", "src/shapes.rs", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("corrupt") && ran.stderr.contains("rebuilt"),
        "{}",
        ran.stderr
    );
    for shard in std::fs::read_dir(repo.join(".palm/index/shards"))
        .expect("shards")
        .flatten()
    {
        std::fs::write(shard.path(), b"\xff\xff\xff").expect("damage a shard");
    }
    write(&repo, "src/shapes.rs", b"pub struct Square;\n");
    let index = ok_json(&repo, &["index"]);
    assert_eq!(index["full"], json!(true));
    assert!(
        index["warnings"][0]
            .as_str()
            .unwrap_or("")
            .contains("unreadable"),
        "{index}"
    );
    assert_eq!(index["files"], json!(15));
    // A search index from another generation (a crash between writes) is rebuilt.
    std::fs::remove_dir_all(repo.join(".palm/index/search")).expect("rm search");
    let ran = palm_in(&repo, &["search", "circle", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stderr.contains("rebuilt"), "{}", ran.stderr);
    // (src/shapes.rs now declares only a Square.)
    assert_eq!(ran.json()["hits"][0]["path"], json!("src/lib.rs"));
    let index = palm_in(&repo, &["index", "--json"]);
    assert_eq!(index.code, 0, "{}", index.stderr);
}

/// Files in the generated repository (above the 1,000).
const GENERATED_FILES: usize = 1_200;

#[test]
fn changing_one_file_of_many_reparses_only_that_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().canonicalize().expect("canonical");
    for i in 0..GENERATED_FILES {
        let (path, text) = match i % 3 {
            0 => (
                format!("src/m{i}.rs"),
                format!("/// Item {i}.\npub fn item_{i}() -> u32 {{ {i} }}\n"),
            ),
            1 => (
                format!("py/m{i}.py"),
                format!("def item_{i}():\n    return {i}\n"),
            ),
            _ => (
                format!("web/m{i}.ts"),
                format!("export function item_{i}(): number {{ return {i}; }}\n"),
            ),
        };
        write(&repo, &path, text.as_bytes());
    }
    git(&repo, &["init", "-q"], &[]);
    git(&repo, &["add", "-A"], &[]);
    git(
        &repo,
        &[
            "-c",
            "user.name=gen",
            "-c",
            "user.email=gen@example.com",
            "commit",
            "-q",
            "-m",
            "Generated",
        ],
        &[],
    );
    let first = ok_json(&repo, &["index"]);
    assert_eq!(first["files"], json!(GENERATED_FILES));
    assert_eq!(first["parsed"], json!(GENERATED_FILES));

    write(
        &repo,
        "src/m3.rs",
        b"/// Item 3, renamed.\npub fn item_three() -> u32 { 3 }\n",
    );
    let second = ok_json(&repo, &["index"]);
    assert_eq!(second["parsed"], json!(1));
    assert_eq!(second["reused"], json!(GENERATED_FILES - 1));
    assert_eq!(second["removed"], json!(0));
    let found = ok_json(&repo, &["callers", "item_three"]);
    assert_eq!(
        found["definitions"],
        json!([{"path": "src/m3.rs", "line": 2, "kind": "function", "parent": null}])
    );
    let search = ok_json(&repo, &["search", "item_three"]);
    assert_eq!(search["hits"][0]["path"], json!("src/m3.rs"));

    // Adding and removing files: only the new file is parsed.
    write(&repo, "src/extra.rs", b"pub fn extra_item() {}\n");
    std::fs::remove_file(repo.join("py/m1.py")).expect("rm");
    let fourth = ok_json(&repo, &["index"]);
    assert_eq!(
        (
            fourth["parsed"].clone(),
            fourth["removed"].clone(),
            fourth["files"].clone()
        ),
        (json!(1), json!(1), json!(GENERATED_FILES))
    );
    assert_eq!(
        ok_json(&repo, &["callers", "extra_item"])["definitions"][0]["path"],
        json!("src/extra.rs")
    );
    assert_eq!(
        ok_json(&repo, &["callers", "item_1"])["definitions"],
        json!([])
    );
    git(&repo, &["add", "-A"], &[]);
    // Committing the change walks one new commit and parses nothing.
    git(
        &repo,
        &[
            "-c",
            "user.name=gen",
            "-c",
            "user.email=gen@example.com",
            "commit",
            "-q",
            "-am",
            "Rename item 3",
        ],
        &[],
    );
    let third = ok_json(&repo, &["index"]);
    assert_eq!(
        (third["parsed"].clone(), third["new_commits"].clone()),
        (json!(0), json!(1))
    );
}

#[test]
fn gitignore_is_respected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().canonicalize().expect("canonical");
    git(&repo, &["init", "-q"], &[]);
    write(&repo, ".gitignore", b"build/\n*.log\n");
    write(&repo, "src/kept.rs", b"pub fn kept_item() {}\n");
    write(&repo, "build/out.rs", b"pub fn ignored_item() {}\n");
    write(&repo, "run.log", b"ignored_item\n");
    let index = ok_json(&repo, &["index"]);
    assert_eq!(index["files"], json!(2), "{index}");
    assert_eq!(index["languages"], json!({"rust": 1, "text": 1}));
    assert_eq!(
        ok_json(&repo, &["callers", "ignored_item"])["definitions"],
        json!([])
    );
    assert_eq!(
        ok_json(&repo, &["callers", "kept_item"])["definitions"][0]["path"],
        json!("src/kept.rs")
    );
    // Asked for by name, an ignored file still has symbols.
    let symbols = ok_json(&repo, &["symbols", "build/out.rs"]);
    assert_eq!(compact_symbols(&symbols), ["function ignored_item 1-1"]);
}
