//! Durable jobs: the journal, its events, and the fold that turns them into job state.
//!
//! A job's journal is append-only. Some events are *inputs* (facts from outside: submitted,
//! an effect completed, a continue, a timer fired, a cancel); the rest are *derived*: what
//! the tree did in answer (effects requested or cancelled, waits parked, the job ended).
//! Job state is the fold of the journal: [`JobCore::replay`] re-applies every input to a
//! fresh engine and checks that it derives exactly the events that were recorded. A
//! mismatch is a [`ReplayError::Diverged`], never silently accepted, so a restarted job is
//! provably the job that was running.
//!
//! This module knows one job. Many jobs, effects queues, leases and the store are
//! `crate::path`'s business.

use crate::bt::{
    Command, Delivery, EffectRequest, Engine, NodeView, Outcome, Parked, Program, Status,
};
use crate::json::Json;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

/// Bound on ticks within one step: a tree that loops without waiting on anything yields
/// after this many and is resumed by its host, so one job cannot starve the others.
pub const STEP_TICKS_MAX: u32 = 1_000;

/// Lifecycle of a job. Terminal states are final.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Accepted, not yet ticked.
    Pending,
    /// Work in flight.
    Running,
    /// Parked: only a continue can move it.
    Waiting,
    /// Ended well.
    Succeeded,
    /// Ended badly.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl JobStatus {
    /// True for succeeded, failed and cancelled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled
        )
    }

    /// Terminal or waiting: nothing moves the job without someone acting (what a
    /// `wait` waits for).
    pub fn is_settled(self) -> bool {
        self.is_terminal() || self == JobStatus::Waiting
    }

    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Running => "running",
            JobStatus::Waiting => "waiting",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// Parses a lower-case name.
    pub fn parse(text: &str) -> Option<JobStatus> {
        Some(match text {
            "pending" => JobStatus::Pending,
            "running" => JobStatus::Running,
            "waiting" => JobStatus::Waiting,
            "succeeded" => JobStatus::Succeeded,
            "failed" => JobStatus::Failed,
            "cancelled" => JobStatus::Cancelled,
            _ => return None,
        })
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A child job's link to the effect of its parent that started it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// Parent job id.
    pub job: String,
    /// The parent's `spawn` effect key.
    pub effect: String,
    /// Whether the parent waits for this job to finish.
    pub wait: bool,
    /// Spawn depth: 1 for a child of a submitted job, 2 for a grandchild...
    pub depth: u32,
}

/// A journal entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the job's journal, from 1.
    pub seq: u64,
    /// When (ms since the Unix epoch, as the host's clock said).
    pub at: u64,
    /// What happened.
    pub kind: EventKind,
}

/// What happened. Inputs first, then derived events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Input: the job was accepted.
    Submitted {
        /// Flow name.
        flow: String,
        /// Pinned revision.
        revision: u32,
        /// Pinned revisions of inlined subflows.
        subflows: Vec<(String, u32)>,
        /// Prepared input (defaults applied).
        input: Json,
        /// The parent job, for a spawned child.
        parent: Option<ParentLink>,
        /// What started it, when it started itself (an interest, a `palm` call).
        started_by: Option<crate::interest::StartedBy>,
    },
    /// Input: an effect finished.
    EffectCompleted {
        /// Idempotency key.
        key: String,
        /// What it produced.
        outcome: Outcome,
        /// Node that ran it.
        node: Option<String>,
    },
    /// Input: a parked wait was continued.
    Continued {
        /// The wait's key.
        key: String,
        /// The input (validated against the wait's schema).
        input: Json,
    },
    /// Input: a timer fired.
    TimerFired {
        /// Timer effect key.
        key: String,
    },
    /// Input: someone asked to cancel.
    CancelRequested {
        /// Why, if they said.
        reason: Option<String>,
    },
    /// Input: the host resumes a job that yielded its tick budget.
    Resumed,
    /// Derived: an effect was requested.
    EffectRequested {
        /// Idempotency key `job/path/attempt`.
        key: String,
        /// Node path.
        path: String,
        /// What to do.
        request: EffectRequest,
    },
    /// Derived: a halted node gave up an effect.
    EffectCancelled {
        /// Its key.
        key: String,
    },
    /// Derived: a wait parked.
    Parked(Parked),
    /// Derived: a parked wait was halted.
    Unparked {
        /// Wait key.
        key: String,
        /// Park id.
        park: String,
    },
    /// Derived: the tree spent its tick budget and must be resumed.
    Yielded,
    /// Derived: the job ended well.
    Succeeded,
    /// Derived: the job ended badly.
    Failed {
        /// Why.
        error: String,
    },
    /// Derived: the job was cancelled.
    Cancelled,
    /// Input: the job moved to another revision of its flow (`palm flows migrate`). Its
    /// whole history replays under the new revision exactly as recorded (checked before
    /// this is written), so replay runs the whole journal under the revision of the last
    /// `migrated` event. Last in the enum: stored discriminants of the others stay.
    Migrated {
        /// The revision it ran before.
        from: u32,
        /// The revision it runs now.
        revision: u32,
        /// Pinned revisions of inlined subflows under the new revision.
        subflows: Vec<(String, u32)>,
    },
}

