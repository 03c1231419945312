//! `palm sim`: the deterministic simulator (`palm_sim`) on the default tree world — one
//! seed with `--trace`, or a range with a progress bar; a summary with coverage; on a
//! broken invariant, the seed and the exact command that replays it (exit 1).
//!
//! The flags, the runs and the report are `palm_sim::cli`'s, shared with `palm-sim` (the
//! same simulator with planted bugs, never built into this binary).

use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use palm_sim::cli::{SimArgs, SimError};

/// Runs `palm sim`.
pub fn run(ctx: &Ctx, args: SimArgs) -> CliResult {
    match palm_sim::cli::run(&args, ctx.out.json, "palm", &|_| {}) {
        Ok(outcome) if outcome.passed => Ok(Code::Ok),
        // The report (stdout, and the failing seed with its replay on stderr) is out.
        Ok(_) => Ok(Code::Failure),
        Err(SimError::Usage(message)) => Err(CliError::usage("invalid_input", message)),
        Err(err @ SimError::Nondeterministic { .. }) => {
            Err(CliError::failure("nondeterministic", err.to_string()))
        }
    }
}
