//! The topology protocol on the node's links (the `palm_topology` core, hosted): truth
//! climbs home, work spreads out.
//!
//! - **Hop home.** [`route`] runs before a control request reaches the kernel: a request
//!   about a job homed elsewhere (and a submit at an edge) is forwarded over a link —
//!   down to the child whose subtree holds the job's tag, else up — and the answer comes
//!   back the same way. Only the home's kernel ever commits a job's events.
//! - **Projections.** A node keeps the last answer it relayed about each job. While the
//!   way home is cut, `status` answers from it, marked `"projection": "invalid"` with
//!   `home_unreachable_since`, instead of pretending.
//! - **Placement.** A home with children claims, for each node of its subtree with free
//!   seats, effects it cannot run itself whose needs that node offers (claims answered
//!   only once durable), and sends them down (`Place`) to the direct child on the way.
//!   A child runs a placed effect with the same runner as its own seats, or — when its
//!   seats are full or the needs are not ready on it — relays it to a child of its own
//!   that offers them. Renewals and the outcome go up hop by hop (routed by the job's
//!   tag) and are answered once durable at home; a halted effect's cancel comes down
//!   the same way. A child that goes silent loses its leases, and the effects are
//!   placed again.
//! - **Summaries.** Every second a child tells its parent what it offers (ready needs,
//!   seats, busy, its own subtree); the parent tells each child who it is.

use crate::control::protocol::{ErrorBody, Request, Response};
use crate::genome::kernel::KernelMsg;
use crate::genome::runner::{self, EffectHost};
use crate::genome::{Genome, now_ms};
use crate::link::{Tree, TreeMsg};
use palm_actors::bt::Outcome;
use palm_actors::json::Json;
use palm_actors::path::ClaimedEffect;
use palm_topology::{Placement, Projections, Role, Route, Summary, TopoMsg, Topology};
use palm_transport::{Direction, Link, Responder};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// Holder name of an effect placed on a child: `child:NAME`.
pub const CHILD_HOLDER_PREFIX: &str = "child:";
/// How often a child reports its summary.
const SUMMARY_EVERY_MS: u64 = 1_000;
/// How often a home looks for work to place on its children.
const PLACE_EVERY_MS: u64 = 200;
/// Bound on a forwarded request other than a wait.
const FORWARD_TIMEOUT_MS: u64 = 120_000;
/// How long a home waits for a child to take (or refuse) a placement.
const PLACE_ANSWER_S: u64 = 10;
/// How long a node relaying a placement waits for its own child: less than its parent
/// waits for it, so the refusal gets there in time.
const RELAY_ANSWER_S: u64 = 5;
/// A relayed placement is forgotten this long after it was relayed (its cancel can no
/// longer be passed down; the lease at home has long decided its fate by then).
const RELAY_FORGET_MS: u64 = 6 * 3_600_000;
/// A child retries reporting an outcome this long after its lease ran out, then lets
/// the home place the effect again.
const REPORT_AFTER_LEASE_MS: u64 = 60_000;

/// A placement this node passed down to a child.
struct Relayed {
    child: String,
    token: u64,
    at: u64,
    /// The home cancelled it: a late copy is refused, not passed down again.
    cancelled: bool,
}

/// The topology state of a node's tree organ.
pub struct Hop {
    genome: Weak<Genome>,
    topology: Mutex<Topology>,
    projections: Mutex<Projections>,
    placed: Mutex<HashMap<String, watch::Sender<bool>>>,
    /// Effects this node passed down to a child: where a cancel from above goes.
    relayed: Mutex<HashMap<String, Relayed>>,
    placed_busy: AtomicU32,
    /// Wakes the placer before its next tick: work became ready, a placed seat freed.
    wake: Arc<tokio::sync::Notify>,
    epoch: u64,
}

