//! What a run simulates: the seed, the shape of the tree, how hostile the world is, and
//! (feature `mutations` only) which planted bug is switched on.

/// How hostile the world is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Faults {
    /// No faults: a reliable network, no crashes, no hangs.
    None,
    /// Now and then.
    Light,
    /// Often, and all kinds at once.
    Heavy,
}

impl Faults {
    /// Parses `none`, `light`, `heavy`.
    pub fn parse(text: &str) -> Option<Faults> {
        match text {
            "none" => Some(Faults::None),
            "light" => Some(Faults::Light),
            "heavy" => Some(Faults::Heavy),
            _ => None,
        }
    }

    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            Faults::None => "none",
            Faults::Light => "light",
            Faults::Heavy => "heavy",
        }
    }
}

/// How the nodes are arranged. Every node of every shape runs the same cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A root, realms under it, and edges under the root and under every realm (the
    /// default): several homes, requests hopping home, placement one and two hops
    /// down, relays.
    Tree,
    /// One home (the root) with every other node an edge under it.
    Flat,
    /// One line: root ← realm ← realm ← … ← edge. The deepest relays.
    Chain,
}

impl Shape {
    /// Every shape, for help texts.
    pub const ALL: [Shape; 3] = [Shape::Tree, Shape::Flat, Shape::Chain];

    /// Parses `tree`, `flat`, `chain`.
    pub fn parse(text: &str) -> Option<Shape> {
        Shape::ALL.into_iter().find(|shape| shape.as_str() == text)
    }

    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Tree => "tree",
            Shape::Flat => "flat",
            Shape::Chain => "chain",
        }
    }

    /// Each node's role and parent, node 0 the root (alone when `nodes` is 1).
    pub fn layout(self, nodes: usize) -> Vec<(palm_topology::Role, Option<usize>)> {
        use palm_topology::Role;
        let nodes = nodes.max(1);
        let mut layout = vec![(Role::Root, None)];
        match self {
            Shape::Flat => {
                for _ in 1..nodes {
                    layout.push((Role::Edge, Some(0)));
                }
            }
            Shape::Chain => {
                for i in 1..nodes {
                    let role = if i + 1 == nodes {
                        Role::Edge
                    } else {
                        Role::Realm
                    };
                    layout.push((role, Some(i - 1)));
                }
            }
            Shape::Tree => {
                // One realm per four nodes (at least one), then edges dealt in turn to
                // the root and each realm, so both kinds of home have edges.
                let realms = ((nodes - 1) / 4).max(1).min(nodes - 1);
                for _ in 0..realms {
                    layout.push((Role::Realm, Some(0)));
                }
                for i in 0..nodes - 1 - realms {
                    let parent = i % (realms + 1);
                    layout.push((Role::Edge, Some(parent)));
                }
            }
        }
        layout
    }
}

/// A deliberate bug, to prove the simulator catches what it claims to (feature
/// `mutations`). Each lives in the core that would have it: HopCore, HomeHost, JobPath,
/// or the world's set-up.
#[cfg(feature = "mutations")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// A bug planted in HopCore.
    Hop(palm_topology::HopMutation),
    /// Replies are sent before their batch is durable (HomeHost).
    AckBeforeDurable,
    /// The job path accepts completions whatever their fencing token (JobPath).
    SkipFencing,
    /// A realm opens its store under the root's tag, so two nodes commit one job's
    /// events (the world's set-up).
    SharedTag,
    /// `--replicas`: the shared store commits a replica's batch without checking its
    /// lease epoch (FencedStore).
    SkipStoreFence,
}

