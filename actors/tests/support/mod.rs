//! Test support shared by the palm-actors integration tests: a driver around a `JobPath`
//! over a memory store, playing the host (commit, flush, claim, complete) by hand.

#![allow(dead_code)]

use palm_actors::bt::{EffectRequest, Outcome, RunResult};
use palm_actors::job::{Event, JobStatus};
use palm_actors::path::{
    ClaimedEffect, FlowRef, JobPath, JobPathConfig, JobView, Notice, SubmitRequest, Submitted,
};
use palm_actors::store::{MemoryStore, Store};
use serde_json::Value;
use std::sync::Arc;

pub const T0: u64 = 1_700_000_000_000;

/// A host played by hand: every call commits and flushes, like a real node acknowledging.
pub struct Host {
    pub store: Arc<MemoryStore>,
    pub path: JobPath,
    pub now: u64,
    pub notices: Vec<Notice>,
}

impl Host {
    pub fn new() -> Host {
        let store = Arc::new(MemoryStore::new());
        Host::open(store, T0)
    }

    pub fn open(store: Arc<MemoryStore>, now: u64) -> Host {
        let (path, _report) =
            JobPath::open(&*store, JobPathConfig::default(), 42).expect("open job path");
        let mut host = Host {
            store,
            path,
            now,
            notices: Vec::new(),
        };
        host.commit();
        host
    }

    /// Drops the job path and opens a new one from what was flushed.
    pub fn restart(self) -> Host {
        let Host { store, now, .. } = self;
        Host::open(store, now)
    }

    pub fn commit(&mut self) {
        let batch = self.path.take_batch();
        self.store.commit(&batch).expect("commit");
        self.store.flush().expect("flush");
        self.notices.extend(self.path.take_notices());
    }

    pub fn submit_source(&mut self, source: &str, input: Value) -> Submitted {
        let input = input.as_object().cloned().unwrap_or_default();
        let submitted = self
            .path
            .submit(
                self.now,
                SubmitRequest {
                    flow: FlowRef::Source {
                        source: source.to_owned(),
                        origin: "test.yaml".to_owned(),
                    },
                    input,
                    args: Vec::new(),
                    started_by: None,
                },
                &*self.store,
            )
            .expect("submit");
        self.commit();
        submitted
    }

    pub fn claim(&mut self) -> Option<ClaimedEffect> {
        let claimed = self.path.claim(self.now, "local/seat-0", &|_, _| true);
        self.commit();
        claimed
    }

    pub fn claim_all(&mut self) -> Vec<ClaimedEffect> {
        let mut all = Vec::new();
        while let Some(c) = self.claim() {
            all.push(c);
        }
        all
    }

    pub fn complete_run(
        &mut self,
        effect: &ClaimedEffect,
        exit_code: i32,
        stdout: &str,
    ) -> JobStatus {
        let status = self.complete_run_uncommitted(effect, exit_code, stdout);
        self.commit();
        status
    }

    /// Completes a run effect like [`Host::complete_run`], leaving its writes in the
    /// pending batch (the host has not committed yet).
    pub fn complete_run_uncommitted(
        &mut self,
        effect: &ClaimedEffect,
        exit_code: i32,
        stdout: &str,
    ) -> JobStatus {
        self.path
            .complete(
                self.now,
                &effect.key,
                effect.token,
                Outcome::Run(RunResult {
                    exit_code: Some(exit_code),
                    stdout: stdout.to_owned(),
                    stderr: String::new(),
                    duration_ms: 1,
                    timed_out: false,
                    error: None,
                }),
                Some("local".to_owned()),
            )
            .expect("complete")
            .status
    }

    /// Completes a `call` effect with a provider's answer.
    pub fn complete_call(&mut self, effect: &ClaimedEffect, ok: bool, value: Value) -> JobStatus {
        let status = self
            .path
            .complete(
                self.now,
                &effect.key,
                effect.token,
                Outcome::Call {
                    ok,
                    value: value.into(),
                    error: (!ok).then(|| "failed".to_owned()),
                },
                Some("local".to_owned()),
            )
            .expect("complete")
            .status;
        self.commit();
        status
    }

    /// The provider and arguments of a `call` effect.
    pub fn call_of(effect: &ClaimedEffect) -> (String, Value) {
        match &effect.request {
            EffectRequest::Call { provider, args, .. } => (provider.clone(), args.0.clone()),
            other => panic!("not a call effect: {other:?}"),
        }
    }

    pub fn advance(&mut self, ms: u64) -> usize {
        self.now += ms;
        let fired = self.path.fire_timers(self.now);
        self.path.reap_leases(self.now);
        self.commit();
        fired
    }

    pub fn view(&mut self, job: &str) -> JobView {
        self.path
            .job_view(&*self.store, job)
            .expect("store readable")
            .expect("job exists")
    }

    pub fn journal(&self, job: &str) -> Vec<Event> {
        self.path.journal(&*self.store, job).expect("journal")
    }

    pub fn cmd(effect: &ClaimedEffect) -> String {
        match &effect.request {
            EffectRequest::Run { cmd, .. } => cmd.clone(),
            other => panic!("not a run effect: {other:?}"),
        }
    }
}

pub fn example(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(format!("{name}.yaml"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
