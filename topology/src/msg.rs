//! The protocol a parent–child link carries (inside the transport's frames, postcard
//! encoded): summaries up, parent identity down, control requests forwarded towards a
//! job's home, and placed effects with their leases and completions.
//!
//! Control requests and answers travel as JSON text ([`Json`]): this crate does not know
//! the node's control protocol, only that a request goes towards a home and an answer
//! comes back.

use palm_actors::bt::Outcome;
use palm_actors::json::Json;
use palm_actors::path::ClaimedEffect;
use serde::{Deserialize, Serialize};

/// What a node and its subtree offer, sent by a child to its parent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Node name.
    pub name: String,
    /// `realm` or `edge` (or `root`).
    pub role: String,
    /// The node's store tag: job ids it is home of start with `TAG-`.
    pub tag: String,
    /// Needs that are ready on this node now (places, capabilities).
    pub ready: Vec<String>,
    /// Seats of the node.
    pub seats: u32,
    /// Seats busy now (local and placed work).
    pub busy: u32,
    /// The node's children, as they reported themselves (recursively).
    pub subtree: Vec<Summary>,
    /// When the summary was made (ms since the epoch, the child's clock).
    pub at_ms: u64,
}

impl Summary {
    /// Every tag in this summary's subtree, itself included.
    pub fn tags(&self) -> Vec<&str> {
        let mut tags = vec![self.tag.as_str()];
        for child in &self.subtree {
            tags.extend(child.tags());
        }
        tags
    }

    /// Nodes in the subtree, itself included.
    pub fn size(&self) -> usize {
        1 + self.subtree.iter().map(Summary::size).sum::<usize>()
    }
}

/// The parent's identity, sent down so a child can speak of its home.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentInfo {
    /// Parent's name.
    pub name: String,
    /// Its role.
    pub role: String,
    /// Its store tag.
    pub tag: String,
    /// Bumped each time the parent boots: a child that sees a new epoch knows its view
    /// of the parent's truth must be refreshed.
    pub epoch: u64,
}

/// One message of the topology protocol.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TopoMsg {
    /// Child → parent (message): the child's summary.
    Summary(Summary),
    /// Parent → child (message): who the parent is.
    Parent(ParentInfo),
    /// A control request on its way to a job's home (request; answered by `Answer`).
    Forward {
        /// The control request, as JSON.
        request: Json,
        /// Hops so far (bounded, so a routing bug cannot loop).
        hops: u32,
    },
    /// The answer to `Forward`.
    Answer {
        /// The control response, as JSON.
        response: Json,
    },
    /// Parent → child (request): run this effect, claimed at home under a lease.
    Place {
        /// The claim: key, token, lease, request.
        effect: ClaimedEffect,
        /// The home that placed it.
        home: String,
    },
    /// The answer to `Place`.
    Placed {
        /// False when the child cannot take it (busy, a need not ready here).
        accepted: bool,
        /// Why not.
        reason: Option<String>,
    },
    /// Child → parent (request): extend a placed effect's lease.
    Renew {
        /// Effect key.
        key: String,
        /// Fencing token.
        token: u64,
    },
    /// The answer to `Renew`: the new expiry, or why not.
    Renewed {
        /// New lease expiry.
        until: Option<u64>,
        /// Why it was refused.
        error: Option<String>,
    },
    /// Child → parent (request): a placed effect's outcome.
    Complete {
        /// Effect key.
        key: String,
        /// Fencing token.
        token: u64,
        /// What happened.
        outcome: Outcome,
        /// The node that ran it.
        node: String,
    },
    /// The answer to `Complete` (durable at home when it arrives).
    Completed {
        /// Why the completion was refused (stale token, not in flight).
        error: Option<String>,
    },
    /// Parent → child (message): stop a placed effect (halted, lease lost).
    Cancel {
        /// Effect key.
        key: String,
    },
}
