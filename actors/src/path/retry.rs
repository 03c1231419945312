//! Retrying an ended job from a node of its tree (`palm retry JOB --from PATH`).
//!
//! A retry is a new job, like a re-execution in the engines people know: the ended job
//! stays as it was (its journal is history, and history is not rewritten), and the new
//! one starts with everything the old one did *before* the node began. Concretely, the
//! old journal is replayed input by input until the input after which the node at `PATH`
//! first left `idle`; those inputs (the submission, effect completions, answers, fired
//! timers) are the new job's history, re-keyed to the new job's id. Everything that came
//! after (the node's own effects and waits, and whatever ran beside or after it) runs
//! again. Completed effects before the node are not run again: their outcomes are in the
//! copied inputs.
//!
//! The new job may run another revision of the flow (a fixed step): that revision must
//! derive the same history up to the node, checked event by event exactly as
//! `palm flows migrate` checks a move, or the retry is refused with the first event where
//! the two part. The whole new journal, its queued effects and its start key go in one
//! batch: a crash leaves either no retry or the whole retry, and the start key
//! (`retry/JOB/PATH/rREVISION`) makes a second click answer with the first retry.

use super::records::read_journal;
use super::{JobPath, Notice, SubmitError, program_for};
use crate::bt::Status;
use crate::interest::StartedBy;
use crate::job::{Event, EventKind, JobCore, JobStatus, NewJob};
use crate::store::{Store, StoreError, Table};
use serde::Serialize;

/// A retry started (or found: the same retry asked for again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Retried {
    /// The new job.
    pub job: String,
    /// Its status after its first step.
    pub status: JobStatus,
    /// The job it retries.
    pub retry_of: String,
    /// The node it retries from.
    pub from: String,
    /// Flow name.
    pub flow: String,
    /// The revision the new job runs.
    pub revision: u32,
    /// Inputs of the old journal the new job starts with (the submission included).
    pub kept_inputs: usize,
    /// Inputs of the old journal that came after the node began: what runs again.
    pub dropped_inputs: usize,
    /// True when this retry had already been started (nothing new was started).
    pub existing: bool,
}

/// Why a retry was refused. Nothing is written for a refused retry.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    /// No job by this id.
    #[error("unknown job {0}")]
    UnknownJob(String),
    /// The job has not ended: a retry would run beside it.
    #[error("job {job} is {status}; only an ended job can be retried (cancel it first)")]
    NotEnded {
        /// Job id.
        job: String,
        /// Its status.
        status: JobStatus,
    },
    /// The journal was collected by retention.
    #[error(
        "job {0} kept only its summary (retention collected its journal); it cannot be retried"
    )]
    NoJournal(String),
    /// The node never ran (or does not exist).
    #[error("node {path} never ran in job {job}{}", ran_hint(.ran))]
    NeverRan {
        /// Job id.
        job: String,
        /// The node asked for.
        path: String,
        /// Nodes that did run, pre-order (the first few).
        ran: Vec<String>,
    },
    /// The target revision does not derive the history before the node.
    #[error(
        "revision {revision} of `{flow}` does not derive job {job}'s history before node {path}: {reason}"
    )]
    Diverges {
        /// Job id.
        job: String,
        /// Flow name.
        flow: String,
        /// Target revision.
        revision: u32,
        /// The node.
        path: String,
        /// Where the two histories part.
        reason: String,
    },
    /// The flow, revision or subflows could not be resolved, or a loop of the flow runs.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The store could not be read.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

fn ran_hint(ran: &[String]) -> String {
    if ran.is_empty() {
        String::new()
    } else {
        format!(" (nodes that ran: {})", ran.join(", "))
    }
}

/// How many nodes that ran an error lists.
const RAN_LISTED_MAX: usize = 24;

