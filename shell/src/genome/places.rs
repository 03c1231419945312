//! The places organ: hosts the place book core and does what it asks — spawns and stops
//! processes, runs probes, commits the node journal — then publishes readiness for the
//! seats and the desk.
//!
//! A spawned place runs in its own process group with stdin closed and its output
//! appended to `DIR/places/NAME.log` (rotated once past [`LOG_BYTES_MAX`]); stopping it
//! signals the whole group, then SIGKILLs it after its grace. Adopted places are only
//! probed: nothing here ever signals a process the node did not start.
//!
//! Readiness is published as a [`PlacesSnapshot`] on the genome's [`PlaceBoard`] after
//! every step; when it changes the seats are woken, so an effect blocked on a place
//! drains as soon as the place is ready again, without anyone touching the job.

use super::kernel::KernelMsg;
use super::{Genome, now_ms};
use palm_actors::place::{
    Adopt, Check, Exit, NodeEventKind, Origin, PlaceBook, PlaceCommand, PlaceError, PlaceSpec,
    PlaceState, PlaceView, Readiness, Source, SpawnSpec, read_node_events,
};
use palm_api::protocol::{ErrorBody, Request, Response};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// A place's log is rotated (to `NAME.log.1`) when it starts past this size.
pub const LOG_BYTES_MAX: u64 = 8 << 20;

/// Node events `palm places events` shows by default.
pub const EVENTS_DEFAULT: usize = 50;

/// Bound on how long a node waits at shutdown for its places to exit (beyond their grace).
const SHUTDOWN_SLACK_MS: u64 = 2_000;

/// What the places organ publishes after each step.
#[derive(Clone, Debug, Default)]
pub struct PlacesSnapshot {
    /// Every need's readiness.
    pub readiness: Readiness,
    /// Every place.
    pub views: Vec<PlaceView>,
}

/// The genome's window on the place book: readiness for the claim filter, views for
/// vitality and status.
pub struct PlaceBoard {
    snapshot: RwLock<Arc<PlacesSnapshot>>,
    actor: RwLock<Option<ActorRef<PlacesMsg>>>,
}

impl PlaceBoard {
    /// A board where only `capabilities` (the node's own) are ready.
    pub fn new(capabilities: &[String]) -> PlaceBoard {
        PlaceBoard {
            snapshot: RwLock::new(Arc::new(PlacesSnapshot {
                readiness: Readiness::with_capabilities(capabilities, now_ms()),
                views: Vec::new(),
            })),
            actor: RwLock::new(None),
        }
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Arc<PlacesSnapshot> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn publish(&self, snapshot: PlacesSnapshot) {
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snapshot);
    }

    /// The live places organ, if running.
    pub fn actor(&self) -> Option<ActorRef<PlacesMsg>> {
        self.actor.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_actor(&self, actor: Option<ActorRef<PlacesMsg>>) {
        *self.actor.write().unwrap_or_else(|p| p.into_inner()) = actor;
    }

    /// Tells the organ something; dropped when it is not running (it reconciles with the
    /// kernel when it starts).
    pub fn tell(&self, message: PlacesMsg) {
        if let Some(actor) = self.actor() {
            let _ = actor.cast(message);
        }
    }
}

/// Messages of the places organ.
pub enum PlacesMsg {
    /// A control request (`places`, `places_add`, ...).
    Call(Box<Request>, RpcReplyPort<Response>),
    /// A spawned process exited.
    Exited {
        /// Place.
        place: String,
        /// Its life.
        incarnation: u64,
        /// How.
        exit: Exit,
    },
    /// A probe answered.
    Probed {
        /// Place.
        place: String,
        /// Its life.
        incarnation: u64,
        /// Passed.
        ok: bool,
        /// What it saw.
        detail: String,
    },
    /// Restarts or probes are due.
    Tick,
    /// A job whose flow declares places started (after its submit is durable).
    JobStarted {
        /// Job id.
        job: String,
        /// Its places.
        places: Vec<PlaceSpec>,
    },
    /// Jobs ended (those of one sealed batch): their places go.
    JobsEnded {
        /// Job ids.
        jobs: Vec<String>,
    },
    /// The kernel's view of active jobs with places (at its start): add what is missing,
    /// stop what belongs to jobs no longer active.
    ActiveJobs(Vec<(String, Vec<PlaceSpec>)>),
}

/// The places organ (behaviour; state in [`PlacesState`]).
pub struct Places;

struct Child {
    incarnation: u64,
    pid: u32,
    exited: watch::Receiver<bool>,
}

/// The organ's state.
pub struct PlacesState {
    genome: Arc<Genome>,
    book: PlaceBook,
    children: HashMap<String, Child>,
    timer: Option<(u64, tokio::task::JoinHandle<()>)>,
    published_epoch: Option<u64>,
    logs: PathBuf,
    /// The state each place was last announced to the kernel in.
    announced: HashMap<String, PlaceState>,
}

impl Actor for Places {
    type Msg = PlacesMsg;
    type State = PlacesState;
    type Arguments = Arc<Genome>;

