//! The root on PostgreSQL, end to end with real `palm up` processes: two replicas of one
//! root over one database, the serving one killed with `kill -9` mid-work, the standby
//! taking the writer's lease over within seconds, no job lost and no completion recorded
//! twice; then back again after a clean stop.
//!
//! The server comes from `PALM_TEST_POSTGRES` (`.ci/postgres` starts one).

mod common;

use common::{Client, Up, data_dir, eventually, palm};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const JOBS: usize = 120;

fn server() -> Option<String> {
    match std::env::var("PALM_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => panic!(
            "PALM_TEST_POSTGRES is not set: .ci/run starts PostgreSQL with .ci/postgres and sets it"
        ),
        _ => {
            eprintln!(
                "skipped: set PALM_TEST_POSTGRES (`.ci/postgres` starts a server and prints it)"
            );
            None
        }
    }
}

/// Drops the test's schema at the end, pass or fail.
struct Schema {
    base: String,
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ =
                client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name));
        }
    }
}

fn statuses(data: &std::path::Path) -> BTreeMap<String, String> {
    let Some(mut client) = Client::connect(data) else {
        return BTreeMap::new();
    };
    let Some(jobs) = client.call(&json!({"op": "jobs", "limit": 10_000})) else {
        return BTreeMap::new();
    };
    jobs["result"]["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            (
                j["job"].as_str().unwrap_or_default().to_owned(),
                j["status"].as_str().unwrap_or_default().to_owned(),
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

fn answers(data: &std::path::Path) -> bool {
    Client::connect(data)
        .and_then(|mut c| c.call(&json!({"op": "ping"})))
        .is_some()
}

#[test]
fn a_standby_replica_takes_over_a_killed_root_without_losing_or_doubling_a_job() {
    let Some(base) = server() else { return };
    let schema = Schema {
        base: base.clone(),
        name: format!("palm_e2e_{}", std::process::id()),
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}schema={}&lease_ms=1500", schema.name);
    let (a, b) = (data_dir(), data_dir());
    let log = a.path().join("effects.log");
    let flow = format!(
        "name: replicated\ntree:\n  run: \"sleep 0.2; echo $PALM_EFFECT_KEY >> {}\"\n",
        log.display()
    );
    // Both replicas are one logical root: the same name, the same store.
    let replica = ["--store", url.as_str(), "--name", "root", "--seats", "4"];
    let first = Up::start(a.path(), &replica);
    let mut client = Client::connect(a.path()).expect("connect");
    let mut submitted = BTreeSet::new();
    for _ in 0..JOBS {
        let result = client
            .ok(&json!({"op": "submit", "flow": {"source": flow, "origin": "replicated.yaml"}}));
        submitted.insert(result["job"].as_str().unwrap().to_owned());
    }
    assert!(eventually(Duration::from_secs(60), || succeeded(a.path()) >= 20));

    // The second replica stands by: it does not serve while the first holds the lease.
    let second = Up::spawn_env(b.path(), &replica, &[]);
    std::thread::sleep(Duration::from_millis(2_500));
    assert!(
        !answers(b.path()),
        "a standby must not serve while the lease is held"
    );
    assert!(succeeded(a.path()) < JOBS, "the kill must come mid-work");

    // kill -9 the serving replica: the standby takes over within 5 s.
    first.kill9();
    let killed = Instant::now();
    assert!(
        eventually(Duration::from_secs(10), || answers(b.path())),
        "the standby never took over"
    );
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(5), "takeover took {took:?}");
    eprintln!("takeover after kill -9: {took:?}");

    assert!(
        eventually(Duration::from_secs(120), || succeeded(b.path()) == JOBS),
        "not every job succeeded on the new replica: {:?}",
        statuses(b.path())
            .values()
            .fold(BTreeMap::<String, usize>::new(), |mut m, s| {
                *m.entry(s.clone()).or_default() += 1;
                m
            })
    );
    let all = statuses(b.path());
    assert_eq!(
        all.keys().cloned().collect::<BTreeSet<_>>(),
        submitted,
        "no job lost, none invented"
    );
    let mut client = Client::connect(b.path()).expect("connect");
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
            "{job}: exactly one completion"
        );
        assert_eq!(
            completions.len(),
            1,
            "{job}: no completion of anything else"
        );
        assert!(logged.lines().any(|l| l == key), "{job}: its command ran");
    }

    // The first replica comes back (its data directory remembers the store) and stands
    // by; a clean stop of the second hands the lease over at once, not after its length.
    let again = Up::spawn_env(a.path(), &["--name", "root", "--seats", "4"], &[]);
    std::thread::sleep(Duration::from_millis(1_000));
    assert!(!answers(a.path()), "standing by behind the second replica");
    let stopped = Instant::now();
    let (code, stderr) = second.terminate();
    assert_eq!(code, 0, "{stderr}");
    again.wait_ready();
    eprintln!("handover after a clean stop: {:?}", stopped.elapsed());
    assert_eq!(
        succeeded(a.path()),
        JOBS,
        "the first replica reads every job back"
    );
    // A command on a data directory whose node is not up, while a replica holds the
    // lease, reads (without the lease) but does not write behind the writer's back.
    let listed = palm(b.path(), &["--json", "jobs", "--limit", "500"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert_eq!(listed.json()["jobs"].as_array().map(Vec::len), Some(JOBS));
    let refused = palm(b.path(), &["submit", &flow_file(b.path(), &flow)]);
    assert_ne!(
        refused.code, 0,
        "a command must not take the store from a live replica"
    );
    assert!(
        refused.stderr.contains("in use by another replica"),
        "{}",
        refused.stderr
    );
    drop(again);
}

fn flow_file(dir: &std::path::Path, flow: &str) -> String {
    let path = dir.join("replicated.yaml");
    std::fs::write(&path, flow).expect("write flow");
    path.display().to_string()
}
