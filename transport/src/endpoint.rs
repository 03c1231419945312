//! Endpoints: the parent's [`Listener`] (enrolls children, admits their links) and the
//! child's [`Dialer`] (keeps the link to its parent up), plus [`enroll`].
//!
//! Every connection starts with the TLS handshake ([`crate::tls`]). Then:
//!
//! - **without a client certificate** the connection may only enroll: the child sends
//!   one `Request` frame with [`EnrollMsg::Request`] (its token and public key), the
//!   parent answers [`EnrollMsg::Granted`] (certificate and CA certificate) or
//!   [`EnrollMsg::Refused`] (kind and reason), and the connection ends;
//! - **with a certificate** (already checked: signed by the tree CA, not revoked) the
//!   certificate must belong to an enrolled child; the child opens the link stream and
//!   sends `Hello`, the parent checks it against the enrollment record and answers with
//!   its own `Hello`; from then on it is a [`Link`].
//!
//! Every trust decision is the listener's [`Gate`]'s ([`crate::gate`]): the root's
//! [`crate::Authority`] signs enrollments itself, a realm's [`crate::relay::RelayGate`]
//! relays them to the root and admits the children in its child book.
//!
//! The dialer reconnects after any loss with capped exponential backoff and jitter.
//! Both sides report [`LinkEvent`]s on a bounded channel.

use crate::codec::{self, Frame, FrameDecoder, Hello};
use crate::config::LinkConfig;
use crate::gate::{EnrollRequest, Gate};
use crate::link::{Direction, Inbound, Link, PeerInfo, close_code};
use crate::pki::{Fingerprint, Identity, PkiError, fingerprint};
use crate::tls::{self, TlsError, describe_close};
use crate::token::{ChildRecord, JoinToken, TokenError};
use rustls::pki_types::CertificateDer;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, watch};
use tracing::{debug, info, warn};

/// Children linked at once.
pub const CHILDREN_MAX: usize = 4096;

/// Bound on an enrollment frame (a token and a key, or two certificates).
const ENROLL_FRAME_LEN_MAX: usize = 64 << 10;

/// An enrolling child waits this many `handshake_ms_max` for the answer: a realm relays
/// the enrollment to the root and may first wait for its own parent link
/// ([`RELAY_ANSWER_HANDSHAKES`]).
pub const ENROLL_ANSWER_HANDSHAKES: u64 = 3;

/// A realm answers a relayed enrollment within this many `handshake_ms_max` (shorter
/// than its child waits, so the child hears the realm's reason rather than a timeout).
pub const RELAY_ANSWER_HANDSHAKES: u64 = 2;

/// What enrollment connections carry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnrollMsg {
    /// Child → parent: the token and the child's raw P-256 public key.
    Request {
        /// Token text.
        token: String,
        /// Uncompressed P-256 point.
        public_key: Vec<u8>,
    },
    /// Parent → child: the signed certificate and the CA certificate (DER).
    Granted {
        /// The child's certificate.
        cert: Vec<u8>,
        /// The tree CA's certificate.
        ca: Vec<u8>,
    },
    /// Parent → child: no.
    Refused {
        /// `forged`, `expired`, `reused`, `revoked`, `invalid`, `internal`.
        kind: String,
        /// Why, for people.
        reason: String,
    },
}

