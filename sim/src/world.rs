//! The simulated world: one home node hosting the real [`JobPath`] over a
//! [`MemoryStore`] disk, the seats that drain its effects (local ones on the home, remote
//! ones on worker nodes across the simulated [`Net`]), clients that submit, continue and
//! cancel, and the faults: crashes that lose unflushed writes, restarts that rebuild the
//! node from its disk exactly like a real boot, lost, duplicated, reordered and delayed
//! messages, partitions, clogged links, slow and hanging workloads.
//!
//! Everything happens on a virtual clock in one thread, in the order of a queue keyed
//! by `(time, sequence)`; every choice comes from one seeded RNG. The same options give
//! the same trace, bit for bit.
//!
//! The host plays the node's kernel with its rules: writes are committed after each step
//! and made durable by a later flush (group commit); acknowledgements — a client's
//! submit, and *every* answer to a remote seat (claim, renewal, completion) — wait for
//! that flush. Local seats get claims and renewals at once, because a crash kills them
//! together with the node; remote seats cannot be told so, which is why their answers
//! must be durable (the simulator finds two live leases otherwise).

use crate::check::{Checker, Coverage, Violation};
use crate::net::{Fate, Net, NetProfile};
use crate::trace::Trace;
use palm_actors::bt::{EffectRequest, Outcome, RunResult};
use palm_actors::job::JobStatus;
use palm_actors::json::Json;
use palm_actors::path::{
    ClaimedEffect, CompleteError, FlowRef, JobPath, JobPathConfig, Mutation, Notice, SubmitRequest,
};
use palm_actors::random::{Rng, terminating_flow};
use palm_actors::store::{MemoryStore, Store};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// How hostile the world is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Faults {
    /// No faults: a reliable network, no crashes, no hangs.
    None,
    /// Now and then.
    Light,
    /// Often, and all kinds at once.
    Heavy,
}

impl Faults {
    /// Parses `none`, `light`, `heavy`.
    pub fn parse(text: &str) -> Option<Faults> {
        match text {
            "none" => Some(Faults::None),
            "light" => Some(Faults::Light),
            "heavy" => Some(Faults::Heavy),
            _ => None,
        }
    }

    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            Faults::None => "none",
            Faults::Light => "light",
            Faults::Heavy => "heavy",
        }
    }
}

/// A deliberate bug, to prove the simulator catches what it claims to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimMutation {
    /// The job path accepts completions whatever their fencing token.
    SkipFencing,
    /// The host acknowledges submits before they are durable.
    AckBeforeDurable,
    /// (Tree worlds) nodes serve their projections marked valid while home is cut off.
    ProjectionAlwaysValid,
    /// (Tree worlds) the first realm opens its store under the root's tag, so it commits
    /// jobs whose ids say they are homed above it.
    SharedTag,
    /// (Tree worlds) a relaying node passes every copy of a placement down afresh, even
    /// one it already relayed, so a duplicated message can start a second run.
    RelayTwice,
}

impl SimMutation {
    /// Parses `skip-fencing`, `ack-before-durable`.
    pub fn parse(text: &str) -> Option<SimMutation> {
        match text {
            "skip-fencing" => Some(SimMutation::SkipFencing),
            "ack-before-durable" => Some(SimMutation::AckBeforeDurable),
            "projection-always-valid" => Some(SimMutation::ProjectionAlwaysValid),
            "shared-tag" => Some(SimMutation::SharedTag),
            "relay-twice" => Some(SimMutation::RelayTwice),
            _ => None,
        }
    }

    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            SimMutation::SkipFencing => "skip-fencing",
            SimMutation::AckBeforeDurable => "ack-before-durable",
            SimMutation::ProjectionAlwaysValid => "projection-always-valid",
            SimMutation::SharedTag => "shared-tag",
            SimMutation::RelayTwice => "relay-twice",
        }
    }
}

/// How the nodes are arranged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One home and workers whose seats claim over the network.
    Flat,
    /// A root, realms and edges: several homes, requests hopping home, placement.
    Tree,
}

impl Shape {
    /// Parses `flat`, `tree`.
    pub fn parse(text: &str) -> Option<Shape> {
        match text {
            "flat" => Some(Shape::Flat),
            "tree" => Some(Shape::Tree),
            _ => None,
        }
    }

    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Flat => "flat",
            Shape::Tree => "tree",
        }
    }

    /// The default for `nodes`: a tree from three nodes up.
    pub fn for_nodes(nodes: usize) -> Shape {
        if nodes >= 3 { Shape::Tree } else { Shape::Flat }
    }
}

/// What to simulate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The seed: everything follows from it.
    pub seed: u64,
    /// Nodes: the home plus `nodes - 1` workers.
    pub nodes: usize,
    /// Client actions (submits, continues, cancels) in the faulty phase.
    pub steps: u64,
    /// How hostile.
    pub faults: Faults,
    /// Print the trace.
    pub trace: bool,
    /// A deliberate bug.
    pub mutation: Option<SimMutation>,
    /// Virtual time the faulty phase lasts at least (client actions are spread over it).
    pub fault_ms: u64,
    /// Longest quiet phase (faults healed) before liveness is judged.
    pub quiet_ms: u64,
    /// How the nodes are arranged.
    pub shape: Shape,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 0,
            nodes: 1,
            steps: 200,
            faults: Faults::Light,
            trace: false,
            mutation: None,
            fault_ms: 60_000,
            quiet_ms: 600_000,
            shape: Shape::Flat,
        }
    }
}

/// Seats per node.
const SEATS: usize = 2;
/// The lease on a claimed effect (short, so expiry happens often).
const LEASE_MS: u64 = 2_000;
/// Seats renew this often while running.
const RENEW_MS: u64 = LEASE_MS / 3;
/// A remote seat that heard nothing for this long asks again (or resends).
const RETRY_MS: u64 = 1_500;
/// An idle seat looks for work at least this often.
const IDLE_POLL_MS: u64 = 700;
/// Flows the clients choose from.
const FLOWS: usize = 6;
/// How often the quiet phase checks whether everything has settled.
const SETTLE_CHECK_MS: u64 = 1_000;

