//! The desk: answers control requests against a job path and its store.
//!
//! The kernel actor owns a desk and commits what it writes; commands that run without a
//! node use a desk directly, and commit only when the request is meant to change
//! something (a read-only command leaves the store exactly as it found it).

use super::{NodeInfo, now_ms};
use palm_actors::job::{ApplyError, JobStatus};
use palm_actors::path::{FlowRef, JobError, JobPath, JobView, SubmitError, SubmitRequest};
use palm_actors::place::Blocked;
use palm_actors::store::Store;
use palm_api::protocol::{ErrorBody, FlowArg, Request, Response};
use serde_json::{Value, json};
use std::sync::Arc;

/// How a request is answered.
pub enum Answer {
    /// A change: answer once the writes it caused are durable.
    AfterCommit(Response),
    /// A read: evaluate it with [`Desk::read`] once pending writes are durable, so it
    /// sees every change acknowledged before it and nothing a crash could take back.
    Read(Request),
    /// Answer when the job settles (terminal or waiting).
    Watch(String),
}

/// Live facts only a running node has (seats, commits); absent for an offline desk.
pub struct Live {
    /// The seats' report.
    pub seats: Value,
    /// Durable commits made.
    pub commits: u64,
    /// The links' board (`[]` for an all-in-one node).
    pub links: Value,
    /// The tree organ's identity (`null` for an all-in-one node).
    pub tree: Value,
}

/// See the module docs.
pub struct Desk {
    /// The job path.
    pub path: JobPath,
    /// Its store.
    pub store: Arc<dyn Store>,
    /// The node answering.
    pub info: NodeInfo,
    /// The running node's place board (absent for an offline desk: nothing runs then, so
    /// nothing is blocked).
    pub places: Option<Arc<super::Genome>>,
}

impl Desk {
    /// A request naming node `node`, which this one is not, that reached this desk: no
    /// tree of this node knows that name (a running node of a tree sends it there).
    fn not_this_node(&self, node: &str) -> ErrorBody {
        ErrorBody::invalid(
            "unknown_node",
            format!(
                "node `{node}` is not this node (`{}`), and no tree of this node knows it",
                self.info.name
            ),
        )
        .hint("name a root or realm of the tree this node belongs to; `palm tree` lists them")
    }
}

fn invalid(kind: &str, err: impl ToString) -> Response {
    Response::err(ErrorBody::invalid(kind, err.to_string()))
}

/// A `kv` write (`put` or `delete`) into the pending batch; anything else is refused.
pub fn kv_write(path: &mut JobPath, action: &str, key: String, value: &Value) -> Response {
    match action {
        "put" => match path.kv_put(&key, value) {
            Ok(()) => Response::ok(json!({"key": key, "stored": true})),
            Err(err) => invalid("invalid_input", err),
        },
        "delete" => {
            path.kv_delete(&key);
            Response::ok(json!({"key": key, "deleted": true}))
        }
        other => invalid(
            "invalid_input",
            format!("unknown kv action `{other}`; use get, put, delete or list"),
        ),
    }
}

/// Maps a job error to a response.
pub fn job_error(err: JobError) -> Response {
    match err {
        JobError::UnknownJob(job) => Response::err(
            ErrorBody::invalid("unknown_job", format!("unknown job `{job}`"))
                .hint("`palm jobs` lists the jobs of this node"),
        ),
        JobError::Refused(ApplyError::NotWaitingOn { .. }) => invalid("not_waiting", err),
        JobError::Refused(ApplyError::InvalidInput { .. }) => invalid("invalid_input", err),
        JobError::Refused(ApplyError::Terminal { .. }) => invalid("job_finished", err),
        JobError::Refused(other) => invalid("refused", other),
        JobError::Store(store) => Response::err(ErrorBody::failure("store", store.to_string())),
    }
}

/// The JSON of `palm status`.
pub fn view_json(view: &JobView) -> Value {
    let mut value = serde_json::to_value(view).unwrap_or(Value::Null);
    if let Some(waiting) = value.get_mut("waiting_on").and_then(Value::as_array_mut) {
        for wait in waiting {
            if let Some(object) = wait.as_object_mut() {
                object.remove("park");
            }
        }
    }
    value
}

