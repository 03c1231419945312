//! End-to-end: the session memory through real `palm` processes. Claude and Codex
//! transcripts (in their real formats) are ingested incrementally, found by `palm recall`
//! across vendors, shown from the archive after the vendor deleted them, forgotten; and
//! a session started by `palm agent run` is linked to its run, its patch and, once the
//! patch is applied, its commit.

mod common;

use common::{data_dir, palm_env, repo};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;

const CLAUDE_SESSION: &str = "5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70";
const CODEX_SESSION: &str = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";

fn line(value: Value) -> String {
    format!("{value}\n")
}

/// A Claude Code transcript: a prompt, an answer split over two lines of one message,
/// a tool use and its result.
fn claude_lines(cwd: &str) -> String {
    let envelope = |kind: &str, uuid: &str, parent: Value, ts: &str, message: Value| {
        json!({
            "parentUuid": parent, "isSidechain": false, "userType": "external", "cwd": cwd,
            "sessionId": CLAUDE_SESSION, "version": "2.0.14", "gitBranch": "main",
            "type": kind, "message": message, "uuid": uuid, "timestamp": ts,
        })
    };
    let mut text = String::new();
    text.push_str(&line(envelope(
        "user",
        "u-1",
        Value::Null,
        "2026-11-20T10:00:00.000Z",
        json!({"role": "user", "content": "The lease renewal test is flaky under load; find out why"}),
    )));
    text.push_str(&line(envelope(
        "assistant",
        "a-1",
        json!("u-1"),
        "2026-11-20T10:00:05.000Z",
        json!({"id": "msg_01AbC", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
               "content": [{"type": "text", "text": "The renewal races the expiry timer when the seat is busy."}],
               "usage": {"input_tokens": 100, "output_tokens": 20}}),
    )));
    text.push_str(&line(envelope(
        "assistant",
        "a-2",
        json!("a-1"),
        "2026-11-20T10:00:06.000Z",
        json!({"id": "msg_01AbC", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
               "content": [{"type": "tool_use", "id": "toolu_01X", "name": "Bash",
                            "input": {"command": "cargo test -p palm-actors lease_renewal"}}],
               "usage": {"input_tokens": 100, "output_tokens": 20}}),
    )));
    text.push_str(&line(envelope(
        "user",
        "u-2",
        json!("a-2"),
        "2026-11-20T10:00:30.000Z",
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01X",
               "content": "test lease_renewal_under_load ... FAILED"}]}),
    )));
    text
}

/// A Codex rollout: its meta, injected context, a prompt (twice, as Codex writes it) and
/// an answer.
fn codex_lines(cwd: &str) -> String {
    let mut text = String::new();
    let item = |ts: &str, kind: &str, payload: Value| {
        line(json!({"timestamp": ts, "type": kind, "payload": payload}))
    };
    text.push_str(&item(
        "2026-11-21T09:00:00.000Z",
        "session_meta",
        json!({"id": CODEX_SESSION, "timestamp": "2026-11-21T09:00:00.000Z", "cwd": cwd,
               "originator": "codex_cli_rs", "cli_version": "0.46.0", "source": "cli",
               "git": {"commit_hash": "abc123", "branch": "main"}}),
    ));
    text.push_str(&item(
        "2026-11-21T09:00:00.100Z",
        "response_item",
        json!({"type": "message", "role": "user", "content": [{"type": "input_text",
               "text": "<environment_context>\n  <cwd>/somewhere</cwd>\n</environment_context>"}]}),
    ));
    text.push_str(&item(
        "2026-11-21T09:00:01.000Z",
        "response_item",
        json!({"type": "message", "role": "user", "content": [{"type": "input_text",
               "text": "Speed up the tunnel writer with vectored writes"}]}),
    ));
    text.push_str(&item(
        "2026-11-21T09:00:01.000Z",
        "event_msg",
        json!({"type": "user_message", "message": "Speed up the tunnel writer with vectored writes"}),
    ));
    text.push_str(&item(
        "2026-11-21T09:00:09.000Z",
        "response_item",
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text",
               "text": "Batching frames into one write_vectored call cuts the syscalls by half."}]}),
    ));
    text.push_str(&item(
        "2026-11-21T09:00:10.000Z",
        "event_msg",
        json!({"type": "token_count", "info": null}),
    ));
    text
}

struct Vendors {
    _dir: tempfile::TempDir,
    claude: std::path::PathBuf,
    codex: std::path::PathBuf,
    claude_file: std::path::PathBuf,
    codex_file: std::path::PathBuf,
}

