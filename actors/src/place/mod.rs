//! The place book: a node's registry of workloads (places), their health and readiness.
//!
//! A *place* is a named workload the node spawned (a command it supervises and restarts)
//! or adopted (a process by pid, a service by TCP or HTTP address it only watches). Each
//! has a health probe, a lifecycle, capabilities it offers, and an owner (the node, or a
//! job whose end stops it).
//!
//! ```text
//! pending → starting → ready ↔ unready → stopping → stopped | failed
//!              ▲                 │
//!              └──── restart ────┘   (spawned places, per their restart policy)
//! ```
//!
//! [`PlaceBook`] is a sans-IO core like the job path: the host feeds it what happened
//! (`handle_spawned`, `handle_exited`, `handle_probe`, `tick` with an explicit `now`) and
//! drains what to do ([`PlaceBook::take_commands`]: spawn, stop, probe) and what to make
//! durable ([`PlaceBook::take_batch`]: every transition is an event of the node journal;
//! places added at run time are stored so they survive a restart). It never touches a
//! process, a socket or the clock; `node/` does, and the simulator can.
//!
//! Readiness gates work through [`Readiness`], a snapshot the host publishes after each
//! step: an effect that `needs` a place or capability is claimable only while it is ready.
//! Adoption never stops what the node did not start.

pub mod spec;

pub use spec::{
    Adopt, Check, Owner, PlaceSpec, Probe, RestartPolicy, RestartWhen, Source, SpawnSpec,
    StopSignal, parse_http_url, parse_places, parse_tcp_addr, valid_place_name,
};

use crate::store::{Store, StoreError, Table, WriteBatch};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;

/// Events kept in the node journal; older ones are deleted as new ones arrive, so a
/// flapping place cannot grow the store without bound.
pub const NODE_JOURNAL_MAX: u64 = 10_000;

/// Places one book holds (config, run time and job-owned together).
pub const PLACES_MAX: usize = 1_024;

/// Exit codes with which `sh` says the command could not be found or executed: such a
/// place fails at once instead of being restarted into the same error.
const EXIT_NOT_FOUND: i32 = 127;
const EXIT_NOT_EXECUTABLE: i32 = 126;

/// Where a place is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceState {
    /// Known, not started yet.
    Pending,
    /// Started (or being adopted); not yet passed its probe.
    Starting,
    /// Passing its probe: work that needs it may run.
    Ready,
    /// Failing its probe, or exited and waiting to be restarted.
    Unready,
    /// Asked to stop; waiting for the process to exit.
    Stopping,
    /// Stopped on purpose, or exited cleanly with nothing to restart.
    Stopped,
    /// Gave up: could not start, crashed past its restart budget, or an adopted process
    /// is gone.
    Failed,
}

impl PlaceState {
    /// The name used in output and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            PlaceState::Pending => "pending",
            PlaceState::Starting => "starting",
            PlaceState::Ready => "ready",
            PlaceState::Unready => "unready",
            PlaceState::Stopping => "stopping",
            PlaceState::Stopped => "stopped",
            PlaceState::Failed => "failed",
        }
    }
}

impl fmt::Display for PlaceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a spawned process ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// The last line of its stderr, to say why.
    pub detail: Option<String>,
}

impl Exit {
    fn clean(&self) -> bool {
        self.code == Some(0)
    }

    fn describe(&self) -> String {
        let mut text = match (self.code, self.signal) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "exited".to_owned(),
        };
        if let Some(detail) = self.detail.as_deref().filter(|d| !d.is_empty()) {
            text.push_str(": ");
            text.push_str(detail);
        }
        text
    }
}

/// What the host must do for the book.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlaceCommand {
    /// Start the process of a spawned place; answer with `handle_spawned` or
    /// `handle_spawn_failed`, and later `handle_exited`.
    Spawn {
        /// Place name.
        place: String,
        /// Which life of the place this is (answers carry it back; stale ones are ignored).
        incarnation: u64,
        /// What to run.
        spec: SpawnSpec,
    },
    /// Stop a spawned place's process group: `signal`, then SIGKILL after `grace_ms`.
    Stop {
        /// Place name.
        place: String,
        /// Its life.
        incarnation: u64,
        /// The process (group leader).
        pid: u32,
        /// First signal.
        signal: StopSignal,
        /// Time before SIGKILL.
        grace_ms: u64,
    },
    /// Run one health check; answer with `handle_probe`.
    Probe {
        /// Place name.
        place: String,
        /// Its life.
        incarnation: u64,
        /// What to check.
        check: Check,
        /// The process to check for `process` probes.
        pid: Option<u32>,
        /// Give up after this long (a timeout is a failure).
        timeout_ms: u64,
    },
}

