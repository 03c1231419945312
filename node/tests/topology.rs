//! End-to-end topology with real processes on loopback: truth climbs home, work spreads
//! out. A root with two edges (edge2 offers `blue`): a job submitted at edge1 is homed at
//! the root and its `needs: [blue]` effect runs on edge2; status agrees everywhere;
//! `kill -9` of edge2 mid-effect re-places the effect after its lease and it completes
//! once; `kill -9` of the root makes edge1's projection invalid within 5 s, and after the
//! root's restart the links come back and the job goes on.

mod common;

use common::{Client, Up, data_dir, eventually, free_port, palm};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

fn call(data: &Path, request: Value) -> Value {
    Client::connect(data)
        .expect("connect")
        .call(&request)
        .expect("an answer")
}

fn token(root: &Path, name: &str) -> String {
    let ran = palm(
        root,
        &[
            "token", "create", "--name", name, "--role", "edge", "--json",
        ],
    );
    assert_eq!(ran.code, 0, "token create: {}", ran.stderr);
    ran.json()["token"].as_str().expect("token").to_owned()
}

fn child_up(parent: &Path, child: &str) -> bool {
    let vitality = call(parent, json!({"op": "vitality"}));
    vitality["result"]["links"].as_array().is_some_and(|links| {
        links
            .iter()
            .any(|l| l["peer"] == child && l["state"] == "up")
    })
}

