//! End-to-end: coding agents as workflow leaves. Scripted doubles of `claude` and
//! `codex` (tests/fixtures/agents/, speaking the CLIs' documented stream formats and
//! editing files) and a declared CLI run in temporary git repos through real `palm`
//! processes: every end state, worktrees per job, patches with their secret scan, an
//! observe run's edits set aside, every run audited against its authority.

mod common;

use common::{Up, data_dir, eventually, palm_env, processes_matching, repo};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A git checkout with one commit (`a.txt` = "one").
fn checkout() -> tempfile::TempDir {
    common::git_repo(&[("a.txt", "one\n")])
}

/// Runs git in `dir` (what it printed is the caller's to read).
fn git_in(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git")
}

/// PATH with the doubles first.
fn path_with_doubles() -> String {
    let doubles = repo().join("node/tests/fixtures/agents");
    format!(
        "{}:{}",
        doubles.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

struct Env {
    path: String,
    log: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            path: path_with_doubles(),
            log: tempfile::tempdir().expect("log"),
        }
    }

    fn vars(&self) -> Vec<(&str, &str)> {
        vec![
            ("PATH", self.path.as_str()),
            ("FAKE_AGENT_LOG", self.log.path().to_str().expect("utf-8")),
        ]
    }

    /// `palm agent run ... --json`: (exit code, document).
    fn run(&self, data: &Path, repo: &Path, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["agent", "run"];
        all.extend_from_slice(args);
        let repo = repo.display().to_string();
        all.extend(["--repo", repo.as_str(), "--json"]);
        let ran = palm_env(data, &all, &self.vars());
        (ran.code, ran.json())
    }

    /// Every logged invocation of a double.
    fn invocations(&self, double: &str) -> Vec<Value> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(self.log.path())
            .expect("log dir")
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&format!("{double}-")) {
                let text = std::fs::read_to_string(entry.path()).expect("log");
                found.push(serde_json::from_str(&text).expect("json"));
            }
        }
        found
    }
}

fn end(result: &Value) -> &str {
    result["result"]["end"].as_str().unwrap_or("none")
}