impl Hop {
    /// The topology of a node `name` with `role` (its store's `tag`) under `parent`.
    pub fn new(genome: &Arc<Genome>, role: Role, parent: Option<&str>) -> Hop {
        let tag = palm_actors::path::store_tag(&*genome.store).unwrap_or_default();
        Hop {
            genome: Arc::downgrade(genome),
            topology: Mutex::new(Topology::new(&genome.info.name, role, &tag, parent)),
            projections: Mutex::new(Projections::default()),
            placed: Mutex::new(HashMap::new()),
            relayed: Mutex::new(HashMap::new()),
            placed_busy: AtomicU32::new(0),
            wake: Arc::new(tokio::sync::Notify::new()),
            epoch: now_ms(),
        }
    }

    fn topology(&self) -> std::sync::MutexGuard<'_, Topology> {
        self.topology.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remember(&self, job: &str, view: &Value) {
        self.projections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remember(job, view);
    }

    /// The `tree` view of this node (`palm tree`).
    pub fn view(&self) -> Value {
        let Some(genome) = self.genome.upgrade() else {
            return Value::Null;
        };
        let me = self.summary(&genome);
        self.topology().view(now_ms(), &me)
    }

    /// The projection part of vitality.
    pub fn projection_json(&self) -> Value {
        let projection = self.topology().projection();
        json!({
            "of": projection.of,
            "valid": projection.valid,
            "home_unreachable_since": projection.home_unreachable_since,
        })
    }

    fn summary(&self, genome: &Genome) -> Summary {
        let snapshot = genome.places.snapshot();
        let mut ready: Vec<String> = snapshot
            .readiness
            .needs()
            .iter()
            .filter(|(name, state)| state.ready && !name.contains('/'))
            .map(|(name, _)| name.clone())
            .collect();
        ready.sort();
        let seats = genome.settings.seats as u32;
        let busy =
            (genome.seats.busy() as u32 + self.placed_busy.load(Ordering::Relaxed)).min(seats);
        self.topology().summary(now_ms(), ready, seats, busy)
    }
}

fn tree_of(genome: &Genome) -> Option<&Arc<Tree>> {
    genome.tree.get()
}

/// A link came up: record it; a child learns who its parent is, a parent hears the
/// child's summary at once.
pub async fn link_up(tree: &Arc<Tree>, peer: &str, direction: Direction, link: &Link<TreeMsg>) {
    let now = now_ms();
    match direction {
        Direction::Parent => {
            tree.hop.topology().parent_link(now, peer, true);
            if let Some(genome) = tree.hop.genome.upgrade() {
                let summary = tree.hop.summary(&genome);
                let _ = link.send(TreeMsg::Topo(TopoMsg::Summary(summary))).await;
            }
        }
        Direction::Child => {
            tree.hop.topology().child_link(now, peer, true);
            let info = tree.hop.topology().parent_info_for_children(tree.hop.epoch);
            let _ = link.send(TreeMsg::Topo(TopoMsg::Parent(info))).await;
        }
    }
}

/// A link went down.
pub fn link_down(tree: &Arc<Tree>, peer: &str, direction: Direction) {
    let now = now_ms();
    match direction {
        Direction::Parent => tree.hop.topology().parent_link(now, peer, false),
        Direction::Child => tree.hop.topology().child_link(now, peer, false),
    }
}

/// Starts the summary and placement loops of a node's tree organ.
pub fn start(tree: &Arc<Tree>) {
    let weak = Arc::downgrade(tree);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(SUMMARY_EVERY_MS));
        loop {
            tick.tick().await;
            let Some(tree) = weak.upgrade() else { return };
            let Some(genome) = tree.hop.genome.upgrade() else {
                return;
            };
            if let Some(link) = tree.parent_link() {
                let summary = tree.hop.summary(&genome);
                let _ = link.send(TreeMsg::Topo(TopoMsg::Summary(summary))).await;
            }
        }
    });
    let weak = Arc::downgrade(tree);
    let wake = Arc::clone(&tree.hop.wake);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(PLACE_EVERY_MS));
        loop {
            // The tick is the safety net; a wake (one stored permit) is the fast path.
            tokio::select! {
                _ = tick.tick() => {}
                _ = wake.notified() => {}
            }
            let Some(tree) = weak.upgrade() else { return };
            let Some(genome) = tree.hop.genome.upgrade() else {
                return;
            };
            if tree.hop.topology().role().is_home() {
                place_round(&genome, &tree).await;
            }
        }
    });
}

