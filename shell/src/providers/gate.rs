//! The `gate` provider: the effect behind an agent `gate`. A verifier agent (any
//! provider, through the `agent` provider) runs in observe mode in the job's worktree,
//! with the criteria, the evidence and the change (the worktree's diff against its
//! base), and answers `{approved, reason, findings}` as structured output.
//!
//! With `skeptic: true`, each finding goes to a second verifier that tries to refute it;
//! only findings that survive are kept, the refuted ones are recorded as refuted. A
//! rejection whose every finding was refuted is overturned (approved), and says so.
//!
//! The call succeeds when the gate approves; the verdict is the saved value either way,
//! and it is journaled with the job like every outcome.

use super::agent::{Agents, blocking, job_workdir, snapshot};
use super::{CallContext, CallFuture, Failure, Provider, cut};
use palm_agents::git;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most of the diff a verifier's prompt carries (the prompt's own bound is 256 KiB).
const DIFF_BYTES_MAX: usize = 160 * 1024;
/// The most of the evidence a prompt carries.
const EVIDENCE_BYTES_MAX: usize = 48 * 1024;
/// The most findings a skeptic checks (the others are kept unchecked, and say so).
pub const SKEPTIC_FINDINGS_MAX: usize = 5;

/// The verdict a verifier must answer with.
fn verdict_schema() -> Value {
    json!({
        "type": "object",
        "required": ["approved", "reason", "findings"],
        "properties": {
            "approved": {"type": "boolean"},
            "reason": {"type": "string"},
            "findings": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["title"],
                    "properties": {
                        "title": {"type": "string"},
                        "detail": {"type": "string"},
                        "file": {"type": "string"},
                        "line": {"type": "integer"},
                        "severity": {"type": "string"}
                    }
                }
            }
        }
    })
}

/// The answer a skeptic must give about one finding.
fn refutation_schema() -> Value {
    json!({
        "type": "object",
        "required": ["refuted", "reason"],
        "properties": {
            "refuted": {"type": "boolean"},
            "reason": {"type": "string"}
        }
    })
}

/// The `gate` provider of a node.
pub struct Gate {
    agents: Arc<Agents>,
    data: PathBuf,
}

impl Gate {
    /// The provider, running its verifiers through `agents`.
    pub fn new(agents: Arc<Agents>, data: &Path) -> Gate {
        let data = if data.is_absolute() {
            data.to_owned()
        } else {
            std::env::current_dir().unwrap_or_default().join(data)
        };
        Gate { agents, data }
    }

    async fn run(&self, ctx: &CallContext<'_>, args: Value) -> Result<Value, Failure> {
        let provider = super::string_arg(&args, "provider", "gate")?.to_owned();
        let criteria = super::string_arg(&args, "criteria", "gate")?.to_owned();
        let text = |name: &str| {
            args.get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let repo = text("repo");
        let lane = text("lane");
        let skeptic = args
            .get("skeptic")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let evidence = match args.get("evidence") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => serde_json::to_string_pretty(other).unwrap_or_default(),
        };
        let change = self
            .change(ctx, repo.as_deref(), lane.as_deref())
            .await
            .unwrap_or_else(|why| Change {
                text: format!("(the change could not be read: {})", why.reason),
                ..Change::default()
            });
        let prompt = verifier_prompt(&criteria, &evidence, &change);
        let mut run = json!({
            "provider": provider,
            "prompt": prompt,
            "mode": "observe",
            "schema": verdict_schema(),
        });
        for field in ["model", "max_turns", "timeout_ms", "repo", "lane"] {
            if let Some(value) = args.get(field).filter(|v| !v.is_null()) {
                run[field] = value.clone();
            }
        }
        let verifier = self.agents.run_as(ctx, run.clone(), Some("verifier")).await;
        let verifier = match verifier {
            Ok(value) => value,
            Err(failure) => {
                let value = json!({
                    "approved": false,
                    "reason": format!("no verdict: {}", failure.reason),
                    "findings": [],
                    "refuted": [],
                    "criteria": criteria,
                    "verifier": summary(&failure.value),
                    "change": change.summary(),
                });
                return Err(Failure {
                    reason: format!("gate: no verdict: {}", failure.reason),
                    value,
                });
            }
        };
        let answer = verifier["structured"].clone();
        let approved = answer["approved"].as_bool().unwrap_or(false);
        let reason = answer["reason"].as_str().unwrap_or_default().to_owned();
        let findings: Vec<Value> = answer["findings"].as_array().cloned().unwrap_or_default();
        let mut kept = Vec::new();
        let mut refuted = Vec::new();
        let mut skeptics = Vec::new();
        for (i, finding) in findings.into_iter().enumerate() {
            if !skeptic || i >= SKEPTIC_FINDINGS_MAX {
                kept.push(finding);
                continue;
            }
            let mut check = run.clone();
            check["prompt"] = json!(skeptic_prompt(&criteria, &finding, &change));
            check["schema"] = refutation_schema();
            match self
                .agents
                .run_as(ctx, check, Some(&format!("skeptic-{i}")))
                .await
            {
                Ok(value) if value["structured"]["refuted"] == true => {
                    refuted.push(json!({
                        "finding": finding,
                        "reason": value["structured"]["reason"],
                    }));
                    skeptics.push(summary(&value));
                }
                Ok(value) => {
                    let mut finding = finding;
                    finding["survived"] = json!(value["structured"]["reason"]);
                    kept.push(finding);
                    skeptics.push(summary(&value));
                }
                Err(failure) => {
                    // A skeptic that could not answer refutes nothing.
                    let mut finding = finding;
                    finding["unchecked"] = json!(failure.reason);
                    kept.push(finding);
                    skeptics.push(summary(&failure.value));
                }
            }
        }
        let overturned = !approved && skeptic && kept.is_empty() && !refuted.is_empty();
        let approved = approved || overturned;
        let reason = if overturned {
            format!(
                "every finding was refuted ({}); the verifier's rejection is overturned: {reason}",
                refuted.len()
            )
        } else {
            reason
        };
        let value = json!({
            "approved": approved,
            "reason": reason,
            "findings": kept,
            "refuted": refuted,
            "criteria": criteria,
            "verifier": summary(&verifier),
            "skeptics": skeptics,
            "change": change.summary(),
        });
        if approved {
            Ok(value)
        } else {
            Err(Failure {
                reason: format!("gate rejected: {}", value["reason"].as_str().unwrap_or("")),
                value,
            })
        }
    }

