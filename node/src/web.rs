//! `palm up --http`: the REST API and the Explorer (palm-web) on the running node. The
//! backend answers each control request with the node's own dispatcher — the same one
//! the control socket uses, so a request means the same whichever surface sent it — and
//! checks bearer tokens against the node's API tokens.

use crate::exit::CliError;
use palm_api::protocol::Request;
use palm_node::genome::Genome;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// Where `--http` with no address listens.
pub const HTTP_DEFAULT: &str = "127.0.0.1:7470";

/// The node, as palm-web sees it.
pub struct NodeBackend {
    genome: Arc<Genome>,
    /// The signed webhooks' secrets, by name (`webhooks:` in palm.yaml).
    webhooks: HashMap<String, Vec<u8>>,
}

impl palm_web::Backend for NodeBackend {
    fn call(&self, request: Request) -> palm_web::Answer<'_> {
        Box::pin(palm_node::control::dispatch(&self.genome, request))
    }

    fn token_ok(&self, token: &str) -> bool {
        palm_node::api_tokens::verify(&self.genome.info.data, token, palm_node::genome::now_ms())
    }

    fn data_dir(&self) -> &std::path::Path {
        &self.genome.info.data
    }

    fn webhook_secret(&self, name: &str) -> Option<&[u8]> {
        self.webhooks.get(name).map(Vec::as_slice)
    }
}

/// `HOST:PORT`, `:PORT` or `PORT` (the last two on loopback).
pub fn address(text: &str) -> Result<SocketAddr, CliError> {
    let text = text.trim();
    let full = if let Some(port) = text.strip_prefix(':') {
        format!("127.0.0.1:{port}")
    } else if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() {
        format!("127.0.0.1:{text}")
    } else {
        text.to_owned()
    };
    full.parse().map_err(|_| {
        CliError::usage(
            "invalid_input",
            format!("--http `{text}` is not HOST:PORT (e.g. 127.0.0.1:7470, :8080, 0.0.0.0:7470)"),
        )
    })
}

/// Binds and serves until `stop` fires; the bind happens before this returns, so a port
/// in use is an error of `palm up` itself.
pub async fn start(
    genome: &Arc<Genome>,
    text: &str,
    stop: tokio::sync::oneshot::Receiver<()>,
    webhooks: HashMap<String, Vec<u8>>,
) -> Result<tokio::task::JoinHandle<()>, CliError> {
    let address = address(text)?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .and_then(|listener| palm_node::sys::raise_backlog(&listener).map(|()| listener))
        .map_err(|e| CliError::failure("http", format!("cannot listen on {address}: {e}")))?;
    let bound = listener.local_addr().unwrap_or(address);
    let scope = if bound.ip().is_loopback() {
        "loopback: no token needed"
    } else {
        "beyond loopback every request needs an API token (palm token create --role api)"
    };
    eprintln!("palm: REST API and Explorer on http://{bound}/ ({scope})");
    let backend: Arc<dyn palm_web::Backend> = Arc::new(NodeBackend {
        genome: Arc::clone(genome),
        webhooks,
    });
    Ok(tokio::spawn(async move {
        let stopped = async {
            let _ = stop.await;
        };
        if let Err(e) = palm_web::serve(listener, backend, stopped).await {
            eprintln!("palm: the HTTP server stopped: {e}");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_loopback() {
        assert_eq!(
            address(":8080").expect("port").to_string(),
            "127.0.0.1:8080"
        );
        assert_eq!(address("9090").expect("port").to_string(), "127.0.0.1:9090");
        assert_eq!(
            address("0.0.0.0:7470").expect("any").to_string(),
            "0.0.0.0:7470"
        );
        assert!(address("nowhere").is_err());
    }
}
