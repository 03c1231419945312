//! What a tree link carries: [`TreeMsg`], the one frame type of every tunnel between a
//! node and its parent or children (postcard on the wire, via `palm-transport`).
//!
//! A leaf: the tree organ (`crate::link`), the hop host (`crate::hop`) and the enrollment
//! relay (`crate::link_relay`) all speak it, and it depends on none of them.

use serde::{Deserialize, Serialize};

/// The messages links carry.
// Nearly every frame is `Topo`: boxing it would add an allocation to almost every
// message to shrink the rare probe.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TreeMsg {
    /// A probe; answered with itself.
    Probe {
        /// When it was sent (ms since the epoch).
        at_ms: u64,
    },
    /// The topology protocol (`palm_topology::TopoMsg`, hosted by `crate::hop`).
    Topo(palm_topology::TopoMsg),
    /// Enrollment relayed to the root and revocations pushed down (`link_relay.rs`).
    Relay(palm_transport::RelayMsg),
}