impl EventKind {
    /// True for events that come from outside the job.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            EventKind::Submitted { .. }
                | EventKind::EffectCompleted { .. }
                | EventKind::Continued { .. }
                | EventKind::TimerFired { .. }
                | EventKind::CancelRequested { .. }
                | EventKind::Resumed
                | EventKind::Migrated { .. }
        )
    }

    /// The snake_case kind name.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Submitted { .. } => "submitted",
            EventKind::EffectCompleted { .. } => "effect_completed",
            EventKind::Continued { .. } => "continued",
            EventKind::TimerFired { .. } => "timer_fired",
            EventKind::CancelRequested { .. } => "cancel_requested",
            EventKind::Resumed => "resumed",
            EventKind::EffectRequested { .. } => "effect_requested",
            EventKind::EffectCancelled { .. } => "effect_cancelled",
            EventKind::Parked(_) => "parked",
            EventKind::Unparked { .. } => "unparked",
            EventKind::Yielded => "yielded",
            EventKind::Succeeded => "succeeded",
            EventKind::Failed { .. } => "failed",
            EventKind::Cancelled => "cancelled",
            EventKind::Migrated { .. } => "migrated",
        }
    }

    /// A short line for people: the kind and what it names (`effect_requested run
    /// "make" at 0.1`, `parked approve`), for reports of where two histories part.
    pub fn describe(&self) -> String {
        match self {
            EventKind::EffectRequested { key, path, request } => {
                format!("effect_requested {} at {path} ({key})", request.kind_name())
            }
            EventKind::EffectCompleted { key, .. }
            | EventKind::EffectCancelled { key }
            | EventKind::TimerFired { key } => format!("{} {key}", self.name()),
            EventKind::Parked(parked) => format!("parked on `{}`", parked.key),
            EventKind::Unparked { key, .. } => format!("unparked `{key}`"),
            EventKind::Continued { key, .. } => format!("continued `{key}`"),
            EventKind::Failed { error } => format!("failed: {error}"),
            EventKind::Migrated { from, revision, .. } => {
                format!("migrated from revision {from} to {revision}")
            }
            other => other.name().to_owned(),
        }
    }
}

impl Event {
    /// The JSON form shown by `palm inspect`: `{"seq", "at", "kind", ...fields}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut object = serde_json::Map::new();
        object.insert("seq".into(), self.seq.into());
        object.insert("at".into(), self.at.into());
        object.insert("kind".into(), self.kind.name().into());
        // Unit variants serialize as a bare string and add no fields.
        if let Ok(serde_json::Value::Object(outer)) = serde_json::to_value(&self.kind) {
            for (_, inner) in outer {
                match inner {
                    serde_json::Value::Object(fields) => object.extend(fields),
                    other => {
                        object.insert("value".into(), other);
                    }
                }
            }
        }
        serde_json::Value::Object(object)
    }
}

