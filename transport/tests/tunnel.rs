//! Tunnels on 127.0.0.1: enrollment, every refusal (with its reason), requests and
//! messages, back-pressure, bad frames, garbage at the port, reconnect after the parent
//! restarts, and a dead peer noticed within the idle timeout.

use palm_transport::codec::{self, Frame};
use palm_transport::endpoint::{LinkEvent, dial};
use palm_transport::link::Inbound;
use palm_transport::pki::TreeCa;
use palm_transport::tls;
use palm_transport::{
    Authority, Dialer, EnrollError, Hello, Identity, Link, LinkConfig, LinkError, Listener, Role,
    TrustBook, enroll,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

type Msg = Vec<u8>;

struct Root {
    authority: Arc<Authority>,
    identity: Arc<Identity>,
    listener: Option<Listener<Msg>>,
    events: mpsc::Receiver<LinkEvent<Msg>>,
    addr: SocketAddr,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

fn hello(name: &str, role: Role, node_id: String) -> Hello {
    Hello {
        name: name.into(),
        role,
        node_id,
        software: "test".into(),
    }
}

fn fast() -> LinkConfig {
    LinkConfig {
        backoff_ms_min: 50,
        backoff_ms_max: 400,
        ..LinkConfig::default()
    }
}

impl Root {
    fn start(config: LinkConfig) -> Root {
        let ca = TreeCa::generate().expect("ca");
        let identity = Arc::new(ca.issue_identity("root").expect("identity"));
        let authority = Arc::new(Authority::new(ca, TrustBook::default(), None));
        Root::listen(
            authority,
            identity,
            "127.0.0.1:0".parse().expect("addr"),
            config,
        )
    }

    fn listen(
        authority: Arc<Authority>,
        identity: Arc<Identity>,
        addr: SocketAddr,
        config: LinkConfig,
    ) -> Root {
        let (tx, events) = mpsc::channel(64);
        let me = hello("root", Role::Root, identity.node_id());
        let listener =
            Listener::bind(addr, &identity, Arc::clone(&authority), me, config, tx).expect("bind");
        let addr = listener.local_addr().expect("addr");
        Root {
            authority,
            identity,
            listener: Some(listener),
            events,
            addr,
        }
    }

    fn token(&self, name: &str) -> String {
        self.authority
            .create_token(name, Role::Edge, 60_000, now_ms())
            .expect("token")
            .encode()
    }

    fn parent(&self) -> String {
        self.addr.to_string()
    }

    /// The next event that is not a refusal or an enrollment.
    async fn next_link_event(&mut self) -> LinkEvent<Msg> {
        loop {
            let event = tokio::time::timeout(Duration::from_secs(10), self.events.recv())
                .await
                .expect("an event in time")
                .expect("listener alive");
            match event {
                LinkEvent::Refused { .. } | LinkEvent::Enrolled { .. } => continue,
                other => return other,
            }
        }
    }

    async fn next_refusal(&mut self) -> String {
        loop {
            let event = tokio::time::timeout(Duration::from_secs(10), self.events.recv())
                .await
                .expect("an event in time")
                .expect("listener alive");
            if let LinkEvent::Refused { reason, .. } = event {
                return reason;
            }
        }
    }
}

async fn enrolled(root: &Root, name: &str) -> Identity {
    let (identity, token) = enroll(&root.parent(), &root.token(name), &fast())
        .await
        .expect("enroll");
    assert_eq!(token.name, name);
    identity
}

async fn link_to(root: &Root, identity: &Identity, name: &str) -> Result<Link<Msg>, String> {
    let client = tls::client_config(identity, &fast()).expect("client config");
    let me = hello(name, Role::Edge, identity.node_id());
    let (endpoint, link, _inbound) = dial::<Msg>(&root.parent(), client, &me, &fast()).await?;
    // Keep the endpoint alive as long as the link (tests are short).
    std::mem::forget(endpoint);
    Ok(link)
}

/// A root with `config` and `edge-1` linked to it under the same config: the root, the
/// edge's endpoint (keep it), its side of the link, and what reaches the root on it.
async fn linked(
    config: &LinkConfig,
) -> (
    Root,
    quinn::Endpoint,
    Link<Msg>,
    mpsc::Receiver<Inbound<Msg>>,
) {
    let mut root = Root::start(config.clone());
    let identity = enrolled(&root, "edge-1").await;
    let client = tls::client_config(&identity, config).expect("client");
    let me = hello("edge-1", Role::Edge, identity.node_id());
    let (endpoint, link, _) = dial::<Msg>(&root.parent(), client, &me, config)
        .await
        .expect("link");
    let LinkEvent::LinkUp { inbound, .. } = root.next_link_event().await else {
        panic!("up");
    };
    (root, endpoint, link, inbound)
}

/// Echoes every request on every child link the root accepts.
fn echo(mut events: mpsc::Receiver<LinkEvent<Msg>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let LinkEvent::LinkUp { mut inbound, .. } = event {
                tokio::spawn(async move {
                    while let Some(item) = inbound.recv().await {
                        if let Inbound::Request { body, responder } = item {
                            let _ = responder.respond(body).await;
                        }
                    }
                });
            }
        }
    })
}

