//! `palm sessions live` on transcripts written in the vendors' real formats, at times
//! chosen relative to a fixed "now": running, stuck and idle told apart for Claude and
//! Codex, from the vendors' own markers; a file outside the window is left out; a
//! partial last line is not read.

use palm_sessions::Sources;
use palm_sessions::live::{LiveOptions, LiveState, live};
use serde_json::{Value, json};
use std::path::Path;

const NOW: i64 = 1_800_000_000_000;
const MIN: i64 = 60_000;

fn ts(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .expect("ts")
        .to_string()
}

fn claude(kind: &str, session: &str, at: i64, message: Value) -> String {
    format!(
        "{}\n",
        json!({"parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/work/app",
               "sessionId": session, "version": "2.0.14", "gitBranch": "main", "type": kind,
               "message": message, "uuid": format!("u-{at}"), "timestamp": ts(at)})
    )
}

fn prompt(session: &str, at: i64) -> String {
    claude(
        "user",
        session,
        at,
        json!({"role": "user", "content": "Fix the flaky test"}),
    )
}

fn tool_use(session: &str, at: i64, id: &str) -> String {
    claude(
        "assistant",
        session,
        at,
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
               "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "cargo test"}}],
               "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}),
    )
}

fn answer(session: &str, at: i64, stop: Value) -> String {
    claude(
        "assistant",
        session,
        at,
        json!({"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
               "content": [{"type": "text", "text": "Fixed."}], "stop_reason": stop,
               "usage": {"input_tokens": 1, "output_tokens": 1}}),
    )
}

fn tool_result(session: &str, at: i64, id: &str) -> String {
    claude(
        "user",
        session,
        at,
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}),
    )
}

fn codex(kind: &str, at: i64, payload: Value) -> String {
    format!(
        "{}\n",
        json!({"timestamp": ts(at), "type": kind, "payload": payload})
    )
}

fn codex_file(dir: &Path, id: &str, lines: &[String]) {
    let day = dir.join("sessions/2027/01/15");
    std::fs::create_dir_all(&day).expect("dir");
    let mut text = codex(
        "session_meta",
        NOW - 60 * MIN,
        json!({"id": id, "timestamp": ts(NOW - 60 * MIN), "cwd": "/work/api", "originator": "codex_cli_rs",
               "cli_version": "0.50.0", "git": {"branch": "feat"}}),
    );
    for line in lines {
        text.push_str(line);
    }
    std::fs::write(
        day.join(format!("rollout-2027-01-15T10-00-00-{id}.jsonl")),
        text,
    )
    .expect("write");
}

