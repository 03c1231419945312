//! `palm places`: list, add, adopt, remove, restart and the events of the place book.
//!
//! Flags are turned into the same `places:` document a config file holds and parsed by
//! the same parser, so a place added at run time is validated exactly like one declared
//! in `palm.yaml`.

use crate::cli::{PlaceProbeArgs, PlacesAddArgs, PlacesAdoptArgs, PlacesCommand};
use crate::ctx::{Ctx, one_call, print};
use crate::exit::{CliError, CliResult, Code};
use crate::output;
use palm_actors::place::PlaceSpec;
use palm_api::protocol::Request;
use palm_api::verbs::one_spec;
use palm_node::target::Access;
use serde_json::{Map, Value, json};
use std::time::{Duration, Instant};

/// How long `add`, `adopt` and `restart` wait for the place to settle before answering.
const SETTLE_WAIT_MS: u64 = 5_000;

/// Runs `palm places ...`.
pub async fn run(ctx: &Ctx, command: Option<PlacesCommand>) -> CliResult {
    match command.unwrap_or(PlacesCommand::List) {
        PlacesCommand::List => {
            let places = one_call(ctx, Access::Read, Request::Places).await?;
            print(ctx, &places, output::print_places);
            Ok(Code::Ok)
        }
        PlacesCommand::Events { name, limit } => {
            let request = Request::PlacesEvents {
                place: name,
                limit: Some(limit),
            };
            let events = one_call(ctx, Access::Read, request).await?;
            print(ctx, &events, output::print_place_events);
            Ok(Code::Ok)
        }
        PlacesCommand::Add(args) => {
            let spec = spawn_spec(&args)?;
            let name = spec.name.clone();
            one_call(ctx, Access::Write, Request::PlacesAdd { spec }).await?;
            settle(ctx, &name).await
        }
        PlacesCommand::Adopt(args) => {
            let spec = adopt_spec(&args)?;
            let name = spec.name.clone();
            one_call(ctx, Access::Write, Request::PlacesAdd { spec }).await?;
            settle(ctx, &name).await
        }
        PlacesCommand::Remove { name } => {
            let removed = one_call(ctx, Access::Write, Request::PlacesRemove { name }).await?;
            print(ctx, &removed, |_, v| {
                println!("place {} removed", v["place"].as_str().unwrap_or_default());
            });
            Ok(Code::Ok)
        }
        PlacesCommand::Restart { name } => {
            one_call(
                ctx,
                Access::Write,
                Request::PlacesRestart { name: name.clone() },
            )
            .await?;
            settle(ctx, &name).await
        }
    }
}

