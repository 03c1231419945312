//! Job retention: ended jobs are compacted to their summary, then forgotten.
//!
//! A job that ended (succeeded, failed, cancelled) more than [`Retention::journal_ms`]
//! ago loses its journal and any leftover effect records; its summary (`jobs` table: flow,
//! revision, status, times, error, parent) stays, so `palm jobs` and `palm status` still
//! know it, marked `compacted`. More than [`Retention::summary_ms`] after it ended, the
//! summary goes too, with the start keys that named it.
//!
//! Collection walks the store in bounded steps ([`JobPath::collect`]): each step visits
//! at most `budget` jobs (or start keys) and writes one batch, and hands back a cursor for
//! the next. A node's kernel and `palm jobs gc` step until done, so a store of a million
//! ended jobs is collected without ever holding them all, or stalling the kernel for long.

use super::JobPath;
use super::records::{JobRecord, decode, journal_prefix};
use crate::store::{Store, StoreError, Table, scan_prefix};
use serde::{Deserialize, Serialize};

/// Default: an ended job's journal is kept 30 days.
pub const JOURNAL_KEEP_MS_DEFAULT: u64 = 30 * 24 * 3_600_000;
/// Default: an ended job's summary is kept 365 days.
pub const SUMMARY_KEEP_MS_DEFAULT: u64 = 365 * 24 * 3_600_000;
/// Default number of jobs one collection step visits.
pub const GC_BUDGET_DEFAULT: usize = 2_000;
/// Bound on the jobs one step visits (one step is one batch, written while the kernel
/// waits).
pub const GC_BUDGET_MAX: usize = 20_000;

/// How long ended jobs are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// After a job ended, its journal is kept this long; then only its summary remains.
    pub journal_ms: u64,
    /// After a job ended, its summary is kept this long (`None`: for ever). Never
    /// shorter than the journal's.
    pub summary_ms: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            journal_ms: JOURNAL_KEEP_MS_DEFAULT,
            summary_ms: Some(SUMMARY_KEEP_MS_DEFAULT),
        }
    }
}

/// What one collection step did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collected {
    /// Jobs and start keys visited.
    pub scanned: u64,
    /// Jobs whose journal was removed (their summary stays).
    pub compacted: u64,
    /// Jobs forgotten entirely.
    pub forgotten: u64,
    /// Journal events removed.
    pub events_removed: u64,
    /// Leftover effect records removed.
    pub effects_removed: u64,
    /// Start keys removed (their job was forgotten).
    pub starts_removed: u64,
    /// The jobs this step compacted or forgot, so the host can remove what it keeps of
    /// them outside the store (a check's logs under `DATA/artifacts/JOB/`) once the
    /// step's batch is durable. At most one step's budget; [`Collected::add`] does not
    /// gather them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<String>,
    /// Where the next step starts; `None` when the walk is done.
    pub cursor: Option<String>,
}

impl Collected {
    /// Adds another step's counts (the cursor is the later step's).
    pub fn add(&mut self, step: &Collected) {
        self.scanned += step.scanned;
        self.compacted += step.compacted;
        self.forgotten += step.forgotten;
        self.events_removed += step.events_removed;
        self.effects_removed += step.effects_removed;
        self.starts_removed += step.starts_removed;
        self.cursor = step.cursor.clone();
    }
}

/// The walk visits jobs first (`j:ID`), then start keys (`s:KEY`).
const JOBS: &str = "j:";
const STARTS: &str = "s:";

