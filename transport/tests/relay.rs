//! Realms on 127.0.0.1: enrollment relayed through one and two realms to the root,
//! refusals relayed with the root's kind and reason, a realm cut from its root answering
//! `unavailable`, and revocations pushed down the tree (on change and on link up) that
//! cut and then refuse a revoked grandchild.
//!
//! Each node here is a small harness doing what the node's `link_relay` organ does:
//! answer relay requests from child realms through its gate, hand the parent link to
//! its relay gate, merge pushed revocations, close revoked links, forward the list.

use palm_transport::endpoint::{LinkEvent, dial};
use palm_transport::gate::Gate;
use palm_transport::link::{Direction, Inbound};
use palm_transport::relay::{self, ChildBook, RelayGate, RelayMsg};
use palm_transport::tls;
use palm_transport::{
    Authority, Dialer, EnrollError, Hello, Identity, Link, LinkConfig, Listener, RevocationList,
    Role, TreeCa, TrustBook, enroll,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

type Msg = RelayMsg;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

fn fast() -> LinkConfig {
    LinkConfig {
        backoff_ms_min: 50,
        backoff_ms_max: 400,
        ..LinkConfig::default()
    }
}

fn hello(name: &str, role: Role, node_id: String) -> Hello {
    Hello {
        name: name.into(),
        role,
        node_id,
        software: "test".into(),
    }
}

/// What a node's relay organ holds.
struct Organ {
    gate: Arc<dyn Gate>,
    authority: Option<Arc<Authority>>,
    relay: Option<Arc<RelayGate>>,
    listener: Listener<Msg>,
    /// Child links by name (the newest connection).
    children: Mutex<HashMap<String, Link<Msg>>>,
    /// Child realms' links, to push revocations to.
    realms: Mutex<Vec<Link<Msg>>>,
}

impl Organ {
    fn revocations(&self) -> RevocationList {
        match (&self.authority, &self.relay) {
            (Some(authority), _) => authority.revocations(),
            (None, Some(relay)) => relay.revocations(),
            (None, None) => RevocationList::default(),
        }
    }

    async fn push(&self) {
        let list = self.revocations();
        let realms: Vec<Link<Msg>> = self.realms.lock().expect("lock").clone();
        for link in realms.iter().filter(|l| l.closed_reason().is_none()) {
            let _ = link.send(RelayMsg::Revocations(list.clone())).await;
        }
    }
}

async fn organ(organ: Arc<Organ>, mut events: mpsc::Receiver<LinkEvent<Msg>>) {
    while let Some(event) = events.recv().await {
        let LinkEvent::LinkUp { link, inbound } = event else {
            continue;
        };
        let peer = link.peer().clone();
        match peer.direction {
            Direction::Parent => {
                if let Some(relay) = &organ.relay {
                    relay.set_upstream(Some(Arc::new(link.clone())));
                }
            }
            Direction::Child => {
                organ
                    .children
                    .lock()
                    .expect("lock")
                    .insert(peer.name.clone(), link.clone());
                if peer.role == Role::Realm {
                    organ.realms.lock().expect("lock").push(link.clone());
                    let _ = link.send(RelayMsg::Revocations(organ.revocations())).await;
                }
            }
        }
        tokio::spawn(serve(Arc::clone(&organ), peer, inbound));
    }
}

async fn serve(
    organ: Arc<Organ>,
    peer: palm_transport::PeerInfo,
    mut inbound: mpsc::Receiver<Inbound<Msg>>,
) {
    while let Some(item) = inbound.recv().await {
        match item {
            Inbound::Request { body, responder } => {
                let gate = Arc::clone(&organ.gate);
                let peer = peer.clone();
                tokio::spawn(async move {
                    let answer = relay::answer(gate, &peer, body, now_ms()).await;
                    let _ = responder.respond(answer).await;
                });
            }
            Inbound::Message(RelayMsg::Revocations(list)) => {
                if let Some(relay) = &organ.relay {
                    let applied = relay.apply(&list).expect("apply");
                    if !applied.is_empty() {
                        organ.listener.close_revoked();
                        organ.push().await;
                    }
                }
            }
            _ => {}
        }
    }
}

struct Node {
    name: String,
    identity: Arc<Identity>,
    organ: Arc<Organ>,
    addr: SocketAddr,
    _dialer: Option<Dialer>,
}

impl Node {
    fn bind<G: Gate>(
        name: &str,
        role: Role,
        identity: Arc<Identity>,
        gate: Arc<G>,
        authority: Option<Arc<Authority>>,
        relay: Option<Arc<RelayGate>>,
        config: &LinkConfig,
    ) -> (Node, mpsc::Sender<LinkEvent<Msg>>) {
        let (tx, rx) = mpsc::channel(64);
        let me = hello(name, role, identity.node_id());
        let dyn_gate: Arc<dyn Gate> = gate.clone();
        let listener = Listener::bind(
            "127.0.0.1:0".parse().expect("addr"),
            &identity,
            gate,
            me,
            config.clone(),
            tx.clone(),
        )
        .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let organ = Arc::new(Organ {
            gate: dyn_gate,
            authority,
            relay,
            listener,
            children: Mutex::new(HashMap::new()),
            realms: Mutex::new(Vec::new()),
        });
        tokio::spawn(self::organ(Arc::clone(&organ), rx));
        let node = Node {
            name: name.into(),
            identity,
            organ,
            addr,
            _dialer: None,
        };
        (node, tx)
    }

    fn root() -> Node {
        let ca = TreeCa::generate().expect("ca");
        let identity = Arc::new(ca.issue_identity("root").expect("identity"));
        let authority = Arc::new(Authority::new(ca, TrustBook::default(), None));
        let (node, _) = Node::bind(
            "root",
            Role::Root,
            identity,
            Arc::clone(&authority),
            Some(authority),
            None,
            &fast(),
        );
        node
    }

    fn authority(&self) -> &Arc<Authority> {
        self.organ.authority.as_ref().expect("a root")
    }

    fn relay(&self) -> &Arc<RelayGate> {
        self.organ.relay.as_ref().expect("a realm")
    }

    fn token(&self, name: &str, role: Role) -> String {
        self.authority()
            .create_token(name, role, 60_000, now_ms())
            .expect("token")
            .encode()
    }

    fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// A realm enrolled (with a token from `root`) and linked under `parent`, with a
    /// relay gate and a listener of its own.
    async fn realm(root: &Node, parent: &Node, name: &str, config: LinkConfig) -> Node {
        let (identity, _) = enroll(&parent.addr(), &root.token(name, Role::Realm), &config)
            .await
            .expect("realm enrolls");
        let identity = Arc::new(identity);
        let answer_ms = config.handshake_ms_max * 2;
        let gate = Arc::new(RelayGate::new(
            name,
            identity.ca().clone(),
            ChildBook::default(),
            None,
            answer_ms,
        ));
        let (mut node, tx) = Node::bind(
            name,
            Role::Realm,
            Arc::clone(&identity),
            Arc::clone(&gate),
            None,
            Some(gate),
            &config,
        );
        let client = tls::client_config(&identity, &config).expect("client");
        node._dialer = Some(Dialer::spawn::<Msg>(
            parent.addr(),
            client,
            hello(name, Role::Realm, identity.node_id()),
            config,
            tx,
        ));
        assert!(
            eventually(|| parent.child_up(name)).await,
            "{name} links to {}",
            parent.name
        );
        node
    }

    fn child_up(&self, name: &str) -> bool {
        self.organ
            .children
            .lock()
            .expect("lock")
            .get(name)
            .is_some_and(|l| l.closed_reason().is_none())
    }

    fn child(&self, name: &str) -> Option<Link<Msg>> {
        self.organ.children.lock().expect("lock").get(name).cloned()
    }

    /// Revokes at the root as `palm token revoke` does: the book, the root's own links,
    /// then the push to child realms.
    async fn revoke(&self, name: &str) {
        self.authority().revoke(name, now_ms()).expect("revoke");
        self.organ.listener.close_revoked();
        self.organ.push().await;
    }
}

async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// A node enrolled through `at` with `token`, and its link to `at`.
async fn join(at: &Node, token: &str, name: &str) -> (Identity, Link<Msg>) {
    let (identity, granted) = enroll(&at.addr(), token, &fast())
        .await
        .expect("enrolled through the realm");
    assert_eq!(granted.name, name);
    let link = link_to(at, &identity, name)
        .await
        .expect("links to the realm");
    (identity, link)
}

async fn link_to(at: &Node, identity: &Identity, name: &str) -> Result<Link<Msg>, String> {
    let client = tls::client_config(identity, &fast()).expect("client config");
    let me = hello(name, Role::Edge, identity.node_id());
    let (endpoint, link, _inbound) = dial::<Msg>(&at.addr(), client, &me, &fast()).await?;
    // Keep the endpoint alive as long as the link (tests are short).
    std::mem::forget(endpoint);
    Ok(link)
}

fn refusal(result: Result<(Identity, palm_transport::JoinToken), EnrollError>) -> (String, String) {
    match result {
        Err(EnrollError::Refused { kind, reason }) => (kind, reason),
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, got an enrollment"),
    }
}

#[tokio::test]
async fn nodes_enroll_through_one_and_two_realms_and_link_to_their_realm() {
    let root = Node::root();
    let realm = Node::realm(&root, &root, "realm-1", fast()).await;
    let (edge, link) = join(&realm, &root.token("edge-1", Role::Edge), "edge-1").await;
    assert_eq!(link.peer().name, "realm-1");
    assert_eq!(edge.ca(), root.authority().ca().cert());
    // The root signed and knows under which realm the edge lives; the realm's book has it.
    let book = root.authority().book();
    let record = book
        .children
        .values()
        .find(|c| c.name == "edge-1")
        .expect("the root's record");
    assert_eq!(record.parent.as_deref(), Some("realm-1"));
    assert!(
        realm
            .relay()
            .book()
            .children
            .values()
            .any(|c| c.name == "edge-1")
    );
    // One parent per node: the root refuses the edge's certificate on its own port.
    let refused = link_to(&root, &edge, "edge-1").await.expect_err("refused");
    assert!(
        refused.contains("enrolled under realm `realm-1`"),
        "{refused}"
    );

    // Two hops: a realm under the realm, and an edge under that one.
    let deep = Node::realm(&root, &realm, "realm-2", fast()).await;
    let (_, link) = join(&deep, &root.token("edge-2", Role::Edge), "edge-2").await;
    assert_eq!(link.peer().name, "realm-2");
    let book = root.authority().book();
    let record = book
        .children
        .values()
        .find(|c| c.name == "edge-2")
        .expect("the root's record");
    assert_eq!(record.parent.as_deref(), Some("realm-2"));
    assert!(
        deep.relay()
            .book()
            .children
            .values()
            .any(|c| c.name == "edge-2")
    );
    // The realm in between relayed it but does not admit it.
    assert!(
        !realm
            .relay()
            .book()
            .children
            .values()
            .any(|c| c.name == "edge-2")
    );
    let realm_2 = book
        .children
        .values()
        .find(|c| c.name == "realm-2")
        .expect("realm-2");
    assert_eq!(realm_2.parent.as_deref(), Some("realm-1"));
    let _ = deep.identity.node_id();
}

#[tokio::test]
async fn refusals_are_relayed_with_the_roots_kind_and_reason() {
    let root = Node::root();
    let realm = Node::realm(&root, &root, "realm-1", fast()).await;
    let at = realm.addr();
    // Reused.
    let token = root.token("edge-1", Role::Edge);
    enroll(&at, &token, &fast()).await.expect("first use");
    let (kind, reason) = refusal(enroll(&at, &token, &fast()).await);
    assert_eq!(kind, "reused");
    assert!(reason.contains("reused token"), "{reason}");
    // Expired.
    let short = root
        .authority()
        .create_token("edge-2", Role::Edge, 1, now_ms())
        .expect("token")
        .encode();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (kind, reason) = refusal(enroll(&at, &short, &fast()).await);
    assert_eq!(kind, "expired");
    assert!(reason.contains("expired token"), "{reason}");
    // Forged: never issued, and a name altered.
    let mut forged =
        palm_transport::JoinToken::decode(&root.token("edge-3", Role::Edge)).expect("decode");
    forged.id = [0x42; 16];
    let (kind, reason) = refusal(enroll(&at, &forged.encode(), &fast()).await);
    assert_eq!(kind, "forged");
    assert!(reason.contains("never issued"), "{reason}");
    let mut altered =
        palm_transport::JoinToken::decode(&root.token("edge-4", Role::Edge)).expect("decode");
    altered.name = "admin".into();
    let (kind, reason) = refusal(enroll(&at, &altered.encode(), &fast()).await);
    assert_eq!(kind, "forged");
    assert!(reason.contains("altered"), "{reason}");
    // Revoked: a pending token of a revoked name.
    let pending = root.token("edge-5", Role::Edge);
    root.revoke("edge-5").await;
    let (kind, reason) = refusal(enroll(&at, &pending, &fast()).await);
    assert_eq!(kind, "revoked");
    assert!(reason.contains("was revoked"), "{reason}");
    // Nothing refused was recorded at the realm.
    let names: Vec<String> = realm
        .relay()
        .book()
        .children
        .values()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names, vec!["edge-1".to_owned()]);
}