struct Profile {
    net: NetProfile,
    flush_delay_ms_max: u64,
    crash_home_every_ms: Option<u64>,
    crash_worker_every_ms: Option<u64>,
    partition_every_ms: Option<u64>,
    clog_every_ms: Option<u64>,
    fail_percent: u64,
    slow_percent: u64,
    hang_percent: u64,
    partial_crash: bool,
    /// Percent of home crashes that wait for the next commit and strike before its flush.
    crash_mid_write_percent: u64,
}

fn profile(faults: Faults) -> Profile {
    match faults {
        Faults::None => Profile {
            net: NetProfile {
                latency_ms_min: 1,
                latency_ms_max: 5,
                loss_percent: 0,
                duplicate_percent: 0,
            },
            flush_delay_ms_max: 2,
            crash_home_every_ms: None,
            crash_worker_every_ms: None,
            partition_every_ms: None,
            clog_every_ms: None,
            fail_percent: 10,
            slow_percent: 0,
            hang_percent: 0,
            partial_crash: false,
            crash_mid_write_percent: 0,
        },
        Faults::Light => Profile {
            net: NetProfile {
                latency_ms_min: 1,
                latency_ms_max: 20,
                loss_percent: 1,
                duplicate_percent: 1,
            },
            flush_delay_ms_max: 5,
            crash_home_every_ms: Some(30_000),
            crash_worker_every_ms: Some(40_000),
            partition_every_ms: Some(40_000),
            clog_every_ms: None,
            fail_percent: 10,
            slow_percent: 5,
            hang_percent: 1,
            partial_crash: false,
            crash_mid_write_percent: 30,
        },
        Faults::Heavy => Profile {
            net: NetProfile {
                latency_ms_min: 1,
                latency_ms_max: 80,
                loss_percent: 5,
                duplicate_percent: 5,
            },
            flush_delay_ms_max: 20,
            crash_home_every_ms: Some(8_000),
            crash_worker_every_ms: Some(10_000),
            partition_every_ms: Some(10_000),
            clog_every_ms: Some(15_000),
            fail_percent: 15,
            slow_percent: 15,
            hang_percent: 3,
            partial_crash: true,
            crash_mid_write_percent: 60,
        },
    }
}

#[derive(Clone, Debug)]
enum Action {
    Submit,
    Continue,
    Cancel,
    ContinueAfterCancel(String),
}

#[derive(Clone, Debug)]
enum Msg {
    Claim {
        seat: usize,
        req: u64,
    },
    Claimed {
        seat: usize,
        req: u64,
        effect: Option<ClaimedEffect>,
    },
    Complete {
        seat: usize,
        run: u64,
        key: String,
        token: u64,
        outcome: Outcome,
    },
    CompleteAck {
        seat: usize,
        run: u64,
    },
    Renew {
        seat: usize,
        run: u64,
        key: String,
        token: u64,
    },
    Renewed {
        seat: usize,
        run: u64,
        until: Option<u64>,
    },
    Cancel {
        key: String,
    },
}

impl Msg {
    fn describe(&self) -> String {
        match self {
            Msg::Claim { seat, req } => format!("claim? s{seat} r{req}"),
            Msg::Claimed { seat, req, effect } => match effect {
                Some(e) => format!("claimed s{seat} r{req} {} tok {}", e.key, e.token),
                None => format!("claimed s{seat} r{req} nothing"),
            },
            Msg::Complete {
                seat, key, token, ..
            } => format!("complete s{seat} {key} tok {token}"),
            Msg::CompleteAck { seat, run } => format!("complete-ack s{seat} run {run}"),
            Msg::Renew {
                seat, key, token, ..
            } => format!("renew? s{seat} {key} tok {token}"),
            Msg::Renewed { seat, until, .. } => format!("renewed s{seat} {until:?}"),
            Msg::Cancel { key } => format!("cancel {key}"),
        }
    }
}

#[derive(Clone, Debug)]
enum Ev {
    Client(Action),
    Flush,
    HomeTick,
    SeatPoll {
        node: usize,
        seat: usize,
    },
    Finish {
        node: usize,
        seat: usize,
        run: u64,
    },
    Renew {
        node: usize,
        seat: usize,
        run: u64,
    },
    Resend {
        node: usize,
        seat: usize,
        run: u64,
    },
    Deliver {
        from: usize,
        to: usize,
        msg: Box<Msg>,
    },
    Crash {
        node: usize,
    },
    Restart {
        node: usize,
    },
    Partition {
        worker: usize,
    },
    Clog {
        worker: usize,
    },
    Quiet,
    SettleCheck,
}

#[derive(Clone, Debug)]
struct Run {
    id: u64,
    key: String,
    token: u64,
    lease_until: u64,
    outcome: Outcome,
}

#[derive(Clone, Debug)]
enum SeatState {
    Idle,
    Asking { req: u64, since: u64 },
    Running(Run),
    Reporting(Run),
}

#[derive(Clone, Debug)]
enum Ack {
    Submitted(String),
    Remote { to: usize, msg: Msg },
    LocalCompleted { seat: usize, run: u64 },
}

struct Home {
    store: Arc<MemoryStore>,
    path: Option<JobPath>,
    seats: Vec<SeatState>,
    acks: Vec<Ack>,
    notices: Vec<Notice>,
    touched: BTreeSet<String>,
    flush_at: Option<u64>,
    tick_at: Option<u64>,
}

struct Worker {
    up: bool,
    seats: Vec<SeatState>,
}

/// What a run found.
#[derive(Clone, Debug)]
pub struct Findings {
    /// World events processed.
    pub events: u64,
    /// Virtual time simulated.
    pub sim_ms: u64,
    /// Invariant checks performed.
    pub checks: u64,
    /// Situations reached.
    pub coverage: Coverage,
    /// Hash of the trace.
    pub trace_hash: u64,
    /// Trace lines.
    pub trace_lines: u64,
    /// Jobs by final status.
    pub jobs: BTreeMap<String, u64>,
    /// The first broken invariant: what, when (virtual ms), after which event, and the
    /// last trace lines.
    pub violation: Option<(Violation, u64, u64, Vec<String>)>,
}

