//! The kill -9 torture test: effects that hold an exclusive lock (`flock -n`) on their
//! effect key for 3 s, and a node killed and restarted 100 times while they run.
//!
//! Each effect takes the lock without waiting: if another process still holds it — an
//! orphan of a killed node running the same key — the effect records the collision and
//! fails. After the hundredth restart the node runs everything to the end, and the test
//! asserts: zero collisions (one key never ran twice at once), every job succeeded (none
//! lost), and exactly one completion per effect in every journal (none duplicated).
//!
//! Kill moments come from a seeded generator (`PALM_TORTURE_SEED`, printed on failure):
//! mostly short lives, which kill effects mid-run, and now and then a life long enough
//! for effects to finish, so that work progresses.

mod common;

use common::{Client, Up, data_dir, eventually};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const JOBS: usize = 6;
const STEPS_PER_JOB: usize = 3;
const RESTARTS: usize = 100;
const SEATS: &str = "4";

/// A small seeded generator (xorshift64*), so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

fn statuses(data: &std::path::Path) -> BTreeMap<String, String> {
    let mut client = Client::connect(data).expect("connect");
    let jobs = client.ok(&json!({"op": "jobs"}));
    jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            (
                j["job"].as_str().expect("id").to_owned(),
                j["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect()
}

fn flow(locks: &std::path::Path) -> String {
    let locks = locks.display();
    // The lock file is named after the effect key; `flock -n` fails at once when another
    // process holds it, and the collision is written down before the effect fails.
    let step = format!(
        "      - run: \"F=$(printf %s \\\"$PALM_EFFECT_KEY\\\" | tr -c 'A-Za-z0-9' _); \
         flock -n {locks}/$F.lock sh -c 'echo \\\"$PALM_EFFECT_KEY\\\" >> {locks}/starts; sleep 3' \
         || {{ echo \\\"$PALM_EFFECT_KEY\\\" >> {locks}/collisions; exit 1; }}\"\n"
    );
    format!(
        "name: locked\ntree:\n  sequence:\n{}",
        step.repeat(STEPS_PER_JOB)
    )
}

#[test]
fn a_hundred_kill_9s_never_run_one_key_twice_at_once() {
    let seed = std::env::var("PALM_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_u64);
    let data = data_dir();
    let locks = data.path().join("locks");
    std::fs::create_dir_all(&locks).expect("locks dir");
    let source = flow(&locks);

    let mut node = Up::start(data.path(), &["--seats", SEATS]);
    let mut client = Client::connect(data.path()).expect("connect");
    let mut submitted = BTreeSet::new();
    for _ in 0..JOBS {
        let result = client
            .ok(&json!({"op": "submit", "flow": {"source": source, "origin": "locked.yaml"}}));
        submitted.insert(result["job"].as_str().expect("job").to_owned());
    }
    drop(client);

    let mut rng = Rng(seed | 1);
    for _ in 0..RESTARTS {
        // Nine lives in ten are short (effects die mid-run); one in ten is long enough
        // for a 3 s effect to finish.
        let life_ms = if rng.between(0, 9) == 0 {
            rng.between(3_500, 5_000)
        } else {
            rng.between(50, 1_200)
        };
        std::thread::sleep(Duration::from_millis(life_ms));
        node.kill9();
        node = Up::start(data.path(), &["--seats", SEATS]);
    }

    let done = eventually(Duration::from_secs(180), || {
        statuses(data.path())
            .values()
            .all(|s| s == "succeeded" || s == "failed")
    });
    let collisions = std::fs::read_to_string(locks.join("collisions")).unwrap_or_default();
    let starts = std::fs::read_to_string(locks.join("starts")).unwrap_or_default();
    assert!(
        collisions.is_empty(),
        "seed {seed:#x}: an effect key ran twice at once ({} collisions):\n{collisions}",
        collisions.lines().count()
    );
    let all = statuses(data.path());
    assert!(done, "seed {seed:#x}: jobs did not finish: {all:?}");
    assert_eq!(
        all.keys().cloned().collect::<BTreeSet<_>>(),
        submitted,
        "seed {seed:#x}: no job lost, none invented"
    );
    assert!(
        all.values().all(|s| s == "succeeded"),
        "seed {seed:#x}: every job succeeded: {all:?}"
    );

    let mut client = Client::connect(data.path()).expect("connect");
    for job in &submitted {
        let inspect = client.ok(&json!({"op": "inspect", "job": job}));
        let events = inspect["events"].as_array().expect("events");
        let requested: BTreeSet<&str> = events
            .iter()
            .filter(|e| e["kind"] == "effect_requested")
            .filter_map(|e| e["key"].as_str())
            .collect();
        let mut completions: BTreeMap<&str, usize> = BTreeMap::new();
        for event in events.iter().filter(|e| e["kind"] == "effect_completed") {
            *completions
                .entry(event["key"].as_str().expect("key"))
                .or_default() += 1;
        }
        assert_eq!(requested.len(), STEPS_PER_JOB, "{job}: one effect per step");
        for key in &requested {
            assert_eq!(
                completions.get(key),
                Some(&1),
                "seed {seed:#x}: {job}: exactly one completion of {key}: {completions:?}"
            );
        }
        assert_eq!(
            completions.len(),
            STEPS_PER_JOB,
            "{job}: nothing else completed"
        );
        let ok = |e: &&Value| e["kind"] == "effect_completed";
        assert!(events.iter().filter(ok).count() == STEPS_PER_JOB);
    }
    eprintln!(
        "torture: seed {seed:#x}, {RESTARTS} kill -9s, {} effect starts for {} effects, 0 collisions",
        starts.lines().count(),
        JOBS * STEPS_PER_JOB
    );
    drop(node);
}
