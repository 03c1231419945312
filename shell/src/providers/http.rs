//! The `http` provider: one HTTP/1.1 request to an `http://` or `https://` URL, with
//! method, headers, a JSON body, a timeout and the statuses expected; the answer is saved
//! as `{status, headers, body, text}` (`body` is the parsed JSON, or null).
//!
//! ```yaml
//! - call: { provider: http, save: reply,
//!           args: { url: "http://127.0.0.1:8080/orders", method: POST,
//!                   body: { id: "{{ input.id }}" }, expect: [200, 201], json: true } }
//! ```
//!
//! `https://` speaks TLS through rustls (ring provider) and checks the server against
//! Mozilla's roots, bundled (webpki-roots), plus the PEM certificates of
//! `providers: {http: {ca: FILE}}` in palm.yaml, for services under a private CA. The
//! HTTP/1.1 exchange itself is a small client of its own: one request, `Connection:
//! close`, a bounded answer.

use super::{CallContext, CallFuture, Failure, Provider};
use palm_actors::place::parse_http_url;
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on a response (head and body).
pub const RESPONSE_BYTES_MAX: usize = 8 << 20;
/// Default timeout of one request.
pub const TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// See the module docs.
pub struct Http {
    /// Extra trusted roots (PEM), from `providers.http.ca`.
    ca: Option<PathBuf>,
    /// The TLS client, built at the first `https://` call (or why it cannot be).
    tls: OnceLock<Result<Arc<tokio_rustls::rustls::ClientConfig>, String>>,
}

impl Http {
    /// The provider, trusting Mozilla's roots and those in the PEM file `ca`.
    pub fn new(ca: Option<PathBuf>) -> Http {
        Http {
            ca,
            tls: OnceLock::new(),
        }
    }

    fn tls(&self) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, String> {
        self.tls
            .get_or_init(|| client_config(self.ca.as_deref()).map(Arc::new))
            .clone()
    }
}

