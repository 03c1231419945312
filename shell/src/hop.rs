//! The node's host of [`HopCore`], the tree protocol (hop home, placement, projections),
//! written once in `palm_topology` and hosted here and in the simulator.
//!
//! One task owns the core: every input — a frame from a link, a link up or down, a
//! control request to route, an answer from the kernel, a placed effect's end, a timer —
//! arrives on one channel and is fed to the core in order; then the task does what the
//! core asks ([`HopOutput`]) until it asks nothing more. No lock guards the protocol's
//! state, and no decision is made here: this file only moves bytes and calls the
//! kernel and the runner.
//!
//! - **Sends** are queued on the link's outbox straight from this task, in order and
//!   without waiting (a full outbox drops the frame, which the protocol treats as a lost
//!   message); the link's own writer sends them in batches.
//! - **Kernel duties** (apply a forwarded request, claim for a child, renew, complete,
//!   release) come back as inputs once the kernel answered — which is once the change is
//!   durable. What one turn asks of the kernel (claim, renew, complete, release) goes to
//!   it as one message at the turn's end, so a child's completion and the claim that
//!   refills its seat share one commit; only the wait for each answer runs on a task.
//!   Duties asked by peers (apply, renew, complete) run at
//!   most [`DUTIES_RUNNING_MAX`] at once; the rest queue, and while
//!   [`DUTIES_QUEUED_MAX`] are queued no frame is read from any link: the links' readers
//!   wait, the transport stops reading their streams, and QUIC flow control pushes back
//!   on the senders. Back-pressure, not a task per request.
//! - **Placed runs** execute with the same runner as the seats; their lease is renewed by
//!   the core (the runner's host renews nothing) and their end goes back to the core,
//!   which reports it home until it is recorded or refused.
//! - **Projections**: an answer from the home is marked `"projection": "valid"`; one
//!   served from this node's memory while the way home is cut is marked `"invalid"`, with
//!   `home_unreachable_since` and why.

use crate::genome::kernel::KernelMsg;
use crate::genome::runner::{self, EffectHost};
use crate::genome::{Genome, now_ms};
use crate::wire::TreeMsg;
use palm_actors::bt::Outcome;
use palm_actors::json::Json;
use palm_actors::path::ClaimedEffect;
use palm_api::protocol::{ErrorBody, Request, Response};
use palm_topology::{
    Direction, HopConfig, HopCore, HopOutput, LocalFacts, Reply, Role, RouteRequest, Routed,
    TopoMsg, Toward,
};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

/// Inputs waiting for the hop task (links up and down, routes, kernel answers, ...).
const INBOX: usize = 8_192;
/// Frames from links waiting for the hop task; a link's reader waits when it is full.
const FRAMES: usize = 256;
/// Duties for peers (apply, renew, complete) running at once.
pub const DUTIES_RUNNING_MAX: usize = 64;
/// Duties for peers waiting for a slot beyond which frames are no longer read.
pub const DUTIES_QUEUED_MAX: usize = 1_024;
/// Bound on a kernel call made for the protocol (apply, claim, renew, complete).
const KERNEL_CALL: Duration = Duration::from_secs(60);

