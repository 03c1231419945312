//! The gate: what a [`crate::Listener`] asks about the nodes it enrolls and admits.
//!
//! A listener does the transport work (TLS, the enrollment exchange, hellos, links) and
//! leaves every trust decision to its gate:
//!
//! - **enroll**: decide an enrollment (token and public key) and return the signed
//!   certificate or the refusal. It is asynchronous because a realm's gate asks the root
//!   over its parent link ([`crate::relay::RelayGate`]); the root's gate is its
//!   [`Authority`], which signs itself (on a blocking thread: it fsyncs the trust book).
//! - **admit**: map a client certificate (already checked by the TLS verifier: signed by
//!   the tree CA, not revoked) to the enrolled child it belongs to, or say why not.
//! - **revoked set**: the fingerprints the TLS verifier refuses on every handshake.
//!
//! One trait, two implementations, so the listener code is the same at the root and at
//! every realm, and the refusals a child sees are the same wherever it joins.

use crate::pki::{Fingerprint, hex};
use crate::token::{Authority, ChildRecord, EnrollRefusal, Grant, RevokedSet};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future a gate returns (the trait is used as `dyn Gate`).
pub type GateFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Realms an enrollment may be relayed through (the tree's depth below the root).
pub const VIA_LEN_MAX: usize = 16;

/// An enrollment as a gate sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollRequest {
    /// The token text.
    pub token: String,
    /// The new node's uncompressed P-256 public key.
    pub public_key: Vec<u8>,
    /// The realms the request came through, the new node's parent first. Empty: the
    /// new node is this gate's own child.
    pub via: Vec<String>,
}

/// Trust decisions for a listener. See the module docs.
pub trait Gate: Send + Sync + 'static {
    /// Decides an enrollment at `now_ms` (ms since the epoch).
    fn enroll(
        self: Arc<Self>,
        request: EnrollRequest,
        now_ms: u64,
    ) -> GateFuture<Result<Grant, EnrollRefusal>>;

    /// The child this certificate belongs to, if it may link here; else why not.
    fn admit(&self, cert: &Fingerprint) -> Result<ChildRecord, String>;

    /// True when the certificate (or its holder's name) is revoked.
    fn is_revoked(&self, cert: &Fingerprint) -> bool;

    /// The revocation set the TLS verifier consults on every handshake.
    fn revoked_set(&self) -> RevokedSet;
}

impl Gate for Authority {
    fn enroll(
        self: Arc<Self>,
        request: EnrollRequest,
        now_ms: u64,
    ) -> GateFuture<Result<Grant, EnrollRefusal>> {
        Box::pin(async move {
            // Enrolling writes the trust book (fsync): off the async threads.
            tokio::task::spawn_blocking(move || {
                self.enroll_under(
                    &request.token,
                    &request.public_key,
                    request.via.first().map(String::as_str),
                    now_ms,
                )
            })
            .await
            .unwrap_or_else(|_| {
                Err(EnrollRefusal::Internal(
                    "the enrollment task panicked".into(),
                ))
            })
        })
    }

    fn admit(&self, cert: &Fingerprint) -> Result<ChildRecord, String> {
        if Authority::is_revoked(self, cert) {
            return Err("revoked".into());
        }
        match self.child(cert) {
            None => Err(format!(
                "certificate {} is not an enrolled child's",
                hex(&cert[..8])
            )),
            // Enrolled through a realm: that realm is its parent (one parent per node).
            Some(child) => match &child.parent {
                Some(realm) => Err(format!(
                    "`{}` was enrolled under realm `{realm}`: it links to that realm",
                    child.name
                )),
                None => Ok(child),
            },
        }
    }

    fn is_revoked(&self, cert: &Fingerprint) -> bool {
        Authority::is_revoked(self, cert)
    }

    fn revoked_set(&self) -> RevokedSet {
        Authority::revoked_set(self)
    }
}