/// What the node journal records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeEventKind {
    /// A place changed state (`from` is `None` when it was added).
    PlaceChanged {
        /// Place name.
        place: String,
        /// Previous state.
        from: Option<PlaceState>,
        /// New state.
        to: PlaceState,
        /// Why.
        reason: String,
    },
    /// A place was forgotten (removed, or its job ended).
    PlaceRemoved {
        /// Place name.
        place: String,
    },
}

/// One entry of the node journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEvent {
    /// Position in the node journal, from 1.
    pub seq: u64,
    /// When (ms since the epoch).
    pub at: u64,
    /// What.
    pub kind: NodeEventKind,
}

/// Reads the newest `limit` node events, oldest first.
pub fn read_node_events(store: &dyn Store, limit: usize) -> Result<Vec<NodeEvent>, StoreError> {
    let mut events = VecDeque::new();
    let mut failure = None;
    store.scan(
        Table::NodeJournal,
        b"",
        None,
        &mut |_, value| match postcard::from_bytes::<NodeEvent>(value) {
            Ok(event) => {
                if events.len() == limit {
                    events.pop_front();
                }
                events.push_back(event);
                true
            }
            Err(err) => {
                failure = Some(StoreError::Corrupt(format!("node event: {err}")));
                false
            }
        },
    )?;
    match failure {
        Some(err) => Err(err),
        None => Ok(events.into()),
    }
}

fn last_node_seq(store: &dyn Store) -> Result<u64, StoreError> {
    let mut last = 0;
    store.scan(Table::NodeJournal, b"", None, &mut |key, _| {
        if let Ok(bytes) = <[u8; 8]>::try_from(key) {
            last = u64::from_be_bytes(bytes);
        }
        true
    })?;
    Ok(last)
}

/// Appends events to the node journal (the place book's; link events are kept by the
/// node's tree organ in their own table). Keeps at most [`NODE_JOURNAL_MAX`] events.
#[derive(Debug, Default)]
pub struct NodeJournal {
    next_seq: u64,
}

impl NodeJournal {
    /// Continues the journal found in `store`.
    pub fn open(store: &dyn Store) -> Result<NodeJournal, StoreError> {
        Ok(NodeJournal {
            next_seq: last_node_seq(store)? + 1,
        })
    }

    /// Adds one event to `batch`.
    pub fn append(&mut self, batch: &mut WriteBatch, at: u64, kind: NodeEventKind) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let event = NodeEvent { seq, at, kind };
        let bytes = postcard::to_allocvec(&event).expect("node events always encode");
        batch.put(Table::NodeJournal, seq.to_be_bytes().to_vec(), bytes);
        if seq > NODE_JOURNAL_MAX {
            batch.delete(
                Table::NodeJournal,
                (seq - NODE_JOURNAL_MAX).to_be_bytes().to_vec(),
            );
        }
    }
}

/// The outcome of the last probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// When it finished.
    pub at: u64,
    /// Whether it passed.
    pub ok: bool,
    /// What it saw (`http 200`, `tcp connect refused`, ...).
    pub detail: String,
}

/// Why a request to the book was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    /// No place by that name.
    #[error("unknown place `{0}`")]
    Unknown(String),
    /// The name is taken.
    #[error("a place named `{0}` already exists")]
    Exists(String),
    /// The name is not usable.
    #[error("place name `{0}` is not valid (use letters, digits, `_`, `-` and `.`)")]
    InvalidName(String),
    /// Too many places.
    #[error("this node already holds {PLACES_MAX} places")]
    Full,
    /// The place is declared in the node's config (change the config instead).
    #[error("place `{0}` comes from the node's config; edit the config to remove it")]
    FromConfig(String),
    /// The place belongs to a job.
    #[error("place `{0}` belongs to job {1}; it goes when the job ends")]
    OwnedByJob(String, String),
}

/// Where a place was declared: decides whether it is stored and who may remove it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// `palm.yaml` (re-read at every boot; not stored).
    Config,
    /// `palm places add|adopt` (stored; survives restarts).
    Runtime,
    /// A flow's `places:` (lives as long as its job).
    Job,
}