/// What the hop task is told.
enum HopIn {
    LinkUp {
        peer: String,
        direction: Direction,
        connection: usize,
        link: palm_transport::Link<TreeMsg>,
    },
    LinkDown {
        peer: String,
        direction: Direction,
        connection: usize,
    },
    Frame {
        peer: String,
        msg: TopoMsg,
    },
    Route {
        request: RouteRequest,
        /// `None`: this node is the home; else the answer from the way home.
        reply: oneshot::Sender<Option<Reply>>,
    },
    Applied {
        serve: u64,
        response: Json,
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
    Finished {
        key: String,
        token: u64,
        outcome: Option<Outcome>,
    },
    CancelPlaced {
        child: String,
        key: String,
        token: u64,
    },
    Wake,
    View(oneshot::Sender<Value>),
}

/// How this node answers a request that reached it, its home, over the tree: the
/// control surface's own dispatch (`crate::control::dispatch_here`), handed in at boot
/// so the hop host does not depend on the surface built on it.
pub type Here = Arc<
    dyn Fn(Arc<Genome>, Request) -> Pin<Box<dyn Future<Output = Response> + Send>> + Send + Sync,
>;

/// The handle the rest of the node holds: cheap to clone, never blocks the caller
/// for long.
#[derive(Clone)]
pub struct Hop {
    inbox: mpsc::Sender<HopIn>,
    frames: mpsc::Sender<(String, TopoMsg)>,
    projection: watch::Receiver<Value>,
    refused: watch::Receiver<Value>,
}

impl Hop {
    /// Starts the hop task of node `genome` with `role` under `parent` (its address
    /// until the link is up); requests that reach their home here are answered by `here`.
    pub fn start(genome: &Arc<Genome>, role: Role, parent: Option<&str>, here: Here) -> Hop {
        let now = now_ms();
        let config = HopConfig {
            name: genome.info.name.clone(),
            role,
            tag: palm_actors::path::store_tag(&*genome.store).unwrap_or_default(),
            parent: parent.map(str::to_owned),
            epoch: now,
            seed: now ^ (u64::from(std::process::id()) << 40),
        };
        let core = HopCore::new(config, now);
        let (inbox, rx) = mpsc::channel(INBOX);
        let (frames, frames_rx) = mpsc::channel(FRAMES);
        let (projection_tx, projection) = watch::channel(projection_json(&core));
        let (refused_tx, refused) = watch::channel(refused_json(&core));
        let task = HopTask {
            core,
            genome: Arc::downgrade(genome),
            inbox: inbox.clone(),
            links: HashMap::new(),
            waiting: HashMap::new(),
            next_id: 1,
            placed: HashMap::new(),
            placed_queue: VecDeque::new(),
            placed_running: 0,
            projection: projection_tx,
            refused: refused_tx,
            here,
            duties: VecDeque::new(),
            running: 0,
            parked: HashSet::new(),
            kernel_asks: Vec::new(),
        };
        tokio::spawn(task.run(rx, frames_rx));
        Hop {
            inbox,
            frames,
            projection,
            refused,
        }
    }

    async fn tell(&self, input: HopIn) {
        if self.inbox.send(input).await.is_err() {
            debug!("the hop task is gone");
        }
    }

    fn tell_now(&self, input: HopIn) -> bool {
        self.inbox.try_send(input).is_ok()
    }

    /// A link came up (a newer connection of a peer replaces the older one).
    pub async fn link_up(&self, direction: Direction, link: &palm_transport::Link<TreeMsg>) {
        self.tell(HopIn::LinkUp {
            peer: link.peer().name.clone(),
            direction,
            connection: link.connection_id(),
            link: link.clone(),
        })
        .await;
    }

    /// The connection `connection` to `peer` went down.
    pub async fn link_down(&self, peer: &str, direction: Direction, connection: usize) {
        self.tell(HopIn::LinkDown {
            peer: peer.to_owned(),
            direction,
            connection,
        })
        .await;
    }

    /// A frame came from `peer` (its name as the link authenticated it).
    pub async fn frame(&self, peer: &str, msg: TopoMsg) {
        if self.frames.send((peer.to_owned(), msg)).await.is_err() {
            debug!("the hop task is gone");
        }
    }

    /// Work became ready at home: look for placements now.
    pub fn wake(&self) {
        let _ = self.tell_now(HopIn::Wake);
    }

    /// The home stopped wanting an effect it placed on `child`: tell the child.
    pub fn cancel_placed(&self, child: &str, key: &str, token: u64) {
        let sent = self.tell_now(HopIn::CancelPlaced {
            child: child.to_owned(),
            key: key.to_owned(),
            token,
        });
        if !sent {
            // Its lease still ends it: the child stops when renewals are refused.
            warn!(
                key,
                child, "the hop task is busy; the cancel waits for the lease"
            );
        }
    }

