//! `palm team start|status|post|resume|stop`: a team of agents on a durable board. A team
//! is a job of a one-node flow (`team:`), so it lives in the store like any job: it
//! survives restarts, parks when its turns run out, and its board is its saved state.

use crate::cli::{TeamCommand, TeamStartArgs};
use crate::ctx::{Ctx, print};
use crate::exit::{CliError, CliResult, Code};
use palm_api::protocol::{FlowArg, Request};
use palm_node::target::Target;
use serde_json::{Value, json};

/// The wait key a team listens on (the flow `palm team start` writes uses the default).
const TEAM_KEY: &str = "team";

/// `NAME=PROVIDER[:MODE]`.
fn member(text: &str) -> Result<Value, CliError> {
    let bad = || {
        CliError::usage(
            "invalid_input",
            format!("--member takes NAME=PROVIDER or NAME=PROVIDER:MODE, not `{text}`"),
        )
    };
    let (name, rest) = text.split_once('=').ok_or_else(bad)?;
    let (provider, mode) = match rest.split_once(':') {
        Some((provider, mode)) => (provider, mode),
        None => (rest, "edit"),
    };
    if name.is_empty() || provider.is_empty() {
        return Err(bad());
    }
    Ok(json!({"name": name, "provider": provider, "mode": mode}))
}

/// The board a tasks file holds (YAML or JSON): a list of tasks, or `{tasks: [...]}`;
/// an error names the file, line and column.
fn read_board(path: &std::path::Path, text: &str) -> Result<Value, CliError> {
    let at = |line: u32, col: u32, what: String| {
        CliError::usage(
            "invalid_input",
            format!("{}:{line}:{col}: {what}", path.display()),
        )
    };
    let document = palm_actors::definition::yaml::read(text)
        .map_err(|e| at(e.span.line, e.span.col, e.message))?;
    let value = document.to_json();
    let tasks = match value {
        Value::Array(_) => value,
        Value::Object(mut map) if map.contains_key("tasks") => {
            map.remove("tasks").unwrap_or_default()
        }
        _ => {
            return Err(at(
                document.span.line,
                document.span.col,
                "a board is a list of tasks {id, title, detail, depends_on}, or `tasks:` holding one".into(),
            ));
        }
    };
    if !tasks.is_array() {
        return Err(CliError::usage(
            "invalid_input",
            format!("{}: `tasks` must be a list", path.display()),
        ));
    }
    Ok(tasks)
}

/// The flow of a team: its members and limits; the board arrives as its input (so a
/// title holding `{{` is text, not a template).
fn team_flow(args: &TeamStartArgs) -> Result<String, CliError> {
    let members: Vec<Value> = args
        .members
        .iter()
        .map(|m| member(m))
        .collect::<Result<_, _>>()?;
    if members.is_empty() {
        return Err(CliError::usage(
            "invalid_input",
            "a team needs at least one --member NAME=PROVIDER",
        ));
    }
    let mut flow = format!(
        "name: team\ndescription: a team of {} on a board of tasks\ninput:\n  tasks: {{ type: array }}\ntree:\n  team:\n    members: {}\n    tasks: \"{{{{ input.tasks }}}}\"\n",
        members.len(),
        Value::Array(members)
    );
    let repo = match &args.repo {
        Some(dir) => Some(std::fs::canonicalize(dir).map_err(|e| {
            CliError::usage("invalid_input", format!("--repo {}: {e}", dir.display()))
        })?),
        None => None,
    };
    if let Some(repo) = &repo {
        flow.push_str(&format!(
            "    repo: {}\n",
            json!(repo.display().to_string())
        ));
    }
    if let Some(check) = &args.check {
        flow.push_str(&format!("    check: {}\n", json!({"cmd": check})));
    }
    if let Some(turns) = args.max_turns {
        flow.push_str(&format!("    max_turns: {turns}\n"));
    }
    if let Some(parallel) = args.parallel {
        flow.push_str(&format!("    parallel: {parallel}\n"));
    }
    Ok(flow)
}

