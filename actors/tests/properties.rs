//! Property tests of the job path's central promises:
//! 1. restarting from the journal after any event gives exactly the same final job state
//!    and trace as a run without restart (at the job level and through the store);
//! 2. a completion delivered twice, or with a stale fencing token, changes nothing.

mod support;

use palm_actors::bt::{EffectRequest, Outcome, Program, RunResult};
use palm_actors::definition;
use palm_actors::job::{Event, EventKind, JobCore, NewJob};
use palm_actors::json::Json;
use palm_actors::path::CompleteError;
use palm_actors::random::{Rng, random_flow};
use proptest::prelude::*;
use serde_json::json;
use std::sync::Arc;
use support::Host;

fn program_of(source: &str) -> Arc<Program> {
    let definition =
        definition::parse(source, "random.json").unwrap_or_else(|d| panic!("{d:?}\n{source}"));
    Arc::new(Program::compile(&definition, &|_| None).expect("compile"))
}

fn run_result(exit_code: i32) -> Outcome {
    Outcome::Run(RunResult {
        exit_code: Some(exit_code),
        stdout: format!("out {exit_code}"),
        stderr: String::new(),
        duration_ms: 3,
        timed_out: false,
        error: None,
    })
}

/// Picks the next input for a job, or `None` when nothing can move it.
fn next_input(job: &JobCore, rng: &mut Rng, now: &mut u64) -> Option<EventKind> {
    if job.status().is_terminal() {
        return None;
    }
    *now += rng.below(50);
    if rng.chance(2) {
        return Some(EventKind::CancelRequested {
            reason: Some("random".into()),
        });
    }
    let outstanding: Vec<(&String, &EffectRequest)> = job
        .engine()
        .outstanding()
        .iter()
        .map(|(k, o)| (k, &o.request))
        .collect();
    let parked = job.waiting_on();
    let mut options = Vec::new();
    for (key, request) in &outstanding {
        match request {
            EffectRequest::Run { .. } => {
                options.push(EventKind::EffectCompleted {
                    key: (*key).clone(),
                    outcome: run_result(if rng.chance(85) { 0 } else { 1 }),
                    node: Some("n1".into()),
                });
            }
            EffectRequest::Timer { deadline } => {
                *now = (*now).max(*deadline);
                options.push(EventKind::TimerFired {
                    key: (*key).clone(),
                });
            }
            _ => {}
        }
    }
    for wait in parked {
        let input = if wait.schema.is_some() {
            json!(rng.below(10))
        } else {
            json!({"ok": true})
        };
        options.push(EventKind::Continued {
            key: wait.key.clone(),
            input: Json(input),
        });
    }
    if options.is_empty() {
        return Some(EventKind::Resumed);
    }
    let index = rng.below(options.len() as u64) as usize;
    Some(options.swap_remove(index))
}

/// Runs a job to the end with random inputs; returns the inputs applied, the journal and
/// the final job.
fn drive(program: &Arc<Program>, seed: u64) -> (Vec<(EventKind, u64)>, Vec<Event>, JobCore) {
    let mut rng = Rng::new(seed);
    let mut now = 1_000;
    let (mut job, mut journal) = JobCore::start(
        NewJob {
            id: "t-1".into(),
            flow: "random".into(),
            revision: 1,
            subflows: vec![],
            input: json!({"items": [1, 2, 3]}),
            parent: None,
            started_by: None,
        },
        Arc::clone(program),
        now,
    );
    let mut inputs = Vec::new();
    for _ in 0..400 {
        let Some(input) = next_input(&job, &mut rng, &mut now) else {
            break;
        };
        // A wrong continue must be refused without a trace.
        if rng.chance(10) {
            let before = job.clone();
            let wrong = EventKind::Continued {
                key: "no-such-wait".into(),
                input: Json(json!(1)),
            };
            assert!(job.apply(wrong, now).is_err());
            assert!(job == before, "a refused input changed the job");
        }
        match job.apply(input.clone(), now) {
            Ok(events) => {
                journal.extend(events);
                inputs.push((input, now));
            }
            Err(err) => panic!("driver produced a refused input {input:?}: {err}"),
        }
    }
    (inputs, journal, job)
}

fn through_postcard(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .map(|e| postcard::from_bytes(&postcard::to_stdvec(e).expect("encode")).expect("decode"))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn restart_after_any_event_gives_the_same_run(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let source = random_flow(&mut rng, "random");
        let program = program_of(&source);
        let (inputs, journal, final_job) = drive(&program, seed);
        // Every input boundary is a possible crash point: the journal holds the inputs
        // applied so far and everything they derived.
        let mut boundary = 0;
        let boundaries: Vec<usize> = journal
            .iter()
            .enumerate()
            .filter(|(_, e)| e.kind.is_input() && e.seq > 1)
            .map(|(i, _)| i)
            .chain(std::iter::once(journal.len()))
            .collect();
        for (k, end) in boundaries.iter().enumerate() {
            let prefix = through_postcard(&journal[..*end]);
            let mut lookup = |_: &str, _: u32, _: &[(String, u32)]| Some(Arc::clone(&program));
            let mut job = JobCore::replay(&prefix, &mut lookup, "t-1")
                .unwrap_or_else(|e| panic!("replay of {} events: {e}\n{source}", end));
            let mut rebuilt = prefix.clone();
            for (input, at) in &inputs[k..] {
                rebuilt.extend(job.apply(input.clone(), *at).expect("same inputs apply"));
            }
            prop_assert!(job == final_job, "state differs after restart at event {}\n{}", end, source);
            prop_assert_eq!(&rebuilt, &journal);
            boundary += 1;
        }
        prop_assert_eq!(boundary, inputs.len() + 1);
    }
}

