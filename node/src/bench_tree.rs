//! `palm bench tree`: placement across a real tree of `palm` processes on loopback,
//! against the same flow on one all-in-one node started in the same run.
//!
//! The tree is root ← realm ← edge-1..edge-N; only the edges offer `blue`, and the flow's
//! one `run` leaf needs it, so every effect is homed at the root and placed two hops
//! down, through the realm. The baseline is an all-in-one node offering `blue` with as
//! many seats as all the edges together.
//!
//! Two figures per setup:
//! - **completion → home**: the effect prints the edge's wall clock as its last act
//!   (`date +%s%N`); the benchmark takes its own clock when the home answers a waiting
//!   `wait` with the job terminal. The difference bounds from above the time from the
//!   effect completing to its outcome durable in the job's state at home (it also holds
//!   the process exit and the home's answer to the waiting client, which the baseline
//!   pays too). One job at a time.
//! - **throughput**: effects/s with many jobs in flight, submit to all terminal.
//!
//! Both setups stay up for the whole run, and each of `--rounds` rounds measures the tree
//! and then the baseline back to back; a ratio is the median of the rounds' ratios. On
//! this shared 2-core machine the baseline alone moved 25–40% between two runs a minute
//! apart, so a ratio of two setups measured one after the other said more about the
//! neighbours than about the tree.

use crate::bench::{median, percentile};
use crate::cli::BenchTreeArgs;
use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use palm_api::client::Client;
use palm_api::protocol::{FlowArg, Request};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const FLOW: &str =
    "name: bench-tree\ntree:\n  run: { cmd: \"date +%s%N\", needs: [blue], save: out }\n";

fn fail(what: impl std::fmt::Display) -> CliError {
    CliError::failure("bench", what.to_string())
}