/// What to do once a stopping process has exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterStop {
    /// Stay stopped.
    Stay,
    /// Start again (a restart).
    Start,
    /// Forget the place.
    Forget,
}

#[derive(Clone, Debug)]
struct Place {
    spec: PlaceSpec,
    origin: Origin,
    state: PlaceState,
    since: u64,
    reason: String,
    incarnation: u64,
    pid: Option<u32>,
    probe_due: Option<u64>,
    probe_in_flight: bool,
    passes: u32,
    failures: u32,
    last_probe: Option<ProbeRecord>,
    /// Restart times within the policy's window.
    restart_times: VecDeque<u64>,
    restarts_total: u32,
    restart_due: Option<u64>,
    after_stop: AfterStop,
}

/// A place as `palm places` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlaceView {
    /// Name (job-owned places are `JOB/NAME`).
    pub name: String,
    /// `spawn` or `adopt`.
    pub kind: &'static str,
    /// What it runs or watches.
    pub target: String,
    /// Lifecycle state.
    pub state: PlaceState,
    /// Since when.
    pub since: u64,
    /// Why it is in that state.
    pub reason: String,
    /// The process, when known.
    pub pid: Option<u32>,
    /// The health check.
    pub probe: String,
    /// The last probe's outcome.
    pub last_probe: Option<ProbeRecord>,
    /// Capabilities offered while ready.
    pub capabilities: Vec<String>,
    /// `node` or the owning job's id.
    pub owner: String,
    /// Where it was declared.
    pub origin: Origin,
    /// Restarts since it was added.
    pub restarts: u32,
}

/// Whether one need (a place or capability name) is ready, and if not why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NeedState {
    /// Ready now.
    pub ready: bool,
    /// Since when it has been in that condition.
    pub since: u64,
    /// Why not (or what passed).
    pub reason: String,
}

/// A need that holds an effect back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Blocked {
    /// The place or capability needed.
    pub place: String,
    /// Since when it has not been ready.
    pub since: u64,
    /// Why.
    pub reason: String,
}

/// The readiness of every need a node can satisfy: a snapshot the host publishes after
/// each step of the book, read by the claim filter and by status views.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    needs: HashMap<String, NeedState>,
}

impl Readiness {
    /// A snapshot where only the node's own capabilities are ready (no places).
    pub fn with_capabilities(capabilities: &[String], now: u64) -> Readiness {
        let mut readiness = Readiness::default();
        readiness.add_capabilities(capabilities, now);
        readiness
    }

    fn add_capabilities(&mut self, capabilities: &[String], now: u64) {
        for capability in capabilities {
            self.needs.insert(
                capability.clone(),
                NeedState {
                    ready: true,
                    since: now,
                    reason: "offered by the node".to_owned(),
                },
            );
        }
    }

    /// The state of `need` as seen by `job` (its own places first: `JOB/NEED`).
    pub fn need(&self, job: &str, need: &str) -> Option<&NeedState> {
        self.needs
            .get(&format!("{job}/{need}"))
            .or_else(|| self.needs.get(need))
    }

    /// True when every need is ready for `job`.
    pub fn all_ready(&self, job: &str, needs: &[String]) -> bool {
        needs
            .iter()
            .all(|need| self.need(job, need).is_some_and(|n| n.ready))
    }

    /// The needs of `job` that are not ready; `requested_at` bounds `since` from below
    /// (an effect is not blocked before it exists).
    pub fn blocked(&self, job: &str, needs: &[String], requested_at: u64) -> Vec<Blocked> {
        needs
            .iter()
            .filter_map(|need| match self.need(job, need) {
                Some(state) if state.ready => None,
                Some(state) => Some(Blocked {
                    place: need.clone(),
                    since: state.since.max(requested_at),
                    reason: state.reason.clone(),
                }),
                None => Some(Blocked {
                    place: need.clone(),
                    since: requested_at,
                    reason: format!("no place or capability `{need}` on this node"),
                }),
            })
            .collect()
    }

    /// Every known need (for vitality).
    pub fn needs(&self) -> &HashMap<String, NeedState> {
        &self.needs
    }
}

/// What [`PlaceBook::open`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacesReport {
    /// Runtime places restored from the store.
    pub restored: usize,
    /// Stored specs that no longer decode (left in the store, reported).
    pub broken: Vec<String>,
}

