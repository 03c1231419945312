//! Command implementations: resolve where to send a request (a running node, an embedded
//! node, or the store directly), send it, render the answer, pick the exit code.

use crate::cli::{
    BenchCommand, Cli, Command, ContinueArgs, FlowsCommand, RunArgs, SubmitArgs, UpArgs,
};
use crate::control::server::socket_path;
pub use crate::ctx::{Ctx, one_call, print, settled_view, status_code};
use crate::exit::{CliError, CliResult, Code};
use crate::genome::NodeSettings;
use crate::node::{BootOptions, Node};
use crate::output::{self, Output};
use palm_api::protocol::{FlowArg, Request};
use palm_api::verbs::check_continue;
pub use palm_api::verbs::{duration_ms, flow_arg};
pub use palm_node::config::data_dir;
pub use palm_node::target::{Access, Target, connect};
use serde_json::{Value, json};
use std::time::Duration;

/// Runs a parsed command line.
pub async fn run(cli: Cli, out: Output) -> CliResult {
    let ctx = Ctx {
        data: data_dir(cli.data)?,
        out,
    };
    match cli.command {
        Command::Up(args) => up(&ctx, args).await,
        Command::Run(args) => run_flow(&ctx, args).await,
        Command::Submit(args) => submit(&ctx, args).await,
        Command::Status { job: None, once } => crate::top_cmd::run(&ctx, once, None).await,
        Command::Top { once, every } => crate::top_cmd::run(&ctx, once, every.as_deref()).await,
        Command::Status {
            job: Some(job),
            once: _,
        } => {
            let view = one_call(&ctx, Access::Read, Request::Status { job }).await?;
            print(&ctx, &view, output::print_status);
            Ok(Code::Ok)
        }
        Command::Jobs {
            command: Some(crate::cli::JobsCommand::Gc(args)),
            ..
        } => crate::jobs_cmd::gc(&ctx, args).await,
        Command::Jobs {
            command: None,
            status,
            limit,
            node,
        } => {
            let jobs = one_call(
                &ctx,
                Access::Read,
                Request::Jobs {
                    status,
                    limit,
                    node,
                },
            )
            .await?;
            print(&ctx, &jobs, output::print_jobs);
            Ok(Code::Ok)
        }
        Command::Continue(args) => continue_job(&ctx, args).await,
        Command::Cancel { job, reason } => {
            let result = one_call(&ctx, Access::Write, Request::Cancel { job, reason }).await?;
            print(&ctx, &result, |out, v| {
                println!(
                    "job {} {}",
                    out.bold(v["job"].as_str().unwrap_or_default()),
                    out.status("cancelled")
                );
            });
            Ok(Code::Ok)
        }
        Command::Retry(args) => retry_job(&ctx, args).await,
        Command::Inspect { job } => {
            let inspect = one_call(&ctx, Access::Read, Request::Inspect { job }).await?;
            print(&ctx, &inspect, output::print_inspect);
            Ok(Code::Ok)
        }
        Command::Flows(command) => flows(&ctx, command).await,
        Command::Vitality => {
            let vitality = one_call(&ctx, Access::Read, Request::Vitality).await?;
            print(&ctx, &vitality, output::print_vitality);
            Ok(Code::Ok)
        }
        Command::Places { command } => crate::places_cmd::run(&ctx, command).await,
        Command::Sim(args) => crate::sim_cmd::run(&ctx, args),
        Command::Interests { .. } => crate::interests_cmd::list(&ctx).await,
        Command::Emit { event, payload } => crate::interests_cmd::emit(&ctx, event, &payload).await,
        Command::Providers => crate::interests_cmd::providers(&ctx),
        Command::Tree => {
            let tree = one_call(&ctx, Access::Read, Request::Tree).await?;
            print(&ctx, &tree, output::print_node_tree);
            Ok(Code::Ok)
        }
        Command::Doctor => crate::doctor::run(&ctx).await,
        Command::Agent(crate::cli::AgentCommand::Run(args)) => {
            crate::agent_cmd::run(&ctx, args).await
        }
        Command::Patches(command) => crate::agent_cmd::patches(&ctx, command),
        Command::Agents(command) => crate::agent_cmd::agents(&ctx, command),
        Command::Route(args) => crate::route_cmd::route(&ctx, args).await,
        Command::Team(command) => crate::team_cmd::run(&ctx, command).await,
        Command::Wizard(command) => crate::wizard_cmd::run(&ctx, command).await,
        Command::Start(args) => crate::route_cmd::start(&ctx, args).await,
        Command::Worktrees(command) => crate::agent_cmd::worktrees(&ctx, command).await,
        Command::Completions { shell } => {
            let mut command = <crate::cli::Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "palm", &mut std::io::stdout());
            Ok(Code::Ok)
        }
        Command::Version { full } => version(&ctx, full),
        Command::Bench(BenchCommand::Jobs(args)) => crate::bench::jobs(&ctx, args).await,
        Command::Bench(BenchCommand::Effects(args)) => crate::bench_effects::run(&ctx, args).await,
        Command::Bench(BenchCommand::Restart(args)) => crate::bench_restart::run(&ctx, args).await,
        Command::Mcp(args) => palm_mcp::run(&ctx.data, ctx.out.json, args).await,
        Command::Bench(BenchCommand::Tunnel(args)) => crate::bench_tunnel::run(&ctx, args).await,
        Command::Bench(BenchCommand::Tree(args)) => crate::bench_tree::run(&ctx, args).await,
        Command::Bench(BenchCommand::Explorer(args)) => {
            crate::bench_explorer::run(&ctx, args).await
        }
        Command::Token(command) => crate::tokens_cmd::run(&ctx, command).await,
        #[cfg(feature = "intel")]
        Command::Bench(BenchCommand::Index(args)) => crate::bench_index::run(&ctx, args),
        #[cfg(feature = "intel")]
        Command::Bench(BenchCommand::Sessions(args)) => crate::bench_sessions::run(&ctx, args),
        #[cfg(feature = "intel")]
        Command::Intel(command) => crate::intel_cmd::run(&ctx, command),
        #[cfg(feature = "intel")]
        Command::Sessions(command) => crate::sessions_cmd::run(&ctx, command),
        #[cfg(feature = "intel")]
        Command::Recall(args) => crate::sessions_cmd::recall(&ctx, args),
        #[cfg(feature = "intel")]
        Command::Knowledge(command) => crate::knowledge_cmd::run(&ctx, command).await,
    }
}