/// Terminal or waiting: nothing moves the job without someone acting.
pub fn settled(status: JobStatus) -> bool {
    status.is_settled()
}

impl Desk {
    /// The status view of a job.
    pub fn view(&mut self, job: &str) -> Response {
        match self.path.job_view(&*self.store, job) {
            Ok(Some(view)) => {
                let mut value = view_json(&view);
                if let Some(object) = value.as_object_mut() {
                    object.insert("blocked_on".into(), json!(self.blocked_on(job)));
                }
                Response::ok(value)
            }
            Ok(None) => job_error(JobError::UnknownJob(job.to_owned())),
            Err(err) => Response::err(ErrorBody::failure("store", err.to_string())),
        }
    }

    /// The needs (places, capabilities) that hold back the job's ready effects.
    pub fn blocked_on(&self, job: &str) -> Vec<Blocked> {
        let Some(genome) = &self.places else {
            return Vec::new();
        };
        let snapshot = genome.places.snapshot();
        let mut blocked: Vec<Blocked> = Vec::new();
        for record in self.path.effects().values() {
            if record.job != job || record.claim.is_some() {
                continue;
            }
            let requirements = record.request.requirements();
            for need in snapshot
                .readiness
                .blocked(job, &requirements, record.created_at)
            {
                if !blocked.iter().any(|b| b.place == need.place) {
                    blocked.push(need);
                }
            }
        }
        blocked.sort_by(|a, b| a.place.cmp(&b.place));
        blocked
    }

    /// Places requests without a running node: the stored runtime places can be listed
    /// (as not running); changing them needs the node that runs them.
    fn places_offline(&self, request: &Request) -> Response {
        match request {
            Request::Places => {
                match palm_actors::place::PlaceBook::open(&*self.store, Vec::new()) {
                    Ok((_, specs, _)) => {
                        let places: Vec<Value> = specs
                        .iter()
                        .map(|spec| {
                            json!({
                                "name": spec.name,
                                "kind": match spec.source { palm_actors::place::Source::Spawn(_) => "spawn", _ => "adopt" },
                                "target": spec.source.describe(),
                                "state": "stopped",
                                "reason": "no node is running",
                                "probe": spec.probe.check.describe(),
                                "capabilities": spec.capabilities,
                                "owner": "node",
                                "origin": "runtime",
                            })
                        })
                        .collect();
                        Response::ok(json!({ "places": places, "running": false }))
                    }
                    Err(err) => Response::err(ErrorBody::failure("store", err.to_string())),
                }
            }
            Request::PlacesEvents { place, limit } => {
                match palm_actors::place::read_node_events(&*self.store, usize::MAX) {
                    Ok(events) => Response::ok(json!({
                        "events": super::places::events_json(
                            events,
                            place.as_deref(),
                            limit.unwrap_or(super::places::EVENTS_DEFAULT),
                        )
                    })),
                    Err(err) => Response::err(ErrorBody::failure("store", err.to_string())),
                }
            }
            _ => Response::err(
                ErrorBody::failure(
                    "no_node",
                    format!(
                        "no node is running on {}: places live in a running node",
                        self.info.data.display()
                    ),
                )
                .hint("start one with `palm up`"),
            ),
        }
    }