/// One placement round: for each child with free seats, claim what it can run and send
/// it down.
async fn place_round(genome: &Arc<Genome>, tree: &Arc<Tree>) {
    if !genome.accepting_work() {
        return;
    }
    let Some(kernel) = genome.kernel() else {
        return;
    };
    let targets = tree.hop.topology().placement_targets(now_ms());
    for target in targets {
        // Claimed for the direct child: it holds the lease (and loses it if it goes
        // silent), whether it runs the effect or relays it to `target.node` below it.
        let claimed = kernel
            .call(
                |reply| KernelMsg::ClaimFor {
                    holder: format!("{CHILD_HOLDER_PREFIX}{}", target.via),
                    ready: target.ready.clone(),
                    max: target.free as usize,
                    reply,
                },
                Some(Duration::from_secs(30)),
            )
            .await;
        let Ok(ractor::rpc::CallResult::Success(effects)) = claimed else {
            continue;
        };
        for effect in effects {
            tree.hop
                .topology()
                .placed_on_target(&target.via, &target.node);
            let (tree, kernel) = (Arc::clone(tree), kernel.clone());
            let (child, node) = (target.via.clone(), target.node.clone());
            let home = genome.info.name.clone();
            tokio::spawn(async move {
                let (key, token) = (effect.key.clone(), effect.token);
                let accepted = match tree.child_link(&child) {
                    Some(link) => match link
                        .request_within(
                            TreeMsg::Topo(TopoMsg::Place { effect, home }),
                            Duration::from_secs(PLACE_ANSWER_S),
                        )
                        .await
                    {
                        Ok(TreeMsg::Topo(TopoMsg::Placed { accepted, reason })) => {
                            if !accepted {
                                debug!(key, child, node, reason, "child refused a placement");
                            }
                            accepted
                        }
                        _ => false,
                    },
                    None => false,
                };
                if accepted {
                    info!(key, child, node, "effect placed");
                } else {
                    let _ = kernel.cast(KernelMsg::Release { key, token });
                }
            });
        }
    }
}

/// Work may have become placeable (a durable batch woke the seats): wake the placer.
pub fn wake_placer(genome: &Genome) {
    if let Some(tree) = tree_of(genome) {
        tree.hop.wake.notify_one();
    }
}

/// Tells `child` to stop a placed effect (a halt, a lost lease).
pub fn cancel_placed(genome: &Genome, child: &str, key: &str) {
    let Some(link) = tree_of(genome).and_then(|tree| tree.child_link(child)) else {
        return;
    };
    let key = key.to_owned();
    tokio::spawn(async move {
        let _ = link.send(TreeMsg::Topo(TopoMsg::Cancel { key })).await;
    });
}

fn job_of(request: &Request) -> Option<&str> {
    match request {
        Request::Status { job }
        | Request::Wait { job, .. }
        | Request::Continue { job, .. }
        | Request::Cancel { job, .. }
        | Request::Inspect { job } => Some(job),
        _ => None,
    }
}