/// The world (see the module docs).
pub struct World {
    opts: Options,
    profile: Profile,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    home: Home,
    workers: Vec<Worker>,
    net: Net,
    checker: Checker,
    coverage: Coverage,
    trace: Trace,
    flows: Vec<String>,
    quiet: bool,
    events: u64,
    next_id: u64,
    violation: Option<(Violation, u64, u64, Vec<String>)>,
    end_at: u64,
    /// A home crash waiting for the next commit (to strike before its flush).
    crash_armed: bool,
}

fn holder(node: usize, seat: usize) -> String {
    if node == 0 {
        format!("home/seat-{seat}")
    } else {
        format!("w{node}/seat-{seat}")
    }
}

/// The moment the simulated epoch starts (a plausible wall-clock value; nothing reads a
/// real clock).
const T0: u64 = 1_700_000_000_000;

impl World {
    /// Builds the world for `opts`.
    pub fn new(opts: Options) -> World {
        let profile = profile(opts.faults);
        let mut rng = Rng::new(opts.seed);
        let net = Net::new(profile.net.clone());
        let nodes = opts.nodes.max(1);
        let trace = Trace::new(opts.trace);
        let end_at = T0 + opts.fault_ms + opts.quiet_ms;
        let mut world = World {
            rng: rng.fork(),
            profile,
            now: T0,
            seq: 0,
            queue: BTreeMap::new(),
            home: Home {
                store: Arc::new(MemoryStore::new()),
                path: None,
                seats: vec![SeatState::Idle; SEATS],
                acks: Vec::new(),
                notices: Vec::new(),
                touched: BTreeSet::new(),
                flush_at: None,
                tick_at: None,
            },
            workers: (1..nodes)
                .map(|_| Worker {
                    up: true,
                    seats: vec![SeatState::Idle; SEATS],
                })
                .collect(),
            net,
            checker: Checker::default(),
            coverage: Coverage::default(),
            trace,
            flows: Vec::new(),
            quiet: false,
            events: 0,
            next_id: 1,
            violation: None,
            end_at,
            crash_armed: false,
            opts,
        };
        world.boot_home();
        let mut flow_rng = Rng::new(world.opts.seed ^ 0x5EED_F10E);
        let path = world.home.path.as_mut().expect("booted");
        for i in 0..FLOWS {
            let name = format!("flow-{i}");
            let source = terminating_flow(&mut flow_rng, &name);
            path.add_definition(T0, &source, &format!("{name}.json"))
                .expect("random flows are valid");
            world.flows.push(name);
        }
        world.commit_pending();
        world.schedule_flush();
        world.plan();
        world
    }

    fn plan(&mut self) {
        let fault_ms = self.opts.fault_ms.max(1);
        let steps = self.opts.steps.max(1);
        for _ in 0..steps {
            let at = T0 + self.rng.below(fault_ms);
            let action = match self.rng.below(10) {
                0..=5 => Action::Submit,
                6..=8 => Action::Continue,
                _ => Action::Cancel,
            };
            self.at(at, Ev::Client(action));
        }
        let workers = self.workers.len();
        let plan_every =
            |world: &mut World, every: Option<u64>, make: &dyn Fn(&mut Rng) -> Option<Ev>| {
                let Some(every) = every else { return };
                let mut t = T0;
                loop {
                    t += world.rng.between(every / 2, every * 3 / 2);
                    if t >= T0 + fault_ms {
                        break;
                    }
                    if let Some(ev) = make(&mut world.rng) {
                        world.at(t, ev);
                    }
                }
            };
        plan_every(self, self.profile.crash_home_every_ms, &|_| {
            Some(Ev::Crash { node: 0 })
        });
        if workers > 0 {
            plan_every(self, self.profile.crash_worker_every_ms, &|rng| {
                Some(Ev::Crash {
                    node: 1 + rng.below(workers as u64) as usize,
                })
            });
            plan_every(self, self.profile.partition_every_ms, &|rng| {
                Some(Ev::Partition {
                    worker: 1 + rng.below(workers as u64) as usize,
                })
            });
            plan_every(self, self.profile.clog_every_ms, &|rng| {
                Some(Ev::Clog {
                    worker: 1 + rng.below(workers as u64) as usize,
                })
            });
        }
        for seat in 0..SEATS {
            self.at(T0, Ev::SeatPoll { node: 0, seat });
            for node in 1..=workers {
                self.at(T0, Ev::SeatPoll { node, seat });
            }
        }
        self.at(T0 + fault_ms, Ev::Quiet);
    }

    fn at(&mut self, time: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((time.max(self.now), self.seq), ev);
    }

    fn after(&mut self, delay: u64, ev: Ev) {
        self.at(self.now + delay, ev);
    }

    fn line(&mut self, node: usize, text: &str) {
        self.trace.line(self.now - T0, node, text);
    }

    fn fail(&mut self, violation: Violation) {
        if self.violation.is_none() {
            self.line(
                0,
                &format!("VIOLATION {}: {}", violation.invariant, violation.detail),
            );
            let tail = self.trace.tail();
            self.violation = Some((violation, self.now - T0, self.events, tail));
        }
    }

    fn boot_home(&mut self) {
        let config = JobPathConfig {
            node: "home".to_owned(),
            lease_ms: LEASE_MS,
        };
        match JobPath::open(&*self.home.store, config, self.opts.seed) {
            Ok((mut path, report)) => {
                if self.opts.mutation == Some(SimMutation::SkipFencing) {
                    path.set_mutation(Some(Mutation::SkipFencing));
                }
                if report.timers_armed > 0 {
                    self.coverage.hit("restart_with_parked_timers");
                }
                if report.effects_requeued > 0 {
                    self.coverage.hit("restart_requeued_own_claims");
                }
                if !report.broken.is_empty() {
                    let detail = format!(
                        "jobs that do not replay after a restart: {:?}",
                        report.broken
                    );
                    self.fail(Violation {
                        invariant: "state_is_the_fold_of_the_journal",
                        detail,
                    });
                }
                let waiting = path
                    .active_jobs()
                    .filter(|j| j.status() == JobStatus::Waiting)
                    .count();
                if waiting > 0 {
                    self.coverage.hit("restart_with_waiting_jobs");
                }
                self.home.path = Some(path);
                if let Err(v) = self
                    .checker
                    .restarted(&self.home.store, self.home.path.as_ref().expect("just set"))
                {
                    self.fail(v);
                }
            }
            Err(err) => self.fail(Violation {
                invariant: "no_lost_acknowledged_job",
                detail: format!("the home cannot reopen its store: {err}"),
            }),
        }
    }

