//! The merge queue: a stored patch onto a branch of the user's checkout, without ever
//! touching their uncommitted work.
//!
//! 1. The patch becomes a commit on its own base, through a private index (`git apply
//!    --cached`): nothing is checked out.
//! 2. That commit is picked onto the target branch's tip in a scratch worktree (a 3-way
//!    cherry-pick). A conflict is a result — the paths, and nothing changed anywhere —
//!    never a half-applied checkout.
//! 3. The target moves to the new commit: by `update-ref` (compare-and-swap) when no
//!    checkout has it, by a fast-forward when the user's checkout has it and is clean.
//!    When that checkout has uncommitted changes, or another worktree has the branch,
//!    the commit goes to a branch of its own (`palm/patch-<id>`) instead, and the result
//!    says so.
//!
//! `revert` is the same road with `git revert` of the applied commit.

use crate::git::{GitError, git};
use std::path::{Path, PathBuf};

/// What applying (or reverting) did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The commit is on `branch`.
    Applied {
        /// The new commit.
        commit: String,
        /// The branch it is on (the target, or `palm/patch-<id>`).
        branch: String,
        /// The branch asked for.
        target: String,
        /// Why it is not on the target, when it is not.
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        /// Nothing conflicted.
        conflicts: Vec<String>,
    },
    /// These paths conflict; nothing changed.
    Conflict {
        /// The branch asked for.
        target: String,
        /// Conflicting paths.
        conflicts: Vec<String>,
    },
}

fn identity() -> [(&'static str, &'static str); 4] {
    [
        ("GIT_AUTHOR_NAME", "palm"),
        ("GIT_AUTHOR_EMAIL", "palm@localhost"),
        ("GIT_COMMITTER_NAME", "palm"),
        ("GIT_COMMITTER_EMAIL", "palm@localhost"),
    ]
}

/// The patch as a commit on `base` (the diff in `diff_file`), built in a private index.
pub fn patch_commit(
    repo: &Path,
    base: &str,
    diff_file: &Path,
    message: &str,
    scratch: &Path,
) -> Result<String, GitError> {
    std::fs::create_dir_all(scratch).map_err(|e| GitError {
        command: "apply".into(),
        message: format!("cannot create {}: {e}", scratch.display()),
    })?;
    let index = scratch.join("patch.index");
    let index_text = index.to_string_lossy().into_owned();
    let env = [("GIT_INDEX_FILE", index_text.as_str())];
    git(repo, &["read-tree", base], &env)?;
    let diff_text = diff_file.to_string_lossy().into_owned();
    git(repo, &["apply", "--cached", "--binary", &diff_text], &env)?;
    let tree = git(repo, &["write-tree"], &env)?.trim().to_owned();
    let _ = std::fs::remove_file(&index);
    Ok(git(
        repo,
        &["commit-tree", &tree, "-p", base, "-m", message],
        &identity(),
    )?
    .trim()
    .to_owned())
}

/// The branch HEAD of the checkout at `repo` is on, if any.
pub fn current_branch(repo: &Path) -> Option<String> {
    git(repo, &["symbolic-ref", "--quiet", "--short", "HEAD"], &[])
        .ok()
        .map(|b| b.trim().to_owned())
        .filter(|b| !b.is_empty())
}

/// Worktrees (the main checkout included) that have `branch` checked out.
fn checkouts_of(repo: &Path, branch: &str) -> Result<Vec<PathBuf>, GitError> {
    let list = git(repo, &["worktree", "list", "--porcelain"], &[])?;
    let mut found = Vec::new();
    let mut path = None;
    for line in list.lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            path = Some(PathBuf::from(p));
        } else if line.strip_prefix("branch ") == Some(&format!("refs/heads/{branch}"))
            && let Some(p) = path.clone()
        {
            found.push(p);
        }
    }
    Ok(found)
}

