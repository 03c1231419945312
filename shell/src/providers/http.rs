//! The `http` provider: one HTTP/1.1 request (plain `http://`), with method, headers, a
//! JSON body, a timeout and the statuses expected; the answer is saved as
//! `{status, headers, body, text}` (`body` is the parsed JSON, or null).
//!
//! ```yaml
//! - call: { provider: http, save: reply,
//!           args: { url: "http://127.0.0.1:8080/orders", method: POST,
//!                   body: { id: "{{ input.id }}" }, expect: [200, 201], json: true } }
//! ```
//!
//! A small client of its own: requests go to services on the node's network, and a
//! full client stack (with TLS) is more than this needs today; `https://` is refused
//! with a clear reason.

use super::{CallContext, CallFuture, Failure, Provider};
use palm_actors::place::parse_http_url;
use serde_json::{Map, Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on a response (head and body).
pub const RESPONSE_BYTES_MAX: usize = 8 << 20;
/// Default timeout of one request.
pub const TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// See the module docs.
pub struct Http;

struct Answer {
    status: u16,
    headers: Map<String, Value>,
    body: Vec<u8>,
}

fn expected(args: &Value, status: u16) -> Result<bool, Failure> {
    Ok(match args.get("expect") {
        None => (200..300).contains(&status),
        Some(Value::Number(n)) => n.as_u64() == Some(u64::from(status)),
        Some(Value::Array(list)) => list.iter().any(|n| n.as_u64() == Some(u64::from(status))),
        Some(Value::String(class)) if class.len() == 3 && class.ends_with("xx") => {
            class.as_bytes()[0] == b'0' + (status / 100) as u8
        }
        Some(other) => {
            return Err(Failure::new(format!(
                "http: `expect` must be a status, a list of statuses or a class like \"2xx\", found {other}"
            )));
        }
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let end = find(body, b"\r\n").ok_or("a chunk size line is cut off")?;
        let size_text = String::from_utf8_lossy(&body[..end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size `{size_text}`"))?;
        body = &body[end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if body.len() < size + 2 {
            return Err("a chunk is cut off".to_owned());
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

async fn request(
    method: &str,
    url: &str,
    headers: &Map<String, Value>,
    body: Option<Vec<u8>>,
    content_type: &str,
) -> Result<Answer, String> {
    let (host, port, path) = parse_http_url(url)?;
    let mut stream = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: palm\r\nAccept: application/json, */*\r\nConnection: close\r\n"
    );
    for (name, value) in headers {
        let value = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if name.contains(['\r', '\n', ':']) || value.contains(['\r', '\n']) {
            return Err(format!("header `{name}` is not a valid header"));
        }
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = &body {
        if !headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("content-type"))
        {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("cannot send the request: {e}"))?;
    if let Some(body) = &body {
        stream
            .write_all(body)
            .await
            .map_err(|e| format!("cannot send the body: {e}"))?;
    }
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("cannot read the answer: {e}"))?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&chunk[..n]);
        if raw.len() > RESPONSE_BYTES_MAX {
            return Err(format!(
                "the answer is larger than {RESPONSE_BYTES_MAX} bytes"
            ));
        }
        // Stop at the end of a body whose length is known (the server may keep the
        // connection open despite `Connection: close`).
        if let Some(split) = find(&raw, b"\r\n\r\n") {
            let head_text = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
            if let Some(length) = head_text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                && raw.len() >= split + 4 + length
            {
                break;
            }
        }
    }
    let split = find(&raw, b"\r\n\r\n").ok_or("not an HTTP answer (no header end)")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.split_whitespace();
    let status = match (
        parts.next(),
        parts.next().and_then(|c| c.parse::<u16>().ok()),
    ) {
        (Some(version), Some(code)) if version.starts_with("HTTP/") => code,
        _ => return Err(format!("not an HTTP answer: `{status_line}`")),
    };
    let mut headers = Map::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), json!(value.trim()));
        }
    }
    let mut body = raw[split + 4..].to_vec();
    if headers
        .get("transfer-encoding")
        .and_then(Value::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body)?;
    } else if let Some(length) = headers
        .get("content-length")
        .and_then(Value::as_str)
        .and_then(|v| v.parse::<usize>().ok())
    {
        body.truncate(length);
    }
    Ok(Answer {
        status,
        headers,
        body,
    })
}

impl Provider for Http {
    fn name(&self) -> &'static str {
        "http"
    }

    fn describe(&self) -> Value {
        json!({
            "name": "http",
            "description": "one HTTP/1.1 request to an http:// URL; saves {status, headers, body, text}",
            "args": {
                "url": "http://HOST:PORT/PATH (required)",
                "method": "GET (default), POST, PUT, PATCH, DELETE, HEAD",
                "headers": "a mapping of header names to values",
                "body": "JSON (sent as application/json) or a string",
                "timeout_ms": TIMEOUT_MS_DEFAULT,
                "expect": "a status, a list of statuses, or a class like \"2xx\" (default)",
                "json": "true: the answer must be JSON",
            },
        })
    }

    fn call<'a>(&'a self, _ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(async move {
            let url = super::string_arg(&args, "url", "http")?.to_owned();
            let method = args
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or("GET")
                .to_ascii_uppercase();
            if !["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"].contains(&method.as_str()) {
                return Err(Failure::new(format!("http: unknown method `{method}`")));
            }
            let headers = match args.get("headers") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(map)) => map.clone(),
                Some(other) => {
                    return Err(Failure::new(format!(
                        "http: `headers` must be a mapping, found {other}"
                    )));
                }
            };
            let (body, content_type) = match args.get("body") {
                None | Some(Value::Null) => (None, "application/json"),
                Some(Value::String(text)) => (Some(text.clone().into_bytes()), "text/plain"),
                Some(json) => (Some(json.to_string().into_bytes()), "application/json"),
            };
            let timeout_ms = args
                .get("timeout_ms")
                .and_then(Value::as_u64)
                .unwrap_or(TIMEOUT_MS_DEFAULT);
            let answer = tokio::time::timeout(
                Duration::from_millis(timeout_ms),
                request(&method, &url, &headers, body, content_type),
            )
            .await
            .map_err(|_| {
                Failure::new(format!(
                    "http: {method} {url} timed out after {timeout_ms} ms"
                ))
            })?
            .map_err(|e| Failure::new(format!("http: {method} {url}: {e}")))?;
            let text = String::from_utf8_lossy(&answer.body).into_owned();
            let parsed: Option<Value> = serde_json::from_slice(&answer.body).ok();
            let value = json!({
                "status": answer.status,
                "headers": answer.headers,
                "body": parsed.clone().unwrap_or(Value::Null),
                "text": text,
            });
            if !expected(&args, answer.status)? {
                return Err(Failure {
                    reason: format!(
                        "http: {method} {url} answered {} (expected {})",
                        answer.status,
                        args.get("expect")
                            .map_or("2xx".to_owned(), |e| e.to_string())
                    ),
                    value,
                });
            }
            if args.get("json") == Some(&Value::Bool(true)) && parsed.is_none() {
                let shown: String = text.chars().take(80).collect();
                return Err(Failure {
                    reason: format!("http: {method} {url}: the answer is not JSON: {shown:?}"),
                    value,
                });
            }
            Ok(value)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_and_expectations() {
        assert_eq!(
            dechunk(b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n").unwrap(),
            b"Wikipedia"
        );
        assert!(dechunk(b"zz\r\n").is_err());
        assert!(expected(&json!({}), 204).unwrap());
        assert!(!expected(&json!({}), 404).unwrap());
        assert!(expected(&json!({"expect": 404}), 404).unwrap());
        assert!(expected(&json!({"expect": [200, 201]}), 201).unwrap());
        assert!(expected(&json!({"expect": "4xx"}), 418).unwrap());
        assert!(expected(&json!({"expect": true}), 200).is_err());
    }
}
