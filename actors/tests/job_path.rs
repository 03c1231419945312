//! The job path end to end, with the host played by hand: the example flows, waits,
//! retries, races, leases, fencing, restarts and crashes.

mod support;

use palm_actors::bt::{EffectRequest, Outcome};
use palm_actors::job::{ApplyError, EventKind, JobStatus};
use palm_actors::path::{CompleteError, FlowRef, JobError, Notice, SubmitError, SubmitRequest};
use palm_actors::store::Store;
use serde_json::json;
use support::{Host, example};

#[test]
fn hello_runs_its_command_and_checks_the_result() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("hello"), json!({}));
    assert_eq!(submitted.status, JobStatus::Running);
    let effect = host.claim().expect("one run effect");
    assert_eq!(Host::cmd(&effect), "echo hello world");
    assert_eq!(effect.job, submitted.job);
    assert!(effect.key.starts_with(&format!("{}/", submitted.job)));
    assert_eq!(
        host.complete_run(&effect, 0, "hello world\n"),
        JobStatus::Succeeded
    );
    let view = host.view(&submitted.job);
    assert_eq!(view.status, JobStatus::Succeeded);
    assert_eq!(view.state["greeting"], "hello world");
    assert_eq!(view.state["echoed"]["exit_code"], 0);
    assert_eq!(view.state["echoed"]["stdout"], "hello world\n");
    assert_eq!(view.effects.len(), 1);
    assert_eq!(view.effects[0].node.as_deref(), Some("local"));
    let kinds: Vec<&str> = host
        .journal(&submitted.job)
        .iter()
        .map(|e| e.kind.name())
        .collect();
    assert_eq!(
        kinds,
        vec![
            "submitted",
            "effect_requested",
            "effect_completed",
            "succeeded"
        ]
    );
}

#[test]
fn an_effect_s_request_is_numbered_by_the_batch_that_holds_it() {
    // What a host waits for before a seat may act on a claim: the batch that requested
    // the effect, not every write made since.
    let mut host = Host::new();
    let requested_in = host.path.generation();
    host.submit_source(&example("hello"), json!({}));
    assert!(
        host.path.generation() > requested_in,
        "the submit's batch was taken"
    );
    let effect = host.claim().expect("one run effect");
    assert_eq!(
        host.path.request_generation(&effect.key),
        Some(requested_in)
    );
    // Work of another job after it does not move its number.
    let later = host.submit_source(&example("hello"), json!({}));
    assert_eq!(
        host.path.request_generation(&effect.key),
        Some(requested_in)
    );
    assert_eq!(
        host.complete_run(&effect, 0, "hello world\n"),
        JobStatus::Succeeded
    );
    assert_eq!(
        host.path.request_generation(&effect.key),
        None,
        "a completed effect is forgotten"
    );
    // A request the next life finds in the store has no number: it is durable.
    let mut host = host.restart();
    let found = host.claim().expect("the other job's effect");
    assert_eq!(found.job, later.job);
    assert_eq!(host.path.request_generation(&found.key), None);
}

#[test]
fn a_job_s_writes_are_numbered_by_the_batch_that_holds_the_last() {
    // What a host checks before answering a read of a job at once: whether any write of
    // it is in the pending batch or the one taken before it (whose commit may be in
    // flight).
    let mut host = Host::new();
    let submitted_in = host.path.generation();
    let job = host.submit_source(&example("hello"), json!({})).job;
    assert_eq!(host.path.written_in(&job), Some(submitted_in));
    // A claim writes the effect, not the job; its batch is taken, so the submit's
    // writes are older than the last two batches.
    let effect = host.claim().expect("run");
    assert_eq!(host.path.written_in(&job), None);
    // Completing writes the job again, into the pending batch until it is taken.
    host.complete_run_uncommitted(&effect, 0, "hello world\n");
    assert_eq!(host.path.written_in(&job), Some(host.path.generation()));
    let completed_in = host.path.generation();
    host.commit();
    assert_eq!(host.path.written_in(&job), Some(completed_in));
    assert_eq!(host.view(&job).status, JobStatus::Succeeded);
    // Another job's batch taken after it: every write of this one is older.
    host.submit_source(&example("hello"), json!({}));
    assert_eq!(host.path.written_in(&job), None);
}

#[test]
fn hello_with_input_and_a_failing_check() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("hello"), json!({"who": "palm"}));
    let effect = host.claim().expect("run");
    assert_eq!(Host::cmd(&effect), "echo hello palm");
    assert_eq!(host.complete_run(&effect, 3, ""), JobStatus::Failed);
    let view = host.view(&submitted.job);
    let error = view.error.expect("error");
    assert!(error.contains("exited with 3"), "{error}");
}