/// Through the store: a host that restarts (drops its job path and reopens it from the
/// flushed store) at random moments ends with the same journal as one that never does.
fn run_host(source: &str, seed: u64, restart_percent: u64) -> (Vec<Event>, String) {
    let mut host = Host::new();
    let mut rng = Rng::new(seed ^ 0xABCD);
    let submitted = host.submit_source(source, json!({}));
    let job = submitted.job.clone();
    // Claims held across iterations, like seats holding running processes.
    let mut held: std::collections::BTreeMap<String, palm_actors::path::ClaimedEffect> =
        Default::default();
    for _ in 0..300 {
        if rng.chance(restart_percent) {
            host = host.restart();
            // The previous life's seats are gone; its effects are back in the queue.
            held.clear();
        }
        // A parked job leaves memory once its writes are durable; its waits are read
        // back from the store.
        let parked: Vec<_> = match host.path.active_job(&job) {
            Some(core) => core.waiting_on().to_vec(),
            None if host.path.is_dormant(&job) => host.view(&job).waiting_on,
            None => break,
        };
        host.now += rng.below(50);
        for claim in host.claim_all() {
            held.insert(claim.key.clone(), claim);
        }
        held.retain(|key, _| host.path.effects().contains_key(key));
        let claims: Vec<_> = held.values().cloned().collect();
        let mut timers: Vec<(u64, String)> = host
            .path
            .effects()
            .iter()
            .filter_map(|(k, r)| match r.request {
                EffectRequest::Timer { deadline } => Some((deadline, k.clone())),
                _ => None,
            })
            .collect();
        timers.sort();
        let choices = claims.len() + parked.len() + timers.len().min(1);
        if choices == 0 {
            host.path.resume_yielded(host.now);
            host.commit();
            continue;
        }
        let pick = rng.below(choices as u64) as usize;
        if pick < claims.len() {
            let effect = &claims[pick];
            // Inject the two faults the property is about, and check they change nothing.
            let stale =
                host.path
                    .complete(host.now, &effect.key, effect.token + 7, run_result(0), None);
            assert!(matches!(stale, Err(CompleteError::StaleToken { .. })));
            assert!(
                !host.path.has_writes(),
                "a stale completion wrote something"
            );
            host.complete_run(effect, if rng.chance(85) { 0 } else { 1 }, "");
            let journal = host.journal(&job);
            let twice =
                host.path
                    .complete(host.now, &effect.key, effect.token, run_result(0), None);
            assert!(matches!(twice, Err(CompleteError::NotInFlight(_))));
            assert!(
                !host.path.has_writes(),
                "a duplicate completion wrote something"
            );
            assert_eq!(host.journal(&job), journal);
        } else if pick < claims.len() + parked.len() {
            let wait = &parked[pick - claims.len()];
            let input = if wait.schema.is_some() {
                json!(rng.below(10))
            } else {
                json!({"ok": true})
            };
            let store = host.store.clone();
            host.path
                .continue_job(host.now, &job, &wait.key, input, &*store)
                .expect("continue");
            host.commit();
        } else {
            host.now = host.now.max(timers[0].0);
            host.path.fire_timers(host.now);
            host.commit();
        }
    }
    let status = host.view(&job).status.to_string();
    (host.journal(&job), status)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn restarts_through_the_store_change_nothing(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let source = random_flow(&mut rng, "random");
        let (steady, steady_status) = run_host(&source, seed, 0);
        let (restarted, restarted_status) = run_host(&source, seed, 25);
        prop_assert_eq!(steady_status, restarted_status);
        let kinds = |j: &[Event]| j.iter().map(|e| (e.seq, e.kind.clone())).collect::<Vec<_>>();
        prop_assert_eq!(kinds(&steady), kinds(&restarted), "journals differ\n{}", source);
    }
}

#[test]
#[ignore = "statistics for people: cargo test --test properties -- --ignored --nocapture"]
fn workload_statistics() {
    let mut lengths = Vec::new();
    let mut statuses = std::collections::BTreeMap::new();
    for seed in 0..200u64 {
        let mut rng = Rng::new(seed);
        let source = random_flow(&mut rng, "random");
        let program = program_of(&source);
        let (inputs, journal, job) = drive(&program, seed);
        lengths.push((journal.len(), inputs.len()));
        *statuses.entry(job.status().to_string()).or_insert(0) += 1;
    }
    lengths.sort();
    println!(
        "journal/inputs percentiles: p10 {:?} p50 {:?} p90 {:?} max {:?}",
        lengths[20], lengths[100], lengths[180], lengths[199]
    );
    println!("final statuses: {statuses:?}");
}

#[test]
#[ignore = "debug aid"]
fn show_some_flows() {
    for seed in 0..6u64 {
        let mut rng = Rng::new(seed);
        let source = random_flow(&mut rng, "random");
        let program = program_of(&source);
        let (inputs, journal, job) = drive(&program, seed);
        let compact: serde_json::Value = serde_json::from_str(&source).unwrap();
        println!(
            "seed {seed}: {} events {} inputs {}: {}",
            journal.len(),
            inputs.len(),
            job.status(),
            compact["tree"]
        );
    }
}
