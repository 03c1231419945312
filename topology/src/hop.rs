//! [`HopCore`]: the tree protocol of one node as a sans-IO state machine — hop home,
//! forward and answer, placement, refusal and release, relay, renewal and completion of
//! placed effects, cancel, give-up.
//!
//! The shape is quinn-proto's: inputs go in through `handle_*` methods, each with the
//! caller's `now` (ms); outputs come out through [`HopCore::poll_output`] and the next
//! deadline through [`HopCore::next_timeout`]. Nothing here touches a socket, a clock, a
//! task or a lock. The node hosts one `HopCore` in one actor; the simulator hosts one per
//! simulated node. Both drain outputs in order after every input:
//!
//! - [`HopOutput::Send`] — put a message on the link to a peer;
//! - [`HopOutput::Reply`] — answer a request the host routed with [`HopCore::handle_request`];
//! - [`HopOutput::Apply`], [`HopOutput::Renew`], [`HopOutput::Complete`] — this node is the
//!   home: apply it and answer with `handle_applied` / `handle_renewed` /
//!   `handle_completed`, **only once the write is durable**;
//! - [`HopOutput::Claim`] — claim effects for a node of the subtree (answer with
//!   `handle_claimed`, once the claims are durable), and [`HopOutput::Release`] — give a
//!   claim back (a child refused it);
//! - [`HopOutput::Start`], [`HopOutput::Stop`] — run, or stop, an effect placed here
//!   (report how it ended with `handle_finished`);
//! - [`HopOutput::Event`] — what happened, for logs and the simulator's trace.
//!
//! **Rules the protocol keeps** (each found the hard way, most by the simulator):
//! - A claim is released only on a child's explicit refusal, or when the placement never
//!   left this node. A placement that got no answer may be running: its lease decides.
//! - A placement (key, token) is decided once per node: a copy of it — duplicated by the
//!   network, or re-sent — gets the same answer and never starts a second run, and a
//!   newer claim of the same key replaces (stops) the older run here.
//! - A relay remembers where it passed a placement, for the cancel, and refuses a copy
//!   of a cancelled one.
//! - Renewals and outcomes climb hop by hop, routed by the job's tag, not by remembered
//!   state, so they find home after a relaying node restarts.
//! - An answer is marked as the home's only by the home: a node on the way that serves
//!   a projection says so ([`Reply::Unreachable`] with its `view`).

use crate::msg::{CompleteVerdict, RenewVerdict, Reply, Summary, TopoMsg, Toward};
use crate::{HOPS_MAX, Projection, Projections, Role, Route, Topology};
use palm_actors::bt::Outcome;
use palm_actors::json::Json;
use palm_actors::path::ClaimedEffect;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Names a planted bug where one is checked; without the `mutations` feature every check
/// is `()` and [`HopCore::mutated`] is constantly false, so nothing is planted.
#[cfg(feature = "mutations")]
macro_rules! mutation {
    ($name:ident) => {
        HopMutation::$name
    };
}
#[cfg(not(feature = "mutations"))]
macro_rules! mutation {
    ($name:ident) => {
        ()
    };
}

/// Holder name of an effect placed on a child: `child:NAME`.
pub const CHILD_HOLDER_PREFIX: &str = "child:";
/// How often a child reports its summary to its parent (ms).
pub const SUMMARY_EVERY_MS: u64 = 1_000;
/// How often a home looks for work to place on its subtree, besides being woken (ms).
pub const PLACE_EVERY_MS: u64 = 200;
/// Bound on a forwarded request whose sender named no shorter one (ms).
pub const FORWARD_TIMEOUT_MS: u64 = 120_000;
/// How long a home waits for a child to take or refuse a placement (ms). No answer is
/// not a refusal: the claim stays until its lease decides.
pub const PLACE_ANSWER_MS: u64 = 10_000;
/// How long a relaying node waits for its own child's answer to a placement (ms): less
/// than its parent waits for it, so the answer gets there in time.
pub const RELAY_ANSWER_MS: u64 = 5_000;
/// How long a home waits for its host to claim effects for a placement round (ms).
pub const CLAIM_ANSWER_MS: u64 = 30_000;
/// How long a child waits for the answer to a renewal or an outcome before asking again
/// (ms); also how long a relaying node waits for the answer from above.
pub const REPORT_ANSWER_MS: u64 = 10_000;
/// A child reports an outcome again this often until the home answers (ms).
pub const REPORT_RETRY_MS: u64 = 1_000;
/// A child gives up reporting an outcome this long after its lease ran out (ms): the
/// home has placed the effect again by then.
pub const REPORT_AFTER_LEASE_MS: u64 = 60_000;
/// Shortest interval between renewals of a placed effect (ms); the usual one is a third
/// of the lease.
pub const RENEW_EVERY_MS_MIN: u64 = 100;
/// A placement decision (taken, refused, passed down, cancelled) is remembered this long
/// (ms), so a late copy gets the same answer.
pub const DECIDED_FORGET_MS: u64 = 6 * 3_600_000;
/// At most this many placement decisions are remembered (the oldest are forgotten).
pub const DECIDED_MAX: usize = 10_000;
/// Bound on requests in flight through this node (forwarded, relayed, served); more are
/// answered unreachable at once rather than queued without bound.
pub const IN_FLIGHT_MAX: usize = 65_536;

/// The holder name of a claim placed on the direct child `child`.
pub fn child_holder(child: &str) -> String {
    format!("{CHILD_HOLDER_PREFIX}{child}")
}

/// The job of an effect key (`job/path/attempt`).
pub fn job_of_key(key: &str) -> &str {
    key.split('/').next().unwrap_or(key)
}

pub use crate::authority::Direction;

/// Who a node is, for its [`HopCore`].
#[derive(Clone, Debug)]
pub struct HopConfig {
    /// Node name (what the parent and children call it).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its store tag (ids of the jobs it homes start with `TAG-`).
    pub tag: String,
    /// The parent's name (its address until the link is up), if any.
    pub parent: Option<String>,
    /// This boot's epoch, sent to children.
    pub epoch: u64,
    /// Seeds the ids of the requests this node sends (distinct per boot, so a late
    /// answer to a previous life is not mistaken for one of this life).
    pub seed: u64,
}

/// What the node offers by itself now (its host keeps this current).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalFacts {
    /// Needs ready here (places, capabilities).
    pub ready: Vec<String>,
    /// Seats.
    pub seats: u32,
    /// Seats busy with local work (placed work is counted by the core).
    pub busy: u32,
}

/// A request the host asks the core to route.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteRequest {
    /// Where it goes.
    pub toward: Toward,
    /// The job whose view the answer carries, for projections (a status, a wait).
    pub view_of: Option<String>,
    /// The control request, as JSON.
    pub request: Json,
    /// How long the host waits for the answer (ms).
    pub within_ms: u64,
}

/// Where [`HopCore::handle_request`] sent a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Routed {
    /// This node is its home: the host applies it.
    Here,
    /// Forwarded: the answer comes as [`HopOutput::Reply`] with the host's id.
    Away,
    /// Answered at once (the way home is cut).
    Now(Reply),
}

/// Something that happened in the protocol, for logs and traces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HopEvent {
    /// A stable short name (the simulator counts them as coverage).
    pub kind: &'static str,
    /// What, in words.
    pub text: String,
}