/// See the module docs.
#[derive(Debug)]
pub struct PlaceBook {
    places: BTreeMap<String, Place>,
    capabilities: Vec<String>,
    journal: NodeJournal,
    batch: WriteBatch,
    commands: Vec<PlaceCommand>,
    next_incarnation: u64,
    /// Bumped on every change of readiness, so hosts republish only when needed.
    readiness_epoch: u64,
}

impl PlaceBook {
    /// Opens the book over `store`: continues the node journal and restores the places
    /// added at run time. `capabilities` are the node's own (always ready). Nothing starts
    /// until the host adds config places and calls [`PlaceBook::start_all`].
    pub fn open(
        store: &dyn Store,
        capabilities: Vec<String>,
    ) -> Result<(PlaceBook, Vec<PlaceSpec>, PlacesReport), StoreError> {
        let journal = NodeJournal::open(store)?;
        let mut specs = Vec::new();
        let mut report = PlacesReport::default();
        store.scan(Table::Places, b"", None, &mut |key, value| {
            match postcard::from_bytes::<PlaceSpec>(value) {
                Ok(spec) => specs.push(spec),
                Err(_) => report
                    .broken
                    .push(String::from_utf8_lossy(key).into_owned()),
            }
            true
        })?;
        report.restored = specs.len();
        let book = PlaceBook {
            places: BTreeMap::new(),
            capabilities,
            journal,
            batch: WriteBatch::new(),
            commands: Vec::new(),
            next_incarnation: 1,
            readiness_epoch: 0,
        };
        Ok((book, specs, report))
    }

    /// Adds a place; it starts at once (spawned: a `Spawn` command; adopted: a probe).
    /// A runtime place is stored so it survives a restart (`persist`: false when it was
    /// just restored from the store).
    pub fn add(
        &mut self,
        now: u64,
        spec: PlaceSpec,
        origin: Origin,
        persist: bool,
    ) -> Result<(), PlaceError> {
        let name = spec.name.clone();
        if !valid_place_name(&name) {
            return Err(PlaceError::InvalidName(name));
        }
        if self.places.contains_key(&name) {
            return Err(PlaceError::Exists(name));
        }
        if self.places.len() >= PLACES_MAX {
            return Err(PlaceError::Full);
        }
        if persist && origin == Origin::Runtime {
            self.batch.put(
                Table::Places,
                name.as_bytes().to_vec(),
                postcard::to_allocvec(&spec).expect("place specs always encode"),
            );
        }
        let place = Place {
            spec,
            origin,
            state: PlaceState::Pending,
            since: now,
            reason: "added".to_owned(),
            incarnation: 0,
            pid: None,
            probe_due: None,
            probe_in_flight: false,
            passes: 0,
            failures: 0,
            last_probe: None,
            restart_times: VecDeque::new(),
            restarts_total: 0,
            restart_due: None,
            after_stop: AfterStop::Stay,
        };
        self.places.insert(name.clone(), place);
        self.journal.append(
            &mut self.batch,
            now,
            NodeEventKind::PlaceChanged {
                place: name.clone(),
                from: None,
                to: PlaceState::Pending,
                reason: format!("added ({})", origin_name(origin)),
            },
        );
        self.start(now, &name, "starting");
        Ok(())
    }

    /// Removes a place: a running spawned place is stopped first and forgotten once it
    /// exited; anything else is forgotten at once. Adopted processes are never signalled.
    pub fn remove(&mut self, now: u64, name: &str) -> Result<(), PlaceError> {
        let place = self
            .places
            .get(name)
            .ok_or_else(|| PlaceError::Unknown(name.to_owned()))?;
        match (place.origin, &place.spec.owner) {
            (Origin::Config, _) => return Err(PlaceError::FromConfig(name.to_owned())),
            (Origin::Job, Owner::Job(job)) => {
                return Err(PlaceError::OwnedByJob(name.to_owned(), job.clone()));
            }
            _ => {}
        }
        self.batch.delete(Table::Places, name.as_bytes().to_vec());
        self.stop(now, name, AfterStop::Forget, "removed");
        Ok(())
    }

    /// Restarts a place: a spawned one is stopped and started again; an adopted one is
    /// probed afresh.
    pub fn restart(&mut self, now: u64, name: &str) -> Result<(), PlaceError> {
        let place = self
            .places
            .get_mut(name)
            .ok_or_else(|| PlaceError::Unknown(name.to_owned()))?;
        // A restart asked by a person starts a fresh restart budget.
        place.restart_times.clear();
        if place.pid.is_some() && matches!(place.spec.source, Source::Spawn(_)) {
            self.stop(now, name, AfterStop::Start, "restart requested");
        } else {
            self.start(now, name, "restart requested");
        }
        Ok(())
    }

