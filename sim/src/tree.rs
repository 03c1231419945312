//! A tree of nodes: a root, realms under it and edges under the realms, each hosting the
//! real cores — a [`JobPath`] over its own memory disk and a [`Topology`] — with clients
//! at every node, requests hopping home over the simulated network, effects placed on
//! the children that offer their needs, and the faults of the flat world plus crashes
//! and partitions of any node.
//!
//! The host duties are the node's: a home answers a forwarded request (and every claim,
//! renewal and completion of a placed effect) only after its flush; a node that cannot
//! reach a job's home answers a status from its projection, marked by the topology core.
//!
//! Invariants beyond the flat world's: **no dual truth** (a job's events are committed
//! only by the node whose tag prefixes its id, and never by two nodes), **no invalid
//! projection served as valid** (an answer marked valid came from the home in that very
//! request), and liveness after the faults heal — every job terminal, waiting, or
//! blocked on a need that nothing in reach of its home offers.

use crate::check::{Checker, Coverage, Violation};
use crate::net::{Fate, Net, NetProfile};
use crate::trace::Trace;
use crate::world::{Faults, Findings, Options, SimMutation};
use palm_actors::bt::{EffectRequest, Outcome, RunResult};
use palm_actors::job::JobStatus;
use palm_actors::path::{
    ClaimedEffect, CompleteError, FlowRef, JobPath, JobPathConfig, Mutation, Notice, SubmitRequest,
};
use palm_actors::random::{Rng, terminating_flow_with_needs};
use palm_actors::store::{MemoryStore, Store};
use palm_topology::{Placement, Projections, Role, Route, Topology, job_tag};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const SEATS: usize = 2;
const LEASE_MS: u64 = 2_000;
const RENEW_MS: u64 = LEASE_MS / 3;
const RETRY_MS: u64 = 1_500;
const IDLE_POLL_MS: u64 = 700;
const SUMMARY_MS: u64 = 1_000;
const PLACE_MS: u64 = 200;
const FLOWS: usize = 6;
const SETTLE_CHECK_MS: u64 = 1_000;
const T0: u64 = 1_700_000_000_000;
/// Capabilities edges offer (alternately); flows' `run` leaves may need one.
const CAPABILITIES: [&str; 2] = ["c0", "c1"];

#[derive(Clone, Debug)]
enum Req {
    Submit {
        flow: String,
        items: Vec<u64>,
    },
    Continue {
        job: String,
        key: String,
        input: Value,
    },
    Cancel {
        job: String,
    },
    Status {
        job: String,
    },
}

impl Req {
    fn job(&self) -> Option<&str> {
        match self {
            Req::Submit { .. } => None,
            Req::Continue { job, .. } | Req::Cancel { job } | Req::Status { job } => Some(job),
        }
    }
}

#[derive(Clone, Debug)]
struct Resp {
    ok: bool,
    value: Value,
    /// Set by the home that answered (a projection served from a cache is not).
    from_home: bool,
}

#[derive(Clone, Debug)]
enum Msg {
    Forward {
        req: u64,
        request: Req,
        hops: u32,
    },
    Answer {
        req: u64,
        response: Resp,
    },
    Summary(palm_topology::Summary),
    Place {
        effect: ClaimedEffect,
    },
    Renew {
        key: String,
        token: u64,
    },
    Renewed {
        key: String,
        token: u64,
        until: Option<u64>,
    },
    Complete {
        key: String,
        token: u64,
        outcome: Outcome,
        run: u64,
        /// The node that ran it (a relaying realm passes it on unchanged).
        node: String,
    },
    Completed {
        run: u64,
    },
    Cancel {
        key: String,
    },
}

#[derive(Clone, Debug)]
enum Ev {
    Client {
        node: usize,
        request: Req,
    },
    Flush {
        node: usize,
    },
    Tick {
        node: usize,
    },
    SeatPoll {
        node: usize,
        seat: usize,
    },
    Finish {
        node: usize,
        run: u64,
    },
    Renew {
        node: usize,
        run: u64,
    },
    Resend {
        node: usize,
        run: u64,
    },
    Deliver {
        from: usize,
        to: usize,
        msg: Box<Msg>,
    },
    Summaries,
    Place {
        node: usize,
    },
    Crash {
        node: usize,
    },
    Restart {
        node: usize,
    },
    Partition {
        child: usize,
    },
    Quiet,
    SettleCheck,
}

/// An effect running on a node: on a local seat, or placed here by the parent.
#[derive(Clone, Debug)]
struct Run {
    id: u64,
    key: String,
    token: u64,
    lease_until: u64,
    outcome: Outcome,
    seat: Option<usize>,
    reporting: bool,
}

#[derive(Clone, Debug)]
enum Reply {
    Client,
    Node { to: usize, req: u64 },
}

#[derive(Clone, Debug)]
enum Ack {
    Answer {
        reply: Reply,
        response: Resp,
        request: Req,
    },
    Send {
        to: usize,
        msg: Msg,
    },
    LocalDone {
        run: u64,
    },
}

/// A placement a node passed down to a child.
#[derive(Clone, Copy, Debug)]
struct Relayed {
    child: usize,
    token: u64,
    /// The home cancelled it: a late copy of the same placement is dropped, not passed
    /// down again (it would start a second run while the cancel is still on its way).
    cancelled: bool,
}

struct Node {
    role: Role,
    parent: Option<usize>,
    children: Vec<usize>,
    capabilities: Vec<String>,
    store: Arc<MemoryStore>,
    path: Option<JobPath>,
    topology: Topology,
    projections: Projections,
    seats: Vec<Option<u64>>,
    runs: BTreeMap<u64, Run>,
    acks: Vec<Ack>,
    touched: BTreeSet<String>,
    notices: Vec<Notice>,
    flush_at: Option<u64>,
    tick_at: Option<u64>,
    checker: Checker,
    /// Requests this node forwarded and waits answers for: its id → where the answer goes.
    pending: BTreeMap<u64, (Reply, Req)>,
    /// Placements this node passed down (multi-hop): effect key → the child it went to,
    /// and the token.
    relayed: BTreeMap<String, Relayed>,
    /// Renewals passed up: (key, token) → the child the answer goes back to.
    relayed_renews: BTreeMap<(String, u64), usize>,
    /// Completions passed up: run id → the child the answer goes back to.
    relayed_completes: BTreeMap<u64, usize>,
    seed: u64,
    tag: String,
}