/// What the host must do (see the module docs for the order and the duties).
#[derive(Clone, Debug, PartialEq)]
pub enum HopOutput {
    /// Send `msg` to the peer `to` (dropped if that link is down).
    Send {
        /// The peer.
        to: String,
        /// The message.
        msg: TopoMsg,
    },
    /// The answer to a request the host routed (its id).
    Reply {
        /// The host's id of the request.
        id: u64,
        /// The answer.
        reply: Reply,
    },
    /// Apply a request that reached its home here; answer with `handle_applied` once
    /// durable.
    Apply {
        /// Names this exchange.
        serve: u64,
        /// The control request.
        request: Json,
    },
    /// Claim, for holder `child:VIA`, up to `max` effects that this node cannot run and
    /// whose needs are all in `ready`; answer with `handle_claimed` once durable.
    Claim {
        /// Names this round.
        round: u64,
        /// The direct child the effects go to.
        via: String,
        /// The node below that will run them (`via` itself, or deeper).
        node: String,
        /// Needs ready on that node.
        ready: Vec<String>,
        /// At most this many.
        max: u32,
    },
    /// Give a claim back: it will not run where it was placed.
    Release {
        /// Effect key.
        key: String,
        /// Fencing token.
        token: u64,
    },
    /// Renew a placed effect's lease here, its home; answer with `handle_renewed` once
    /// durable.
    Renew {
        /// Names this exchange.
        serve: u64,
        /// Effect key.
        key: String,
        /// Fencing token.
        token: u64,
        /// The holder the claim must name: the child the report came from (a sibling
        /// cannot renew what was placed elsewhere).
        holder: String,
    },
    /// Record a placed effect's outcome here, its home; answer with `handle_completed`
    /// once durable.
    Complete {
        /// Names this exchange.
        serve: u64,
        /// Effect key.
        key: String,
        /// Fencing token.
        token: u64,
        /// What happened.
        outcome: Outcome,
        /// The node that ran it.
        node: String,
        /// The holder the claim must name: the child the report came from.
        holder: String,
    },
    /// Run an effect placed here by `home`; report with `handle_finished`.
    Start {
        /// The claim.
        effect: ClaimedEffect,
        /// Its home.
        home: String,
    },
    /// Stop a placed effect running here (its outcome is not reported).
    Stop {
        /// Effect key.
        key: String,
        /// Fencing token.
        token: u64,
        /// Why.
        reason: String,
    },
    /// Something happened.
    Event(HopEvent),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Summary,
    Place,
    Prune,
    Forward(u64),
    Placing(u64),
    Relaying(u64),
    Round(u64),
    Ask(u64),
    Passing(u64),
    Run(String),
}

#[derive(Clone, Debug)]
enum Origin {
    Local(u64),
    Peer { peer: String, id: u64 },
}

#[derive(Clone, Debug)]
struct Forwarding {
    origin: Origin,
    via: String,
    view_of: Option<String>,
    deadline: u64,
}

#[derive(Clone, Debug)]
enum Serving {
    Forward {
        peer: String,
        id: u64,
    },
    Renew {
        peer: String,
        id: u64,
    },
    Complete {
        peer: String,
        id: u64,
        key: String,
        token: u64,
        node: String,
    },
}

#[derive(Clone, Debug)]
struct Round {
    via: String,
    node: String,
    /// Seats on `node` this round holds (in `HopCore::reserved`) until its claims come
    /// back.
    reserved: u32,
    deadline: u64,
}

#[derive(Clone, Debug)]
struct Placing {
    key: String,
    token: u64,
    via: String,
    node: String,
    deadline: u64,
}

#[derive(Clone, Debug)]
struct PlacedOut {
    via: String,
    node: String,
    token: u64,
}

#[derive(Clone, Debug)]
struct Decided {
    token: u64,
    accepted: bool,
    reason: Option<String>,
    at: u64,
}

#[derive(Clone, Debug)]
struct Relayed {
    child: String,
    token: u64,
    cancelled: bool,
    at: u64,
}

#[derive(Clone, Debug)]
struct RelayingPlace {
    from: String,
    their_id: u64,
    key: String,
    token: u64,
    child: String,
    deadline: u64,
}

#[derive(Clone, Debug)]
enum RunState {
    Running,
    Reporting {
        outcome: Outcome,
        next_try: u64,
        give_up_at: u64,
    },
}

#[derive(Clone, Debug)]
struct PlacedRun {
    token: u64,
    lease_until: u64,
    lease_ms: u64,
    renew_at: u64,
    asking: Option<u64>,
    state: RunState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AskKind {
    Renew,
    Complete,
}

#[derive(Clone, Debug)]
struct Ask {
    key: String,
    token: u64,
    deadline: u64,
}

#[derive(Clone, Debug)]
struct Passing {
    child: String,
    their_id: u64,
    kind: AskKind,
    key: String,
    token: u64,
    deadline: u64,
}

/// A deliberate bug planted in the protocol, to prove the simulator catches it (feature
/// `mutations`; the production binary never enables it).
#[cfg(feature = "mutations")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HopMutation {
    /// A node forgets which placements it already decided: a copy of a placement (or a
    /// newer claim of a key it runs) starts another run beside the first.
    SameKeyForgotten,
    /// A home releases a claim whose placement got no answer, as if refused: the child
    /// may be running it, and the effect is placed again beside it.
    ReleaseWithoutRefusal,
    /// A home that sees a child reconnect places that child's effects again at once,
    /// though the child may still be running them.
    DoublePlacementAfterReconnect,
    /// A relaying node passes every copy of a placement down afresh.
    RelayTwice,
    /// A node serves its projection of a job as if the home had answered.
    ProjectionAlwaysValid,
}

#[cfg(feature = "mutations")]
impl HopMutation {
    /// Every planted bug.
    pub const ALL: [HopMutation; 5] = [
        HopMutation::SameKeyForgotten,
        HopMutation::ReleaseWithoutRefusal,
        HopMutation::DoublePlacementAfterReconnect,
        HopMutation::RelayTwice,
        HopMutation::ProjectionAlwaysValid,
    ];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            HopMutation::SameKeyForgotten => "same-key-forgotten",
            HopMutation::ReleaseWithoutRefusal => "release-without-refusal",
            HopMutation::DoublePlacementAfterReconnect => "double-placement-after-reconnect",
            HopMutation::RelayTwice => "relay-twice",
            HopMutation::ProjectionAlwaysValid => "projection-always-valid",
        }
    }
}

/// The tree protocol of one node (see the module docs).
pub struct HopCore {
    topology: Topology,
    projections: Projections,
    epoch: u64,
    next_id: u64,
    local: LocalFacts,
    outputs: VecDeque<HopOutput>,
    timers: BTreeSet<(u64, Timer)>,
    forwards: BTreeMap<u64, Forwarding>,
    serving: BTreeMap<u64, Serving>,
    rounds: BTreeMap<u64, Round>,
    placing: BTreeMap<u64, Placing>,
    placed_out: BTreeMap<String, PlacedOut>,
    runs: BTreeMap<String, PlacedRun>,
    decided: BTreeMap<String, Decided>,
    decided_order: VecDeque<(u64, String)>,
    relayed: BTreeMap<String, Relayed>,
    relaying: BTreeMap<u64, RelayingPlace>,
    asks: BTreeMap<u64, Ask>,
    passing: BTreeMap<u64, Passing>,
    place_due: Option<u64>,
    /// Seats held by placement rounds in flight, by node: not offered to another round.
    /// Kept apart from the topology's counts, which climb in this node's summary (a
    /// parent must not see seats as busy that only a round of this home holds).
    reserved: BTreeMap<String, u32>,
    /// A placement round ran while others held seats: look again once every round in
    /// flight has ended (the work that woke it may fit on seats they gave back unused).
    place_again: bool,
    /// Frames refused since boot (see [`crate::authority`]).
    refused: u64,
    /// The latest refusals, newest last (at most [`REFUSALS_KEPT`]).
    refusals: VecDeque<Refusal>,
    #[cfg(feature = "mutations")]
    mutation: Option<HopMutation>,
}

/// Refusals kept for `palm vitality` (the count covers them all).
pub const REFUSALS_KEPT: usize = 32;

/// A frame refused from a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// When (ms).
    pub at: u64,
    /// The peer, by the name its certificate proves.
    pub peer: String,
    /// The message kind.
    pub kind: &'static str,
    /// Why.
    pub reason: String,
}

impl HopCore {
    /// The protocol of a node that just booted at `now`.
    pub fn new(config: HopConfig, now: u64) -> HopCore {
        let mut core = HopCore {
            topology: Topology::new(
                &config.name,
                config.role,
                &config.tag,
                config.parent.as_deref(),
            ),
            projections: Projections::default(),
            epoch: config.epoch,
            // Odd and well away from 0, so ids of different boots rarely meet.
            next_id: config.seed | 1,
            local: LocalFacts::default(),
            outputs: VecDeque::new(),
            timers: BTreeSet::new(),
            forwards: BTreeMap::new(),
            serving: BTreeMap::new(),
            rounds: BTreeMap::new(),
            placing: BTreeMap::new(),
            placed_out: BTreeMap::new(),
            runs: BTreeMap::new(),
            decided: BTreeMap::new(),
            decided_order: VecDeque::new(),
            relayed: BTreeMap::new(),
            relaying: BTreeMap::new(),
            asks: BTreeMap::new(),
            passing: BTreeMap::new(),
            place_due: None,
            reserved: BTreeMap::new(),
            place_again: false,
            refused: 0,
            refusals: VecDeque::new(),
            #[cfg(feature = "mutations")]
            mutation: None,
        };
        core.arm(now + SUMMARY_EVERY_MS, Timer::Summary);
        core.arm(now + PLACE_EVERY_MS, Timer::Place);
        core.arm(now + 60_000, Timer::Prune);
        core
    }

