//! "Who uses a file" resolves through imports: in a Rust workspace, a crate that cannot
//! depend on another (it names none of its files in an import) does not use it just by
//! mentioning one of its names; a crate that imports it does, and so does its own crate,
//! and so does a dependent that names the crate in a path without a `use`. The same
//! holds, in each language's terms, for Python and C.

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
        "[workspace]\nmembers = [\"alpha\", \"beta\", \"gamma\", \"delta\", \"zeta\"]\n\n[workspace.dependencies]\nalpha = { path = \"alpha\" }\n",
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
    // In alpha, but its Gizmo is another crate's: a `use` from outside binds the word.
    write(
        root,
        "alpha/src/other.rs",
        "use toys::Gizmo;\n\npub fn borrow() -> Gizmo {\n    Gizmo::default()\n}\n",
    );
    // alpha's own integration test reaches its library by a path too.
    write(
        root,
        "alpha/tests/spin.rs",
        "#[test]\nfn spins() {\n    alpha::gadget::Gizmo.spin_gizmo();\n}\n",
    );
    // delta depends on alpha and reaches it by a path, without a `use`.
    write(
        root,
        "delta/Cargo.toml",
        "[package]\nname = \"delta\"\nversion = \"0.1.0\"\n\n[dependencies]\nalpha.workspace = true\n",
    );
    write(
        root,
        "delta/src/lib.rs",
        "pub fn go(g: &alpha::gadget::Gizmo) {\n    g.spin_gizmo();\n}\n",
    );
    // zeta depends on alpha but never names it: its Gizmo is a word of its own.
    write(
        root,
        "zeta/Cargo.toml",
        "[package]\nname = \"zeta\"\nversion = \"0.1.0\"\n\n[dependencies]\nalpha = { path = \"../alpha\" }\n",
    );
    write(
        root,
        "zeta/src/lib.rs",
        "pub fn gizmo_count() -> usize {\n    let Gizmo = 3;\n    Gizmo\n}\n",
    );
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "five crates"]);
    let users = users_of(root, "alpha/src/gadget.rs");
    assert_eq!(
        users,
        [
            "alpha/src/lib.rs",
            "alpha/src/user.rs",
            "alpha/tests/spin.rs",
            "delta/src/lib.rs",
            "gamma/src/lib.rs"
        ],
        "beta cannot see alpha, zeta does not name it, alpha/src/other.rs means toys::Gizmo"
    );
}

/// The files that use `path` in the repository at `root`, indexed first.
fn users_of(root: &Path, path: &str) -> Vec<String> {
    let intel = Intel::open(root).expect("open");
    intel.index(&mut NoProgress).expect("index");
    let mut warnings = Vec::new();
    let snapshot = intel.snapshot(&mut warnings).expect("snapshot");
    let mut users: Vec<String> = snapshot.used_by(path).into_iter().map(|u| u.path).collect();
    users.sort();
    users
}

#[test]
fn a_python_module_is_seen_through_an_import_not_through_its_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(root, "pkg/__init__.py", "from .models import Widget\n");
    write(
        root,
        "pkg/models.py",
        "class Widget:\n    def turn_widget(self):\n        pass\n",
    );
    // Same directory, no import: Python makes no name visible that way.
    write(
        root,
        "pkg/sibling.py",
        "def describe():\n    Widget = 'a word'\n    return Widget\n",
    );
    // Imports the package, which re-exports the class.
    write(
        root,
        "app.py",
        "from pkg import Widget\n\ndef main():\n    Widget().turn_widget()\n",
    );
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "python"]);
    assert_eq!(
        users_of(root, "pkg/models.py"),
        ["app.py", "pkg/__init__.py"]
    );
}

#[test]
fn a_c_file_is_seen_through_a_header_it_includes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        root,
        "src/spinner.c",
        "#include \"spinner.h\"\n\nint spinner_turn(int n) {\n    return n + 1;\n}\n",
    );
    write(root, "include/spinner.h", "int spinner_turn(int n);\n");
    write(
        root,
        "src/main.c",
        "#include \"../include/spinner.h\"\n\nint main(void) {\n    return spinner_turn(1);\n}\n",
    );
    // Elsewhere, no include: a function of the same name would be its own. (The header
    // declares the name itself, so it is no user either.)
    write(
        root,
        "tools/probe.c",
        "int probe(void) {\n    return spinner_turn(2);\n}\n",
    );
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "c"]);
    assert_eq!(users_of(root, "src/spinner.c"), ["src/main.c"]);
}
