//! End-to-end: `palm sim` as CI runs it — the default tree world (a root, a realm, edges
//! under both) hosting the real tree protocol and home duties, 500 heavy seeds reaching
//! every coverage point; a replicated root failing over; determinism; the other shapes;
//! usage errors; and no planted bug
//! in the production binary (those live in `palm-sim`, see sim/tests/world.rs).

mod common;

use common::{data_dir, palm};

#[test]
fn five_hundred_heavy_seeds_of_the_tree_pass_and_reach_every_coverage_point() {
    let data = data_dir();
    let ran = palm(data.path(), &["sim", "--seeds", "0..500", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let summary = ran.json();
    assert_eq!(summary["shape"], "tree");
    assert_eq!(summary["nodes"], 6);
    assert_eq!(summary["faults"], "heavy");
    assert_eq!(summary["runs"], 500);
    assert_eq!(summary["passed"], 500, "{summary}");
    let coverage = summary["coverage"].as_object().expect("coverage");
    for point in palm_sim::COVERAGE_POINTS {
        assert!(
            coverage[*point].as_u64() > Some(0),
            "{point} never reached in 500 seeds"
        );
    }
    assert!(summary["compression"].as_f64() > Some(50.0), "{summary}");
}

/// The root on PostgreSQL, simulated: two replicas over one shared store, the serving
/// one cut from the store mid-commit, a standby taking the lease over, the cut replica's
/// late write fenced.
#[test]
fn seeds_with_a_replicated_root_pass_and_reach_every_failover_point() {
    let data = data_dir();
    let ran = palm(
        data.path(),
        &["sim", "--seeds", "0..40", "--replicas", "--json"],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let summary = ran.json();
    assert_eq!(summary["replicas"], true);
    assert_eq!(summary["passed"], 40, "{summary}");
    let coverage = summary["coverage"].as_object().expect("coverage");
    for point in palm_sim::REPLICA_COVERAGE_POINTS {
        assert!(
            coverage.get(*point).and_then(|n| n.as_u64()) > Some(0),
            "{point} never reached in 40 seeds: {coverage:?}"
        );
    }
}

#[test]
fn seeds_replay_identically() {
    let data = data_dir();
    let ran = palm(
        data.path(),
        &["sim", "--seeds", "0..12", "--check-determinism", "--json"],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let summary = ran.json();
    assert_eq!(summary["passed"], 12, "{summary}");
    assert_eq!(summary["determinism_checked"], true);
}

#[test]
fn the_flat_world_a_chain_and_a_lone_root_pass_too() {
    let data = data_dir();
    // A root alone (issue 5's 1-node world) runs the same cores, with no link to cut.
    for (shape, nodes) in [("flat", "4"), ("chain", "5"), ("tree", "9"), ("tree", "1")] {
        let ran = palm(
            data.path(),
            &[
                "sim", "--seeds", "0..6", "--shape", shape, "--nodes", nodes, "--json",
            ],
        );
        assert_eq!(ran.code, 0, "{shape}: {}", ran.stderr);
        let summary = ran.json();
        assert_eq!(summary["shape"], shape);
        assert_eq!(summary["passed"], 6, "{summary}");
    }
}

#[test]
fn one_seed_traces_the_protocol_byte_for_byte_and_names_its_replay() {
    let data = data_dir();
    // A seed whose trace shows HopCore forwarding, placing, releasing and answering.
    let (seed, trace) = (0..20)
        .map(|seed| {
            let seed = seed.to_string();
            let ran = palm(data.path(), &["sim", "--seed", &seed, "--trace"]);
            assert_eq!(ran.code, 0, "seed {seed}: {}", ran.stderr);
            (seed, ran.stdout)
        })
        .find(|(_, trace)| {
            ["forwarded:", "placed:", "released:", "answered:"]
                .iter()
                .all(|kind| trace.contains(kind))
        })
        .expect("a seed among 0..20 forwards, places, releases and answers");
    assert!(trace.contains(&format!("seed {seed}: passed")), "{trace}");
    // The same seed prints the same bytes (the wall time goes to standard error), and
    // `--seed S` alone prints the trace too (design.md §9); `--no-trace` only the summary.
    let again = palm(data.path(), &["sim", "--seed", &seed]);
    assert!(
        again.stdout == trace,
        "seed {seed} printed differently twice"
    );
    assert!(again.stderr.contains("wall time"), "{}", again.stderr);
    assert!(trace.lines().count() > 100);
    let quiet = palm(data.path(), &["sim", "--seed", &seed, "--no-trace"]);
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert!(
        quiet.stdout.contains(&format!("seed {seed}: passed")),
        "{}",
        quiet.stdout
    );
    assert!(
        !quiet.stdout.contains("forwarded:") && quiet.stdout.lines().count() < 30,
        "--no-trace printed events: {}",
        quiet.stdout
    );
    let json = palm(data.path(), &["sim", "--seed", &seed, "--json"]);
    let report = json.json();
    assert_eq!(report["passed"], true);
    let replay = report["replay"].as_str().expect("replay");
    assert!(
        replay.starts_with(&format!("palm sim --seed {seed} ")),
        "{replay}"
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
        vec!["sim", "--shape", "ring"],
        vec!["sim", "--seeds", "0..3", "--trace"],
        vec!["sim", "--duration", "soon"],
    ] {
        let ran = palm(data.path(), &args);
        assert_eq!(ran.code, 2, "{args:?}: {}", ran.stderr);
        assert!(ran.stderr.starts_with("palm: error: "), "{}", ran.stderr);
    }
    // Planted bugs are not in the production binary at all.
    let ran = palm(data.path(), &["sim", "--mutation", "same-key-forgotten"]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
}

#[test]
fn the_production_binary_carries_no_planted_bug() {
    let tree = std::process::Command::new(env!("CARGO"))
        .args(["tree", "-p", "palm", "-e", "features", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        tree.status.success(),
        "{}",
        String::from_utf8_lossy(&tree.stderr)
    );
    let text = String::from_utf8_lossy(&tree.stdout);
    assert!(
        text.contains("palm-sim"),
        "the binary has the simulator: {text}"
    );
    assert!(
        !text.contains("feature \"mutations\""),
        "a planted bug reached the production binary:\n{text}"
    );
}
