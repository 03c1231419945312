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
    finishes_across_a_kill_9(None);
}

#[test]
fn a_parallel_team_finishes_its_board_across_a_kill_9() {
    finishes_across_a_kill_9(Some("3"));
}

/// See the tests above; with `parallel`, the tasks work in lanes of an indexed checkout.
fn finishes_across_a_kill_9(parallel: Option<&str>) {
    let data = data_dir();
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("members.log");
    // With lanes: a checkout whose files each have their own history, and the first
    // three tasks naming one each, so they are predicted apart and run side by side.
    let checkout = match parallel {
        Some(_) => three_file_checkout(true),
        None => checkout(),
    };
    setup(data.path(), &log, Some("d"));
    if parallel.is_some() {
        let board = BOARD
            .replacen("config }", "config, files: [src/parser.rs] }", 1)
            .replacen("plugins }", "plugins, files: [src/store.rs] }", 1)
            .replacen("store }", "store, files: [docs/guide.md] }", 1);
        std::fs::write(data.path().join("board.yaml"), board).expect("board");
    }
    let up = Up::start(data.path(), &[]);
    let board = data.path().join("board.yaml").display().to_string();
    let repo_arg = checkout.path().display().to_string();
    let mut args = vec![
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
        &repo_arg,
        "--no-wait",
        "--json",
    ];
    if let Some(parallel) = parallel {
        args.extend(["--parallel", parallel]);
    }
    let started = palm_env(data.path(), &args, &[]);
    assert_eq!(started.code, 0, "{}", started.stderr);
    let team = started.json()["team"].as_str().expect("team").to_owned();
    // Kill the node while d's turn hangs, once a, b and c are done (d needs only a and
    // b: in lanes, c's merge may still be running when d starts).
    let done = |board: &serde_json::Value| -> Vec<String> {
        board["board"]["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .filter(|t| t["status"] == "done")
            .filter_map(|t| t["id"].as_str().map(str::to_owned))
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(60), || log_lines(&log)
            .iter()
            .any(|l| l["task"] == "d")
            && done(&status(data.path(), &team)).len() >= 3),
        "d started with a, b and c done: {:?} {}",
        log_lines(&log),
        status(data.path(), &team)
    );
    let before = status(data.path(), &team);
    let done_before = done(&before);
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
    if parallel.is_some() {
        // Each task's lane merged once, and the team's worktree holds all their work.
        let decided = decisions(&after);
        for id in ["a", "b", "c", "d", "e", "f"] {
            let merges = decided
                .iter()
                .filter(|d| d["task"] == id && d["merged"].is_array())
                .count();
            assert_eq!(merges, 1, "{id}: {decided:#?}");
        }
        let own = team_worktree(data.path(), &team);
        for id in ["a", "b", "c", "d", "e", "f"] {
            assert!(own.join(format!("done/{id}.txt")).exists(), "{id}");
        }
        assert!(
            decided
                .iter()
                .any(|d| d["beside"].as_array().is_some_and(|b| !b.is_empty())),
            "some tasks ran side by side: {decided:#?}"
        );
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

/// A checkout with a commit per file (no file changed with another, so only what the
/// tasks name ties them together), indexed when asked.
fn three_file_checkout(index: bool) -> tempfile::TempDir {
    let dir = common::git_repo(&[("src/parser.rs", "pub fn parse() {}\n")]);
    let git = |args: &[&str]| common::git(dir.path(), args);
    for (path, text, subject) in [
        ("src/store.rs", "pub fn open_store() {}\n", "add the store"),
        ("docs/guide.md", "# Guide\n", "write the guide"),
    ] {
        let file = dir.path().join(path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("dirs");
        std::fs::write(file, text).expect("write");
        git(&["add", "."]);
        git(&["commit", "-q", "-m", subject]);
    }
    if index {
        let data = data_dir();
        let ran = palm_env(
            data.path(),
            &["index", "--repo", &dir.path().display().to_string()],
            &[],
        );
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    dir
}

/// palm.yaml with one member CLI whose turns take `seconds`.
fn parallel_setup(data: &Path, log: &Path, seconds: &str) {
    let member = repo().join("node/tests/fixtures/team/member");
    std::fs::write(
        data.join("palm.yaml"),
        format!(
            "agents:\n  alpha:\n    command: [\"{}\"]\n    env: {{MEMBER_PROVIDER: alpha, TEAM_LOG: \"{}\", TURN_SECONDS: \"{seconds}\"}}\n",
            member.display(),
            log.display()
        ),
    )
    .expect("palm.yaml");
}

/// The job's own worktree on a checkout (lanes sit beside it with a longer name).
fn team_worktree(data: &Path, team: &str) -> std::path::PathBuf {
    let mut trees: Vec<std::path::PathBuf> = std::fs::read_dir(data.join("worktrees").join(team))
        .expect("worktrees")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    trees.sort_by_key(|p| p.as_os_str().len());
    trees.remove(0)
}

fn decisions(doc: &Value) -> Vec<Value> {
    doc["board"]["decisions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_parallel_team_keeps_predicted_overlaps_apart_and_merges_every_lane() {
    let data = data_dir();
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("members.log");
    let checkout = three_file_checkout(true);
    // Each member's turn lasts 4 s: long enough that c's lane is set up and its member
    // started while a's still runs, even on a loaded machine (the overlap is asserted).
    parallel_setup(data.path(), &log, "4");
    // a and b name the same file: predicted to overlap, they must not run side by side;
    // c touches another file and runs beside a; d waits for c (a dependency).
    let board = data.path().join("board.yaml");
    std::fs::write(
        &board,
        "- { id: a, title: extend the parser, files: [src/parser.rs] }
- { id: b, title: tune the parser errors, files: [src/parser.rs] }
- { id: c, title: grow the store, files: [src/store.rs] }
- { id: d, title: document the store in the guide, files: [docs/guide.md], depends_on: [c] }
",
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
            "--member",
            "ben=alpha",
            "--member",
            "cat=alpha",
            "--parallel",
            "3",
            "--repo",
            &checkout.path().display().to_string(),
            "--json",
        ],
        &[],
    );
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let doc = ran.json();
    assert_eq!(doc["status"], "succeeded", "{doc:#}");
    let schedule = &doc["board"]["schedule"];
    assert_eq!(schedule["source"], "intel", "{schedule:#}");
    assert_eq!(schedule["pairs"], 6);
    let serialized = schedule["serialize"].as_array().expect("pairs");
    assert!(
        serialized
            .iter()
            .any(|p| p["a"] == "a" && p["b"] == "b" && p["files"][0] == "src/parser.rs"),
        "{schedule:#}"
    );
    assert!(
        !serialized
            .iter()
            .any(|p| (p["a"] == "a" || p["b"] == "a") && (p["a"] == "c" || p["b"] == "c")),
        "a and c are apart: {schedule:#}"
    );
    // The decisions, with their evidence.
    let decided = decisions(&doc);
    let hold = decided
        .iter()
        .find(|d| d["task"] == "b" && d["waits_for"] == "a")
        .unwrap_or_else(|| panic!("b waits for a: {decided:#?}"));
    assert!(hold["score"].as_f64().expect("score") >= 0.85, "{hold}");
    assert_eq!(hold["files"][0], "src/parser.rs");
    let started_c = decided
        .iter()
        .find(|d| d["task"] == "c" && d["member"].is_string())
        .expect("c started");
    assert_eq!(
        started_c["beside"],
        serde_json::json!(["a"]),
        "{decided:#?}"
    );
    for task in ["a", "b", "c", "d"] {
        assert!(
            decided
                .iter()
                .any(|d| d["task"] == task && d["merged"].is_array()),
            "{task} merged: {decided:#?}"
        );
    }
    // What really happened: a and c side by side, b only after a ended.
    let lines = log_lines(&log);
    let ends: Vec<Value> = std::fs::read_to_string(format!("{}.end", log.display()))
        .expect("ends")
        .lines()
        .map(|l| serde_json::from_str(l).expect("end line"))
        .collect();
    let start = |task: &str| {
        lines.iter().find(|l| l["task"] == task).expect(task)["start"]
            .as_f64()
            .expect("start")
    };
    let end = |task: &str| {
        ends.iter().find(|l| l["task"] == task).expect(task)["end"]
            .as_f64()
            .expect("end")
    };
    assert!(
        start("c") < end("a") && start("a") < end("c"),
        "a and c overlapped"
    );
    assert!(start("b") > end("a"), "b ran after a");
    assert_eq!(lines.len(), 4, "every task once: {lines:?}");
    // Every lane came home: both edits of the shared file, one after the other, and the
    // checkout itself untouched.
    let own = team_worktree(data.path(), doc["team"].as_str().expect("team"));
    let parser = std::fs::read_to_string(own.join("src/parser.rs")).expect("parser");
    let edits: Vec<&str> = parser.lines().skip(1).collect();
    assert_eq!(edits.len(), 2, "{parser}");
    assert!(
        edits[0].starts_with("a by ") && edits[1].starts_with("b by "),
        "{parser}"
    );
    for file in ["src/store.rs", "docs/guide.md"] {
        let text = std::fs::read_to_string(own.join(file)).expect(file);
        assert_eq!(text.lines().count(), 2, "{file}: {text}");
    }
    for task in ["a", "b", "c", "d"] {
        assert!(own.join(format!("done/{task}.txt")).exists(), "{task}");
    }
    assert_eq!(
        std::fs::read_to_string(checkout.path().join("src/parser.rs")).expect("checkout"),
        "pub fn parse() {}\n"
    );
}

#[test]
fn a_parallel_team_without_a_prediction_runs_one_task_at_a_time_and_says_why() {
    let data = data_dir();
    let work = tempfile::tempdir().expect("work");
    let log = work.path().join("members.log");
    let checkout = three_file_checkout(false);
    parallel_setup(data.path(), &log, "0");
    let board = data.path().join("board.yaml");
    std::fs::write(
        &board,
        "- { id: a, title: grow the store, files: [src/store.rs] }
- { id: b, title: write the guide, files: [docs/guide.md] }
",
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
            "--member",
            "ben=alpha",
            "--parallel",
            "2",
            "--repo",
            &checkout.path().display().to_string(),
            "--json",
        ],
        &[],
    );
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let doc = ran.json();
    assert_eq!(doc["status"], "succeeded", "{doc:#}");
    let schedule = &doc["board"]["schedule"];
    assert_eq!(schedule["source"], "none", "{schedule:#}");
    assert!(
        schedule["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no repo index") && r.contains("palm index")),
        "{schedule:#}"
    );
    let decided = decisions(&doc);
    assert!(
        decided
            .iter()
            .any(|d| d["task"] == "b" && d["waits_for"] == "a"),
        "{decided:#?}"
    );
    let own = team_worktree(data.path(), doc["team"].as_str().expect("team"));
    assert!(own.join("done/a.txt").exists() && own.join("done/b.txt").exists());
}
