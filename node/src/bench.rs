//! `palm bench jobs`: durable job throughput and latency on a real node, against a raw
//! redb baseline measured in the same run with the same commit shapes.
//!
//! The node runs in this process over a fresh data directory. For each flow (one `set`
//! leaf; one `run` leaf of `true`) it measures throughput with `--in-flight` jobs at once
//! and submit→terminal latency one job at a time. While the throughput run goes, the
//! kernel records the shape (writes, bytes) of every durable commit; the baseline then
//! commits exactly those shapes of raw inserts into a bare redb file. The ratio says what
//! the job path costs over the storage it cannot avoid.
//!
//! With `--store postgres://…` the same flows run again on a second node whose store is
//! that database (a fresh schema, dropped afterwards), against raw commits of the same
//! shapes into PostgreSQL, and `ratio.postgres_over_redb_*` sets its throughput next to
//! redb's from the same run.

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
    /// Seconds a bare redb store took to commit the very batches the node committed
    /// (same keys, values and tables, each flushed): the store's share of the work.
    pub(crate) replay_s: f64,
    /// CPU (user + system) of this process and of the children it waited for, per job of
    /// the throughput run, in milliseconds.
    pub(crate) cpu_ms_per_job: f64,
    /// This process's share of it.
    pub(crate) own_cpu_ms_per_job: f64,
    /// The share of the throughput run's wall time the node spent committing: near 1, the
    /// flow waits on its store; well under, on the work between its commits.
    pub(crate) store_busy: f64,
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
            node: None,
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

pub(crate) use palm_transport::bench::median;