/// Where a control request goes; `None` means here (the kernel answers it). `hops`
/// counts the links it came over.
pub async fn route(genome: &Arc<Genome>, request: &Request, hops: u32) -> Option<Response> {
    let tree = tree_of(genome)?;
    let decided = {
        let topology = tree.hop.topology();
        match request {
            Request::Submit { .. } => topology.route_submit(),
            Request::Jobs { .. } if !topology.role().is_home() => topology.route_submit(),
            _ => match job_of(request) {
                Some(job) => topology.route_job(job),
                None => Route::Local,
            },
        }
    };
    let link = match &decided {
        Route::Local => return None,
        Route::Parent => tree.parent_link(),
        Route::Child(name) => tree.child_link(name),
        Route::Unreachable(reason) => return Some(unreachable(tree, request, reason)),
    };
    let Some(link) = link else {
        return Some(unreachable(
            tree,
            request,
            "the link towards the job's home is down",
        ));
    };
    if hops >= palm_topology::HOPS_MAX {
        return Some(Response::err(ErrorBody::failure(
            "too_far",
            format!("the request travelled {hops} hops without reaching its home"),
        )));
    }
    let timeout = match request {
        Request::Wait { timeout_ms, .. } => Duration::from_millis(
            timeout_ms
                .unwrap_or(crate::control::WAIT_MS_MAX)
                .saturating_add(10_000),
        ),
        _ => Duration::from_millis(FORWARD_TIMEOUT_MS),
    };
    let body = TreeMsg::Topo(TopoMsg::Forward {
        request: Json(serde_json::to_value(request).unwrap_or(Value::Null)),
        hops: hops + 1,
    });
    match link.request_within(body, timeout).await {
        Ok(TreeMsg::Topo(TopoMsg::Answer { response })) => {
            let mut response: Response = match serde_json::from_value(response.0) {
                Ok(response) => response,
                Err(err) => {
                    return Some(Response::err(ErrorBody::failure(
                        "protocol",
                        format!("the home's answer does not parse: {err}"),
                    )));
                }
            };
            if let (Some(result), true) = (response.result.as_mut(), response.ok) {
                let job = job_of(request)
                    .map(str::to_owned)
                    .or_else(|| result["job"].as_str().map(str::to_owned));
                if result.get("status").is_some() && result.get("state").is_some() {
                    Projections::fresh(result);
                }
                if let Some(job) = job {
                    tree.hop.remember(&job, result);
                }
            }
            Some(response)
        }
        Ok(other) => Some(Response::err(ErrorBody::failure(
            "protocol",
            format!("unexpected answer from the home: {other:?}"),
        ))),
        Err(err) => Some(unreachable(
            tree,
            request,
            &format!("the way home failed: {err}"),
        )),
    }
}

/// The answer when the home cannot be reached: a status from the projection, marked
/// invalid, or a clear error.
fn unreachable(tree: &Tree, request: &Request, reason: &str) -> Response {
    if let Request::Status { job } | Request::Wait { job, .. } = request {
        let topology = tree.hop.topology();
        let projections = tree
            .hop
            .projections
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(view) = projections.serve(job, &topology, reason) {
            return Response::ok(view);
        }
    }
    Response::err(
        ErrorBody::failure("home_unreachable", reason.to_owned())
            .hint("the job's home is on another node; `palm tree` shows the links"),
    )
}

/// A request that came over a link.
pub async fn on_request(
    tree: Arc<Tree>,
    peer: String,
    body: TopoMsg,
    responder: Responder<TreeMsg>,
) {
    let Some(genome) = tree.hop.genome.upgrade() else {
        return;
    };
    // A renewal or outcome of an effect whose job is homed above: pass it on unchanged.
    if let TopoMsg::Renew { key, .. } | TopoMsg::Complete { key, .. } = &body
        && homed_above(&tree, key)
    {
        let answer = relay_report_up(&tree, body).await;
        let _ = responder.respond(TreeMsg::Topo(answer)).await;
        return;
    }
    let answer = match body {
        TopoMsg::Forward { request, hops } => {
            let response = match serde_json::from_value::<Request>(request.0) {
                Ok(request) => crate::control::dispatch_hops(&genome, request, hops).await,
                Err(err) => Response::err(ErrorBody::invalid(
                    "invalid_request",
                    format!("a forwarded request does not parse: {err}"),
                )),
            };
            TopoMsg::Answer {
                response: Json(serde_json::to_value(response).unwrap_or(Value::Null)),
            }
        }
        TopoMsg::Place { effect, home } => accept_placement(&genome, &tree, effect, &home).await,
        TopoMsg::Renew { key, token } => {
            let (until, error) = match kernel_renew(&genome, &key, token).await {
                Ok(until) => (Some(until), None),
                Err(err) => (None, Some(err)),
            };
            TopoMsg::Renewed { until, error }
        }
        TopoMsg::Complete {
            key,
            token,
            outcome,
            node,
        } => {
            let error = kernel_complete(&genome, &key, token, outcome, &node)
                .await
                .err();
            // The seat below is free whatever the kernel said: the effect ended there.
            tree.hop.topology().completed_on(&node);
            tree.hop.wake.notify_one();
            TopoMsg::Completed { error }
        }
        other => {
            debug!(peer, ?other, "unexpected request on a link");
            return;
        }
    };
    let _ = responder.respond(TreeMsg::Topo(answer)).await;
}

