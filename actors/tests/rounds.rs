//! The verification nodes on the job path, with the host played by hand: `until_green`
//! ends green, stalled or exhausted and keeps every round's evidence across a restart;
//! `loop` reaches each terminal state and refuses a second start of its key; `best_of`
//! runs its attempts in separate lanes and saves the ranking's choice.

mod support;

use palm_actors::job::JobStatus;
use palm_actors::path::{ClaimedEffect, FlowRef, SubmitError, SubmitRequest};
use serde_json::{Value, json};
use support::Host;

const UNTIL_GREEN: &str = r#"
name: fixer
tree:
  until_green:
    verify: { cmd: "cargo test", parser: cargo, repo: /tmp/repo }
    fix:
      call: { provider: fixer, args: { failures: "{{ failures }}", round: "{{ round }}" } }
    max_rounds: 3
    save: green
"#;

fn red(names: &[&str]) -> Value {
    let failures: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "file": "src/lib.rs", "line": 3, "message": "boom"}))
        .collect();
    json!({"ok": false, "exit_code": 101, "failures": failures, "signature": names.join("+"), "duration_ms": 5, "log": "/x.log"})
}

fn green() -> Value {
    json!({"ok": true, "exit_code": 0, "failures": [], "signature": "", "duration_ms": 5, "log": "/y.log"})
}

/// Claims the one effect in flight and checks which provider it calls.
fn next_call(host: &mut Host, provider: &str) -> (ClaimedEffect, Value) {
    let effect = host.claim().expect("an effect in flight");
    let (name, args) = Host::call_of(&effect);
    assert_eq!(name, provider, "{args}");
    (effect, args)
}

#[test]
fn until_green_fixes_in_round_two_and_keeps_every_rounds_evidence() {
    let mut host = Host::new();
    let job = host.submit_source(UNTIL_GREEN, json!({})).job;
    let (check, args) = next_call(&mut host, "verify");
    assert_eq!(args["cmd"], "cargo test");
    assert_eq!(args["parser"], "cargo");
    assert_eq!(
        host.complete_call(&check, false, red(&["a"])),
        JobStatus::Running
    );
    let (fix, args) = next_call(&mut host, "fixer");
    assert_eq!(args["round"], 1);
    assert_eq!(args["failures"][0]["name"], "a", "{args}");
    host.complete_call(&fix, true, json!({}));
    let (check, _) = next_call(&mut host, "verify");
    host.complete_call(&check, false, red(&["b"]));
    let (fix, args) = next_call(&mut host, "fixer");
    assert_eq!(args["round"], 2);
    host.complete_call(&fix, true, json!({}));
    let (check, _) = next_call(&mut host, "verify");
    assert_eq!(
        host.complete_call(&check, true, green()),
        JobStatus::Succeeded
    );
    let view = host.view(&job);
    assert_eq!(view.state["green"]["outcome"], "green");
    assert_eq!(view.state["green"]["rounds"], 2);
    let evidence = view.state["green"]["evidence"]
        .as_array()
        .expect("evidence");
    assert_eq!(evidence.len(), 3);
    assert_eq!(evidence[0]["signature"], "a");
    assert_eq!(evidence[0]["fix"], "succeeded");
    assert_eq!(evidence[2]["ok"], true);
    assert_eq!(view.outcome.as_deref(), Some("green"));
}

#[test]
fn until_green_stalls_on_two_identical_rounds() {
    let mut host = Host::new();
    let job = host.submit_source(UNTIL_GREEN, json!({})).job;
    let (check, _) = next_call(&mut host, "verify");
    host.complete_call(&check, false, red(&["a", "b"]));
    let (fix, _) = next_call(&mut host, "fixer");
    host.complete_call(&fix, false, json!({}));
    let (check, _) = next_call(&mut host, "verify");
    assert_eq!(
        host.complete_call(&check, false, red(&["a", "b"])),
        JobStatus::Failed
    );
    let view = host.view(&job);
    assert_eq!(view.state["green"]["outcome"], "stalled");
    assert_eq!(view.state["green"]["rounds"], 1);
    assert_eq!(view.state["green"]["evidence"][0]["fix"], "failed");
    assert_eq!(view.outcome.as_deref(), Some("stalled"));
    assert!(view.error.unwrap_or_default().contains("stalled"));
}

