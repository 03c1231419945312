//! `palm route "TASK"` (which stored flow fits a task, within an authority ceiling) and
//! `palm start "TASK"` (the plain-language front door: route within `edit`, run, report;
//! with no fit, the built-in plan-and-verify flow).

use crate::cli::{RouteArgs, StartArgs};
use crate::ctx::{Ctx, print};
use crate::exit::{CliError, CliResult, Code};
use palm_agents::Mode;
use palm_agents::route::{FlowCard, Hint, Routing};
use palm_api::protocol::{FlowArg, Request};
use palm_node::target::Target;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The flow `palm start` runs when no stored flow fits: an agent does the task, fixes
/// until the checks pass, and a second run judges the change.
pub const PLAN_AND_VERIFY: &str = r#"name: plan-and-verify
description: the fallback of palm start; an agent does the task, fixes until the checks pass, and a verifier judges the change
tags: [fix, feature, change]
authority: edit
input:
  task: string
  repo: { type: string, default: "." }
  test: string
  provider: { type: string, default: claude }
tree:
  sequence:
    - agent: { provider: "{{ input.provider }}", prompt: "{{ input.task }}", mode: edit, repo: "{{ input.repo }}", save: work }
    - until_green:
        verify: { cmd: "{{ input.test }}", repo: "{{ input.repo }}" }
        fix:
          agent: { provider: "{{ input.provider }}", mode: edit, repo: "{{ input.repo }}", prompt: "The task was: {{ input.task }}\nThese checks fail (round {{ round }}): {{ failures }}\nFix the code, not the tests." }
        max_rounds: 3
        save: checks
    - gate:
        agent: "{{ input.provider }}"
        criteria: "The change does what was asked, and nothing else: {{ input.task }}"
        evidence: "{{ state.checks }}"
        repo: "{{ input.repo }}"
        save: verdict
"#;

fn ceiling(text: &str) -> Result<Mode, CliError> {
    Mode::parse(text).ok_or_else(|| {
        CliError::usage(
            "invalid_input",
            format!("--authority must be observe, edit or execute, not `{text}`"),
        )
    })
}

fn repo_dir(repo: Option<&Path>) -> Result<PathBuf, CliError> {
    let dir = match repo {
        Some(dir) => dir.to_owned(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    };
    std::fs::canonicalize(&dir)
        .map_err(|e| CliError::usage("invalid_input", format!("--repo {}: {e}", dir.display())))
}

/// The stored flows as routing sees them (the latest revision of each).
async fn cards(target: &mut Target) -> Result<Vec<FlowCard>, CliError> {
    let listed = target.call(Request::FlowsList).await?;
    let mut latest: std::collections::BTreeMap<String, &Value> = Default::default();
    let flows = listed["flows"].as_array().cloned().unwrap_or_default();
    for flow in &flows {
        let name = flow["name"].as_str().unwrap_or_default().to_owned();
        let newer = latest
            .get(&name)
            .is_none_or(|seen| seen["revision"].as_u64() < flow["revision"].as_u64());
        if newer {
            latest.insert(name, flow);
        }
    }
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    // A flow needs what the flows it inlines or spawns need too (an unknown one counts
    // as execute): routing must not widen authority through them.
    let own = |flow: &Value| {
        flow["authority"]
            .as_str()
            .and_then(Mode::parse)
            .unwrap_or(Mode::Execute)
    };
    let needs = |start: &str| -> Mode {
        let mut most = Mode::Observe;
        let mut seen = std::collections::BTreeSet::new();
        let mut pending = vec![start.to_owned()];
        while let Some(name) = pending.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            let mode = match latest.get(&name) {
                Some(flow) => {
                    pending.extend(strings(&flow["reaches"]));
                    own(flow)
                }
                None => Mode::Execute,
            };
            most = most.max(mode);
        }
        most
    };
    Ok(latest
        .iter()
        .map(|(name, flow)| FlowCard {
            name: name.clone(),
            description: flow["description"].as_str().map(str::to_owned),
            tags: strings(&flow["tags"]),
            authority: needs(name),
            inputs: strings(&flow["inputs"]),
        })
        .collect())
}

