//! End-to-end: `palm sim` as CI runs it — 500 heavy seeds, each run twice to prove
//! determinism — and a deliberately broken build whose failure prints a replay command
//! that reproduces it.

mod common;

use common::{data_dir, palm};

#[test]
fn five_hundred_heavy_seeds_pass_and_replay_identically() {
    let data = data_dir();
    let ran = palm(
        data.path(),
        &[
            "sim",
            "--seeds",
            "0..500",
            "--faults",
            "heavy",
            "--check-determinism",
            "--json",
        ],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let summary = ran.json();
    assert_eq!(summary["runs"], 500);
    assert_eq!(summary["passed"], 500, "{summary}");
    assert_eq!(summary["determinism_checked"], true);
    assert!(summary["coverage"]["crash_lost_unflushed_writes"].as_u64() > Some(0));
    assert!(summary["compression"].as_f64() > Some(100.0), "{summary}");
}

#[test]
fn trees_of_seven_nodes_pass_under_heavy_faults() {
    let data = data_dir();
    let ran = palm(
        data.path(),
        &[
            "sim", "--seeds", "0..300", "--nodes", "7", "--faults", "heavy", "--json",
        ],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let summary = ran.json();
    assert_eq!(summary["passed"], 300);
    assert!(summary["coverage"]["effect_placed"].as_u64() > Some(0));
    let broken = palm(
        data.path(),
        &[
            "sim",
            "--seeds",
            "0..20",
            "--nodes",
            "7",
            "--faults",
            "heavy",
            "--mutate",
            "shared-tag",
        ],
    );
    assert_eq!(broken.code, 1);
    assert!(
        broken.stderr.contains("broke `no_dual_truth`"),
        "{}",
        broken.stderr
    );
}

#[test]
fn several_nodes_pass_too() {
    let data = data_dir();
    let ran = palm(
        data.path(),
        &[
            "sim", "--seeds", "0..60", "--nodes", "4", "--faults", "heavy", "--json",
        ],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(ran.json()["passed"], 60);
}

#[test]
fn a_broken_variant_fails_with_a_replay_command_that_reproduces_it() {
    let data = data_dir();
    let ran = palm(
        data.path(),
        &[
            "sim",
            "--seeds",
            "0..40",
            "--nodes",
            "3",
            "--faults",
            "heavy",
            "--mutate",
            "skip-fencing",
        ],
    );
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("broke `completion_only_from_the_current_lease`"),
        "{}",
        ran.stderr
    );
    let replay = ran
        .stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: palm "))
        .expect("a replay command")
        .to_owned();
    let mut args: Vec<&str> = replay
        .split_whitespace()
        .filter(|a| *a != "--trace")
        .collect();
    args.push("--json");
    let again = palm(data.path(), &args);
    assert_eq!(again.code, 1, "the replay fails too: {}", again.stderr);
    let report = again.json();
    assert_eq!(report["passed"], false);
    assert_eq!(
        report["violation"]["invariant"],
        "completion_only_from_the_current_lease"
    );
    let traced = palm(data.path(), &replay.split_whitespace().collect::<Vec<_>>());
    assert_eq!(traced.code, 1);
    assert!(
        traced
            .stdout
            .contains("VIOLATION completion_only_from_the_current_lease")
    );
    let events = traced
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()) && l.contains(" n"))
        .count();
    assert!(
        events > 5,
        "the trace is printed, one line per event: {}",
        traced.stdout
    );
}

#[test]
fn bad_arguments_are_usage_errors() {
    let data = data_dir();
    for args in [
        vec!["sim", "--seeds", "5..2"],
        vec!["sim", "--seeds", "abc"],
        vec!["sim", "--faults", "medium"],
        vec!["sim", "--nodes", "0"],
        vec!["sim", "--seeds", "0..3", "--trace"],
        vec!["sim", "--mutate", "everything"],
    ] {
        let ran = palm(data.path(), &args);
        assert_eq!(ran.code, 2, "{args:?}: {}", ran.stderr);
        assert!(ran.stderr.starts_with("palm: error: "), "{}", ran.stderr);
    }
}
