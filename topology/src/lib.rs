//! palm-topology: the home tree as a deterministic core.
//!
//! Truth climbs home: every job has exactly one home — the node whose store tag prefixes
//! its id — and only that node commits its events. Requests about a job travel to its
//! home hop by hop ([`Topology::route_job`]): down into the child whose subtree holds the
//! tag, else up to the parent. A submit at an edge goes up (edges are never homes); a
//! realm or the root homes what is submitted there.
//!
//! Work spreads out: a home runs an effect locally when its own needs are ready, else
//! places it on a node of its subtree that offers every need and has a free seat
//! ([`Topology::placement_targets`], policy: prefer local, then the node with the most
//! free seats, then the nearer, ties by name; no stickiness). The effect travels down
//! with its lease — through the direct child on the way, which relays it to its own
//! child ([`Topology::place`] picks among direct children) — and renewals and the
//! completion travel up hop by hop, routed by the job's tag, to be recorded at home
//! under the idempotency key.
//!
//! Projections: a node's view of its parent's truth is valid only while the link to the
//! parent is up; when it drops, answers built from it say `"projection": "invalid"` with
//! the time home became unreachable ([`Topology::projection`]).
//!
//! Nothing here touches a socket or a clock: links come and go through `handle_*`
//! calls with an explicit `now`; the node shell (and the simulator) carry messages.

pub mod authority;
pub mod hop;
pub mod msg;

#[cfg(feature = "mutations")]
pub use hop::HopMutation;
pub use hop::{
    CHILD_HOLDER_PREFIX, Direction, HopConfig, HopCore, HopEvent, HopOutput, LocalFacts,
    RouteRequest, Routed, child_holder, job_of_key,
};
pub use msg::{
    CompleteVerdict, FlatSummary, ParentInfo, RenewVerdict, Reply, SUMMARY_NODES_MAX, Summary,
    SummaryNode, TopoMsg, Toward,
};

use palm_actors::json::Json;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Bound on a node's direct children (every child it ever linked with is remembered, for
/// routing to the jobs homed under it): beyond it, a new child's link is closed with the
/// reason, and the tree grows through realms instead.
pub const CHILDREN_MAX: usize = 4_096;

/// Bound on forwarding hops: a request further than this from its home is refused (a
/// tree deeper than this is a configuration error, a loop is a bug).
pub const HOPS_MAX: u32 = 16;

/// A child's summary older than this (ms) is stale: it is not used for placement.
pub const SUMMARY_STALE_MS: u64 = 10_000;

/// A node's role in the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// One node, no tree.
    AllInOne,
    /// The top of the tree.
    Root,
    /// A home for its sector, with a parent and maybe children.
    Realm,
    /// A leaf that runs placed work and homes nothing.
    Edge,
}

impl Role {
    /// Parses `all-in-one`, `root`, `realm`, `edge`.
    pub fn parse(text: &str) -> Option<Role> {
        Some(match text {
            "all-in-one" => Role::AllInOne,
            "root" => Role::Root,
            "realm" => Role::Realm,
            "edge" => Role::Edge,
            _ => return None,
        })
    }

    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::AllInOne => "all-in-one",
            Role::Root => "root",
            Role::Realm => "realm",
            Role::Edge => "edge",
        }
    }

    /// True when the node homes jobs submitted to it.
    pub fn is_home(self) -> bool {
        !matches!(self, Role::Edge)
    }
}

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// This node is the home.
    Local,
    /// Down to this child.
    Child(String),
    /// Up to the parent.
    Parent,
    /// Nowhere reachable, and why.
    Unreachable(String),
}

/// Where an effect runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On this node's seats.
    Local,
    /// On this child.
    Child(String),
    /// Nowhere now (it waits: blocked on its needs).
    Nowhere,
}

/// Placed effects a node takes per seat beyond its seats, waiting there for a seat: a
/// seat that finishes then finds its next effect waiting instead of idling through the
/// completion's trip home and the next placement's trip down (two hops each way for an
/// edge under a realm). One: an effect waits at most for one other on its seat, and its
/// lease is renewed while it waits as a running one's is.
pub const PLACED_QUEUE_PER_SEAT: u32 = 1;

