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
//! `providers: {http: {ca: FILE}}` in palm.yaml, for services under a private CA.
//!
//! The HTTP/1.1 exchange is hyper's; the answer is bounded (`RESPONSE_BYTES_MAX`).
//! Connections are kept alive and reused per origin (scheme, host, port) for up to
//! `IDLE_MAX`, so calls to one service pay its TCP and TLS handshakes once. A request
//! on a reused connection that fails before any answer (its server closed the
//! connection as the request went out) is sent once more on a new connection: effects
//! run at least once, and a retry of the step would send it again anyway.

use super::{CallContext, CallFuture, Failure, Provider};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderName, HeaderValue, USER_AGENT};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use palm_actors::place::parse_http_url;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
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
    /// Keep-alive connections not in use.
    pool: Pool,
}

impl Http {
    /// The provider, trusting Mozilla's roots and those in the PEM file `ca`.
    pub fn new(ca: Option<PathBuf>) -> Http {
        Http {
            ca,
            tls: OnceLock::new(),
            pool: Pool::default(),
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

#[derive(Debug)]
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

/// Where a connection goes: `(https, host, port)`.
type Origin = (bool, String, u16);
/// A connection's sending half (hyper drives the connection in a task of its own).
type Sender = SendRequest<Full<Bytes>>;

/// Idle connections kept per origin, at most.
const IDLE_PER_ORIGIN_MAX: usize = 64;
/// Idle connections kept in all, at most (each holds a socket; flows calling many hosts
/// do not grow this without bound: past it, a connection is closed after its answer).
const IDLE_MAX_IN_ALL: usize = 256;
/// How long an idle connection is kept: under the 5 s idle timeout of Node.js servers
/// (the shortest common one), so a connection is seldom reused just as its server
/// closes it.
const IDLE_MAX: Duration = Duration::from_secs(4);

/// Keep-alive connections not in use, newest last per origin.
#[derive(Default)]
struct Pool {
    idle: Mutex<HashMap<Origin, Vec<(Sender, Instant)>>>,
}

impl Pool {
    /// An idle connection to `origin` that is still open, if one is kept.
    async fn checkout(&self, origin: &Origin) -> Option<Sender> {
        loop {
            let (mut sender, since) = {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                let kept = idle.get_mut(origin)?;
                let newest = kept.pop();
                if kept.is_empty() {
                    idle.remove(origin);
                }
                newest?
            };
            if since.elapsed() > IDLE_MAX || sender.is_closed() {
                continue;
            }
            // Resolves at once for an open idle connection; fails for one its server
            // closed (hyper has read the end of the stream). Bounded all the same.
            let ready = tokio::time::timeout(Duration::from_millis(100), sender.ready());
            if matches!(ready.await, Ok(Ok(()))) {
                return Some(sender);
            }
        }
    }

    /// Keeps `sender` for the next request to `origin`, unless it is closed or the
    /// pool is full.
    fn checkin(&self, origin: Origin, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let usable = |(sender, since): &(Sender, Instant)| {
            since.elapsed() <= IDLE_MAX && !sender.is_closed()
        };
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.values().map(Vec::len).sum::<usize>() >= IDLE_MAX_IN_ALL {
            idle.retain(|_, kept| {
                kept.retain(usable);
                !kept.is_empty()
            });
            if idle.values().map(Vec::len).sum::<usize>() >= IDLE_MAX_IN_ALL {
                return;
            }
        }
        let kept = idle.entry(origin).or_default();
        kept.retain(usable);
        if kept.len() < IDLE_PER_ORIGIN_MAX {
            kept.push((sender, Instant::now()));
        }
    }
}

/// A request as built for one origin; built again for a retry.
struct Outgoing<'a> {
    method: &'a str,
    host_header: String,
    path: &'a str,
    headers: &'a Map<String, Value>,
    body: Option<Bytes>,
    content_type: &'a str,
}

impl Outgoing<'_> {
    fn build(&self) -> Result<Request<Full<Bytes>>, String> {
        let method = Method::from_bytes(self.method.as_bytes())
            .map_err(|_| format!("`{}` is not a method", self.method))?;
        let mut request = Request::builder()
            .method(method)
            .uri(request_target(self.path).as_ref());
        let named = |name: &str| self.headers.keys().any(|k| k.eq_ignore_ascii_case(name));
        let (has_host, has_agent, has_accept, has_type) = (
            named("host"),
            named("user-agent"),
            named("accept"),
            named("content-type"),
        );
        if !has_host {
            request = request.header(HOST, self.host_header.as_str());
        }
        if !has_agent {
            request = request.header(USER_AGENT, "palm");
        }
        if !has_accept {
            request = request.header(ACCEPT, "application/json, */*");
        }
        if self.body.is_some() && !has_type {
            request = request.header(CONTENT_TYPE, self.content_type);
        }
        for (name, value) in self.headers {
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let name_ok = HeaderName::from_bytes(name.as_bytes()).is_ok();
            if !name_ok || HeaderValue::from_str(&value).is_err() {
                return Err(format!("header `{name}` is not a valid header"));
            }
            request = request.header(name.as_str(), value);
        }
        request
            .body(Full::new(self.body.clone().unwrap_or_default()))
            .map_err(|e| format!("cannot build the request: {e}"))
    }
}

/// `path` (with its query) as a request target: bytes a URI may not hold (spaces,
/// non-ASCII text from a template, `"<>\\^`{|}`) percent-encoded, as a browser does;
/// `%` and everything else kept as written.
fn request_target(path: &str) -> std::borrow::Cow<'_, str> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=%".contains(&b);
    if path.bytes().all(allowed) {
        return path.into();
    }
    let mut encoded = String::with_capacity(path.len() + 16);
    for b in path.bytes() {
        if allowed(b) {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    encoded.into()
}

/// How one exchange on a connection failed.
enum Failed {
    /// Before any answer came: on a reused connection, its server may have closed it
    /// as the request went out, so the request is sent once more on a new one.
    Unanswered(String),
    /// After the answer began, or for a reason a new connection would not change.
    Final(String),
}

/// One request and its whole answer (bounded) on `sender`'s connection; the sender
/// comes back for reuse.
async fn exchange(
    mut sender: Sender,
    request: Request<Full<Bytes>>,
) -> Result<(Answer, Sender), Failed> {
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| Failed::Unanswered(format!("no HTTP answer: {}", error_chain(&e))))?;
    let status = response.status().as_u16();
    let mut headers = Map::new();
    for (name, value) in response.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.get_mut(name.as_str()) {
            // Repeated fields join as one list, as HTTP allows.
            Some(Value::String(first)) => {
                first.push_str(", ");
                first.push_str(&value);
            }
            _ => {
                headers.insert(name.as_str().to_owned(), Value::String(value));
            }
        }
    }
    let body = Limited::new(response.into_body(), RESPONSE_BYTES_MAX)
        .collect()
        .await
        .map_err(|e| {
            Failed::Final(if e.is::<LengthLimitError>() {
                format!("the answer is larger than {RESPONSE_BYTES_MAX} bytes")
            } else {
                format!("cannot read the answer: {}", error_chain(&*e))
            })
        })?
        .to_bytes()
        .to_vec();
    Ok((
        Answer {
            status,
            headers,
            body,
        },
        sender,
    ))
}