    /// The tree as this node sees it (`palm tree`).
    pub async fn view(&self) -> Value {
        let (tx, rx) = oneshot::channel();
        self.tell(HopIn::View(tx)).await;
        rx.await.unwrap_or(Value::Null)
    }

    /// The projection part of vitality, as of the last input the task handled.
    pub fn projection_json(&self) -> Value {
        self.projection.borrow().clone()
    }

    /// Frames refused from peers (vitality's `refused`): the count since boot and the
    /// latest ones.
    pub fn refused_json(&self) -> Value {
        self.refused.borrow().clone()
    }

    /// `None` when this node is the request's home; else what came back from the way home.
    async fn ask_route(&self, request: RouteRequest) -> Option<Reply> {
        let (tx, rx) = oneshot::channel();
        self.tell(HopIn::Route { request, reply: tx }).await;
        rx.await.unwrap_or_else(|_| {
            Some(Reply::Unreachable {
                at: String::new(),
                reason: "the node's tree organ stopped".into(),
                since: None,
                view: None,
            })
        })
    }

    /// Where a control request goes: `None` means here (this node is the job's home, or the
    /// request is not about a job); `Some` is the answer from wherever it went.
    pub async fn route(&self, request: &Request) -> Option<Response> {
        let toward = match request {
            Request::Submit {
                node: Some(node), ..
            } => Toward::Node(node.clone()),
            Request::Submit { .. } => Toward::NewHome,
            // Jobs are listed where they are homed: an edge asks its home.
            Request::Jobs {
                node: Some(node), ..
            } => Toward::Node(node.clone()),
            Request::Jobs { .. } => Toward::NewHome,
            _ => Toward::Job(job_of(request)?.to_owned()),
        };
        let view_of = match request {
            Request::Status { job } | Request::Wait { job, .. } => Some(job.clone()),
            _ => None,
        };
        let within_ms = match request {
            Request::Wait { timeout_ms, .. } => timeout_ms
                .unwrap_or(palm_api::protocol::WAIT_MS_MAX)
                .min(palm_api::protocol::WAIT_MS_MAX)
                .saturating_add(10_000),
            _ => palm_topology::hop::FORWARD_TIMEOUT_MS,
        };
        let reply = self
            .ask_route(RouteRequest {
                toward,
                view_of,
                request: Json(serde_json::to_value(request).unwrap_or(Value::Null)),
                within_ms,
            })
            .await;
        reply.map(answer)
    }
}

fn refused_json(core: &HopCore) -> Value {
    let (count, latest) = core.refusals();
    let latest: Vec<Value> = latest
        .map(|r| json!({"at": r.at, "peer": r.peer, "kind": r.kind, "reason": r.reason}))
        .collect();
    json!({"count": count, "latest": latest})
}

fn projection_json(core: &HopCore) -> Value {
    let projection = core.projection();
    json!({
        "of": projection.of,
        "valid": projection.valid,
        "home_unreachable_since": projection.home_unreachable_since,
    })
}

/// A link as the hop task knows it: which connection, and the link.
struct LinkOut {
    connection: usize,
    link: palm_transport::Link<TreeMsg>,
}

/// The task that owns the core (see the module docs).
struct HopTask {
    core: HopCore,
    genome: Weak<Genome>,
    inbox: mpsc::Sender<HopIn>,
    links: HashMap<String, LinkOut>,
    /// Routed requests waiting for their answer, by the id given to the core.
    waiting: HashMap<u64, oneshot::Sender<Option<Reply>>>,
    next_id: u64,
    /// Placed effects here, running or queued: their stop switches, by (key, token).
    placed: HashMap<(String, u64), watch::Sender<bool>>,
    /// Placed effects waiting for a seat, oldest first (a home places up to one more
    /// per seat than a node has, so a seat that finishes finds its next effect here
    /// instead of idling through a round trip to the home; the core renews them as it
    /// does the running ones).
    placed_queue: VecDeque<(ClaimedEffect, String, watch::Receiver<bool>)>,
    /// Placed effects running now: at most this node's seats.
    placed_running: usize,
    projection: watch::Sender<Value>,
    refused: watch::Sender<Value>,
    here: Here,
    /// Duties for peers (the core's `Apply`, `Renew` and `Complete` outputs) waiting
    /// for a slot, oldest first.
    duties: VecDeque<HopOutput>,
    /// Duties running now (at most [`DUTIES_RUNNING_MAX`]).
    running: usize,
    /// Forwarded `wait`s running beside the pool, by serve id.
    parked: HashSet<u64>,
    /// What this turn asks of the kernel, sent as one message at its end (see
    /// [`ask_kernel`]).
    kernel_asks: Vec<KernelMsg>,
}

impl HopTask {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<HopIn>,
        mut frames: mpsc::Receiver<(String, TopoMsg)>,
    ) {
        loop {
            let due = self.core.next_timeout();
            let sleep = async {
                match due {
                    Some(at) => {
                        let wait = at.saturating_sub(now_ms());
                        tokio::time::sleep(Duration::from_millis(wait)).await;
                    }
                    None => std::future::pending().await,
                }
            };
            let reading = self.duties.len() < DUTIES_QUEUED_MAX;
            let input = tokio::select! {
                // Inputs first: a link's "up" is queued before its first frame is read.
                biased;
                input = rx.recv() => match input {
                    Some(input) => Some(input),
                    None => return,
                },
                frame = frames.recv(), if reading => match frame {
                    Some((peer, msg)) => Some(HopIn::Frame { peer, msg }),
                    None => return,
                },
                () = sleep => None,
            };
            let Some(genome) = self.genome.upgrade() else {
                return;
            };
            // What this node offers feeds summaries and placement decisions; routing a
            // control request (the hot path) reads none of it.
            if !matches!(input, Some(HopIn::Route { .. })) {
                self.core.set_local(local_facts(&genome));
            }
            let now = now_ms();
            if let Some(input) = input {
                self.handle(now, input);
            }
            // What the input made due fires in the same turn (a completion wakes the
            // placer at `now`): its kernel asks then go out together with the input's.
            if self.core.next_timeout().is_some_and(|at| at <= now) {
                self.core.handle_timeout(now);
            }
            self.drain(&genome);
            self.start_queued(&genome);
            self.run_duties(&genome);
            self.send_kernel_asks(&genome);
            self.projection.send_if_modified(|old| {
                let new = projection_json(&self.core);
                let changed = *old != new;
                *old = new;
                changed
            });
            let refused = self.core.refusals().0;
            if self.refused.borrow()["count"] != refused {
                self.refused.send_replace(refused_json(&self.core));
            }
        }
    }

