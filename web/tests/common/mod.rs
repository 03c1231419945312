//! The harness the web tests share: a real in-process node and a router over it, and a
//! request sender that sets the peer address.

#![allow(dead_code)]

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use palm_api::protocol::Request as ControlRequest;
use palm_node::genome::{Genome, NodeSettings};
use palm_node::node::{BootOptions, Node};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use tower::ServiceExt;

pub struct Backend {
    genome: Arc<Genome>,
}

/// The one webhook the test node keeps a secret for, and the secret.
pub const SIGNED_WEBHOOK: &str = "signed";
pub const WEBHOOK_SECRET: &[u8] = b"It's a Secret to Everybody";

impl palm_web::Backend for Backend {
    fn call(&self, request: ControlRequest) -> palm_web::Answer<'_> {
        Box::pin(palm_node::control::dispatch(&self.genome, request))
    }

    fn token_ok(&self, token: &str) -> bool {
        palm_node::api_tokens::verify(&self.genome.info.data, token, palm_node::genome::now_ms())
    }

    fn data_dir(&self) -> &std::path::Path {
        &self.genome.info.data
    }

    fn webhook_secret(&self, name: &str) -> Option<&[u8]> {
        (name == SIGNED_WEBHOOK).then_some(WEBHOOK_SECRET)
    }
}

pub struct World {
    pub node: Node,
    pub app: axum::Router,
    pub data: tempfile::TempDir,
}

pub async fn world() -> World {
    let data = tempfile::tempdir().expect("data");
    let node = Node::boot(BootOptions {
        data: data.path().to_owned(),
        name: "web-test".into(),
        profile: "all-in-one".into(),
        settings: NodeSettings::default(),
        embedded: true,
        store: None,
    })
    .await
    .expect("boot");
    let backend: Arc<dyn palm_web::Backend> = Arc::new(Backend {
        genome: Arc::clone(node.genome()),
    });
    World {
        app: palm_web::router(backend),
        node,
        data,
    }
}

pub const LOOPBACK: &str = "127.0.0.1:50000";
pub const REMOTE: &str = "192.0.2.7:50000";

pub async fn send(
    app: &axum::Router,
    peer: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (StatusCode, String, Value) {
    let mut builder = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    let mut request = builder
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .expect("request");
    let peer: SocketAddr = peer.parse().expect("peer");
    request.extensions_mut().insert(ConnectInfo(peer));
    let response = app.clone().oneshot(request).await.expect("answer");
    let status = response.status();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, kind, value)
}

/// Sends a request with headers and a raw body; answers status, headers and text.
pub async fn raw(
    app: &axum::Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, axum::http::HeaderMap, String) {
    raw_from(app, LOOPBACK, method, path, headers, body).await
}

/// [`raw`] from the peer `peer`.
pub async fn raw_from(
    app: &axum::Router,
    peer: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let mut builder = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(Body::from(body.to_owned())).expect("request");
    let peer: SocketAddr = peer.parse().expect("peer");
    request.extensions_mut().insert(ConnectInfo(peer));
    let response = app.clone().oneshot(request).await.expect("answer");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// Submits a flow over REST; answers the job id.
pub async fn submit(app: &axum::Router, source: &str) -> String {
    let (status, _, view) = send(
        app,
        LOOPBACK,
        "POST",
        "/v1/jobs",
        Some(serde_json::json!({"flow": source})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    view["job"].as_str().expect("job").to_owned()
}
