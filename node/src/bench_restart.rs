//! `palm bench restart`: how fast a node with many parked jobs is back, and what each
//! parked job costs in memory — against the same `palm up` on an empty store, measured
//! in the same run.
//!
//! An in-process node fills a fresh store with `--parked` jobs waiting for input and
//! `--running` jobs sleeping on a timer, then stops. Then, for the empty store and for
//! the full one, a real `palm up` process starts; `ready_ms` is the time until its
//! control socket answers *and* a job submitted then has succeeded (seats claim), and
//! its resident memory is read once it is ready. `rss_per_parked_bytes` is the full
//! node's memory over the empty node's, per parked job.

use crate::cli::BenchRestartArgs;
use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use crate::genome::NodeSettings;
use crate::node::{BootOptions, Node};
use palm_api::protocol::{FlowArg, Request};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PARKED_FLOW: &str = "name: bench-parked\ntree:\n  wait: { key: go, prompt: \"Go?\" }\n";
const RUNNING_FLOW: &str = "name: bench-running\ntree:\n  sleep: 1h\n";
const PROBE_FLOW: &str = "name: bench-probe\ntree:\n  set: { done: true }\n";

fn source(text: &str) -> FlowArg {
    FlowArg::Source {
        source: text.to_owned(),
        origin: "<bench>".into(),
    }
}

/// Submits `count` jobs of `flow`, 64 at a time.
async fn fill(node: &Arc<Node>, flow: &'static str, count: usize) -> Result<(), CliError> {
    let workers = 64.min(count.max(1));
    let per_worker = count.div_ceil(workers);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let node = Arc::clone(node);
        let mine = per_worker.min(count.saturating_sub(w * per_worker));
        tasks.push(tokio::spawn(async move {
            for _ in 0..mine {
                let answer = node
                    .call(Request::Submit {
                        flow: source(flow),
                        input: Default::default(),
                        args: vec![],
                        started_by: None,
                        node: None,
                    })
                    .await;
                if !answer.ok {
                    return Err(CliError::failure(
                        "bench",
                        format!("submit failed: {:?}", answer.error),
                    ));
                }
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| CliError::failure("bench", e.to_string()))??;
    }
    Ok(())
}

/// Starts `palm up` on `data`; answers (ms until ready, resident bytes once ready).
async fn start(data: &Path) -> Result<(f64, u64), CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::failure("bench", format!("where am I: {e}")))?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(exe)
        .arg("--data")
        .arg(data)
        .arg("up")
        .env("PALM_LOG", "error")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| CliError::failure("bench", format!("cannot start palm up: {e}")))?;
    let pid = child.id().unwrap_or(0).to_string();
    let deadline = started + Duration::from_secs(300);
    let mut client = loop {
        if let Some(client) = palm_node::target::connect(data).await {
            break client;
        }
        if Instant::now() > deadline {
            return Err(CliError::failure("bench", "palm up never answered"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let mut ask = async |request: Request| {
        client
            .call(&request)
            .await
            .map_err(|e| CliError::failure("bench", e.to_string()))
            .and_then(palm_api::verbs::into_result)
    };
    let submitted = ask(Request::Submit {
        flow: source(PROBE_FLOW),
        input: Default::default(),
        args: vec![],
        started_by: None,
        node: None,
    })
    .await?;
    let job = submitted["job"].as_str().unwrap_or_default().to_owned();
    let done = ask(Request::Wait {
        job,
        timeout_ms: Some(120_000),
    })
    .await?;
    if done["status"] != "succeeded" {
        return Err(CliError::failure(
            "bench",
            format!("the probe job ended {}", done["status"]),
        ));
    }
    let ready_ms = started.elapsed().as_secs_f64() * 1000.0;
    let rss = palm_node::sys::rss_of(&pid).unwrap_or(0);
    // SIGTERM: the node stops as a user's would.
    let _ = std::process::Command::new("kill").arg(&pid).status();
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    Ok((ready_ms, rss))
}

/// Runs the benchmark.
pub async fn run(ctx: &Ctx, args: BenchRestartArgs) -> CliResult {
    let scratch = std::env::temp_dir().join(format!("palm-bench-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let (empty, full) = (scratch.join("empty"), scratch.join("full"));
    eprintln!(
        "palm bench restart: filling a store with {} parked and {} running jobs",
        args.parked, args.running
    );
    let filled = Instant::now();
    let node = Arc::new(
        Node::boot(BootOptions {
            data: full.clone(),
            name: "bench".into(),
            profile: "all-in-one".into(),
            settings: NodeSettings::default(),
            embedded: true,
            store: None,
        })
        .await?,
    );
    let filling = async {
        fill(&node, PARKED_FLOW, args.parked).await?;
        fill(&node, RUNNING_FLOW, args.running).await
    }
    .await;
    if let Ok(node) = Arc::try_unwrap(node) {
        node.shutdown(Duration::ZERO).await;
    }
    filling?;
    let fill_s = filled.elapsed().as_secs_f64();
    std::fs::create_dir_all(&empty)?;
    eprintln!("  filled in {fill_s:.1} s; starting palm up on the empty store, then the full one");
    let measured = async {
        let (empty_ms, empty_rss) = start(&empty).await?;
        let (ready_ms, rss) = start(&full).await?;
        Ok::<_, CliError>((empty_ms, empty_rss, ready_ms, rss))
    }
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    let (empty_ms, empty_rss, ready_ms, rss) = measured?;
    let per_parked = rss.saturating_sub(empty_rss) as f64 / args.parked.max(1) as f64;
    let result = json!({
        "machine": { "cpus": crate::sys::cpus() },
        "parked": args.parked,
        "running": args.running,
        "ready_ms": ready_ms,
        "rss_bytes": rss,
        "rss_per_parked_bytes": per_parked,
        "baseline": {"what": "palm up on an empty store, same machine, same run",
                     "ready_ms": empty_ms, "rss_bytes": empty_rss},
        "ratio": {"ready_over_empty": ready_ms / empty_ms.max(1e-9)},
        "goals": {"ready_ms": 2000, "rss_per_parked_bytes": 1024},
        "fill_s": fill_s,
    });
    if ctx.out.json {
        ctx.out.json(&result);
    } else {
        println!(
            "{} parked + {} running: ready in {ready_ms:.0} ms (goal ≤ 2000), {:.1} MiB",
            args.parked,
            args.running,
            rss as f64 / 1048576.0
        );
        println!(
            "empty store:        ready in {empty_ms:.0} ms, {:.1} MiB · ready {:.2}x the empty node's",
            empty_rss as f64 / 1048576.0,
            ready_ms / empty_ms.max(1e-9)
        );
        println!("memory per parked job: {per_parked:.0} bytes (goal ≤ 1024)");
    }
    Ok(Code::Ok)
}
