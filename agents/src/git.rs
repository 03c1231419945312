//! The git side of a run: the job's worktree, snapshots of it on private refs, and the
//! patch a run leaves.
//!
//! - **One worktree per job and repo**, `git worktree add --detach` at the repo's HEAD
//!   when the job first needs it, under the node's data directory
//!   (`DATA/worktrees/<job>/<repo>-<hash>`). Every agent step of the job on that repo
//!   runs there, so later steps see earlier edits; different jobs never share one.
//! - **Snapshots** commit the worktree's whole state (untracked files included, ignored
//!   ones not) through a private index, onto a private ref (`refs/palm/saved/...`),
//!   without touching the worktree's own index or HEAD. A snapshot is taken before a run
//!   and after it, and before a worktree is ever removed, so no edit is lost.
//! - **The patch** of a run is the diff from the job's base commit to the snapshot after
//!   it (`git diff --binary`, new files included): applying a job's latest patch applies
//!   all its work.
//!
//! Everything goes through the `git` program (the one the user has, with their
//! configuration), with a clear error naming the command when it fails.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A failed git command: which, and what it said.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("git {command}: {message}")]
pub struct GitError {
    /// The arguments.
    pub command: String,
    /// Its stderr (last lines) or why it could not start.
    pub message: String,
}