    async fn pre_start(
        &self,
        myself: ActorRef<PlacesMsg>,
        genome: Arc<Genome>,
    ) -> Result<PlacesState, ActorProcessingErr> {
        let (mut book, stored, report) =
            PlaceBook::open(&*genome.store, genome.settings.capabilities.clone())?;
        for key in &report.broken {
            warn!(
                place = key,
                "a stored place spec does not decode; left in the store"
            );
        }
        let now = now_ms();
        for spec in &genome.settings.places {
            if let Err(err) = book.add(now, spec.clone(), Origin::Config, false) {
                warn!(place = spec.name, error = %err, "config place not added");
            }
        }
        for spec in stored {
            let name = spec.name.clone();
            if let Err(err) = book.add(now, spec, Origin::Runtime, false) {
                warn!(place = name, error = %err, "stored place not restored");
            }
        }
        let logs = genome.info.data.join("places");
        stop_leftovers(&logs).await;
        let mut state = PlacesState {
            genome: Arc::clone(&genome),
            book,
            children: HashMap::new(),
            timer: None,
            published_epoch: None,
            logs,
            announced: HashMap::new(),
        };
        state.step(&myself)?;
        genome.places.set_actor(Some(myself));
        Ok(state)
    }

    async fn post_stop(
        &self,
        myself: ActorRef<PlacesMsg>,
        state: &mut PlacesState,
    ) -> Result<(), ActorProcessingErr> {
        state.genome.places.set_actor(None);
        if let Some((_, timer)) = state.timer.take() {
            timer.abort();
        }
        let waiting = state.book.stop_all(now_ms());
        state.run_commands(&myself);
        if waiting > 0 {
            info!(places = waiting, "stopping places");
        }
        let deadline = tokio::time::Instant::now()
            + Duration::from_millis(state.longest_grace_ms() + SHUTDOWN_SLACK_MS);
        let now = now_ms();
        for (name, mut child) in std::mem::take(&mut state.children) {
            let exited = tokio::time::timeout_at(deadline, child.exited.wait_for(|e| *e)).await;
            if exited.is_err() {
                warn!(
                    place = name,
                    pid = child.pid,
                    "place did not exit in time; killing it"
                );
                let _ = crate::sys::kill_group(child.pid, crate::sys::SIGKILL);
            }
            state
                .book
                .handle_exited(now, &name, child.incarnation, Exit::default());
        }
        state.commit()?;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<PlacesMsg>,
        message: PlacesMsg,
        state: &mut PlacesState,
    ) -> Result<(), ActorProcessingErr> {
        let now = now_ms();
        let mut reply = None;
        match message {
            PlacesMsg::Call(request, port) => {
                let response = state.answer(now, *request).await;
                reply = Some((port, response));
            }
            PlacesMsg::Exited {
                place,
                incarnation,
                exit,
            } => {
                if state
                    .children
                    .get(&place)
                    .is_some_and(|c| c.incarnation == incarnation)
                {
                    state.children.remove(&place);
                }
                info!(place, exit = ?exit, "place process exited");
                state.book.handle_exited(now, &place, incarnation, exit);
            }
            PlacesMsg::Probed {
                place,
                incarnation,
                ok,
                detail,
            } => {
                debug!(place, ok, detail, "probe");
                state
                    .book
                    .handle_probe(now, &place, incarnation, ok, &detail)
            }
            PlacesMsg::Tick => {
                state.timer = None;
            }
            PlacesMsg::JobStarted { job, places } => state.book.job_started(now, &job, &places),
            PlacesMsg::JobsEnded { jobs } => {
                for job in &jobs {
                    state.book.job_ended(now, job);
                }
            }
            PlacesMsg::ActiveJobs(active) => {
                for (job, places) in &active {
                    state.book.job_started(now, job, places);
                }
                let active: std::collections::HashSet<&str> =
                    active.iter().map(|(job, _)| job.as_str()).collect();
                state.book.retain_jobs(now, &|job| active.contains(job));
            }
        }
        state.step(&myself)?;
        if let Some((port, response)) = reply {
            let _ = port.send(response);
        }
        Ok(())
    }
}

fn place_error(err: PlaceError) -> Response {
    let kind = match err {
        PlaceError::Unknown(_) => "unknown_place",
        PlaceError::Exists(_) => "place_exists",
        PlaceError::InvalidName(_) => "invalid_input",
        PlaceError::Full => "full",
        PlaceError::FromConfig(_) | PlaceError::OwnedByJob(..) => "refused",
    };
    let body = ErrorBody::invalid(kind, err.to_string());
    Response::err(match err {
        PlaceError::Unknown(_) => body.hint("`palm places` lists the places of this node"),
        _ => body,
    })
}

/// The JSON of one place, with the resource use of its process.
pub fn view_json(view: &PlaceView) -> Value {
    let mut value = serde_json::to_value(view).unwrap_or(Value::Null);
    if let (Some(object), Some(pid)) = (value.as_object_mut(), view.pid) {
        let pid = pid.to_string();
        object.insert("rss_bytes".into(), json!(crate::sys::rss_of(&pid)));
        object.insert("cpu_ms".into(), json!(crate::sys::cpu_ms_of(&pid)));
    }
    value
}

impl PlacesState {
    async fn answer(&mut self, now: u64, request: Request) -> Response {
        match request {
            Request::Places => {
                let places: Vec<Value> = self.book.views().iter().map(view_json).collect();
                Response::ok(json!({ "places": places }))
            }
            Request::PlacesAdd { spec } => {
                if let Some(refusal) = unreachable_adopt(&spec).await {
                    return refusal;
                }
                let name = spec.name.clone();
                match self.book.add(now, spec, Origin::Runtime, true) {
                    Ok(()) => self.one(&name),
                    Err(err) => place_error(err),
                }
            }
            Request::PlacesRemove { name } => match self.book.remove(now, &name) {
                Ok(()) => Response::ok(json!({ "place": name, "removed": true })),
                Err(err) => place_error(err),
            },
            Request::PlacesRestart { name } => match self.book.restart(now, &name) {
                Ok(()) => self.one(&name),
                Err(err) => place_error(err),
            },
            Request::PlacesEvents { place, limit } => {
                let limit = limit.unwrap_or(EVENTS_DEFAULT);
                match read_node_events(&*self.genome.store, usize::MAX) {
                    Ok(events) => Response::ok(
                        json!({ "events": events_json(events, place.as_deref(), limit) }),
                    ),
                    Err(err) => Response::err(ErrorBody::failure("store", err.to_string())),
                }
            }
            other => Response::err(ErrorBody::failure(
                "internal",
                format!("{other:?} is not a places request"),
            )),
        }
    }

