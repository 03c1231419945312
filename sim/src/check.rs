//! Invariants, checked after every durable flush and every event, and the coverage
//! counters that show which situations a run reached.
//!
//! The checker keeps its own model of what is durable — each job's journal as last seen
//! after a flush, the completions recorded, the acknowledged jobs, the tokens handed to
//! seats — and compares the real cores against it. It never trusts the code under test
//! to tell it what should hold.

use palm_actors::job::{Event, EventKind};
use palm_actors::path::JobPath;
use palm_actors::store::{MemoryStore, Store, Table};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: &'static str,
    /// What was seen.
    pub detail: String,
}

/// The invariants the checker knows, for reports.
pub const INVARIANTS: &[&str] = &[
    "no_lost_acknowledged_job",
    "completion_recorded_at_most_once",
    "no_two_live_leases",
    "journals_only_grow",
    "state_is_the_fold_of_the_journal",
    "terminal_is_final",
    "completion_only_from_the_current_lease",
    "no_dual_truth",
    "no_projection_passed_off_as_the_home",
    "authorised_requests_pass",
    "a_named_home_homes_the_job",
    "liveness",
];

/// Every situation the world counts, so a seed set that never reaches one shows it as 0.
pub const COVERAGE_POINTS: &[&str] = &[
    "answer_relayed",
    "cancel_accepted",
    "cancel_relayed",
    "claim_released",
    "completion_not_in_flight_refused",
    "completion_recorded",
    "continue_accepted",
    "continue_after_the_end_refused",
    "continue_invalid_input_refused",
    "continue_wrong_key_refused",
    "crash_kept_some_unflushed_writes",
    "crash_lost_unflushed_writes",
    "crash_mid_flush",
    "crash_with_effects_running",
    "crash_with_leases_held",
    "duplicate_placement",
    "edge_crashed",
    "effect_placed_deep",
    "forwarded",
    "home_loss_seen_two_hops_down",
    "home_unreachable",
    "job_cancelled",
    "job_failed",
    "job_parked",
    "job_succeeded",
    "late_answer",
    "lease_expired",
    "lease_lost",
    "link_replaced_before_noticed",
    "local_effect_stopped",
    "message_duplicated",
    "message_lost",
    "message_lost_with_its_connection",
    "message_to_crashed_node",
    "partition",
    "placed_effect_stopped",
    "placement_refused",
    "placement_relayed",
    "placement_replaced",
    "placement_unanswered",
    "projection_served",
    "quick_restart",
    "realm_crashed",
    "relay_unanswered",
    "renewal_refused",
    "report_relayed",
    "restart_requeued_own_claims",
    "restart_with_parked_timers",
    "root_crashed",
    "stale_completion_refused",
    "status_from_home",
    "submit_from_an_edge_acknowledged",
    "timer_fired",
    "workload_hung",
    "workload_slow",
];

/// The situations only submits that name their home reach (`--named-homes`).
pub const NAMED_HOME_COVERAGE_POINTS: &[&str] = &[
    "submit_to_a_named_home_acknowledged",
    "submit_to_a_named_home_elsewhere_acknowledged",
];

/// The situations only a replicated root reaches (`--replicas`).
pub const REPLICA_COVERAGE_POINTS: &[&str] = &[
    "replica_cut_from_store",
    "replica_took_over",
    "stale_replica_fenced",
    "stale_write_before_takeover",
];

/// Counts how often a run reached interesting situations ("sometimes" assertions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    counts: BTreeMap<&'static str, u64>,
}

impl Coverage {
    /// Counts one occurrence of `what`.
    pub fn hit(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }

    /// Adds `n` occurrences.
    pub fn add(&mut self, what: &'static str, n: u64) {
        if n > 0 {
            *self.counts.entry(what).or_default() += n;
        }
    }

    /// Every counter that was hit.
    pub fn counts(&self) -> &BTreeMap<&'static str, u64> {
        &self.counts
    }

    /// Every known point with its count, zeros included.
    pub fn all(&self) -> BTreeMap<&'static str, u64> {
        let mut all: BTreeMap<&'static str, u64> =
            COVERAGE_POINTS.iter().map(|p| (*p, 0)).collect();
        for (point, n) in &self.counts {
            all.insert(point, *n);
        }
        all
    }

    /// Adds another run's counters.
    pub fn merge(&mut self, other: &Coverage) {
        for (what, n) in &other.counts {
            *self.counts.entry(what).or_default() += n;
        }
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Checker {
    /// Each job's journal as last seen durable.
    journals: BTreeMap<String, Vec<Event>>,
    /// Effect keys whose completion is recorded.
    completed: BTreeSet<String>,
    /// Jobs whose submit was acknowledged to a client.
    acknowledged: BTreeSet<String>,
    /// The latest fencing token handed out per effect.
    tokens: HashMap<String, u64>,
    /// Checks performed.
    pub checks: u64,
}

fn is_terminal(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Succeeded | EventKind::Failed { .. } | EventKind::Cancelled
    )
}

fn violation(invariant: &'static str, detail: String) -> Result<(), Violation> {
    Err(Violation { invariant, detail })
}

impl Checker {
    /// A job's submit reached its client.
    pub fn acknowledged(&mut self, job: &str) {
        self.acknowledged.insert(job.to_owned());
    }

    /// Jobs acknowledged so far.
    pub fn acknowledged_jobs(&self) -> &BTreeSet<String> {
        &self.acknowledged
    }

    /// A claim was granted with `token`.
    pub fn claimed(&mut self, key: &str, token: u64) {
        self.tokens.insert(key.to_owned(), token);
    }

