//! Enrollment relayed to the root, and revocations pushed down: how a realm accepts
//! children without holding a CA key.
//!
//! A realm's listener uses a [`RelayGate`]. An enrollment that reaches it (a token and a
//! public key) is forwarded up the realm's parent link as a [`RelayMsg::Enroll`] request;
//! the parent answers with [`answer`]: the root lets its [`crate::Authority`] decide
//! (same checks and refusals as for its own children), a realm in between forwards it
//! further up through its own relay gate. The answer travels back down the same links.
//! Each hop appends its name to [`EnrollRequest::via`] and each parent checks that the
//! list ends with the realm whose link it came on, so the root learns, authenticated
//! hop by hop, under which realm the new node will live.
//!
//! The realm keeps a **child book** (`children.json`): the children it enrolled, by
//! certificate fingerprint, and every revocation the root pushed. A grant is recorded
//! *before* the child receives its certificate, and revocations are recorded before they
//! are used, so a realm restarted without its parent still admits its children and still
//! refuses revoked ones.
//!
//! **Revocations** flow down as a [`RevocationList`] ([`RelayMsg::Revocations`], a
//! one-way message) whenever a realm's link comes up and whenever the root revokes. The
//! list only grows; a realm merges it ([`RelayGate::apply`]) and forwards its merged list
//! to its own child realms. Who sends, closes links and records events is the node's
//! business; this module only decides and remembers.

use crate::gate::{EnrollRequest, Gate, GateFuture, VIA_LEN_MAX};
use crate::link::{Direction, Link, PeerInfo};
use crate::pki::{Fingerprint, PkiError, Role, fingerprint, hex, node_id, write_atomic};
use crate::token::{ChildRecord, EnrollRefusal, Grant, RevocationList, RevokedSet, parse_hex32};
use rustls::pki_types::CertificateDer;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

/// Entries (certificates plus names) a revocation list may hold. Far above real use; it
/// keeps the list inside one frame (32 bytes a certificate, ≤ 65 a name: < 1 MiB).
pub const REVOCATIONS_MAX: usize = 8192;

/// What relays carry on links; the node wraps it in its own message type
/// ([`RelayCarrier`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RelayMsg {
    /// Child realm → parent, a request: enroll a node below that realm.
    Enroll(EnrollRequest),
    /// Parent → child realm, the answer: the certificate the root signed.
    Granted {
        /// The new node's certificate (DER).
        cert: Vec<u8>,
        /// The tree CA's certificate (DER).
        ca: Vec<u8>,
        /// The root's record of the new node.
        child: ChildRecord,
    },
    /// Parent → child realm, the answer: refused, with the deciding node's kind and text.
    Refused {
        /// `forged`, `expired`, `reused`, `revoked`, `invalid`, `internal`, `unavailable`.
        kind: String,
        /// Why, for people.
        reason: String,
    },
    /// Parent → child realm, a message: everything revoked in the tree.
    Revocations(RevocationList),
}

impl RelayMsg {
    /// The answer for a gate's decision.
    pub fn decided(decision: Result<Grant, EnrollRefusal>) -> RelayMsg {
        match decision {
            Ok(grant) => RelayMsg::Granted {
                cert: grant.cert.to_vec(),
                ca: grant.ca.to_vec(),
                child: grant.child,
            },
            Err(refusal) => RelayMsg::Refused {
                kind: refusal.kind().to_owned(),
                reason: refusal.to_string(),
            },
        }
    }

    fn name(&self) -> &'static str {
        match self {
            RelayMsg::Enroll(_) => "enroll",
            RelayMsg::Granted { .. } => "granted",
            RelayMsg::Refused { .. } => "refused",
            RelayMsg::Revocations(_) => "revocations",
        }
    }
}

/// A link message type that can carry [`RelayMsg`]s (the transport is generic over it).
pub trait RelayCarrier: Sized {
    /// Wraps a relay message.
    fn from_relay(msg: RelayMsg) -> Self;
    /// The relay message inside, or the value back when it is something else.
    fn into_relay(self) -> Result<RelayMsg, Self>;
}

impl RelayCarrier for RelayMsg {
    fn from_relay(msg: RelayMsg) -> Self {
        msg
    }

    fn into_relay(self) -> Result<RelayMsg, Self> {
        Ok(self)
    }
}