    fn one(&self, name: &str) -> Response {
        match self.book.views().iter().find(|v| v.name == name) {
            Some(view) => Response::ok(view_json(view)),
            None => Response::ok(json!({ "place": name })),
        }
    }

    fn longest_grace_ms(&self) -> u64 {
        self.genome
            .settings
            .places
            .iter()
            .filter_map(|spec| match &spec.source {
                Source::Spawn(spawn) => Some(spawn.stop_grace_ms),
                Source::Adopt(_) => None,
            })
            .max()
            .unwrap_or(palm_actors::place::spec::STOP_GRACE_MS_DEFAULT)
    }

    /// Runs due work, carries out commands, commits, publishes, re-arms the timer.
    fn step(&mut self, myself: &ActorRef<PlacesMsg>) -> Result<(), ActorProcessingErr> {
        self.book.tick(now_ms());
        self.run_commands(myself);
        self.commit()?;
        self.announce_changes();
        let epoch = self.book.readiness_epoch();
        let views = self.book.views();
        let changed = self.published_epoch != Some(epoch);
        self.genome.places.publish(PlacesSnapshot {
            readiness: self.book.readiness(now_ms()),
            views,
        });
        if changed {
            self.published_epoch = Some(epoch);
            // A need may have become ready: blocked effects can drain now.
            self.genome.seats.notify.notify_waiters();
        }
        self.arm_timer(myself);
        Ok(())
    }