/// Runs git in `dir`; stdout on success.
pub fn git(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<String, GitError> {
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        // Never ask a human for anything, never page.
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().map_err(|e| GitError {
        command: args.join(" "),
        message: format!("cannot run git: {e}"),
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        return Err(GitError {
            command: args.join(" "),
            message: tail.into_iter().rev().collect::<Vec<_>>().join(" / "),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The top of the git checkout holding `dir`, if it is in one.
pub fn toplevel(dir: &Path) -> Option<PathBuf> {
    git(dir, &["rev-parse", "--show-toplevel"], &[])
        .ok()
        .map(|out| PathBuf::from(out.trim()))
}

/// A short content id: the first 16 hex digits of SHA-256.
pub fn content_id(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// [`content_id`] computed piece by piece.
#[derive(Default)]
pub struct ContentHasher(Sha256);

impl ContentHasher {
    /// An empty one.
    pub fn new() -> ContentHasher {
        ContentHasher::default()
    }

    /// Adds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The id of everything added.
    pub fn finish(self) -> String {
        self.0
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// A job's worktree on one repo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worktree {
    /// The checkout it belongs to.
    pub repo: PathBuf,
    /// Where it is.
    pub path: PathBuf,
    /// The commit it started from.
    pub base: String,
    /// Set when the worktree had vanished (deleted by hand) and was made again: the
    /// state its files were brought back to (its last snapshot or restore, a commit or a
    /// tree), so the job goes on from its work rather than from its base.
    pub restored: Option<String>,
}

/// Job ids are safe path parts already (`tag-N`); anything else is made so.
pub fn safe(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Where `job`'s worktree on `repo` lives under `root`; a `best_of` attempt's `lane`
/// has its own beside the job's (`<repo>-<hash>-<lane>`).
pub fn worktree_path(root: &Path, job: &str, repo: &Path, lane: Option<&str>) -> PathBuf {
    let name = repo
        .file_name()
        .map(|n| safe(&n.to_string_lossy()))
        .unwrap_or_else(|| "repo".to_owned());
    let hash = content_id(repo.to_string_lossy().as_bytes());
    let leaf = match lane {
        Some(lane) => format!("{name}-{}-{}", &hash[..8], safe(lane)),
        None => format!("{name}-{}", &hash[..8]),
    };
    root.join(safe(job)).join(leaf)
}

/// The job's worktree on `repo` (a checkout's top) for `lane` (or the job's own). The
/// job's own is made at the repo's HEAD when it does not exist yet; a lane *forks* from
/// the job's worktree as it is then (its files, edits of earlier steps included), with
/// the job's base as its own, so a lane's patch holds all the job's work and
/// [`merge_lane`] brings back only what the lane added.
pub fn ensure_worktree(
    root: &Path,
    job: &str,
    repo: &Path,
    lane: Option<&str>,
) -> Result<Worktree, GitError> {
    let _held = hold();
    let own = ensure_one(root, job, repo, None, None)?;
    match lane {
        None => Ok(own),
        Some(lane) => {
            let path = worktree_path(root, job, repo, Some(lane));
            if let Some(existing) = existing(repo, &path) {
                return Ok(existing);
            }
            // Where the lane forked: recorded, so a lane deleted by hand comes back at
            // the same point, and kept alive by a private ref.
            let fork_file = path.with_extension("fork");
            let recorded = std::fs::read_to_string(&fork_file)
                .ok()
                .map(|c| c.trim().to_owned())
                .filter(|c| names(repo, c, "commit"));
            let fork = match recorded {
                Some(fork) => fork,
                None => {
                    let fork = snapshot(
                        &own,
                        &saved_ref(job, &format!("fork-{lane}")),
                        "the job's worktree when a lane forked from it",
                    )?
                    .commit;
                    write_record(&fork_file, &fork)?;
                    fork
                }
            };
            ensure_one(root, job, repo, Some(lane), Some((&fork, &own.base)))
        }
    }
}

/// One creation, fork or merge at a time in this process: `git worktree add` and the
/// `prune` before it race on the repo's administrative files (two team members starting
/// at once, the attempts of a best_of), and a lane must never fork from a job's worktree
/// while another lane is being merged into it.
fn hold() -> std::sync::MutexGuard<'static, ()> {
    static WORKTREES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    WORKTREES.lock().unwrap_or_else(|p| p.into_inner())
}

/// True when `object` peels to an object of `kind` in `repo` (`commit`; `tree`, which
/// a commit peels to as well).
fn names(repo: &Path, object: &str, kind: &str) -> bool {
    git(
        repo,
        &["cat-file", "-e", &format!("{object}^{{{kind}}}")],
        &[],
    )
    .is_ok()
}

fn write_record(file: &Path, text: &str) -> Result<(), GitError> {
    std::fs::write(file, text).map_err(|e| GitError {
        command: "worktree add".into(),
        message: format!("cannot write {}: {e}", file.display()),
    })
}

/// The worktree at `path` when it is there with its record.
fn existing(repo: &Path, path: &Path) -> Option<Worktree> {
    let base = std::fs::read_to_string(path.with_extension("base")).ok()?;
    path.join(".git").exists().then(|| Worktree {
        repo: repo.to_owned(),
        path: path.to_owned(),
        base: base.trim().to_owned(),
        restored: None,
    })
}

/// Makes one worktree unless it exists: checked out at `start.0` with `start.1` as its
/// base (a lane), or at the job's recorded base, else the repo's HEAD (the job's own).
fn ensure_one(
    root: &Path,
    job: &str,
    repo: &Path,
    lane: Option<&str>,
    start: Option<(&str, &str)>,
) -> Result<Worktree, GitError> {
    let path = worktree_path(root, job, repo, lane);
    if let Some(existing) = existing(repo, &path) {
        return Ok(existing);
    }
    let base_file = path.with_extension("base");
    let (checkout_at, base) = match start {
        Some((at, base)) => (at.to_owned(), base.to_owned()),
        None => {
            // A worktree that vanished (deleted by hand) comes back at the job's own
            // base, so its patches stay comparable; a new one starts at the repo's HEAD.
            let recorded = std::fs::read_to_string(&base_file)
                .ok()
                .map(|b| b.trim().to_owned())
                .filter(|b| names(repo, b, "commit"));
            let base = match recorded {
                Some(base) => base,
                None => git(repo, &["rev-parse", "--verify", "HEAD^{commit}"], &[])
                    .map_err(|e| GitError {
                        message: format!("{} (the repo needs at least one commit)", e.message),
                        ..e
                    })?
                    .trim()
                    .to_owned(),
            };
            (base.clone(), base)
        }
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| GitError {
            command: "worktree add".into(),
            message: format!("cannot create {}: {e}", parent.display()),
        })?;
    }
    let path_text = path.to_string_lossy().into_owned();
    // A directory left by a crash between `worktree add` and the base file: prune it
    // from git's list first (it holds nothing: the add had not finished).
    let _ = git(repo, &["worktree", "prune"], &[]);
    if path.exists() {
        let _ = std::fs::remove_dir_all(&path);
    }
    git(
        repo,
        &["worktree", "add", "--detach", &path_text, &checkout_at],
        &[],
    )?;
    // The repo first: a worktree whose base file is missing is reported, never lost.
    write_record(&path.with_extension("repo"), &repo.to_string_lossy())?;
    let mut tree = Worktree {
        repo: repo.to_owned(),
        path,
        base,
        restored: None,
    };
    // One that had been snapshotted before it vanished gets its files back as they were
    // then: the job's earlier steps' work is in its patch again, not silently dropped.
    // Before the base file, so a crash in between makes it again and restores again.
    let last = std::fs::read_to_string(tree.path.with_extension("last"))
        .ok()
        .map(|c| c.trim().to_owned())
        .filter(|c| names(repo, c, "tree"));
    if let Some(last) = last {
        restore(&tree, &last)?;
        tree.restored = Some(last);
    }
    write_record(&base_file, &tree.base)?;
    Ok(tree)
}

/// What [`merge_lane`] brought into the job's worktree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneMerge {
    /// The files the lane changed since it forked.
    pub files: Vec<String>,
    /// False when there was nothing to bring, or it was there already (a merge run
    /// again after a crash changes nothing).
    pub applied: bool,
    /// The job's own worktree.
    pub own: Worktree,
    /// A snapshot of it after the merge (the job's whole work: its patch).
    pub after: Snapshot,
}

/// Brings what a lane changed since it forked into the job's own worktree: all or
/// nothing (an error when it does not apply there, the job's worktree left as it was),
/// idempotent.
pub fn merge_lane(root: &Path, job: &str, repo: &Path, lane: &str) -> Result<LaneMerge, GitError> {
    let _held = hold();
    let own = ensure_one(root, job, repo, None, None)?;
    let path = worktree_path(root, job, repo, Some(lane));
    let not_found = |what: &str| GitError {
        command: "merge lane".into(),
        message: format!(
            "lane `{lane}` of job {job} has no {what} (at {})",
            path.display()
        ),
    };
    let tree = existing(repo, &path).ok_or_else(|| not_found("worktree"))?;
    let fork = std::fs::read_to_string(path.with_extension("fork"))
        .map(|c| c.trim().to_owned())
        .map_err(|_| not_found("fork record"))?;
    let now = snapshot(
        &tree,
        &saved_ref(job, &format!("lane-{lane}")),
        "a lane's state when it was merged",
    )?;
    let delta = diff(&tree, &fork, &now.tree)?;
    let mut applied = false;
    if !delta.text.trim().is_empty() {
        let delta_file = path.with_extension("delta");
        std::fs::write(&delta_file, &delta.text).map_err(|e| GitError {
            command: "merge lane".into(),
            message: format!("cannot write {}: {e}", delta_file.display()),
        })?;
        let carried = carry(&own, &delta_file);
        let _ = std::fs::remove_file(&delta_file);
        applied = carried?;
    }
    let after = snapshot(
        &own,
        &saved_ref(job, &format!("merged-{lane}")),
        "the job's worktree after a lane was merged into it",
    )?;
    Ok(LaneMerge {
        files: delta.files,
        applied,
        own,
        after,
    })
}

/// A worktree found under the worktrees root.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Found {
    /// The job it belongs to.
    pub job: String,
    /// Where it is.
    pub path: PathBuf,
    /// Its checkout (`None`: the record is gone; it can only be pruned).
    pub repo: Option<PathBuf>,
    /// Its base commit.
    pub base: Option<String>,
}

/// Disk use of the files under `path` (for a worktree: not the shared object store).
/// Walks the whole tree: for `palm worktrees`, not for boot or a run.
pub fn disk_use(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            total += disk_use(&entry.path());
        } else {
            total += meta.len();
        }
    }
    total
}

/// True when a job in `status` may still use its worktree (`palm worktrees gc` keeps it).
pub fn job_is_live(status: &str) -> bool {
    matches!(status, "pending" | "running" | "waiting")
}

/// One worktree as `palm worktrees list --json` and `GET /v1/worktrees` show it: the
/// [`Found`] fields plus `bytes` (its disk use), its job's `status` (`unknown` when the
/// node has no such job) and `live`.
pub fn describe_worktree(tree: &Found, status: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(tree).unwrap_or(serde_json::Value::Null);
    value["bytes"] = serde_json::json!(disk_use(&tree.path));
    value["status"] = serde_json::json!(status);
    value["live"] = serde_json::json!(job_is_live(status));
    value
}

/// Every job worktree under `root` (`root/<job>/<name>`).
pub fn list_worktrees(root: &Path) -> Vec<Found> {
    let mut found = Vec::new();
    let Ok(jobs) = std::fs::read_dir(root) else {
        return found;
    };
    for job in jobs.flatten().filter(|e| e.path().is_dir()) {
        let Ok(trees) = std::fs::read_dir(job.path()) else {
            continue;
        };
        for tree in trees.flatten().filter(|e| e.path().is_dir()) {
            let path = tree.path();
            let read = |ext: &str| {
                std::fs::read_to_string(path.with_extension(ext))
                    .ok()
                    .map(|t| t.trim().to_owned())
                    .filter(|t| !t.is_empty())
            };
            // A worktree without its record (an older layout, a crash between `worktree
            // add` and the record) still knows its repo: git's common directory.
            let repo = read("repo").map(PathBuf::from).or_else(|| {
                git(
                    &path,
                    &["rev-parse", "--path-format=absolute", "--git-common-dir"],
                    &[],
                )
                .ok()
                .and_then(|dir| PathBuf::from(dir.trim()).parent().map(Path::to_path_buf))
            });
            found.push(Found {
                job: job.file_name().to_string_lossy().into_owned(),
                repo,
                base: read("base"),
                path,
            });
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// Removes a job's worktree, its whole state first saved on `reference` (nothing is
/// lost: `git log REF` shows it). Answers the saved commit, if there was state to save.
pub fn remove_worktree(found: &Found, reference: &str) -> Result<Option<String>, GitError> {
    let mut saved = None;
    if let (Some(repo), Some(base)) = (&found.repo, &found.base)
        && found.path.join(".git").exists()
    {
        let tree = Worktree {
            repo: repo.clone(),
            path: found.path.clone(),
            base: base.clone(),
            restored: None,
        };
        saved = Some(snapshot(&tree, reference, "saved before the worktree was removed")?.commit);
        let path = found.path.to_string_lossy().into_owned();
        git(repo, &["worktree", "remove", "--force", &path], &[])?;
    }
    let _ = std::fs::remove_dir_all(&found.path);
    for ext in [
        "repo",
        "base",
        "last",
        "fork",
        "delta",
        "index",
        "exclude",
        "env.json",
        "provisioned",
    ] {
        let _ = std::fs::remove_file(found.path.with_extension(ext));
    }
    // Private indexes a crash left behind (`<name>.index-<pid>-<n>`).
    if let (Some(dir), Some(name)) = (found.path.parent(), found.path.file_name()) {
        let prefix = format!("{}.index-", name.to_string_lossy());
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    if let Some(repo) = &found.repo {
        let _ = git(repo, &["worktree", "prune"], &[]);
    }
    if let Some(job_dir) = found.path.parent() {
        // Only when nothing else of the job is left.
        let _ = std::fs::remove_dir(job_dir);
    }
    Ok(saved)
}

/// A snapshot: the tree of the worktree's state and the commit holding it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The tree.
    pub tree: String,
    /// The commit on the private ref.
    pub commit: String,
}

/// Commits the worktree's whole state (not ignored files) onto `reference`, through a
/// private index: the worktree's index, HEAD and files are untouched.
pub fn snapshot(worktree: &Worktree, reference: &str, message: &str) -> Result<Snapshot, GitError> {
    let index = private_index(worktree);
    let index_text = index.to_string_lossy().into_owned();
    let env = [("GIT_INDEX_FILE", index_text.as_str())];
    // Start the private index from the base, then record every file as it is now.
    git(&worktree.path, &["read-tree", &worktree.base], &env)?;
    // Paths the worktree's setup copied or linked in are the checkout's, not the run's.
    let excluded: Vec<String> = std::fs::read_to_string(worktree.path.with_extension("exclude"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!(":(exclude,literal){}", l.trim()))
        .collect();
    let mut add = vec!["add", "-A", "--", "."];
    add.extend(excluded.iter().map(String::as_str));
    git(&worktree.path, &add, &env)?;
    let tree = git(&worktree.path, &["write-tree"], &env)?
        .trim()
        .to_owned();
    let _ = std::fs::remove_file(&index);
    let commit = git(
        &worktree.path,
        &["commit-tree", &tree, "-p", &worktree.base, "-m", message],
        &[
            ("GIT_AUTHOR_NAME", "palm"),
            ("GIT_AUTHOR_EMAIL", "palm@localhost"),
            ("GIT_COMMITTER_NAME", "palm"),
            ("GIT_COMMITTER_EMAIL", "palm@localhost"),
        ],
    )?
    .trim()
    .to_owned();
    git(&worktree.path, &["update-ref", reference, &commit], &[])?;
    // The worktree's latest state, for bringing it back should it vanish (see
    // `ensure_one`). A torn record names no object and is ignored there.
    write_record(&worktree.path.with_extension("last"), &commit)?;
    Ok(Snapshot { tree, commit })
}

/// A private index file of its own for one snapshot or restore: two at once on a
/// worktree (a lane forking while a run snapshots) never share one.
fn private_index(worktree: &Worktree) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    worktree
        .path
        .with_extension(format!("index-{}-{n}", std::process::id()))
}

/// The private ref of a job's snapshot.
pub fn saved_ref(job: &str, name: &str) -> String {
    format!("refs/palm/saved/{}/{}", safe(job), safe(name))
}

/// Puts the worktree's files back to `tree` (an observe run's changes undone; they stay
/// on the snapshot that recorded them).
pub fn restore(worktree: &Worktree, tree: &str) -> Result<(), GitError> {
    let index = private_index(worktree);
    let index_text = index.to_string_lossy().into_owned();
    let env = [("GIT_INDEX_FILE", index_text.as_str())];
    // Files the run added are not in `tree`: list them from a fresh snapshot index.
    git(&worktree.path, &["read-tree", tree], &env)?;
    git(&worktree.path, &["checkout-index", "-a", "-f"], &env)?;
    let extra = git(
        &worktree.path,
        &["ls-files", "--others", "--exclude-standard", "-z"],
        &env,
    )?;
    let _ = std::fs::remove_file(&index);
    for file in extra.split('\0').filter(|f| !f.is_empty()) {
        let _ = std::fs::remove_file(worktree.path.join(file));
    }
    // Its latest state is `tree` now (an observe run's changes undone are not).
    write_record(&worktree.path.with_extension("last"), tree)?;
    Ok(())
}

/// Applies a stored patch's diff (`git diff --binary`) to a worktree's files: all or
/// nothing. Answers false when it was already there (a second carry of the same patch
/// changes nothing); an error when it does not apply (the worktree is left as it was).
pub fn carry(worktree: &Worktree, diff: &Path) -> Result<bool, GitError> {
    let diff_text = diff.to_string_lossy().into_owned();
    let already = git(
        &worktree.path,
        &["apply", "--check", "--reverse", "--binary", &diff_text],
        &[],
    );
    if already.is_ok() {
        return Ok(false);
    }
    git(
        &worktree.path,
        &["apply", "--binary", "--whitespace=nowarn", &diff_text],
        &[],
    )?;
    Ok(true)
}

/// What a run changed, from the base to a snapshot's tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diff {
    /// `git diff --binary` text.
    pub text: String,
    /// Changed files.
    pub files: Vec<String>,
    /// Lines added (binary files count 0).
    pub added: u64,
    /// Lines removed.
    pub removed: u64,
}

/// The diff from `base` to `tree`.
pub fn diff(worktree: &Worktree, base: &str, tree: &str) -> Result<Diff, GitError> {
    let text = git(
        &worktree.path,
        &["diff", "--binary", "--no-color", base, tree],
        &[],
    )?;
    let numstat = git(
        &worktree.path,
        &["diff", "--numstat", "-z", base, tree],
        &[],
    )?;
    let mut files = Vec::new();
    let (mut added, mut removed) = (0, 0);
    for entry in numstat.split('\0').filter(|e| !e.is_empty()) {
        let mut parts = entry.splitn(3, '\t');
        let (a, r, path) = (parts.next(), parts.next(), parts.next());
        added += a.and_then(|a| a.parse::<u64>().ok()).unwrap_or(0);
        removed += r.and_then(|r| r.parse::<u64>().ok()).unwrap_or(0);
        if let Some(path) = path.filter(|p| !p.is_empty()) {
            files.push(path.to_owned());
        }
    }
    Ok(Diff {
        text,
        files,
        added,
        removed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tmp");
        let run = |args: &[&str]| git(dir.path(), args, &[]).expect("git");
        run(&["init", "-q", "-b", "main"]);
        run(&["config", "user.email", "t@t"]);
        run(&["config", "user.name", "t"]);
        std::fs::write(dir.path().join("a.txt"), "one\n").expect("write");
        run(&["add", "."]);
        run(&["commit", "-q", "-m", "first"]);
        dir
    }

    #[test]
    fn content_ids_piece_by_piece_equal_whole() {
        let mut hasher = ContentHasher::new();
        hasher.update(b"hello ");
        hasher.update(b"world");
        assert_eq!(hasher.finish(), content_id(b"hello world"));
        assert_eq!(content_id(b"hello world").len(), 16);
    }

    #[test]
    fn a_worktree_snapshots_diffs_and_restores_without_touching_the_checkout() {
        let repo = repo();
        let root = tempfile::tempdir().expect("root");
        let tree = ensure_worktree(root.path(), "j-1", repo.path(), None).expect("worktree");
        assert!(tree.path.join("a.txt").exists());
        assert_eq!(
            ensure_worktree(root.path(), "j-1", repo.path(), None).expect("again"),
            tree
        );
        assert_ne!(
            worktree_path(root.path(), "j-2", repo.path(), None),
            tree.path
        );
        let lane = ensure_worktree(root.path(), "j-1", repo.path(), Some("b0-1")).expect("lane");
        assert_ne!(
            lane.path, tree.path,
            "an attempt's lane has its own worktree"
        );
        assert_eq!(lane.base, tree.base);

        let before = snapshot(&tree, &saved_ref("j-1", "before"), "before").expect("snapshot");
        std::fs::write(tree.path.join("a.txt"), "one\ntwo\n").expect("edit");
        std::fs::write(tree.path.join("new.bin"), [0u8, 1, 2, 255]).expect("binary");
        let after = snapshot(&tree, &saved_ref("j-1", "after"), "after").expect("snapshot");
        let changed = diff(&tree, &tree.base, &after.tree).expect("diff");
        assert_eq!(changed.files, ["a.txt", "new.bin"]);
        assert_eq!((changed.added, changed.removed), (1, 0));
        assert!(
            changed.text.contains("GIT binary patch"),
            "{}",
            changed.text
        );
        // The checkout never saw any of it; the refs hold it.
        assert_eq!(
            std::fs::read_to_string(repo.path().join("a.txt")).expect("read"),
            "one\n"
        );
        assert!(
            git(
                repo.path(),
                &["rev-parse", "refs/palm/saved/j-1/after"],
                &[]
            )
            .is_ok()
        );

        // The job's worktree and its lane's, both the job's.
        let mut listed = list_worktrees(root.path());
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|found| found.job == "j-1"), "{listed:?}");
        let lane_found = listed
            .iter()
            .position(|found| found.path == lane.path)
            .map(|i| listed.remove(i))
            .expect("the lane is listed");
        assert_eq!(
            (listed[0].job.as_str(), listed[0].base.as_deref()),
            ("j-1", Some(tree.base.as_str()))
        );
        remove_worktree(&lane_found, &saved_ref("j-1", "lane")).expect("remove the lane");

        // The change carried into another worktree of the repo: once, then already there.
        let patch = root.path().join("change.diff");
        std::fs::write(&patch, &changed.text).expect("diff");
        let other = ensure_worktree(root.path(), "j-9", repo.path(), None).expect("other");
        assert!(carry(&other, &patch).expect("carry"));
        assert_eq!(
            std::fs::read_to_string(other.path.join("a.txt")).expect("read"),
            "one\ntwo\n"
        );
        assert!(!carry(&other, &patch).expect("again"), "already there");
        std::fs::write(other.path.join("a.txt"), "something else\n").expect("edit");
        assert!(
            carry(&other, &patch).is_err(),
            "a diff that does not apply changes nothing"
        );
        assert_eq!(
            std::fs::read_to_string(other.path.join("a.txt")).expect("read"),
            "something else\n"
        );
        let found = list_worktrees(root.path())
            .into_iter()
            .find(|f| f.path == other.path)
            .expect("listed");
        remove_worktree(&found, &saved_ref("j-9", "gc")).expect("remove");

        restore(&tree, &before.tree).expect("restore");
        assert_eq!(
            std::fs::read_to_string(tree.path.join("a.txt")).expect("read"),
            "one\n"
        );
        assert!(!tree.path.join("new.bin").exists());

        // Removing saves first: the dirty state is on the ref, the worktree is gone.
        std::fs::write(tree.path.join("late.txt"), "unsaved\n").expect("late edit");
        let saved = remove_worktree(&listed[0], &saved_ref("j-1", "gc"))
            .expect("remove")
            .unwrap_or_else(|| panic!("nothing saved: {listed:?}"));
        assert!(!tree.path.exists());
        let kept = git(repo.path(), &["show", &format!("{saved}:late.txt")], &[]).expect("show");
        assert_eq!(kept, "unsaved\n");
        assert_eq!(
            git(repo.path(), &["worktree", "list"], &[])
                .expect("list")
                .lines()
                .count(),
            1
        );
        assert!(list_worktrees(root.path()).is_empty());
    }

    #[test]
    fn a_worktree_deleted_by_hand_comes_back_as_it_was_last_recorded() {
        let repo = repo();
        let root = tempfile::tempdir().expect("root");
        let tree = ensure_worktree(root.path(), "j-1", repo.path(), None).expect("worktree");
        assert_eq!(tree.restored, None, "a new worktree starts at HEAD");
        // An earlier step's work, snapshotted as a run's end does.
        std::fs::write(tree.path.join("a.txt"), "one\ntwo\n").expect("edit");
        std::fs::write(tree.path.join("new.txt"), "added\n").expect("add");
        let after = snapshot(&tree, &saved_ref("j-1", "r1-after"), "after").expect("snapshot");

        std::fs::remove_dir_all(&tree.path).expect("deleted by hand");
        let back = ensure_worktree(root.path(), "j-1", repo.path(), None).expect("made again");
        assert_eq!(back.restored.as_deref(), Some(after.commit.as_str()));
        assert_eq!((&back.path, &back.base), (&tree.path, &tree.base));
        assert_eq!(
            std::fs::read_to_string(back.path.join("a.txt")).expect("read"),
            "one\ntwo\n"
        );
        assert!(back.path.join("new.txt").exists());
        let patch = diff(&back, &back.base, &after.tree).expect("diff");
        assert_eq!(
            patch.files,
            ["a.txt", "new.txt"],
            "the job's patch keeps its work"
        );
        // Found in place next time: nothing restored again.
        assert_eq!(
            ensure_worktree(root.path(), "j-1", repo.path(), None)
                .expect("again")
                .restored,
            None
        );

        // An observe run's changes, undone by a restore, do not come back.
        let before = snapshot(&back, &saved_ref("j-1", "r2-before"), "before").expect("before");
        std::fs::write(back.path.join("observed.txt"), "undone\n").expect("observe");
        snapshot(&back, &saved_ref("j-1", "r2-after"), "after").expect("after");
        restore(&back, &before.tree).expect("restore");
        std::fs::remove_dir_all(&back.path).expect("deleted by hand");
        let again = ensure_worktree(root.path(), "j-1", repo.path(), None).expect("made again");
        assert_eq!(again.restored.as_deref(), Some(before.tree.as_str()));
        assert!(!again.path.join("observed.txt").exists());
        assert!(again.path.join("new.txt").exists());
    }

    #[test]
    fn lanes_fork_from_the_jobs_worktree_and_merge_back_only_what_they_added() {
        let repo = repo();
        let root = tempfile::tempdir().expect("root");
        let own = ensure_worktree(root.path(), "j-1", repo.path(), None).expect("own");
        // An earlier step's edit: a lane forked now sees it.
        std::fs::write(own.path.join("a.txt"), "one\nearlier\n").expect("edit");
        let left = ensure_worktree(root.path(), "j-1", repo.path(), Some("t-a")).expect("left");
        let right = ensure_worktree(root.path(), "j-1", repo.path(), Some("t-b")).expect("right");
        assert_eq!(
            std::fs::read_to_string(left.path.join("a.txt")).expect("read"),
            "one\nearlier\n"
        );
        assert_eq!(
            left.base, own.base,
            "a lane's patch holds all the job's work"
        );
        // Two lanes on different files merge back side by side, each once.
        std::fs::write(left.path.join("left.txt"), "L\n").expect("left edit");
        std::fs::write(right.path.join("right.txt"), "R\n").expect("right edit");
        let merged = merge_lane(root.path(), "j-1", repo.path(), "t-a").expect("merge left");
        assert_eq!(
            (merged.files.as_slice(), merged.applied),
            (["left.txt".to_owned()].as_slice(), true)
        );
        let merged = merge_lane(root.path(), "j-1", repo.path(), "t-b").expect("merge right");
        assert!(merged.applied);
        let again = merge_lane(root.path(), "j-1", repo.path(), "t-b").expect("again");
        assert!(
            !again.applied,
            "a merge run twice changes nothing the second time"
        );
        for (file, text) in [
            ("left.txt", "L\n"),
            ("right.txt", "R\n"),
            ("a.txt", "one\nearlier\n"),
        ] {
            assert_eq!(
                std::fs::read_to_string(own.path.join(file)).expect(file),
                text
            );
        }
        // The snapshot after the merge holds the job's whole work since its base.
        let whole = diff(&own, &own.base, &again.after.tree).expect("diff");
        assert_eq!(whole.files, ["a.txt", "left.txt", "right.txt"]);
        // Two lanes that changed the same line: the second does not apply, and the job's
        // worktree stays as it was.
        let one = ensure_worktree(root.path(), "j-1", repo.path(), Some("t-c")).expect("c");
        let two = ensure_worktree(root.path(), "j-1", repo.path(), Some("t-d")).expect("d");
        std::fs::write(one.path.join("a.txt"), "one\nfrom c\n").expect("c edit");
        std::fs::write(two.path.join("a.txt"), "one\nfrom d\n").expect("d edit");
        merge_lane(root.path(), "j-1", repo.path(), "t-c").expect("c merges");
        let err = merge_lane(root.path(), "j-1", repo.path(), "t-d").expect_err("d conflicts");
        assert!(err.to_string().contains("apply"), "{err}");
        assert_eq!(
            std::fs::read_to_string(own.path.join("a.txt")).expect("read"),
            "one\nfrom c\n"
        );
        assert!(
            merge_lane(root.path(), "j-1", repo.path(), "t-zz").is_err(),
            "no such lane"
        );
    }
}