#[test]
fn until_green_is_exhausted_at_max_rounds_and_resumes_its_round_after_a_restart() {
    let mut host = Host::new();
    let job = host.submit_source(UNTIL_GREEN, json!({})).job;
    for (round, name) in ["a", "b", "c"].iter().enumerate() {
        let (check, _) = next_call(&mut host, "verify");
        host.complete_call(&check, false, red(&[name]));
        let (fix, args) = next_call(&mut host, "fixer");
        assert_eq!(args["round"], round + 1);
        if round == 1 {
            // A crash with the round's fix in flight: the restarted path replays the
            // journal and the fix is claimed again, with the evidence of both checks.
            host = host.restart();
            let view = host.view(&job);
            assert_eq!(
                view.state["green"]["evidence"].as_array().map(Vec::len),
                Some(2)
            );
            let (again, args) = next_call(&mut host, "fixer");
            assert_eq!(args["round"], 2);
            assert_eq!(again.key, fix.key, "the same effect, run again");
            host.complete_call(&again, true, json!({}));
            continue;
        }
        host.complete_call(&fix, true, json!({}));
    }
    let (check, _) = next_call(&mut host, "verify");
    assert_eq!(
        host.complete_call(&check, false, red(&["d"])),
        JobStatus::Failed
    );
    let view = host.view(&job);
    assert_eq!(view.state["green"]["outcome"], "exhausted");
    assert_eq!(view.state["green"]["rounds"], 3);
    assert_eq!(
        view.state["green"]["evidence"].as_array().map(Vec::len),
        Some(4)
    );
    assert_eq!(view.outcome.as_deref(), Some("exhausted"));
}

const LOOP: &str = r#"
name: looper
input:
  topic: { type: string, default: main }
tree:
  loop:
    key: "loop-{{ input.topic }}"
    max_iterations: 4
    stagnation: 3
    max_errors: 2
    save: summary
    do:
      call: { provider: step, save: iteration }
"#;

/// An iteration's (call succeeded, report) in order.
type Reports = Vec<(bool, Value)>;

fn run_loop(reports: &[(bool, Value)]) -> (Host, String, JobStatus) {
    let mut host = Host::new();
    let job = host.submit_source(LOOP, json!({})).job;
    let mut status = JobStatus::Running;
    for (ok, report) in reports {
        assert_eq!(status, JobStatus::Running, "the loop ended early");
        let (step, _) = next_call(&mut host, "step");
        status = host.complete_call(&step, *ok, report.clone());
    }
    (host, job, status)
}

#[test]
fn a_loop_reaches_each_terminal_state() {
    let cont = |sig: &str| (true, json!({"state": "continue", "signature": sig}));
    let cases: Vec<(Reports, JobStatus, &str)> = vec![
        (
            vec![cont("a"), (true, json!({"state": "done"}))],
            JobStatus::Succeeded,
            "success",
        ),
        (
            vec![(true, json!({"state": "no_op"}))],
            JobStatus::Succeeded,
            "no_op",
        ),
        (
            vec![cont("a"), (true, json!({"state": "blocked"}))],
            JobStatus::Failed,
            "blocked",
        ),
        (
            vec![cont("s"), cont("s"), cont("s")],
            JobStatus::Failed,
            "stagnated",
        ),
        (
            vec![cont("a"), cont("b"), cont("c"), cont("d")],
            JobStatus::Failed,
            "exhausted",
        ),
        // An errored iteration neither advances the loop nor resets stagnation: two
        // equal signatures, an error, a third equal one stagnates.
        (
            vec![cont("s"), cont("s"), (false, json!(null)), cont("s")],
            JobStatus::Failed,
            "stagnated",
        ),
        // Errors in a row past max_errors exhaust it.
        (
            vec![(false, json!(null)), (false, json!(null))],
            JobStatus::Failed,
            "exhausted",
        ),
        // A report without a state is an error too.
        (
            vec![(true, json!({"nope": 1})), (true, json!("done"))],
            JobStatus::Succeeded,
            "success",
        ),
        // A script's printed JSON (a saved `run` result) and an agent's structured answer
        // report too.
        (
            vec![
                (
                    true,
                    json!({"exit_code": 0, "stdout": "working\n{\"state\": \"continue\", \"signature\": \"x\"}\n"}),
                ),
                (
                    true,
                    json!({"end": "success", "structured": {"state": "blocked"}}),
                ),
            ],
            JobStatus::Failed,
            "blocked",
        ),
    ];
    for (reports, expected_status, expected_outcome) in cases {
        let (mut host, job, status) = run_loop(&reports);
        assert_eq!(status, expected_status, "{reports:?}");
        let view = host.view(&job);
        assert_eq!(
            view.outcome.as_deref(),
            Some(expected_outcome),
            "{reports:?}"
        );
        assert_eq!(view.state["summary"]["outcome"], expected_outcome);
    }
}

