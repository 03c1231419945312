//! The command line of the simulator, shared by `palm sim` and the `palm-sim` binary
//! (which adds `--mutation`): one seed (`--seed S`: one line per event, unless
//! `--no-trace`) or a range of seeds (with a progress bar), a summary with coverage, and
//! on a broken invariant the seed and the exact command that replays it.

use crate::{Coverage, Faults, INVARIANTS, NODES_DEFAULT, Options, Report, Shape};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Bound on one invocation's seed range (a typo like `0..10000000000` should not hang).
pub const SEEDS_MAX: u64 = 1_000_000;
/// Bound on the nodes of one world.
pub const NODES_MAX: usize = 64;

/// The flags of `palm sim` (and of `palm-sim`, which adds `--mutation`).
#[derive(clap::Args, Clone, Debug)]
pub struct SimArgs {
    /// One seed to run (and replay); prints one line per event unless `--no-trace`.
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// A range of seeds, A..B (B excluded).
    #[arg(long, value_name = "A..B")]
    pub seeds: Option<String>,
    /// Nodes in the world (1: a root alone).
    #[arg(long, default_value_t = NODES_DEFAULT)]
    pub nodes: usize,
    /// How the nodes are arranged: tree (a root, realms, edges under both), flat (one
    /// home and its edges) or chain (root ← realm ← … ← edge).
    #[arg(long, default_value = "tree")]
    pub shape: String,
    /// Client actions (submits, statuses, continues, cancels) per run.
    #[arg(long, default_value_t = 200)]
    pub steps: u64,
    /// How hostile the world is: none, light or heavy.
    #[arg(long, default_value = "heavy")]
    pub faults: String,
    /// Print one line per event (with virtual time); the default with `--seed`.
    #[arg(long, conflicts_with = "no_trace")]
    pub trace: bool,
    /// With `--seed`, print only the summary.
    #[arg(long)]
    pub no_trace: bool,
    /// Run every seed twice and compare the traces.
    #[arg(long)]
    pub check_determinism: bool,
    /// Virtual time of the faulty phase (e.g. 60s, 10m).
    #[arg(long, default_value = "60s")]
    pub duration: String,
    /// The root as two replicas over one shared store with a writer's lease (the root on
    /// PostgreSQL): the serving replica is cut from the store mid-commit, a standby takes
    /// over, and the stale replica's late write must be fenced.
    #[arg(long)]
    pub replicas: bool,
    /// One client submit in four names its home (any root or realm, wherever it is in
    /// the tree), as `palm submit --node` does; the job must be homed there.
    #[arg(long)]
    pub named_homes: bool,
}

/// Why a simulator command could not do what it was asked.
#[derive(Debug)]
pub enum SimError {
    /// The flags do not make sense (exit 2).
    Usage(String),
    /// A seed ran differently twice (exit 1).
    Nondeterministic {
        /// What differed.
        message: String,
        /// The command that replays the seed.
        replay: String,
    },
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Usage(message) => f.write_str(message),
            SimError::Nondeterministic { message, replay } => {
                write!(f, "{message} (replay: {replay})")
            }
        }
    }
}

/// What a simulator command found.
#[derive(Debug)]
pub struct Outcome {
    /// True when every run held every invariant.
    pub passed: bool,
    /// The runs that broke one: `(seed, replay command)`.
    pub failed: Vec<(u64, String)>,
}

fn usage(message: impl Into<String>) -> SimError {
    SimError::Usage(message.into())
}

/// Parses `500ms`, `60s`, `10m`, `1h` (a bare number is milliseconds).
pub fn duration_ms(text: &str, flag: &str) -> Result<u64, SimError> {
    let text = text.trim();
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let value: u64 = digits
        .parse()
        .map_err(|_| usage(format!("{flag} `{text}` is not a duration like 60s or 10m")))?;
    let scale = match unit {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(usage(format!(
                "{flag} `{text}`: the unit must be ms, s, m or h"
            )));
        }
    };
    value
        .checked_mul(scale)
        .ok_or_else(|| usage(format!("{flag} `{text}` is too long")))
}

