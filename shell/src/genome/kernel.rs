//! The kernel: the actor that hosts the job path core (through its [`Desk`]) and commits.
//!
//! Every request that changes a job goes through this one actor, so the core needs no
//! locks. Replies are *deferred*: the kernel answers only after the writes a request
//! caused are committed and flushed.
//!
//! Commits are pipelined (group commit). After a change the kernel casts itself a
//! `Flush`, which queues behind every message already waiting. The flush *seals* the
//! pending writes into one batch — evaluating, at that instant, every read and every
//! settled job's view, so each answer shows exactly what that batch makes durable — and
//! hands the batch to a blocking committer. While it commits (fdatasync), the kernel goes
//! on handling messages into the next batch; one commit is in flight at a time. When it
//! is durable the committer sends the sealed replies, wakes the seats and tells the kernel
//! (`Committed`), which seals the next batch if anything is pending.
//!
//! One read is answered at once: a `wait` for a settled job with no effect in flight that
//! no batch still pending or committing has written (`KernelState::durable_now`). Memory
//! then shows exactly what is durable, and a client that submits and then waits is not
//! held a second commit.
//!
//! A failed commit is fatal to this kernel instance (its memory is ahead of the store):
//! the handler returns an error, the sealed replies are dropped (their callers see the
//! kernel gone), and the supervisor starts a fresh kernel from the store.

use super::desk::{Answer, Desk, Live, settled};
use super::places::PlacesMsg;
use super::{Genome, now_ms};
use palm_actors::bt::{EffectRequest, Outcome};
use palm_actors::host::HomeHost;
use palm_actors::path::records::RunningGroup;
use palm_actors::path::{ClaimedEffect, JobPath, JobPathConfig, Notice};
use palm_actors::store::{Store, WriteBatch};
use palm_api::protocol::{Request, Response};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tracing::{debug, error, info, warn};

/// Messages the kernel handles.
pub enum KernelMsg {
    /// A control request (CLI, MCP, scripts).
    Call(Request, RpcReplyPort<Response>),
    /// A request from an effect running in this process (a provider): a `kv` write is
    /// made unforced (`JobPath::unforced`) and answered at once — only the provider hears
    /// the answer, and it reaches anyone else only through the effect's completion,
    /// which is durable in the same batch or a later one. Any other request is handled
    /// as a [`KernelMsg::Call`].
    Effect(Request, RpcReplyPort<Response>),
    /// A seat asks for work.
    Claim {
        /// `node/seat-N`.
        holder: String,
        /// The claimed effect, or nothing ready.
        reply: RpcReplyPort<Option<ClaimedEffect>>,
    },
    /// A seat reports an effect's outcome.
    Complete {
        /// Effect key.
        key: String,
        /// Fencing token of the claim.
        token: u64,
        /// What happened.
        outcome: Outcome,
        /// The node that ran it, when not this one (a child it was placed on).
        node: Option<String>,
        /// For a report from another node: the holder it came from, which must be the
        /// claim's (`child:NAME`); `None` from this node's own seats.
        from: Option<String>,
        /// Answered once durable.
        reply: RpcReplyPort<Result<(), String>>,
    },
    /// The tree organ claims effects for a child: effects this node cannot run (a need
    /// not ready here) whose needs the child offers. Answered once the claims are durable
    /// (a remote holder cannot be told that a crash took its claim back).
    ClaimFor {
        /// `child:NAME`.
        holder: String,
        /// Needs ready on the child.
        ready: Vec<String>,
        /// At most this many.
        max: usize,
        /// The claims.
        reply: RpcReplyPort<Vec<ClaimedEffect>>,
    },
    /// A claim is given back (a child refused the placement).
    Release {
        /// Effect key.
        key: String,
        /// Fencing token.
        token: u64,
    },
    /// A seat extends its lease (answered once the new lease is durable).
    Renew {
        /// Effect key.
        key: String,
        /// Fencing token.
        token: u64,
        /// For a renewal from another node: the holder it came from (see `Complete`).
        from: Option<String>,
        /// The new expiry, or why not.
        reply: RpcReplyPort<Result<u64, String>>,
    },
    /// A runner holds a command at its gate in process group `group`: answered once the
    /// group is recorded durably (`Ok`: start it), or refused (the claim is no longer
    /// current: do not start it).
    Started {
        /// Effect key.
        key: String,
        /// The group, with the claim's token.
        group: RunningGroup,
        /// Whether the command may start.
        reply: RpcReplyPort<Result<(), String>>,
    },
    /// The command of `key` (claim `token`) exited; its group record goes.
    Exited {
        /// Effect key.
        key: String,
        /// Fencing token of the claim it ran under.
        token: u64,
    },
    /// One step of job retention (see `palm_actors::path::retention`), from `cursor`; the
    /// next step follows at once until the walk is done, then again after
    /// [`COLLECT_EVERY_MS`].
    Collect {
        /// Where this step starts.
        cursor: Option<String>,
    },
    /// Timers, leases, yielded jobs or interests are due.
    Tick,
    /// A place changed state (interests may listen to it).
    PlaceChanged {
        /// The place.
        place: String,
        /// `ready`, `unready`, `failed`, ...
        state: String,
        /// Why.
        reason: String,
    },
    /// Several messages, handled in order before the kernel seals anything: what the
    /// hop task asks in one turn (a child's completion and the claim refilling its
    /// seat) lands in one batch and so in one commit. Never holds `Flush`,
    /// `Committed` or another `Batch`.
    Batch(Vec<KernelMsg>),
    /// Seal what is pending and commit it (or wait for the commit in flight).
    Flush,
    /// The commit in flight finished (its replies went out with it if it succeeded).
    Committed(Result<(), String>),
}

