//! `palm agent run` (one agent run as a one-leaf job) and `palm patches list|show` (the
//! patches agent runs left under `DATA/patches/`).

use crate::cli::{AgentRunArgs, AgentsCommand, PatchesCommand, WorktreesCommand};
use crate::ctx::{Ctx, print};
use crate::exit::{CliError, CliResult, Code};
use crate::output::human_bytes;
use palm_api::protocol::{FlowArg, Request};
use palm_api::verbs::duration_ms;
use palm_node::target::Target;
use serde_json::{Value, json};
use std::path::PathBuf;

/// `palm agent run PROVIDER "PROMPT"`.
pub async fn run(ctx: &Ctx, args: AgentRunArgs) -> CliResult {
    if palm_agents::Mode::parse(&args.mode).is_none() {
        return Err(CliError::usage(
            "invalid_input",
            format!(
                "--mode must be observe, edit or execute, not `{}`",
                args.mode
            ),
        ));
    }
    let timeout_ms = args
        .timeout
        .as_deref()
        .map(|t| duration_ms(t, "--timeout"))
        .transpose()?;
    let repo = match &args.repo {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    };
    let repo = std::fs::canonicalize(&repo)
        .map_err(|e| CliError::usage("invalid_input", format!("--repo {}: {e}", repo.display())))?;
    let spec = palm_agents::AgentSpec {
        provider: args.provider.clone(),
        prompt: args.prompt.clone(),
        mode: palm_agents::Mode::parse(&args.mode).unwrap_or_default(),
        repo: Some(repo.display().to_string()),
        model: args.model.clone(),
        max_turns: args.max_turns,
        timeout_ms,
        budget_usd: args.budget_usd,
        resume: args.resume.clone(),
        schema: None,
        job: None,
        job_budget_usd: None,
        job_budget_turns: None,
        lane: None,
    };
    spec.check()
        .map_err(|e| CliError::usage("invalid_input", e))?;
    let (source, input) = palm_agents::spec::one_leaf_flow(&spec);
    let mut target = Target::driving(&ctx.data, None).await?;
    let result = async {
        let submitted = target
            .call(Request::Submit {
                flow: FlowArg::Source {
                    source,
                    origin: "<palm agent run>".into(),
                },
                input,
                args: Vec::new(),
                started_by: None,
                node: None,
            })
            .await?;
        let job = submitted["job"].as_str().unwrap_or_default().to_owned();
        let label = format!("{} in job {job}", args.provider);
        let view = crate::ctx::settled_view(ctx, &mut target, &job, &label, None).await?;
        let mut result = view["state"]["result"].clone();
        if result.is_null() && view["status"] == "cancelled" {
            // Cancelled while it ran: the run's mark says how far it got (`interrupted`).
            let inspected = target.call(Request::Inspect { job: job.clone() }).await?;
            if let Some(run) = inspected["agent_runs"].as_array().and_then(|r| r.last()) {
                result = run.clone();
            }
        }
        let out = json!({
            "job": job,
            "status": view["status"],
            "result": result,
            "error": view["error"],
        });
        print(ctx, &out, |o, v| {
            let result = &v["result"];
            let end = result["end"].as_str().unwrap_or("unknown");
            let mut line = format!(
                "agent {} ended {}",
                result["provider"].as_str().unwrap_or(&args.provider),
                if end == "success" {
                    o.green(end)
                } else {
                    o.red(end)
                }
            );
            if let Some(ms) = result["duration_ms"].as_u64() {
                line.push_str(&format!(" in {:.1} s", ms as f64 / 1000.0));
            }
            if let Some(session) = result["session_id"].as_str() {
                line.push_str(&format!(" · session {session}"));
            }
            if let Some(turns) = result["turns"].as_u64() {
                line.push_str(&format!(" · {turns} turns"));
            }
            if let Some(cost) = result["cost_usd"].as_f64() {
                line.push_str(&format!(" · ${cost:.4}"));
            }
            println!(
                "{line}  {}",
                o.dim(&format!("job {}", v["job"].as_str().unwrap_or_default()))
            );
            if let Some(error) = result["error"].as_str().or(v["error"].as_str()) {
                println!("  {}", o.red(error));
            }
            if result["patch"].is_object() {
                let patch = &result["patch"];
                println!(
                    "  patch {} {}: {} files, +{} -{}",
                    patch["id"].as_str().unwrap_or_default(),
                    patch["status"].as_str().unwrap_or_default(),
                    patch["files"].as_array().map_or(0, Vec::len),
                    patch["added"],
                    patch["removed"]
                );
            }
            if let Some(text) = result["text"].as_str().filter(|t| !t.is_empty()) {
                println!("{text}");
            }
        });
        Ok(if view["status"] == "succeeded" {
            Code::Ok
        } else {
            Code::JobFailed
        })
    }
    .await;
    target.finish().await;
    result
}