/// Waits for a team to settle (done, failed, or parked) and prints its board.
async fn settle_and_print(ctx: &Ctx, target: &mut Target, job: &str) -> CliResult {
    let view = crate::ctx::settled_view(ctx, target, job, &format!("team {job}"), None).await?;
    print(ctx, &team_doc(&view), print_team);
    Ok(crate::ctx::status_code(&view))
}

/// The team as `palm team status --json` shows it: the job's status and its board.
fn team_doc(view: &Value) -> Value {
    let board = palm_api::verbs::team_board(view)
        .cloned()
        .unwrap_or(Value::Null);
    json!({
        "team": view["job"],
        "status": view["status"],
        "error": view["error"],
        "board": board,
    })
}

fn print_team(out: &crate::output::Output, v: &Value) {
    let board = &v["board"];
    println!(
        "team {}  {}  {} of {} turns{}",
        out.bold(v["team"].as_str().unwrap_or_default()),
        out.status(v["status"].as_str().unwrap_or_default()),
        board["turns"],
        board["max_turns"],
        if board["parked"] == "budget" {
            " · parked: out of turns (palm team resume TEAM --turns N)"
        } else {
            ""
        }
    );
    if let Some(error) = v["error"].as_str() {
        println!("  {}", out.red(error));
    }
    for task in board["tasks"].as_array().into_iter().flatten() {
        let owner = task["owner"]
            .as_str()
            .map(|o| format!(" ({o})"))
            .unwrap_or_default();
        println!(
            "  [{}] {}: {}{owner}",
            task["status"].as_str().unwrap_or_default(),
            task["id"].as_str().unwrap_or_default(),
            task["title"].as_str().unwrap_or_default()
        );
    }
    for m in board["members"].as_array().into_iter().flatten() {
        let doing = m["working_on"]
            .as_str()
            .map(|t| format!(" · on {t}"))
            .unwrap_or_default();
        println!(
            "  member {} ({}, {}) · {} turns{doing}",
            m["name"].as_str().unwrap_or_default(),
            m["provider"].as_str().unwrap_or_default(),
            m["mode"].as_str().unwrap_or_default(),
            m["turns"]
        );
    }
    print_schedule(board);
    let mail = board["mailbox"].as_array().map_or(0, Vec::len);
    if mail > 0 {
        println!("  mailbox: {mail} message(s); the latest:");
        let mailbox = board["mailbox"].as_array().cloned().unwrap_or_default();
        for m in &mailbox[mailbox.len().saturating_sub(5)..] {
            println!(
                "    {} → {}: {}",
                m["from"].as_str().unwrap_or_default(),
                m["to"].as_str().unwrap_or_default(),
                m["text"].as_str().unwrap_or_default()
            );
        }
    }
}