    /// Stops every spawned place (node shutdown). Returns how many must still exit.
    pub fn stop_all(&mut self, now: u64) -> usize {
        let names: Vec<String> = self.places.keys().cloned().collect();
        for name in &names {
            self.stop(now, name, AfterStop::Stay, "node stopping");
        }
        self.places
            .values()
            .filter(|p| p.state == PlaceState::Stopping)
            .count()
    }

    /// Declares the places of a job that started (or is active at boot).
    pub fn job_started(&mut self, now: u64, job: &str, specs: &[PlaceSpec]) {
        for spec in specs {
            let mut spec = spec.clone();
            spec.name = job_place_name(job, &spec.name);
            spec.owner = Owner::Job(job.to_owned());
            if self.places.contains_key(&spec.name) {
                continue;
            }
            if let Err(err) = self.add(now, spec.clone(), Origin::Job, false) {
                // Only `Full` can happen here; say so on the place rather than lose it.
                self.journal.append(
                    &mut self.batch,
                    now,
                    NodeEventKind::PlaceChanged {
                        place: spec.name.clone(),
                        from: None,
                        to: PlaceState::Failed,
                        reason: err.to_string(),
                    },
                );
            }
        }
    }

    /// Stops and forgets the places a job owned.
    pub fn job_ended(&mut self, now: u64, job: &str) {
        let owned: Vec<String> = self
            .places
            .iter()
            .filter(|(_, p)| matches!(&p.spec.owner, Owner::Job(j) if j == job))
            .map(|(name, _)| name.clone())
            .collect();
        for name in owned {
            self.stop(now, &name, AfterStop::Forget, "its job ended");
        }
    }

    /// Keeps only the job-owned places whose job is in `active` (called at boot, so a job
    /// that ended while its places' stop was not yet acted on does not leak them).
    pub fn retain_jobs(&mut self, now: u64, active: &dyn Fn(&str) -> bool) {
        let orphans: Vec<String> = self
            .places
            .iter()
            .filter(|(_, p)| matches!(&p.spec.owner, Owner::Job(j) if !active(j)))
            .map(|(name, _)| name.clone())
            .collect();
        for name in orphans {
            self.stop(now, &name, AfterStop::Forget, "its job is over");
        }
    }

    /// The process of a spawned place started.
    pub fn handle_spawned(&mut self, now: u64, name: &str, incarnation: u64, pid: u32) {
        let Some(place) = self.live(name, incarnation) else {
            return;
        };
        place.pid = Some(pid);
        if place.state == PlaceState::Stopping {
            // Stopped while it was starting: stop the process that just appeared.
            self.push_stop(name);
            return;
        }
        // The first check comes soon after the start; then every interval.
        place.probe_due = Some(now + place.spec.probe.interval_ms.min(FIRST_PROBE_MS));
        let reason = format!("started (pid {pid})");
        self.transition(now, name, PlaceState::Starting, reason);
    }

    /// The process of a spawned place could not be started (no such command, bad cwd).
    pub fn handle_spawn_failed(&mut self, now: u64, name: &str, incarnation: u64, error: &str) {
        let Some(place) = self.live(name, incarnation) else {
            return;
        };
        place.pid = None;
        place.probe_due = None;
        if place.state == PlaceState::Stopping {
            self.finish_stop(now, name);
            return;
        }
        self.transition(
            now,
            name,
            PlaceState::Failed,
            format!("cannot start: {error}"),
        );
    }

