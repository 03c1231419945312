//! palm-sim: Palm's deterministic simulator.
//!
//! It runs the real genome cores — the same [`palm_actors::path::JobPath`] a node hosts —
//! in one thread on a virtual clock, with a simulated disk (a
//! [`palm_actors::store::MemoryStore`] whose crash loses unflushed writes), simulated
//! seats and workloads, and a simulated network between nodes, all driven by one `u64`
//! seed. After every step it checks Palm's invariants; after the faults stop, liveness.
//! A failure names the seed and the exact command that replays it.
//!
//! ```text
//! palm sim --seed 7 --nodes 3 --faults heavy --trace
//! ```
//!
//! How the cores are hosted: `node/` wraps each core in an actor, commits its batches
//! through redb and runs effects as processes; this crate wraps the same cores in
//! [`world::World`], commits batches to a memory disk, runs effects as scheduled events,
//! and carries messages through [`net::Net`]. The cores cannot tell the difference:
//! they only ever see `now`, inputs and a `Store`.

pub mod check;
pub mod net;
pub mod trace;
pub mod tree;
pub mod world;

pub use check::{COVERAGE_POINTS, Coverage, INVARIANTS, Violation};
pub use world::{Faults, Findings, Options, Shape, SimMutation, World};

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

/// The `palm sim` command line that reproduces a run with `options`.
pub fn replay_command(options: &Options) -> String {
    let mut command = format!(
        "palm sim --seed {} --nodes {} --shape {} --steps {} --faults {}",
        options.seed,
        options.nodes,
        options.shape.as_str(),
        options.steps,
        options.faults.as_str()
    );
    if let Some(mutation) = options.mutation {
        command.push_str(&format!(" --mutate {}", mutation.as_str()));
    }
    command.push_str(" --trace");
    command
}

/// Runs one world to the end.
pub fn run(options: Options) -> Report {
    let findings = match options.shape {
        Shape::Flat => World::new(options.clone()).run(),
        Shape::Tree => tree::TreeWorld::new(options.clone()).run(),
    };
    Report { options, findings }
}