fn patch_error(err: palm_agents::patches::PatchError) -> CliError {
    let mut out = if err.usage {
        CliError::usage(err.kind, err.message)
    } else {
        CliError::failure(err.kind, err.message)
    };
    out.hint = err.hint;
    out
}

/// `palm patches apply|revert`.
fn land(ctx: &Ctx, id: &str, to: Option<String>, revert: bool) -> CliResult {
    let answer = palm_agents::patches::Patches::new(&ctx.data)
        .land(id, to, revert, crate::genome::now_ms())
        .map_err(patch_error)?;
    let code = if answer["status"] == "conflict" {
        Code::Failure
    } else {
        Code::Ok
    };
    print(ctx, &answer, |o, v| {
        match v["status"].as_str().unwrap_or_default() {
            "conflict" => {
                println!(
                    "{} patch {id} conflicts with `{}`; nothing was changed",
                    o.red("conflict:"),
                    v["target"].as_str().unwrap_or_default()
                );
                for path in v["conflicts"].as_array().into_iter().flatten() {
                    println!("  {}", path.as_str().unwrap_or_default());
                }
            }
            status => {
                println!(
                    "patch {id} {status}: {} on {}",
                    v["commit"].as_str().unwrap_or_default(),
                    o.bold(v["branch"].as_str().unwrap_or_default())
                );
                if let Some(note) = v["note"].as_str() {
                    println!("  {}", o.dim(note));
                }
            }
        }
    });
    Ok(code)
}

/// `palm patches list|show|apply|revert`.
pub fn patches(ctx: &Ctx, command: PatchesCommand) -> CliResult {
    match command {
        PatchesCommand::Apply { id, to } => land(ctx, &id, to, false),
        PatchesCommand::Revert { id } => land(ctx, &id, None, true),
        PatchesCommand::List { job } => {
            let patches = palm_agents::patches::Patches::new(&ctx.data)
                .list(job.as_deref())
                .map_err(patch_error)?;
            print(ctx, &json!({"patches": patches}), |o, v| {
                let list = v["patches"].as_array().cloned().unwrap_or_default();
                if list.is_empty() {
                    println!("{}", o.dim("no patches"));
                }
                for patch in list {
                    let status = patch["status"].as_str().unwrap_or_default();
                    println!(
                        "{}  {:<9}  job {}  {} files +{} -{}{}",
                        o.bold(patch["id"].as_str().unwrap_or_default()),
                        status,
                        patch["job"].as_str().unwrap_or_default(),
                        patch["files"].as_array().map_or(0, Vec::len),
                        patch["added"],
                        patch["removed"],
                        match patch["findings"].as_array().map_or(0, Vec::len) {
                            0 => String::new(),
                            n => format!("  {}", o.red(&format!("{n} secret findings"))),
                        }
                    );
                }
            });
            Ok(Code::Ok)
        }
        PatchesCommand::Show { id } => {
            let patch = palm_agents::patches::Patches::new(&ctx.data)
                .show(&id)
                .map_err(patch_error)?;
            print(ctx, &patch, |o, v| {
                println!(
                    "patch {} {} · job {} · base {}",
                    o.bold(v["id"].as_str().unwrap_or_default()),
                    v["status"].as_str().unwrap_or_default(),
                    v["job"].as_str().unwrap_or_default(),
                    v["base"].as_str().unwrap_or_default()
                );
                for finding in v["findings"].as_array().into_iter().flatten() {
                    println!(
                        "  {} {} at {}:{}",
                        o.red("secret"),
                        finding["kind"].as_str().unwrap_or_default(),
                        finding["path"].as_str().unwrap_or_default(),
                        finding["line"]
                    );
                }
                print!("{}", v["diff"].as_str().unwrap_or_default());
            });
            Ok(Code::Ok)
        }
    }
}

/// Each listed worktree with its job's status (`unknown` when this node has no such job).
async fn worktrees_with_status(
    ctx: &Ctx,
) -> Result<Vec<(palm_agents::git::Found, String)>, CliError> {
    let root = ctx.data.join("worktrees");
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    let found = palm_agents::git::list_worktrees(&root);
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let mut target = Target::for_access(&ctx.data, palm_node::target::Access::Read).await?;
    let mut listed = Vec::new();
    for tree in found {
        let status = match target
            .call(Request::Status {
                job: tree.job.clone(),
            })
            .await
        {
            Ok(view) => view["status"].as_str().unwrap_or("unknown").to_owned(),
            Err(err) if err.kind == "unknown_job" => "unknown".to_owned(),
            Err(err) => {
                target.finish().await;
                return Err(err);
            }
        };
        listed.push((tree, status));
    }
    target.finish().await;
    Ok(listed)
}