#[test]
fn approval_parks_refuses_bad_input_and_continues() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("approval"), json!({}));
    let build = host.claim().expect("build");
    assert_eq!(
        host.complete_run(&build, 0, "building\n"),
        JobStatus::Waiting
    );
    let view = host.view(&submitted.job);
    assert_eq!(view.waiting_on.len(), 1);
    assert_eq!(view.waiting_on[0].key, "approve");
    assert_eq!(
        view.waiting_on[0].prompt.as_deref(),
        Some("Ship the build?")
    );
    let journal_before = host.journal(&submitted.job);

    let store = host.store.clone();
    let wrong_key = host.path.continue_job(
        host.now,
        &submitted.job,
        "aprove",
        json!({"ok": true}),
        &*store,
    );
    match wrong_key {
        Err(JobError::Refused(ApplyError::NotWaitingOn { waiting, .. })) => {
            assert_eq!(waiting, vec!["approve"])
        }
        other => panic!("{other:?}"),
    }
    let invalid = host.path.continue_job(
        host.now,
        &submitted.job,
        "approve",
        json!({"ok": "yes"}),
        &*store,
    );
    match invalid {
        Err(JobError::Refused(ApplyError::InvalidInput { problems, .. })) => {
            assert_eq!(problems, vec!["at /ok: expected boolean, found string"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(!host.path.has_writes(), "a refused continue writes nothing");
    assert_eq!(
        host.journal(&submitted.job),
        journal_before,
        "nothing lost, nothing added"
    );
    assert_eq!(host.view(&submitted.job).status, JobStatus::Waiting);

    let status = host
        .path
        .continue_job(
            host.now,
            &submitted.job,
            "approve",
            json!({"ok": true}),
            &*store,
        )
        .expect("continue");
    host.commit();
    assert_eq!(status, JobStatus::Running);
    let ship = host.claim().expect("ship");
    assert_eq!(Host::cmd(&ship), "echo shipped");
    assert_eq!(
        host.complete_run(&ship, 0, "shipped\n"),
        JobStatus::Succeeded
    );
    assert_eq!(
        host.view(&submitted.job).state["approve"],
        json!({"ok": true})
    );
}

#[test]
fn approval_refused_fails_with_the_message() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("approval"), json!({}));
    let build = host.claim().expect("build");
    host.complete_run(&build, 0, "");
    let store = host.store.clone();
    let status = host
        .path
        .continue_job(
            host.now,
            &submitted.job,
            "approve",
            json!({"ok": false}),
            &*store,
        )
        .expect("continue");
    host.commit();
    assert_eq!(status, JobStatus::Failed);
    let error = host.view(&submitted.job).error.expect("error");
    assert!(error.starts_with("not approved"), "{error}");
}

#[test]
fn a_parked_job_survives_a_restart() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("approval"), json!({}));
    let build = host.claim().expect("build");
    host.complete_run(&build, 0, "");
    let mut host = host.restart();
    assert_eq!(host.view(&submitted.job).status, JobStatus::Waiting);
    let store = host.store.clone();
    host.path
        .continue_job(
            host.now,
            &submitted.job,
            "approve",
            json!({"ok": true}),
            &*store,
        )
        .expect("continue after restart");
    host.commit();
    let ship = host.claim().expect("ship");
    assert_eq!(host.complete_run(&ship, 0, ""), JobStatus::Succeeded);
}

#[test]
fn flaky_retries_after_its_backoff_with_a_new_attempt_key() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("flaky"), json!({}));
    let first = host.claim().expect("attempt 1");
    assert!(first.key.ends_with("/1"), "{}", first.key);
    assert_eq!(host.complete_run(&first, 1, ""), JobStatus::Running);
    assert!(host.claim().is_none(), "backoff: nothing to claim yet");
    assert_eq!(host.path.next_deadline(), Some(host.now + 100));
    assert_eq!(host.advance(99), 0);
    assert_eq!(host.advance(1), 1, "backoff timer fires at 100 ms");
    let second = host.claim().expect("attempt 2");
    assert_ne!(first.key, second.key);
    assert!(second.key.ends_with("/2"), "{}", second.key);
    assert_eq!(host.complete_run(&second, 0, ""), JobStatus::Succeeded);
    let completions = host
        .journal(&submitted.job)
        .iter()
        .filter(|e| matches!(e.kind, EventKind::EffectCompleted { .. }))
        .count();
    assert_eq!(completions, 2);
}

#[test]
fn race_halts_the_slow_branch_and_cancels_its_effect() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("race"), json!({}));
    let effects = host.claim_all();
    assert_eq!(effects.len(), 2, "both branches start");
    let fast = effects
        .iter()
        .find(|e| Host::cmd(e).contains("fast"))
        .expect("fast");
    let slow = effects
        .iter()
        .find(|e| Host::cmd(e).contains("slow"))
        .expect("slow");
    host.notices.clear();
    assert_eq!(host.complete_run(fast, 0, "fast\n"), JobStatus::Succeeded);
    assert!(
        host.notices.contains(&Notice::CancelEffect {
            key: slow.key.clone(),
            token: slow.token,
            holder: "local/seat-0".to_owned()
        }),
        "the slow process must be killed: {:?}",
        host.notices
    );
    assert!(
        host.path.effects().is_empty(),
        "no effect or timer left behind"
    );
    assert_eq!(
        host.path.next_deadline(),
        None,
        "the timeout timer was cancelled"
    );
    let view = host.view(&submitted.job);
    assert!(
        view.effects
            .iter()
            .any(|e| e.key == slow.key && e.state == "cancelled")
    );
}

#[test]
fn race_timeout_fails_the_slow_branch_when_it_fires() {
    let mut host = Host::new();
    let source =
        "name: slow\ntree:\n  timeout:\n    ms: 5000\n    do:\n      run: { cmd: \"sleep 30\" }\n";
    let submitted = host.submit_source(source, json!({}));
    let slow = host.claim().expect("run");
    host.notices.clear();
    host.advance(5000);
    assert_eq!(host.view(&submitted.job).status, JobStatus::Failed);
    assert!(
        host.notices
            .iter()
            .any(|n| matches!(n, Notice::CancelEffect { key, .. } if key == &slow.key))
    );
    assert!(
        host.view(&submitted.job)
            .error
            .unwrap_or_default()
            .contains("timed out after 5000 ms")
    );
}

#[test]
fn fanout_respects_max_concurrency() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("fanout"), json!({}));
    let mut done = Vec::new();
    loop {
        let batch = host.claim_all();
        if batch.is_empty() {
            break;
        }
        assert!(batch.len() <= 3, "at most 3 at once, got {}", batch.len());
        for effect in batch {
            done.push(Host::cmd(&effect));
            host.complete_run(&effect, 0, "");
        }
    }
    assert_eq!(done.len(), 6);
    for i in 1..=6 {
        assert!(
            done.contains(&format!("sleep 0.2; echo item {i}")),
            "{done:?}"
        );
    }
    assert_eq!(host.view(&submitted.job).status, JobStatus::Succeeded);
}

#[test]
fn a_duplicate_or_stale_completion_changes_nothing() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("flaky"), json!({}));
    let first = host.claim().expect("run");
    let stale_token = host.path.complete(
        host.now,
        &first.key,
        first.token + 1000,
        Outcome::TimerFired,
        None,
    );
    assert!(
        matches!(stale_token, Err(CompleteError::StaleToken { .. })),
        "{stale_token:?}"
    );
    assert!(!host.path.has_writes());
    host.complete_run(&first, 1, "");
    let journal = host.journal(&submitted.job);
    let again = host
        .path
        .complete(host.now, &first.key, first.token, Outcome::TimerFired, None);
    assert!(
        matches!(again, Err(CompleteError::NotInFlight(_))),
        "{again:?}"
    );
    assert!(!host.path.has_writes());
    assert_eq!(host.journal(&submitted.job), journal);
}