/// The tree world (see the module docs).
pub struct TreeWorld {
    opts: Options,
    net_rng: Rng,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    nodes: Vec<Node>,
    net: Net,
    coverage: Coverage,
    trace: Trace,
    flows: Vec<String>,
    quiet: bool,
    events: u64,
    next_id: u64,
    known_jobs: Vec<String>,
    /// Job id → the node that committed its first event (dual truth is a second one).
    committed_by: BTreeMap<String, usize>,
    violation: Option<(Violation, u64, u64, Vec<String>)>,
    end_at: u64,
    profile: Profile,
}

struct Profile {
    net: NetProfile,
    flush_delay_ms_max: u64,
    crash_every_ms: Option<u64>,
    partition_every_ms: Option<u64>,
    fail_percent: u64,
    slow_percent: u64,
    hang_percent: u64,
}

fn profile(faults: Faults) -> Profile {
    let net = |latency_ms_max, loss_percent, duplicate_percent| NetProfile {
        latency_ms_min: 1,
        latency_ms_max,
        loss_percent,
        duplicate_percent,
    };
    match faults {
        Faults::None => Profile {
            net: net(5, 0, 0),
            flush_delay_ms_max: 2,
            crash_every_ms: None,
            partition_every_ms: None,
            fail_percent: 10,
            slow_percent: 0,
            hang_percent: 0,
        },
        Faults::Light => Profile {
            net: net(20, 1, 1),
            flush_delay_ms_max: 5,
            crash_every_ms: Some(30_000),
            partition_every_ms: Some(30_000),
            fail_percent: 10,
            slow_percent: 5,
            hang_percent: 1,
        },
        Faults::Heavy => Profile {
            net: net(60, 5, 5),
            flush_delay_ms_max: 20,
            crash_every_ms: Some(6_000),
            partition_every_ms: Some(6_000),
            fail_percent: 15,
            slow_percent: 15,
            hang_percent: 3,
        },
    }
}

/// The shape: node 0 the root, then realms (one per three nodes, at least one, at most
/// half), then edges spread over the realms.
fn shape(nodes: usize) -> Vec<(Role, Option<usize>)> {
    let nodes = nodes.max(2);
    let realms = ((nodes - 1) / 3).clamp(1, (nodes - 1).div_ceil(2));
    let mut shape = vec![(Role::Root, None)];
    for _ in 0..realms {
        shape.push((Role::Realm, Some(0)));
    }
    for i in 0..nodes - 1 - realms {
        shape.push((Role::Edge, Some(1 + i % realms)));
    }
    shape
}

fn name(i: usize, role: Role) -> String {
    match role {
        Role::Root => "root".to_owned(),
        _ => format!("{}{i}", role.as_str()),
    }
}

impl TreeWorld {
    /// Builds the tree world for `opts`.
    pub fn new(opts: Options) -> TreeWorld {
        let profile = profile(opts.faults);
        let mut rng = Rng::new(opts.seed ^ 0x7EE_7EE);
        let layout = shape(opts.nodes);
        let mut nodes: Vec<Node> = Vec::new();
        let mut tags = BTreeSet::new();
        for (i, (role, parent)) in layout.iter().enumerate() {
            let mut seed = opts.seed.wrapping_mul(31).wrapping_add(i as u64 + 1);
            // Tags must be unique in a tree (a real node refuses to route an ambiguous
            // one); the simulator picks seeds that give distinct tags.
            let store = Arc::new(MemoryStore::new());
            if opts.mutation == Some(SimMutation::SharedTag) && i == 1 {
                // The broken variant: this realm takes the root's tag.
                seed = nodes[0].seed;
                let tag = nodes[0].tag.clone();
                nodes.push(Node::new(*role, *parent, &layout, i, store, seed, tag));
                continue;
            }
            let tag = loop {
                let probe = MemoryStore::new();
                let (path, _) = JobPath::open(&probe, JobPathConfig::default(), seed)
                    .expect("a memory store opens");
                if tags.insert(path.tag().to_owned()) {
                    break path.tag().to_owned();
                }
                seed = seed.wrapping_add(0x9E37_79B9);
            };
            nodes.push(Node::new(*role, *parent, &layout, i, store, seed, tag));
        }
        for i in 0..nodes.len() {
            if let Some(p) = nodes[i].parent {
                nodes[p].children.push(i);
            }
        }
        if opts.mutation == Some(SimMutation::ProjectionAlwaysValid) {
            for node in &mut nodes {
                node.projections.claim_valid = true;
            }
        }
        let end_at = T0 + opts.fault_ms + opts.quiet_ms;
        let mut world = TreeWorld {
            net_rng: rng.fork(),
            rng: rng.fork(),
            net: Net::new(profile.net.clone()),
            trace: Trace::new(opts.trace),
            profile,
            now: T0,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            coverage: Coverage::default(),
            flows: Vec::new(),
            quiet: false,
            events: 0,
            next_id: 1,
            known_jobs: Vec::new(),
            committed_by: BTreeMap::new(),
            violation: None,
            end_at,
            opts,
        };
        for i in 0..world.nodes.len() {
            world.boot(i);
        }
        let mut flow_rng = Rng::new(world.opts.seed ^ 0x5EED_F10E);
        let sources: Vec<(String, String)> = (0..FLOWS)
            .map(|i| {
                let name = format!("flow-{i}");
                (
                    name.clone(),
                    terminating_flow_with_needs(&mut flow_rng, &name, &CAPABILITIES),
                )
            })
            .collect();
        for i in 0..world.nodes.len() {
            if let Some(path) = world.nodes[i].path.as_mut() {
                for (name, source) in &sources {
                    path.add_definition(T0, source, &format!("{name}.json"))
                        .expect("random flows are valid");
                }
            }
            world.commit(i);
        }
        world.flows = sources.into_iter().map(|(name, _)| name).collect();
        world.plan();
        world
    }