type Deferred = Box<dyn FnOnce() + Send>;

/// The first retention walk starts this long after boot (not during recovery).
pub const COLLECT_FIRST_MS: u64 = 60_000;
/// Then a walk every hour.
pub const COLLECT_EVERY_MS: u64 = 3_600_000;

/// The kernel actor (behaviour only; see [`KernelState`]).
pub struct Kernel;

/// The kernel's state, built in `pre_start` from the store.
pub struct KernelState {
    genome: Arc<Genome>,
    desk: Desk,
    /// The home's duties (replies after durable, group commit, remote claims): the same
    /// code the simulator's nodes run.
    host: HomeHost<Deferred>,
    reads: Vec<(Request, RpcReplyPort<Response>)>,
    flush_scheduled: bool,
    watchers: HashMap<String, Vec<RpcReplyPort<Response>>>,
    /// The commit in flight, if any (awaited on stop so nothing sealed is lost).
    committing: Option<tokio::task::JoinHandle<()>>,
    /// The job path's generation of the batch in flight (see `after_request`).
    committing_generation: Option<u64>,
    /// Replies that wait only for the commit in flight (see `KernelState::after_request`).
    after_commit: Vec<Deferred>,
    /// One past the job path's generation of the last batch the store has made durable
    /// (batches are durable in order): set by the committing thread as its commit
    /// returns, before the batch's replies go out and before the kernel hears
    /// `Committed`. A client answered by that commit asks again before then (a submit's
    /// answer, then a wait for the job); see `KernelState::durable_now`.
    durable_below: Arc<AtomicU64>,
    /// `kv` steps the kernel ran itself since the last seal (`KernelState::run_inline`):
    /// the seal wakes no seat for them.
    ran_inline: usize,
    /// The holder of the `kv` steps the kernel runs itself: `NODE/kernel`.
    inline_holder: String,
}

/// A sealed batch and everything that may happen only once it is durable.
struct Sealed {
    batch: WriteBatch,
    /// The job path's generation of `batch`.
    generation: u64,
    /// Replies the host lets out at once (none, unless a planted bug says so).
    early: Vec<Deferred>,
    /// Replies that go out once `batch` is durable (carried from the [`HomeHost`]).
    replies: Vec<Deferred>,
    /// Effects made ready by the batch: as many idle seats are woken (not all of them:
    /// a wake-up of every seat per effect costs a claim round trip each, for nothing).
    ready: usize,
    cancels: Vec<(String, String, u64)>,
    places: Vec<PlacesMsg>,
}

/// Opens the job path of a node's store.
pub fn open_path(genome: &Genome) -> Result<JobPath, ActorProcessingErr> {
    let config = JobPathConfig {
        node: genome.info.name.clone(),
        lease_ms: genome.settings.lease_ms,
    };
    let seed = crate::sys::random_u64();
    let (path, report) = JobPath::open(&*genome.store, config, seed)?;
    info!(
        definitions = report.definitions,
        jobs = report.jobs_resumed,
        dormant = report.jobs_dormant,
        requeued = report.effects_requeued,
        timers = report.timers_armed,
        "job path open"
    );
    for (job, error) in &report.broken {
        warn!(job, error, "job cannot be replayed; left untouched");
    }
    Ok(path)
}

impl Actor for Kernel {
    type Msg = KernelMsg;
    type State = KernelState;
    type Arguments = Arc<Genome>;