/// A TLS client configuration: the bundled roots plus the certificates in `ca`.
fn client_config(
    ca: Option<&std::path::Path>,
) -> Result<tokio_rustls::rustls::ClientConfig, String> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(ca) = ca {
        let mut added = 0;
        let certificates = CertificateDer::pem_file_iter(ca)
            .map_err(|e| format!("http: cannot read the CA file {}: {e}", ca.display()))?;
        for certificate in certificates {
            let certificate = certificate
                .map_err(|e| format!("http: bad certificate in {}: {e}", ca.display()))?;
            roots
                .add(certificate)
                .map_err(|e| format!("http: unusable certificate in {}: {e}", ca.display()))?;
            added += 1;
        }
        if added == 0 {
            return Err(format!(
                "http: no certificate in the CA file {}",
                ca.display()
            ));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("http: TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// `(tls, host, port, path)` of an `http://` or `https://` URL.
fn parse_url(url: &str) -> Result<(bool, String, u16, String), String> {
    match url.strip_prefix("https://") {
        Some(rest) => {
            let (host, port, path) = parse_http_url(&format!("http://{rest}"))
                .map_err(|e| e.replace("http://", "https://"))?;
            let authority = rest.split('/').next().unwrap_or_default();
            // No explicit port: 443, not the 80 an http:// URL defaults to.
            let port = if authority.contains(':') { port } else { 443 };
            Ok((true, host, port, path))
        }
        None => parse_http_url(url).map(|(host, port, path)| (false, host, port, path)),
    }
}

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
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    method: &str,
    url: &str,
    headers: &Map<String, Value>,
    body: Option<Vec<u8>>,
    content_type: &str,
) -> Result<Answer, String> {
    let (secure, host, port, path) = parse_url(url)?;
    let stream = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    if !secure {
        return exchange(
            stream,
            &host,
            port,
            &path,
            method,
            headers,
            body,
            content_type,
        )
        .await;
    }
    let config = tls.ok_or("https is not set up")?;
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.clone())
        .map_err(|e| format!("`{host}` is not a valid TLS server name: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|e| format!("TLS with {host}:{port} failed: {e}"))?;
    exchange(
        stream,
        &host,
        port,
        &path,
        method,
        headers,
        body,
        content_type,
    )
    .await
}

/// One HTTP/1.1 request and its answer over `stream` (plain or TLS).
#[allow(clippy::too_many_arguments)]
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    host: &str,
    port: u16,
    path: &str,
    method: &str,
    headers: &Map<String, Value>,
    body: Option<Vec<u8>>,
    content_type: &str,
) -> Result<Answer, String> {
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
        let n = match stream.read(&mut chunk).await {
            Ok(n) => n,
            // A TLS server that closes without close_notify: the end, as for curl.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err(format!("cannot read the answer: {e}")),
        };
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
    fn name(&self) -> &str {
        "http"
    }

    fn describe(&self) -> Value {
        json!({
            "name": "http",
            "description": "one HTTP/1.1 request to an http:// or https:// URL; saves {status, headers, body, text}",
            "args": {
                "url": "http://HOST:PORT/PATH or https://... (required)",
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
            let tls = if url.starts_with("https://") {
                Some(self.tls().map_err(Failure::new)?)
            } else {
                None
            };
            let answer = tokio::time::timeout(
                Duration::from_millis(timeout_ms),
                request(tls, &method, &url, &headers, body, content_type),
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

    /// A private CA (its PEM written to a file) and an https server on 127.0.0.1 whose
    /// certificate it signed, answering every request with `{"ok": true}`.
    async fn private_https_server(dir: &std::path::Path) -> (std::path::PathBuf, u16) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        use tokio_rustls::rustls;
        let ca_key = KeyPair::generate().expect("ca key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let key = KeyPair::generate().expect("key");
        let params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
        let cert = params.signed_by(&key, &issuer).expect("cert");
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).expect("write ca");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key der"),
        )
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n")
                        && tls.read(&mut byte).await.is_ok_and(|n| n == 1)
                    {
                        head.push(byte[0]);
                    }
                    let body = br#"{"ok": true}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    let _ = tls.write_all(answer.as_bytes()).await;
                    let _ = tls.write_all(body).await;
                    // Closed without close_notify, as many servers do.
                });
            }
        });
        (ca_file, port)
    }

    #[tokio::test]
    async fn https_with_a_private_ca_and_refused_without_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ca_file, port) = private_https_server(dir.path()).await;
        let url = format!("https://127.0.0.1:{port}/orders");
        let trusting = Http::new(Some(ca_file));
        let answer = request(
            Some(trusting.tls().expect("tls")),
            "GET",
            &url,
            &Map::new(),
            None,
            "",
        )
        .await
        .expect("an answer over TLS");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, br#"{"ok": true}"#);
        // Mozilla's roots alone do not know this CA.
        let stranger = Http::new(None);
        let err = request(
            Some(stranger.tls().expect("tls")),
            "GET",
            &url,
            &Map::new(),
            None,
            "",
        )
        .await
        .err()
        .expect("refused");
        assert!(
            err.contains("TLS with 127.0.0.1") && err.contains("certificate"),
            "{err}"
        );
        // A CA file that is not one says so.
        let bad = dir.path().join("bad.pem");
        std::fs::write(&bad, "not a certificate").expect("write");
        let err = Http::new(Some(bad)).tls().expect_err("no certificate");
        assert!(err.contains("no certificate in the CA file"), "{err}");
    }

    #[test]
    fn https_urls_default_to_port_443() {
        assert_eq!(
            parse_url("https://example.com/a").unwrap(),
            (true, "example.com".to_owned(), 443, "/a".to_owned())
        );
        assert_eq!(
            parse_url("https://example.com:8443").unwrap(),
            (true, "example.com".to_owned(), 8443, "/".to_owned())
        );
        assert_eq!(
            parse_url("http://example.com/b").unwrap(),
            (false, "example.com".to_owned(), 80, "/b".to_owned())
        );
    }

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
