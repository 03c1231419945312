//! The simulator end to end, on the default tree world (root, realm, edges under both)
//! hosting the real `HopCore` and `HomeHost`: seeds pass on every shape, a seed replays
//! bit for bit, and every planted bug is caught within the seeds CI runs, by the seed
//! the report names, with a replay command that reproduces it.

use palm_sim::{Faults, Mutation, Options, Shape, run};

fn options(seed: u64, shape: Shape, nodes: usize, faults: Faults) -> Options {
    Options {
        seed,
        shape,
        nodes,
        faults,
        ..Options::default()
    }
}

#[test]
fn seeds_pass_on_the_tree_the_flat_world_and_a_chain() {
    for (shape, nodes, faults, seeds) in [
        (Shape::Tree, 6, Faults::Heavy, 0..6),
        (Shape::Tree, 9, Faults::Heavy, 0..3),
        (Shape::Flat, 4, Faults::Heavy, 0..4),
        (Shape::Chain, 4, Faults::Heavy, 0..4),
        (Shape::Tree, 6, Faults::Light, 0..3),
        (Shape::Tree, 6, Faults::None, 0..2),
    ] {
        for seed in seeds {
            let report = run(options(seed, shape, nodes, faults));
            assert!(
                report.passed(),
                "seed {seed}, {shape:?} of {nodes}, {faults:?}: {:?}\nreplay: {}",
                report.findings.violation,
                report.replay_command()
            );
            assert!(report.findings.events > 1_000, "the world did something");
            assert!(report.findings.checks > 0);
            let jobs: u64 = report.findings.jobs.values().sum();
            assert!(jobs > 0, "jobs were submitted and stored");
        }
    }
}