#[test]
fn one_loop_per_key_runs_at_a_time() {
    let (mut host, first, _) = run_loop(&[]);
    let submit = |host: &mut Host, topic: &str| {
        let mut input = serde_json::Map::new();
        input.insert("topic".into(), json!(topic));
        host.path.submit(
            host.now,
            SubmitRequest {
                flow: FlowRef::Source {
                    source: LOOP.to_owned(),
                    origin: "test.yaml".to_owned(),
                },
                input,
                args: Vec::new(),
                started_by: None,
            },
            &*host.store.clone(),
        )
    };
    match submit(&mut host, "main") {
        Err(SubmitError::AlreadyRunning { key, job }) => {
            assert_eq!(key, "loop-main");
            assert_eq!(job, first);
        }
        other => panic!("a second start must be refused: {other:?}"),
    }
    assert!(submit(&mut host, "other").is_ok(), "another key runs");
    host.commit();
    // Once the first has ended, its key is free again.
    let (step, _) = next_call(&mut host, "step");
    host.complete_call(&step, true, json!({"state": "done"}));
    assert_eq!(host.view(&first).status, JobStatus::Succeeded);
    assert!(submit(&mut host, "main").is_ok());
}

const BEST_OF: &str = r#"
name: best
tree:
  best_of:
    n: 3
    providers: [good, sloppy]
    attempt:
      sequence:
        - agent: { prompt: "fix it", repo: /tmp/repo }
        - verify: { cmd: "cargo test", repo: /tmp/repo }
"#;

#[test]
fn best_of_runs_attempts_in_their_lanes_and_saves_the_choice() {
    let mut host = Host::new();
    let job = host.submit_source(BEST_OF, json!({})).job;
    let agents = host.claim_all();
    assert_eq!(agents.len(), 3, "all attempts start at once");
    let mut lanes = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let (provider, args) = Host::call_of(agent);
        assert_eq!(provider, "agent");
        assert_eq!(args["provider"], ["good", "sloppy", "good"][i]);
        lanes.push(args["lane"].as_str().expect("a lane").to_owned());
        let patch = json!({"id": format!("p{i}"), "status": "pending", "files": ["a.rs"], "added": 10 - i, "removed": 0});
        host.complete_call(
            agent,
            true,
            json!({"provider": args["provider"], "end": "success", "patch": patch}),
        );
    }
    lanes.dedup();
    assert_eq!(lanes.len(), 3, "each attempt has its own lane: {lanes:?}");
    for (i, check) in host.claim_all().iter().enumerate() {
        let (provider, args) = Host::call_of(check);
        assert_eq!(provider, "verify");
        assert_eq!(args["lane"], lanes[i]);
        host.complete_call(check, i != 1, if i == 1 { red(&["t"]) } else { green() });
    }
    let (rank, args) = next_call(&mut host, "best_of");
    let attempts = args["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 3);
    assert_eq!(attempts[1]["status"], "failed");
    assert_eq!(attempts[2]["facts"][0]["patch"]["id"], "p2");
    assert_eq!(attempts[2]["facts"][1]["ok"], true);
    assert_eq!(
        args["rank"],
        json!(["gates", "verify", "diff_size", "risk"])
    );
    let choice = json!({"winner": 2, "reasons": ["attempt 2 (good) wins"]});
    assert_eq!(
        host.complete_call(&rank, true, choice.clone()),
        JobStatus::Succeeded
    );
    assert_eq!(host.view(&job).state["best_of"], choice);
}