#[test]
fn every_end_state_is_reached_and_recorded() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    std::fs::write(
        data.path().join("palm.yaml"),
        "agents:\n  fake:\n    command: [fake-agent]\n    env: {FAKE_MODE: yes}\n",
    )
    .expect("config");

    let (code, ok) = env.run(
        data.path(),
        repo.path(),
        &["claude", "EDIT a.txt two", "--max-turns", "5"],
    );
    assert_eq!((code, end(&ok)), (0, "success"), "{ok}");
    let result = &ok["result"];
    assert_eq!(result["turns"], 2);
    assert_eq!(result["cost_usd"], 0.0123);
    assert_eq!(result["text"], "Edited a.txt.");
    assert!(!result["session_id"].as_str().unwrap_or_default().is_empty());
    assert_eq!(result["patch"]["status"], "pending");
    assert_eq!(result["patch"]["files"], json!(["a.txt"]));
    let worktree = PathBuf::from(result["worktree"].as_str().expect("worktree"));
    assert_eq!(
        std::fs::read_to_string(worktree.join("a.txt")).expect("wt"),
        "one\ntwo\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.path().join("a.txt")).expect("checkout"),
        "one\n",
        "the checkout never sees a run's edits"
    );
    let transcript = &result["transcript"];
    let kept =
        std::fs::read_to_string(transcript["path"].as_str().expect("path")).expect("transcript");
    assert!(kept.contains("\"type\": \"result\"") || kept.contains("\"type\":\"result\""));
    let argv = env.invocations("claude")[0]["argv"].clone();
    let argv: Vec<&str> = argv
        .as_array()
        .expect("argv")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        argv.windows(2)
            .any(|w| w == ["--permission-mode", "acceptEdits"]),
        "{argv:?}"
    );
    assert!(
        argv.windows(2).any(|w| w == ["--max-turns", "5"]),
        "{argv:?}"
    );

    // A line longer than the parser takes is kept in the transcript and skipped; the
    // result line after it still decides the end.
    let (code, huge) = env.run(data.path(), repo.path(), &["claude", "HUGE"]);
    assert_eq!(
        (code, end(&huge)),
        (0, "success"),
        "{}",
        huge["result"]["error"]
    );
    assert!(huge["result"]["transcript"]["bytes"].as_u64().unwrap_or(0) > 5 << 20);

    let (code, turns) = env.run(data.path(), repo.path(), &["claude", "MAXTURNS"]);
    assert_eq!((code, end(&turns)), (3, "max_turns"), "{turns}");
    let (_, error) = env.run(data.path(), repo.path(), &["claude", "ERROR"]);
    assert_eq!(end(&error), "error", "{error}");
    assert_eq!(
        error["result"]["error"], "error_during_execution: API Error: 500 Internal server error",
        "the result line's `errors`, as written"
    );
    let (_, budget) = env.run(
        data.path(),
        repo.path(),
        &["claude", "COST 5", "--budget-usd", "1"],
    );
    assert_eq!(end(&budget), "budget", "{budget}");

    let (_, timeout) = env.run(
        data.path(),
        repo.path(),
        &["claude", "SLEEP", "--timeout", "2s"],
    );
    assert_eq!(end(&timeout), "timeout", "{timeout}");
    assert!(
        eventually(Duration::from_secs(5), || processes_matching("sleep 61.75")
            .is_empty()),
        "the timed-out run's whole process group is gone"
    );

    let (_, crashed) = env.run(data.path(), repo.path(), &["claude", "CRASH"]);
    assert_eq!(end(&crashed), "crashed", "{crashed}");
    let result = &crashed["result"];
    assert_eq!(result["text"], "Halfway there");
    assert!(
        result["error"]
            .as_str()
            .unwrap_or_default()
            .contains("out of memory"),
        "{result}"
    );
    let partial = std::fs::read_to_string(result["transcript"]["path"].as_str().expect("path"))
        .expect("kept");
    assert!(
        partial.contains("Halfway there") && partial.ends_with("\"type\":\"te"),
        "{partial}"
    );

    let (code, codex) = env.run(
        data.path(),
        repo.path(),
        &["codex", "EDIT b.txt x", "--mode", "execute"],
    );
    assert_eq!((code, end(&codex)), (0, "success"), "{codex}");
    assert_eq!(codex["result"]["text"], "All done.");
    assert_eq!(codex["result"]["turns"], 1);
    let (_, codex_error) = env.run(data.path(), repo.path(), &["codex", "ERROR"]);
    assert_eq!(end(&codex_error), "error");
    assert!(
        codex_error["result"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("stream disconnected")
    );
    let (_, codex_crash) = env.run(data.path(), repo.path(), &["codex", "CRASH"]);
    assert_eq!(end(&codex_crash), "crashed");
    // The mode's sandbox: `workspace-write` to edit (the default), full access to execute.
    for invocation in env.invocations("codex") {
        let argv = invocation["argv"].to_string();
        let sandbox = if invocation["prompt"] == "EDIT b.txt x" {
            "\"-s\",\"danger-full-access\""
        } else {
            "\"-s\",\"workspace-write\""
        };
        assert!(argv.contains(sandbox), "{argv}");
    }

    let (code, custom) = env.run(data.path(), repo.path(), &["fake", "EDIT c.txt y"]);
    assert_eq!((code, end(&custom)), (0, "success"), "{custom}");
    assert_eq!(custom["result"]["text"], "did it in edit mode");
    assert_eq!(
        (
            custom["result"]["turns"].clone(),
            custom["result"]["cost_usd"].clone()
        ),
        (json!(4), json!(0.5))
    );
    let (_, failing) = env.run(data.path(), repo.path(), &["fake", "FAIL"]);
    assert_eq!(end(&failing), "error");
    assert!(
        failing["result"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("exited with 3: no API key configured")
    );

    let unknown = palm_env(
        data.path(),
        &["agent", "run", "nobody", "hi", "--json"],
        &env.vars(),
    );
    assert_ne!(unknown.code, 0);
    assert!(
        unknown.stdout.contains("no provider `nobody`"),
        "{}",
        unknown.stdout
    );
}

#[test]
fn patches_are_scanned_and_observe_runs_never_write() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    let (_, secret) = env.run(data.path(), repo.path(), &["claude", "SECRET"]);
    assert_eq!(end(&secret), "success");
    let patch = &secret["result"]["patch"];
    assert_eq!(patch["status"], "blocked", "{patch}");
    assert_eq!(patch["findings"][0]["kind"], "aws_access_key");
    assert_eq!(patch["findings"][0]["path"], "creds.py");
    assert_eq!(patch["findings"][0]["line"], 1);
    assert!(
        !patch.to_string().contains("AKIAIOSFODNN7EXAMPLE"),
        "findings are masked"
    );

    let (code, observed) = env.run(
        data.path(),
        repo.path(),
        &["claude", "EDIT notes.md hi", "--mode", "observe"],
    );
    assert_eq!((code, end(&observed)), (3, "violation"), "{observed}");
    let worktree = PathBuf::from(observed["result"]["worktree"].as_str().expect("worktree"));
    assert!(
        !worktree.join("notes.md").exists(),
        "the observe run's edit is undone"
    );
    assert!(
        !repo.path().join("notes.md").exists(),
        "and never reached the checkout"
    );
    assert_eq!(observed["result"]["patch"]["status"], "violation");
    let argv = env
        .invocations("claude")
        .iter()
        .find(|i| {
            i["prompt"]
                .as_str()
                .unwrap_or_default()
                .contains("notes.md")
        })
        .expect("logged")["argv"]
        .to_string();
    assert!(
        argv.contains("Bash,Edit,MultiEdit,Write,NotebookEdit"),
        "{argv}"
    );

    let listed = palm_env(data.path(), &["patches", "list", "--json"], &[]).json();
    let statuses: Vec<&str> = listed["patches"]
        .as_array()
        .expect("patches")
        .iter()
        .filter_map(|p| p["status"].as_str())
        .collect();
    assert_eq!(statuses.len(), 2);
    assert!(
        statuses.contains(&"blocked") && statuses.contains(&"violation"),
        "{statuses:?}"
    );
    let id = patch["id"].as_str().expect("id");
    let shown = palm_env(data.path(), &["patches", "show", id, "--json"], &[]).json();
    assert!(
        shown["diff"]
            .as_str()
            .unwrap_or_default()
            .contains("+++ b/creds.py")
    );
    let missing = palm_env(data.path(), &["patches", "show", "nope"], &[]);
    assert_eq!(missing.code, 2);
}