/// What happens to links.
#[derive(Debug)]
pub enum LinkEvent<T> {
    /// A link came up.
    LinkUp {
        /// The link.
        link: Link<T>,
        /// What the peer sends on it.
        inbound: mpsc::Receiver<Inbound<T>>,
    },
    /// A link that was up went down.
    LinkDown {
        /// Who it was with.
        peer: PeerInfo,
        /// Which connection (a newer connection of the same peer may already be up).
        connection: usize,
        /// Why.
        reason: String,
        /// How long it was up.
        up_ms: u64,
    },
    /// The dialer could not bring the link up; it retries after `retry_ms`.
    DialFailed {
        /// The parent address.
        parent: String,
        /// Consecutive failures.
        attempt: u32,
        /// Why.
        reason: String,
        /// Delay before the next attempt.
        retry_ms: u64,
    },
    /// The listener enrolled a child.
    Enrolled {
        /// The child.
        child: ChildRecord,
        /// From where.
        addr: SocketAddr,
    },
    /// The listener refused a connection or an enrollment.
    Refused {
        /// From where.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
}

/// Why an endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The UDP socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// TLS configuration failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// Why an enrollment failed.
#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    /// The token text is not a token.
    #[error("{0}")]
    Token(#[from] TokenError),
    /// The parent could not be reached or the handshake failed.
    #[error("cannot reach the parent at {parent}: {reason}")]
    Connect {
        /// The parent address.
        parent: String,
        /// Why.
        reason: String,
    },
    /// The parent refused.
    #[error("the parent refused to enroll this node ({kind}): {reason}")]
    Refused {
        /// `forged`, `expired`, `reused`, `revoked`, `invalid`, `internal`.
        kind: String,
        /// Why.
        reason: String,
    },
    /// The parent answered something that is not an enrollment answer.
    #[error("the parent broke the enrollment protocol: {0}")]
    Protocol(String),
    /// TLS configuration failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A key could not be made.
    #[error(transparent)]
    Pki(#[from] PkiError),
}

fn read_error(err: &quinn::ReadError) -> String {
    match err {
        quinn::ReadError::ConnectionLost(e) => describe_close(e),
        other => other.to_string(),
    }
}

fn write_error(err: &quinn::WriteError) -> String {
    match err {
        quinn::WriteError::ConnectionLost(e) => describe_close(e),
        other => other.to_string(),
    }
}

/// Reads the first frame of a stream, within `deadline`.
async fn first_frame<T: DeserializeOwned>(
    recv: &mut quinn::RecvStream,
    decoder: &mut FrameDecoder,
    deadline: Duration,
) -> Result<Frame<T>, String> {
    let read = async {
        loop {
            if let Some(frame) = decoder.next_frame::<T>().map_err(|e| e.to_string())? {
                return Ok(frame);
            }
            match recv.read_chunk(ENROLL_FRAME_LEN_MAX, true).await {
                Ok(Some(chunk)) => decoder.extend(&chunk.bytes),
                Ok(None) => return Err("the peer closed the stream before its first frame".into()),
                Err(err) => return Err(read_error(&err)),
            }
        }
    };
    match tokio::time::timeout(deadline, read).await {
        Ok(result) => result,
        Err(_) => Err(format!("no first frame within {} ms", deadline.as_millis())),
    }
}

/// Encodes now (so the frame need not be `Sync` across the await), then writes.
fn write_frame<'a, T: Serialize>(
    send: &'a mut quinn::SendStream,
    frame: &Frame<T>,
    frame_len_max: usize,
) -> impl std::future::Future<Output = Result<(), String>> + Send + 'a {
    let bytes = codec::encode(frame, frame_len_max).map_err(|e| e.to_string());
    async move {
        let bytes = bytes?;
        send.write_all(&bytes).await.map_err(|e| write_error(&e))
    }
}

fn peer_certificate(conn: &quinn::Connection) -> Option<CertificateDer<'static>> {
    let certs = conn
        .peer_identity()?
        .downcast::<Vec<CertificateDer<'static>>>()
        .ok()?;
    certs.first().cloned()
}

fn alpn_ok(conn: &quinn::Connection) -> bool {
    conn.handshake_data()
        .and_then(|data| data.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|data| data.protocol)
        .is_some_and(|p| p == crate::ALPN)
}

struct ListenerShared<T> {
    endpoint: quinn::Endpoint,
    gate: Arc<dyn Gate>,
    hello: Hello,
    config: LinkConfig,
    children: Mutex<HashMap<Fingerprint, Link<T>>>,
    events: mpsc::Sender<LinkEvent<T>>,
}

/// The parent side. See the module docs.
pub struct Listener<T> {
    shared: Arc<ListenerShared<T>>,
    task: tokio::task::JoinHandle<()>,
}