/// Why an input was refused. Nothing is journaled for a refused input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The job has ended; terminal is final.
    #[error("job {job} is {status}; it can no longer change")]
    Terminal {
        /// Job id.
        job: String,
        /// Its final status.
        status: JobStatus,
    },
    /// This effect's completion is already recorded.
    #[error("effect {0} already completed")]
    DuplicateCompletion(String),
    /// Nothing in flight has this key (cancelled, or never requested).
    #[error("no effect {0} is in flight")]
    UnknownEffect(String),
    /// No wait with this key is parked.
    #[error("job {job} is not waiting on `{key}`{}", waiting_hint(.waiting))]
    NotWaitingOn {
        /// Job id.
        job: String,
        /// The key asked for.
        key: String,
        /// Keys it does wait on.
        waiting: Vec<String>,
    },
    /// The input does not satisfy the wait's schema or choices.
    #[error("input for `{key}` is invalid: {}", .problems.join("; "))]
    InvalidInput {
        /// The wait key.
        key: String,
        /// Every problem found.
        problems: Vec<String>,
    },
    /// `Submitted` can only start a job.
    #[error("a job is submitted only once")]
    AlreadySubmitted,
}

fn waiting_hint(waiting: &[String]) -> String {
    if waiting.is_empty() {
        " (it waits on nothing)".to_owned()
    } else {
        format!(" (it waits on: {})", waiting.join(", "))
    }
}

/// Why a journal could not be replayed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReplayError {
    /// The journal does not start with `submitted`.
    #[error("journal of {0} does not start with `submitted`")]
    NoSubmission(String),
    /// Replaying derived different events than were recorded: the definition, the engine
    /// or the store changed behind the journal's back.
    #[error(
        "journal of {job} diverges at seq {seq}: recorded {recorded}, replay derived {derived}"
    )]
    Diverged {
        /// Job id.
        job: String,
        /// First differing seq.
        seq: u64,
        /// What the journal holds.
        recorded: String,
        /// What replay produced.
        derived: String,
    },
    /// An input recorded in the journal was refused on replay.
    #[error("journal of {job} holds an input refused on replay at seq {seq}: {error}")]
    Refused {
        /// Job id.
        job: String,
        /// Its seq.
        seq: u64,
        /// Why.
        error: ApplyError,
    },
    /// The pinned definition revision is not in the store.
    #[error("job {job} pins {flow} revision {revision}, which is missing")]
    MissingDefinition {
        /// Job id.
        job: String,
        /// Flow name.
        flow: String,
        /// Revision.
        revision: u32,
    },
    /// Sequence numbers are not 1, 2, 3...
    #[error("journal of {job} has a gap at seq {seq}")]
    Gap {
        /// Job id.
        job: String,
        /// Expected seq.
        seq: u64,
    },
}

/// Finds the compiled program of `(flow, revision, pinned subflows)`.
pub type ProgramLookup<'a> = dyn FnMut(&str, u32, &[(String, u32)]) -> Option<Arc<Program>> + 'a;

/// Where and how an effect of this job ended up (for `status`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EffectInfo {
    /// Idempotency key.
    pub key: String,
    /// `run`, `call`, `spawn` or `timer`.
    pub kind: &'static str,
    /// `requested`, `completed` or `cancelled`.
    pub state: &'static str,
    /// Node that ran it, when completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// When a timer fires (ms since the epoch): a `sleep`, a wait's timeout, or the
    /// backoff before a `retry` node's next attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_at: Option<u64>,
}

/// One job: identity, pinned definition, engine and journal position.
#[derive(Clone, Debug)]
pub struct JobCore {
    id: String,
    flow: String,
    revision: u32,
    subflows: Vec<(String, u32)>,
    parent: Option<ParentLink>,
    started_by: Option<crate::interest::StartedBy>,
    engine: Engine,
    status: JobStatus,
    error: Option<String>,
    created_at: u64,
    updated_at: u64,
    seq: u64,
    completed: BTreeSet<String>,
    effects: BTreeMap<String, EffectInfo>,
}