    /// A completion under `token` was accepted by the job path.
    pub fn completion_accepted(&mut self, key: &str, token: u64) -> Result<(), Violation> {
        self.checks += 1;
        match self.tokens.get(key) {
            Some(current) if *current == token => Ok(()),
            current => violation(
                "completion_only_from_the_current_lease",
                format!(
                    "{key}: a completion under token {token} was accepted; the current claim's token is {current:?}"
                ),
            ),
        }
    }

    /// After a flush: every job the batch touched is checked against the model.
    pub fn flushed(
        &mut self,
        store: &MemoryStore,
        path: &mut JobPath,
        touched: &BTreeSet<String>,
    ) -> Result<(), Violation> {
        for job in touched {
            self.check_job(store, path, job)?;
        }
        Ok(())
    }

    fn check_job(
        &mut self,
        store: &MemoryStore,
        path: &mut JobPath,
        job: &str,
    ) -> Result<(), Violation> {
        self.checks += 1;
        let durable = path.journal(store, job).map_err(|e| Violation {
            invariant: "journals_only_grow",
            detail: format!("{job}: journal unreadable: {e}"),
        })?;
        let known = self.journals.get(job).cloned().unwrap_or_default();
        if durable.len() < known.len() || durable[..known.len()] != known[..] {
            let at = known
                .iter()
                .zip(&durable)
                .position(|(a, b)| a != b)
                .unwrap_or(durable.len().min(known.len()));
            return violation(
                "journals_only_grow",
                format!(
                    "{job}: durable journal of {} events does not extend the {} seen before (first difference at event {})",
                    durable.len(),
                    known.len(),
                    at + 1
                ),
            );
        }
        if let Some(last) = known.last()
            && is_terminal(&last.kind)
            && durable.len() > known.len()
        {
            return violation(
                "terminal_is_final",
                format!(
                    "{job}: `{}` was appended after `{}`",
                    durable[known.len()].kind.name(),
                    last.kind.name()
                ),
            );
        }
        for event in &durable[known.len()..] {
            if let EventKind::EffectCompleted { key, .. } = &event.kind
                && !self.completed.insert(key.clone())
            {
                return violation(
                    "completion_recorded_at_most_once",
                    format!("{job}: a second completion of {key} (event {})", event.seq),
                );
            }
        }
        if durable.len() > known.len() {
            self.journals.insert(job.to_owned(), durable.clone());
        }
        // The fold: a job rebuilt from its durable journal alone equals the live one.
        let rebuilt = path.rebuild(store, job).map_err(|e| Violation {
            invariant: "state_is_the_fold_of_the_journal",
            detail: format!("{job}: its journal does not replay: {e}"),
        })?;
        if let (Some(rebuilt), Some(live)) = (rebuilt, path.job_core(job)) {
            let same = rebuilt.status() == live.status()
                && rebuilt.seq() == live.seq()
                && rebuilt.engine().state() == live.engine().state()
                && rebuilt.waiting_on() == live.waiting_on();
            if !same {
                return violation(
                    "state_is_the_fold_of_the_journal",
                    format!(
                        "{job}: live {} at seq {} differs from its journal's fold ({} at seq {})",
                        live.status(),
                        live.seq(),
                        rebuilt.status(),
                        rebuilt.seq()
                    ),
                );
            }
        }
        Ok(())
    }

    /// After a restart: the current claims are what the store says (claims granted, and
    /// revocations, that were never durable died with the crash), and every acknowledged
    /// job is still in the store.
    pub fn restarted(&mut self, store: &MemoryStore, path: &JobPath) -> Result<(), Violation> {
        self.tokens = path
            .effects()
            .iter()
            .map(|(key, record)| (key.clone(), record.claim.as_ref().map_or(0, |c| c.token)))
            .collect();
        for job in &self.acknowledged {
            self.checks += 1;
            match path.record(store, job) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    return violation(
                        "no_lost_acknowledged_job",
                        format!("{job} was acknowledged to its client, and is gone after a crash"),
                    );
                }
                Err(err) => {
                    return violation(
                        "no_lost_acknowledged_job",
                        format!("{job}: unreadable after a crash: {err}"),
                    );
                }
            }
        }
        Ok(())
    }

    /// Live leases held by seats: `(key, holder)` pairs whose lease has not expired.
    pub fn leases(&mut self, live: &[(String, String)]) -> Result<(), Violation> {
        self.checks += 1;
        let mut holders: BTreeMap<&str, &str> = BTreeMap::new();
        for (key, holder) in live {
            if let Some(other) = holders.insert(key, holder) {
                return violation(
                    "no_two_live_leases",
                    format!("{key} is leased by both {other} and {holder}"),
                );
            }
        }
        Ok(())
    }

    /// Jobs touched by a batch (from its journal and job-summary keys).
    pub fn touched(batch: &palm_actors::store::WriteBatch) -> BTreeSet<String> {
        batch
            .writes()
            .iter()
            .filter_map(|w| match w.table {
                Table::Journal => w
                    .key
                    .split(|b| *b == 0)
                    .next()
                    .map(|job| String::from_utf8_lossy(job).into_owned()),
                Table::Jobs => Some(String::from_utf8_lossy(&w.key).into_owned()),
                _ => None,
            })
            .collect()
    }

    /// Reads every job id in the store (for the final liveness check).
    pub fn stored_jobs(store: &MemoryStore) -> Vec<String> {
        let mut jobs = Vec::new();
        let _ = store.scan(Table::Jobs, b"", None, &mut |key, _| {
            jobs.push(String::from_utf8_lossy(key).into_owned());
            true
        });
        jobs
    }
}
