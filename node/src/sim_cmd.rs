//! `palm sim`: runs the deterministic simulator for one seed (with `--trace`, one line per
//! event) or a range of seeds (with a progress bar), prints a summary with coverage, and
//! on a broken invariant prints the seed and the exact command that replays it (exit 1).

use crate::cli::SimArgs;
use crate::commands::{Ctx, duration_ms};
use crate::exit::{CliError, CliResult, Code};
use indicatif::{ProgressBar, ProgressStyle};
use palm_sim::{Faults, Options, Report, SimMutation};
use serde_json::{Value, json};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Bound on one invocation's seed range (a typo like `0..10000000000` should not hang).
const SEEDS_MAX: u64 = 1_000_000;

fn seed_range(args: &SimArgs) -> Result<std::ops::Range<u64>, CliError> {
    if let Some(seed) = args.seed {
        return Ok(seed..seed.saturating_add(1));
    }
    let Some(text) = &args.seeds else {
        return Ok(0..1);
    };
    let bad = || {
        CliError::usage(
            "invalid_input",
            format!("--seeds `{text}` is not a range like 0..500"),
        )
    };
    let (low, high) = text.split_once("..").ok_or_else(bad)?;
    let low: u64 = low.trim().parse().map_err(|_| bad())?;
    let high: u64 = high.trim().parse().map_err(|_| bad())?;
    if high <= low {
        return Err(CliError::usage(
            "invalid_input",
            format!("--seeds `{text}` is empty (the end is excluded)"),
        ));
    }
    if high - low > SEEDS_MAX {
        return Err(CliError::usage(
            "invalid_input",
            format!("--seeds `{text}` is more than {SEEDS_MAX} seeds"),
        ));
    }
    Ok(low..high)
}

fn options(args: &SimArgs, seed: u64) -> Result<Options, CliError> {
    let faults = Faults::parse(&args.faults).ok_or_else(|| {
        CliError::usage(
            "invalid_input",
            format!("--faults `{}`: use none, light or heavy", args.faults),
        )
    })?;
    let mutation = match &args.mutate {
        None => None,
        Some(text) => Some(SimMutation::parse(text).ok_or_else(|| {
            CliError::usage(
                "invalid_input",
                format!("--mutate `{text}`: use skip-fencing, ack-before-durable, projection-always-valid or shared-tag"),
            )
        })?),
    };
    let shape = match &args.shape {
        None => palm_sim::Shape::for_nodes(args.nodes),
        Some(text) => palm_sim::Shape::parse(text).ok_or_else(|| {
            CliError::usage(
                "invalid_input",
                format!("--shape `{text}`: use flat or tree"),
            )
        })?,
    };
    if shape == palm_sim::Shape::Tree && args.nodes < 2 {
        return Err(CliError::usage(
            "invalid_input",
            "a tree needs at least 2 nodes",
        ));
    }
    if args.nodes == 0 || args.nodes > 64 {
        return Err(CliError::usage(
            "invalid_input",
            "--nodes must be between 1 and 64",
        ));
    }
    Ok(Options {
        seed,
        nodes: args.nodes,
        steps: args.steps,
        faults,
        trace: false,
        mutation,
        fault_ms: duration_ms(&args.duration, "--duration")?,
        shape,
        ..Options::default()
    })
}

fn report_json(report: &Report, wall: Duration) -> Value {
    let f = &report.findings;
    json!({
        "seed": report.options.seed,
        "passed": report.passed(),
        "events": f.events,
        "sim_ms": f.sim_ms,
        "wall_ms": wall.as_secs_f64() * 1000.0,
        "checks": f.checks,
        "trace_hash": format!("{:016x}", f.trace_hash),
        "jobs": f.jobs,
        "coverage": f.coverage.all(),
        "violation": f.violation.as_ref().map(|(v, at, event, tail)| json!({
            "invariant": v.invariant,
            "detail": v.detail,
            "at_ms": at,
            "event": event,
            "trace_tail": tail,
        })),
        "replay": report.replay_command(),
    })
}

fn print_failure(report: &Report) {
    if let Some((violation, at, event, tail)) = &report.findings.violation {
        eprintln!(
            "palm sim: seed {} broke `{}` at {}.{:03}s (event {event}): {}",
            report.options.seed,
            violation.invariant,
            at / 1000,
            at % 1000,
            violation.detail
        );
        eprintln!("  last events:");
        for line in tail.iter().rev().take(15).rev() {
            eprintln!("    {line}");
        }
        eprintln!("  replay: {}", report.replay_command());
    }
}

