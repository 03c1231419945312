//! The git half on a scripted history: per-file activity and co-change as of a chosen
//! "now", incremental updates, and a rebuild when HEAD stops descending from the last
//! indexed commit (a reset or rebase).

use palm_intel::history::History;
use std::path::Path;
use std::process::Command;

const DAY_S: i64 = 86_400;
/// A fixed "now" so every number below is exact.
const NOW: i64 = 1_800_000_000;

fn git(dir: &Path, args: &[&str], time: Option<i64>, author: &str) {
    let mut command = Command::new("git");
    command
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", author)
        .env("GIT_AUTHOR_EMAIL", format!("{author}@example.com"))
        .env("GIT_COMMITTER_NAME", author)
        .env("GIT_COMMITTER_EMAIL", format!("{author}@example.com"));
    if let Some(time) = time {
        command
            .env("GIT_AUTHOR_DATE", format!("@{time} +0000"))
            .env("GIT_COMMITTER_DATE", format!("@{time} +0000"));
    }
    let output = command.output().expect("git");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn commit(dir: &Path, files: &[&str], days_ago: i64, author: &str, subject: &str) {
    for file in files {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::write(&path, format!("{old}{subject}\n")).expect("write");
    }
    git(dir, &["add", "-A"], None, author);
    git(
        dir,
        &["commit", "-q", "-m", subject],
        Some(NOW - days_ago * DAY_S),
        author,
    );
}

#[test]
fn activity_cochange_and_incremental_updates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    git(root, &["init", "-q"], None, "x");
    commit(root, &["a.rs", "b.rs"], 90, "ann", "one");
    commit(root, &["a.rs", "b.rs", "c.rs"], 30, "bo", "two");
    commit(root, &["a.rs"], 3, "ann", "three");
    let repo = git2::Repository::open(root).expect("open");
    let mut history = History::default();
    let update = history.update(&repo).expect("update");
    assert_eq!((update.new_commits, update.rebuilt), (3, true));
    let subjects: Vec<&str> = history.commits.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!(subjects, ["one", "two", "three"]);
    let view = history.view();
    let a = history.activity(&view, "a.rs", NOW);
    assert_eq!(
        (a.churn, a.touches_30d, a.authors, a.last_touched),
        (3, 2, 2, Some(NOW - 3 * DAY_S))
    );
    let cochanges = history.cochanges(&view, "a.rs", NOW);
    let got: Vec<(&str, u32, f64)> = cochanges
        .iter()
        .map(|c| {
            (
                c.path.as_str(),
                c.count,
                (c.weight * 1000.0).round() / 1000.0,
            )
        })
        .collect();
    // b: 0.5^(90/30) + 0.5^(30/30) = 0.125 + 0.5; c: 0.5.
    assert_eq!(got, [("b.rs", 2, 0.625), ("c.rs", 1, 0.5)]);
    assert_eq!(history.edge_count(), 3);

    // Nothing new: nothing walked.
    let update = history.update(&repo).expect("update");
    assert_eq!((update.new_commits, update.rebuilt), (0, false));
    // One new commit: only it is walked.
    commit(root, &["c.rs"], 1, "cy", "four");
    let update = history.update(&repo).expect("update");
    assert_eq!((update.new_commits, update.rebuilt), (1, false));
    assert_eq!(history.commits.len(), 4);
    // A reset away from the indexed HEAD rebuilds from scratch.
    git(root, &["reset", "-q", "--hard", "HEAD~2"], None, "x");
    commit(root, &["d.rs"], 0, "dee", "five");
    let update = history.update(&repo).expect("update");
    assert_eq!((update.new_commits, update.rebuilt), (3, true));
    let subjects: Vec<&str> = history.commits.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!(subjects, ["one", "two", "five"]);
    let view = history.view();
    assert_eq!(history.activity(&view, "c.rs", NOW).churn, 1);
}
