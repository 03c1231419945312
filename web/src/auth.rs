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
//! way and compared in constant time. Two timestamped schemes are taken too, and refused
//! when their timestamp is more than five minutes from the node's clock (a replay):
//! Stripe's (`Stripe-Signature: t=UNIX,v1=HEX[,v1=HEX...]`, the HMAC-SHA256 of
//! `UNIX.BODY` under the secret as written, `whsec_` and all), and Standard Webhooks'
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,BASE64 [v1,BASE64...]`, the
//! HMAC-SHA256 of `ID.TIMESTAMP.BODY` under the base64 after the secret's `whsec_`; also
//! under Svix's `svix-` names). A post with none of these headers falls under the rule
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

/// Stripe's signature header.
pub const STRIPE_HEADER: &str = "stripe-signature";

/// Standard Webhooks' signature header (and its id's and timestamp's), and Svix's names
/// for the same three.
const STANDARD_HEADERS: [[&str; 3]; 2] = [
    ["webhook-signature", "webhook-id", "webhook-timestamp"],
    ["svix-signature", "svix-id", "svix-timestamp"],
];

/// How far a timestamped signature's time may be from the node's clock, either way.
pub const TIMESTAMP_TOLERANCE_S: i64 = 300;

/// The most a signed webhook's body may hold (axum's default body limit).
const WEBHOOK_BODY_MAX: usize = 2 * 1024 * 1024;

/// How a webhook's sender signed it, told by the headers it set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    /// `X-Gitlab-Token`: the secret itself.
    GitLab,
    /// `X-Hub-Signature-256`: GitHub, Gitea, Forgejo.
    Hub,
    /// `Stripe-Signature`.
    Stripe,
    /// Standard Webhooks, under the names at this index of [`STANDARD_HEADERS`].
    Standard(usize),
}

fn scheme_of(headers: &axum::http::HeaderMap) -> Option<Scheme> {
    if headers.contains_key(GITLAB_TOKEN_HEADER) {
        return Some(Scheme::GitLab);
    }
    if headers.contains_key(SIGNATURE_HEADER) {
        return Some(Scheme::Hub);
    }
    if headers.contains_key(STRIPE_HEADER) {
        return Some(Scheme::Stripe);
    }
    STANDARD_HEADERS
        .iter()
        .position(|names| headers.contains_key(names[0]))
        .map(Scheme::Standard)
}

/// Why a timestamped signature was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub String);

fn timely(header: &str, timestamp: &str, now_s: i64) -> Result<i64, Refused> {
    let at: i64 = timestamp.trim().parse().map_err(|_| {
        Refused(format!(
            "the {header} timestamp `{timestamp}` is not Unix seconds"
        ))
    })?;
    if (now_s - at).abs() > TIMESTAMP_TOLERANCE_S {
        return Err(Refused(format!(
            "the {header} timestamp is {} s from this node's clock (at most {TIMESTAMP_TOLERANCE_S} s: an older one may be a replay)",
            (now_s - at).abs()
        )));
    }
    Ok(at)
}

/// Checks a `Stripe-Signature` header (`t=UNIX,v1=HEX,...`) against `body`: its time
/// within [`TIMESTAMP_TOLERANCE_S`] of `now_s`, and one of its `v1` signatures the
/// HMAC-SHA256 of `UNIX.BODY` under `secret` (used as written), compared in constant time.
pub fn stripe_ok(secret: &[u8], body: &[u8], header: &str, now_s: i64) -> Result<(), Refused> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = Some(t),
            Some(("v1", v1)) => signatures.push(v1),
            _ => {}
        }
    }
    let timestamp = timestamp
        .ok_or_else(|| Refused("the Stripe-Signature header has no timestamp (`t=`)".into()))?;
    timely("Stripe-Signature", timestamp, now_s)?;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let mut signed = Vec::with_capacity(timestamp.len() + 1 + body.len());
    signed.extend_from_slice(timestamp.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    let matched = signatures.iter().any(|hex| {
        decode_hex(hex).is_some_and(|tag| ring::hmac::verify(&key, &signed, &tag).is_ok())
    });
    if matched {
        Ok(())
    } else {
        Err(Refused(
            "no `v1` signature of the Stripe-Signature header is the HMAC-SHA256 of its timestamp and the body under this webhook's secret".into(),
        ))
    }
}

/// Checks a Standard Webhooks signature (`v1,BASE64` entries, space-separated) of the
/// message `id` sent at `timestamp` against `body`: the time within
/// [`TIMESTAMP_TOLERANCE_S`] of `now_s`, and one entry the HMAC-SHA256 of
/// `ID.TIMESTAMP.BODY` under the secret's key (the base64 after `whsec_`; a secret
/// without that prefix, or that is not base64, as written).
pub fn standard_ok(
    secret: &[u8],
    body: &[u8],
    id: &str,
    timestamp: &str,
    signature: &str,
    now_s: i64,
) -> Result<(), Refused> {
    use base64::Engine as _;
    let engine = base64::engine::general_purpose::STANDARD;
    timely("webhook-timestamp", timestamp, now_s)?;
    let key_bytes = secret
        .strip_prefix(b"whsec_")
        .and_then(|encoded| engine.decode(encoded).ok())
        .unwrap_or_else(|| secret.to_vec());
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key_bytes);
    let mut signed = Vec::with_capacity(id.len() + timestamp.len() + 2 + body.len());
    signed.extend_from_slice(id.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(timestamp.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    let matched = signature.split_whitespace().any(|entry| {
        entry
            .strip_prefix("v1,")
            .and_then(|b64| engine.decode(b64).ok())
            .is_some_and(|tag| ring::hmac::verify(&key, &signed, &tag).is_ok())
    });
    if matched {
        Ok(())
    } else {
        Err(Refused(
            "no `v1` entry of the webhook-signature header is the HMAC-SHA256 of its id, timestamp and the body under this webhook's secret".into(),
        ))
    }
}

/// The webhook a request posts to, if it is one: the path's last segment,
/// percent-decoded as the route's own `Path` extractor decodes it (`my%20hook` is the
/// webhook `my hook`), so the secret checked is the one of the flows the post starts.
fn webhook_name(request: &Request) -> Option<String> {
    if request.method() != axum::http::Method::POST {
        return None;
    }
    let name = request.uri().path().strip_prefix("/v1/webhooks/")?;
    if name.is_empty() || name.contains('/') {
        return None;
    }
    percent_encoding::percent_decode_str(name)
        .decode_utf8()
        .ok()
        .map(|name| name.into_owned())
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
/// read (bounded) and its signature checked under `scheme`; `Err` is the answer to give
/// instead.
async fn signed(secret: &[u8], scheme: Scheme, request: Request) -> Result<Request, Response> {
    let unauthorized = |detail: &str| {
        Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", detail.to_owned())
            .hint("the secret is the one `webhooks:` in the node's palm.yaml names")
            .into_response()
    };
    if scheme == Scheme::GitLab {
        let token = request
            .headers()
            .get(GITLAB_TOKEN_HEADER)
            .map(|v| v.as_bytes());
        return if token.is_some_and(|token| token_ok(secret, token)) {
            Ok(request)
        } else {
            Err(unauthorized(
                "the X-Gitlab-Token is not this webhook's secret",
            ))
        };
    }
    // What the scheme signs besides the body, read before the body is taken.
    let names: &[&str] = match scheme {
        Scheme::Hub => &[SIGNATURE_HEADER],
        Scheme::Stripe => &[STRIPE_HEADER],
        Scheme::Standard(at) => &STANDARD_HEADERS[at],
        Scheme::GitLab => &[],
    };
    let mut values = Vec::with_capacity(names.len());
    for name in names {
        // Owned, so nothing borrows the request (whose body is not `Sync`) across the
        // body's read.
        let value = request
            .headers()
            .get(*name)
            .map(|v| v.to_str().map(str::to_owned));
        match value {
            Some(Ok(value)) => values.push(value),
            Some(Err(_)) => return Err(unauthorized(&format!("the {name} header is not text"))),
            None => {
                return Err(unauthorized(&format!(
                    "a webhook signed with {} also needs the {name} header",
                    names[0]
                )));
            }
        }
    }
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
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let checked = match scheme {
        Scheme::Hub => signature_ok(secret, &bytes, &values[0])
            .then_some(())
            .ok_or_else(|| {
                Refused(
                "the body's X-Hub-Signature-256 is not its HMAC-SHA256 under this webhook's secret"
                    .into(),
            )
            }),
        Scheme::Stripe => stripe_ok(secret, &bytes, &values[0], now_s),
        Scheme::Standard(_) => {
            standard_ok(secret, &bytes, &values[1], &values[2], &values[0], now_s)
        }
        Scheme::GitLab => Ok(()),
    };
    match checked {
        Ok(()) => Ok(Request::from_parts(parts, axum::body::Body::from(bytes))),
        Err(Refused(why)) => Err(unauthorized(&why)),
    }
}

/// The middleware: loopback passes; anything else needs a live token (or, for a webhook
/// with a secret, a good signature).
pub async fn require(
    State(backend): State<Arc<dyn Backend>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(secret) = webhook_name(&request).and_then(|name| backend.webhook_secret(&name))
        && let Some(scheme) = scheme_of(request.headers())
    {
        let secret = secret.to_vec();
        return match signed(&secret, scheme, request).await {
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

    #[test]
    fn a_webhook_is_named_by_its_decoded_path_segment() {
        let post = |uri: &str| {
            axum::http::Request::builder()
                .method("POST")
                .uri(uri)
                .body(axum::body::Body::empty())
                .expect("request")
        };
        assert_eq!(
            webhook_name(&post("/v1/webhooks/push")).as_deref(),
            Some("push")
        );
        assert_eq!(
            webhook_name(&post("/v1/webhooks/my%20hook")).as_deref(),
            Some("my hook")
        );
        assert_eq!(webhook_name(&post("/v1/webhooks/a/b")), None);
        assert_eq!(webhook_name(&post("/v1/webhooks/")), None);
        assert_eq!(webhook_name(&post("/v1/webhooks/%ff")), None, "not UTF-8");
        assert_eq!(webhook_name(&post("/v1/events/push")), None);
        let get = axum::http::Request::builder()
            .uri("/v1/webhooks/push")
            .body(axum::body::Body::empty())
            .expect("request");
        assert_eq!(webhook_name(&get), None);
    }

    #[test]
    fn stripe_signatures_are_checked_with_their_timestamp() {
        // Computed apart from this code (Python's hmac): HMAC-SHA256 of
        // `1700000000.BODY` under the secret as written.
        let secret = b"whsec_test_secret";
        let body = br#"{"id":"evt_1","type":"charge.succeeded"}"#;
        let good = "c0475716eb2200f1fe97fcf35a3c05d1fd4f8ba9a07a596730c8d18bb87c0672";
        let at = 1_700_000_000;
        let header = format!("t={at},v1={good}");
        assert_eq!(stripe_ok(secret, body, &header, at + 10), Ok(()));
        // Several v1 (a secret being rolled), v0 and unknown schemes ignored.
        let rolled = format!("t={at},v1={},v0=abc,v1={good},v9=x", "00".repeat(32));
        assert_eq!(stripe_ok(secret, body, &rolled, at), Ok(()));
        for (header, now, why) in [
            (header.clone(), at + 301, "from this node's clock"),
            (header.clone(), at - 301, "from this node's clock"),
            (format!("v1={good}"), at, "no timestamp"),
            (format!("t=soon,v1={good}"), at, "not Unix seconds"),
            (format!("t={},v1={good}", at + 1), at, "no `v1` signature"),
            (format!("t={at},v0={good}"), at, "no `v1` signature"),
        ] {
            let refused = stripe_ok(secret, body, &header, now).expect_err(&header);
            assert!(refused.0.contains(why), "{header}: {}", refused.0);
        }
        assert!(stripe_ok(secret, b"{}", &header, at).is_err());
        assert!(stripe_ok(b"whsec_other", body, &header, at).is_err());
    }

    #[test]
    fn standard_webhooks_signatures_are_checked_as_the_spec_makes_them() {
        // The Standard Webhooks (and Svix) published example.
        let secret = b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let at = "1614265330";
        let body = br#"{"test": 2432232314}"#;
        let good = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let now = 1_614_265_330;
        assert_eq!(standard_ok(secret, body, id, at, good, now), Ok(()));
        let several = format!("v1,bm90IGl0 v2,xyz {good}");
        assert_eq!(
            standard_ok(secret, body, id, at, &several, now + 299),
            Ok(())
        );
        assert!(standard_ok(secret, body, id, at, good, now + 301).is_err());
        assert!(standard_ok(secret, body, "msg_other", at, good, now).is_err());
        assert!(standard_ok(secret, b"{}", id, at, good, now).is_err());
        assert!(standard_ok(secret, body, id, at, &good.replace("v1,", "v1="), now).is_err());
        assert!(standard_ok(b"whsec_bm90IGl0", body, id, at, good, now).is_err());
    }
}
