//! End-to-end: work that starts itself (schedules with catch-up, job triggers with
//! outputs and coalescing, a trigger loop stopped at its depth bound, no start lost or
//! doubled across kill -9) and providers that reach the world (http, file, palm).

mod common;

use common::{Client, Up, data_dir, eventually, palm, processes_matching};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

fn add(data: &Path, name: &str, yaml: &str) {
    let file = data.join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).expect("flow");
    let added = palm(data, &["flows", "add", &file.display().to_string()]);
    assert_eq!(added.code, 0, "{}", added.stderr);
}

fn jobs_of(data: &Path, flow: &str) -> Vec<Value> {
    let mut client = Client::connect(data).expect("connect");
    let jobs = client.ok(&json!({"op": "jobs"}));
    jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter(|j| j["flow"] == flow)
        .cloned()
        .collect()
}

fn status(data: &Path, job: &str) -> Value {
    Client::connect(data)
        .expect("connect")
        .ok(&json!({"op": "status", "job": job}))
}

#[test]
fn a_schedule_starts_on_time_and_catches_up_once_after_downtime() {
    let data = data_dir();
    add(
        data.path(),
        "tick",
        "name: tick\non: { schedule: { every: 1s } }\ntree:\n  set: { missed: \"{{ input.event.missed }}\" }\n",
    );
    let up = Up::start(data.path(), &[]);
    std::thread::sleep(Duration::from_millis(3_400));
    let running = jobs_of(data.path(), "tick").len();
    assert!(
        (2..=4).contains(&running),
        "about one start a second: {running}"
    );
    assert_eq!(up.terminate().0, 0);
    std::thread::sleep(Duration::from_secs(4));
    let before = jobs_of_offline(data.path());
    let up = Up::start(data.path(), &[]);
    assert!(eventually(Duration::from_secs(3), || jobs_of(
        data.path(),
        "tick"
    )
    .len()
        > before));
    // The next on-time start follows the catch-up by a second, and a loaded machine
    // can take that long between the two checks: count the catch-ups, not the starts.
    std::thread::sleep(Duration::from_millis(300));
    let after = jobs_of(data.path(), "tick");
    assert!(
        (before + 1..=before + 3).contains(&after.len()),
        "the catch-up and at most the on-time starts since: {} after {before}",
        after.len()
    );
    let missed: Vec<u64> = after
        .iter()
        .map(|job| {
            let shown = status(data.path(), job["job"].as_str().expect("id"));
            shown["state"]["missed"].as_u64().unwrap_or(0)
        })
        .collect();
    assert_eq!(
        missed.iter().filter(|m| **m >= 3).count(),
        1,
        "one catch-up start (catch_up: once): {missed:?}"
    );
    drop(up);
}