/// An error with its causes, as one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

impl Http {
    /// One request to `url`, on a kept connection to its origin when one is open.
    async fn request(
        &self,
        method: &str,
        url: &str,
        headers: &Map<String, Value>,
        body: Option<Vec<u8>>,
        content_type: &str,
    ) -> Result<Answer, String> {
        let (secure, host, port, path) = parse_url(url)?;
        // A fragment names a part of the answer; it is never sent.
        let path = path.split('#').next().unwrap_or("/");
        let bracketed = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        let default_port = if secure { 443 } else { 80 };
        let outgoing = Outgoing {
            method,
            host_header: if port == default_port {
                bracketed
            } else {
                format!("{bracketed}:{port}")
            },
            path,
            headers,
            body: body.map(Bytes::from),
            content_type,
        };
        let origin: Origin = (secure, host, port);
        if let Some(sender) = self.pool.checkout(&origin).await {
            match exchange(sender, outgoing.build()?).await {
                Ok((answer, sender)) => {
                    self.pool.checkin(origin, sender);
                    return Ok(answer);
                }
                // Effects run at least once: sending again where no answer came is
                // what a retry of the step would do, without failing it.
                Err(Failed::Unanswered(_)) => {}
                Err(Failed::Final(e)) => return Err(e),
            }
        }
        let sender = self.connect(&origin).await?;
        match exchange(sender, outgoing.build()?).await {
            Ok((answer, sender)) => {
                self.pool.checkin(origin, sender);
                Ok(answer)
            }
            Err(Failed::Unanswered(e) | Failed::Final(e)) => Err(e),
        }
    }

