//! `palm bench effects`: what an effect step costs over the work it does, each against a
//! baseline measured in the same run.
//!
//! - `kv` (a provider step) against `set` (a step with no effect at all), both with
//!   `--in-flight` jobs at once: `ratio.kv_over_set`; and a `kv` job's latency one at a
//!   time: `kv_p50_ms`. Next to it, `ratio.kv_over_set_store_alone`: the same ratio for
//!   a bare redb store committing the very batches each flow's node committed — both
//!   flows are bound by their commits, and a `kv` job writes about four times a `set`
//!   job's bytes (four journal events to two, its value, its effect's record), so this
//!   is what the job path could reach if it cost nothing beyond the store.
//! - `run: "true"` against bare spawns of the same command (`sh -c true`, by the path
//!   the runner spawns, streams piped, waited for) at the same concurrency: `ratio.run_over_spawn`; one at a time, the
//!   median overhead of a `run` job over a bare spawn: `run_overhead_p50_ms`.
//! - an `http` step (a provider that runs on a seat) to a loopback server in this
//!   process: its latency one at a time, `http_p50_ms` (goal ≤ 1 ms, as `kv`'s), and its
//!   throughput against `set` (`ratio.http_over_set`) and against bare requests of the
//!   same shape to the same server by the provider's own client, its kept connections
//!   included (`ratio.http_over_request`, `http_overhead_p50_ms`).
//!
//! Each throughput run also reports its CPU per job (`cpu_ms_per_job`; `cpu_ms_per_spawn`
//! and `cpu_ms_per_request` for the bare baselines): this process's and that of the
//! children it waited for, so a `run` step's `sh` counts as the bare spawn's does; and
//! this process's share alone (`own_cpu_ms_per_job`, `own_cpu_ms_per_spawn`,
//! `own_cpu_ms_per_request`), the node's own cost without the noise of `sh`'s. On 2
//! cores both sides are CPU-bound, and `run_over_spawn` is then about the spawn's CPU
//! over the step's. And the share of its wall time the node spent committing
//! (`store_busy`): a flow with the store busy well under all the time waits on the work
//! between its commits (replies, the clients' next requests, the kernel's handling of
//! them), not on the store.
//!
//! The node runs in this process over a fresh data directory, with as many seats as jobs
//! in flight (so `run` steps are not held back by seats the spawns do not need). Every
//! measurement is taken `--rounds` times, flows and spawns in turn, so a disturbance of a
//! shared machine hits a baseline as likely as what it is the baseline of. A ratio is the
//! median of the rounds' ratios, each of a flow and its baseline measured in the same
//! round (a `set` flow's rate swings by half between rounds a second apart here, with
//! the disk's flush time, and the best round of one against the best of another said
//! more about those swings than about the step); the rates shown are the best round's,
//! the latencies the median round's.

use crate::bench::{Baseline, Measured, in_flight, measure, median, percentile};
use crate::cli::{BenchEffectsArgs, BenchJobsArgs};
use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use crate::genome::NodeSettings;
use crate::node::{BootOptions, Node};
use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SET_FLOW: &str = "name: bench-set\ntree:\n  set: { done: true }\n";
const KV_FLOW: &str =
    "name: bench-kv\ntree:\n  call: { provider: kv, args: { op: put, key: bench, value: 1 } }\n";
const RUN_FLOW: &str = "name: bench-run\ntree:\n  run: \"true\"\n";

