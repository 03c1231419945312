//! `palm-web`: Palm's REST API under `/v1` and the Explorer, served by `palm up --http`.
//!
//! A thin surface over the node's control requests ([`palm_api::protocol::Request`]):
//! every endpoint turns an HTTP request into one or more control requests answered by a
//! [`Backend`] (the node's own dispatcher in `palm up`), and answers with the same JSON
//! the CLI prints with `--json`. Errors are `application/problem+json` (RFC 9457)
//! carrying the control error's `kind`, `hint` and exit code.
//!
//! - [`rest`]: the `/v1` routes;
//! - [`openapi`]: the OpenAPI 3.1 document served at `/v1/openapi.json`;
//! - [`outputs`]: what runs leave on disk (patches, worktrees, artifacts);
//! - [`problem`]: control errors as problem documents, with their HTTP status;
//! - [`explorer`]: the Explorer's pages (inbox, jobs, a job, places, tree), live over SSE;
//! - [`wizard`]: a wizard's pages, one per step, then its summary;
//! - [`auth`]: loopback is trusted; from anywhere else a bearer token (`palm token create
//!   --role api`) is required for every route, checked by the backend — or, for a
//!   webhook the node keeps a secret for, the body's signature.

pub mod auth;
pub mod explorer;
pub mod openapi;
pub mod outputs;
pub mod problem;
pub mod rest;
pub mod wizard;

use palm_api::protocol::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future of a control response.
pub type Answer<'a> = Pin<Box<dyn Future<Output = Response> + Send + 'a>>;

/// What the web surface runs on: the node.
pub trait Backend: Send + Sync + 'static {
    /// Answers one control request, as the control socket would.
    fn call(&self, request: Request) -> Answer<'_>;

    /// True when `token` is a live API token of this node (`palm token create --role api`).
    fn token_ok(&self, token: &str) -> bool;

    /// The node's data directory: patches, worktrees and artifacts live under it.
    fn data_dir(&self) -> &std::path::Path;

    /// The secret whose HMAC-SHA256 signature (`X-Hub-Signature-256`) lets a sender post
    /// to `/v1/webhooks/NAME` without an API token, if the node keeps one for `name`.
    fn webhook_secret(&self, name: &str) -> Option<&[u8]> {
        let _ = name;
        None
    }
}

/// The whole web surface: the REST API and the Explorer, behind the token check.
pub fn router(backend: Arc<dyn Backend>) -> axum::Router {
    rest::routes()
        .merge(explorer::routes())
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&backend),
            auth::require,
        ))
        .with_state(backend)
}

/// The router without the token check, for in-process use (benchmarks): every caller is
/// trusted.
pub fn explorer_router(backend: Arc<dyn Backend>) -> axum::Router {
    rest::routes().merge(explorer::routes()).with_state(backend)
}

/// Serves `router` on `listener` until `shutdown` resolves; each connection's peer
/// address reaches the token check.
pub async fn serve(
    listener: tokio::net::TcpListener,
    backend: Arc<dyn Backend>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(backend).into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