    async fn pre_start(
        &self,
        myself: ActorRef<KernelMsg>,
        genome: Arc<Genome>,
    ) -> Result<KernelState, ActorProcessingErr> {
        let mut path = open_path(&genome)?;
        // Before any claim is answered: what the previous life left running must stop,
        // or its effects would run a second time beside their orphans.
        super::orphans::stop_orphans(
            &mut path,
            &super::live_groups::LiveGroups::new(&genome.info.data),
        )
        .await;
        let mut state = KernelState {
            desk: Desk {
                path,
                store: Arc::clone(&genome.store),
                info: genome.info.clone(),
                places: Some(Arc::clone(&genome)),
            },
            genome: Arc::clone(&genome),
            host: HomeHost::new(),
            reads: Vec::new(),
            flush_scheduled: false,
            watchers: HashMap::new(),
            committing: None,
            committing_generation: None,
            after_commit: Vec::new(),
            durable_below: Arc::new(AtomicU64::new(0)),
            ran_inline: 0,
            inline_holder: format!("{}/kernel", genome.info.name),
        };
        state.commit_now()?;
        // The place book holds the places of active jobs (and lets go of the places of
        // jobs that ended while it was not told).
        genome
            .places
            .tell(PlacesMsg::ActiveJobs(state.desk.path.active_job_places()));
        genome.set_kernel(Some(myself.clone()));
        reconcile_worktrees(&state.desk.path, &genome);
        if !genome.info.embedded {
            myself.send_after(Duration::from_millis(COLLECT_FIRST_MS), || {
                KernelMsg::Collect { cursor: None }
            });
        }
        // Recovered work: wake the seats and the timer wheel.
        genome.seats.notify.notify_waiters();
        let _ = myself.cast(KernelMsg::Tick);
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<KernelMsg>,
        state: &mut KernelState,
    ) -> Result<(), ActorProcessingErr> {
        state.genome.set_kernel(None);
        if let Some(in_flight) = state.committing.take() {
            let _ = in_flight.await;
        }
        state.commit_now()?;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<KernelMsg>,
        message: KernelMsg,
        state: &mut KernelState,
    ) -> Result<(), ActorProcessingErr> {
        handle_one(&myself, message, state)?;
        // The `kv` steps the message made ready run now, while the commit in flight (if
        // any) goes on, not at the seal, where the store would wait for them.
        state.run_inline(now_ms());
        if state.committing.is_none() && !state.flush_scheduled && state.has_pending() {
            state.flush_scheduled = true;
            myself.cast(KernelMsg::Flush)?;
        }
        Ok(())
    }
}