impl JobPath {
    /// Starts a new job that retries ended job `job` from the node at `from`, under
    /// `revision` (absent: the revision the job ran). See the module docs.
    pub fn retry_from(
        &mut self,
        now: u64,
        store: &dyn Store,
        job: &str,
        from: &str,
        revision: Option<u32>,
    ) -> Result<Retried, RetryError> {
        if let Some(core) = self.jobs.get(job) {
            return Err(RetryError::NotEnded {
                job: job.to_owned(),
                status: core.status(),
            });
        }
        if self.dormant.contains(job) {
            return Err(RetryError::NotEnded {
                job: job.to_owned(),
                status: JobStatus::Waiting,
            });
        }
        if self.record(store, job)?.is_none() {
            return Err(RetryError::UnknownJob(job.to_owned()));
        }
        let events = read_journal(store, job)?;
        let Some(EventKind::Submitted {
            flow,
            revision: submitted_revision,
            subflows: submitted_subflows,
            input,
            ..
        }) = events.first().map(|e| &e.kind)
        else {
            return Err(RetryError::NoJournal(job.to_owned()));
        };
        // The revision the job ran last (a migrated job runs the last `migrated` one).
        let (ran_revision, ran_subflows) = events
            .iter()
            .rev()
            .find_map(|e| match &e.kind {
                EventKind::Migrated {
                    revision, subflows, ..
                } => Some((*revision, subflows.clone())),
                _ => None,
            })
            .unwrap_or_else(|| (*submitted_revision, submitted_subflows.clone()));
        let (target_revision, target_subflows) = match revision {
            Some(asked) if asked != ran_revision => {
                let stored = self.resolve_flow(flow, Some(asked))?;
                (asked, self.pin_subflows(&stored.definition))
            }
            _ => (ran_revision, ran_subflows.clone()),
        };
        let key = format!("retry/{job}/{from}/r{target_revision}");
        if let Some(existing) = self.started_job(store, &key)? {
            let view = self.job_view(store, &existing)?;
            return Ok(Retried {
                status: view.as_ref().map_or(JobStatus::Pending, |v| v.status),
                job: existing,
                retry_of: job.to_owned(),
                from: from.to_owned(),
                flow: flow.clone(),
                revision: target_revision,
                kept_inputs: 0,
                dropped_inputs: 0,
                existing: true,
            });
        }

        // Where the node began: replay the old journal under the revision it ran.
        let ran_program = self.program(flow, ran_revision, &ran_subflows)?;
        let inputs: Vec<&Event> = events.iter().filter(|e| e.kind.is_input()).collect();
        let (mut old, _) = JobCore::start(
            NewJob {
                id: job.to_owned(),
                flow: flow.clone(),
                revision: *submitted_revision,
                subflows: submitted_subflows.clone(),
                input: input.0.clone(),
                parent: None,
                started_by: None,
            },
            ran_program,
            events[0].at,
        );
        let began = |core: &JobCore| {
            core.engine()
                .status_at(from)
                .is_some_and(|status| status != Status::Idle)
        };
        let mut cut = began(&old).then_some(0);
        let mut ran: Vec<String> = Vec::new();
        for (index, event) in inputs.iter().enumerate().skip(1) {
            if cut.is_some() {
                break;
            }
            note_ran(&old, &mut ran);
            if old.apply(event.kind.clone(), event.at).is_err() {
                // The journal replays on every restart; a refusal here means it cannot be
                // trusted as the base of a retry.
                break;
            }
            if began(&old) {
                cut = Some(index);
            }
        }
        let Some(cut) = cut else {
            note_ran(&old, &mut ran);
            return Err(RetryError::NeverRan {
                job: job.to_owned(),
                path: from.to_owned(),
                ran,
            });
        };

        // The old journal's derived events before the cut input: what the new job must
        // derive from the same inputs.
        let cut_seq = inputs[cut].seq;
        // The id the new job will get; allocated only once nothing can refuse the retry.
        let id = format!("{}-{}", self.tag, self.next_job);
        let rekey = |text: &str| rekey(text, job, &id);
        let expected: Vec<Derived> = events
            .iter()
            .filter(|e| e.seq < cut_seq && !e.kind.is_input())
            .map(|e| Derived::of(&e.kind, Some((job, &id))))
            .collect();

        let target_program = self.program(flow, target_revision, &target_subflows)?;
        let stored = self.resolve_flow(flow, Some(target_revision))?;
        self.check_loop_key(&stored.definition, &input.0)?;
        let started_by = StartedBy {
            key: key.clone(),
            cause: format!("retry of {job} from node {from}"),
            depth: 0,
            chain: Vec::new(),
        };
        let (mut core, mut new_events) = JobCore::start(
            NewJob {
                id: id.clone(),
                flow: flow.clone(),
                revision: target_revision,
                subflows: target_subflows,
                input: input.0.clone(),
                parent: None,
                started_by: Some(started_by),
            },
            target_program,
            now,
        );
        let diverges = |reason: String| RetryError::Diverges {
            job: job.to_owned(),
            flow: flow.clone(),
            revision: target_revision,
            path: from.to_owned(),
            reason,
        };
        let mut derived: Vec<Derived> = if cut > 0 {
            derived_lines(&new_events)
        } else {
            Vec::new()
        };
        for event in &inputs[1..=cut] {
            let kind = match &event.kind {
                // The new job runs the target revision from its start.
                EventKind::Migrated { .. } => continue,
                EventKind::EffectCompleted { key, outcome, node } => EventKind::EffectCompleted {
                    key: rekey(key),
                    outcome: outcome.clone(),
                    node: node.clone(),
                },
                EventKind::TimerFired { key } => EventKind::TimerFired { key: rekey(key) },
                other => other.clone(),
            };
            let step = core.apply(kind, now).map_err(|err| {
                diverges(format!(
                    "{} is refused: {err}",
                    rekey(&event.kind.describe())
                ))
            })?;
            if event.seq < cut_seq {
                derived.extend(derived_lines(&step));
            }
            new_events.extend(step);
        }
        // Everything the new job derived before the cut input is what the old one did.
        if derived != expected {
            let at = (0..expected.len().max(derived.len()))
                .find(|i| derived.get(*i) != expected.get(*i))
                .unwrap_or(0);
            let (recorded, now_derived) = Derived::tell_apart(expected.get(at), derived.get(at));
            return Err(diverges(format!(
                "the job recorded `{recorded}`, the revision derives `{now_derived}`"
            )));
        }

        let allocated = self.allocate_job_id();
        debug_assert_eq!(allocated, id);
        self.jobs.insert(id.clone(), core);
        if !stored.definition.places.is_empty() {
            self.notices.push(Notice::PlacesWanted {
                job: id.clone(),
                places: stored.definition.places.clone(),
            });
        }
        self.absorb(now, &id, new_events);
        self.batch.put(
            Table::Starts,
            key.as_bytes().to_vec(),
            id.as_bytes().to_vec(),
        );
        self.starts.insert(key, id.clone());
        self.drain(now);
        let status = self
            .jobs
            .get(&id)
            .map_or_else(|| self.finished_status(&id), JobCore::status);
        Ok(Retried {
            job: id,
            status,
            retry_of: job.to_owned(),
            from: from.to_owned(),
            flow: flow.clone(),
            revision: target_revision,
            kept_inputs: cut + 1,
            dropped_inputs: inputs.len() - cut - 1,
            existing: false,
        })
    }

