//! Unit tests of the interests core: schedules and their catch-up policies, coalescing
//! with debounce, the depth bound, filters and persistence.

use super::*;
use crate::store::MemoryStore;

const T0: u64 = 1_000_000;

fn every(ms: u64, catch_up: CatchUp) -> InterestSpec {
    InterestSpec {
        trigger: Trigger::Schedule {
            when: When::Every(ms),
            catch_up,
        },
        coalesce_key: None,
        debounce_ms: 0,
        not_before_ms: 0,
        span: Span::default(),
    }
}

fn on_job(flow: &str, coalesce: Option<&str>, debounce_ms: u64) -> InterestSpec {
    InterestSpec {
        trigger: Trigger::Job {
            flow: flow.to_owned(),
            status: EndFilter::Succeeded,
            filter: None,
        },
        coalesce_key: coalesce.map(|c| Template::compile(c).expect("template")),
        debounce_ms,
        not_before_ms: 0,
        span: Span::default(),
    }
}

fn ended(flow: &str, job: &str, status: &str, state: Value, depth: u32) -> Happening {
    Happening::JobEnded {
        flow: flow.to_owned(),
        job: job.to_owned(),
        status: status.to_owned(),
        state,
        error: None,
        started_by: (depth > 0).then(|| StartedBy {
            key: format!("k-{job}"),
            cause: "test".into(),
            depth,
            chain: vec!["x".into(); depth as usize],
        }),
    }
}

fn interests_with(specs: Vec<(&str, Vec<InterestSpec>)>) -> (Interests, WriteBatch) {
    let mut interests = Interests::default();
    let mut batch = WriteBatch::new();
    let flows: Vec<(String, u32, Vec<InterestSpec>)> = specs
        .into_iter()
        .map(|(f, s)| (f.to_owned(), 1, s))
        .collect();
    interests.activate(T0, &flows, &mut batch);
    (interests, batch)
}

#[test]
fn a_schedule_fires_on_time_and_catches_up_by_its_policy() {
    for (policy, expected) in [(CatchUp::Once, 1), (CatchUp::All, 5), (CatchUp::Skip, 0)] {
        let (mut interests, mut batch) = interests_with(vec![("tick", vec![every(2_000, policy)])]);
        assert_eq!(interests.next_deadline(), Some(T0 + 2_000));
        interests.tick(T0 + 1_999, &mut batch);
        assert!(interests.due(T0 + 1_999).is_empty());
        interests.tick(T0 + 2_000, &mut batch);
        assert_eq!(interests.due(T0 + 2_000).len(), 1, "on time, {policy:?}");
        for intent in interests.due(T0 + 2_000) {
            interests.started(&intent.id, &mut batch);
        }
        // The node was down from 2 s to 12 s: runs at 4, 6, 8, 10 and 12 s were missed.
        interests.tick(T0 + 12_000, &mut batch);
        let due = interests.due(T0 + 12_000);
        assert_eq!(due.len(), expected, "{policy:?}: {due:?}");
        if let Some(first) = due.first() {
            assert_eq!(first.payload.0["missed"], 5);
        }
        assert_eq!(
            interests.next_deadline().filter(|_| due.is_empty()),
            due.is_empty().then_some(T0 + 14_000)
        );
    }
}

#[test]
fn coalesced_matches_start_once_per_key_with_the_latest_payload() {
    let (mut interests, mut batch) = interests_with(vec![(
        "b",
        vec![on_job("a", Some("{{ event.state.key }}"), 1_000)],
    )]);
    for i in 0..100u64 {
        let state = json!({"key": format!("k{}", i % 3), "n": i});
        interests.happened(
            T0 + i * 5,
            &ended("a", &format!("a-{i}"), "succeeded", state, 0),
            &mut batch,
        );
    }
    interests.happened(
        T0 + 600,
        &ended("a", "a-x", "failed", json!({"key": "k9"}), 0),
        &mut batch,
    );
    assert!(
        interests.due(T0 + 1_000).is_empty(),
        "debounced: still matching recently"
    );
    let mut due = interests.due(T0 + 500 + 1_000);
    assert_eq!(due.len(), 3, "{due:?}");
    due.sort_by(|a, b| a.coalesce.cmp(&b.coalesce));
    let keys: Vec<&str> = due.iter().filter_map(|i| i.coalesce.as_deref()).collect();
    assert_eq!(keys, ["k0", "k1", "k2"]);
    assert_eq!(
        due[0].payload.0["state"]["n"], 99,
        "the latest payload wins"
    );
    assert_eq!(due[1].payload.0["state"]["n"], 97);
    assert_eq!(due.iter().map(|i| i.matches).sum::<u64>(), 100);
    for intent in &due {
        interests.started(&intent.id, &mut batch);
    }
    // A new match after the start is a new intent, with a new id.
    interests.happened(
        T0 + 5_000,
        &ended("a", "a-y", "succeeded", json!({"key": "k0"}), 0),
        &mut batch,
    );
    let again = interests.due(T0 + 6_000);
    assert_eq!(again.len(), 1);
    assert!(!due.iter().any(|i| i.id == again[0].id));
}