/// Waits for a job to settle (the shared verb; the spinner shows its progress) and
/// prints it.
pub(crate) async fn wait_and_print(
    ctx: &Ctx,
    target: &mut Target,
    job: &str,
    timeout_ms: Option<u64>,
) -> CliResult {
    let view = settled_view(ctx, target, job, &format!("job {job}"), timeout_ms).await?;
    print(ctx, &view, output::print_status);
    Ok(status_code(&view))
}

/// Without a running node, a request that would be refused is checked against the store
/// read-only first, so refusing it never boots a node (which would touch the store).
async fn precheck(ctx: &Ctx, request: Request) -> Result<Option<Value>, CliError> {
    if connect(&ctx.data).await.is_some() || !crate::node::has_store(&ctx.data) {
        return Ok(None);
    }
    one_call(ctx, Access::Read, request).await.map(Some)
}

async fn run_flow(ctx: &Ctx, args: RunArgs) -> CliResult {
    let flow = palm_api::verbs::at_revision(flow_arg(&args.flow)?, args.revision)?;
    let timeout_ms = args
        .timeout
        .as_deref()
        .map(|t| duration_ms(t, "--timeout"))
        .transpose()?;
    if let FlowArg::Stored { name, revision } = &flow {
        let exists = precheck(
            ctx,
            Request::FlowsShow {
                name: name.clone(),
                revision: *revision,
            },
        )
        .await;
        if let Err(mut err) = exists {
            err.hint = Some("FLOW is a path to a YAML/JSON file or the name of a stored flow (`palm flows list`)".into());
            return Err(err);
        }
    }
    let mut target = Target::driving(&ctx.data, args.seats).await?;
    let result = async {
        let submitted = target
            .call(Request::Submit {
                flow,
                input: Default::default(),
                args: args.inputs,
                started_by: None,
                node: None,
            })
            .await?;
        let job = submitted["job"].as_str().unwrap_or_default().to_owned();
        wait_and_print(ctx, &mut target, &job, timeout_ms).await
    }
    .await;
    target.finish().await;
    result
}

