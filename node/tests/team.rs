//! End-to-end: a team of three scripted members (two providers: two agent CLIs declared
//! in palm.yaml) works a six-task board with dependencies through real `palm` processes,
//! survives a kill -9 in the middle with no task done twice and no message lost, and
//! parks when its turns run out until it is given more.

mod common;

use common::{Up, data_dir, eventually, palm_env, repo};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const BOARD: &str = "- { id: a, title: parse the config }
- { id: b, title: load the plugins }
- { id: c, title: open the store }
- { id: d, title: wire the plugins to the config, depends_on: [a, b] }
- { id: e, title: migrate the store, depends_on: [c] }
- { id: f, title: start the server, depends_on: [d, e] }
";

fn checkout() -> tempfile::TempDir {
    common::git_repo(&[("README", "app\n")])
}

/// palm.yaml with two member CLIs, `alpha` and `beta` (the same script, two providers).
fn setup(data: &Path, log: &Path, pause: Option<&str>) {
    let member = repo().join("node/tests/fixtures/team/member");
    let mut yaml = String::from("agents:\n");
    for provider in ["alpha", "beta"] {
        yaml.push_str(&format!(
            "  {provider}:\n    command: [\"{}\"]\n    env: {{MEMBER_PROVIDER: {provider}, TEAM_LOG: \"{}\"{}}}\n",
            member.display(),
            log.display(),
            pause
                .map(|t| format!(", PAUSE_TASK: {t}"))
                .unwrap_or_default()
        ));
    }
    std::fs::write(data.join("palm.yaml"), yaml).expect("palm.yaml");
    std::fs::write(data.join("board.yaml"), BOARD).expect("board");
}

fn log_lines(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("log line"))
        .collect()
}

fn status(data: &Path, team: &str) -> Value {
    palm_env(data, &["team", "status", team, "--json"], &[]).json()
}

