//! `palm knowledge build --summarize PROVIDER`: module summaries written by a model,
//! through an `agent` leaf (observe mode, a JSON Schema for the answer) run as a job on
//! the node like any other agent run, so it is journaled, bounded by a timeout and
//! audited against its authority.
//!
//! The model gets the module's brief and is asked for claims, each citing `FILE:LINE`,
//! `FILE:LINE-END` or a commit. Palm keeps a claim only when it cites something and every
//! citation resolves (the file exists in the repository, the lines are inside it, the
//! commit is in it); each kept citation is fingerprinted like any other, so a later
//! audit sees the cited lines change. Dropped claims are stored with the reason.

use crate::ctx::Ctx;
use crate::exit::CliError;
use palm_api::protocol::{FlowArg, Request};
use palm_intel::Intel;
use palm_intel::knowledge::{DroppedClaim, Knowledge, Summary, SummaryClaim};
use palm_node::target::Target;
use serde_json::{Value, json};

/// Claims kept per summary.
pub const SUMMARY_CLAIMS_MAX: usize = 12;
/// A claim's text is at most this long (characters).
pub const CLAIM_CHARS_MAX: usize = 600;
/// The brief a model gets (bytes).
const BRIEF_BYTES: usize = 8_000;

/// The answer's shape.
fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["claims"],
        "properties": {
            "claims": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["text", "cites"],
                    "properties": {
                        "text": {"type": "string"},
                        "cites": {"type": "array", "items": {"type": "string"}}
                    }
                }
            }
        }
    })
}

fn flow(schema: &Value, timeout_ms: u64) -> String {
    format!(
        "name: knowledge-summary\ndescription: a module summary for the knowledge map, every claim cited (palm knowledge build --summarize)\ninput:\n  provider: string\n  prompt: string\n  repo: string\ntree:\n  agent:\n    provider: \"{{{{ input.provider }}}}\"\n    prompt: \"{{{{ input.prompt }}}}\"\n    mode: observe\n    repo: \"{{{{ input.repo }}}}\"\n    timeout: {timeout_ms}\n    schema: {schema}\n    save: result\n"
    )
}

fn prompt(module: &str, path: &str, brief: &str) -> String {
    format!(
        "You are writing the summary of one module of this repository for its knowledge map: \
what `{module}` (directory `{path}`) is for, how the rest of the code uses it, and the rules \
its code keeps. Read its code before you write. Do not change any file.\n\n\
Answer with JSON only: {{\"claims\": [{{\"text\": \"...\", \"cites\": [\"path/to/file.rs:12-30\"]}}]}}. \
At most {SUMMARY_CLAIMS_MAX} claims, one sentence each. Every claim cites the lines that show it, \
as FILE:LINE or FILE:LINE-END with repository-relative paths, or a commit id; a claim whose \
citations do not resolve is thrown away.\n\n\
What the repository index already knows:\n\n{brief}"
    )
}