async fn next_up(events: &mut mpsc::Receiver<LinkEvent<Msg>>) -> Link<Msg> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
            Ok(Some(LinkEvent::LinkUp { link, .. })) => return link,
            Ok(Some(_)) => continue,
            _ => panic!("no link up in time"),
        }
    }
}

#[tokio::test]
async fn a_child_enrolls_links_and_exchanges_frames() {
    let mut root = Root::start(fast());
    let identity = enrolled(&root, "edge-1").await;
    assert_eq!(identity.ca(), root.authority.ca().cert());
    let link = link_to(&root, &identity, "edge-1").await.expect("link");
    assert_eq!(link.peer().name, "root");
    let LinkEvent::LinkUp {
        link: theirs,
        mut inbound,
    } = root.next_link_event().await
    else {
        panic!("expected the child's link up");
    };
    assert_eq!(theirs.peer().name, "edge-1");
    assert_eq!(theirs.peer().node_id, identity.node_id());
    // Requests both ways, a message, a transfer.
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(item) = inbound.recv().await {
            match item {
                Inbound::Request { body, responder } => {
                    let mut answer = body.clone();
                    answer.reverse();
                    responder.respond(answer).await.expect("respond");
                }
                Inbound::Message(body) => seen.push(body),
                Inbound::Transfer(t) => {
                    seen.push(t.bytes.len().to_le_bytes().to_vec());
                    return seen;
                }
            }
        }
        seen
    });
    let answers = futures_join(&link, 100).await;
    for (i, answer) in answers.into_iter().enumerate() {
        assert_eq!(answer, vec![9, i as u8]);
    }
    link.send(b"note".to_vec()).await.expect("message");
    link.transfer(&vec![7u8; 3 << 20]).await.expect("transfer");
    let seen = server.await.expect("server");
    assert_eq!(seen[0], b"note".to_vec());
    assert_eq!(seen[1], (3usize << 20).to_le_bytes().to_vec());
    link.close("done");
    let LinkEvent::LinkDown { peer, reason, .. } = root.next_link_event().await else {
        panic!("expected the child's link down");
    };
    assert_eq!(peer.name, "edge-1");
    assert!(reason.contains("done"), "{reason}");
}

async fn futures_join(link: &Link<Msg>, n: usize) -> Vec<Msg> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let link = link.clone();
        tasks.push(tokio::spawn(async move {
            link.request(vec![i as u8, 9]).await.expect("answer")
        }));
    }
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.expect("task"));
    }
    out
}

fn refusal(result: Result<(Identity, palm_transport::JoinToken), EnrollError>) -> (String, String) {
    match result {
        Err(EnrollError::Refused { kind, reason }) => (kind, reason),
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, got an enrollment"),
    }
}