    fn handle(&mut self, now: u64, input: HopIn) {
        let core = &mut self.core;
        match input {
            HopIn::LinkUp {
                peer,
                direction,
                connection,
                link,
            } => {
                // A newer connection replaces the older.
                self.links
                    .insert(peer.clone(), LinkOut { connection, link });
                core.handle_link(now, &peer, direction, true);
            }
            HopIn::LinkDown {
                peer,
                direction,
                connection,
            } => {
                // A late "down" of a connection already replaced says nothing.
                if self
                    .links
                    .get(&peer)
                    .is_some_and(|l| l.connection == connection)
                {
                    self.links.remove(&peer);
                    core.handle_link(now, &peer, direction, false);
                }
            }
            HopIn::Frame { peer, msg } => core.handle_frame(now, &peer, msg),
            HopIn::Route { request, reply } => {
                let id = self.next_id;
                self.next_id += 1;
                match core.handle_request(now, id, request) {
                    Routed::Here => {
                        let _ = reply.send(None);
                    }
                    Routed::Away => {
                        self.waiting.insert(id, reply);
                    }
                    Routed::Now(answer) => {
                        let _ = reply.send(Some(answer));
                    }
                }
            }
            HopIn::Applied { serve, response } => {
                if !self.parked.remove(&serve) {
                    self.running = self.running.saturating_sub(1);
                }
                core.handle_applied(now, serve, response);
            }
            HopIn::Claimed { round, effects } => core.handle_claimed(now, round, effects),
            HopIn::Renewed { serve, result } => {
                self.running = self.running.saturating_sub(1);
                core.handle_renewed(now, serve, result);
            }
            HopIn::Completed { serve, result } => {
                self.running = self.running.saturating_sub(1);
                core.handle_completed(now, serve, result);
            }
            HopIn::Finished {
                key,
                token,
                outcome,
            } => {
                self.placed.remove(&(key.clone(), token));
                self.placed_running = self.placed_running.saturating_sub(1);
                core.handle_finished(now, &key, token, outcome);
            }
            HopIn::CancelPlaced { child, key, token } => {
                core.cancel_placed(now, &child, &key, token)
            }
            HopIn::Wake => core.wake_placer(now),
            HopIn::View(reply) => {
                let _ = reply.send(core.view(now));
            }
        }
    }