    /// Plants a bug (see [`HopMutation`]).
    #[cfg(feature = "mutations")]
    pub fn set_mutation(&mut self, mutation: Option<HopMutation>) {
        self.mutation = mutation;
    }

    #[cfg(feature = "mutations")]
    fn mutated(&self, mutation: HopMutation) -> bool {
        self.mutation == Some(mutation)
    }

    #[cfg(not(feature = "mutations"))]
    fn mutated(&self, _: ()) -> bool {
        false
    }

    // ----- what the host reads -----

    /// The routing table (read-only).
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The validity of this node's view of its parent's truth.
    pub fn projection(&self) -> Projection {
        self.topology.projection()
    }

    /// This node's summary now (what its parent hears).
    pub fn summary(&self, now: u64) -> Summary {
        self.topology.summary(
            now,
            self.local.ready.clone(),
            self.local.seats,
            // Queued placed effects count: the parent places up to `takes`.
            self.busy().min(self.takes()),
        )
    }

    /// How many effects this node takes at once, as its parent's placement counts them
    /// ([`crate::takes`]).
    fn takes(&self) -> u32 {
        crate::takes(self.local.seats)
    }

    /// The tree as this node sees it (`palm tree`).
    pub fn view(&self, now: u64) -> Value {
        self.topology.view(now, &self.summary(now))
    }

    /// Effects placed here by the parent that are running now.
    pub fn placed_running(&self) -> usize {
        self.runs
            .values()
            .filter(|run| matches!(run.state, RunState::Running))
            .count()
    }

