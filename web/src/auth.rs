//! Who may call: a request from a loopback address is trusted (the same machine, as the
//! control socket is); from anywhere else every route — the Explorer, the OpenAPI
//! document included — needs `Authorization: Bearer TOKEN` with a live API token of the
//! node (`palm token create --role api`). A connection whose peer is unknown is treated
//! as remote.

use crate::Backend;
use crate::problem::Problem;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;

/// The bearer token of a request, if it carries one.
pub fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The middleware: loopback passes; anything else needs a live token.
pub async fn require(
    State(backend): State<Arc<dyn Backend>>,
    request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    if peer.is_some_and(|p| p.ip().is_loopback()) {
        return next.run(request).await;
    }
    match bearer(&request) {
        Some(token) if backend.token_ok(token) => next.run(request).await,
        Some(_) => Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the bearer token is not a live API token of this node",
        )
        .hint("`palm token create --role api` on the node makes one")
        .into_response(),
        None => Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "requests from beyond loopback need `Authorization: Bearer TOKEN`",
        )
        .hint("`palm token create --role api` on the node makes one")
        .into_response(),
    }
}