#[test]
fn an_expired_lease_is_reclaimed_and_the_old_holder_is_fenced_off() {
    let mut host = Host::new();
    host.submit_source(&example("hello"), json!({}));
    let first = host.claim().expect("claim");
    host.notices.clear();
    host.advance(palm_actors::path::LEASE_MS_DEFAULT);
    assert!(
        host.notices
            .iter()
            .any(|n| matches!(n, Notice::CancelEffect { key, .. } if key == &first.key))
    );
    let second = host.claim().expect("reclaimed");
    assert_eq!(second.key, first.key, "same effect, same idempotency key");
    assert!(second.token > first.token, "a new fencing token");
    let late = host
        .path
        .complete(host.now, &first.key, first.token, Outcome::TimerFired, None);
    assert!(
        matches!(late, Err(CompleteError::StaleToken { .. })),
        "{late:?}"
    );
    assert_eq!(host.complete_run(&second, 0, ""), JobStatus::Succeeded);
}

#[test]
fn renewing_a_lease_keeps_the_claim() {
    let mut host = Host::new();
    host.submit_source(&example("hello"), json!({}));
    let claim = host.claim().expect("claim");
    host.now += 20_000;
    host.path
        .renew(host.now, &claim.key, claim.token)
        .expect("renew");
    host.commit();
    host.advance(20_000);
    assert!(host.claim().is_none(), "still held after renewal");
    assert!(
        host.path
            .renew(host.now, &claim.key, claim.token + 1)
            .is_err()
    );
}

#[test]
fn a_restart_requeues_effects_held_by_the_previous_life() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("hello"), json!({}));
    let before = host.claim().expect("claim");
    let mut host = host.restart();
    let after = host.claim().expect("requeued at once, no lease wait");
    assert_eq!(after.key, before.key);
    assert!(
        after.token > before.token,
        "tokens stay monotonic across restarts"
    );
    assert_eq!(host.complete_run(&after, 0, ""), JobStatus::Succeeded);
    assert_eq!(host.view(&submitted.job).status, JobStatus::Succeeded);
}

#[test]
fn a_recorded_process_group_is_found_by_the_next_life_and_forgotten_by_token() {
    use palm_actors::path::records::RunningGroup;
    let mut host = Host::new();
    host.submit_source(&example("hello"), json!({}));
    let effect = host.claim().expect("claim");
    let group = |token| RunningGroup {
        token,
        pgid: 4242,
        boot: "boot-1".to_owned(),
        start_ticks: 77,
    };
    // A group under a stale token is refused: that command must not start.
    assert!(
        host.path
            .record_group(&effect.key, group(effect.token + 1))
            .is_err()
    );
    host.path
        .record_group(&effect.key, group(effect.token))
        .expect("the current claim's group is recorded");
    host.commit();
    let mut host = host.restart();
    assert_eq!(
        host.path.groups().get(&effect.key),
        Some(&group(effect.token)),
        "the next life finds what the last one left running"
    );
    // Forgetting under another token keeps the record; under its own, it goes for good.
    host.path.forget_group(&effect.key, effect.token + 5);
    assert_eq!(host.path.groups().len(), 1);
    host.path.forget_group(&effect.key, effect.token);
    host.commit();
    let host = host.restart();
    assert!(host.path.groups().is_empty());
    // An effect this path does not know (placed here by another home) is recorded as is.
    let mut host = host;
    host.path
        .record_group("elsewhere/0.1/1", group(9))
        .expect("a placed effect's group");
}

#[test]
fn a_crash_loses_only_what_was_never_acknowledged() {
    let mut host = Host::new();
    let acked = host.submit_source(&example("hello"), json!({}));
    // A submission whose batch is committed but not flushed was never acknowledged.
    let input = serde_json::Map::new();
    let unacked = host
        .path
        .submit(
            host.now,
            SubmitRequest {
                flow: FlowRef::Stored {
                    name: "hello".into(),
                    revision: None,
                },
                input,
                args: Vec::new(),
                started_by: None,
            },
            &*host.store,
        )
        .expect("submit");
    let batch = host.path.take_batch();
    host.store.commit(&batch).expect("commit");
    host.store.crash();
    let mut host = host.restart();
    assert_eq!(host.view(&acked.job).status, JobStatus::Running);
    let store = host.store.clone();
    assert!(
        host.path
            .job_view(&*store, &unacked.job)
            .expect("read")
            .is_none()
    );
    let effect = host.claim().expect("the acknowledged job's effect");
    assert_eq!(effect.job, acked.job);
}

#[test]
fn sleep_is_a_durable_timer() {
    let mut host = Host::new();
    let submitted = host.submit_source("name: nap\ntree:\n  sleep: 1m\n", json!({}));
    assert_eq!(submitted.status, JobStatus::Running);
    host.advance(30_000);
    let mut host = host.restart();
    assert_eq!(host.path.next_deadline(), Some(support::T0 + 60_000));
    assert_eq!(host.advance(30_000), 1);
    assert_eq!(host.view(&submitted.job).status, JobStatus::Succeeded);
}

#[test]
fn wait_timeout_fails_the_wait() {
    let mut host = Host::new();
    let source = "name: w\ntree:\n  selector:\n    - wait: { key: go, timeout_ms: 1h }\n    - set: { fallback: true }\n";
    let submitted = host.submit_source(source, json!({}));
    assert_eq!(submitted.status, JobStatus::Waiting);
    host.advance(3_600_000);
    let view = host.view(&submitted.job);
    assert_eq!(view.status, JobStatus::Succeeded);
    assert_eq!(view.state["fallback"], true);
    assert!(view.waiting_on.is_empty());
}