/// The rules a run's saved audit says it broke, as `(rule, tool)` (tool "" for a file).
fn broken(run: &Value) -> Vec<(String, String)> {
    run["result"]["audit"]["violations"]
        .as_array()
        .unwrap_or_else(|| panic!("no audit: {run}"))
        .iter()
        .map(|v| {
            (
                v["rule"].as_str().unwrap_or_default().to_owned(),
                v["tool"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(rule, tool)| ((*rule).to_owned(), (*tool).to_owned()))
        .collect()
}

/// Authority, enforced and audited: after every run its tool uses (from the transcript,
/// or a declared CLI's usage file) and its diff are checked against its mode. Scripted
/// agents that ignore their flags: an observe run that writes anyway, an edit run that
/// calls a shell tool, an MCP tool in edit mode end `violation`, with the evidence kept,
/// the worktree put back and the patch stored as `violation`; runs within their ceiling
/// end `success`.
#[test]
fn every_run_is_audited_against_its_authority() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    std::fs::write(
        data.path().join("palm.yaml"),
        "agents:\n  fake:\n    command: [fake-agent]\n",
    )
    .expect("config");
    let run = |provider: &str, prompt: &str, mode: &str| {
        env.run(
            data.path(),
            repo.path(),
            &[provider, prompt, "--mode", mode],
        )
    };

    // Within the ceiling: success, with what was used on the record.
    for (provider, prompt, mode, tools) in [
        ("claude", "READ a.txt", "observe", 1),
        ("codex", "READ a.txt", "observe", 1),
        ("fake", "READ a.txt", "observe", 1),
        ("claude", "READ a.txt EDIT a.txt two", "edit", 2),
        ("codex", "EDIT b.txt x", "edit", 1),
        ("fake", "EDIT c.txt y", "edit", 1),
        ("claude", "SHELL EDIT a.txt x", "execute", 2),
        ("codex", "SHELL TOUCH made.txt", "execute", 2),
        ("fake", "SHELL", "execute", 1),
    ] {
        let (code, ran) = run(provider, prompt, mode);
        assert_eq!(
            (code, end(&ran)),
            (0, "success"),
            "{provider} {mode} `{prompt}`: {ran}"
        );
        let audit = &ran["result"]["audit"];
        assert_eq!(audit["violations"], json!([]), "{ran}");
        assert_eq!(audit["tools"], tools, "{provider} `{prompt}`: {audit}");
        if prompt.contains("EDIT") || prompt.contains("TOUCH") {
            assert_eq!(ran["result"]["patch"]["status"], "pending", "{ran}");
        } else {
            assert!(ran["result"]["patch"].is_null(), "{ran}");
        }
    }
    let (_, read) = run("claude", "READ a.txt", "observe");
    assert_eq!(read["result"]["audit"]["by_name"], json!({"Read": 1}));
    assert!(read["result"]["patch"].is_null(), "{read}");

    // An observe run whose agent writes files anyway.
    for (provider, prompt, tool) in [
        ("claude", "EDIT notes.md hi", "Edit"),
        ("codex", "EDIT notes.md hi", "file_change"),
        ("codex", "TOUCH notes.md", "command_execution"),
        ("fake", "EDIT notes.md hi", "Edit"),
    ] {
        let (code, ran) = run(provider, prompt, "observe");
        assert_eq!((code, end(&ran)), (3, "violation"), "{provider}: {ran}");
        assert_eq!(
            broken(&ran),
            pairs(&[("observe_changed_files", ""), ("observe_write", tool)]),
            "{provider} `{prompt}`"
        );
        let result = &ran["result"];
        assert_eq!(result["audit"]["violations"][0]["detail"], "notes.md");
        assert_eq!(result["patch"]["status"], "violation", "{ran}");
        assert_eq!(result["patch"]["files"], json!(["notes.md"]));
        let worktree = PathBuf::from(result["worktree"].as_str().expect("worktree"));
        assert!(
            !worktree.join("notes.md").exists(),
            "{provider}: the write is undone in the worktree"
        );
        assert!(
            !repo.path().join("notes.md").exists(),
            "and never reached the checkout"
        );
        assert!(
            result["error"]
                .as_str()
                .unwrap_or_default()
                .contains("refs/palm/saved/"),
            "the changes are kept on a private ref: {result}"
        );
    }

    // An edit run that calls a shell tool: its edits are set aside with it.
    for (provider, prompt, tool) in [
        ("claude", "EDIT a.txt two SHELL", "Bash"),
        ("codex", "EDIT a.txt two SHELL", "command_execution"),
        ("fake", "EDIT a.txt two SHELL", "Bash"),
    ] {
        let (code, ran) = run(provider, prompt, "edit");
        assert_eq!((code, end(&ran)), (3, "violation"), "{provider}: {ran}");
        assert_eq!(
            broken(&ran),
            pairs(&[("command_in_edit", tool)]),
            "{provider}"
        );
        let result = &ran["result"];
        assert!(
            result["audit"]["violations"][0]["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("ls"),
            "the command is the evidence: {result}"
        );
        assert_eq!(result["patch"]["status"], "violation", "{ran}");
        let worktree = PathBuf::from(result["worktree"].as_str().expect("worktree"));
        assert_eq!(
            std::fs::read_to_string(worktree.join("a.txt")).expect("a.txt"),
            "one\n",
            "{provider}: the worktree is back to its state before the run"
        );
        assert!(
            result["error"]
                .as_str()
                .unwrap_or_default()
                .contains("went past its authority"),
            "{result}"
        );
    }
    let (_, mcp) = run("claude", "TOOL mcp__github__create_issue", "edit");
    assert_eq!(end(&mcp), "violation", "{mcp}");
    assert_eq!(
        broken(&mcp),
        pairs(&[("outside_allowlist", "mcp__github__create_issue")])
    );
    assert!(mcp["result"]["patch"].is_null(), "no change, no patch");
    let (_, observed_shell) = run("claude", "SHELL", "observe");
    assert_eq!(
        broken(&observed_shell),
        pairs(&[("outside_allowlist", "Bash")]),
        "Claude's observe mode has no shell"
    );
    assert_eq!(
        std::fs::read_to_string(repo.path().join("a.txt")).expect("checkout"),
        "one\n",
        "the checkout never saw any of it"
    );

    // `apply_on_success`: a job that goes on past a violation (force_success) lands its
    // last patch within the ceiling, never the violation's.
    let repo_text = repo.path().display().to_string();
    let flow = format!(
        "name: ceiling\npatches: apply_on_success\ntree:\n  sequence:\n    - agent: {{ provider: claude, prompt: \"EDIT good.txt ok\", mode: edit, repo: \"{repo_text}\" }}\n    - force_success: {{ do: {{ agent: {{ provider: claude, prompt: \"EDIT bad.txt no SHELL\", mode: edit, repo: \"{repo_text}\", save: bad }} }} }}\n    - succeed: {{}}\n"
    );
    let file = data.path().join("ceiling.yaml");
    std::fs::write(&file, flow).expect("flow");
    let ran = palm_env(
        data.path(),
        &["run", &file.display().to_string(), "--json"],
        &env.vars(),
    );
    assert_eq!(ran.code, 0, "{}", ran.stdout);
    let job = ran.json()["job"].as_str().expect("job").to_owned();
    assert!(
        eventually(Duration::from_secs(10), || repo
            .path()
            .join("good.txt")
            .exists()),
        "the job's patch within its ceiling landed"
    );
    assert!(
        !repo.path().join("bad.txt").exists(),
        "the violation's patch is never applied"
    );
    let listed = palm_env(
        data.path(),
        &["patches", "list", "--job", &job, "--json"],
        &[],
    )
    .json();
    let statuses: Vec<&str> = listed["patches"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|p| p["status"].as_str())
        .collect();
    assert_eq!(statuses, ["violation", "applied"], "newest first: {listed}");
    let violation = listed["patches"][0]["id"].as_str().expect("id").to_owned();
    let refused = palm_env(
        data.path(),
        &["patches", "apply", &violation, "--json"],
        &[],
    );
    assert_eq!(refused.code, 2, "{}", refused.stdout);
    assert!(!repo.path().join("bad.txt").exists());
}

/// Flows with agent leaves on claude, codex and a declared CLI, on a running node: one
/// job's steps share its worktree (later steps see earlier edits, the last patch holds
/// them all); two jobs running at once on one repo never share a worktree.
#[test]
fn agent_leaves_share_their_jobs_worktree_and_jobs_never_share_one() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    std::fs::write(
        data.path().join("palm.yaml"),
        "agents:\n  fake:\n    command: [fake-agent]\n",
    )
    .expect("config");
    let _up = Up::start_env(data.path(), &[], &env.vars());
    let repo_text = repo.path().display().to_string();
    let chain = format!(
        "name: chain\ntree:\n  sequence:\n    - agent: {{ provider: claude, prompt: \"EDIT one.txt a\", repo: \"{repo_text}\", save: first }}\n    - agent: {{ provider: codex, prompt: \"EDIT two.txt b\", repo: \"{repo_text}\", save: second }}\n    - agent: {{ provider: fake, prompt: \"EDIT three.txt c\", repo: \"{repo_text}\", save: third }}\n"
    );
    let file = data.path().join("chain.yaml");
    std::fs::write(&file, chain).expect("flow");
    let validated = palm_env(
        data.path(),
        &["flows", "validate", &file.display().to_string()],
        &[],
    );
    assert_eq!(validated.code, 0, "{}", validated.stdout);
    let ran = palm_env(
        data.path(),
        &["run", &file.display().to_string(), "--json"],
        &env.vars(),
    );
    assert_eq!(ran.code, 0, "{}", ran.stdout);
    let state = ran.json()["state"].clone();
    let trees: Vec<&str> = ["first", "second", "third"]
        .iter()
        .map(|k| state[k]["worktree"].as_str().unwrap_or_default())
        .collect();
    assert!(trees[0] == trees[1] && trees[1] == trees[2], "{trees:?}");
    assert_eq!(
        state["third"]["patch"]["files"],
        json!(["one.txt", "three.txt", "two.txt"])
    );

    let pause = format!(
        "name: pause\ntree:\n  agent: {{ provider: claude, prompt: \"PAUSE 1.5 EDIT p.txt x\", repo: \"{repo_text}\", save: run }}\n"
    );
    let file = data.path().join("pause.yaml");
    std::fs::write(&file, pause).expect("flow");
    let file = file.display().to_string();
    let jobs: Vec<String> = (0..2)
        .map(|_| {
            let submitted = palm_env(data.path(), &["submit", &file, "--json"], &[]).json();
            submitted["job"].as_str().expect("job").to_owned()
        })
        .collect();
    let mut worktrees = Vec::new();
    for job in &jobs {
        let done = palm_env(data.path(), &["status", job, "--json"], &[]);
        let mut view = done.json();
        assert!(
            eventually(Duration::from_secs(30), || {
                view = palm_env(data.path(), &["status", job, "--json"], &[]).json();
                view["status"] == "succeeded"
            }),
            "{view}"
        );
        worktrees.push(
            view["state"]["run"]["worktree"]
                .as_str()
                .expect("worktree")
                .to_owned(),
        );
    }
    assert_ne!(
        worktrees[0], worktrees[1],
        "two jobs never share a worktree"
    );
    let cwds: Vec<String> = env
        .invocations("claude")
        .iter()
        .filter(|i| i["prompt"].as_str().unwrap_or_default().contains("PAUSE"))
        .map(|i| i["cwd"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(cwds.len(), 2);
    assert_ne!(cwds[0], cwds[1]);
}

/// A run its job's cancel stops ends `interrupted`: `palm inspect` shows it with its
/// session and its transcript, beside the runs that ended on their own.
#[test]
fn a_cancelled_run_is_shown_interrupted_with_its_session_and_transcript() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    let _up = Up::start_env(data.path(), &[], &env.vars());
    let repo_text = repo.path().display().to_string();
    let file = data.path().join("slow.yaml");
    std::fs::write(
        &file,
        format!(
            "name: slow\ntree:\n  sequence:\n    - agent: {{ provider: claude, prompt: \"READ a.txt\", repo: \"{repo_text}\", save: first }}\n    - agent: {{ provider: claude, prompt: \"EDIT p.txt x PAUSE 30\", repo: \"{repo_text}\", save: second }}\n"
        ),
    )
    .expect("flow");
    let submitted = palm_env(
        data.path(),
        &["submit", &file.display().to_string(), "--json"],
        &env.vars(),
    )
    .json();
    let job = submitted["job"].as_str().expect("job").to_owned();
    assert!(
        eventually(Duration::from_secs(20), || {
            env.invocations("claude")
                .iter()
                .any(|i| i["prompt"].as_str().unwrap_or_default().contains("PAUSE"))
        }),
        "the second run started"
    );
    // The double says its session before it pauses; give the reader a moment to keep it.
    std::thread::sleep(Duration::from_millis(500));
    let cancelled = palm_env(data.path(), &["cancel", &job], &[]);
    assert_eq!(cancelled.code, 0, "{}", cancelled.stderr);
    let mut runs = Value::Null;
    assert!(
        eventually(Duration::from_secs(10), || {
            let inspected = palm_env(data.path(), &["inspect", &job, "--json"], &[]).json();
            runs = inspected["agent_runs"].clone();
            runs.as_array().is_some_and(|r| r.len() == 2)
        }),
        "{runs}"
    );
    assert_eq!(runs[0]["end"], "success", "{runs}");
    assert_eq!(runs[1]["end"], "interrupted", "{runs}");
    assert_eq!(runs[1]["provider"], "claude");
    let session = runs[1]["session_id"].as_str().expect("session");
    let kept = std::fs::read_to_string(runs[1]["transcript"]["path"].as_str().expect("path"))
        .expect("transcript");
    assert!(kept.contains(session) && kept.contains("toolu_1"), "{kept}");
    let shown = palm_env(data.path(), &["inspect", &job], &[]);
    assert!(
        shown.stdout.contains("interrupted") && shown.stdout.contains(session),
        "{}",
        shown.stdout
    );
}

/// The merge queue: a clean patch lands; a second one touching the same lines is a
/// conflict that changes nothing; with uncommitted work in the checkout, a patch lands on
/// a branch of its own and the work is untouched; revert undoes exactly one patch; a
/// blocked patch is refused; two jobs making the same edit leave two patches.
#[test]
fn patches_land_through_the_merge_queue_without_touching_local_work() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    let patch_of = |prompt: &str| -> String {
        let (code, run) = env.run(data.path(), repo.path(), &["claude", prompt]);
        assert_eq!(code, 0, "{run}");
        run["result"]["patch"]["id"]
            .as_str()
            .expect("patch")
            .to_owned()
    };
    let first = patch_of("EDIT a.txt first");
    // Another job making the very same edit on the same base: a patch of its own.
    let twin = patch_of("EDIT a.txt first");
    assert_ne!(twin, first, "two jobs' patches share an id");
    let second = patch_of("EDIT a.txt second");
    let third = patch_of("EDIT b.txt new");
    let secret = patch_of("SECRET");
    let apply = |id: &str| palm_env(data.path(), &["patches", "apply", id, "--json"], &[]);
    let read = |name: &str| std::fs::read_to_string(repo.path().join(name)).unwrap_or_default();

    let applied = apply(&first);
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    let applied = applied.json();
    assert_eq!(
        (applied["status"].clone(), applied["branch"].clone()),
        (json!("applied"), json!("main"))
    );
    assert_eq!(read("a.txt"), "one\nfirst\n");

    let conflict = apply(&second);
    assert_eq!(conflict.code, 1);
    let conflict = conflict.json();
    assert_eq!(conflict["status"], "conflict");
    assert_eq!(conflict["conflicts"], json!(["a.txt"]));
    assert_eq!(read("a.txt"), "one\nfirst\n", "a conflict changes nothing");

    std::fs::write(repo.path().join("a.txt"), "one\nfirst\nmine\n").expect("local work");
    std::fs::write(repo.path().join("scratch.txt"), "untracked\n").expect("local work");
    let aside = apply(&third).json();
    assert_eq!(aside["status"], "applied");
    assert_eq!(aside["branch"], format!("palm/patch-{third}"));
    assert!(
        aside["note"]
            .as_str()
            .unwrap_or_default()
            .contains("uncommitted"),
        "{aside}"
    );
    assert_eq!(read("a.txt"), "one\nfirst\nmine\n", "local changes survive");
    assert_eq!(read("scratch.txt"), "untracked\n");
    assert!(!repo.path().join("b.txt").exists());

    let reverted = palm_env(data.path(), &["patches", "revert", &first, "--json"], &[]).json();
    assert_eq!(reverted["status"], "reverted", "{reverted}");
    assert_eq!(
        read("a.txt"),
        "one\nfirst\nmine\n",
        "local changes survive a revert too"
    );
    let listed = palm_env(data.path(), &["patches", "list", "--json"], &[]).json();
    let status_of = |id: &str| {
        listed["patches"]
            .as_array()
            .expect("list")
            .iter()
            .find(|p| p["id"] == id)
            .map(|p| p["status"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(status_of(&first).as_deref(), Some("reverted"));
    assert_eq!(status_of(&second).as_deref(), Some("conflict"));
    assert_eq!(status_of(&third).as_deref(), Some("applied"));
    assert_eq!(status_of(&twin).as_deref(), Some("pending"), "{listed}");
    let jobs: Vec<&str> = listed["patches"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|p| p["job"].as_str())
        .collect();
    let mut distinct = jobs.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), jobs.len(), "one patch per job: {jobs:?}");

    let refused = apply(&secret);
    assert_eq!(refused.code, 2);
    assert!(refused.stdout.contains("blocked") || refused.stderr.contains("blocked"));
}

/// Kill -9 of the node in the middle of a run: the restarted node stops the orphaned
/// agent, runs the effect again resuming the same session, the interrupted run's edits
/// are on a private ref; `palm worktrees gc` then leaves no worktree behind.
#[test]
fn a_run_interrupted_by_kill_9_resumes_its_session_and_loses_nothing() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    let up = Up::start_env(data.path(), &[], &env.vars());
    let flow = format!(
        "name: long\ntree:\n  agent: {{ provider: claude, prompt: \"EDIT a.txt interrupted PAUSE 30\", repo: \"{}\", save: run }}\n",
        repo.path().display()
    );
    let file = data.path().join("long.yaml");
    std::fs::write(&file, flow).expect("flow");
    let submitted = palm_env(
        data.path(),
        &["submit", &file.display().to_string(), "--json"],
        &[],
    )
    .json();
    let job = submitted["job"].as_str().expect("job").to_owned();
    assert!(
        eventually(Duration::from_secs(20), || !env
            .invocations("claude")
            .is_empty()),
        "the agent started"
    );
    let first = env.invocations("claude")[0].clone();
    let worktree = PathBuf::from(first["cwd"].as_str().expect("cwd"));
    assert!(eventually(Duration::from_secs(10), || {
        std::fs::read_to_string(worktree.join("a.txt"))
            .unwrap_or_default()
            .contains("interrupted")
    }));
    // The session the first attempt announced.
    let run_dirs = data.path().join("agents/runs");
    assert!(eventually(Duration::from_secs(10), || {
        std::fs::read_dir(&run_dirs)
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| d.path().join("session.json").exists())
    }));
    up.kill9();

    // The second attempt must not wait 30 s: it is told to go on without pausing.
    let _up = Up::start_env(data.path(), &[], &env.vars());
    assert!(
        eventually(Duration::from_secs(60), || {
            palm_env(data.path(), &["status", &job, "--json"], &[]).json()["status"] == "succeeded"
        }),
        "the job finishes after the restart"
    );
    let attempts = env.invocations("claude");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    let session_of = |attempt: &Value| {
        let argv: Vec<String> = attempt["argv"]
            .as_array()
            .expect("argv")
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        argv.iter()
            .position(|a| a == "--resume")
            .map(|i| argv[i + 1].clone())
    };
    let resumed = attempts
        .iter()
        .find_map(session_of)
        .expect("the second attempt resumed a session");
    let status = palm_env(data.path(), &["status", &job, "--json"], &[]).json();
    assert_eq!(status["state"]["run"]["session_id"], resumed.as_str());
    assert_eq!(status["state"]["run"]["resumed"], resumed.as_str());
    // The interrupted attempt's edit was saved before the second attempt ran.
    let refs = git_in(
        repo.path(),
        &[
            "for-each-ref",
            "--format=%(refname)",
            &format!("refs/palm/saved/{job}/"),
        ],
    );
    let refs = String::from_utf8_lossy(&refs.stdout).into_owned();
    let saved_interrupted = refs.lines().any(|r| {
        let shown = git_in(repo.path(), &["show", &format!("{r}:a.txt")]);
        String::from_utf8_lossy(&shown.stdout).contains("interrupted")
    });
    assert!(saved_interrupted, "{refs}");

    let gc = palm_env(data.path(), &["worktrees", "gc", "--json"], &[]).json();
    assert_eq!(gc["removed"].as_array().map(Vec::len), Some(1), "{gc}");
    let listed = git_in(repo.path(), &["worktree", "list", "--porcelain"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert_eq!(
        listed.matches("worktree ").count(),
        1,
        "no orphan worktree: {listed}"
    );
    assert!(!worktree.exists());
}

/// `palm agents install` writes the adoption block into the agent files that exist, once,
/// and a second install changes nothing; `palm agents guide` prints the same text.
#[test]
fn the_adoption_block_is_installed_once_between_markers() {
    let data = data_dir();
    let repo = checkout();
    std::fs::write(repo.path().join("CLAUDE.md"), "# House rules\n\nBe kind.\n").expect("mine");
    let repo_arg = repo.path().display().to_string();
    let first = palm_env(
        data.path(),
        &["agents", "install", "--repo", &repo_arg, "--json"],
        &[],
    )
    .json();
    assert_eq!(first["files"].as_array().map(Vec::len), Some(1), "{first}");
    assert_eq!(first["files"][0]["action"], "appended");
    let again = palm_env(
        data.path(),
        &["agents", "install", "--repo", &repo_arg, "--json"],
        &[],
    )
    .json();
    assert_eq!(again["files"][0]["action"], "unchanged");
    let text = std::fs::read_to_string(repo.path().join("CLAUDE.md")).expect("read");
    assert!(text.starts_with("# House rules\n\nBe kind.\n"));
    assert_eq!(text.matches("<!-- palm:begin").count(), 1);
    assert!(
        text.contains("palm recall") && text.contains("palm mcp"),
        "{text}"
    );
    assert!(!repo.path().join("AGENTS.md").exists());
    let guide = palm_env(data.path(), &["agents", "guide"], &[]);
    assert!(text.contains(guide.stdout.trim()), "the block is the guide");
}

/// The real CLIs, when a person asks for them (`PALM_REAL_AGENTS=1`, with `claude` and
/// `codex` installed and logged in): one small observe run each must end `success`.
/// Skipped otherwise: they cannot be installed where the suite runs.
#[test]
fn real_agent_clis_when_asked_for() {
    if std::env::var("PALM_REAL_AGENTS").as_deref() != Ok("1") {
        eprintln!("skipped: set PALM_REAL_AGENTS=1 to run the real claude and codex");
        return;
    }
    let data = data_dir();
    let repo = checkout();
    for provider in ["claude", "codex"] {
        let ran = palm_env(
            data.path(),
            &[
                "agent",
                "run",
                provider,
                "Say the word ready and nothing else.",
                "--mode",
                "observe",
                "--timeout",
                "5m",
                "--repo",
                &repo.path().display().to_string(),
                "--json",
            ],
            &[],
        );
        let result = ran.json();
        assert_eq!(result["result"]["end"], "success", "{provider}: {result}");
        assert!(
            result["result"]["session_id"].is_string(),
            "{provider}: {result}"
        );
    }
}

/// A flow's `budget:` bounds all the agent runs of one job together: turns left are
/// passed down as the next run's turn limit, a run that takes the job over its dollars
/// ends `budget`, and once spent no further run starts.
#[test]
fn a_jobs_budget_bounds_its_runs_together() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    let repo_text = repo.path().display().to_string();
    let leaf = |prompt: &str| {
        format!(
            "    - force_success: {{ do: {{ agent: {{ provider: claude, prompt: \"{prompt}\", repo: \"{repo_text}\", max_turns: 10 }} }} }}\n"
        )
    };
    let flow = format!(
        "name: spend\nbudget: {{ usd: 0.02, turns: 3 }}\ntree:\n  sequence:\n{}{}{}    - set: {{ done: true }}\n",
        leaf("EDIT one.txt a"),
        leaf("EDIT two.txt b"),
        leaf("EDIT three.txt c")
    );
    let file = data.path().join("spend.yaml");
    std::fs::write(&file, flow).expect("flow");
    let ran = palm_env(
        data.path(),
        &["run", &file.display().to_string(), "--json"],
        &env.vars(),
    );
    assert_eq!(ran.code, 0, "{}", ran.stdout);
    let mut attempts = env.invocations("claude");
    attempts.sort_by_key(|a| a["prompt"].as_str().unwrap_or_default().contains("two.txt"));
    assert_eq!(
        attempts.len(),
        2,
        "the third run never started: {attempts:?}"
    );
    let turns = |attempt: &Value| {
        let argv: Vec<String> = attempt["argv"]
            .as_array()
            .expect("argv")
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        argv.iter()
            .position(|a| a == "--max-turns")
            .map(|i| argv[i + 1].clone())
    };
    assert_eq!(
        turns(&attempts[0]).as_deref(),
        Some("3"),
        "the job's 3 turns, not the leaf's 10"
    );
    assert_eq!(
        turns(&attempts[1]).as_deref(),
        Some("1"),
        "what the first run left"
    );
    let ledger = std::fs::read_dir(data.path().join("agents/jobs"))
        .expect("ledger")
        .count();
    assert_eq!(ledger, 1);
    let flows = palm_env(
        data.path(),
        &["flows", "validate", &file.display().to_string()],
        &[],
    );
    assert_eq!(flows.code, 0);
    std::fs::write(
        &file,
        "name: x\nbudget: { usd: -1 }\ntree: { succeed: {} }\n",
    )
    .expect("flow");
    let refused = palm_env(
        data.path(),
        &["flows", "validate", &file.display().to_string()],
        &[],
    );
    assert_eq!(refused.code, 2, "{}", refused.stdout);
    assert!(refused.stdout.contains("budget.usd") || refused.stderr.contains("budget.usd"));
}

/// A repo's `worktree:` setup in palm.yaml: files copied, directories linked, a unique
/// port for each job's worktree, `setup` and `smoke` run once; a failing smoke ends the
/// run as `error` before the agent starts.
#[test]
fn worktrees_are_set_up_as_their_repo_declares() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    std::fs::write(repo.path().join(".env"), "SECRET_SAUCE=1\n").expect("env");
    std::fs::create_dir(repo.path().join("deps")).expect("deps");
    std::fs::write(repo.path().join("deps/lib.txt"), "shared\n").expect("dep");
    let checkout_path = repo.path().canonicalize().expect("canonical");
    std::fs::write(
        data.path().join("palm.yaml"),
        format!(
            "repos:\n  {}:\n    worktree:\n      copy: [.env]\n      link: [deps]\n      env: {{PORT: auto, APP_ENV: test}}\n      setup: \"echo set-up >> setup.log\"\n      smoke: \"test -f .env && test -f deps/lib.txt\"\n",
            checkout_path.display()
        ),
    )
    .expect("config");
    let mut ports = Vec::new();
    for _ in 0..2 {
        let (code, ran) = env.run(data.path(), repo.path(), &["claude", "EDIT a.txt x"]);
        assert_eq!(code, 0, "{ran}");
        let tree = PathBuf::from(ran["result"]["worktree"].as_str().expect("worktree"));
        assert_eq!(
            std::fs::read_to_string(tree.join(".env")).expect("copied"),
            "SECRET_SAUCE=1\n"
        );
        assert!(
            tree.join("deps")
                .symlink_metadata()
                .expect("linked")
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(tree.join("setup.log")).expect("setup ran"),
            "set-up\n"
        );
        ports.push(std::fs::read_to_string(tree.with_extension("env.json")).expect("env"));
        // The patch is the run's work: what setup copied or linked in is left out.
        let files = ran["result"]["patch"]["files"].to_string();
        assert!(
            files.contains("a.txt") && !files.contains(".env") && !files.contains("deps"),
            "{files}"
        );
    }
    assert_ne!(
        ports[0], ports[1],
        "each worktree has its own port: {ports:?}"
    );
    std::fs::write(
        data.path().join("palm.yaml"),
        format!(
            "repos:\n  {}:\n    worktree:\n      smoke: \"echo the database is down >&2; exit 7\"\n",
            checkout_path.display()
        ),
    )
    .expect("config");
    let (code, failed) = env.run(data.path(), repo.path(), &["claude", "EDIT a.txt y"]);
    assert_eq!((code, end(&failed)), (3, "error"), "{failed}");
    let error = failed["result"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("smoke") && error.contains("exit 7: the database is down"),
        "{error}"
    );
}

/// `patches: apply_on_success`: when the job succeeds its patch lands on the checkout's
/// branch through the merge queue; a job that fails leaves its patch for review.
#[test]
fn a_succeeding_job_lands_its_patch_when_its_flow_says_so() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    let repo_text = repo.path().display().to_string();
    let flow = |name: &str, then: &str| {
        format!(
            "name: {name}\npatches: apply_on_success\ntree:\n  sequence:\n    - agent: {{ provider: claude, prompt: \"EDIT {name}.txt done\", repo: \"{repo_text}\" }}\n    - {then}\n"
        )
    };
    // A landing that takes a while (a hook of the checkout, after its fast-forward):
    // `palm run` ends only once the patch has landed and says so, not while git still
    // runs — its process used to end 2 s after the job, the patch merged or not, still
    // described as pending.
    let hook = repo.path().join(".git/hooks/post-merge");
    std::fs::create_dir_all(hook.parent().expect("hooks")).expect("hooks dir");
    std::fs::write(&hook, "#!/bin/sh\nsleep 3\n").expect("hook");
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let good = data.path().join("good.yaml");
    std::fs::write(&good, flow("good", "succeed: {}")).expect("flow");
    let ran = palm_env(
        data.path(),
        &["run", &good.display().to_string(), "--json"],
        &env.vars(),
    );
    assert_eq!(ran.code, 0, "{}", ran.stdout);
    let landed = palm_env(data.path(), &["patches", "list", "--json"], &[]).json();
    assert_eq!(landed["patches"][0]["status"], "applied", "{landed}");
    assert!(
        repo.path().join("good.txt").exists(),
        "the patch landed on the checkout"
    );
    std::fs::remove_file(&hook).expect("no more hook");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("good.txt")).expect("read"),
        "done\n"
    );

    let bad = data.path().join("bad.yaml");
    std::fs::write(&bad, flow("bad", "fail: \"tests are red\"")).expect("flow");
    let ran = palm_env(
        data.path(),
        &["run", &bad.display().to_string(), "--json"],
        &env.vars(),
    );
    assert_eq!(ran.code, 3, "{}", ran.stdout);
    let listed = palm_env(data.path(), &["patches", "list", "--json"], &[]).json();
    let statuses: Vec<&str> = listed["patches"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|p| p["status"].as_str())
        .collect();
    assert_eq!(statuses, ["pending", "applied"], "newest first: {listed}");
    assert!(!repo.path().join("bad.txt").exists());
}