impl<T> Listener<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    /// Binds `addr` and starts accepting. `hello` is what this node tells its children;
    /// `gate` decides enrollments and admissions (the root's [`crate::Authority`], a
    /// realm's [`crate::relay::RelayGate`]).
    pub fn bind<G: Gate>(
        addr: SocketAddr,
        identity: &Identity,
        gate: Arc<G>,
        hello: Hello,
        config: LinkConfig,
        events: mpsc::Sender<LinkEvent<T>>,
    ) -> Result<Listener<T>, EndpointError> {
        let gate: Arc<dyn Gate> = gate;
        let server = tls::server_config(identity, gate.revoked_set(), &config)?;
        let endpoint = quinn::Endpoint::server(server, addr)
            .map_err(|source| EndpointError::Bind { addr, source })?;
        let shared = Arc::new(ListenerShared {
            endpoint,
            gate,
            hello,
            config,
            children: Mutex::new(HashMap::new()),
            events,
        });
        let task = tokio::spawn(accept_loop(Arc::clone(&shared)));
        Ok(Listener { shared, task })
    }
}

impl<T> Listener<T> {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.shared.endpoint.local_addr().ok()
    }

    /// The children linked now.
    pub fn children(&self) -> Vec<Link<T>> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Fingerprint, Link<T>>> {
        self.shared
            .children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Closes the links of children whose certificates are now revoked; returns how many.
    pub fn close_revoked(&self) -> usize {
        let revoked: Vec<Link<T>> = self
            .lock()
            .iter()
            .filter(|(fp, _)| self.shared.gate.is_revoked(fp))
            .map(|(_, link)| link.clone())
            .collect();
        for link in &revoked {
            link.close("revoked");
        }
        revoked.len()
    }

    /// Stops accepting, closes every link with `reason`, and waits (bounded) for the
    /// close to reach the peers.
    pub async fn shutdown(self, reason: &str) {
        self.task.abort();
        for link in self.children() {
            link.close(reason);
        }
        self.shared.endpoint.close(
            quinn::VarInt::from_u32(close_code::NORMAL),
            reason.as_bytes(),
        );
        let _ = tokio::time::timeout(Duration::from_millis(500), self.shared.endpoint.wait_idle())
            .await;
    }
}

impl<T> Drop for Listener<T> {
    fn drop(&mut self) {
        // Without a handle nobody can reach the listener: stop accepting. Links already
        // up keep their own tasks until they close.
        self.task.abort();
    }
}

async fn accept_loop<T>(shared: Arc<ListenerShared<T>>)
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(shared.config.handshakes_max.max(1)));
    while let Some(incoming) = shared.endpoint.accept().await {
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            debug!(addr = %incoming.remote_address(), "too many handshakes; refused");
            incoming.refuse();
            continue;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            serve_incoming(&shared, incoming).await;
            drop(slot);
        });
    }
}

async fn refuse<T>(shared: &ListenerShared<T>, conn: &quinn::Connection, reason: String) {
    warn!(addr = %conn.remote_address(), reason, "refused a connection");
    conn.close(
        quinn::VarInt::from_u32(close_code::REFUSED),
        reason.as_bytes(),
    );
    // Never wait for room: a flood of refusals must not hold handshake slots (the
    // refusal is logged above either way).
    let _ = shared.events.try_send(LinkEvent::Refused {
        addr: conn.remote_address(),
        reason,
    });
    tokio::task::yield_now().await;
}

async fn serve_incoming<T>(shared: &Arc<ListenerShared<T>>, incoming: quinn::Incoming)
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let addr = incoming.remote_address();
    let deadline = Duration::from_millis(shared.config.handshake_ms_max);
    let conn = match tokio::time::timeout(deadline, incoming).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(err)) => {
            // Wrong ALPN, a certificate not from the tree CA, a revoked certificate:
            // rustls refused during the handshake and told the peer with an alert.
            info!(%addr, reason = describe_close(&err), "handshake failed");
            return;
        }
        Err(_) => {
            debug!(%addr, "handshake timed out");
            return;
        }
    };
    if !alpn_ok(&conn) {
        return refuse(shared, &conn, "ALPN palm/1 required".into()).await;
    }
    match peer_certificate(&conn) {
        None => serve_enrollment(shared, conn).await,
        Some(cert) => admit(shared, conn, cert).await,
    }
}

