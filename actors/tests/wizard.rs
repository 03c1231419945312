//! The `wizard` construct on the job path: each step a parked wait whose schema allows
//! exactly its moves; back-tracking, branches, a collection, protected steps; answers
//! kept across a restart; one commit, refused a second time; compensation when the
//! commit fails; flows that cannot work refused with their line.

mod support;

use palm_actors::job::JobStatus;
use palm_actors::path::JobError;
use serde_json::{Value, json};
use support::{Host, example};

/// The current step, as the wait's schema carries it (`x-palm-wizard`).
fn step(host: &mut Host, job: &str) -> Value {
    let view = host.view(job);
    assert_eq!(view.waiting_on.len(), 1, "one step at a time");
    let schema = view.waiting_on[0].schema.clone().expect("schema").0;
    schema["x-palm-wizard"].clone()
}

fn send(host: &mut Host, job: &str, input: Value) -> Result<JobStatus, JobError> {
    let store = host.store.clone();
    let answered = host
        .path
        .continue_job(host.now, job, "service", input, &*store);
    host.commit();
    answered
}

fn answer(host: &mut Host, job: &str, input: Value) -> JobStatus {
    send(host, job, input.clone()).unwrap_or_else(|e| panic!("{input}: {e:?}"))
}

#[test]
fn the_example_wizard_goes_back_branches_collects_survives_a_restart_and_commits_once() {
    let mut host = Host::new();
    let job = host.submit_source(&example("wizard"), json!({})).job;
    let first = step(&mut host, &job);
    assert_eq!(
        (&first["step"], &first["kind"], &first["n"], &first["of"]),
        (&json!("name"), &json!("input"), &json!(1), &json!(6))
    );
    assert_eq!(first["default"], "billing");
    assert_eq!(first["back"], json!([]), "nothing to go back to yet");
    // A wrong answer is refused before anything is written; so is a back with nowhere
    // to go.
    assert!(send(&mut host, &job, json!({"answer": ""})).is_err());
    assert!(send(&mut host, &job, json!({"back": true})).is_err());
    assert_eq!(
        answer(&mut host, &job, json!({"answer": "ledger"})),
        JobStatus::Waiting
    );
    let language = step(&mut host, &job);
    assert_eq!(
        (&language["step"], &language["n"]),
        (&json!("language"), &json!(2))
    );
    assert_eq!(language["options"], json!(["rust", "go", "python"]));
    assert!(send(&mut host, &job, json!({"answer": "cobol"})).is_err());
    answer(&mut host, &job, json!({"answer": "rust"}));
    // Rust: the branch goes on to the edition.
    assert_eq!(step(&mut host, &job)["step"], "edition");
    answer(&mut host, &job, json!({"answer": "2021"}));
    assert_eq!(step(&mut host, &job)["step"], "features");
    // Back twice: to the edition, then to the language, whose answer is proposed again.
    answer(&mut host, &job, json!({"back": true}));
    let edition = step(&mut host, &job);
    assert_eq!(
        (&edition["step"], &edition["default"]),
        (&json!("edition"), &json!("2021"))
    );
    answer(&mut host, &job, json!({"back": "language"}));
    let again = step(&mut host, &job);
    assert_eq!(
        (&again["step"], &again["default"]),
        (&json!("language"), &json!("rust"))
    );
    assert_eq!(again["back"], json!(["name"]));
    // Go instead: the branch skips the edition.
    answer(&mut host, &job, json!({"answer": "go"}));
    assert_eq!(step(&mut host, &job)["step"], "features");
    answer(&mut host, &job, json!({"answer": ["metrics", "auth"]}));
    // The collection: add, add, edit, remove; done only once it holds one item.
    let endpoints = step(&mut host, &job);
    assert_eq!(
        (&endpoints["step"], &endpoints["n"]),
        (&json!("endpoints"), &json!(5))
    );
    assert!(
        send(&mut host, &job, json!({"done": true})).is_err(),
        "min 1"
    );
    answer(&mut host, &job, json!({"add": "/invoices"}));
    answer(&mut host, &job, json!({"add": "/refunds"}));
    // A crash between two steps loses no answer.
    host = host.restart();
    answer(
        &mut host,
        &job,
        json!({"edit": {"index": 1, "item": "/credits"}}),
    );
    answer(&mut host, &job, json!({"add": "/x"}));
    assert!(
        send(&mut host, &job, json!({"remove": 3})).is_err(),
        "no item 3"
    );
    answer(&mut host, &job, json!({"remove": 2}));
    assert_eq!(
        step(&mut host, &job)["items"],
        json!(["/invoices", "/credits"])
    );
    answer(&mut host, &job, json!({"done": true}));
    let review = step(&mut host, &job);
    assert_eq!(
        (&review["step"], &review["n"]),
        (&json!("review"), &json!(6))
    );
    assert_eq!(
        review["answers"]["endpoints"],
        json!(["/invoices", "/credits"])
    );
    assert_eq!(
        host.view(&job).waiting_on[0].prompt.as_deref(),
        Some("Create ledger?")
    );
    // Nothing ran before the commit.
    assert!(host.claim().is_none(), "no effect before commit");
    assert_eq!(
        answer(&mut host, &job, json!({"commit": true})),
        JobStatus::Running
    );
    // Submitted twice: the second is refused, the commit runs once.
    assert!(send(&mut host, &job, json!({"commit": true})).is_err());
    let commit = host.claim().expect("the commit");
    assert!(host.claim().is_none(), "one commit");
    let cmd = Host::cmd(&commit);
    assert!(
        cmd.contains("created ledger (go) with 2 endpoints"),
        "{cmd}"
    );
    assert_eq!(
        host.complete_run(&commit, 0, "created\n"),
        JobStatus::Succeeded
    );
    let state = host.view(&job).state;
    // The edition answered on the rust path is no longer on the path taken: dropped.
    assert_eq!(
        state["service"],
        json!({"name": "ledger", "language": "go", "features": ["metrics", "auth"],
               "endpoints": ["/invoices", "/credits"]})
    );
}

