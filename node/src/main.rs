//! The `palm` binary: parse arguments, run a command, map the outcome to an exit code.
//!
//! Exit codes (see `exit.rs`): 0 ok or job succeeded, 1 other error, 2 usage or invalid
//! input, 3 job failed, 4 job waiting, 5 job cancelled.

mod agent_cmd;
mod bench;
mod bench_effects;
mod bench_explorer;
#[cfg(feature = "intel")]
mod bench_index;
mod bench_restart;
#[cfg(feature = "intel")]
mod bench_sessions;
mod bench_tree;
mod bench_tunnel;
mod cli;
mod commands;
mod ctx;
mod doctor;
mod flows_cmd;
use palm_api::exit;
use palm_node::{config, control, genome, link, node, providers, sys, tokens, tree_store};
#[cfg(feature = "intel")]
mod intel_cmd;
mod interests_cmd;
mod jobs_cmd;
#[cfg(feature = "intel")]
mod knowledge_cmd;
#[cfg(feature = "intel")]
mod knowledge_summary;
mod output;
mod places_cmd;
mod route_cmd;
#[cfg(feature = "intel")]
mod sessions_cmd;
mod sim_cmd;
mod team_cmd;
mod tokens_cmd;
mod top_cmd;
mod validate;
mod web;
mod wizard_cmd;