async fn serve_enrollment<T>(shared: &Arc<ListenerShared<T>>, conn: quinn::Connection) {
    let addr = conn.remote_address();
    let deadline = Duration::from_millis(shared.config.handshake_ms_max);
    let (mut send, mut recv) = match tokio::time::timeout(deadline, conn.accept_bi()).await {
        Ok(Ok(streams)) => streams,
        _ => {
            return refuse(
                shared,
                &conn,
                "no certificate and no enrollment: enroll with a join token first".into(),
            )
            .await;
        }
    };
    let mut decoder = FrameDecoder::new(ENROLL_FRAME_LEN_MAX);
    let request = match first_frame::<EnrollMsg>(&mut recv, &mut decoder, deadline).await {
        Ok(Frame::Request {
            body: EnrollMsg::Request { token, public_key },
            ..
        }) => (token, public_key),
        Ok(_) => {
            return refuse(
                shared,
                &conn,
                "no certificate: only enrollment is allowed; enroll with a join token first".into(),
            )
            .await;
        }
        Err(reason) => {
            return refuse(shared, &conn, format!("bad enrollment request: {reason}")).await;
        }
    };
    // The gate decides: the root signs; a realm relays to the root and waits (bounded
    // by its own deadline) for the answer.
    let request = EnrollRequest {
        token: request.0,
        public_key: request.1,
        via: Vec::new(),
    };
    let decided = Arc::clone(&shared.gate).enroll(request, now_ms()).await;
    let answer = match &decided {
        Ok(grant) => EnrollMsg::Granted {
            cert: grant.cert.to_vec(),
            ca: grant.ca.to_vec(),
        },
        Err(refusal) => EnrollMsg::Refused {
            kind: refusal.kind().into(),
            reason: refusal.to_string(),
        },
    };
    let frame = Frame::Response {
        id: 0,
        body: answer,
    };
    if let Err(err) = write_frame(&mut send, &frame, ENROLL_FRAME_LEN_MAX).await {
        debug!(%addr, err, "could not answer an enrollment");
    }
    let _ = send.finish();
    match decided {
        Ok(grant) => {
            info!(%addr, child = grant.child.name, role = %grant.child.role, node_id = grant.child.node_id, "enrolled a child");
            let _ = shared
                .events
                .send(LinkEvent::Enrolled {
                    child: grant.child,
                    addr,
                })
                .await;
        }
        Err(refusal) => {
            warn!(%addr, kind = refusal.kind(), reason = %refusal, "refused an enrollment");
            let _ = shared.events.try_send(LinkEvent::Refused {
                addr,
                reason: refusal.to_string(),
            });
        }
    }
    // The child closes once it has the answer; wait for that (bounded) so the answer
    // is delivered before the connection goes.
    let _ = tokio::time::timeout(deadline, conn.closed()).await;
}

async fn admit<T>(
    shared: &Arc<ListenerShared<T>>,
    conn: quinn::Connection,
    cert: CertificateDer<'static>,
) where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let fp = fingerprint(&cert);
    let child = match shared.gate.admit(&fp) {
        Ok(child) => child,
        Err(reason) => return refuse(shared, &conn, reason).await,
    };
    if shared
        .children
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .len()
        >= CHILDREN_MAX
    {
        return refuse(shared, &conn, format!("more than {CHILDREN_MAX} children")).await;
    }
    let deadline = Duration::from_millis(shared.config.handshake_ms_max);
    let (mut send, mut recv) = match tokio::time::timeout(deadline, conn.accept_bi()).await {
        Ok(Ok(streams)) => streams,
        Ok(Err(err)) => {
            debug!(
                child = child.name,
                reason = describe_close(&err),
                "child left before its hello"
            );
            return;
        }
        Err(_) => return refuse(shared, &conn, "no link stream within the deadline".into()).await,
    };
    let mut decoder = FrameDecoder::new(shared.config.frame_len_max);
    let hello = match first_frame::<T>(&mut recv, &mut decoder, deadline).await {
        Ok(Frame::Hello(hello)) => hello,
        Ok(_) => {
            return refuse(
                shared,
                &conn,
                "protocol violation: the first frame must be hello".into(),
            )
            .await;
        }
        Err(reason) => return refuse(shared, &conn, format!("bad hello: {reason}")).await,
    };
    if hello.name != child.name || hello.node_id != child.node_id || hello.role != child.role {
        return refuse(
            shared,
            &conn,
            format!(
                "hello ({} {} {}) does not match the certificate's enrollment ({} {} {})",
                hello.name, hello.role, hello.node_id, child.name, child.role, child.node_id
            ),
        )
        .await;
    }
    if let Err(reason) = write_frame(
        &mut send,
        &Frame::<T>::Hello(shared.hello.clone()),
        shared.config.frame_len_max,
    )
    .await
    {
        debug!(child = child.name, reason, "child left during hello");
        return;
    }
    let peer = PeerInfo {
        name: hello.name,
        role: hello.role,
        node_id: hello.node_id,
        addr: conn.remote_address(),
        direction: Direction::Child,
    };
    let (link, inbound) = Link::<T>::start(
        conn,
        send,
        recv,
        decoder,
        peer.clone(),
        shared.config.clone(),
    );
    let previous = shared
        .children
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(fp, link.clone());
    if let Some(previous) = previous {
        previous.close("replaced by a newer connection from the same child");
    }
    info!(child = peer.name, addr = %peer.addr, "child link up");
    let _ = shared
        .events
        .send(LinkEvent::LinkUp {
            link: link.clone(),
            inbound,
        })
        .await;
    // Watch the link on its own task: the handshake slot this task holds is for
    // handshakes, not for the life of a link.
    tokio::spawn(watch_child(Arc::clone(shared), fp, link, peer));
}