/// The way up: a relay gate's parent link, whatever its message type.
pub trait Upstream: Send + Sync + 'static {
    /// Sends a request up and waits (at most `timeout`) for the answer.
    fn request(&self, msg: RelayMsg, timeout: Duration) -> GateFuture<Result<RelayMsg, String>>;
    /// False once the link closed.
    fn is_up(&self) -> bool;
}

impl<T> Upstream for Link<T>
where
    T: RelayCarrier + Serialize + DeserializeOwned + Send + 'static,
{
    fn request(&self, msg: RelayMsg, timeout: Duration) -> GateFuture<Result<RelayMsg, String>> {
        let link = self.clone();
        Box::pin(async move {
            match link.request_within(T::from_relay(msg), timeout).await {
                Ok(answer) => T::into_relay(answer).map_err(|_| {
                    "the parent answered with something that is not a relay answer".into()
                }),
                Err(err) => Err(err.to_string()),
            }
        })
    }

    fn is_up(&self) -> bool {
        self.closed_reason().is_none()
    }
}

/// A realm's child book (`children.json`). See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildBook {
    /// Children enrolled here, by certificate fingerprint (hex).
    pub children: BTreeMap<String, ChildRecord>,
    /// Certificates revoked anywhere in the tree (hex), as the root pushed them.
    pub revoked_certificates: BTreeSet<String>,
    /// Names revoked for good, as the root pushed them.
    pub revoked_names: BTreeSet<String>,
}

/// What merging a revocation list changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Certificates newly revoked.
    pub certificates: usize,
    /// Names newly revoked.
    pub names: Vec<String>,
}

impl Applied {
    /// True when nothing was new.
    pub fn is_empty(&self) -> bool {
        self.certificates == 0 && self.names.is_empty()
    }
}

/// A realm's gate: enrollment relayed to the root, admission from the child book. See
/// the module docs.
pub struct RelayGate {
    name: String,
    ca: CertificateDer<'static>,
    book: Mutex<ChildBook>,
    path: Option<PathBuf>,
    revoked: RevokedSet,
    upstream: watch::Sender<Option<Arc<dyn Upstream>>>,
    answer_ms: u64,
}

impl RelayGate {
    /// The gate of realm `name` in the tree whose CA certificate is `ca`, over `book`
    /// persisted to `path` (`None`: in memory, tests). A relayed enrollment is answered
    /// within `answer_ms`, waiting for the parent link if it is down.
    pub fn new(
        name: &str,
        ca: CertificateDer<'static>,
        book: ChildBook,
        path: Option<PathBuf>,
        answer_ms: u64,
    ) -> RelayGate {
        let revoked = revoked_of(&book);
        RelayGate {
            name: name.to_owned(),
            ca,
            book: Mutex::new(book),
            path,
            revoked: Arc::new(RwLock::new(revoked)),
            upstream: watch::Sender::new(None),
            answer_ms,
        }
    }

