//! palm-transport: authenticated, resilient, typed tunnels between Palm nodes.
//!
//! One QUIC connection (quinn, TLS 1.3 via rustls on the ring provider, ALPN `palm/1`)
//! per parent–child link. Frames are postcard-encoded, length-prefixed and versioned
//! ([`codec`]); they are pipelined on one long-lived bidirectional stream with
//! request/response matched by id and a bound on requests in flight ([`link`]).
//!
//! Trust is a tree CA held by the root ([`pki`]): a child joins with a one-time join token
//! ([`token`]) that pins the CA's fingerprint, receives a certificate signed by the CA,
//! and from then on both sides authenticate with mTLS ([`tls`]). Revoked children are
//! refused by the verifier itself.
//!
//! [`endpoint`] puts it together: a [`endpoint::Listener`] that enrolls and admits
//! children, and a [`endpoint::Dialer`] that keeps a child's link to its parent up,
//! reconnecting with capped exponential backoff and jitter, reporting
//! [`endpoint::LinkEvent`]s. A listener leaves trust decisions to its [`gate::Gate`]: the
//! root's [`token::Authority`] or, at a realm, a [`relay::RelayGate`] that relays
//! enrollment to the root over the realm's parent link and keeps a child book and the
//! tree's revocations ([`relay`]).
//!
//! What this crate deliberately does not know: what the frames mean. It is generic over
//! the message type `T` (any serde type); the node wires it to the topology core. It
//! also keeps no journal: link events go to whoever listens (the node records them).

pub mod bench;
pub mod codec;
pub mod config;
pub mod endpoint;
pub mod gate;
pub mod link;
pub mod pki;
pub mod relay;
pub mod tls;
pub mod token;

pub use codec::{CodecError, FRAME_VERSION, Frame, Hello};
pub use config::LinkConfig;
pub use endpoint::{Dialer, EnrollError, LinkEvent, Listener, enroll, parent_addresses};
pub use gate::{EnrollRequest, Gate};
pub use link::{Direction, Inbound, Link, LinkError, PeerInfo, Responder};
pub use pki::{Identity, Role, TreeCa};
pub use relay::{ChildBook, RelayCarrier, RelayGate, RelayMsg};
pub use token::{
    Authority, EnrollRefusal, JoinToken, Mirror, RevocationList, TokenError, TokenRecord,
    TokenState, TrustBook,
};

/// The ALPN protocol id every Palm connection negotiates.
pub const ALPN: &[u8] = b"palm/1";

/// The name every node certificate carries and every client asks for (SNI). Identity is
/// the certificate (its key and the CA's signature), never a host name: nodes move.
pub const SERVER_NAME: &str = "palm.node";