    /// Runs to the end; returns what happened.
    pub fn run(mut self) -> Findings {
        while self.violation.is_none() {
            let Some(((time, _), ev)) = self.queue.pop_first() else {
                break;
            };
            if time > self.end_at {
                break;
            }
            self.now = time;
            self.events += 1;
            self.handle(ev);
            if self.violation.is_none() {
                self.check_leases();
            }
        }
        if self.violation.is_none() {
            self.judge_liveness();
        }
        let mut jobs = BTreeMap::new();
        if let Some(path) = self.home.path.as_mut() {
            for id in Checker::stored_jobs(&self.home.store) {
                if let Ok(Some(record)) = path.record(&*self.home.store, &id) {
                    *jobs.entry(record.status.as_str().to_owned()).or_default() += 1;
                }
            }
        }
        Findings {
            events: self.events,
            sim_ms: self.now - T0,
            checks: self.checker.checks,
            coverage: self.coverage,
            trace_hash: self.trace.hash(),
            trace_lines: self.trace.lines(),
            jobs,
            violation: self.violation,
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Client(action) => self.client(action),
            Ev::Flush => self.flush(),
            Ev::HomeTick => self.home_tick(),
            Ev::SeatPoll { node, seat } => self.seat_poll(node, seat),
            Ev::Finish { node, seat, run } => self.finish(node, seat, run),
            Ev::Renew { node, seat, run } => self.renew(node, seat, run),
            Ev::Resend { node, seat, run } => self.resend(node, seat, run),
            Ev::Deliver { from, to, msg } => self.deliver(from, to, *msg),
            Ev::Crash { node } => self.crash(node),
            Ev::Restart { node } => self.restart(node),
            Ev::Partition { worker } => {
                let until = self.now + self.rng.between(1_000, 8_000);
                self.net.partition(0, worker, until);
                self.coverage.hit("partition");
                self.line(
                    worker,
                    &format!("PARTITION from home for {}ms", until - self.now),
                );
            }
            Ev::Clog { worker } => {
                let until = self.now + self.rng.between(500, 4_000);
                self.net.clog(0, worker, until);
                self.coverage.hit("clog");
                self.line(
                    worker,
                    &format!("CLOG link to home for {}ms", until - self.now),
                );
            }
            Ev::Quiet => {
                self.quiet = true;
                self.net.heal_all();
                self.net.calm();
                self.line(0, "QUIET faults stop; the network heals");
                if self.home.path.is_none() {
                    self.restart(0);
                }
                for node in 1..=self.workers.len() {
                    if !self.workers[node - 1].up {
                        self.restart(node);
                    }
                }
                self.after(SETTLE_CHECK_MS, Ev::SettleCheck);
            }
            Ev::SettleCheck => {
                if self.settled() {
                    self.line(0, "SETTLED every job is terminal or waits");
                    self.queue.clear();
                } else {
                    self.after(SETTLE_CHECK_MS, Ev::SettleCheck);
                }
            }
        }
    }

    // ----- the home's host duties: commit, flush, acknowledge, tick -----

    /// Commits what the job path wrote (not yet durable) and takes its notices.
    fn commit_pending(&mut self) {
        let Some(path) = self.home.path.as_mut() else {
            return;
        };
        let batch = path.take_batch();
        let notices = path.take_notices();
        for notice in &notices {
            // The model learns at once that a claim is gone (its token is no longer the
            // current one), even though the holder hears of it only after the flush.
            if let Notice::CancelEffect { key, .. } = notice {
                self.checker.claimed(key, 0);
            }
        }
        self.home.notices.extend(notices);
        if !batch.is_empty() {
            self.home.touched.extend(Checker::touched(&batch));
            if let Err(err) = self.home.store.commit(&batch) {
                self.fail(Violation {
                    invariant: "journals_only_grow",
                    detail: format!("commit failed: {err}"),
                });
            }
            if std::mem::take(&mut self.crash_armed) {
                // Strike now, before this batch's flush (which comes at least 1 ms later).
                self.coverage.hit("crash_mid_write");
                self.at(self.now, Ev::Crash { node: 0 });
                if self.home.flush_at.is_none() {
                    self.home.flush_at = Some(self.now + 1);
                    self.after(1, Ev::Flush);
                }
            }
            self.schedule_flush();
        }
        if !self.home.acks.is_empty() || !self.home.notices.is_empty() {
            self.schedule_flush();
        }
        if self.opts.mutation == Some(SimMutation::AckBeforeDurable) {
            let acks: Vec<Ack> = self
                .home
                .acks
                .iter()
                .filter(|a| matches!(a, Ack::Submitted(_)))
                .cloned()
                .collect();
            self.home.acks.retain(|a| !matches!(a, Ack::Submitted(_)));
            for ack in acks {
                self.acknowledge(ack);
            }
        }
        self.arm_tick();
    }

    fn schedule_flush(&mut self) {
        if self.home.flush_at.is_none() && self.home.path.is_some() {
            let delay = self.rng.below(self.profile.flush_delay_ms_max + 1);
            self.home.flush_at = Some(self.now + delay);
            self.after(delay, Ev::Flush);
        }
    }

    fn arm_tick(&mut self) {
        let Some(path) = self.home.path.as_ref() else {
            return;
        };
        let due = if path.has_resumes() {
            Some(self.now)
        } else {
            path.next_deadline()
        };
        if let Some(due) = due
            && self
                .home
                .tick_at
                .is_none_or(|armed| due < armed || armed < self.now)
        {
            self.home.tick_at = Some(due);
            self.at(due, Ev::HomeTick);
        }
    }