/// How many placed effects a node with `seats` seats takes at once: its seats and
/// [`PLACED_QUEUE_PER_SEAT`] queue places per seat. A parent places up to this many
/// (`Topology::placement_targets`) and the node accepts up to this many
/// (`HopCore::on_place`): one formula, so the two never disagree.
pub fn takes(seats: u32) -> u32 {
    seats.saturating_mul(1 + PLACED_QUEUE_PER_SEAT)
}

/// A node of the subtree that can take placed work (see
/// [`Topology::placement_targets`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The direct child the effect is sent to (it runs it or relays it down).
    pub via: String,
    /// The node that will run it.
    pub node: String,
    /// Links between the home and that node (1 for a direct child).
    pub hops: u32,
    /// Needs ready on that node.
    pub ready: Vec<String>,
    /// How many more it takes: its free seats and its free queue places.
    pub free: u32,
}

/// What a node knows of its parent's truth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Projection {
    /// The parent (home of what is above).
    pub of: Option<String>,
    /// True while the link to it is up.
    pub valid: bool,
    /// When it became unreachable, if it is.
    pub home_unreachable_since: Option<u64>,
}

#[derive(Clone, Debug, Default)]
struct Peer {
    up: bool,
    since: u64,
    last_heard: u64,
}

#[derive(Clone, Debug, Default)]
struct ParentState {
    name: String,
    link: Peer,
    info: Option<ParentInfo>,
}

#[derive(Clone, Debug, Default)]
struct ChildState {
    link: Peer,
    summary: Option<Summary>,
}

/// See the crate docs.
#[derive(Clone, Debug)]
pub struct Topology {
    name: String,
    role: Role,
    tag: String,
    parent: Option<ParentState>,
    children: BTreeMap<String, ChildState>,
}

/// The tag of a job id (`abcd-17` → `abcd`).
pub fn job_tag(job: &str) -> Option<&str> {
    job.rsplit_once('-')
        .map(|(tag, _)| tag)
        .filter(|t| !t.is_empty())
}

impl Topology {
    /// A node `name` with `role` whose store tag is `tag`; `parent` names its parent.
    pub fn new(name: &str, role: Role, tag: &str, parent: Option<&str>) -> Topology {
        Topology {
            name: name.to_owned(),
            role,
            tag: tag.to_owned(),
            parent: parent.map(|p| ParentState {
                name: p.to_owned(),
                ..ParentState::default()
            }),
            children: BTreeMap::new(),
        }
    }

    /// This node's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// This node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parent's name (its address until a link said otherwise), if any.
    pub fn parent_name(&self) -> Option<&str> {
        self.parent.as_ref().map(|p| p.name.as_str())
    }

    /// True while the link to the parent is up.
    pub fn parent_is_up(&self) -> bool {
        self.parent.as_ref().is_some_and(|p| p.link.up)
    }

    /// True while the link to the child `name` is up.
    pub fn child_is_up(&self, name: &str) -> bool {
        self.children.get(name).is_some_and(|c| c.link.up)
    }

    /// True when `name` has ever linked here as a child.
    pub fn has_child(&self, name: &str) -> bool {
        self.children.contains_key(name)
    }

    /// The link to the parent came up (`peer` is the parent's name) or went down.
    pub fn parent_link(&mut self, now: u64, peer: &str, up: bool) {
        let parent = self.parent.get_or_insert_with(ParentState::default);
        parent.name = peer.to_owned();
        if parent.link.up != up || parent.link.since == 0 {
            parent.link.since = now;
        }
        parent.link.up = up;
        if up {
            parent.link.last_heard = now;
        }
    }

    /// The parent said who it is.
    pub fn parent_info(&mut self, now: u64, info: ParentInfo) {
        if let Some(parent) = self.parent.as_mut() {
            parent.link.last_heard = now;
            parent.info = Some(info);
        }
    }

    /// The link to a child came up or went down.
    pub fn child_link(&mut self, now: u64, child: &str, up: bool) {
        let state = self.children.entry(child.to_owned()).or_default();
        if state.link.up != up || state.link.since == 0 {
            state.link.since = now;
        }
        state.link.up = up;
        if up {
            state.link.last_heard = now;
        }
    }

