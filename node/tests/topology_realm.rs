//! The topology's acceptance tree with real processes: root ← realm-1 ← edge-1, edge-2
//! (edge-2 offers `blue`). A flow submitted at edge-1 with a `needs: [blue]` leaf is
//! homed at the realm and its effect runs on edge-2; `status` at edge-1 and at the root
//! both show it succeeded. A flow submitted at the root with the same leaf is homed there
//! and placed two hops down, through the realm onto edge-2. `kill -9` of the root: within 5 s the realm's projection of the
//! root is invalid and the realm keeps running its own jobs; the root restarts, the links
//! come back, nothing runs twice. `kill -9` of edge-2 during an effect: the effect is
//! placed again after its lease and completes once.

mod common;

use common::{Client, Up, data_dir, eventually, free_port, palm};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

fn result(data: &Path, request: Value) -> Value {
    Client::connect(data)
        .and_then(|mut c| c.call(&request))
        .map(|answer| answer["result"].clone())
        .unwrap_or(Value::Null)
}

fn token(root: &Path, name: &str, role: &str) -> String {
    let ran = palm(
        root,
        &["token", "create", "--name", name, "--role", role, "--json"],
    );
    assert_eq!(ran.code, 0, "token create: {}", ran.stderr);
    ran.json()["token"].as_str().expect("token").to_owned()
}

fn link_up(data: &Path, direction: &str, peer: &str) -> bool {
    result(data, json!({"op": "vitality"}))["links"]
        .as_array()
        .is_some_and(|links| {
            links
                .iter()
                .any(|l| l["direction"] == direction && l["peer"] == peer && l["state"] == "up")
        })
}