#[tokio::test]
async fn reused_expired_and_forged_tokens_are_refused_with_their_reason() {
    let mut root = Root::start(fast());
    let token = root.token("edge-1");
    enroll(&root.parent(), &token, &fast())
        .await
        .expect("first use");
    let (kind, reason) = refusal(enroll(&root.parent(), &token, &fast()).await);
    assert_eq!(kind, "reused");
    assert!(reason.contains("reused token"), "{reason}");
    assert!(root.next_refusal().await.contains("reused token"));

    let short = root
        .authority
        .create_token("edge-2", Role::Edge, 1, now_ms())
        .expect("token")
        .encode();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (kind, reason) = refusal(enroll(&root.parent(), &short, &fast()).await);
    assert_eq!(kind, "expired");
    assert!(reason.contains("expired token"), "{reason}");

    // Forged: a well-formed token pinning this tree, but never issued here.
    let mut forged = palm_transport::JoinToken::decode(&root.token("edge-3")).expect("decode");
    forged.id = [0x42; 16];
    let (kind, reason) = refusal(enroll(&root.parent(), &forged.encode(), &fast()).await);
    assert_eq!(kind, "forged");
    assert!(reason.contains("never issued"), "{reason}");
    // Forged: the name altered.
    let mut altered = palm_transport::JoinToken::decode(&root.token("edge-4")).expect("decode");
    altered.name = "admin".into();
    let (kind, reason) = refusal(enroll(&root.parent(), &altered.encode(), &fast()).await);
    assert_eq!(kind, "forged");
    assert!(reason.contains("altered"), "{reason}");
}

#[tokio::test]
async fn a_token_for_another_tree_never_reaches_the_root() {
    let root = Root::start(fast());
    let other = Root::start(fast());
    // A token from another tree pins another CA: the child refuses this root's TLS.
    let token = other.token("edge-1");
    match enroll(&root.parent(), &token, &fast()).await {
        Err(EnrollError::Connect { reason, .. }) => {
            assert!(
                reason.contains("fingerprint mismatch") || reason.contains("tree CA"),
                "{reason}"
            )
        }
        Err(other) => panic!("expected a TLS refusal, got {other}"),
        Ok(_) => panic!("enrolled with another tree's token"),
    }
    // And the root never issued it: nothing was consumed there.
    assert!(root.authority.book().children.is_empty());
}

#[tokio::test]
async fn a_certificate_not_signed_by_the_tree_ca_is_refused() {
    let root = Root::start(fast());
    let stranger_ca = TreeCa::generate().expect("ca");
    // Signed by another CA, but trusting this tree's CA for the server side.
    let foreign = stranger_ca.issue_identity("edge-x").expect("identity");
    let honest_foreign = {
        // Same key as the foreign certificate, but the tree's CA as trust anchor.
        let dir = tempfile::tempdir().expect("tempdir");
        let files = palm_transport::pki::TreeFiles::new(dir.path());
        files.save_identity(&foreign).expect("save");
        std::fs::copy(
            dir.path().join("tree/tree-ca.cert.der"),
            dir.path().join("tree/foreign-ca.der"),
        )
        .expect("copy");
        std::fs::write(
            dir.path().join("tree/tree-ca.cert.der"),
            root.authority.ca().cert(),
        )
        .expect("write");
        files.load_identity().expect("load")
    };
    let reason = link_to(&root, &honest_foreign, "edge-x")
        .await
        .expect_err("refused");
    assert!(reason.contains("unknown CA"), "{reason}");
}

