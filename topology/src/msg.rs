//! The protocol a parent–child link carries (inside the transport's frames, postcard
//! encoded): summaries up, parent identity down, control requests forwarded towards a
//! job's home and answered back, and placed effects with their leases and outcomes.
//!
//! Every exchange that expects an answer carries an `id` chosen by the node that asks;
//! the answer names the same `id`. Messages are one-way frames, so the correlation, the
//! deadlines and the retries all live in one place: [`crate::HopCore`].
//!
//! Control requests and answers travel as JSON text ([`Json`]): this crate does not know
//! the node's control protocol. A forwarded request carries the little the hops need to
//! route it ([`Toward`]) and to keep a projection of the answer (`view_of`).

use palm_actors::bt::Outcome;
use palm_actors::json::Json;
use palm_actors::path::ClaimedEffect;
use serde::{Deserialize, Serialize};

/// Bound on the nodes one summary describes (the sender and its whole subtree).
pub const SUMMARY_NODES_MAX: usize = 4_096;

/// What a node and its subtree offer, sent by a child to its parent.
///
/// A tree in memory, but flat on the wire ([`FlatSummary`]: a list with parent
/// indices), so decoding a frame never recurses: a crafted deep subtree cannot overflow
/// the stack. Decoding checks the bounds — at most [`SUMMARY_NODES_MAX`] nodes, at most
/// [`crate::HOPS_MAX`] levels — and fails the frame (closing that link) past them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "FlatSummary", try_from = "FlatSummary")]
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

/// One node of a [`FlatSummary`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryNode {
    /// Index of its parent in the list; `None` for the sender (the first node only).
    pub parent: Option<u32>,
    /// Node name.
    pub name: String,
    /// Role.
    pub role: String,
    /// Store tag.
    pub tag: String,
    /// Needs ready there now.
    pub ready: Vec<String>,
    /// Seats.
    pub seats: u32,
    /// Seats busy.
    pub busy: u32,
    /// When its summary was made (ms, its clock).
    pub at_ms: u64,
}

/// A [`Summary`] as it travels: its nodes in preorder, each naming its parent's index
/// (always an earlier one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlatSummary {
    /// The sender first, then its subtree in preorder.
    pub nodes: Vec<SummaryNode>,
}

impl From<Summary> for FlatSummary {
    fn from(summary: Summary) -> FlatSummary {
        let mut nodes = Vec::new();
        // Preorder with an explicit stack: children are pushed in reverse so they come
        // out in order.
        let mut stack = vec![(None, summary)];
        while let Some((parent, node)) = stack.pop() {
            let at = nodes.len() as u32;
            let Summary {
                name,
                role,
                tag,
                ready,
                seats,
                busy,
                subtree,
                at_ms,
            } = node;
            nodes.push(SummaryNode {
                parent,
                name,
                role,
                tag,
                ready,
                seats,
                busy,
                at_ms,
            });
            stack.extend(subtree.into_iter().rev().map(|child| (Some(at), child)));
        }
        FlatSummary { nodes }
    }
}

impl TryFrom<FlatSummary> for Summary {
    type Error = String;

    fn try_from(flat: FlatSummary) -> Result<Summary, String> {
        let count = flat.nodes.len();
        if count == 0 {
            return Err("a summary with no node".to_owned());
        }
        if count > SUMMARY_NODES_MAX {
            return Err(format!(
                "a summary of {count} nodes (at most {SUMMARY_NODES_MAX})"
            ));
        }
        let mut depth = vec![0u32; count];
        let mut built: Vec<Option<Summary>> = Vec::with_capacity(count);
        let mut parents = Vec::with_capacity(count);
        for (i, node) in flat.nodes.into_iter().enumerate() {
            match (i, node.parent) {
                (0, None) => {}
                (0, Some(_)) => return Err("the summary's first node has a parent".to_owned()),
                (_, Some(p)) if (p as usize) < i => {
                    depth[i] = depth[p as usize] + 1;
                    if depth[i] > crate::HOPS_MAX {
                        return Err(format!("a summary deeper than {} levels", crate::HOPS_MAX));
                    }
                }
                (_, parent) => {
                    return Err(format!(
                        "summary node {i} names parent {parent:?}, not an earlier node"
                    ));
                }
            }
            parents.push(node.parent);
            built.push(Some(Summary {
                name: node.name,
                role: node.role,
                tag: node.tag,
                ready: node.ready,
                seats: node.seats,
                busy: node.busy,
                subtree: Vec::new(),
                at_ms: node.at_ms,
            }));
        }
        // Children come after their parent: attach from the last, each one complete by
        // the time it moves (its own children, later still, already attached).
        for i in (1..count).rev() {
            let mut node = built[i].take().expect("each node moves once");
            node.subtree.reverse();
            let parent = parents[i].expect("checked above") as usize;
            if let Some(parent) = built[parent].as_mut() {
                parent.subtree.push(node);
            }
        }
        let mut root = built[0].take().expect("the first node");
        root.subtree.reverse();
        Ok(root)
    }
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