fn offers(realm: &Path, child: &str, capability: &str) -> bool {
    result(realm, json!({"op": "tree"}))["tree"]["children"]
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

fn completions(data: &Path, job: &str) -> Vec<Value> {
    palm(data, &["inspect", job, "--json"]).json()["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "effect_completed")
        .cloned()
        .collect()
}

/// Runs the `blue` flow from node `at`: it must succeed, homed at `home`, its effect run
/// on edge-2 (the only node offering `blue`). Returns the job id.
fn run_on_blue(at: &Path, flow: &str, home: &str) -> String {
    let ran = palm(at, &["run", flow, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let view = ran.json();
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["home"], home);
    assert_eq!(view["effects"][0]["node"], "edge-2");
    assert_eq!(view["state"]["out"]["stdout"], "on edge-2\n");
    view["job"].as_str().expect("job").to_owned()
}

#[test]
fn a_job_submitted_at_an_edge_is_homed_at_its_realm_and_runs_where_blue_is() {
    let dirs = [data_dir(), data_dir(), data_dir(), data_dir()];
    let [root, realm, edge1, edge2] = [
        dirs[0].path(),
        dirs[1].path(),
        dirs[2].path(),
        dirs[3].path(),
    ];
    std::fs::write(realm.join("palm.yaml"), "lease_ms: 2000\n").expect("realm config");
    std::fs::write(edge2.join("palm.yaml"), "capabilities: [blue]\n").expect("edge-2 config");
    let (root_addr, realm_addr) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let root_args = [
        "--profile",
        "root",
        "--listen",
        root_addr.as_str(),
        "--name",
        "root",
        "--seats",
        "1",
    ];
    let root_up = Up::start(root, &root_args);
    let realm_token = token(root, "realm-1", "realm");
    let _realm = Up::start(
        realm,
        &[
            "--profile",
            "realm",
            "--parent",
            &root_addr,
            "--token",
            &realm_token,
            "--listen",
            &realm_addr,
            "--name",
            "realm-1",
            "--seats",
            "1",
        ],
    );
    assert!(eventually(Duration::from_secs(15), || {
        result(realm, json!({"op": "vitality"}))["tree"]["listen"] == realm_addr.as_str()
            && link_up(realm, "parent", "root")
    }));
    let edge_args = |token: &str| -> Vec<String> {
        [
            "--profile",
            "edge",
            "--parent",
            realm_addr.as_str(),
            "--token",
            token,
            "--seats",
            "1",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    };
    let e1 = edge_args(&token(root, "edge-1", "edge"));
    let _edge1 = Up::start(edge1, &e1.iter().map(String::as_str).collect::<Vec<_>>());
    let e2 = edge_args(&token(root, "edge-2", "edge"));
    let edge2_up = Up::start(edge2, &e2.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        eventually(Duration::from_secs(20), || offers(realm, "edge-2", "blue")
            && link_up(realm, "child", "edge-1")
            && link_up(edge1, "parent", "realm-1")
            && link_up(root, "child", "realm-1")),
        "tree: {}",
        result(realm, json!({"op": "tree"}))
    );

    // Submitted at edge-1, homed at the realm, run on edge-2; the root sees it too.
    let flow = root.join("blue.yaml");
    std::fs::write(
        &flow,
        "name: blue\ntree:\n  run: { cmd: \"echo on $PALM_NODE_NAME\", needs: [blue], save: out }\n",
    )
    .expect("flow");
    let flow = flow.display().to_string();
    let job = run_on_blue(edge1, &flow, "realm-1");
    assert!(
        eventually(Duration::from_secs(5), || {
            palm(root, &["status", &job, "--json"]).json()["status"] == "succeeded"
        }),
        "the root reaches the job through the realm"
    );

    // Two hops down: submitted at the root, homed there, placed through the realm onto
    // edge-2 (the only node offering `blue`); the completion climbs two hops home.
    let deep_job = run_on_blue(root, &flow, "root");
    assert_eq!(completions(root, &deep_job).len(), 1);
    assert_eq!(
        palm(edge1, &["status", &deep_job, "--json"]).json()["status"],
        "succeeded",
        "edge-1 reaches the root's job through the realm"
    );

    // A submit that names its home goes there, from anywhere in the tree: up from edge-1
    // to the root, down from the root to the realm; an edge or an unknown name is refused.
    let settled_at = |at: &Path, job: &str| {
        let mut last = Value::Null;
        let done = eventually(Duration::from_secs(15), || {
            last = palm(at, &["status", job, "--json"]).json();
            last["status"] == "succeeded"
        });
        assert!(done, "{job}: {last}");
        last
    };
    let mut homed = Vec::new();
    for (at, home) in [(edge1, "root"), (root, "realm-1"), (realm, "realm-1")] {
        let submitted = palm(at, &["submit", &flow, "--node", home, "--json"]);
        assert_eq!(submitted.code, 0, "--node {home}: {}", submitted.stderr);
        let named = submitted.json()["job"].as_str().expect("job").to_owned();
        let view = settled_at(at, &named);
        assert_eq!(view["home"], home, "{view}");
        assert_eq!(view["effects"][0]["node"], "edge-2", "{view}");
        homed.push((home, named));
    }
    // Jobs are listed at the node named too: from the root, the realm's.
    let listed = palm(root, &["jobs", "--node", "realm-1", "--json"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let listed: Vec<String> = listed.json()["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["job"].as_str().map(str::to_owned))
        .collect();
    for (home, job) in &homed {
        assert_eq!(
            listed.contains(job),
            *home == "realm-1",
            "{job} at {home}: {listed:?}"
        );
    }
    for (name, says) in [
        ("edge-2", "is an edge"),
        ("nowhere", "no node called `nowhere`"),
    ] {
        let refused = palm(edge1, &["submit", &flow, "--node", name, "--json"]);
        assert_ne!(refused.code, 0, "--node {name}");
        assert!(
            refused.stdout.contains(says),
            "--node {name}: {}",
            refused.stdout
        );
    }
    // The `palm` provider names a home too: a job homed at the realm starts one at the
    // root (where its flow is stored) and waits for it across the tree.
    let stored = palm(root, &["flows", "add", &flow]);
    assert_eq!(stored.code, 0, "{}", stored.stderr);
    let caller = realm.join("caller.yaml");
    std::fs::write(
        &caller,
        "name: caller\ntree:\n  call: { provider: palm, args: { flow: blue, node: root }, save: started }\n",
    )
    .expect("flow");
    let called = palm(edge1, &["run", &caller.display().to_string(), "--json"]);
    assert_eq!(called.code, 0, "{}{}", called.stdout, called.stderr);
    let called = called.json();
    assert_eq!(called["home"], "realm-1", "{called}");
    let started = &called["state"]["started"];
    assert_eq!(started["status"], "succeeded", "{called}");
    let started_job = started["job"].as_str().expect("started job");
    assert_eq!(
        palm(root, &["status", started_job, "--json"]).json()["home"],
        "root"
    );

    // kill -9 of the root: the realm's projection of it goes invalid within 5 s, and the
    // realm keeps running its own jobs.
    root_up.kill9();
    let killed = Instant::now();
    assert!(
        eventually(Duration::from_secs(5), || {
            result(realm, json!({"op": "vitality"}))["projection"]["valid"] == false
        }),
        "projection: {}",
        result(realm, json!({"op": "vitality"}))["projection"]
    );
    assert!(killed.elapsed() < Duration::from_secs(5));
    assert!(
        result(realm, json!({"op": "vitality"}))["projection"]["home_unreachable_since"].is_u64()
    );
    // Two hops down, edge-1 asks about the root's job: the realm answers from memory, and
    // edge-1 is told it is a projection, invalid, not the home's word (a regression: the
    // relayed answer used to be re-stamped valid on the way down).
    let stale = palm(edge1, &["status", &deep_job, "--json"]);
    assert_eq!(stale.code, 0, "{}", stale.stderr);
    let stale = stale.json();
    assert_eq!(stale["projection"], "invalid", "{stale}");
    assert_eq!(stale["status"], "succeeded", "{stale}");
    assert!(stale["home_unreachable_since"].is_u64(), "{stale}");
    let human = palm(edge1, &["status", &deep_job]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    assert!(
        human.stdout.contains("projection invalid"),
        "plain status says so: {}",
        human.stdout
    );
    let offline = palm(edge1, &["run", &flow, "--json"]);
    assert_eq!(
        offline.code, 0,
        "the realm runs its own jobs without the root: {}",
        offline.stderr
    );
    assert_eq!(offline.json()["home"], "realm-1");

    // The root comes back: links return by themselves; nothing ran twice.
    let _root = Up::start(root, &root_args);
    assert!(eventually(Duration::from_secs(20), || link_up(
        realm, "parent", "root"
    ) && link_up(
        root, "child", "realm-1"
    )));
    assert!(eventually(Duration::from_secs(5), || {
        result(realm, json!({"op": "vitality"}))["projection"]["valid"] == true
    }));
    for id in [&job, offline.json()["job"].as_str().expect("job")] {
        assert_eq!(completions(realm, id).len(), 1, "{id} completed once");
    }

    // kill -9 of edge-2 during an effect: placed again after the lease, completed once.
    let slow = root.join("slow.yaml");
    std::fs::write(
        &slow,
        "name: slow\ntree:\n  run: { cmd: \"sleep 2\", needs: [blue] }\n",
    )
    .expect("flow");
    let submitted = palm(edge1, &["submit", &slow.display().to_string(), "--json"]);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    let slow_job = submitted.json()["job"].as_str().expect("job").to_owned();
    assert!(eventually(Duration::from_secs(10), || {
        result(edge2, json!({"op": "vitality"}))["seats"]["busy"].as_u64() > Some(0)
            || palm(realm, &["status", &slow_job, "--json"]).json()["effects"][0]["state"]
                != "requested"
    }));
    std::thread::sleep(Duration::from_millis(300));
    edge2_up.kill9();
    std::thread::sleep(Duration::from_millis(2_500));
    let edge2_again = Up::start(edge2, &["--profile", "edge", "--seats", "1"]);
    assert!(
        eventually(Duration::from_secs(30), || {
            palm(realm, &["status", &slow_job, "--json"]).json()["status"] == "succeeded"
        }),
        "the effect is placed again and completes"
    );
    let done = completions(realm, &slow_job);
    assert_eq!(done.len(), 1, "completed once: {done:?}");
    assert_eq!(done[0]["node"], "edge-2");

    // kill -9 of edge-2 and back within the lease, before the realm noticed the link go:
    // the run it had is gone, the new connection replaces the old, and the effect is
    // reaped and placed again rather than waited on for ever (a regression).
    let submitted = palm(edge1, &["submit", &slow.display().to_string(), "--json"]);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    let quick_job = submitted.json()["job"].as_str().expect("job").to_owned();
    assert!(eventually(Duration::from_secs(10), || {
        palm(realm, &["status", &quick_job, "--json"]).json()["effects"][0]["state"] != "requested"
    }));
    std::thread::sleep(Duration::from_millis(300));
    edge2_again.kill9();
    std::thread::sleep(Duration::from_millis(200));
    let _edge2 = Up::start(edge2, &["--profile", "edge", "--seats", "1"]);
    assert!(
        eventually(Duration::from_secs(30), || {
            palm(realm, &["status", &quick_job, "--json"]).json()["status"] == "succeeded"
        }),
        "the effect is reaped, placed again and completes: {}",
        palm(realm, &["inspect", &quick_job, "--json"]).stdout
    );
    assert_eq!(completions(realm, &quick_job).len(), 1);
}