    /// Answers one request. `accepting` is false while the node shuts down.
    pub fn answer(&mut self, request: Request, accepting: bool) -> Answer {
        let now = now_ms();
        let store = Arc::clone(&self.store);
        let response = match request {
            read @ (Request::Ping
            | Request::Status { .. }
            | Request::Jobs { .. }
            | Request::Waits { .. }
            | Request::Inspect { .. }
            | Request::FlowsList
            | Request::FlowsShow { .. }
            | Request::Vitality
            | Request::Interests) => return Answer::Read(read),
            Request::Kv { action, key, value } if action == "get" || action == "list" => {
                return Answer::Read(Request::Kv { action, key, value });
            }
            Request::Kv { action, key, value } => kv_write(&mut self.path, &action, key, &value),
            Request::Emit { event, data } => {
                if event.is_empty() {
                    return Answer::AfterCommit(invalid("invalid_input", "an event needs a name"));
                }
                let matched = self.path.emit(now, &event, data);
                Response::ok(json!({"event": event, "matched": matched}))
            }
            Request::JobsGc {
                cursor,
                journal_ms,
                summary_ms,
                budget,
            } => {
                use palm_actors::path::retention::{GC_BUDGET_DEFAULT, GC_BUDGET_MAX, Retention};
                let retention = Retention {
                    journal_ms,
                    summary_ms,
                };
                let budget = budget.unwrap_or(GC_BUDGET_DEFAULT).min(GC_BUDGET_MAX);
                match self
                    .path
                    .collect(&*store, now, retention, cursor.as_deref(), budget)
                {
                    Ok(step) => Response::ok(serde_json::to_value(step).unwrap_or_default()),
                    Err(err) => Response::err(ErrorBody::failure("store", err.to_string())),
                }
            }
            Request::Tree => {
                // Only reached offline: a running node answers from its tree organ.
                return Answer::AfterCommit(Response::ok(json!({
                    "node": self.info.name, "role": self.info.profile, "running": false,
                    "tree": {"name": self.info.name, "self": true, "children": []},
                })));
            }
            places @ (Request::Places
            | Request::PlacesAdd { .. }
            | Request::PlacesRemove { .. }
            | Request::PlacesRestart { .. }
            | Request::PlacesEvents { .. }) => {
                // Only reached offline: a running node routes these to its places organ.
                return Answer::AfterCommit(self.places_offline(&places));
            }
            Request::Submit {
                flow,
                input,
                args,
                started_by,
                node,
            } => {
                // A running node of a tree sends a submit naming another node there; one
                // that reaches this desk is here, or names a node out of reach.
                if let Some(node) = node
                    && node != self.info.name
                {
                    return Answer::AfterCommit(Response::err(self.not_this_node(&node)));
                }
                if !accepting {
                    return Answer::AfterCommit(Response::err(ErrorBody::failure(
                        "shutting_down",
                        "the node is shutting down",
                    )));
                }
                let flow = match flow {
                    FlowArg::Stored { name, revision } => FlowRef::Stored { name, revision },
                    FlowArg::Source { source, origin } => FlowRef::Source { source, origin },
                };
                let mut pairs = Vec::with_capacity(args.len());
                for arg in args {
                    match arg.split_once('=') {
                        Some((key, value)) if !key.is_empty() => {
                            pairs.push((key.to_owned(), value.to_owned()))
                        }
                        _ => {
                            return Answer::AfterCommit(invalid(
                                "invalid_input",
                                format!("input `{arg}` is not KEY=VALUE"),
                            ));
                        }
                    }
                }
                match self.path.submit(
                    now,
                    SubmitRequest {
                        flow,
                        input,
                        args: pairs,
                        started_by,
                    },
                    &*store,
                ) {
                    Ok(submitted) => Response::ok(json!({
                        "job": submitted.job,
                        "status": submitted.status,
                        "flow": submitted.flow,
                        "revision": submitted.revision,
                    })),
                    Err(
                        err @ (SubmitError::UnknownFlow { .. }
                        | SubmitError::UnknownRevision { .. }),
                    ) => invalid("unknown_flow", err),
                    Err(err @ SubmitError::InvalidInput(_)) => invalid("invalid_input", err),
                    Err(err @ (SubmitError::Definition(_) | SubmitError::Compile(_))) => {
                        invalid("invalid_flow", err)
                    }
                    Err(err @ SubmitError::Store(_)) => {
                        Response::err(ErrorBody::failure("store", err.to_string()))
                    }
                    Err(err @ SubmitError::AlreadyRunning { .. }) => {
                        let job = match &err {
                            SubmitError::AlreadyRunning { job, .. } => job.clone(),
                            _ => String::new(),
                        };
                        let mut body = ErrorBody::failure("already_running", err.to_string()).hint(
                            format!("`palm status {job}` shows it; `palm cancel {job}` stops it"),
                        );
                        body.exit = palm_api::exit::Code::AlreadyRunning as u8;
                        Response::err(body)
                    }
                }
            }
            Request::Continue { job, key, input } => {
                match self.path.continue_job(now, &job, &key, input, &*store) {
                    Ok(status) => Response::ok(json!({"job": job, "status": status})),
                    Err(err) => job_error(err),
                }
            }
            Request::Cancel { job, reason } => match self.path.cancel(now, &job, reason, &*store) {
                Ok(status) => Response::ok(json!({"job": job, "status": status})),
                Err(err) => job_error(err),
            },
            Request::Retry {
                job,
                from,
                revision,
            } => {
                use palm_actors::path::retry::RetryError;
                if !accepting {
                    return Answer::AfterCommit(Response::err(ErrorBody::failure(
                        "shutting_down",
                        "the node is shutting down",
                    )));
                }
                match self.path.retry_from(now, &*store, &job, &from, revision) {
                    Ok(retried) => {
                        Response::ok(serde_json::to_value(retried).unwrap_or(Value::Null))
                    }
                    Err(err @ RetryError::UnknownJob(_)) => Response::err(
                        ErrorBody::invalid("unknown_job", err.to_string())
                            .hint("`palm jobs` lists the jobs"),
                    ),
                    Err(err @ RetryError::NotEnded { .. }) => Response::err(
                        ErrorBody::failure("not_ended", err.to_string())
                            .hint(format!("`palm cancel {job}` ends it")),
                    ),
                    Err(err @ RetryError::NeverRan { .. }) => {
                        Response::err(ErrorBody::invalid("invalid_input", err.to_string()).hint(
                            format!("`palm inspect {job}` shows its tree and node paths"),
                        ))
                    }
                    Err(
                        err @ (RetryError::NoJournal(_)
                        | RetryError::Diverges { .. }
                        | RetryError::Submit(_)),
                    ) => invalid("not_retryable", err),
                    Err(err @ RetryError::Store(_)) => {
                        Response::err(ErrorBody::failure("store", err.to_string()))
                    }
                }
            }
            Request::Wait { job, timeout_ms } => {
                let settled_now = self
                    .path
                    .active_job(&job)
                    .is_none_or(|core| settled(core.status()));
                return if settled_now {
                    Answer::Read(Request::Wait { job, timeout_ms })
                } else {
                    Answer::Watch(job)
                };
            }
            Request::TokenCreate { .. } | Request::TokenRevoke { .. } => {
                // Answered by the tree organ (`crate::tokens`), never by the job path.
                return Answer::AfterCommit(Response::err(ErrorBody::failure(
                    "internal",
                    "token requests are not answered by the kernel",
                )));
            }
            Request::FlowsMigrate {
                name,
                to,
                jobs,
                dry_run,
            } => match self.path.migrate(now, &*store, &name, to, &jobs, dry_run) {
                Ok(report) => Response::ok(serde_json::to_value(report).unwrap_or(Value::Null)),
                Err(
                    err @ (SubmitError::UnknownFlow { .. } | SubmitError::UnknownRevision { .. }),
                ) => invalid("unknown_flow", err),
                Err(err @ SubmitError::Store(_)) => {
                    Response::err(ErrorBody::failure("store", err.to_string()))
                }
                Err(err) => invalid("invalid_input", err),
            },
            Request::FlowsAdd { source, origin } => {
                match self.path.add_definition(now, &source, &origin) {
                    Ok(added) => Response::ok(serde_json::to_value(added).unwrap_or(Value::Null)),
                    Err(err) => invalid("invalid_flow", err),
                }
            }
        };
        Answer::AfterCommit(response)
    }

