//! End-to-end: the knowledge map through real `palm` processes on a scripted repository.
//! `palm knowledge build` lists modules and decisions with citations; a decision recorded
//! with `--cite` is flagged by `palm knowledge audit` once its cited line is edited (and
//! `--check` then exits 1); `why`, `search` and `context --max-bytes` answer in their
//! documented shapes; and `build --summarize` runs a declared agent CLI through an agent
//! leaf, keeps only the claims whose citations resolve, and the audit watches those too.

mod common;

use common::{data_dir, git, git_repo, palm_env};
use serde_json::Value;
use std::path::Path;

const LIB_RS: &str = "//! Durable storage of jobs: one atomic write per change.\n\npub fn open_store(path: &str) -> Store {\n    Store { path: path.to_owned() }\n}\n\npub struct Store {\n    path: String,\n}\n";

fn checkout() -> tempfile::TempDir {
    let dir = git_repo(&[
        (
            "Cargo.toml",
            "[package]\nname = \"jobs\"\nversion = \"0.1.0\"\n",
        ),
        ("src/lib.rs", LIB_RS),
        (
            "docs/adr/0001-redb.md",
            "# ADR 1: Use redb\n\n## Status\n\nAccepted\n\n## Decision\n\nJobs live in redb: embedded and durable.\n",
        ),
    ]);
    std::fs::write(dir.path().join("src/lib.rs"), format!("{LIB_RS}// x\n")).expect("edit");
    git(
        dir.path(),
        &["commit", "-q", "-am", "Revert \"Cache jobs in memory\""],
    );
    dir
}

fn knowledge(data: &Path, repo: &Path, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["knowledge"];
    all.extend_from_slice(args);
    let repo_text = repo.display().to_string();
    all.extend_from_slice(&["--repo", &repo_text, "--json"]);
    let ran = palm_env(data, &all, &[]);
    let value = serde_json::from_str(&ran.stdout).unwrap_or(Value::Null);
    (ran.code, value, format!("{}\n{}", ran.stdout, ran.stderr))
}