/// Runs `palm sim`.
pub fn run(ctx: &Ctx, args: SimArgs) -> CliResult {
    let seeds = seed_range(&args)?;
    let count = seeds.end - seeds.start;
    if args.trace && count > 1 {
        return Err(CliError::usage(
            "invalid_input",
            "--trace prints one run: give --seed S",
        ));
    }
    let bar = (count > 1 && !ctx.out.json && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(count);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} seeds {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    });
    let started = Instant::now();
    let mut coverage = palm_sim::Coverage::default();
    let (mut events, mut sim_ms, mut checks) = (0u64, 0u64, 0u64);
    let mut failures: Vec<Value> = Vec::new();
    let mut single = None;
    for seed in seeds.clone() {
        let mut opts = options(&args, seed)?;
        opts.trace = args.trace && !ctx.out.json;
        let run_started = Instant::now();
        let report = palm_sim::run(opts.clone());
        let wall = run_started.elapsed();
        if args.check_determinism {
            opts.trace = false;
            let again = palm_sim::run(opts);
            let (a, b) = (&report.findings, &again.findings);
            if (a.trace_hash, a.events, a.sim_ms) != (b.trace_hash, b.events, b.sim_ms) {
                if let Some(bar) = &bar {
                    bar.finish_and_clear();
                }
                return Err(CliError::failure(
                    "nondeterministic",
                    format!(
                        "seed {seed} ran differently twice: trace {:016x} vs {:016x}, {} vs {} events",
                        a.trace_hash, b.trace_hash, a.events, b.events
                    ),
                )
                .with_hint(format!("replay: {}", report.replay_command())));
            }
        }
        let f = &report.findings;
        events += f.events;
        sim_ms += f.sim_ms;
        checks += f.checks;
        coverage.merge(&f.coverage);
        if !report.passed() {
            if let Some(bar) = &bar {
                bar.suspend(|| print_failure(&report));
            } else if !ctx.out.json {
                print_failure(&report);
            }
            failures.push(report_json(&report, wall));
        }
        if count == 1 {
            single = Some((report, wall));
        }
        if let Some(bar) = &bar {
            bar.inc(1);
            bar.set_message(format!("{} failed", failures.len()));
        }
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let wall = started.elapsed();
    let compression = sim_ms as f64 / (wall.as_secs_f64() * 1000.0).max(1e-9);
    if ctx.out.json {
        let document = match &single {
            Some((report, wall)) => {
                let mut one = report_json(report, *wall);
                one["determinism_checked"] = json!(args.check_determinism);
                one
            }
            None => json!({
                "seeds": { "from": seeds.start, "to": seeds.end },
                "runs": count,
                "passed": count as usize - failures.len(),
                "failed": failures,
                "events": events,
                "sim_ms": sim_ms,
                "wall_ms": wall.as_secs_f64() * 1000.0,
                "checks": checks,
                "compression": compression,
                "determinism_checked": args.check_determinism,
                "coverage": coverage.all(),
            }),
        };
        ctx.out.json(&document);
    } else {
        let (faults, nodes) = (&args.faults, args.nodes);
        let verdict = if failures.is_empty() {
            ctx.out.status("succeeded").replace("succeeded", "passed")
        } else {
            ctx.out.status("failed")
        };
        let what = match &single {
            Some((report, _)) => format!("seed {}", report.options.seed),
            None => format!("seeds {}..{}", seeds.start, seeds.end),
        };
        println!(
            "sim {what}: {verdict} — {nodes} node(s), {faults} faults; {events} events, {:.1} s simulated in {:.2} s ({compression:.0}×); {checks} checks of {} invariants{}",
            sim_ms as f64 / 1000.0,
            wall.as_secs_f64(),
            palm_sim::INVARIANTS.len(),
            if args.check_determinism {
                "; every seed ran twice, identically"
            } else {
                ""
            }
        );
        if let Some((report, _)) = &single {
            let jobs: Vec<String> = report
                .findings
                .jobs
                .iter()
                .map(|(status, n)| format!("{n} {status}"))
                .collect();
            println!(
                "  jobs      {}",
                if jobs.is_empty() {
                    "none".into()
                } else {
                    jobs.join(", ")
                }
            );
            println!("  trace     {:016x}", report.findings.trace_hash);
        }
        let all = coverage.all();
        let reached: Vec<String> = all
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(point, n)| format!("{point} {n}"))
            .collect();
        let missed: Vec<&str> = all
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(point, _)| *point)
            .collect();
        println!("  coverage  {}", reached.join(", "));
        if !missed.is_empty() {
            println!(
                "  {}",
                ctx.out
                    .dim(&format!("never reached: {}", missed.join(", ")))
            );
        }
    }
    if failures.is_empty() {
        return Ok(Code::Ok);
    }
    // The report above already says what broke (and in JSON, it is the one document):
    // only the one-line verdict goes to stderr.
    eprintln!(
        "palm: error: {} of {count} runs broke an invariant (first: seed {})",
        failures.len(),
        failures[0]["seed"]
    );
    eprintln!(
        "  hint: replay: {}",
        failures[0]["replay"].as_str().unwrap_or_default()
    );
    Ok(Code::Failure)
}
