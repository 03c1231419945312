//! "Who uses a file" resolves through imports: in a Rust workspace, a crate that cannot
//! depend on another (it names none of its files in an import) does not use it just by
//! mentioning one of its names; a crate that imports it does, and so does its own crate.

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

fn write(root: &Path, path: &str, text: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

#[test]
fn a_crate_that_cannot_see_a_name_does_not_use_its_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        root,
        "Cargo.toml",
        "[workspace]\nmembers = [\"alpha\", \"beta\", \"gamma\"]\n",
    );
    write(
        root,
        "alpha/Cargo.toml",
        "[package]\nname = \"alpha\"\nversion = \"0.1.0\"\n",
    );
    write(
        root,
        "alpha/src/lib.rs",
        "pub mod gadget;\npub use gadget::Gizmo;\n",
    );
    write(
        root,
        "alpha/src/gadget.rs",
        "pub struct Gizmo;\n\nimpl Gizmo {\n    pub fn spin_gizmo(&self) {}\n}\n",
    );
    // In alpha itself: sees alpha's names without importing the file.
    write(
        root,
        "alpha/src/user.rs",
        "pub fn make() -> crate::Gizmo {\n    Gizmo\n}\n",
    );
    // beta does not depend on alpha: a Gizmo of its own words only.
    write(
        root,
        "beta/Cargo.toml",
        "[package]\nname = \"beta\"\nversion = \"0.1.0\"\n",
    );
    write(
        root,
        "beta/src/lib.rs",
        "/// Not alpha's: a Gizmo is also a word.\npub fn describe() -> &'static str {\n    let Gizmo = \"gizmo\";\n    Gizmo\n}\n",
    );
    // gamma depends on alpha and imports it.
    write(
        root,
        "gamma/Cargo.toml",
        "[package]\nname = \"gamma\"\nversion = \"0.1.0\"\n\n[dependencies]\nalpha = { path = \"../alpha\" }\n",
    );
    write(
        root,
        "gamma/src/lib.rs",
        "use alpha::gadget;\n\npub fn go(g: &gadget::Gizmo) {\n    g.spin_gizmo();\n}\n",
    );
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "three crates"]);
    let intel = Intel::open(root).expect("open");
    intel.index(&mut NoProgress).expect("index");
    let mut warnings = Vec::new();
    let snapshot = intel.snapshot(&mut warnings).expect("snapshot");
    let users: Vec<String> = snapshot
        .used_by("alpha/src/gadget.rs")
        .into_iter()
        .map(|u| u.path)
        .collect();
    assert!(users.contains(&"alpha/src/user.rs".to_owned()), "{users:?}");
    assert!(users.contains(&"gamma/src/lib.rs".to_owned()), "{users:?}");
    assert!(
        !users.contains(&"beta/src/lib.rs".to_owned()),
        "beta cannot see alpha: {users:?}"
    );
}