    /// A child reported its summary.
    pub fn child_summary(&mut self, now: u64, summary: Summary) {
        let state = self.children.entry(summary.name.clone()).or_default();
        state.link.last_heard = now;
        state.summary = Some(summary);
    }

    /// Where a request about `job` goes.
    pub fn route_job(&self, job: &str) -> Route {
        let Some(tag) = job_tag(job) else {
            return Route::Local;
        };
        let holders: Vec<&String> = self
            .children
            .iter()
            .filter(|(_, c)| c.summary.as_ref().is_some_and(|s| s.tags().contains(&tag)))
            .map(|(name, _)| name)
            .collect();
        // Two nodes claiming one tag would make two homes for one job: refuse to guess.
        if (tag == self.tag && !holders.is_empty()) || holders.len() > 1 {
            return Route::Unreachable(format!(
                "job {job}: tag `{tag}` is claimed by more than one node ({})",
                holders
                    .iter()
                    .map(|h| h.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if tag == self.tag {
            return Route::Local;
        }
        for (name, child) in &self.children {
            if child
                .summary
                .as_ref()
                .is_some_and(|s| s.tags().contains(&tag))
            {
                return if child.link.up {
                    Route::Child(name.clone())
                } else {
                    Route::Unreachable(format!(
                        "job {job} is homed under `{name}`, whose link is down since {}",
                        child.link.since
                    ))
                };
            }
        }
        self.up(&format!("job {job}"))
    }

    /// Where a request for the node called `name` goes (a submit that names its home):
    /// here, down to the child whose subtree holds it, else up; at the top of the tree,
    /// nowhere. A node that homes no jobs (an edge) is refused wherever it is found.
    pub fn route_node(&self, name: &str) -> Route {
        let edge = |name: &str| {
            Route::Unreachable(format!(
                "node `{name}` is an edge: it homes no jobs (name its realm, or the root)"
            ))
        };
        if name == self.name {
            return if self.role.is_home() {
                Route::Local
            } else {
                edge(name)
            };
        }
        for (child, state) in &self.children {
            let Some(found) = state.summary.as_ref().and_then(|s| s.find(name)) else {
                continue;
            };
            if !Role::parse(&found.role).is_some_and(Role::is_home) {
                return edge(name);
            }
            return if state.link.up {
                Route::Child(child.clone())
            } else {
                Route::Unreachable(format!(
                    "node `{name}` is under `{child}`, whose link is down since {}",
                    state.link.since
                ))
            };
        }
        match &self.parent {
            Some(_) => self.up(&format!("node `{name}`")),
            None => Route::Unreachable(format!(
                "no node called `{name}` in this tree (as `{}`, its top, last heard of it)",
                self.name
            )),
        }
    }

    /// Where a new job is homed.
    pub fn route_submit(&self) -> Route {
        if self.role.is_home() {
            Route::Local
        } else {
            self.up("a submit (an edge homes no jobs)")
        }
    }

    fn up(&self, what: &str) -> Route {
        match &self.parent {
            Some(parent) if parent.link.up => Route::Parent,
            Some(parent) => Route::Unreachable(format!(
                "{what} needs the parent `{}`, unreachable since {}",
                parent.name, parent.link.since
            )),
            None if self.role == Role::Root || self.role == Role::AllInOne => Route::Local,
            None => Route::Unreachable(format!("{what} needs a parent, and this node has none")),
        }
    }

    /// Where an effect with `requirements` runs: here when every need is ready here
    /// (`locally_ready`), else through the direct child whose subtree holds the best
    /// node that offers them all with a free seat — the same candidates, in the same
    /// order, as a home's [`Topology::placement_targets`], so a relay never refuses what
    /// its parent chose it for because the node that can run it is deeper.
    pub fn place(&self, now: u64, requirements: &[String], locally_ready: bool) -> Placement {
        if locally_ready {
            return Placement::Local;
        }
        self.placement_targets(now)
            .into_iter()
            .find(|target| requirements.iter().all(|need| target.ready.contains(need)))
            .map_or(Placement::Nowhere, |target| Placement::Child(target.via))
    }

    /// Every node of the subtree able to take placed work now, reached through which
    /// direct child, with its ready needs and free seats — the home's placement
    /// candidates, deeper nodes included (multi-hop placement). A node takes up to
    /// [`PLACED_QUEUE_PER_SEAT`] more per seat than it has (they wait there for a seat),
    /// and those count as free here. Order: most free first, then nearer (fewer hops),
    /// then by name. A deep node is trusted as its
    /// direct child last reported it (that summary must be fresh and its link up; a
    /// child only reports the grandchildren it is linked to).
    pub fn placement_targets(&self, now: u64) -> Vec<Target> {
        fn walk(via: &str, summary: &Summary, hops: u32, out: &mut Vec<Target>) {
            let free = takes(summary.seats).saturating_sub(summary.busy);
            if free > 0 {
                out.push(Target {
                    via: via.to_owned(),
                    node: summary.name.clone(),
                    hops,
                    ready: summary.ready.clone(),
                    free,
                });
            }
            if hops < HOPS_MAX {
                for child in &summary.subtree {
                    walk(via, child, hops + 1, out);
                }
            }
        }
        let mut targets = Vec::new();
        for (name, child) in &self.children {
            if !child.link.up || now.saturating_sub(child.link.last_heard) > SUMMARY_STALE_MS {
                continue;
            }
            if let Some(summary) = &child.summary {
                walk(name, summary, 1, &mut targets);
            }
        }
        targets.sort_by(|a, b| {
            b.free
                .cmp(&a.free)
                .then(a.hops.cmp(&b.hops))
                .then_with(|| a.node.cmp(&b.node))
        });
        targets
    }

    /// A placed effect went to `node` (through the direct child `via`): count its seat
    /// as busy until the next summary.
    pub fn placed_on_target(&mut self, via: &str, node: &str) {
        fn bump(summary: &mut Summary, node: &str) -> bool {
            if summary.name == node {
                summary.busy = summary.busy.saturating_add(1);
                return true;
            }
            summary.subtree.iter_mut().any(|child| bump(child, node))
        }
        if let Some(summary) = self.children.get_mut(via).and_then(|c| c.summary.as_mut()) {
            bump(summary, node);
        }
    }

    /// A placed effect finished on `node` (somewhere in the subtree): count its seat as
    /// free again without waiting for the next summary, so the next placement round can
    /// use it at once.
    pub fn completed_on(&mut self, node: &str) {
        fn free(summary: &mut Summary, node: &str) -> bool {
            if summary.name == node {
                summary.busy = summary.busy.saturating_sub(1);
                return true;
            }
            summary.subtree.iter_mut().any(|child| free(child, node))
        }
        for child in self.children.values_mut() {
            if let Some(summary) = child.summary.as_mut()
                && free(summary, node)
            {
                return;
            }
        }
    }

    /// A placed effect went to `child`: count the seat as busy until its next summary.
    pub fn placed_on(&mut self, child: &str) {
        if let Some(summary) = self
            .children
            .get_mut(child)
            .and_then(|c| c.summary.as_mut())
        {
            summary.busy = summary.busy.saturating_add(1);
        }
    }

    /// The validity of this node's view of its parent's truth.
    pub fn projection(&self) -> Projection {
        match &self.parent {
            None => Projection {
                of: None,
                valid: true,
                home_unreachable_since: None,
            },
            Some(parent) => Projection {
                of: Some(parent.name.clone()),
                valid: parent.link.up,
                home_unreachable_since: (!parent.link.up).then_some(parent.link.since),
            },
        }
    }

    /// This node's summary for its parent: its own facts and its children's subtrees.
    pub fn summary(&self, now: u64, ready: Vec<String>, seats: u32, busy: u32) -> Summary {
        Summary {
            name: self.name.clone(),
            role: self.role.as_str().to_owned(),
            tag: self.tag.clone(),
            ready,
            seats,
            busy,
            subtree: self
                .children
                .values()
                .filter(|c| c.link.up)
                .filter_map(|c| c.summary.clone())
                .collect(),
            at_ms: now,
        }
    }

    /// The parent's identity as this node would send it to its children.
    pub fn parent_info_for_children(&self, epoch: u64) -> ParentInfo {
        ParentInfo {
            name: self.name.clone(),
            role: self.role.as_str().to_owned(),
            tag: self.tag.clone(),
            epoch,
        }
    }

    /// The tree as this node sees it (`palm tree`).
    pub fn view(&self, now: u64, me: &Summary) -> Value {
        fn node(summary: &Summary, link: Option<(&str, bool, u64, u64)>) -> Value {
            // A node further down is in its parent's summary only while their link is up;
            // its own summary's time is when it was last heard of (through its parent).
            let below = |sub: &Summary| {
                let mut value = node(sub, None);
                if let Some(object) = value.as_object_mut() {
                    object.insert(
                        "link".into(),
                        json!({
                            "direction": "child",
                            "state": "up",
                            "last_heard": sub.at_ms,
                            "reported_by": summary.name,
                        }),
                    );
                }
                value
            };
            let mut value = json!({
                "name": summary.name,
                "role": summary.role,
                "tag": summary.tag,
                "seats": summary.seats,
                "busy": summary.busy,
                "capabilities": summary.ready,
                "children": summary.subtree.iter().map(below).collect::<Vec<_>>(),
            });
            if let Some((direction, up, since, heard)) = link
                && let Some(object) = value.as_object_mut()
            {
                object.insert(
                    "link".into(),
                    json!({
                        "direction": direction,
                        "state": if up { "up" } else { "down" },
                        "since": since,
                        "last_heard": heard,
                    }),
                );
            }
            value
        }
        let children: Vec<Value> = self
            .children
            .iter()
            .map(|(name, child)| match &child.summary {
                Some(summary) => node(
                    summary,
                    Some(("child", child.link.up, child.link.since, child.link.last_heard)),
                ),
                None => json!({
                    "name": name,
                    "link": {"direction": "child", "state": if child.link.up { "up" } else { "down" },
                             "since": child.link.since, "last_heard": child.link.last_heard},
                    "children": [],
                }),
            })
            .collect();
        let mut me_json = node(me, None);
        if let Some(object) = me_json.as_object_mut() {
            object.insert("children".into(), json!(children));
            object.insert("self".into(), json!(true));
        }
        let projection = self.projection();
        json!({
            "node": self.name,
            "role": self.role.as_str(),
            "at": now,
            "parent": self.parent.as_ref().map(|p| json!({
                "name": p.name,
                "role": p.info.as_ref().map(|i| i.role.clone()),
                "link": {"direction": "parent", "state": if p.link.up { "up" } else { "down" },
                         "since": p.link.since, "last_heard": p.link.last_heard},
            })),
            "projection": {
                "of": projection.of,
                "valid": projection.valid,
                "home_unreachable_since": projection.home_unreachable_since,
            },
            "tree": me_json,
        })
    }
}

/// The last answers from home a node relayed about jobs homed elsewhere: what it serves,
/// marked invalid, while the way home is cut. Bounded: the oldest are forgotten.
#[derive(Clone, Debug, Default)]
pub struct Projections {
    views: std::collections::HashMap<String, Json>,
    order: std::collections::VecDeque<String>,
}

/// Views a node keeps for projections.
pub const PROJECTIONS_MAX: usize = 1_024;

impl Projections {
    /// Keeps the answer the home gave about `job` (the latest replaces the one before).
    pub fn remember(&mut self, job: &str, answer: &Json) {
        if self.views.insert(job.to_owned(), answer.clone()).is_none() {
            self.order.push_back(job.to_owned());
            if self.order.len() > PROJECTIONS_MAX
                && let Some(oldest) = self.order.pop_front()
            {
                self.views.remove(&oldest);
            }
        }
    }

    /// The last answer from home about `job`, if one was kept.
    pub fn view(&self, job: &str) -> Option<&Json> {
        self.views.get(job)
    }
}

#[cfg(test)]
mod tests;
