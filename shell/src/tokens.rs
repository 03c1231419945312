//! Join tokens and revocation, decided on a root (`palm token create|revoke`).
//!
//! With the root running, the command goes over its control socket and the running root
//! answers ([`answer`]), so a revocation takes effect at once (the revoked child's link
//! is closed). With no node running, the command works offline on the root's data
//! directory (holding its lock), and the next boot honours it.

use crate::genome::{Genome, now_ms};
use palm_api::protocol::{ErrorBody, Request, Response};
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
        TokenError::TooManyLive(_) => ErrorBody::failure("too_many_tokens", err.to_string())
            .hint("`palm token list` shows them; `palm token revoke NAME` ends one"),
        _ => ErrorBody::invalid("invalid_input", err.to_string()),
    }
}

/// Runs one token request against an authority (blocking: it writes the trust book).
pub fn decide(authority: &Authority, request: Request) -> Result<Value, ErrorBody> {
    match request {
        Request::TokenCreate { name, role, ttl_ms } => {
            let role = Role::parse(&role).ok_or_else(|| {
                ErrorBody::invalid(
                    "invalid_input",
                    format!("unknown role `{role}`; use api, realm or edge"),
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

/// A token request about API tokens, answered on the node's data directory: a create
/// with role `api`, or a revoke of a name an API token has. `None` for anything else.
pub fn api_answer(data: &std::path::Path, request: &Request) -> Option<Result<Value, ErrorBody>> {
    match request {
        Request::TokenCreate { name, role, ttl_ms } if role == crate::api_tokens::API_ROLE => {
            Some(crate::api_tokens::create(data, name, *ttl_ms, now_ms()))
        }
        Request::TokenRevoke { name } => {
            crate::api_tokens::revoke(data, name, now_ms()).transpose()
        }
        _ => None,
    }
}

/// The refusal of a token request on a node that is not a root (`data`: its data
/// directory); an enrolled child says what it is and where its tree goes up.
pub fn not_a_root(data: &std::path::Path) -> ErrorBody {
    match palm_transport::pki::TreeFiles::new(data).load_record() {
        Ok(record) => ErrorBody::invalid(
            "not_root",
            format!(
                "tokens are issued by the root of tree {}; this node is its {} `{}`{}",
                record.tree_id,
                record.role,
                record.name,
                record
                    .parent
                    .as_deref()
                    .map(|parent| format!(", below the parent at {parent}"))
                    .unwrap_or_default()
            ),
        )
        .hint("run `palm token create` with the root's data directory (`palm --data ROOT_DIR`)"),
        Err(_) => ErrorBody::invalid(
            "not_root",
            "tokens are issued by a root; this node is not one",
        )
        .hint("run `palm up --profile root --listen HOST:PORT` on the root's data directory"),
    }
}

/// Answers a token request on a running node.
pub async fn answer(genome: &Arc<Genome>, request: Request) -> Response {
    // API tokens are this node's own, whatever its profile (no tree CA involved).
    if let Some(answered) = api_answer(&genome.info.data, &request) {
        return match answered {
            Ok(result) => Response::ok(result),
            Err(error) => Response::err(error),
        };
    }
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
    let Some(tree) = crate::link::tree_of(genome) else {
        return Response::err(not_a_root(&genome.info.data));
    };
    let Some(authority) = tree.authority.clone() else {
        return Response::err(not_a_root(&genome.info.data));
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