    /// Answers a read-only request from committed state.
    pub fn read(&mut self, request: Request, live: Option<Live>) -> Response {
        match request {
            Request::Ping => Response::ok(self.info.to_json()),
            Request::Status { job } | Request::Wait { job, .. } => self.view(&job),
            Request::Jobs {
                node: Some(node), ..
            } if node != self.info.name => Response::err(self.not_this_node(&node)),
            Request::Jobs { status, limit, .. } => self.jobs(status, limit),
            Request::Waits { limit, offset } => self.waits(limit, offset),
            Request::Inspect { job } => self.inspect(&job),
            Request::FlowsList => {
                let flows: Vec<Value> = self
                    .path
                    .definitions()
                    .iter()
                    .map(|d| {
                        json!({
                            "name": d.record.name,
                            "revision": d.record.revision,
                            "description": d.definition.description,
                            "tags": d.definition.tags,
                            "authority": d.definition.authority.as_str(),
                            "reaches": d.definition.flows_reached(),
                            "inputs": d.definition.input.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
                            "origin": d.record.origin,
                            "added_at": d.record.added_at,
                        })
                    })
                    .collect();
                Response::ok(json!({ "flows": flows }))
            }
            Request::FlowsShow { name, revision } => self.flow(&name, revision),
            Request::Vitality => Response::ok(self.vitality(live)),
            Request::Interests => {
                let interests = self.path.interests();
                let pending: Vec<Value> = interests
                    .pending()
                    .map(|i| {
                        json!({
                            "id": i.id, "flow": i.flow, "cause": i.cause, "due_at": i.due_at,
                            "coalesce_key": i.coalesce, "matches": i.matches, "depth": i.depth,
                        })
                    })
                    .collect();
                Response::ok(json!({ "interests": interests.views(), "pending": pending }))
            }
            Request::Kv { action, key, .. } if action == "get" => {
                match self.path.kv_get(&*self.store, &key) {
                    Ok(value) => {
                        Response::ok(json!({"key": key, "found": value.is_some(), "value": value}))
                    }
                    Err(err) => Response::err(ErrorBody::failure("store", err.to_string())),
                }
            }
            Request::Kv { key, .. } => match self.path.kv_list(&*self.store, &key, 1000) {
                Ok(keys) => Response::ok(json!({"prefix": key, "keys": keys})),
                Err(err) => Response::err(ErrorBody::failure("store", err.to_string())),
            },
            change => Response::err(ErrorBody::failure(
                "internal",
                format!("{change:?} is not a read"),
            )),
        }
    }

