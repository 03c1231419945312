//! `palm mcp --http HOST:PORT`: MCP over streamable HTTP at `/mcp`, behind a bearer token.
//!
//! rmcp's `StreamableHttpService` speaks the protocol (sessions, SSE streams for
//! progress, JSON responses, a 4 MiB body bound, Host-header checks against DNS
//! rebinding); a plain hyper HTTP/1 server hosts it, and in front of it this module
//! checks the path and `Authorization: Bearer TOKEN` (compared in constant time) before
//! anything reaches MCP. No TLS: loopback is the default and the only address allowed
//! without `--allow-remote`; across machines put it behind a tunnel or a TLS proxy.

use super::control_link::ControlLink;
use super::server::PalmMcp;
use crate::exit::CliError;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use palm_api::protocol::REQUEST_BYTES_MAX;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// HTTP connections served at once; more are closed at accept.
pub const HTTP_CONNECTIONS_MAX: usize = 64;

/// A connection that sends no whole request head for this long — idle between
/// requests, or trickling one — is closed (ms).
pub const HEADER_READ_MS: u64 = 10_000;

/// Random bytes in a generated token (hex-encoded: twice as many characters).
pub const TOKEN_BYTES: usize = 32;

/// The path MCP is served on.
pub const MCP_PATH: &str = "/mcp";

type Body = BoxBody<Bytes, Infallible>;

/// Where a generated token is kept.
pub fn token_path(data: &Path) -> PathBuf {
    data.join("mcp-token")
}

/// The token file's token, or a new one written there (owner-only).
fn stored_token(data: &Path) -> Result<String, CliError> {
    let path = token_path(data);
    if let Ok(text) = std::fs::read_to_string(&path)
        && !text.trim().is_empty()
    {
        return Ok(text.trim().to_owned());
    }
    let mut random = [0u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .map_err(|e| CliError::failure("token", format!("cannot read /dev/urandom: {e}")))?;
    let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
    crate::node::create_data_dir(data)?;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| CliError::failure("token", format!("cannot write {}: {e}", path.display())))?;
    writeln!(file, "{token}")
        .map_err(|e| CliError::failure("token", format!("cannot write {}: {e}", path.display())))?;
    Ok(token)
}

/// Equal strings, compared without an early exit (the time does not leak a prefix).
fn same_token(given: &[u8], expected: &[u8]) -> bool {
    if given.len() != expected.len() {
        return false;
    }
    given
        .iter()
        .zip(expected)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

fn authorized(request: &Request<Incoming>, token: &str) -> bool {
    request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .is_some_and(|given| same_token(given.trim().as_bytes(), token.as_bytes()))
}

fn plain(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({"error": message}).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer realm=\"palm\""),
        );
    }
    response
}

/// Resolves `HOST:PORT` (an IP or a name such as `localhost`).
async fn resolve(address: &str) -> Result<SocketAddr, CliError> {
    let bad = |why: String| {
        CliError::usage("invalid_input", format!("--http {address}: {why}"))
            .with_hint("give HOST:PORT, e.g. --http 127.0.0.1:8765")
    };
    if let Ok(addr) = address.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let mut found = tokio::net::lookup_host(address)
        .await
        .map_err(|e| bad(e.to_string()))?;
    found
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))
}

/// Serves until SIGINT/SIGTERM.
pub async fn serve(
    link: Arc<ControlLink>,
    data: &Path,
    address: &str,
    token: Option<String>,
    allow_remote: bool,
) -> Result<(), CliError> {
    let addr = resolve(address).await?;
    if !addr.ip().is_loopback() && !allow_remote {
        return Err(CliError::usage(
            "invalid_input",
            format!("--http {address} is not a loopback address: anyone who reaches it could drive this node's jobs"),
        )
        .with_hint("bind 127.0.0.1 (and tunnel to it), or pass --allow-remote to accept this"));
    }
    let (token, source) = match token.filter(|t| !t.trim().is_empty()) {
        Some(token) => (
            token.trim().to_owned(),
            "given by --token or PALM_MCP_TOKEN".to_owned(),
        ),
        None => (
            stored_token(data)?,
            format!("in {}", token_path(data).display()),
        ),
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .and_then(|listener| palm_node::sys::raise_backlog(&listener).map(|()| listener))
        .map_err(|e| CliError::failure("listen", format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr()?;
    eprintln!(
        "palm mcp: streamable HTTP on http://{local}{MCP_PATH}; send `Authorization: Bearer TOKEN` (token {source})"
    );
    let stop = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(REQUEST_BYTES_MAX)
        .with_cancellation_token(stop.child_token());
    if allow_remote {
        // Remote clients name this host in ways we cannot list; the token guards it.
        config = config.disable_allowed_hosts();
    }
    let handler_link = Arc::clone(&link);
    let service = StreamableHttpService::new(
        move || Ok(PalmMcp::new(Arc::clone(&handler_link))),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let token: Arc<str> = Arc::from(token);
    let slots = Arc::new(Semaphore::new(HTTP_CONNECTIONS_MAX));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(target: "palm::mcp", %err, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(target: "palm::mcp", %peer, "too many HTTP connections; closing one");
            drop(stream);
            continue;
        };
        let service = service.clone();
        let token = Arc::clone(&token);
        connections.spawn(async move {
            let handle = hyper::service::service_fn(move |request: Request<Incoming>| {
                let mut service = service.clone();
                let token = Arc::clone(&token);
                async move {
                    if request.uri().path() != MCP_PATH {
                        return Ok::<_, Infallible>(plain(
                            StatusCode::NOT_FOUND,
                            "MCP is served at /mcp",
                        ));
                    }
                    if !authorized(&request, &token) {
                        return Ok(plain(
                            StatusCode::UNAUTHORIZED,
                            "missing or wrong bearer token (Authorization: Bearer TOKEN)",
                        ));
                    }
                    tower_service::Service::call(&mut service, request).await
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(err) = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_millis(HEADER_READ_MS))
                .serve_connection(io, handle)
                .await
            {
                tracing::debug!(target: "palm::mcp", %peer, %err, "HTTP connection ended");
            }
            drop(slot);
        });
    }
    stop.cancel();
    connections.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token(b"abc", b"abc"));
        assert!(!same_token(b"abd", b"abc"));
        assert!(!same_token(b"ab", b"abc"));
        assert!(!same_token(b"", b"abc"));
    }

    #[test]
    fn a_generated_token_is_kept_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = stored_token(dir.path()).expect("token");
        assert_eq!(first.len(), TOKEN_BYTES * 2);
        assert_eq!(stored_token(dir.path()).expect("token"), first);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(token_path(dir.path()))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