    fn plan(&mut self) {
        let fault_ms = self.opts.fault_ms.max(1);
        let count = self.nodes.len();
        for _ in 0..self.opts.steps.max(1) {
            let at = T0 + 500 + self.rng.below(fault_ms);
            let node = self.rng.below(count as u64) as usize;
            let request = match self.rng.below(10) {
                0..=4 => Req::Submit {
                    flow: String::new(),
                    items: Vec::new(),
                },
                5..=6 => Req::Status { job: String::new() },
                7..=8 => Req::Continue {
                    job: String::new(),
                    key: String::new(),
                    input: Value::Null,
                },
                _ => Req::Cancel { job: String::new() },
            };
            self.at(at, Ev::Client { node, request });
        }
        if let Some(every) = self.profile.crash_every_ms {
            let mut t = T0;
            loop {
                t += self.rng.between(every / 2, every * 3 / 2);
                if t >= T0 + fault_ms {
                    break;
                }
                let node = self.rng.below(count as u64) as usize;
                self.at(t, Ev::Crash { node });
            }
        }
        if let Some(every) = self.profile.partition_every_ms {
            let mut t = T0;
            loop {
                t += self.rng.between(every / 2, every * 3 / 2);
                if t >= T0 + fault_ms {
                    break;
                }
                let child = 1 + self.rng.below(count as u64 - 1) as usize;
                self.at(t, Ev::Partition { child });
            }
        }
        for node in 0..count {
            for seat in 0..SEATS {
                self.at(T0, Ev::SeatPoll { node, seat });
            }
            self.at(T0 + PLACE_MS, Ev::Place { node });
        }
        self.at(T0 + 1, Ev::Summaries);
        self.at(T0 + fault_ms, Ev::Quiet);
    }

    fn at(&mut self, time: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((time.max(self.now), self.seq), ev);
    }