/// One message's work; the caller schedules the flush of what it left pending.
fn handle_one(
    myself: &ActorRef<KernelMsg>,
    message: KernelMsg,
    state: &mut KernelState,
) -> Result<(), ActorProcessingErr> {
    let now = now_ms();
    match message {
        KernelMsg::Batch(messages) => {
            // Each in order; the flush is scheduled once, after all of them.
            for message in messages {
                handle_one(myself, message, state)?;
            }
        }
        KernelMsg::Call(request, reply) => state.call(request, reply),
        KernelMsg::Effect(Request::Kv { action, key, value }, reply)
            if action == "put" || action == "delete" =>
        {
            let response = state
                .desk
                .path
                .unforced(|path| super::desk::kv_write(path, &action, key, &value));
            let _ = reply.send(response);
        }
        KernelMsg::Effect(request, reply) => {
            state.call(request, reply);
        }
        KernelMsg::Claim { holder, reply } => {
            let claimed = if state.genome.accepting_work() {
                // Readiness gates: an effect is claimable only while every place or
                // capability it needs is ready.
                let places = state.genome.places.snapshot();
                state
                    .host
                    .claim_local(&mut state.desk.path, now, &holder, &|job, request| {
                        places.readiness.all_ready(job, &request.requirements())
                    })
            } else {
                None
            };
            // A claim is internal: if this node dies before the claim is committed,
            // the effect is simply still ready on restart. Seats are woken as the
            // batch that made an effect ready is sealed, so its request may not be
            // durable yet: a command is answered at once and waits at its gate
            // (`Started`), anything else is answered once the request is durable —
            // nothing may act for a request a crash could take back.
            match claimed {
                Some(effect) if !matches!(effect.request, EffectRequest::Run { .. }) => {
                    let key = effect.key.clone();
                    state.after_request(
                        &key,
                        Box::new(move || {
                            let _ = reply.send(Some(effect));
                        }),
                    );
                }
                claimed => {
                    let _ = reply.send(claimed);
                }
            }
        }
        KernelMsg::Complete {
            key,
            token,
            outcome,
            node,
            from,
            reply,
        } => {
            let node = Some(node.unwrap_or_else(|| state.genome.info.name.clone()));
            state.host.complete(
                &mut state.desk.path,
                now,
                &key,
                token,
                outcome,
                node,
                from.as_deref(),
                |result| {
                    let result = result.map(|_| ()).map_err(|err| err.to_string());
                    Box::new(move || {
                        let _ = reply.send(result);
                    })
                },
            );
        }
        KernelMsg::Renew {
            key,
            token,
            from,
            reply,
        } => {
            // Answered after the commit: a holder on another node must never believe
            // in a lease that a crash of this node could take back.
            let from = from.as_deref();
            state
                .host
                .renew(&mut state.desk.path, now, &key, token, from, |result| {
                    let result = result.map_err(|e| e.to_string());
                    Box::new(move || {
                        let _ = reply.send(result);
                    })
                });
        }
        KernelMsg::Started { key, group, reply } => {
            let result = state
                .host
                .started(&mut state.desk.path, &key, group)
                .map_err(|err| err.to_string());
            state.after_request(
                &key,
                Box::new(move || {
                    let _ = reply.send(result);
                }),
            );
        }
        KernelMsg::Exited { key, token } => {
            state.host.exited(&mut state.desk.path, &key, token);
        }
        KernelMsg::ClaimFor {
            holder,
            ready,
            max,
            reply,
        } => {
            let max = if state.genome.accepting_work() {
                max
            } else {
                0
            };
            let places = state.genome.places.snapshot();
            state.host.claim_remote(
                &mut state.desk.path,
                now,
                &holder,
                max,
                &|job, request| {
                    let needs = request.requirements();
                    !places.readiness.all_ready(job, &needs)
                        && needs.iter().all(|need| ready.contains(need))
                },
                |claimed| {
                    Box::new(move || {
                        let _ = reply.send(claimed);
                    })
                },
            );
        }
        KernelMsg::Release { key, token } => {
            if let Err(err) = state.host.release(&mut state.desk.path, &key, token) {
                debug!(key, error = %err, "release refused");
            }
        }
        KernelMsg::Collect { cursor } => {
            let store = Arc::clone(&state.desk.store);
            let retention = state.genome.settings.retention;
            let step = state.desk.path.collect(
                &*store,
                now,
                retention,
                cursor.as_deref(),
                palm_actors::path::retention::GC_BUDGET_DEFAULT,
            );
            match &step {
                Ok(step) if step.compacted + step.forgotten + step.starts_removed > 0 => {
                    debug!(
                        scanned = step.scanned,
                        compacted = step.compacted,
                        forgotten = step.forgotten,
                        starts_removed = step.starts_removed,
                        "retention step"
                    );
                }
                Ok(_) => {}
                Err(err) => warn!(error = %err, "retention step failed; retrying later"),
            }
            if let Ok(step) = &step
                && !step.released.is_empty()
            {
                // The jobs' artifacts go once the step that dropped their journals is
                // durable (a crash before leaves both, and the next walk releases them
                // again), off the kernel's thread.
                let data = state.genome.info.data.clone();
                let jobs = step.released.clone();
                let background = Arc::clone(&state.genome.background);
                state.defer(move || {
                    background.spawn_blocking(move || {
                        let removed = palm_agents::artifacts::remove(&data, &jobs);
                        if removed.jobs > 0 {
                            info!(
                                jobs = removed.jobs,
                                bytes = removed.bytes,
                                "retention removed artifacts"
                            );
                        }
                        for (path, err) in removed.failed {
                            warn!(path = %path.display(), error = %err, "cannot remove artifacts");
                        }
                    });
                });
            }
            match step.ok().and_then(|s| s.cursor) {
                Some(cursor) => myself.cast(KernelMsg::Collect {
                    cursor: Some(cursor),
                })?,
                None => {
                    myself.send_after(Duration::from_millis(COLLECT_EVERY_MS), || {
                        KernelMsg::Collect { cursor: None }
                    });
                }
            }
        }
        KernelMsg::Tick => {
            let store = Arc::clone(&state.desk.store);
            let ticked = state.host.tick(&mut state.desk.path, now, &*store);
            if ticked.any() {
                debug!(?ticked, "tick");
            }
        }
        KernelMsg::PlaceChanged {
            place,
            state: place_state,
            reason,
        } => {
            state
                .desk
                .path
                .place_changed(now, &place, &place_state, &reason);
        }
        KernelMsg::Flush => {
            state.flush_scheduled = false;
            if state.committing.is_none() {
                let sealed = state.seal();
                state.dispatch(myself, sealed);
            }
            // Jobs that used up their tick budget continue after the messages already
            // queued, so one looping job cannot starve the others.
            if state.desk.path.has_resumes() {
                myself.cast(KernelMsg::Tick)?;
            }
        }
        KernelMsg::Committed(result) => {
            state.committing = None;
            state.committing_generation = None;
            let waited = std::mem::take(&mut state.after_commit);
            if result.is_ok() {
                for reply in waited {
                    reply();
                }
            }
            if let Err(err) = result {
                let dropped = state.host.lost();
                error!(error = %err, dropped, "commit failed; the kernel restarts from the store");
                return Err(err.into());
            }
        }
    }
    Ok(())
}

