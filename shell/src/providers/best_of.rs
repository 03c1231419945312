//! The `best_of` provider: the effect a `best_of` node makes once all its attempts have
//! ended. It turns what each attempt's calls produced (the engine's lane facts: agent
//! patches, checks, gate verdicts) into candidates, adds the risk of the files each
//! patch touches (the repo index, when the binary has one), ranks them
//! (`palm_agents::rank`), and marks the patches: the winner's `chosen: true`, the
//! others' `chosen: false`, so they stay reviewable and `apply_on_success` passes them
//! by. The winner's change is carried into the job's own worktree (all or nothing), so
//! the steps after the `best_of` see it. The answer — winner, ranking, reasons, carried —
//! is what the node saves and what `palm status --json` shows.

use super::{CallContext, CallFuture, Failure, Provider};
use palm_agents::git;
use palm_agents::patches::Patches;
use palm_agents::rank::{self, Candidate, Key};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Scores the risk (0..=100) of changing `files` in the checkout at `repo`: the highest
/// of theirs. `None` when it cannot tell (no index, not a checkout).
pub type RiskScorer = Arc<dyn Fn(&Path, &[String]) -> Option<u32> + Send + Sync>;

static RISK: OnceLock<RiskScorer> = OnceLock::new();

/// Installs the risk scorer (the `palm` binary does, when built with the repo index).
/// The first one installed stays.
pub fn set_risk_scorer(scorer: RiskScorer) {
    let _ = RISK.set(scorer);
}

/// The `best_of` provider of a node.
pub struct BestOf {
    data: PathBuf,
}

impl BestOf {
    /// The provider for a node on `data`.
    pub fn new(data: &Path) -> BestOf {
        // Worktree paths are handed to git running in other directories: absolute.
        let data = if data.is_absolute() {
            data.to_owned()
        } else {
            std::env::current_dir().unwrap_or_default().join(data)
        };
        BestOf { data }
    }

    /// The winner's change, carried into the job's own worktree on its repo, so the steps
    /// after the `best_of` (a gate, a check, `apply_on_success`) work on it: what its lane
    /// added since it forked from the job's worktree (all or nothing, once).
    async fn carry(&self, job: &str, patch: &str) -> Result<String, String> {
        let meta = Patches::new(&self.data)
            .show(patch)
            .map_err(|e| e.to_string())?;
        let repo = PathBuf::from(meta["repo"].as_str().unwrap_or_default());
        let lane = meta["lane"]
            .as_str()
            .ok_or_else(|| format!("patch {patch} has no lane to carry from"))?
            .to_owned();
        let worktrees = self.data.join("worktrees");
        let job = job.to_owned();
        tokio::task::spawn_blocking(move || match git::merge_lane(&worktrees, &job, &repo, &lane) {
            Ok(merged) if merged.applied => {
                Ok(format!("carried into {}", merged.own.path.display()))
            }
            Ok(merged) => Ok(format!("already in {}", merged.own.path.display())),
            Err(e) => Err(format!(
                "not carried into the job's worktree (it does not apply there: {e}); it stays in its lane"
            )),
        })
        .await
        .map_err(|e| e.to_string())?
    }