fn jobs_of_offline(data: &Path) -> usize {
    let listed = palm(data, &["jobs", "--json"]);
    listed.json()["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter(|j| j["flow"] == "tick")
        .count()
}

#[test]
fn job_triggers_pass_outputs_skip_failures_and_coalesce_by_key() {
    let data = data_dir();
    add(
        data.path(),
        "a",
        "name: a\ninput: { n: { type: integer, default: 0 } }\ntree:\n  sequence:\n    - set: { key: \"k{{ input.n % 4 }}\", n: \"{{ input.n }}\" }\n    - check: \"input.n >= 0\"\n",
    );
    add(
        data.path(),
        "b",
        "name: b\non: { job: { flow: a, status: succeeded }, coalesce_key: \"{{ event.state.key }}\", debounce: 2s }\ntree:\n  set: { key: \"{{ input.event.state.key }}\", last: \"{{ input.event.state.n }}\" }\n",
    );
    let _up = Up::start(data.path(), &["--seats", "2"]);
    let mut client = Client::connect(data.path()).expect("connect");
    for n in 0..100 {
        client.ok(&json!({"op": "submit", "flow": {"name": "a"}, "input": {"n": n}}));
    }
    // A failed `a` starts nothing.
    client.ok(&json!({"op": "submit", "flow": {"name": "a"}, "input": {"n": -1}}));
    assert!(eventually(Duration::from_secs(15), || {
        jobs_of(data.path(), "b").len() == 4
            && jobs_of(data.path(), "b")
                .iter()
                .all(|j| j["status"] == "succeeded")
    }));
    std::thread::sleep(Duration::from_millis(2_500));
    let bs = jobs_of(data.path(), "b");
    assert_eq!(bs.len(), 4, "one b per coalescing key: {bs:?}");
    let mut keys = BTreeSet::new();
    let mut start_keys = BTreeSet::new();
    for b in &bs {
        let view = status(data.path(), b["job"].as_str().expect("id"));
        keys.insert(view["state"]["key"].as_str().expect("key").to_owned());
        assert!(
            start_keys.insert(
                view["started_by"]["key"]
                    .as_str()
                    .expect("start key")
                    .to_owned()
            )
        );
        assert_eq!(view["started_by"]["depth"], 1);
        let last = view["state"]["last"].as_i64().expect("last n");
        assert!(last >= 96, "the latest payload wins: {view}");
    }
    assert_eq!(
        keys,
        BTreeSet::from(["k0".into(), "k1".into(), "k2".into(), "k3".into()])
    );
}

#[test]
fn a_flow_that_triggers_itself_stops_at_the_depth_bound() {
    let data = data_dir();
    add(
        data.path(),
        "loop",
        "name: loop\non: { job: { flow: loop, status: any } }\ntree:\n  set: { depth: \"{{ input.event.job | default('start') }}\" }\n",
    );
    let up = Up::start(data.path(), &[]);
    assert_eq!(palm(data.path(), &["submit", "loop"]).code, 0);
    let expected = palm_actors::interest::DEPTH_MAX as usize + 1;
    let reached = eventually(Duration::from_secs(15), || {
        jobs_of(data.path(), "loop").len() == expected
    });
    if !reached {
        let count = jobs_of(data.path(), "loop").len();
        let (_, stderr) = up.terminate();
        panic!("{count} loop jobs, expected {expected}; the node said:\n{stderr}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        jobs_of(data.path(), "loop").len(),
        expected,
        "nothing past the bound"
    );
    let (code, stderr) = up.terminate();
    assert_eq!(code, 0);
    assert!(stderr.contains("trigger chain too deep"), "{stderr}");
}

#[test]
fn no_start_is_lost_or_doubled_across_kill_9() {
    let data = data_dir();
    add(
        data.path(),
        "t",
        "name: t\non: { event: ping }\ntree:\n  run: \"sleep 0.05\"\n",
    );
    let up = Up::start(data.path(), &["--seats", "2"]);
    let mut client = Client::connect(data.path()).expect("connect");
    let mut acknowledged = 0;
    for i in 0..120 {
        if i == 60 {
            // Kill mid-burst: some emits were acknowledged, their intents are durable.
            std::thread::spawn({
                let pid = up.pid();
                move || {
                    let _ = std::process::Command::new("kill")
                        .args(["-9", &pid.to_string()])
                        .status();
                }
            });
        }
        match client.call(&json!({"op": "emit", "event": "ping", "data": {"i": i}})) {
            Some(answer) if answer["ok"] == true => acknowledged += 1,
            _ => break,
        }
    }
    up.kill9();
    let _up = Up::start(data.path(), &["--seats", "2"]);
    assert!(acknowledged >= 60, "{acknowledged}");
    assert!(
        eventually(Duration::from_secs(40), || {
            let ts = jobs_of(data.path(), "t");
            ts.len() >= acknowledged && ts.iter().all(|j| j["status"] == "succeeded")
        }),
        "every acknowledged emit starts its job"
    );
    let ts = jobs_of(data.path(), "t");
    assert!(ts.len() <= 120, "no more starts than emits");
    let mut keys = BTreeSet::new();
    let mut inputs = BTreeSet::new();
    for t in &ts {
        let view = status(data.path(), t["job"].as_str().expect("id"));
        assert!(
            keys.insert(view["started_by"]["key"].as_str().expect("key").to_owned()),
            "each intent starts once"
        );
        assert!(
            inputs.insert(view["input"]["event"]["data"]["i"].as_i64().expect("i")),
            "each emit starts once"
        );
    }
}

/// A tiny HTTP server for the `http` provider: /ok (JSON), /busy (503), /text (not JSON),
/// /slow (answers after 3 s).
fn test_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                let n = stream.read(&mut buf).unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (status, kind, body) = match path.as_str() {
                    "/ok" => ("200 OK", "application/json", r#"{"x": 42}"#.to_owned()),
                    "/busy" => (
                        "503 Busy",
                        "application/json",
                        r#"{"retry": true}"#.to_owned(),
                    ),
                    "/text" => ("200 OK", "text/plain", "just words".to_owned()),
                    _ => {
                        std::thread::sleep(Duration::from_secs(3));
                        ("200 OK", "text/plain", "late".to_owned())
                    }
                };
                let answer = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes());
            });
        }
    });
    port
}