async fn submit(ctx: &Ctx, args: SubmitArgs) -> CliResult {
    let flow = palm_api::verbs::at_revision(flow_arg(&args.flow)?, args.revision)?;
    let mut target = Target::for_access(&ctx.data, Access::Write).await?;
    let offline = target.is_offline();
    let result = target
        .call(Request::Submit {
            flow,
            input: Default::default(),
            args: args.inputs,
            started_by: None,
            node: args.node,
        })
        .await;
    target.finish().await;
    let submitted = result?;
    let summary = json!({"job": submitted["job"], "status": submitted["status"]});
    print(ctx, &summary, |out, v| {
        println!(
            "job {} {}",
            out.bold(v["job"].as_str().unwrap_or_default()),
            out.status(v["status"].as_str().unwrap_or_default())
        );
    });
    if offline {
        eprintln!(
            "palm: no node is running on {}; the job moves when one does (`palm up`), or use `palm run`",
            ctx.data.display()
        );
    }
    Ok(Code::Ok)
}

async fn continue_job(ctx: &Ctx, args: ContinueArgs) -> CliResult {
    let input: Value =
        serde_json::from_str(&args.input).unwrap_or_else(|_| Value::String(args.input.clone()));
    let timeout_ms = args
        .timeout
        .as_deref()
        .map(|t| duration_ms(t, "--timeout"))
        .transpose()?;
    if let Some(view) = precheck(
        ctx,
        Request::Status {
            job: args.job.clone(),
        },
    )
    .await?
    {
        check_continue(&view, &args.job, &args.key, &input)?;
    }
    let mut target = if args.no_wait {
        Target::for_access(&ctx.data, Access::Write).await?
    } else {
        Target::driving(&ctx.data, None).await?
    };
    let result = async {
        let continued = target
            .call(Request::Continue {
                job: args.job.clone(),
                key: args.key.clone(),
                input,
            })
            .await?;
        if args.no_wait {
            print(ctx, &continued, |out, v| {
                println!(
                    "job {} {}",
                    out.bold(v["job"].as_str().unwrap_or_default()),
                    out.status(v["status"].as_str().unwrap_or_default())
                );
            });
            return Ok(Code::Ok);
        }
        wait_and_print(ctx, &mut target, &args.job, timeout_ms).await
    }
    .await;
    target.finish().await;
    result
}

/// `palm retry`: starts the retry, then (unless `--no-wait`) drives it until it settles,
/// like `palm continue`. `--json` prints the retry document; after waiting, `status` is
/// the settled one and `view` the new job's status document.
async fn retry_job(ctx: &Ctx, args: crate::cli::RetryArgs) -> CliResult {
    let timeout_ms = args
        .timeout
        .as_deref()
        .map(|t| duration_ms(t, "--timeout"))
        .transpose()?;
    let mut target = if args.no_wait {
        Target::for_access(&ctx.data, Access::Write).await?
    } else {
        Target::driving(&ctx.data, None).await?
    };
    let result = async {
        let mut retried = target
            .call(Request::Retry {
                job: args.job.clone(),
                from: args.from.clone(),
                revision: args.revision,
            })
            .await?;
        if !ctx.out.json {
            let again = if retried["existing"] == true {
                " (asked before: the same retry)".to_owned()
            } else {
                format!(
                    "; {} inputs kept from before the node, {} after it dropped",
                    retried["kept_inputs"], retried["dropped_inputs"]
                )
            };
            println!(
                "job {} retries {} from node {} (revision {}){again}",
                ctx.out.bold(retried["job"].as_str().unwrap_or_default()),
                retried["retry_of"].as_str().unwrap_or_default(),
                retried["from"].as_str().unwrap_or_default(),
                retried["revision"],
            );
        }
        if args.no_wait {
            if ctx.out.json {
                print(ctx, &retried, |_, _| {});
            } else {
                println!(
                    "  {}",
                    ctx.out
                        .status(retried["status"].as_str().unwrap_or_default())
                );
            }
            return Ok(Code::Ok);
        }
        let job = retried["job"].as_str().unwrap_or_default().to_owned();
        let view = settled_view(ctx, &mut target, &job, &format!("job {job}"), timeout_ms).await?;
        if ctx.out.json {
            retried["status"] = view["status"].clone();
            retried["view"] = view.clone();
            print(ctx, &retried, |_, _| {});
        } else {
            output::print_status(&ctx.out, &view);
        }
        Ok(status_code(&view))
    }
    .await;
    target.finish().await;
    result
}

