//! `palm flows migrate NAME --to R`: show what moving a flow's unfinished jobs to another
//! revision would do, then move the ones that can move.
//!
//! The node checks each job (`palm_actors::path::migrate`); this command asks once for
//! the impact, shows it, asks for confirmation on a terminal (or takes `--yes`), and then
//! moves exactly the jobs it showed as movable. Exit 0 when every job ends on the target
//! revision (or only a dry run was asked for), 1 when some cannot move and stay where
//! they are, 2 when confirmation is needed and there is no terminal to ask.

use crate::cli::FlowsMigrateArgs;
use crate::ctx::{Ctx, print};
use crate::exit::{CliError, CliResult, Code};
use crate::output::Output;
use palm_api::protocol::Request;
use palm_node::target::{Access, Target};
use serde_json::Value;
use std::io::{BufRead, IsTerminal, Write};

/// `palm flows migrate`.
pub async fn migrate(ctx: &Ctx, args: FlowsMigrateArgs) -> CliResult {
    let mut target = Target::for_access(&ctx.data, Access::Write).await?;
    let result = run(ctx, &mut target, args).await;
    target.finish().await;
    result
}

async fn run(ctx: &Ctx, target: &mut Target, args: FlowsMigrateArgs) -> CliResult {
    let plan = target
        .call(Request::FlowsMigrate {
            name: args.name.clone(),
            to: args.to,
            jobs: args.job.clone(),
            dry_run: true,
        })
        .await?;
    let movable: Vec<String> = plan["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|j| j["verdict"] == "moves")
        .filter_map(|j| j["job"].as_str().map(str::to_owned))
        .collect();
    let diverged = plan["diverged"].as_u64().unwrap_or(0);
    let code = if diverged > 0 {
        Code::Failure
    } else {
        Code::Ok
    };
    if args.dry_run || movable.is_empty() {
        print(ctx, &plan, |out, v| {
            show(out, v);
            if movable.is_empty() {
                println!("{}", out.dim("nothing to move"));
            }
        });
        return Ok(code);
    }
    if !args.yes {
        if ctx.out.json || !std::io::stdin().is_terminal() {
            if !ctx.out.json {
                show(&ctx.out, &plan);
            }
            return Err(CliError::usage(
                "confirmation_needed",
                format!(
                    "{} job{} can move to revision {}; nothing was moved",
                    movable.len(),
                    plural(movable.len()),
                    args.to
                ),
            )
            .with_hint("add --yes to move them, or --dry-run to only look"));
        }
        show(&ctx.out, &plan);
        if !confirm(&format!(
            "Move {} job{} to revision {}? [y/N] ",
            movable.len(),
            plural(movable.len()),
            args.to
        )) {
            println!("{}", ctx.out.dim("nothing was moved"));
            return Ok(code);
        }
    } else if !ctx.out.json {
        show(&ctx.out, &plan);
    }
    let done = target
        .call(Request::FlowsMigrate {
            name: args.name,
            to: args.to,
            jobs: movable,
            dry_run: false,
        })
        .await?;
    print(ctx, &done, |out, v| {
        let moved = v["moved"].as_u64().unwrap_or(0) as usize;
        let mut line = format!("moved {moved} job{} to revision {}", plural(moved), v["to"]);
        if diverged > 0 {
            line.push_str(&format!(
                "; {diverged} cannot move and stay{} on {} revision",
                if diverged == 1 { "s" } else { "" },
                if diverged == 1 { "its" } else { "their" }
            ));
        }
        println!("{}", out.bold(&line));
    });
    let moved_all = done["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|j| j["verdict"] == "moved" || j["verdict"] == "stays");
    Ok(if diverged > 0 || !moved_all {
        Code::Failure
    } else {
        Code::Ok
    })
}

/// The impact, one line per job.
fn show(out: &Output, plan: &Value) {
    let jobs = plan["jobs"].as_array().cloned().unwrap_or_default();
    println!(
        "{} → revision {}: {} unfinished job{}",
        out.bold(plan["flow"].as_str().unwrap_or_default()),
        plan["to"],
        jobs.len(),
        plural(jobs.len())
    );
    let width = jobs
        .iter()
        .filter_map(|j| j["job"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(0);
    for job in jobs {
        let id = job["job"].as_str().unwrap_or_default();
        let waiting: Vec<&str> = job["waiting"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let status = if waiting.is_empty() {
            job["status"].as_str().unwrap_or_default().to_owned()
        } else {
            format!("waiting on {}", waiting.join(", "))
        };
        let verdict = match job["verdict"].as_str().unwrap_or_default() {
            "moves" => out.green("can move"),
            "moved" => out.green("moved"),
            "stays" => out.dim("already there"),
            _ => out.red(&format!(
                "cannot move: {}",
                job["reason"].as_str().unwrap_or_default()
            )),
        };
        println!(
            "  {id:<width$}  rev {}  {status:<24}  {verdict}",
            job["from"]
        );
    }
}

fn confirm(question: &str) -> bool {
    print!("{question}");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim(), "y" | "Y" | "yes" | "Yes")
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
