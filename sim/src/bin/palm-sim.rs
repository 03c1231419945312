//! `palm-sim`: the simulator with planted bugs (built only with the `mutations` feature,
//! which the production `palm` binary never enables). It takes the flags of `palm sim`
//! plus `--mutation NAME` (`--mutation list` names them): a run with a planted bug must
//! fail and name the seed that caught it; the same run without it must pass.
//!
//! ```text
//! cargo run --release -p palm-sim --features mutations --bin palm-sim -- --mutation list
//! cargo run --release -p palm-sim --features mutations --bin palm-sim -- \
//!     --mutation same-key-forgotten --seeds 0..500
//! ```
//!
//! Exit codes: 0 every run passed, 1 a run broke an invariant (or ran differently twice),
//! 2 a usage error.

use clap::Parser;
use palm_sim::Mutation;
use palm_sim::cli::{SimArgs, SimError};
use std::process::ExitCode;

/// The simulator with planted bugs.
#[derive(Parser, Debug)]
#[command(name = "palm-sim", version)]
struct Args {
    #[command(flatten)]
    sim: SimArgs,
    /// Switch on a planted bug to see it caught; `list` names them.
    #[arg(long, value_name = "NAME")]
    mutation: Option<String>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mutation = match args.mutation.as_deref() {
        None => None,
        Some("list") => {
            for mutation in Mutation::all() {
                if args.json {
                    continue;
                }
                println!("{}", mutation.as_str());
            }
            if args.json {
                let list: Vec<serde_json::Value> = Mutation::all()
                    .into_iter()
                    .map(|m| serde_json::json!({"name": m.as_str(), "bug": m.describe()}))
                    .collect();
                println!("{}", serde_json::json!({ "mutations": list }));
            }
            return ExitCode::SUCCESS;
        }
        Some(name) => match Mutation::parse(name) {
            Some(mutation) => Some(mutation),
            None => {
                eprintln!(
                    "palm-sim: error: unknown mutation `{name}`; `--mutation list` names them"
                );
                return ExitCode::from(2);
            }
        },
    };
    if let Some(mutation) = mutation
        && !args.json
    {
        eprintln!(
            "palm-sim: planted bug `{}`: {}",
            mutation.as_str(),
            mutation.describe()
        );
    }
    let outcome = palm_sim::cli::run(&args.sim, args.json, "palm-sim", &|options| {
        options.mutation = mutation;
    });
    match outcome {
        Ok(outcome) if outcome.passed => ExitCode::SUCCESS,
        Ok(outcome) => {
            if let Some((seed, _)) = outcome.failed.first() {
                eprintln!("palm-sim: failing seed {seed}");
            }
            ExitCode::from(1)
        }
        Err(SimError::Usage(message)) => {
            eprintln!("palm-sim: error: {message}");
            ExitCode::from(2)
        }
        Err(err) => {
            eprintln!("palm-sim: error: {err}");
            ExitCode::from(1)
        }
    }
}