    /// Does what the core asks, until it asks nothing more.
    fn drain(&mut self, genome: &Arc<Genome>) {
        while let Some(output) = self.core.poll_output() {
            match output {
                HopOutput::Send { to, msg } => self.send(&to, msg),
                HopOutput::Reply { id, reply } => {
                    if let Some(waiting) = self.waiting.remove(&id) {
                        let _ = waiting.send(Some(reply));
                    }
                }
                HopOutput::Apply { serve, ref request } => {
                    // A `wait` parks until its job settles (minutes): it must not hold a
                    // slot the renewals behind it need, so it runs beside the pool (the
                    // core bounds everything in flight through this node).
                    if request.0.get("op").and_then(Value::as_str) == Some("wait") {
                        self.parked.insert(serve);
                        self.spawn_duty(genome, output);
                    } else {
                        self.duties.push_back(output);
                    }
                }
                HopOutput::Claim {
                    round,
                    via,
                    node,
                    ready,
                    max,
                } => {
                    let inbox = self.inbox.clone();
                    let claimed =
                        claim_for(genome, &mut self.kernel_asks, &via, ready, max as usize);
                    tokio::spawn(async move {
                        let effects = claimed.await;
                        if !effects.is_empty() {
                            debug!(via, node, claimed = effects.len(), "claimed for a child");
                        }
                        let _ = inbox.send(HopIn::Claimed { round, effects }).await;
                    });
                }
                HopOutput::Release { key, token } => {
                    self.kernel_asks.push(KernelMsg::Release { key, token });
                }
                HopOutput::Renew { .. } | HopOutput::Complete { .. } => {
                    self.duties.push_back(output);
                }
                HopOutput::Start { effect, home } => self.start(genome, effect, home),
                HopOutput::Stop { key, token, reason } => {
                    if let Some(stop) = self.placed.remove(&(key.clone(), token)) {
                        info!(key, token, reason, "stopping a placed effect");
                        let _ = stop.send(true);
                        // One still queued never started: it ends here, as a stopped run
                        // ends (no outcome).
                        let queued = self
                            .placed_queue
                            .iter()
                            .position(|(e, _, _)| e.key == key && e.token == token);
                        if let Some(at) = queued {
                            self.placed_queue.remove(at);
                            self.core.handle_finished(now_ms(), &key, token, None);
                        }
                    }
                }
                HopOutput::Event(event) => {
                    debug!(kind = event.kind, "{}", event.text);
                }
            }
        }
    }

