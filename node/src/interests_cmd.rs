//! `palm interests`, `palm emit` and `palm providers`: what starts what, an event by
//! hand, and what `call` can reach.

use crate::ctx::{Ctx, one_call, print};
use crate::exit::{CliResult, Code};
use crate::output::Output;
use palm_api::protocol::Request;
use palm_node::target::Access;
use serde_json::Value;

fn time(ms: Option<u64>) -> String {
    let Some(ms) = ms else {
        return "never".to_owned();
    };
    let now = crate::genome::now_ms();
    if ms >= now {
        format!("in {}", palm_actors::place::human_ms(ms - now))
    } else {
        format!("{} ago", palm_actors::place::human_ms(now - ms))
    }
}

fn print_interests(out: &Output, v: &Value) {
    let interests = v["interests"].as_array().cloned().unwrap_or_default();
    if interests.is_empty() {
        println!("no interests: no stored flow has `on:`");
    }
    for interest in &interests {
        println!(
            "{}  starts on {}",
            out.bold(interest["flow"].as_str().unwrap_or_default()),
            interest["trigger"].as_str().unwrap_or_default()
        );
        let mut facts = vec![
            format!("fired {} times", interest["fired"]),
            format!("last {}", time(interest["last_fired"].as_u64())),
        ];
        if let Some(next) = interest["next_at"].as_u64() {
            facts.push(format!("next {}", time(Some(next))));
        }
        if interest["pending"].as_u64().unwrap_or(0) > 0 {
            facts.push(format!("{} pending", interest["pending"]));
        }
        println!("    {}", out.dim(&facts.join(", ")));
    }
    for pending in v["pending"].as_array().cloned().unwrap_or_default() {
        println!(
            "pending {} ({}) due {}",
            pending["id"].as_str().unwrap_or_default(),
            pending["cause"].as_str().unwrap_or_default(),
            time(pending["due_at"].as_u64())
        );
    }
}

/// `palm interests [list]`.
pub async fn list(ctx: &Ctx) -> CliResult {
    let interests = one_call(ctx, Access::Read, Request::Interests).await?;
    print(ctx, &interests, print_interests);
    Ok(Code::Ok)
}

/// `palm emit EVENT --data JSON`.
pub async fn emit(ctx: &Ctx, event: String, data: &str) -> CliResult {
    let data: Value = serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.to_owned()));
    let emitted = one_call(ctx, Access::Write, Request::Emit { event, data }).await?;
    print(ctx, &emitted, |_, v| {
        let matched = v["matched"].as_u64().unwrap_or(0);
        println!(
            "event {} matched {matched} interest{}",
            v["event"].as_str().unwrap_or_default(),
            if matched == 1 { "" } else { "s" }
        );
    });
    Ok(Code::Ok)
}

/// `palm providers`.
pub fn providers(ctx: &Ctx) -> CliResult {
    let config = crate::config::load(&ctx.data, None)?;
    let registry = crate::providers::builtin(&ctx.data, &config.providers);
    let listed = registry.to_json();
    print(ctx, &listed, |out, v| {
        let providers = v["providers"].as_array().cloned().unwrap_or_default();
        let width = providers
            .iter()
            .filter_map(|p| p["name"].as_str())
            .map(str::len)
            .max()
            .unwrap_or(0);
        for provider in providers {
            let name = provider["name"].as_str().unwrap_or_default();
            println!(
                "{}{} {}",
                out.bold(name),
                " ".repeat(width - name.len()),
                provider["description"].as_str().unwrap_or_default()
            );
            if let Some(args) = provider["args"].as_object() {
                for (name, about) in args {
                    let about = match about {
                        Value::String(s) => s.clone(),
                        other => format!("default {other}"),
                    };
                    println!("{}  {} {}", " ".repeat(width), out.dim(name), about);
                }
            }
        }
    });
    Ok(Code::Ok)
}