#[test]
fn spawn_waits_for_its_child_and_cancel_cascades() {
    let mut host = Host::new();
    host.submit_source("name: child\ninput:\n  n: integer\ntree:\n  sequence:\n    - run: \"echo {{ input.n }}\"\n    - set: { doubled: \"{{ input.n * 2 }}\" }\n", json!({"n": 1}));
    let leftover = host.claim().expect("child run");
    host.complete_run(&leftover, 0, "");
    let parent_source =
        "name: parent\ntree:\n  spawn: { flow: child, input: { n: 21 }, wait: true, save: kid }\n";
    let parent = host.submit_source(parent_source, json!({}));
    assert_eq!(parent.status, JobStatus::Running);
    let run = host.claim().expect("child's run");
    assert_eq!(Host::cmd(&run), "echo 21");
    assert_ne!(run.job, parent.job);
    assert_eq!(host.complete_run(&run, 0, "21\n"), JobStatus::Succeeded);
    let view = host.view(&parent.job);
    assert_eq!(view.status, JobStatus::Succeeded);
    assert_eq!(view.state["kid"]["status"], "succeeded");
    assert_eq!(view.state["kid"]["state"]["doubled"], 42);
    let child_view = host.view(&run.job);
    assert_eq!(
        child_view.parent.as_ref().map(|p| p.job.as_str()),
        Some(parent.job.as_str())
    );

    // Cancelling a parent cancels the child it waits on.
    let parent2 = host.submit_source(parent_source, json!({}));
    let run2 = host.claim().expect("second child's run");
    let store = host.store.clone();
    host.notices.clear();
    host.path
        .cancel(host.now, &parent2.job, Some("test".into()), &*store)
        .expect("cancel");
    host.commit();
    assert_eq!(host.view(&parent2.job).status, JobStatus::Cancelled);
    assert_eq!(host.view(&run2.job).status, JobStatus::Cancelled);
    assert!(
        host.notices
            .iter()
            .any(|n| matches!(n, Notice::CancelEffect { key, .. } if key == &run2.key))
    );
    let again = host.path.cancel(host.now, &parent2.job, None, &*store);
    assert!(
        matches!(again, Err(JobError::Refused(ApplyError::Terminal { .. }))),
        "{again:?}"
    );
}

#[test]
fn spawn_of_an_unknown_flow_fails_the_leaf() {
    let mut host = Host::new();
    let submitted = host.submit_source("name: p\ntree:\n  spawn: nowhere\n", json!({}));
    assert_eq!(submitted.status, JobStatus::Failed);
    assert!(
        host.view(&submitted.job)
            .error
            .unwrap_or_default()
            .contains("unknown flow `nowhere`")
    );
}

#[test]
fn self_spawning_stops_at_the_depth_bound() {
    let mut host = Host::new();
    let submitted = host.submit_source(
        "name: me\ntree:\n  spawn: { flow: me, wait: true }\n",
        json!({}),
    );
    assert_eq!(submitted.status, JobStatus::Failed);
    let jobs = host.path.list_jobs(&*host.store, None, 1000).expect("list");
    assert_eq!(jobs.len(), palm_actors::path::SPAWN_DEPTH_MAX as usize + 1);
    assert!(jobs.iter().all(|j| j.status == JobStatus::Failed));
}

#[test]
fn submit_errors_are_clear_and_write_nothing() {
    let mut host = Host::new();
    let err = host
        .path
        .submit(
            host.now,
            SubmitRequest {
                flow: FlowRef::Stored {
                    name: "nope".into(),
                    revision: None,
                },
                input: Default::default(),
                args: Vec::new(),
                started_by: None,
            },
            &*host.store,
        )
        .unwrap_err();
    assert!(matches!(err, SubmitError::UnknownFlow { .. }), "{err}");
    let err = host
        .path
        .submit(
            host.now,
            SubmitRequest {
                flow: FlowRef::Source {
                    source: example("hello"),
                    origin: "hello.yaml".into(),
                },
                input: json!({"who": 5}).as_object().cloned().unwrap_or_default(),
                args: Vec::new(),
                started_by: None,
            },
            &*host.store,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid input: input `who`: expected string, found integer"
    );
    let err = host
        .path
        .submit(
            host.now,
            SubmitRequest {
                flow: FlowRef::Source {
                    source: "name: x\ntree: { bogus: 1 }\n".into(),
                    origin: "x.yaml".into(),
                },
                input: Default::default(),
                args: Vec::new(),
                started_by: None,
            },
            &*host.store,
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("x.yaml:2:9: error: unknown node type `bogus`"),
        "{err}"
    );
    // The failed submit with valid source stored the definition revision only; no job.
    let jobs = host.path.list_jobs(&*host.store, None, 10).expect("list");
    assert!(jobs.is_empty());
}

#[test]
fn definitions_are_revisions_and_jobs_pin_theirs() {
    let mut host = Host::new();
    let v1 = "name: pin\ntree:\n  sequence:\n    - sleep: 1s\n    - set: { v: 1 }\n";
    let v2 = "name: pin\ntree:\n  sequence:\n    - sleep: 1s\n    - set: { v: 2 }\n";
    let a = host
        .path
        .add_definition(host.now, v1, "pin.yaml")
        .expect("v1");
    let again = host
        .path
        .add_definition(host.now, v1, "pin.yaml")
        .expect("v1 again");
    assert_eq!((a.revision, a.created), (1, true));
    assert_eq!((again.revision, again.created), (1, false));
    host.commit();
    let job1 = host.submit_source(v1, json!({}));
    let b = host
        .path
        .add_definition(host.now, v2, "pin.yaml")
        .expect("v2");
    assert_eq!(b.revision, 2);
    host.commit();
    let job2 = host.submit_source(v2, json!({}));
    let mut host = host.restart();
    host.advance(1000);
    assert_eq!(
        host.view(&job1.job).state["v"],
        1,
        "job 1 pinned revision 1"
    );
    assert_eq!(host.view(&job2.job).state["v"], 2);
    assert_eq!(host.view(&job1.job).revision, 1);
}