fn vendors(cwd: &str) -> Vendors {
    let dir = tempfile::tempdir().expect("vendors");
    let claude = dir.path().join("claude-projects");
    let codex = dir.path().join("codex-home");
    let project = claude.join("-work-app");
    std::fs::create_dir_all(&project).expect("project");
    let claude_file = project.join(format!("{CLAUDE_SESSION}.jsonl"));
    std::fs::write(&claude_file, claude_lines(cwd)).expect("claude");
    let day = codex.join("sessions/2026/11/21");
    std::fs::create_dir_all(&day).expect("day");
    let codex_file = day.join(format!("rollout-2026-11-21T09-00-00-{CODEX_SESSION}.jsonl"));
    std::fs::write(&codex_file, codex_lines(cwd)).expect("codex");
    Vendors {
        claude,
        codex,
        claude_file,
        codex_file,
        _dir: dir,
    }
}

fn ingest(data: &Path, v: &Vendors) -> Value {
    let ran = palm_env(
        data,
        &[
            "sessions",
            "ingest",
            "--claude-dir",
            &v.claude.display().to_string(),
            "--codex-dir",
            &v.codex.display().to_string(),
            "--json",
        ],
        &[],
    );
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    ran.json()
}

fn recall(data: &Path, args: &[&str]) -> Value {
    let mut all = vec!["recall"];
    all.extend_from_slice(args);
    all.push("--json");
    let ran = palm_env(data, &all, &[]);
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    ran.json()
}

#[test]
fn transcripts_are_archived_incrementally_recalled_across_vendors_and_outlive_their_files() {
    let data = data_dir();
    let work = tempfile::tempdir().expect("work");
    let cwd = work.path().display().to_string();
    let v = vendors(&cwd);
    let first = ingest(data.path(), &v);
    let size = |p: &Path| std::fs::metadata(p).expect("meta").len();
    assert_eq!(first["files"], 2, "{first}");
    assert_eq!(
        first["bytes_archived"].as_u64(),
        Some(size(&v.claude_file) + size(&v.codex_file))
    );
    assert!(
        first["sessions"].as_u64().expect("sessions") >= 2,
        "{first}"
    );
    assert!(
        first["messages"].as_u64().expect("messages") >= 6,
        "{first}"
    );

    // One index across vendors, with the contract's fields.
    let found = recall(data.path(), &["lease renewal"]);
    let hits = found["hits"].as_array().expect("hits");
    assert!(
        hits.len() >= 2,
        "the prompt and the test's output: {found:#}"
    );
    let hit = hits
        .iter()
        .find(|h| h["role"] == "user")
        .unwrap_or_else(|| panic!("the prompt: {found:#}"));
    for field in [
        "session",
        "vendor",
        "file",
        "line",
        "timestamp",
        "role",
        "snippet",
    ] {
        assert!(hit.get(field).is_some(), "{field}: {hit}");
    }
    assert_eq!(hit["session"], CLAUDE_SESSION);
    assert_eq!(hit["vendor"], "claude");
    assert_eq!(hit["line"], 1);
    assert_eq!(hit["role"], "user");
    assert_eq!(hit["timestamp"], "2026-11-20T10:00:00Z");
    assert!(
        hit["snippet"]
            .as_str()
            .expect("snippet")
            .contains("**lease**"),
        "{hit}"
    );
    let codex = recall(data.path(), &["vectored writes"]);
    let codex_hit = &codex["hits"][0];
    assert_eq!(codex_hit["session"], CODEX_SESSION);
    assert_eq!(codex_hit["vendor"], "codex");
    // The prompt Codex writes twice is one hit; injected context is not a prompt.
    let prompts = recall(data.path(), &["tunnel writer", "--vendor", "codex"]);
    let users: Vec<&Value> = prompts["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .filter(|h| h["role"] == "user")
        .collect();
    assert_eq!(users.len(), 1, "{prompts:#}");
    let none = recall(data.path(), &["vectored", "--vendor", "claude"]);
    assert_eq!(none["hits"], json!([]));
    let here = recall(data.path(), &["renewal", "--repo", &cwd]);
    assert!(!here["hits"].as_array().expect("hits").is_empty());
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    let there = recall(
        data.path(),
        &["renewal", "--repo", &elsewhere.path().display().to_string()],
    );
    assert_eq!(there["hits"], json!([]));
    let recent = recall(data.path(), &["renewal", "--since", "1h"]);
    assert_eq!(
        recent["hits"],
        json!([]),
        "the session is older than an hour"
    );

    // Nothing new: nothing read, nothing archived.
    let again = ingest(data.path(), &v);
    assert_eq!(
        (
            &again["files_changed"],
            &again["messages"],
            &again["bytes_archived"]
        ),
        (&json!(0), &json!(0), &json!(0)),
        "{again}"
    );
    // A line still being written is archived, not read; once whole, it is read.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&v.claude_file)
        .expect("append");
    let next = json!({"parentUuid": "u-2", "isSidechain": false, "cwd": cwd,
        "sessionId": CLAUDE_SESSION, "type": "user", "uuid": "u-3",
        "timestamp": "2026-11-20T10:01:00.000Z",
        "message": {"role": "user", "content": "Now try the quarantine approach for the seat"}})
    .to_string();
    let (head, tail) = next.split_at(next.len() / 2);
    file.write_all(head.as_bytes()).expect("half");
    file.flush().expect("flush");
    let partial = ingest(data.path(), &v);
    assert_eq!(partial["messages"], 0, "{partial}");
    assert_eq!(partial["bytes_archived"].as_u64(), Some(head.len() as u64));
    file.write_all(format!("{tail}\n").as_bytes())
        .expect("rest");
    drop(file);
    let whole = ingest(data.path(), &v);
    assert_eq!(whole["messages"], 1, "{whole}");
    let quarantine = recall(data.path(), &["quarantine"]);
    assert_eq!(quarantine["hits"][0]["line"], 5);

    // The vendor sweeps its files: the archive still has every entry.
    std::fs::remove_file(&v.claude_file).expect("sweep");
    std::fs::remove_file(&v.codex_file).expect("sweep");
    let shown = palm_env(
        data.path(),
        &["sessions", "show", CLAUDE_SESSION, "--json"],
        &[],
    );
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let doc = shown.json();
    assert_eq!(doc["files"][0]["present"], false);
    let roles: Vec<&str> = doc["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["role"].as_str())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool_call", "tool_result", "user"],
        "{doc:#}"
    );
    assert_eq!(doc["cwd"], cwd.as_str());
    assert_eq!(doc["branch"], "main");
    // Two lines of one message: its usage counted once.
    assert_eq!(doc["model"], "claude-sonnet-4-5");
    assert_eq!(
        (doc["input_tokens"].as_u64(), doc["output_tokens"].as_u64()),
        (Some(100), Some(20)),
        "{doc:#}"
    );
    let around = palm_env(
        data.path(),
        &["sessions", "show", CODEX_SESSION, "--at", "5", "--json"],
        &[],
    )
    .json();
    assert!(!around["entries"].as_array().expect("entries").is_empty());
    let listed = palm_env(data.path(), &["sessions", "list", "--json"], &[]).json();
    let sessions = listed["sessions"].as_array().expect("sessions");
    assert_eq!(sessions[0]["session"], CODEX_SESSION, "the latest first");
    assert!(sessions.iter().all(|s| s["files_present"] == false));

    // Forgotten: gone from the archive and the index, never ingested again.
    let forgot = palm_env(
        data.path(),
        &["sessions", "forget", CLAUDE_SESSION, "--json"],
        &[],
    );
    assert_eq!(forgot.code, 0, "{}", forgot.stderr);
    let gone = palm_env(data.path(), &["sessions", "show", CLAUDE_SESSION], &[]);
    assert_eq!(gone.code, 2, "{}", gone.stderr);
    assert!(gone.stderr.contains("no session"), "{}", gone.stderr);
    assert_eq!(recall(data.path(), &["renewal"])["hits"], json!([]));
    std::fs::write(&v.claude_file, claude_lines(&cwd)).expect("back");
    let after = ingest(data.path(), &v);
    assert_eq!(
        after["messages"], 0,
        "a forgotten file stays forgotten: {after}"
    );
}