/// At boot, a worktree whose job the store never had (here: the store was reset) is an
/// orphan: its state is saved on `refs/palm/saved/<job>/orphan`, then it is removed.
#[test]
fn orphan_worktrees_are_saved_and_removed_at_boot() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    let (code, ran) = env.run(data.path(), repo.path(), &["claude", "EDIT a.txt lost"]);
    assert_eq!(code, 0, "{ran}");
    let job = ran["job"].as_str().expect("job").to_owned();
    let tree = PathBuf::from(ran["result"]["worktree"].as_str().expect("worktree"));
    std::fs::write(tree.join("unsaved.txt"), "late\n").expect("late edit");
    std::fs::remove_file(data.path().join("palm.redb")).expect("reset the store");
    let _up = Up::start_env(data.path(), &[], &env.vars());
    let worktrees = || {
        let listed = git_in(repo.path(), &["worktree", "list", "--porcelain"]);
        String::from_utf8_lossy(&listed.stdout)
            .matches("worktree ")
            .count()
    };
    // `git worktree remove` deletes the directory before git's record of it: wait for
    // both, or the count below races the node's removal.
    assert!(
        eventually(Duration::from_secs(15), || !tree.exists()
            && worktrees() == 1),
        "the orphan worktree is removed, and git's record of it"
    );
    let shown = git_in(
        repo.path(),
        &["show", &format!("refs/palm/saved/{job}/orphan:unsaved.txt")],
    );
    assert_eq!(
        String::from_utf8_lossy(&shown.stdout),
        "late\n",
        "saved first"
    );
    assert_eq!(worktrees(), 1);
}

