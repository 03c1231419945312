//! `palm jobs gc`: job retention on demand. The node (or, with none running, the store
//! under its lock) collects in bounded steps (`jobs_gc` requests, each one batch); this
//! command repeats them until the walk is done, shows progress on stderr, and prints the
//! totals. Retention comes from the flags, else `retention:` in palm.yaml.

use crate::cli::JobsGcArgs;
use crate::ctx::{Ctx, print};
use crate::exit::{CliError, CliResult, Code};
use palm_actors::definition::parse_duration_ms;
use palm_actors::path::retention::{Collected, Retention};
use palm_api::protocol::Request;
use palm_node::target::{Access, Target};
use serde_json::{Value, json};
use std::io::IsTerminal;
use std::time::Instant;

fn duration(flag: &str, text: &str) -> Result<u64, CliError> {
    parse_duration_ms(text).ok_or_else(|| {
        CliError::usage(
            "invalid_input",
            format!("{flag} `{text}` is not a duration (e.g. 0s, 12h, 7d)"),
        )
    })
}

/// The retention this run applies: flags over palm.yaml over the defaults.
fn retention(ctx: &Ctx, args: &JobsGcArgs) -> Result<Retention, CliError> {
    let mut kept = palm_node::config::load(&ctx.data, None)?
        .retention
        .unwrap_or_default();
    if let Some(keep) = &args.keep {
        kept.journal_ms = duration("--keep", keep)?;
    }
    match args.keep_summaries.as_deref() {
        Some("forever") => kept.summary_ms = None,
        Some(text) => kept.summary_ms = Some(duration("--keep-summaries", text)?),
        None => {}
    }
    if kept
        .summary_ms
        .is_some_and(|summary| summary < kept.journal_ms)
    {
        return Err(CliError::usage(
            "invalid_input",
            "summaries must be kept at least as long as journals (--keep-summaries ≥ --keep)",
        ));
    }
    Ok(kept)
}

/// `palm jobs gc`.
pub async fn gc(ctx: &Ctx, args: JobsGcArgs) -> CliResult {
    let kept = retention(ctx, &args)?;
    let started = Instant::now();
    let mut target = Target::for_access(&ctx.data, Access::Write).await?;
    let mut total = Collected::default();
    let mut cursor: Option<String> = None;
    let progress = !ctx.out.json && std::io::stderr().is_terminal();
    let mut steps = 0u64;
    let mut artifacts = palm_agents::artifacts::Removed::default();
    let result = loop {
        let answer = target
            .call(Request::JobsGc {
                cursor: cursor.take(),
                journal_ms: kept.journal_ms,
                summary_ms: kept.summary_ms,
                budget: None,
            })
            .await;
        let step: Collected = match answer.map(serde_json::from_value) {
            Ok(Ok(step)) => step,
            Ok(Err(err)) => {
                break Err(CliError::failure(
                    "protocol",
                    format!("the node answered jobs_gc with something unexpected: {err}"),
                ));
            }
            Err(err) => break Err(err),
        };
        total.add(&step);
        steps += 1;
        // The answer came after the step's commit: the journals are gone for good, and
        // so may what was kept of those jobs beside the store.
        if !step.released.is_empty() {
            let data = ctx.data.clone();
            let jobs = step.released.clone();
            let removed =
                tokio::task::spawn_blocking(move || palm_agents::artifacts::remove(&data, &jobs))
                    .await
                    .map_err(|e| CliError::failure("io", format!("removing artifacts: {e}")))?;
            artifacts.jobs += removed.jobs;
            artifacts.bytes += removed.bytes;
            artifacts.failed.extend(removed.failed);
        }
        if progress && steps.is_multiple_of(10) {
            eprint!(
                "\rcollecting: {} visited, {} compacted, {} forgotten",
                total.scanned, total.compacted, total.forgotten
            );
        }
        match step.cursor {
            Some(next) => cursor = Some(next),
            None => break Ok(()),
        }
    };
    target.finish().await;
    if progress && steps >= 10 {
        eprintln!();
    }
    result?;
    let report = json!({
        "scanned": total.scanned,
        "compacted": total.compacted,
        "forgotten": total.forgotten,
        "events_removed": total.events_removed,
        "effects_removed": total.effects_removed,
        "starts_removed": total.starts_removed,
        "artifacts_removed": artifacts.jobs,
        "artifact_bytes_freed": artifacts.bytes,
        "artifacts_failed": artifacts.failed.iter().map(|(path, err)| {
            json!({"path": path.display().to_string(), "error": err.to_string()})
        }).collect::<Vec<_>>(),
        "journal_ms": kept.journal_ms,
        "summary_ms": kept.summary_ms,
        "steps": steps,
        "duration_ms": started.elapsed().as_millis() as u64,
    });
    print(ctx, &report, human);
    Ok(if artifacts.failed.is_empty() {
        Code::Ok
    } else {
        Code::Failure
    })
}

fn human(out: &crate::output::Output, report: &Value) {
    let n = |key: &str| report[key].as_u64().unwrap_or(0);
    println!(
        "{} {} jobs compacted to their summary ({} journal events removed), {} forgotten ({} start keys removed)",
        out.bold("collected:"),
        n("compacted"),
        n("events_removed"),
        n("forgotten"),
        n("starts_removed"),
    );
    if n("artifacts_removed") > 0 {
        println!(
            "artifacts of {} jobs removed ({})",
            n("artifacts_removed"),
            crate::output::human_bytes(n("artifact_bytes_freed"))
        );
    }
    for failure in report["artifacts_failed"].as_array().into_iter().flatten() {
        println!(
            "{} {}: {}",
            out.red("kept"),
            failure["path"].as_str().unwrap_or_default(),
            failure["error"].as_str().unwrap_or_default()
        );
    }
    println!(
        "{}",
        out.dim(&format!(
            "{} entries visited in {} steps, {} ms",
            n("scanned"),
            n("steps"),
            n("duration_ms")
        ))
    );
}