/// The allocator of every `palm` process (see node/Cargo.toml for why).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Tunes the allocator before anything is allocated: its arenas are committed as they are
/// used, not all at once when reserved. Committing them eagerly (mimalloc's default where
/// the kernel overcommits) tripled the time a node with 100k parked jobs took to be ready
/// (`palm bench restart`: about 230 ms against 75 ms) and added about 80 bytes per parked
/// job. It runs as the process loads (an `.init_array` entry, before `main` and Rust's
/// runtime allocate): set from `main`, the option came too late for the first arena.
/// `MIMALLOC_ARENA_EAGER_COMMIT` in the environment still wins. (The binary's one
/// `unsafe`: a call into the allocator's C API.)
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
extern "C" fn tune_allocator() {
    /// `mi_option_arena_eager_commit` in mimalloc.h's `mi_option_e` (the sys crate names
    /// no constant for it).
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    if std::env::var_os("MIMALLOC_ARENA_EAGER_COMMIT").is_none() {
        // SAFETY: sets one of mimalloc's integer options; no pointer is involved, and
        // an option may be set at any time.
        unsafe { libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0) };
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
#[used]
#[unsafe(link_section = ".init_array")]
static TUNE_ALLOCATOR: extern "C" fn() = tune_allocator;

use clap::Parser;
use exit::CliError;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

fn init_logging(command: &cli::Command) {
    let default = match command {
        cli::Command::Up(_) => "info",
        // rmcp logs every JSON-RPC error it answers at warn; for an agent's typo that is
        // noise on the client's stderr, so only its errors show by default.
        cli::Command::Mcp(_) => "warn,rmcp=error",
        _ => "warn",
    };
    let filter = EnvFilter::try_from_env("PALM_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn report(err: &CliError, json: bool) {
    if json {
        let mut body = serde_json::json!({
            "error": {
                "kind": err.kind,
                "message": err.message,
                "hint": err.hint,
                "exit_code": err.code as u8,
            }
        });
        if let Some(job) = &err.job {
            body["error"]["job"] = serde_json::json!(job);
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&body).unwrap_or_default()
        );
    }
    // A flow diagnostic already reads `FILE:LINE:COL: error: ...`; print it as it is.
    if err.kind == "invalid_flow" && err.message.contains(": error: ") {
        eprintln!("{}", err.message);
    } else {
        eprintln!("palm: error: {}", err.message);
    }
    if let Some(hint) = &err.hint {
        eprintln!("  hint: {hint}");
    }
}

/// `best_of` ranks attempts by the risk of the files they touch: the repo index's score,
/// when this binary has the index.
fn install_risk_scorer() {
    #[cfg(feature = "intel")]
    palm_node::providers::best_of::set_risk_scorer(std::sync::Arc::new(|repo, files| {
        let intel = palm_intel::Intel::open(repo).ok()?;
        // Only a checkout already indexed (`palm index`): building an index here would
        // write into the checkout and hold the ranking for minutes on a large repo.
        if !intel.root().join(".palm/index/meta.json").exists() {
            return None;
        }
        let mut warnings = Vec::new();
        let snapshot = intel.snapshot(&mut warnings).ok()?;
        files
            .iter()
            .filter_map(|file| snapshot.risk(file).ok().map(|r| r.score))
            .max()
    }));
}

/// A team with `parallel` asks which of its tasks will probably touch a same file: the
/// repo index's prediction, when this binary has the index and the checkout is indexed.
fn install_conflict_predictor() {
    #[cfg(feature = "intel")]
    palm_node::providers::lanes::set_conflict_predictor(std::sync::Arc::new(|repo, tasks| {
        use palm_intel::overlap::TaskScope;
        let intel = palm_intel::Intel::open(repo).map_err(|e| e.to_string())?;
        // As for risk: only a checkout already indexed (building one here would hold the
        // team for minutes on a large repo).
        if !intel.root().join(".palm/index/meta.json").exists() {
            return Err(format!(
                "{} has no repo index (`palm index --repo {}` makes one)",
                intel.root().display(),
                intel.root().display()
            ));
        }
        let mut warnings = Vec::new();
        let snapshot = intel.snapshot(&mut warnings).map_err(|e| e.to_string())?;
        let text = |task: &serde_json::Value, field: &str| {
            task[field].as_str().unwrap_or_default().to_owned()
        };
        let scoped: Vec<(String, TaskScope)> = tasks
            .iter()
            .map(|task| {
                let files = task["files"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.as_str().map(str::to_owned))
                    .collect();
                let words = format!("{}\n{}", text(task, "title"), text(task, "detail"));
                let scope = TaskScope {
                    files,
                    symbols: Vec::new(),
                    text: words.trim().to_owned(),
                };
                (text(task, "id"), scope)
            })
            .collect();
        serde_json::to_value(snapshot.schedule(&scoped)).map_err(|e| e.to_string())
    }));
}

/// MCP's `palm_recall` and `palm_session` answer from the session memory, when this
/// binary has it.
fn install_session_tools() {
    #[cfg(feature = "intel")]
    palm_mcp::tools::set_sessions(std::sync::Arc::new(|data, tool, arguments| {
        use palm_mcp::tools::{Answer, ToolError};
        let failed =
            |err: palm_sessions::SessionsError| ToolError::new(err.kind(), err.to_string());
        if tool == "palm_knowledge" {
            return crate::knowledge_cmd::mcp_tool(arguments);
        }
        let memory = palm_sessions::Memory::open(data).map_err(failed)?;
        let text = |name: &str| arguments.get(name).and_then(|v| v.as_str());
        if tool == "palm_session" {
            let id = text("id").unwrap_or_default();
            let at = arguments.get("at").and_then(|v| v.as_u64());
            let shown = memory.show(id, at).map_err(failed)?;
            let summary = format!(
                "session {id} ({}): {} entries shown, {} runs, {} patches, {} commits linked",
                shown.listed.vendor.map(|v| v.as_str()).unwrap_or("?"),
                shown.entries.len(),
                shown.links.runs.len(),
                shown.links.patches.len(),
                shown.links.commits.len()
            );
            let value = serde_json::to_value(&shown).unwrap_or_default();
            return Ok(Answer { value, summary });
        }
        let since_ms = match text("since") {
            Some(since) => {
                let ms = palm_actors::definition::parse_duration_ms(since).ok_or_else(|| {
                    ToolError::argument(format!("palm_recall: `since` {since} is not a duration"))
                })?;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                Some(now - i64::try_from(ms).unwrap_or(i64::MAX / 2))
            }
            None => None,
        };
        let recall = palm_sessions::Recall {
            query: text("query").unwrap_or_default().to_owned(),
            repo: text("repo").map(str::to_owned),
            since_ms,
            vendor: text("vendor").and_then(palm_sessions::Vendor::parse),
            limit: arguments
                .get("limit")
                .and_then(|v| v.as_u64())
                .unwrap_or(20) as usize,
        };
        let hits = memory.recall(&recall).map_err(failed)?;
        let summary = match hits.first() {
            Some(best) => format!(
                "{} hits; best: session {} line {}: {}",
                hits.len(),
                best.session,
                best.line,
                best.snippet
            ),
            None => "no hits".to_owned(),
        };
        Ok(Answer {
            value: serde_json::json!({"hits": hits}),
            summary,
        })
    }));
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if !matches!(cli.command, cli::Command::Up(_)) {
        sys::default_sigpipe();
    }
    init_logging(&cli.command);
    install_risk_scorer();
    install_conflict_predictor();
    install_session_tools();
    let json = cli.json;
    let out = output::Output::new(json);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // tokio's own knob wins when set, as users of tokio programs expect.
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(sys::cpus().clamp(2, 8));
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            report(
                &CliError::failure("runtime", format!("cannot start the async runtime: {err}")),
                json,
            );
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(commands::run(cli, out));
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(err) => {
            report(&err, json);
            ExitCode::from(err.code as u8)
        }
    }
}
