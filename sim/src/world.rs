//! The simulated world: a tree of nodes, each hosting the real cores a `palm` node hosts
//! — a [`JobPath`] over its own memory disk, the [`HomeHost`] duties around it, and the
//! tree protocol [`HopCore`] — with seats, clients at every node, links that come and go,
//! and the faults: crashes that lose unflushed writes (a child killed and back within
//! its lease among them), partitions, lost, duplicated and reordered messages, slow and
//! hanging work.
//!
//! Everything happens on a virtual clock in one thread, in the order of a queue keyed by
//! `(time, sequence)`; every choice comes from one seeded RNG. The same options give the
//! same trace, byte for byte.
//!
//! **What is the world's and what is the cores'.** The world plays the shell: it carries
//! messages, runs effects as scheduled events with drawn outcomes, commits sealed
//! batches to the memory disk and flushes them after a drawn delay, and plays the
//! links' keepalive (a dead peer is noticed after a drawn delay, a restarted child
//! redials and replaces its old connection). Every decision about a request, a
//! placement, a lease or a reply is made by the cores, exactly as in a node.
//!
//! **Invariants** (checked after every flush and every event): no lost acknowledged job,
//! completion recorded at most once, no two live leases, journals only grow, state is
//! the fold of the journal, terminal is final, completions only from the current lease,
//! no dual truth (a job's events are committed only by its home), no projection passed
//! off as the home's answer (every answer marked as the home's carries the nonce of the
//! very request it answers); and after the faults heal, liveness: every job terminal,
//! waiting, or blocked on a need nothing in reach of its home offers.

use crate::check::{Checker, Coverage, Violation};
use crate::net::{Fate, Net, NetProfile};
use crate::options::{Faults, Options};
use crate::trace::Trace;
use palm_actors::bt::{EffectRequest, Outcome, RunResult};
use palm_actors::host::HomeHost;
use palm_actors::job::JobStatus;
use palm_actors::json::Json;
use palm_actors::path::{
    ClaimedEffect, CompleteError, FlowRef, JobError, JobPath, JobPathConfig, Notice, SubmitRequest,
};
use palm_actors::random::{Rng, terminating_flow_with_needs};
use palm_actors::store::{FencedStore, MemoryStore, Store, WriteBatch, WriterLease};
use palm_topology::{
    Direction, HopConfig, HopCore, HopOutput, LocalFacts, Reply, Role, RouteRequest, Routed,
    TopoMsg, Toward, child_holder, job_tag,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// Seats per node.
const SEATS: usize = 2;
/// The lease on a claimed effect (short, so expiry happens often).
const LEASE_MS: u64 = 2_000;
/// Local seats renew this often while running.
const RENEW_MS: u64 = LEASE_MS / 3;
/// An idle seat looks for work at least this often.
const IDLE_POLL_MS: u64 = 700;
/// Flows the clients choose from.
const FLOWS: usize = 6;
/// How often the quiet phase checks whether everything has settled.
const SETTLE_CHECK_MS: u64 = 1_000;
/// How long a client waits for an answer.
const CLIENT_WAIT_MS: u64 = 20_000;
/// The world's clock starts here (a plausible epoch, so times look like times).
pub const T0: u64 = 1_700_000_000_000;
/// The replicated root's writer's lease on its shared store (`--replicas`).
const STORE_LEASE_MS: u64 = 3_000;
/// A standby looks at the lease this often.
const STANDBY_POLL_MS: u64 = 200;
/// Capabilities edges offer (alternately); flows' `run` leaves may need one.
const CAPABILITIES: [&str; 2] = ["c0", "c1"];

/// What a run found.
#[derive(Clone, Debug)]
pub struct Findings {
    /// Events processed.
    pub events: u64,
    /// Virtual time simulated (ms).
    pub sim_ms: u64,
    /// Invariant checks performed.
    pub checks: u64,
    /// Situations reached.
    pub coverage: Coverage,
    /// FNV hash of the whole trace (printed or not).
    pub trace_hash: u64,
    /// Trace lines.
    pub trace_lines: u64,
    /// Jobs by final status, over every home.
    pub jobs: BTreeMap<String, u64>,
    /// The first broken invariant, when it broke (virtual ms, event number) and the last
    /// lines of the trace before it.
    pub violation: Option<(Violation, u64, u64, Vec<String>)>,
}

#[derive(Clone, Copy, Debug)]
enum ClientKind {
    Submit,
    Status,
    Continue,
    Cancel,
}

#[derive(Clone, Debug)]
enum Ev {
    Client {
        node: usize,
        kind: ClientKind,
    },
    Flush {
        node: usize,
        boot: u64,
    },
    Tick {
        node: usize,
        boot: u64,
    },
    Hop {
        node: usize,
        boot: u64,
    },
    SeatPoll {
        node: usize,
        boot: u64,
        seat: usize,
    },
    Finish {
        node: usize,
        boot: u64,
        run: u64,
    },
    SeatRenew {
        node: usize,
        boot: u64,
        run: u64,
    },
    Deliver {
        from: usize,
        to: usize,
        conn: u64,
        msg: Box<TopoMsg>,
    },
    Dial {
        child: usize,
    },
    Noticed {
        child: usize,
        at_parent: bool,
        conn: u64,
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
    /// `--replicas`: the serving root replica is cut from the shared store at its next
    /// commit.
    StoreCut,
    /// A standby root replica looks at the writer's lease.
    Standby,
    /// The serving replica renews its lease.
    Renew {
        boot: u64,
    },
    /// The replica cut from the store gets through again and sends what it had sealed.
    StaleWrite,
    Heal {
        child: usize,
    },
    Quiet,
    SettleCheck,
}

/// Where an answer applied at a home goes.
#[derive(Clone, Debug)]
enum AnswerTo {
    /// A client of this very node (`id` in the world's client table).
    Client(u64),
    /// Another node, through HopCore (`serve`).
    Serve(u64),
}

/// What a home does once a batch is durable (the replies it waited for).
#[derive(Clone, Debug)]
enum Ack {
    Answer {
        to: AnswerTo,
        request: Value,
        /// `None`: a read, evaluated once everything before it is durable.
        response: Option<Value>,
    },
    Claimed {
        round: u64,
        effects: Vec<ClaimedEffect>,
    },
    Renewed {
        serve: u64,
        result: Result<u64, String>,
    },
    Completed {
        serve: u64,
        result: Result<(), String>,
    },
    SeatRenewed {
        run: u64,
        until: Option<u64>,
    },
    SeatDone {
        run: u64,
    },
}

#[derive(Clone, Debug)]
struct Run {
    key: String,
    token: u64,
    lease_until: u64,
    outcome: Outcome,
    /// A local seat, or `None` for an effect placed here by the parent.
    seat: Option<usize>,
    finished: bool,
}

/// What a running node holds in memory (gone with a crash).
struct Live {
    path: JobPath,
    host: HomeHost<Ack>,
    hop: HopCore,
    seats: Vec<Option<u64>>,
    runs: BTreeMap<u64, Run>,
    /// Notices of sealed batches, acted on once they are durable.
    notices: Vec<(u64, Vec<Notice>)>,
    last_sealed: u64,
    touched: BTreeSet<String>,
    flush_at: Option<u64>,
    tick_at: Option<u64>,
    hop_at: Option<u64>,
}

struct Node {
    name: String,
    role: Role,
    parent: Option<usize>,
    children: Vec<usize>,
    capabilities: Vec<String>,
    tag: String,
    seed: u64,
    store: Arc<MemoryStore>,
    checker: Checker,
    boot: u64,
    live: Option<Live>,
    /// A crash that waits for the node's next unflushed write (a crash between commit
    /// and flush is where durability bugs hide, and a random moment rarely lands there).
    crash_on_write: bool,
    /// `--replicas`, the root only: its store is shared by two replicas.
    shared: Option<Shared>,
}

/// A root's store shared by two replicas (the root on PostgreSQL): the writer's lease,
/// the serving replica's fenced handle, and what a replica cut from the store had sealed.
/// The store is the database, so a commit is durable when it returns.
struct Shared {
    lease: Arc<Mutex<WriterLease>>,
    /// The serving replica's handle; `None` while no replica holds the lease.
    writer: Option<FencedStore<MemoryStore>>,
    /// Which replica serves or served last (0 or 1).
    serving: usize,
    /// Cut the serving replica from the store at its next non-empty commit.
    cut_on_write: bool,
    /// A cut replica's handle and the batch it could not send.
    stale: Option<(FencedStore<MemoryStore>, WriteBatch)>,
    /// A standby poll is scheduled.
    standing_by: bool,
}

/// The link between a child and its parent: the current connection, and which
/// connection each end believes is up (an end notices a broken one only after a
/// keepalive delay).
#[derive(Clone, Debug, Default)]
struct LinkState {
    conn: Option<u64>,
    parent_sees: Option<u64>,
    child_sees: Option<u64>,
    dialing: bool,
    partitioned_until: u64,
}

/// A request a client made and waits an answer for.
#[derive(Clone, Debug)]
struct ClientRequest {
    node: usize,
    request: Value,
    asked_at: u64,
}

struct Profile {
    net: NetProfile,
    flush_delay_ms_max: u64,
    crash_every_ms: Option<u64>,
    partition_every_ms: Option<u64>,
    /// Chance (percent) that a crashed node is back within a lease.
    quick_restart_percent: u64,
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
            quick_restart_percent: 0,
            fail_percent: 10,
            slow_percent: 0,
            hang_percent: 0,
        },
        Faults::Light => Profile {
            net: net(20, 1, 1),
            flush_delay_ms_max: 5,
            crash_every_ms: Some(30_000),
            partition_every_ms: Some(30_000),
            quick_restart_percent: 30,
            fail_percent: 10,
            slow_percent: 5,
            hang_percent: 1,
        },
        Faults::Heavy => Profile {
            net: net(60, 5, 5),
            flush_delay_ms_max: 20,
            crash_every_ms: Some(6_000),
            partition_every_ms: Some(6_000),
            quick_restart_percent: 40,
            fail_percent: 15,
            slow_percent: 15,
            hang_percent: 3,
        },
    }
}