    fn jobs(&mut self, status: Option<String>, limit: Option<usize>) -> Response {
        let filter = match status.as_deref() {
            None => None,
            Some(text) => match JobStatus::parse(text) {
                Some(status) => Some(status),
                None => {
                    return invalid(
                        "invalid_input",
                        format!(
                            "unknown status `{text}`; use pending, running, waiting, succeeded, failed or cancelled"
                        ),
                    );
                }
            },
        };
        match self
            .path
            .list_jobs(&*self.store, filter, limit.unwrap_or(usize::MAX))
        {
            Ok(records) => {
                let jobs: Vec<Value> = records
                    .iter()
                    .map(|r| {
                        json!({
                            "job": r.id, "flow": r.flow, "status": r.status,
                            "revision": r.revision, "created_at": r.created_at,
                            "updated_at": r.updated_at, "waiting": r.waiting,
                            "error": r.error, "parent": r.parent.as_ref().map(|p| &p.job),
                        })
                    })
                    .collect();
                Response::ok(json!({ "jobs": jobs }))
            }
            Err(err) => Response::err(ErrorBody::failure("store", err.to_string())),
        }
    }

    fn waits(&mut self, limit: Option<usize>, offset: Option<usize>) -> Response {
        // Parked jobs in memory are read from there; dormant ones (left on disk at boot)
        // are read from the store, only those on the page asked for.
        let mut waiting: Vec<(u64, String)> = self
            .path
            .active_jobs()
            .filter(|core| core.status() == JobStatus::Waiting)
            .map(|core| core.id())
            .chain(self.path.dormant_jobs())
            .map(|id| {
                // Ids are `tag-N`: N is the order of submission.
                let n = id
                    .rsplit_once('-')
                    .and_then(|(_, n)| n.parse::<u64>().ok())
                    .unwrap_or(u64::MAX);
                (n, id.to_owned())
            })
            .collect();
        waiting.sort();
        let total = waiting.len();
        let store = Arc::clone(&self.store);
        let mut jobs = Vec::new();
        for (_, id) in waiting
            .iter()
            .skip(offset.unwrap_or(0))
            .take(limit.unwrap_or(usize::MAX))
        {
            match self.path.job_view(&*store, id) {
                Ok(Some(view)) => jobs.push(view_json(&view)),
                Ok(None) => {}
                Err(err) => return Response::err(ErrorBody::failure("store", err.to_string())),
            }
        }
        Response::ok(json!({ "jobs": jobs, "total": total }))
    }

