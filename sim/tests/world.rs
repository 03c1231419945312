//! The simulator end to end: seeds pass on one and several nodes, a seed replays bit for
//! bit, the invariants catch deliberate bugs (and the reported seed reproduces them),
//! and the faults reach the situations they are meant to.

use palm_sim::{Faults, Options, SimMutation, run};

fn options(seed: u64, nodes: usize, faults: Faults) -> Options {
    Options {
        seed,
        nodes,
        faults,
        ..Options::default()
    }
}

#[test]
fn seeds_pass_on_one_two_and_five_nodes() {
    for (nodes, faults, seeds) in [
        (1, Faults::Heavy, 0..40),
        (2, Faults::Heavy, 0..40),
        (5, Faults::Heavy, 0..20),
        (2, Faults::Light, 0..20),
        (2, Faults::None, 0..10),
    ] {
        for seed in seeds {
            let report = run(options(seed, nodes, faults));
            assert!(
                report.passed(),
                "seed {seed}, {nodes} nodes, {faults:?}: {:?}\nreplay: {}",
                report.findings.violation,
                report.replay_command()
            );
            assert!(report.findings.events > 100, "the world did something");
            assert!(report.findings.checks > 0);
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let a = run(options(11, 3, Faults::Heavy));
    let b = run(options(11, 3, Faults::Heavy));
    assert_eq!(a.findings.trace_hash, b.findings.trace_hash);
    assert_eq!(a.findings.events, b.findings.events);
    assert_eq!(a.findings.sim_ms, b.findings.sim_ms);
    assert_eq!(a.findings.coverage, b.findings.coverage);
    let c = run(options(12, 3, Faults::Heavy));
    assert_ne!(a.findings.trace_hash, c.findings.trace_hash);
}

/// Runs seeds with `mutation` until one breaks `invariant`; returns that seed's report.
fn first_caught(mutation: SimMutation, nodes: usize, invariant: &str) -> palm_sim::Report {
    for seed in 0..40 {
        let mut opts = options(seed, nodes, Faults::Heavy);
        opts.mutation = Some(mutation);
        let report = run(opts);
        if let Some((violation, ..)) = &report.findings.violation {
            assert_eq!(violation.invariant, invariant, "{violation:?}");
            return report;
        }
    }
    panic!("{mutation:?} went unnoticed in 40 seeds");
}

#[test]
fn skipping_the_fencing_check_is_caught_and_replays() {
    let caught = first_caught(
        SimMutation::SkipFencing,
        3,
        "completion_only_from_the_current_lease",
    );
    let replay = caught.replay_command();
    assert!(replay.contains("--mutate skip-fencing"), "{replay}");
    assert!(replay.starts_with(&format!(
        "palm sim --seed {} --nodes 3",
        caught.options.seed
    )));
    let again = run(caught.options.clone());
    let (a, b) = (&caught.findings.violation, &again.findings.violation);
    assert_eq!(
        a, b,
        "the reported seed reproduces the same violation at the same event"
    );
    assert_eq!(caught.findings.trace_hash, again.findings.trace_hash);
    // Without the mutation the same seed passes.
    let mut healthy = caught.options.clone();
    healthy.mutation = None;
    assert!(run(healthy).passed());
}

#[test]
fn acknowledging_before_durability_is_caught() {
    let caught = first_caught(SimMutation::AckBeforeDurable, 1, "no_lost_acknowledged_job");
    let (violation, ..) = caught.findings.violation.as_ref().expect("caught");
    assert!(violation.detail.contains("acknowledged"), "{violation:?}");
}

#[test]
fn heavy_faults_reach_the_situations_that_matter() {
    let mut coverage = palm_sim::Coverage::default();
    for seed in 0..30 {
        coverage.merge(&run(options(seed, 3, Faults::Heavy)).findings.coverage);
    }
    let all = coverage.all();
    for point in [
        "crash_lost_unflushed_writes",
        "crash_kept_some_unflushed_writes",
        "crash_mid_write",
        "crash_with_leases_held",
        "lease_expired",
        "stale_completion_refused",
        "message_duplicated",
        "message_lost",
        "message_cut_by_partition",
        "orphan_claim_dropped",
        "restart_with_parked_timers",
        "restart_with_waiting_jobs",
        "continue_racing_cancel_refused",
        "continue_wrong_key_refused",
        "completion_resent",
        "worker_crashed",
        "job_succeeded",
        "job_failed",
        "job_cancelled",
    ] {
        assert!(all[point] > 0, "{point} was never reached: {all:?}");
    }
}

fn tree(seed: u64, nodes: usize) -> Options {
    Options {
        seed,
        nodes,
        faults: Faults::Heavy,
        shape: palm_sim::Shape::Tree,
        ..Options::default()
    }
}

#[test]
fn trees_of_homes_pass_and_replay() {
    for nodes in [3, 7, 10] {
        for seed in 0..15 {
            let report = run(tree(seed, nodes));
            assert!(
                report.passed(),
                "seed {seed}, {nodes} nodes: {:?}\nreplay: {}",
                report.findings.violation,
                report.replay_command()
            );
        }
    }
    let a = run(tree(5, 7));
    let b = run(tree(5, 7));
    assert_eq!(a.findings.trace_hash, b.findings.trace_hash);
    let coverage = a.findings.coverage.all();
    for point in ["request_forwarded", "effect_placed", "home_unreachable"] {
        assert!(coverage[point] > 0, "{point}: {coverage:?}");
    }
}

fn tree_mutant_caught(mutation: SimMutation, invariant: &str) {
    for seed in 0..40 {
        let mut opts = tree(seed, 7);
        opts.mutation = Some(mutation);
        let report = run(opts.clone());
        if let Some((violation, ..)) = &report.findings.violation {
            assert_eq!(violation.invariant, invariant, "{violation:?}");
            assert!(report.replay_command().contains("--shape tree"));
            assert_eq!(
                run(opts).findings.violation,
                report.findings.violation,
                "replays"
            );
            return;
        }
    }
    panic!("{mutation:?} went unnoticed in 40 seeds");
}

#[test]
fn a_realm_committing_for_a_job_homed_above_it_is_caught() {
    tree_mutant_caught(SimMutation::SharedTag, "no_dual_truth");
}

#[test]
fn a_relay_passing_a_duplicated_placement_down_again_is_caught() {
    tree_mutant_caught(SimMutation::RelayTwice, "no_two_live_leases");
}

#[test]
fn a_projection_served_as_valid_is_caught() {
    tree_mutant_caught(
        SimMutation::ProjectionAlwaysValid,
        "no_invalid_projection_served_as_valid",
    );
}