fn node_name(i: usize, role: Role) -> String {
    match role {
        Role::Root => "root".to_owned(),
        _ => format!("{}{i}", role.as_str()),
    }
}

/// The world (see the module docs).
pub struct World {
    opts: Options,
    rng: Rng,
    net_rng: Rng,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    nodes: Vec<Node>,
    links: Vec<LinkState>,
    net: Net,
    coverage: Coverage,
    trace: Trace,
    flows: Vec<String>,
    /// `--named-homes`: some submits name their home.
    named_homes: bool,
    quiet: bool,
    events: u64,
    next_id: u64,
    next_conn: u64,
    clients: BTreeMap<u64, ClientRequest>,
    known_jobs: Vec<String>,
    committed_by: BTreeMap<String, usize>,
    violation: Option<(Violation, u64, u64, Vec<String>)>,
    end_at: u64,
    profile: Profile,
}

impl World {
    /// Builds the world for `opts`.
    pub fn new(opts: Options) -> World {
        let profile = profile(opts.faults);
        let mut rng = Rng::new(opts.seed ^ 0x7EE_7EE);
        let layout = opts.shape.layout(opts.nodes);
        let mut nodes: Vec<Node> = Vec::new();
        let mut tags = BTreeSet::new();
        for (i, (role, parent)) in layout.iter().enumerate() {
            let mut seed = opts.seed.wrapping_mul(31).wrapping_add(i as u64 + 1);
            // Tags must be unique in a tree (a real node refuses to route an ambiguous
            // one): the world picks seeds that give distinct tags...
            let mut tag = loop {
                let probe = MemoryStore::new();
                let (path, _) = JobPath::open(&probe, JobPathConfig::default(), seed)
                    .expect("a memory store opens");
                if tags.insert(path.tag().to_owned()) {
                    break path.tag().to_owned();
                }
                seed = seed.wrapping_add(0x9E37_79B9);
            };
            // ...unless the planted bug gives the first realm the root's.
            #[cfg(feature = "mutations")]
            if opts.planted(crate::options::Mutation::SharedTag) && *role == Role::Realm && i == 1 {
                seed = nodes[0].seed;
                tag = nodes[0].tag.clone();
            }
            let _ = &mut tag;
            let capabilities = if *role == Role::Edge {
                vec![CAPABILITIES[i % 2].to_owned()]
            } else {
                Vec::new()
            };
            nodes.push(Node {
                name: node_name(i, *role),
                role: *role,
                parent: *parent,
                children: Vec::new(),
                capabilities,
                tag,
                seed,
                store: Arc::new(MemoryStore::new()),
                checker: Checker::default(),
                boot: 0,
                live: None,
                crash_on_write: false,
                shared: (opts.replicas && *role == Role::Root).then(|| Shared {
                    lease: Arc::new(Mutex::new(WriterLease::new())),
                    writer: None,
                    serving: 1,
                    cut_on_write: false,
                    stale: None,
                    standing_by: false,
                }),
            });
        }
        for i in 0..nodes.len() {
            if let Some(p) = nodes[i].parent {
                nodes[p].children.push(i);
            }
        }
        let end_at = T0 + opts.fault_ms + opts.quiet_ms;
        let links = vec![LinkState::default(); nodes.len()];
        let mut world = World {
            net_rng: rng.fork(),
            rng: rng.fork(),
            net: Net::new(profile.net.clone()),
            trace: Trace::new(opts.trace),
            profile,
            now: T0,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            links,
            coverage: Coverage::default(),
            flows: Vec::new(),
            named_homes: opts.named_homes,
            quiet: false,
            events: 0,
            next_id: 1,
            next_conn: 1,
            clients: BTreeMap::new(),
            known_jobs: Vec::new(),
            committed_by: BTreeMap::new(),
            violation: None,
            end_at,
            opts,
        };
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
            if world.nodes[i].shared.is_some() {
                assert!(world.take_over(i), "the first replica takes a fresh lease");
            }
            world.boot(i);
            if let Some(live) = world.nodes[i].live.as_mut() {
                for (name, source) in &sources {
                    live.path
                        .add_definition(T0, source, &format!("{name}.json"))
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
            let kind = match self.rng.below(10) {
                0..=3 => ClientKind::Submit,
                4..=5 => ClientKind::Status,
                6..=8 => ClientKind::Continue,
                _ => ClientKind::Cancel,
            };
            self.at(at, Ev::Client { node, kind });
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
        // A root alone has no link to cut.
        if let Some(every) = self.profile.partition_every_ms.filter(|_| count > 1) {
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
        if self.nodes[0].shared.is_some() {
            // A few cuts of the serving replica from the store, spread over the faults.
            let cuts = 2 + self.rng.below(3);
            for _ in 0..cuts {
                let at = T0 + 1_000 + self.rng.below(fault_ms);
                self.at(at, Ev::StoreCut);
            }
        }
        for child in 1..count {
            self.at(T0 + 1, Ev::Dial { child });
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

    fn live(&self, i: usize) -> bool {
        self.nodes[i].live.is_some()
    }

    fn boot(&mut self, i: usize) {
        let now = self.now;
        let node = &mut self.nodes[i];
        node.boot += 1;
        let config = JobPathConfig {
            node: node.name.clone(),
            lease_ms: LEASE_MS,
        };
        let opened = JobPath::open(&*node.store, config, node.seed);
        let (mut path, report) = match opened {
            Ok(opened) => opened,
            Err(err) => {
                self.fail(Violation {
                    invariant: "no_lost_acknowledged_job",
                    detail: format!("node {i} cannot reopen its store: {err}"),
                });
                return;
            }
        };
        #[cfg(feature = "mutations")]
        if self.opts.planted(crate::options::Mutation::SkipFencing) {
            path.set_mutation(Some(palm_actors::path::Mutation::SkipFencing));
        }
        let _ = &mut path;
        if report.timers_armed > 0 {
            self.coverage.hit("restart_with_parked_timers");
        }
        if report.effects_requeued > 0 {
            self.coverage.hit("restart_requeued_own_claims");
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
        let node = &self.nodes[i];
        #[allow(unused_mut)]
        let mut hop = HopCore::new(
            HopConfig {
                name: node.name.clone(),
                role: node.role,
                tag: node.tag.clone(),
                parent: node.parent.map(|p| self.nodes[p].name.clone()),
                epoch: node.boot,
                seed: node.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ node.boot,
            },
            now,
        );
        #[allow(unused_mut)]
        let mut host = HomeHost::new();
        #[cfg(feature = "mutations")]
        {
            if let Some(crate::options::Mutation::Hop(planted)) = self.opts.mutation {
                hop.set_mutation(Some(planted));
            }
            if self
                .opts
                .planted(crate::options::Mutation::AckBeforeDurable)
            {
                host.set_mutation(Some(palm_actors::host::HostMutation::AckBeforeDurable));
            }
        }
        self.nodes[i].live = Some(Live {
            path,
            host,
            hop,
            seats: vec![None; SEATS],
            runs: BTreeMap::new(),
            notices: Vec::new(),
            last_sealed: 0,
            touched: BTreeSet::new(),
            flush_at: None,
            tick_at: None,
            hop_at: None,
        });
        let boot = self.nodes[i].boot;
        for seat in 0..SEATS {
            self.after(
                0,
                Ev::SeatPoll {
                    node: i,
                    boot,
                    seat,
                },
            );
        }
        if self.nodes[i].shared.is_some() {
            self.after(STORE_LEASE_MS / 3, Ev::Renew { boot });
        }
        self.arm_hop(i);
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
            if let Some(live) = node.live.as_mut() {
                for id in Checker::stored_jobs(&store) {
                    if let Ok(Some(record)) = live.path.record(&*store, &id) {
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

    fn current(&self, node: usize, boot: u64) -> bool {
        self.nodes[node].boot == boot && self.live(node)
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Client { node, kind } => self.client(node, kind),
            Ev::Flush { node, boot } if self.current(node, boot) => self.flush(node),
            Ev::Tick { node, boot } if self.current(node, boot) => self.tick(node),
            Ev::Hop { node, boot } if self.current(node, boot) => {
                if let Some(live) = self.nodes[node].live.as_mut() {
                    live.hop_at = None;
                }
                self.with_hop(node, |hop, now| hop.handle_timeout(now));
            }
            Ev::SeatPoll { node, boot, seat } if self.current(node, boot) => {
                self.seat_poll(node, seat)
            }
            Ev::Finish { node, boot, run } if self.current(node, boot) => self.finish(node, run),
            Ev::SeatRenew { node, boot, run } if self.current(node, boot) => {
                self.seat_renew(node, run)
            }
            Ev::Deliver {
                from,
                to,
                conn,
                msg,
            } => self.deliver(from, to, conn, *msg),
            Ev::Dial { child } => self.dial(child),
            Ev::Noticed {
                child,
                at_parent,
                conn,
            } => self.noticed(child, at_parent, conn),
            Ev::Crash { node } => self.crash(node),
            Ev::Restart { node } => self.restart(node),
            Ev::Partition { child } => self.partition(child),
            Ev::StoreCut => {
                if let Some(shared) = self.nodes[0].shared.as_mut()
                    && !self.quiet
                {
                    shared.cut_on_write = true;
                }
            }
            Ev::Standby => self.standby(0),
            Ev::Renew { boot } if self.current(0, boot) => self.renew(0),
            Ev::StaleWrite => self.stale_write(0),
            Ev::Heal { child } if self.links[child].conn.is_none() => {
                self.after(0, Ev::Dial { child });
            }
            Ev::Heal { .. } => {}
            Ev::Quiet => {
                self.quiet = true;
                self.net.heal_all();
                self.net.calm();
                self.line(0, "QUIET faults stop; the network heals");
                for node in 0..self.nodes.len() {
                    self.links[node].partitioned_until = 0;
                    if !self.live(node) {
                        self.restart(node);
                    }
                }
                for child in 1..self.nodes.len() {
                    self.after(0, Ev::Dial { child });
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
            // An event of a previous life of a node (it crashed since): gone with it.
            _ => {}
        }
    }

    // ----- hosting HopCore -----

    /// Feeds HopCore one input (with the node's local facts current), then does
    /// everything it asks, until it asks nothing more.
    fn with_hop(&mut self, i: usize, input: impl FnOnce(&mut HopCore, u64)) {
        let now = self.now;
        let ready = self.nodes[i].capabilities.clone();
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let busy = live.runs.values().filter(|r| r.seat.is_some()).count() as u32;
        live.hop.set_local(LocalFacts {
            ready,
            seats: SEATS as u32,
            busy,
        });
        input(&mut live.hop, now);
        self.drain_hop(i);
    }

    fn drain_hop(&mut self, i: usize) {
        let now = self.now;
        loop {
            let Some(live) = self.nodes[i].live.as_mut() else {
                return;
            };
            let Some(output) = live.hop.poll_output() else {
                break;
            };
            match output {
                HopOutput::Send { to, msg } => self.send(i, &to, msg),
                HopOutput::Reply { id, reply } => self.client_reply(i, id, reply),
                HopOutput::Apply { serve, request } => {
                    let response = self.apply(i, &request.0);
                    self.defer(
                        i,
                        Ack::Answer {
                            to: AnswerTo::Serve(serve),
                            request: request.0,
                            response,
                        },
                    );
                }
                HopOutput::Claim {
                    round,
                    via,
                    node,
                    ready,
                    max,
                } => self.claim_for(i, round, &via, &node, &ready, max),
                HopOutput::Release { key, token } => {
                    let live = self.nodes[i].live.as_mut().expect("live");
                    if live.host.release(&mut live.path, &key, token).is_ok() {
                        self.coverage.hit("claim_released");
                    }
                }
                HopOutput::Renew {
                    serve,
                    key,
                    token,
                    holder,
                } => {
                    let live = self.nodes[i].live.as_mut().expect("live");
                    live.host
                        .renew(&mut live.path, now, &key, token, Some(&holder), |result| {
                            Ack::Renewed {
                                serve,
                                result: result.map_err(|e| e.to_string()),
                            }
                        });
                }
                HopOutput::Complete {
                    serve,
                    key,
                    token,
                    outcome,
                    node,
                    holder,
                } => {
                    let live = self.nodes[i].live.as_mut().expect("live");
                    let mut verdict = None;
                    live.host.complete(
                        &mut live.path,
                        now,
                        &key,
                        token,
                        outcome,
                        Some(node),
                        Some(&holder),
                        |result| {
                            verdict = Some(result.clone());
                            Ack::Completed {
                                serve,
                                result: result.map(|_| ()).map_err(|e| e.to_string()),
                            }
                        },
                    );
                    if let Some(result) = verdict {
                        self.completed(i, &key, token, result);
                    }
                }
                HopOutput::Start { effect, .. } => self.start_run(i, None, effect),
                HopOutput::Stop { key, token, .. } => {
                    let live = self.nodes[i].live.as_mut().expect("live");
                    live.runs
                        .retain(|_, r| !(r.seat.is_none() && r.key == key && r.token == token));
                }
                HopOutput::Event(event) => {
                    self.coverage.hit(event.kind);
                    self.line(i, &format!("{}: {}", event.kind, event.text));
                }
            }
        }
        self.commit(i);
        self.arm_hop(i);
    }

    fn arm_hop(&mut self, i: usize) {
        let boot = self.nodes[i].boot;
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let Some(due) = live.hop.next_timeout() else {
            return;
        };
        if live.hop_at.is_none_or(|armed| due < armed) {
            live.hop_at = Some(due);
            self.at(due, Ev::Hop { node: i, boot });
        }
    }

    // ----- links -----

    fn parent_of(&self, child: usize) -> usize {
        self.nodes[child].parent.expect("a child has a parent")
    }

    /// The child `child` dials its parent: a new connection replaces whatever each end
    /// believed was up.
    fn dial(&mut self, child: usize) {
        let parent = self.parent_of(child);
        self.links[child].dialing = false;
        if !self.live(child)
            || !self.live(parent)
            || self.links[child].conn.is_some()
            || self.links[child].partitioned_until > self.now
        {
            return;
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        let link = &mut self.links[child];
        if link.parent_sees.is_some() {
            self.coverage.hit("link_replaced_before_noticed");
        }
        link.conn = Some(conn);
        link.parent_sees = Some(conn);
        link.child_sees = Some(conn);
        let (parent_name, child_name) = (
            self.nodes[parent].name.clone(),
            self.nodes[child].name.clone(),
        );
        self.line(child, &format!("LINK up to n{parent} (conn {conn})"));
        self.with_hop(parent, |hop, now| {
            hop.handle_link(now, &child_name, Direction::Child, true)
        });
        self.with_hop(child, |hop, now| {
            hop.handle_link(now, &parent_name, Direction::Parent, true)
        });
    }

    fn redial(&mut self, child: usize, delay: u64) {
        if !self.links[child].dialing {
            self.links[child].dialing = true;
            self.after(delay, Ev::Dial { child });
        }
    }

    /// The connection between `child` and its parent breaks; each live end notices
    /// after its own keepalive delay.
    fn break_link(&mut self, child: usize) {
        let Some(conn) = self.links[child].conn.take() else {
            return;
        };
        let parent = self.parent_of(child);
        for (end, at_parent) in [(parent, true), (child, false)] {
            if self.live(end) {
                let delay = self.rng.between(300, 2_500);
                self.after(
                    delay,
                    Ev::Noticed {
                        child,
                        at_parent,
                        conn,
                    },
                );
            }
        }
    }

    fn noticed(&mut self, child: usize, at_parent: bool, conn: u64) {
        let parent = self.parent_of(child);
        let end = if at_parent { parent } else { child };
        let alive = self.live(end);
        let link = &mut self.links[child];
        let sees = if at_parent {
            &mut link.parent_sees
        } else {
            &mut link.child_sees
        };
        // A newer connection replaced it already: nothing to notice.
        if *sees != Some(conn) || !alive {
            return;
        }
        *sees = None;
        let peer = if at_parent {
            self.nodes[child].name.clone()
        } else {
            self.nodes[parent].name.clone()
        };
        let direction = if at_parent {
            Direction::Child
        } else {
            Direction::Parent
        };
        self.with_hop(end, |hop, now| {
            hop.handle_link(now, &peer, direction, false)
        });
        if !at_parent {
            // The child's dialer tries again.
            let delay = self.rng.between(100, 1_000);
            self.redial(child, delay);
        }
    }

    fn partition(&mut self, child: usize) {
        let parent = self.parent_of(child);
        let until = self.now + self.rng.between(500, 6_000);
        self.links[child].partitioned_until = until;
        self.coverage.hit("partition");
        self.line(
            child,
            &format!("PARTITION from n{parent} for {}ms", until - self.now),
        );
        self.break_link(child);
        self.at(until, Ev::Heal { child });
    }

    fn send(&mut self, from: usize, to: &str, msg: TopoMsg) {
        let Some(to) = self.nodes.iter().position(|n| n.name == to) else {
            return;
        };
        let child = if self.nodes[from].parent == Some(to) {
            from
        } else if self.nodes[to].parent == Some(from) {
            to
        } else {
            return;
        };
        let link = &self.links[child];
        let sees = if child == from {
            link.child_sees
        } else {
            link.parent_sees
        };
        // Sent on the connection this end believes in; if that one is dead, it is lost.
        let Some(conn) = sees.filter(|c| link.conn == Some(*c)) else {
            self.coverage.hit("message_on_dead_link");
            return;
        };
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
                            conn,
                            msg: Box::new(msg.clone()),
                        },
                    );
                }
            }
            Fate::Lost { .. } => self.coverage.hit("message_lost"),
        }
    }

    fn deliver(&mut self, from: usize, to: usize, conn: u64, msg: TopoMsg) {
        let child = if self.nodes[from].parent == Some(to) {
            from
        } else {
            to
        };
        if !self.live(to) {
            self.coverage.hit("message_to_crashed_node");
            return;
        }
        if self.links[child].conn != Some(conn) {
            self.coverage.hit("message_lost_with_its_connection");
            return;
        }
        let peer = self.nodes[from].name.clone();
        self.with_hop(to, |hop, now| hop.handle_frame(now, &peer, msg));
    }

    // ----- a home's host duties -----

    fn defer(&mut self, i: usize, ack: Ack) {
        if let Some(live) = self.nodes[i].live.as_mut() {
            live.host.after_durable(ack);
        }
    }

    /// Seals what the job path wrote (with the replies waiting for it), writes it to the
    /// disk unflushed, and schedules the flush that makes it durable.
    fn commit(&mut self, i: usize) {
        let boot = self.nodes[i].boot;
        let node = &mut self.nodes[i];
        let Some(live) = node.live.as_mut() else {
            return;
        };
        if !live.host.has_pending(&live.path) {
            self.arm_tick(i);
            return;
        }
        let seal = live.host.seal(&mut live.path);
        // `--replicas`: the serving replica may be cut from the store right here, with
        // this batch sealed and not sent; nothing of it was acknowledged.
        if let Some(shared) = node.shared.as_mut()
            && shared.cut_on_write
            && !seal.batch.is_empty()
            && !self.quiet
        {
            shared.cut_on_write = false;
            let writer = shared
                .writer
                .take()
                .expect("the serving replica holds the lease");
            shared.stale = Some((writer, seal.batch));
            self.cut_from_store(i);
            return;
        }
        for notice in &seal.notices {
            if let Notice::CancelEffect { key, .. } = notice {
                node.checker.claimed(key, 0);
            }
        }
        if !seal.batch.is_empty() {
            live.touched.extend(Checker::touched(&seal.batch));
            match node.shared.as_ref() {
                Some(shared) => {
                    let committed = shared.writer.as_ref().map(|w| w.commit(&seal.batch));
                    if !matches!(committed, Some(Ok(()))) {
                        self.fail(Violation {
                            invariant: "no_dual_truth",
                            detail: format!(
                                "the serving root replica's commit was refused ({committed:?}): another replica holds the store"
                            ),
                        });
                        return;
                    }
                }
                None => {
                    let _ = node.store.commit(&seal.batch);
                }
            }
        }
        live.notices.push((seal.seq, seal.notices));
        live.last_sealed = seal.seq;
        let early = seal.early;
        if live.flush_at.is_none() {
            let delay = self.rng.below(self.profile.flush_delay_ms_max + 1);
            let live = self.nodes[i].live.as_mut().expect("live");
            live.flush_at = Some(self.now + delay);
            self.after(delay, Ev::Flush { node: i, boot });
        }
        for ack in early {
            self.acknowledge(i, ack);
        }
        // A crash waiting for a write lands before this one is flushed.
        if let Some(flush_at) = self.nodes[i].live.as_ref().and_then(|l| l.flush_at)
            && self.nodes[i].crash_on_write
            && !self.quiet
            && flush_at > self.now
        {
            self.nodes[i].crash_on_write = false;
            let delay = self.rng.below(flush_at - self.now);
            self.after(delay, Ev::Crash { node: i });
            self.coverage.hit("crash_mid_flush");
        }
        self.arm_tick(i);
    }

    fn arm_tick(&mut self, i: usize) {
        let boot = self.nodes[i].boot;
        let now = self.now;
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let due = if live.path.has_resumes() {
            Some(now)
        } else {
            live.path.next_deadline()
        };
        if let Some(due) = due
            && live.tick_at.is_none_or(|armed| due < armed || armed < now)
        {
            live.tick_at = Some(due);
            self.at(due, Ev::Tick { node: i, boot });
        }
    }

    fn flush(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let live = node.live.as_mut().expect("current");
        live.flush_at = None;
        let _ = node.store.flush();
        let touched = std::mem::take(&mut live.touched);
        // No dual truth: only the home — the node whose tag prefixes a job id — commits
        // the job's events, and no job is committed by two nodes.
        for job in &touched {
            let tag = job_tag(job).unwrap_or_default();
            if tag != self.nodes[i].tag {
                let detail = format!(
                    "node {i} (tag {}) committed events of {job}",
                    self.nodes[i].tag
                );
                self.fail(Violation {
                    invariant: "no_dual_truth",
                    detail,
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
        let live = node.live.as_mut().expect("current");
        if let Err(v) = node.checker.flushed(&node.store, &mut live.path, &touched) {
            self.fail(v);
            return;
        }
        let through = live.last_sealed;
        let acks = live.host.durable(through);
        let notices: Vec<Notice> = std::mem::take(&mut live.notices)
            .into_iter()
            .flat_map(|(_, n)| n)
            .collect();
        let mut work_ready = false;
        for notice in notices {
            match notice {
                Notice::EffectReady => work_ready = true,
                Notice::CancelEffect { key, token, holder } => self.cancel(i, &key, token, &holder),
                Notice::JobChanged { status, .. } => match status {
                    JobStatus::Succeeded => self.coverage.hit("job_succeeded"),
                    JobStatus::Failed => self.coverage.hit("job_failed"),
                    JobStatus::Cancelled => self.coverage.hit("job_cancelled"),
                    JobStatus::Waiting => self.coverage.hit("job_parked"),
                    _ => {}
                },
                Notice::PlacesWanted { .. } | Notice::StartRefused { .. } => {}
            }
        }
        for ack in acks {
            self.acknowledge(i, ack);
        }
        if work_ready && self.live(i) {
            let boot = self.nodes[i].boot;
            for seat in 0..SEATS {
                if self.nodes[i]
                    .live
                    .as_ref()
                    .is_some_and(|l| l.seats[seat].is_none())
                {
                    self.after(
                        0,
                        Ev::SeatPoll {
                            node: i,
                            boot,
                            seat,
                        },
                    );
                }
            }
            self.with_hop(i, |hop, now| hop.wake_placer(now));
        }
    }

    /// A reply whose batch is durable goes out.
    fn acknowledge(&mut self, i: usize, ack: Ack) {
        match ack {
            Ack::Answer {
                to,
                request,
                response,
            } => {
                let response = response.unwrap_or_else(|| self.read(i, &request));
                match to {
                    AnswerTo::Client(id) => self.client_answer(i, id, Reply::Home(Json(response))),
                    AnswerTo::Serve(serve) => {
                        self.with_hop(i, |hop, now| hop.handle_applied(now, serve, Json(response)))
                    }
                }
            }
            Ack::Claimed { round, effects } => {
                self.with_hop(i, |hop, now| hop.handle_claimed(now, round, effects))
            }
            Ack::Renewed { serve, result } => {
                self.with_hop(i, |hop, now| hop.handle_renewed(now, serve, result))
            }
            Ack::Completed { serve, result } => {
                self.with_hop(i, |hop, now| hop.handle_completed(now, serve, result))
            }
            Ack::SeatRenewed { run, until } => {
                let Some(live) = self.nodes[i].live.as_mut() else {
                    return;
                };
                match until {
                    Some(until) => {
                        if let Some(r) = live.runs.get_mut(&run) {
                            r.lease_until = r.lease_until.max(until);
                        }
                    }
                    None => {
                        // Refused: the claim is not this seat's any more.
                        if self.free_seat(i, run) {
                            self.coverage.hit("renewal_refused");
                        }
                    }
                }
            }
            Ack::SeatDone { run } => {
                self.free_seat(i, run);
            }
        }
    }

    /// Ends the local seat run `run` and lets its seat look for work; false when it was
    /// not a seat's (gone already, or placed).
    fn free_seat(&mut self, i: usize, run: u64) -> bool {
        let boot = self.nodes[i].boot;
        let Some(live) = self.nodes[i].live.as_mut() else {
            return false;
        };
        let Some(seat) = live.runs.get(&run).and_then(|r| r.seat) else {
            return false;
        };
        live.runs.remove(&run);
        live.seats[seat] = None;
        self.after(
            0,
            Ev::SeatPoll {
                node: i,
                boot,
                seat,
            },
        );
        true
    }

    fn cancel(&mut self, i: usize, key: &str, token: u64, holder: &str) {
        if let Some(child) = holder.strip_prefix(palm_topology::CHILD_HOLDER_PREFIX) {
            let child = child.to_owned();
            self.with_hop(i, |hop, now| hop.cancel_placed(now, &child, key, token));
            return;
        }
        let boot = self.nodes[i].boot;
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let runs: Vec<u64> = live
            .runs
            .iter()
            .filter(|(_, r)| r.key == key && r.token == token && r.seat.is_some())
            .map(|(id, _)| *id)
            .collect();
        let mut freed = Vec::new();
        for run in runs {
            if let Some(r) = live.runs.remove(&run)
                && let Some(seat) = r.seat
            {
                live.seats[seat] = None;
                freed.push(seat);
            }
        }
        for seat in freed {
            self.coverage.hit("local_effect_stopped");
            self.after(
                0,
                Ev::SeatPoll {
                    node: i,
                    boot,
                    seat,
                },
            );
        }
    }

    fn tick(&mut self, i: usize) {
        let now = self.now;
        let node = &mut self.nodes[i];
        let store = Arc::clone(&node.store);
        let live = node.live.as_mut().expect("current");
        live.tick_at = None;
        let ticked = live.host.tick(&mut live.path, now, &*store);
        self.coverage.add("timer_fired", ticked.fired as u64);
        self.coverage.add("lease_expired", ticked.reaped as u64);
        self.coverage
            .add("job_resumed_after_yield", ticked.resumed as u64);
        self.commit(i);
    }

    /// The claims of a placement round, for holder `child:VIA`: effects this home cannot
    /// run whose needs the target offers.
    fn claim_for(
        &mut self,
        i: usize,
        round: u64,
        via: &str,
        node: &str,
        ready: &[String],
        max: u32,
    ) {
        let now = self.now;
        let capabilities = self.nodes[i].capabilities.clone();
        let node_ref = &mut self.nodes[i];
        let live = node_ref.live.as_mut().expect("live");
        let mut claimed = Vec::new();
        live.host.claim_remote(
            &mut live.path,
            now,
            &child_holder(via),
            max as usize,
            &|_, request: &EffectRequest| {
                let needs = request.requirements();
                !needs.iter().all(|n| capabilities.contains(n))
                    && needs.iter().all(|n| ready.contains(n))
            },
            |effects| {
                claimed = effects.clone();
                Ack::Claimed { round, effects }
            },
        );
        for effect in &claimed {
            node_ref.checker.claimed(&effect.key, effect.token);
        }
        if !claimed.is_empty() {
            self.coverage.hit(if via == node {
                "effect_placed"
            } else {
                "effect_placed_deep"
            });
        }
    }

    /// Applies a request at its home; `None` for a read (evaluated once durable).
    fn apply(&mut self, i: usize, request: &Value) -> Option<Value> {
        let now = self.now;
        let node = &mut self.nodes[i];
        let store = Arc::clone(&node.store);
        let live = node.live.as_mut().expect("live");
        let nonce = request["nonce"].clone();
        let job = request["job"].as_str().unwrap_or_default().to_owned();
        let refused = |err: JobError| {
            let kind = match &err {
                JobError::UnknownJob(_) => "unknown_job",
                JobError::Refused(palm_actors::job::ApplyError::NotWaitingOn { .. }) => {
                    "not_waiting"
                }
                JobError::Refused(palm_actors::job::ApplyError::InvalidInput { .. }) => {
                    "invalid_input"
                }
                JobError::Refused(palm_actors::job::ApplyError::Terminal { .. }) => "job_finished",
                _ => "refused",
            };
            json!({"ok": false, "nonce": nonce, "error": {"kind": kind, "message": err.to_string()}})
        };
        Some(match request["op"].as_str().unwrap_or_default() {
            "submit" => {
                let submit = SubmitRequest {
                    flow: FlowRef::Stored {
                        name: request["flow"].as_str().unwrap_or_default().to_owned(),
                        revision: None,
                    },
                    input: json!({"items": request["items"]})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                    args: Vec::new(),
                    started_by: None,
                };
                match live.path.submit(now, submit, &*store) {
                    Ok(submitted) => json!({"ok": true, "nonce": nonce,
                        "result": {"job": submitted.job, "status": submitted.status}}),
                    Err(err) => json!({"ok": false, "nonce": nonce,
                        "error": {"kind": "refused", "message": err.to_string()}}),
                }
            }
            "continue" => {
                let key = request["key"].as_str().unwrap_or_default();
                match live
                    .path
                    .continue_job(now, &job, key, request["input"].clone(), &*store)
                {
                    Ok(status) => {
                        json!({"ok": true, "nonce": nonce, "result": {"job": job, "status": status}})
                    }
                    Err(err) => refused(err),
                }
            }
            "cancel" => match live.path.cancel(now, &job, Some("sim".into()), &*store) {
                Ok(status) => {
                    json!({"ok": true, "nonce": nonce, "result": {"job": job, "status": status}})
                }
                Err(err) => refused(err),
            },
            _ => return None,
        })
    }

    /// A status, read once everything before it is durable.
    fn read(&mut self, i: usize, request: &Value) -> Value {
        let node = &mut self.nodes[i];
        let store = Arc::clone(&node.store);
        let nonce = request["nonce"].clone();
        let job = request["job"].as_str().unwrap_or_default();
        let view = node
            .live
            .as_mut()
            .and_then(|live| live.path.job_view(&*store, job).ok().flatten());
        match view {
            Some(view) => json!({"ok": true, "nonce": nonce,
                "result": {"job": view.job, "status": view.status, "state": view.state}}),
            None => json!({"ok": false, "nonce": nonce,
                "error": {"kind": "unknown_job", "message": format!("unknown job {job}")}}),
        }
    }

    // ----- clients -----

    fn client(&mut self, node: usize, kind: ClientKind) {
        if !self.live(node) {
            self.coverage.hit("client_found_node_down");
            return;
        }
        let nonce = self.id();
        let (request, toward, view_of) = match kind {
            ClientKind::Submit => {
                let flow = self.rng.pick(&self.flows).clone();
                let items: Vec<u64> = (0..self.rng.below(3)).map(|i| i + 1).collect();
                // One submit in four names its home: any node that homes jobs, found
                // through the tree wherever it is (`palm submit --node`).
                let named = (self.named_homes && self.rng.below(4) == 0).then(|| {
                    let homes: Vec<String> = self
                        .nodes
                        .iter()
                        .filter(|n| n.role.is_home())
                        .map(|n| n.name.clone())
                        .collect();
                    self.rng.pick(&homes).clone()
                });
                match named {
                    Some(home) => (
                        json!({"op": "submit", "flow": flow, "items": items, "nonce": nonce, "node": home}),
                        Toward::Node(home),
                        None,
                    ),
                    None => (
                        json!({"op": "submit", "flow": flow, "items": items, "nonce": nonce}),
                        Toward::NewHome,
                        None,
                    ),
                }
            }
            other => {
                if self.known_jobs.is_empty() {
                    return;
                }
                let job = self.rng.pick(&self.known_jobs).clone();
                let request = match other {
                    ClientKind::Status => json!({"op": "status", "job": job, "nonce": nonce}),
                    ClientKind::Cancel => json!({"op": "cancel", "job": job, "nonce": nonce}),
                    _ => {
                        let (key, input) = self.continue_input(&job);
                        json!({"op": "continue", "job": job, "key": key, "input": input, "nonce": nonce})
                    }
                };
                let view_of = matches!(other, ClientKind::Status).then(|| job.clone());
                (request, Toward::Job(job), view_of)
            }
        };
        self.line(node, &format!("client: {request}"));
        self.clients.insert(
            nonce,
            ClientRequest {
                node,
                request: request.clone(),
                asked_at: self.now,
            },
        );
        let route = RouteRequest {
            toward,
            view_of,
            request: Json(request.clone()),
            within_ms: CLIENT_WAIT_MS,
        };
        let mut routed = None;
        self.with_hop(node, |hop, now| {
            routed = Some(hop.handle_request(now, nonce, route))
        });
        match routed {
            Some(Routed::Here) => {
                let response = self.apply(node, &request);
                self.defer(
                    node,
                    Ack::Answer {
                        to: AnswerTo::Client(nonce),
                        request,
                        response,
                    },
                );
                self.commit(node);
            }
            Some(Routed::Now(reply)) => self.client_answer(node, nonce, reply),
            Some(Routed::Away) | None => {}
        }
    }

    /// A continue's key and input: mostly right (the client read the job's waits), now
    /// and then a wrong key or an input its schema refuses.
    fn continue_input(&mut self, job: &str) -> (String, Value) {
        let home = self
            .nodes
            .iter()
            .position(|n| Some(n.tag.as_str()) == job_tag(job));
        let waits: Vec<palm_actors::bt::Parked> = home
            .and_then(|h| {
                let node = &mut self.nodes[h];
                let live = node.live.as_mut()?;
                match live.path.active_job(job) {
                    Some(core) => Some(core.waiting_on().to_vec()),
                    // Parked and left on disk at the node's last boot.
                    None => live
                        .path
                        .job_view(&*node.store, job)
                        .ok()
                        .flatten()
                        .map(|view| view.waiting_on),
                }
            })
            .unwrap_or_default();
        if waits.is_empty() {
            return (format!("w{}", 1 + self.rng.below(3)), json!({"ok": true}));
        }
        let wait = waits[self.rng.below(waits.len() as u64) as usize].clone();
        match self.rng.below(10) {
            0 => ("no-such-key".to_owned(), json!(1)),
            1 if wait.schema.is_some() => (wait.key, json!("not a number")),
            _ => {
                let input = if wait.schema.is_some() {
                    json!(self.rng.below(10))
                } else {
                    json!({"ok": true})
                };
                (wait.key, input)
            }
        }
    }

    fn client_reply(&mut self, i: usize, id: u64, reply: Reply) {
        self.client_answer(i, id, reply);
    }

    fn client_answer(&mut self, i: usize, id: u64, reply: Reply) {
        let Some(asked) = self.clients.remove(&id) else {
            return;
        };
        debug_assert_eq!(asked.node, i);
        let op = asked.request["op"].as_str().unwrap_or_default().to_owned();
        match &reply {
            Reply::Home(Json(response)) => {
                // Marked as the home's: it must be the home's answer to *this* request.
                if response["nonce"] != asked.request["nonce"] {
                    self.fail(Violation {
                        invariant: "no_projection_passed_off_as_the_home",
                        detail: format!(
                            "node {i} answered {op} #{id} as the home, with the answer to request {}",
                            response["nonce"]
                        ),
                    });
                    return;
                }
                let ok = response["ok"] == true;
                let kind = response["error"]["kind"].as_str().unwrap_or_default();
                match (op.as_str(), ok) {
                    ("submit", true) => {
                        let job = response["result"]["job"]
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
                        if let Some(named) = asked.request["node"].as_str() {
                            if home.map(|h| self.nodes[h].name.as_str()) != Some(named) {
                                self.fail(Violation {
                                    invariant: "a_named_home_homes_the_job",
                                    detail: format!(
                                        "node {i}'s submit #{id} named `{named}` as its home; job {job} is homed at {}",
                                        home.map_or("no node", |h| self.nodes[h].name.as_str())
                                    ),
                                });
                                return;
                            }
                            self.coverage.hit("submit_to_a_named_home_acknowledged");
                            if named != self.nodes[i].name {
                                self.coverage
                                    .hit("submit_to_a_named_home_elsewhere_acknowledged");
                            }
                        }
                        self.coverage.hit("submit_acknowledged");
                        if self.nodes[i].role == Role::Edge {
                            self.coverage.hit("submit_from_an_edge_acknowledged");
                        }
                        self.known_jobs.push(job);
                    }
                    ("continue", true) => self.coverage.hit("continue_accepted"),
                    ("continue", false) => self.coverage.hit(match kind {
                        "not_waiting" => "continue_wrong_key_refused",
                        "invalid_input" => "continue_invalid_input_refused",
                        "job_finished" => "continue_after_the_end_refused",
                        _ => "continue_refused",
                    }),
                    ("cancel", true) => self.coverage.hit("cancel_accepted"),
                    ("status", true) => self.coverage.hit("status_from_home"),
                    _ => {}
                }
            }
            Reply::Unreachable { at, view, .. } => {
                self.coverage.hit("home_unreachable");
                if view.is_some() {
                    self.coverage.hit("projection_served");
                    if *at != self.nodes[i].name {
                        self.coverage.hit("home_loss_seen_two_hops_down");
                    }
                }
            }
            Reply::TooFar { .. } => self.coverage.hit("request_too_far"),
            Reply::Refused { at, reason } => {
                // The world's clients ask only what a link may carry.
                self.fail(Violation {
                    invariant: "authorised_requests_pass",
                    detail: format!("node {at} refused {op} #{id} from node {i}: {reason}"),
                });
                return;
            }
        }
        let waited = self.now - asked.asked_at;
        self.line(i, &format!("client: {op} #{id} answered after {waited}ms"));
    }

    // ----- seats and runs -----

    fn seat_poll(&mut self, i: usize, seat: usize) {
        let now = self.now;
        let boot = self.nodes[i].boot;
        let capabilities = self.nodes[i].capabilities.clone();
        let holder = format!("{}/seat-{seat}", self.nodes[i].name);
        let node = &mut self.nodes[i];
        let live = node.live.as_mut().expect("current");
        if live.seats[seat].is_some() {
            return;
        }
        let claimed = live
            .host
            .claim_local(&mut live.path, now, &holder, &|_, request| {
                request
                    .requirements()
                    .iter()
                    .all(|need| capabilities.contains(need))
            });
        match claimed {
            Some(effect) => {
                node.checker.claimed(&effect.key, effect.token);
                self.commit(i);
                self.start_run(i, Some(seat), effect);
            }
            None => {
                let wait = self.rng.between(IDLE_POLL_MS / 2, IDLE_POLL_MS);
                self.after(
                    wait,
                    Ev::SeatPoll {
                        node: i,
                        boot,
                        seat,
                    },
                );
            }
        }
    }

    fn start_run(&mut self, i: usize, seat: Option<usize>, effect: ClaimedEffect) {
        let id = self.id();
        let boot = self.nodes[i].boot;
        let (outcome, duration) = self.workload(&effect.request);
        self.line(
            i,
            &format!(
                "runs {} tok {} for {duration}ms{}",
                effect.key,
                effect.token,
                if seat.is_none() { " (placed)" } else { "" }
            ),
        );
        let live = self.nodes[i].live.as_mut().expect("live");
        if let Some(seat) = seat {
            live.seats[seat] = Some(id);
        }
        live.runs.insert(
            id,
            Run {
                key: effect.key,
                token: effect.token,
                lease_until: effect.lease_until,
                outcome,
                seat,
                finished: false,
            },
        );
        self.after(
            duration,
            Ev::Finish {
                node: i,
                boot,
                run: id,
            },
        );
        if seat.is_some() {
            self.after(
                RENEW_MS,
                Ev::SeatRenew {
                    node: i,
                    boot,
                    run: id,
                },
            );
        }
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
        let outcome = match request {
            EffectRequest::Run { .. } => Outcome::Run(RunResult {
                exit_code: Some(i32::from(fails)),
                duration_ms: duration,
                ..RunResult::default()
            }),
            _ => Outcome::Call {
                ok: false,
                value: Json::NULL,
                error: Some("no provider in the simulator".into()),
            },
        };
        (outcome, duration)
    }

    fn finish(&mut self, i: usize, run: u64) {
        let now = self.now;
        let node = &mut self.nodes[i];
        let live = node.live.as_mut().expect("current");
        let Some(r) = live.runs.get_mut(&run).filter(|r| !r.finished) else {
            return;
        };
        r.finished = true;
        let r = r.clone();
        match r.seat {
            Some(_) => {
                let mut verdict = None;
                live.host.complete(
                    &mut live.path,
                    now,
                    &r.key,
                    r.token,
                    r.outcome.clone(),
                    None,
                    None,
                    |result| {
                        verdict = Some(result);
                        Ack::SeatDone { run }
                    },
                );
                if let Some(result) = verdict {
                    self.completed(i, &r.key, r.token, result);
                }
                self.commit(i);
            }
            None => {
                live.runs.remove(&run);
                let outcome = Some(r.outcome);
                self.with_hop(i, |hop, now| {
                    hop.handle_finished(now, &r.key, r.token, outcome)
                });
            }
        }
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

    fn seat_renew(&mut self, i: usize, run: u64) {
        let now = self.now;
        let boot = self.nodes[i].boot;
        let live = self.nodes[i].live.as_mut().expect("current");
        let Some(r) = live.runs.get(&run).filter(|r| !r.finished).cloned() else {
            return;
        };
        live.host
            .renew(&mut live.path, now, &r.key, r.token, None, |result| {
                Ack::SeatRenewed {
                    run,
                    until: result.ok(),
                }
            });
        self.commit(i);
        self.after(RENEW_MS, Ev::SeatRenew { node: i, boot, run });
    }

    // ----- crashes -----

    fn crash(&mut self, i: usize) {
        if !self.live(i) {
            return;
        }
        let unflushed = self.nodes[i].store.unflushed();
        if unflushed == 0 && !self.quiet && !self.nodes[i].crash_on_write && self.rng.chance(50) {
            self.nodes[i].crash_on_write = true;
            return;
        }
        self.nodes[i].crash_on_write = false;
        // A replicated root's store is the database: what it committed is durable, and
        // the dead replica's handle (and the lease it held, until it expires) go with it.
        let keep = match self.nodes[i].shared.as_mut() {
            Some(shared) => {
                shared.writer = None;
                unflushed
            }
            None => self.rng.below(unflushed as u64 + 1) as usize,
        };
        self.nodes[i].store.crash_keeping(keep);
        if keep < unflushed {
            self.coverage.hit("crash_lost_unflushed_writes");
        }
        let held = self.nodes[i]
            .live
            .as_ref()
            .is_some_and(|l| !l.runs.is_empty());
        if held {
            self.coverage.hit("crash_with_effects_running");
        }
        let placed_here = self.nodes[i]
            .live
            .as_ref()
            .is_some_and(|l| l.hop.placed_leases().next().is_some());
        if placed_here {
            self.coverage.hit("crash_with_leases_held");
        }
        if keep > 0 {
            self.coverage.hit("crash_kept_some_unflushed_writes");
        }
        self.coverage.hit(match self.nodes[i].role {
            Role::Root => "root_crashed",
            Role::Realm => "realm_crashed",
            _ => "edge_crashed",
        });
        self.nodes[i].live = None;
        self.line(i, &format!("CRASH ({unflushed} unflushed, {keep} kept)"));
        self.links_down(i);
        // Now and then a node is back within a lease (a kill -9 and a quick restart):
        // its parent may not have noticed it went.
        let delay = if self.rng.chance(self.profile.quick_restart_percent) {
            self.coverage.hit("quick_restart");
            self.rng.between(100, LEASE_MS / 2)
        } else {
            self.rng.between(500, 4_000)
        };
        self.after(delay, Ev::Restart { node: i });
    }

    /// Every link of node `i` breaks; the other ends notice after a keepalive delay.
    fn links_down(&mut self, i: usize) {
        if self.nodes[i].parent.is_some() {
            self.break_link(i);
            self.links[i].child_sees = None;
            self.links[i].dialing = false;
        }
        for child in self.nodes[i].children.clone() {
            self.break_link(child);
            self.links[child].parent_sees = None;
        }
    }

    // ----- the replicated root (`--replicas`) -----

    /// The next replica tries to take the store's writer's lease; on success it holds a
    /// fenced handle under the new epoch.
    fn take_over(&mut self, i: usize) -> bool {
        let now = self.now;
        let store = Arc::clone(&self.nodes[i].store);
        let Some(shared) = self.nodes[i].shared.as_mut() else {
            return true;
        };
        let next = 1 - shared.serving;
        let holder = format!("replica-{next}");
        let taken = shared
            .lease
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_take(now, &holder, STORE_LEASE_MS);
        let Ok(epoch) = taken else {
            return false;
        };
        #[allow(unused_mut)]
        let mut writer = FencedStore::new(store, Arc::clone(&shared.lease), epoch);
        #[cfg(feature = "mutations")]
        if self.opts.planted(crate::options::Mutation::SkipStoreFence) {
            writer.set_mutation(Some(palm_actors::store::FenceMutation::SkipCheck));
        }
        shared.writer = Some(writer);
        shared.serving = next;
        self.line(
            i,
            &format!("{holder} takes the store's lease (epoch {epoch})"),
        );
        true
    }

    fn schedule_standby(&mut self, i: usize) {
        if let Some(shared) = self.nodes[i].shared.as_mut()
            && !shared.standing_by
        {
            shared.standing_by = true;
            self.after(STANDBY_POLL_MS, Ev::Standby);
        }
    }

    /// A standby replica looks at the lease; once it has expired it takes it and serves
    /// from the shared store (its children redial it, as after a restart).
    fn standby(&mut self, i: usize) {
        let Some(shared) = self.nodes[i].shared.as_mut() else {
            return;
        };
        shared.standing_by = false;
        if self.live(i) {
            return;
        }
        if self.take_over(i) {
            self.coverage.hit("replica_took_over");
            self.boot(i);
            self.line(i, "STANDBY serves from the shared store");
            self.commit(i);
            // The children's dialers keep trying every address of their parent; the
            // replica now serving answers them.
            for child in self.nodes[i].children.clone() {
                let delay = self.rng.between(50, 1_000);
                self.redial(child, delay);
            }
        } else {
            self.schedule_standby(i);
        }
    }

    /// The serving replica renews its lease (every third of its length).
    fn renew(&mut self, i: usize) {
        let now = self.now;
        let boot = self.nodes[i].boot;
        let Some(shared) = self.nodes[i].shared.as_ref() else {
            return;
        };
        let Some(writer) = shared.writer.as_ref() else {
            return;
        };
        let renewed = shared
            .lease
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .renew(now, writer.epoch(), STORE_LEASE_MS);
        if renewed {
            self.after(STORE_LEASE_MS / 3, Ev::Renew { boot });
        } else {
            self.fail(Violation {
                invariant: "no_dual_truth",
                detail: "the serving root replica lost its lease while serving".into(),
            });
        }
    }

    /// The serving replica is cut from the store with a batch sealed and not sent: it
    /// stops serving, a standby will take over once the lease expires, and the cut
    /// replica's batch reaches the store late.
    fn cut_from_store(&mut self, i: usize) {
        // What it committed before the cut is in the database.
        let _ = self.nodes[i].store.flush();
        let (serving, writes, epoch) = self.nodes[i]
            .shared
            .as_ref()
            .and_then(|s| {
                s.stale
                    .as_ref()
                    .map(|(w, b)| (s.serving, b.len(), w.epoch()))
            })
            .unwrap_or_default();
        self.coverage.hit("replica_cut_from_store");
        self.nodes[i].live = None;
        self.line(
            i,
            &format!(
                "CUT replica-{serving} (epoch {epoch}) from the store: {writes} writes sealed, not sent"
            ),
        );
        self.links_down(i);
        self.schedule_standby(i);
        let delay = self.rng.between(STORE_LEASE_MS / 2, STORE_LEASE_MS * 3);
        self.after(delay, Ev::StaleWrite);
    }

    /// The cut replica gets through and sends its sealed batch under its old epoch. The
    /// fence must refuse it once another replica took the lease: a write of a replica that
    /// no longer holds the store is two truths.
    fn stale_write(&mut self, i: usize) {
        let Some(shared) = self.nodes[i].shared.as_mut() else {
            return;
        };
        let Some((handle, batch)) = shared.stale.take() else {
            return;
        };
        let current = shared
            .lease
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .epoch();
        let epoch = handle.epoch();
        match handle.commit(&batch) {
            Err(_) => {
                self.coverage.hit("stale_replica_fenced");
                self.line(
                    i,
                    &format!("STALE write of epoch {epoch} refused by the fence"),
                );
            }
            Ok(()) if current != epoch => {
                let jobs: Vec<String> = Checker::touched(&batch).into_iter().collect();
                self.fail(Violation {
                    invariant: "no_dual_truth",
                    detail: format!(
                        "root replica of lease epoch {epoch}, cut from the store, wrote {} writes ({jobs:?}) after epoch {current} took over",
                        batch.len()
                    ),
                });
            }
            Ok(()) => {
                // Through before anyone took over: still the only writer, as if it had
                // committed and then crashed.
                let _ = self.nodes[i].store.flush();
                self.coverage.hit("stale_write_before_takeover");
                self.line(
                    i,
                    &format!("STALE write of epoch {epoch} lands: nobody took over"),
                );
            }
        }
    }

    fn restart(&mut self, i: usize) {
        if self.live(i) {
            return;
        }
        if self.nodes[i].shared.is_some() {
            // A replicated root comes back through the lease, like any standby.
            self.schedule_standby(i);
            return;
        }
        self.boot(i);
        self.line(i, "RESTART from its disk");
        self.commit(i);
        if self.nodes[i].parent.is_some() {
            let delay = self.rng.between(50, 300);
            self.redial(i, delay);
        }
    }

    // ----- invariants beyond the flush checks -----

    fn check_leases(&mut self) {
        let now = self.now;
        let mut live_leases = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let Some(live) = node.live.as_ref() else {
                continue;
            };
            // Placed runs as the world runs them (not as the core counts them: a core
            // that lost track of a run must not hide it), each under the lease the core
            // last renewed for its key and token.
            let placed: BTreeMap<&str, (u64, u64)> = live
                .hop
                .placed_leases()
                .map(|(key, token, until)| (key, (token, until)))
                .collect();
            for run in live.runs.values().filter(|run| !run.finished) {
                let until = match run.seat {
                    Some(_) => run.lease_until,
                    None => match placed.get(run.key.as_str()) {
                        Some((token, until)) if *token == run.token => *until,
                        _ => continue,
                    },
                };
                if until > now {
                    let holder = if run.seat.is_some() { "seat" } else { "placed" };
                    live_leases.push((run.key.clone(), format!("n{i}/{holder}")));
                }
            }
        }
        let mut checker = Checker::default();
        if let Err(v) = checker.leases(&live_leases) {
            self.fail(v);
        }
    }

    fn legitimately_blocked(&self, i: usize, core: &palm_actors::job::JobCore) -> bool {
        let node = &self.nodes[i];
        !core.engine().outstanding().is_empty()
            && core.engine().outstanding().values().all(|o| {
                let needs = o.request.requirements();
                let here = needs.iter().all(|n| node.capabilities.contains(n));
                // Blocked for good only when no node of the subtree offers the needs:
                // placement reaches every depth.
                !here && !self.subtree_offers(i, &needs)
            })
    }

    fn subtree_offers(&self, i: usize, needs: &[String]) -> bool {
        self.nodes[i].children.iter().any(|&c| {
            needs.iter().all(|n| self.nodes[c].capabilities.contains(n))
                || self.subtree_offers(c, needs)
        })
    }

    fn settled_job(&self, i: usize, job: &palm_actors::job::JobCore) -> bool {
        (job.status() == JobStatus::Waiting && !job.waiting_on().is_empty())
            || self.legitimately_blocked(i, job)
    }

    fn settled(&self) -> bool {
        self.nodes.iter().enumerate().all(|(i, node)| {
            let Some(live) = node.live.as_ref() else {
                return false;
            };
            live.runs.is_empty()
                && live.flush_at.is_none()
                && live.hop.placed_running() == 0
                && live.path.active_jobs().all(|j| self.settled_job(i, j))
        })
    }

    fn judge_liveness(&mut self) {
        let mut stuck = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let Some(live) = node.live.as_ref() else {
                stuck.push(format!("node {i} is down at the end"));
                continue;
            };
            for job in live.path.active_jobs() {
                if !self.settled_job(i, job) {
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