    /// Starts queued duties while fewer than [`DUTIES_RUNNING_MAX`] run; each comes back
    /// as an input once the kernel answered.
    fn run_duties(&mut self, genome: &Arc<Genome>) {
        while self.running < DUTIES_RUNNING_MAX {
            let Some(duty) = self.duties.pop_front() else {
                return;
            };
            self.running += 1;
            self.spawn_duty(genome, duty);
        }
    }

    /// Sends what this turn asked of the kernel: one message, so the kernel handles all
    /// of it before it seals its next batch.
    fn send_kernel_asks(&mut self, genome: &Genome) {
        let mut asks = std::mem::take(&mut self.kernel_asks);
        let ask = match asks.len() {
            0 => return,
            1 => asks.pop().expect("one"),
            _ => KernelMsg::Batch(asks),
        };
        if let Some(kernel) = genome.kernel() {
            // A kernel that stopped drops the reply ports: each ask's waiter hears "no
            // answer", as from a call.
            let _ = kernel.cast(ask);
        }
    }

    fn spawn_duty(&mut self, genome: &Arc<Genome>, duty: HopOutput) {
        let (genome, inbox) = (Arc::clone(genome), self.inbox.clone());
        match duty {
            HopOutput::Apply { serve, request } => {
                let here = Arc::clone(&self.here);
                tokio::spawn(async move {
                    let response = match serde_json::from_value::<Request>(request.0) {
                        Ok(request) => here(genome, request).await,
                        Err(err) => Response::err(ErrorBody::invalid(
                            "invalid_request",
                            format!("a forwarded request does not parse: {err}"),
                        )),
                    };
                    let response = Json(serde_json::to_value(response).unwrap_or(Value::Null));
                    let _ = inbox.send(HopIn::Applied { serve, response }).await;
                });
            }
            HopOutput::Renew {
                serve,
                key,
                token,
                holder,
            } => {
                let renewed = kernel_renew(&genome, &mut self.kernel_asks, key, token, holder);
                tokio::spawn(async move {
                    let result = renewed.await;
                    let _ = inbox.send(HopIn::Renewed { serve, result }).await;
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
                let completed = kernel_complete(
                    &genome,
                    &mut self.kernel_asks,
                    key,
                    token,
                    outcome,
                    node,
                    holder,
                );
                tokio::spawn(async move {
                    let result = completed.await;
                    let _ = inbox.send(HopIn::Completed { serve, result }).await;
                });
            }
            // Only the three duties above are ever queued.
            other => debug!("not a duty: {other:?}"),
        }
    }

    fn send(&mut self, to: &str, msg: TopoMsg) {
        let Some(link) = self.links.get(to) else {
            return;
        };
        if let Err(err) = link.link.try_send(TreeMsg::Topo(msg)) {
            // Lost, as a frame on a congested or dying link may be: the protocol's
            // deadlines and leases take it from there.
            debug!(to, "frame dropped: {err}");
        }
    }

    /// Runs an effect placed here, with the same runner as the seats.
    fn start(&mut self, genome: &Arc<Genome>, effect: ClaimedEffect, home: String) {
        let (stop, cancel) = watch::channel(false);
        self.placed.insert((effect.key.clone(), effect.token), stop);
        if self.placed_running < placed_seats(genome) {
            self.run_placed(genome, effect, home, cancel);
        } else {
            debug!(
                key = effect.key,
                token = effect.token,
                home,
                "a placed effect waits for a seat"
            );
            self.placed_queue.push_back((effect, home, cancel));
        }
    }

    /// Starts queued placed effects while seats are free.
    fn start_queued(&mut self, genome: &Arc<Genome>) {
        while self.placed_running < placed_seats(genome) {
            let Some((effect, home, cancel)) = self.placed_queue.pop_front() else {
                return;
            };
            self.run_placed(genome, effect, home, cancel);
        }
    }

    fn run_placed(
        &mut self,
        genome: &Arc<Genome>,
        effect: ClaimedEffect,
        home: String,
        cancel: watch::Receiver<bool>,
    ) {
        self.placed_running += 1;
        info!(
            key = effect.key,
            token = effect.token,
            home,
            "running a placed effect"
        );
        let (genome, inbox) = (Arc::clone(genome), self.inbox.clone());
        tokio::spawn(async move {
            // The command's exit goes to this node's kernel on its own (the group is
            // this node's to stop after a crash); the outcome goes home.
            let outcome = runner::execute(&genome, &PlacedHost, &effect, cancel)
                .await
                .map(|finished| finished.outcome);
            let _ = inbox
                .send(HopIn::Finished {
                    key: effect.key,
                    token: effect.token,
                    outcome,
                })
                .await;
        });
    }
}

/// How many placed effects run here at once: the node's seats.
fn placed_seats(genome: &Genome) -> usize {
    genome.settings.seats.max(1)
}

/// What this node offers by itself now.
fn local_facts(genome: &Genome) -> LocalFacts {
    if !genome.accepting_work() {
        // Stopping: nothing to offer, nothing more taken.
        return LocalFacts::default();
    }
    let snapshot = genome.places.snapshot();
    let mut ready: Vec<String> = snapshot
        .readiness
        .needs()
        .iter()
        .filter(|(name, state)| state.ready && !name.contains('/'))
        .map(|(name, _)| name.clone())
        .collect();
    ready.sort();
    LocalFacts {
        ready,
        seats: genome.settings.seats as u32,
        busy: genome.seats.busy() as u32,
    }
}

/// The runner's host for a placed effect: the core renews its lease and reports its
/// outcome, so the runner only runs it (and stops when told).
struct PlacedHost;

impl EffectHost for PlacedHost {
    fn renew<'a>(
        &'a self,
        _key: &'a str,
        _token: u64,
    ) -> Pin<Box<dyn Future<Output = Result<Option<u64>, String>> + Send + 'a>> {
        Box::pin(async { Ok(None) })
    }
}

