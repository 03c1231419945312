//! `palm bench jobs`: durable job throughput and latency on a real node, against a raw
//! redb baseline measured in the same run with the same commit shapes.
//!
//! The node runs in this process over a fresh data directory. For each flow (one `set`
//! leaf; one `run` leaf of `true`) it measures throughput with `--in-flight` jobs at once
//! and submit→terminal latency one job at a time. While the throughput run goes, the
//! kernel records the shape (writes, bytes) of every durable commit; the baseline then
//! commits exactly those shapes of raw inserts into a bare redb file. The ratio says what
//! the job path costs over the storage it cannot avoid.

use crate::cli::BenchJobsArgs;
use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use crate::genome::NodeSettings;
use crate::node::{BootOptions, Node};
use palm_actors::store::{RedbStore, Store, Table, WriteBatch};
use palm_api::protocol::{FlowArg, Request};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const SET_FLOW: &str = "name: bench-set\ntree:\n  set: { done: true }\n";
const RUN_FLOW: &str = "name: bench-run\ntree:\n  run: \"true\"\n";

/// One flow measured: throughput in flight, latency one at a time, the commits.
pub(crate) struct Measured {
    pub(crate) jobs_per_s: f64,
    seconds: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) shapes: Vec<(usize, usize)>,
    baseline_s: f64,
}

async fn submit_and_wait(node: &Node, source: &str) -> Result<Duration, CliError> {
    let started = Instant::now();
    let response = node
        .call(Request::Submit {
            flow: FlowArg::Source {
                source: source.to_owned(),
                origin: "<bench>".into(),
            },
            input: Default::default(),
            args: vec![],
            started_by: None,
        })
        .await;
    let job = response
        .result
        .as_ref()
        .and_then(|r| r["job"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            CliError::failure("bench", format!("submit failed: {:?}", response.error))
        })?;
    let settled = node
        .call(Request::Wait {
            job,
            timeout_ms: Some(60_000),
        })
        .await;
    let status = settled
        .result
        .as_ref()
        .and_then(|r| r["status"].as_str())
        .unwrap_or("?")
        .to_owned();
    if status != "succeeded" {
        return Err(CliError::failure(
            "bench",
            format!(
                "a benchmark job ended {status}: {:?} {:?}",
                settled.result, settled.error
            ),
        ));
    }
    Ok(started.elapsed())
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

/// Commits raw inserts in exactly the given shapes; returns the seconds taken.
fn baseline(path: &std::path::Path, shapes: &[(usize, usize)]) -> Result<f64, CliError> {
    let store = RedbStore::open(path).map_err(|e| CliError::failure("bench", e.to_string()))?;
    let mut key = 0u64;
    let started = Instant::now();
    for (writes, bytes) in shapes {
        let mut batch = WriteBatch::new();
        let writes = (*writes).max(1);
        let size = (bytes / writes).saturating_sub(8).max(1);
        for _ in 0..writes {
            key += 1;
            batch.put(Table::Journal, key.to_be_bytes().to_vec(), vec![0x5a; size]);
        }
        store
            .commit(&batch)
            .map_err(|e| CliError::failure("bench", e.to_string()))?;
        store
            .flush()
            .map_err(|e| CliError::failure("bench", e.to_string()))?;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Measures `source`: throughput with `args.in_flight` jobs at once, latency one at a
/// time, and the raw-store baseline of the same commits.
pub(crate) async fn measure(
    node: &Arc<Node>,
    source: &'static str,
    args: &BenchJobsArgs,
    scratch: &std::path::Path,
) -> Result<Measured, CliError> {
    // Warm up (definition stored, caches filled) before anything is timed.
    for _ in 0..20 {
        submit_and_wait(node, source).await?;
    }
    let stats = &node.genome().stats;
    *stats.shapes.lock().unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
    let per_worker = args.jobs.div_ceil(args.in_flight.max(1));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..args.in_flight.max(1) {
        let node = Arc::clone(node);
        workers.push(tokio::spawn(async move {
            for _ in 0..per_worker {
                submit_and_wait(&node, source).await?;
            }
            Ok::<(), CliError>(())
        }));
    }
    for worker in workers {
        worker
            .await
            .map_err(|e| CliError::failure("bench", e.to_string()))??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let total = per_worker * args.in_flight.max(1);
    let shapes = stats
        .shapes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .unwrap_or_default();
    let mut latencies = Vec::with_capacity(args.samples);
    for _ in 0..args.samples {
        latencies.push(submit_and_wait(node, source).await?);
    }
    latencies.sort();
    let baseline_s = tokio::task::block_in_place(|| {
        baseline(&scratch.join(format!("raw-{}.redb", shapes.len())), &shapes)
    })?;
    Ok(Measured {
        jobs_per_s: total as f64 / seconds,
        seconds,
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        shapes,
        baseline_s,
    })
}

fn report(name: &str, m: &Measured) -> Value {
    let writes: usize = m.shapes.iter().map(|(w, _)| w).sum();
    json!({
        "flow": name,
        "jobs_per_s": m.jobs_per_s,
        "seconds": m.seconds,
        "latency_ms": { "p50": m.p50_ms, "p99": m.p99_ms },
        "commits": m.shapes.len(),
        "writes": writes,
        "baseline": {
            "what": "raw redb inserts, same commits, same writes and bytes per commit, durable",
            "seconds": m.baseline_s,
        },
        "ratio_vs_baseline": m.seconds / m.baseline_s.max(1e-9),
    })
}

/// Runs the benchmark.
pub async fn jobs(ctx: &Ctx, args: BenchJobsArgs) -> CliResult {
    let scratch = std::env::temp_dir().join(format!("palm-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let mut settings = NodeSettings::default();
    if let Some(seats) = args.seats {
        settings.seats = seats.max(1);
    }
    let node = Arc::new(
        Node::boot(BootOptions {
            data: scratch.join("node"),
            name: "bench".into(),
            profile: "all-in-one".into(),
            settings,
            embedded: true,
        })
        .await?,
    );
    eprintln!(
        "palm bench: {} jobs per flow, {} in flight, {} latency samples",
        args.jobs, args.in_flight, args.samples
    );
    let set = measure(&node, SET_FLOW, &args, &scratch).await;
    let run = match &set {
        Ok(_) => measure(&node, RUN_FLOW, &args, &scratch).await,
        Err(_) => Err(CliError::failure("bench", "skipped")),
    };
    let commits = node.genome().stats.commits.load(Ordering::Relaxed);
    if let Ok(node) = Arc::try_unwrap(node) {
        node.shutdown(Duration::ZERO).await;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let (set, run) = (set?, run?);
    let result = json!({
        "machine": { "cpus": crate::sys::cpus() },
        "set": report("one set leaf", &set),
        "run": report("one run leaf (true)", &run),
        "commits_total": commits,
    });
    if ctx.out.json {
        ctx.out.json(&result);
    } else {
        for (label, m) in [("set flow", &set), ("run flow", &run)] {
            println!(
                "{label}: {:>8.0} jobs/s with {} in flight; latency p50 {:.2} ms, p99 {:.2} ms (one at a time)",
                m.jobs_per_s, args.in_flight, m.p50_ms, m.p99_ms
            );
            println!(
                "          {} commits in {:.2} s; raw redb, same commits: {:.2} s; ratio {:.2}x",
                m.shapes.len(),
                m.seconds,
                m.baseline_s,
                m.seconds / m.baseline_s.max(1e-9)
            );
        }
    }
    Ok(Code::Ok)
}