#[tokio::test]
async fn a_revoked_child_is_cut_off_and_refused() {
    let mut root = Root::start(fast());
    let identity = enrolled(&root, "edge-1").await;
    // One client config for every dial, as the dialer does: a session ticket from the
    // first connection must not let the revoked certificate skip verification.
    let client = tls::client_config(&identity, &fast()).expect("client config");
    let me = hello("edge-1", Role::Edge, identity.node_id());
    let (_endpoint, link, _inbound) = dial::<Msg>(&root.parent(), client.clone(), &me, &fast())
        .await
        .expect("link");
    assert!(matches!(
        root.next_link_event().await,
        LinkEvent::LinkUp { .. }
    ));
    let revoked = root.authority.revoke("edge-1", now_ms()).expect("revoke");
    assert_eq!(revoked.certificates, 1);
    let listener = root.listener.as_ref().expect("listener");
    assert_eq!(listener.close_revoked(), 1);
    let reason = tokio::time::timeout(Duration::from_secs(5), link.closed())
        .await
        .expect("closed in time");
    assert!(reason.contains("revoked"), "{reason}");
    let reason = dial::<Msg>(&root.parent(), client, &me, &fast())
        .await
        .expect_err("refused");
    assert!(reason.contains("certificate revoked"), "{reason}");
    // A fresh token for a revoked name is refused too.
    assert!(
        root.authority
            .create_token("edge-1", Role::Edge, 60_000, now_ms())
            .is_err()
    );
}

#[tokio::test]
async fn no_certificate_means_enrollment_only() {
    let mut root = Root::start(fast());
    // A TLS client pinning the right CA, with no certificate, that tries to open a link.
    let pin = palm_transport::pki::fingerprint(root.authority.ca().cert());
    let client = tls::enroll_client_config(pin, &fast()).expect("config");
    let me = hello("edge-1", Role::Edge, "x".into());
    let err = dial::<Msg>(&root.parent(), client, &me, &fast())
        .await
        .expect_err("refused");
    assert!(err.contains("only enrollment"), "{err}");
    assert!(root.next_refusal().await.contains("only enrollment"));
}

#[tokio::test]
async fn requests_in_flight_are_bounded() {
    let config = LinkConfig {
        requests_in_flight_max: 4,
        ..fast()
    };
    let (_root, _endpoint, link, mut inbound) = linked(&config).await;
    let mut requests = Vec::new();
    for i in 0..10u8 {
        let link = link.clone();
        requests.push(tokio::spawn(async move { link.request(vec![i]).await }));
    }
    // The parent holds what it gets without answering.
    let mut held = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        if let Ok(Some(Inbound::Request { body, responder })) =
            tokio::time::timeout(Duration::from_millis(50), inbound.recv()).await
        {
            held.push((body, responder));
        }
    }
    assert_eq!(held.len(), 4, "only requests_in_flight_max reach the peer");
    assert_eq!(link.in_flight(), 4);
    // Answer them; the rest flow through as slots free up.
    let mut answered = 0;
    while answered < 10 {
        for (body, responder) in held.drain(..) {
            responder.respond(body).await.expect("respond");
            answered += 1;
        }
        if answered < 10
            && let Ok(Some(Inbound::Request { body, responder })) =
                tokio::time::timeout(Duration::from_secs(2), inbound.recv()).await
        {
            held.push((body, responder));
        }
    }
    for request in requests {
        assert!(request.await.expect("task").is_ok());
    }
    assert_eq!(link.in_flight(), 0);
}