    fn flush(&mut self) {
        self.home.flush_at = None;
        if self.home.path.is_none() {
            return;
        }
        if let Err(err) = self.home.store.flush() {
            self.fail(Violation {
                invariant: "journals_only_grow",
                detail: format!("flush failed: {err}"),
            });
            return;
        }
        let touched = std::mem::take(&mut self.home.touched);
        let path = self.home.path.as_mut().expect("checked");
        if let Err(v) = self.checker.flushed(&self.home.store, path, &touched) {
            self.fail(v);
            return;
        }
        for notice in std::mem::take(&mut self.home.notices) {
            match notice {
                Notice::EffectReady => {
                    for seat in 0..SEATS {
                        if matches!(self.home.seats[seat], SeatState::Idle) {
                            self.after(0, Ev::SeatPoll { node: 0, seat });
                        }
                    }
                }
                Notice::CancelEffect { key, holder } => self.cancel_effect(&key, &holder),
                Notice::JobChanged { job, status } => {
                    if status.is_terminal() || status == JobStatus::Waiting {
                        self.line(0, &format!("job {job} {status}"));
                    }
                    match status {
                        JobStatus::Succeeded => self.coverage.hit("job_succeeded"),
                        JobStatus::Failed => self.coverage.hit("job_failed"),
                        JobStatus::Cancelled => self.coverage.hit("job_cancelled"),
                        JobStatus::Waiting => self.coverage.hit("job_parked"),
                        _ => {}
                    }
                }
                Notice::PlacesWanted { .. } => {}
                Notice::StartRefused { flow, reason } => {
                    self.line(0, &format!("start of {flow} refused: {reason}"));
                }
            }
        }
        for ack in std::mem::take(&mut self.home.acks) {
            self.acknowledge(ack);
        }
    }

    fn acknowledge(&mut self, ack: Ack) {
        match ack {
            Ack::Submitted(job) => {
                self.checker.acknowledged(&job);
                self.line(0, &format!("ack submit {job}"));
            }
            Ack::Remote { to, msg } => self.send(0, to, msg),
            Ack::LocalCompleted { seat, run } => {
                if matches!(&self.home.seats[seat], SeatState::Reporting(r) if r.id == run) {
                    self.home.seats[seat] = SeatState::Idle;
                    self.after(0, Ev::SeatPoll { node: 0, seat });
                }
            }
        }
    }

    fn cancel_effect(&mut self, key: &str, holder: &str) {
        if let Some(seat) = holder
            .strip_prefix("home/seat-")
            .and_then(|s| s.parse::<usize>().ok())
        {
            if let Some(SeatState::Running(run)) = self.home.seats.get(seat)
                && run.key == key
            {
                self.line(0, &format!("seat {seat} stops {key}"));
                self.coverage.hit("local_effect_stopped");
                self.home.seats[seat] = SeatState::Idle;
                self.after(0, Ev::SeatPoll { node: 0, seat });
            }
            return;
        }
        if let Some(node) = holder
            .strip_prefix('w')
            .and_then(|rest| rest.split('/').next())
            .and_then(|n| n.parse::<usize>().ok())
        {
            self.send(
                0,
                node,
                Msg::Cancel {
                    key: key.to_owned(),
                },
            );
        }
    }

    fn home_tick(&mut self) {
        self.home.tick_at = None;
        let now = self.now;
        let Some(path) = self.home.path.as_mut() else {
            return;
        };
        let fired = path.fire_timers(now);
        let reaped = path.reap_leases(now);
        let resumed = path.resume_yielded(now);
        self.coverage.add("timer_fired", fired as u64);
        self.coverage.add("lease_expired", reaped as u64);
        self.coverage.add("job_resumed_after_yield", resumed as u64);
        if reaped > 0 {
            self.line(0, &format!("reaped {reaped} expired leases"));
        }
        self.commit_pending();
    }

    // ----- clients -----

    fn client(&mut self, action: Action) {
        let now = self.now;
        let Some(path) = self.home.path.as_mut() else {
            self.coverage.hit("client_found_home_down");
            self.line(0, "client: home is down");
            return;
        };
        match action {
            Action::Submit => {
                let flow = self.rng.pick(&self.flows).clone();
                let items: Vec<u64> = (0..self.rng.below(4)).map(|i| i + 1).collect();
                let request = SubmitRequest {
                    flow: FlowRef::Stored {
                        name: flow.clone(),
                        revision: None,
                    },
                    input: json!({ "items": items })
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                    args: Vec::new(),
                    started_by: None,
                };
                let store = Arc::clone(&self.home.store);
                match path.submit(now, request, &*store) {
                    Ok(submitted) => {
                        self.line(
                            0,
                            &format!("submit {} {flow} → {}", submitted.job, submitted.status),
                        );
                        self.home.acks.push(Ack::Submitted(submitted.job));
                    }
                    Err(err) => self.line(0, &format!("submit refused: {err}")),
                }
            }
            Action::Continue => {
                let mut waiting: Vec<(String, palm_actors::bt::Parked)> = path
                    .active_jobs()
                    .flat_map(|j| {
                        j.waiting_on()
                            .iter()
                            .map(|p| (j.id().to_owned(), p.clone()))
                    })
                    .collect();
                waiting.sort_by(|a, b| (&a.0, &a.1.key).cmp(&(&b.0, &b.1.key)));
                let store = Arc::clone(&self.home.store);
                if waiting.is_empty() {
                    let refused = path
                        .continue_job(now, "nojob-1", "k", json!(1), &*store)
                        .is_err();
                    if refused {
                        self.coverage.hit("continue_unknown_job_refused");
                    }
                    return;
                }
                let (job, wait) = waiting[self.rng.below(waiting.len() as u64) as usize].clone();
                let (key, input, kind) = match self.rng.below(10) {
                    0 => ("no-such-key".to_owned(), json!(1), "wrong_key"),
                    1 if wait.schema.is_some() => {
                        (wait.key.clone(), json!("not a number"), "invalid_input")
                    }
                    _ => {
                        let input = if wait.schema.is_some() {
                            json!(self.rng.below(10))
                        } else {
                            json!({ "ok": true })
                        };
                        (wait.key.clone(), input, "right")
                    }
                };
                match path.continue_job(now, &job, &key, input, &*store) {
                    Ok(status) => {
                        self.coverage.hit("continue_accepted");
                        self.line(0, &format!("continue {job} {key} → {status}"));
                    }
                    Err(err) => {
                        self.coverage.hit(match kind {
                            "wrong_key" => "continue_wrong_key_refused",
                            _ => "continue_invalid_input_refused",
                        });
                        if kind == "right" {
                            self.fail(Violation {
                                invariant: "liveness",
                                detail: format!(
                                    "a valid continue of {job} `{key}` was refused: {err}"
                                ),
                            });
                        }
                    }
                }
            }
            Action::Cancel => {
                let mut jobs: Vec<String> = path.active_jobs().map(|j| j.id().to_owned()).collect();
                jobs.sort();
                let Some(job) = (!jobs.is_empty())
                    .then(|| jobs[self.rng.below(jobs.len() as u64) as usize].clone())
                else {
                    return;
                };
                let store = Arc::clone(&self.home.store);
                match path.cancel(now, &job, Some("sim".into()), &*store) {
                    Ok(status) => {
                        self.coverage.hit("cancel_accepted");
                        self.line(0, &format!("cancel {job} → {status}"));
                        if self.rng.chance(30) {
                            let delay = self.rng.below(5);
                            self.after(delay, Ev::Client(Action::ContinueAfterCancel(job)));
                        }
                    }
                    Err(err) => self.line(0, &format!("cancel {job} refused: {err}")),
                }
            }
            Action::ContinueAfterCancel(job) => {
                let store = Arc::clone(&self.home.store);
                if path
                    .continue_job(now, &job, "w1", json!(1), &*store)
                    .is_err()
                {
                    self.coverage.hit("continue_racing_cancel_refused");
                }
            }
        }
        self.commit_pending();
    }