impl KernelState {
    /// A control request: answered after the commit of what it wrote, after the next
    /// seal for a read (at once for a wait on a settled job whose writes are all
    /// durable), or when its job settles for a watch.
    fn call(&mut self, request: Request, reply: RpcReplyPort<Response>) {
        match self.desk.answer(request, self.genome.accepting_work()) {
            Answer::AfterCommit(response) => self.defer(move || {
                let _ = reply.send(response);
            }),
            Answer::Read(request) => match &request {
                // A settled job with nothing in flight that no batch pending or
                // committing has written: memory shows exactly what is durable, so the
                // answer waits for no commit.
                Request::Wait { job, .. } if self.durable_now(job) => {
                    let response = self.desk.read(request, None);
                    let _ = reply.send(response);
                }
                _ => self.reads.push((request, reply)),
            },
            Answer::Watch(job) => {
                // A waiter that gave up (timed out) leaves a closed port behind: drop
                // those, so polling a job that never settles cannot grow this list
                // without bound.
                let waiting = self.watchers.entry(job).or_default();
                waiting.retain(|port| !port.is_closed());
                waiting.push(reply);
            }
        }
    }

    fn defer(&mut self, reply: impl FnOnce() + Send + 'static) {
        self.host.after_durable(Box::new(reply));
    }

    /// Sends `reply` once the request of effect `key` is durable: after the next commit
    /// when the pending batch holds it, after the commit in flight when that one does,
    /// else at once (batches are durable in order, one at a time, so every earlier one
    /// is). Not after every write made so far: with many jobs in flight some write is
    /// always pending, and a seat waited a whole commit more for writes its effect does
    /// not depend on. The batch that requested the effect holds everything its request
    /// was made from (the job's earlier steps are in it or before it).
    fn after_request(&mut self, key: &str, reply: Deferred) {
        match self.desk.path.request_generation(key) {
            Some(generation) if generation >= self.desk.path.generation() => {
                self.host.after_durable(reply);
            }
            Some(generation) if self.committing_generation == Some(generation) => {
                self.after_commit.push(reply);
            }
            // Requested in a batch already durable, or found in the store at boot; or not
            // this path's effect at all (placed here by a home elsewhere, whose claim
            // for this node was durable before this node heard of it).
            _ => reply(),
        }
    }

    /// True when what memory shows of job `job` is durable: it has no effect in flight
    /// (whose claim, written unforced, may not be), and every write of it is — none in
    /// the pending batch, and the batch before it, if it wrote the job, committed.
    fn durable_now(&self, job: &str) -> bool {
        let quiet = self.desk.path.job_core(job).is_none_or(|core| {
            core.status().is_terminal() || core.engine().outstanding().is_empty()
        });
        if !quiet {
            return false;
        }
        match self.desk.path.written_in(job) {
            Some(generation) if generation >= self.desk.path.generation() => false,
            Some(generation) => generation < self.durable_below.load(Ordering::Acquire),
            None => true,
        }
    }

    fn has_pending(&self) -> bool {
        self.host.has_pending(&self.desk.path) || !self.reads.is_empty()
    }

