//! Job retention through the CLI: `palm jobs gc` offline and against a running node,
//! `retention:` in palm.yaml, compacted views, forgotten jobs, and bad input.

mod common;

use common::{Up, data_dir, example, palm};

fn job_ids(data: &std::path::Path) -> Vec<String> {
    let jobs = palm(data, &["--json", "jobs"]).json();
    jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["job"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn gc_compacts_then_forgets_ended_jobs_and_leaves_the_rest() {
    let data = data_dir();
    let hello = example("hello");
    for _ in 0..3 {
        assert_eq!(palm(data.path(), &["run", &hello]).code, 0);
    }
    // A job parked on a wait is never collected.
    let parked = palm(data.path(), &["--json", "submit", &example("approval")]).json();
    let parked = parked["job"].as_str().expect("parked job").to_owned();
    assert_eq!(job_ids(data.path()).len(), 4);
    // What a `verify` step keeps beside the store: a log under `DATA/artifacts/JOB/`.
    let artifacts = |job: &str| data.path().join("artifacts").join(job);
    let keep_log = |job: &str| {
        std::fs::create_dir_all(artifacts(job)).expect("artifacts dir");
        std::fs::write(artifacts(job).join("verify-1.log"), "ok\n").expect("log");
    };
    for job in job_ids(data.path()) {
        keep_log(&job);
    }

    // The defaults (30 days) keep everything today.
    let kept = palm(data.path(), &["--json", "jobs", "gc"]);
    assert_eq!(kept.code, 0, "{}", kept.stderr);
    assert_eq!(kept.json()["compacted"], 0);
    assert_eq!(kept.json()["artifacts_removed"], 0);

    // retention in palm.yaml: journals of ended jobs go at once.
    std::fs::write(data.path().join("palm.yaml"), "retention: 0s\n").expect("config");
    let compacted = palm(data.path(), &["--json", "jobs", "gc"]).json();
    assert_eq!(compacted["compacted"], 3, "{compacted}");
    assert!(compacted["events_removed"].as_u64().expect("events") >= 12);
    // Their artifacts go with their journals; the parked job keeps its own.
    assert_eq!(compacted["artifacts_removed"], 3, "{compacted}");
    assert_eq!(compacted["artifact_bytes_freed"], 9, "{compacted}");
    assert!(artifacts(&parked).join("verify-1.log").exists());
    let ended = job_ids(data.path())
        .into_iter()
        .find(|j| *j != parked)
        .expect("an ended job");
    let view = palm(data.path(), &["--json", "status", &ended]).json();
    assert_eq!(view["compacted"], true);
    assert_eq!(view["status"], "succeeded");
    assert!(!artifacts(&ended).exists());
    // One left behind (a crash after the compaction's commit) goes with the summary.
    keep_log(&ended);
    let human = palm(data.path(), &["status", &ended]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    assert!(human.stdout.contains("succeeded"), "{}", human.stdout);
    assert!(
        human.stdout.contains("only its summary is kept"),
        "{}",
        human.stdout
    );

    // Against a running node: summaries go too, the parked job stays.
    let node = Up::start(data.path(), &["--seats", "1"]);
    let forgotten = palm(
        data.path(),
        &[
            "--json",
            "jobs",
            "gc",
            "--keep",
            "0s",
            "--keep-summaries",
            "0s",
        ],
    )
    .json();
    assert_eq!(forgotten["forgotten"], 3, "{forgotten}");
    assert_eq!(forgotten["artifacts_removed"], 1, "{forgotten}");
    assert!(!artifacts(&ended).exists());
    assert!(artifacts(&parked).exists());
    assert_eq!(job_ids(data.path()), vec![parked.clone()]);
    let gone = palm(data.path(), &["status", &ended]);
    assert_ne!(gone.code, 0, "a forgotten job is unknown");
    drop(node);

    // Bad input says what is wrong.
    let bad = palm(data.path(), &["jobs", "gc", "--keep", "soon"]);
    assert_eq!(bad.code, 2);
    assert!(
        bad.stderr.contains("--keep `soon` is not a duration"),
        "{}",
        bad.stderr
    );
    std::fs::write(
        data.path().join("palm.yaml"),
        "retention: {journal: 7d, summary: 1h}\n",
    )
    .expect("config");
    let refused = palm(data.path(), &["jobs", "gc"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("palm.yaml:1:"),
        "{}",
        refused.stderr
    );
}