    async fn run(&self, job: &str, args: Value) -> Result<Value, Failure> {
        let keys: Vec<Key> = args["rank"]
            .as_array()
            .map(|keys| {
                keys.iter()
                    .filter_map(Value::as_str)
                    .filter_map(Key::parse)
                    .collect()
            })
            .unwrap_or_default();
        let attempts = args["attempts"].as_array().cloned().unwrap_or_default();
        let wants_risk = keys.contains(&Key::Risk);
        let candidates = tokio::task::spawn_blocking(move || {
            attempts
                .iter()
                .map(|attempt| candidate(attempt, wants_risk))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Failure::new(format!("best_of: {e}")))?;
        let ranking = rank::rank(&candidates, &keys);
        let patches = Patches::new(&self.data);
        let mut notes = Vec::new();
        for candidate in &candidates {
            let Some(id) = &candidate.patch else {
                continue;
            };
            let chosen = ranking.winner == Some(candidate.index);
            let why = if chosen {
                "the best_of's winner".to_owned()
            } else {
                format!(
                    "attempt {} of a best_of, not chosen; kept for review",
                    candidate.index
                )
            };
            if let Err(err) = patches.mark_choice(id, chosen, &why) {
                notes.push(format!("patch {id}: {err}"));
            }
        }
        let by_index = |index: u32| candidates.iter().find(|c| c.index == index);
        let ordered: Vec<Value> = ranking
            .order
            .iter()
            .filter_map(|i| by_index(*i))
            .map(|c| {
                let mut entry = serde_json::to_value(c).unwrap_or(Value::Null);
                entry["eligible"] = json!(c.eligible());
                entry
            })
            .collect();
        let winner = ranking.winner.and_then(by_index);
        let carried = match winner.and_then(|w| w.patch.clone()) {
            Some(patch) => match self.carry(job, &patch).await {
                Ok(note) => json!({"ok": true, "note": note}),
                Err(note) => json!({"ok": false, "note": note}),
            },
            None => Value::Null,
        };
        let answer = json!({
            "winner": ranking.winner,
            "provider": winner.and_then(|w| w.provider.clone()),
            "patch": winner.and_then(|w| w.patch.clone()),
            "rank": keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            "ranking": ordered,
            "reasons": ranking.reasons,
            "notes": notes,
            "carried": carried,
        });
        match ranking.winner {
            Some(_) => Ok(answer),
            None => Err(Failure {
                reason: "no attempt left a patch that may land".to_owned(),
                value: answer,
            }),
        }
    }
}

/// One attempt as a candidate, from its lane's facts.
fn candidate(attempt: &Value, wants_risk: bool) -> Candidate {
    let facts = attempt["facts"].as_array().cloned().unwrap_or_default();
    let of_kind = |kind: &'static str| facts.iter().filter(move |f| f["kind"] == kind);
    // An attempt's patch is cumulative (one worktree per lane): its last one holds all.
    let agent = of_kind("agent").rfind(|f| f["patch"].is_object());
    let patch = agent.map(|a| &a["patch"]);
    let gates: Vec<&Value> = of_kind("gate").collect();
    let tests_green = of_kind("verify").next_back().map(|v| v["ok"] == true);
    let files: Vec<String> = patch
        .and_then(|p| p["files"].as_array())
        .map(|files| {
            files
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    // The checkout the attempt worked on (its index, if it has one, knows the history);
    // the lane's worktree has no index of its own.
    let repo = agent
        .and_then(|a| a["repo"].as_str().or(a["worktree"].as_str()))
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir());
    let risk = match (wants_risk, RISK.get(), &repo) {
        (true, Some(scorer), Some(repo)) if !files.is_empty() => scorer(repo, &files),
        _ => None,
    };
    Candidate {
        index: attempt["index"].as_u64().unwrap_or(0) as u32,
        provider: attempt["provider"].as_str().map(str::to_owned),
        status: attempt["status"].as_str().unwrap_or("failed").to_owned(),
        patch: patch.and_then(|p| p["id"].as_str()).map(str::to_owned),
        patch_status: patch.and_then(|p| p["status"].as_str()).map(str::to_owned),
        gates_passed: gates.iter().filter(|g| g["approved"] == true).count() as u32,
        gates_total: gates.len() as u32,
        tests_green,
        diff_lines: patch
            .map(|p| p["added"].as_u64().unwrap_or(0) + p["removed"].as_u64().unwrap_or(0))
            .unwrap_or(0),
        files,
        risk,
    }
}

impl Provider for BestOf {
    fn name(&self) -> &str {
        "best_of"
    }

    fn describe(&self) -> Value {
        json!({
            "name": "best_of",
            "description": "ranks a best_of's attempts (made by the best_of node itself): gates approved, checks green, diff size, risk; marks the winner's patch chosen and keeps the others for review",
            "args": {
                "rank": "keys in order: gates, verify, diff_size, risk",
                "attempts": "[{index, provider, lane, status, facts}]",
            },
        })
    }

    fn call<'a>(&'a self, ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(async move { self.run(&ctx.effect.job, args).await })
    }
}
