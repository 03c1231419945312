//! palm-sim: Palm's deterministic simulator.
//!
//! It runs the real cores — the same [`palm_actors::path::JobPath`],
//! [`palm_actors::host::HomeHost`] and [`palm_topology::HopCore`] a `palm` node hosts —
//! for every node of a tree, in one thread on a virtual clock, with simulated disks (a
//! [`palm_actors::store::MemoryStore`] whose crash loses unflushed writes), seats,
//! workloads, links and a network, all driven by one `u64` seed. After every step it
//! checks Palm's invariants; after the faults stop, liveness. A failure names the seed
//! and the exact command that replays it.
//!
//! ```text
//! palm sim --seed 7
//! palm sim --seeds 0..500 --check-determinism
//! ```
//!
//! How the cores are hosted: the node wraps each core in an actor, commits its batches
//! through redb and runs effects as processes; [`world::World`] wraps the same cores,
//! commits batches to a memory disk, runs effects as scheduled events and carries
//! messages through [`net::Net`]. The cores cannot tell the difference: they only ever
//! see `now`, inputs and a `Store`.
//!
//! Planted bugs (feature `mutations`, never enabled by the `palm` binary) are run by the
//! `palm-sim` binary of this crate: `palm-sim --mutation list`.

pub mod check;
pub mod cli;
pub mod net;
pub mod options;
pub mod trace;
pub mod world;

pub use check::{
    COVERAGE_POINTS, Coverage, INVARIANTS, NAMED_HOME_COVERAGE_POINTS, REPLICA_COVERAGE_POINTS,
    Violation,
};
#[cfg(feature = "mutations")]
pub use options::Mutation;
pub use options::{Faults, NODES_DEFAULT, Options, Shape};
pub use world::{Findings, World};

/// One run: what it found and how to reproduce it.
#[derive(Clone, Debug)]
pub struct Report {
    /// The options it ran with.
    pub options: Options,
    /// What happened.
    pub findings: Findings,
}

impl Report {
    /// True when every invariant held.
    pub fn passed(&self) -> bool {
        self.findings.violation.is_none()
    }

    /// The command that replays this run exactly.
    pub fn replay_command(&self) -> String {
        replay_command(&self.options)
    }
}

/// The command line that reproduces a run with `options`: `palm sim ...`, or for a
/// planted bug the `palm-sim` binary that has it.
pub fn replay_command(options: &Options) -> String {
    let flags = format!(
        "--seed {} --nodes {} --shape {} --steps {} --faults {} --duration {}ms{}{} --trace",
        options.seed,
        options.nodes,
        options.shape.as_str(),
        options.steps,
        options.faults.as_str(),
        options.fault_ms,
        if options.replicas { " --replicas" } else { "" },
        if options.named_homes {
            " --named-homes"
        } else {
            ""
        },
    );
    #[cfg(feature = "mutations")]
    if let Some(mutation) = options.mutation {
        return format!(
            "cargo run --release -p palm-sim --features mutations --bin palm-sim -- --mutation {} {flags}",
            mutation.as_str()
        );
    }
    format!("palm sim {flags}")
}

/// Runs one world to the end.
pub fn run(options: Options) -> Report {
    let findings = World::new(options.clone()).run();
    Report { options, findings }
}