/// Picks `commit` onto `target` (`revert`: reverts it) in a scratch worktree; moves the
/// target as the module says. `id` names the fallback branch.
pub fn land(
    repo: &Path,
    scratch_root: &Path,
    commit: &str,
    target: &str,
    id: &str,
    revert: bool,
) -> Result<Outcome, GitError> {
    let tip = git(
        repo,
        &[
            "rev-parse",
            "--verify",
            &format!("refs/heads/{target}^{{commit}}"),
        ],
        &[],
    )
    .map_err(|e| GitError {
        message: format!("no branch `{target}` ({})", e.message),
        ..e
    })?
    .trim()
    .to_owned();
    let scratch = scratch_root.join(format!("{id}-{}", std::process::id()));
    let scratch_text = scratch.to_string_lossy().into_owned();
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = git(repo, &["worktree", "prune"], &[]);
    git(
        repo,
        &["worktree", "add", "--detach", &scratch_text, &tip],
        &[],
    )?;
    let picked = if revert {
        git(&scratch, &["revert", "--no-edit", commit], &identity())
    } else {
        git(
            &scratch,
            &["cherry-pick", "--allow-empty", commit],
            &identity(),
        )
    };
    // Conflicting paths, or the new commit, or why git failed otherwise.
    let result: Result<Result<String, Vec<String>>, GitError> = match picked {
        Ok(_) => git(&scratch, &["rev-parse", "HEAD"], &[]).map(|h| Ok(h.trim().to_owned())),
        Err(err) => {
            let unmerged =
                git(&scratch, &["diff", "--name-only", "--diff-filter=U"], &[]).unwrap_or_default();
            let conflicts: Vec<String> = unmerged.lines().map(str::to_owned).collect();
            if conflicts.is_empty() {
                Err(err)
            } else {
                Ok(Err(conflicts))
            }
        }
    };
    let _ = git(repo, &["worktree", "remove", "--force", &scratch_text], &[]);
    let _ = std::fs::remove_dir_all(&scratch);
    let new = match result? {
        Ok(new) => new,
        Err(conflicts) => {
            return Ok(Outcome::Conflict {
                target: target.to_owned(),
                conflicts,
            });
        }
    };
    let holders = checkouts_of(repo, target)?;
    let fallback = |note: String| -> Result<Outcome, GitError> {
        let branch = format!("palm/patch-{id}{}", if revert { "-revert" } else { "" });
        git(repo, &["branch", "--force", &branch, &new], &[])?;
        Ok(Outcome::Applied {
            commit: new.clone(),
            branch,
            target: target.to_owned(),
            note: Some(note),
            conflicts: Vec::new(),
        })
    };
    match holders.as_slice() {
        [] => {
            git(
                repo,
                &["update-ref", &format!("refs/heads/{target}"), &new, &tip],
                &[],
            )?;
        }
        [holder] => {
            let dirty = git(
                holder,
                &["status", "--porcelain", "--untracked-files=no"],
                &[],
            )?;
            if !dirty.trim().is_empty() {
                return fallback(format!(
                    "`{target}` is checked out in {} with uncommitted changes, which Palm never touches; the commit is on its own branch",
                    holder.display()
                ));
            }
            // A clean checkout moves by fast-forward; an untracked file in the way makes
            // it refuse, and then the commit goes to its own branch.
            if let Err(err) = git(holder, &["merge", "--ff-only", "--quiet", &new], &[]) {
                return fallback(format!(
                    "`{target}` in {} could not be fast-forwarded ({}); the commit is on its own branch",
                    holder.display(),
                    err.message
                ));
            }
        }
        _ => {
            return fallback(format!(
                "`{target}` is checked out in several worktrees; the commit is on its own branch"
            ));
        }
    }
    Ok(Outcome::Applied {
        commit: new,
        branch: target.to_owned(),
        target: target.to_owned(),
        note: None,
        conflicts: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkout() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tmp");
        let run = |args: &[&str]| git(dir.path(), args, &[]).expect("git");
        run(&["init", "-q", "-b", "main"]);
        run(&["config", "user.email", "t@t"]);
        run(&["config", "user.name", "t"]);
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\n").expect("write");
        run(&["add", "."]);
        run(&["commit", "-q", "-m", "first"]);
        dir
    }

    /// A diff file changing `a.txt`'s middle line to `line`, on HEAD.
    fn diff_file(repo: &Path, dir: &Path, name: &str, line: &str) -> (String, PathBuf) {
        let base = git(repo, &["rev-parse", "HEAD"], &[])
            .expect("head")
            .trim()
            .to_owned();
        let text = format!(
            "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+{line}\n three\n"
        );
        let path = dir.join(name);
        std::fs::write(&path, text).expect("diff");
        (base, path)
    }

    #[test]
    fn a_patch_lands_a_conflict_is_a_result_and_local_changes_are_never_touched() {
        let repo = checkout();
        let scratch = tempfile::tempdir().expect("scratch");
        let (base, first) = diff_file(repo.path(), scratch.path(), "1.diff", "TWO");
        let (_, second) = diff_file(repo.path(), scratch.path(), "2.diff", "deux");
        let one =
            patch_commit(repo.path(), &base, &first, "first", scratch.path()).expect("commit");
        let two =
            patch_commit(repo.path(), &base, &second, "second", scratch.path()).expect("commit");

        let landed = land(repo.path(), scratch.path(), &one, "main", "p1", false).expect("land");
        assert!(
            matches!(&landed, Outcome::Applied { branch, note: None, .. } if branch == "main"),
            "{landed:?}"
        );
        assert_eq!(
            std::fs::read_to_string(repo.path().join("a.txt")).expect("read"),
            "one\nTWO\nthree\n"
        );

        let conflict = land(repo.path(), scratch.path(), &two, "main", "p2", false).expect("land");
        assert_eq!(
            conflict,
            Outcome::Conflict {
                target: "main".into(),
                conflicts: vec!["a.txt".into()]
            }
        );
        assert_eq!(
            std::fs::read_to_string(repo.path().join("a.txt")).expect("read"),
            "one\nTWO\nthree\n"
        );

        // Uncommitted work in the checkout: the revert goes to a branch of its own.
        std::fs::write(repo.path().join("a.txt"), "one\nTWO\nthree\nmine\n").expect("edit");
        let Outcome::Applied { commit, .. } = landed else {
            unreachable!()
        };
        let reverted =
            land(repo.path(), scratch.path(), &commit, "main", "p1", true).expect("revert");
        assert!(
            matches!(&reverted, Outcome::Applied { branch, note: Some(_), .. } if branch == "palm/patch-p1-revert"),
            "{reverted:?}"
        );
        assert_eq!(
            std::fs::read_to_string(repo.path().join("a.txt")).expect("read"),
            "one\nTWO\nthree\nmine\n"
        );
        assert!(
            git(repo.path(), &["worktree", "list"], &[])
                .expect("list")
                .lines()
                .count()
                == 1,
            "no scratch worktree is left"
        );
    }
}
