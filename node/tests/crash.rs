//! Crash recovery: `kill -9` a node three times while 200 jobs run; every job still ends
//! `succeeded`, no job is lost, and each journal holds exactly one completion per effect.

mod common;

use common::{Client, Up, data_dir, eventually};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const JOBS: usize = 200;

fn statuses(data: &std::path::Path) -> BTreeMap<String, String> {
    let mut client = Client::connect(data).expect("connect");
    let jobs = client.ok(&json!({"op": "jobs"}));
    jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["job"].as_str().unwrap().to_owned(),
                j["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn succeeded(data: &std::path::Path) -> usize {
    statuses(data)
        .values()
        .filter(|s| *s == "succeeded")
        .count()
}

#[test]
fn kill_9_at_three_moments_loses_nothing() {
    let data = data_dir();
    let log = data.path().join("effects.log");
    let flow = format!(
        "name: crashy\ntree:\n  run: \"sleep 0.3; echo $PALM_EFFECT_KEY >> {}\"\n",
        log.display()
    );
    let up = Up::start(data.path(), &["--seats", "4"]);
    let mut client = Client::connect(data.path()).expect("connect");
    let mut submitted = BTreeSet::new();
    for _ in 0..JOBS {
        let result =
            client.ok(&json!({"op": "submit", "flow": {"source": flow, "origin": "crashy.yaml"}}));
        submitted.insert(result["job"].as_str().unwrap().to_owned());
    }
    assert_eq!(submitted.len(), JOBS);

    // Three kills at three different moments: early, while work is well under way, and
    // late. Each time, wait until some progress was made since the last restart.
    let mut node = Some(up);
    let mut progress = 0;
    for (moment, wait_for) in [(1, 8), (2, 40), (3, 90)] {
        let target = progress.max(wait_for);
        assert!(
            eventually(Duration::from_secs(60), || succeeded(data.path()) >= target),
            "kill {moment}: no progress to {target}"
        );
        progress = succeeded(data.path());
        node.take().expect("node").kill9();
        node = Some(Up::start(data.path(), &["--seats", "4"]));
    }
    assert!(
        eventually(Duration::from_secs(120), || succeeded(data.path()) == JOBS),
        "not every job succeeded: {:?}",
        statuses(data.path())
            .values()
            .fold(BTreeMap::<String, usize>::new(), |mut m, s| {
                *m.entry(s.clone()).or_default() += 1;
                m
            })
    );
    let all = statuses(data.path());
    assert_eq!(
        all.keys().cloned().collect::<BTreeSet<_>>(),
        submitted,
        "no job lost, none invented"
    );

    let mut client = Client::connect(data.path()).expect("connect");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    for job in &submitted {
        let inspect = client.ok(&json!({"op": "inspect", "job": job}));
        let events = inspect["events"].as_array().unwrap();
        let requested: Vec<&Value> = events
            .iter()
            .filter(|e| e["kind"] == "effect_requested")
            .collect();
        let mut completions: BTreeMap<String, usize> = BTreeMap::new();
        for event in events.iter().filter(|e| e["kind"] == "effect_completed") {
            *completions
                .entry(event["key"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        assert_eq!(requested.len(), 1, "{job}: one effect");
        let key = requested[0]["key"].as_str().unwrap();
        assert_eq!(
            completions.get(key),
            Some(&1),
            "{job}: exactly one completion of {key}: {completions:?}"
        );
        assert_eq!(
            completions.len(),
            1,
            "{job}: no completion of anything else"
        );
        assert!(
            logged.lines().any(|l| l == key),
            "{job}: its command ran (at least once)"
        );
    }
    drop(node);
}