    /// Takes the pending writes as one batch, and evaluates now — while memory holds
    /// exactly what the batch makes durable — every reply that must follow it.
    fn seal(&mut self) -> Sealed {
        // `kv` steps first: their writes and completions join this batch.
        self.run_inline(now_ms());
        // Reads next: nothing is written between them and the seal, so each answer
        // shows exactly what this batch makes durable.
        let reads = std::mem::take(&mut self.reads);
        if !reads.is_empty() {
            let seats = self.genome.seats.to_json();
            let commits = self.genome.stats.commits.load(Ordering::Relaxed);
            let tree = self.genome.tree.get();
            let links = tree.map_or_else(|| serde_json::json!([]), |t| t.links_json());
            let tree = tree.map_or(serde_json::Value::Null, |t| t.tree_json());
            for (request, reply) in reads {
                let live = Live {
                    seats: seats.clone(),
                    commits,
                    links: links.clone(),
                    tree: tree.clone(),
                };
                let response = self.desk.read(request, Some(live));
                self.host.after_durable(Box::new(move || {
                    let _ = reply.send(response);
                }));
            }
        }
        let generation = self.desk.path.generation();
        let seal = self.host.seal(&mut self.desk.path);
        let mut ready: usize = 0;
        let mut cancels = Vec::new();
        let mut places = Vec::new();
        let mut ended = Vec::new();
        for notice in seal.notices {
            match notice {
                Notice::EffectReady => ready += 1,
                Notice::PlacesWanted {
                    job,
                    places: wanted,
                } => places.push(PlacesMsg::JobStarted {
                    job,
                    places: wanted,
                }),
                Notice::CancelEffect { key, holder, token } => {
                    debug!(key, holder, token, "cancel effect");
                    cancels.push((key, holder, token));
                }
                Notice::StartRefused { flow, reason } => {
                    warn!(flow, reason, "interest did not start its flow");
                }
                Notice::JobChanged { job, status } => {
                    if status.is_terminal() {
                        ended.push(job.clone());
                    }
                    if status == palm_actors::job::JobStatus::Succeeded
                        && self.applies_patches(&job)
                    {
                        // Once the success is durable: the merge queue runs git, off
                        // the kernel's thread, counted so the node's shutdown waits
                        // for it.
                        let data = self.genome.info.data.clone();
                        let job = job.clone();
                        let background = Arc::clone(&self.genome.background);
                        self.host.attach(
                            seal.seq,
                            Box::new(move || {
                                background.spawn_blocking(move || apply_patches(&data, &job));
                            }),
                        );
                    }
                    if settled(status)
                        && let Some(watchers) = self.watchers.remove(&job)
                    {
                        let view = self.desk.view(&job);
                        self.host.attach(
                            seal.seq,
                            Box::new(move || {
                                for watcher in watchers {
                                    let _ = watcher.send(view.clone());
                                }
                            }),
                        );
                    }
                }
            }
        }
        // One message for the batch's ended jobs, after their starts: the place book
        // takes a whole step (readiness published, timers armed) per message, and a
        // message per job cost it that step for every job at 64 in flight.
        if !ended.is_empty() {
            places.push(PlacesMsg::JobsEnded { jobs: ended });
        }
        // The seats need not wake for the effects the kernel ran itself.
        let ready = ready.saturating_sub(std::mem::take(&mut self.ran_inline));
        // Only a changed deadline wakes the ticker.
        let next = self.desk.path.next_deadline();
        self.genome.deadline.send_if_modified(|old| {
            let changed = *old != next;
            *old = next;
            changed
        });
        // One commit is in flight at a time, in order: the batch carries its replies.
        let replies = self.host.carry(seal.seq);
        Sealed {
            batch: seal.batch,
            generation,
            early: seal.early,
            replies,
            ready,
            cancels,
            places,
        }
    }

    /// Runs the ready `kv` writes itself (a `call` to `kv` with `op: put` or `delete`, a
    /// string key and no needs), after every message and at the seal: each is claimed,
    /// written and completed in the pending batch, so the step, its write and its
    /// completion are durable together — a `kv` step costs no seat, no round trip and
    /// no commit of its own, and its write happens exactly once. Anything else (a `get`,
    /// a `list`, a malformed call) goes to the seats and the provider, which answers it
    /// or says what is wrong. Counts them in `ran_inline`.
    fn run_inline(&mut self, now: u64) {
        /// Bound per call: a flow that loops over `kv` steps yields to everything else.
        const INLINE_PER_CALL_MAX: usize = 4096;
        if !self.genome.accepting_work() {
            return;
        }
        let mut ran = 0;
        while ran < INLINE_PER_CALL_MAX {
            // Only effects made ready since the last call are looked at: neither a long
            // queue of others waiting for seats nor the commands made ready beside them
            // are walked after every message. The claim is written with the completion
            // just below, in this same batch.
            let Some(effect) =
                self.desk
                    .path
                    .claim_fresh(now, &self.inline_holder, &|_, request| {
                        inline_kv(request).is_some()
                    })
            else {
                break;
            };
            let Some((action, key, value)) = inline_kv(&effect.request) else {
                break;
            };
            let (action, key, value) = (action.to_owned(), key.to_owned(), value.clone());
            let response = super::desk::kv_write(&mut self.desk.path, &action, key, &value);
            let outcome = if response.ok {
                Outcome::Call {
                    ok: true,
                    value: palm_actors::json::Json(response.result.unwrap_or_default()),
                    error: None,
                }
            } else {
                Outcome::Call {
                    ok: false,
                    value: palm_actors::json::Json(serde_json::Value::Null),
                    error: Some(format!(
                        "kv: {}",
                        response.error.map(|e| e.message).unwrap_or_default()
                    )),
                }
            };
            let node = Some(self.genome.info.name.clone());
            if let Err(err) = self
                .desk
                .path
                .complete(now, &effect.key, effect.token, outcome, node)
            {
                warn!(key = effect.key, %err, "kv step not completed in the kernel");
            }
            ran += 1;
        }
        self.ran_inline += ran;
    }