/// Waits (briefly) until the place is ready or has failed, then prints it; a place that
/// failed is an error (exit 1) with its reason.
async fn settle(ctx: &Ctx, name: &str) -> CliResult {
    let started = Instant::now();
    let mut last = Value::Null;
    while started.elapsed() < Duration::from_millis(SETTLE_WAIT_MS) {
        let places = one_call(ctx, Access::Read, Request::Places).await?;
        let found = places["places"]
            .as_array()
            .and_then(|all| all.iter().find(|p| p["name"] == name).cloned());
        let Some(place) = found else {
            break;
        };
        let state = place["state"].as_str().unwrap_or_default().to_owned();
        last = place;
        if matches!(state.as_str(), "ready" | "failed" | "stopped") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if last.is_null() {
        return Err(CliError::failure(
            "unknown_place",
            format!("place `{name}` is gone"),
        ));
    }
    if last["state"] == "failed" {
        return Err(CliError::failure(
            "place_failed",
            format!(
                "place `{name}` failed: {}",
                last["reason"].as_str().unwrap_or_default()
            ),
        )
        .with_hint(format!("`palm places events {name}` shows its history")));
    }
    print(ctx, &last, |out, v| {
        output::print_places(out, &json!({ "places": [v] }));
    });
    Ok(Code::Ok)
}

fn probe_fields(probe: &PlaceProbeArgs, place: &mut Map<String, Value>) -> Result<(), CliError> {
    let Some(kind) = &probe.probe else {
        // Without --probe the parser picks the natural check (the process, or the
        // adopted address); timing flags need a kind to attach to.
        if probe.interval.is_some()
            || probe.probe_timeout.is_some()
            || probe.failures.is_some()
            || probe.successes.is_some()
        {
            return Err(CliError::usage(
                "invalid_input",
                "--interval, --probe-timeout, --failures and --successes need --probe",
            ));
        }
        if !probe.capabilities.is_empty() {
            place.insert("capabilities".into(), json!(probe.capabilities));
        }
        return Ok(());
    };
    let mut fields = Map::new();
    match kind.split_once(':') {
        Some(("command" | "cmd", cmd)) => {
            fields.insert("command".into(), json!(cmd.trim()));
        }
        Some(("tcp", _)) => {
            fields.insert("tcp".into(), json!(kind));
        }
        Some(("http" | "https", _)) => {
            fields.insert("http".into(), json!(kind));
        }
        _ if kind == "process" => {
            fields.insert("process".into(), json!(true));
        }
        _ => {
            // Let the parser name the unknown kind (`grpc` of `grpc://host:1`).
            let name = kind.split(':').next().unwrap_or(kind);
            fields.insert(name.to_owned(), json!(true));
        }
    }
    if let Some(interval) = &probe.interval {
        fields.insert("interval".into(), json!(interval));
    }
    if let Some(timeout) = &probe.probe_timeout {
        fields.insert("timeout".into(), json!(timeout));
    }
    if let Some(failures) = probe.failures {
        fields.insert("failures".into(), json!(failures));
    }
    if let Some(successes) = probe.successes {
        fields.insert("successes".into(), json!(successes));
    }
    place.insert("probe".into(), Value::Object(fields));
    if !probe.capabilities.is_empty() {
        place.insert("capabilities".into(), json!(probe.capabilities));
    }
    Ok(())
}

fn spawn_spec(args: &PlacesAddArgs) -> Result<PlaceSpec, CliError> {
    let mut spawn = Map::new();
    spawn.insert("cmd".into(), json!(args.spawn));
    if !args.args.is_empty() {
        spawn.insert("args".into(), json!(args.args));
    }
    if let Some(cwd) = &args.cwd {
        spawn.insert("cwd".into(), json!(cwd));
    }
    if !args.env.is_empty() {
        let mut env = Map::new();
        for pair in &args.env {
            let Some((key, value)) = pair.split_once('=').filter(|(k, _)| !k.is_empty()) else {
                return Err(CliError::usage(
                    "invalid_input",
                    format!("--env `{pair}` is not KEY=VALUE"),
                ));
            };
            env.insert(key.to_owned(), json!(value));
        }
        spawn.insert("env".into(), Value::Object(env));
    }
    let mut place = Map::new();
    place.insert("spawn".into(), Value::Object(spawn));
    let mut restart = Map::new();
    if let Some(policy) = &args.restart {
        restart.insert("policy".into(), json!(policy));
    }
    if let Some(max) = args.restarts_max {
        restart.insert("max".into(), json!(max));
    }
    if let Some(window) = &args.restart_window {
        restart.insert("window".into(), json!(window));
    }
    if let Some(backoff) = &args.backoff {
        restart.insert("backoff".into(), json!(backoff));
    }
    if !restart.is_empty() {
        place.insert("restart".into(), Value::Object(restart));
    }
    let mut stop = Map::new();
    if let Some(signal) = &args.stop_signal {
        stop.insert("signal".into(), json!(signal));
    }
    if let Some(grace) = &args.stop_grace {
        stop.insert("grace".into(), json!(grace));
    }
    if !stop.is_empty() {
        place.insert("stop".into(), Value::Object(stop));
    }
    probe_fields(&args.probe, &mut place)?;
    one_spec(&args.name, place)
}

fn adopt_spec(args: &PlacesAdoptArgs) -> Result<PlaceSpec, CliError> {
    let adopt = match (&args.pid, &args.tcp, &args.http) {
        (Some(pid), _, _) => json!({ "pid": pid }),
        (_, Some(tcp), _) => json!({ "tcp": tcp }),
        (_, _, Some(http)) => json!({ "http": http }),
        _ => {
            return Err(CliError::usage(
                "invalid_input",
                "adopt needs --pid, --tcp or --http",
            ));
        }
    };
    let mut place = Map::new();
    place.insert("adopt".into(), adopt);
    probe_fields(&args.probe, &mut place)?;
    one_spec(&args.name, place)
}