    /// The change the gate judges: the job's worktree (the lane's) against its base.
    async fn change(
        &self,
        ctx: &CallContext<'_>,
        repo: Option<&str>,
        lane: Option<&str>,
    ) -> Result<Change, Failure> {
        let (worktree, _) = job_workdir(&self.data, &ctx.effect.job, repo, lane, "gate").await?;
        let Some(tree) = worktree else {
            return Ok(Change {
                text: "(not a git checkout: no diff to show; read the files)".into(),
                ..Change::default()
            });
        };
        let tag = git::content_id(ctx.effect.key.as_bytes());
        let shot = snapshot(
            &tree,
            &git::saved_ref(&ctx.effect.job, &format!("{tag}-gate")),
            "what a gate judged",
        )
        .await?;
        let diff = blocking(move || {
            git::diff(&tree, &tree.base.clone(), &shot.tree).map_err(|e| e.to_string())
        })
        .await?;
        Ok(Change {
            text: diff.text,
            files: diff.files,
            added: diff.added,
            removed: diff.removed,
        })
    }
}

/// The change under review.
#[derive(Default)]
struct Change {
    text: String,
    files: Vec<String>,
    added: u64,
    removed: u64,
}

impl Change {
    fn summary(&self) -> Value {
        json!({"files": self.files, "added": self.added, "removed": self.removed})
    }

    fn bounded(&self) -> String {
        if self.text.is_empty() {
            return "(no change)".to_owned();
        }
        let text = cut(&self.text, DIFF_BYTES_MAX);
        if text.len() < self.text.len() {
            format!(
                "{text}\n[... {} more bytes of diff not shown; read the files]",
                self.text.len() - text.len()
            )
        } else {
            text.to_owned()
        }
    }
}

/// A verifier run's summary for the verdict (its full result is in its run directory).
fn summary(result: &Value) -> Value {
    json!({
        "provider": result.get("provider"),
        "end": result.get("end"),
        "session_id": result.get("session_id"),
        "turns": result.get("turns"),
        "cost_usd": result.get("cost_usd"),
        "error": result.get("error"),
    })
}

fn verifier_prompt(criteria: &str, evidence: &str, change: &Change) -> String {
    let evidence = if evidence.is_empty() {
        "(none given)".to_owned()
    } else {
        cut(evidence, EVIDENCE_BYTES_MAX).to_owned()
    };
    format!(
        "You are a verifier. Judge whether the change below meets the criteria. Do not \
         change any file: read the code in this directory if you need to.\n\n\
         ## Criteria\n{criteria}\n\n## Evidence\n{evidence}\n\n\
         ## The change (git diff against its base)\n```diff\n{}\n```\n\n\
         Answer with one JSON object and nothing else: \
         {{\"approved\": true|false, \"reason\": \"one paragraph\", \"findings\": \
         [{{\"title\": \"...\", \"detail\": \"...\", \"file\": \"path\", \"line\": 1, \
         \"severity\": \"high|medium|low\"}}]}}. A finding is a concrete problem that \
         keeps the change from meeting the criteria.",
        change.bounded()
    )
}

fn skeptic_prompt(criteria: &str, finding: &Value, change: &Change) -> String {
    format!(
        "You are a skeptical reviewer. Another reviewer reported the finding below about \
         a change. Try to refute it: check the code in this directory and the diff. Do \
         not change any file.\n\n## Criteria of the review\n{criteria}\n\n\
         ## The finding\n{}\n\n## The change\n```diff\n{}\n```\n\n\
         Answer with one JSON object and nothing else: {{\"refuted\": true|false, \
         \"reason\": \"why\"}}. Refute it only if it is wrong.",
        serde_json::to_string_pretty(finding).unwrap_or_default(),
        change.bounded()
    )
}

impl Provider for Gate {
    fn name(&self) -> &str {
        "gate"
    }

    fn describe(&self) -> Value {
        json!({
            "name": "gate",
            "description": "an agent gate (the `gate` leaf with `agent:`): a verifier agent in observe mode judges the job's change against criteria and evidence; answers {approved, reason, findings, refuted}",
            "args": {
                "provider": "the verifier: claude, codex or a declared agent (required)",
                "criteria": "what the change must meet (required)",
                "evidence": "what the verifier should know (test results, a plan)",
                "repo": "the checkout whose job worktree holds the change",
                "skeptic": "a second verifier tries to refute each finding",
                "model": "the verifier's model",
                "max_turns": "its turn limit",
                "timeout_ms": "its time limit",
            },
        })
    }

    fn call<'a>(&'a self, ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(async move { self.run(&ctx, args).await })
    }
}