/// Queues `ask` for the kernel on `asks`, which the hop task sends as one message at
/// the end of its turn; [`kernel_answer`] waits for the reply (`None` here: no kernel
/// to ask).
///
/// Why not `ActorRef::call` on a spawned task: a child's completion and the claim that
/// refills its seat are asked in the same turn, and the kernel must see both before it
/// seals its next batch, so that one commit makes both durable. Sent from two spawned
/// tasks, each lands on its own and forces a commit of its own.
fn ask_kernel<T>(
    genome: &Genome,
    asks: &mut Vec<KernelMsg>,
    ask: impl FnOnce(ractor::RpcReplyPort<T>) -> KernelMsg,
) -> Option<tokio::sync::oneshot::Receiver<T>> {
    genome.kernel()?;
    let (reply, answer) = ractor::concurrency::oneshot();
    asks.push(ask(reply.into()));
    Some(answer)
}

/// The kernel's reply to an [`ask_kernel`], if it comes within [`KERNEL_CALL`].
async fn kernel_answer<T>(asked: Option<tokio::sync::oneshot::Receiver<T>>) -> Option<T> {
    tokio::time::timeout(KERNEL_CALL, asked?).await.ok()?.ok()
}

/// The kernel's verdict on a peer's ask (renew, complete), or why there is none.
async fn kernel_verdict<T>(
    asked: Option<tokio::sync::oneshot::Receiver<Result<T, String>>>,
) -> Result<T, String> {
    match asked {
        None => Err("the home's kernel is restarting".to_owned()),
        asked => kernel_answer(asked)
            .await
            .unwrap_or_else(|| Err("the home's kernel did not answer".to_owned())),
    }
}

