//! `palm token create|revoke`: over the control socket to the running root (a
//! revocation closes the child's link at once), else offline on the root's data
//! directory under its lock. The decisions are `palm_node::tokens`'. `palm token list`
//! reads the trust book (written atomically), running root or not.

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
    // A bare number is milliseconds, as before; `0` or a duration of nothing is refused.
    palm_api::verbs::duration_ms(text, "--ttl")
        .ok()
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
        TokenCommand::List => return list(ctx),
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
            TokenCommand::Create { .. } if result["role"] == "api" => {
                println!("{}", result["token"].as_str().unwrap_or_default());
                eprintln!(
                    "palm: API token `{}`, valid until {} (ms since the epoch); send it as\n  Authorization: Bearer TOKEN\nto `palm up --http` from beyond loopback. It is shown this once.",
                    result["name"].as_str().unwrap_or_default(),
                    result["expires_at"],
                );
            }
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
            TokenCommand::List => {}
            TokenCommand::Revoke { .. } if result["role"] == "api" => println!(
                "revoked API token {} ({} live ones)",
                result["revoked"].as_str().unwrap_or_default(),
                result["tokens"]
            ),
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
    let lock = match DataLock::acquire(&ctx.data) {
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
    let _lock = lock;
    if let Some(answered) = crate::tokens::api_answer(&ctx.data, &request) {
        return answered.map_err(|body| {
            let mut err = if body.exit == 2 {
                CliError::usage(&body.kind, body.message)
            } else {
                CliError::failure(&body.kind, body.message)
            };
            err.hint = body.hint;
            err
        });
    }
    // A replicated root's trust book is in its shared store: take the writer's lease
    // (refused while a replica serves: send the command there) and work on that.
    let shared = match crate::node::StoreLocation::of(&ctx.data)? {
        crate::node::StoreLocation::Postgres(_) => {
            let store = crate::node::open_store(&ctx.data)?;
            crate::tree_store::sync(&*store, &palm_transport::pki::TreeFiles::new(&ctx.data))?;
            Some(store)
        }
        crate::node::StoreLocation::Redb(_) => None,
    };
    let authority = crate::link::open_authority(&ctx.data, shared)?.ok_or_else(|| {
        let body = not_a_root(&ctx.data);
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

/// `palm token list`: the root's trust book, secrets left out.
fn list(ctx: &Ctx) -> CliResult {
    let files = palm_transport::pki::TreeFiles::new(&ctx.data);
    // A replicated root's trust book is in its shared store (read without the lease).
    if let crate::node::StoreLocation::Postgres(_) = crate::node::StoreLocation::of(&ctx.data)? {
        let store = crate::node::open_store_read_only(&ctx.data)?;
        crate::tree_store::restore(&*store, &files)?;
    }
    // API tokens are any node's own (REST beyond loopback); a root adds its join tokens.
    let api = palm_node::api_tokens::list(&ctx.data, crate::genome::now_ms()).map_err(|e| {
        let mut err = CliError::failure(&e.kind, e.message);
        err.hint = e.hint;
        err
    })?;
    if !files.has_ca() && !api.is_empty() {
        return print_list(ctx, api, Vec::new());
    }
    if !files.has_ca() {
        let body = not_a_root(&ctx.data);
        let mut err = CliError::usage(
            &body.kind,
            format!("{} has no tree CA: {}", ctx.data.display(), body.message),
        );
        err.hint = body.hint;
        return Err(err);
    }
    let book = palm_transport::Authority::load_book(&files.path("trust.json"))
        .map_err(|e| CliError::failure("tree", format!("cannot read the trust book: {e}")))?;
    let now = crate::genome::now_ms();
    let mut tokens: Vec<Value> = book
        .tokens
        .iter()
        .map(|(id, token)| {
            json!({
                "id": id,
                "name": token.name,
                "role": token.role.as_str(),
                "state": token.state(now).as_str(),
                "created_at": token.created_ms,
                "expires_at": token.expires_ms,
                "used_at": token.used_ms,
                "revoked_at": token.revoked_ms,
            })
        })
        .collect();
    let children: Vec<Value> = book
        .children
        .values()
        .map(|child| {
            json!({
                "name": child.name,
                "role": child.role.as_str(),
                "node_id": child.node_id,
                "enrolled_at": child.enrolled_ms,
                "revoked_at": child.revoked_ms,
                "under": child.parent,
            })
        })
        .collect();
    tokens.extend(api);
    print_list(ctx, tokens, children)
}

/// Prints the tokens (join and API ones) and the enrolled children.
fn print_list(ctx: &Ctx, tokens: Vec<Value>, children: Vec<Value>) -> CliResult {
    let result = json!({"tokens": tokens, "children": children});
    if ctx.out.json {
        ctx.out.json(&result);
        return Ok(Code::Ok);
    }
    if tokens.is_empty() {
        println!("no tokens");
    }
    for token in &tokens {
        println!(
            "token  {:<24} {:<6} {:<8} expires {}",
            token["name"].as_str().unwrap_or_default(),
            token["role"].as_str().unwrap_or_default(),
            token["state"].as_str().unwrap_or_default(),
            token["expires_at"],
        );
    }
    for child in &children {
        let state = if child["revoked_at"].is_null() {
            "enrolled"
        } else {
            "revoked"
        };
        println!(
            "child  {:<24} {:<6} {:<8} node {}",
            child["name"].as_str().unwrap_or_default(),
            child["role"].as_str().unwrap_or_default(),
            state,
            child["node_id"].as_str().unwrap_or_default(),
        );
    }
    Ok(Code::Ok)
}