impl PartialEq for JobCore {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.flow == other.flow
            && self.revision == other.revision
            && self.subflows == other.subflows
            && self.parent == other.parent
            && self.started_by == other.started_by
            && self.engine == other.engine
            && self.status == other.status
            && self.error == other.error
            && self.created_at == other.created_at
            && self.updated_at == other.updated_at
            && self.seq == other.seq
            && self.completed == other.completed
            && self.effects == other.effects
    }
}

/// A new job's identity and pinned definition.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// Job id.
    pub id: String,
    /// Flow name.
    pub flow: String,
    /// Pinned revision.
    pub revision: u32,
    /// Pinned subflow revisions.
    pub subflows: Vec<(String, u32)>,
    /// Prepared input.
    pub input: serde_json::Value,
    /// Parent link for a spawned child.
    pub parent: Option<ParentLink>,
    /// What started it, when not a person.
    pub started_by: Option<crate::interest::StartedBy>,
}

impl JobCore {
    /// Starts a job: returns it with its first events (`submitted` and what the first step
    /// derived). Seqs are assigned from 1.
    pub fn start(new: NewJob, program: Arc<Program>, at: u64) -> (JobCore, Vec<Event>) {
        let engine = Engine::new(program, &new.id, new.input.clone());
        let mut job = JobCore {
            id: new.id,
            flow: new.flow.clone(),
            revision: new.revision,
            subflows: new.subflows.clone(),
            parent: new.parent.clone(),
            started_by: new.started_by.clone(),
            engine,
            status: JobStatus::Pending,
            error: None,
            created_at: at,
            updated_at: at,
            seq: 0,
            completed: BTreeSet::new(),
            effects: BTreeMap::new(),
        };
        let submitted = EventKind::Submitted {
            flow: new.flow,
            revision: new.revision,
            subflows: new.subflows,
            input: Json(new.input),
            parent: new.parent,
            started_by: new.started_by,
        };
        let mut events = vec![job.record(submitted, at)];
        events.extend(job.step(at));
        (job, events)
    }

    fn record(&mut self, kind: EventKind, at: u64) -> Event {
        self.seq += 1;
        self.updated_at = at;
        Event {
            seq: self.seq,
            at,
            kind,
        }
    }

    /// Checks an input without changing anything: `Ok` means [`JobCore::apply`] will
    /// accept it.
    pub fn check(&self, input: &EventKind) -> Result<(), ApplyError> {
        if self.status.is_terminal() {
            return Err(ApplyError::Terminal {
                job: self.id.clone(),
                status: self.status,
            });
        }
        match input {
            EventKind::Submitted { .. } => Err(ApplyError::AlreadySubmitted),
            EventKind::EffectCompleted { key, .. } | EventKind::TimerFired { key } => {
                if self.completed.contains(key) {
                    Err(ApplyError::DuplicateCompletion(key.clone()))
                } else if !self.engine.outstanding().contains_key(key) {
                    Err(ApplyError::UnknownEffect(key.clone()))
                } else {
                    Ok(())
                }
            }
            EventKind::Continued { key, input } => {
                let parked = self.parked_for(key)?;
                validate_continue(parked, &input.0)
            }
            EventKind::CancelRequested { .. } | EventKind::Resumed | EventKind::Migrated { .. } => {
                Ok(())
            }
            derived => unreachable!("{} is not an input", derived.name()),
        }
    }

    fn parked_for(&self, key: &str) -> Result<&Parked, ApplyError> {
        self.engine
            .parked()
            .iter()
            .find(|p| p.key == key)
            .ok_or_else(|| ApplyError::NotWaitingOn {
                job: self.id.clone(),
                key: key.to_owned(),
                waiting: self.engine.parked().iter().map(|p| p.key.clone()).collect(),
            })
    }