    fn inspect(&mut self, job: &str) -> Response {
        let store = Arc::clone(&self.store);
        match self.path.job_view(&*store, job) {
            Ok(Some(view)) => match self.path.journal(&*store, job) {
                Ok(events) => {
                    let events: Vec<Value> = events.iter().map(|e| e.to_json()).collect();
                    let agent_runs = palm_agents::runs::runs_in_journal(&self.info.data, &events);
                    Response::ok(json!({
                        "job": view.job,
                        "flow": view.flow,
                        "revision": view.revision,
                        "status": view.status,
                        "error": view.error,
                        "events": events,
                        "tree": view.tree,
                        "agent_runs": agent_runs,
                    }))
                }
                Err(err) => Response::err(ErrorBody::failure("store", err.to_string())),
            },
            Ok(None) => job_error(JobError::UnknownJob(job.to_owned())),
            Err(err) => Response::err(ErrorBody::failure("store", err.to_string())),
        }
    }

    fn flow(&self, name: &str, revision: Option<u32>) -> Response {
        let Some(stored) = self.path.definition(name, revision) else {
            return invalid(
                "unknown_flow",
                match (revision, self.path.definition(name, None)) {
                    (Some(r), Some(latest)) => {
                        format!(
                            "flow `{name}` has no revision {r} (latest is {})",
                            latest.record.revision
                        )
                    }
                    _ => format!("unknown flow `{name}`"),
                },
            );
        };
        let revisions: Vec<u32> = self
            .path
            .revisions(name)
            .iter()
            .map(|d| d.record.revision)
            .collect();
        let inputs: Vec<Value> = stored
            .definition
            .input
            .iter()
            .map(|f| {
                json!({
                    "name": f.name,
                    "schema": f.schema.source(),
                    "default": f.default.as_ref().map(|d| &d.0),
                    "required": f.default.is_none(),
                })
            })
            .collect();
        Response::ok(json!({
            "name": stored.record.name,
            "revision": stored.record.revision,
            "revisions": revisions,
            "description": stored.definition.description,
            "input": inputs,
            "origin": stored.record.origin,
            "added_at": stored.record.added_at,
            "source": stored.record.source,
        }))
    }

    /// Ready (unclaimed) effects counted by each need they wait on.
    fn queue_by_need(&self) -> serde_json::Map<String, Value> {
        let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
        for record in self.path.effects().values() {
            if record.claim.is_some() {
                continue;
            }
            for need in record.request.requirements() {
                *counts.entry(need).or_default() += 1;
            }
        }
        counts.into_iter().map(|(k, v)| (k, json!(v))).collect()
    }

