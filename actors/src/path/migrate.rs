//! Moving unfinished jobs to another revision of their flow (`palm flows migrate`).
//!
//! A job pins the revision it was submitted with, and replay checks every derived event
//! against its journal. So a job can move to revision R exactly when R, replayed over the
//! job's whole journal, derives the same history: the same effects with the same
//! requests, the same waits with the same schemas, in the same order. Such a job is
//! somewhere R has not changed yet (typically parked at a wait before the part that was
//! edited) and from there on runs R. Anything else is refused, with the first event where
//! the two histories part: moving it would make the journal a lie.
//!
//! The check is the same replay that rebuilds the job after a restart, and the move is
//! one input event (`migrated`) in one batch, so a crash keeps the job on one revision or
//! the other, never between. The job's input must also still be valid for R as it stands
//! (without new defaults: the recorded input is what replay feeds the tree).

use super::records::{decode, journal_prefix, read_journal};
use super::{JobPath, SubmitError, program_for};
use crate::job::{Event, EventKind, JobCore, JobStatus, ReplayError};
use crate::store::{Store, Table};
use serde::Serialize;

/// What a migration does to one unfinished job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Its history replays the same under the target: it can move (a dry run).
    Moves,
    /// It moved.
    Moved,
    /// It already runs the target revision.
    Stays,
    /// Its history parts from what the target derives: it stays where it is.
    Diverges,
}

/// One unfinished job of the flow and the verdict on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobMigration {
    /// Job id.
    pub job: String,
    /// Its status.
    pub status: JobStatus,
    /// The revision it ran before.
    pub from: u32,
    /// The waits it is parked on.
    pub waiting: Vec<String>,
    /// What happens to it.
    pub verdict: Verdict,
    /// Why it cannot move (for `diverges`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer of a migration (or of its dry run).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MigrationReport {
    /// The flow.
    pub flow: String,
    /// The target revision.
    pub to: u32,
    /// True when nothing was moved on purpose.
    pub dry_run: bool,
    /// Jobs that moved (0 in a dry run).
    pub moved: usize,
    /// Jobs that can move / moved.
    pub movable: usize,
    /// Jobs that cannot move.
    pub diverged: usize,
    /// Every unfinished job of the flow (or the ones asked for), by id.
    pub jobs: Vec<JobMigration>,
}

impl JobPath {
    /// Checks every unfinished job of `flow` (or only `only`, when not empty) against
    /// revision `to`, and unless `dry_run` moves those whose history `to` derives
    /// unchanged. Jobs that cannot move are left exactly as they were.
    pub fn migrate(
        &mut self,
        now: u64,
        store: &dyn Store,
        flow: &str,
        to: u32,
        only: &[String],
        dry_run: bool,
    ) -> Result<MigrationReport, SubmitError> {
        let target = self.resolve_flow(flow, Some(to))?;
        let subflows = self.pin_subflows(&target.definition);
        // Dormant jobs of the flow are loaded first: a migration reads each one's history.
        let dormant: Vec<String> = self.dormant.iter().cloned().collect();
        for id in dormant {
            let of_flow = self
                .record(store, &id)?
                .is_some_and(|record| record.flow == flow);
            if of_flow {
                self.wake(store, &id)?;
            }
        }
        let mut ids: Vec<String> = self
            .jobs
            .values()
            .filter(|job| job.flow() == flow)
            .map(|job| job.id().to_owned())
            .collect();
        ids.sort_by_key(|id| job_order(id));
        if !only.is_empty() {
            for id in only {
                if !ids.contains(id) {
                    return Err(SubmitError::InvalidInput(vec![format!(
                        "job {id} is not an unfinished job of flow `{flow}`"
                    )]));
                }
            }
            ids.retain(|id| only.contains(id));
        }
        let mut report = MigrationReport {
            flow: flow.to_owned(),
            to,
            dry_run,
            moved: 0,
            movable: 0,
            diverged: 0,
            jobs: Vec::with_capacity(ids.len()),
        };
        for id in ids {
            let core = &self.jobs[&id];
            let mut entry = JobMigration {
                job: id.clone(),
                status: core.status(),
                from: core.revision(),
                waiting: core.waiting_on().iter().map(|p| p.key.clone()).collect(),
                verdict: Verdict::Stays,
                reason: None,
            };
            if core.revision() == to && core.subflows() == subflows.as_slice() {
                report.jobs.push(entry);
                continue;
            }
            let input = core.engine().input().clone();
            let checked = self.check_move(store, &id, &input, to, &target, &subflows);
            match checked {
                Err(reason) => {
                    entry.verdict = Verdict::Diverges;
                    entry.reason = Some(reason);
                    report.diverged += 1;
                }
                Ok(_) if dry_run => {
                    entry.verdict = Verdict::Moves;
                    report.movable += 1;
                }
                Ok(mut moved) => {
                    let events = moved
                        .apply(
                            EventKind::Migrated {
                                from: entry.from,
                                revision: to,
                                subflows: subflows.clone(),
                            },
                            now,
                        )
                        .map_err(|e| SubmitError::InvalidInput(vec![e.to_string()]))?;
                    entry.status = moved.status();
                    self.jobs.insert(id.clone(), moved);
                    self.absorb(now, &id, events);
                    entry.verdict = Verdict::Moved;
                    report.movable += 1;
                    report.moved += 1;
                }
            }
            report.jobs.push(entry);
        }
        self.drain(now);
        Ok(report)
    }