    // ----- seats -----

    fn seats_of(&mut self, node: usize) -> Option<&mut Vec<SeatState>> {
        if node == 0 {
            self.home.path.as_ref()?;
            Some(&mut self.home.seats)
        } else {
            let worker = self.workers.get_mut(node - 1)?;
            worker.up.then_some(&mut worker.seats)
        }
    }

    fn seat_poll(&mut self, node: usize, seat: usize) {
        let now = self.now;
        let Some(state) = self.seats_of(node).and_then(|s| s.get(seat)).cloned() else {
            return;
        };
        match state {
            SeatState::Idle => {}
            SeatState::Asking { since, .. } if now >= since + RETRY_MS => {
                self.coverage.hit("claim_retried");
            }
            _ => return,
        }
        if node == 0 {
            let path = self.home.path.as_mut().expect("seats_of checked");
            match path.claim(now, &holder(0, seat), &|_, _| true) {
                Some(effect) => {
                    self.checker.claimed(&effect.key, effect.token);
                    self.commit_pending();
                    self.start_run(0, seat, effect);
                }
                None => {
                    let wait = self.rng.between(IDLE_POLL_MS / 2, IDLE_POLL_MS);
                    self.after(wait, Ev::SeatPoll { node, seat });
                }
            }
        } else {
            let req = self.id();
            self.workers[node - 1].seats[seat] = SeatState::Asking { req, since: now };
            self.send(node, 0, Msg::Claim { seat, req });
            self.after(RETRY_MS, Ev::SeatPoll { node, seat });
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn start_run(&mut self, node: usize, seat: usize, effect: ClaimedEffect) {
        let id = self.id();
        let (outcome, duration) = self.workload(&effect.request);
        self.line(
            node,
            &format!(
                "seat {seat} runs {} tok {} for {duration}ms",
                effect.key, effect.token
            ),
        );
        let run = Run {
            id,
            key: effect.key,
            token: effect.token,
            lease_until: effect.lease_until,
            outcome,
        };
        if let Some(seats) = self.seats_of(node) {
            seats[seat] = SeatState::Running(run);
        }
        self.after(
            duration,
            Ev::Finish {
                node,
                seat,
                run: id,
            },
        );
        self.after(
            RENEW_MS,
            Ev::Renew {
                node,
                seat,
                run: id,
            },
        );
    }

    /// What a claimed effect does and how long it takes.
    fn workload(&mut self, request: &EffectRequest) -> (Outcome, u64) {
        match request {
            EffectRequest::Run { cmd, .. } => {
                let fails = self.rng.chance(self.profile.fail_percent);
                let duration = if !self.quiet && self.rng.chance(self.profile.hang_percent) {
                    self.coverage.hit("workload_hung");
                    self.rng.between(30_000, 90_000)
                } else if !self.quiet && self.rng.chance(self.profile.slow_percent) {
                    self.coverage.hit("workload_slow");
                    self.rng.between(1_000, 4_000)
                } else {
                    self.rng.between(2, 200)
                };
                let exit_code = if fails { 1 } else { 0 };
                (
                    Outcome::Run(RunResult {
                        exit_code: Some(exit_code),
                        stdout: format!("{cmd}: {exit_code}\n"),
                        stderr: String::new(),
                        duration_ms: duration,
                        timed_out: false,
                        error: None,
                    }),
                    duration,
                )
            }
            other => (
                Outcome::Call {
                    ok: false,
                    value: Json::NULL,
                    error: Some(format!(
                        "no provider for a `{}` effect in the simulator",
                        other.kind_name()
                    )),
                },
                self.rng.between(1, 5),
            ),
        }
    }

    fn finish(&mut self, node: usize, seat: usize, run_id: u64) {
        let now = self.now;
        let Some(SeatState::Running(run)) = self.seats_of(node).and_then(|s| s.get(seat)).cloned()
        else {
            return;
        };
        if run.id != run_id {
            return;
        }
        if node == 0 {
            let path = self.home.path.as_mut().expect("seats_of checked");
            let result = path.complete(
                now,
                &run.key,
                run.token,
                run.outcome.clone(),
                Some("home".into()),
            );
            self.completed(0, &run, result);
            self.home.seats[seat] = SeatState::Reporting(run.clone());
            self.home
                .acks
                .push(Ack::LocalCompleted { seat, run: run.id });
            self.commit_pending();
        } else {
            self.workers[node - 1].seats[seat] = SeatState::Reporting(run.clone());
            self.send_completion(node, seat, &run);
            self.after(
                RETRY_MS,
                Ev::Resend {
                    node,
                    seat,
                    run: run.id,
                },
            );
        }
    }

    fn send_completion(&mut self, node: usize, seat: usize, run: &Run) {
        self.send(
            node,
            0,
            Msg::Complete {
                seat,
                run: run.id,
                key: run.key.clone(),
                token: run.token,
                outcome: run.outcome.clone(),
            },
        );
    }

    fn completed(
        &mut self,
        node: usize,
        run: &Run,
        result: Result<palm_actors::path::Completed, CompleteError>,
    ) {
        match result {
            Ok(completed) => {
                self.coverage.hit("completion_recorded");
                self.line(
                    node,
                    &format!(
                        "completed {} tok {} → {}",
                        run.key, run.token, completed.status
                    ),
                );
                if let Err(v) = self.checker.completion_accepted(&run.key, run.token) {
                    self.fail(v);
                }
            }
            Err(CompleteError::StaleToken { .. }) => {
                self.coverage.hit("stale_completion_refused");
                self.line(
                    node,
                    &format!("completion of {} tok {} refused: stale", run.key, run.token),
                );
            }
            Err(CompleteError::NotInFlight(_)) => {
                self.coverage.hit("completion_not_in_flight_refused");
            }
        }
    }

    fn renew(&mut self, node: usize, seat: usize, run_id: u64) {
        let now = self.now;
        let Some(SeatState::Running(run)) = self.seats_of(node).and_then(|s| s.get(seat)).cloned()
        else {
            return;
        };
        if run.id != run_id {
            return;
        }
        if node == 0 {
            let path = self.home.path.as_mut().expect("seats_of checked");
            match path.renew(now, &run.key, run.token) {
                Ok(until) => {
                    if let SeatState::Running(r) = &mut self.home.seats[seat] {
                        r.lease_until = until;
                    }
                }
                Err(_) => {
                    self.coverage.hit("renewal_refused");
                    self.home.seats[seat] = SeatState::Idle;
                    self.after(0, Ev::SeatPoll { node, seat });
                    self.commit_pending();
                    return;
                }
            }
            self.commit_pending();
        } else {
            self.send(
                node,
                0,
                Msg::Renew {
                    seat,
                    run: run.id,
                    key: run.key.clone(),
                    token: run.token,
                },
            );
        }
        self.after(
            RENEW_MS,
            Ev::Renew {
                node,
                seat,
                run: run_id,
            },
        );
    }

    fn resend(&mut self, node: usize, seat: usize, run_id: u64) {
        let Some(SeatState::Reporting(run)) =
            self.seats_of(node).and_then(|s| s.get(seat)).cloned()
        else {
            return;
        };
        if run.id != run_id {
            return;
        }
        self.coverage.hit("completion_resent");
        self.send_completion(node, seat, &run);
        self.after(
            RETRY_MS,
            Ev::Resend {
                node,
                seat,
                run: run_id,
            },
        );
    }

    // ----- the network -----

    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        let fate = self.net.send(&mut self.rng, self.now, from, to);
        match fate {
            Fate::Delivered(times) => {
                if times.len() > 1 {
                    self.coverage.hit("message_duplicated");
                }
                for at in times {
                    self.at(
                        at,
                        Ev::Deliver {
                            from,
                            to,
                            msg: Box::new(msg.clone()),
                        },
                    );
                }
            }
            Fate::Lost { partitioned } => {
                self.coverage.hit(if partitioned {
                    "message_cut_by_partition"
                } else {
                    "message_lost"
                });
            }
        }
    }

    fn deliver(&mut self, from: usize, to: usize, msg: Msg) {
        let now = self.now;
        if to == 0 {
            let Some(path) = self.home.path.as_mut() else {
                self.coverage.hit("message_to_crashed_node");
                return;
            };
            match msg {
                Msg::Claim { seat, req } => {
                    let effect = path.claim(now, &holder(from, seat), &|_, _| true);
                    if let Some(effect) = &effect {
                        self.checker.claimed(&effect.key, effect.token);
                        self.line(
                            0,
                            &format!(
                                "grant {} tok {} to w{from}/s{seat}",
                                effect.key, effect.token
                            ),
                        );
                    }
                    self.home.acks.push(Ack::Remote {
                        to: from,
                        msg: Msg::Claimed { seat, req, effect },
                    });
                }
                Msg::Complete {
                    seat,
                    run,
                    key,
                    token,
                    outcome,
                } => {
                    let result =
                        path.complete(now, &key, token, outcome.clone(), Some(format!("w{from}")));
                    let model = Run {
                        id: run,
                        key,
                        token,
                        lease_until: 0,
                        outcome,
                    };
                    self.completed(from, &model, result);
                    self.home.acks.push(Ack::Remote {
                        to: from,
                        msg: Msg::CompleteAck { seat, run },
                    });
                }
                Msg::Renew {
                    seat,
                    run,
                    key,
                    token,
                } => {
                    let until = path.renew(now, &key, token).ok();
                    if until.is_none() {
                        self.coverage.hit("renewal_refused");
                    }
                    self.home.acks.push(Ack::Remote {
                        to: from,
                        msg: Msg::Renewed { seat, run, until },
                    });
                }
                other => self.line(0, &format!("home ignores {}", other.describe())),
            }
            self.commit_pending();
            return;
        }
        let Some(worker) = self.workers.get_mut(to - 1).filter(|w| w.up) else {
            self.coverage.hit("message_to_crashed_node");
            return;
        };
        match msg {
            Msg::Claimed { seat, req, effect } => match (&worker.seats[seat], effect) {
                (SeatState::Asking { req: asked, .. }, Some(effect)) if *asked == req => {
                    self.start_run(to, seat, effect);
                }
                (SeatState::Asking { req: asked, .. }, None) if *asked == req => {
                    worker.seats[seat] = SeatState::Idle;
                    let wait = self.rng.between(IDLE_POLL_MS / 2, IDLE_POLL_MS);
                    self.after(wait, Ev::SeatPoll { node: to, seat });
                }
                (_, Some(effect)) => {
                    // An answer to a question the seat no longer asks: the claim is
                    // dropped and its lease will expire at home.
                    self.coverage.hit("orphan_claim_dropped");
                    self.line(to, &format!("drops orphan claim {}", effect.key));
                }
                _ => {}
            },
            Msg::CompleteAck { seat, run } => {
                if matches!(&worker.seats[seat], SeatState::Reporting(r) if r.id == run) {
                    worker.seats[seat] = SeatState::Idle;
                    self.after(0, Ev::SeatPoll { node: to, seat });
                } else {
                    self.coverage.hit("duplicate_ack_ignored");
                }
            }
            Msg::Renewed { seat, run, until } => {
                if let SeatState::Running(r) = &mut worker.seats[seat]
                    && r.id == run
                {
                    match until {
                        Some(until) => r.lease_until = r.lease_until.max(until),
                        None => {
                            worker.seats[seat] = SeatState::Idle;
                            self.after(0, Ev::SeatPoll { node: to, seat });
                        }
                    }
                }
            }
            Msg::Cancel { key } => {
                let stopping: Vec<usize> = (0..SEATS)
                    .filter(|seat| matches!(&worker.seats[*seat], SeatState::Running(r) if r.key == key))
                    .collect();
                for seat in stopping {
                    self.workers[to - 1].seats[seat] = SeatState::Idle;
                    self.coverage.hit("remote_effect_stopped");
                    self.after(0, Ev::SeatPoll { node: to, seat });
                }
            }
            other => self.line(to, &format!("worker ignores {}", other.describe())),
        }
    }

    // ----- crashes -----

    fn crash(&mut self, node: usize) {
        if node == 0 {
            if self.home.path.is_none() {
                return;
            }
            if self.home.store.unflushed() == 0
                && !self.crash_armed
                && !self.quiet
                && self.rng.chance(self.profile.crash_mid_write_percent)
            {
                self.crash_armed = true;
                return;
            }
            self.crash_armed = false;
            let unflushed = self.home.store.unflushed();
            let keep = if self.profile.partial_crash {
                self.rng.below(unflushed as u64 + 1) as usize
            } else {
                0
            };
            self.home.store.crash_keeping(keep);
            if keep < unflushed {
                self.coverage.hit("crash_lost_unflushed_writes");
            }
            if keep > 0 {
                self.coverage.hit("crash_kept_some_unflushed_writes");
            }
            if !self.home.acks.is_empty() {
                self.coverage.hit("crash_dropped_acknowledgements");
            }
            let leased = self
                .home
                .path
                .as_ref()
                .map(|p| p.effects().values().filter(|r| r.claim.is_some()).count())
                .unwrap_or(0);
            if leased > 0 {
                self.coverage.hit("crash_with_leases_held");
            }
            self.home.path = None;
            self.home.seats = vec![SeatState::Idle; SEATS];
            self.home.acks.clear();
            self.home.notices.clear();
            self.home.touched.clear();
            self.home.flush_at = None;
            self.home.tick_at = None;
            self.line(
                0,
                &format!("CRASH home: {unflushed} unflushed batches, {keep} reach the disk"),
            );
        } else {
            let Some(worker) = self.workers.get_mut(node - 1).filter(|w| w.up) else {
                return;
            };
            worker.up = false;
            worker.seats = vec![SeatState::Idle; SEATS];
            self.coverage.hit("worker_crashed");
            self.line(node, "CRASH worker");
        }
        let delay = self.rng.between(200, 3_000);
        self.after(delay, Ev::Restart { node });
    }

    fn restart(&mut self, node: usize) {
        if node == 0 {
            if self.home.path.is_some() {
                return;
            }
            self.boot_home();
            self.line(0, "RESTART home from its disk");
            self.commit_pending();
            for seat in 0..SEATS {
                self.after(0, Ev::SeatPoll { node: 0, seat });
            }
        } else {
            let Some(worker) = self.workers.get_mut(node - 1) else {
                return;
            };
            if worker.up {
                return;
            }
            worker.up = true;
            self.line(node, "RESTART worker");
            for seat in 0..SEATS {
                self.after(0, Ev::SeatPoll { node, seat });
            }
        }
    }

    // ----- invariants beyond the flush checks -----

    fn check_leases(&mut self) {
        let now = self.now;
        let mut live = Vec::new();
        let mut collect = |node: usize, seats: &[SeatState]| {
            for (seat, state) in seats.iter().enumerate() {
                if let SeatState::Running(run) | SeatState::Reporting(run) = state
                    && run.lease_until > now
                {
                    live.push((run.key.clone(), holder(node, seat)));
                }
            }
        };
        if self.home.path.is_some() {
            collect(0, &self.home.seats);
        }
        for (i, worker) in self.workers.iter().enumerate() {
            if worker.up {
                collect(i + 1, &worker.seats);
            }
        }
        if let Err(v) = self.checker.leases(&live) {
            self.fail(v);
        }
    }

    fn settled(&mut self) -> bool {
        let Some(path) = self.home.path.as_ref() else {
            return false;
        };
        let busy = self
            .home
            .seats
            .iter()
            .chain(self.workers.iter().flat_map(|w| w.seats.iter()))
            .any(|s| matches!(s, SeatState::Running(_) | SeatState::Reporting(_)));
        !busy
            && self.home.flush_at.is_none()
            && path
                .active_jobs()
                .all(|j| j.status() == JobStatus::Waiting && !j.waiting_on().is_empty())
    }

    fn judge_liveness(&mut self) {
        let Some(path) = self.home.path.as_mut() else {
            return;
        };
        let mut stuck: Vec<String> = path
            .active_jobs()
            .filter(|j| j.status() != JobStatus::Waiting || j.waiting_on().is_empty())
            .map(|j| {
                let outstanding: Vec<&String> = j.engine().outstanding().keys().collect();
                format!(
                    "{} is {} with {outstanding:?} outstanding",
                    j.id(),
                    j.status()
                )
            })
            .collect();
        stuck.sort();
        for job in self.checker.acknowledged_jobs() {
            if !matches!(path.record(&*self.home.store, job), Ok(Some(_))) {
                stuck.push(format!("{job} was acknowledged and is missing"));
            }
        }
        if !stuck.is_empty() {
            let quiet_s = self.opts.quiet_ms / 1000;
            self.fail(Violation {
                invariant: "liveness",
                detail: format!(
                    "{} jobs neither terminal nor waiting after {quiet_s}s without faults: {}",
                    stuck.len(),
                    stuck.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
                ),
            });
        }
    }
}