    /// Tells the kernel which places became ready or unready (interests listen): a
    /// completer announces itself by an event.
    fn announce_changes(&mut self) {
        let views = self.book.views();
        let mut now_states = HashMap::new();
        for view in &views {
            now_states.insert(view.name.clone(), view.state);
            let before = self.announced.get(&view.name).copied();
            if before != Some(view.state)
                && matches!(
                    view.state,
                    PlaceState::Ready | PlaceState::Unready | PlaceState::Failed
                )
                && let Some(kernel) = self.genome.kernel()
            {
                let _ = kernel.cast(KernelMsg::PlaceChanged {
                    place: view.name.clone(),
                    state: view.state.as_str().to_owned(),
                    reason: view.reason.clone(),
                });
            }
        }
        self.announced = now_states;
    }

    fn commit(&mut self) -> Result<(), ActorProcessingErr> {
        let batch = self.book.take_batch();
        if batch.is_empty() {
            return Ok(());
        }
        let store = Arc::clone(&self.genome.store);
        tokio::task::block_in_place(|| {
            store.commit(&batch)?;
            store.flush()
        })?;
        Ok(())
    }

    fn arm_timer(&mut self, myself: &ActorRef<PlacesMsg>) {
        let Some(deadline) = self.book.next_deadline() else {
            if let Some((_, timer)) = self.timer.take() {
                timer.abort();
            }
            return;
        };
        if self.timer.as_ref().is_some_and(|(at, _)| *at <= deadline) {
            return;
        }
        if let Some((_, timer)) = self.timer.take() {
            timer.abort();
        }
        let wait = Duration::from_millis(deadline.saturating_sub(now_ms()));
        let myself = myself.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = myself.cast(PlacesMsg::Tick);
        });
        self.timer = Some((deadline, task));
    }

    fn run_commands(&mut self, myself: &ActorRef<PlacesMsg>) {
        // Spawning can fail at once, which the book answers with more commands.
        for _ in 0..16 {
            let commands = self.book.take_commands();
            if commands.is_empty() {
                return;
            }
            for command in commands {
                self.run_command(myself, command);
            }
        }
    }

    fn run_command(&mut self, myself: &ActorRef<PlacesMsg>, command: PlaceCommand) {
        match command {
            PlaceCommand::Spawn {
                place,
                incarnation,
                spec,
            } => match self.spawn(myself, &place, incarnation, &spec) {
                Ok(pid) => {
                    info!(place, pid, "place started");
                    self.book.handle_spawned(now_ms(), &place, incarnation, pid);
                }
                Err(err) => {
                    warn!(place, error = %err, "place cannot start");
                    self.book
                        .handle_spawn_failed(now_ms(), &place, incarnation, &err);
                }
            },
            PlaceCommand::Stop {
                place,
                incarnation,
                pid,
                signal,
                grace_ms,
            } => {
                let Some(child) = self
                    .children
                    .get(&place)
                    .filter(|c| c.incarnation == incarnation && c.pid == pid)
                else {
                    return;
                };
                info!(place, pid, ?signal, "stopping place");
                let _ = crate::sys::kill_group(pid, crate::sys::signal_number(signal));
                let mut exited = child.exited.clone();
                tokio::spawn(async move {
                    let waited = tokio::time::timeout(
                        Duration::from_millis(grace_ms),
                        exited.wait_for(|e| *e),
                    )
                    .await;
                    if waited.is_err() {
                        let _ = crate::sys::kill_group(pid, crate::sys::SIGKILL);
                    }
                });
            }
            PlaceCommand::Probe {
                place,
                incarnation,
                check,
                pid,
                timeout_ms,
            } => {
                // For a process the node spawned, its wait task knows whether it runs.
                let own = self
                    .children
                    .get(&place)
                    .filter(|c| c.incarnation == incarnation);
                if check == Check::Process
                    && let Some(child) = own
                {
                    let alive = !*child.exited.borrow();
                    let detail = if alive {
                        format!("process {} alive", child.pid)
                    } else {
                        format!("process {} exited", child.pid)
                    };
                    let _ = myself.cast(PlacesMsg::Probed {
                        place,
                        incarnation,
                        ok: alive,
                        detail,
                    });
                    return;
                }
                let myself = myself.clone();
                tokio::spawn(async move {
                    let (ok, detail) = super::probe::run(&check, pid, timeout_ms).await;
                    let _ = myself.cast(PlacesMsg::Probed {
                        place,
                        incarnation,
                        ok,
                        detail,
                    });
                });
            }
        }
    }

    fn spawn(
        &mut self,
        myself: &ActorRef<PlacesMsg>,
        place: &str,
        incarnation: u64,
        spec: &SpawnSpec,
    ) -> Result<u32, String> {
        let log_path = log_path(&self.logs, place);
        let log =
            open_log(&log_path).map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
        let err_log = log
            .try_clone()
            .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
        let mut command = if spec.args.is_empty() {
            let mut command = tokio::process::Command::new("sh");
            command.arg("-c").arg(&spec.cmd);
            command
        } else {
            let mut command = tokio::process::Command::new(&spec.cmd);
            command.args(&spec.args);
            command
        };
        command
            .env("PALM_NODE_NAME", &self.genome.info.name)
            .env("PALM_PLACE", place)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err_log))
            .process_group(0)
            .kill_on_drop(false);
        for (key, value) in &spec.env {
            command.env(key, value);
        }
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().map_err(|err| {
            let what = if spec.args.is_empty() {
                "sh -c".to_owned()
            } else {
                format!("`{}`", spec.cmd)
            };
            let cwd = spec
                .cwd
                .as_deref()
                .map(|c| format!(" in {c}"))
                .unwrap_or_default();
            format!("cannot run {what}{cwd}: {err}")
        })?;
        let pid = child
            .id()
            .ok_or_else(|| "the process exited before it could be watched".to_owned())?;
        // Remember the process outside the store: if this node dies by kill -9, its next
        // life stops it before starting a new one (see `stop_leftovers`).
        let pid_file = pid_path(&self.logs, place);
        if let Some(ticks) = crate::sys::start_ticks(pid) {
            let _ = std::fs::write(&pid_file, format!("{pid} {ticks}\n"));
        }
        let (exited_tx, exited) = watch::channel(false);
        self.children.insert(
            place.to_owned(),
            Child {
                incarnation,
                pid,
                exited,
            },
        );
        let myself = myself.clone();
        let place = place.to_owned();
        tokio::spawn(async move {
            let status = child.wait().await;
            let _ = std::fs::remove_file(&pid_file);
            let _ = exited_tx.send(true);
            use std::os::unix::process::ExitStatusExt;
            let exit = match status {
                Ok(status) => Exit {
                    code: status.code(),
                    signal: status.signal(),
                    // What a failing process said last explains its exit; after a
                    // signal or a clean exit it is only noise.
                    detail: status
                        .code()
                        .filter(|code| *code != 0)
                        .and_then(|_| last_log_line(&log_path)),
                },
                Err(err) => Exit {
                    code: None,
                    signal: None,
                    detail: Some(format!("cannot wait for it: {err}")),
                },
            };
            let _ = myself.cast(PlacesMsg::Exited {
                place,
                incarnation,
                exit,
            });
        });
        Ok(pid)
    }
}

