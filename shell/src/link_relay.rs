//! The relay organ: how a realm accepts children without a CA key, and how revocation
//! reaches the whole tree. It sits beside the tree organ (`link.rs`), on the same links.
//!
//! - **Enrollment relay.** A realm's listener has a [`RelayGate`] (palm-transport): an
//!   enrollment that reaches it goes up the realm's parent link as a relay request, and
//!   the answer comes back down. Here the parent side answers relay requests arriving on
//!   child links ([`relay::answer`]): the root's `Authority` signs, a realm in between
//!   forwards further up through its own gate.
//! - **Child book.** The realm's gate keeps `DATA/tree/children.json`: its children by
//!   certificate fingerprint and the tree's revocations, written before use, so a realm
//!   restarted without its parent admits its children and refuses revoked ones.
//! - **Revocation sync.** The root pushes its [`RevocationList`] to every child realm
//!   when the link comes up and after every `palm token revoke`; a realm merges it
//!   (durably), closes revoked children's links, records the change, and forwards its
//!   merged list to its own child realms.
//!
//! The task serving a link hands each inbound item to [`Relay::sift`], which handles
//! relay frames and gives everything else back, in order, for the link's business.

use crate::exit::CliError;
use crate::genome::now_ms;
use crate::link::Tree;
use crate::wire::TreeMsg;
use palm_transport::endpoint::{LinkEvent, RELAY_ANSWER_HANDSHAKES};
use palm_transport::pki::TreeFiles;
use palm_transport::relay::{self, RelayCarrier};
use palm_transport::{
    Authority, Direction, Gate, Hello, Identity, Inbound, Link, LinkConfig, Listener, PeerInfo,
    RelayGate, RelayMsg, Responder, RevocationList, Role,
};
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::sync::{Semaphore, mpsc};
use tracing::{info, warn};

/// The child book's file in `DATA/tree/`.
pub const CHILD_BOOK_FILE: &str = "children.json";

/// Relay requests answered at once on one node; more are refused as busy (each may wait
/// for the parent link and the root, so they must not pile up without bound).
const RELAYS_IN_FLIGHT_MAX: usize = 32;

impl RelayCarrier for TreeMsg {
    fn from_relay(msg: RelayMsg) -> Self {
        TreeMsg::Relay(msg)
    }

    fn into_relay(self) -> Result<RelayMsg, Self> {
        match self {
            TreeMsg::Relay(msg) => Ok(msg),
            other => Err(other),
        }
    }
}

/// Says so when a realm boots without `--listen` although it has children in its book:
/// they cannot link to it until it listens again.
pub fn warn_if_children_unheard(data: &Path) {
    let path = TreeFiles::new(data).path(CHILD_BOOK_FILE);
    if let Ok(book) = RelayGate::load_book(&path)
        && !book.children.is_empty()
    {
        eprintln!(
            "palm: this realm has {} children in its book but no --listen: they cannot link \
             until it boots with --listen HOST:PORT again",
            book.children.len()
        );
    }
}

/// The relay organ of a root or of a realm that accepts children. See the module docs.
pub struct Relay {
    gate: Arc<dyn Gate>,
    authority: Option<Arc<Authority>>,
    realm: Option<Arc<RelayGate>>,
    /// Links to child realms, by connection id: where revocations are pushed.
    realms: Mutex<HashMap<usize, Link<TreeMsg>>>,
    answering: Arc<Semaphore>,
}

impl Relay {
    fn new(
        gate: Arc<dyn Gate>,
        authority: Option<Arc<Authority>>,
        realm: Option<Arc<RelayGate>>,
    ) -> Arc<Relay> {
        Arc::new(Relay {
            gate,
            authority,
            realm,
            realms: Mutex::new(HashMap::new()),
            answering: Arc::new(Semaphore::new(RELAYS_IN_FLIGHT_MAX)),
        })
    }

    /// The root's organ: its authority decides relayed enrollments.
    pub fn root(authority: Arc<Authority>) -> Arc<Relay> {
        let gate: Arc<dyn Gate> = Arc::clone(&authority) as Arc<dyn Gate>;
        Relay::new(gate, Some(authority), None)
    }

    /// A realm's organ and its listener on `listen`: the relay gate over the child book
    /// in `data`, the TLS verifier over the tree CA and the book's revocations.
    pub fn listen_realm(
        data: &Path,
        hello: Hello,
        identity: &Identity,
        listen: SocketAddr,
        config: &LinkConfig,
        events: mpsc::Sender<LinkEvent<TreeMsg>>,
    ) -> Result<(Arc<Relay>, Listener<TreeMsg>), CliError> {
        let path = TreeFiles::new(data).path(CHILD_BOOK_FILE);
        let book = RelayGate::load_book(&path)
            .map_err(|e| CliError::failure("tree", format!("cannot load the child book: {e}")))?;
        let gate = Arc::new(RelayGate::new(
            &hello.name,
            identity.ca().clone(),
            book,
            Some(path),
            config
                .handshake_ms_max
                .saturating_mul(RELAY_ANSWER_HANDSHAKES),
        ));
        let listener = Listener::bind(
            listen,
            identity,
            Arc::clone(&gate),
            hello,
            config.clone(),
            events,
        )
        .map_err(|e| CliError::failure("listen", e.to_string()))?;
        let dyn_gate: Arc<dyn Gate> = Arc::clone(&gate) as Arc<dyn Gate>;
        Ok((Relay::new(dyn_gate, None, Some(gate)), listener))
    }