#[tokio::test]
async fn a_request_given_up_is_forgotten_and_its_late_answer_ignored() {
    let mut root = Root::start(fast());
    let identity = enrolled(&root, "edge-1").await;
    let link = link_to(&root, &identity, "edge-1").await.expect("link");
    let LinkEvent::LinkUp { mut inbound, .. } = root.next_link_event().await else {
        panic!("up");
    };
    // The first request is answered late, every later one at once.
    tokio::spawn(async move {
        let mut first = true;
        while let Some(item) = inbound.recv().await {
            if let Inbound::Request { body, responder } = item {
                if first {
                    first = false;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                let _ = responder.respond(body).await;
            }
        }
    });
    let err = link
        .request_within(vec![1], Duration::from_millis(100))
        .await
        .expect_err("no answer in time");
    assert!(matches!(err, LinkError::Timeout(100)), "{err}");
    assert_eq!(link.in_flight(), 0, "the slot is free again");
    assert_eq!(
        link.answers_awaited(),
        0,
        "nothing waits for the late answer"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answer = link
        .request_within(vec![2], Duration::from_secs(5))
        .await
        .expect("the link still answers");
    assert_eq!(answer, vec![2]);
    assert_eq!(link.answers_awaited(), 0);
}

#[tokio::test]
async fn a_peer_that_stops_reading_holds_senders_back_and_loses_nothing() {
    // The root's application does not take what arrives: its inbound queue fills, its
    // reader stops, QUIC's flow control stops this side, its outbox fills, and a send
    // waits. Nothing is dropped: once the root reads, every message arrives, in order.
    // The root's application stays behind for longer than the idle timeout: a link whose
    // reader waits for its own application has not heard a silent peer, and stays up.
    let config = LinkConfig {
        inbound_queue_max: 2,
        outbound_bytes_max: 64 << 10,
        ..fast()
    };
    let (_root, _endpoint, link, mut inbound) = linked(&config).await;
    const MESSAGE_BYTES: usize = 256 << 10;
    let mut sent = 0u64;
    loop {
        let mut body = vec![0u8; MESSAGE_BYTES];
        body[..8].copy_from_slice(&sent.to_be_bytes());
        match tokio::time::timeout(Duration::from_millis(500), link.send(body)).await {
            Ok(result) => {
                result.expect("send");
                sent += 1;
            }
            // Held back: the message that timed out was never queued.
            Err(_) => break,
        }
        // QUIC's stream window (8 MiB), the reader's chunk, two queued messages and the
        // outbox bound what may be in the air: 64 messages (16 MiB) would be unbounded.
        assert!(sent < 64, "sends were never held back ({sent} x 256 KiB)");
    }
    assert!(sent >= 4, "held back too early: {sent}");
    tokio::time::sleep(Duration::from_millis(config.idle_timeout_ms + 1_000)).await;
    assert_eq!(
        link.closed_reason(),
        None,
        "the link stayed up while held back"
    );
    let mut received = 0u64;
    while received < sent {
        let item = tokio::time::timeout(Duration::from_secs(10), inbound.recv())
            .await
            .expect("in time")
            .expect("open");
        let Inbound::Message(body) = item else {
            continue;
        };
        assert_eq!(body.len(), MESSAGE_BYTES);
        let mut n = [0u8; 8];
        n.copy_from_slice(&body[..8]);
        assert_eq!(u64::from_be_bytes(n), received, "in order, none lost");
        received += 1;
    }
    link.send(vec![1]).await.expect("sends flow again");
    let item = tokio::time::timeout(Duration::from_secs(10), inbound.recv())
        .await
        .expect("in time")
        .expect("open");
    assert!(matches!(item, Inbound::Message(body) if body == vec![1]));
}

#[tokio::test]
async fn a_dropped_request_fails_instead_of_hanging() {
    let mut root = Root::start(fast());
    let identity = enrolled(&root, "edge-1").await;
    let link = link_to(&root, &identity, "edge-1").await.expect("link");
    let LinkEvent::LinkUp { mut inbound, .. } = root.next_link_event().await else {
        panic!("up");
    };
    tokio::spawn(async move {
        while let Some(item) = inbound.recv().await {
            drop(item);
        }
    });
    let err = link.request(vec![1]).await.expect_err("dropped");
    assert!(err.to_string().contains("unanswered"), "{err}");
}

async fn raw_link(
    root: &Root,
    identity: &Identity,
    name: &str,
) -> (quinn::Endpoint, quinn::Connection, quinn::SendStream) {
    let client = tls::client_config(identity, &fast()).expect("client");
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
    let conn = endpoint
        .connect_with(client, root.addr, palm_transport::SERVER_NAME)
        .expect("connect")
        .await
        .expect("handshake");
    let (mut send, mut recv) = conn.open_bi().await.expect("stream");
    let hello = codec::encode(
        &Frame::<Msg>::Hello(hello(name, Role::Edge, identity.node_id())),
        1 << 20,
    )
    .expect("encode");
    send.write_all(&hello).await.expect("write");
    let mut buf = [0u8; 256];
    let n = recv
        .read(&mut buf)
        .await
        .expect("read")
        .expect("hello back");
    assert!(n > 4);
    (endpoint, conn, send)
}

#[tokio::test]
async fn malformed_oversized_and_unknown_version_frames_close_only_that_link() {
    let mut root = Root::start(fast());
    let identity = enrolled(&root, "edge-1").await;
    let cases: [(&[u8], &str); 3] = [
        (&[0xff, 0xff, 0xff, 0xff], "exceeds frame_len_max"),
        (&[0, 0, 0, 2, 99, 0], "unknown frame version"),
        (&[0, 0, 0, 3, 1, 0xee, 0xee], "malformed frame"),
    ];
    for (bytes, expected) in cases {
        let (_endpoint, conn, mut send) = raw_link(&root, &identity, "edge-1").await;
        assert!(matches!(
            root.next_link_event().await,
            LinkEvent::LinkUp { .. }
        ));
        send.write_all(bytes).await.expect("write garbage");
        let LinkEvent::LinkDown { reason, .. } = root.next_link_event().await else {
            panic!("expected the link down");
        };
        assert!(reason.contains(expected), "{reason}");
        let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed())
            .await
            .expect("closed");
        assert!(closed.to_string().contains(expected), "{closed}");
    }
    // The root is still healthy.
    let link = link_to(&root, &identity, "edge-1")
        .await
        .expect("link after garbage");
    assert_eq!(link.peer().name, "root");
}

#[tokio::test]
async fn garbage_at_the_port_leaves_the_node_healthy() {
    let root = Root::start(fast());
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..500 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = [1, 20, 1200, 1500, (seed % 1400) as usize + 1][i % 5];
        let mut datagram: Vec<u8> = (0..len).map(|j| (seed >> (j % 56)) as u8).collect();
        if i % 3 == 0 {
            datagram[0] = 0xc0 | (datagram[0] & 0x0f); // looks like a QUIC long header
            if len > 5 {
                datagram[1..5].copy_from_slice(&1u32.to_be_bytes()); // version 1
            }
        }
        let _ = socket.send_to(&datagram, root.addr);
    }
    // A QUIC client with the wrong ALPN.
    let mut tls = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(tls::PinnedCaVerifier::new(
            palm_transport::pki::fingerprint(root.authority.ca().cert()),
        )))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic");
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
    let result = endpoint
        .connect_with(
            quinn::ClientConfig::new(Arc::new(crypto)),
            root.addr,
            palm_transport::SERVER_NAME,
        )
        .expect("connect")
        .await;
    let err = result.expect_err("wrong ALPN refused");
    assert!(
        tls::describe_close(&err).contains("no application protocol"),
        "{}",
        tls::describe_close(&err)
    );
    // Still healthy: a child enrolls and links.
    let identity = enrolled(&root, "edge-1").await;
    let link = link_to(&root, &identity, "edge-1").await.expect("link");
    assert_eq!(link.peer().name, "root");
}