    /// Loads a child book (empty if the file does not exist).
    pub fn load_book(path: &Path) -> Result<ChildBook, PkiError> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| PkiError::Corrupt {
                path: path.to_owned(),
                detail: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ChildBook::default()),
            Err(source) => Err(PkiError::Io {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// The link relayed enrollments go up (the parent link, each time it comes up).
    pub fn set_upstream(&self, upstream: Option<Arc<dyn Upstream>>) {
        self.upstream.send_replace(upstream);
    }

    /// A copy of the book.
    pub fn book(&self) -> ChildBook {
        self.lock().clone()
    }

    /// Everything this realm knows to be revoked (to forward to its child realms).
    pub fn revocations(&self) -> RevocationList {
        let book = self.lock();
        RevocationList {
            certificates: book
                .revoked_certificates
                .iter()
                .filter_map(|fp| parse_hex32(fp))
                .collect(),
            names: book.revoked_names.iter().cloned().collect(),
        }
    }

    /// Merges a revocation list from the parent, recording it before it takes effect.
    /// The caller then closes the links of revoked children
    /// ([`crate::Listener::close_revoked`]). Blocking (it fsyncs): call off the async
    /// threads.
    pub fn apply(&self, list: &RevocationList) -> Result<Applied, String> {
        let entries = list.certificates.len() + list.names.len();
        if entries > REVOCATIONS_MAX {
            return Err(format!(
                "a revocation list of {entries} entries exceeds {REVOCATIONS_MAX}"
            ));
        }
        let mut book = self.lock();
        let mut next = book.clone();
        let mut applied = Applied::default();
        for fp in &list.certificates {
            if next.revoked_certificates.insert(hex(fp)) {
                applied.certificates += 1;
            }
        }
        for name in &list.names {
            if next.revoked_names.insert(name.clone()) {
                applied.names.push(name.clone());
            }
        }
        if applied.is_empty() {
            return Ok(applied);
        }
        self.persist(&next)?;
        *book = next;
        let revoked = revoked_of(&book);
        *self.revoked.write().unwrap_or_else(|p| p.into_inner()) = revoked;
        info!(
            realm = self.name,
            certificates = applied.certificates,
            names = ?applied.names,
            "applied revocations from the parent"
        );
        Ok(applied)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ChildBook> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn persist(&self, book: &ChildBook) -> Result<(), String> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let bytes = serde_json::to_vec_pretty(book).map_err(|e| e.to_string())?;
        let dir = path.parent().unwrap_or(Path::new("."));
        write_atomic(dir, path, &bytes, false).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Records a child this realm enrolled, durably, before it gets its certificate.
    fn record_child(&self, cert: &Fingerprint, child: ChildRecord) -> Result<(), String> {
        let mut book = self.lock();
        let mut next = book.clone();
        next.children.insert(hex(cert), child);
        self.persist(&next)?;
        *book = next;
        Ok(())
    }

    /// The parent link, once it is up, but not past `deadline`.
    async fn upstream_by(&self, deadline: Instant) -> Option<Arc<dyn Upstream>> {
        let mut watch = self.upstream.subscribe();
        let up = watch.wait_for(|u| u.as_ref().is_some_and(|u| u.is_up()));
        match tokio::time::timeout_at(deadline, up).await {
            Ok(Ok(upstream)) => upstream.clone(),
            _ => None,
        }
    }

    async fn relay(self: Arc<Self>, request: EnrollRequest) -> Result<Grant, EnrollRefusal> {
        if request.via.len() >= VIA_LEN_MAX {
            return Err(EnrollRefusal::Invalid(format!(
                "relayed through more than {VIA_LEN_MAX} realms"
            )));
        }
        // Only this realm's own children go into its book; a request relayed from a
        // realm below passes through.
        let direct = request.via.is_empty();
        let deadline = Instant::now() + Duration::from_millis(self.answer_ms);
        let Some(upstream) = self.upstream_by(deadline).await else {
            return Err(EnrollRefusal::Unavailable(format!(
                "realm `{}` has no link to its parent within {} ms, and enrolling under a \
                 realm needs the way to the root",
                self.name, self.answer_ms
            )));
        };
        let public_key = request.public_key.clone();
        let mut via = request.via;
        via.push(self.name.clone());
        let remaining = deadline.saturating_duration_since(Instant::now());
        let answer = upstream
            .request(
                RelayMsg::Enroll(EnrollRequest {
                    token: request.token,
                    public_key: request.public_key,
                    via,
                }),
                remaining.max(Duration::from_millis(1)),
            )
            .await
            .map_err(|e| {
                EnrollRefusal::Unavailable(format!("realm `{}` asked its parent: {e}", self.name))
            })?;
        match answer {
            RelayMsg::Granted { cert, ca, child } => {
                if fingerprint(&ca) != fingerprint(&self.ca) {
                    return Err(EnrollRefusal::Internal(
                        "the parent answered with another tree's CA".into(),
                    ));
                }
                if child.node_id != node_id(&public_key) {
                    return Err(EnrollRefusal::Internal(
                        "the parent's grant is for another key".into(),
                    ));
                }
                let cert = CertificateDer::from(cert);
                if direct {
                    let gate = Arc::clone(&self);
                    let fp = fingerprint(&cert);
                    let record = child.clone();
                    // Writing the book fsyncs: off the async threads.
                    tokio::task::spawn_blocking(move || gate.record_child(&fp, record))
                        .await
                        .unwrap_or_else(|_| Err("the recording task panicked".into()))
                        .map_err(|e| {
                            warn!(
                                realm = self.name,
                                child = child.name,
                                e,
                                "cannot record a child"
                            );
                            EnrollRefusal::Internal(format!(
                                "the realm cannot record the child: {e}"
                            ))
                        })?;
                }
                Ok(Grant {
                    cert,
                    ca: CertificateDer::from(ca),
                    child,
                })
            }
            RelayMsg::Refused { kind, reason } => Err(EnrollRefusal::Relayed { kind, reason }),
            other => Err(EnrollRefusal::Internal(format!(
                "the parent broke the relay protocol: it answered `{}`",
                other.name()
            ))),
        }
    }
}

/// Fingerprints the verifier refuses: those pushed, and every child of a revoked name.
fn revoked_of(book: &ChildBook) -> HashSet<Fingerprint> {
    let mut revoked: HashSet<Fingerprint> = book
        .revoked_certificates
        .iter()
        .filter_map(|fp| parse_hex32(fp))
        .collect();
    revoked.extend(
        book.children
            .iter()
            .filter(|(_, c)| book.revoked_names.contains(&c.name))
            .filter_map(|(fp, _)| parse_hex32(fp)),
    );
    revoked
}

impl Gate for RelayGate {
    fn enroll(
        self: Arc<Self>,
        request: EnrollRequest,
        _now_ms: u64,
    ) -> GateFuture<Result<Grant, EnrollRefusal>> {
        // The root's clock decides expiry; a realm only carries the request.
        Box::pin(self.relay(request))
    }

    fn admit(&self, cert: &Fingerprint) -> Result<ChildRecord, String> {
        if self.is_revoked(cert) {
            return Err("revoked".into());
        }
        self.lock()
            .children
            .get(&hex(cert))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "certificate {} is not the certificate of a child enrolled at realm `{}`",
                    hex(&cert[..8]),
                    self.name
                )
            })
    }