fn call_flow(data: &Path, name: &str, provider: &str, args: Value) -> Value {
    let flow = json!({
        "name": name,
        "tree": {"call": {"provider": provider, "args": args, "save": "out"}},
    });
    let file = data.join(format!("{name}.json"));
    std::fs::write(&file, flow.to_string()).expect("flow");
    palm(data, &["run", &file.display().to_string(), "--json"]).json()
}

#[test]
fn the_http_provider_reports_each_outcome_clearly() {
    let data = data_dir();
    let port = test_server();
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let _up = Up::start(data.path(), &[]);
    let ok = call_flow(
        data.path(),
        "ok",
        "http",
        json!({"url": url("/ok"), "json": true}),
    );
    assert_eq!(ok["status"], "succeeded", "{ok}");
    assert_eq!(ok["state"]["out"]["status"], 200);
    assert_eq!(ok["state"]["out"]["body"]["x"], 42);
    let busy = call_flow(data.path(), "busy", "http", json!({"url": url("/busy")}));
    assert_eq!(busy["status"], "failed");
    assert!(
        busy["error"]
            .as_str()
            .unwrap_or_default()
            .contains("answered 503 (expected 2xx)"),
        "{busy}"
    );
    assert_eq!(
        busy["state"]["out"]["body"]["retry"], true,
        "what it saw is saved"
    );
    let text = call_flow(
        data.path(),
        "text",
        "http",
        json!({"url": url("/text"), "json": true}),
    );
    assert_eq!(text["status"], "failed");
    assert!(
        text["error"]
            .as_str()
            .unwrap_or_default()
            .contains("not JSON"),
        "{text}"
    );
    let lenient = call_flow(data.path(), "lenient", "http", json!({"url": url("/text")}));
    assert_eq!(lenient["state"]["out"]["text"], "just words");
    let slow = call_flow(
        data.path(),
        "slow",
        "http",
        json!({"url": url("/slow"), "timeout_ms": 300}),
    );
    assert_eq!(slow["status"], "failed");
    assert!(
        slow["error"]
            .as_str()
            .unwrap_or_default()
            .contains("timed out after 300 ms"),
        "{slow}"
    );
    let refused = call_flow(
        data.path(),
        "closed",
        "http",
        json!({"url": "http://127.0.0.1:1/"}),
    );
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot connect"),
        "{refused}"
    );
}