    /// Applies an input: returns the journal events to append (the input first, then what
    /// it derived), or refuses it and changes nothing.
    pub fn apply(&mut self, input: EventKind, at: u64) -> Result<Vec<Event>, ApplyError> {
        self.check(&input)?;
        match &input {
            EventKind::EffectCompleted { key, outcome, node } => {
                self.engine.deliver(key, Delivery::Outcome(outcome.clone()));
                self.completed.insert(key.clone());
                if let Some(info) = self.effects.get_mut(key) {
                    info.state = "completed";
                    info.node = node.clone();
                }
            }
            EventKind::TimerFired { key } => {
                self.engine
                    .deliver(key, Delivery::Outcome(Outcome::TimerFired));
                self.completed.insert(key.clone());
                if let Some(info) = self.effects.get_mut(key) {
                    info.state = "completed";
                }
            }
            EventKind::Continued { key, input: value } => {
                let park = self.parked_for(key)?.park.clone();
                self.engine
                    .deliver(&park, Delivery::Continued(value.0.clone()));
            }
            EventKind::CancelRequested { .. } | EventKind::Resumed => {}
            EventKind::Migrated {
                revision, subflows, ..
            } => {
                // The engine already runs the new revision's program: the host replayed
                // the history under it before recording this.
                self.revision = *revision;
                self.subflows = subflows.clone();
            }
            _ => unreachable!("checked above"),
        }
        let cancel = matches!(input, EventKind::CancelRequested { .. });
        let mut events = vec![self.record(input, at)];
        if cancel {
            self.engine.halt(at);
            events.extend(self.drain_commands(at));
            self.status = JobStatus::Cancelled;
            let cancelled = self.record(EventKind::Cancelled, at);
            events.push(cancelled);
        } else {
            events.extend(self.step(at));
        }
        Ok(events)
    }

    fn drain_commands(&mut self, at: u64) -> Vec<Event> {
        let commands = self.engine.take_commands();
        let mut events = Vec::with_capacity(commands.len());
        for command in commands {
            let kind = match command {
                Command::StartEffect { key, path, request } => {
                    self.effects.insert(
                        key.clone(),
                        EffectInfo {
                            key: key.clone(),
                            kind: request.kind_name(),
                            state: "requested",
                            node: None,
                            due_at: match &request {
                                EffectRequest::Timer { deadline } => Some(*deadline),
                                _ => None,
                            },
                        },
                    );
                    EventKind::EffectRequested { key, path, request }
                }
                Command::CancelEffect { key } => {
                    if let Some(info) = self.effects.get_mut(&key) {
                        info.state = "cancelled";
                    }
                    EventKind::EffectCancelled { key }
                }
                Command::Park(parked) => EventKind::Parked(parked),
                Command::Unpark { key, park } => EventKind::Unparked { key, park },
            };
            events.push(self.record(kind, at));
        }
        events
    }

    fn step(&mut self, at: u64) -> Vec<Event> {
        let report = self.engine.step(at, STEP_TICKS_MAX);
        let mut events = self.drain_commands(at);
        self.status = match report.status {
            Status::Success => JobStatus::Succeeded,
            Status::Failure => JobStatus::Failed,
            Status::Waiting => JobStatus::Waiting,
            Status::Running => JobStatus::Running,
            Status::Idle => JobStatus::Pending,
        };
        if report.budget_exhausted {
            events.push(self.record(EventKind::Yielded, at));
        }
        match self.status {
            JobStatus::Succeeded => {
                events.extend(self.release_leftovers(at));
                events.push(self.record(EventKind::Succeeded, at));
            }
            JobStatus::Failed => {
                events.extend(self.release_leftovers(at));
                let error = self
                    .engine
                    .last_failure()
                    .unwrap_or("the tree failed")
                    .to_owned();
                self.error = Some(error.clone());
                events.push(self.record(EventKind::Failed { error }, at));
            }
            _ => {}
        }
        events
    }