/// A subflow inlined into an attempt works in the attempt's lane too: its leaves were
/// parsed on their own, outside any `best_of`, so the compiler gives them the lane.
#[test]
fn an_attempt_s_subflow_works_in_the_attempt_s_lane() {
    let mut host = Host::new();
    host.path
        .add_definition(
            host.now,
            "name: fix-and-check\ntree:\n  sequence:\n    - agent: { provider: good, prompt: \"fix it\", repo: /tmp/repo }\n    - verify: { cmd: \"cargo test\", repo: /tmp/repo }\n",
            "fix-and-check.yaml",
        )
        .expect("the subflow");
    host.commit();
    host.submit_source(
        "name: best-sub\ntree:\n  best_of:\n    n: 2\n    attempt:\n      subflow: fix-and-check\n",
        json!({}),
    );
    let agents = host.claim_all();
    assert_eq!(agents.len(), 2, "both attempts start at once");
    let mut lanes = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let (provider, args) = Host::call_of(agent);
        assert_eq!(provider, "agent");
        lanes.push(
            args["lane"]
                .as_str()
                .expect("a lane in the subflow's agent")
                .to_owned(),
        );
        let patch = json!({"id": format!("p{i}"), "status": "pending", "files": ["a.rs"], "added": 1, "removed": 0});
        host.complete_call(
            agent,
            true,
            json!({"provider": "good", "end": "success", "patch": patch}),
        );
    }
    lanes.dedup();
    assert_eq!(lanes.len(), 2, "each attempt has its own lane: {lanes:?}");
    for (i, check) in host.claim_all().iter().enumerate() {
        let (provider, args) = Host::call_of(check);
        assert_eq!(provider, "verify");
        assert_eq!(
            args["lane"], lanes[i],
            "the subflow's check runs in its attempt's lane"
        );
    }
    // Outside an attempt, the same subflow works in the job's own worktree.
    host.submit_source(
        "name: plain-sub\ntree:\n  subflow: fix-and-check\n",
        json!({}),
    );
    let (provider, args) = Host::call_of(&host.claim().expect("the plain agent"));
    assert_eq!(provider, "agent");
    assert!(args.get("lane").is_none(), "{args}");
}

#[test]
fn verification_nodes_refuse_bad_shapes_with_their_line() {
    let cases = [
        (
            "tree:\n  verify: { cmd: x, parser: nose }\n",
            "`parser` must be one of",
        ),
        (
            "tree:\n  until_green: { verify: x }\n",
            "missing field `fix`",
        ),
        ("tree:\n  gate: { criteria: x }\n", "needs `agent:`"),
        (
            "tree:\n  gate: { human: true, agent: claude }\n",
            "not both",
        ),
        (
            "tree:\n  loop: { do: { succeed: } , max_iterations: 0 }\n",
            "at least 1",
        ),
        (
            "tree:\n  best_of: { n: 2, attempt: { agent: { prompt: x } } }\n",
            "missing field `provider`",
        ),
        (
            "tree:\n  best_of: { n: 2, rank: [speed], attempt: { succeed: } }\n",
            "`rank` takes",
        ),
        (
            "tree:\n  until_green: { verify: x, fix: { run: \"echo {{ nothing }}\" } }\n",
            "unknown name `nothing`",
        ),
    ];
    for (body, expected) in cases {
        let source = format!("name: bad\n{body}");
        let errors = palm_actors::definition::parse(&source, "bad.yaml").expect_err(body);
        let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert!(
            text.iter()
                .any(|t| t.contains(expected) && t.starts_with("bad.yaml:")),
            "{body}: {text:?}"
        );
    }
    // Inside until_green's fix, `failures`, `verify` and `round` are known names.
    let source = "name: ok\ntree:\n  until_green: { verify: x, fix: { run: \"echo {{ round }} {{ failures }} {{ verify.signature }}\" } }\n";
    assert!(palm_actors::definition::parse(source, "ok.yaml").is_ok());
}

const TEAM: &str = r#"
name: crew
tree:
  team:
    members: [{name: alice, provider: claude}, {name: bob, provider: codex}]
    tasks:
      - { id: a, title: "lay the base" }
      - { id: b, title: "build on it", depends_on: [a] }
      - { id: c, title: "on the side" }
    repo: /tmp/repo
    check: { cmd: "make test" }
    max_turns: 3
"#;

fn turn(done: bool, messages: Value) -> Value {
    json!({"end": "success", "cost_usd": 0.5, "structured": {"done": done, "summary": "did it", "messages": messages}})
}

fn member_of(args: &Value) -> (String, String) {
    let prompt = args["prompt"].as_str().unwrap_or("").to_owned();
    let who = prompt
        .strip_prefix("You are ")
        .and_then(|p| p.split(',').next())
        .unwrap_or("")
        .to_owned();
    let task = prompt
        .split("Your task now: [")
        .nth(1)
        .and_then(|p| p.split(']').next())
        .unwrap_or("")
        .to_owned();
    (who, task)
}

