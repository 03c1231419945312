//! End-to-end: the place book with real processes — a spawned HTTP server gating work
//! that needs it, restarts after a kill, adoption that never stops what it did not start,
//! a crash loop that gives up, a job-owned place stopped with its job, and bad input.

mod common;

use common::{Client, Up, data_dir, eventually, palm, processes_matching};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn place(data: &Path, name: &str) -> Option<Value> {
    let mut client = Client::connect(data)?;
    let places = client.ok(&json!({"op": "places"}));
    places["places"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
}

fn state_of(data: &Path, name: &str) -> String {
    place(data, name)
        .and_then(|p| p["state"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn http_server(port: u16) -> String {
    format!("exec python3 -m http.server {port} --bind 127.0.0.1")
}

#[test]
fn work_that_needs_a_place_waits_for_it_and_none_runs_twice() {
    let data = data_dir();
    let port = free_port();
    std::fs::write(
        data.path().join("palm.yaml"),
        format!(
            "places:\n  web:\n    spawn: \"{}\"\n    probe: {{ http: \"http://127.0.0.1:{port}/\", interval: 200ms, failures: 1 }}\n    restart: {{ policy: on_failure, backoff: 6s }}\n",
            http_server(port)
        ),
    )
    .expect("config");
    let log = data.path().join("effects.log");
    let flow = data.path().join("needs.yaml");
    std::fs::write(
        &flow,
        format!(
            "name: needs-web\ntree:\n  run: {{ cmd: \"echo $PALM_EFFECT_KEY >> {}\", needs: [web] }}\n",
            log.display()
        ),
    )
    .expect("flow");
    let flow = flow.display().to_string();
    let up = Up::start(data.path(), &["--seats", "2"]);
    assert!(
        eventually(Duration::from_secs(15), || state_of(data.path(), "web")
            == "ready"),
        "web never got ready: {:?}",
        place(data.path(), "web")
    );
    let first = palm(data.path(), &["run", &flow, "--json"]);
    assert_eq!(first.code, 0, "{}", first.stderr);

    // Kill the server behind the node's back: the place goes unready, then restarts
    // after its 6 s backoff — the window in which the checks below see it down (ten
    // `palm` commands, slow on a loaded machine).
    let pid = place(data.path(), "web").expect("web")["pid"]
        .as_u64()
        .expect("pid") as i32;
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(
        eventually(Duration::from_secs(5), || state_of(data.path(), "web")
            == "unready"),
        "web did not go unready"
    );
    let mut jobs = Vec::new();
    for _ in 0..5 {
        let submitted = palm(data.path(), &["submit", &flow, "--json"]);
        assert_eq!(submitted.code, 0, "{}", submitted.stderr);
        jobs.push(submitted.json()["job"].as_str().expect("job").to_owned());
    }
    for job in &jobs {
        let status = palm(data.path(), &["status", job, "--json"]).json();
        assert_eq!(status["status"], "running", "{status}");
        let blocked = status["blocked_on"].as_array().expect("blocked_on");
        assert_eq!(blocked.len(), 1, "{status}");
        assert_eq!(blocked[0]["place"], "web");
        assert!(blocked[0]["since"].is_u64());
        assert!(
            blocked[0]["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("unready"),
            "{status}"
        );
    }
    let drained = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        drained.lines().count(),
        1,
        "nothing drains while web is down"
    );
    assert_eq!(
        state_of(data.path(), "web"),
        "unready",
        "the checks above ran while web was down"
    );

    // After the restart everything completes, exactly once.
    for job in &jobs {
        let done = palm(data.path(), &["status", job, "--json"]);
        let settled = eventually(Duration::from_secs(20), || {
            palm(data.path(), &["status", job, "--json"]).json()["status"] == "succeeded"
        });
        assert!(settled, "{job} never succeeded: {}", done.stdout);
    }
    let web = place(data.path(), "web").expect("web");
    assert_eq!(web["state"], "ready");
    assert_eq!(web["restarts"], 1, "{web}");
    let mut runs: BTreeMap<String, usize> = BTreeMap::new();
    for line in std::fs::read_to_string(&log).expect("log").lines() {
        *runs.entry(line.to_owned()).or_default() += 1;
    }
    assert_eq!(runs.len(), 6, "every job ran: {runs:?}");
    assert!(runs.values().all(|n| *n == 1), "none ran twice: {runs:?}");

    // The transitions are in the node journal.
    let events = palm(data.path(), &["places", "events", "web", "--json"]).json();
    let to: Vec<&str> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["to"].as_str())
        .collect();
    assert!(
        to.windows(3).any(|w| w == ["ready", "unready", "starting"]),
        "{to:?}"
    );
    let vitality = palm(data.path(), &["vitality", "--json"]).json();
    assert_eq!(vitality["places"][0]["name"], "web");
    assert!(vitality["places"][0]["rss_bytes"].is_u64(), "{vitality}");

    // Stopping the node stops what it spawned.
    let (code, _) = up.terminate();
    assert_eq!(code, 0);
    assert!(
        eventually(Duration::from_secs(5), || processes_matching(&format!(
            "http.server {port}"
        ))
        .is_empty()),
        "the spawned server outlived its node"
    );
}

#[test]
fn adoption_leaves_the_process_running_and_crash_loops_give_up() {
    let data = data_dir();
    let port = free_port();
    let mut outside = std::process::Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start a server outside palm");
    let up = Up::start(data.path(), &[]);
    let addr = format!("127.0.0.1:{port}");
    let adopted = eventually(Duration::from_secs(10), || {
        palm(data.path(), &["places", "adopt", "ext", "--tcp", &addr]).code == 0
    });
    assert!(adopted, "adopt failed");
    assert_eq!(state_of(data.path(), "ext"), "ready");

    let crashy = palm(
        data.path(),
        &[
            "places",
            "add",
            "crashy",
            "--spawn",
            "echo 'bad config' >&2; exit 3",
            "--restarts-max",
            "2",
            "--backoff",
            "100ms",
        ],
    );
    assert_eq!(crashy.code, 1);
    assert!(
        crashy
            .stderr
            .contains("gave up after 2 restarts within 60s: exited with code 3: bad config"),
        "{}",
        crashy.stderr
    );
    assert_eq!(state_of(data.path(), "crashy"), "failed");
    assert_eq!(
        state_of(data.path(), "ext"),
        "ready",
        "other places unaffected"
    );

    let (code, _) = up.terminate();
    assert_eq!(code, 0);
    assert!(
        outside.try_wait().expect("poll").is_none(),
        "stopping the node must not stop an adopted process"
    );
    // A runtime place is stored: listed (not running) without a node.
    let listed = palm(data.path(), &["places", "--json"]).json();
    let names: Vec<&str> = listed["places"]
        .as_array()
        .expect("places")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["crashy", "ext"]);
    let _ = outside.kill();
    let _ = outside.wait();
}

#[test]
fn a_job_owned_place_is_stopped_when_its_job_is_cancelled() {
    let data = data_dir();
    let port = free_port();
    let flow = data.path().join("owned.yaml");
    std::fs::write(
        &flow,
        format!(
            "name: owned\nplaces:\n  srv:\n    spawn: \"{}\"\n    probe: \"http://127.0.0.1:{port}/\"\ntree:\n  sequence:\n    - run: {{ cmd: \"true\", needs: [srv] }}\n    - wait: {{ key: done }}\n",
            http_server(port)
        ),
    )
    .expect("flow");
    let up = Up::start(data.path(), &[]);
    let ran = palm(data.path(), &["run", &flow.display().to_string(), "--json"]);
    assert_eq!(ran.code, 4, "parks after using its place: {}", ran.stderr);
    let job = ran.json()["job"].as_str().expect("job").to_owned();
    let owned = format!("{job}/srv");
    assert_eq!(state_of(data.path(), &owned), "ready");
    assert_eq!(place(data.path(), &owned).expect("place")["owner"], job);
    assert_eq!(palm(data.path(), &["cancel", &job]).code, 0);
    assert!(
        eventually(Duration::from_secs(10), || place(data.path(), &owned)
            .is_none()),
        "the job's place outlived it"
    );
    assert!(
        eventually(Duration::from_secs(5), || processes_matching(&format!(
            "http.server {port}"
        ))
        .is_empty()),
        "the job's server process is still running"
    );
    assert_eq!(up.terminate().0, 0);
}

#[test]
fn bad_places_get_clear_errors_and_leave_the_others_alone() {
    let data = data_dir();
    std::fs::write(
        data.path().join("palm.yaml"),
        "places:\n  web:\n    spawn: \"sleep 100\"\n    probe: \"grpc://127.0.0.1:1\"\n",
    )
    .expect("config");
    let refused = palm(data.path(), &["up"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("palm.yaml:4:12: unknown probe kind `grpc`"),
        "{}",
        refused.stderr
    );
    std::fs::write(
        data.path().join("palm.yaml"),
        "places:\n  good:\n    spawn: \"exec tail -f /dev/null\"\n",
    )
    .expect("config");
    let up = Up::start(data.path(), &[]);
    assert!(eventually(Duration::from_secs(10), || state_of(
        data.path(),
        "good"
    ) == "ready"));
    let unreachable = palm(
        data.path(),
        &["places", "adopt", "db", "--tcp", "127.0.0.1:1"],
    );
    assert_eq!(unreachable.code, 2);
    assert!(
        unreachable
            .stderr
            .contains("cannot adopt `db`: tcp://127.0.0.1:1 (tcp connect refused)"),
        "{}",
        unreachable.stderr
    );
    let missing = palm(
        data.path(),
        &[
            "places",
            "add",
            "ghost",
            "--spawn",
            "no-such-command-palm-test",
        ],
    );
    assert_eq!(missing.code, 1);
    assert!(
        missing
            .stderr
            .contains("cannot start: exited with code 127"),
        "{}",
        missing.stderr
    );
    let bad_probe = palm(
        data.path(),
        &[
            "places",
            "add",
            "p",
            "--spawn",
            "true",
            "--probe",
            "grpc://x:1",
        ],
    );
    assert_eq!(bad_probe.code, 2);
    assert!(
        bad_probe.stderr.contains("unknown probe kind `grpc`"),
        "{}",
        bad_probe.stderr
    );
    let unknown = palm(data.path(), &["places", "remove", "nope"]);
    assert_eq!(unknown.code, 2);
    assert!(unknown.stderr.contains("unknown place `nope`"));
    let from_config = palm(data.path(), &["places", "remove", "good"]);
    assert_eq!(from_config.code, 2);
    assert_eq!(
        state_of(data.path(), "good"),
        "ready",
        "other places unaffected"
    );
    assert!(
        place(data.path(), "p").is_none(),
        "a refused place is not added"
    );
    assert_eq!(up.terminate().0, 0);
}

#[test]
fn a_node_killed_hard_stops_its_old_places_before_starting_new_ones() {
    let data = data_dir();
    let port = free_port();
    std::fs::write(
        data.path().join("palm.yaml"),
        format!(
            "places:\n  web:\n    spawn: \"{}\"\n    probe: \"http://127.0.0.1:{port}/\"\n",
            http_server(port)
        ),
    )
    .expect("config");
    let servers = || processes_matching(&format!("http.server {port}"));
    let up = Up::start(data.path(), &[]);
    assert!(eventually(Duration::from_secs(15), || state_of(
        data.path(),
        "web"
    ) == "ready"));
    let old = servers();
    assert_eq!(old.len(), 1);
    up.kill9();
    assert_eq!(
        servers(),
        old,
        "kill -9 of the node leaves its place running"
    );
    let up = Up::start(data.path(), &[]);
    assert!(
        eventually(Duration::from_secs(15), || state_of(data.path(), "web")
            == "ready"),
        "{:?}",
        place(data.path(), "web")
    );
    let now = servers();
    assert_eq!(now.len(), 1, "exactly one server: {now:?}");
    assert_ne!(now, old, "the old one was stopped, a new one started");
    assert_eq!(up.terminate().0, 0);
    assert!(eventually(Duration::from_secs(5), || servers().is_empty()));
}