    /// A finished tree holds nothing in flight (halting releases it); this is the guard
    /// that keeps it so even if a node type forgot to.
    fn release_leftovers(&mut self, at: u64) -> Vec<Event> {
        if self.engine.outstanding().is_empty() && self.engine.parked().is_empty() {
            return Vec::new();
        }
        self.engine.halt(at);
        self.drain_commands(at)
    }

    /// Rebuilds a job from its journal, checking every derived event against the record.
    /// A journal with `migrated` events runs under the revision the last one names.
    pub fn replay(
        events: &[Event],
        program: &mut ProgramLookup<'_>,
        id: &str,
    ) -> Result<JobCore, ReplayError> {
        let pinned = events.iter().rev().find_map(|e| match &e.kind {
            EventKind::Migrated {
                revision, subflows, ..
            } => Some((*revision, subflows.clone())),
            _ => None,
        });
        JobCore::replay_pinned(events, program, id, pinned)
    }

    /// Replays a journal as if the job had always run `revision` (with `subflows`): `Ok`
    /// means that revision derives exactly the recorded history, so the job can move to
    /// it; the error says where the two part.
    pub fn replay_under(
        events: &[Event],
        program: &mut ProgramLookup<'_>,
        id: &str,
        revision: u32,
        subflows: Vec<(String, u32)>,
    ) -> Result<JobCore, ReplayError> {
        JobCore::replay_pinned(events, program, id, Some((revision, subflows)))
    }

    fn replay_pinned(
        events: &[Event],
        program: &mut ProgramLookup<'_>,
        id: &str,
        pinned: Option<(u32, Vec<(String, u32)>)>,
    ) -> Result<JobCore, ReplayError> {
        let Some(first) = events.first() else {
            return Err(ReplayError::NoSubmission(id.to_owned()));
        };
        let EventKind::Submitted {
            flow,
            revision,
            subflows,
            input,
            parent,
            started_by,
        } = &first.kind
        else {
            return Err(ReplayError::NoSubmission(id.to_owned()));
        };
        let (run_revision, run_subflows) = pinned
            .clone()
            .unwrap_or_else(|| (*revision, subflows.clone()));
        let Some(compiled) = program(flow, run_revision, &run_subflows) else {
            return Err(ReplayError::MissingDefinition {
                job: id.to_owned(),
                flow: flow.clone(),
                revision: run_revision,
            });
        };
        let (mut job, derived) = JobCore::start(
            NewJob {
                id: id.to_owned(),
                flow: flow.clone(),
                revision: *revision,
                subflows: subflows.clone(),
                input: input.0.clone(),
                parent: parent.clone(),
                started_by: started_by.clone(),
            },
            compiled,
            first.at,
        );
        let mut cursor = 0;
        compare(id, &derived, events, &mut cursor)?;
        while cursor < events.len() {
            let event = &events[cursor];
            if event.seq != cursor as u64 + 1 {
                return Err(ReplayError::Gap {
                    job: id.to_owned(),
                    seq: cursor as u64 + 1,
                });
            }
            if !event.kind.is_input() {
                return Err(ReplayError::Diverged {
                    job: id.to_owned(),
                    seq: event.seq,
                    recorded: event.kind.name().to_owned(),
                    derived: "nothing".to_owned(),
                });
            }
            let derived = match job.apply(event.kind.clone(), event.at) {
                Ok(derived) => derived,
                Err(error) => {
                    return Err(ReplayError::Refused {
                        job: id.to_owned(),
                        seq: event.seq,
                        error,
                    });
                }
            };
            compare(id, &derived, events, &mut cursor)?;
        }
        Ok(job)
    }