    fn is_revoked(&self, cert: &Fingerprint) -> bool {
        if self
            .revoked
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(cert)
        {
            return true;
        }
        let book = self.lock();
        book.children
            .get(&hex(cert))
            .is_some_and(|c| book.revoked_names.contains(&c.name))
    }

    fn revoked_set(&self) -> RevokedSet {
        Arc::clone(&self.revoked)
    }
}

/// Answers a relay request that arrived on the link from `from` (a child of this node),
/// letting this node's `gate` decide: the root's authority signs, a realm's relay gate
/// forwards further up. Only a child realm relays, and only for itself: `via` must end
/// with its name.
pub async fn answer(
    gate: Arc<dyn Gate>,
    from: &PeerInfo,
    request: RelayMsg,
    now_ms: u64,
) -> RelayMsg {
    let invalid = |reason: String| RelayMsg::Refused {
        kind: "invalid".into(),
        reason: format!("invalid enrollment request: {reason}"),
    };
    if from.direction != Direction::Child || from.role != Role::Realm {
        return invalid(format!(
            "only a child realm relays enrollments; `{}` is a {} {}",
            from.name,
            from.role,
            from.direction.as_str()
        ));
    }
    let RelayMsg::Enroll(request) = request else {
        return invalid(format!("`{}` is not a relay request", request.name()));
    };
    if request.via.last() != Some(&from.name) {
        return invalid(format!(
            "the relay path {:?} does not end with `{}`, the realm it came from",
            request.via, from.name
        ));
    }
    if request.via.len() > VIA_LEN_MAX {
        return invalid(format!("relayed through more than {VIA_LEN_MAX} realms"));
    }
    let via = request.via.clone();
    let decided = gate.enroll(request, now_ms).await;
    match &decided {
        Ok(grant) => info!(
            child = grant.child.name,
            ?via,
            "enrolled a node through a realm"
        ),
        Err(refusal) => {
            warn!(kind = refusal.kind(), reason = %refusal, ?via, "refused a relayed enrollment")
        }
    }
    RelayMsg::decided(decided)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::TreeCa;

    fn gate(path: Option<PathBuf>) -> (TreeCa, RelayGate) {
        let ca = TreeCa::generate().expect("ca");
        let gate = RelayGate::new(
            "realm-1",
            ca.cert().clone(),
            ChildBook::default(),
            path,
            100,
        );
        (ca, gate)
    }

    fn child(name: &str) -> ChildRecord {
        ChildRecord {
            name: name.into(),
            role: Role::Edge,
            node_id: "n".into(),
            enrolled_ms: 1,
            revoked_ms: None,
            parent: Some("realm-1".into()),
        }
    }

    #[test]
    fn revocations_merge_persist_and_survive_a_reload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("children.json");
        let (ca, gate) = gate(Some(path.clone()));
        let (a, b) = ([1u8; 32], [2u8; 32]);
        gate.record_child(&a, child("edge-1")).expect("record");
        gate.record_child(&b, child("edge-2")).expect("record");
        assert_eq!(gate.admit(&a).expect("admitted").name, "edge-1");
        assert!(gate.admit(&[3; 32]).is_err());
        // By name: every certificate of that name is refused.
        let applied = gate
            .apply(&RevocationList {
                certificates: vec![],
                names: vec!["edge-2".into()],
            })
            .expect("apply");
        assert_eq!(applied.names, vec!["edge-2".to_owned()]);
        assert_eq!(gate.admit(&b), Err("revoked".into()));
        assert!(gate.revoked_set().read().expect("lock").contains(&b));
        // By certificate; merging the same list twice changes nothing.
        let list = RevocationList {
            certificates: vec![a],
            names: vec!["edge-2".into()],
        };
        assert_eq!(gate.apply(&list).expect("apply").certificates, 1);
        assert!(gate.apply(&list).expect("apply").is_empty());
        assert!(gate.is_revoked(&a));
        // Reloaded from disk: the same refusals.
        let reloaded = RelayGate::new(
            "realm-1",
            ca.cert().clone(),
            RelayGate::load_book(&path).expect("book"),
            Some(path),
            100,
        );
        assert!(reloaded.is_revoked(&a) && reloaded.is_revoked(&b));
        assert_eq!(reloaded.revocations().names, vec!["edge-2".to_owned()]);
    }

    #[test]
    fn an_oversized_revocation_list_is_refused() {
        let (_, gate) = gate(None);
        let list = RevocationList {
            certificates: vec![[0; 32]; REVOCATIONS_MAX + 1],
            names: vec![],
        };
        assert!(gate.apply(&list).is_err());
        assert!(gate.revocations().certificates.is_empty());
    }

    #[tokio::test]
    async fn only_a_child_realm_relays_and_only_for_itself() {
        let authority = Arc::new(crate::Authority::new(
            TreeCa::generate().expect("ca"),
            crate::TrustBook::default(),
            None,
        ));
        let token = authority
            .create_token("edge-1", Role::Edge, 60_000, 0)
            .expect("token")
            .encode();
        let key = crate::Identity::generate_key()
            .expect("key")
            .public_key_raw()
            .to_vec();
        let peer = |role, direction| PeerInfo {
            name: "realm-1".into(),
            role,
            node_id: "n".into(),
            addr: "127.0.0.1:1".parse().expect("addr"),
            direction,
        };
        let request = |via: &[&str]| {
            RelayMsg::Enroll(EnrollRequest {
                token: token.clone(),
                public_key: key.clone(),
                via: via.iter().map(|v| (*v).to_owned()).collect(),
            })
        };
        let gate: Arc<dyn Gate> = authority.clone();
        for (from, msg, expected) in [
            (
                peer(Role::Edge, Direction::Child),
                request(&["realm-1"]),
                "only a child realm",
            ),
            (
                peer(Role::Realm, Direction::Parent),
                request(&["realm-1"]),
                "only a child realm",
            ),
            (
                peer(Role::Realm, Direction::Child),
                request(&["realm-9"]),
                "does not end with",
            ),
            (
                peer(Role::Realm, Direction::Child),
                request(&[]),
                "does not end with",
            ),
            (
                peer(Role::Realm, Direction::Child),
                RelayMsg::Revocations(RevocationList::default()),
                "not a relay request",
            ),
        ] {
            match answer(Arc::clone(&gate), &from, msg, 1).await {
                RelayMsg::Refused { kind, reason } => {
                    assert_eq!(kind, "invalid");
                    assert!(reason.contains(expected), "{reason}");
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
        // Nothing was consumed; the honest request is granted, under realm-1.
        let from = peer(Role::Realm, Direction::Child);
        match answer(gate, &from, request(&["realm-1"]), 1).await {
            RelayMsg::Granted { child, .. } => {
                assert_eq!(child.parent.as_deref(), Some("realm-1"))
            }
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn without_a_parent_link_enrollment_is_unavailable() {
        let (_, gate) = gate(None);
        let request = EnrollRequest {
            token: "palm1.x".into(),
            public_key: vec![4; 65],
            via: vec![],
        };
        let refusal = Arc::new(gate)
            .enroll(request, 0)
            .await
            .expect_err("unavailable");
        assert_eq!(refusal.kind(), "unavailable");
        assert!(
            refusal.to_string().contains("no link to its parent"),
            "{refusal}"
        );
    }
}
