//! End-to-end: real `palm` processes on a temporary data directory.

mod common;

use common::{
    Client, Up, data_dir, eventually, example, palm, processes_matching, processes_running,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[test]
fn hello_succeeds_with_the_status_contract() {
    let data = data_dir();
    let ran = palm(data.path(), &["run", &example("hello"), "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let view = ran.json();
    for key in [
        "job",
        "flow",
        "status",
        "waiting_on",
        "state",
        "error",
        "home",
        "effects",
    ] {
        assert!(view.get(key).is_some(), "status JSON lacks `{key}`: {view}");
    }
    assert_eq!(view["status"], "succeeded");
    assert_eq!(view["flow"], "hello");
    assert_eq!(view["state"]["greeting"], "hello world");
    assert_eq!(view["state"]["echoed"]["exit_code"], 0);
    assert_eq!(view["state"]["echoed"]["stdout"], "hello world\n");
    assert!(
        view["effects"][0]["node"].is_string(),
        "each effect names the node it ran on: {view}"
    );
    let status = palm(
        data.path(),
        &["status", view["job"].as_str().unwrap(), "--json"],
    );
    assert_eq!(status.code, 0);
    assert_eq!(status.json()["status"], "succeeded");
    let human = palm(
        data.path(),
        &["run", &example("hello"), "--input", "who=palm"],
    );
    assert_eq!(human.code, 0);
    assert!(human.stdout.contains("succeeded"), "{}", human.stdout);
    assert!(human.stdout.contains("hello palm"), "{}", human.stdout);
}

#[test]
fn approval_waits_then_continues_to_success() {
    let data = data_dir();
    let ran = palm(data.path(), &["run", &example("approval"), "--json"]);
    assert_eq!(ran.code, 4, "waiting exits 4: {}", ran.stderr);
    let view = ran.json();
    assert_eq!(view["status"], "waiting");
    assert_eq!(view["waiting_on"][0]["key"], "approve");
    assert_eq!(view["waiting_on"][0]["prompt"], "Ship the build?");
    let job = view["job"].as_str().unwrap().to_owned();
    let jobs = palm(data.path(), &["jobs", "--status", "waiting", "--json"]).json();
    assert_eq!(jobs["jobs"][0]["job"], job);
    let done = palm(
        data.path(),
        &[
            "continue",
            &job,
            "--key",
            "approve",
            "--input",
            r#"{"ok":true}"#,
            "--json",
        ],
    );
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(done.json()["status"], "succeeded");
    let inspect = palm(data.path(), &["inspect", &job, "--json"]).json();
    let kinds: Vec<&str> = inspect["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"parked")
            && kinds.contains(&"continued")
            && kinds.last() == Some(&"succeeded"),
        "{kinds:?}"
    );
    assert_eq!(inspect["tree"]["status"], "success");
}

#[test]
fn a_run_step_keeps_its_output_when_a_background_process_holds_the_pipes() {
    // The command leaves `sleep` running in its group, holding stdout and stderr open:
    // the step still ends (after a bounded drain) with what was written before it.
    let data = data_dir();
    let flow = data.path().join("background.yaml");
    let pid_file = data.path().join("background.pid");
    std::fs::write(
        &flow,
        format!(
            "name: background\ntree:\n  run: {{ cmd: \"echo before; echo warned >&2; sleep 30 & echo $! > {}\", save: out }}\n",
            pid_file.display()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let ran = palm(data.path(), &["run", flow.to_str().unwrap(), "--json"]);
    let took = started.elapsed();
    if let Ok(pid) = std::fs::read_to_string(&pid_file) {
        let _ = std::process::Command::new("kill").arg(pid.trim()).status();
    }
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let view = ran.json();
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["state"]["out"]["stdout"], "before\n", "{view}");
    assert_eq!(view["state"]["out"]["stderr"], "warned\n", "{view}");
    assert!(
        took < Duration::from_secs(20),
        "the step waited for `sleep`: {took:?}"
    );
}

#[test]
fn every_effect_command_sees_its_job_its_key_and_its_node() {
    // design.md §10: effects see PALM_JOB_ID, PALM_EFFECT_KEY and PALM_NODE_NAME. A
    // `verify` check runs a command as an effect too (its own code path).
    let data = data_dir();
    let flow = data.path().join("env.yaml");
    let (from_run, from_verify) = (data.path().join("run.env"), data.path().join("verify.env"));
    let line = "echo $PALM_JOB_ID,$PALM_EFFECT_KEY,$PALM_NODE_NAME >";
    std::fs::write(
        &flow,
        format!(
            "name: env\ntree:\n  sequence:\n    - run: {{ cmd: \"{line} {}\" }}\n    - verify: {{ cmd: \"{line} {}\", cwd: {} }}\n",
            from_run.display(),
            from_verify.display(),
            data.path().display()
        ),
    )
    .unwrap();
    let ran = palm(data.path(), &["run", flow.to_str().unwrap(), "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let view = ran.json();
    assert_eq!(view["status"], "succeeded", "{view}");
    let job = view["job"].as_str().expect("a job id");
    let node = view["effects"][0]["node"]
        .as_str()
        .expect("the effect's node");
    let mut keys = Vec::new();
    for file in [&from_run, &from_verify] {
        let text = std::fs::read_to_string(file).expect("the command wrote its environment");
        let fields: Vec<&str> = text.trim().split(',').collect();
        assert_eq!(fields.len(), 3, "{}: {text:?}", file.display());
        assert_eq!(fields[0], job, "PALM_JOB_ID in {}", file.display());
        assert!(
            fields[1].starts_with(&format!("{job}/")),
            "PALM_EFFECT_KEY in {}: {text:?}",
            file.display()
        );
        assert_eq!(fields[2], node, "PALM_NODE_NAME in {}", file.display());
        keys.push(fields[1].to_owned());
    }
    assert_ne!(keys[0], keys[1], "each effect has its own key");
}

#[test]
fn flaky_succeeds_on_its_second_attempt() {
    let data = data_dir();
    let ran = palm(data.path(), &["run", &example("flaky"), "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let job = ran.json()["job"].as_str().unwrap().to_owned();
    let _ = std::fs::remove_file(format!("/tmp/palm-flaky-{job}"));
    let inspect = palm(data.path(), &["inspect", &job, "--json"]).json();
    let completions: Vec<&Value> = inspect["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "effect_completed")
        .collect();
    assert_eq!(completions.len(), 2, "fails once, then succeeds: {inspect}");
    assert_eq!(completions[0]["outcome"]["run"]["exit_code"], 1);
    assert_eq!(completions[1]["outcome"]["run"]["exit_code"], 0);
}

#[test]
fn race_finishes_fast_and_kills_the_slow_branch() {
    let data = data_dir();
    let started = Instant::now();
    let ran = palm(data.path(), &["run", &example("race"), "--json"]);
    let took = started.elapsed();
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(took < Duration::from_secs(5), "race took {took:?}");
    let view = ran.json();
    assert!(
        view["effects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["state"] == "cancelled"),
        "{view}"
    );
    // The branch's shell (its command line holds the whole command) and its `sleep`.
    assert!(
        eventually(Duration::from_secs(3), || processes_matching(
            "sleep 30; echo slow"
        )
        .is_empty()
            && processes_running(&["sleep", "30"]).is_empty()),
        "the slow branch's `sleep 30` is still running"
    );
}

#[test]
fn fanout_runs_every_item() {
    let data = data_dir();
    let ran = palm(
        data.path(),
        &["run", &example("fanout"), "--json", "--seats", "4"],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let view = ran.json();
    let effects = view["effects"].as_array().unwrap();
    assert_eq!(effects.len(), 6);
    assert!(effects.iter().all(|e| e["state"] == "completed"));
}

#[test]
fn bad_input_gets_one_clear_line_and_the_documented_code() {
    let data = data_dir();
    let approval = palm(data.path(), &["run", &example("approval"), "--json"]);
    assert_eq!(approval.code, 4);
    let job = approval.json()["job"].as_str().unwrap().to_owned();
    let store = data.path().join("palm.redb");
    let before = std::fs::read(&store).expect("store");

    let broken = data.path().join("broken.yaml");
    std::fs::write(&broken, "name: broken\ntree:\n  sequence: [succeed\n").unwrap();
    let broken = broken.display().to_string();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("malformed yaml", vec!["run", &broken], "invalid YAML"),
        (
            "unknown job",
            vec!["status", "nope-42"],
            "unknown job `nope-42`",
        ),
        (
            "unknown job (continue)",
            vec!["continue", "nope-42", "--key", "approve", "--input", "{}"],
            "unknown job `nope-42`",
        ),
        (
            "wrong wait key",
            vec![
                "continue",
                &job,
                "--key",
                "aprove",
                "--input",
                r#"{"ok":true}"#,
            ],
            "is not waiting on `aprove`",
        ),
        (
            "schema-invalid input",
            vec![
                "continue",
                &job,
                "--key",
                "approve",
                "--input",
                r#"{"ok":"yes"}"#,
            ],
            "expected boolean, found string",
        ),
        (
            "unknown flow",
            vec!["run", "no-such-flow"],
            "unknown flow `no-such-flow`",
        ),
        (
            "missing flow file",
            vec!["run", "missing.yaml"],
            "no such flow file: missing.yaml",
        ),
    ];
    for (what, args, needle) in cases {
        let ran = palm(data.path(), &args);
        assert_eq!(ran.code, 2, "{what}: exit code\n{}", ran.stderr);
        assert!(
            ran.stderr.contains(needle),
            "{what}: stderr lacks `{needle}`:\n{}",
            ran.stderr
        );
        let first = ran.stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(needle),
            "{what}: the first line says what is wrong: {first}"
        );
        assert!(!ran.stderr.contains("panicked"), "{what}: {}", ran.stderr);
    }
    assert_eq!(
        std::fs::read(&store).expect("store"),
        before,
        "refused input left the store byte for byte unchanged"
    );
    let view = palm(data.path(), &["status", &job, "--json"]).json();
    assert_eq!(
        view["status"], "waiting",
        "the job is still waiting, nothing lost"
    );

    let file = data.path().join("plain-file");
    std::fs::write(&file, "").unwrap();
    let under_file = file.join("data");
    let ran = common::palm(&under_file, &["run", &example("hello")]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("cannot create data directory"),
        "{}",
        ran.stderr
    );
    let ran = common::palm(
        std::path::Path::new("/proc/palm-not-writable"),
        &["run", &example("hello")],
    );
    assert_eq!(ran.code, 2, "{}", ran.stderr);
}

#[test]
fn json_errors_are_one_document_on_stdout() {
    let data = data_dir();
    let ran = palm(data.path(), &["status", "nope-1", "--json"]);
    assert_eq!(ran.code, 2);
    let body = ran.json();
    assert_eq!(body["error"]["kind"], "unknown_job");
    assert_eq!(body["error"]["exit_code"], 2);
}

#[test]
fn validate_reports_file_line_col_for_every_broken_fixture() {
    let fixtures = common::repo().join("node/tests/fixtures/broken");
    let expectations = std::fs::read_to_string(fixtures.join("expectations.txt")).unwrap();
    let mut checked = 0;
    for line in expectations
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let parts: Vec<&str> = line.split('|').collect();
        let (file, position, message) = (parts[0], parts[1], parts[2]);
        let path = fixtures.join(file).display().to_string();
        let ran = palm(std::path::Path::new("/tmp"), &["flows", "validate", &path]);
        assert_eq!(ran.code, 2, "{file}: exit 2\n{}{}", ran.stdout, ran.stderr);
        let expected = format!("{path}:{position}: error: {message}");
        assert!(
            ran.stdout.contains(&expected),
            "{file}: expected `{expected}` in\n{}",
            ran.stdout
        );
        checked += 1;
    }
    assert!(checked >= 12);
    let cycle = common::repo()
        .join("node/tests/fixtures/cycle/a.yaml")
        .display()
        .to_string();
    let ran = palm(std::path::Path::new("/tmp"), &["flows", "validate", &cycle]);
    assert_eq!(ran.code, 2);
    assert!(
        ran.stdout
            .contains(&format!("{cycle}:5:7: error: subflow cycle: a → b → a")),
        "{}",
        ran.stdout
    );
    for name in ["hello", "approval", "fanout", "flaky", "race"] {
        let ran = palm(
            std::path::Path::new("/tmp"),
            &["flows", "validate", &example(name)],
        );
        assert_eq!(ran.code, 0, "{name}: {}", ran.stdout);
    }
    let ran = palm(
        std::path::Path::new("/tmp"),
        &["flows", "validate", "--json", &example("hello")],
    );
    assert_eq!(ran.json()["valid"], true);
}

#[test]
fn schema_and_trace_commands() {
    let ran = palm(std::path::Path::new("/tmp"), &["flows", "schema"]);
    assert_eq!(ran.code, 0);
    let schema = ran.json();
    assert!(schema["$defs"]["run"].is_object());
    let spec = common::repo().join("actors/tests/fixtures/trace/seq-mem-basic.json");
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(&spec).unwrap()).unwrap();
    let spec_file = data_dir();
    let spec_path = spec_file.path().join("spec.json");
    std::fs::write(&spec_path, fixture["spec"].to_string()).unwrap();
    let ran = palm(
        std::path::Path::new("/tmp"),
        &[
            "flows",
            "trace",
            spec_path.to_str().unwrap(),
            "--ticks",
            "8",
        ],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let lines: Vec<&str> = ran.stdout.lines().collect();
    let expected: Vec<&str> = fixture["expected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(lines, expected);
}

#[test]
fn a_second_node_on_the_same_data_dir_is_refused() {
    let data = data_dir();
    let up = Up::start(data.path(), &["--seats", "1"]);
    let second = palm(data.path(), &["up"]);
    assert_eq!(second.code, 1, "{}", second.stderr);
    assert!(
        second.stderr.contains("already running"),
        "{}",
        second.stderr
    );
    assert!(
        second.stderr.contains(&up.pid().to_string()),
        "names the pid: {}",
        second.stderr
    );
    let (code, _) = up.terminate();
    assert_eq!(code, 0, "SIGTERM exits 0");
}

#[test]
fn commands_attach_to_a_running_node() {
    let data = data_dir();
    let up = Up::start(data.path(), &["--seats", "2"]);
    let ran = palm(data.path(), &["run", &example("hello"), "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let vitality = palm(data.path(), &["vitality", "--json"]).json();
    assert_eq!(vitality["running"], true);
    assert_eq!(vitality["pid"], up.pid());
    assert_eq!(vitality["seats"]["total"], 2);
    assert!(vitality["links"].is_array());
    let submitted = palm(data.path(), &["submit", &example("approval"), "--json"]).json();
    let job = submitted["job"].as_str().unwrap().to_owned();
    assert!(eventually(Duration::from_secs(10), || {
        palm(data.path(), &["status", &job, "--json"]).json()["status"] == "waiting"
    }));
    let cancelled = palm(data.path(), &["cancel", &job, "--json"]);
    assert_eq!(cancelled.code, 0);
    assert_eq!(
        palm(data.path(), &["status", &job, "--json"]).json()["status"],
        "cancelled"
    );
    let again = palm(data.path(), &["cancel", &job]);
    assert_eq!(again.code, 2, "terminal is final: {}", again.stderr);
    let (code, _) = up.terminate();
    assert_eq!(code, 0);
}

#[test]
fn a_parked_job_survives_a_node_restart() {
    let data = data_dir();
    let up = Up::start(data.path(), &["--seats", "2"]);
    let submitted = palm(data.path(), &["submit", &example("approval"), "--json"]).json();
    let job = submitted["job"].as_str().unwrap().to_owned();
    assert!(eventually(Duration::from_secs(10), || {
        palm(data.path(), &["status", &job, "--json"]).json()["status"] == "waiting"
    }));
    let (code, _) = up.terminate();
    assert_eq!(code, 0);
    let up = Up::start(data.path(), &["--seats", "2"]);
    let done = palm(
        data.path(),
        &[
            "continue",
            &job,
            "--key",
            "approve",
            "--input",
            r#"{"ok":true}"#,
            "--json",
        ],
    );
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(done.json()["status"], "succeeded");
    drop(up);
}

#[test]
fn sigterm_lets_a_running_effect_finish() {
    let data = data_dir();
    let marker = data.path().join("finished");
    let flow = data.path().join("slow.yaml");
    std::fs::write(
        &flow,
        format!(
            "name: slow\ntree:\n  run: \"sleep 1; touch {}\"\n",
            marker.display()
        ),
    )
    .unwrap();
    let up = Up::start(data.path(), &["--seats", "1", "--grace-ms", "5000"]);
    let job = palm(data.path(), &["submit", flow.to_str().unwrap(), "--json"]).json()["job"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(eventually(Duration::from_secs(5), || {
        palm(data.path(), &["vitality", "--json"]).json()["seats"]["busy"] == 1
    }));
    let (code, _) = up.terminate();
    assert_eq!(code, 0);
    assert!(
        marker.exists(),
        "the effect ran to its end within the grace period"
    );
    let view = palm(data.path(), &["status", &job, "--json"]).json();
    assert_eq!(
        view["status"], "succeeded",
        "its completion was committed before exit: {view}"
    );
}

#[test]
fn raw_control_socket_speaks_json_lines() {
    let data = data_dir();
    let up = Up::start(data.path(), &["--seats", "1"]);
    let mut client = Client::connect(data.path()).expect("connect");
    let ping = client.ok(&json!({"op": "ping"}));
    assert_eq!(ping["pid"], up.pid());
    let bad = client.call(&json!({"op": "explode"})).expect("answer");
    assert_eq!(bad["ok"], false);
    assert_eq!(bad["error"]["kind"], "bad_request");
    let submitted = client.ok(&json!({"op": "submit", "flow": {"source": "name: x\ntree: succeed\n", "origin": "<inline>"}}));
    assert_eq!(submitted["status"], "succeeded");
    // An oversized request is answered with an error and the connection closed; the
    // node goes on serving others.
    let oversized = serde_json::to_vec(
        &json!({"op": "submit", "flow": {"source": "x".repeat(5 << 20), "origin": "<big>"}}),
    )
    .unwrap();
    let stream =
        std::os::unix::net::UnixStream::connect(data.path().join("palm.sock")).expect("connect");
    let mut writer = stream.try_clone().unwrap();
    let _ = std::io::Write::write_all(&mut writer, &oversized);
    let mut answer = String::new();
    let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stream), &mut answer);
    let too_big: Value = serde_json::from_str(&answer).expect("an error answer before the close");
    assert_eq!(too_big["error"]["kind"], "too_large");
    assert_eq!(
        client.ok(&json!({"op": "ping"}))["pid"],
        up.pid(),
        "still serving"
    );
    drop(up);
}

#[test]
fn doctor_version_and_vitality_without_a_node() {
    let data = data_dir();
    let doctor = palm(data.path(), &["doctor", "--json"]);
    assert_eq!(doctor.code, 0, "{}", doctor.stdout);
    assert_eq!(doctor.json()["ok"], true);
    let version = palm(data.path(), &["version", "--full", "--json"]);
    assert_eq!(version.code, 0);
    assert!(version.json()["version"].is_string());
    palm(data.path(), &["run", &example("hello")]);
    let vitality = palm(data.path(), &["vitality", "--json"]).json();
    assert_eq!(vitality["running"], false);
    assert_eq!(vitality["jobs"]["by_status"]["succeeded"], 1);
}

#[test]
fn offline_vitality_of_a_fresh_directory_says_there_is_no_store_yet() {
    let data = data_dir();
    let ran = palm(data.path(), &["vitality", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let store = ran.json()["store"].as_str().unwrap_or_default().to_owned();
    assert!(store.starts_with("none yet ("), "{store}");
    assert!(
        !data.path().join("palm.redb").exists(),
        "a read creates nothing"
    );
}

#[test]
fn run_and_submit_choose_a_stored_revision() {
    let data = data_dir();
    let file = data.path().join("rev.yaml");
    for v in [1, 2] {
        std::fs::write(&file, format!("name: rev\ntree:\n  set: {{v: {v}}}\n")).unwrap();
        let added = palm(data.path(), &["flows", "add", &file.display().to_string()]);
        assert_eq!(added.code, 0, "{}", added.stderr);
    }
    let old = palm(data.path(), &["run", "rev", "--revision", "1", "--json"]).json();
    assert_eq!(
        (old["revision"].clone(), old["state"]["v"].clone()),
        (json!(1), json!(1))
    );
    let latest = palm(data.path(), &["run", "rev", "--json"]).json();
    assert_eq!(latest["state"]["v"], 2);
    let submitted = palm(data.path(), &["submit", "rev", "--revision", "1", "--json"]).json();
    let job = submitted["job"].as_str().expect("job").to_owned();
    let status = palm(data.path(), &["status", &job, "--json"]).json();
    assert_eq!(status["revision"], 1, "{status}");
    let file_arg = file.display().to_string();
    let refused = palm(data.path(), &["run", &file_arg, "--revision", "1"]);
    assert_eq!(refused.code, 2);
    assert!(refused.stderr.contains("is a file"), "{}", refused.stderr);
}

/// `palm flows migrate`: the impact first (no move without --yes when there is no
/// terminal to ask), then the move; the moved job survives a restart on its new revision
/// and runs it; a revision that rewrites a step the job took is refused with exit 1.
/// `palm retry JOB --from PATH` with no node running: the retry is driven to its end like
/// `palm continue`, keeps the first step's output (not run again), runs the fixed second
/// step under a new revision; refusals exit 2 with what is wrong.
#[test]
fn retry_runs_an_ended_job_again_from_a_node() {
    let data = data_dir();
    let file = data.path().join("ship.yaml");
    let flow = |ship: &str| {
        format!(
            "name: ship\ntree:\n  sequence:\n    - run: {{ cmd: \"date +%s%N\", save: built }}\n    - run: {{ cmd: \"{ship}\", save: shipped }}\n"
        )
    };
    std::fs::write(&file, flow("exit 3")).expect("flow");
    let failed = palm(data.path(), &["run", &file.display().to_string(), "--json"]);
    assert_eq!(failed.code, 3, "a failed job exits 3: {}", failed.stderr);
    let failed = failed.json();
    let job = failed["job"].as_str().expect("job").to_owned();

    let inspect = palm(data.path(), &["inspect", &job]);
    assert!(
        inspect.stdout.contains("0.1"),
        "paths are shown: {}",
        inspect.stdout
    );
    let nowhere = palm(data.path(), &["retry", &job, "--from", "0.9"]);
    assert_eq!(nowhere.code, 2, "{}", nowhere.stderr);
    assert!(nowhere.stderr.contains("never ran"), "{}", nowhere.stderr);

    std::fs::write(&file, flow("echo shipped")).expect("fixed flow");
    let added = palm(data.path(), &["flows", "add", &file.display().to_string()]);
    assert_eq!(added.code, 0, "{}", added.stderr);
    let retried = palm(
        data.path(),
        &["retry", &job, "--from", "0.1", "--revision", "2", "--json"],
    );
    assert_eq!(retried.code, 0, "{}", retried.stderr);
    let retried = retried.json();
    assert_eq!(retried["retry_of"], job.as_str());
    assert_eq!(retried["revision"], 2);
    assert_eq!(retried["status"], "succeeded", "{retried}");
    assert_eq!(retried["view"]["state"]["built"], failed["state"]["built"]);
    assert_eq!(retried["view"]["state"]["shipped"]["stdout"], "shipped\n");
    let human = palm(
        data.path(),
        &["retry", &job, "--from", "0.1", "--revision", "2"],
    );
    assert_eq!(human.code, 0, "{}", human.stderr);
    assert!(
        human.stdout.contains("asked before: the same retry")
            && human
                .stdout
                .contains(retried["job"].as_str().unwrap_or("?")),
        "{}",
        human.stdout
    );
}

#[test]
fn flows_migrate_shows_the_impact_then_moves_parked_jobs() {
    let data = data_dir();
    let file = data.path().join("ship.yaml");
    let flow = |build: &str, ship: &str| {
        format!(
            "name: ship\ntree:\n  sequence:\n    - run: {{ cmd: \"{build}\", save: built }}\n    - wait: {{ key: go }}\n    - run: {{ cmd: \"{ship}\", save: shipped }}\n"
        )
    };
    let add = |text: String| {
        std::fs::write(&file, text).expect("flow");
        let added = palm(data.path(), &["flows", "add", &file.display().to_string()]);
        assert_eq!(added.code, 0, "{}", added.stderr);
    };
    add(flow("echo building", "echo shipped"));
    let up = Up::start(data.path(), &[]);
    let parked = palm(data.path(), &["run", "ship", "--json"]);
    assert_eq!(parked.code, 4, "{}", parked.stderr);
    let job = parked.json()["job"].as_str().expect("job").to_owned();
    add(flow("echo building", "echo shipped v2"));

    let unconfirmed = palm(data.path(), &["flows", "migrate", "ship", "--to", "2"]);
    assert_eq!(unconfirmed.code, 2, "{}", unconfirmed.stderr);
    assert!(
        unconfirmed.stdout.contains("can move"),
        "{}",
        unconfirmed.stdout
    );
    assert!(
        unconfirmed.stderr.contains("--yes"),
        "{}",
        unconfirmed.stderr
    );
    let plan = palm(
        data.path(),
        &[
            "flows",
            "migrate",
            "ship",
            "--to",
            "2",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let plan = plan.json();
    assert_eq!(
        (plan["movable"].clone(), plan["moved"].clone()),
        (json!(1), json!(0))
    );
    assert_eq!(plan["jobs"][0]["job"], job.as_str());
    assert_eq!(plan["jobs"][0]["verdict"], "moves");
    assert_eq!(plan["jobs"][0]["waiting"], json!(["go"]));
    let status = palm(data.path(), &["status", &job, "--json"]).json();
    assert_eq!(status["revision"], 1, "a dry run moves nothing");

    let moved = palm(
        data.path(),
        &["flows", "migrate", "ship", "--to", "2", "--yes", "--json"],
    );
    assert_eq!(moved.code, 0, "{}", moved.stderr);
    let moved = moved.json();
    assert_eq!(moved["moved"], 1, "{moved}");
    assert_eq!(moved["jobs"][0]["verdict"], "moved");

    // Revision 3 rewrites the build step the job already ran: it cannot move.
    add(flow("echo building fast", "echo shipped v3"));
    let refused = palm(
        data.path(),
        &["flows", "migrate", "ship", "--to", "3", "--yes", "--json"],
    );
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    let refused = refused.json();
    assert_eq!(refused["diverged"], 1);
    assert_eq!(refused["jobs"][0]["verdict"], "diverges");
    let reason = refused["jobs"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("echo building fast"), "{reason}");

    // A restart replays the job under revision 2, where it continues.
    up.kill9();
    let _up = Up::start(data.path(), &[]);
    let status = palm(data.path(), &["status", &job, "--json"]).json();
    assert_eq!(
        (status["revision"].clone(), status["status"].clone()),
        (json!(2), json!("waiting"))
    );
    let done = palm(
        data.path(),
        &["continue", &job, "--key", "go", "--input", "{}", "--json"],
    );
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(done.json()["state"]["shipped"]["stdout"], "shipped v2\n");
    let missing = palm(data.path(), &["flows", "migrate", "ship", "--to", "9"]);
    assert_eq!(missing.code, 2);
    assert!(
        missing.stderr.contains("no revision 9"),
        "{}",
        missing.stderr
    );
}

#[test]
fn completions_are_scripts_the_shell_accepts() {
    let data = data_dir();
    let ran = palm(data.path(), &["completions", "bash"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    for word in ["submit", "continue", "token", "--revision"] {
        assert!(ran.stdout.contains(word), "{word} completes");
    }
    let script = data.path().join("palm.bash");
    std::fs::write(&script, &ran.stdout).unwrap();
    let checked = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("bash");
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert_eq!(palm(data.path(), &["completions", "nope"]).code, 2);
}