#[test]
fn a_team_of_three_finishes_its_board_across_a_kill_9() {
    let data = data_dir();
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("members.log");
    let checkout = checkout();
    setup(data.path(), &log, Some("d"));
    let up = Up::start(data.path(), &[]);
    let board = data.path().join("board.yaml").display().to_string();
    let started = palm_env(
        data.path(),
        &[
            "team",
            "start",
            &board,
            "--member",
            "ann=alpha",
            "--member",
            "ben=beta",
            "--member",
            "cat=alpha",
            "--repo",
            &checkout.path().display().to_string(),
            "--no-wait",
            "--json",
        ],
        &[],
    );
    assert_eq!(started.code, 0, "{}", started.stderr);
    let team = started.json()["team"].as_str().expect("team").to_owned();
    // Kill the node while d's turn hangs (a, b and c are done by then).
    assert!(
        eventually(Duration::from_secs(60), || log_lines(&log)
            .iter()
            .any(|l| l["task"] == "d")),
        "d started: {:?}",
        log_lines(&log)
    );
    let before = status(data.path(), &team);
    let done_before: Vec<String> = before["board"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter(|t| t["status"] == "done")
        .filter_map(|t| t["id"].as_str().map(str::to_owned))
        .collect();
    assert!(done_before.len() >= 3, "{before}");
    up.kill9();

    let _up = Up::start(data.path(), &[]);
    assert!(
        eventually(
            Duration::from_secs(90),
            || status(data.path(), &team)["status"] == "succeeded"
        ),
        "the team finishes after the restart: {}",
        status(data.path(), &team)
    );
    let after = status(data.path(), &team);
    let tasks = after["board"]["tasks"].as_array().expect("tasks");
    assert!(tasks.iter().all(|t| t["status"] == "done"), "{after}");
    // The dependencies held: f ran after d and e, d after a and b.
    let lines = log_lines(&log);
    let first = |task: &str| lines.iter().position(|l| l["task"] == task).expect(task);
    let last = |task: &str| lines.iter().rposition(|l| l["task"] == task).expect(task);
    assert!(first("d") > last("a") && first("d") > last("b"));
    assert!(first("f") > last("d") && first("f") > last("e"));
    // No task done before the kill ran again; d, interrupted, ran once more.
    for task in &done_before {
        let runs = lines.iter().filter(|l| l["task"] == task.as_str()).count();
        assert_eq!(runs, 1, "{task} ran {runs} times: {lines:?}");
    }
    assert_eq!(lines.iter().filter(|l| l["task"] == "d").count(), 2);
    // Both providers worked.
    let providers: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter_map(|l| l["provider"].as_str())
        .collect();
    assert_eq!(providers.len(), 2, "{lines:?}");
    // Every task's message is in the mailbox exactly once, in order per sender.
    let mailbox = after["board"]["mailbox"].as_array().expect("mailbox");
    assert_eq!(mailbox.len(), 6, "{mailbox:?}");
    for id in ["a", "b", "c", "d", "e", "f"] {
        let said = mailbox
            .iter()
            .filter(|m| {
                m["text"]
                    .as_str()
                    .unwrap_or("")
                    .ends_with(&format!("finished {id}"))
            })
            .count();
        assert_eq!(said, 1, "{id}: {mailbox:?}");
    }
    let mut last_seq: std::collections::BTreeMap<String, u64> = Default::default();
    for m in mailbox {
        let from = m["from"].as_str().unwrap_or_default().to_owned();
        let seq = m["seq"].as_u64().expect("seq");
        assert!(seq > *last_seq.get(&from).unwrap_or(&0), "{mailbox:?}");
        last_seq.insert(from, seq);
    }
}

#[test]
fn a_team_out_of_turns_parks_and_resumes_when_given_more() {
    let data = data_dir();
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("members.log");
    let checkout = checkout();
    setup(data.path(), &log, None);
    let board = data.path().join("board.yaml").display().to_string();
    let started = palm_env(
        data.path(),
        &[
            "team",
            "start",
            &board,
            "--member",
            "ann=alpha",
            "--member",
            "ben=beta",
            "--repo",
            &checkout.path().display().to_string(),
            "--max-turns",
            "2",
            "--json",
        ],
        &[],
    );
    assert_eq!(started.code, 4, "parked (waiting): {}", started.stdout);
    let doc = started.json();
    assert_eq!(doc["board"]["parked"], "budget", "{doc}");
    assert_eq!(doc["board"]["turns"], 2);
    let team = doc["team"].as_str().expect("team").to_owned();
    let posted = palm_env(
        data.path(),
        &["team", "post", &team, "keep going", "--json"],
        &[],
    );
    assert_eq!(posted.code, 0, "{}", posted.stderr);
    let resumed = palm_env(
        data.path(),
        &["team", "resume", &team, "--turns", "10", "--json"],
        &[],
    );
    assert_eq!(resumed.code, 0, "{}", resumed.stdout);
    let doc = resumed.json();
    assert_eq!(doc["status"], "succeeded");
    assert_eq!(doc["board"]["turns"], 6, "{doc:#}\n{:?}", log_lines(&log));
    let mailbox = doc["board"]["mailbox"].as_array().expect("mailbox");
    assert!(
        mailbox
            .iter()
            .any(|m| m["from"] == "person" && m["text"] == "keep going")
    );
    // The members after the post saw it in their prompts (the log has every task once).
    assert_eq!(log_lines(&log).len(), 6);
    let stopped = palm_env(data.path(), &["team", "stop", &team, "--json"], &[]);
    assert_ne!(stopped.code, 0, "a finished team cannot be stopped");
}

#[test]
fn a_board_file_is_read_as_written_and_refused_with_its_line() {
    let data = data_dir();
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("members.log");
    let checkout = checkout();
    setup(data.path(), &log, None);
    // JSON with `tasks:`, and a title that looks like a template: text, not evaluated.
    let board = data.path().join("board.json");
    std::fs::write(
        &board,
        r#"{"tasks": [{"id": "a", "title": "explain {{ x }} in the docs"}]}"#,
    )
    .expect("board");
    let ran = palm_env(
        data.path(),
        &[
            "team",
            "start",
            &board.display().to_string(),
            "--member",
            "ann=alpha",
            "--repo",
            &checkout.path().display().to_string(),
            "--json",
        ],
        &[],
    );
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let doc = ran.json();
    assert_eq!(
        doc["board"]["tasks"][0]["title"],
        "explain {{ x }} in the docs"
    );
    assert_eq!(doc["status"], "succeeded");
    // A broken file is refused before anything starts, naming its own line.
    let bad = data.path().join("bad.yaml");
    std::fs::write(&bad, "- id: a\n- id: [unclosed\n").expect("bad");
    let ran = palm_env(
        data.path(),
        &[
            "team",
            "start",
            &bad.display().to_string(),
            "--member",
            "ann=alpha",
        ],
        &[],
    );
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("bad.yaml:3:1: invalid YAML"),
        "{}",
        ran.stderr
    );
}