async fn flows(ctx: &Ctx, command: FlowsCommand) -> CliResult {
    match command {
        FlowsCommand::Validate { files } => crate::validate::validate(ctx, &files),
        FlowsCommand::Schema => {
            print!("{}", palm_actors::definition::schema::FLOW_SCHEMA);
            Ok(Code::Ok)
        }
        FlowsCommand::Trace { spec, ticks } => {
            let text = std::fs::read_to_string(&spec).map_err(|e| {
                CliError::usage(
                    "invalid_input",
                    format!("cannot read {}: {e}", spec.display()),
                )
            })?;
            let value: Value = serde_json::from_str(&text).map_err(|e| {
                CliError::usage(
                    "invalid_input",
                    format!(
                        "{}:{}:{}: not JSON: {e}",
                        spec.display(),
                        e.line(),
                        e.column()
                    ),
                )
            })?;
            let lines = palm_actors::bt::trace::trace(&value, ticks).map_err(|e| {
                CliError::usage("invalid_input", format!("{}: {e}", spec.display()))
            })?;
            if ctx.out.json {
                let ticks: Vec<Value> = lines
                    .iter()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect();
                ctx.out.json(&json!({ "ticks": ticks }));
            } else {
                for line in lines {
                    println!("{line}");
                }
            }
            Ok(Code::Ok)
        }
        FlowsCommand::Add { file } => {
            let source = std::fs::read_to_string(&file).map_err(|e| {
                CliError::usage(
                    "invalid_flow",
                    format!("cannot read {}: {e}", file.display()),
                )
            })?;
            let origin = file.display().to_string();
            let added = one_call(ctx, Access::Write, Request::FlowsAdd { source, origin }).await?;
            print(ctx, &added, |out, v| {
                let verb = if v["created"].as_bool() == Some(true) {
                    "stored"
                } else {
                    "unchanged"
                };
                println!(
                    "{} {} revision {}",
                    verb,
                    out.bold(v["name"].as_str().unwrap_or_default()),
                    v["revision"]
                );
            });
            Ok(Code::Ok)
        }
        FlowsCommand::Migrate(args) => crate::flows_cmd::migrate(ctx, args).await,
        FlowsCommand::List => {
            let flows = one_call(ctx, Access::Read, Request::FlowsList).await?;
            print(ctx, &flows, |out, v| {
                let list = v["flows"].as_array().cloned().unwrap_or_default();
                if list.is_empty() {
                    println!("{}", out.dim("no flows stored"));
                }
                for flow in list {
                    let description = flow["description"]
                        .as_str()
                        .map(|d| format!("  {}", out.dim(d)))
                        .unwrap_or_default();
                    println!(
                        "{} rev {}{description}",
                        out.bold(flow["name"].as_str().unwrap_or_default()),
                        flow["revision"]
                    );
                }
            });
            Ok(Code::Ok)
        }
        FlowsCommand::Show { name, revision } => {
            let flow = one_call(ctx, Access::Read, Request::FlowsShow { name, revision }).await?;
            print(ctx, &flow, |out, v| {
                println!(
                    "{} rev {} (revisions: {})",
                    out.bold(v["name"].as_str().unwrap_or_default()),
                    v["revision"],
                    v["revisions"]
                );
                println!(
                    "{}",
                    out.dim(&format!(
                        "from {}",
                        v["origin"].as_str().unwrap_or_default()
                    ))
                );
                print!("{}", v["source"].as_str().unwrap_or_default());
            });
            Ok(Code::Ok)
        }
    }
}

fn version(ctx: &Ctx, full: bool) -> CliResult {
    let info = json!({
        "name": "palm",
        "version": env!("CARGO_PKG_VERSION"),
        "commit": option_env!("PALM_GIT_COMMIT"),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "target": format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
        "store": { "default": "redb", "format": palm_actors::path::records::FORMAT },
        "tree_semantics": "py_trees 2.x",
    });
    if ctx.out.json {
        ctx.out.json(&info);
    } else if full {
        println!("palm {}", env!("CARGO_PKG_VERSION"));
        println!(
            "  commit   {}",
            option_env!("PALM_GIT_COMMIT").unwrap_or("unknown")
        );
        println!(
            "  build    {}",
            info["profile"].as_str().unwrap_or_default()
        );
        println!("  target   {}", info["target"].as_str().unwrap_or_default());
        println!("  store    redb ({})", palm_actors::path::records::FORMAT);
    } else {
        println!("palm {}", env!("CARGO_PKG_VERSION"));
    }
    Ok(Code::Ok)
}