#[test]
fn file_kv_and_palm_providers() {
    let data = data_dir();
    let root = data.path().join("shared");
    std::fs::write(
        data.path().join("palm.yaml"),
        format!("providers:\n  file:\n    root: {}\n", root.display()),
    )
    .expect("config");
    let _up = Up::start(data.path(), &[]);
    let wrote = call_flow(
        data.path(),
        "w",
        "file",
        json!({"op": "write", "path": "notes/a.txt", "content": "hi"}),
    );
    assert_eq!(wrote["status"], "succeeded", "{wrote}");
    assert_eq!(
        std::fs::read_to_string(root.join("notes/a.txt")).expect("file"),
        "hi"
    );
    let read = call_flow(
        data.path(),
        "r",
        "file",
        json!({"op": "read", "path": "notes/a.txt"}),
    );
    assert_eq!(read["state"]["out"]["content"], "hi");
    let escape = call_flow(
        data.path(),
        "e",
        "file",
        json!({"op": "read", "path": "../palm.yaml"}),
    );
    assert_eq!(escape["status"], "failed");
    assert!(
        escape["error"]
            .as_str()
            .unwrap_or_default()
            .contains("outside the file root"),
        "{escape}"
    );

    let put = call_flow(
        data.path(),
        "p",
        "kv",
        json!({"op": "put", "key": "color", "value": {"is": "blue"}}),
    );
    assert_eq!(put["status"], "succeeded", "{put}");
    let got = call_flow(data.path(), "g", "kv", json!({"op": "get", "key": "color"}));
    assert_eq!(got["state"]["out"]["value"]["is"], "blue");
    // A put runs in the kernel, in the batch of its step; the get right after it in the
    // same job (through a seat) reads it back; a refused put fails its step, saying why.
    let both = data.path().join("both.json");
    let flow = json!({"name": "both", "tree": {"sequence": [
        {"call": {"provider": "kv", "args": {"op": "put", "key": "n", "value": 7}, "save": "put"}},
        {"call": {"provider": "kv", "args": {"op": "get", "key": "n"}, "save": "got"}},
        {"call": {"provider": "kv", "args": {"op": "delete", "key": "n"}, "save": "gone"}},
        {"call": {"provider": "kv", "args": {"op": "get", "key": "n"}, "save": "after"}},
    ]}});
    std::fs::write(&both, flow.to_string()).expect("flow");
    let both = palm(data.path(), &["run", &both.display().to_string(), "--json"]).json();
    assert_eq!(both["status"], "succeeded", "{both}");
    assert_eq!(both["state"]["put"]["stored"], true, "{both}");
    assert_eq!(both["state"]["got"]["value"], 7, "{both}");
    assert_eq!(both["state"]["gone"]["deleted"], true, "{both}");
    assert_eq!(both["state"]["after"]["found"], false, "{both}");
    let long_key = "k".repeat(2000);
    let refused = call_flow(
        data.path(),
        "r",
        "kv",
        json!({"op": "put", "key": long_key, "value": 1}),
    );
    assert_eq!(refused["status"], "failed", "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("kv: a kv key is 1 to 1024 bytes"),
        "{refused}"
    );

    add(
        data.path(),
        "child",
        "name: child\ninput: { x: { type: integer } }\ntree:\n  set: { doubled: \"{{ input.x * 2 }}\" }\n",
    );
    let parent = call_flow(
        data.path(),
        "parent",
        "palm",
        json!({"flow": "child", "input": {"x": 21}}),
    );
    assert_eq!(parent["status"], "succeeded", "{parent}");
    assert_eq!(parent["state"]["out"]["status"], "succeeded");
    assert_eq!(parent["state"]["out"]["state"]["doubled"], 42);
    let child = status(
        data.path(),
        parent["state"]["out"]["job"].as_str().expect("child id"),
    );
    assert_eq!(child["started_by"]["depth"], 1);
    assert_eq!(child["started_by"]["chain"][0], "parent");
    // A flow calling itself is a cycle, refused before anything starts.
    let selfish = call_flow(data.path(), "selfish", "palm", json!({"flow": "selfish"}));
    assert_eq!(selfish["status"], "failed");
    assert!(
        selfish["error"]
            .as_str()
            .unwrap_or_default()
            .contains("cycle"),
        "{selfish}"
    );
    // A home this node's tree does not have: the call fails and says so.
    let astray = call_flow(
        data.path(),
        "astray",
        "palm",
        json!({"flow": "child", "input": {"x": 1}, "node": "elsewhere"}),
    );
    assert_eq!(astray["status"], "failed", "{astray}");
    assert!(
        astray["error"]
            .as_str()
            .unwrap_or_default()
            .contains("node `elsewhere` is not this node"),
        "{astray}"
    );
    let providers = palm(data.path(), &["providers", "--json"]).json();
    let names: Vec<&str> = providers["providers"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "agent",
            "best_of",
            "conflicts",
            "file",
            "gate",
            "http",
            "kv",
            "merge_lane",
            "palm",
            "verify"
        ]
    );
}