    /// The node called `name` in this subtree, itself included.
    pub fn find(&self, name: &str) -> Option<&Summary> {
        if self.name == name {
            return Some(self);
        }
        self.subtree.iter().find_map(|child| child.find(name))
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

/// Where a forwarded request is going.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Toward {
    /// The home of this job (the node whose store tag prefixes its id).
    Job(String),
    /// The nearest node that homes new jobs: this node unless it is an edge, else up.
    NewHome,
    /// The node of this name, which must home jobs (a root or a realm): a submit that
    /// asks for a home of its choosing (`palm submit --node`, the `palm` provider's
    /// `node`). Found down through the children's summaries, else up.
    Node(String),
}

/// The answer a forwarded request gets, whichever node gave it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// The home applied the request: its response, verbatim.
    Home(Json),
    /// The way home is cut at node `at`. `view` is the last answer from the home that
    /// node relayed about the job, if it kept one: a projection, to be served marked
    /// invalid, never as the home's word.
    Unreachable {
        /// The node where the way was cut.
        at: String,
        /// Why.
        reason: String,
        /// Since when that node has not reached the job's home (ms), if it knows.
        since: Option<u64>,
        /// The last answer from the home `at` relayed about the job.
        view: Option<Json>,
    },
    /// The request travelled [`crate::HOPS_MAX`] hops without reaching its home.
    TooFar {
        /// Hops travelled.
        hops: u32,
    },
    /// Node `at` refused to carry or apply the request (`crate::authority`).
    Refused {
        /// The node that refused it.
        at: String,
        /// Why.
        reason: String,
    },
}

/// A home's verdict on a renewal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RenewVerdict {
    /// Renewed until this time (ms, the home's clock).
    Until(u64),
    /// Refused: the claim is no longer the holder's (stop the effect).
    Refused(String),
    /// No verdict: the way home is cut (keep going while the lease lasts).
    Unknown(String),
}

/// A home's verdict on an outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompleteVerdict {
    /// Recorded, durably.
    Recorded,
    /// Refused (a stale token, a completion already recorded): do not report it again.
    Refused(String),
    /// Not delivered: the way home is cut (report it again later).
    Unreachable(String),
}

/// One message of the topology protocol.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TopoMsg {
    /// Child → parent: the child's summary.
    Summary(Summary),
    /// Parent → child: who the parent is.
    Parent(ParentInfo),
    /// A control request on its way to a home; answered by `Answer` with the same id.
    Forward {
        /// Chosen by the sender.
        id: u64,
        /// Where it goes.
        toward: Toward,
        /// The job whose view the answer carries (a status): the hops keep it as a
        /// projection.
        view_of: Option<String>,
        /// The control request, as JSON.
        request: Json,
        /// Links travelled so far (bounded by [`crate::HOPS_MAX`]).
        hops: u32,
        /// How long the sender waits for the answer (ms).
        within_ms: u64,
    },
    /// The answer to `Forward`.
    Answer {
        /// The `Forward`'s id.
        id: u64,
        /// What came back.
        reply: Reply,
    },
    /// Parent → child: run this effect (claimed at home under a lease), or pass it on to
    /// a child of yours that can.
    Place {
        /// Chosen by the sender.
        id: u64,
        /// The claim: key, token, lease, request.
        effect: ClaimedEffect,
        /// The home that placed it.
        home: String,
    },
    /// The answer to `Place`.
    Placed {
        /// The `Place`'s id.
        id: u64,
        /// False when the child cannot take it (busy, a need not ready in its subtree).
        accepted: bool,
        /// Why not.
        reason: Option<String>,
    },
    /// Child → parent: extend a placed effect's lease (routed up to its home).
    Renew {
        /// Chosen by the sender.
        id: u64,
        /// Effect key.
        key: String,
        /// Fencing token.
        token: u64,
    },
    /// The answer to `Renew` (durable at home when it says `Until`).
    Renewed {
        /// The `Renew`'s id.
        id: u64,
        /// The verdict.
        verdict: RenewVerdict,
    },
    /// Child → parent: a placed effect's outcome (routed up to its home).
    Complete {
        /// Chosen by the sender.
        id: u64,
        /// Effect key.
        key: String,
        /// Fencing token.
        token: u64,
        /// What happened.
        outcome: Outcome,
        /// The node that ran it.
        node: String,
    },
    /// The answer to `Complete` (durable at home when it says `Recorded`).
    Completed {
        /// The `Complete`'s id.
        id: u64,
        /// The verdict.
        verdict: CompleteVerdict,
    },
    /// Parent → child: stop a placed effect (halted, lease lost). Names the claim, so a
    /// late cancel of an old claim never stops a newer one of the same key.
    Cancel {
        /// Effect key.
        key: String,
        /// Fencing token of the claim to stop.
        token: u64,
    },
}

impl TopoMsg {
    /// A short name for logs and traces.
    pub fn kind(&self) -> &'static str {
        match self {
            TopoMsg::Summary(_) => "summary",
            TopoMsg::Parent(_) => "parent",
            TopoMsg::Forward { .. } => "forward",
            TopoMsg::Answer { .. } => "answer",
            TopoMsg::Place { .. } => "place",
            TopoMsg::Placed { .. } => "placed",
            TopoMsg::Renew { .. } => "renew",
            TopoMsg::Renewed { .. } => "renewed",
            TopoMsg::Complete { .. } => "complete",
            TopoMsg::Completed { .. } => "completed",
            TopoMsg::Cancel { .. } => "cancel",
        }
    }
}
