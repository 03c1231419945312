//! The REST API over a real in-process node (its kernel, store and job path), driven
//! with tower's `oneshot`: no socket. Every operation the OpenAPI document lists is
//! routed; a waiting job is submitted, found in the inbox, answered and finishes;
//! errors are problem documents with the status their kind calls for; and from beyond
//! loopback no endpoint answers without a live API token.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{LOOPBACK, REMOTE, send, world};
use serde_json::json;
use tower::ServiceExt;

const APPROVAL: &str = "name: approval\ntree:\n  sequence:\n    - wait:\n        key: approve\n        schema: {type: object, required: [ok], properties: {ok: {type: boolean}}}\n    - check: \"state.approve.ok\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_job_is_submitted_found_in_the_inbox_answered_and_finishes() {
    let w = world().await;
    let (status, _, view) = send(
        &w.app,
        LOOPBACK,
        "POST",
        "/v1/jobs",
        Some(json!({"flow": APPROVAL, "input": {}})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    assert_eq!(view["status"], "waiting");
    assert_eq!(view["waiting_on"][0]["key"], "approve");
    let job = view["job"].as_str().expect("job").to_owned();

    let (status, _, inbox) = send(&w.app, LOOPBACK, "GET", "/v1/waits", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(inbox["jobs"][0]["job"], job.as_str(), "{inbox}");

    // A wrong answer is refused with the schema's words, and nothing moves.
    let (status, kind, problem) = send(
        &w.app,
        LOOPBACK,
        "POST",
        &format!("/v1/jobs/{job}/continue"),
        Some(json!({"key": "approve", "input": {"ok": "yes"}})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(kind, "application/problem+json");
    assert_eq!(problem["status"], 400);
    assert!(
        problem["type"]
            .as_str()
            .expect("type")
            .starts_with("urn:palm:problem:")
    );
    let (status, _, done) = send(
        &w.app,
        LOOPBACK,
        "POST",
        &format!("/v1/jobs/{job}/continue"),
        Some(json!({"key": "approve", "input": {"ok": true}})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let (_, _, settled) = send(
        &w.app,
        LOOPBACK,
        "GET",
        &format!("/v1/jobs/{job}/wait?timeout_ms=10000"),
        None,
        None,
    )
    .await;
    assert_eq!(settled["status"], "succeeded", "{settled}");
    assert_eq!(settled["state"]["approve"]["ok"], true);
    let (_, _, journal) = send(
        &w.app,
        LOOPBACK,
        "GET",
        &format!("/v1/jobs/{job}/journal"),
        None,
        None,
    )
    .await;
    assert!(journal.is_object(), "{journal}");

    // Filters: by status, by flow, and excluding statuses.
    let (_, _, listed) = send(
        &w.app,
        LOOPBACK,
        "GET",
        "/v1/jobs?status=succeeded",
        None,
        None,
    )
    .await;
    assert_eq!(listed["jobs"].as_array().expect("jobs").len(), 1);
    let (_, _, none) = send(&w.app, LOOPBACK, "GET", "/v1/jobs?flow=other", None, None).await;
    assert_eq!(none["jobs"], json!([]));
    let (_, _, excluded) = send(
        &w.app,
        LOOPBACK,
        "GET",
        "/v1/jobs?not_status=succeeded,failed",
        None,
        None,
    )
    .await;
    assert_eq!(excluded["jobs"], json!([]));

    // Errors by kind: an unknown job is 404, answering a job that waits no more is 409,
    // a body that is not an object is 400.
    let (status, _, _) = send(&w.app, LOOPBACK, "GET", "/v1/jobs/nope", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, conflict) = send(
        &w.app,
        LOOPBACK,
        "POST",
        &format!("/v1/jobs/{job}/continue"),
        Some(json!({"key": "approve", "input": {"ok": true}})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    assert_eq!(conflict["kind"], "job_finished", "{conflict}");
    let (status, _, bad) = send(&w.app, LOOPBACK, "POST", "/v1/jobs", Some(json!([1])), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        bad["detail"]
            .as_str()
            .expect("detail")
            .contains("JSON object"),
        "{bad}"
    );
    let (status, _, invalid) = send(
        &w.app,
        LOOPBACK,
        "POST",
        "/v1/jobs",
        Some(json!({"flow": "name: x\ntree: {nope: 1}\n"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{invalid}");
    // A known path asked with a method it does not take: 405, a problem, and `Allow`.
    let (status, kind, wrong) = send(&w.app, LOOPBACK, "DELETE", "/v1/jobs", None, None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{wrong}");
    assert_eq!(kind, "application/problem+json");
    assert_eq!(wrong["kind"], "method_not_allowed", "{wrong}");
    let mut request = Request::builder()
        .method("PUT")
        .uri("/v1/flows")
        .body(Body::empty())
        .expect("request");
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo::<std::net::SocketAddr>(
            LOOPBACK.parse().expect("peer"),
        ));
    let response = w.app.clone().oneshot(request).await.expect("answer");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let allow = response
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap_or("").to_owned());
    assert!(
        allow
            .as_deref()
            .is_some_and(|a| a.contains("GET") && a.contains("POST")),
        "{allow:?}"
    );

    // Tokens live as long as `ttl` says, in the CLI's words or in milliseconds.
    for (body, life_ms) in [
        (json!({"role": "api", "name": "ten", "ttl": "10m"}), 600_000),
        (
            json!({"role": "api", "name": "ms", "ttl_ms": 90_000}),
            90_000,
        ),
        (json!({"role": "api", "name": "hour"}), 3_600_000),
    ] {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as i64;
        let (status, _, made) =
            send(&w.app, LOOPBACK, "POST", "/v1/tokens", Some(body), None).await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        let lives = made["expires_at"].as_i64().expect("expires_at") - before;
        assert!(
            (life_ms - 5_000..=life_ms + 5_000).contains(&lives),
            "{made}"
        );
    }
    for body in [
        json!({"role": "api", "ttl": "soon"}),
        json!({"role": "api", "ttl": 600}),
        json!({"role": "api", "ttl_ms": "600"}),
        json!({"role": "api", "ttl": "1h", "ttl_ms": 5}),
    ] {
        let (status, kind, refused) = send(
            &w.app,
            LOOPBACK,
            "POST",
            "/v1/tokens",
            Some(body.clone()),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {refused}");
        assert_eq!(kind, "application/problem+json");
        assert!(
            refused["detail"].as_str().unwrap_or("").contains("ttl"),
            "{refused}"
        );
    }

    // Flows: validate, add, list, show.
    let (_, _, checked) = send(
        &w.app,
        LOOPBACK,
        "POST",
        "/v1/flows/validate",
        Some(json!({"source": "name: x\ntree: {nope: 1}\n"})),
        None,
    )
    .await;
    assert_eq!(checked["valid"], false);
    assert!(
        checked["files"][0]["errors"][0]["line"].is_number(),
        "{checked}"
    );
    let (status, _, added) = send(
        &w.app,
        LOOPBACK,
        "POST",
        "/v1/flows",
        Some(json!({"source": APPROVAL})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let (_, _, shown) = send(&w.app, LOOPBACK, "GET", "/v1/flows/approval", None, None).await;
    assert_eq!(shown["name"], "approval", "{shown}");
    let (status, _, by_name) = send(
        &w.app,
        LOOPBACK,
        "POST",
        "/v1/jobs",
        Some(json!({"flow": "approval"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{by_name}");
    let cancel = format!("/v1/jobs/{}/cancel", by_name["job"].as_str().expect("job"));
    let (status, _, cancelled) = send(
        &w.app,
        LOOPBACK,
        "POST",
        &cancel,
        Some(json!({"reason": "test"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    w.node.shutdown(std::time::Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_loopback_no_endpoint_answers_without_a_live_token() {
    let w = world().await;
    let (status, _, made) = send(
        &w.app,
        LOOPBACK,
        "POST",
        "/v1/tokens",
        Some(json!({"role": "api", "name": "ci"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let token = made["token"].as_str().expect("token").to_owned();
    for op in palm_web::openapi::OPERATIONS {
        let path = op.path.replace("{id}", "x").replace("{name}", "x");
        let method = op.method.to_uppercase();
        let body = op.body.map(|_| json!({}));
        let (status, kind, problem) =
            send(&w.app, REMOTE, &method, &path, body.clone(), None).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path}: {problem}"
        );
        assert_eq!(kind, "application/problem+json");
        let (status, _, _) = send(
            &w.app,
            REMOTE,
            &method,
            &path,
            body.clone(),
            Some("palm_api_forged"),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} with a forged token"
        );
        // With the token, the request reaches its handler (whatever it answers then).
        let (status, _, answer) = send(&w.app, REMOTE, &method, &path, body, Some(&token)).await;
        assert_ne!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path}: {answer}"
        );
        assert_ne!(answer["kind"], "not_found", "{method} {path} is routed");
    }
    // An unknown path too, and a missing peer address counts as remote.
    let (status, _, _) = send(&w.app, REMOTE, "GET", "/v1/secret", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let request = Request::builder()
        .uri("/v1/jobs")
        .body(Body::empty())
        .expect("request");
    let response = w.app.clone().oneshot(request).await.expect("answer");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // Revoked: refused again.
    let (status, _, _) = send(&w.app, LOOPBACK, "DELETE", "/v1/tokens/ci", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(&w.app, REMOTE, "GET", "/v1/jobs", None, Some(&token)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    w.node.shutdown(std::time::Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_every_route_and_validates() {
    let w = world().await;
    let (status, _, doc) = send(&w.app, LOOPBACK, "GET", "/v1/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");
    for op in palm_web::openapi::OPERATIONS {
        assert!(
            paths[op.path][op.method].is_object(),
            "{} {}",
            op.method,
            op.path
        );
    }
    // Every `.route(` in rest.rs is listed (the router and the document cannot drift).
    let source = include_str!("../src/rest.rs");
    for line in source
        .lines()
        .filter(|l| l.trim_start().starts_with(".route(\""))
    {
        let path = line.split('"').nth(1).expect("path");
        assert!(
            paths.contains_key(path),
            "{path} is routed but not documented"
        );
    }
    // The official validator, where CI installs it (`openapi-spec-validator`).
    let file = w.data.path().join("openapi.json");
    std::fs::write(&file, doc.to_string()).expect("write");
    // The venv .ci/run fills, else the machine's python3.
    let venv =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/py-venv/bin/python");
    let python = std::env::var("PALM_PYTHON").unwrap_or_else(|_| {
        if venv.exists() {
            venv.display().to_string()
        } else {
            "python3".into()
        }
    });
    let checked = std::process::Command::new(&python)
        .args(["-c", "import sys, json; from openapi_spec_validator import validate; validate(json.load(open(sys.argv[1]))); print('valid')"])
        .arg(&file)
        .output();
    match checked {
        Ok(out) if out.status.success() => {
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "valid");
        }
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let missing = stderr.contains("No module named 'openapi_spec_validator'");
            assert!(
                missing && std::env::var("CI").is_err(),
                "the OpenAPI document does not validate (or the validator is missing under CI): {stderr}"
            );
            eprintln!("openapi-spec-validator is not installed here; CI runs it");
        }
        Err(e) => panic!("{python}: {e}"),
    }
    w.node.shutdown(std::time::Duration::ZERO).await;
}

/// A webhook: a service posts its own JSON to `/v1/webhooks/NAME`, and the flows listening
/// with `on: {webhook: NAME}` start with that body as `input.event.data`, as it was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_starts_its_flows_with_the_body_as_sent() {
    let w = world().await;
    let flow = "name: on-push\non: { webhook: push }\ntree:\n  set: { ref: \"{{ input.event.data.ref }}\" }\n";
    let (status, _, added) = send(
        &w.app,
        LOOPBACK,
        "POST",
        "/v1/flows",
        Some(json!({"source": flow, "origin": "on-push.yaml"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let payload = json!({"ref": "refs/heads/main", "commits": [{"id": "abc"}]});
    let (status, _, matched) = send(
        &w.app,
        LOOPBACK,
        "POST",
        "/v1/webhooks/push",
        Some(payload.clone()),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{matched}");
    assert_eq!(matched["matched"], 1, "{matched}");
    let mut done = serde_json::Value::Null;
    for _ in 0..100 {
        let (_, _, jobs) = send(&w.app, LOOPBACK, "GET", "/v1/jobs?flow=on-push", None, None).await;
        if let Some(job) = jobs["jobs"][0]["job"].as_str() {
            let (_, _, view) = send(
                &w.app,
                LOOPBACK,
                "GET",
                &format!("/v1/jobs/{job}/wait?timeout_ms=5000"),
                None,
                None,
            )
            .await;
            done = view;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["input"]["event"]["data"], payload, "{done}");
    assert_eq!(done["state"]["ref"], "refs/heads/main");
    w.node.shutdown(std::time::Duration::ZERO).await;
}

/// A signed webhook: a service that signs its posts (GitHub's `X-Hub-Signature-256`) needs
/// no API token from beyond loopback when the signature is the body's HMAC under the
/// webhook's secret; a wrong signature is refused from anywhere, and a post without one
/// falls under the usual rule (loopback, or a bearer token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_webhook_needs_no_token_and_a_wrong_signature_is_refused() {
    use common::{SIGNED_WEBHOOK, WEBHOOK_SECRET, raw_from};
    let w = world().await;
    let flow = format!(
        "name: on-signed\non: {{ webhook: {SIGNED_WEBHOOK} }}\ntree:\n  set: {{ n: \"{{{{ input.event.data.n }}}}\" }}\n"
    );
    let (status, _, added) = send(
        &w.app,
        LOOPBACK,
        "POST",
        "/v1/flows",
        Some(json!({"source": flow, "origin": "on-signed.yaml"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let path = format!("/v1/webhooks/{SIGNED_WEBHOOK}");
    let body = r#"{"n": 1}"#;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, WEBHOOK_SECRET);
    let tag = ring::hmac::sign(&key, body.as_bytes());
    let good: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let good = format!("sha256={good}");
    let json = ("content-type", "application/json");
    // From beyond loopback, signed: in, and the flow starts with the body as its data.
    let (status, _, text) = raw_from(
        &w.app,
        REMOTE,
        "POST",
        &path,
        &[json, ("x-hub-signature-256", &good)],
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains(r#""matched":1"#), "{text}");
    // The name percent-encoded in the path is the same webhook, secret and all.
    let encoded = path.replace("signed", "sig%6eed");
    let (status, _, text) = raw_from(
        &w.app,
        REMOTE,
        "POST",
        &encoded,
        &[json, ("x-hub-signature-256", &good)],
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{encoded}: {text}");
    // The same body signed with another secret, or another body under this signature:
    // refused, from beyond loopback and from loopback alike.
    let other = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"not the secret"),
        body.as_bytes(),
    );
    let other: String = other.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    for (peer, signature, sent) in [
        (REMOTE, format!("sha256={other}"), body),
        (LOOPBACK, format!("sha256={other}"), body),
        (REMOTE, good.clone(), r#"{"n": 2}"#),
        (REMOTE, "sha1=abc".to_owned(), body),
    ] {
        let (status, _, text) = raw_from(
            &w.app,
            peer,
            "POST",
            &path,
            &[json, ("x-hub-signature-256", &signature)],
            sent,
        )
        .await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{peer} {signature}: {text}"
        );
        assert!(text.contains("X-Hub-Signature-256"), "{text}");
    }
    // GitLab's way: the secret itself in X-Gitlab-Token.
    let secret = std::str::from_utf8(WEBHOOK_SECRET).expect("text");
    let (status, _, text) = raw_from(
        &w.app,
        REMOTE,
        "POST",
        &path,
        &[json, ("x-gitlab-token", secret)],
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (status, _, text) = raw_from(
        &w.app,
        REMOTE,
        "POST",
        &path,
        &[json, ("x-gitlab-token", "not the secret")],
        body,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    assert!(text.contains("X-Gitlab-Token"), "{text}");
    // Stripe's way: `t=UNIX,v1=HEX`, the HMAC of `UNIX.BODY`; a stale one is a replay.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let hmac_hex = |signed: String| -> String {
        let tag = ring::hmac::sign(&key, signed.as_bytes());
        tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    };
    for (at, expected) in [(now, StatusCode::OK), (now - 600, StatusCode::UNAUTHORIZED)] {
        let stripe = format!("t={at},v1={}", hmac_hex(format!("{at}.{body}")));
        let (status, _, text) = raw_from(
            &w.app,
            REMOTE,
            "POST",
            &path,
            &[json, ("stripe-signature", &stripe)],
            body,
        )
        .await;
        assert_eq!(status, expected, "{stripe}: {text}");
        if expected != StatusCode::OK {
            assert!(text.contains("replay"), "{text}");
        }
    }
    // Standard Webhooks' way (and Svix's names for it): `v1,BASE64` of `ID.UNIX.BODY`.
    let standard = |id: &str| -> String {
        use base64::Engine as _;
        let tag = ring::hmac::sign(&key, format!("{id}.{now}.{body}").as_bytes());
        format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
        )
    };
    let at = now.to_string();
    for prefix in ["webhook", "svix"] {
        let (status, _, text) = raw_from(
            &w.app,
            REMOTE,
            "POST",
            &path,
            &[
                json,
                (&format!("{prefix}-id"), "msg_1"),
                (&format!("{prefix}-timestamp"), &at),
                (&format!("{prefix}-signature"), &standard("msg_1")),
            ],
            body,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{prefix}: {text}");
    }
    let (status, _, text) = raw_from(
        &w.app,
        REMOTE,
        "POST",
        &path,
        &[
            json,
            ("webhook-timestamp", &at),
            ("webhook-signature", &standard("msg_1")),
        ],
        body,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    assert!(text.contains("webhook-id"), "{text}");
    // No signature: the usual rule, a token from beyond loopback.
    let (status, _, _) = raw_from(&w.app, REMOTE, "POST", &path, &[json], body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, text) = raw_from(&w.app, LOOPBACK, "POST", &path, &[json], body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    // A webhook the node keeps no secret for is not opened by a signature.
    let (status, _, _) = raw_from(
        &w.app,
        REMOTE,
        "POST",
        "/v1/webhooks/push",
        &[json, ("x-hub-signature-256", &good)],
        body,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Only the posts that were let in started the flow: seven jobs.
    let mut count = 0;
    for _ in 0..100 {
        let (_, _, jobs) = send(
            &w.app,
            LOOPBACK,
            "GET",
            "/v1/jobs?flow=on-signed",
            None,
            None,
        )
        .await;
        count = jobs["jobs"].as_array().map_or(0, Vec::len);
        if count >= 7 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(count, 7);
    w.node.shutdown(std::time::Duration::ZERO).await;
}
