//! The knowledge map on a scripted repository: packages and directories become modules
//! with cited purposes and surfaces; ADRs, `Decision:` notes and commit messages become
//! decisions; reverts and hotfixes become incident candidates; a recorded decision can
//! supersede a mined one; an audit flags a claim once its cited line is edited (and only
//! then), tells a moved line from a changed one, and sees a deleted file; `why`, `search`
//! and `context` answer from it within their bounds.

use palm_intel::Intel;
use palm_intel::knowledge::{Knowledge, brief, find};
use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) {
    let output = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "Ada")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .output()
        .expect("git");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn write(root: &Path, path: &str, text: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn commit(root: &Path, message: &str) {
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", message]);
}

const STORE_RS: &str = "//! Durable storage of jobs: one atomic write per change.\n\npub fn open_store(path: &str) -> Store {\n    Store { path: path.to_owned() }\n}\n\npub struct Store {\n    path: String,\n}\n";

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    git(root, &["init", "-q"]);
    write(
        root,
        "Cargo.toml",
        "[workspace]\nmembers = [\"store\", \"app\"]\n",
    );
    write(
        root,
        "store/Cargo.toml",
        "[package]\nname = \"jobs-store\"\nversion = \"0.1.0\"\n",
    );
    write(root, "store/src/lib.rs", STORE_RS);
    write(
        root,
        "app/Cargo.toml",
        "[package]\nname = \"jobs-app\"\nversion = \"0.1.0\"\n",
    );
    write(
        root,
        "app/src/main.rs",
        "//! The jobs command line.\n\nuse jobs_store::open_store;\n\n// Decision: the app opens one store per process\nfn main() {\n    let _s = open_store(\"x\");\n}\n",
    );
    write(
        root,
        "docs/adr/0001-redb.md",
        "# ADR 1: Use redb for jobs\n\n## Status\n\nAccepted\n\n## Decision\n\nWe store jobs in redb because it is embedded and durable.\n\n## Consequences\n\nOne file per node.\n",
    );
    commit(root, "Store and app");
    write(root, "store/src/lib.rs", &format!("{STORE_RS}// more\n"));
    commit(
        root,
        "Cache off\n\nWe chose to keep the cache off until the store is measured.",
    );
    write(root, "store/src/lib.rs", STORE_RS);
    commit(root, "hotfix: store crashed on empty paths");
    dir
}

fn build(root: &Path) -> (Intel, Knowledge) {
    let intel = Intel::open(root).expect("open");
    let mut warnings = Vec::new();
    let snapshot = intel.snapshot(&mut warnings).expect("snapshot");
    let k = Knowledge::build(&snapshot, intel.repository()).expect("build");
    (intel, k)
}

#[test]
fn modules_decisions_and_incidents_are_found_and_cited() {
    let dir = repo();
    let (_intel, k) = build(dir.path());
    let names: Vec<&str> = k.map.modules.iter().map(|m| m.name.as_str()).collect();
    assert!(names.contains(&"jobs-store"), "{names:?}");
    assert!(names.contains(&"jobs-app"), "{names:?}");
    assert!(names.contains(&"docs"), "{names:?}");
    let store = k.module("jobs-store").expect("store");
    assert_eq!(store.kind, "cargo");
    assert_eq!(store.path, "store");
    let purpose = store.purpose.as_ref().expect("purpose");
    assert!(
        purpose.text.starts_with("Durable storage of jobs"),
        "{}",
        purpose.text
    );
    assert_eq!(purpose.cite.label(), "store/src/lib.rs:1");
    let open = store
        .surface
        .iter()
        .find(|s| s.name == "open_store")
        .expect("open_store in the surface");
    assert_eq!(open.cite.label(), "store/src/lib.rs:3");
    assert_eq!(open.references, 1, "used by the app");
    assert_eq!(store.used_by, vec!["jobs-app".to_owned()]);
    assert_eq!(store.owners[0].name, "Ada");
    assert_eq!(store.churn, 3);
    // A file inside resolves to its module; an unknown name says so.
    assert_eq!(
        k.module("store/src/lib.rs").expect("by file").name,
        "jobs-store"
    );
    assert!(k.module("nope").is_err());

    let decisions = k.decisions();
    let adr = decisions
        .iter()
        .find(|d| d.source == "adr")
        .expect("the ADR");
    assert_eq!(adr.title, "ADR 1: Use redb for jobs");
    assert_eq!(adr.adr_status.as_deref(), Some("Accepted"));
    assert!(adr.text.contains("embedded and durable"));
    let labels: Vec<String> = adr.cites.iter().map(|c| c.label()).collect();
    assert_eq!(
        labels,
        ["docs/adr/0001-redb.md:1", "docs/adr/0001-redb.md:9"]
    );
    let note = decisions
        .iter()
        .find(|d| d.source == "note")
        .expect("the note");
    assert_eq!(note.text, "the app opens one store per process");
    assert_eq!(note.cites[0].label(), "app/src/main.rs:5");
    assert_eq!(note.modules, ["jobs-app"]);
    let chosen = decisions
        .iter()
        .find(|d| d.source == "commit")
        .expect("the commit decision");
    assert!(
        chosen.text.starts_with("We chose to keep the cache off"),
        "{}",
        chosen.text
    );
    assert!(chosen.cites[0].commit.is_some());
    assert_eq!(chosen.modules, ["jobs-store"]);

    assert_eq!(k.map.incidents.len(), 1, "{:?}", k.map.incidents);
    let incident = &k.map.incidents[0];
    assert_eq!(incident.kind, "hotfix");
    assert_eq!(incident.files, ["store/src/lib.rs"]);
    assert_eq!(incident.modules, ["jobs-store"]);
    assert!(!incident.confirmed);
}