    /// The process of a spawned place exited.
    pub fn handle_exited(&mut self, now: u64, name: &str, incarnation: u64, exit: Exit) {
        let Some(place) = self.live(name, incarnation) else {
            return;
        };
        place.pid = None;
        place.probe_due = None;
        place.probe_in_flight = false;
        if place.state == PlaceState::Stopping {
            self.finish_stop(now, name);
            return;
        }
        let Source::Spawn(spawn) = &place.spec.source else {
            return;
        };
        let policy = spawn.restart.clone();
        let never_ready = place.passes == 0 && place.state == PlaceState::Starting;
        let what = exit.describe();
        if never_ready && matches!(exit.code, Some(EXIT_NOT_FOUND | EXIT_NOT_EXECUTABLE)) {
            self.transition(
                now,
                name,
                PlaceState::Failed,
                format!("cannot start: {what}"),
            );
            return;
        }
        let restart = match policy.when {
            RestartWhen::Never => false,
            RestartWhen::OnFailure => !exit.clean(),
            RestartWhen::Always => true,
        };
        if !restart {
            let state = if exit.clean() {
                PlaceState::Stopped
            } else {
                PlaceState::Failed
            };
            self.transition(now, name, state, what);
            return;
        }
        let place = self.places.get_mut(name).expect("checked by live()");
        while place
            .restart_times
            .front()
            .is_some_and(|t| now.saturating_sub(*t) >= policy.window_ms)
        {
            place.restart_times.pop_front();
        }
        if place.restart_times.len() as u32 >= policy.restarts_max {
            let reason = format!(
                "gave up after {} restarts within {}: {what}",
                place.restart_times.len(),
                human_ms(policy.window_ms)
            );
            self.transition(now, name, PlaceState::Failed, reason);
            return;
        }
        let attempt = place.restart_times.len() as u32;
        let delay = policy
            .backoff_ms
            .saturating_mul(1u64 << attempt.min(20))
            .min(policy.backoff_max_ms);
        place.restart_times.push_back(now);
        place.restart_due = Some(now + delay);
        let reason = format!(
            "{what}; restart {} of {} in {}",
            attempt + 1,
            policy.restarts_max,
            human_ms(delay)
        );
        self.transition(now, name, PlaceState::Unready, reason);
    }

    /// A probe finished.
    pub fn handle_probe(&mut self, now: u64, name: &str, incarnation: u64, ok: bool, detail: &str) {
        let Some(place) = self.live(name, incarnation) else {
            return;
        };
        place.probe_in_flight = false;
        place.last_probe = Some(ProbeRecord {
            at: now,
            ok,
            detail: detail.to_owned(),
        });
        if !matches!(
            place.state,
            PlaceState::Starting | PlaceState::Ready | PlaceState::Unready
        ) || place.restart_due.is_some()
        {
            return;
        }
        place.probe_due = Some(now + place.spec.probe.interval_ms);
        if ok {
            place.passes += 1;
            place.failures = 0;
        } else {
            place.failures += 1;
            place.passes = 0;
        }
        let probe = place.spec.probe.clone();
        let adopted_pid = matches!(place.spec.source, Source::Adopt(Adopt::Pid(_)));
        let state = place.state;
        let (passes, failures) = (place.passes, place.failures);
        match (state, ok) {
            (PlaceState::Starting | PlaceState::Unready, true) if passes >= probe.successes => {
                self.transition(now, name, PlaceState::Ready, format!("probe ok: {detail}"));
            }
            // An adopted process that is gone does not come back: nothing to restart.
            (_, false) if adopted_pid && probe.check == Check::Process => {
                self.transition(
                    now,
                    name,
                    PlaceState::Failed,
                    format!("{detail} (adopted; not restarted)"),
                );
            }
            (PlaceState::Ready, false) if failures >= probe.failures => {
                let reason = format!("{detail} ({failures} probes failed)");
                self.transition(now, name, PlaceState::Unready, reason);
            }
            (PlaceState::Starting | PlaceState::Unready, false) => {
                // Not ready yet: keep the reason current so `blocked_on` says why.
                if let Some(place) = self.places.get_mut(name)
                    && place.reason != detail
                {
                    place.reason = detail.to_owned();
                    self.readiness_epoch += 1;
                }
            }
            _ => {}
        }
    }

    /// Starts restarts and probes that are due.
    pub fn tick(&mut self, now: u64) {
        let names: Vec<String> = self.places.keys().cloned().collect();
        for name in names {
            let Some(place) = self.places.get_mut(&name) else {
                continue;
            };
            if place.restart_due.is_some_and(|due| due <= now) {
                place.restart_due = None;
                place.restarts_total += 1;
                self.start(now, &name, "restarting");
                continue;
            }
            if place.probe_in_flight || place.probe_due.is_none_or(|due| due > now) {
                continue;
            }
            place.probe_in_flight = true;
            place.probe_due = None;
            self.commands.push(PlaceCommand::Probe {
                place: name.clone(),
                incarnation: place.incarnation,
                check: place.spec.probe.check.clone(),
                pid: place.pid.or(match place.spec.source {
                    Source::Adopt(Adopt::Pid(pid)) => Some(pid),
                    _ => None,
                }),
                timeout_ms: place.spec.probe.timeout_ms,
            });
        }
    }

