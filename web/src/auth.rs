//! Who may call: a request from a loopback address is trusted (the same machine, as the
//! control socket is); from anywhere else every route — the Explorer, the OpenAPI
//! document included — needs `Authorization: Bearer TOKEN` with a live API token of the
//! node (`palm token create --role api`). A connection whose peer is unknown is treated
//! as remote.
//!
//! A webhook (`POST /v1/webhooks/NAME`) is what a service posts, and a service signs
//! rather than holds a token: for a name the node keeps a secret for (`webhooks:` in
//! `palm.yaml`), a post carrying `X-Hub-Signature-256: sha256=HEX` — the HMAC-SHA256 of
//! the body under that secret, as GitHub, Gitea and Forgejo send it — is let in from
//! anywhere when the signature matches, and refused (401) from anywhere when it does not.
//! GitLab sends the secret itself instead (`X-Gitlab-Token: SECRET`), taken the same
//! way and compared in constant time. A post with neither header falls under the rule
//! above.

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

/// The signature header a webhook's sender sets.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// The header GitLab carries a webhook's secret in.
pub const GITLAB_TOKEN_HEADER: &str = "x-gitlab-token";

/// The most a signed webhook's body may hold (axum's default body limit).
const WEBHOOK_BODY_MAX: usize = 2 * 1024 * 1024;

/// The webhook a request posts to, if it is one.
fn webhook_name(request: &Request) -> Option<&str> {
    if request.method() != axum::http::Method::POST {
        return None;
    }
    let name = request.uri().path().strip_prefix("/v1/webhooks/")?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

/// True when `signature` (`sha256=HEX`) is the HMAC-SHA256 of `body` under `secret`,
/// compared in constant time.
pub fn signature_ok(secret: &[u8], body: &[u8], signature: &str) -> bool {
    let Some(hex) = signature.trim().strip_prefix("sha256=") else {
        return false;
    };
    let Some(tag) = decode_hex(hex) else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    ring::hmac::verify(&key, body, &tag).is_ok()
}

/// True when `token` is `secret`, compared in constant time (as the HMACs of both under
/// the secret, which `ring` compares so).
pub fn token_ok(secret: &[u8], token: &[u8]) -> bool {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    ring::hmac::verify(&key, token, ring::hmac::sign(&key, secret).as_ref()).is_ok()
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A signed webhook: its GitLab token checked against the name's secret, or else its body
/// read (bounded) and its signature checked; `Err` is the answer to give instead.
async fn signed(secret: &[u8], request: Request) -> Result<Request, Response> {
    let unauthorized = |detail: &str| {
        Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", detail.to_owned())
            .hint("the secret is the one `webhooks:` in the node's palm.yaml names")
            .into_response()
    };
    if let Some(token) = request.headers().get(GITLAB_TOKEN_HEADER) {
        return if token_ok(secret, token.as_bytes()) {
            Ok(request)
        } else {
            Err(unauthorized(
                "the X-Gitlab-Token is not this webhook's secret",
            ))
        };
    }
    let Some(signature) = request
        .headers()
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return Err(unauthorized("the X-Hub-Signature-256 header is not text"));
    };
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, WEBHOOK_BODY_MAX)
        .await
        .map_err(|_| {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("a webhook's body may hold at most {WEBHOOK_BODY_MAX} bytes"),
            )
            .into_response()
        })?;
    if !signature_ok(secret, &bytes, &signature) {
        return Err(unauthorized(
            "the body's X-Hub-Signature-256 is not its HMAC-SHA256 under this webhook's secret",
        ));
    }
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

/// The middleware: loopback passes; anything else needs a live token (or, for a webhook
/// with a secret, a good signature).
pub async fn require(
    State(backend): State<Arc<dyn Backend>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(secret) = webhook_name(&request).and_then(|name| backend.webhook_secret(name))
        && (request.headers().contains_key(SIGNATURE_HEADER)
            || request.headers().contains_key(GITLAB_TOKEN_HEADER))
    {
        let secret = secret.to_vec();
        return match signed(&secret, request).await {
            Ok(request) => next.run(request).await,
            Err(refused) => refused,
        };
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_checked_as_github_makes_them() {
        // GitHub's own example ("Validating webhook deliveries").
        let secret = b"It's a Secret to Everybody";
        let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(signature_ok(secret, b"Hello, World!", good));
        assert!(signature_ok(
            secret,
            b"Hello, World!",
            &good.to_uppercase().replace("SHA256=", "sha256=")
        ));
        assert!(!signature_ok(secret, b"Hello, World?", good));
        assert!(!signature_ok(b"another secret", b"Hello, World!", good));
        for bad in [
            "",
            "sha256=",
            "sha1=757107ea",
            &good[..good.len() - 1],
            "sha256=zz",
            "sha256=+57107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ] {
            assert!(!signature_ok(secret, b"Hello, World!", bad), "{bad}");
        }
        assert!(token_ok(secret, secret));
        for bad in [
            &b""[..],
            b"It's a Secret to Everybod",
            b"It's a Secret to Everybody!",
        ] {
            assert!(!token_ok(secret, bad));
        }
    }
}