/// A one-way message that came over a link.
pub fn on_message(tree: &Arc<Tree>, peer: &str, body: TopoMsg) {
    match body {
        TopoMsg::Summary(summary) => tree.hop.topology().child_summary(now_ms(), summary),
        TopoMsg::Parent(info) => tree.hop.topology().parent_info(now_ms(), info),
        TopoMsg::Cancel { key } => {
            let placed = tree.hop.placed.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(stop) = placed.get(&key) {
                info!(key, "the home cancelled a placed effect");
                let _ = stop.send(true);
                return;
            }
            drop(placed);
            // Kept, marked: a late copy of the placement is then refused rather than
            // passed down beside the cancel.
            let relayed = tree
                .hop
                .relayed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_mut(&key)
                .map(|relayed| {
                    relayed.cancelled = true;
                    relayed.child.clone()
                });
            if let Some(child) = relayed
                && let Some(link) = tree.child_link(&child)
            {
                debug!(key, child, "passing a cancel down");
                tokio::spawn(async move {
                    let _ = link.send(TreeMsg::Topo(TopoMsg::Cancel { key })).await;
                });
            }
        }
        other => debug!(peer, ?other, "unexpected message on a link"),
    }
}

async fn kernel_renew(genome: &Genome, key: &str, token: u64) -> Result<u64, String> {
    let kernel = genome.kernel().ok_or("the home's kernel is restarting")?;
    match kernel
        .call(
            |reply| KernelMsg::Renew {
                key: key.to_owned(),
                token,
                reply,
            },
            Some(Duration::from_secs(10)),
        )
        .await
    {
        Ok(ractor::rpc::CallResult::Success(result)) => result,
        _ => Err("the home's kernel did not answer".to_owned()),
    }
}

async fn kernel_complete(
    genome: &Genome,
    key: &str,
    token: u64,
    outcome: Outcome,
    node: &str,
) -> Result<(), String> {
    let kernel = genome.kernel().ok_or("the home's kernel is restarting")?;
    match kernel
        .call(
            |reply| KernelMsg::Complete {
                key: key.to_owned(),
                token,
                outcome,
                node: Some(node.to_owned()),
                reply,
            },
            Some(Duration::from_secs(60)),
        )
        .await
    {
        Ok(ractor::rpc::CallResult::Success(result)) => result,
        _ => Err("the home's kernel did not answer".to_owned()),
    }
}

/// True when the effect `key` (`job/path/attempt`) belongs to a job homed above this
/// node: its renewals and completion are passed up, not answered here.
fn homed_above(tree: &Tree, key: &str) -> bool {
    let job = key.split('/').next().unwrap_or(key);
    // Unreachable counts as above: the way up may be cut now, and the reporter must
    // hear "unreachable" (and retry), not a refusal from a kernel that never held it.
    !matches!(
        tree.hop.topology().route_job(job),
        Route::Local | Route::Child(_)
    )
}

