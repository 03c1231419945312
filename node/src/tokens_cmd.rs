//! `palm token create|revoke`: over the control socket to the running root (a
//! revocation closes the child's link at once), else offline on the root's data
//! directory under its lock. The decisions are `palm_node::tokens`'.

use crate::cli::TokenCommand;
use crate::control::server::socket_path;
use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use crate::node::{DataLock, LockError};
use crate::tokens::{decide, not_a_root};
use palm_api::client::Client;
use palm_api::protocol::Request;
use serde_json::{Value, json};

fn ttl_ms(text: &str) -> Result<u64, CliError> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let factor = match unit {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .filter(|ms| *ms > 0)
        .ok_or_else(|| {
            CliError::usage(
                "invalid_input",
                format!("--ttl `{text}` is not a duration (e.g. 10m, 1h, 7d)"),
            )
        })
}

/// Runs `palm token ...`.
pub async fn run(ctx: &Ctx, command: TokenCommand) -> CliResult {
    let request = match &command {
        TokenCommand::Create { name, role, ttl } => Request::TokenCreate {
            // No name: the root picks one (`ROLE-xxxxxx`); the token carries it.
            name: name.clone().unwrap_or_default(),
            role: role.clone(),
            ttl_ms: ttl_ms(ttl)?,
        },
        TokenCommand::Revoke { name } => Request::TokenRevoke { name: name.clone() },
    };
    let result = match Client::connect(&socket_path(&ctx.data)).await {
        Some(mut client) => {
            let response = client.call(&request).await.map_err(|e| {
                CliError::failure("unavailable", format!("the node stopped answering: {e}"))
            })?;
            palm_api::verbs::into_result(response)?
        }
        None => offline(ctx, request)?,
    };
    if ctx.out.json {
        ctx.out.json(&result);
    } else {
        match command {
            TokenCommand::Create { .. } => {
                println!("{}", result["token"].as_str().unwrap_or_default());
                eprintln!(
                    "palm: one-time token for {} `{}`, valid until {} (ms since the epoch); join with\n  palm up --profile {} --parent HOST:PORT --token TOKEN",
                    result["role"].as_str().unwrap_or_default(),
                    result["name"].as_str().unwrap_or_default(),
                    result["expires_at"],
                    result["role"].as_str().unwrap_or_default(),
                );
            }
            TokenCommand::Revoke { .. } => println!(
                "revoked {} ({} certificates, {} unused tokens, {} links closed)",
                result["revoked"].as_str().unwrap_or_default(),
                result["certificates"],
                result["tokens"],
                result.get("links_closed").cloned().unwrap_or(json!(0)),
            ),
        }
    }
    Ok(Code::Ok)
}

/// No node runs: act on the root's data directory directly, holding its lock.
fn offline(ctx: &Ctx, request: Request) -> Result<Value, CliError> {
    let _lock = match DataLock::acquire(&ctx.data) {
        Ok(lock) => lock,
        Err(LockError::Busy { .. }) => {
            return Err(CliError::failure(
                "unavailable",
                format!(
                    "a node holds {} but does not answer on its socket; try again",
                    ctx.data.display()
                ),
            ));
        }
        Err(LockError::Io(message)) => return Err(CliError::usage("data_dir", message)),
    };
    let authority = crate::link::open_authority(&ctx.data)?.ok_or_else(|| {
        let body = not_a_root();
        let mut err = CliError::usage(
            &body.kind,
            format!("{} has no tree CA: {}", ctx.data.display(), body.message),
        );
        err.hint = body.hint;
        err
    })?;
    let decided = decide(&authority, request).map_err(|body| {
        let mut err = if body.exit == 2 {
            CliError::usage(&body.kind, body.message)
        } else {
            CliError::failure(&body.kind, body.message)
        };
        err.hint = body.hint;
        err
    })?;
    Ok(decided)
}