    /// The status of one request with no headers or body of its own: the client alone,
    /// without a job around it (`palm bench effects` measures its steps against this).
    pub async fn fetch(&self, method: &str, url: &str) -> Result<u16, String> {
        self.request(method, url, &Map::new(), None, "")
            .await
            .map(|answer| answer.status)
    }

    /// A new connection to `origin` (TLS for https), its driver spawned.
    async fn connect(&self, origin: &Origin) -> Result<Sender, String> {
        let (secure, host, port) = origin;
        let stream = TcpStream::connect((host.as_str(), *port))
            .await
            .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
        // The head and a small body go out as they are written, not after a delayed ACK.
        let _ = stream.set_nodelay(true);
        let handshake_failed = |e: hyper::Error| format!("HTTP with {host}:{port}: {e}");
        if !secure {
            let (sender, connection) = handshake(TokioIo::new(stream))
                .await
                .map_err(handshake_failed)?;
            tokio::spawn(connection);
            return Ok(sender);
        }
        let config = self.tls()?;
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| format!("`{host}` is not a valid TLS server name: {e}"))?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS with {host}:{port} failed: {e}"))?;
        let (sender, connection) = handshake(TokioIo::new(EndAtEof(stream)))
            .await
            .map_err(handshake_failed)?;
        tokio::spawn(connection);
        Ok(sender)
    }
}

/// hyper's HTTP/1.1 handshake on `io`, header names sent as `Content-Length` rather than
/// `content-length`: the same to HTTP, and to the hand-written servers that look for
/// the former.
async fn handshake<S>(io: S) -> hyper::Result<(Sender, http1::Connection<S, Full<Bytes>>)>
where
    S: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    http1::Builder::new()
        .title_case_headers(true)
        .handshake(io)
        .await
}

/// A TLS stream whose peer closing without `close_notify` reads as its end, as curl
/// takes it: many servers close so, and an answer without a length ends there.
struct EndAtEof<S>(S);