    /// True when `job`'s flow says `patches: apply_on_success`.
    fn applies_patches(&self, job: &str) -> bool {
        let path = &self.desk.path;
        path.job_core(job)
            .and_then(|core| path.definition(core.flow(), Some(core.revision())))
            .is_some_and(|stored| {
                stored.definition.patches == palm_actors::definition::PatchPolicy::ApplyOnSuccess
            })
    }

    /// Commits a sealed batch on a blocking thread; the kernel hears `Committed` after
    /// and lets its replies out.
    fn dispatch(&mut self, myself: &ActorRef<KernelMsg>, sealed: Sealed) {
        wake_seats(&self.genome, sealed.ready);
        if sealed.batch.is_empty() {
            // Nothing to make durable: everything before it already is (one commit is
            // in flight at a time, and none is now).
            complete(&self.genome, sealed);
            return;
        }
        let genome = Arc::clone(&self.genome);
        let myself = myself.clone();
        let durable_below = Arc::clone(&self.durable_below);
        self.committing_generation = Some(sealed.generation);
        self.committing = Some(tokio::task::spawn_blocking(move || {
            // A panicking store must not leave the kernel waiting for `Committed` forever.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                durable(&genome, &sealed.batch)
            }))
            .unwrap_or_else(|_| Err("the store panicked while committing".to_owned()));
            if result.is_ok() {
                durable_below.store(sealed.generation + 1, Ordering::Release);
                complete(&genome, sealed);
            }
            let _ = myself.cast(KernelMsg::Committed(result));
        }));
    }

    /// Seals and commits on this thread (boot and stop, when nothing else runs).
    fn commit_now(&mut self) -> Result<(), ActorProcessingErr> {
        let sealed = self.seal();
        wake_seats(&self.genome, sealed.ready);
        if !sealed.batch.is_empty() {
            let genome = Arc::clone(&self.genome);
            tokio::task::block_in_place(|| durable(&genome, &sealed.batch))?;
            self.durable_below
                .store(sealed.generation + 1, Ordering::Release);
        }
        complete(&self.genome, sealed);
        Ok(())
    }
}

/// A `kv` write the kernel runs itself (see `KernelState::run_inline`): its op, key and
/// value.
fn inline_kv(request: &palm_actors::bt::EffectRequest) -> Option<(&str, &str, &serde_json::Value)> {
    let palm_actors::bt::EffectRequest::Call {
        provider,
        args,
        needs,
        ..
    } = request
    else {
        return None;
    };
    if provider != "kv" || !needs.is_empty() {
        return None;
    }
    let op = args.0.get("op")?.as_str()?;
    let key = args.0.get("key")?.as_str()?;
    if !(op == "put" || op == "delete") || key.is_empty() {
        return None;
    }
    Some((
        op,
        key,
        args.0.get("value").unwrap_or(&serde_json::Value::Null),
    ))
}

/// Commits and flushes one batch, and counts it.
fn durable(genome: &Genome, batch: &WriteBatch) -> Result<(), String> {
    let store: &dyn Store = &*genome.store;
    let started = std::time::Instant::now();
    store
        .commit(batch)
        .and_then(|()| store.flush())
        .map_err(|err| err.to_string())?;
    let stats = &genome.stats;
    stats
        .commit_nanos
        .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    stats.commits.fetch_add(1, Ordering::Relaxed);
    stats
        .writes
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    stats
        .bytes
        .fetch_add(batch.bytes() as u64, Ordering::Relaxed);
    if let Some(batches) = stats
        .batches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_mut()
    {
        batches.push(batch.clone());
    }
    Ok(())
}