/// One bare spawn of `sh -c true`, streams piped as a `run` step's are, waited for.
async fn spawn_once() -> Result<Duration, CliError> {
    let started = Instant::now();
    // The same `sh` the runner spawns, by the same resolved path.
    let output = tokio::process::Command::new(crate::sys::shell())
        .args(["-c", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .map_err(|e| CliError::failure("bench", format!("cannot spawn sh: {e}")))?;
    if !output.status.success() {
        return Err(CliError::failure("bench", "`sh -c true` failed"));
    }
    Ok(started.elapsed())
}

/// A loopback HTTP/1.1 server for the `http` step: every request is answered `200`
/// with a two-byte body, and its connection kept for the next (as most servers do, and
/// as the provider reuses them). Runs until the process ends.
async fn serve_loopback() -> Result<std::net::SocketAddr, CliError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    // As many clients at once as jobs in flight: more than the default queue of 128.
    palm_node::sys::raise_backlog(&listener)?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let mut request = Vec::with_capacity(512);
                let mut buffer = [0u8; 1024];
                loop {
                    // One head (the requests here carry no body), bounded.
                    let end = loop {
                        if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                            break at + 4;
                        }
                        if request.len() > 16_384 {
                            return;
                        }
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    };
                    request.drain(..end);
                    let answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// One bare request to `addr` by the `http` provider's own client (its kept
/// connections included), without a job around it.
async fn request_once(
    client: Arc<palm_node::providers::http::Http>,
    addr: std::net::SocketAddr,
) -> Result<Duration, CliError> {
    let started = Instant::now();
    let status = client
        .fetch("GET", &format!("http://{addr}/"))
        .await
        .map_err(|e| CliError::failure("bench", format!("loopback request: {e}")))?;
    if status != 200 {
        return Err(CliError::failure(
            "bench",
            format!("the loopback server answered {status}, not 200"),
        ));
    }
    Ok(started.elapsed())
}

/// The throughput ratios: each the median over the rounds of a flow's rate over its
/// baseline's in the same round.
struct Ratios {
    kv_over_set: f64,
    /// The same ratio for the store alone: a bare redb committing the very batches each
    /// flow's node committed (the jobs are as many, so it is set's seconds over kv's).
    /// What `kv_over_set` could reach if the job path cost nothing beyond its commits.
    kv_over_set_store: f64,
    run_over_spawn: f64,
    http_over_set: f64,
    http_over_request: f64,
}

/// A bare baseline's figures: the work of a step without the step.
struct Bare {
    /// Operations per second with `in_flight` at once.
    per_s: f64,
    /// Median latency one at a time.
    p50_ms: f64,
    /// CPU (this process's and the children's) per operation, `in_flight` at once.
    cpu_ms: f64,
    /// This process's share of it.
    own_cpu_ms: f64,
}

impl Bare {
    /// The best round's rate, the median round's latency and CPU.
    fn of_rounds(rounds: &[Bare]) -> Bare {
        Bare {
            per_s: rounds.iter().map(|b| b.per_s).fold(0.0, f64::max),
            p50_ms: median(rounds.iter().map(|b| b.p50_ms).collect()),
            cpu_ms: median(rounds.iter().map(|b| b.cpu_ms).collect()),
            own_cpu_ms: median(rounds.iter().map(|b| b.own_cpu_ms).collect()),
        }
    }
}

/// Measures a bare baseline: `args.jobs` of `op` with `args.in_flight` at once, then
/// `args.samples` one at a time.
async fn bare<F, Fut>(args: &BenchEffectsArgs, op: F) -> Result<Bare, CliError>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Duration, CliError>> + Send,
{
    let ran = in_flight(args.jobs, args.in_flight, op.clone()).await?;
    let mut latencies = Vec::with_capacity(args.samples);
    for _ in 0..args.samples {
        latencies.push(op().await?);
    }
    latencies.sort();
    Ok(Bare {
        per_s: ran.per_s,
        p50_ms: percentile(&latencies, 0.5),
        cpu_ms: ran.cpu_ms_per_op,
        own_cpu_ms: ran.own_cpu_ms_per_op,
    })
}

/// The round with the best throughput, with the median round's latencies and CPU.
fn best(mut rounds: Vec<Measured>) -> Measured {
    let p50 = median(rounds.iter().map(|m| m.p50_ms).collect());
    let p99 = median(rounds.iter().map(|m| m.p99_ms).collect());
    let cpu = median(rounds.iter().map(|m| m.cpu_ms_per_job).collect());
    let own_cpu = median(rounds.iter().map(|m| m.own_cpu_ms_per_job).collect());
    rounds.sort_by(|a, b| b.jobs_per_s.total_cmp(&a.jobs_per_s));
    let mut best = rounds.swap_remove(0);
    best.p50_ms = p50;
    best.p99_ms = p99;
    best.cpu_ms_per_job = cpu;
    best.own_cpu_ms_per_job = own_cpu;
    best
}

/// One flow's figures. `batch_writes` and `batch_bytes` count what the kernel put in its
/// batches, before the store folds the writes of one key in a batch into its last.
fn line(m: &Measured) -> Value {
    let writes: usize = m.shapes.iter().map(|s| s.0).sum();
    let bytes: usize = m.shapes.iter().map(|s| s.1).sum();
    json!({"jobs_per_s": m.jobs_per_s, "latency_ms": {"p50": m.p50_ms, "p99": m.p99_ms},
           "commits": m.shapes.len(), "batch_writes": writes, "batch_bytes": bytes,
           "store_alone_s": m.replay_s, "store_busy": m.store_busy,
           "cpu_ms_per_job": m.cpu_ms_per_job, "own_cpu_ms_per_job": m.own_cpu_ms_per_job})
}

/// Runs the benchmark.
pub async fn run(ctx: &Ctx, args: BenchEffectsArgs) -> CliResult {
    let scratch = std::env::temp_dir().join(format!("palm-bench-effects-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let settings = NodeSettings {
        seats: args.seats.unwrap_or(args.in_flight).max(1),
        ..NodeSettings::default()
    };
    let node = Arc::new(
        Node::boot(BootOptions {
            data: scratch.join("node"),
            name: "bench".into(),
            profile: "all-in-one".into(),
            settings,
            embedded: true,
            store: None,
        })
        .await?,
    );
    eprintln!(
        "palm bench effects: {} jobs per flow, {} in flight, {} latency samples, {} seats, {} rounds",
        args.jobs,
        args.in_flight,
        args.samples,
        args.seats.unwrap_or(args.in_flight).max(1),
        args.rounds
    );
    let shape = BenchJobsArgs {
        jobs: args.jobs,
        in_flight: args.in_flight,
        samples: args.samples,
        seats: None,
        store: None,
    };
    let measured = async {
        let server = serve_loopback().await?;
        let client = Arc::new(palm_node::providers::http::Http::new(None));
        let http_flow = format!(
            "name: bench-http\ntree:\n  call: {{ provider: http, args: {{ url: \"http://{server}/\" }} }}\n"
        );
        let (mut set, mut kv, mut run, mut http) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut spawned, mut requested) = (Vec::new(), Vec::new());
        let raw = Baseline::Redb(&scratch);
        for _ in 0..args.rounds.max(1) {
            set.push(measure(&node, SET_FLOW, &shape, &raw).await?);
            kv.push(measure(&node, KV_FLOW, &shape, &raw).await?);
            run.push(measure(&node, RUN_FLOW, &shape, &raw).await?);
            spawned.push(bare(&args, spawn_once).await?);
            http.push(measure(&node, &http_flow, &shape, &raw).await?);
            let client = client.clone();
            requested.push(bare(&args, move || request_once(client.clone(), server)).await?);
        }
        // Each ratio pairs a flow with its baseline of the same round, where the same
        // disturbance of a shared machine hits both, and takes the median of the
        // rounds' ratios (as `bench tree` and `bench tunnel` do).
        let paired = |flow: &[Measured], base: &dyn Fn(usize) -> f64| {
            median(
                flow.iter()
                    .enumerate()
                    .map(|(round, m)| m.jobs_per_s / base(round).max(1e-9))
                    .collect(),
            )
        };
        let ratios = Ratios {
            kv_over_set: paired(&kv, &|r| set[r].jobs_per_s),
            kv_over_set_store: median(
                kv.iter()
                    .zip(&set)
                    .map(|(kv, set)| set.replay_s / kv.replay_s.max(1e-9))
                    .collect(),
            ),
            run_over_spawn: paired(&run, &|r| spawned[r].per_s),
            http_over_set: paired(&http, &|r| set[r].jobs_per_s),
            http_over_request: paired(&http, &|r| requested[r].per_s),
        };
        Ok::<_, CliError>((
            best(set),
            best(kv),
            best(run),
            Bare::of_rounds(&spawned),
            best(http),
            Bare::of_rounds(&requested),
            ratios,
        ))
    }
    .await;
    if let Ok(node) = Arc::try_unwrap(node) {
        node.shutdown(Duration::ZERO).await;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let (set, kv, run, spawned, http, requested, ratios) = measured?;
    let (spawn_per_s, spawn_p50_ms) = (spawned.per_s, spawned.p50_ms);
    let Ratios {
        kv_over_set,
        kv_over_set_store,
        run_over_spawn,
        http_over_set,
        http_over_request,
    } = ratios;
    let run_overhead_p50_ms = run.p50_ms - spawn_p50_ms;
    let http_overhead_p50_ms = http.p50_ms - requested.p50_ms;
    let result = json!({
        "machine": { "cpus": crate::sys::cpus() },
        "in_flight": args.in_flight,
        "rounds": args.rounds,
        "set": line(&set),
        "kv": line(&kv),
        "run": line(&run),
        "spawn": {"what": "sh -c true, streams piped, waited for; same concurrency",
                  "per_s": spawn_per_s, "latency_ms": {"p50": spawn_p50_ms},
                  "cpu_ms_per_spawn": spawned.cpu_ms, "own_cpu_ms_per_spawn": spawned.own_cpu_ms},
        "http": line(&http),
        "request": {"what": "one GET to the same loopback server by the http provider's client (kept connections reused), read to the end; same concurrency",
                    "per_s": requested.per_s, "latency_ms": {"p50": requested.p50_ms},
                    "cpu_ms_per_request": requested.cpu_ms, "own_cpu_ms_per_request": requested.own_cpu_ms},
        "ratio": {"kv_over_set": kv_over_set, "kv_over_set_store_alone": kv_over_set_store, "run_over_spawn": run_over_spawn,
                  "http_over_set": http_over_set, "http_over_request": http_over_request},
        "kv_p50_ms": kv.p50_ms,
        "http_p50_ms": http.p50_ms,
        "run_overhead_p50_ms": run_overhead_p50_ms,
        "http_overhead_p50_ms": http_overhead_p50_ms,
        "goals": {"kv_over_set": 0.8, "run_over_spawn": 0.8, "kv_p50_ms": 1.0,
                  "run_overhead_p50_ms": 0.5, "http_p50_ms": 1.0, "http_over_set": 0.8},
    });
    if ctx.out.json {
        ctx.out.json(&result);
    } else {
        let n = args.in_flight;
        println!(
            "set  {:>8.0} jobs/s ({n} in flight)   p50 {:.2} ms   CPU {:.3} ms/job   store busy {:.0}%",
            set.jobs_per_s,
            set.p50_ms,
            set.cpu_ms_per_job,
            set.store_busy * 100.0
        );
        println!(
            "kv   {:>8.0} jobs/s ({n} in flight)   p50 {:.2} ms   kv/set {:.2}x (goal ≥ 0.8x; the store alone, same batches: {:.2}x), p50 goal ≤ 1 ms   CPU {:.3} ms/job   store busy {:.0}%",
            kv.jobs_per_s,
            kv.p50_ms,
            kv_over_set,
            kv_over_set_store,
            kv.cpu_ms_per_job,
            kv.store_busy * 100.0
        );
        println!(
            "run  {:>8.0} jobs/s ({n} in flight)   p50 {:.2} ms   run/spawn {:.2}x (goal ≥ 0.8x)   CPU {:.2} ms/job (this process {:.2})   store busy {:.0}%",
            run.jobs_per_s,
            run.p50_ms,
            run_over_spawn,
            run.cpu_ms_per_job,
            run.own_cpu_ms_per_job,
            run.store_busy * 100.0
        );
        println!(
            "sh   {:>8.0} spawns/s ({n} at once)   p50 {:.2} ms   run overhead p50 {:.2} ms (goal ≤ 0.5 ms)   CPU {:.2} ms/spawn (this process {:.2})",
            spawn_per_s, spawn_p50_ms, run_overhead_p50_ms, spawned.cpu_ms, spawned.own_cpu_ms
        );
        println!(
            "http {:>8.0} jobs/s ({n} in flight)   p50 {:.2} ms (goal ≤ 1 ms)   http/set {:.2}x (goal ≥ 0.8x)   CPU {:.3} ms/job   store busy {:.0}%",
            http.jobs_per_s,
            http.p50_ms,
            http_over_set,
            http.cpu_ms_per_job,
            http.store_busy * 100.0
        );
        println!(
            "GET  {:>8.0} requests/s ({n} at once)   p50 {:.2} ms   http/GET {:.2}x, http overhead p50 {:.2} ms   CPU {:.3} ms/request",
            requested.per_s,
            requested.p50_ms,
            http_over_request,
            http_overhead_p50_ms,
            requested.cpu_ms
        );
    }
    Ok(Code::Ok)
}