#[test]
fn subflows_are_inlined_and_pinned() {
    let mut host = Host::new();
    host.path
        .add_definition(
            host.now,
            "name: greet\ntree:\n  set: { greeting: \"hi {{ input.who }}\" }\n",
            "greet.yaml",
        )
        .expect("greet");
    host.commit();
    let submitted = host.submit_source(
        "name: outer\ninput:\n  who: string\ntree:\n  sequence:\n    - subflow: greet\n    - check: \"state.greeting == 'hi bo'\"\n",
        json!({"who": "bo"}),
    );
    assert_eq!(submitted.status, JobStatus::Succeeded);
    let err = host
        .path
        .add_definition(
            host.now,
            "name: loop\ntree:\n  subflow: loop\n",
            "loop.yaml",
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("subflow cycle: loop → loop"),
        "{err}"
    );
}

#[test]
fn list_and_count_jobs() {
    let mut host = Host::new();
    let a = host.submit_source(&example("approval"), json!({}));
    host.submit_source("name: quick\ntree: succeed\n", json!({}));
    let waiting = host
        .path
        .list_jobs(&*host.store, Some(JobStatus::Waiting), 100)
        .expect("list");
    assert!(waiting.is_empty(), "approval first runs its build");
    let running = host
        .path
        .list_jobs(&*host.store, Some(JobStatus::Running), 100)
        .expect("list");
    assert_eq!(
        running.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec![a.job.as_str()]
    );
    let counts = host.path.count_jobs(&*host.store).expect("count");
    assert_eq!(counts.get(&JobStatus::Succeeded), Some(&1));
    let store = host.store.clone();
    let err = host
        .path
        .continue_job(host.now, "zzzz-99", "k", json!(1), &*store)
        .unwrap_err();
    assert_eq!(err.to_string(), "unknown job `zzzz-99`");
    assert!(
        host.store
            .get(palm_actors::store::Table::Jobs, b"zzzz-99")
            .expect("get")
            .is_none()
    );
}

#[test]
fn effects_carry_what_a_seat_needs() {
    let mut host = Host::new();
    host.submit_source(
        "name: env\ntree:\n  run: { cmd: \"true\", cwd: /tmp, env: { A: \"{{ 1 + 1 }}\" }, timeout_ms: 2s, needs: [db] }\n",
        json!({}),
    );
    let effect = host.claim().expect("claim");
    match effect.request {
        EffectRequest::Run {
            cwd,
            env,
            timeout_ms,
            needs,
            ..
        } => {
            assert_eq!(cwd.as_deref(), Some("/tmp"));
            assert_eq!(env, vec![("A".to_owned(), "2".to_owned())]);
            assert_eq!(timeout_ms, Some(2000));
            assert_eq!(needs, vec!["db".to_owned()]);
        }
        other => panic!("{other:?}"),
    }
}

/// A job that finished in memory whose last batch the host has not committed yet is
/// still seen as finished: its view must not fall back to the store, whose journal lags
/// (that fallback once answered `running` for a succeeded job).
#[test]
fn a_finished_job_is_viewed_from_memory_before_its_batch_is_committed() {
    let mut host = Host::new();
    let submitted = host.submit_source(&example("hello"), json!({}));
    let effect = host.claim().expect("run");
    let status = host.complete_run_uncommitted(&effect, 0, "hello world\n");
    assert_eq!(status, JobStatus::Succeeded);
    assert!(host.path.active_job(&submitted.job).is_none());
    assert!(host.path.has_writes(), "the final batch is still pending");
    assert_eq!(host.view(&submitted.job).status, JobStatus::Succeeded);
    host.commit();
    assert_eq!(host.view(&submitted.job).status, JobStatus::Succeeded);
}

/// A report from another node is taken only from the holder the claim names: a sibling
/// that learnt the key and the (sequential) token cannot renew or complete it.
#[test]
fn only_the_claims_holder_may_report_on_it() {
    let mut host = Host::new();
    host.submit_source(&example("hello"), json!({}));
    let now = host.now;
    let effect = host
        .path
        .claim(now, "child:edge-1", &|_, _| true)
        .expect("placed on edge-1");
    host.commit();
    let sibling = host
        .path
        .check_holder(&effect.key, effect.token, "child:edge-2")
        .unwrap_err();
    assert!(
        matches!(&sibling, CompleteError::NotTheHolder { claimed_by, .. } if claimed_by == "child:edge-1"),
        "{sibling:?}"
    );
    assert!(
        sibling.to_string().contains("reported by child:edge-2"),
        "{sibling}"
    );
    // A wrong token is the fence's to refuse (in renew/complete), not this check's.
    host.path
        .check_holder(&effect.key, effect.token + 1, "child:edge-2")
        .expect("not the current claim: left to the fence");
    let stale = host
        .path
        .renew(now, &effect.key, effect.token + 1)
        .unwrap_err();
    assert!(
        matches!(stale, CompleteError::StaleToken { .. }),
        "{stale:?}"
    );
    host.path
        .check_holder(&effect.key, effect.token, "child:edge-1")
        .expect("the holder itself");
}

/// Submitting inline sources A, B, A, B stores two revisions, not four: a text already
/// stored runs as its revision.
#[test]
fn inline_sources_are_stored_once_per_text() {
    let mut host = Host::new();
    let a = "name: same\ntree:\n  set: {v: 1}\n";
    let b = "name: same\ntree:\n  set: {v: 2}\n";
    let mut revisions = Vec::new();
    for source in [a, b, a, b, a] {
        let submitted = host.submit_source(source, json!({}));
        revisions.push(host.view(&submitted.job).revision);
    }
    assert_eq!(revisions, vec![1, 2, 1, 2, 1]);
}