/// Waits for a child's link to close, then forgets it and reports it down.
async fn watch_child<T>(
    shared: Arc<ListenerShared<T>>,
    fp: Fingerprint,
    link: Link<T>,
    peer: PeerInfo,
) {
    let up = Instant::now();
    let reason = link.closed().await;
    {
        let mut children = shared.children.lock().unwrap_or_else(|p| p.into_inner());
        if children
            .get(&fp)
            .is_some_and(|current| current.connection_id() == link.connection_id())
        {
            children.remove(&fp);
        }
    }
    info!(child = peer.name, reason, "child link down");
    let _ = shared
        .events
        .send(LinkEvent::LinkDown {
            peer,
            connection: link.connection_id(),
            reason,
            up_ms: up.elapsed().as_millis() as u64,
        })
        .await;
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

async fn resolve(parent: &str) -> Result<SocketAddr, String> {
    let mut addrs = tokio::net::lookup_host(parent)
        .await
        .map_err(|e| format!("cannot resolve {parent}: {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("{parent} resolves to no address"))
}

fn client_endpoint(remote: SocketAddr) -> Result<quinn::Endpoint, String> {
    let local: SocketAddr = if remote.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    quinn::Endpoint::client(local).map_err(|e| format!("cannot open a UDP socket: {e}"))
}

async fn connect(
    parent: &str,
    client: quinn::ClientConfig,
    deadline: Duration,
) -> Result<(quinn::Endpoint, quinn::Connection), String> {
    let addr = resolve(parent).await?;
    let endpoint = client_endpoint(addr)?;
    let connecting = endpoint
        .connect_with(client, addr, crate::SERVER_NAME)
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(deadline, connecting).await {
        Ok(Ok(conn)) => Ok((endpoint, conn)),
        Ok(Err(err)) => Err(describe_close(&err)),
        Err(_) => Err(format!("no answer within {} ms", deadline.as_millis())),
    }
}

/// Enrolls this node with the parent at `parent` using `token_text`: makes a key, has
/// the parent sign its certificate, and returns the new identity and the token.
pub async fn enroll(
    parent: &str,
    token_text: &str,
    config: &LinkConfig,
) -> Result<(Identity, JoinToken), EnrollError> {
    let token = JoinToken::decode(token_text)?;
    let key = Identity::generate_key()?;
    let client = tls::enroll_client_config(token.ca_fingerprint, config)?;
    let deadline = Duration::from_millis(config.handshake_ms_max);
    let unreachable = |reason: String| EnrollError::Connect {
        parent: parent.to_owned(),
        reason,
    };
    let (endpoint, conn) = connect(parent, client, deadline)
        .await
        .map_err(unreachable)?;
    let result = async {
        let (mut send, mut recv) = conn
            .open_bi()
            .await
            .map_err(|e| unreachable(describe_close(&e)))?;
        let request = Frame::Request {
            id: 0,
            body: EnrollMsg::Request {
                token: token_text.trim().to_owned(),
                public_key: key.public_key_raw().to_vec(),
            },
        };
        write_frame(&mut send, &request, ENROLL_FRAME_LEN_MAX)
            .await
            .map_err(unreachable)?;
        let _ = send.finish();
        let mut decoder = FrameDecoder::new(ENROLL_FRAME_LEN_MAX);
        let answer_within = deadline.saturating_mul(ENROLL_ANSWER_HANDSHAKES as u32);
        match first_frame::<EnrollMsg>(&mut recv, &mut decoder, answer_within).await {
            Ok(Frame::Response {
                body: EnrollMsg::Granted { cert, ca },
                ..
            }) => {
                if fingerprint(&ca) != token.ca_fingerprint {
                    return Err(EnrollError::Protocol(
                        "the CA certificate returned is not the one the token names".into(),
                    ));
                }
                Ok(Identity::new(
                    key,
                    CertificateDer::from(cert),
                    CertificateDer::from(ca),
                ))
            }
            Ok(Frame::Response {
                body: EnrollMsg::Refused { kind, reason },
                ..
            }) => Err(EnrollError::Refused { kind, reason }),
            Ok(_) => Err(EnrollError::Protocol("unexpected answer".into())),
            Err(reason) => Err(unreachable(reason)),
        }
    }
    .await;
    conn.close(
        quinn::VarInt::from_u32(close_code::NORMAL),
        b"enrollment done",
    );
    let _ = tokio::time::timeout(Duration::from_millis(200), endpoint.wait_idle()).await;
    result.map(|identity| (identity, token))
}

/// Connects once and exchanges hellos.
pub async fn dial<T>(
    parent: &str,
    client: quinn::ClientConfig,
    hello: &Hello,
    config: &LinkConfig,
) -> Result<(quinn::Endpoint, Link<T>, mpsc::Receiver<Inbound<T>>), String>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let deadline = Duration::from_millis(config.handshake_ms_max);
    let (endpoint, conn) = connect(parent, client, deadline).await?;
    let exchange = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| describe_close(&e))?;
        write_frame(
            &mut send,
            &Frame::<T>::Hello(hello.clone()),
            config.frame_len_max,
        )
        .await?;
        let mut decoder = FrameDecoder::new(config.frame_len_max);
        match first_frame::<T>(&mut recv, &mut decoder, deadline).await {
            Ok(Frame::Hello(theirs)) => Ok((send, recv, decoder, theirs)),
            Ok(_) => Err("protocol violation: the parent's first frame is not hello".to_owned()),
            // The parent may refuse only after the handshake (a revoked or unknown
            // certificate): the connection's close reason says why.
            Err(reason) => Err(conn.close_reason().map_or(reason, |e| describe_close(&e))),
        }
    };
    let (send, recv, decoder, theirs) = match exchange.await {
        Ok(parts) => parts,
        Err(reason) => {
            conn.close(quinn::VarInt::from_u32(close_code::NORMAL), b"hello failed");
            return Err(reason);
        }
    };
    let peer = PeerInfo {
        name: theirs.name,
        role: theirs.role,
        node_id: theirs.node_id,
        addr: conn.remote_address(),
        direction: Direction::Parent,
    };
    let (link, inbound) = Link::start(conn, send, recv, decoder, peer, config.clone());
    Ok((endpoint, link, inbound))
}