    /// Placed effects running here, with their leases as last renewed:
    /// `(key, token, lease_until)`.
    pub fn placed_leases(&self) -> impl Iterator<Item = (&str, u64, u64)> + '_ {
        self.runs
            .iter()
            .filter(|(_, run)| matches!(run.state, RunState::Running))
            .map(|(key, run)| (key.as_str(), run.token, run.lease_until))
    }

    /// Effects this home placed on its subtree and has not heard the end of.
    pub fn placed_out(&self) -> usize {
        self.placed_out.len()
    }

    /// Frames refused since boot, and the latest of them (newest last).
    pub fn refusals(&self) -> (u64, impl Iterator<Item = &Refusal> + '_) {
        (self.refused, self.refusals.iter())
    }

    /// Requests waiting for an answer through this node (forwarded, relayed, served).
    pub fn in_flight(&self) -> usize {
        self.forwards.len() + self.serving.len() + self.relaying.len() + self.passing.len()
    }

    fn busy(&self) -> u32 {
        self.local.busy.saturating_add(self.placed_running() as u32)
    }

    /// The next moment [`HopCore::handle_timeout`] has something to do.
    pub fn next_timeout(&self) -> Option<u64> {
        self.timers.first().map(|(at, _)| *at)
    }

    /// The next thing the host must do.
    pub fn poll_output(&mut self) -> Option<HopOutput> {
        self.outputs.pop_front()
    }

    // ----- inputs -----

    /// The host's facts changed (readiness, seats, local busy).
    pub fn set_local(&mut self, facts: LocalFacts) {
        self.local = facts;
    }

    /// Work became ready at home: look for placements now rather than at the next tick.
    pub fn wake_placer(&mut self, now: u64) {
        if self.topology.role().is_home() && self.place_due.is_none_or(|due| due > now) {
            self.place_due = Some(now);
            self.arm(now, Timer::Place);
        }
    }

    /// The link to `peer` came up or went down. An "up" for a peer already up is a new
    /// connection replacing the old one: what was in flight on the old one is lost.
    pub fn handle_link(&mut self, now: u64, peer: &str, direction: Direction, up: bool) {
        let was_up = match direction {
            Direction::Parent => self.topology.parent_is_up(),
            Direction::Child => self.topology.child_is_up(peer),
        };
        if was_up {
            self.link_lost(now, peer, direction);
        }
        match direction {
            Direction::Parent => self.topology.parent_link(now, peer, up),
            Direction::Child => self.topology.child_link(now, peer, up),
        }
        self.event(
            if up { "link_up" } else { "link_down" },
            format!(
                "{} {peer} {}",
                match direction {
                    Direction::Parent => "parent",
                    Direction::Child => "child",
                },
                if up { "up" } else { "down" }
            ),
        );
        if !up {
            return;
        }
        match direction {
            Direction::Parent => {
                let summary = self.summary(now);
                self.send(peer, TopoMsg::Summary(summary));
            }
            Direction::Child => {
                let info = self.topology.parent_info_for_children(self.epoch);
                self.send(peer, TopoMsg::Parent(info));
                if was_up && self.mutated(mutation!(DoublePlacementAfterReconnect)) {
                    let held: Vec<(String, u64)> = self
                        .placed_out
                        .iter()
                        .filter(|(_, out)| out.via == peer)
                        .map(|(key, out)| (key.clone(), out.token))
                        .collect();
                    for (key, token) in held {
                        self.release(&key, token, "the child reconnected");
                    }
                }
                self.wake_placer(now);
            }
        }
    }

    /// What was in flight over a link that is gone is lost: forwarded requests are
    /// answered unreachable, relayed reports are answered "unknown" (their senders ask
    /// again). Placements sent down stay: their leases decide.
    fn link_lost(&mut self, now: u64, peer: &str, direction: Direction) {
        let lost: Vec<u64> = self
            .forwards
            .iter()
            .filter(|(_, f)| f.via == peer)
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            if let Some(forwarding) = self.forwards.remove(&id) {
                let reason = format!("the link to `{peer}` went down");
                self.unreachable(now, forwarding, &reason);
            }
        }
        if direction == Direction::Parent {
            let passing: Vec<u64> = self.passing.keys().copied().collect();
            for rid in passing {
                self.pass_unanswered(rid, "the link to the parent went down");
            }
            let asks: Vec<u64> = self.asks.keys().copied().collect();
            for id in asks {
                self.ask_lost(now, id);
            }
        } else {
            // Requests the child was relaying for us are answered by nobody now.
            let relaying: Vec<u64> = self
                .relaying
                .iter()
                .filter(|(_, r)| r.child == peer)
                .map(|(id, _)| *id)
                .collect();
            for id in relaying {
                self.relaying.remove(&id);
            }
        }
    }

    /// A request from this node's host (CLI, MCP, a provider) about a job or a submit,
    /// with the host's `id` for the answer.
    pub fn handle_request(&mut self, now: u64, id: u64, request: RouteRequest) -> Routed {
        let route = self.route(&request.toward);
        match route {
            Route::Local => Routed::Here,
            Route::Parent | Route::Child(_) => {
                if self.in_flight() >= IN_FLIGHT_MAX {
                    return Routed::Now(self.unreachable_reply(
                        request.view_of.as_deref(),
                        "too many requests in flight through this node",
                    ));
                }
                let via = self.via(&route);
                self.forward(now, Origin::Local(id), via, request, 0);
                Routed::Away
            }
            Route::Unreachable(reason) => {
                Routed::Now(self.unreachable_reply(request.view_of.as_deref(), &reason))
            }
        }
    }

    fn route(&self, toward: &Toward) -> Route {
        match toward {
            Toward::Job(job) => self.topology.route_job(job),
            Toward::NewHome => self.topology.route_submit(),
            Toward::Node(name) => self.topology.route_node(name),
        }
    }

    fn via(&self, route: &Route) -> String {
        match route {
            Route::Child(name) => name.clone(),
            _ => self.topology.parent_name().unwrap_or_default().to_owned(),
        }
    }

    fn forward(&mut self, now: u64, origin: Origin, via: String, request: RouteRequest, hops: u32) {
        let id = self.id();
        let deadline = now.saturating_add(request.within_ms);
        // Each hop waits a little less than the one before it, so an answer that comes
        // late reaches the asker as this hop's "no answer", not as silence.
        let within_ms = request.within_ms.saturating_sub(request.within_ms / 10);
        self.event(
            "forwarded",
            format!(
                "forward #{id} {:?} to {via} (hop {})",
                request.toward,
                hops + 1
            ),
        );
        self.forwards.insert(
            id,
            Forwarding {
                origin,
                via: via.clone(),
                view_of: request.view_of.clone(),
                deadline,
            },
        );
        self.arm(deadline, Timer::Forward(id));
        self.send(
            &via,
            TopoMsg::Forward {
                id,
                toward: request.toward,
                view_of: request.view_of,
                request: request.request,
                hops: hops + 1,
                within_ms,
            },
        );
    }

    fn unreachable_reply(&self, view_of: Option<&str>, reason: &str) -> Reply {
        let view = view_of.and_then(|job| self.projections.view(job)).cloned();
        #[cfg(feature = "mutations")]
        if let Some(view) = &view
            && self.mutated(HopMutation::ProjectionAlwaysValid)
        {
            return Reply::Home(view.clone());
        }
        Reply::Unreachable {
            at: self.topology.name().to_owned(),
            reason: reason.to_owned(),
            since: self.topology.projection().home_unreachable_since,
            view,
        }
    }

    fn unreachable(&mut self, _now: u64, forwarding: Forwarding, reason: &str) {
        let reply = self.unreachable_reply(forwarding.view_of.as_deref(), reason);
        self.event(
            "home_unreachable",
            format!(
                "{reason}{}",
                if matches!(&reply, Reply::Unreachable { view: Some(_), .. }) {
                    " (projection served)"
                } else {
                    ""
                }
            ),
        );
        self.deliver(forwarding.origin, reply);
    }

    fn deliver(&mut self, origin: Origin, reply: Reply) {
        match origin {
            Origin::Local(id) => self.outputs.push_back(HopOutput::Reply { id, reply }),
            Origin::Peer { peer, id } => self.send(&peer, TopoMsg::Answer { id, reply }),
        }
    }

    /// The home applied a request it got with [`HopOutput::Apply`] (and made it
    /// durable): `response` goes back the way it came.
    pub fn handle_applied(&mut self, _now: u64, serve: u64, response: Json) {
        if let Some(Serving::Forward { peer, id }) = self.serving.remove(&serve) {
            self.event("answered", format!("answer #{id} to {peer} from home"));
            self.send(
                &peer,
                TopoMsg::Answer {
                    id,
                    reply: Reply::Home(response),
                },
            );
        }
    }

    /// The home renewed (or refused) a lease it was asked with [`HopOutput::Renew`].
    pub fn handle_renewed(&mut self, _now: u64, serve: u64, result: Result<u64, String>) {
        if let Some(Serving::Renew { peer, id }) = self.serving.remove(&serve) {
            let verdict = match result {
                Ok(until) => RenewVerdict::Until(until),
                Err(reason) => RenewVerdict::Refused(reason),
            };
            self.send(&peer, TopoMsg::Renewed { id, verdict });
        }
    }

    /// The home recorded (or refused) an outcome it was given with
    /// [`HopOutput::Complete`].
    pub fn handle_completed(&mut self, _now: u64, serve: u64, result: Result<(), String>) {
        if let Some(Serving::Complete {
            peer,
            id,
            key,
            token,
            node,
        }) = self.serving.remove(&serve)
        {
            // The seat below was counted free when the report arrived (`on_report`).
            let verdict = match result {
                Ok(()) => CompleteVerdict::Recorded,
                Err(reason) => CompleteVerdict::Refused(reason),
            };
            self.event(
                "completion_answered",
                format!("{key} tok {token} from {node}: {verdict:?}"),
            );
            self.send(&peer, TopoMsg::Completed { id, verdict });
        }
    }

    /// The home claimed (and made durable) effects for placement round `round`.
    pub fn handle_claimed(&mut self, now: u64, round: u64, effects: Vec<ClaimedEffect>) {
        self.place_claimed(now, round, effects);
        self.rounds_ended(now);
    }

    fn place_claimed(&mut self, now: u64, round: u64, effects: Vec<ClaimedEffect>) {
        let Some(target) = self.rounds.remove(&round) else {
            // The round was given up on: nothing was sent, so the claims go back.
            for effect in effects {
                self.release(
                    &effect.key,
                    effect.token,
                    "its placement round was given up",
                );
            }
            return;
        };
        let home = self.topology.name().to_owned();
        // The round's seats go back; those it fills are counted as placed below.
        self.unreserve(&target.node, target.reserved);
        for effect in effects {
            if !self.topology.child_is_up(&target.via) {
                self.release(
                    &effect.key,
                    effect.token,
                    &format!("the link to `{}` went down before it was sent", target.via),
                );
                continue;
            }
            let id = self.id();
            self.topology.placed_on_target(&target.via, &target.node);
            self.event(
                "placed",
                format!(
                    "place {} tok {} via {} for {} (#{id})",
                    effect.key, effect.token, target.via, target.node
                ),
            );
            let deadline = now + PLACE_ANSWER_MS;
            self.placing.insert(
                id,
                Placing {
                    key: effect.key.clone(),
                    token: effect.token,
                    via: target.via.clone(),
                    node: target.node.clone(),
                    deadline,
                },
            );
            self.placed_out.insert(
                effect.key.clone(),
                PlacedOut {
                    via: target.via.clone(),
                    node: target.node.clone(),
                    token: effect.token,
                },
            );
            self.arm(deadline, Timer::Placing(id));
            self.send(
                &target.via,
                TopoMsg::Place {
                    id,
                    effect,
                    home: home.clone(),
                },
            );
        }
    }

    /// The home's job path stopped wanting a claim held by `child:CHILD` (halted,
    /// cancelled, lease expired): tell the child.
    pub fn cancel_placed(&mut self, _now: u64, child: &str, key: &str, token: u64) {
        if let Some(out) = self.placed_out.get(key).filter(|out| out.token == token) {
            // Stopped below: count that seat free again.
            let node = out.node.clone();
            self.topology.completed_on(&node);
            self.placed_out.remove(key);
        }
        self.event(
            "cancel_sent",
            format!("cancel {key} tok {token} to {child}"),
        );
        self.send(
            child,
            TopoMsg::Cancel {
                key: key.to_owned(),
                token,
            },
        );
    }

    /// An effect placed here ended: `Some(outcome)` is reported home until it is
    /// recorded or refused; `None` (stopped, lost) is not reported.
    pub fn handle_finished(&mut self, now: u64, key: &str, token: u64, outcome: Option<Outcome>) {
        let Some(run) = self.runs.get_mut(key).filter(|run| run.token == token) else {
            return;
        };
        if !matches!(run.state, RunState::Running) {
            return;
        }
        match outcome {
            None => {
                self.runs.remove(key);
            }
            Some(outcome) => {
                let give_up_at = run.lease_until.saturating_add(REPORT_AFTER_LEASE_MS);
                run.state = RunState::Reporting {
                    outcome,
                    next_try: now,
                    give_up_at,
                };
                run.asking = None;
                self.report(now, key);
            }
        }
    }

    /// Time passed: deadlines, retries, summaries, placement rounds.
    pub fn handle_timeout(&mut self, now: u64) {
        // Bounded per call, so one call cannot run away; what is left stays armed.
        for _ in 0..4_096 {
            let Some((at, _)) = self.timers.first() else {
                break;
            };
            if *at > now {
                break;
            }
            let (_, timer) = self.timers.pop_first().expect("a first timer");
            self.fire(now, timer);
        }
    }

    fn fire(&mut self, now: u64, timer: Timer) {
        match timer {
            Timer::Summary => {
                if let Some(parent) = self.topology.parent_name()
                    && self.topology.parent_is_up()
                {
                    let parent = parent.to_owned();
                    let summary = self.summary(now);
                    self.send(&parent, TopoMsg::Summary(summary));
                }
                self.arm(now + SUMMARY_EVERY_MS, Timer::Summary);
            }
            Timer::Place => {
                if self.place_due.is_some_and(|due| due > now) {
                    return;
                }
                self.place_due = None;
                // Rounds in flight hold seats this one cannot ask for: look again once
                // they have all ended (`rounds_ended`).
                self.place_again |= !self.rounds.is_empty();
                self.place_round(now);
                let next = now + PLACE_EVERY_MS;
                if !self.timers.contains(&(next, Timer::Place)) {
                    self.arm(next, Timer::Place);
                }
            }
            Timer::Prune => {
                self.prune(now);
                self.arm(now + 60_000, Timer::Prune);
            }
            Timer::Forward(id) => {
                if let Some(forwarding) = self.forwards.get(&id)
                    && forwarding.deadline <= now
                {
                    let forwarding = self.forwards.remove(&id).expect("present");
                    let reason = format!(
                        "no answer from `{}` in time (the way home is slow or cut)",
                        forwarding.via
                    );
                    self.unreachable(now, forwarding, &reason);
                }
            }
            Timer::Placing(id) => {
                if let Some(placing) = self.placing.get(&id)
                    && placing.deadline <= now
                {
                    let placing = self.placing.remove(&id).expect("present");
                    if self.mutated(mutation!(ReleaseWithoutRefusal)) {
                        self.release(&placing.key, placing.token, "no answer (planted bug)");
                        self.topology.completed_on(&placing.node);
                        return;
                    }
                    // No answer is not a refusal: the child may be running it. The claim
                    // stays until the child reports or its lease runs out.
                    self.event(
                        "placement_unanswered",
                        format!(
                            "{} tok {} got no answer from {}; its lease decides",
                            placing.key, placing.token, placing.via
                        ),
                    );
                }
            }
            Timer::Relaying(id) => {
                if let Some(relaying) = self.relaying.get(&id)
                    && relaying.deadline <= now
                {
                    let relaying = self.relaying.remove(&id).expect("present");
                    // No answer to pass up either: the home's lease decides.
                    self.event(
                        "relay_unanswered",
                        format!(
                            "{} tok {} got no answer from {}",
                            relaying.key, relaying.token, relaying.child
                        ),
                    );
                }
            }
            Timer::Round(round) => {
                if let Some(r) = self.rounds.get(&round)
                    && r.deadline <= now
                {
                    // Given up: nothing was sent, and a late answer releases its
                    // claims; the seats it held are free for the next round.
                    let given_up = self.rounds.remove(&round).expect("present");
                    self.unreserve(&given_up.node, given_up.reserved);
                    self.rounds_ended(now);
                }
            }
            Timer::Ask(id) => {
                if let Some(ask) = self.asks.get(&id)
                    && ask.deadline <= now
                {
                    self.ask_lost(now, id);
                }
            }
            Timer::Passing(rid) => {
                if let Some(passing) = self.passing.get(&rid)
                    && passing.deadline <= now
                {
                    self.pass_unanswered(rid, "no answer from above in time");
                }
            }
            Timer::Run(key) => self.run_due(now, &key),
        }
    }

    fn prune(&mut self, now: u64) {
        while let Some((at, key)) = self.decided_order.front().cloned() {
            let expired = now.saturating_sub(at) > DECIDED_FORGET_MS;
            if !expired && self.decided_order.len() <= DECIDED_MAX {
                break;
            }
            self.decided_order.pop_front();
            if self.decided.get(&key).is_some_and(|d| d.at == at) {
                self.decided.remove(&key);
            }
        }
        self.relayed
            .retain(|_, relayed| now.saturating_sub(relayed.at) <= DECIDED_FORGET_MS);
        while self.relayed.len() > DECIDED_MAX {
            let oldest = self
                .relayed
                .iter()
                .min_by_key(|(_, relayed)| relayed.at)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(key) => self.relayed.remove(&key),
                None => break,
            };
        }
    }

    // ----- placement, at a home -----

    fn place_round(&mut self, now: u64) {
        if !self.topology.role().is_home() {
            return;
        }
        // Rounds overlap: each holds the seats it asks to fill (`reserved`) until its
        // claims come back, so a round started while another is in flight asks only for
        // seats freed since. A seat freed by a child's completion is so refilled by a
        // claim the kernel gets together with that completion, in one home commit.
        for target in self.topology.placement_targets(now) {
            let held = self.reserved.get(&target.node).copied().unwrap_or(0);
            let free = target.free.saturating_sub(held);
            if free == 0 {
                continue;
            }
            *self.reserved.entry(target.node.clone()).or_default() += free;
            let round = self.id();
            let deadline = now + CLAIM_ANSWER_MS;
            self.rounds.insert(
                round,
                Round {
                    via: target.via.clone(),
                    node: target.node.clone(),
                    reserved: free,
                    deadline,
                },
            );
            self.arm(deadline, Timer::Round(round));
            self.outputs.push_back(HopOutput::Claim {
                round,
                via: target.via,
                node: target.node,
                ready: target.ready,
                max: free,
            });
        }
    }

    /// Once no round is in flight, a wake that came while some were runs its round (it
    /// may fit on seats they held and gave back unused).
    fn rounds_ended(&mut self, now: u64) {
        if self.rounds.is_empty() && std::mem::take(&mut self.place_again) {
            self.place_round(now);
        }
    }

    /// Frees `seats` a placement round held on `node`.
    fn unreserve(&mut self, node: &str, seats: u32) {
        if let Some(held) = self.reserved.get_mut(node) {
            *held = held.saturating_sub(seats);
            if *held == 0 {
                self.reserved.remove(node);
            }
        }
    }

    fn release(&mut self, key: &str, token: u64, why: &str) {
        if self
            .placed_out
            .get(key)
            .is_some_and(|out| out.token == token)
        {
            self.placed_out.remove(key);
        }
        self.event("released", format!("release {key} tok {token}: {why}"));
        self.outputs.push_back(HopOutput::Release {
            key: key.to_owned(),
            token,
        });
    }

    // ----- frames -----

    /// A message from `peer` (already authenticated by the link).
    pub fn handle_frame(&mut self, now: u64, peer: &str, msg: TopoMsg) {
        let direction = if self.topology.parent_name() == Some(peer) {
            Direction::Parent
        } else if self.topology.has_child(peer) {
            Direction::Child
        } else {
            self.event(
                "unknown_peer",
                format!("{} from `{peer}`, not linked here", msg.kind()),
            );
            return;
        };
        // Who may say what: one table (`crate::authority`).
        if let Err(reason) = crate::authority::check_message(&msg, direction) {
            self.refuse(now, peer, msg.kind(), reason);
            return;
        }
        match msg {
            TopoMsg::Summary(summary) => {
                if summary.name == peer {
                    self.topology.child_summary(now, summary);
                } else {
                    let reason = format!("a summary as `{}`, not as itself", summary.name);
                    self.refuse(now, peer, "summary", reason);
                }
            }
            TopoMsg::Parent(info) => self.topology.parent_info(now, info),
            TopoMsg::Forward {
                id,
                toward,
                view_of,
                request,
                hops,
                within_ms,
            } => self.on_forward(
                now,
                peer,
                id,
                RouteRequest {
                    toward,
                    view_of,
                    request,
                    within_ms,
                },
                hops,
            ),
            TopoMsg::Answer { id, reply } => self.on_answer(peer, id, reply),
            TopoMsg::Place { id, effect, home } => self.on_place(now, peer, id, effect, home),
            TopoMsg::Placed {
                id,
                accepted,
                reason,
            } => self.on_placed(now, peer, id, accepted, reason),
            TopoMsg::Renew { id, key, token } => self.on_report(
                now,
                peer,
                id,
                AskKind::Renew,
                TopoMsg::Renew { id, key, token },
            ),
            TopoMsg::Complete {
                id,
                key,
                token,
                outcome,
                node,
            } => self.on_report(
                now,
                peer,
                id,
                AskKind::Complete,
                TopoMsg::Complete {
                    id,
                    key,
                    token,
                    outcome,
                    node,
                },
            ),
            TopoMsg::Renewed { id, verdict } => self.on_renewed(now, id, verdict),
            TopoMsg::Completed { id, verdict } => self.on_completed(now, id, verdict),
            TopoMsg::Cancel { key, token } => self.on_cancel(now, key, token),
        }
    }

    fn on_forward(&mut self, now: u64, peer: &str, id: u64, request: RouteRequest, hops: u32) {
        if let Err(reason) = crate::authority::check_forward(&request.request.0, &request.toward) {
            self.refuse(now, peer, "forward", reason.clone());
            let at = self.topology.name().to_owned();
            self.send(
                peer,
                TopoMsg::Answer {
                    id,
                    reply: Reply::Refused { at, reason },
                },
            );
            return;
        }
        if hops > HOPS_MAX {
            self.send(
                peer,
                TopoMsg::Answer {
                    id,
                    reply: Reply::TooFar { hops },
                },
            );
            return;
        }
        if self.in_flight() >= IN_FLIGHT_MAX {
            let reply = self.unreachable_reply(
                request.view_of.as_deref(),
                "too many requests in flight through this node",
            );
            self.send(peer, TopoMsg::Answer { id, reply });
            return;
        }
        let origin = Origin::Peer {
            peer: peer.to_owned(),
            id,
        };
        let route = self.route(&request.toward);
        match route {
            Route::Local => {
                let serve = self.id();
                self.serving.insert(
                    serve,
                    Serving::Forward {
                        peer: peer.to_owned(),
                        id,
                    },
                );
                self.event("applied", format!("apply #{id} from {peer} here (home)"));
                self.outputs.push_back(HopOutput::Apply {
                    serve,
                    request: request.request,
                });
            }
            Route::Parent | Route::Child(_) => {
                let via = self.via(&route);
                if via == peer {
                    // Routing disagrees between two nodes (a tag changed hands): say so
                    // rather than bounce the request back and forth.
                    let reply = self.unreachable_reply(
                        request.view_of.as_deref(),
                        &format!("`{peer}` and this node each route the request to the other"),
                    );
                    self.send(peer, TopoMsg::Answer { id, reply });
                    return;
                }
                self.forward(now, origin, via, request, hops);
            }
            Route::Unreachable(reason) => {
                let reply = self.unreachable_reply(request.view_of.as_deref(), &reason);
                self.event("home_unreachable", reason);
                self.deliver(origin, reply);
            }
        }
    }

    fn on_answer(&mut self, peer: &str, id: u64, reply: Reply) {
        let Some(forwarding) = self.forwards.get(&id) else {
            self.event(
                "late_answer",
                format!("answer #{id} from {peer}: nobody waits"),
            );
            return;
        };
        if forwarding.via != peer {
            self.event(
                "refused_message",
                format!(
                    "answer #{id} from {peer}, but it was sent to {}",
                    forwarding.via
                ),
            );
            return;
        }
        let forwarding = self.forwards.remove(&id).expect("present");
        if let (Reply::Home(response), Some(job)) = (&reply, &forwarding.view_of) {
            self.projections.remember(job, response);
        }
        self.event(
            "answer_relayed",
            format!(
                "answer #{id} from {peer} ({})",
                match &reply {
                    Reply::Home(_) => "home",
                    Reply::Unreachable { .. } => "unreachable",
                    Reply::TooFar { .. } => "too far",
                    Reply::Refused { .. } => "refused",
                }
            ),
        );
        self.deliver(forwarding.origin, reply);
    }

    // ----- placement, on the way down -----

    /// Forgets the relay of `key` under `token` only: the entry may already be a newer
    /// claim's, passed down since (an older claim's late refusal or end must not erase
    /// it, or a copy of the newer placement would be passed down again, perhaps to
    /// another child — two live leases of one key).
    fn forget_relayed(&mut self, key: &str, token: u64) {
        if self.relayed.get(key).is_some_and(|r| r.token == token) {
            self.relayed.remove(key);
        }
    }

    fn decide(&mut self, now: u64, key: &str, token: u64, accepted: bool, reason: Option<String>) {
        self.decided.insert(
            key.to_owned(),
            Decided {
                token,
                accepted,
                reason,
                at: now,
            },
        );
        self.decided_order.push_back((now, key.to_owned()));
        if self.decided_order.len() > DECIDED_MAX {
            self.prune(now);
        }
    }

    fn answer_placed(&mut self, peer: &str, id: u64, accepted: bool, reason: Option<String>) {
        self.send(
            peer,
            TopoMsg::Placed {
                id,
                accepted,
                reason,
            },
        );
    }

    fn on_place(&mut self, now: u64, peer: &str, id: u64, effect: ClaimedEffect, home: String) {
        let key = effect.key.clone();
        let token = effect.token;
        // A parent may hand down only work that needs what this node offers: a command
        // or call naming at least one capability or place. Anything else would make a
        // child run whatever text its parent sends.
        if let Err(reason) = crate::authority::check_place(&effect.request) {
            self.refuse(now, peer, "place", format!("{key}: {reason}"));
            self.answer_placed(peer, id, false, Some(reason));
            return;
        }
        let forgetful = self.mutated(mutation!(SameKeyForgotten));
        // A copy of a placement decided here gets the same answer.
        if !forgetful && let Some(decided) = self.decided.get(&key).filter(|d| d.token == token) {
            let (accepted, reason) = (decided.accepted, decided.reason.clone());
            self.event(
                "duplicate_placement",
                format!("{key} tok {token} again: answered as before ({accepted})"),
            );
            self.answer_placed(peer, id, accepted, reason);
            return;
        }
        if let Some(relayed) = self.relayed.get(&key).filter(|r| r.token == token) {
            if relayed.cancelled {
                self.event(
                    "placement_after_cancel",
                    format!("{key} tok {token} refused"),
                );
                self.answer_placed(peer, id, false, Some("the home cancelled it".into()));
                return;
            }
            if !self.mutated(mutation!(RelayTwice)) {
                // Being passed down already: its answer comes from below.
                self.event(
                    "duplicate_placement",
                    format!("{key} tok {token} again while it is passed down"),
                );
                return;
            }
        }
        if let Some(run) = self.runs.get(&key) {
            if run.token == token && !forgetful {
                self.answer_placed(peer, id, true, None);
                return;
            }
            if run.token < token && !forgetful {
                // A newer claim of the same key: the home gave up on the older one, so
                // that run is stopped here before the new one starts.
                let old = run.token;
                self.runs.remove(&key);
                self.event(
                    "placement_replaced",
                    format!("{key}: tok {old} replaced by tok {token}"),
                );
                self.outputs.push_back(HopOutput::Stop {
                    key: key.clone(),
                    token: old,
                    reason: format!("replaced by a newer claim (token {token})"),
                });
            } else if run.token > token && !forgetful {
                self.decide(
                    now,
                    &key,
                    token,
                    false,
                    Some("a newer claim runs here".into()),
                );
                self.answer_placed(peer, id, false, Some("a newer claim runs here".into()));
                return;
            }
        }
        let needs = effect.request.requirements();
        let ready_here = needs.iter().all(|need| self.local.ready.contains(need));
        // A node takes what its parent counts it able to take: its seats and a queue
        // place per seat (the host runs the queued ones as seats free).
        let free_here = self.busy() < self.takes();
        if ready_here && free_here {
            self.accept(now, peer, id, effect, home);
            return;
        }
        let here = if ready_here {
            format!(
                "all {} seats and their queue places are busy",
                self.local.seats
            )
        } else {
            format!("needs {needs:?} are not all ready here")
        };
        if let crate::Placement::Child(child) = self.topology.place(now, &needs, false)
            && child != peer
        {
            let rid = self.id();
            let deadline = now + RELAY_ANSWER_MS;
            self.relayed.insert(
                key.clone(),
                Relayed {
                    child: child.clone(),
                    token,
                    cancelled: false,
                    at: now,
                },
            );
            self.relaying.insert(
                rid,
                RelayingPlace {
                    from: peer.to_owned(),
                    their_id: id,
                    key: key.clone(),
                    token,
                    child: child.clone(),
                    deadline,
                },
            );
            self.arm(deadline, Timer::Relaying(rid));
            self.topology.placed_on(&child);
            self.event(
                "placement_relayed",
                format!("relay {key} tok {token} to {child} ({here})"),
            );
            self.send(
                &child,
                TopoMsg::Place {
                    id: rid,
                    effect,
                    home,
                },
            );
            return;
        }
        let reason = format!("{here}, and no child offers them");
        self.event("placement_refused", format!("{key} tok {token}: {reason}"));
        self.decide(now, &key, token, false, Some(reason.clone()));
        self.answer_placed(peer, id, false, Some(reason));
    }

    fn accept(&mut self, now: u64, peer: &str, id: u64, effect: ClaimedEffect, home: String) {
        let key = effect.key.clone();
        let token = effect.token;
        let lease_ms = effect
            .lease_until
            .saturating_sub(now)
            .max(RENEW_EVERY_MS_MIN * 3);
        let renew_at = now + (lease_ms / 3).max(RENEW_EVERY_MS_MIN);
        self.runs.insert(
            key.clone(),
            PlacedRun {
                token,
                lease_until: effect.lease_until,
                lease_ms,
                renew_at,
                asking: None,
                state: RunState::Running,
            },
        );
        self.decide(now, &key, token, true, None);
        self.arm(renew_at, Timer::Run(key.clone()));
        self.event(
            "placement_accepted",
            format!("run {key} tok {token} for {home}"),
        );
        self.outputs.push_back(HopOutput::Start { effect, home });
        self.answer_placed(peer, id, true, None);
    }

    fn on_placed(&mut self, now: u64, peer: &str, id: u64, accepted: bool, reason: Option<String>) {
        // An answer to a placement this node made as the home...
        if let Some(placing) = self.placing.get(&id).filter(|p| p.via == peer) {
            let placing = placing.clone();
            self.placing.remove(&id);
            if accepted {
                self.event(
                    "placement_taken",
                    format!("{} tok {} taken by {}", placing.key, placing.token, peer),
                );
            } else {
                // The refused seat stays counted busy until that node's next summary:
                // placing there again before it says more would only be refused again.
                self.release(
                    &placing.key,
                    placing.token,
                    &format!("{peer} refused: {}", reason.unwrap_or_default()),
                );
            }
            return;
        }
        // ...or to one it passed down for its parent.
        if let Some(relaying) = self.relaying.get(&id).filter(|r| r.child == peer) {
            let relaying = relaying.clone();
            self.relaying.remove(&id);
            if accepted {
                self.decide(now, &relaying.key, relaying.token, true, None);
                self.answer_placed(&relaying.from, relaying.their_id, true, None);
            } else {
                let reason = format!("`{peer}` refused: {}", reason.unwrap_or_default());
                self.forget_relayed(&relaying.key, relaying.token);
                self.topology.completed_on(peer);
                self.decide(
                    now,
                    &relaying.key,
                    relaying.token,
                    false,
                    Some(reason.clone()),
                );
                self.answer_placed(&relaying.from, relaying.their_id, false, Some(reason));
            }
            return;
        }
        self.event(
            "late_answer",
            format!("placed #{id} from {peer}: nobody waits"),
        );
    }

    fn on_cancel(&mut self, now: u64, key: String, token: u64) {
        if let Some(run) = self.runs.get(&key).filter(|r| r.token == token) {
            if matches!(run.state, RunState::Running) {
                self.runs.remove(&key);
                self.event("placed_effect_stopped", format!("cancel {key} tok {token}"));
                self.outputs.push_back(HopOutput::Stop {
                    key,
                    token,
                    reason: "the home cancelled it".into(),
                });
            }
            return;
        }
        if let Some(relayed) = self.relayed.get_mut(&key).filter(|r| r.token == token) {
            relayed.cancelled = true;
            let child = relayed.child.clone();
            self.event(
                "cancel_relayed",
                format!("cancel {key} tok {token} to {child}"),
            );
            self.send(&child, TopoMsg::Cancel { key, token });
            return;
        }
        // Not seen yet: a late copy of the placement must not start it.
        if self.decided.get(&key).is_none_or(|d| d.token <= token) {
            self.decide(
                now,
                &key,
                token,
                false,
                Some("the home cancelled it".into()),
            );
        }
    }

    // ----- renewals and outcomes of placed effects -----

    fn on_report(&mut self, now: u64, peer: &str, id: u64, kind: AskKind, msg: TopoMsg) {
        let (key, token) = match &msg {
            TopoMsg::Renew { key, token, .. } | TopoMsg::Complete { key, token, .. } => {
                (key.clone(), *token)
            }
            _ => return,
        };
        match self.topology.route_job(job_of_key(&key)) {
            Route::Local => {
                let serve = self.id();
                match msg {
                    TopoMsg::Renew { .. } => {
                        self.serving.insert(
                            serve,
                            Serving::Renew {
                                peer: peer.to_owned(),
                                id,
                            },
                        );
                        self.outputs.push_back(HopOutput::Renew {
                            serve,
                            key,
                            token,
                            holder: child_holder(peer),
                        });
                    }
                    TopoMsg::Complete { outcome, node, .. } => {
                        // The seat below is free whatever the verdict: the effect ended
                        // there. Counting it now (not once the outcome is durable) lets the
                        // round that refills it claim in the same commit as this outcome.
                        if self
                            .placed_out
                            .get(&key)
                            .is_some_and(|out| out.token == token)
                        {
                            self.placed_out.remove(&key);
                        }
                        self.topology.completed_on(&node);
                        self.wake_placer(now);
                        self.serving.insert(
                            serve,
                            Serving::Complete {
                                peer: peer.to_owned(),
                                id,
                                key: key.clone(),
                                token,
                                node: node.clone(),
                            },
                        );
                        self.outputs.push_back(HopOutput::Complete {
                            serve,
                            key,
                            token,
                            outcome,
                            node,
                            holder: child_holder(peer),
                        });
                    }
                    _ => {}
                }
            }
            Route::Child(below) => {
                // A home places only down: an effect of a job homed below was never
                // placed through here.
                let reason = format!("{key}: its job is homed below (under `{below}`), not here");
                self.answer_report(peer, id, kind, Err(reason));
            }
            Route::Parent | Route::Unreachable(_) => {
                // Placed through here to another child: a sibling cannot report it. (Once
                // this node forgot the relay — a restart — the home's holder check stands.)
                if let Some(relayed) = self.relayed.get(&key).filter(|r| r.token == token)
                    && relayed.child != peer
                {
                    let reason = format!("{key} was placed on `{}`, not `{peer}`", relayed.child);
                    self.refuse(now, peer, msg.kind(), reason.clone());
                    self.answer_report(peer, id, kind, Err(reason));
                    return;
                }
                // Homed above: pass it up unchanged but for the id; the answer comes back
                // down the same way.
                let parent = self.topology.parent_name().map(str::to_owned);
                let (Some(parent), true) = (parent, self.topology.parent_is_up()) else {
                    self.answer_unknown(peer, id, kind, "the way home is cut above this node");
                    return;
                };
                if self.in_flight() >= IN_FLIGHT_MAX {
                    self.answer_unknown(peer, id, kind, "too many requests in flight");
                    return;
                }
                let rid = self.id();
                let deadline = now + REPORT_ANSWER_MS;
                self.passing.insert(
                    rid,
                    Passing {
                        child: peer.to_owned(),
                        their_id: id,
                        kind,
                        key: key.clone(),
                        token,
                        deadline,
                    },
                );
                self.arm(deadline, Timer::Passing(rid));
                let up = match msg {
                    TopoMsg::Renew { key, token, .. } => TopoMsg::Renew {
                        id: rid,
                        key,
                        token,
                    },
                    TopoMsg::Complete {
                        key,
                        token,
                        outcome,
                        node,
                        ..
                    } => {
                        // The seat below is free whatever home says: the effect ended.
                        self.topology.completed_on(&node);
                        TopoMsg::Complete {
                            id: rid,
                            key,
                            token,
                            outcome,
                            node,
                        }
                    }
                    other => other,
                };
                self.event(
                    "report_relayed",
                    format!("{} {key} tok {token} from {peer} up", up.kind()),
                );
                self.send(&parent, up);
            }
        }
    }

    fn answer_report(&mut self, peer: &str, id: u64, kind: AskKind, refused: Result<(), String>) {
        let reason = refused.err().unwrap_or_default();
        let msg = match kind {
            AskKind::Renew => TopoMsg::Renewed {
                id,
                verdict: RenewVerdict::Refused(reason),
            },
            AskKind::Complete => TopoMsg::Completed {
                id,
                verdict: CompleteVerdict::Refused(reason),
            },
        };
        self.send(peer, msg);
    }

    fn answer_unknown(&mut self, peer: &str, id: u64, kind: AskKind, reason: &str) {
        let msg = match kind {
            AskKind::Renew => TopoMsg::Renewed {
                id,
                verdict: RenewVerdict::Unknown(reason.to_owned()),
            },
            AskKind::Complete => TopoMsg::Completed {
                id,
                verdict: CompleteVerdict::Unreachable(reason.to_owned()),
            },
        };
        self.send(peer, msg);
    }

    fn pass_unanswered(&mut self, rid: u64, reason: &str) {
        if let Some(passing) = self.passing.remove(&rid) {
            self.answer_unknown(&passing.child, passing.their_id, passing.kind, reason);
        }
    }

    fn on_renewed(&mut self, now: u64, id: u64, verdict: RenewVerdict) {
        if let Some(passing) = self.passing.remove(&id) {
            self.send(
                &passing.child,
                TopoMsg::Renewed {
                    id: passing.their_id,
                    verdict,
                },
            );
            return;
        }
        let Some(ask) = self.asks.remove(&id) else {
            return;
        };
        let Some(run) = self.runs.get_mut(&ask.key).filter(|r| r.token == ask.token) else {
            return;
        };
        run.asking = None;
        match verdict {
            RenewVerdict::Until(until) => {
                run.lease_until = run.lease_until.max(until);
            }
            RenewVerdict::Refused(reason) => {
                if matches!(run.state, RunState::Running) {
                    self.runs.remove(&ask.key);
                    self.event(
                        "renewal_refused",
                        format!("{} tok {}: {reason}", ask.key, ask.token),
                    );
                    self.outputs.push_back(HopOutput::Stop {
                        key: ask.key,
                        token: ask.token,
                        reason: format!("the home refused the renewal: {reason}"),
                    });
                }
            }
            RenewVerdict::Unknown(_) => {
                let _ = now;
            }
        }
    }

    fn on_completed(&mut self, now: u64, id: u64, verdict: CompleteVerdict) {
        if let Some(passing) = self.passing.remove(&id) {
            if !matches!(verdict, CompleteVerdict::Unreachable(_)) {
                // Its end is known at home: nothing will need passing down any more.
                self.forget_relayed(&passing.key, passing.token);
            }
            self.send(
                &passing.child,
                TopoMsg::Completed {
                    id: passing.their_id,
                    verdict,
                },
            );
            return;
        }
        let Some(ask) = self.asks.remove(&id) else {
            return;
        };
        let Some(run) = self.runs.get_mut(&ask.key).filter(|r| r.token == ask.token) else {
            return;
        };
        run.asking = None;
        match verdict {
            CompleteVerdict::Recorded | CompleteVerdict::Refused(_) => {
                self.event(
                    "reported",
                    format!("{} tok {}: {verdict:?}", ask.key, ask.token),
                );
                self.runs.remove(&ask.key);
            }
            CompleteVerdict::Unreachable(_) => {
                if let RunState::Reporting { next_try, .. } = &mut run.state {
                    *next_try = now + REPORT_RETRY_MS;
                    let at = *next_try;
                    self.arm(at, Timer::Run(ask.key));
                }
            }
        }
    }

    fn ask_lost(&mut self, now: u64, id: u64) {
        let Some(ask) = self.asks.remove(&id) else {
            return;
        };
        if let Some(run) = self.runs.get_mut(&ask.key).filter(|r| r.token == ask.token) {
            run.asking = None;
            let at = match &mut run.state {
                RunState::Reporting { next_try, .. } => {
                    *next_try = (*next_try).max(now + REPORT_RETRY_MS);
                    *next_try
                }
                RunState::Running => run.renew_at.max(now),
            };
            self.arm(at, Timer::Run(ask.key));
        }
    }

    /// A placed run's timer: renew, give up on an expired lease, report again.
    fn run_due(&mut self, now: u64, key: &str) {
        let Some(run) = self.runs.get(key) else {
            return;
        };
        match &run.state {
            RunState::Running => {
                // A lease gone unrenewed for a whole lease beyond its end is lost: the
                // home placed the effect again long ago.
                let lost_at = run.lease_until.saturating_add(run.lease_ms);
                if now > lost_at {
                    let token = run.token;
                    self.runs.remove(key);
                    self.event("lease_lost", format!("{key} tok {token}: stopped"));
                    self.outputs.push_back(HopOutput::Stop {
                        key: key.to_owned(),
                        token,
                        reason: "its lease ran out without a renewal".into(),
                    });
                    return;
                }
                let (token, asking) = (run.token, run.asking);
                if now >= run.renew_at {
                    let every = (run.lease_ms / 3).max(RENEW_EVERY_MS_MIN);
                    if let Some(run) = self.runs.get_mut(key) {
                        run.renew_at = now + every;
                    }
                    if asking.is_none() {
                        self.ask(now, key, token, AskKind::Renew, None);
                    }
                }
                let Some(run) = self.runs.get(key) else {
                    return;
                };
                let at = run
                    .renew_at
                    .min(run.lease_until.saturating_add(run.lease_ms) + 1);
                self.arm(at, Timer::Run(key.to_owned()));
            }
            RunState::Reporting {
                next_try,
                give_up_at,
                ..
            } => {
                if now >= *give_up_at {
                    let token = run.token;
                    self.runs.remove(key);
                    self.event(
                        "report_given_up",
                        format!("{key} tok {token}: the home will run it again"),
                    );
                    return;
                }
                if run.asking.is_some() {
                    // An answer (or its loss) re-arms this timer; until then only giving
                    // up is due.
                    let at = *give_up_at;
                    self.arm(at, Timer::Run(key.to_owned()));
                } else if now >= *next_try {
                    self.report(now, key);
                } else {
                    let at = (*next_try).min(*give_up_at);
                    self.arm(at, Timer::Run(key.to_owned()));
                }
            }
        }
    }

    fn report(&mut self, now: u64, key: &str) {
        let Some(run) = self.runs.get_mut(key) else {
            return;
        };
        let RunState::Reporting {
            outcome,
            next_try,
            give_up_at,
        } = &mut run.state
        else {
            return;
        };
        *next_try = now + REPORT_RETRY_MS;
        let (at, give_up_at) = (*next_try, *give_up_at);
        let (token, outcome) = (run.token, outcome.clone());
        self.arm(at.min(give_up_at), Timer::Run(key.to_owned()));
        self.ask(now, key, token, AskKind::Complete, Some(outcome));
    }

    fn ask(&mut self, now: u64, key: &str, token: u64, kind: AskKind, outcome: Option<Outcome>) {
        let Some(parent) = self
            .topology
            .parent_name()
            .filter(|_| self.topology.parent_is_up())
            .map(str::to_owned)
        else {
            return;
        };
        let id = self.id();
        let deadline = now + REPORT_ANSWER_MS;
        self.asks.insert(
            id,
            Ask {
                key: key.to_owned(),
                token,
                deadline,
            },
        );
        if let Some(run) = self.runs.get_mut(key) {
            run.asking = Some(id);
        }
        self.arm(deadline, Timer::Ask(id));
        let msg = match (kind, outcome) {
            (AskKind::Complete, Some(outcome)) => {
                self.event("report_sent", format!("complete {key} tok {token}"));
                TopoMsg::Complete {
                    id,
                    key: key.to_owned(),
                    token,
                    outcome,
                    node: self.topology.name().to_owned(),
                }
            }
            _ => TopoMsg::Renew {
                id,
                key: key.to_owned(),
                token,
            },
        };
        self.send(&parent, msg);
    }

    // ----- plumbing -----

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(2);
        id
    }

    fn arm(&mut self, at: u64, timer: Timer) {
        self.timers.insert((at, timer));
    }

    fn send(&mut self, to: &str, msg: TopoMsg) {
        self.outputs.push_back(HopOutput::Send {
            to: to.to_owned(),
            msg,
        });
    }

    /// Drops a frame `peer` may not send: counted, kept for vitality, logged.
    fn refuse(&mut self, now: u64, peer: &str, kind: &'static str, reason: String) {
        self.event("refused_message", format!("{kind} from `{peer}`: {reason}"));
        self.refused += 1;
        if self.refusals.len() == REFUSALS_KEPT {
            self.refusals.pop_front();
        }
        self.refusals.push_back(Refusal {
            at: now,
            peer: peer.to_owned(),
            kind,
            reason,
        });
    }

    fn event(&mut self, kind: &'static str, text: String) {
        self.outputs
            .push_back(HopOutput::Event(HopEvent { kind, text }));
    }
}
