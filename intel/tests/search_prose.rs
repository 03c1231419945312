//! `palm search` finds words in Markdown bodies and module docs (`//!`), and says on
//! which line the passage starts; an index of the previous format is rebuilt, not
//! misread.

use palm_intel::{Intel, NoProgress};
use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) {
    let output = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .expect("git");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn prose_is_searchable_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("docs")).expect("docs");
    std::fs::create_dir_all(root.join("src")).expect("src");
    std::fs::write(
        root.join("docs/guide.md"),
        "# Guide\n\nIntro words.\n\nThe capacitor reconciles\nledgers nightly.\n",
    )
    .expect("md");
    std::fs::write(
        root.join("src/lib.rs"),
        "//! Routing through zanzibar gateways.\n\npub fn route() {}\n",
    )
    .expect("rs");
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "docs"]);
    let intel = Intel::open(root).expect("open");
    intel.index(&mut NoProgress).expect("index");
    let mut warnings = Vec::new();
    let found = intel
        .search("capacitor", 10, &mut warnings)
        .expect("search");
    let hit = &found.hits[0];
    assert_eq!(hit.path.as_deref(), Some("docs/guide.md"));
    assert_eq!(hit.line, Some(5));
    assert!(hit.snippet.contains("**capacitor**"), "{}", hit.snippet);
    let found = intel.search("zanzibar", 10, &mut warnings).expect("search");
    assert_eq!(found.hits[0].path.as_deref(), Some("src/lib.rs"));
    assert_eq!(found.hits[0].line, Some(1));

    // An index written by the previous format is rebuilt with a note, not misread.
    let meta = root.join(".palm/index/meta.json");
    let text = std::fs::read_to_string(&meta).expect("meta");
    let old = text.replace(
        &format!("\"format\": {}", palm_intel::store::FORMAT_VERSION),
        "\"format\": 3",
    );
    assert_ne!(old, text, "the meta names its format: {text}");
    std::fs::write(&meta, old).expect("write");
    let mut warnings = Vec::new();
    let again = intel
        .search("capacitor", 10, &mut warnings)
        .expect("search");
    assert_eq!(again.hits[0].line, Some(5));
    assert!(
        warnings.iter().any(|w| w.contains("rebuilt")),
        "{warnings:?}"
    );
}
