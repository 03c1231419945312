//! Conflict prediction: footprints and overlaps on a scripted repository (co-change
//! drives the prediction, unrelated tasks stay parallel, words and symbols place a task
//! that names no file), and the replay on this project's own history, which must find at
//! least 70% of the pairs of commits that touched a same file.

#[path = "../../tests/support/tool.rs"]
mod tool;

use palm_intel::overlap::{self, Decision, TaskScope};
use palm_intel::{Intel, IntelError};
use std::path::Path;
use std::process::Command;

const DAY_S: i64 = 86_400;
const START: i64 = 1_700_000_000;

fn git(dir: &Path, args: &[&str], time: i64) {
    let output = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "ann")
        .env("GIT_AUTHOR_EMAIL", "ann@example.com")
        .env("GIT_COMMITTER_NAME", "ann")
        .env("GIT_COMMITTER_EMAIL", "ann@example.com")
        .env("GIT_AUTHOR_DATE", format!("@{time} +0000"))
        .env("GIT_COMMITTER_DATE", format!("@{time} +0000"))
        .output()
        .expect("git");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Appends a line to each file and commits them.
fn commit(dir: &Path, day: i64, files: &[&str], subject: &str) {
    for file in files {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::write(&path, format!("{old}// {subject}\n")).expect("write");
    }
    git(dir, &["add", "-A"], START + day * DAY_S);
    git(dir, &["commit", "-q", "-m", subject], START + day * DAY_S);
}

/// A small history: the store and its journal always change together, the renderer and
/// its theme together, and neither pair with the other.
fn scripted_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    git(root, &["init", "-q"], START);
    for (path, text) in [
        ("src/store.rs", "pub fn store_put() {}\n"),
        ("src/journal.rs", "pub fn journal_sync() {}\n"),
        ("src/render.rs", "pub fn render_frame() {}\n"),
        ("src/theme.rs", "pub fn theme_palette() {}\n"),
    ] {
        std::fs::create_dir_all(root.join("src")).expect("mkdir");
        std::fs::write(root.join(path), text).expect("write");
    }
    git(root, &["add", "-A"], START);
    git(root, &["commit", "-q", "-m", "start the project"], START);
    let mut day = 1;
    for subject in [
        "store keeps entries sorted",
        "store drops stale entries",
        "store writes entries atomically",
        "store reads entries lazily",
        "store counts entries",
    ] {
        commit(root, day, &["src/store.rs", "src/journal.rs"], subject);
        day += 1;
    }
    for subject in [
        "render draws frames faster",
        "render clips frames",
        "render scales frames",
    ] {
        commit(root, day, &["src/render.rs", "src/theme.rs"], subject);
        day += 1;
    }
    dir
}

fn task(file: &str, text: &str) -> TaskScope {
    TaskScope {
        files: vec![file.to_owned()],
        symbols: Vec::new(),
        text: text.to_owned(),
    }
}

#[test]
fn overlap_follows_cochange_and_unrelated_tasks_stay_parallel() {
    let dir = scripted_repo();
    let intel = Intel::open(dir.path()).expect("open");
    let mut warnings = Vec::new();
    let snapshot = intel.snapshot(&mut warnings).expect("snapshot");

    let store = snapshot.footprint(&task("src/store.rs", "store merges entries"));
    let journal = snapshot.footprint(&task("src/journal.rs", "journal syncs batches"));
    let render = snapshot.footprint(&task("src/render.rs", "render dims frames"));

    assert_eq!(store.files.get("src/store.rs"), Some(&1.0), "{store:#?}");
    let coupled = store.files.get("src/journal.rs").copied().unwrap_or(0.0);
    assert!(
        coupled >= 0.6,
        "the journal always changes with the store: {store:#?}"
    );
    assert!(
        store
            .evidence
            .iter()
            .any(|e| e.starts_with("`src/journal.rs`")
                && e.contains("co-changes with src/store.rs in 6 of 6 commits")),
        "{:#?}",
        store.evidence
    );
    let stray = store.files.get("src/render.rs").copied().unwrap_or(0.0);
    assert!(
        stray < coupled / 2.0,
        "render is not the store's: {store:#?}"
    );
    assert!(store.files.len() <= overlap::FOOTPRINT_FILES_MAX);

    let same = overlap::predict(&store, &journal);
    assert_eq!(same.decision, Decision::Serialize, "{same:#?}");
    assert!(same.score >= overlap::SERIALIZE_SCORE_MIN);
    assert!(
        same.files.iter().take(2).any(|f| f == "src/journal.rs") && same.files.len() >= 2,
        "{same:#?}"
    );
    assert!(
        same.evidence[0].contains("named by the task")
            && same.evidence.iter().any(|e| e.contains("co-changes with")),
        "{:#?}",
        same.evidence
    );

    let apart = overlap::predict(&store, &render);
    assert_eq!(apart.decision, Decision::Parallel, "{apart:#?}");
    // (In four files that all began in one commit, some overlap remains.)
    assert!(apart.score + 0.25 < same.score, "{apart:#?} vs {same:#?}");

    // The decision travels as snake_case JSON.
    let json = serde_json::to_value(&same).expect("json");
    assert_eq!(json["decision"], "serialize");
    assert_eq!(
        serde_json::to_value(&apart).expect("json")["decision"],
        "parallel"
    );
}