/// Passes a `Renew` or `Complete` from a child up to the parent and returns the answer
/// for the child. Without one from above, a renewal gets no verdict (the runner goes on
/// until its lease says no) and an outcome gets "unreachable" (the reporter retries).
async fn relay_report_up(tree: &Tree, body: TopoMsg) -> TopoMsg {
    let completion = match &body {
        TopoMsg::Complete { key, node, .. } => Some((key.clone(), node.clone())),
        _ => None,
    };
    let within = Duration::from_secs(if completion.is_some() { 60 } else { 10 });
    let answer = match tree.parent_link() {
        Some(link) => match link.request_within(TreeMsg::Topo(body), within).await {
            Ok(TreeMsg::Topo(answer)) => Some(answer),
            _ => None,
        },
        None => None,
    };
    match (completion, answer) {
        (None, Some(answer @ TopoMsg::Renewed { .. })) => answer,
        (None, _) => TopoMsg::Renewed {
            until: None,
            error: None,
        },
        (Some((key, node)), Some(answer @ TopoMsg::Completed { .. })) => {
            if matches!(answer, TopoMsg::Completed { error: None }) {
                tree.hop
                    .relayed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
            }
            // The seat below is free whatever home said: the effect ended.
            tree.hop.topology().completed_on(&node);
            answer
        }
        (Some(_), _) => TopoMsg::Completed {
            error: Some(format!("{UNREACHABLE}the way home is cut above this node")),
        },
    }
}

/// A parent placed an effect here: run it if a seat is free and its needs are ready
/// here, else pass it down to a child that can (multi-hop placement), else refuse.
async fn accept_placement(
    genome: &Arc<Genome>,
    tree: &Arc<Tree>,
    effect: ClaimedEffect,
    home: &str,
) -> TopoMsg {
    let refuse = |reason: String| TopoMsg::Placed {
        accepted: false,
        reason: Some(reason),
    };
    if !genome.accepting_work() {
        return refuse("the node is stopping".into());
    }
    let seats = genome.settings.seats as u32;
    let busy = genome.seats.busy() as u32 + tree.hop.placed_busy.load(Ordering::Relaxed);
    let needs = effect.request.requirements();
    let ready_here = genome
        .places
        .snapshot()
        .readiness
        .all_ready(&effect.job, &needs);
    if busy >= seats || !ready_here {
        let here = if ready_here {
            format!("all {seats} seats are busy")
        } else {
            format!("needs {needs:?} are not all ready here")
        };
        let placement = tree.hop.topology().place(now_ms(), &needs, false);
        let Placement::Child(child) = placement else {
            return refuse(format!("{here}, and no child offers them"));
        };
        return relay_placement(tree, effect, home, &child, &here).await;
    }
    let (stop, cancel) = watch::channel(false);
    tree.hop
        .placed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(effect.key.clone(), stop);
    tree.hop.placed_busy.fetch_add(1, Ordering::Relaxed);
    info!(key = effect.key, home, "running a placed effect");
    let (genome, tree) = (Arc::clone(genome), Arc::clone(tree));
    tokio::spawn(async move {
        let host = ParentHost {
            tree: Arc::clone(&tree),
            lease_until: AtomicLease::new(effect.lease_until),
            node: genome.info.name.clone(),
        };
        let outcome = runner::execute(&genome, &host, &effect, cancel).await;
        tree.hop
            .placed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&effect.key);
        tree.hop.placed_busy.fetch_sub(1, Ordering::Relaxed);
        let Some(outcome) = outcome else {
            return;
        };
        // Report until the home records it or says no; give up a while after the lease
        // is gone (the home has placed it again by then).
        loop {
            match host
                .complete(&effect.key, effect.token, outcome.clone())
                .await
            {
                Ok(()) => return,
                Err(err) if err.starts_with(UNREACHABLE) => {
                    if now_ms() > host.lease_until.get().saturating_add(REPORT_AFTER_LEASE_MS) {
                        warn!(
                            key = effect.key,
                            "giving up reporting a placed effect; the home will run it again"
                        );
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(refused) => {
                    debug!(key = effect.key, refused, "the home refused the completion");
                    return;
                }
            }
        }
    });
    TopoMsg::Placed {
        accepted: true,
        reason: None,
    }
}

/// Passes a placement down to `child`; remembers it (for a cancel) when taken. The
/// same claim (key and token) placed again is answered taken, not passed on twice — a
/// second copy could land on another child and run beside the first (the simulator's
/// duplicated messages found this).
async fn relay_placement(
    tree: &Arc<Tree>,
    effect: ClaimedEffect,
    home: &str,
    child: &str,
    here: &str,
) -> TopoMsg {
    let refuse = |reason: String| TopoMsg::Placed {
        accepted: false,
        reason: Some(reason),
    };
    let seen = tree
        .hop
        .relayed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&effect.key)
        .filter(|r| r.token == effect.token)
        .map(|r| r.cancelled);
    match seen {
        Some(false) => {
            return TopoMsg::Placed {
                accepted: true,
                reason: None,
            };
        }
        Some(true) => return refuse("the home cancelled this placement".into()),
        None => {}
    }
    let Some(link) = tree.child_link(child) else {
        return refuse(format!("{here}, and the link to `{child}` is down"));
    };
    tree.hop.topology().placed_on(child);
    let (key, token) = (effect.key.clone(), effect.token);
    let body = TreeMsg::Topo(TopoMsg::Place {
        effect,
        home: home.to_owned(),
    });
    match link
        .request_within(body, Duration::from_secs(RELAY_ANSWER_S))
        .await
    {
        Ok(TreeMsg::Topo(TopoMsg::Placed { accepted: true, .. })) => {
            let now = now_ms();
            let mut relayed = tree.hop.relayed.lock().unwrap_or_else(|p| p.into_inner());
            relayed.retain(|_, r| now.saturating_sub(r.at) < RELAY_FORGET_MS);
            relayed.insert(
                key.clone(),
                Relayed {
                    child: child.to_owned(),
                    token,
                    at: now,
                    cancelled: false,
                },
            );
            info!(key, child, home, "relayed a placed effect down");
            TopoMsg::Placed {
                accepted: true,
                reason: None,
            }
        }
        Ok(TreeMsg::Topo(TopoMsg::Placed { reason, .. })) => refuse(format!(
            "{here}; `{child}` refused: {}",
            reason.unwrap_or_default()
        )),
        _ => refuse(format!("{here}; `{child}` did not answer")),
    }
}