    /// When `tick` next has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        self.places
            .values()
            .flat_map(|p| {
                let probe = p.probe_due.filter(|_| !p.probe_in_flight);
                [p.restart_due, probe]
            })
            .flatten()
            .min()
    }

    /// What the host must do now.
    pub fn take_commands(&mut self) -> Vec<PlaceCommand> {
        std::mem::take(&mut self.commands)
    }

    /// The writes to commit (node events, stored specs).
    pub fn take_batch(&mut self) -> WriteBatch {
        std::mem::take(&mut self.batch)
    }

    /// A counter that changes whenever readiness may have changed.
    pub fn readiness_epoch(&self) -> u64 {
        self.readiness_epoch
    }

    /// The readiness of every need: each place by name, each capability (ready when any
    /// ready place offers it), and the node's own capabilities.
    pub fn readiness(&self, now: u64) -> Readiness {
        let mut readiness = Readiness::default();
        for (name, place) in &self.places {
            let ready = place.state == PlaceState::Ready;
            let state = NeedState {
                ready,
                since: place.since,
                reason: if ready {
                    place.reason.clone()
                } else {
                    format!("place `{name}` is {}: {}", place.state, place.reason)
                },
            };
            for capability in &place.spec.capabilities {
                let key = match &place.spec.owner {
                    Owner::Job(job) => job_place_name(job, capability),
                    Owner::Node => capability.clone(),
                };
                match readiness.needs.get(&key) {
                    Some(existing) if existing.ready => {}
                    Some(existing) if !ready && existing.since <= place.since => {}
                    _ => {
                        readiness.needs.insert(key, state.clone());
                    }
                }
            }
            readiness.needs.insert(name.clone(), state);
        }
        readiness.add_capabilities(&self.capabilities, now);
        readiness
    }

    /// Every place, by name.
    pub fn views(&self) -> Vec<PlaceView> {
        self.places
            .iter()
            .map(|(name, place)| PlaceView {
                name: name.clone(),
                kind: match place.spec.source {
                    Source::Spawn(_) => "spawn",
                    Source::Adopt(_) => "adopt",
                },
                target: place.spec.source.describe(),
                state: place.state,
                since: place.since,
                reason: place.reason.clone(),
                pid: place.pid.or(match place.spec.source {
                    Source::Adopt(Adopt::Pid(pid)) => Some(pid),
                    _ => None,
                }),
                probe: place.spec.probe.check.describe(),
                last_probe: place.last_probe.clone(),
                capabilities: place.spec.capabilities.clone(),
                owner: match &place.spec.owner {
                    Owner::Node => "node".to_owned(),
                    Owner::Job(job) => job.clone(),
                },
                origin: place.origin,
                restarts: place.restarts_total,
            })
            .collect()
    }

    /// One place's state.
    pub fn state(&self, name: &str) -> Option<PlaceState> {
        self.places.get(name).map(|p| p.state)
    }

    /// The pids of running spawned places (for resource accounting).
    pub fn spawned_pids(&self) -> Vec<(String, u32)> {
        self.places
            .iter()
            .filter(|(_, p)| matches!(p.spec.source, Source::Spawn(_)))
            .filter_map(|(name, p)| p.pid.map(|pid| (name.clone(), pid)))
            .collect()
    }

    /// The node's own capabilities.
    pub fn capabilities(&self) -> &[String] {
        &self.capabilities
    }

    fn live(&mut self, name: &str, incarnation: u64) -> Option<&mut Place> {
        self.places
            .get_mut(name)
            .filter(|p| p.incarnation == incarnation)
    }

    fn start(&mut self, now: u64, name: &str, reason: &str) {
        let incarnation = self.next_incarnation;
        self.next_incarnation += 1;
        let Some(place) = self.places.get_mut(name) else {
            return;
        };
        place.incarnation = incarnation;
        place.passes = 0;
        place.failures = 0;
        place.probe_in_flight = false;
        place.restart_due = None;
        place.after_stop = AfterStop::Stay;
        match &place.spec.source {
            Source::Spawn(spawn) => {
                place.pid = None;
                place.probe_due = None;
                self.commands.push(PlaceCommand::Spawn {
                    place: name.to_owned(),
                    incarnation,
                    spec: spawn.clone(),
                });
            }
            Source::Adopt(_) => {
                place.probe_due = Some(now);
            }
        }
        self.transition(now, name, PlaceState::Starting, reason.to_owned());
    }

    fn stop(&mut self, now: u64, name: &str, after: AfterStop, reason: &str) {
        let Some(place) = self.places.get_mut(name) else {
            return;
        };
        place.restart_due = None;
        place.probe_due = None;
        let spawned = matches!(place.spec.source, Source::Spawn(_));
        if place.state == PlaceState::Stopping {
            // Already on its way down; a later wish (forget) wins over an earlier (stay).
            if after == AfterStop::Forget || place.after_stop == AfterStop::Stay {
                place.after_stop = after;
            }
            return;
        }
        let running = spawned
            && matches!(
                place.state,
                PlaceState::Starting | PlaceState::Ready | PlaceState::Unready
            );
        if running {
            place.after_stop = after;
            if place.pid.is_some() {
                self.push_stop(name);
            }
            // (A place still spawning is stopped as soon as its pid arrives.)
            self.transition(now, name, PlaceState::Stopping, reason.to_owned());
            return;
        }
        match after {
            AfterStop::Forget => self.forget(now, name, reason),
            AfterStop::Start => self.start(now, name, reason),
            AfterStop::Stay => {
                let place = self.places.get_mut(name).expect("checked above");
                if !matches!(place.state, PlaceState::Stopped | PlaceState::Failed) {
                    // Adopted places are only let go: what the node did not start, it
                    // does not stop.
                    let reason = if spawned {
                        reason.to_owned()
                    } else {
                        format!("{reason} (adopted; left running)")
                    };
                    self.transition(now, name, PlaceState::Stopped, reason);
                }
            }
        }
    }

    fn push_stop(&mut self, name: &str) {
        let place = self.places.get(name).expect("caller checked");
        let (Source::Spawn(spawn), Some(pid)) = (&place.spec.source, place.pid) else {
            return;
        };
        self.commands.push(PlaceCommand::Stop {
            place: name.to_owned(),
            incarnation: place.incarnation,
            pid,
            signal: spawn.stop_signal,
            grace_ms: spawn.stop_grace_ms,
        });
    }

    fn finish_stop(&mut self, now: u64, name: &str) {
        let after = self
            .places
            .get(name)
            .map_or(AfterStop::Stay, |p| p.after_stop);
        match after {
            AfterStop::Forget => self.forget(now, name, "stopped"),
            AfterStop::Start => self.start(now, name, "restarting"),
            AfterStop::Stay => {
                self.transition(now, name, PlaceState::Stopped, "stopped".to_owned());
            }
        }
    }

    fn forget(&mut self, now: u64, name: &str, reason: &str) {
        if let Some(place) = self.places.get(name)
            && !matches!(place.state, PlaceState::Stopped | PlaceState::Failed)
        {
            self.transition(now, name, PlaceState::Stopped, reason.to_owned());
        }
        self.places.remove(name);
        self.readiness_epoch += 1;
        self.journal.append(
            &mut self.batch,
            now,
            NodeEventKind::PlaceRemoved {
                place: name.to_owned(),
            },
        );
    }

    fn transition(&mut self, now: u64, name: &str, to: PlaceState, reason: String) {
        let Some(place) = self.places.get_mut(name) else {
            return;
        };
        let from = place.state;
        if from == to && place.reason == reason {
            return;
        }
        place.state = to;
        place.since = now;
        place.reason = reason.clone();
        if matches!(to, PlaceState::Failed | PlaceState::Stopped) {
            place.probe_due = None;
            place.restart_due = None;
        }
        self.readiness_epoch += 1;
        self.journal.append(
            &mut self.batch,
            now,
            NodeEventKind::PlaceChanged {
                place: name.to_owned(),
                from: Some(from),
                to,
                reason,
            },
        );
    }
}

/// Delay before the first probe of a freshly started process.
const FIRST_PROBE_MS: u64 = 100;

/// The name under which a job's place `name` lives in the book.
pub fn job_place_name(job: &str, name: &str) -> String {
    format!("{job}/{name}")
}

fn origin_name(origin: Origin) -> &'static str {
    match origin {
        Origin::Config => "config",
        Origin::Runtime => "run time",
        Origin::Job => "job",
    }
}

/// `1500` → `1.5s`; `200` → `200ms`.
pub fn human_ms(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{:.1}s", ms as f64 / 1_000.0)
    }
}

#[cfg(test)]
mod tests;