/// Refuses to adopt what cannot be reached now (a typo in an address should be an error,
/// not a place that never gets ready).
async fn unreachable_adopt(spec: &PlaceSpec) -> Option<Response> {
    let Source::Adopt(adopt) = &spec.source else {
        return None;
    };
    let check = match adopt {
        Adopt::Pid(_) => Check::Process,
        Adopt::Tcp(addr) => Check::Tcp(addr.clone()),
        Adopt::Http(url) => Check::Http(url.clone()),
    };
    let pid = match adopt {
        Adopt::Pid(pid) => Some(*pid),
        _ => None,
    };
    let (ok, detail) = super::probe::run(&check, pid, spec.probe.timeout_ms).await;
    (!ok).then(|| {
        Response::err(
            ErrorBody::invalid(
                "unreachable",
                format!(
                    "cannot adopt `{}`: {} ({})",
                    spec.name,
                    spec.source.describe(),
                    detail
                ),
            )
            .hint("start the service first, or check the address"),
        )
    })
}

/// The JSON of node events (`palm places events`), the newest `limit`, optionally of one
/// place only.
pub fn events_json(
    events: Vec<palm_actors::place::NodeEvent>,
    place: Option<&str>,
    limit: usize,
) -> Vec<Value> {
    let mut selected: Vec<Value> = events
        .into_iter()
        .filter(|event| match (&event.kind, place) {
            (_, None) => true,
            (NodeEventKind::PlaceChanged { place: p, .. }, Some(want))
            | (NodeEventKind::PlaceRemoved { place: p }, Some(want)) => p == want,
        })
        .map(|event| {
            let mut value = json!({ "seq": event.seq, "at": event.at });
            let object = value.as_object_mut().expect("an object");
            match event.kind {
                NodeEventKind::PlaceChanged {
                    place,
                    from,
                    to,
                    reason,
                } => {
                    object.insert("kind".into(), json!("place_changed"));
                    object.insert("place".into(), json!(place));
                    object.insert("from".into(), json!(from));
                    object.insert("to".into(), json!(to));
                    object.insert("reason".into(), json!(reason));
                }
                NodeEventKind::PlaceRemoved { place } => {
                    object.insert("kind".into(), json!("place_removed"));
                    object.insert("place".into(), json!(place));
                }
            }
            value
        })
        .collect();
    let skip = selected.len().saturating_sub(limit);
    selected.drain(..skip);
    selected
}

