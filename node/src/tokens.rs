//! `palm token create|revoke`: join tokens and revocation, on a root.
//!
//! With the root running, the command goes over its control socket and the running root
//! answers ([`answer`]), so a revocation takes effect at once (the revoked child's link
//! is closed). With no node running, the command works offline on the root's data
//! directory (holding its lock), and the next boot honours it.

use crate::cli::TokenCommand;
use crate::commands::Ctx;
use crate::control::client::Client;
use crate::control::protocol::{ErrorBody, Request, Response};
use crate::control::server::socket_path;
use crate::exit::{CliError, CliResult, Code};
use crate::genome::{Genome, now_ms};
use crate::node::{DataLock, LockError};
use palm_transport::{Authority, Role, TokenError};
use serde_json::{Value, json};
use std::sync::Arc;

/// How long a token request waits for a booting root's tree organ.
const TREE_START_WAIT_MS_MAX: u64 = 10_000;

/// Default token lifetime.
pub const TOKEN_TTL_DEFAULT: &str = "1h";

fn token_error(err: &TokenError) -> ErrorBody {
    match err {
        TokenError::Persist(_) => ErrorBody::failure("store", err.to_string()),
        TokenError::UnknownName(_) => ErrorBody::invalid("unknown_child", err.to_string())
            .hint("`palm vitality` lists the linked children"),
        TokenError::NameRevoked(_) => ErrorBody::invalid("revoked", err.to_string()),
        _ => ErrorBody::invalid("invalid_input", err.to_string()),
    }
}

/// Runs one token request against an authority (blocking: it writes the trust book).
fn decide(authority: &Authority, request: Request) -> Result<Value, ErrorBody> {
    match request {
        Request::TokenCreate { name, role, ttl_ms } => {
            let role = Role::parse(&role).ok_or_else(|| {
                ErrorBody::invalid(
                    "invalid_input",
                    format!("unknown role `{role}`; use realm or edge"),
                )
            })?;
            let name = if name.is_empty() {
                palm_transport::token::random_name(role)
            } else {
                name
            };
            let token = authority
                .create_token(&name, role, ttl_ms, now_ms())
                .map_err(|e| token_error(&e))?;
            Ok(json!({
                "token": token.encode(),
                "name": token.name,
                "role": token.role.as_str(),
                "expires_at": token.expires_ms,
                "tree": authority.ca().tree_id(),
            }))
        }
        Request::TokenRevoke { name } => {
            let revoked = authority
                .revoke(&name, now_ms())
                .map_err(|e| token_error(&e))?;
            Ok(json!({
                "revoked": revoked.name,
                "certificates": revoked.certificates,
                "tokens": revoked.tokens,
            }))
        }
        other => Err(ErrorBody::failure(
            "internal",
            format!("{other:?} is not a token request"),
        )),
    }
}

fn not_a_root() -> ErrorBody {
    ErrorBody::invalid(
        "not_root",
        "tokens are issued by a root; this node is not one",
    )
    .hint("run `palm up --profile root --listen HOST:PORT` on the root's data directory")
}

/// Answers a token request on a running node.
pub async fn answer(genome: &Arc<Genome>, request: Request) -> Response {
    // The control socket answers as soon as the genome is up; a root's tree organ starts
    // just after (it may be creating the CA). Wait for it rather than refuse.
    let mut waited_ms = 0;
    while genome.tree.get().is_none()
        && genome.info.profile == "root"
        && waited_ms < TREE_START_WAIT_MS_MAX
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        waited_ms += 20;
    }
    let Some(tree) = genome.tree.get().cloned() else {
        return Response::err(not_a_root());
    };
    let Some(authority) = tree.authority.clone() else {
        return Response::err(not_a_root());
    };
    let revoke = match &request {
        Request::TokenRevoke { name } => Some(name.clone()),
        _ => None,
    };
    let worker = Arc::clone(&tree);
    let revoking = revoke.is_some();
    let decided = tokio::task::spawn_blocking(move || {
        let decided = decide(&authority, request);
        if let (Ok(result), Some(name)) = (&decided, &revoke) {
            let closed = worker.close_revoked();
            worker.record(json!({
                "event": "revoked",
                "peer": name,
                "certificates": result["certificates"],
                "links_closed": closed,
            }));
            let mut result = result.clone();
            result["links_closed"] = json!(closed);
            return Ok(result);
        }
        decided
    })
    .await;
    let mut decided = decided;
    // A revocation reaches the realms too: they cut and refuse the node below them.
    if revoking && let (Ok(Ok(result)), Some(relay)) = (&mut decided, &tree.relay) {
        result["realms_notified"] = json!(relay.push_revocations().await);
    }
    match decided {
        Ok(Ok(result)) => Response::ok(result),
        Ok(Err(error)) => Response::err(error),
        Err(_) => Response::err(ErrorBody::failure("internal", "the token task failed")),
    }
}

fn into_result(response: Response) -> Result<Value, CliError> {
    if response.ok {
        return Ok(response.result.unwrap_or(Value::Null));
    }
    let error = response
        .error
        .unwrap_or_else(|| ErrorBody::failure("error", "the node refused the request"));
    let mut err = if error.exit == 2 {
        CliError::usage(&error.kind, error.message)
    } else {
        CliError::failure(&error.kind, error.message)
    };
    err.hint = error.hint;
    Err(err)
}

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
            into_result(response)?
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