/// Where the raw baseline commits go.
pub(crate) enum Baseline<'a> {
    /// Fresh redb files in this scratch directory.
    Redb(&'a std::path::Path),
    /// Fresh schemas of this PostgreSQL database (dropped afterwards).
    Postgres(&'a str),
}

/// Commits `batches` as they are to a fresh redb file, each flushed; returns the
/// seconds taken.
fn replay(batches: &[WriteBatch]) -> Result<f64, CliError> {
    let fail = |e: palm_actors::store::StoreError| CliError::failure("bench", e.to_string());
    static REPLAYS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let file = std::env::temp_dir().join(format!(
        "palm-bench-replay-{}-{}.redb",
        std::process::id(),
        REPLAYS.fetch_add(1, Ordering::Relaxed)
    ));
    let replayed = (|| {
        let store = RedbStore::open(&file).map_err(fail)?;
        let started = Instant::now();
        for batch in batches {
            store.commit(batch).map_err(fail)?;
            store.flush().map_err(fail)?;
        }
        Ok(started.elapsed().as_secs_f64())
    })();
    let _ = std::fs::remove_file(&file);
    replayed
}

/// Commits raw inserts in exactly the given shapes; returns the seconds taken.
fn baseline(to: &Baseline<'_>, shapes: &[(usize, usize)]) -> Result<f64, CliError> {
    let fail = |e: palm_actors::store::StoreError| CliError::failure("bench", e.to_string());
    let (store, dropped): (Box<dyn Store>, Option<String>) = match to {
        Baseline::Redb(scratch) => (
            Box::new(
                RedbStore::open(&scratch.join(format!("raw-{}.redb", shapes.len())))
                    .map_err(fail)?,
            ),
            None,
        ),
        Baseline::Postgres(url) => {
            let url = palm_pgstore::with_schema(
                url,
                &format!("palm_bench_raw_{}_{}", std::process::id(), shapes.len()),
            );
            (
                Box::new(palm_pgstore::PgStore::open(&url, "palm bench (raw)").map_err(fail)?),
                Some(url),
            )
        }
    };
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
        store.commit(&batch).map_err(fail)?;
        store.flush().map_err(fail)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(store);
    if let Some(url) = dropped {
        palm_pgstore::drop_schema(&url).map_err(fail)?;
    }
    Ok(seconds)
}

/// Measures `source`: throughput with `args.in_flight` jobs at once, latency one at a
/// time, and the raw-store baseline of the same commits.
pub(crate) async fn measure(
    node: &Arc<Node>,
    source: &str,
    args: &BenchJobsArgs,
    raw: &Baseline<'_>,
) -> Result<Measured, CliError> {
    // Warm up (definition stored, caches filled) before anything is timed.
    for _ in 0..20 {
        submit_and_wait(node, source).await?;
    }
    let stats = &node.genome().stats;
    *stats.batches.lock().unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
    let work = {
        let node = Arc::clone(node);
        let source: Arc<str> = Arc::from(source);
        move || {
            let (node, source) = (Arc::clone(&node), Arc::clone(&source));
            async move { submit_and_wait(&node, &source).await }
        }
    };
    let committing = stats.commit_nanos.load(Ordering::Relaxed);
    let ran = in_flight(args.jobs, args.in_flight, work).await?;
    let store_busy = stats
        .commit_nanos
        .load(Ordering::Relaxed)
        .saturating_sub(committing) as f64
        / (ran.seconds * 1e9).max(1.0);
    let batches = stats
        .batches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .unwrap_or_default();
    let shapes: Vec<(usize, usize)> = batches.iter().map(|b| (b.len(), b.bytes())).collect();
    let mut latencies = Vec::with_capacity(args.samples);
    for _ in 0..args.samples {
        latencies.push(submit_and_wait(node, source).await?);
    }
    latencies.sort();
    let baseline_s = tokio::task::block_in_place(|| baseline(raw, &shapes))?;
    let replay_s = tokio::task::block_in_place(|| replay(&batches))?;
    Ok(Measured {
        jobs_per_s: ran.per_s,
        seconds: ran.seconds,
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        shapes,
        baseline_s,
        replay_s,
        cpu_ms_per_job: ran.cpu_ms_per_op,
        own_cpu_ms_per_job: ran.own_cpu_ms_per_op,
        store_busy,
    })
}

/// What [`in_flight`] measured.
pub(crate) struct Ran {
    /// Operations per second.
    pub(crate) per_s: f64,
    /// Wall time of the whole run.
    pub(crate) seconds: f64,
    /// CPU (user + system) of this process and of the children it waited for, per
    /// operation, in milliseconds.
    pub(crate) cpu_ms_per_op: f64,
    /// This process's share of it (without the children).
    pub(crate) own_cpu_ms_per_op: f64,
}

/// Runs about `count` of `op`, `at_once` at a time (rounded up to a whole number per
/// worker), and measures the rate and the CPU they cost.
pub(crate) async fn in_flight<F, Fut>(count: usize, at_once: usize, op: F) -> Result<Ran, CliError>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Duration, CliError>> + Send,
{
    let at_once = at_once.max(1);
    let per_worker = count.div_ceil(at_once);
    let (own_before, children_before) = crate::sys::cpu_own_and_children_ms();
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..at_once {
        let op = op.clone();
        workers.push(tokio::spawn(async move {
            for _ in 0..per_worker {
                op().await?;
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
    let total = (per_worker * at_once).max(1) as f64;
    let (own, children) = crate::sys::cpu_own_and_children_ms();
    let own = own - own_before;
    Ok(Ran {
        per_s: total / seconds,
        seconds,
        cpu_ms_per_op: (own + children - children_before) / total,
        own_cpu_ms_per_op: own / total,
    })
}

fn report(name: &str, m: &Measured, baseline: &str) -> Value {
    let writes: usize = m.shapes.iter().map(|(w, _)| w).sum();
    json!({
        "flow": name,
        "jobs_per_s": m.jobs_per_s,
        "seconds": m.seconds,
        "latency_ms": { "p50": m.p50_ms, "p99": m.p99_ms },
        "commits": m.shapes.len(),
        "writes": writes,
        "baseline": {
            "what": format!("raw {baseline} inserts, same commits, same writes and bytes per commit, durable"),
            "seconds": m.baseline_s,
        },
        "ratio_vs_baseline": m.seconds / m.baseline_s.max(1e-9),
    })
}

/// Boots a benchmark node over `data`, on `store` (redb when `None`).
async fn boot(
    data: std::path::PathBuf,
    args: &BenchJobsArgs,
    store: Option<String>,
) -> Result<Arc<Node>, CliError> {
    let mut settings = NodeSettings::default();
    if let Some(seats) = args.seats {
        settings.seats = seats.max(1);
    }
    Ok(Arc::new(
        Node::boot(BootOptions {
            data,
            name: "bench".into(),
            profile: "all-in-one".into(),
            settings,
            embedded: true,
            store: store.map(crate::node::StoreLocation::Postgres),
        })
        .await?,
    ))
}

/// Both flows on one node, then the node stopped.
async fn both(
    node: Arc<Node>,
    args: &BenchJobsArgs,
    raw: &Baseline<'_>,
) -> Result<(Measured, Measured, u64), CliError> {
    let set = measure(&node, SET_FLOW, args, raw).await;
    let run = match &set {
        Ok(_) => measure(&node, RUN_FLOW, args, raw).await,
        Err(_) => Err(CliError::failure("bench", "skipped")),
    };
    let commits = node.genome().stats.commits.load(Ordering::Relaxed);
    if let Ok(node) = Arc::try_unwrap(node) {
        node.shutdown(Duration::ZERO).await;
    }
    Ok((set?, run?, commits))
}

/// Runs the benchmark.
pub async fn jobs(ctx: &Ctx, args: BenchJobsArgs) -> CliResult {
    if let Some(url) = &args.store
        && !palm_pgstore::is_postgres_url(url)
    {
        return Err(CliError::usage(
            "store",
            "--store must be a postgres:// URL",
        ));
    }
    let scratch = std::env::temp_dir().join(format!("palm-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    eprintln!(
        "palm bench: {} jobs per flow, {} in flight, {} latency samples",
        args.jobs, args.in_flight, args.samples
    );
    let redb = match boot(scratch.join("node"), &args, None).await {
        Ok(node) => both(node, &args, &Baseline::Redb(&scratch)).await,
        Err(err) => Err(err),
    };
    let postgres = match (&args.store, &redb) {
        (Some(url), Ok(_)) => {
            let url = palm_pgstore::with_schema(url, &format!("palm_bench_{}", std::process::id()));
            eprintln!("palm bench: the same on {}", palm_pgstore::redact(&url));
            let measured = match boot(scratch.join("pg-node"), &args, Some(url.clone())).await {
                Ok(node) => both(node, &args, &Baseline::Postgres(&url)).await,
                Err(err) => Err(err),
            };
            let dropped =
                tokio::task::spawn_blocking(move || palm_pgstore::drop_schema(&url)).await;
            if let Ok(Err(err)) = dropped {
                eprintln!("palm bench: could not drop the benchmark schema: {err}");
            }
            Some(measured?)
        }
        _ => None,
    };
    let _ = std::fs::remove_dir_all(&scratch);
    let (set, run, commits) = redb?;
    let mut result = json!({
        "machine": { "cpus": crate::sys::cpus() },
        "set": report("one set leaf", &set, "redb"),
        "run": report("one run leaf (true)", &run, "redb"),
        "commits_total": commits,
        "ratio": {
            "set_over_raw_redb": set.baseline_s / set.seconds.max(1e-9),
            "run_over_raw_redb": run.baseline_s / run.seconds.max(1e-9),
        },
    });
    if let Some((pg_set, pg_run, pg_commits)) = &postgres {
        result["postgres"] = json!({
            "set": report("one set leaf", pg_set, "PostgreSQL"),
            "run": report("one run leaf (true)", pg_run, "PostgreSQL"),
            "commits_total": pg_commits,
        });
        result["ratio"]["postgres_over_redb_set"] =
            json!(pg_set.jobs_per_s / set.jobs_per_s.max(1e-9));
        result["ratio"]["postgres_over_redb_run"] =
            json!(pg_run.jobs_per_s / run.jobs_per_s.max(1e-9));
    }
    if ctx.out.json {
        ctx.out.json(&result);
    } else {
        let mut rows = vec![("set flow", "redb", &set), ("run flow", "redb", &run)];
        if let Some((pg_set, pg_run, _)) = &postgres {
            rows.push(("set flow", "postgres", pg_set));
            rows.push(("run flow", "postgres", pg_run));
        }
        for (label, store, m) in rows {
            println!(
                "{label} on {store}: {:>8.0} jobs/s with {} in flight; latency p50 {:.2} ms, p99 {:.2} ms (one at a time)",
                m.jobs_per_s, args.in_flight, m.p50_ms, m.p99_ms
            );
            println!(
                "          {} commits in {:.2} s; raw {store}, same commits: {:.2} s; ratio {:.2}x",
                m.shapes.len(),
                m.seconds,
                m.baseline_s,
                m.seconds / m.baseline_s.max(1e-9)
            );
        }
        if let Some((pg_set, pg_run, _)) = &postgres {
            println!(
                "postgres over redb, same run: set {:.2}x, run {:.2}x",
                pg_set.jobs_per_s / set.jobs_per_s.max(1e-9),
                pg_run.jobs_per_s / run.jobs_per_s.max(1e-9)
            );
        }
    }
    Ok(Code::Ok)
}