#[tokio::test]
async fn a_realm_cut_from_its_root_answers_unavailable() {
    let root = Node::root();
    // A realm with a certificate of the tree but no parent link at all.
    let (identity, _) = enroll(&root.addr(), &root.token("realm-1", Role::Realm), &fast())
        .await
        .expect("realm enrolls");
    let config = LinkConfig {
        handshake_ms_max: 400,
        ..fast()
    };
    let gate = Arc::new(RelayGate::new(
        "realm-1",
        identity.ca().clone(),
        ChildBook::default(),
        None,
        config.handshake_ms_max * 2,
    ));
    let (realm, _tx) = Node::bind(
        "realm-1",
        Role::Realm,
        Arc::new(identity),
        Arc::clone(&gate),
        None,
        Some(gate),
        &config,
    );
    let started = Instant::now();
    let (kind, reason) =
        refusal(enroll(&realm.addr(), &root.token("edge-1", Role::Edge), &config).await);
    assert_eq!(kind, "unavailable");
    assert!(reason.contains("no link to its parent"), "{reason}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // The token was never seen by the root: it still enrolls at the root directly.
    assert!(
        root.authority()
            .book()
            .tokens
            .values()
            .all(|t| t.used_ms.is_none() || t.name == "realm-1")
    );
}

#[tokio::test]
async fn revocations_flow_down_cut_the_child_and_keep_it_out() {
    let root = Node::root();
    let realm = Node::realm(&root, &root, "realm-1", fast()).await;
    let (_, keep) = join(&realm, &root.token("edge-1", Role::Edge), "edge-1").await;
    let (gone, cut) = join(&realm, &root.token("edge-2", Role::Edge), "edge-2").await;
    assert!(eventually(|| realm.child_up("edge-2")).await);

    root.revoke("edge-2").await;
    let reason = tokio::time::timeout(Duration::from_secs(5), cut.closed())
        .await
        .expect("the realm closes the revoked child's link");
    assert!(reason.contains("revoked"), "{reason}");
    assert!(realm.relay().book().revoked_names.contains("edge-2"));
    // Refused on the next handshake by the realm's TLS verifier.
    let refused = link_to(&realm, &gone, "edge-2").await.expect_err("refused");
    assert!(refused.contains("certificate revoked"), "{refused}");
    // The other child is untouched.
    assert!(keep.closed_reason().is_none());
    assert!(
        realm
            .child("edge-1")
            .is_some_and(|l| l.closed_reason().is_none())
    );

    // Two hops down, and a realm linking after the fact learns on link up.
    let deep = Node::realm(&root, &realm, "realm-2", fast()).await;
    assert!(
        eventually(|| deep.relay().book().revoked_names.contains("edge-2")).await,
        "pushed on link up"
    );
    let (far, far_link) = join(&deep, &root.token("edge-3", Role::Edge), "edge-3").await;
    root.revoke("edge-3").await;
    let reason = tokio::time::timeout(Duration::from_secs(5), far_link.closed())
        .await
        .expect("realm-2 closes edge-3's link");
    assert!(reason.contains("revoked"), "{reason}");
    assert!(realm.relay().book().revoked_names.contains("edge-3"));
    let refused = link_to(&deep, &far, "edge-3").await.expect_err("refused");
    assert!(refused.contains("certificate revoked"), "{refused}");
}
