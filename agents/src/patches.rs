//! The patches agent runs left, as stored under a node's data directory: one
//! `<id>.json` description and one `<id>.diff` per patch, in `DATA/patches/`. Listing,
//! showing and landing them (through [`crate::merge`]) are here, so the CLI and the MCP
//! server do exactly the same thing.
//!
//! Statuses: `pending` (landable), `applied`, `reverted`, `conflict` (the last attempt
//! conflicted; it may be tried again), `blocked` (the secret scan found something; never
//! landed), `violation` (from an observe run; never landed).

use crate::merge::{self, Outcome};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// A refused or failed patch operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PatchError {
    /// Machine-readable kind (`unknown_patch`, `patch_blocked`, `git`, ...).
    pub kind: &'static str,
    /// One line.
    pub message: String,
    /// What to do.
    pub hint: Option<String>,
    /// True when the request was wrong (exit 2), false when something failed (exit 1).
    pub usage: bool,
}

impl PatchError {
    fn usage(kind: &'static str, message: String) -> PatchError {
        PatchError {
            kind,
            message,
            hint: None,
            usage: true,
        }
    }

    fn failure(kind: &'static str, message: String) -> PatchError {
        PatchError {
            kind,
            message,
            hint: None,
            usage: false,
        }
    }

    fn hint(mut self, hint: impl Into<String>) -> PatchError {
        self.hint = Some(hint.into());
        self
    }
}

/// The patches of one data directory.
pub struct Patches {
    dir: PathBuf,
    scratch: PathBuf,
}

impl Patches {
    /// The patches under `data`.
    pub fn new(data: &Path) -> Patches {
        Patches {
            dir: data.join("patches"),
            scratch: data.join("scratch"),
        }
    }

    /// Every patch's description, newest first; only `job`'s when given.
    pub fn list(&self, job: Option<&str>) -> Result<Vec<Value>, PatchError> {
        let mut patches = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(patches),
            Err(e) => {
                return Err(PatchError::failure(
                    "io",
                    format!("cannot read {}: {e}", self.dir.display()),
                ));
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json")
                && let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(value) = serde_json::from_str::<Value>(&text)
                && job.is_none_or(|j| value["job"] == j)
            {
                patches.push(value);
            }
        }
        patches.sort_by(|a, b| {
            b["created_at"]
                .as_u64()
                .cmp(&a["created_at"].as_u64())
                .then_with(|| a["id"].as_str().cmp(&b["id"].as_str()))
        });
        Ok(patches)
    }