#[test]
fn a_session_palm_started_links_to_its_run_its_patch_and_its_commit() {
    let data = data_dir();
    let checkout = common::git_repo(&[("a.txt", "one\n")]);
    let projects = tempfile::tempdir().expect("projects");
    let empty = tempfile::tempdir().expect("codex");
    let doubles = repo().join("node/tests/fixtures/agents");
    let path = format!(
        "{}:{}",
        doubles.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let projects_text = projects.path().display().to_string();
    let env = [
        ("PATH", path.as_str()),
        ("FAKE_CLAUDE_PROJECTS", projects_text.as_str()),
    ];
    let ran = palm_env(
        data.path(),
        &[
            "agent",
            "run",
            "claude",
            "EDIT a.txt two",
            "--repo",
            &checkout.path().display().to_string(),
            "--json",
        ],
        &env,
    );
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let result = ran.json();
    let session = result["result"]["session_id"]
        .as_str()
        .expect("session")
        .to_owned();
    let patch = result["result"]["patch"]["id"]
        .as_str()
        .expect("patch")
        .to_owned();
    let job = result["job"].as_str().expect("job").to_owned();
    let applied = palm_env(data.path(), &["patches", "apply", &patch, "--json"], &[]);
    assert_eq!(applied.code, 0, "{}\n{}", applied.stdout, applied.stderr);
    let commit = applied.json()["commit"]
        .as_str()
        .expect("commit")
        .to_owned();
    let ran = palm_env(
        data.path(),
        &[
            "sessions",
            "ingest",
            "--claude-dir",
            &projects_text,
            "--codex-dir",
            &empty.path().display().to_string(),
            "--json",
        ],
        &[],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let shown = palm_env(data.path(), &["sessions", "show", &session, "--json"], &[]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let doc = shown.json();
    let links = &doc["links"];
    assert_eq!(links["runs"][0]["job"], job.as_str(), "{links:#}");
    assert_eq!(links["runs"][0]["provider"], "claude");
    assert_eq!(links["patches"][0]["id"], patch.as_str(), "{links:#}");
    assert_eq!(links["patches"][0]["status"], "applied");
    assert!(
        links["commits"]
            .as_array()
            .expect("commits")
            .iter()
            .any(|c| c["commit"] == commit.as_str()),
        "{links:#}"
    );
    let human = palm_env(data.path(), &["sessions", "show", &session], &[]);
    assert!(
        human.stdout.contains(&format!("patch {patch} applied")),
        "{}",
        human.stdout
    );
    assert!(human.stdout.contains(&commit), "{}", human.stdout);
}

#[test]
fn live_tells_running_idle_and_stuck_sessions_apart() {
    let data = data_dir();
    let claude = tempfile::tempdir().expect("claude");
    let codex = tempfile::tempdir().expect("codex");
    let project = claude.path().join("-work-app");
    std::fs::create_dir_all(&project).expect("project");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let at = |ago_ms: i64| {
        jiff::Timestamp::from_millisecond(now - ago_ms)
            .expect("ts")
            .to_string()
    };
    let envelope = |session: &str, kind: &str, ago: i64, message: Value| {
        line(
            json!({"parentUuid": null, "isSidechain": false, "userType": "external",
                    "cwd": "/work/app", "sessionId": session, "version": "2.0.14",
                    "gitBranch": "main", "type": kind, "message": message,
                    "uuid": format!("{session}-{ago}"), "timestamp": at(ago)}),
        )
    };
    let prompt = |session: &str, ago: i64| {
        envelope(
            session,
            "user",
            ago,
            json!({"role": "user", "content": "Fix it"}),
        )
    };
    let call = |session: &str, ago: i64| {
        envelope(
            session,
            "assistant",
            ago,
            json!({"id": "m1", "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make"}}],
            "stop_reason": "tool_use"}),
        )
    };
    let done = |session: &str, ago: i64| {
        envelope(
            session,
            "assistant",
            ago,
            json!({"id": "m2", "role": "assistant",
            "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}),
        )
    };
    for (session, text) in [
        (
            "s-running",
            prompt("s-running", 20_000) + &call("s-running", 3_000),
        ),
        (
            "s-stuck",
            prompt("s-stuck", 40 * 60_000) + &call("s-stuck", 30 * 60_000),
        ),
        ("s-idle", prompt("s-idle", 90_000) + &done("s-idle", 60_000)),
    ] {
        std::fs::write(project.join(format!("{session}.jsonl")), text).expect("write");
    }
    let ran = palm_env(
        data.path(),
        &[
            "sessions",
            "live",
            "--claude-dir",
            &claude.path().display().to_string(),
            "--codex-dir",
            &codex.path().display().to_string(),
            "--json",
        ],
        &[],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let doc = ran.json();
    assert_eq!(
        doc["counts"],
        json!({"running": 1, "stuck": 1, "idle": 1}),
        "{doc:#}"
    );
    let sessions = doc["sessions"].as_array().expect("sessions");
    let state = |id: &str| {
        sessions
            .iter()
            .find(|s| s["session"] == id)
            .map(|s| s["state"].clone())
    };
    assert_eq!(state("s-running"), Some(json!("running")));
    assert_eq!(state("s-stuck"), Some(json!("stuck")));
    assert_eq!(state("s-idle"), Some(json!("idle")));
    let stuck = sessions
        .iter()
        .find(|s| s["session"] == "s-stuck")
        .expect("stuck");
    assert_eq!(stuck["pending_tool"], "Bash");
    assert_eq!(stuck["vendor"], "claude");
    assert_eq!(stuck["cwd"], "/work/app");
    // A tighter threshold makes the running one stuck too; nothing was ingested.
    let tight = palm_env(
        data.path(),
        &[
            "sessions",
            "live",
            "--stuck-after",
            "1s",
            "--claude-dir",
            &claude.path().display().to_string(),
            "--codex-dir",
            &codex.path().display().to_string(),
            "--json",
        ],
        &[],
    );
    assert_eq!(tight.json()["counts"]["stuck"], 2);
    let bad = palm_env(data.path(), &["sessions", "live", "--within", "soon"], &[]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}