/// Words the repo adds to a task: its languages (from the files that say so), and, with
/// the repo index, the languages and top directories of the files the task's words hit.
fn repo_hints(repo: &Path, task: &str) -> Vec<Hint> {
    let mut hints = Vec::new();
    for (marker, language) in [
        ("Cargo.toml", "rust"),
        ("go.mod", "go"),
        ("pyproject.toml", "python"),
        ("setup.py", "python"),
        ("package.json", "javascript"),
        ("tsconfig.json", "typescript"),
        ("pom.xml", "java"),
    ] {
        if repo.join(marker).exists() {
            hints.push(Hint {
                word: language.to_owned(),
                why: format!("the repo has {marker}"),
            });
        }
    }
    #[cfg(feature = "intel")]
    if let Ok(intel) = palm_intel::Intel::open(repo) {
        let mut warnings = Vec::new();
        let words = palm_agents::route::words(task).join(" ");
        if !words.is_empty()
            && let Ok(report) = intel.search(&words, 5, &mut warnings)
        {
            for hit in report.hits.iter().filter_map(|h| h.path.as_deref()) {
                let language = palm_intel::lang::Language::detect(hit).name();
                let top = hit.split('/').next().unwrap_or_default();
                for (word, why) in [
                    (language, format!("the task's words hit {hit} ({language})")),
                    (top, format!("the task's words hit {hit}")),
                ] {
                    if !word.is_empty() && !hints.iter().any(|h: &Hint| h.word == word) {
                        hints.push(Hint {
                            word: word.to_owned(),
                            why,
                        });
                    }
                }
            }
        }
    }
    #[cfg(not(feature = "intel"))]
    let _ = task;
    hints
}

fn print_routing(out: &crate::output::Output, v: &Value) {
    match v["choice"].as_object() {
        Some(choice) => {
            println!(
                "{} {}  {}",
                out.bold("route →"),
                out.bold(choice["flow"].as_str().unwrap_or_default()),
                out.dim(&format!("score {}", choice["score"]))
            );
            for reason in choice["reasons"].as_array().into_iter().flatten() {
                println!("  {}", reason.as_str().unwrap_or_default());
            }
        }
        None => println!(
            "{}",
            out.bold(&format!(
                "no stored flow fits this task within the {} ceiling",
                v["authority"].as_str().unwrap_or_default()
            ))
        ),
    }
    if let Some(alternatives) = v["alternatives"].as_array().filter(|a| !a.is_empty()) {
        println!("runners-up");
        for alt in alternatives {
            println!(
                "  {}  {}",
                alt["flow"].as_str().unwrap_or_default(),
                out.dim(&format!("score {}", alt["score"]))
            );
        }
    }
    for refused in v["refused"].as_array().into_iter().flatten() {
        println!(
            "{} {}: {}",
            out.red("refused"),
            refused["flow"].as_str().unwrap_or_default(),
            refused["reason"].as_str().unwrap_or_default()
        );
    }
}

fn routing_json(task: &str, ceiling: Mode, routing: &Routing) -> Value {
    let mut value = serde_json::to_value(routing).unwrap_or(Value::Null);
    value["task"] = json!(task);
    value["authority"] = json!(ceiling.as_str());
    value
}

/// The input a routed flow gets: the task and the repo, when it declares them.
fn routed_input(
    card: Option<&FlowCard>,
    task: &str,
    repo: &Path,
) -> serde_json::Map<String, Value> {
    let mut input = serde_json::Map::new();
    let declares = |name: &str| card.is_none_or(|c| c.inputs.iter().any(|i| i == name));
    if declares("task") {
        input.insert("task".into(), json!(task));
    }
    if declares("repo") {
        input.insert("repo".into(), json!(repo.display().to_string()));
    }
    input
}

/// Submits a flow and waits for it to settle; the status view.
async fn run_flow(
    ctx: &Ctx,
    target: &mut Target,
    flow: FlowArg,
    input: serde_json::Map<String, Value>,
    label: &str,
) -> Result<Value, CliError> {
    let submitted = target
        .call(Request::Submit {
            flow,
            input,
            args: Vec::new(),
            started_by: None,
            node: None,
        })
        .await?;
    let job = submitted["job"].as_str().unwrap_or_default().to_owned();
    crate::ctx::settled_view(ctx, target, &job, &format!("{label} in job {job}"), None).await
}

