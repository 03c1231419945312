//! End-to-end: verification as workflow steps, through real `palm` processes. A tiny
//! cargo crate with two failing tests (`calc`), real `cargo test` runs as the checks, and
//! a scripted fixer (tests/fixtures/verify/fixer, a CLI declared under `agents:`) of
//! several qualities: `until_green` ends green, stalled and exhausted; each `loop`
//! terminal state exits with its documented code; best-of-3 picks the attempt whose
//! tests pass with the smallest diff; a node killed mid-round resumes at that round;
//! agent gates (with a skeptic) and human gates keep their verdicts.

mod common;

use common::{Up, data_dir, eventually, palm_env, repo};
use serde_json::Value;
use std::time::Duration;

const CALC: &str = "pub fn add(a: i32, b: i32) -> i32 {
    a - b
}

pub fn mul(a: i32, b: i32) -> i32 {
    a / b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds() {
        assert_eq!(add(2, 3), 5);
    }

    #[test]
    fn muls() {
        assert_eq!(mul(2, 3), 6);
    }
}
";

/// A git checkout of the `calc` crate, with `adds` and `muls` failing.
fn calc_repo() -> tempfile::TempDir {
    common::git_repo(&[
        (
            "Cargo.toml",
            "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
        ),
        ("src/lib.rs", CALC),
        (".gitignore", "target/\nCargo.lock\n.palm/\n"),
    ])
}

/// A data directory whose palm.yaml declares one fixer per kind, and the fixers' log
/// directory.
struct Bench {
    data: tempfile::TempDir,
    state: tempfile::TempDir,
    repo: tempfile::TempDir,
    path: String,
}

impl Bench {
    fn new(pause_on: Option<u32>) -> Bench {
        let data = data_dir();
        let state = tempfile::tempdir().expect("state");
        let fixer = repo().join("node/tests/fixtures/verify/fixer");
        let mut yaml = String::from("agents:\n");
        for kind in ["round2", "never", "shifty", "good", "sloppy", "bad"] {
            yaml.push_str(&format!(
                "  {kind}:\n    command: [\"{}\"]\n    env: {{FIXER_KIND: {kind}, FIXER_STATE: \"{}\"{}}}\n",
                fixer.display(),
                state.path().display(),
                pause_on
                    .map(|n| format!(", FIXER_PAUSE_ON: \"{n}\""))
                    .unwrap_or_default()
            ));
        }
        yaml.push_str(&format!(
            "  verifier:\n    command: [\"{}\"]\n    env: {{FIXER_STATE: \"{}\", VERDICT_FILE: \"{}\"}}\n",
            repo().join("node/tests/fixtures/verify/verifier").display(),
            state.path().display(),
            data.path().join("verdict.json").display()
        ));
        std::fs::write(data.path().join("palm.yaml"), yaml).expect("palm.yaml");
        Bench {
            data,
            state,
            repo: calc_repo(),
            path: std::env::var("PATH").unwrap_or_default(),
        }
    }

    /// The check every flow runs: the crate's tests, built in each worktree's own
    /// `target/` (ignored, so never in a patch). A target directory shared by the
    /// attempts of a best_of would let one attempt's check run another's binary.
    fn check(&self) -> String {
        "cargo test --offline --quiet".to_owned()
    }

    fn until_green(&self, kind: &str) -> String {
        format!(
            r#"name: green-{kind}
tree:
  until_green:
    verify: {{ cmd: "{check}", parser: cargo, repo: "{repo}" }}
    fix:
      agent: {{ provider: {kind}, prompt: "Fix these failing tests: {{{{ failures }}}}", repo: "{repo}" }}
    max_rounds: 3
    save: green
"#,
            check = self.check(),
            repo = self.repo.path().display()
        )
    }

    fn write(&self, name: &str, text: &str) -> String {
        let file = self.data.path().join(format!("{name}.yaml"));
        std::fs::write(&file, text).expect("flow");
        file.display().to_string()
    }