    /// Job id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Flow name.
    pub fn flow(&self) -> &str {
        &self.flow
    }
    /// Pinned revision.
    pub fn revision(&self) -> u32 {
        self.revision
    }
    /// Pinned subflow revisions.
    pub fn subflows(&self) -> &[(String, u32)] {
        &self.subflows
    }
    /// Parent link.
    pub fn parent(&self) -> Option<&ParentLink> {
        self.parent.as_ref()
    }
    /// What started it, when it started itself.
    pub fn started_by(&self) -> Option<&crate::interest::StartedBy> {
        self.started_by.as_ref()
    }
    /// Status.
    pub fn status(&self) -> JobStatus {
        self.status
    }
    /// Why it failed.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
    /// Submission time.
    pub fn created_at(&self) -> u64 {
        self.created_at
    }
    /// Last change.
    pub fn updated_at(&self) -> u64 {
        self.updated_at
    }
    /// Last journal seq.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// The engine (tree, blackboard, effects in flight).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
    /// Parked waits.
    pub fn waiting_on(&self) -> &[Parked] {
        self.engine.parked()
    }
    /// The tree with statuses.
    pub fn tree(&self) -> NodeView {
        self.engine.view()
    }
    /// Every effect this job requested, by key.
    pub fn effects(&self) -> &BTreeMap<String, EffectInfo> {
        &self.effects
    }
}

fn compare(
    id: &str,
    derived: &[Event],
    events: &[Event],
    cursor: &mut usize,
) -> Result<(), ReplayError> {
    for event in derived {
        match events.get(*cursor) {
            Some(recorded) if recorded.kind == event.kind && recorded.seq == event.seq => {
                *cursor += 1;
            }
            Some(recorded)
                if recorded.seq == event.seq
                    && recorded.kind.is_input()
                    && !event.kind.is_input() =>
            {
                return Err(ReplayError::Diverged {
                    job: id.to_owned(),
                    seq: event.seq,
                    recorded: recorded.kind.name().to_owned(),
                    derived: event.kind.name().to_owned(),
                });
            }
            Some(recorded) => {
                // Short lines when they tell the two apart; every field when the
                // difference is in the detail (a command's text, a wait's schema).
                let (mut recorded, mut derived) = (recorded.kind.describe(), event.kind.describe());
                if recorded == derived {
                    let full = |kind: &EventKind| {
                        serde_json::to_string(kind).unwrap_or_else(|_| format!("{kind:?}"))
                    };
                    recorded = full(&events[*cursor].kind);
                    derived = full(&event.kind);
                }
                return Err(ReplayError::Diverged {
                    job: id.to_owned(),
                    seq: event.seq,
                    recorded,
                    derived,
                });
            }
            // A journal may end mid-way only if the write that held the rest was lost;
            // writes are atomic per step, so this is divergence too.
            None => {
                return Err(ReplayError::Diverged {
                    job: id.to_owned(),
                    seq: event.seq,
                    recorded: "end of journal".to_owned(),
                    derived: event.kind.name().to_owned(),
                });
            }
        }
    }
    Ok(())
}

/// Validates a continue's input against the wait's choices and schema.
fn validate_continue(parked: &Parked, input: &serde_json::Value) -> Result<(), ApplyError> {
    validate_wait_input(&parked.choices, parked.schema.as_ref(), input).map_err(|problems| {
        ApplyError::InvalidInput {
            key: parked.key.clone(),
            problems,
        }
    })
}

/// Checks an input for a wait with these choices and schema; returns every problem.
pub fn validate_wait_input(
    choices: &[Json],
    schema: Option<&Json>,
    input: &serde_json::Value,
) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    if !choices.is_empty() && !choices.iter().any(|c| &c.0 == input) {
        let listed: Vec<String> = choices.iter().map(|c| c.0.to_string()).collect();
        problems.push(format!(
            "expected one of {}, found {input}",
            listed.join(", ")
        ));
    }
    if let Some(schema) = schema {
        match crate::jsonschema::Schema::compile(&schema.0) {
            Ok(schema) => {
                problems.extend(schema.validate(input).iter().map(ToString::to_string));
            }
            Err(err) => problems.push(format!("the wait's schema is invalid: {err}")),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}