fn states(claude_dir: &Path, codex_dir: &Path) -> Vec<(String, LiveState, String, Option<String>)> {
    let sources = Sources {
        claude: Some(claude_dir.to_owned()),
        codex: Some(codex_dir.to_owned()),
    };
    // The files were just written: "now" is their mtime's day, far from NOW, so the
    // window is wide and every time below is measured from NOW.
    let options = LiveOptions {
        now_ms: NOW,
        window_ms: i64::MAX / 4,
        stuck_after_ms: 10 * MIN,
    };
    let mut found: Vec<_> = live(&sources, &options)
        .into_iter()
        .map(|s| (s.session, s.state, s.reason, s.pending_tool))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

#[test]
fn running_stuck_and_idle_are_told_apart_for_both_vendors() {
    let claude_dir = tempfile::tempdir().expect("claude");
    let codex_dir = tempfile::tempdir().expect("codex");
    let project = claude_dir.path().join("-work-app");
    std::fs::create_dir_all(&project).expect("project");
    let write = |name: &str, lines: Vec<String>| {
        std::fs::write(project.join(format!("{name}.jsonl")), lines.concat()).expect("write");
    };
    write(
        "c-running-tool",
        vec![
            prompt("c-running-tool", NOW - 20_000),
            tool_use("c-running-tool", NOW - 5_000, "t1"),
        ],
    );
    write(
        "c-stuck-tool",
        vec![
            prompt("c-stuck-tool", NOW - 30 * MIN),
            tool_use("c-stuck-tool", NOW - 25 * MIN, "t1"),
        ],
    );
    write(
        "c-thinking",
        vec![
            prompt("c-thinking", NOW - 60_000),
            tool_use("c-thinking", NOW - 50_000, "t1"),
            tool_result("c-thinking", NOW - 2_000, "t1"),
        ],
    );
    write(
        "c-idle-end-turn",
        vec![
            prompt("c-idle-end-turn", NOW - 5 * MIN),
            answer("c-idle-end-turn", NOW - 4 * MIN, json!("end_turn")),
        ],
    );
    // Claude Code often leaves stop_reason null: a last answer quiet for a while ended its turn…
    write(
        "c-idle-quiet",
        vec![
            prompt("c-idle-quiet", NOW - 5 * MIN),
            answer("c-idle-quiet", NOW - 2 * MIN, Value::Null),
        ],
    );
    // …but one written a second ago may still be followed by a tool call.
    write(
        "c-just-answered",
        vec![
            prompt("c-just-answered", NOW - 10_000),
            answer("c-just-answered", NOW - 1_000, Value::Null),
        ],
    );
    // A partial last line (still being written) is not read: the tool call stands.
    let mut partial = vec![
        prompt("c-partial", NOW - 20_000),
        tool_use("c-partial", NOW - 4_000, "t1"),
    ];
    partial.push("{\"type\": \"user\", \"message\": {\"role\": \"us".to_owned());
    write("c-partial", partial);

    codex_file(
        codex_dir.path(),
        "0199a1b2-0000-7000-8000-000000000001",
        &[
            codex("event_msg", NOW - 40_000, json!({"type": "task_started"})),
            codex(
                "event_msg",
                NOW - 39_000,
                json!({"type": "user_message", "message": "add a route"}),
            ),
            codex(
                "response_item",
                NOW - 8_000,
                json!({"type": "function_call", "name": "exec_command", "arguments": "{\"cmd\":\"make\"}", "call_id": "call_1"}),
            ),
        ],
    );
    codex_file(
        codex_dir.path(),
        "0199a1b2-0000-7000-8000-000000000002",
        &[
            codex(
                "event_msg",
                NOW - 9 * MIN,
                json!({"type": "user_message", "message": "add a route"}),
            ),
            codex(
                "response_item",
                NOW - 8 * MIN,
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}),
            ),
            codex(
                "event_msg",
                NOW - 8 * MIN,
                json!({"type": "task_complete", "last_agent_message": "Done."}),
            ),
        ],
    );
    codex_file(
        codex_dir.path(),
        "0199a1b2-0000-7000-8000-000000000003",
        &[
            codex(
                "event_msg",
                NOW - 50 * MIN,
                json!({"type": "user_message", "message": "add a route"}),
            ),
            codex(
                "event_msg",
                NOW - 49 * MIN,
                json!({"type": "token_count", "info": null}),
            ),
        ],
    );
    codex_file(
        codex_dir.path(),
        "0199a1b2-0000-7000-8000-000000000004",
        &[
            codex(
                "event_msg",
                NOW - 3 * MIN,
                json!({"type": "user_message", "message": "add a route"}),
            ),
            codex(
                "event_msg",
                NOW - 2 * MIN,
                json!({"type": "turn_aborted", "reason": "interrupted"}),
            ),
        ],
    );

    // An archived session is no longer live, however open its last turn looks.
    codex_file(
        codex_dir.path(),
        "0199a1b2-0000-7000-8000-000000000005",
        &[codex(
            "event_msg",
            NOW - 3 * MIN,
            json!({"type": "user_message", "message": "add a route"}),
        )],
    );
    let archived = codex_dir.path().join("archived_sessions");
    std::fs::create_dir_all(&archived).expect("archived");
    let name = "rollout-2027-01-15T10-00-00-0199a1b2-0000-7000-8000-000000000005.jsonl";
    std::fs::rename(
        codex_dir.path().join("sessions/2027/01/15").join(name),
        archived.join(name),
    )
    .expect("archive");

    let found = states(claude_dir.path(), codex_dir.path());
    assert!(
        found.iter().all(|f| !f.0.ends_with("000000000005")),
        "{found:#?}"
    );
    let state = |id: &str| {
        found
            .iter()
            .find(|f| f.0 == id)
            .unwrap_or_else(|| panic!("{id} missing from {found:#?}"))
            .clone()
    };
    let running = state("c-running-tool");
    assert_eq!(running.1, LiveState::Running);
    assert_eq!(running.3.as_deref(), Some("Bash"));
    assert_eq!(running.2, "running Bash for 5 s");
    let stuck = state("c-stuck-tool");
    assert_eq!(stuck.1, LiveState::Stuck);
    assert!(
        stuck.2.starts_with("Bash has had no result for 25 min"),
        "{}",
        stuck.2
    );
    assert_eq!(state("c-thinking").1, LiveState::Running);
    assert_eq!(state("c-thinking").3, None);
    assert_eq!(state("c-idle-end-turn").1, LiveState::Idle);
    assert_eq!(state("c-idle-quiet").1, LiveState::Idle);
    assert_eq!(state("c-just-answered").1, LiveState::Running);
    assert_eq!(state("c-partial").1, LiveState::Running);
    assert_eq!(state("c-partial").3.as_deref(), Some("Bash"));

    let running = state("0199a1b2-0000-7000-8000-000000000001");
    assert_eq!(running.1, LiveState::Running);
    assert_eq!(running.3.as_deref(), Some("exec_command"));
    assert_eq!(
        state("0199a1b2-0000-7000-8000-000000000002").1,
        LiveState::Idle
    );
    let stuck = state("0199a1b2-0000-7000-8000-000000000003");
    assert_eq!(stuck.1, LiveState::Stuck);
    assert!(
        stuck.2.contains("nothing was written for 49 min"),
        "{}",
        stuck.2
    );
    let aborted = state("0199a1b2-0000-7000-8000-000000000004");
    assert_eq!(aborted.1, LiveState::Idle);
    assert!(aborted.2.contains("aborted"), "{}", aborted.2);
    assert_eq!(found.len(), 11);
}

#[test]
fn files_written_before_the_window_are_not_live() {
    let claude_dir = tempfile::tempdir().expect("claude");
    let empty = tempfile::tempdir().expect("codex");
    let project = claude_dir.path().join("-work-app");
    std::fs::create_dir_all(&project).expect("project");
    let now = std::time::SystemTime::now();
    let now_ms = now
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    for (name, age_h) in [("fresh", 1u64), ("old", 48)] {
        let path = project.join(format!("{name}.jsonl"));
        std::fs::write(&path, prompt(name, now_ms - age_h as i64 * 3_600_000)).expect("write");
        let file = std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open");
        file.set_modified(now - std::time::Duration::from_secs(age_h * 3600))
            .expect("mtime");
    }
    let sources = Sources {
        claude: Some(claude_dir.path().to_owned()),
        codex: Some(empty.path().to_owned()),
    };
    let options = LiveOptions {
        now_ms,
        window_ms: 24 * 3_600_000,
        stuck_after_ms: 10 * MIN,
    };
    let found = live(&sources, &options);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].session, "fresh");
    assert_eq!(
        found[0].state,
        LiveState::Stuck,
        "a prompt an hour old with no answer"
    );
    assert_eq!(found[0].cwd.as_deref(), Some("/work/app"));
}
