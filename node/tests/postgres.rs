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
        let _ = palm_pgstore::drop_schema(&palm_pgstore::with_schema(&self.base, &self.name));
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

fn call(data: &std::path::Path, request: Value) -> Value {
    Client::connect(data)
        .and_then(|mut c| c.call(&request))
        .unwrap_or(Value::Null)
}

fn child_up(parent: &std::path::Path, child: &str) -> bool {
    call(parent, json!({"op": "vitality"}))["result"]["links"]
        .as_array()
        .is_some_and(|links| {
            links
                .iter()
                .any(|l| l["peer"] == child && l["state"] == "up")
        })
}

fn offers(parent: &std::path::Path, child: &str, capability: &str) -> bool {
    call(parent, json!({"op": "tree"}))["result"]["tree"]["children"]
        .as_array()
        .is_some_and(|children| {
            children.iter().any(|c| {
                c["name"] == child
                    && c["capabilities"]
                        .as_array()
                        .is_some_and(|caps| caps.iter().any(|x| x == capability))
            })
        })
}

/// The acceptance: two root replicas over one database, one edge dialling both,
/// 1,000 jobs in flight whose effects run on the edge. `kill -9` of the serving replica:
/// the edge is linked to the other within 5 s, and every job ends with exactly one
/// completion. The standby starts with no tree identity of its own: it comes from the
/// store, with the trust book (a token the dead replica issued enrolls a new edge).
#[test]
fn an_edge_follows_the_root_to_its_standby_and_a_thousand_jobs_finish_once() {
    let Some(base) = server() else { return };
    const PLACED: usize = 1_000;
    let schema = Schema {
        base: base.clone(),
        name: format!("palm_e2e_tree_{}", std::process::id()),
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}schema={}&lease_ms=1500", schema.name);
    let (a, b, e) = (data_dir(), data_dir(), data_dir());
    let (addr_a, addr_b) = (
        format!("127.0.0.1:{}", common::free_port()),
        format!("127.0.0.1:{}", common::free_port()),
    );
    let config = "lease_ms: 3000\n";
    std::fs::write(a.path().join("palm.yaml"), config).expect("config");
    std::fs::write(b.path().join("palm.yaml"), config).expect("config");
    std::fs::write(
        e.path().join("palm.yaml"),
        "capabilities: [blue]\nlink: {backoff_ms_max: 400}\n",
    )
    .expect("edge config");
    let root = |listen: &str| -> Vec<String> {
        [
            "--profile",
            "root",
            "--listen",
            listen,
            "--name",
            "root",
            "--seats",
            "2",
            "--store",
            &url,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let args_a = root(&addr_a);
    let first = Up::start(
        a.path(),
        &args_a.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let token = common::join_token(a.path(), "edge1", "edge");
    let parents = format!("{addr_a},{addr_b}");
    let _edge = Up::start(
        e.path(),
        &[
            "--profile",
            "edge",
            "--name",
            "edge1",
            "--seats",
            "16",
            "--parent",
            &parents,
            "--token",
            &token,
        ],
    );
    assert!(eventually(Duration::from_secs(15), || offers(
        a.path(),
        "edge1",
        "blue"
    )));
    // The replicas are one root: the second starts with an empty data directory and gets
    // the tree's identity (CA, certificate, trust book) from the shared store once it
    // takes over. A token created on the first is known to the second.
    let token2 = common::join_token(a.path(), "edge2", "edge");
    let args_b = root(&addr_b);
    let second = Up::spawn_env(
        b.path(),
        &args_b.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );

    let log = e.path().join("effects.log");
    let flow = format!(
        "name: placed\ntree:\n  run: {{ cmd: \"sleep 0.2; echo $PALM_EFFECT_KEY >> {}\", needs: [blue] }}\n",
        log.display()
    );
    let mut client = Client::connect(a.path()).expect("connect");
    let mut submitted = BTreeSet::new();
    for _ in 0..PLACED {
        let result =
            client.ok(&json!({"op": "submit", "flow": {"source": flow, "origin": "placed.yaml"}}));
        submitted.insert(result["job"].as_str().unwrap().to_owned());
    }
    assert!(eventually(Duration::from_secs(60), || succeeded(a.path()) >= 100));
    let done_before = succeeded(a.path());
    assert!(
        done_before < PLACED,
        "the kill must come mid-work ({done_before} done)"
    );
    first.kill9();
    let killed = Instant::now();
    assert!(
        eventually(Duration::from_secs(15), || child_up(b.path(), "edge1")),
        "the edge never linked to the standby"
    );
    let relinked = killed.elapsed();
    eprintln!(
        "edge linked to the new replica {relinked:?} after kill -9 ({done_before} of {PLACED} done before)"
    );
    assert!(
        relinked < Duration::from_secs(5),
        "relinked after {relinked:?}"
    );
    // A new edge enrolls, with the token the dead replica issued, at the one serving now.
    let e2 = data_dir();
    let _edge2 = Up::start(
        e2.path(),
        &[
            "--profile",
            "edge",
            "--name",
            "edge2",
            "--seats",
            "1",
            "--parent",
            &parents,
            "--token",
            &token2,
        ],
    );
    assert!(
        eventually(Duration::from_secs(30), || child_up(b.path(), "edge2")),
        "edge2 did not enroll at the new replica with the old replica's token"
    );

    assert!(
        eventually(Duration::from_secs(120), || succeeded(b.path()) == PLACED),
        "not every job succeeded: {:?}",
        statuses(b.path())
            .values()
            .fold(BTreeMap::<String, usize>::new(), |mut m, s| {
                *m.entry(s.clone()).or_default() += 1;
                m
            })
    );
    assert_eq!(
        statuses(b.path()).keys().cloned().collect::<BTreeSet<_>>(),
        submitted,
        "no job lost, none invented"
    );
    let mut client = Client::connect(b.path()).expect("connect");
    let mut ran_twice = 0;
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    for job in &submitted {
        let inspect = client.ok(&json!({"op": "inspect", "job": job}));
        let events = inspect["events"].as_array().unwrap();
        let completed: Vec<&Value> = events
            .iter()
            .filter(|e| e["kind"] == "effect_completed")
            .collect();
        assert_eq!(
            completed.len(),
            1,
            "{job}: exactly one completion: {completed:?}"
        );
        assert_eq!(completed[0]["node"], "edge1", "{job}");
        let key = completed[0]["key"].as_str().unwrap();
        let runs = logged.lines().filter(|l| *l == key).count();
        assert!(runs >= 1, "{job}: its command ran");
        ran_twice += usize::from(runs > 1);
    }
    eprintln!("commands run more than once (at least once is the contract): {ran_twice}");
    drop(second);
}