    fn meta_path(&self, id: &str) -> Result<PathBuf, PatchError> {
        // Ids are hex; anything else never names a file.
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(PatchError::usage("unknown_patch", format!("no patch {id}"))
                .hint("`palm patches list` shows them"));
        }
        Ok(self.dir.join(format!("{id}.json")))
    }

    /// One patch's description with its diff (`diff`).
    pub fn show(&self, id: &str) -> Result<Value, PatchError> {
        let mut meta = self.read(id)?;
        meta["diff"] = Value::String(
            std::fs::read_to_string(self.dir.join(format!("{id}.diff"))).unwrap_or_default(),
        );
        Ok(meta)
    }

    fn read(&self, id: &str) -> Result<Value, PatchError> {
        let path = self.meta_path(id)?;
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or_else(|| {
                PatchError::usage("unknown_patch", format!("no patch {id}"))
                    .hint("`palm patches list` shows them")
            })
    }

    /// Stores a new patch: its diff, then its description (`meta`, whose `id` names both
    /// files), each written whole or not at all. A patch already stored under that id (its
    /// effect run again, at least once) is kept as it is, status included, and its
    /// description answered.
    pub fn record(&self, meta: Value, diff: &str) -> Result<Value, PatchError> {
        let id = meta["id"].as_str().unwrap_or_default().to_owned();
        let meta_path = self.meta_path(&id)?;
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            PatchError::failure("io", format!("cannot create {}: {e}", self.dir.display()))
        })?;
        // Under the merge queue's lock, so a landing never sees half a patch.
        let _queue = self.queue_lock()?;
        if let Ok(stored) = self.read(&id) {
            return Ok(stored);
        }
        write_whole(&self.dir.join(format!("{id}.diff")), diff.as_bytes())?;
        write_meta(&meta_path, &meta)?;
        Ok(meta)
    }

    /// Records a `best_of`'s choice on a patch: `chosen: false` keeps a losing attempt's
    /// patch reviewable (and landable by hand) while `apply_on_success` passes it by.
    pub fn mark_choice(&self, id: &str, chosen: bool, reason: &str) -> Result<(), PatchError> {
        let meta_path = self.meta_path(id)?;
        // Under the merge queue's lock, so a landing at the same moment keeps its status.
        let _queue = self.queue_lock()?;
        let mut meta = self.read(id)?;
        meta["chosen"] = json!(chosen);
        meta["choice"] = json!(reason);
        write_meta(&meta_path, &meta)
    }

    /// The merge queue's lock (one landing or marking at a time per data directory),
    /// held until the file is dropped.
    fn queue_lock(&self) -> Result<std::fs::File, PatchError> {
        let queue = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(".queue.lock"))
            .map_err(|e| {
                PatchError::failure("io", format!("cannot open the merge queue's lock: {e}"))
            })?;
        queue.lock().map_err(|e| {
            PatchError::failure("io", format!("cannot take the merge queue's lock: {e}"))
        })?;
        Ok(queue)
    }

    /// Lands a patch on `to` (default: the branch its checkout is on), or reverts an
    /// applied one; one at a time per data directory. Answers `{"id", "status":
    /// "applied"|"reverted"|"conflict", "conflicts", "commit", "branch", "target",
    /// "note"}`; a conflict is an answer, not an error.
    pub fn land(
        &self,
        id: &str,
        to: Option<String>,
        revert: bool,
        now_ms: u64,
    ) -> Result<Value, PatchError> {
        let meta_path = self.meta_path(id)?;
        let mut meta = self.read(id)?;
        let _queue = self.queue_lock()?;
        // Read again under the lock: another apply may have just landed it.
        meta = self.read(id).unwrap_or(meta);
        let status = meta["status"].as_str().unwrap_or_default().to_owned();
        match (revert, status.as_str()) {
            (false, "blocked") => {
                return Err(PatchError::usage(
                    "patch_blocked",
                    format!(
                        "patch {id} is blocked: the secret scan found {} things that look like secrets",
                        meta["findings"].as_array().map_or(0, Vec::len)
                    ),
                )
                .hint(format!("`palm patches show {id}` lists them")));
            }
            (false, "violation") => {
                return Err(PatchError::usage(
                    "patch_violation",
                    format!(
                        "patch {id} came from an observe run that was not allowed to write; it is never applied"
                    ),
                ));
            }
            (false, "applied") => {
                return Err(PatchError::usage(
                    "already_applied",
                    format!("patch {id} is already applied"),
                ));
            }
            (true, s) if s != "applied" => {
                return Err(PatchError::usage(
                    "not_applied",
                    format!("patch {id} is {s}, not applied; nothing to revert"),
                ));
            }
            _ => {}
        }
        let repo = PathBuf::from(meta["repo"].as_str().unwrap_or_default());
        let target = match (revert, to) {
            (true, _) => meta["branch"].as_str().unwrap_or_default().to_owned(),
            (false, Some(branch)) => branch,
            (false, None) => merge::current_branch(&repo).ok_or_else(|| {
                PatchError::usage(
                    "invalid_input",
                    format!(
                        "{} is not on a branch; say which with --to BRANCH",
                        repo.display()
                    ),
                )
            })?,
        };
        let failed = |e: crate::git::GitError| PatchError::failure("git", e.to_string());
        let commit = if revert {
            meta["commit"].as_str().unwrap_or_default().to_owned()
        } else {
            merge::patch_commit(
                &repo,
                meta["base"].as_str().unwrap_or_default(),
                &self.dir.join(format!("{id}.diff")),
                &format!(
                    "palm patch {id} (job {})",
                    meta["job"].as_str().unwrap_or_default()
                ),
                &self.scratch,
            )
            .map_err(failed)?
        };
        let outcome =
            merge::land(&repo, &self.scratch, &commit, &target, id, revert).map_err(failed)?;
        let mut answer = serde_json::to_value(&outcome).unwrap_or(Value::Null);
        answer["id"] = json!(id);
        match &outcome {
            Outcome::Applied { commit, branch, .. } => {
                if revert {
                    meta["status"] = json!("reverted");
                    meta["reverted_commit"] = json!(commit);
                    answer["status"] = json!("reverted");
                } else {
                    meta["status"] = json!("applied");
                    meta["commit"] = json!(commit);
                    meta["branch"] = json!(branch);
                    meta["conflicts"] = json!([]);
                }
                meta["landed_at"] = json!(now_ms);
            }
            Outcome::Conflict { conflicts, .. } => {
                if !revert {
                    meta["status"] = json!("conflict");
                }
                meta["conflicts"] = json!(conflicts);
            }
        }
        write_meta(&meta_path, &meta)?;
        Ok(answer)
    }
}

/// Writes a patch's description: write then rename, so a crash leaves the old
/// description or the new, never half.
fn write_meta(meta_path: &Path, meta: &Value) -> Result<(), PatchError> {
    let text = serde_json::to_string_pretty(meta).unwrap_or_default();
    write_whole(meta_path, text.as_bytes())
}

/// Writes `path` whole or not at all: beside it (`NAME.new`), then renamed over it.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), PatchError> {
    let mut fresh = path.as_os_str().to_owned();
    fresh.push(".new");
    let fresh = PathBuf::from(fresh);
    std::fs::write(&fresh, bytes)
        .and_then(|()| std::fs::rename(&fresh, path))
        .map_err(|e| PatchError::failure("io", format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(id: &str, job: &str) -> Value {
        json!({"id": id, "job": job, "status": "pending", "created_at": 1})
    }

    /// A patch stored again under its id (its effect run a second time) keeps what it
    /// became meanwhile; another id is another patch, whoever made the same diff.
    #[test]
    fn a_stored_patch_is_never_overwritten() {
        let data = tempfile::tempdir().unwrap();
        let patches = Patches::new(data.path());
        let first = patches
            .record(described("aa01", "job-1"), "diff a\n")
            .unwrap();
        assert_eq!(first["status"], "pending");
        let mut applied = patches.read("aa01").unwrap();
        applied["status"] = json!("applied");
        write_meta(&patches.meta_path("aa01").unwrap(), &applied).unwrap();

        let again = patches
            .record(described("aa01", "job-1"), "diff a\n")
            .unwrap();
        assert_eq!(again["status"], "applied", "{again}");
        patches
            .record(described("bb02", "job-2"), "diff a\n")
            .unwrap();

        assert_eq!(patches.list(Some("job-1")).unwrap().len(), 1);
        assert_eq!(patches.list(Some("job-2")).unwrap().len(), 1);
        assert_eq!(patches.show("bb02").unwrap()["diff"], "diff a\n");
        assert_eq!(patches.show("aa01").unwrap()["status"], "applied");
        let left: Vec<_> = std::fs::read_dir(data.path().join("patches"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".new"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