#[test]
fn overlap_of_a_task_that_names_no_file_comes_from_its_words_and_symbols() {
    let dir = scripted_repo();
    let intel = Intel::open(dir.path()).expect("open");
    let mut warnings = Vec::new();
    let snapshot = intel.snapshot(&mut warnings).expect("snapshot");

    // A search of its words (the journal is found by its path and its symbol).
    let words = snapshot.footprint(&TaskScope::from_text("journal sync"));
    assert!(
        words
            .evidence
            .iter()
            .any(|e| e.starts_with("`src/journal.rs`") && e.contains("matches the words")),
        "{words:#?}"
    );
    // The file that declares a named symbol, spelled like code in the text or named.
    let spelled = snapshot.footprint(&TaskScope::from_text("speed up render_frame"));
    let named = snapshot.footprint(&TaskScope {
        files: Vec::new(),
        symbols: vec!["render_frame".to_owned()],
        text: "speed it up".to_owned(),
    });
    for footprint in [&spelled, &named] {
        assert!(
            footprint
                .evidence
                .iter()
                .any(|e| e.starts_with("`src/render.rs`") && e.contains("declares `render_frame`")),
            "{footprint:#?}"
        );
        // ... and spreads from there by co-change.
        assert!(
            footprint.files.contains_key("src/theme.rs"),
            "{footprint:#?}"
        );
    }
    let store = snapshot.footprint(&task("src/store.rs", "store merges entries"));
    assert_eq!(
        overlap::predict(&store, &named).decision,
        Decision::Parallel
    );
    assert_eq!(
        overlap::predict(&spelled, &named).decision,
        Decision::Serialize
    );
}

/// Retries while another process writes the index (tests of other crates index this
/// tree too).
fn replay_when_free(intel: &Intel, commits: usize) -> overlap::ReplayReport {
    for _ in 0..60 {
        match overlap::replay(intel, commits) {
            Ok(report) => return report,
            Err(IntelError::Busy { .. }) => {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            Err(other) => panic!("replay: {other}"),
        }
    }
    panic!("the index of this tree stayed busy for a minute");
}

#[test]
fn overlap_replay_on_this_repository_finds_most_overlaps() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let intel = match Intel::open(&root) {
        Ok(intel) => intel,
        Err(err) => {
            tool::missing(
                "a git working tree of the project",
                &format!("run from a clone: {err}"),
            );
            return;
        }
    };
    assert!(
        !intel.repository().is_shallow(),
        "this clone's history is shallow, so a replay of it would measure nothing: \
         fetch it whole (git fetch --unshallow) and run again"
    );
    let report = replay_when_free(&intel, 150);
    eprintln!(
        "replay of {} commits: {} pairs, {} overlapping, {} disjoint sampled of {}; \
         threshold {}: {} serialized, {} right; precision {:.3} (all pairs ≈ {:.3}), \
         recall {:.3}, AUC {:.3}",
        report.commits,
        report.pairs,
        report.overlapping,
        report.disjoint_sampled,
        report.disjoint,
        report.threshold,
        report.predicted,
        report.true_positives,
        report.precision,
        report.precision_all_pairs,
        report.recall,
        report.auc
    );
    for slice in &report.slices {
        eprintln!(
            "  {}: {} pairs, {} overlapping, precision {:.3}, recall {:.3}",
            slice.name, slice.pairs, slice.overlapping, slice.precision, slice.recall
        );
    }
    for point in &report.curve {
        eprintln!(
            "  threshold {:.2}: precision {:.3}, recall {:.3}",
            point.threshold, point.precision, point.recall
        );
    }
    assert!(
        report.commits >= 40 && report.overlapping >= 100,
        "too little history to measure anything ({} commits, {} overlapping pairs): \
         is this a full clone?",
        report.commits,
        report.overlapping
    );
    assert!(
        report.recall >= 0.7,
        "recall {:.3} < 0.7: {:#?}",
        report.recall,
        report.examples
    );
    // Better than serializing everything (precision 0.5 on a balanced sample).
    assert!(
        report.precision > 0.52,
        "precision {:.3}: {:#?}",
        report.precision,
        report.examples
    );
}

/// The figures of docs/intel.md's ablation table (run with `--ignored --nocapture`).
#[test]
#[ignore = "prints the ablations of docs/intel.md; slower"]
fn overlap_replay_ablations() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let intel = Intel::open(&root).expect("open");
    let full = overlap::ReplayOptions::default();
    for (name, options) in [
        ("all sources", full.clone()),
        (
            "no import/user/ownership links (no leakage)",
            overlap::ReplayOptions {
                graph: false,
                ..full.clone()
            },
        ),
        (
            "no breadth",
            overlap::ReplayOptions {
                breadth: false,
                ..full.clone()
            },
        ),
        (
            "subject line only (no named file)",
            overlap::ReplayOptions {
                name_first_file: false,
                ..full.clone()
            },
        ),
    ] {
        let report = overlap::replay_with(&intel, &options).expect("replay");
        eprintln!(
            "{name}: precision {:.3}, recall {:.3}, AUC {:.3} ({} commits, {} overlapping pairs)",
            report.precision, report.recall, report.auc, report.commits, report.overlapping
        );
    }
}