#[test]
fn ended_jobs_are_compacted_then_forgotten_in_bounded_steps() {
    use palm_actors::interest::StartedBy;
    use palm_actors::path::retention::{Collected, Retention};
    use palm_actors::store::Table;
    let mut host = Host::new();
    // Three jobs that end, one started by key, and one parked on a wait.
    let mut ended = Vec::new();
    for i in 0..3 {
        let submitted = host
            .path
            .submit(
                host.now,
                SubmitRequest {
                    flow: FlowRef::Source {
                        source: example("hello"),
                        origin: "hello.yaml".into(),
                    },
                    input: Default::default(),
                    args: Vec::new(),
                    started_by: (i == 0).then(|| StartedBy {
                        key: "intent-1".into(),
                        cause: "a test".into(),
                        depth: 0,
                        chain: Vec::new(),
                    }),
                },
                &*host.store,
            )
            .expect("submit");
        host.commit();
        let effect = host.claim().expect("hello's effect");
        assert_eq!(
            host.complete_run(&effect, 0, "hello\n"),
            JobStatus::Succeeded
        );
        ended.push(submitted.job);
    }
    let parked = host.submit_source(&example("approval"), json!({})).job;
    let build = host.claim().expect("build");
    host.complete_run(&build, 0, "built\n");
    assert_eq!(host.view(&parked).status, JobStatus::Waiting);

    let t0 = host.now;
    let retention = Retention {
        journal_ms: 1_000,
        summary_ms: Some(10_000),
    };
    let walk = |host: &mut Host, now: u64| {
        let mut total = Collected::default();
        let mut cursor: Option<String> = None;
        let mut steps = 0;
        loop {
            let step = host
                .path
                .collect(&*host.store, now, retention, cursor.as_deref(), 2)
                .expect("collect");
            host.commit();
            steps += 1;
            total.add(&step);
            // `add` keeps counts only; the released jobs are gathered here.
            total.released.extend(step.released);
            cursor = step.cursor;
            if cursor.is_none() {
                break;
            }
        }
        total.released.sort();
        (total, steps)
    };
    let mut ended_sorted = ended.clone();
    ended_sorted.sort();

    // Too early: nothing goes.
    let (early, _) = walk(&mut host, t0 + 500);
    assert_eq!((early.compacted, early.forgotten), (0, 0));
    assert!(early.released.is_empty());

    // After the journal's retention: journals go, summaries stay, the parked job is
    // untouched; two jobs per step means several steps.
    let (compacted, steps) = walk(&mut host, t0 + 2_000);
    assert_eq!(compacted.compacted, 3);
    assert_eq!(compacted.forgotten, 0);
    assert!(compacted.events_removed >= 3 * 4, "{compacted:?}");
    assert!(steps >= 3, "bounded steps: {steps}");
    assert_eq!(compacted.released, ended_sorted, "each compacted job, once");
    for job in &ended {
        let view = host.view(job);
        assert!(view.compacted, "{job} compacted");
        assert_eq!(view.status, JobStatus::Succeeded);
        assert!(
            host.path
                .journal(&*host.store, job)
                .expect("journal")
                .is_empty()
        );
    }
    assert!(!host.view(&parked).compacted);
    // Compacting again removes nothing more, and what is compacted survives a restart.
    let (again, _) = walk(&mut host, t0 + 3_000);
    assert_eq!((again.compacted, again.events_removed), (0, 0));
    assert!(again.released.is_empty(), "{:?}", again.released);
    let mut host = host.restart();
    assert!(host.view(&ended[1]).compacted);

    // After the summary's retention: forgotten, with the start key that named one.
    let (forgotten, _) = walk(&mut host, t0 + 20_000);
    assert_eq!(forgotten.forgotten, 3);
    assert_eq!(
        forgotten.released, ended_sorted,
        "forgotten, released again"
    );
    for job in &ended {
        assert!(host.path.record(&*host.store, job).expect("read").is_none());
    }
    // The start key goes once its job's removal is committed: here, in the same walk
    // (each step commits); a second walk finds nothing more.
    let (starts, _) = walk(&mut host, t0 + 20_000);
    assert_eq!((forgotten.starts_removed, starts.starts_removed), (1, 0));
    assert_eq!(
        host.store.get(Table::Starts, b"intent-1").expect("read"),
        None
    );
    assert_eq!(
        host.view(&parked).status,
        JobStatus::Waiting,
        "a live job stays"
    );
}

/// `palm flows migrate`: a job moves to a revision that derives its history unchanged
/// (a dry run first changes nothing), runs the new revision from where it is, stays
/// there across a restart; a revision that rewrites a step the job already took leaves
/// it where it was, saying at which event the histories part.
#[test]
fn jobs_migrate_to_a_revision_that_keeps_their_history() {
    use palm_actors::path::migrate::Verdict;
    let mut host = Host::new();
    let v1 = example("approval");
    let parked = host.submit_source(&v1, json!({})).job;
    let build = host.claim().expect("build");
    assert_eq!(host.complete_run(&build, 0, ""), JobStatus::Waiting);
    let running = host.submit_source(&v1, json!({})).job;
    let v2 = v1.replace("echo shipped", "echo shipped v2");
    let added = host
        .path
        .add_definition(host.now, &v2, "v2.yaml")
        .expect("v2");
    assert_eq!(added.revision, 2);
    host.commit();

    let store = host.store.clone();
    let journal_before = host.journal(&parked);
    let plan = host
        .path
        .migrate(host.now, &*store, "approval", 2, &[], true)
        .expect("dry run");
    host.commit();
    assert_eq!((plan.movable, plan.moved, plan.diverged), (2, 0, 0));
    assert!(
        plan.jobs
            .iter()
            .all(|j| j.verdict == Verdict::Moves && j.from == 1)
    );
    assert_eq!(plan.jobs[0].job, parked);
    assert_eq!(plan.jobs[0].waiting, ["approve"]);
    assert_eq!(
        host.journal(&parked),
        journal_before,
        "a dry run writes nothing"
    );

    let report = host
        .path
        .migrate(host.now, &*store, "approval", 2, &[], false)
        .expect("migrate");
    host.commit();
    assert_eq!((report.movable, report.moved), (2, 2));
    assert_eq!(host.view(&parked).revision, 2);
    assert_eq!(
        host.journal(&parked).last().map(|e| e.kind.name()),
        Some("migrated")
    );
    // Again: nothing left to move.
    let again = host
        .path
        .migrate(host.now, &*store, "approval", 2, &[], false)
        .expect("again");
    assert!(again.jobs.iter().all(|j| j.verdict == Verdict::Stays));

    // A restart replays the moved job under revision 2; it continues there.
    let mut host = host.restart();
    let store = host.store.clone();
    assert_eq!(host.view(&parked).revision, 2);
    host.path
        .continue_job(host.now, &parked, "approve", json!({"ok": true}), &*store)
        .expect("continue");
    host.commit();
    let mut ships = host.claim_all();
    ships.sort_by(|a, b| a.job.cmp(&b.job));
    let ship = ships.iter().find(|e| e.job == parked).expect("ship");
    assert_eq!(Host::cmd(ship), "echo shipped v2");

    // Revision 3 rewrites the build step, which the running job has already requested.
    let v3 = v2.replace("echo building", "echo building fast");
    host.path
        .add_definition(host.now, &v3, "v3.yaml")
        .expect("v3");
    host.commit();
    let report = host
        .path
        .migrate(
            host.now,
            &*store,
            "approval",
            3,
            std::slice::from_ref(&running),
            false,
        )
        .expect("migrate to 3");
    host.commit();
    assert_eq!(report.jobs.len(), 1, "only the job asked for");
    assert_eq!(report.jobs[0].verdict, Verdict::Diverges);
    let reason = report.jobs[0].reason.clone().unwrap_or_default();
    assert!(
        reason.contains("at event 2") && reason.contains("echo building fast"),
        "{reason}"
    );
    assert_eq!(host.view(&running).revision, 2, "left where it was");
    assert!(
        host.path
            .migrate(host.now, &*store, "approval", 9, &[], true)
            .is_err(),
        "no revision 9"
    );
    assert!(
        host.path
            .migrate(host.now, &*store, "approval", 3, &["nope-1".into()], true)
            .is_err(),
        "not a job of the flow"
    );
}