    /// The job rebuilt under the target revision, or why it cannot be.
    fn check_move(
        &mut self,
        store: &dyn Store,
        id: &str,
        input: &serde_json::Value,
        to: u32,
        target: &super::StoredDefinition,
        subflows: &[(String, u32)],
    ) -> Result<JobCore, String> {
        let fields = input.as_object().cloned().unwrap_or_default();
        match target.definition.prepare_input(fields) {
            Err(problems) => {
                return Err(format!(
                    "its input is not valid for revision {to}: {}",
                    problems.join("; ")
                ));
            }
            Ok(prepared) if &prepared != input => {
                return Err(format!(
                    "revision {to} gives its input defaults it was not started with ({})",
                    added_fields(input, &prepared).join(", ")
                ));
            }
            Ok(_) => {}
        }
        let events = self
            .journal_now(store, id)
            .map_err(|e| format!("cannot read its journal: {e}"))?;
        let definitions = &self.definitions;
        let programs = &mut self.programs;
        let mut lookup = |flow: &str, revision: u32, pins: &[(String, u32)]| {
            program_for(definitions, programs, flow, revision, pins)
        };
        JobCore::replay_under(&events, &mut lookup, id, to, subflows.to_vec()).map_err(
            |err| match err {
                ReplayError::Diverged {
                    seq,
                    recorded,
                    derived,
                    ..
                } => format!(
                    "revision {to} changes what it already did: at event {seq} its journal has {recorded}, revision {to} derives {derived}"
                ),
                ReplayError::Refused { seq, error, .. } => format!(
                    "revision {to} cannot take what it already received: event {seq} would be refused ({error})"
                ),
                other => other.to_string(),
            },
        )
    }

    /// A job's journal as it stands now: what is committed, plus what this path has
    /// written to its batch and not handed over yet.
    fn journal_now(&self, store: &dyn Store, id: &str) -> Result<Vec<Event>, String> {
        let mut events = read_journal(store, id).map_err(|e| e.to_string())?;
        let prefix = journal_prefix(id);
        for write in self.batch.writes() {
            if write.table != Table::Journal || !write.key.starts_with(&prefix) {
                continue;
            }
            if let Some(value) = &write.value {
                let event: Event = decode(value, "journal event").map_err(|e| e.to_string())?;
                if events.last().is_none_or(|last| last.seq < event.seq) {
                    events.push(event);
                }
            }
        }
        Ok(events)
    }
}

/// Job ids sort by their number (`tag-9` before `tag-10`).
fn job_order(id: &str) -> (String, u64) {
    match id.rsplit_once('-') {
        Some((tag, n)) => (tag.to_owned(), n.parse().unwrap_or(u64::MAX)),
        None => (id.to_owned(), 0),
    }
}

fn added_fields(before: &serde_json::Value, after: &serde_json::Value) -> Vec<String> {
    let (Some(before), Some(after)) = (before.as_object(), after.as_object()) else {
        return vec!["input".to_owned()];
    };
    after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .map(|(k, _)| format!("`{k}`"))
        .collect()
}