fn claim_for(
    genome: &Genome,
    asks: &mut Vec<KernelMsg>,
    via: &str,
    ready: Vec<String>,
    max: usize,
) -> impl Future<Output = Vec<ClaimedEffect>> + Send + 'static + use<> {
    let asked = ask_kernel(genome, asks, move |reply| KernelMsg::ClaimFor {
        holder: palm_topology::child_holder(via),
        ready,
        max,
        reply,
    });
    async move { kernel_answer(asked).await.unwrap_or_default() }
}

fn kernel_renew(
    genome: &Genome,
    asks: &mut Vec<KernelMsg>,
    key: String,
    token: u64,
    holder: String,
) -> impl Future<Output = Result<u64, String>> + Send + 'static + use<> {
    let asked = ask_kernel(genome, asks, move |reply| KernelMsg::Renew {
        key,
        token,
        from: Some(holder),
        reply,
    });
    kernel_verdict(asked)
}

fn kernel_complete(
    genome: &Genome,
    asks: &mut Vec<KernelMsg>,
    key: String,
    token: u64,
    outcome: Outcome,
    node: String,
    holder: String,
) -> impl Future<Output = Result<(), String>> + Send + 'static + use<> {
    let asked = ask_kernel(genome, asks, move |reply| KernelMsg::Complete {
        key,
        token,
        outcome,
        node: Some(node),
        from: Some(holder),
        reply,
    });
    kernel_verdict(asked)
}

fn job_of(request: &Request) -> Option<&str> {
    match request {
        Request::Status { job }
        | Request::Wait { job, .. }
        | Request::Continue { job, .. }
        | Request::Cancel { job, .. }
        | Request::Retry { job, .. }
        | Request::Inspect { job } => Some(job),
        _ => None,
    }
}

/// The answer a client sees for what came back from the way home.
fn answer(reply: Reply) -> Response {
    match reply {
        Reply::Home(response) => {
            let mut response: Response = match serde_json::from_value(response.0) {
                Ok(response) => response,
                Err(err) => {
                    return Response::err(ErrorBody::failure(
                        "protocol",
                        format!("the home's answer does not parse: {err}"),
                    ));
                }
            };
            if response.ok
                && let Some(result) = response.result.as_mut()
                && is_job_view(result)
                && let Some(object) = result.as_object_mut()
            {
                object.insert("projection".into(), json!("valid"));
            }
            response
        }
        Reply::Unreachable {
            at,
            reason,
            since,
            view,
        } => {
            let reason = if at.is_empty() {
                reason
            } else {
                format!("{reason} (at `{at}`)")
            };
            // What the hops remember is the home's last answer (a whole response);
            // its result is the job as it was then.
            let view = view
                .map(|Json(answer)| answer)
                .filter(|answer| answer["ok"] == true)
                .and_then(|mut answer| answer.get_mut("result").map(Value::take))
                .filter(is_job_view);
            match view {
                Some(mut view) => {
                    if let Some(object) = view.as_object_mut() {
                        object.insert("projection".into(), json!("invalid"));
                        object.insert("home_unreachable_since".into(), json!(since));
                        object.insert("unreachable".into(), json!(reason));
                    }
                    Response::ok(view)
                }
                _ => Response::err(
                    ErrorBody::failure("home_unreachable", reason)
                        .hint("the job's home is on another node; `palm tree` shows the links"),
                ),
            }
        }
        Reply::TooFar { hops } => Response::err(ErrorBody::failure(
            "too_far",
            format!("the request travelled {hops} hops without reaching its home"),
        )),
        Reply::Refused { at, reason } => Response::err(
            ErrorBody::invalid("forbidden", format!("`{at}` refused the request: {reason}"))
                .hint("only job requests (submit, status, wait, continue, cancel, inspect, jobs) cross the tree; run the others on the node itself"),
        ),
    }
}

fn is_job_view(result: &Value) -> bool {
    result.get("status").is_some() && result.get("state").is_some()
}