/// Capped exponential backoff with "equal jitter": attempt `n` (1-based) waits between
/// half and all of `min(max, min_ms * 2^(n-1))`.
pub fn backoff_ms(attempt: u32, min_ms: u64, max_ms: u64, random: u64) -> u64 {
    let exp = attempt.saturating_sub(1).min(32);
    let base = min_ms
        .max(1)
        .saturating_mul(1u64 << exp)
        .min(max_ms.max(min_ms.max(1)));
    let half = base / 2;
    half + random % (base - half + 1)
}

/// A parent's addresses: `HOST:PORT[,HOST:PORT…]`, the replicas of one parent (a root
/// on PostgreSQL has a standby; only the replica holding the store listens).
pub fn parent_addresses(parent: &str) -> Vec<String> {
    parent
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Dials every address of `parent` at once and keeps the first link that comes up (the
/// others are dropped). At once rather than in turn: a replica that is not listening
/// does not refuse a QUIC handshake, it lets it time out, and a takeover must not wait
/// for that.
async fn dial_any<T>(
    parent: &str,
    client: &quinn::ClientConfig,
    hello: &Hello,
    config: &LinkConfig,
) -> Result<(quinn::Endpoint, Link<T>, mpsc::Receiver<Inbound<T>>), String>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let addresses = parent_addresses(parent);
    if addresses.len() <= 1 {
        return dial::<T>(parent.trim(), client.clone(), hello, config).await;
    }
    let mut dials = tokio::task::JoinSet::new();
    for address in addresses {
        let (client, hello, config) = (client.clone(), hello.clone(), config.clone());
        dials.spawn(async move {
            let result = dial::<T>(&address, client, &hello, &config).await;
            (address, result)
        });
    }
    let mut reasons = Vec::new();
    while let Some(joined) = dials.join_next().await {
        match joined {
            Ok((_, Ok(parts))) => {
                dials.abort_all();
                return Ok(parts);
            }
            Ok((address, Err(reason))) => reasons.push(format!("{address}: {reason}")),
            Err(e) => reasons.push(format!("a dial task failed: {e}")),
        }
    }
    Err(reasons.join("; "))
}

/// The child side: keeps one link to the parent up. See the module docs.
pub struct Dialer {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Dialer {
    /// Starts dialing `parent` (`HOST:PORT`, resolved on every attempt; or several,
    /// comma-separated, all dialled at once, see [`parent_addresses`]).
    pub fn spawn<T>(
        parent: String,
        client: quinn::ClientConfig,
        hello: Hello,
        config: LinkConfig,
        events: mpsc::Sender<LinkEvent<T>>,
    ) -> Dialer
    where
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(dial_loop(parent, client, hello, config, events, stopped));
        Dialer { stop, task }
    }

    /// Closes the link (the parent sees `shutdown`) and stops dialing.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(2), self.task).await;
    }
}