/// `palm route "TASK" --authority A [--repo DIR] [--execute]`.
pub async fn route(ctx: &Ctx, args: RouteArgs) -> CliResult {
    let ceiling = ceiling(&args.authority)?;
    if args.task.trim().is_empty() {
        return Err(CliError::usage("invalid_input", "the task is empty"));
    }
    let repo = repo_dir(args.repo.as_deref())?;
    let hints = if args.repo.is_some() {
        repo_hints(&repo, &args.task)
    } else {
        Vec::new()
    };
    let mut target = Target::driving(&ctx.data, None).await?;
    let result = async {
        let cards = cards(&mut target).await?;
        let routing = palm_agents::route::route(&args.task, ceiling, &cards, &hints);
        let mut value = routing_json(&args.task, ceiling, &routing);
        if !args.execute {
            print(ctx, &value, print_routing);
            return Ok(Code::Ok);
        }
        let Some(choice) = &routing.choice else {
            print(ctx, &value, print_routing);
            return Err(CliError::usage(
                "no_route",
                format!(
                    "no stored flow fits the task within the {} ceiling; nothing started",
                    ceiling.as_str()
                ),
            ));
        };
        let card = cards.iter().find(|c| c.name == choice.flow);
        let view = run_flow(
            ctx,
            &mut target,
            FlowArg::Stored {
                name: choice.flow.clone(),
                revision: None,
            },
            routed_input(card, &args.task, &repo),
            &choice.flow,
        )
        .await?;
        let code = crate::ctx::status_code(&view);
        value["job"] = view;
        print(ctx, &value, |out, v| {
            print_routing(out, v);
            crate::output::print_status(out, &v["job"]);
        });
        Ok(code)
    }
    .await;
    target.finish().await;
    result
}

/// The test command of a checkout, from the files that say how it is built.
fn detect_test(repo: &Path) -> Option<&'static str> {
    [
        ("Cargo.toml", "cargo test"),
        ("go.mod", "go test ./..."),
        ("package.json", "npm test"),
        ("pyproject.toml", "python3 -m pytest"),
        ("setup.py", "python3 -m pytest"),
        ("pytest.ini", "python3 -m pytest"),
        ("Makefile", "make test"),
    ]
    .iter()
    .find(|(marker, _)| repo.join(marker).exists())
    .map(|(_, cmd)| *cmd)
}

/// `palm start "TASK" [--repo DIR]`.
pub async fn start(ctx: &Ctx, args: StartArgs) -> CliResult {
    let ceiling = ceiling(&args.authority)?;
    if args.task.trim().is_empty() {
        return Err(CliError::usage("invalid_input", "the task is empty"));
    }
    let repo = repo_dir(args.repo.as_deref())?;
    let hints = repo_hints(&repo, &args.task);
    let mut target = Target::driving(&ctx.data, None).await?;
    let result = async {
        let cards = cards(&mut target).await?;
        let routing = palm_agents::route::route(&args.task, ceiling, &cards, &hints);
        let mut report = json!({ "route": routing_json(&args.task, ceiling, &routing) });
        let (flow, name, input) = match &routing.choice {
            Some(choice) => {
                let card = cards.iter().find(|c| c.name == choice.flow);
                (
                    FlowArg::Stored {
                        name: choice.flow.clone(),
                        revision: None,
                    },
                    choice.flow.clone(),
                    routed_input(card, &args.task, &repo),
                )
            }
            None if !routing.refused.is_empty() => {
                print(ctx, &report["route"], print_routing);
                return Err(CliError::usage(
                    "refused",
                    format!(
                        "the flows that fit need more than the {} ceiling; nothing started",
                        ceiling.as_str()
                    ),
                )
                .with_hint("raise --authority if that is what you mean"));
            }
            None if ceiling == Mode::Observe => {
                print(ctx, &report["route"], print_routing);
                return Err(CliError::usage(
                    "refused",
                    "no stored flow fits, and the built-in plan-and-verify flow needs edit authority, above the observe ceiling; nothing started",
                ));
            }
            None => {
                let test = match args.test.clone() {
                    Some(test) => test,
                    None => detect_test(&repo).map(str::to_owned).ok_or_else(|| {
                        CliError::usage(
                            "invalid_input",
                            "no stored flow fits, and the built-in plan-and-verify flow needs the repo's test command",
                        )
                        .with_hint("give it with --test \"CMD\"")
                    })?,
                };
                let mut input = routed_input(None, &args.task, &repo);
                input.insert("test".into(), json!(test));
                input.insert("provider".into(), json!(args.provider));
                (
                    FlowArg::Source {
                        source: PLAN_AND_VERIFY.to_owned(),
                        origin: "<palm start>".into(),
                    },
                    "plan-and-verify".to_owned(),
                    input,
                )
            }
        };
        let view = run_flow(ctx, &mut target, flow, input, &name).await?;
        let code = crate::ctx::status_code(&view);
        let job = view["job"].as_str().unwrap_or_default().to_owned();
        let patches = palm_agents::patches::Patches::new(&ctx.data)
            .list(Some(&job))
            .unwrap_or_default();
        report["flow"] = json!(name);
        report["job"] = json!(job);
        report["status"] = view["status"].clone();
        report["outcome"] = view["outcome"].clone();
        report["error"] = view["error"].clone();
        report["verdicts"] = json!(verdicts(&view["state"]));
        report["patches"] = json!(patches
            .iter()
            .map(|p| json!({"id": p["id"], "status": p["status"], "files": p["files"], "added": p["added"], "removed": p["removed"]}))
            .collect::<Vec<_>>());
        report["state"] = view["state"].clone();
        print(ctx, &report, print_report);
        Ok(code)
    }
    .await;
    target.finish().await;
    result
}