/// `palm emit NAME --payload JSON` (the documented command line) starts the flow with
/// the payload as `input.event.data`; `--data` stays the data directory.
#[test]
fn emit_from_the_cli_starts_the_flow_with_its_payload() {
    let data = data_dir();
    add(
        data.path(),
        "deploy",
        "name: deploy\non: { event: deploy }\ntree:\n  set: { version: \"{{ input.event.data.v }}\" }\n",
    );
    let up = Up::start(data.path(), &[]);
    let emitted = palm(data.path(), &["emit", "deploy", "--payload", r#"{"v": 3}"#]);
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    assert!(emitted.stdout.contains("matched 1"), "{}", emitted.stdout);
    assert!(eventually(Duration::from_secs(5), || {
        jobs_of(data.path(), "deploy").first().is_some_and(|job| {
            status(data.path(), job["job"].as_str().unwrap_or_default())["status"] == "succeeded"
        })
    }));
    let job = jobs_of(data.path(), "deploy")[0]["job"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = status(data.path(), &job);
    assert_eq!(done["input"]["event"]["data"], json!({"v": 3}), "{done}");
    assert_eq!(up.terminate().0, 0);
}

/// An HTTP endpoint for a declared provider: answers every POST with what it got
/// (`{"got": BODY, "key": Idempotency-Key, "team": X-Team}`), reading the whole request.
fn echo_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                let (head, body) = loop {
                    let n = stream.read(&mut buf).unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let length = head
                            .lines()
                            .find_map(|l| {
                                let (name, value) = l.split_once(':')?;
                                name.eq_ignore_ascii_case("content-length")
                                    .then(|| value.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if body.len() >= length {
                            break (head.to_owned(), body.to_owned());
                        }
                    }
                };
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| {
                            let (n, v) = l.split_once(':')?;
                            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                        })
                        .unwrap_or_default()
                };
                let got: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let answer =
                    json!({"got": got, "key": header("idempotency-key"), "team": header("x-team")})
                        .to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = stream.write_all(reply.as_bytes());
            });
        }
    });
    port
}