    /// Everything this node knows to be revoked.
    pub fn revocations(&self) -> RevocationList {
        match (&self.authority, &self.realm) {
            (Some(authority), _) => authority.revocations(),
            (None, Some(realm)) => realm.revocations(),
            (None, None) => RevocationList::default(),
        }
    }

    /// Sends this node's revocation list to every child realm linked now; returns to how
    /// many. Called after a revocation at the root and after a realm merged new ones.
    pub async fn push_revocations(&self) -> usize {
        let list = self.revocations();
        let links: Vec<Link<TreeMsg>> = self
            .realms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|l| l.closed_reason().is_none())
            .cloned()
            .collect();
        let mut sent = 0;
        for link in links {
            if link
                .send(TreeMsg::Relay(RelayMsg::Revocations(list.clone())))
                .await
                .is_ok()
            {
                sent += 1;
            }
        }
        sent
    }

    /// Takes over a link that just came up: a parent link becomes the relay gate's way
    /// up; a child realm's link gets the revocation list now and on every change. Relay
    /// frames on the link are then taken off its inbound queue by [`Relay::sift`], on the
    /// task that serves the link (no task of its own: every frame through a root or a
    /// realm would pay one more hand-off), and [`Relay::detach`] forgets it at the end.
    pub fn attach(self: &Arc<Self>, link: &Link<TreeMsg>) {
        let peer = link.peer();
        match peer.direction {
            Direction::Parent => {
                if let Some(realm) = &self.realm {
                    realm.set_upstream(Some(Arc::new(link.clone())));
                }
            }
            Direction::Child if peer.role == Role::Realm => {
                self.realms
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(link.connection_id(), link.clone());
                let list = self.revocations();
                let link = link.clone();
                tokio::spawn(async move {
                    let _ = link.send(TreeMsg::Relay(RelayMsg::Revocations(list))).await;
                });
            }
            Direction::Child => {}
        }
    }

    /// Handles `item` from `peer` when it is a relay frame (enrollment, revocations);
    /// gives back anything else, for the tree.
    pub async fn sift(
        self: &Arc<Self>,
        tree: &Arc<Tree>,
        peer: &PeerInfo,
        item: Inbound<TreeMsg>,
    ) -> Option<Inbound<TreeMsg>> {
        match item {
            Inbound::Request { body, responder } => match body.into_relay() {
                Ok(msg) => {
                    self.answer(tree, peer, msg, responder);
                    None
                }
                Err(body) => Some(Inbound::Request { body, responder }),
            },
            Inbound::Message(body) => match body.into_relay() {
                Ok(RelayMsg::Revocations(list)) if peer.direction == Direction::Parent => {
                    self.revoked(tree, list).await;
                    None
                }
                Ok(other) => {
                    warn!(peer = peer.name, ?other, "ignored a relay message");
                    None
                }
                Err(body) => Some(Inbound::Message(body)),
            },
            other => Some(other),
        }
    }

    /// The link [`Relay::attach`] took over is done with.
    pub fn detach(&self, link: &Link<TreeMsg>) {
        self.realms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&link.connection_id());
    }

    fn answer(
        self: &Arc<Self>,
        tree: &Arc<Tree>,
        peer: &PeerInfo,
        msg: RelayMsg,
        responder: Responder<TreeMsg>,
    ) {
        let Ok(slot) = Arc::clone(&self.answering).try_acquire_owned() else {
            let busy = RelayMsg::Refused {
                kind: "unavailable".into(),
                reason: format!(
                    "busy: more than {RELAYS_IN_FLIGHT_MAX} enrollments are being relayed here; try again"
                ),
            };
            tokio::spawn(async move {
                let _ = responder.respond(TreeMsg::Relay(busy)).await;
            });
            return;
        };
        let gate = Arc::clone(&self.gate);
        let tree = Arc::clone(tree);
        let peer = peer.clone();
        tokio::spawn(async move {
            let answer = relay::answer(gate, &peer, msg, now_ms()).await;
            if let RelayMsg::Granted { child, .. } = &answer {
                let event = json!({
                    "event": "enrolled",
                    "peer": child.name,
                    "role": child.role.as_str(),
                    "node_id": child.node_id,
                    "under": child.parent,
                    "via": peer.name,
                });
                let _ = tokio::task::spawn_blocking(move || tree.record(event)).await;
            }
            let _ = responder.respond(TreeMsg::Relay(answer)).await;
            drop(slot);
        });
    }

    /// Revocations from the parent: merge (durably), cut revoked children, record,
    /// forward.
    async fn revoked(self: &Arc<Self>, tree: &Arc<Tree>, list: RevocationList) {
        let Some(realm) = self.realm.clone() else {
            return;
        };
        let applied = tokio::task::spawn_blocking(move || realm.apply(&list))
            .await
            .unwrap_or_else(|_| Err("the revocation task panicked".into()));
        let applied = match applied {
            Ok(applied) if applied.is_empty() => return,
            Ok(applied) => applied,
            Err(err) => {
                // Not applied, not forwarded: the next push (at the latest the next link
                // up) brings the whole list again.
                warn!(err, "cannot apply revocations from the parent");
                return;
            }
        };
        let closed = tree.close_revoked();
        let forwarded = self.push_revocations().await;
        info!(names = ?applied.names, certificates = applied.certificates, closed, forwarded, "revocations from the parent");
        let event = json!({
            "event": "revoked",
            "peer": applied.names.join(","),
            "names": applied.names,
            "certificates": applied.certificates,
            "links_closed": closed,
            "from": "parent",
        });
        let tree = Arc::clone(tree);
        let _ = tokio::task::spawn_blocking(move || tree.record(event)).await;
    }
}