/// Summarizes the chosen modules (or those missing a summary or holding a flagged
/// claim), one agent run each; returns one report per module.
pub async fn summarize(
    ctx: &Ctx,
    intel: &Intel,
    knowledge: &mut Knowledge,
    provider: &str,
    wanted: &[String],
    limit: usize,
    timeout_ms: u64,
) -> Result<Vec<Value>, CliError> {
    let repo = intel.repository();
    let names: Vec<String> = if wanted.is_empty() {
        let claims = knowledge.claims();
        knowledge
            .map
            .modules
            .iter()
            .filter(|m| {
                !knowledge.summaries.modules.contains_key(&m.name)
                    || claims.iter().any(|c| {
                        c.kind == "summary"
                            && c.module == Some(m.name.as_str())
                            && knowledge.audit_claim(repo, c).status != "holds"
                    })
            })
            .map(|m| m.name.clone())
            .take(limit)
            .collect()
    } else {
        wanted
            .iter()
            .map(|w| {
                knowledge
                    .module(w)
                    .map(|m| m.name.clone())
                    .map_err(crate::intel_cmd::cli_error)
            })
            .collect::<Result<_, _>>()?
    };
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let source = flow(&schema(), timeout_ms);
    let mut target = Target::driving(&ctx.data, None).await?;
    let mut reports = Vec::new();
    for name in names {
        let Ok(module) = knowledge.module(&name).cloned() else {
            continue;
        };
        let head = palm_intel::knowledge::brief::brief(knowledge, repo, &module, &[], BRIEF_BYTES);
        let mut input = serde_json::Map::new();
        input.insert("provider".into(), json!(provider));
        input.insert(
            "prompt".into(),
            json!(prompt(&module.name, &module.path, &head.text)),
        );
        input.insert("repo".into(), json!(intel.root().display().to_string()));
        if !ctx.out.json {
            eprintln!("palm: summarizing {} with {provider} ...", module.name);
        }
        let result = async {
            let submitted = target
                .call(Request::Submit {
                    flow: FlowArg::Source {
                        source: source.clone(),
                        origin: "<palm knowledge build --summarize>".into(),
                    },
                    input: input.clone(),
                    args: Vec::new(),
                    started_by: None,
                    node: None,
                })
                .await?;
            let job = submitted["job"].as_str().unwrap_or_default().to_owned();
            let label = format!("{provider} summarizing {} in job {job}", module.name);
            let view = crate::ctx::settled_view(ctx, &mut target, &job, &label, None).await?;
            Ok::<_, CliError>((job, view))
        }
        .await;
        let (job, view) = match result {
            Ok(done) => done,
            Err(e) => {
                reports.push(json!({"module": module.name, "error": e.to_string()}));
                continue;
            }
        };
        let run = &view["state"]["result"];
        let Some(answer) = run["structured"].as_object() else {
            let why = run["error"]
                .as_str()
                .or(view["error"].as_str())
                .unwrap_or("the agent gave no answer in the asked shape");
            reports.push(json!({
                "module": module.name,
                "job": job,
                "error": format!("{provider} ended {}: {why}", run["end"].as_str().unwrap_or("unknown")),
            }));
            continue;
        };
        let (claims, dropped) = check_claims(knowledge, intel, answer.get("claims"));
        let summary = Summary {
            module: module.name.clone(),
            provider: provider.to_owned(),
            job: Some(job.clone()),
            written_at: crate::intel_cmd::now_s(),
            head: intel.head(),
            claims,
            dropped,
        };
        let report = json!({
            "module": module.name,
            "job": job,
            "kept": summary.claims.len(),
            "dropped": summary.dropped.len(),
            "dropped_claims": summary.dropped,
        });
        knowledge
            .store_summary(summary)
            .map_err(crate::intel_cmd::cli_error)?;
        reports.push(report);
    }
    target.finish().await;
    Ok(reports)
}

/// Keeps the claims whose every citation resolves; the rest are dropped with the reason.
fn check_claims(
    knowledge: &Knowledge,
    intel: &Intel,
    claims: Option<&Value>,
) -> (Vec<SummaryClaim>, Vec<DroppedClaim>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for claim in claims.and_then(Value::as_array).into_iter().flatten() {
        let text = claim["text"].as_str().unwrap_or("").trim().to_owned();
        let drop = |dropped: &mut Vec<DroppedClaim>, reason: String| {
            dropped.push(DroppedClaim {
                text: text.chars().take(CLAIM_CHARS_MAX).collect(),
                reason,
            });
        };
        if text.is_empty() {
            drop(&mut dropped, "no text".into());
            continue;
        }
        if text.chars().count() > CLAIM_CHARS_MAX {
            drop(
                &mut dropped,
                format!("longer than {CLAIM_CHARS_MAX} characters"),
            );
            continue;
        }
        if kept.len() >= SUMMARY_CLAIMS_MAX {
            drop(
                &mut dropped,
                format!("more than {SUMMARY_CLAIMS_MAX} claims"),
            );
            continue;
        }
        let refs: Vec<&str> = claim["cites"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if refs.is_empty() {
            drop(&mut dropped, "it cites nothing".into());
            continue;
        }
        let mut cites = Vec::new();
        let mut errors = Vec::new();
        for r in refs.iter().take(palm_intel::knowledge::DECISION_CITES_MAX) {
            match knowledge.resolve_cite(intel.repository(), intel.root(), r.trim()) {
                // A bare file proves nothing about a sentence: a summary cites lines.
                Ok(c) if c.file.is_some() && c.line.is_none() => {
                    errors.push(format!("{r}: cite lines (FILE:LINE), not a whole file"));
                }
                Ok(c) => cites.push(c),
                Err(e) => errors.push(e.to_string().trim_start_matches("--cite ").to_owned()),
            }
        }
        if errors.is_empty() {
            kept.push(SummaryClaim { text, cites });
        } else {
            drop(&mut dropped, errors.join("; "));
        }
    }
    (kept, dropped)
}