/// Providers declared in palm.yaml: a program (arguments on stdin, result on stdout,
/// checked against its schema first, stopped by group at its timeout) and an HTTP
/// endpoint (arguments POSTed as JSON with the effect key), listed by `palm providers`.
#[test]
fn declared_providers_run_programs_and_reach_endpoints() {
    let data = data_dir();
    let port = echo_server();
    std::fs::create_dir_all(data.path().join("tools")).expect("tools");
    std::fs::write(
        data.path().join("tools/upper.py"),
        "import json, os, sys\n\
         args = json.load(sys.stdin)\n\
         print(json.dumps({'upper': args['text'].upper(), 'key': os.environ['PALM_EFFECT_KEY'],\n\
                           'greeting': os.environ['GREETING'], 'cwd': os.getcwd()}))\n",
    )
    .expect("tool");
    std::fs::write(
        data.path().join("palm.yaml"),
        format!(
            "providers:\n\
             \x20 upper:\n\
             \x20   command: [python3, tools/upper.py]\n\
             \x20   description: shouts\n\
             \x20   env: {{GREETING: hello}}\n\
             \x20   schema: {{type: object, required: [text], properties: {{text: {{type: string}}}}}}\n\
             \x20 broken:\n\
             \x20   command: [sh, -c, \"echo 'no database' >&2; exit 3\"]\n\
             \x20 loud:\n\
             \x20   command: [head, -c, \"5000000\", /dev/zero]\n\
             \x20 slow:\n\
             \x20   command: [sh, -c, \"sleep 31.25; echo late\"]\n\
             \x20   timeout: 1s\n\
             \x20 echo:\n\
             \x20   url: http://127.0.0.1:{port}/echo\n\
             \x20   headers: {{X-Team: blue}}\n"
        ),
    )
    .expect("config");
    let _up = Up::start(data.path(), &[]);

    let shouted = call_flow(data.path(), "u", "upper", json!({"text": "abc"}));
    assert_eq!(shouted["status"], "succeeded", "{shouted}");
    let out = &shouted["state"]["out"];
    assert_eq!(out["upper"], "ABC");
    assert_eq!(out["greeting"], "hello");
    assert!(!out["key"].as_str().unwrap_or_default().is_empty(), "{out}");
    assert_eq!(
        Path::new(out["cwd"].as_str().unwrap_or_default()),
        data.path().canonicalize().expect("canonical")
    );

    let refused = call_flow(data.path(), "v", "upper", json!({"text": 5}));
    assert_eq!(refused["status"], "failed");
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("upper: the arguments do not match its schema") && error.contains("/text"),
        "{refused}"
    );

    let broken = call_flow(data.path(), "b", "broken", json!({}));
    assert_eq!(broken["status"], "failed");
    assert!(
        broken["error"]
            .as_str()
            .unwrap_or_default()
            .contains("broken: exited with 3: no database"),
        "{broken}"
    );
    assert_eq!(broken["state"]["out"]["exit_code"], 3, "{broken}");

    // Read to its end, past the bound: an error, not a stalled program or a partial
    // document.
    let loud = call_flow(data.path(), "l", "loud", json!({}));
    assert_eq!(loud["status"], "failed", "{loud}");
    assert!(
        loud["error"]
            .as_str()
            .unwrap_or_default()
            .contains("loud: printed more than 4194304 bytes on stdout"),
        "{loud}"
    );

    let slow = call_flow(data.path(), "s", "slow", json!({}));
    assert_eq!(slow["status"], "failed");
    assert!(
        slow["error"]
            .as_str()
            .unwrap_or_default()
            .contains("slow: timed out after 1000 ms"),
        "{slow}"
    );
    assert!(
        eventually(Duration::from_secs(5), || processes_matching("sleep 31.25")
            .is_empty()),
        "the timed-out program's group was stopped"
    );

    let echoed = call_flow(data.path(), "e", "echo", json!({"city": "Oslo"}));
    assert_eq!(echoed["status"], "succeeded", "{echoed}");
    let out = &echoed["state"]["out"];
    assert_eq!(out["got"], json!({"city": "Oslo"}));
    assert_eq!(out["team"], "blue");
    assert!(!out["key"].as_str().unwrap_or_default().is_empty(), "{out}");

    let providers = palm(data.path(), &["providers", "--json"]).json();
    let listed = providers["providers"].as_array().expect("list");
    let names: Vec<&str> = listed.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "agent",
            "best_of",
            "broken",
            "conflicts",
            "echo",
            "file",
            "gate",
            "http",
            "kv",
            "loud",
            "merge_lane",
            "palm",
            "slow",
            "upper",
            "verify"
        ]
    );
    let upper = listed.iter().find(|p| p["name"] == "upper").expect("upper");
    assert_eq!(upper["declared"], true);
    assert_eq!(upper["kind"], "command");
    assert_eq!(upper["description"], "shouts");
    assert_eq!(upper["args"]["text"], "string, required");
    let human = palm(data.path(), &["providers"]);
    assert!(
        human.stdout.contains("upper") && human.stdout.contains("shouts"),
        "{}",
        human.stdout
    );
}