    /// `palm run FILE --json`: (exit code, status document).
    fn run(&self, name: &str, text: &str) -> (i32, Value) {
        let file = self.write(name, text);
        let ran = palm_env(self.data.path(), &["run", &file, "--json"], &self.env());
        assert!(!ran.stdout.is_empty(), "no output: {}", ran.stderr);
        (ran.code, ran.json())
    }

    fn env(&self) -> Vec<(&str, &str)> {
        vec![("PATH", self.path.as_str())]
    }

    fn calls(&self, kind: &str) -> Vec<Value> {
        std::fs::read_to_string(self.state.path().join(format!("{kind}.log")))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("log line"))
            .collect()
    }
}

fn names(round: &Value) -> Vec<String> {
    round["failures"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|x| x["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn until_green_ends_green_stalled_or_exhausted_with_real_cargo_tests() {
    let bench = Bench::new(None);

    let (code, doc) = bench.run("green-round2", &bench.until_green("round2"));
    assert_eq!(code, 0, "{doc}");
    let green = &doc["state"]["green"];
    assert_eq!(green["outcome"], "green", "{green}");
    assert_eq!(green["rounds"], 2);
    let evidence = green["evidence"].as_array().expect("evidence");
    assert_eq!(evidence.len(), 3);
    assert_eq!(names(&evidence[0]), ["tests::adds", "tests::muls"]);
    assert_eq!(names(&evidence[1]), ["tests::muls"]);
    assert_eq!(evidence[2]["ok"], true);
    for round in &evidence[..2] {
        let failure = &round["failures"][0];
        assert_eq!(failure["file"], "src/lib.rs", "{round}");
        assert!(failure["line"].as_u64().is_some(), "{round}");
        let log = round["log"].as_str().expect("log");
        let text = std::fs::read_to_string(log).expect("the log is kept");
        assert!(text.contains("test result: FAILED"), "{text}");
    }
    assert_ne!(evidence[0]["signature"], evidence[1]["signature"]);
    // The fix saw the failures, and the checks ran in the job's worktree.
    let calls = bench.calls("round2");
    assert_eq!(calls.len(), 2);
    assert!(
        calls[0]["prompt"]
            .as_str()
            .unwrap_or("")
            .contains("tests::adds")
    );
    let worktree = calls[0]["worktree"].as_str().expect("worktree");
    assert!(
        evidence[0]["cwd"]
            .as_str()
            .unwrap_or("")
            .starts_with(worktree),
        "{evidence:?} {worktree}"
    );
    let checkout = std::fs::read_to_string(bench.repo.path().join("src/lib.rs")).expect("lib");
    assert!(
        checkout.contains("a - b"),
        "the checkout itself is untouched"
    );

    let (code, doc) = bench.run("green-never", &bench.until_green("never"));
    assert_eq!(code, 9, "stalled exits 9: {doc}");
    let green = &doc["state"]["green"];
    assert_eq!(green["outcome"], "stalled");
    assert_eq!(green["rounds"], 1);
    let evidence = green["evidence"].as_array().expect("evidence");
    assert_eq!(evidence.len(), 2, "two identical rounds");
    assert_eq!(evidence[0]["signature"], evidence[1]["signature"]);
    assert_eq!(doc["outcome"], "stalled");

    let (code, doc) = bench.run("green-shifty", &bench.until_green("shifty"));
    assert_eq!(code, 10, "exhausted exits 10: {doc}");
    let green = &doc["state"]["green"];
    assert_eq!(green["outcome"], "exhausted");
    assert_eq!(green["rounds"], 3);
    let signatures: Vec<&str> = green["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .filter_map(|e| e["signature"].as_str())
        .collect();
    assert_eq!(signatures.len(), 4);
    let mut distinct = signatures.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "the failure changed every round");
}

#[test]
fn each_loop_terminal_state_exits_with_its_code() {
    let bench = Bench::new(None);
    let flow = |name: &str, verdict: &str, signature: &str| {
        format!(
            r#"name: {name}
tree:
  sequence:
    - set: {{ n: 0 }}
    - loop:
        max_iterations: 4
        stagnation: 3
        save: looped
        do:
          sequence:
            - set: {{ n: "{{{{ state.n + 1 }}}}" }}
            - set: {{ iteration: {{ state: "{verdict}", signature: "{signature}" }} }}
"#
        )
    };
    let cases = [
        (
            "done",
            "{{ 'done' if state.n >= 2 else 'continue' }}",
            "{{ state.n }}",
            0,
            "success",
        ),
        ("noop", "no_op", "", 7, "no_op"),
        (
            "blocked",
            "{{ 'blocked' if state.n >= 2 else 'continue' }}",
            "{{ state.n }}",
            8,
            "blocked",
        ),
        ("stuck", "continue", "same", 9, "stagnated"),
        ("long", "continue", "{{ state.n }}", 10, "exhausted"),
    ];
    for (name, verdict, signature, code, outcome) in cases {
        let (got, doc) = bench.run(name, &flow(name, verdict, signature));
        assert_eq!(got, code, "{name}: {doc}");
        assert_eq!(doc["outcome"], outcome, "{name}: {doc}");
        assert_eq!(doc["state"]["looped"]["outcome"], outcome, "{name}");
    }

    // One loop per key: a second start while the first runs answers already_running (6).
    let parked = r#"name: parked
input:
  topic: { type: string, default: x }
tree:
  loop:
    key: "watch-{{ input.topic }}"
    do:
      sequence:
        - wait: { key: go }
        - set: { iteration: done }
"#;
    let file = bench.write("parked", parked);
    let _up = Up::start_env(bench.data.path(), &[], &bench.env());
    let first = palm_env(bench.data.path(), &["submit", &file, "--json"], &[]).json();
    let job = first["job"].as_str().expect("job").to_owned();
    let second = palm_env(bench.data.path(), &["submit", &file, "--json"], &[]);
    assert_eq!(second.code, 6, "{} {}", second.stdout, second.stderr);
    assert!(
        second.stdout.contains("already_running"),
        "{}",
        second.stdout
    );
    assert!(second.stdout.contains(&job), "names the running job");
    let other = palm_env(
        bench.data.path(),
        &["submit", &file, "-i", "topic=y", "--json"],
        &[],
    );
    assert_eq!(other.code, 0, "another key starts: {}", other.stderr);
}

#[test]
fn best_of_three_picks_the_green_attempt_with_the_smallest_diff() {
    let bench = Bench::new(None);
    let flow = format!(
        r#"name: best
tree:
  sequence:
    - best_of:
        n: 3
        providers: [sloppy, bad, good]
        attempt:
          sequence:
            - agent: {{ prompt: "Make the tests pass", repo: "{repo}" }}
            - verify: {{ cmd: "{check}", parser: cargo, repo: "{repo}" }}
    # After it, the job's own worktree has the winner's change.
    - verify: {{ cmd: "{check}", parser: cargo, repo: "{repo}", save: after }}
"#,
        check = bench.check(),
        repo = bench.repo.path().display()
    );
    // With the checkout indexed, the ranking knows the risk of what each attempt touched.
    let indexed = palm_env(
        bench.data.path(),
        &["index", "--repo", &bench.repo.path().display().to_string()],
        &[],
    );
    assert_eq!(indexed.code, 0, "{}", indexed.stderr);
    let (code, doc) = bench.run("best", &flow);
    assert_eq!(code, 0, "{doc}");
    let job = doc["job"].as_str().expect("job").to_owned();
    let status = palm_env(bench.data.path(), &["status", &job, "--json"], &[]).json();
    let choice = &status["state"]["best_of"];
    assert_eq!(choice["winner"], 2, "{choice}");
    assert_eq!(choice["provider"], "good");
    assert_eq!(choice["carried"]["ok"], true, "{choice}");
    assert_eq!(
        status["state"]["after"]["ok"], true,
        "the winner carried into the job's worktree"
    );
    let ranking = choice["ranking"].as_array().expect("ranking");
    let order: Vec<&str> = ranking
        .iter()
        .filter_map(|r| r["provider"].as_str())
        .collect();
    assert_eq!(order, ["good", "sloppy", "bad"], "{choice}");
    assert_eq!(ranking[0]["tests_green"], true);
    assert!(ranking[0]["risk"].as_u64().is_some(), "{choice}");
    assert_eq!(ranking[2]["tests_green"], false);
    assert!(ranking[0]["diff_lines"].as_u64() < ranking[1]["diff_lines"].as_u64());
    let reasons = choice["reasons"].as_array().expect("reasons");
    assert!(
        reasons[0].as_str().unwrap_or("").contains("wins"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].as_str().unwrap_or("").contains("diff_size"),
        "{reasons:?}"
    );
    assert!(
        reasons[2]
            .as_str()
            .unwrap_or("")
            .contains("the attempt failed"),
        "{reasons:?}"
    );
    // Three worktrees, one per attempt; every patch stays reviewable, one is chosen.
    let worktrees: Vec<String> = ["good", "sloppy", "bad"]
        .iter()
        .map(|k| {
            bench.calls(k)[0]["worktree"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    let mut distinct = worktrees.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{worktrees:?}");
    let patches = palm_env(bench.data.path(), &["patches", "list", "--json"], &[]).json();
    let listed = patches["patches"].as_array().expect("patches");
    assert_eq!(listed.len(), 3, "{patches}");
    let chosen: Vec<&Value> = listed.iter().filter(|p| p["chosen"] == true).collect();
    assert_eq!(chosen.len(), 1);
    assert_eq!(chosen[0]["id"], choice["patch"]);
    assert!(listed.iter().all(|p| p["status"] == "pending"));
}

#[test]
fn kill_9_during_an_until_green_round_resumes_that_round_and_keeps_the_evidence() {
    // The second fix makes its edit, then hangs: the node is killed under it.
    let bench = Bench::new(Some(2));
    let file = bench.write("green-round2", &bench.until_green("round2"));
    let up = Up::start_env(bench.data.path(), &[], &bench.env());
    let submitted = palm_env(bench.data.path(), &["submit", &file, "--json"], &[]).json();
    let job = submitted["job"].as_str().expect("job").to_owned();
    assert!(
        eventually(Duration::from_secs(120), || bench.calls("round2").len()
            == 2),
        "the second round's fix started"
    );
    let before = palm_env(bench.data.path(), &["status", &job, "--json"], &[]).json();
    assert_eq!(
        before["state"]["green"]["evidence"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    up.kill9();

    let _up = Up::start_env(bench.data.path(), &[], &bench.env());
    assert!(
        eventually(Duration::from_secs(120), || {
            palm_env(bench.data.path(), &["status", &job, "--json"], &[]).json()["status"]
                == "succeeded"
        }),
        "the job finishes after the restart"
    );
    let status = palm_env(bench.data.path(), &["status", &job, "--json"], &[]).json();
    let green = &status["state"]["green"];
    assert_eq!(green["outcome"], "green");
    assert_eq!(green["rounds"], 2, "resumed at round 2, not started over");
    let evidence = green["evidence"].as_array().expect("evidence");
    assert_eq!(evidence.len(), 3);
    assert_eq!(
        evidence[0]["signature"],
        before["state"]["green"]["evidence"][0]["signature"]
    );
    assert_eq!(
        evidence[1]["signature"],
        before["state"]["green"]["evidence"][1]["signature"]
    );
    // Only the interrupted round's fix ran again: 3 calls, and 3 check logs (round 0
    // and 1 were not checked again).
    assert_eq!(bench.calls("round2").len(), 3);
    let logs = std::fs::read_dir(bench.data.path().join("artifacts").join(&job))
        .expect("artifacts")
        .count();
    assert_eq!(logs, 3);
}

#[test]
fn gates_keep_their_verdicts_and_a_skeptic_refutes_what_is_wrong() {
    let bench = Bench::new(None);
    let verdict = |approved: bool, titles: &[&str]| {
        let findings: Vec<Value> = titles
            .iter()
            .map(|t| serde_json::json!({"title": t, "file": "src/lib.rs", "line": 2}))
            .collect();
        let answer =
            serde_json::json!({"approved": approved, "reason": "looked", "findings": findings});
        std::fs::write(bench.data.path().join("verdict.json"), answer.to_string())
            .expect("verdict");
    };
    let flow = |name: &str| {
        format!(
            r#"name: {name}
tree:
  sequence:
    - agent: {{ provider: good, prompt: "Make the tests pass", repo: "{repo}" }}
    - verify: {{ cmd: "{check}", parser: cargo, repo: "{repo}", save: tests }}
    - gate:
        agent: verifier
        criteria: "the tests pass and nothing else changed"
        evidence: "{{{{ state.tests }}}}"
        repo: "{repo}"
        skeptic: true
        save: verdict
"#,
            check = bench.check(),
            repo = bench.repo.path().display()
        )
    };

    // A rejection with one real and one bogus finding: the skeptic refutes the bogus
    // one, the real one stands, the gate rejects.
    verdict(
        false,
        &["bogus: divides by zero", "real: no test for negatives"],
    );
    let (code, doc) = bench.run("gated", &flow("gated"));
    assert_eq!(code, 3, "{doc}");
    let kept = &doc["state"]["verdict"];
    assert_eq!(kept["approved"], false, "{kept}");
    assert_eq!(kept["findings"].as_array().map(Vec::len), Some(1), "{kept}");
    assert_eq!(kept["findings"][0]["title"], "real: no test for negatives");
    assert_eq!(
        kept["refuted"][0]["finding"]["title"],
        "bogus: divides by zero"
    );
    assert_eq!(kept["change"]["files"][0], "src/lib.rs");
    let calls = bench.calls("verifier");
    assert_eq!(calls.len(), 3, "the verifier and one skeptic per finding");
    assert!(calls.iter().all(|c| c["mode"] == "observe"), "{calls:?}");
    let prompt = calls[0]["prompt"].as_str().unwrap_or("");
    assert!(prompt.contains("a + b"), "the verifier sees the change");
    assert!(
        prompt.contains("\"exit_code\": 0"),
        "and the evidence: {prompt}"
    );

    // Every finding refuted: the rejection is overturned, and says so.
    verdict(false, &["bogus: overflows"]);
    let (code, doc) = bench.run("overturned", &flow("overturned"));
    assert_eq!(code, 0, "{doc}");
    let kept = &doc["state"]["verdict"];
    assert_eq!(kept["approved"], true);
    assert!(
        kept["reason"].as_str().unwrap_or("").contains("overturned"),
        "{kept}"
    );

    // A person's gate: the job waits (4) until someone approves or rejects it.
    let human = "name: human\ntree:\n  gate: { human: { key: review, prompt: \"Ship it?\" } }\n";
    let (code, doc) = bench.run("human", human);
    assert_eq!(code, 4, "{doc}");
    assert_eq!(doc["waiting_on"][0]["key"], "review");
    assert_eq!(
        doc["waiting_on"][0]["choices"],
        serde_json::json!(["approve", "reject"])
    );
    let job = doc["job"].as_str().expect("job").to_owned();
    let answered = palm_env(
        bench.data.path(),
        &[
            "continue", &job, "--key", "review", "--input", "approve", "--json",
        ],
        &[],
    );
    assert_eq!(answered.code, 0, "{}", answered.stderr);
    assert_eq!(answered.json()["state"]["review"], "approve");
    let (_, doc) = bench.run("human", human);
    let job = doc["job"].as_str().expect("job").to_owned();
    let refused = palm_env(
        bench.data.path(),
        &[
            "continue", &job, "--key", "review", "--input", "reject", "--json",
        ],
        &[],
    );
    assert_eq!(refused.code, 3);
    assert!(
        refused.stdout.contains("rejected by a person"),
        "{}",
        refused.stdout
    );
}
