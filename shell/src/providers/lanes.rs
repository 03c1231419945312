//! The providers behind a team's conflict-aware scheduling (`team: {parallel: N}`):
//!
//! - `conflicts` predicts which pairs of a board's tasks will probably touch a same file
//!   (their footprints from the repo index: named files and symbols, co-change,
//!   ownership), so the team runs those one after the other and the others side by
//!   side. Its answer is the schedule's evidence, journaled like every effect's, so a
//!   replay after a restart schedules the same way. Without a repo index (or a binary
//!   built without one) it answers `source: "none"` with the reason, and the team
//!   serializes every pair: it never guesses that two tasks are apart.
//! - `merge_lane` brings what a member's lane added since it forked into the job's own
//!   worktree (all or nothing, once), and stores the job's cumulative patch from there,
//!   so `apply_on_success` lands the whole team's work. A lane that does not apply is a
//!   conflict the prediction missed: the call fails and says which files.

use super::agent::{PatchOrigin, store_patch};
use super::{CallContext, CallFuture, Failure, Provider};
use palm_agents::git;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The provider names the team node calls.
pub use palm_actors::definition::{MERGE_PROVIDER, PREDICT_PROVIDER};

/// Most tasks one prediction takes (pairs grow with the square).
pub const PREDICT_TASKS_MAX: usize = 200;
/// Most serialized pairs whose evidence (files, why) the answer spells out.
const EVIDENCE_PAIRS_MAX: usize = 50;

/// Predicts the overlaps of tasks on the checkout at `repo`: given
/// `[{id, title, detail, files}]`, answers
/// `{threshold, serialize: [{a, b, score, files, evidence}], parallel: N, footprints}`,
/// or why it cannot (no index).
pub type ConflictPredictor = Arc<dyn Fn(&Path, &[Value]) -> Result<Value, String> + Send + Sync>;

static PREDICTOR: OnceLock<ConflictPredictor> = OnceLock::new();

/// Installs the predictor (the `palm` binary does, when built with the repo index). The
/// first one installed stays.
pub fn set_conflict_predictor(predictor: ConflictPredictor) {
    let _ = PREDICTOR.set(predictor);
}

fn absolute(data: &Path) -> PathBuf {
    if data.is_absolute() {
        data.to_owned()
    } else {
        std::env::current_dir().unwrap_or_default().join(data)
    }
}

/// The `conflicts` provider.
pub struct Conflicts;

impl Conflicts {
    async fn run(&self, args: Value) -> Result<Value, Failure> {
        let repo = args["repo"]
            .as_str()
            .ok_or_else(|| Failure::new("conflicts: `repo` (a directory) is required"))?
            .to_owned();
        let tasks = args["tasks"]
            .as_array()
            .cloned()
            .ok_or_else(|| Failure::new("conflicts: `tasks` must be a list"))?;
        let none = |reason: String| {
            json!({
                "source": "none",
                "reason": reason,
                "serialize": [],
                "every_pair_serialized": true,
            })
        };
        if tasks.len() > PREDICT_TASKS_MAX {
            return Ok(none(format!(
                "{} tasks: a prediction takes at most {PREDICT_TASKS_MAX}",
                tasks.len()
            )));
        }
        let Some(predictor) = PREDICTOR.get().cloned() else {
            return Ok(none(
                "this palm was built without the repo index (feature `intel`)".to_owned(),
            ));
        };
        let answer = tokio::task::spawn_blocking(move || predictor(Path::new(&repo), &tasks))
            .await
            .map_err(|e| Failure::new(format!("conflicts: {e}")))?;
        Ok(match answer {
            Ok(mut answer) => {
                answer["source"] = json!("intel");
                if let Some(pairs) = answer["serialize"].as_array_mut() {
                    for pair in pairs.iter_mut().skip(EVIDENCE_PAIRS_MAX) {
                        if let Some(map) = pair.as_object_mut() {
                            map.remove("evidence");
                        }
                    }
                }
                answer
            }
            Err(reason) => none(reason),
        })
    }
}

impl Provider for Conflicts {
    fn name(&self) -> &str {
        PREDICT_PROVIDER
    }

    fn describe(&self) -> Value {
        json!({
            "name": PREDICT_PROVIDER,
            "description": "predicts which pairs of tasks will probably touch a same file (the repo index: named files and symbols, co-change, ownership); a team runs those one after the other",
            "args": {
                "repo": "the checkout (indexed with `palm index`)",
                "tasks": "[{id, title, detail, files}]",
            },
        })
    }

    fn call<'a>(&'a self, _ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(self.run(args))
    }
}

/// The `merge_lane` provider of a node.
pub struct MergeLane {
    data: PathBuf,
}

impl MergeLane {
    /// The provider for a node on `data`.
    pub fn new(data: &Path) -> MergeLane {
        MergeLane {
            data: absolute(data),
        }
    }

    async fn run(&self, ctx: &CallContext<'_>, args: Value) -> Result<Value, Failure> {
        let text = |field: &str| {
            args[field]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| Failure::new(format!("merge_lane: `{field}` is required")))
        };
        let (repo, lane) = (text("repo")?, text("lane")?);
        let (worktrees, job) = (self.data.join("worktrees"), ctx.effect.job.clone());
        let merged = tokio::task::spawn_blocking(move || {
            let top = git::toplevel(Path::new(&repo))
                .ok_or_else(|| format!("{repo} is not in a git checkout"))?;
            git::merge_lane(&worktrees, &job, &top, &lane).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| Failure::new(format!("merge_lane: {e}")))?
        .map_err(|e| Failure::new(format!("the lane does not merge: {e}")))?;
        let made_by = PatchOrigin {
            job: &ctx.effect.job,
            effect: &ctx.effect.key,
            provider: "team",
            lane: None,
        };
        let patch = if merged.after.tree == tree_of(&merged.own).await {
            Value::Null
        } else {
            store_patch(&self.data, &made_by, &merged.own, &merged.after.tree, false).await?
        };
        Ok(json!({
            "files": merged.files,
            "applied": merged.applied,
            "worktree": merged.own.path.display().to_string(),
            "patch": patch,
        }))
    }
}

/// The tree of a worktree's base (nothing changed yet: no patch to store).
async fn tree_of(worktree: &git::Worktree) -> String {
    let tree = worktree.clone();
    tokio::task::spawn_blocking(move || {
        git::git(
            &tree.path,
            &["rev-parse", &format!("{}^{{tree}}", tree.base)],
            &[],
        )
        .map(|t| t.trim().to_owned())
        .unwrap_or_default()
    })
    .await
    .unwrap_or_default()
}

impl Provider for MergeLane {
    fn name(&self) -> &str {
        MERGE_PROVIDER
    }

    fn describe(&self) -> Value {
        json!({
            "name": MERGE_PROVIDER,
            "description": "brings what a lane of this job added since it forked into the job's own worktree (all or nothing, once) and stores the job's patch",
            "args": {"repo": "the checkout", "lane": "the lane's name"},
        })
    }

    fn call<'a>(&'a self, ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(async move { self.run(&ctx, args).await })
    }
}