/// What the job's checks and gates said, wherever the flow saved them.
fn verdicts(state: &Value) -> Vec<Value> {
    let mut found = Vec::new();
    for (key, value) in state.as_object().into_iter().flatten() {
        if value.get("approved").is_some() {
            found.push(json!({"key": key, "kind": "gate", "approved": value["approved"], "reason": value["reason"]}));
        } else if value.get("evidence").is_some() && value.get("outcome").is_some() {
            found.push(json!({"key": key, "kind": "until_green", "outcome": value["outcome"], "rounds": value["rounds"]}));
        } else if value.get("signature").is_some() && value.get("ok").is_some() {
            found.push(json!({"key": key, "kind": "verify", "ok": value["ok"], "failures": value["failures"].as_array().map(Vec::len)}));
        }
    }
    found
}

fn print_report(out: &crate::output::Output, v: &Value) {
    print_routing(out, &v["route"]);
    println!(
        "ran {} as job {}: {}{}",
        out.bold(v["flow"].as_str().unwrap_or_default()),
        v["job"].as_str().unwrap_or_default(),
        out.status(v["status"].as_str().unwrap_or_default()),
        v["outcome"]
            .as_str()
            .map(|o| format!(" ({o})"))
            .unwrap_or_default()
    );
    if let Some(error) = v["error"].as_str() {
        println!("  {}", out.red(error));
    }
    for verdict in v["verdicts"].as_array().into_iter().flatten() {
        let what = match verdict["kind"].as_str() {
            Some("gate") => format!(
                "gate {}: {}",
                if verdict["approved"] == true {
                    "approved"
                } else {
                    "rejected"
                },
                verdict["reason"].as_str().unwrap_or_default()
            ),
            Some("until_green") => format!(
                "checks {} after {} round(s)",
                verdict["outcome"].as_str().unwrap_or_default(),
                verdict["rounds"]
            ),
            _ => format!(
                "check {}",
                if verdict["ok"] == true {
                    "green"
                } else {
                    "red"
                }
            ),
        };
        println!("  {what}");
    }
    for patch in v["patches"].as_array().into_iter().flatten() {
        println!(
            "  patch {} ({}): {} file(s), +{} -{}  {}",
            patch["id"].as_str().unwrap_or_default(),
            patch["status"].as_str().unwrap_or_default(),
            patch["files"].as_array().map_or(0, Vec::len),
            patch["added"],
            patch["removed"],
            out.dim("palm patches show ID · palm patches apply ID")
        );
    }
}