/// The seeds `args` asks for.
pub fn seed_range(args: &SimArgs) -> Result<std::ops::Range<u64>, SimError> {
    if let Some(seed) = args.seed {
        return Ok(seed..seed.saturating_add(1));
    }
    let Some(text) = &args.seeds else {
        return Ok(0..1);
    };
    let bad = || usage(format!("--seeds `{text}` is not a range like 0..500"));
    let (low, high) = text.split_once("..").ok_or_else(bad)?;
    let low: u64 = low.trim().parse().map_err(|_| bad())?;
    let high: u64 = high.trim().parse().map_err(|_| bad())?;
    if high <= low {
        return Err(usage(format!(
            "--seeds `{text}` is empty (the end is excluded)"
        )));
    }
    if high - low > SEEDS_MAX {
        return Err(usage(format!(
            "--seeds `{text}` is more than {SEEDS_MAX} seeds"
        )));
    }
    Ok(low..high)
}

/// The options of one run of `args` with `seed`.
pub fn options(args: &SimArgs, seed: u64) -> Result<Options, SimError> {
    let faults = Faults::parse(&args.faults).ok_or_else(|| {
        usage(format!(
            "--faults `{}`: use none, light or heavy",
            args.faults
        ))
    })?;
    let shape = Shape::parse(&args.shape).ok_or_else(|| {
        usage(format!(
            "--shape `{}`: use {}",
            args.shape,
            Shape::ALL.map(Shape::as_str).join(", ")
        ))
    })?;
    if args.nodes < 1 || args.nodes > NODES_MAX {
        return Err(usage(format!(
            "--nodes must be between 1 (a root alone) and {NODES_MAX}"
        )));
    }
    Ok(Options {
        seed,
        nodes: args.nodes,
        steps: args.steps,
        faults,
        trace: false,
        fault_ms: duration_ms(&args.duration, "--duration")?,
        shape,
        replicas: args.replicas,
        named_homes: args.named_homes,
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

fn print_failure(report: &Report, program: &str) {
    if let Some((violation, at, event, tail)) = &report.findings.violation {
        eprintln!(
            "{program}: seed {} broke `{}` at {}.{:03}s (event {event}): {}",
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

/// Runs the seeds `args` asks for (with `configure` applied to each run's options) and
/// prints the report: a JSON document on stdout with `json`, else a human summary.
/// `program` names the command in messages.
pub fn run(
    args: &SimArgs,
    json_out: bool,
    program: &str,
    configure: &dyn Fn(&mut Options),
) -> Result<Outcome, SimError> {
    let seeds = seed_range(args)?;
    let count = seeds.end - seeds.start;
    if args.trace && count > 1 {
        return Err(usage("--trace prints one run: give --seed S"));
    }
    let bar = (count > 1 && !json_out && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(count);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} seeds {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    });
    let started = Instant::now();
    let mut coverage = Coverage::default();
    let (mut events, mut sim_ms, mut checks) = (0u64, 0u64, 0u64);
    let mut failures: Vec<Value> = Vec::new();
    let mut failed = Vec::new();
    let mut single = None;
    let mut template = None;
    for seed in seeds.clone() {
        let mut opts = options(args, seed)?;
        configure(&mut opts);
        // design.md §9: `palm sim --seed S` replays one run and prints its trace.
        opts.trace = !json_out && (args.trace || (args.seed.is_some() && !args.no_trace));
        template.get_or_insert_with(|| opts.clone());
        let run_started = Instant::now();
        let report = crate::run(opts.clone());
        let wall = run_started.elapsed();
        if args.check_determinism {
            opts.trace = false;
            let again = crate::run(opts);
            let (a, b) = (&report.findings, &again.findings);
            if (a.trace_hash, a.events, a.sim_ms) != (b.trace_hash, b.events, b.sim_ms) {
                if let Some(bar) = &bar {
                    bar.finish_and_clear();
                }
                return Err(SimError::Nondeterministic {
                    message: format!(
                        "seed {seed} ran differently twice: trace {:016x} vs {:016x}, {} vs {} events",
                        a.trace_hash, b.trace_hash, a.events, b.events
                    ),
                    replay: report.replay_command(),
                });
            }
        }
        let f = &report.findings;
        events += f.events;
        sim_ms += f.sim_ms;
        checks += f.checks;
        coverage.merge(&f.coverage);
        if !report.passed() {
            if let Some(bar) = &bar {
                bar.suspend(|| print_failure(&report, program));
            } else if !json_out {
                print_failure(&report, program);
            }
            failed.push((seed, report.replay_command()));
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
    let opts = template.expect("at least one seed");
    if json_out {
        let document = match &single {
            Some((report, wall)) => {
                let mut one = report_json(report, *wall);
                one["determinism_checked"] = json!(args.check_determinism);
                one
            }
            None => json!({
                "seeds": { "from": seeds.start, "to": seeds.end },
                "shape": opts.shape.as_str(),
                "nodes": opts.nodes,
                "faults": opts.faults.as_str(),
                "replicas": opts.replicas,
                "named_homes": opts.named_homes,
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
        println!(
            "{}",
            serde_json::to_string_pretty(&document).unwrap_or_default()
        );
    } else {
        let verdict = if failures.is_empty() {
            "passed"
        } else {
            "FAILED"
        };
        let what = match &single {
            Some((report, _)) => format!("seed {}", report.options.seed),
            None => format!("seeds {}..{}", seeds.start, seeds.end),
        };
        // Standard output is a function of the seeds alone (the same seed prints the same
        // bytes); the wall time goes to standard error.
        println!(
            "sim {what}: {verdict} — {} of {} nodes, {} faults; {events} events, {:.1} s simulated; {checks} checks of {} invariants{}",
            opts.shape.as_str(),
            opts.nodes,
            opts.faults.as_str(),
            sim_ms as f64 / 1000.0,
            INVARIANTS.len(),
            if args.check_determinism {
                "; every seed ran twice, identically"
            } else {
                ""
            }
        );
        eprintln!(
            "sim {what}: ran in {:.2} s of wall time ({compression:.0}× the simulated time)",
            wall.as_secs_f64()
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
            println!("  never reached: {}", missed.join(", "));
        }
    }
    if let Some((seed, replay)) = failed.first() {
        // The report above already says what broke (in JSON, it is the one document):
        // only the verdict goes to stderr.
        eprintln!(
            "{program}: error: {} of {count} runs broke an invariant (first: seed {seed})",
            failed.len()
        );
        eprintln!("  hint: replay: {replay}");
    }
    Ok(Outcome {
        passed: failed.is_empty(),
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ranges_parse_or_say_why() {
        assert_eq!(duration_ms("60s", "--d").ok(), Some(60_000));
        assert_eq!(duration_ms("10m", "--d").ok(), Some(600_000));
        assert_eq!(duration_ms("250", "--d").ok(), Some(250));
        assert!(matches!(
            duration_ms("5 parsecs", "--d"),
            Err(SimError::Usage(_))
        ));
        let args = |seeds: &str| SimArgs {
            seed: None,
            seeds: Some(seeds.into()),
            nodes: NODES_DEFAULT,
            shape: "tree".into(),
            steps: 1,
            faults: "heavy".into(),
            trace: false,
            no_trace: false,
            check_determinism: false,
            duration: "1s".into(),
            replicas: false,
            named_homes: false,
        };
        assert_eq!(seed_range(&args("3..7")).ok(), Some(3..7));
        assert!(seed_range(&args("7..7")).is_err());
        assert!(seed_range(&args("x..7")).is_err());
        let mut bad = args("0..1");
        bad.shape = "star".into();
        assert!(
            matches!(options(&bad, 0), Err(SimError::Usage(m)) if m.contains("tree, flat, chain"))
        );
    }
}