/// Wakes one waiting seat per effect the sealed batch made ready, while the batch commits
/// rather than after: a seat's claim and the spawn of its command overlap the commit. A
/// command still waits at its gate, and anything else for its claim's answer, until the
/// request is durable (`KernelState::after_request`). `notify_one` keeps one permit when
/// no seat waits; a busy seat asks again when it finishes anyway.
fn wake_seats(genome: &Genome, ready: usize) {
    for _ in 0..ready.min(genome.seats.total()) {
        genome.seats.notify.notify_one();
    }
}

/// What follows a durable batch: cancel halted effects, wake the seats, tell the place
/// book, answer.
fn complete(genome: &Genome, sealed: Sealed) {
    let tree = genome.tree.get();
    for (key, holder, token) in &sealed.cancels {
        match holder.strip_prefix(palm_topology::CHILD_HOLDER_PREFIX) {
            // Placed on a child: tell it (over the link) to stop.
            Some(child) => {
                if let Some(tree) = tree {
                    tree.cancel_placed(child, key, *token);
                }
            }
            None => genome.seats.cancel(key),
        }
    }
    if sealed.ready > 0
        && let Some(tree) = tree
    {
        // Placement claims for a child are forced anyway; they wait for the request.
        tree.wake();
    }
    for message in sealed.places {
        genome.places.tell(message);
    }
    // Nothing outside may hear of these before the batch is durable; they are empty
    // unless a planted bug (never in a node) says otherwise.
    for reply in sealed.early {
        reply();
    }
    for reply in sealed.replies {
        reply();
    }
}

/// `patches: apply_on_success`: a succeeded job's latest pending patch per repo goes
/// through the merge queue; a conflict or a refusal is logged and left for a person
/// (`palm patches list` shows its status).
fn apply_patches(data: &std::path::Path, job: &str) {
    let patches = palm_agents::patches::Patches::new(data);
    let listed = match patches.list(Some(job)) {
        Ok(listed) => listed,
        Err(err) => {
            warn!(job, %err, "cannot list the job's patches");
            return;
        }
    };
    // Newest first, and a job's patch is cumulative: the first per repo holds it all.
    let mut seen = std::collections::BTreeSet::new();
    for patch in listed {
        let repo = patch["repo"].as_str().unwrap_or_default().to_owned();
        // A `best_of` attempt's patch (it has a lane) lands only as the chosen winner; a
        // loser's, or one of a best_of halted before it chose, stays for review.
        let unchosen = !patch["lane"].is_null() && patch["chosen"] != true;
        if patch["status"] != "pending" || unchosen || !seen.insert(repo) {
            continue;
        }
        let id = patch["id"].as_str().unwrap_or_default();
        match patches.land(id, None, false, super::now_ms()) {
            Ok(answer) if answer["status"] == "applied" => {
                tracing::info!(job, patch = id, branch = %answer["branch"], "patch applied on success");
            }
            Ok(answer) => {
                warn!(job, patch = id, conflicts = %answer["conflicts"], "patch conflicts; left for review")
            }
            Err(err) => warn!(job, patch = id, %err, "patch not applied"),
        }
    }
}

/// At boot: the job worktrees under `DATA/worktrees` are reconciled with the store. One
/// whose job this store never had (a copied data directory, a store reset) is an orphan:
/// its whole state is saved on `refs/palm/saved/<job>/orphan`, then it is removed. The
/// others are adopted as they are (`palm worktrees gc` reclaims those of ended jobs),
/// and git's records of worktrees that are gone are pruned. Off the kernel's thread.
fn reconcile_worktrees(path: &palm_actors::path::JobPath, genome: &Genome) {
    let root = genome.info.data.join("worktrees");
    let found = palm_agents::git::list_worktrees(&root);
    if found.is_empty() {
        return;
    }
    let orphans: Vec<palm_agents::git::Found> = found
        .iter()
        .filter(|tree| matches!(path.record(&*genome.store, &tree.job), Ok(None)))
        .cloned()
        .collect();
    tokio::task::spawn_blocking(move || {
        for tree in &orphans {
            let reference = palm_agents::git::saved_ref(&tree.job, "orphan");
            match palm_agents::git::remove_worktree(tree, &reference) {
                Ok(saved) => {
                    info!(path = %tree.path.display(), saved = ?saved, reference, "orphan worktree saved and removed")
                }
                Err(err) => warn!(path = %tree.path.display(), %err, "orphan worktree kept"),
            }
        }
        let repos: std::collections::BTreeSet<_> =
            found.iter().filter_map(|t| t.repo.clone()).collect();
        for repo in repos {
            let _ = palm_agents::git::git(&repo, &["worktree", "prune"], &[]);
        }
    });
}