/// The `palm` processes of one setup; killed when dropped, whatever happened.
struct Processes {
    children: Vec<(String, Child)>,
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Processes {
    fn start(&mut self, scratch: &Path, name: &str, args: &[String]) -> Result<(), CliError> {
        let log = std::fs::File::create(scratch.join(format!("{name}.log")))?;
        let child = Command::new(std::env::current_exe()?)
            .arg("up")
            .args(args)
            .env("PALM_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| fail(format!("could not start `palm up` for {name}: {e}")))?;
        self.children.push((name.to_owned(), child));
        Ok(())
    }

    /// Fails if a node exited early (its log says why).
    fn check(&mut self, scratch: &Path) -> Result<(), CliError> {
        for (name, child) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(scratch.join(format!("{name}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                return Err(fail(format!(
                    "node {name} exited ({status}): {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )));
            }
        }
        Ok(())
    }
}

fn free_port() -> Result<u16, CliError> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn call(data: &Path, request: &Request) -> Result<Value, CliError> {
    let mut client = Client::connect(&data.join("palm.sock"))
        .await
        .ok_or_else(|| fail(format!("no node answers at {}", data.display())))?;
    let response = client.call(request).await?;
    match response.result {
        Some(result) if response.ok => Ok(result),
        _ => Err(fail(format!(
            "{} answered an error: {:?}",
            data.display(),
            response.error
        ))),
    }
}

async fn until(
    what: &str,
    within: Duration,
    procs: &mut Processes,
    scratch: &Path,
    mut check: impl AsyncFnMut() -> bool,
) -> Result<(), CliError> {
    let deadline = Instant::now() + within;
    loop {
        procs.check(scratch)?;
        if check().await {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(fail(format!("timed out waiting for {what}")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn token(root: &Path, name: &str, role: &str) -> Result<String, CliError> {
    let out = Command::new(std::env::current_exe()?)
        .args([
            "token", "create", "--name", name, "--role", role, "--json", "--data",
        ])
        .arg(root)
        .output()?;
    let value: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    value["token"].as_str().map(str::to_owned).ok_or_else(|| {
        fail(format!(
            "token create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

/// Nodes offering `blue` anywhere in a `tree` answer.
fn blue_nodes(node: &Value) -> usize {
    let here = node["capabilities"]
        .as_array()
        .is_some_and(|caps| caps.iter().any(|c| c == "blue")) as usize;
    here + node["children"]
        .as_array()
        .map_or(0, |children| children.iter().map(blue_nodes).sum())
}

/// `palm up` arguments of one node: its profile, name, seats and data directory, then
/// `extra` (parent, token, listen address).
fn up_args(profile: &str, name: &str, seats: usize, data: &Path, extra: &[&str]) -> Vec<String> {
    let seats = seats.to_string();
    let data = data.display().to_string();
    let mut args = vec![
        "--profile",
        profile,
        "--name",
        name,
        "--seats",
        &seats,
        "--data",
        &data,
    ];
    args.extend_from_slice(extra);
    args.into_iter().map(str::to_owned).collect()
}

fn dir(scratch: &Path, name: &str) -> Result<PathBuf, CliError> {
    let path = scratch.join(name);
    std::fs::create_dir_all(&path)?;
    Ok(path)
}

/// root ← realm ← `edges` edges offering `blue`; returns the root's data directory.
async fn start_tree(
    procs: &mut Processes,
    scratch: &Path,
    args: &BenchTreeArgs,
) -> Result<PathBuf, CliError> {
    let root = dir(scratch, "root")?;
    let realm = dir(scratch, "realm")?;
    let (root_addr, realm_addr) = (
        format!("127.0.0.1:{}", free_port()?),
        format!("127.0.0.1:{}", free_port()?),
    );
    let root_args = up_args("root", "root", 1, &root, &["--listen", &root_addr]);
    procs.start(scratch, "root", &root_args)?;
    until(
        "the root",
        Duration::from_secs(20),
        procs,
        scratch,
        async || call(&root, &Request::Vitality).await.is_ok(),
    )
    .await?;
    let realm_token = token(&root, "realm-1", "realm")?;
    let realm_args = up_args(
        "realm",
        "realm-1",
        1,
        &realm,
        &[
            "--parent",
            &root_addr,
            "--token",
            &realm_token,
            "--listen",
            &realm_addr,
        ],
    );
    procs.start(scratch, "realm", &realm_args)?;
    until(
        "the realm",
        Duration::from_secs(20),
        procs,
        scratch,
        async || {
            call(&realm, &Request::Vitality)
                .await
                .is_ok_and(|v| v["tree"]["listen"] == realm_addr.as_str())
        },
    )
    .await?;
    for i in 1..=args.edges {
        let name = format!("edge-{i}");
        let edge = dir(scratch, &name)?;
        std::fs::write(edge.join("palm.yaml"), "capabilities: [blue]\n")?;
        let edge_token = token(&root, &name, "edge")?;
        let edge_args = up_args(
            "edge",
            &name,
            args.seats,
            &edge,
            &["--parent", &realm_addr, "--token", &edge_token],
        );
        procs.start(scratch, &name, &edge_args)?;
    }
    let edges = args.edges;
    until(
        "every edge to offer `blue` in the root's tree",
        Duration::from_secs(30),
        procs,
        scratch,
        async || {
            call(&root, &Request::Tree)
                .await
                .is_ok_and(|v| blue_nodes(&v["tree"]) == edges)
        },
    )
    .await?;
    Ok(root)
}

async fn start_all_in_one(
    procs: &mut Processes,
    scratch: &Path,
    args: &BenchTreeArgs,
) -> Result<PathBuf, CliError> {
    let aio = dir(scratch, "all-in-one")?;
    std::fs::write(aio.join("palm.yaml"), "capabilities: [blue]\n")?;
    let aio_args = up_args("all-in-one", "aio", args.seats * args.edges, &aio, &[]);
    procs.start(scratch, "all-in-one", &aio_args)?;
    until(
        "the all-in-one node",
        Duration::from_secs(20),
        procs,
        scratch,
        async || call(&aio, &Request::Vitality).await.is_ok(),
    )
    .await?;
    Ok(aio)
}

/// One job, submitted and waited for; returns (submit → terminal, completion → seen at
/// home) and the node that ran the effect.
async fn one_job(home: &Path) -> Result<(Duration, Duration, String), CliError> {
    let started = Instant::now();
    let submitted = call(
        home,
        &Request::Submit {
            flow: FlowArg::Source {
                source: FLOW.to_owned(),
                origin: "<bench tree>".into(),
            },
            input: Default::default(),
            args: vec![],
            started_by: None,
            node: None,
        },
    )
    .await?;
    let job = submitted["job"]
        .as_str()
        .ok_or_else(|| fail(format!("submit answered {submitted}")))?
        .to_owned();
    let view = call(
        home,
        &Request::Wait {
            job,
            timeout_ms: Some(60_000),
        },
    )
    .await?;
    let seen_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let elapsed = started.elapsed();
    if view["status"] != "succeeded" {
        return Err(fail(format!("a benchmark job ended: {view}")));
    }
    let done_ns: u128 = view["state"]["out"]["stdout"]
        .as_str()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| fail(format!("the effect printed no clock: {view}")))?;
    let node = view["effects"][0]["node"]
        .as_str()
        .unwrap_or("?")
        .to_owned();
    let lag = Duration::from_nanos(seen_ns.saturating_sub(done_ns) as u64);
    Ok((elapsed, lag, node))
}

/// One setup's figures over all rounds.
#[derive(Default)]
struct Figures {
    /// Each round's throughput.
    rounds_per_s: Vec<f64>,
    /// The home's durable commits and CPU over the throughput rounds, and the effects.
    home_commits: u64,
    home_cpu_ms: u64,
    effects: usize,
    lag: Vec<Duration>,
    e2e: Vec<Duration>,
    ran_on: std::collections::BTreeMap<String, usize>,
}

impl Figures {
    fn effects_per_s(&self) -> f64 {
        median(self.rounds_per_s.clone())
    }
}

/// One job at a time, `samples` times: returns this round's completion → home p50.
async fn latency(home: &Path, args: &BenchTreeArgs, into: &mut Figures) -> Result<f64, CliError> {
    let mut lag = Vec::new();
    for _ in 0..args.samples.max(1) {
        let (elapsed, behind, node) = one_job(home).await?;
        into.e2e.push(elapsed);
        into.lag.push(behind);
        lag.push(behind);
        *into.ran_on.entry(node).or_insert(0) += 1;
    }
    lag.sort();
    Ok(percentile(&lag, 0.5))
}

/// `--effects` jobs with `--in-flight` at once: returns effects/s.
async fn throughput(
    home: &Path,
    args: &BenchTreeArgs,
    into: &mut Figures,
) -> Result<f64, CliError> {
    let in_flight = args.in_flight.max(1);
    let per_worker = args.effects.div_ceil(in_flight);
    let before = call(home, &Request::Vitality).await?;
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..in_flight {
        let home = home.to_owned();
        workers.push(tokio::spawn(async move {
            let mut nodes = Vec::new();
            for _ in 0..per_worker {
                nodes.push(one_job(&home).await?.2);
            }
            Ok::<_, CliError>(nodes)
        }));
    }
    for worker in workers {
        for node in worker.await.map_err(fail)?? {
            *into.ran_on.entry(node).or_insert(0) += 1;
        }
    }
    let rate = (per_worker * in_flight) as f64 / started.elapsed().as_secs_f64();
    let after = call(home, &Request::Vitality).await?;
    let delta = |pointer: &str| {
        let at = |v: &Value| v.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
        at(&after).saturating_sub(at(&before))
    };
    into.home_commits += delta("/commits");
    into.home_cpu_ms += delta("/process/cpu_ms");
    into.effects += per_worker * in_flight;
    into.rounds_per_s.push(rate);
    Ok(rate)
}

fn report(what: &str, f: &Figures) -> Value {
    json!({
        "setup": what,
        "effects_per_s": f.effects_per_s(),
        "effects_per_s_by_round": f.rounds_per_s,
        "completion_to_home_ms": { "p50": percentile(&f.lag, 0.5), "p99": percentile(&f.lag, 0.99) },
        "submit_to_terminal_ms": { "p50": percentile(&f.e2e, 0.5), "p99": percentile(&f.e2e, 0.99) },
        "ran_on": f.ran_on,
        "home_per_effect": {
            "commits": f.home_commits as f64 / f.effects.max(1) as f64,
            "cpu_ms": f.home_cpu_ms as f64 / f.effects.max(1) as f64,
        },
    })
}

/// One round's ratios, tree over baseline.
struct Round {
    throughput: f64,
    completion_to_home_p50: f64,
}

/// Runs the benchmark.
pub async fn run(ctx: &Ctx, args: BenchTreeArgs) -> CliResult {
    if args.edges == 0 || args.seats == 0 {
        return Err(CliError::usage(
            "bench",
            "--edges and --seats must be at least 1",
        ));
    }
    let scratch = std::env::temp_dir().join(format!("palm-bench-tree-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    eprintln!(
        "palm bench tree: root <- realm <- {} edges x {} seats; {} rounds of {} effects, {} in flight, {} latency samples ({} build)",
        args.edges,
        args.seats,
        args.rounds,
        args.effects,
        args.in_flight,
        args.samples,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    let outcome = async {
        let mut tree_procs = Processes { children: vec![] };
        let root = start_tree(&mut tree_procs, &scratch, &args).await?;
        eprintln!("palm bench tree: tree linked");
        let mut aio_procs = Processes { children: vec![] };
        let aio = start_all_in_one(&mut aio_procs, &scratch, &args).await?;
        eprintln!("palm bench tree: all-in-one up, measuring");
        for home in [&root, &aio] {
            for _ in 0..5 {
                one_job(home).await?;
            }
        }
        let (mut tree, mut base) = (Figures::default(), Figures::default());
        let mut rounds = Vec::new();
        for round in 1..=args.rounds.max(1) {
            let tree_lag = latency(&root, &args, &mut tree).await?;
            let base_lag = latency(&aio, &args, &mut base).await?;
            let tree_rate = throughput(&root, &args, &mut tree).await?;
            let base_rate = throughput(&aio, &args, &mut base).await?;
            eprintln!(
                "palm bench tree: round {round}: {tree_rate:.0} / {base_rate:.0} effects/s ({:.2}x); completion -> home p50 {tree_lag:.2} / {base_lag:.2} ms ({:.2}x)",
                tree_rate / base_rate.max(1e-9),
                tree_lag / base_lag.max(1e-9)
            );
            rounds.push(Round {
                throughput: tree_rate / base_rate.max(1e-9),
                completion_to_home_p50: tree_lag / base_lag.max(1e-9),
            });
        }
        tree.lag.sort();
        tree.e2e.sort();
        base.lag.sort();
        base.e2e.sort();
        Ok::<_, CliError>((tree, base, rounds))
    }
    .await;
    if outcome.is_ok() {
        let _ = std::fs::remove_dir_all(&scratch);
    } else {
        eprintln!("palm bench tree: node logs kept in {}", scratch.display());
    }
    let (tree, aio, rounds) = outcome?;
    let throughput_ratio = median(rounds.iter().map(|r| r.throughput).collect());
    let lag_ratio = median(rounds.iter().map(|r| r.completion_to_home_p50).collect());
    let result = json!({
        "machine": { "cpus": crate::sys::cpus() },
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "tree": report("root <- realm <- edges (home at the root, effects two hops down)", &tree),
        "baseline": report("one all-in-one node, same flow, same total seats", &aio),
        "rounds": rounds.iter().map(|r| json!({
            "throughput_tree_over_baseline": r.throughput,
            "completion_to_home_p50_tree_over_baseline": r.completion_to_home_p50,
        })).collect::<Vec<_>>(),
        "ratio": {
            "throughput_tree_over_baseline": throughput_ratio,
            "completion_to_home_p50_tree_over_baseline": lag_ratio,
        },
    });
    if ctx.out.json {
        ctx.out.json(&result);
        return Ok(Code::Ok);
    }
    for (label, f) in [("tree", &tree), ("all-in-one", &aio)] {
        println!(
            "{label:>10}: {:>7.0} effects/s with {} in flight; completion -> home p50 {:.2} ms, p99 {:.2} ms; submit -> terminal p50 {:.2} ms, p99 {:.2} ms",
            f.effects_per_s(),
            args.in_flight,
            percentile(&f.lag, 0.5),
            percentile(&f.lag, 0.99),
            percentile(&f.e2e, 0.5),
            percentile(&f.e2e, 0.99)
        );
        let spread: Vec<String> = f.ran_on.iter().map(|(n, c)| format!("{n} {c}")).collect();
        println!("{:>10}  ran on: {}", "", spread.join(", "));
        println!(
            "{:>10}  home per effect: {:.2} commits, {:.2} ms CPU",
            "",
            f.home_commits as f64 / f.effects.max(1) as f64,
            f.home_cpu_ms as f64 / f.effects.max(1) as f64
        );
    }
    println!(
        "     ratio: throughput {throughput_ratio:.2}x of all-in-one; completion -> home p50 {lag_ratio:.2}x (medians of {} rounds)",
        rounds.len()
    );
    Ok(Code::Ok)
}