/// `palm retry JOB --from PATH`: a new job keeps what the ended one did before the node
/// began (the build is not run again, the answer is kept) and runs the node again; the
/// same retry asked twice answers with the first; a revision that fixes the step runs
/// it, one that rewrites the history before it is refused; the retry replays after a
/// restart like any job.
#[test]
fn an_ended_job_is_retried_from_a_node_keeping_what_came_before() {
    use palm_actors::path::retry::RetryError;
    let mut host = Host::new();
    let v1 = example("approval");
    let failed = host.submit_source(&v1, json!({})).job;
    let build = host.claim().expect("build");
    assert_eq!(host.complete_run(&build, 0, "built\n"), JobStatus::Waiting);
    let store = host.store.clone();
    host.path
        .continue_job(host.now, &failed, "approve", json!({"ok": true}), &*store)
        .expect("continue");
    host.commit();
    let ship = host.claim().expect("ship");
    assert_eq!(host.complete_run(&ship, 1, ""), JobStatus::Failed);

    // Refusals write nothing.
    let running = host.submit_source(&v1, json!({})).job;
    let err = host
        .path
        .retry_from(host.now, &*store, &running, "0.0", None)
        .expect_err("running");
    assert!(matches!(err, RetryError::NotEnded { .. }), "{err}");
    let err = host
        .path
        .retry_from(host.now, &*store, &failed, "0.7", None)
        .expect_err("no such node");
    let text = err.to_string();
    assert!(
        text.contains("node 0.7 never ran") && text.contains("0.2.0.1"),
        "{text}"
    );
    assert!(matches!(
        host.path.retry_from(host.now, &*store, "nope-9", "0", None),
        Err(RetryError::UnknownJob(_))
    ));
    assert!(!host.path.has_writes(), "a refused retry writes nothing");

    // From the ship step: build and answer are kept, ship runs again.
    let retried = host
        .path
        .retry_from(host.now, &*store, &failed, "0.2.0.1", None)
        .expect("retry");
    host.commit();
    assert!(!retried.existing);
    assert_eq!((retried.kept_inputs, retried.dropped_inputs), (3, 1));
    assert_eq!(retried.status, JobStatus::Running);
    let again = host
        .path
        .retry_from(host.now, &*store, &failed, "0.2.0.1", None)
        .expect("again");
    host.commit();
    assert!(again.existing);
    assert_eq!(again.job, retried.job);
    let effects: Vec<_> = host
        .claim_all()
        .into_iter()
        .filter(|e| e.job == retried.job)
        .collect();
    assert_eq!(
        effects.len(),
        1,
        "only the ship step runs again: {effects:?}"
    );
    assert_eq!(Host::cmd(&effects[0]), "echo shipped");
    assert!(
        effects[0]
            .key
            .starts_with(&format!("{}/0.2.0.1/", retried.job))
    );
    let view = host.view(&retried.job);
    assert_eq!(
        view.state["build"]["stdout"], "built\n",
        "the old build's output"
    );
    assert_eq!(view.state["approve"]["ok"], true, "the old answer");
    assert_eq!(
        host.view(&failed).status,
        JobStatus::Failed,
        "the retried job stays as it was"
    );

    // A restart replays the retry from its own journal; it finishes there.
    let mut host = host.restart();
    let store = host.store.clone();
    let ship = host
        .claim_all()
        .into_iter()
        .find(|e| e.job == retried.job)
        .expect("requeued ship");
    assert_eq!(host.complete_run(&ship, 0, ""), JobStatus::Succeeded);

    // From the first step: nothing but the submission is kept.
    let from_start = host
        .path
        .retry_from(host.now, &*store, &failed, "0.0", None)
        .expect("from the start");
    host.commit();
    assert_eq!((from_start.kept_inputs, from_start.dropped_inputs), (1, 3));
    let build = host
        .claim_all()
        .into_iter()
        .find(|e| e.job == from_start.job)
        .expect("build again");
    assert_eq!(Host::cmd(&build), "echo building");

    // Revision 2 fixes the ship step: the retry runs it.
    let v2 = v1.replace("echo shipped", "echo shipped fixed");
    host.path
        .add_definition(host.now, &v2, "v2.yaml")
        .expect("v2");
    host.commit();
    let fixed = host
        .path
        .retry_from(host.now, &*store, &failed, "0.2.0.1", Some(2))
        .expect("retry under 2");
    host.commit();
    assert_eq!(fixed.revision, 2);
    let ship = host
        .claim_all()
        .into_iter()
        .find(|e| e.job == fixed.job)
        .expect("fixed ship");
    assert_eq!(Host::cmd(&ship), "echo shipped fixed");

    // Revision 3 rewrites the build, which the job had already run.
    let v3 = v2.replace("echo building", "echo building fast");
    host.path
        .add_definition(host.now, &v3, "v3.yaml")
        .expect("v3");
    host.commit();
    let err = host
        .path
        .retry_from(host.now, &*store, &failed, "0.2.0.1", Some(3))
        .expect_err("diverges");
    let text = err.to_string();
    assert!(
        text.contains("does not derive") && text.contains("echo building fast"),
        "{text}"
    );
}