impl<S: AsyncRead + Unpin> AsyncRead for EndAtEof<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.0).poll_read(cx, buf) {
            Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for EndAtEof<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
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
            if url.starts_with("https://") {
                self.tls().map_err(Failure::new)?;
            }
            let answer = tokio::time::timeout(
                Duration::from_millis(timeout_ms),
                self.request(&method, &url, &headers, body, content_type),
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A private CA (its PEM written to a file) and an https server on 127.0.0.1 whose
    /// certificate it signed, answering every request with `{"ok": true}`.
    /// With `length` false the answer has no `Content-Length`: its body ends where the
    /// connection does.
    async fn private_https_server(
        dir: &std::path::Path,
        length: bool,
    ) -> (std::path::PathBuf, u16) {
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
                    let answer = if length {
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                            body.len()
                        )
                    } else {
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n".to_owned()
                    };
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
        let (ca_file, port) = private_https_server(dir.path(), true).await;
        let url = format!("https://127.0.0.1:{port}/orders");
        let trusting = Http::new(Some(ca_file));
        let answer = trusting
            .request("GET", &url, &Map::new(), None, "")
            .await
            .expect("an answer over TLS");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, br#"{"ok": true}"#);
        // The server closed that connection (without close_notify): the next request
        // goes out on a new one and is answered.
        let again = trusting
            .request("GET", &url, &Map::new(), None, "")
            .await
            .expect("a second answer over TLS");
        assert_eq!(again.status, 200);
        // A body that ends with the connection, closed without close_notify: the end of
        // the body, as for curl.
        let (_, unframed) = private_https_server(dir.path(), false).await;
        let answer = Http::new(Some(dir.path().join("ca.pem")))
            .request(
                "GET",
                &format!("https://127.0.0.1:{unframed}/"),
                &Map::new(),
                None,
                "",
            )
            .await
            .expect("an answer ending with its connection");
        assert_eq!(answer.body, br#"{"ok": true}"#);
        // Mozilla's roots alone do not know this CA.
        let stranger = Http::new(None);
        let err = stranger
            .request("GET", &url, &Map::new(), None, "")
            .await
            .expect_err("refused");
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
    fn expectations() {
        assert!(expected(&json!({}), 204).unwrap());
        assert!(!expected(&json!({}), 404).unwrap());
        assert!(expected(&json!({"expect": 404}), 404).unwrap());
        assert!(expected(&json!({"expect": [200, 201]}), 201).unwrap());
        assert!(expected(&json!({"expect": "4xx"}), 418).unwrap());
        assert!(expected(&json!({"expect": true}), 200).is_err());
    }

    /// What a scripted server does with one request: answer these bytes (and keep the
    /// connection), or close the connection without answering.
    enum Reply {
        Answer(Vec<u8>),
        Close,
    }

    /// Connections accepted and request heads read by a scripted server.
    #[derive(Default)]
    struct Seen {
        connections: std::sync::atomic::AtomicUsize,
        requests: std::sync::atomic::AtomicUsize,
        /// Each request's head, as received.
        heads: Mutex<Vec<String>>,
    }

    /// A plain HTTP/1.1 server on 127.0.0.1 whose reply to request `r` on connection `c`
    /// (both from 0) is `script(c, r)`.
    async fn scripted_server(
        script: impl Fn(usize, usize) -> Reply + Send + Sync + 'static,
    ) -> (u16, Arc<Seen>) {
        use std::sync::atomic::Ordering::SeqCst;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Seen::default());
        let script = Arc::new(script);
        let counts = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let connection = counts.connections.fetch_add(1, SeqCst);
                let (script, counts) = (script.clone(), counts.clone());
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    for request in 0.. {
                        // One head (these requests carry no body).
                        let end = loop {
                            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                                break at + 4;
                            }
                            let mut chunk = [0u8; 1024];
                            match tcp.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let head = buffer.drain(..end).collect::<Vec<u8>>();
                        counts.requests.fetch_add(1, SeqCst);
                        counts
                            .heads
                            .lock()
                            .expect("heads")
                            .push(String::from_utf8_lossy(&head).into_owned());
                        match script(connection, request) {
                            Reply::Answer(bytes) => {
                                if tcp.write_all(&bytes).await.is_err() {
                                    return;
                                }
                            }
                            Reply::Close => return,
                        }
                    }
                });
            }
        });
        (port, seen)
    }

    fn ok_answer(extra: &str) -> Reply {
        Reply::Answer(format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n{extra}\r\nok").into_bytes())
    }

    async fn get(http: &Http, port: u16, method: &str) -> Result<Answer, String> {
        let url = format!("http://127.0.0.1:{port}/a?b=c#d");
        tokio::time::timeout(
            Duration::from_secs(5),
            http.request(method, &url, &Map::new(), None, ""),
        )
        .await
        .expect("answered within 5 s")
    }

    #[tokio::test]
    async fn requests_to_one_origin_reuse_a_kept_connection() {
        use std::sync::atomic::Ordering::SeqCst;
        let (port, seen) = scripted_server(|_, _| ok_answer("")).await;
        let http = Http::new(None);
        for _ in 0..3 {
            let answer = get(&http, port, "GET").await.expect("answered");
            assert_eq!((answer.status, answer.body.as_slice()), (200, &b"ok"[..]));
        }
        assert_eq!(
            seen.connections.load(SeqCst),
            1,
            "one connection for three requests"
        );
        assert_eq!(seen.requests.load(SeqCst), 3);
    }

    #[tokio::test]
    async fn a_server_that_says_close_gets_a_new_connection_each_time() {
        use std::sync::atomic::Ordering::SeqCst;
        let (port, seen) = scripted_server(|_, _| ok_answer("Connection: close\r\n")).await;
        let http = Http::new(None);
        for _ in 0..2 {
            assert_eq!(get(&http, port, "GET").await.expect("answered").status, 200);
        }
        assert_eq!(seen.connections.load(SeqCst), 2);
    }

    #[tokio::test]
    async fn a_kept_connection_closed_as_the_request_goes_out_is_retried_once_on_a_new_one() {
        use std::sync::atomic::Ordering::SeqCst;
        // The first connection answers its first request, then takes the next one and
        // closes without a word, as a server does whose idle timeout just ran out.
        let (port, seen) = scripted_server(|connection, request| {
            if connection == 0 && request == 1 {
                Reply::Close
            } else {
                ok_answer("")
            }
        })
        .await;
        let http = Http::new(None);
        assert_eq!(get(&http, port, "GET").await.expect("first").status, 200);
        let second = get(&http, port, "POST")
            .await
            .expect("second, on a new connection");
        assert_eq!(second.status, 200);
        assert_eq!(seen.connections.load(SeqCst), 2);
        assert_eq!(
            seen.requests.load(SeqCst),
            3,
            "the lost request was sent again"
        );
        // A fresh connection that fails is not retried: the error says what happened.
        let (port, seen) = scripted_server(|_, _| Reply::Close).await;
        let err = get(&Http::new(None), port, "GET")
            .await
            .expect_err("no answer");
        assert!(
            err.contains("closed") || err.contains("incomplete"),
            "{err}"
        );
        assert_eq!(seen.requests.load(SeqCst), 1);
    }

    #[tokio::test]
    async fn a_chunked_answer_on_a_kept_connection_ends_with_its_last_chunk() {
        let (port, _) = scripted_server(|_, _| {
            Reply::Answer(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Part: a\r\nX-Part: b\r\n\r\n4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n"
                    .to_vec(),
            )
        })
        .await;
        let answer = get(&Http::new(None), port, "GET").await.expect("answered");
        assert_eq!(answer.body, b"Wikipedia");
        assert_eq!(answer.headers["x-part"], json!("a, b"));
    }

    #[tokio::test]
    async fn a_target_with_spaces_or_other_text_is_percent_encoded() {
        let (port, seen) = scripted_server(|_, _| ok_answer("")).await;
        let url = format!("http://127.0.0.1:{port}/find me?q=café&x=%41|b#part");
        let answer = Http::new(None)
            .request("GET", &url, &Map::new(), None, "")
            .await
            .expect("answered");
        assert_eq!(answer.status, 200);
        let heads = seen.heads.lock().expect("heads");
        assert!(
            heads[0].starts_with("GET /find%20me?q=caf%C3%A9&x=%41%7Cb HTTP/1.1\r\n"),
            "{}",
            heads[0]
        );
        assert!(
            heads[0].contains(&format!("Host: 127.0.0.1:{port}\r\n")),
            "{}",
            heads[0]
        );
    }

    #[tokio::test]
    async fn an_answer_that_is_not_http_says_so() {
        let (port, _) =
            scripted_server(|_, _| Reply::Answer(b"SSH-2.0-OpenSSH\r\n\r\n".to_vec())).await;
        let err = get(&Http::new(None), port, "GET")
            .await
            .expect_err("not HTTP");
        assert!(err.starts_with("no HTTP answer: "), "{err}");
    }

    #[tokio::test]
    async fn an_answer_over_the_bound_is_an_error() {
        let (port, _) = scripted_server(|_, _| {
            let mut bytes = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                RESPONSE_BYTES_MAX + 1
            )
            .into_bytes();
            bytes.resize(bytes.len() + RESPONSE_BYTES_MAX + 1, b'x');
            Reply::Answer(bytes)
        })
        .await;
        let err = get(&Http::new(None), port, "GET")
            .await
            .expect_err("too large");
        assert!(err.contains("larger than 8388608 bytes"), "{err}");
    }
}