/// `palm worktrees list|gc`.
pub async fn worktrees(ctx: &Ctx, command: WorktreesCommand) -> CliResult {
    let listed = worktrees_with_status(ctx).await?;
    match command {
        WorktreesCommand::List => {
            let trees: Vec<Value> = listed
                .iter()
                .map(|(tree, status)| palm_agents::git::describe_worktree(tree, status))
                .collect();
            let total: u64 = trees.iter().filter_map(|t| t["bytes"].as_u64()).sum();
            print(ctx, &json!({"worktrees": trees, "bytes": total}), |o, v| {
                let list = v["worktrees"].as_array().cloned().unwrap_or_default();
                if list.is_empty() {
                    println!("{}", o.dim("no worktrees"));
                }
                for tree in list {
                    println!(
                        "{}  {:<9}  {:>9}  {}",
                        o.bold(tree["job"].as_str().unwrap_or_default()),
                        tree["status"].as_str().unwrap_or_default(),
                        human_bytes(tree["bytes"].as_u64().unwrap_or(0)),
                        tree["path"].as_str().unwrap_or_default()
                    );
                }
                println!(
                    "{}",
                    o.dim(&format!(
                        "{} in all",
                        human_bytes(v["bytes"].as_u64().unwrap_or(0))
                    ))
                );
            });
            Ok(Code::Ok)
        }
        WorktreesCommand::Gc => {
            let mut removed = Vec::new();
            let mut kept = 0;
            let mut freed = 0;
            let mut failures = Vec::new();
            for (tree, status) in listed {
                if palm_agents::git::job_is_live(&status) {
                    kept += 1;
                    continue;
                }
                let reference = palm_agents::git::saved_ref(&tree.job, "gc");
                let bytes = palm_agents::git::disk_use(&tree.path);
                match palm_agents::git::remove_worktree(&tree, &reference) {
                    Ok(saved) => {
                        freed += bytes;
                        removed.push(json!({
                            "job": tree.job,
                            "path": tree.path.display().to_string(),
                            "status": status,
                            "saved": saved.map(|commit| json!({"ref": reference, "commit": commit})),
                        }));
                    }
                    Err(err) => failures.push(
                        json!({"path": tree.path.display().to_string(), "error": err.to_string()}),
                    ),
                }
            }
            let answer =
                json!({"removed": removed, "kept": kept, "bytes_freed": freed, "failed": failures});
            print(ctx, &answer, |o, v| {
                for tree in v["removed"].as_array().into_iter().flatten() {
                    println!(
                        "removed {} ({}){}",
                        tree["path"].as_str().unwrap_or_default(),
                        tree["status"].as_str().unwrap_or_default(),
                        tree["saved"]["ref"]
                            .as_str()
                            .map(|r| format!(", saved on {r}"))
                            .unwrap_or_default()
                    );
                }
                for failure in v["failed"].as_array().into_iter().flatten() {
                    println!(
                        "{} {}: {}",
                        o.red("kept"),
                        failure["path"].as_str().unwrap_or_default(),
                        failure["error"].as_str().unwrap_or_default()
                    );
                }
                println!(
                    "{}",
                    o.dim(&format!(
                        "{} removed, {} kept (live jobs), {} freed",
                        v["removed"].as_array().map_or(0, Vec::len),
                        v["kept"],
                        human_bytes(v["bytes_freed"].as_u64().unwrap_or(0))
                    ))
                );
            });
            Ok(
                if answer["failed"].as_array().is_some_and(|f| !f.is_empty()) {
                    Code::Failure
                } else {
                    Code::Ok
                },
            )
        }
    }
}

/// `palm agents install|guide`.
pub fn agents(ctx: &Ctx, command: AgentsCommand) -> CliResult {
    use palm_agents::install;
    match command {
        AgentsCommand::Guide => {
            print!("{}", install::GUIDE);
            Ok(Code::Ok)
        }
        AgentsCommand::Install { repo, file } => {
            let repo = repo.unwrap_or_else(|| PathBuf::from("."));
            if !repo.is_dir() {
                return Err(CliError::usage(
                    "invalid_input",
                    format!("--repo {} is not a directory", repo.display()),
                ));
            }
            let mut written = Vec::new();
            for path in install::targets(&repo, &file) {
                let current = match std::fs::read_to_string(&path) {
                    Ok(text) => Some(text),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => {
                        return Err(CliError::failure(
                            "io",
                            format!("cannot read {}: {e}", path.display()),
                        ));
                    }
                };
                let (text, action) = install::with_block(current.as_deref());
                if action != install::Action::Unchanged {
                    std::fs::write(&path, text).map_err(|e| {
                        CliError::failure("io", format!("cannot write {}: {e}", path.display()))
                    })?;
                }
                written.push(json!({"path": path.display().to_string(), "action": action}));
            }
            print(ctx, &json!({"files": written}), |o, v| {
                for file in v["files"].as_array().into_iter().flatten() {
                    println!(
                        "{} {}",
                        o.bold(file["action"].as_str().unwrap_or_default()),
                        file["path"].as_str().unwrap_or_default()
                    );
                }
            });
            Ok(Code::Ok)
        }
    }
}