async fn dial_loop<T>(
    parent: String,
    client: quinn::ClientConfig,
    hello: Hello,
    config: LinkConfig,
    events: mpsc::Sender<LinkEvent<T>>,
    mut stop: watch::Receiver<bool>,
) where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let mut rng = u64::from_le_bytes(
        ring::rand::generate::<[u8; 8]>(&ring::rand::SystemRandom::new())
            .map(|r| r.expose())
            .unwrap_or([7; 8]),
    );
    let mut attempt: u32 = 0;
    while !*stop.borrow() {
        let delay_ms = match dial_any::<T>(&parent, &client, &hello, &config).await {
            Ok((endpoint, link, inbound)) => {
                attempt = 0;
                info!(parent, peer = link.peer().name, "parent link up");
                let peer = link.peer().clone();
                let connection = link.connection_id();
                let _ = events
                    .send(LinkEvent::LinkUp {
                        link: link.clone(),
                        inbound,
                    })
                    .await;
                let up = Instant::now();
                let stopping = tokio::select! {
                    _ = link.closed() => false,
                    _ = stop.wait_for(|s| *s) => true,
                };
                if stopping {
                    link.close("shutdown");
                    let _ = tokio::time::timeout(Duration::from_millis(300), endpoint.wait_idle())
                        .await;
                }
                let reason = link.closed().await;
                warn!(parent, reason, "parent link down");
                let _ = events
                    .send(LinkEvent::LinkDown {
                        peer,
                        connection,
                        reason,
                        up_ms: up.elapsed().as_millis() as u64,
                    })
                    .await;
                if stopping {
                    return;
                }
                config.backoff_ms_min
            }
            Err(reason) => {
                attempt = attempt.saturating_add(1);
                // xorshift64: jitter only, not security.
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let retry_ms =
                    backoff_ms(attempt, config.backoff_ms_min, config.backoff_ms_max, rng);
                debug!(parent, attempt, reason, retry_ms, "dial failed");
                let _ = events
                    .send(LinkEvent::DialFailed {
                        parent: parent.clone(),
                        attempt,
                        reason,
                        retry_ms,
                    })
                    .await;
                retry_ms
            }
        };
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(delay_ms)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_is_capped_and_jittered() {
        for attempt in 1..40 {
            for random in [0, 1, 77, u64::MAX] {
                let d = backoff_ms(attempt, 100, 5_000, random);
                let base = (100u64 << (attempt - 1).min(32)).min(5_000);
                assert!(
                    d >= base / 2 && d <= base,
                    "attempt {attempt}: {d} vs {base}"
                );
            }
        }
        assert_eq!(backoff_ms(1, 100, 5_000, 0), 50);
        assert_eq!(backoff_ms(30, 100, 5_000, 0), 2_500);
    }
}