#[test]
fn the_tree_world_exercises_the_tree_protocol() {
    let mut coverage = palm_sim::Coverage::default();
    for seed in 0..4 {
        let report = run(options(seed, Shape::Tree, 6, Faults::Heavy));
        assert!(report.passed(), "{:?}", report.findings.violation);
        coverage.merge(&report.findings.coverage);
    }
    let all = coverage.all();
    for point in [
        "forwarded",
        "answer_relayed",
        "placement_relayed",
        "effect_placed_deep",
        "report_relayed",
        "home_unreachable",
        "submit_from_an_edge_acknowledged",
        "completion_recorded",
        "link_replaced_before_noticed",
    ] {
        assert!(all[point] > 0, "{point} never reached in 4 seeds: {all:?}");
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let a = run(options(11, Shape::Tree, 6, Faults::Heavy));
    let b = run(options(11, Shape::Tree, 6, Faults::Heavy));
    assert_eq!(a.findings.trace_hash, b.findings.trace_hash);
    assert_eq!(a.findings.events, b.findings.events);
    assert_eq!(a.findings.sim_ms, b.findings.sim_ms);
    assert_eq!(a.findings.coverage, b.findings.coverage);
    let c = run(options(12, Shape::Tree, 6, Faults::Heavy));
    assert_ne!(a.findings.trace_hash, c.findings.trace_hash);
}

#[test]
fn seeds_pass_with_a_replicated_root_cut_from_its_store() {
    let mut coverage = palm_sim::Coverage::default();
    for seed in 0..8 {
        let report = run(Options {
            seed,
            replicas: true,
            ..Options::default()
        });
        assert!(
            report.passed(),
            "seed {seed} with replicas: {:?}\nreplay: {}",
            report.findings.violation,
            report.replay_command()
        );
        assert!(report.replay_command().contains("--replicas"));
        coverage.merge(&report.findings.coverage);
    }
    let all = coverage.all();
    for point in palm_sim::REPLICA_COVERAGE_POINTS {
        assert!(
            all.get(point).copied().unwrap_or(0) > 0,
            "{point} never reached in 8 seeds: {all:?}"
        );
    }
}

#[test]
fn seeds_pass_with_submits_that_name_their_home() {
    let mut coverage = palm_sim::Coverage::default();
    for (shape, nodes, seeds) in [(Shape::Tree, 6, 0..6), (Shape::Chain, 4, 0..2)] {
        for seed in seeds {
            let report = run(Options {
                seed,
                shape,
                nodes,
                named_homes: true,
                ..Options::default()
            });
            assert!(
                report.passed(),
                "seed {seed} {shape:?} with named homes: {:?}\nreplay: {}",
                report.findings.violation,
                report.replay_command()
            );
            assert!(report.replay_command().contains("--named-homes"));
            coverage.merge(&report.findings.coverage);
        }
    }
    let all = coverage.all();
    for point in palm_sim::NAMED_HOME_COVERAGE_POINTS {
        assert!(
            all.get(point).copied().unwrap_or(0) > 0,
            "{point} never reached: {all:?}"
        );
    }
}

#[test]
fn a_shared_store_that_skips_the_lease_fence_is_caught() {
    let base = Options {
        replicas: true,
        ..Options::default()
    };
    caught_and_replayed_from(base, Mutation::SkipStoreFence, &["no_dual_truth"]);
}

/// Runs `base` (the default world, or another) with `mutation` over the seeds CI runs
/// (0..500) until one breaks an invariant; returns that seed's report.
fn first_caught_from(base: Options, mutation: Mutation) -> palm_sim::Report {
    for seed in 0..500 {
        let mut opts = Options {
            seed,
            ..base.clone()
        };
        opts.mutation = Some(mutation);
        let report = run(opts);
        if !report.passed() {
            return report;
        }
    }
    panic!("{mutation:?} went unnoticed in seeds 0..500");
}

/// Each planted bug is caught, the report's replay command names the seed and the bug,
/// the seed breaks the same invariant again, and without the bug it passes.
fn caught_and_replayed(mutation: Mutation, invariants: &[&str]) {
    caught_and_replayed_from(Options::default(), mutation, invariants);
}

/// [`caught_and_replayed`] from other options than the default world's.
fn caught_and_replayed_from(base: Options, mutation: Mutation, invariants: &[&str]) {
    let caught = first_caught_from(base, mutation);
    let (violation, ..) = caught.findings.violation.as_ref().expect("caught");
    assert!(
        invariants.contains(&violation.invariant),
        "{mutation:?} broke {} ({})",
        violation.invariant,
        violation.detail
    );
    let replay = caught.replay_command();
    assert!(
        replay.contains(&format!("--mutation {}", mutation.as_str())),
        "{replay}"
    );
    assert!(
        replay.contains(&format!("--seed {} ", caught.options.seed)),
        "{replay}"
    );
    let again = run(caught.options.clone());
    assert_eq!(
        again
            .findings
            .violation
            .as_ref()
            .map(|(v, at, ..)| (v.invariant, *at)),
        caught
            .findings
            .violation
            .as_ref()
            .map(|(v, at, ..)| (v.invariant, *at)),
        "the replay breaks the same invariant at the same moment"
    );
    let mut clean = caught.options.clone();
    clean.mutation = None;
    let clean = run(clean);
    assert!(
        clean.passed(),
        "seed {} without the bug: {:?}",
        clean.options.seed,
        clean.findings.violation
    );
}

#[test]
fn a_child_that_forgets_a_placed_key_is_caught() {
    caught_and_replayed(
        Mutation::Hop(palm_topology::HopMutation::SameKeyForgotten),
        &["no_two_live_leases", "completion_recorded_at_most_once"],
    );
}

#[test]
fn a_home_that_releases_without_a_refusal_is_caught() {
    caught_and_replayed(
        Mutation::Hop(palm_topology::HopMutation::ReleaseWithoutRefusal),
        &["no_two_live_leases", "completion_recorded_at_most_once"],
    );
}

#[test]
fn placing_again_after_a_reconnect_is_caught() {
    caught_and_replayed(
        Mutation::Hop(palm_topology::HopMutation::DoublePlacementAfterReconnect),
        &["no_two_live_leases", "completion_recorded_at_most_once"],
    );
}

#[test]
fn a_projection_passed_off_as_the_home_is_caught() {
    caught_and_replayed(
        Mutation::Hop(palm_topology::HopMutation::ProjectionAlwaysValid),
        &["no_projection_passed_off_as_the_home"],
    );
}

#[test]
fn acknowledging_before_durable_is_caught() {
    caught_and_replayed(
        Mutation::AckBeforeDurable,
        &[
            "no_lost_acknowledged_job",
            "journals_only_grow",
            "no_two_live_leases",
            "completion_recorded_at_most_once",
        ],
    );
}

#[test]
fn skipping_the_fencing_check_is_caught() {
    caught_and_replayed(
        Mutation::SkipFencing,
        &[
            "completion_only_from_the_current_lease",
            "completion_recorded_at_most_once",
        ],
    );
}

#[test]
fn two_homes_sharing_a_tag_are_caught() {
    caught_and_replayed(Mutation::SharedTag, &["no_dual_truth"]);
}

#[test]
fn a_relay_that_passes_every_copy_down_is_caught() {
    caught_and_replayed(
        Mutation::Hop(palm_topology::HopMutation::RelayTwice),
        &["no_two_live_leases", "completion_recorded_at_most_once"],
    );
}