#[cfg(feature = "mutations")]
impl Mutation {
    /// Every planted bug.
    pub fn all() -> Vec<Mutation> {
        let mut all: Vec<Mutation> = palm_topology::HopMutation::ALL
            .into_iter()
            .map(Mutation::Hop)
            .collect();
        all.extend([
            Mutation::AckBeforeDurable,
            Mutation::SkipFencing,
            Mutation::SharedTag,
            Mutation::SkipStoreFence,
        ]);
        all
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mutation::Hop(hop) => hop.as_str(),
            Mutation::AckBeforeDurable => "ack-before-durable",
            Mutation::SkipFencing => "skip-fencing",
            Mutation::SharedTag => "shared-tag",
            Mutation::SkipStoreFence => "skip-store-fence",
        }
    }

    /// Parses a name from [`Mutation::all`].
    pub fn parse(text: &str) -> Option<Mutation> {
        Mutation::all().into_iter().find(|m| m.as_str() == text)
    }

    /// What the bug does, in a line.
    pub fn describe(self) -> &'static str {
        use palm_topology::HopMutation as H;
        match self {
            Mutation::Hop(H::SameKeyForgotten) => {
                "HopCore forgets which placements it decided: a copy starts a second run"
            }
            Mutation::Hop(H::ReleaseWithoutRefusal) => {
                "HopCore releases a claim whose placement got no answer, as if refused"
            }
            Mutation::Hop(H::DoublePlacementAfterReconnect) => {
                "HopCore places a reconnected child's effects again at once"
            }
            Mutation::Hop(H::RelayTwice) => "HopCore passes every copy of a placement down afresh",
            Mutation::Hop(H::ProjectionAlwaysValid) => {
                "HopCore serves its projection as if the home had answered"
            }
            Mutation::AckBeforeDurable => "HomeHost answers before the batch is durable",
            Mutation::SkipFencing => "JobPath accepts completions under any fencing token",
            Mutation::SharedTag => "a realm opens its store under the root's tag",
            Mutation::SkipStoreFence => {
                "the replicated root's store commits a batch without checking its lease epoch"
            }
        }
    }
}

/// What to simulate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The seed: everything follows from it.
    pub seed: u64,
    /// Nodes in the tree.
    pub nodes: usize,
    /// Client actions (submits, statuses, continues, cancels) in the faulty phase.
    pub steps: u64,
    /// How hostile.
    pub faults: Faults,
    /// Print the trace.
    pub trace: bool,
    /// Virtual time the faulty phase lasts (client actions are spread over it).
    pub fault_ms: u64,
    /// Longest quiet phase (faults healed) before liveness is judged.
    pub quiet_ms: u64,
    /// How the nodes are arranged.
    pub shape: Shape,
    /// The root runs as two replicas over one shared store with a writer's lease.
    pub replicas: bool,
    /// One client submit in four names its home (`--named-homes`). Off by default, so the
    /// seeds CI runs keep the traces (and the planted bugs' catching seeds) they had.
    pub named_homes: bool,
    /// A planted bug.
    #[cfg(feature = "mutations")]
    pub mutation: Option<Mutation>,
}

/// Nodes in the default world: a root, a realm, and four edges — two under each.
pub const NODES_DEFAULT: usize = 6;

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 0,
            nodes: NODES_DEFAULT,
            steps: 200,
            faults: Faults::Heavy,
            trace: false,
            fault_ms: 60_000,
            quiet_ms: 600_000,
            shape: Shape::Tree,
            replicas: false,
            named_homes: false,
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }
}

impl Options {
    /// True when the planted bug `which` is on.
    #[cfg(feature = "mutations")]
    pub fn planted(&self, which: Mutation) -> bool {
        self.mutation == Some(which)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use palm_topology::Role;

    #[test]
    fn the_default_tree_has_edges_under_the_root_and_under_the_realm() {
        let layout = Shape::Tree.layout(NODES_DEFAULT);
        assert_eq!(layout[0], (Role::Root, None));
        assert_eq!(layout[1], (Role::Realm, Some(0)));
        let edges_under = |parent| {
            layout
                .iter()
                .filter(|(role, p)| *role == Role::Edge && *p == Some(parent))
                .count()
        };
        assert_eq!((edges_under(0), edges_under(1)), (2, 2));
    }

    #[test]
    fn shapes_have_one_root_and_every_parent_before_its_child() {
        for shape in Shape::ALL {
            for nodes in 2..12 {
                let layout = shape.layout(nodes);
                assert_eq!(layout.len(), nodes, "{shape:?} {nodes}");
                assert_eq!(layout.iter().filter(|(_, p)| p.is_none()).count(), 1);
                for (i, (_, parent)) in layout.iter().enumerate().skip(1) {
                    let parent = parent.expect("every other node has a parent");
                    assert!(parent < i);
                    assert_ne!(layout[parent].0, Role::Edge, "edges have no children");
                }
            }
        }
        let chain = Shape::Chain.layout(5);
        assert_eq!(chain[4], (Role::Edge, Some(3)));
    }
}