#[test]
fn audit_flags_a_recorded_decision_once_its_cited_line_is_edited() {
    let data = data_dir();
    let repo = checkout();
    let (code, built, out) = knowledge(data.path(), repo.path(), &["build"]);
    assert_eq!(code, 0, "{out}");
    let module = &built["modules"][0];
    assert_eq!(module["name"], "jobs", "{out}");
    assert_eq!(module["kind"], "cargo");
    assert_eq!(module["purpose"]["cite"]["file"], "src/lib.rs");
    let surface = module["surface"].as_array().expect("surface");
    let open = surface
        .iter()
        .find(|s| s["name"] == "open_store")
        .expect("open_store");
    assert_eq!(open["cite"]["file"], "src/lib.rs");
    assert_eq!(open["cite"]["line"], 3);
    let adr = built["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .find(|d| d["source"] == "adr")
        .expect("the ADR")
        .clone();
    assert_eq!(adr["cites"][1]["file"], "docs/adr/0001-redb.md");
    assert_eq!(built["incidents"][0]["kind"], "revert");
    assert_eq!(built["counts"]["modules"], 1);

    let (code, decided, out) = knowledge(
        data.path(),
        repo.path(),
        &[
            "decide",
            "A store is opened from a path and never fails",
            "--cite",
            "src/lib.rs:4",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(decided["id"], "D1");
    assert_eq!(decided["cites"][0]["line"], 4);
    let (code, _, out) = knowledge(
        data.path(),
        repo.path(),
        &["decide", "x", "--cite", "src/lib.rs:99"],
    );
    assert_eq!(code, 2, "a citation past the end is refused: {out}");
    assert!(out.contains("the file has 10 lines"), "{out}");

    let (code, clean, out) = knowledge(data.path(), repo.path(), &["audit", "--check"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(clean["flagged"], serde_json::json!([]), "{out}");
    assert!(clean["holding"].as_u64().expect("holding") >= 3);

    // Edit the cited line (and only it).
    let edited = LIB_RS.replace("path.to_owned()", "path.trim().to_owned()");
    std::fs::write(repo.path().join("src/lib.rs"), format!("{edited}// x\n")).expect("edit");
    let (code, report, out) = knowledge(data.path(), repo.path(), &["audit"]);
    assert_eq!(code, 0, "{out}");
    let flagged = report["flagged"].as_array().expect("flagged");
    let d1 = flagged
        .iter()
        .find(|c| c["id"] == "D1")
        .expect("D1 flagged");
    assert_eq!(d1["status"], "changed");
    assert_eq!(d1["cites"][0]["cite"], "src/lib.rs:4");
    assert!(
        d1["cites"][0]["now"]
            .as_str()
            .expect("now")
            .contains("trim()")
    );
    assert_eq!(flagged.len(), 1, "only the claim on that line: {report:#}");
    let (code, _, out) = knowledge(data.path(), repo.path(), &["audit", "--check"]);
    assert_eq!(code, 1, "--check fails on a flagged claim: {out}");
    let human = palm_env(
        data.path(),
        &[
            "knowledge",
            "audit",
            "--repo",
            &repo.path().display().to_string(),
        ],
        &[],
    );
    assert!(
        human.stdout.contains("changed decision D1"),
        "{}",
        human.stdout
    );

    // why answers from decisions; the replaced one names its successor.
    let (code, _, out) = knowledge(
        data.path(),
        repo.path(),
        &[
            "decide",
            "Jobs move to sqlite at the root",
            "--supersedes",
            adr["id"].as_str().expect("id"),
        ],
    );
    assert_eq!(code, 0, "{out}");
    let (code, why, out) = knowledge(data.path(), repo.path(), &["why", "why redb"]);
    assert_eq!(code, 0, "{out}");
    let answers = why["decisions"].as_array().expect("decisions");
    assert_eq!(answers[0]["id"], "D2", "{why:#}");
    assert_eq!(answers[1]["superseded_by"], "D2");

    let (code, found, out) = knowledge(data.path(), repo.path(), &["search", "open store"]);
    assert_eq!(code, 0, "{out}");
    assert!(found["hits"].as_array().expect("hits").len() <= 5);
    assert!(
        found["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .any(|h| h["id"] == "jobs")
    );

    let (code, brief, out) = knowledge(
        data.path(),
        repo.path(),
        &["context", "jobs", "--max-bytes", "600"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(brief["bytes"].as_u64().expect("bytes") <= 600);
    assert!(brief["text"].as_str().expect("text").starts_with("# jobs"));
    let (code, _, out) = knowledge(data.path(), repo.path(), &["show", "nope"]);
    assert_eq!(code, 2, "{out}");
}

#[test]
fn summaries_go_through_an_agent_leaf_and_keep_only_resolving_citations() {
    let data = data_dir();
    let repo = checkout();
    let script = data.path().join("summarizer.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat > \"$PALM_OUTPUT_FILE\" <<'JSON'\n{\"claims\": [\n {\"text\": \"open_store builds a Store from a path.\", \"cites\": [\"src/lib.rs:3-5\"]},\n {\"text\": \"It retries forever.\", \"cites\": [\"src/lib.rs:400\"]},\n {\"text\": \"It is fast.\", \"cites\": []},\n {\"text\": \"It is in a file.\", \"cites\": [\"src/lib.rs\"]},\n {\"text\": \"It is elsewhere.\", \"cites\": [\"src/nope.rs:1\"]}\n]}\nJSON\n",
    )
    .expect("script");
    std::fs::write(
        data.path().join("palm.yaml"),
        format!(
            "agents:\n  summarizer:\n    command: [sh, \"{}\"]\n",
            script.display()
        ),
    )
    .expect("config");
    let (code, built, out) = knowledge(
        data.path(),
        repo.path(),
        &["build", "--summarize", "summarizer", "--module", "jobs"],
    );
    assert_eq!(code, 0, "{out}");
    let report = &built["summarized"][0];
    assert_eq!(report["module"], "jobs", "{out}");
    assert_eq!(report["kept"], 1, "{report:#}");
    assert_eq!(report["dropped"], 4, "{report:#}");
    let reasons: Vec<&str> = report["dropped_claims"]
        .as_array()
        .expect("dropped")
        .iter()
        .filter_map(|d| d["reason"].as_str())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("the file has 10 lines")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("cites nothing")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("not a whole file")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("no longer exists")),
        "{reasons:?}"
    );
    assert!(report["job"].is_string());

    let (code, shown, out) = knowledge(data.path(), repo.path(), &["show", "jobs"]);
    assert_eq!(code, 0, "{out}");
    let claims = shown["summary"]["claims"].as_array().expect("claims");
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0]["cites"][0]["line"], 3);
    assert_eq!(shown["summary"]["provider"], "summarizer");

    std::fs::write(
        repo.path().join("src/lib.rs"),
        LIB_RS.replace(
            "pub fn open_store(path: &str)",
            "pub fn open_store(path: &Path)",
        ),
    )
    .expect("edit");
    let (_, report, out) = knowledge(data.path(), repo.path(), &["audit"]);
    let ids: Vec<&str> = report["flagged"]
        .as_array()
        .expect("flagged")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert!(ids.contains(&"summary:jobs#1"), "{ids:?}\n{out}");
}