const UNREACHABLE: &str = "unreachable: ";

struct AtomicLease(std::sync::atomic::AtomicU64);

impl AtomicLease {
    fn new(until: u64) -> AtomicLease {
        AtomicLease(std::sync::atomic::AtomicU64::new(until))
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn set(&self, until: u64) {
        self.0.store(until, Ordering::Relaxed);
    }
}

/// The home, across the parent link, as a placed effect's host.
struct ParentHost {
    tree: Arc<Tree>,
    lease_until: AtomicLease,
    node: String,
}

impl EffectHost for ParentHost {
    fn renew<'a>(
        &'a self,
        key: &'a str,
        token: u64,
    ) -> Pin<Box<dyn Future<Output = Result<Option<u64>, String>> + Send + 'a>> {
        Box::pin(async move {
            let Some(link) = self.tree.parent_link() else {
                return Ok(None);
            };
            let body = TreeMsg::Topo(TopoMsg::Renew {
                key: key.to_owned(),
                token,
            });
            match link.request_within(body, Duration::from_secs(10)).await {
                Ok(TreeMsg::Topo(TopoMsg::Renewed {
                    until: Some(until), ..
                })) => {
                    self.lease_until.set(until);
                    Ok(Some(until))
                }
                Ok(TreeMsg::Topo(TopoMsg::Renewed {
                    error: Some(error), ..
                })) => Err(error),
                _ => Ok(None),
            }
        })
    }

    fn complete<'a>(
        &'a self,
        key: &'a str,
        token: u64,
        outcome: Outcome,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move {
            let Some(link) = self.tree.parent_link() else {
                return Err(format!("{UNREACHABLE}the parent link is down"));
            };
            let body = TreeMsg::Topo(TopoMsg::Complete {
                key: key.to_owned(),
                token,
                outcome,
                node: self.node.clone(),
            });
            match link.request_within(body, Duration::from_secs(60)).await {
                Ok(TreeMsg::Topo(TopoMsg::Completed { error: None })) => Ok(()),
                Ok(TreeMsg::Topo(TopoMsg::Completed { error: Some(error) })) => Err(error),
                Ok(other) => Err(format!("unexpected answer {other:?}")),
                Err(err) => Err(format!("{UNREACHABLE}{err}")),
            }
        })
    }
}