#[test]
fn a_team_works_its_board_in_dependency_order_survives_a_restart_and_parks_on_budget() {
    let mut host = Host::new();
    let job = host.submit_source(TEAM, json!({})).job;
    let ok = || json!({"ok": true, "failures": []});
    // One turn at a time (the members share a worktree): alice takes a.
    let first = host.claim_all();
    assert_eq!(first.len(), 1);
    assert_eq!(
        member_of(&Host::call_of(&first[0]).1),
        ("alice".into(), "a".into())
    );
    // Alice finishes a and tells bob; its completion gate (a check) runs next.
    host.complete_call(
        &first[0],
        true,
        turn(true, json!([{"to": "bob", "text": "a is in"}])),
    );
    let check = host.claim().expect("a's check");
    let (provider, args) = Host::call_of(&check);
    assert_eq!(provider, "verify");
    assert_eq!(
        args["repo"], "/tmp/repo",
        "the check runs where the members worked"
    );
    // A crash with a's check in flight: it runs again, nothing done is done again.
    host = host.restart();
    let again = host.claim_all();
    assert_eq!(again.len(), 1, "only the check, run again");
    assert_eq!(again[0].key, check.key);
    host.complete_call(&again[0], true, ok());
    // Bob's turn (turns go round): b is ready now, and alice's message is in his prompt.
    let b_turn = host.claim().expect("b's turn");
    let args = Host::call_of(&b_turn).1;
    assert_eq!(member_of(&args), ("bob".into(), "b".into()));
    assert_eq!(args["provider"], "codex");
    let prompt = args["prompt"].as_str().unwrap_or("");
    assert!(prompt.contains("from alice: a is in"), "{prompt}");
    // b fails its check: reopened, and alice (next in turn) takes it again.
    host.complete_call(&b_turn, true, turn(true, json!([])));
    let b_check = host.claim().expect("b's check");
    host.complete_call(
        &b_check,
        false,
        json!({"ok": false, "failures": [{"name": "t::b"}]}),
    );
    let retry = host.claim().expect("b again");
    let args = Host::call_of(&retry).1;
    assert_eq!(member_of(&args), ("alice".into(), "b".into()));
    let prompt = args["prompt"].as_str().unwrap_or("");
    assert!(
        prompt.contains("did not pass: the check failed: t::b"),
        "{prompt}"
    );
    host.complete_call(&retry, true, turn(true, json!([])));
    let check = host.claim().expect("b's check again");
    // Three turns taken of three: c is ready but the team parks.
    assert_eq!(host.complete_call(&check, true, ok()), JobStatus::Waiting);
    let view = host.view(&job);
    let board = &view.state["board"];
    assert_eq!(board["parked"], "budget", "{board}");
    assert_eq!(board["turns"], 3);
    let statuses: Vec<&str> = board["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["status"].as_str())
        .collect();
    assert_eq!(statuses, ["done", "done", "open"]);
    assert_eq!(board["mailbox"][0]["from"], "alice");
    assert_eq!(board["mailbox"][0]["to"], "bob");
    assert_eq!(board["mailbox"][0]["seq"], 1);
    // An op the team does not know is refused before anything is written.
    let store = host.store.clone();
    let refused = host
        .path
        .continue_job(host.now, &job, "team", json!({"op": "dance"}), &*store);
    assert!(
        format!("{refused:?}").contains("InvalidInput"),
        "{refused:?}"
    );
    // A person posts and gives more turns: bob takes c, with the post in his prompt.
    for op in [
        json!({"op": "post", "text": "go on"}),
        json!({"op": "budget", "turns": 2}),
    ] {
        host.path
            .continue_job(host.now, &job, "team", op, &*store)
            .expect("a post");
        host.commit();
    }
    let c_turn = host.claim().expect("c's turn");
    let args = Host::call_of(&c_turn).1;
    assert_eq!(member_of(&args), ("bob".into(), "c".into()));
    assert!(
        args["prompt"]
            .as_str()
            .unwrap_or("")
            .contains("from person: go on")
    );
    // The flow's spending budget runs out in that turn: not c's fault, the team parks.
    assert_eq!(
        host.complete_call(&c_turn, false, json!({"end": "budget"})),
        JobStatus::Waiting
    );
    let board = &host.view(&job).state["board"];
    assert_eq!(board["out_of_budget"], true);
    assert_eq!(board["tasks"][2]["attempts"], 0);
    host.path
        .continue_job(
            host.now,
            &job,
            "team",
            json!({"op": "budget", "turns": 1}),
            &*store,
        )
        .expect("more budget");
    host.commit();
    let c_turn = host.claim().expect("c again");
    assert_eq!(member_of(&Host::call_of(&c_turn).1).1, "c");
    host.complete_call(&c_turn, true, turn(true, json!([])));
    let check = host.claim().expect("c's check");
    assert_eq!(host.complete_call(&check, true, ok()), JobStatus::Succeeded);
    let board = &host.view(&job).state["board"];
    assert_eq!(board["turns"], 4);
    assert!(
        board["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .all(|t| t["status"] == "done")
    );
}