const PARKED: &str = "name: parked\ntree:\n  sequence:\n    - wait: { key: go, prompt: \"Go?\" }\n    - set: { went: true }\n";
const PARKED_WITH_TIMEOUT: &str =
    "name: parked-timeout\ntree:\n  wait: { key: go, prompt: \"Go?\", timeout_ms: 3600000 }\n";

#[test]
fn parked_jobs_leave_memory_once_durable_and_come_back_when_moved() {
    let mut host = Host::new();
    let a = host.submit_source(PARKED, json!({})).job;
    let b = host.submit_source(PARKED, json!({})).job;
    let timed = host.submit_source(PARKED_WITH_TIMEOUT, json!({})).job;
    // The batch that parked them is taken; at the next take it is durable, and they go.
    host.commit();
    assert!(host.path.is_dormant(&a) && host.path.is_dormant(&b));
    assert!(host.path.active_job(&a).is_none());
    assert!(
        host.path.active_job(&timed).is_some() && !host.path.is_dormant(&timed),
        "a wait with a timeout has a timer in flight: it stays"
    );
    // Read from the store meanwhile.
    let view = host.view(&a);
    assert_eq!(view.status, JobStatus::Waiting);
    assert_eq!(view.waiting_on[0].key, "go");
    // A restart leaves them on disk too.
    let mut host = host.restart();
    assert!(host.path.is_dormant(&a) && host.path.is_dormant(&b));
    assert!(!host.path.is_dormant(&timed));
    assert_eq!(host.path.dormant_jobs().count(), 2);
    // Retry refuses an unfinished job, dormant or not.
    let store = host.store.clone();
    assert!(
        host.path
            .retry_from(host.now, &*store, &a, "0", None)
            .is_err()
    );
    // A wrong key is refused and loses nothing.
    let refused = host
        .path
        .continue_job(host.now, &a, "stop", json!({}), &*store);
    assert!(
        matches!(
            refused,
            Err(JobError::Refused(ApplyError::NotWaitingOn { .. }))
        ),
        "{refused:?}"
    );
    assert!(!host.path.has_writes());
    // A continue loads it and moves it on.
    let status = host
        .path
        .continue_job(host.now, &a, "go", json!({"ok": true}), &*store)
        .expect("continue a dormant job");
    assert_eq!(status, JobStatus::Succeeded);
    host.commit();
    assert!(!host.path.is_dormant(&a));
    assert_eq!(host.view(&a).state["went"], true);
    // A cancel too.
    let status = host
        .path
        .cancel(host.now, &b, Some("no".into()), &*store)
        .expect("cancel a dormant job");
    assert_eq!(status, JobStatus::Cancelled);
    host.commit();
    assert_eq!(host.path.dormant_jobs().count(), 0);
    assert_eq!(host.view(&b).status, JobStatus::Cancelled);
}

#[test]
fn claim_fresh_looks_only_at_effects_requested_since_the_last_take() {
    let mut host = Host::new();
    let old = host.submit_source(&example("hello"), json!({})).job;
    // Committed: its effect is no longer fresh, though still ready for seats.
    assert!(
        host.path
            .claim_fresh(host.now, "n/kernel", &|_, _| true)
            .is_none()
    );
    let new = host.submit_source(&example("hello"), json!({})).job;
    // `submit_source` commits too; a request made after the take is fresh.
    assert!(
        host.path
            .claim_fresh(host.now, "n/kernel", &|_, _| true)
            .is_none()
    );
    let turned_down = submit_uncommitted(&mut host);
    assert!(
        host.path
            .claim_fresh(host.now, "n/kernel", &|_, _| false)
            .is_none(),
        "the filter is honoured"
    );
    assert!(
        host.path
            .claim_fresh(host.now, "n/kernel", &|_, _| true)
            .is_none(),
        "an effect turned down is not offered again"
    );
    // Of two fresh effects, the first turned down and the second taken; a third made
    // ready after is offered, the one turned down is not.
    let skipped = submit_uncommitted(&mut host);
    let taken = submit_uncommitted(&mut host);
    let only = |wanted: String| move |job: &str, _: &EffectRequest| job == wanted;
    let fresh = host
        .path
        .claim_fresh(host.now, "n/kernel", &only(taken.clone()))
        .expect("the second fresh effect");
    assert_eq!(fresh.job, taken);
    let third = submit_uncommitted(&mut host);
    let fresh = host
        .path
        .claim_fresh(host.now, "n/kernel", &|_, _| true)
        .expect("the fresh effect");
    assert_eq!(fresh.job, third);
    // One taken leaves those made ready after it to be looked at.
    let first = submit_uncommitted(&mut host);
    let second = submit_uncommitted(&mut host);
    let fresh = host
        .path
        .claim_fresh(host.now, "n/kernel", &only(first.clone()))
        .expect("the first");
    assert_eq!(fresh.job, first);
    let fresh = host
        .path
        .claim_fresh(host.now, "n/kernel", &|_, _| true)
        .expect("the one after it, not yet looked at");
    assert_eq!(fresh.job, second);
    assert!(
        host.path
            .claim_fresh(host.now, "n/kernel", &|_, _| true)
            .is_none()
    );
    // The others stay in order for seats.
    for (seat, job) in [old, new, turned_down, skipped].into_iter().enumerate() {
        let claimed = host
            .path
            .claim(host.now, &format!("n/seat-{seat}"), &|_, _| true)
            .expect("ready for seats");
        assert_eq!(claimed.job, job);
    }
}

/// Submits `hello` without committing (its effect is fresh).
fn submit_uncommitted(host: &mut Host) -> String {
    let store = host.store.clone();
    host.path
        .submit(
            host.now,
            SubmitRequest {
                flow: FlowRef::Source {
                    source: example("hello"),
                    origin: "test.yaml".to_owned(),
                },
                input: Default::default(),
                args: Vec::new(),
                started_by: None,
            },
            &*store,
        )
        .expect("submit")
        .job
}