#[test]
fn an_audit_flags_a_claim_once_its_cited_line_is_edited() {
    let dir = repo();
    let root = dir.path();
    let (intel, mut k) = build(root);
    let here = root.to_owned();
    let cite = k
        .resolve_cite(intel.repository(), &here, "store/src/lib.rs:3-5")
        .expect("cite");
    let recorded = k
        .decide(
            "open_store takes a path and never fails",
            None,
            vec![cite],
            vec![],
            1,
            None,
        )
        .expect("decide");
    assert_eq!(recorded.id, "D1");
    let clean = k.audit(intel.repository(), intel.head());
    assert!(clean.flagged.is_empty(), "{:?}", clean.flagged);
    assert!(clean.moved.is_empty());

    // Lines added above: the claim's lines moved but read the same.
    let shifted = format!("// header\n{STORE_RS}");
    write(root, "store/src/lib.rs", &shifted);
    let moved = k.audit(intel.repository(), intel.head());
    assert!(moved.flagged.is_empty(), "{:?}", moved.flagged);
    assert!(moved.moved.iter().any(|c| c.id == "D1"));

    // The cited line itself edited: flagged, with what it says now.
    write(
        root,
        "store/src/lib.rs",
        &STORE_RS.replace(
            "Store { path: path.to_owned() }",
            "Store { path: path.trim().to_owned() }",
        ),
    );
    let report = k.audit(intel.repository(), intel.head());
    let flagged = report
        .flagged
        .iter()
        .find(|c| c.id == "D1")
        .expect("D1 flagged");
    assert_eq!(flagged.status, "changed");
    let json = serde_json::to_value(&report).expect("json");
    let d1 = json["flagged"]
        .as_array()
        .expect("flagged")
        .iter()
        .find(|c| c["id"] == "D1")
        .expect("D1");
    assert_eq!(d1["cites"][0]["cite"], "store/src/lib.rs:3-5");
    assert_eq!(d1["cites"][0]["status"], "changed");
    assert!(
        d1["cites"][0]["now"]
            .as_str()
            .expect("now")
            .contains("path.trim()")
    );
    // Unrelated claims still hold (the purpose line was not touched).
    assert!(!report.flagged.iter().any(|c| c.id == "purpose:jobs-store"));

    // The file deleted: missing.
    std::fs::remove_file(root.join("store/src/lib.rs")).expect("rm");
    let gone = k.audit(intel.repository(), intel.head());
    let d1 = gone.flagged.iter().find(|c| c.id == "D1").expect("D1");
    assert_eq!(d1.status, "missing");
}

#[test]
fn decisions_supersede_and_why_answers_active_ones_first() {
    let dir = repo();
    let root = dir.path();
    let (intel, mut k) = build(root);
    let error = k
        .decide("x", None, vec![], vec!["D9".into()], 1, None)
        .expect_err("unknown id");
    assert!(
        error
            .to_string()
            .contains("--supersedes D9: no such decision"),
        "{error}"
    );
    let bad = k
        .resolve_cite(intel.repository(), root, "store/src/lib.rs:99")
        .expect_err("past the end");
    assert!(bad.to_string().contains("the file has 9 lines"), "{bad}");
    let d1 = k
        .decide(
            "Jobs move from redb to sqlite for the root",
            Some("sqlite at the root"),
            vec![],
            vec!["adr:docs/adr/0001-redb.md".into()],
            2,
            Some("Bo".into()),
        )
        .expect("decide");
    // Records survive a rebuild of the map.
    let (_intel, k) = build(root);
    let answers = find::why(&k, "why redb for jobs", 5).expect("why");
    let ids: Vec<&str> = answers.iter().map(|(d, _)| d.id.as_str()).collect();
    assert_eq!(
        &ids[..2],
        [d1.id.as_str(), "adr:docs/adr/0001-redb.md"],
        "{ids:?}"
    );
    assert_eq!(answers[1].0.superseded_by.as_deref(), Some("D1"));
    assert_eq!(answers[1].0.status, "superseded");
    let again = {
        let mut k = k;
        k.decide(
            "y",
            None,
            vec![],
            vec!["adr:docs/adr/0001-redb.md".into()],
            3,
            None,
        )
    };
    assert!(
        again
            .expect_err("twice")
            .to_string()
            .contains("already superseded by D1")
    );
}

#[test]
fn search_and_context_stay_within_their_bounds() {
    let dir = repo();
    let (intel, k) = build(dir.path());
    let hits = find::search(&k, "open store", 5).expect("search");
    assert!(!hits.is_empty());
    assert!(hits.len() <= 5);
    assert!(hits.iter().any(|h| h.id == "jobs-store"), "{hits:?}");
    assert!(find::search(&k, "  ", 5).is_err());
    let module = k.module("jobs-store").expect("module");
    let whole = brief::brief(
        &k,
        intel.repository(),
        module,
        &["cargo test -p jobs-store".into()],
        12_000,
    );
    assert!(!whole.truncated, "{}", whole.text);
    assert!(whole.text.starts_with("# jobs-store (store, cargo)"));
    assert!(whole.text.contains("store/src/lib.rs:3"));
    assert!(whole.text.contains("cargo test -p jobs-store"));
    assert!(whole.text.contains("hotfix"));
    for budget in [256, 400, 700] {
        let small = brief::brief(&k, intel.repository(), module, &[], budget);
        assert!(small.bytes <= budget, "{} > {budget}", small.bytes);
        assert_eq!(small.text.len(), small.bytes);
        assert!(small.text.starts_with("# jobs-store"));
    }
}