const GUARDED: &str = r#"
name: guarded
tree:
  wizard:
    key: service
    steps:
      - input: {id: a, schema: {type: integer}}
      - input: {id: b, protected: true}
      - input: {id: c}
      - collection: {id: d, item: {type: integer}, max: 2}
      - summary: {id: review}
    commit: {run: "exit 3"}
    compensate: {run: "echo undo {{ state.service.a }}"}
"#;

#[test]
fn a_protected_step_is_a_wall_and_a_failed_commit_is_compensated() {
    let mut host = Host::new();
    let job = host.submit_source(GUARDED, json!({})).job;
    answer(&mut host, &job, json!({"answer": 7}));
    assert_eq!(step(&mut host, &job)["back"], json!(["a"]));
    answer(&mut host, &job, json!({"answer": "kept"}));
    // Past b (protected): neither b nor a reopens.
    let c = step(&mut host, &job);
    assert_eq!(c["back"], json!([]));
    assert!(send(&mut host, &job, json!({"back": "a"})).is_err());
    answer(&mut host, &job, json!({"answer": null}));
    // A whole list at once, checked against min, max and the item schema.
    assert!(send(&mut host, &job, json!({"answer": [1, 2, 3]})).is_err());
    assert!(send(&mut host, &job, json!({"answer": ["x"]})).is_err());
    answer(&mut host, &job, json!({"answer": [1, 2]}));
    let review = step(&mut host, &job);
    assert_eq!(review["back"], json!(["c", "d"]));
    answer(&mut host, &job, json!({"commit": true}));
    let commit = host.claim().expect("commit");
    assert_eq!(host.complete_run(&commit, 3, ""), JobStatus::Running);
    let undo = host.claim().expect("compensation");
    assert_eq!(Host::cmd(&undo), "echo undo 7");
    assert_eq!(host.complete_run(&undo, 0, "undo\n"), JobStatus::Failed);
    let error = host.view(&job).error.unwrap_or_default();
    assert!(error.contains("compensated"), "{error}");
}

#[test]
fn wizards_that_cannot_work_are_refused_with_their_line() {
    let cases = [
        (
            "      - branch: {id: r, cases: [{when: \"true\", goto: a}]}\n      - input: {id: a}\n      - branch: {id: s, cases: [{when: \"true\", goto: a}]}\n",
            "not after it",
        ),
        (
            "      - branch: {id: r, cases: [{when: \"true\", goto: nowhere}]}\n      - input: {id: a}\n",
            "which is no step",
        ),
        (
            "      - input: {id: a}\n      - input: {id: a}\n",
            "duplicate step id `a`",
        ),
        ("      - ask: {id: a}\n", "unknown step type `ask`"),
        ("      - collection: {id: a, min: 3, max: 2}\n", "min ≤ max"),
        ("      - choice: {id: a, options: []}\n", "non-empty list"),
    ];
    for (steps, expected) in cases {
        let source = format!(
            "name: w\ntree:\n  wizard:\n    key: k\n    steps:\n{steps}    commit: succeed\n"
        );
        let err = palm_actors::definition::parse(&source, "w.yaml")
            .err()
            .unwrap_or_else(|| panic!("accepted: {source}"));
        let text = format!("{err:?}");
        assert!(text.contains(expected), "{expected}: {text}");
    }
}