impl JobPath {
    /// One bounded step of collection at `now` (see the module docs), from `cursor`
    /// (`None`: the beginning). Writes go into the batch, like every change.
    pub fn collect(
        &mut self,
        store: &dyn Store,
        now: u64,
        retention: Retention,
        cursor: Option<&str>,
        budget: usize,
    ) -> Result<Collected, StoreError> {
        let budget = budget.max(1);
        let cursor = cursor.unwrap_or(JOBS);
        if let Some(after) = cursor.strip_prefix(STARTS) {
            return self.collect_starts(store, after, budget);
        }
        let after = cursor.strip_prefix(JOBS).unwrap_or_default();
        let mut records: Vec<JobRecord> = Vec::new();
        let mut failure = None;
        let start = exclusive_start(after);
        store.scan(Table::Jobs, &start, None, &mut |_, value| {
            match decode::<JobRecord>(value, "job record") {
                Ok(record) => records.push(record),
                Err(err) => failure = Some(err),
            }
            failure.is_none() && records.len() < budget
        })?;
        if let Some(err) = failure {
            return Err(err);
        }
        let mut step = Collected {
            scanned: records.len() as u64,
            ..Collected::default()
        };
        let summary_ms = retention
            .summary_ms
            .map(|summary| summary.max(retention.journal_ms));
        for record in &records {
            if !record.status.is_terminal() || self.jobs.contains_key(&record.id) {
                continue;
            }
            let ended_ago = now.saturating_sub(record.updated_at);
            let forget = summary_ms.is_some_and(|keep| ended_ago >= keep);
            let compacted = step.compacted;
            if forget || ended_ago >= retention.journal_ms {
                self.drop_journal(store, &record.id, &mut step)?;
            }
            if forget {
                self.batch
                    .delete(Table::Jobs, record.id.as_bytes().to_vec());
                step.forgotten += 1;
            }
            // Forgotten too when compacted before: what a host kept beside an older
            // compaction (or lost track of in a crash) goes with the summary at the latest.
            if forget || step.compacted > compacted {
                step.released.push(record.id.clone());
            }
        }
        step.cursor = Some(match records.last() {
            Some(last) if records.len() >= budget => format!("{JOBS}{}", last.id),
            _ => STARTS.to_owned(),
        });
        Ok(step)
    }

    /// Removes a job's journal and leftover effects (counted as compacted if it had a
    /// journal), and its cached view.
    fn drop_journal(
        &mut self,
        store: &dyn Store,
        job: &str,
        step: &mut Collected,
    ) -> Result<(), StoreError> {
        self.finished.remove(job);
        let mut keys = Vec::new();
        scan_prefix(
            store,
            Table::Journal,
            &journal_prefix(job),
            &mut |key, _| {
                keys.push(key.to_vec());
                true
            },
        )?;
        if keys.is_empty() {
            // Compacted already.
            return Ok(());
        }
        step.events_removed += keys.len() as u64;
        for key in keys {
            self.batch.delete(Table::Journal, key);
        }
        let mut effects = Vec::new();
        let mut prefix = job.as_bytes().to_vec();
        prefix.push(b'/');
        scan_prefix(store, Table::Effects, &prefix, &mut |key, _| {
            effects.push(key.to_vec());
            true
        })?;
        for key in effects {
            // Leftovers only: an effect still in flight belongs to a live job.
            if !self
                .effects
                .contains_key(String::from_utf8_lossy(&key).as_ref())
            {
                self.batch.delete(Table::Effects, key);
                step.effects_removed += 1;
            }
        }
        step.compacted += 1;
        Ok(())
    }

    /// The start keys after `after` whose job is gone.
    fn collect_starts(
        &mut self,
        store: &dyn Store,
        after: &str,
        budget: usize,
    ) -> Result<Collected, StoreError> {
        let mut starts: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let start = exclusive_start(after);
        store.scan(Table::Starts, &start, None, &mut |key, job| {
            starts.push((key.to_vec(), job.to_vec()));
            starts.len() < budget
        })?;
        let mut step = Collected {
            scanned: starts.len() as u64,
            ..Collected::default()
        };
        for (key, job) in &starts {
            // A job forgotten by a step whose batch is not committed yet still reads as
            // there: its start key goes at the next collection.
            if store.get(Table::Jobs, job)?.is_none() {
                self.batch.delete(Table::Starts, key.clone());
                step.starts_removed += 1;
            }
        }
        step.cursor = match starts.last() {
            Some((last, _)) if starts.len() >= budget => {
                Some(format!("{STARTS}{}", String::from_utf8_lossy(last)))
            }
            _ => None,
        };
        Ok(step)
    }
}

/// The first key after `after` (`after` + `\0`), or the beginning.
fn exclusive_start(after: &str) -> Vec<u8> {
    if after.is_empty() {
        return Vec::new();
    }
    let mut start = after.as_bytes().to_vec();
    start.push(0);
    start
}
