//! The trace harness agrees with py_trees 2.6, tick for tick.
//!
//! Fixtures in `fixtures/trace/` were produced by py_trees itself
//! (`tests/py_trees/gen_fixtures.py`): a hand-written suite covering every composite,
//! decorator, memory and policy setting, plus 150 seeded random trees. `.ci/run` also runs
//! a live cross-check against py_trees on freshly generated random trees.

#[path = "../../tests/support/tool.rs"]
mod tool;
use palm_actors::bt::trace::trace;
use std::path::Path;

#[test]
fn every_fixture_matches_py_trees() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace");
    let mut checked = 0;
    let mut failures = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixture dir")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).expect("read fixture");
        let fixture: serde_json::Value = serde_json::from_str(&text).expect("fixture json");
        let ticks = fixture["ticks"].as_u64().expect("ticks") as u32;
        let expected: Vec<String> = fixture["expected"]
            .as_array()
            .expect("expected lines")
            .iter()
            .map(|l| l.as_str().expect("line").to_owned())
            .collect();
        let got = trace(&fixture["spec"], ticks).expect("spec is valid");
        if got != expected {
            let first = got
                .iter()
                .zip(&expected)
                .position(|(g, e)| g != e)
                .unwrap_or(0);
            failures.push(format!(
                "{}: tick {}\n  palm:     {}\n  py_trees: {}",
                path.file_name().unwrap_or_default().to_string_lossy(),
                first + 1,
                got.get(first).map(String::as_str).unwrap_or("-"),
                expected.get(first).map(String::as_str).unwrap_or("-"),
            ));
        }
        checked += 1;
    }
    assert!(
        checked >= 150,
        "only {checked} fixtures found in {}",
        dir.display()
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The live cross-check: py_trees itself (installed by `.ci/run` into `target/py-venv`, or
/// named by `PALM_PY_TREES_PYTHON`) answers 300 fresh random trees, and Palm must agree on
/// every tick. Without that interpreter the test says so and checks nothing more than the
/// fixtures above already did — or, under CI, fails.
#[test]
fn live_cross_check_against_py_trees() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = std::env::var_os("PALM_PY_TREES_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target/py-venv/bin/python"));
    if !python.exists() {
        tool::missing(
            &format!("py_trees' Python ({})", python.display()),
            "run .ci/run, or set PALM_PY_TREES_PYTHON",
        );
        return;
    }
    let script = root.join("tests/py_trees/crosscheck.py");
    let output = std::process::Command::new(&python)
        .arg(&script)
        .args(["--seed", "7331", "--count", "300"])
        .output()
        .expect("run python");
    assert!(
        output.status.success(),
        "crosscheck.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let cases: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).expect("cases json");
    assert_eq!(cases.len(), 300);
    let mut differing = Vec::new();
    for case in &cases {
        let ticks = case["ticks"].as_u64().expect("ticks") as u32;
        let got = trace(&case["spec"], ticks).expect("valid spec");
        let expected: Vec<String> = case["expected"]
            .as_array()
            .expect("expected")
            .iter()
            .map(|l| l.as_str().expect("line").to_owned())
            .collect();
        if got != expected {
            differing.push(case["name"].as_str().unwrap_or("?").to_owned());
        }
    }
    assert!(
        differing.is_empty(),
        "Palm and py_trees differ on: {differing:?}"
    );
}