#[tokio::test]
async fn the_dialer_reconnects_after_the_parent_restarts() {
    let root = Root::start(fast());
    let identity = enrolled(&root, "edge-1").await;
    let Root {
        authority,
        identity: root_identity,
        listener,
        events: root_events,
        addr,
    } = root;
    let _echo = echo(root_events);
    let (tx, mut events) = mpsc::channel(64);
    let client = tls::client_config(&identity, &fast()).expect("client");
    let dialer = Dialer::spawn::<Msg>(
        addr.to_string(),
        client,
        hello("edge-1", Role::Edge, identity.node_id()),
        fast(),
        tx,
    );
    let link = next_up(&mut events).await;
    assert_eq!(link.request(vec![1, 2]).await.expect("echo"), vec![1, 2]);
    // The parent goes away and comes back on the same port.
    listener.expect("listener").shutdown("restart").await;
    let down = loop {
        match tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
            Ok(Some(LinkEvent::LinkDown { reason, .. })) => break reason,
            Ok(Some(_)) => continue,
            _ => panic!("no link down"),
        }
    };
    assert!(down.contains("restart"), "{down}");
    tokio::time::sleep(Duration::from_millis(300)).await; // a few failed dials
    let restarted = Root::listen(authority, root_identity, addr, fast());
    let _echo = echo(restarted.events);
    let link = next_up(&mut events).await;
    assert_eq!(
        link.request(vec![3]).await.expect("echo after restart"),
        vec![3]
    );
    dialer.stop().await;
}

