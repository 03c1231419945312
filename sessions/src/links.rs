//! Links from a session to the work it produced: the Palm run that started it (its job
//! and effect), that run's worktree and patches, and the commits they became; for a
//! session Palm did not start, the Palm worktree it worked in and the commits made in its
//! checkout, on its branch, while it ran.
//!
//! Everything is read from what the node already keeps: a run's `session.json` in its
//! run directory (written as soon as the vendor names the session, so a run is linked
//! when it starts), the patches' records, and git.

use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// How long after a session's last entry a commit still counts as its work.
const COMMIT_GRACE_MS: i64 = 15 * 60 * 1000;
/// Most commits one session links.
const COMMITS_MAX: usize = 20;

/// A session's links.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Links {
    /// Palm runs of this session: `{job, effect, provider, worktree}`.
    pub runs: Vec<Value>,
    /// Their patches: `{id, job, status, files, commit, branch}`.
    pub patches: Vec<Value>,
    /// Palm worktrees it worked in: `{job, path}`.
    pub worktrees: Vec<Value>,
    /// Commits it made, or its patches became: `{commit, subject, via}`.
    pub commits: Vec<Value>,
}

/// What `show` knows of the session to link it.
pub struct Subject<'a> {
    /// Its id.
    pub id: &'a str,
    /// Its working directory.
    pub cwd: Option<&'a str>,
    /// Its branch.
    pub branch: Option<&'a str>,
    /// Its first and last entry times.
    pub first_ms: Option<i64>,
    /// See `first_ms`.
    pub last_ms: Option<i64>,
}

/// The links of `session`, from the node's data directory `data`.
pub fn links(data: &Path, session: &Subject<'_>) -> Links {
    let mut links = Links::default();
    // Runs Palm started: their run directories name the session.
    for dir in read_dirs(&data.join("agents").join("runs")) {
        let Ok(text) = std::fs::read_to_string(dir.join("session.json")) else {
            continue;
        };
        let Ok(record) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if record["session_id"] == session.id {
            links.runs.push(record);
        }
    }
    let effects: Vec<&str> = links
        .runs
        .iter()
        .filter_map(|r| r["effect"].as_str())
        .collect();
    let patches_dir = data.join("patches");
    if !effects.is_empty()
        && let Ok(entries) = std::fs::read_dir(&patches_dir)
    {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Ok(meta) = std::fs::read_to_string(&path)
                .map_err(|_| ())
                .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|_| ()))
            else {
                continue;
            };
            if meta["effect"]
                .as_str()
                .is_some_and(|e| effects.contains(&e))
            {
                if let Some(commit) = meta["commit"].as_str() {
                    links.commits.push(serde_json::json!({
                        "commit": commit, "subject": Value::Null, "via": format!("patch {}", meta["id"].as_str().unwrap_or_default()),
                    }));
                }
                links.patches.push(serde_json::json!({
                    "id": meta["id"], "job": meta["job"], "status": meta["status"],
                    "files": meta["files"], "commit": meta["commit"], "branch": meta["branch"],
                }));
            }
        }
    }
    // A Palm worktree the session worked in (a run, or a person in a job's worktree).
    if let Some(cwd) = session.cwd {
        let worktrees = data.join("worktrees");
        for job in read_dirs(&worktrees) {
            for tree in read_dirs(&job) {
                if Path::new(cwd).starts_with(&tree) {
                    links.worktrees.push(serde_json::json!({
                        "job": job.file_name().map(|n| n.to_string_lossy().into_owned()),
                        "path": tree.display().to_string(),
                    }));
                }
            }
        }
    }
    // A session Palm did not start: the commits made in its checkout, on its branch,
    // while it ran.
    if links.runs.is_empty()
        && let (Some(cwd), Some(first), Some(last)) =
            (session.cwd, session.first_ms, session.last_ms)
        && Path::new(cwd).is_dir()
    {
        let since = format!("@{}", first / 1000);
        let until = format!("@{}", (last + COMMIT_GRACE_MS) / 1000);
        let mut args = vec![
            "log".to_owned(),
            "--format=%H%x09%ct%x09%s".to_owned(),
            format!("--since={since}"),
            format!("--until={until}"),
            format!("-n{COMMITS_MAX}"),
        ];
        if let Some(branch) = session.branch.filter(|b| !b.is_empty() && *b != "HEAD") {
            args.push(branch.to_owned());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Ok(out) = palm_agents::git::git(Path::new(cwd), &args, &[]) {
            for line in out.lines() {
                let mut parts = line.splitn(3, '\t');
                let (Some(sha), Some(_), Some(subject)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                links.commits.push(serde_json::json!({
                    "commit": sha, "subject": subject,
                    "via": format!("made in {cwd} while the session ran"),
                }));
            }
        }
    }
    links
}

fn read_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut dirs: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}