/// Where a spawned place's pid and start time are kept while it runs.
fn pid_path(logs: &Path, place: &str) -> PathBuf {
    logs.join(format!("{}.pid", place.replace('/', "__")))
}

/// Stops processes spawned by a previous life of this node that are still running (the
/// node was killed without stopping them). A pid file names a process by pid *and* start
/// time, so a reused pid is never signalled. Each gets SIGTERM, then SIGKILL.
async fn stop_leftovers(logs: &Path) {
    let Ok(entries) = std::fs::read_dir(logs) else {
        return;
    };
    let mut leftovers = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "pid") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        let mut fields = text.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(pid)), Some(Ok(ticks))) = (fields.next(), fields.next()) else {
            continue;
        };
        let Ok(pid) = u32::try_from(pid) else {
            continue;
        };
        if crate::sys::start_ticks(pid) == Some(ticks) {
            warn!(pid, file = %path.display(), "stopping a place process left by a previous run");
            let _ = crate::sys::kill_group(pid, crate::sys::SIGTERM);
            leftovers.push((pid, ticks));
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(SHUTDOWN_SLACK_MS);
    while leftovers
        .iter()
        .any(|(pid, ticks)| crate::sys::start_ticks(*pid) == Some(*ticks))
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (pid, ticks) in leftovers {
        if crate::sys::start_ticks(pid) == Some(ticks) {
            let _ = crate::sys::kill_group(pid, crate::sys::SIGKILL);
        }
    }
}

/// Where a place's output goes (`JOB/NAME` places get `JOB__NAME.log`).
pub fn log_path(logs: &Path, place: &str) -> PathBuf {
    logs.join(format!("{}.log", place.replace('/', "__")))
}

fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if std::fs::metadata(path).is_ok_and(|m| m.len() > LOG_BYTES_MAX) {
        let _ = std::fs::rename(path, path.with_extension("log.1"));
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// The last non-empty line of a place's log (what it said before it exited).
fn last_log_line(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(2048))).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    text.lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(|line| line.chars().take(200).collect())
}