/// `METHOD PATH` with a JSON body on the node's REST API: (status, the body as JSON, or
/// as a string when it is not JSON).
fn rest(port: u16, method: &str, path: &str, body: &str) -> (u16, Value) {
    // `\0` never appears: read the whole answer (the connection closes after it).
    let (status, text) = common::http(port, method, path, None, body, "\0");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let value = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    (status, value)
}

/// What runs leave on disk, over REST on a running node: a job's patch (listed, shown,
/// applied through the merge queue, refused a second time, reverted), its worktree with
/// the job's status, and its check's log as an artifact.
#[test]
fn patches_worktrees_and_artifacts_are_served_over_rest() {
    let data = data_dir();
    let repo = checkout();
    let env = Env::new();
    let port = common::free_port();
    let address = format!("127.0.0.1:{port}");
    let _up = Up::start_env(data.path(), &["--http", &address], &env.vars());
    let repo_text = repo.path().display().to_string();
    let flow = format!(
        "name: edit-and-check\ntree:\n  sequence:\n    - agent: {{ provider: claude, prompt: \"EDIT a.txt two\", repo: \"{repo_text}\", save: run }}\n    - verify: {{ cmd: \"grep -c two a.txt\", repo: \"{repo_text}\", save: check }}\n"
    );
    let file = data.path().join("edit.yaml");
    std::fs::write(&file, flow).expect("flow");
    let ran = palm_env(
        data.path(),
        &["run", &file.display().to_string(), "--json"],
        &env.vars(),
    );
    assert_eq!(ran.code, 0, "{} {}", ran.stdout, ran.stderr);
    let view = ran.json();
    let job = view["job"].as_str().expect("job").to_owned();
    let patch = view["state"]["run"]["patch"]["id"]
        .as_str()
        .expect("patch")
        .to_owned();

    let (status, listed) = rest(port, "GET", &format!("/v1/patches?job={job}"), "");
    assert_eq!(status, 200, "{listed}");
    let patches = listed["patches"].as_array().expect("patches");
    assert_eq!(patches.len(), 1, "{listed}");
    assert_eq!(
        (patches[0]["id"].as_str(), patches[0]["status"].as_str()),
        (Some(patch.as_str()), Some("pending"))
    );
    let (status, shown) = rest(port, "GET", &format!("/v1/patches/{patch}"), "");
    assert_eq!(status, 200);
    assert!(
        shown["diff"].as_str().unwrap_or_default().contains("+two"),
        "{shown}"
    );
    let (status, missing) = rest(port, "GET", "/v1/patches/0123abcd", "");
    assert_eq!(
        (status, missing["kind"].as_str()),
        (404, Some("unknown_patch"))
    );

    let (status, trees) = rest(port, "GET", "/v1/worktrees", "");
    assert_eq!(status, 200, "{trees}");
    let ours: Vec<&Value> = trees["worktrees"]
        .as_array()
        .expect("worktrees")
        .iter()
        .filter(|t| t["job"] == job.as_str())
        .collect();
    assert_eq!(ours.len(), 1, "{trees}");
    assert_eq!(ours[0]["status"], "succeeded");
    assert_eq!(ours[0]["live"], false);
    assert!(ours[0]["bytes"].as_u64().unwrap_or(0) > 0);

    let (status, applied) = rest(port, "POST", &format!("/v1/patches/{patch}/apply"), "{}");
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["status"], "applied");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("a.txt")).expect("a.txt"),
        "one\ntwo\n"
    );
    let (status, again) = rest(port, "POST", &format!("/v1/patches/{patch}/apply"), "{}");
    assert_eq!(
        (status, again["kind"].as_str()),
        (409, Some("already_applied")),
        "{again}"
    );
    let (status, reverted) = rest(port, "POST", &format!("/v1/patches/{patch}/revert"), "");
    assert_eq!(status, 200, "{reverted}");
    assert_eq!(reverted["status"], "reverted");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("a.txt")).expect("a.txt"),
        "one\n"
    );

    let (status, artifacts) = rest(port, "GET", &format!("/v1/jobs/{job}/artifacts"), "");
    assert_eq!(status, 200, "{artifacts}");
    let list = artifacts["artifacts"].as_array().expect("artifacts");
    assert_eq!(list.len(), 1, "{artifacts}");
    let name = list[0]["name"].as_str().expect("name").to_owned();
    assert!(
        name.starts_with("verify-") && name.ends_with(".log"),
        "{name}"
    );
    let (status, log) = rest(port, "GET", &format!("/v1/jobs/{job}/artifacts/{name}"), "");
    assert_eq!(status, 200);
    assert_eq!(log, json!(1), "grep -c printed the count: {log}");
    let (status, escape) = rest(
        port,
        "GET",
        &format!("/v1/jobs/{job}/artifacts/..%2Fpalm.yaml"),
        "",
    );
    assert_eq!(
        (status, escape["kind"].as_str()),
        (400, Some("invalid_input")),
        "{escape}"
    );
    // The job's Explorer page links both.
    let (status, page) = rest(port, "GET", &format!("/jobs/{job}"), "");
    let page = page.as_str().unwrap_or_default().to_owned();
    assert_eq!(status, 200);
    assert!(page.contains("Left on disk"), "{page}");
    assert!(page.contains(&format!("href=\"/v1/patches/{patch}\"")));
    assert!(page.contains(&format!("href=\"/v1/jobs/{job}/artifacts/{name}\"")));
    let (status, none) = rest(port, "GET", "/v1/jobs/nojob/artifacts", "");
    assert_eq!(
        (status, none["kind"].as_str()),
        (404, Some("unknown_job")),
        "{none}"
    );
}