async fn up(ctx: &Ctx, args: UpArgs) -> CliResult {
    // Before anything boots: a signal that arrives while the node (or its tree organ)
    // starts must stop it gracefully, not kill it with the default action.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let config = crate::config::load(&ctx.data, args.config.as_deref())?;
    // The webhooks' secrets, read before anything boots: a node told to sign-check a
    // webhook must not serve it unchecked because its secret went missing.
    let mut webhooks = std::collections::HashMap::new();
    if args.http.is_some() {
        for (name, secret) in &config.webhooks {
            let bytes = secret.read().map_err(|why| {
                CliError::usage("config", format!("webhook `{name}`: {why}"))
                    .with_hint("`webhooks:` in palm.yaml names where each secret is kept")
            })?;
            webhooks.insert(name.clone(), bytes);
        }
    }
    let mut settings = NodeSettings::default();
    if let Some(seats) = args.seats.or(config.seats) {
        if seats == 0 {
            return Err(CliError::usage(
                "invalid_input",
                "--seats must be at least 1",
            ));
        }
        settings.seats = seats;
    }
    settings.grace_ms = args.grace_ms;
    settings.capabilities = config.capabilities.clone();
    settings.places = config.places.clone();
    settings.providers = config.providers.clone();
    if let Some(lease_ms) = config.lease_ms {
        settings.lease_ms = lease_ms;
    }
    settings.retention = config.retention.unwrap_or_default();
    let (profile, name, plan) = crate::link::plan(
        &ctx.data,
        &crate::link::UpTree {
            profile: args.profile.as_deref(),
            listen: args.listen.as_deref(),
            parent: args.parent.as_deref(),
            token: args.token.as_deref(),
            name: args.name.or(config.name),
        },
    )?;
    let mut node = Node::boot(BootOptions {
        data: ctx.data.clone(),
        name: name.clone(),
        profile,
        settings: settings.clone(),
        embedded: false,
        store: args
            .store
            .as_deref()
            .map(|choice| crate::node::StoreLocation::parse(&ctx.data, choice))
            .transpose()?,
    })
    .await?;
    // The agents' transcripts, kept archived while the node runs (`sessions: {tail}`).
    #[cfg(feature = "intel")]
    let _tail = config
        .sessions
        .as_ref()
        .map(|tail| crate::sessions_cmd::Tail::start(&ctx.data, tail));
    let tree = match plan {
        Some(plan) => match node.start_tree(plan, config.link.clone()).await {
            Ok(tree) => Some(tree),
            Err(err) => {
                node.shutdown(Duration::ZERO).await;
                return Err(err);
            }
        },
        None => None,
    };
    if let Some(tree) = &tree {
        match tree.tree_json()["listen"].as_str() {
            Some(listen) => eprintln!(
                "palm: {} of tree {} accepting children on {listen}",
                tree.role, tree.tree_id
            ),
            None => eprintln!(
                "palm: {} of tree {}, linking to its parent",
                tree.role, tree.tree_id
            ),
        }
    }
    let (http_stop, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let http = match &args.http {
        Some(address) => {
            match crate::web::start(node.genome(), address, http_stopped, webhooks).await {
                Ok(task) => Some(task),
                Err(err) => {
                    if let Some(tree) = &tree {
                        tree.shutdown().await;
                    }
                    node.shutdown(Duration::ZERO).await;
                    return Err(err);
                }
            }
        }
        None => None,
    };
    eprintln!(
        "palm: node {name} up on {} ({} seats); control socket {}",
        ctx.data.display(),
        settings.seats,
        socket_path(&ctx.data).display()
    );
    let fenced = node.when_fenced();
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
        () = node.stopped() => {
            return Err(CliError::failure("escalated", "the node's organs failed beyond their restart limits; see the log above"));
        }
        () = fenced => {
            // Another replica owns the truth now; everything here is stale. Stop without
            // a grace period: no effect of ours could be recorded anyway.
            let _ = http_stop.send(());
            if let Some(tree) = &tree {
                tree.shutdown().await;
            }
            node.shutdown(Duration::ZERO).await;
            return Err(CliError::failure(
                "fenced",
                "another replica took this node's store over (its writer's lease); stopping",
            )
            .with_hint("run `palm up` again to stand by for the lease"));
        }
    }
    eprintln!(
        "palm: stopping (running effects have {} ms to finish)",
        settings.grace_ms
    );
    let _ = http_stop.send(());
    if let Some(task) = http {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    if let Some(tree) = &tree {
        tree.shutdown().await;
    }
    node.shutdown(Duration::from_millis(settings.grace_ms))
        .await;
    Ok(Code::Ok)
}