/// With `parallel`: the prediction and the scheduler's latest decisions.
fn print_schedule(board: &Value) {
    let schedule = &board["schedule"];
    match schedule["source"].as_str() {
        Some("intel") => println!(
            "  schedule: {} of {} task pairs predicted to touch a same file run one after the other",
            schedule["serialized"], schedule["pairs"]
        ),
        Some("none") => println!(
            "  schedule: {}",
            schedule["reason"].as_str().unwrap_or_default()
        ),
        Some("pending") => println!("  schedule: predicting conflicts"),
        _ => return,
    }
    let decisions = board["decisions"].as_array().cloned().unwrap_or_default();
    for d in &decisions[decisions.len().saturating_sub(8)..] {
        let task = d["task"].as_str().unwrap_or_default();
        let files = |v: &Value| {
            v.as_array()
                .map(|f| {
                    f.iter()
                        .filter_map(Value::as_str)
                        .take(3)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        let line = if let Some(other) = d["waits_for"].as_str() {
            format!(
                "{task} waits for {other} (score {}: {})",
                d["score"],
                files(&d["files"])
            )
        } else if let Some(member) = d["member"].as_str() {
            let beside = files(&d["beside"]);
            match beside.is_empty() {
                true => format!("{task} started by {member}"),
                false => format!("{task} started by {member} beside {beside}"),
            }
        } else if d.get("merged").is_some() {
            format!("{task} merged ({})", files(&d["merged"]))
        } else if let Some(why) = d["merge_failed"].as_str() {
            format!("{task} did not merge: {why}")
        } else if let Some(who) = d["claim_lapsed"].as_str() {
            format!("{task}: {who}'s claim lapsed")
        } else {
            continue;
        };
        println!("    {line}");
    }
}

/// `palm team ...`.
pub async fn run(ctx: &Ctx, command: TeamCommand) -> CliResult {
    match command {
        TeamCommand::Start(args) => {
            let tasks = std::fs::read_to_string(&args.tasks).map_err(|e| {
                CliError::usage(
                    "invalid_input",
                    format!("cannot read {}: {e}", args.tasks.display()),
                )
            })?;
            let board = read_board(&args.tasks, &tasks)?;
            let source = team_flow(&args)?;
            let mut input = serde_json::Map::new();
            input.insert("tasks".into(), board);
            let mut target = Target::driving(&ctx.data, None).await?;
            let result = async {
                let submitted = target
                    .call(Request::Submit {
                        flow: FlowArg::Source {
                            source,
                            origin: format!("<palm team start {}>", args.tasks.display()),
                        },
                        input,
                        args: Vec::new(),
                        started_by: None,
                        node: None,
                    })
                    .await?;
                let job = submitted["job"].as_str().unwrap_or_default().to_owned();
                if args.no_wait {
                    print(
                        ctx,
                        &json!({"team": job, "status": submitted["status"]}),
                        |o, v| {
                            println!(
                                "team {} started",
                                o.bold(v["team"].as_str().unwrap_or_default())
                            );
                        },
                    );
                    return Ok(Code::Ok);
                }
                settle_and_print(ctx, &mut target, &job).await
            }
            .await;
            target.finish().await;
            result
        }
        TeamCommand::Status { team } => {
            let view = crate::ctx::one_call(
                ctx,
                palm_node::target::Access::Read,
                Request::Status { job: team.clone() },
            )
            .await?;
            if palm_api::verbs::team_board(&view).is_none() {
                return Err(CliError::usage(
                    "not_a_team",
                    format!("job {team} is not a team (it has no board)"),
                ));
            }
            print(ctx, &team_doc(&view), print_team);
            Ok(crate::ctx::status_code(&view))
        }
        TeamCommand::Post {
            team,
            text,
            to,
            from,
        } => {
            let mut input = json!({"op": "post", "text": text});
            if let Some(to) = to {
                input["to"] = json!(to);
            }
            if let Some(from) = from {
                input["from"] = json!(from);
            }
            let result = crate::ctx::one_call(
                ctx,
                palm_node::target::Access::Write,
                Request::Continue {
                    job: team.clone(),
                    key: TEAM_KEY.to_owned(),
                    input,
                },
            )
            .await?;
            print(
                ctx,
                &json!({"team": team, "posted": true, "status": result["status"]}),
                |_, v| {
                    println!("posted to team {}", v["team"].as_str().unwrap_or_default());
                },
            );
            Ok(Code::Ok)
        }
        TeamCommand::Resume { team, turns } => {
            let mut target = Target::driving(&ctx.data, None).await?;
            let result = async {
                target
                    .call(Request::Continue {
                        job: team.clone(),
                        key: TEAM_KEY.to_owned(),
                        input: json!({"op": "budget", "turns": turns}),
                    })
                    .await?;
                settle_and_print(ctx, &mut target, &team).await
            }
            .await;
            target.finish().await;
            result
        }
        TeamCommand::Stop { team } => {
            let result = crate::ctx::one_call(
                ctx,
                palm_node::target::Access::Write,
                Request::Cancel {
                    job: team.clone(),
                    reason: Some("the team was stopped".into()),
                },
            )
            .await?;
            print(
                ctx,
                &json!({"team": team, "status": result["status"]}),
                |o, v| {
                    println!(
                        "team {} {}",
                        o.bold(v["team"].as_str().unwrap_or_default()),
                        o.status("cancelled")
                    );
                },
            );
            Ok(Code::Ok)
        }
    }
}