    /// Every need that holds back ready work, with what it holds: the node-wide "no seat
    /// can take this" statement (vitality's `queue.blocked`, the Explorer's places page).
    /// Each entry: `{need, reason, since, effects, jobs}` (`jobs`: the first few ids).
    fn blocked_by_need(&self) -> Vec<Value> {
        /// Job ids named per need.
        const JOBS_NAMED: usize = 5;
        let Some(genome) = &self.places else {
            return Vec::new();
        };
        let snapshot = genome.places.snapshot();
        let mut by_need: std::collections::BTreeMap<String, (Blocked, u64, Vec<String>)> =
            Default::default();
        for record in self.path.effects().values() {
            if record.claim.is_some() {
                continue;
            }
            let requirements = record.request.requirements();
            for need in snapshot
                .readiness
                .blocked(&record.job, &requirements, record.created_at)
            {
                let entry = by_need
                    .entry(need.place.clone())
                    .or_insert_with(|| (need.clone(), 0, Vec::new()));
                entry.0.since = entry.0.since.min(need.since);
                entry.1 += 1;
                if entry.2.len() < JOBS_NAMED && !entry.2.contains(&record.job) {
                    entry.2.push(record.job.clone());
                }
            }
        }
        by_need
            .into_values()
            .map(|(blocked, effects, mut jobs)| {
                jobs.sort();
                json!({
                    "need": blocked.place, "reason": blocked.reason, "since": blocked.since,
                    "effects": effects, "jobs": jobs,
                })
            })
            .collect()
    }

    fn vitality(&self, live: Option<Live>) -> Value {
        let counts = self.path.count_jobs(&*self.store).unwrap_or_default();
        let by_status: serde_json::Map<String, Value> = counts
            .iter()
            .map(|(status, n)| (status.to_string(), json!(n)))
            .collect();
        let effects = self.path.effects();
        let leases = effects.values().filter(|r| r.claim.is_some()).count();
        let timers = effects
            .values()
            .filter(|r| matches!(r.request, palm_actors::bt::EffectRequest::Timer { .. }))
            .count();
        let mut vitality = self.info.to_json();
        let object = vitality.as_object_mut().expect("node info is an object");
        object.insert("running".into(), json!(live.is_some()));
        object.insert(
            "uptime_ms".into(),
            json!(now_ms().saturating_sub(self.info.started_at)),
        );
        let (seats, commits, links, tree) = match live {
            Some(live) => (live.seats, json!(live.commits), live.links, live.tree),
            None => (
                json!({"total": 0, "busy": 0, "idle": 0, "running": []}),
                Value::Null,
                crate::journal::links_from_journal(&*self.store),
                Value::Null,
            ),
        };
        object.insert("seats".into(), seats);
        object.insert(
            "jobs".into(),
            json!({
                "active": self.path.active_jobs().count() + self.path.dormant_jobs().count(),
                "dormant": self.path.dormant_jobs().count(),
                "by_status": by_status,
            }),
        );
        object.insert(
            "queue".into(),
            json!({
                "ready": self.path.ready_len(),
                "by_need": self.queue_by_need(),
                "blocked": self.blocked_by_need(),
                "timers": timers,
                "leases": leases,
                "next_deadline": self.path.next_deadline(),
            }),
        );
        object.insert("store".into(), json!(self.store.describe()));
        object.insert("commits".into(), commits);
        object.insert(
            "process".into(),
            json!({ "rss_bytes": crate::sys::rss_bytes(), "cpu_ms": crate::sys::cpu_ms() }),
        );
        object.insert("links".into(), links);
        object.insert("tree".into(), tree);
        let projection = self
            .places
            .as_ref()
            .and_then(|genome| genome.tree.get())
            .map_or_else(
                || json!({"of": null, "valid": true, "home_unreachable_since": null}),
                |tree| tree.projection_json(),
            );
        object.insert("projection".into(), projection);
        let refused = self
            .places
            .as_ref()
            .and_then(|genome| genome.tree.get())
            .map_or_else(
                || json!({"count": 0, "latest": []}),
                |tree| tree.refused_json(),
            );
        object.insert("refused".into(), refused);
        object.insert(
            "link_events".into(),
            crate::journal::recent_json(&*self.store),
        );
        let places: Vec<Value> = match &self.places {
            Some(genome) => genome
                .places
                .snapshot()
                .views
                .iter()
                .map(super::places::view_json)
                .collect(),
            None => Vec::new(),
        };
        object.insert("places".into(), json!(places));
        vitality
    }
}