/// The tree's placement needs the child's summary (sent every second).
fn offers(parent: &Path, child: &str, capability: &str) -> bool {
    let tree = call(parent, json!({"op": "tree"}));
    tree["result"]["tree"]["children"]
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

fn edge(data: &Path, root_addr: &str, name: &str, token: Option<&str>) -> Up {
    let mut args = vec!["--profile", "edge", "--name", name, "--seats", "1"];
    if let Some(token) = token {
        args.extend_from_slice(&["--parent", root_addr, "--token", token]);
    }
    Up::start(data, &args)
}

#[test]
fn truth_climbs_home_and_work_spreads_out() {
    let (root_dir, edge1_dir, edge2_dir) = (data_dir(), data_dir(), data_dir());
    let (root, edge1, edge2) = (root_dir.path(), edge1_dir.path(), edge2_dir.path());
    std::fs::write(root.join("palm.yaml"), "lease_ms: 2000\n").expect("root config");
    std::fs::write(edge2.join("palm.yaml"), "capabilities: [blue]\n").expect("edge2 config");
    let addr = format!("127.0.0.1:{}", free_port());
    let root_args = [
        "--profile",
        "root",
        "--listen",
        addr.as_str(),
        "--name",
        "root",
        "--seats",
        "1",
    ];
    let root_up = Up::start(root, &root_args);
    let _edge1 = edge(edge1, &addr, "edge1", Some(&token(root, "edge1")));
    let edge2_up = edge(edge2, &addr, "edge2", Some(&token(root, "edge2")));
    // edge1 routes the submit below through its own view of its parent link: wait for
    // that too, not only for the root's.
    assert!(eventually(Duration::from_secs(15), || offers(
        root, "edge2", "blue"
    ) && child_up(
        root, "edge1"
    ) && child_up(
        edge1, "root"
    )));

    // A job submitted at edge1 is homed at the root; its effect runs on edge2.
    let log = root.join("effects.log");
    let flow = root.join("blue.yaml");
    std::fs::write(
        &flow,
        format!(
            "name: blue\ntree:\n  run: {{ cmd: \"echo $PALM_EFFECT_KEY $PALM_NODE_NAME >> {}\", needs: [blue], save: out }}\n",
            log.display()
        ),
    )
    .expect("flow");
    let ran = palm(edge1, &["run", &flow.display().to_string(), "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let view = ran.json();
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["home"], "root");
    assert_eq!(view["effects"][0]["node"], "edge2");
    assert_eq!(view["projection"], "valid");
    let job = view["job"].as_str().expect("job").to_owned();
    let at_root = palm(root, &["status", &job, "--json"]).json();
    assert_eq!(at_root["status"], "succeeded");
    assert_eq!(at_root["effects"][0]["node"], "edge2");
    let jobs_at_edge1 = palm(edge1, &["jobs", "--json"]).json();
    assert!(
        jobs_at_edge1["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .any(|j| j["job"] == job),
        "an edge lists its home's jobs: {jobs_at_edge1}"
    );

    // kill -9 of edge2 during an effect: the lease runs out, the effect is placed again
    // when edge2 is back, and completes once.
    let slow = root.join("slow.yaml");
    std::fs::write(
        &slow,
        format!(
            "name: slow\ntree:\n  run: {{ cmd: \"sleep 2; echo $PALM_EFFECT_KEY >> {}\", needs: [blue] }}\n",
            log.display()
        ),
    )
    .expect("flow");
    let submitted = palm(edge1, &["submit", &slow.display().to_string(), "--json"]);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    let slow_job = submitted.json()["job"].as_str().expect("job").to_owned();
    assert!(eventually(Duration::from_secs(10), || {
        let vitality = call(edge2, json!({"op": "vitality"}));
        vitality["result"]["seats"]["busy"].as_u64() > Some(0)
            || std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains(&slow_job)
    }));
    edge2_up.kill9();
    std::thread::sleep(Duration::from_millis(2_500));
    let _edge2 = edge(edge2, &addr, "edge2", None);
    assert!(
        eventually(Duration::from_secs(30), || {
            palm(root, &["status", &slow_job, "--json"]).json()["status"] == "succeeded"
        }),
        "the re-placed effect completes"
    );
    let journal = palm(root, &["inspect", &slow_job, "--json"]).json();
    let completions: Vec<&Value> = journal["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "effect_completed")
        .collect();
    assert_eq!(completions.len(), 1, "completed once: {journal}");
    assert_eq!(completions[0]["node"], "edge2");

    // kill -9 of the root: within 5 s edge1's projection of it is invalid, and a status
    // of a job homed there says so rather than pretending.
    let parked = palm(edge1, &["run", &common::example("approval"), "--json"]);
    assert_eq!(parked.code, 4, "{}", parked.stderr);
    let parked_job = parked.json()["job"].as_str().expect("job").to_owned();
    root_up.kill9();
    let killed_at = Instant::now();
    assert!(eventually(Duration::from_secs(5), || {
        call(edge1, json!({"op": "vitality"}))["result"]["projection"]["valid"] == false
    }));
    assert!(killed_at.elapsed() < Duration::from_secs(5));
    let stale = palm(edge1, &["status", &parked_job, "--json"]).json();
    assert_eq!(stale["projection"], "invalid", "{stale}");
    assert!(stale["home_unreachable_since"].is_u64());
    assert_eq!(stale["status"], "waiting");
    let refused = palm(
        edge1,
        &[
            "continue",
            &parked_job,
            "--key",
            "approve",
            "--input",
            r#"{"ok":true}"#,
        ],
    );
    assert_eq!(refused.code, 1);
    assert!(refused.stderr.contains("unreachable"), "{}", refused.stderr);

    // The root comes back: links return by themselves, and the job goes on.
    let _root = Up::start(root, &root_args);
    assert!(eventually(Duration::from_secs(15), || child_up(
        root, "edge1"
    )));
    assert!(eventually(Duration::from_secs(5), || {
        call(edge1, json!({"op": "vitality"}))["result"]["projection"]["valid"] == true
    }));
    let done = palm(
        edge1,
        &[
            "continue",
            &parked_job,
            "--key",
            "approve",
            "--input",
            r#"{"ok":true}"#,
            "--json",
        ],
    );
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(done.json()["status"], "succeeded");
    assert!(eventually(Duration::from_secs(15), || {
        let tree = palm(root, &["tree", "--json"]).json();
        tree["role"] == "root" && tree["tree"]["children"].as_array().map(Vec::len) == Some(2)
    }));
}