    fn after(&mut self, delay: u64, ev: Ev) {
        self.at(self.now + delay, ev);
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
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

    fn up(&self, node: usize) -> bool {
        self.nodes[node].path.is_some()
    }

    fn boot(&mut self, i: usize) {
        let config = JobPathConfig {
            node: self.nodes[i].topology_name(),
            lease_ms: LEASE_MS,
        };
        match JobPath::open(&*self.nodes[i].store, config, self.nodes[i].seed) {
            Ok((mut path, report)) => {
                if self.opts.mutation == Some(SimMutation::SkipFencing) {
                    path.set_mutation(Some(Mutation::SkipFencing));
                }
                if report.timers_armed > 0 {
                    self.coverage.hit("restart_with_parked_timers");
                }
                if !report.broken.is_empty() {
                    self.fail(Violation {
                        invariant: "state_is_the_fold_of_the_journal",
                        detail: format!("node {i}: jobs that do not replay: {:?}", report.broken),
                    });
                }
                let node = &mut self.nodes[i];
                if let Err(v) = node.checker.restarted(&node.store, &path) {
                    self.fail(v);
                }
                self.nodes[i].path = Some(path);
            }
            Err(err) => self.fail(Violation {
                invariant: "no_lost_acknowledged_job",
                detail: format!("node {i} cannot reopen its store: {err}"),
            }),
        }
    }

    /// Runs to the end.
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
            self.refresh_links();
            self.handle(ev);
            if self.violation.is_none() {
                self.check_leases();
            }
        }
        if self.violation.is_none() {
            self.judge_liveness();
        }
        let mut jobs = BTreeMap::new();
        let mut checks = 0;
        for node in &mut self.nodes {
            checks += node.checker.checks;
            let store = Arc::clone(&node.store);
            if let Some(path) = node.path.as_mut() {
                for id in Checker::stored_jobs(&store) {
                    if let Ok(Some(record)) = path.record(&*store, &id) {
                        *jobs.entry(record.status.as_str().to_owned()).or_default() += 1;
                    }
                }
            }
        }
        Findings {
            events: self.events,
            sim_ms: self.now - T0,
            checks,
            coverage: self.coverage,
            trace_hash: self.trace.hash(),
            trace_lines: self.trace.lines(),
            jobs,
            violation: self.violation,
        }
    }

    /// Links are up when both ends run and the network does not cut them.
    fn refresh_links(&mut self) {
        for child in 1..self.nodes.len() {
            let Some(parent) = self.nodes[child].parent else {
                continue;
            };
            let up = self.up(parent)
                && self.up(child)
                && !self.net.is_partitioned(parent, child, self.now);
            let (parent_name, child_name) = (
                self.nodes[parent].topology_name(),
                self.nodes[child].topology_name(),
            );
            let now = self.now;
            self.nodes[parent].topology.child_link(now, &child_name, up);
            self.nodes[child]
                .topology
                .parent_link(now, &parent_name, up);
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Client { node, request } => self.client(node, request),
            Ev::Flush { node } => self.flush(node),
            Ev::Tick { node } => self.tick(node),
            Ev::SeatPoll { node, seat } => self.seat_poll(node, seat),
            Ev::Finish { node, run } => self.finish(node, run),
            Ev::Renew { node, run } => self.renew(node, run),
            Ev::Resend { node, run } => self.resend(node, run),
            Ev::Deliver { from, to, msg } => self.deliver(from, to, *msg),
            Ev::Summaries => {
                for node in (1..self.nodes.len()).rev() {
                    if self.up(node)
                        && let Some(parent) = self.nodes[node].parent
                    {
                        let summary = self.summary(node);
                        self.send(node, parent, Msg::Summary(summary));
                    }
                }
                self.after(SUMMARY_MS, Ev::Summaries);
            }
            Ev::Place { node } => {
                self.place(node);
                self.after(PLACE_MS, Ev::Place { node });
            }
            Ev::Crash { node } => self.crash(node),
            Ev::Restart { node } => self.restart(node),
            Ev::Partition { child } => {
                if let Some(parent) = self.nodes[child].parent {
                    let until = self.now + self.rng.between(1_000, 6_000);
                    self.net.partition(parent, child, until);
                    self.coverage.hit("partition");
                    self.line(
                        child,
                        &format!("PARTITION from n{parent} for {}ms", until - self.now),
                    );
                }
            }
            Ev::Quiet => {
                self.quiet = true;
                self.net.heal_all();
                self.net.calm();
                self.line(0, "QUIET faults stop; the network heals");
                for node in 0..self.nodes.len() {
                    if !self.up(node) {
                        self.restart(node);
                    }
                }
                self.after(SETTLE_CHECK_MS, Ev::SettleCheck);
            }
            Ev::SettleCheck => {
                if self.settled() {
                    self.line(0, "SETTLED");
                    self.queue.clear();
                } else {
                    self.after(SETTLE_CHECK_MS, Ev::SettleCheck);
                }
            }
        }
    }

    fn summary(&self, node: usize) -> palm_topology::Summary {
        let n = &self.nodes[node];
        let busy = n.runs.values().filter(|r| !r.reporting).count() as u32;
        n.topology.summary(
            self.now,
            n.capabilities.clone(),
            SEATS as u32,
            busy.min(SEATS as u32),
        )
    }

    // ----- a node's host duties -----

    fn commit(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let Some(path) = node.path.as_mut() else {
            return;
        };
        let batch = path.take_batch();
        let notices = path.take_notices();
        for notice in &notices {
            if let Notice::CancelEffect { key, .. } = notice {
                node.checker.claimed(key, 0);
            }
        }
        node.notices.extend(notices);
        if !batch.is_empty() {
            node.touched.extend(Checker::touched(&batch));
            let _ = node.store.commit(&batch);
        }
        let wants_flush = !batch.is_empty() || !node.acks.is_empty() || !node.notices.is_empty();
        if wants_flush && node.flush_at.is_none() {
            let delay = self.rng.below(self.profile.flush_delay_ms_max + 1);
            self.nodes[i].flush_at = Some(self.now + delay);
            self.after(delay, Ev::Flush { node: i });
        }
        self.arm_tick(i);
    }

    fn arm_tick(&mut self, i: usize) {
        let node = &self.nodes[i];
        let Some(path) = node.path.as_ref() else {
            return;
        };
        let due = if path.has_resumes() {
            Some(self.now)
        } else {
            path.next_deadline()
        };
        if let Some(due) = due
            && node
                .tick_at
                .is_none_or(|armed| due < armed || armed < self.now)
        {
            self.nodes[i].tick_at = Some(due);
            self.at(due, Ev::Tick { node: i });
        }
    }

    fn flush(&mut self, i: usize) {
        self.nodes[i].flush_at = None;
        if !self.up(i) {
            return;
        }
        let _ = self.nodes[i].store.flush();
        let touched = std::mem::take(&mut self.nodes[i].touched);
        // No dual truth: only the home — the node whose tag prefixes a job id — commits
        // the job's events, and no job is committed by two nodes.
        for job in &touched {
            let tag = job_tag(job).unwrap_or_default();
            if tag != self.nodes[i].tag {
                self.fail(Violation {
                    invariant: "no_dual_truth",
                    detail: format!(
                        "node {i} (tag {}) committed events of {job}",
                        self.nodes[i].tag
                    ),
                });
                return;
            }
            match self.committed_by.get(job) {
                Some(other) if *other != i => {
                    self.fail(Violation {
                        invariant: "no_dual_truth",
                        detail: format!("{job} is committed by node {other} and node {i}"),
                    });
                    return;
                }
                Some(_) => {}
                None => {
                    self.committed_by.insert(job.clone(), i);
                }
            }
        }
        let node = &mut self.nodes[i];
        let path = node.path.as_mut().expect("up");
        if let Err(v) = node.checker.flushed(&node.store, path, &touched) {
            self.fail(v);
            return;
        }
        for notice in std::mem::take(&mut self.nodes[i].notices) {
            match notice {
                Notice::EffectReady => {
                    for seat in 0..SEATS {
                        if self.nodes[i].seats[seat].is_none() {
                            self.after(0, Ev::SeatPoll { node: i, seat });
                        }
                    }
                }
                Notice::CancelEffect { key, holder } => self.cancel(i, &key, &holder),
                Notice::JobChanged { job, status } => match status {
                    JobStatus::Succeeded => self.coverage.hit("job_succeeded"),
                    JobStatus::Failed => self.coverage.hit("job_failed"),
                    JobStatus::Cancelled => self.coverage.hit("job_cancelled"),
                    JobStatus::Waiting => {
                        self.coverage.hit("job_parked");
                        let _ = job;
                    }
                    _ => {}
                },
                Notice::PlacesWanted { .. } | Notice::StartRefused { .. } => {}
            }
        }
        for ack in std::mem::take(&mut self.nodes[i].acks) {
            match ack {
                Ack::Answer {
                    reply,
                    response,
                    request,
                } => self.answer(i, reply, response, request),
                Ack::Send { to, msg } => self.send(i, to, msg),
                Ack::LocalDone { run } => {
                    if let Some(r) = self.nodes[i].runs.remove(&run)
                        && let Some(seat) = r.seat
                    {
                        self.nodes[i].seats[seat] = None;
                        self.after(0, Ev::SeatPoll { node: i, seat });
                    }
                }
            }
        }
    }

    fn cancel(&mut self, i: usize, key: &str, holder: &str) {
        if let Some(child) = holder
            .strip_prefix("child:")
            .and_then(|name| self.child_by_name(i, name))
        {
            self.send(
                i,
                child,
                Msg::Cancel {
                    key: key.to_owned(),
                },
            );
            return;
        }
        let runs: Vec<u64> = self.nodes[i]
            .runs
            .values()
            .filter(|r| r.key == key && r.seat.is_some())
            .map(|r| r.id)
            .collect();
        for run in runs {
            if let Some(r) = self.nodes[i].runs.remove(&run)
                && let Some(seat) = r.seat
            {
                self.nodes[i].seats[seat] = None;
                self.coverage.hit("local_effect_stopped");
                self.after(0, Ev::SeatPoll { node: i, seat });
            }
        }
    }

    fn child_by_name(&self, i: usize, name: &str) -> Option<usize> {
        self.nodes[i]
            .children
            .iter()
            .copied()
            .find(|c| self.nodes[*c].topology_name() == name)
    }

    fn tick(&mut self, i: usize) {
        self.nodes[i].tick_at = None;
        let now = self.now;
        let node = &mut self.nodes[i];
        let store = Arc::clone(&node.store);
        let Some(path) = node.path.as_mut() else {
            return;
        };
        path.fire_timers(now);
        let reaped = path.reap_leases(now);
        path.resume_yielded(now);
        path.fire_interests(now, &*store);
        self.coverage.add("lease_expired", reaped as u64);
        self.commit(i);
    }

    // ----- clients and hop-home -----

    fn client(&mut self, node: usize, request: Req) {
        if !self.up(node) {
            self.coverage.hit("client_found_node_down");
            return;
        }
        // Fill in the request from what clients know now.
        let request = match request {
            Req::Submit { .. } => Req::Submit {
                flow: self.rng.pick(&self.flows).clone(),
                items: (0..self.rng.below(3)).map(|i| i + 1).collect(),
            },
            other => {
                if self.known_jobs.is_empty() {
                    return;
                }
                let job = self.rng.pick(&self.known_jobs).clone();
                match other {
                    Req::Status { .. } => Req::Status { job },
                    Req::Cancel { .. } => Req::Cancel { job },
                    _ => Req::Continue {
                        job,
                        key: format!("w{}", 1 + self.rng.below(3)),
                        input: json!({"ok": true}),
                    },
                }
            }
        };
        self.request(node, Reply::Client, request, 0);
    }

    /// Takes a request at `node` (from a client, or forwarded after `hops`).
    fn request(&mut self, node: usize, reply: Reply, request: Req, hops: u32) {
        let route = match &request {
            Req::Submit { .. } => self.nodes[node].topology.route_submit(),
            other => self.nodes[node]
                .topology
                .route_job(other.job().unwrap_or_default()),
        };
        match route {
            Route::Local => self.at_home(node, reply, request),
            Route::Parent | Route::Child(_) if hops >= palm_topology::HOPS_MAX => {
                self.fail(Violation {
                    invariant: "liveness",
                    detail: format!("{request:?} travelled {hops} hops from node {node}"),
                });
            }
            Route::Parent => {
                let parent = self.nodes[node].parent.expect("routed up");
                self.forward(node, parent, reply, request, hops);
            }
            Route::Child(name) => {
                let child = self
                    .child_by_name(node, &name)
                    .expect("routed to a known child");
                self.forward(node, child, reply, request, hops);
            }
            Route::Unreachable(reason) => {
                self.coverage.hit("home_unreachable");
                let served = match &request {
                    Req::Status { job } => {
                        let n = &self.nodes[node];
                        n.projections.serve(job, &n.topology, &reason)
                    }
                    _ => None,
                };
                let response = match served {
                    Some(view) => {
                        self.coverage.hit("projection_served");
                        Resp {
                            ok: true,
                            value: view,
                            from_home: false,
                        }
                    }
                    None => Resp {
                        ok: false,
                        value: json!(reason),
                        from_home: false,
                    },
                };
                self.answer(node, reply, response, request);
            }
        }
    }

    fn forward(&mut self, node: usize, next: usize, reply: Reply, request: Req, hops: u32) {
        let req = self.id();
        self.nodes[node]
            .pending
            .insert(req, (reply, request.clone()));
        self.coverage.hit("request_forwarded");
        self.send(
            node,
            next,
            Msg::Forward {
                req,
                request,
                hops: hops + 1,
            },
        );
    }

    /// The home applies a request; the answer waits for the flush.
    fn at_home(&mut self, i: usize, reply: Reply, request: Req) {
        let now = self.now;
        let node = &mut self.nodes[i];
        let store = Arc::clone(&node.store);
        let Some(path) = node.path.as_mut() else {
            return;
        };
        let (ok, value) = match &request {
            Req::Submit { flow, items } => {
                let submit = SubmitRequest {
                    flow: FlowRef::Stored {
                        name: flow.clone(),
                        revision: None,
                    },
                    input: json!({"items": items})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                    args: Vec::new(),
                    started_by: None,
                };
                match path.submit(now, submit, &*store) {
                    Ok(submitted) => (
                        true,
                        json!({"job": submitted.job, "status": submitted.status}),
                    ),
                    Err(err) => (false, json!(err.to_string())),
                }
            }
            Req::Continue { job, key, input } => {
                match path.continue_job(now, job, key, input.clone(), &*store) {
                    Ok(status) => (true, json!({"job": job, "status": status})),
                    Err(err) => (false, json!(err.to_string())),
                }
            }
            Req::Cancel { job } => match path.cancel(now, job, Some("sim".into()), &*store) {
                Ok(status) => (true, json!({"job": job, "status": status})),
                Err(err) => (false, json!(err.to_string())),
            },
            // A status is read at the flush (after what came before it is durable).
            Req::Status { .. } => (true, Value::Null),
        };
        self.nodes[i].acks.push(Ack::Answer {
            reply,
            response: Resp {
                ok,
                value,
                from_home: true,
            },
            request,
        });
        self.commit(i);
    }

    fn answer(&mut self, i: usize, reply: Reply, mut response: Resp, request: Req) {
        if let (Req::Status { job }, true, true) =
            (&request, response.from_home, response.value.is_null())
        {
            let node = &mut self.nodes[i];
            let store = Arc::clone(&node.store);
            response.value = match node
                .path
                .as_mut()
                .and_then(|p| p.job_view(&*store, job).ok().flatten())
            {
                Some(view) => {
                    let mut value =
                        json!({"job": view.job, "status": view.status, "state": view.state});
                    Projections::fresh(&mut value);
                    value
                }
                None => {
                    response.ok = false;
                    json!(format!("unknown job {job}"))
                }
            };
        }
        match reply {
            Reply::Client => {
                if let (Req::Submit { .. }, true) = (&request, response.ok) {
                    let job = response.value["job"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    let home = self
                        .nodes
                        .iter()
                        .position(|n| Some(n.tag.as_str()) == job_tag(&job));
                    if let Some(home) = home {
                        self.nodes[home].checker.acknowledged(&job);
                    }
                    self.line(i, &format!("client: submitted {job}"));
                    self.known_jobs.push(job);
                }
                // No invalid projection served as valid: a status marked valid came from
                // the home in this very request.
                if let Req::Status { job } = &request
                    && response.ok
                    && response.value["projection"] == "valid"
                    && !response.from_home
                {
                    self.fail(Violation {
                        invariant: "no_invalid_projection_served_as_valid",
                        detail: format!(
                            "node {i} answered a status of {job} from its projection, marked valid"
                        ),
                    });
                }
            }
            Reply::Node { to, req } => {
                self.send(i, to, Msg::Answer { req, response });
            }
        }
    }

    // ----- seats and placement -----

    fn seat_poll(&mut self, i: usize, seat: usize) {
        if !self.up(i) || self.nodes[i].seats[seat].is_some() {
            return;
        }
        let now = self.now;
        let capabilities = self.nodes[i].capabilities.clone();
        let holder = format!("{}/seat-{seat}", self.nodes[i].topology_name());
        let path = self.nodes[i].path.as_mut().expect("up");
        let claimed = path.claim(now, &holder, &|_, request| {
            request
                .requirements()
                .iter()
                .all(|need| capabilities.contains(need))
        });
        match claimed {
            Some(effect) => {
                self.nodes[i].checker.claimed(&effect.key, effect.token);
                self.commit(i);
                self.start_run(i, Some(seat), effect);
            }
            None => {
                let wait = self.rng.between(IDLE_POLL_MS / 2, IDLE_POLL_MS);
                self.after(wait, Ev::SeatPoll { node: i, seat });
            }
        }
    }

    fn place(&mut self, i: usize) {
        if !self.up(i) || !self.nodes[i].role.is_home() {
            return;
        }
        let now = self.now;
        let capabilities = self.nodes[i].capabilities.clone();
        // Every node of the subtree is a target (multi-hop), reached through its direct
        // child, which holds the lease and relays the placement down if it must.
        for target in self.nodes[i].topology.placement_targets(now) {
            let Some(child) = self.child_by_name(i, &target.via) else {
                continue;
            };
            for _ in 0..target.free {
                let holder = format!("child:{}", target.via);
                let ready = &target.ready;
                let path = self.nodes[i].path.as_mut().expect("up");
                let claimed = path.claim(now, &holder, &|_, request| {
                    let needs = request.requirements();
                    let here = needs.iter().all(|n| capabilities.contains(n));
                    let topology_ok = needs.iter().all(|n| ready.contains(n));
                    !here && topology_ok
                });
                let Some(effect) = claimed else {
                    break;
                };
                self.nodes[i].checker.claimed(&effect.key, effect.token);
                self.nodes[i]
                    .topology
                    .placed_on_target(&target.via, &target.node);
                self.coverage.hit(if target.hops > 1 {
                    "effect_placed_deep"
                } else {
                    "effect_placed"
                });
                self.line(
                    i,
                    &format!(
                        "place {} tok {} on n{child} for {}",
                        effect.key, effect.token, target.node
                    ),
                );
                // Placed only once durable: the child cannot be told that a crash took it back.
                self.nodes[i].acks.push(Ack::Send {
                    to: child,
                    msg: Msg::Place { effect },
                });
                self.commit(i);
            }
        }
    }

    /// True when the effect `key` (`job/path/attempt`) belongs to a job homed above node
    /// `i`: its renewals and completion are passed up (as `hop::homed_above` does).
    fn homed_above(&self, i: usize, key: &str) -> bool {
        let job = key.split('/').next().unwrap_or(key);
        !matches!(
            self.nodes[i].topology.route_job(job),
            Route::Local | Route::Child(_)
        )
    }

    fn start_run(&mut self, i: usize, seat: Option<usize>, effect: ClaimedEffect) {
        let id = self.id();
        let (outcome, duration) = self.workload(&effect.request);
        self.line(
            i,
            &format!("runs {} tok {} for {duration}ms", effect.key, effect.token),
        );
        if let Some(seat) = seat {
            self.nodes[i].seats[seat] = Some(id);
        }
        self.nodes[i].runs.insert(
            id,
            Run {
                id,
                key: effect.key,
                token: effect.token,
                lease_until: effect.lease_until,
                outcome,
                seat,
                reporting: false,
            },
        );
        self.after(duration, Ev::Finish { node: i, run: id });
        self.after(RENEW_MS, Ev::Renew { node: i, run: id });
    }

    fn workload(&mut self, request: &EffectRequest) -> (Outcome, u64) {
        let fails = self.rng.chance(self.profile.fail_percent);
        let duration = if !self.quiet && self.rng.chance(self.profile.hang_percent) {
            self.coverage.hit("workload_hung");
            self.rng.between(20_000, 60_000)
        } else if !self.quiet && self.rng.chance(self.profile.slow_percent) {
            self.coverage.hit("workload_slow");
            self.rng.between(1_000, 4_000)
        } else {
            self.rng.between(2, 200)
        };
        let code = i32::from(fails);
        let outcome = match request {
            EffectRequest::Run { .. } => Outcome::Run(RunResult {
                exit_code: Some(code),
                stdout: String::new(),
                stderr: String::new(),
                duration_ms: duration,
                timed_out: false,
                error: None,
            }),
            _ => Outcome::Call {
                ok: false,
                value: palm_actors::json::Json::NULL,
                error: Some("no provider in the simulator".into()),
            },
        };
        (outcome, duration)
    }

    fn finish(&mut self, i: usize, run: u64) {
        if !self.up(i) {
            return;
        }
        let Some(r) = self.nodes[i]
            .runs
            .get(&run)
            .cloned()
            .filter(|r| !r.reporting)
        else {
            return;
        };
        let now = self.now;
        match r.seat {
            Some(_) => {
                let path = self.nodes[i].path.as_mut().expect("up");
                let result = path.complete(now, &r.key, r.token, r.outcome.clone(), None);
                self.completed(i, &r.key, r.token, result);
                if let Some(run) = self.nodes[i].runs.get_mut(&run) {
                    run.reporting = true;
                }
                self.nodes[i].acks.push(Ack::LocalDone { run });
                self.commit(i);
            }
            None => {
                if let Some(run) = self.nodes[i].runs.get_mut(&run) {
                    run.reporting = true;
                }
                self.report(i, &r);
                self.after(RETRY_MS, Ev::Resend { node: i, run });
            }
        }
    }

    fn report(&mut self, i: usize, r: &Run) {
        if let Some(parent) = self.nodes[i].parent {
            self.send(
                i,
                parent,
                Msg::Complete {
                    key: r.key.clone(),
                    token: r.token,
                    outcome: r.outcome.clone(),
                    run: r.id,
                    node: self.nodes[i].topology_name(),
                },
            );
        }
    }

    fn resend(&mut self, i: usize, run: u64) {
        if !self.up(i) {
            return;
        }
        let Some(r) = self.nodes[i]
            .runs
            .get(&run)
            .cloned()
            .filter(|r| r.reporting)
        else {
            return;
        };
        if self.now > r.lease_until + 30_000 {
            // The home has placed it again long ago.
            self.nodes[i].runs.remove(&run);
            return;
        }
        self.coverage.hit("completion_resent");
        self.report(i, &r);
        self.after(RETRY_MS, Ev::Resend { node: i, run });
    }

    fn completed(
        &mut self,
        i: usize,
        key: &str,
        token: u64,
        result: Result<palm_actors::path::Completed, CompleteError>,
    ) {
        match result {
            Ok(_) => {
                self.coverage.hit("completion_recorded");
                if let Err(v) = self.nodes[i].checker.completion_accepted(key, token) {
                    self.fail(v);
                }
            }
            Err(CompleteError::StaleToken { .. }) => self.coverage.hit("stale_completion_refused"),
            Err(_) => self.coverage.hit("completion_not_in_flight_refused"),
        }
    }

    fn renew(&mut self, i: usize, run: u64) {
        if !self.up(i) {
            return;
        }
        let Some(r) = self.nodes[i]
            .runs
            .get(&run)
            .cloned()
            .filter(|r| !r.reporting)
        else {
            return;
        };
        let now = self.now;
        match r.seat {
            Some(seat) => {
                let path = self.nodes[i].path.as_mut().expect("up");
                match path.renew(now, &r.key, r.token) {
                    Ok(until) => {
                        if let Some(run) = self.nodes[i].runs.get_mut(&run) {
                            run.lease_until = until;
                        }
                    }
                    Err(_) => {
                        self.nodes[i].runs.remove(&run);
                        self.nodes[i].seats[seat] = None;
                        self.after(0, Ev::SeatPoll { node: i, seat });
                    }
                }
                self.commit(i);
            }
            None => {
                if let Some(parent) = self.nodes[i].parent {
                    self.send(
                        i,
                        parent,
                        Msg::Renew {
                            key: r.key.clone(),
                            token: r.token,
                        },
                    );
                }
            }
        }
        self.after(RENEW_MS, Ev::Renew { node: i, run });
    }

    // ----- the network -----

    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        match self.net.send(&mut self.net_rng, self.now, from, to) {
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
            Fate::Lost { .. } => self.coverage.hit("message_lost"),
        }
    }

    /// Multi-hop: passes a renewal or outcome of a job homed above `to` up unchanged,
    /// and the answer to one it passed up back down to the child it came from. True
    /// when `msg` was relayed.
    fn relay(&mut self, from: usize, to: usize, msg: &Msg) -> bool {
        let node = &mut self.nodes[to];
        let down = match msg {
            Msg::Renewed { key, token, .. } => node.relayed_renews.remove(&(key.clone(), *token)),
            Msg::Completed { run } => node.relayed_completes.remove(run),
            _ => None,
        };
        if let Some(child) = down {
            self.send(to, child, msg.clone());
            return true;
        }
        let up = match msg {
            Msg::Renew { key, .. } | Msg::Complete { key, .. } => self.homed_above(to, key),
            _ => false,
        };
        if !up {
            return false;
        }
        let node = &mut self.nodes[to];
        match msg {
            Msg::Renew { key, token } => {
                node.relayed_renews.insert((key.clone(), *token), from);
                self.coverage.hit("renew_relayed");
            }
            Msg::Complete {
                run, node: ran_on, ..
            } => {
                node.relayed_completes.insert(*run, from);
                node.topology.completed_on(ran_on);
                self.coverage.hit("completion_relayed");
            }
            _ => {}
        }
        if let Some(parent) = self.nodes[to].parent {
            self.send(to, parent, msg.clone());
        }
        true
    }

    fn deliver(&mut self, from: usize, to: usize, msg: Msg) {
        if !self.up(to) {
            self.coverage.hit("message_to_crashed_node");
            return;
        }
        if self.relay(from, to, &msg) {
            return;
        }
        let now = self.now;
        match msg {
            Msg::Forward { req, request, hops } => {
                self.request(to, Reply::Node { to: from, req }, request, hops)
            }
            Msg::Answer { req, response } => {
                let Some((reply, request)) = self.nodes[to].pending.remove(&req) else {
                    self.coverage.hit("duplicate_answer_ignored");
                    return;
                };
                if response.ok
                    && let Some(job) = request
                        .job()
                        .map(str::to_owned)
                        .or_else(|| response.value["job"].as_str().map(str::to_owned))
                    && matches!(request, Req::Status { .. })
                {
                    self.nodes[to].projections.remember(&job, &response.value);
                }
                self.answer(to, reply, response, request);
            }
            Msg::Summary(summary) => self.nodes[to].topology.child_summary(now, summary),
            Msg::Place { effect } => {
                // A copy of a placement already taken here, or already passed down: the
                // same (key, token) must never start a second run.
                if self.nodes[to]
                    .runs
                    .values()
                    .any(|r| r.key == effect.key && r.token == effect.token)
                {
                    self.coverage.hit("duplicate_placement_ignored");
                    return;
                }
                if let Some(&relayed) = self.nodes[to].relayed.get(&effect.key)
                    && relayed.token == effect.token
                    && self.opts.mutation != Some(SimMutation::RelayTwice)
                {
                    if relayed.cancelled {
                        self.coverage.hit("placement_after_cancel_dropped");
                    } else {
                        // Passed on to the same child, which drops it if it has it.
                        self.coverage.hit("duplicate_relay_passed_on");
                        self.send(to, relayed.child, Msg::Place { effect });
                    }
                    return;
                }
                let busy = self.nodes[to]
                    .runs
                    .values()
                    .filter(|r| r.seat.is_none() && !r.reporting)
                    .count();
                let able = effect
                    .request
                    .requirements()
                    .iter()
                    .all(|n| self.nodes[to].capabilities.contains(n));
                if busy >= SEATS || !able {
                    // Not here: pass it to a child that offers its needs (multi-hop), else
                    // refuse — the lease at home runs out and it is placed again.
                    let needs = effect.request.requirements();
                    if let Placement::Child(name) =
                        self.nodes[to].topology.place(now, &needs, false)
                        && let Some(child) = self.child_by_name(to, &name)
                    {
                        self.coverage.hit("placement_relayed");
                        self.nodes[to].topology.placed_on(&name);
                        self.nodes[to].relayed.insert(
                            effect.key.clone(),
                            Relayed {
                                child,
                                token: effect.token,
                                cancelled: false,
                            },
                        );
                        self.line(
                            to,
                            &format!("relay {} tok {} to n{child}", effect.key, effect.token),
                        );
                        self.send(to, child, Msg::Place { effect });
                        return;
                    }
                    self.coverage.hit("placement_refused");
                    return;
                }
                self.start_run(to, None, effect);
            }
            Msg::Renew { key, token } => {
                let path = self.nodes[to].path.as_mut().expect("up");
                let until = path.renew(now, &key, token).ok();
                self.nodes[to].acks.push(Ack::Send {
                    to: from,
                    msg: Msg::Renewed { key, token, until },
                });
                self.commit(to);
            }
            Msg::Renewed { key, token, until } => {
                let runs: Vec<u64> = self.nodes[to]
                    .runs
                    .values()
                    .filter(|r| r.key == key && r.token == token && r.seat.is_none())
                    .map(|r| r.id)
                    .collect();
                for run in runs {
                    match until {
                        Some(until) => {
                            if let Some(r) = self.nodes[to].runs.get_mut(&run) {
                                r.lease_until = r.lease_until.max(until);
                            }
                        }
                        None => {
                            self.nodes[to].runs.remove(&run);
                        }
                    }
                }
            }
            Msg::Complete {
                key,
                token,
                outcome,
                run,
                node,
            } => {
                self.nodes[to].topology.completed_on(&node);
                let path = self.nodes[to].path.as_mut().expect("up");
                let result = path.complete(now, &key, token, outcome, Some(node));
                self.completed(to, &key, token, result);
                self.nodes[to].acks.push(Ack::Send {
                    to: from,
                    msg: Msg::Completed { run },
                });
                self.commit(to);
            }
            Msg::Completed { run } => {
                self.nodes[to].runs.remove(&run);
            }
            Msg::Cancel { key } => {
                let runs: Vec<u64> = self.nodes[to]
                    .runs
                    .values()
                    .filter(|r| r.key == key && r.seat.is_none() && !r.reporting)
                    .map(|r| r.id)
                    .collect();
                for run in runs {
                    self.coverage.hit("placed_effect_stopped");
                    self.nodes[to].runs.remove(&run);
                }
                if let Some(relayed) = self.nodes[to].relayed.get_mut(&key) {
                    relayed.cancelled = true;
                    let child = relayed.child;
                    self.coverage.hit("cancel_relayed");
                    self.send(to, child, Msg::Cancel { key });
                }
            }
        }
    }

    // ----- crashes -----

    fn crash(&mut self, i: usize) {
        if !self.up(i) {
            return;
        }
        let unflushed = self.nodes[i].store.unflushed();
        let keep = self.rng.below(unflushed as u64 + 1) as usize;
        self.nodes[i].store.crash_keeping(keep);
        if keep < unflushed {
            self.coverage.hit("crash_lost_unflushed_writes");
        }
        self.coverage.hit(match self.nodes[i].role {
            Role::Root => "root_crashed",
            Role::Realm => "realm_crashed",
            _ => "edge_crashed",
        });
        let node = &mut self.nodes[i];
        node.path = None;
        node.seats = vec![None; SEATS];
        node.runs.clear();
        node.acks.clear();
        node.notices.clear();
        node.touched.clear();
        node.pending.clear();
        node.relayed.clear();
        node.relayed_renews.clear();
        node.relayed_completes.clear();
        node.flush_at = None;
        node.tick_at = None;
        self.line(i, &format!("CRASH ({unflushed} unflushed, {keep} kept)"));
        let delay = self.rng.between(200, 3_000);
        self.after(delay, Ev::Restart { node: i });
    }

    fn restart(&mut self, i: usize) {
        if self.up(i) {
            return;
        }
        self.boot(i);
        self.line(i, "RESTART from its disk");
        self.commit(i);
        for seat in 0..SEATS {
            self.after(0, Ev::SeatPoll { node: i, seat });
        }
    }

    // ----- invariants beyond the flush checks -----

    fn check_leases(&mut self) {
        let now = self.now;
        let mut live = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if node.path.is_none() {
                continue;
            }
            for run in node.runs.values() {
                if run.lease_until > now {
                    live.push((run.key.clone(), format!("n{i}")));
                }
            }
        }
        let mut checker = Checker::default();
        if let Err(v) = checker.leases(&live) {
            self.fail(v);
        }
    }

    fn legitimately_blocked(&self, i: usize, core: &palm_actors::job::JobCore) -> bool {
        let node = &self.nodes[i];
        core.engine().outstanding().values().all(|o| {
            let needs = o.request.requirements();
            let here = needs.iter().all(|n| node.capabilities.contains(n));
            // Blocked for good only when no node of the subtree offers the needs:
            // placement reaches every depth.
            !here && !self.subtree_offers(i, &needs)
        }) && !core.engine().outstanding().is_empty()
    }

    fn subtree_offers(&self, i: usize, needs: &[String]) -> bool {
        self.nodes[i].children.iter().any(|&c| {
            needs.iter().all(|n| self.nodes[c].capabilities.contains(n))
                || self.subtree_offers(c, needs)
        })
    }

    fn settled(&self) -> bool {
        self.nodes.iter().enumerate().all(|(i, node)| {
            let Some(path) = node.path.as_ref() else {
                return false;
            };
            node.runs.is_empty()
                && node.flush_at.is_none()
                && path.active_jobs().all(|j| {
                    (j.status() == JobStatus::Waiting && !j.waiting_on().is_empty())
                        || self.legitimately_blocked(i, j)
                })
        })
    }

    fn judge_liveness(&mut self) {
        let mut stuck = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let Some(path) = node.path.as_ref() else {
                stuck.push(format!("node {i} is down at the end"));
                continue;
            };
            for job in path.active_jobs() {
                let legit = (job.status() == JobStatus::Waiting && !job.waiting_on().is_empty())
                    || self.legitimately_blocked(i, job);
                if !legit {
                    let outstanding: Vec<&String> = job.engine().outstanding().keys().collect();
                    stuck.push(format!(
                        "{} at node {i} is {} with {outstanding:?}",
                        job.id(),
                        job.status()
                    ));
                }
            }
        }
        stuck.sort();
        if !stuck.is_empty() {
            self.fail(Violation {
                invariant: "liveness",
                detail: format!(
                    "{} jobs neither terminal, waiting nor legitimately blocked after the faults: {}",
                    stuck.len(),
                    stuck.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
                ),
            });
        }
    }
}

impl Node {
    fn new(
        role: Role,
        parent: Option<usize>,
        layout: &[(Role, Option<usize>)],
        i: usize,
        store: Arc<MemoryStore>,
        seed: u64,
        tag: String,
    ) -> Node {
        let capabilities = if role == Role::Edge {
            vec![CAPABILITIES[i % 2].to_owned()]
        } else {
            Vec::new()
        };
        Node {
            role,
            parent,
            children: Vec::new(),
            capabilities,
            store,
            path: None,
            topology: Topology::new(
                &name(i, role),
                role,
                &tag,
                parent.map(|p| name(p, layout[p].0)).as_deref(),
            ),
            projections: Projections::default(),
            seats: vec![None; SEATS],
            runs: BTreeMap::new(),
            acks: Vec::new(),
            touched: BTreeSet::new(),
            notices: Vec::new(),
            flush_at: None,
            tick_at: None,
            checker: Checker::default(),
            pending: BTreeMap::new(),
            relayed: BTreeMap::new(),
            relayed_renews: BTreeMap::new(),
            relayed_completes: BTreeMap::new(),
            seed,
            tag,
        }
    }

    fn topology_name(&self) -> String {
        self.topology.name().to_owned()
    }
}