    fn program(
        &mut self,
        flow: &str,
        revision: u32,
        subflows: &[(String, u32)],
    ) -> Result<std::sync::Arc<crate::bt::Program>, RetryError> {
        program_for(
            &self.definitions,
            &mut self.programs,
            flow,
            revision,
            subflows,
        )
        .ok_or_else(|| {
            RetryError::Submit(SubmitError::UnknownRevision {
                name: flow.to_owned(),
                revision,
                latest: self
                    .definitions
                    .get(flow)
                    .and_then(|r| r.keys().next_back().copied())
                    .unwrap_or(0),
            })
        })
    }
}

/// Re-keys an effect key (or a line naming one) from job `old` to job `new`: keys are
/// `JOB/PATH/N`.
fn rekey(text: &str, old: &str, new: &str) -> String {
    text.replace(&format!("{old}/"), &format!("{new}/"))
}

fn derived_lines(events: &[Event]) -> Vec<Derived> {
    events
        .iter()
        .filter(|e| !e.kind.is_input())
        .map(|e| Derived::of(&e.kind, None))
        .collect()
}

/// A derived event as compared across two jobs: its whole content with the job's own
/// id taken out of its keys, and its short line for people.
#[derive(Debug, PartialEq)]
struct Derived {
    value: serde_json::Value,
    line: String,
}

impl Derived {
    /// `rename`: (old id, new id) for an event of the old job.
    fn of(kind: &EventKind, rename: Option<(&str, &str)>) -> Derived {
        let mut value = serde_json::to_value(kind).unwrap_or(serde_json::Value::Null);
        let mut line = kind.describe();
        if let Some((old, new)) = rename {
            rekey_value(&mut value, old, new);
            line = rekey(&line, old, new);
        }
        Derived { value, line }
    }

    /// Short lines when they tell the two apart, every field when the difference is in
    /// the detail (a command's text, a wait's schema).
    fn tell_apart(recorded: Option<&Derived>, derived: Option<&Derived>) -> (String, String) {
        let line = |d: Option<&Derived>| d.map_or_else(|| "nothing".to_owned(), |d| d.line.clone());
        if line(recorded) != line(derived) {
            return (line(recorded), line(derived));
        }
        let full = |d: Option<&Derived>| d.map_or_else(String::new, |d| d.value.to_string());
        (full(recorded), full(derived))
    }
}

/// Re-keys every string of `value` that is a key of job `old` (starts `old/`).
fn rekey_value(value: &mut serde_json::Value, old: &str, new: &str) {
    match value {
        serde_json::Value::String(text) => {
            if let Some(rest) = text.strip_prefix(old).filter(|r| r.starts_with('/')) {
                *text = format!("{new}{rest}");
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| rekey_value(v, old, new)),
        serde_json::Value::Object(fields) => {
            fields.values_mut().for_each(|v| rekey_value(v, old, new));
        }
        _ => {}
    }
}

/// Adds the paths of nodes that are not idle now (for the error naming what did run).
fn note_ran(core: &JobCore, ran: &mut Vec<String>) {
    fn walk(view: &crate::bt::NodeView, ran: &mut Vec<String>) {
        if view.status != Status::Idle && !ran.contains(&view.path) && ran.len() < RAN_LISTED_MAX {
            ran.push(view.path.clone());
        }
        for child in &view.children {
            walk(child, ran);
        }
    }
    walk(&core.tree(), ran);
}