/// A UDP relay between a child and its parent that can stop forwarding (a dead parent:
/// no close, no reset, just silence).
async fn relay(to: SocketAddr) -> (SocketAddr, Arc<std::sync::atomic::AtomicBool>) {
    let socket = Arc::new(
        tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("relay"),
    );
    let addr = socket.local_addr().expect("addr");
    let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&cut);
    tokio::spawn(async move {
        let upstream = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("up");
        upstream.connect(to).await.expect("connect");
        let mut client: Option<SocketAddr> = None;
        let mut a = [0u8; 2048];
        let mut b = [0u8; 2048];
        loop {
            tokio::select! {
                Ok((n, from)) = socket.recv_from(&mut a) => {
                    client = Some(from);
                    if !flag.load(std::sync::atomic::Ordering::Relaxed) {
                        let _ = upstream.send(&a[..n]).await;
                    }
                }
                Ok(n) = upstream.recv(&mut b) => {
                    if let (Some(c), false) = (client, flag.load(std::sync::atomic::Ordering::Relaxed)) {
                        let _ = socket.send_to(&b[..n], c).await;
                    }
                }
            }
        }
    });
    (addr, cut)
}

#[tokio::test]
async fn a_silent_parent_is_noticed_within_the_idle_timeout() {
    let root = Root::start(fast());
    let identity = enrolled(&root, "edge-1").await;
    let (via, cut) = relay(root.addr).await;
    let client = tls::client_config(&identity, &fast()).expect("client");
    let me = hello("edge-1", Role::Edge, identity.node_id());
    let (_endpoint, link, _inbound) = dial::<Msg>(&via.to_string(), client, &me, &fast())
        .await
        .expect("link via relay");
    tokio::time::sleep(Duration::from_millis(200)).await;
    cut.store(true, std::sync::atomic::Ordering::Relaxed);
    let started = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(6), link.closed())
        .await
        .expect("noticed");
    let took = started.elapsed();
    assert!(
        took <= Duration::from_millis(3_500),
        "took {took:?}: {reason}"
    );
    assert!(
        reason.contains("silent") || reason.contains("timed out"),
        "{reason}"
    );
}

#[tokio::test]
async fn more_children_than_concurrent_handshakes_stay_linked() {
    let config = LinkConfig {
        handshakes_max: 4,
        ..fast()
    };
    let mut root = Root::start(config);
    let mut events = std::mem::replace(&mut root.events, mpsc::channel(1).1);
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let n = 4 + 6;
    let mut links = Vec::new();
    for i in 0..n {
        let name = format!("edge-{i}");
        let identity = enrolled(&root, &name).await;
        links.push(link_to(&root, &identity, &name).await.expect("link"));
    }
    let listener = root.listener.as_ref().expect("listener");
    assert_eq!(listener.children().len(), n);
    assert!(links.iter().all(|l| l.closed_reason().is_none()));
}