#[test]
fn a_trigger_chain_stops_at_the_depth_bound() {
    let (mut interests, mut batch) = interests_with(vec![("loop", vec![on_job("loop", None, 0)])]);
    interests.happened(
        T0,
        &ended("loop", "l-1", "succeeded", json!({}), DEPTH_MAX - 1),
        &mut batch,
    );
    assert_eq!(interests.due(T0)[0].depth, DEPTH_MAX);
    assert!(interests.take_refusals().is_empty());
    interests.happened(
        T0,
        &ended("loop", "l-2", "succeeded", json!({}), DEPTH_MAX),
        &mut batch,
    );
    let refusals = interests.take_refusals();
    assert_eq!(refusals.len(), 1);
    assert!(
        refusals[0].reason.contains("trigger chain too deep"),
        "{refusals:?}"
    );
    assert_eq!(interests.due(T0).len(), 1, "no second intent");
}

#[test]
fn filters_statuses_and_events_select_what_matches() {
    let mut filtered = on_job("a", None, 0);
    filtered.trigger = Trigger::Job {
        flow: "a".into(),
        status: EndFilter::Any,
        filter: Some(Expr::compile("event.state.n > 5").expect("expr")),
    };
    let emit = InterestSpec {
        trigger: Trigger::Event {
            name: "deploy".into(),
        },
        ..on_job("x", None, 0)
    };
    let (mut interests, mut batch) = interests_with(vec![("b", vec![filtered]), ("c", vec![emit])]);
    interests.happened(
        T0,
        &ended("a", "a-1", "failed", json!({"n": 1}), 0),
        &mut batch,
    );
    interests.happened(
        T0,
        &ended("a", "a-2", "failed", json!({"n": 9}), 0),
        &mut batch,
    );
    interests.happened(
        T0,
        &ended("other", "o-1", "succeeded", json!({"n": 9}), 0),
        &mut batch,
    );
    interests.happened(
        T0,
        &Happening::Emitted {
            name: "deploy".into(),
            data: json!({"v": 2}),
        },
        &mut batch,
    );
    interests.happened(
        T0,
        &Happening::Emitted {
            name: "other".into(),
            data: json!({}),
        },
        &mut batch,
    );
    let due = interests.due(T0);
    let flows: Vec<&str> = due.iter().map(|i| i.flow.as_str()).collect();
    assert_eq!(flows, ["b", "c"]);
    assert_eq!(due[0].payload.0["job"], "a-2");
    assert_eq!(due[1].payload.0["data"]["v"], 2);
}

#[test]
fn intents_and_schedules_survive_a_reopen() {
    let store = MemoryStore::new();
    let (mut interests, mut batch) = interests_with(vec![
        ("tick", vec![every(1_000, CatchUp::Once)]),
        ("b", vec![on_job("a", None, 10_000)]),
    ]);
    interests.happened(
        T0,
        &ended("a", "a-1", "succeeded", json!({}), 0),
        &mut batch,
    );
    store.commit(&batch).expect("commit");
    store.flush().expect("flush");
    let mut reopened = Interests::open(&store).expect("open");
    let mut batch = WriteBatch::new();
    reopened.activate(
        T0 + 500,
        &[
            ("tick".into(), 1, vec![every(1_000, CatchUp::Once)]),
            ("b".into(), 1, vec![on_job("a", None, 10_000)]),
        ],
        &mut batch,
    );
    assert_eq!(reopened.pending().count(), 1);
    assert_eq!(
        reopened.next_deadline(),
        Some(T0 + 1_000),
        "the schedule keeps its next time across the reopen"
    );
    let views = reopened.views();
    assert_eq!(views.len(), 2);
    assert_eq!(views[1].pending, 1);
}

#[test]
fn a_cron_in_a_named_zone_parses_describes_and_schedules() {
    let flow = "name: morning\non:\n  - schedule: { cron: \"0 9 * * *\", tz: Europe/Paris }\ntree:\n  set: {x: 1}\n";
    let definition = crate::definition::parse(flow, "f.yaml").expect("valid flow");
    let spec = definition
        .interests
        .into_iter()
        .next()
        .expect("one interest");
    assert_eq!(spec.describe(), "cron `0 9 * * *` at Europe/Paris");
    // 2026-12-03T10:07:30Z: the next 09:00 in Paris (UTC+1 in winter) is 08:00 UTC.
    let now = 1_796_292_450_000;
    let mut interests = Interests::default();
    let mut batch = WriteBatch::new();
    interests.activate(now, &[("morning".to_owned(), 1, vec![spec])], &mut batch);
    assert_eq!(interests.next_deadline(), Some(1_796_371_200_000));

    let bad = "name: b\non:\n  - schedule: { cron: \"0 9 * * *\", tz: Mars/Olympus }\ntree:\n  set: {x: 1}\n";
    let errors = crate::definition::parse(bad, "f.yaml").expect_err("unknown zone");
    let text = errors[0].to_string();
    assert!(
        text.contains("Mars/Olympus") && text.contains(":3:"),
        "{text}"
    );
}
