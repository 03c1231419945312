//! The tree organ: this node's tunnels to its parent and children (palm-transport), the
//! board of their states for vitality, and the durable record of link events.
//!
//! `palm up --profile root --listen HOST:PORT` creates the tree CA on first boot
//! (`DATA/tree/`) and accepts children; `--profile realm|edge --parent HOST:PORT --token
//! TOKEN` enrolls on a fresh data directory and later boots reconnect with mTLS, no
//! token. A realm given `--listen HOST:PORT` also accepts children: their enrollment is
//! relayed to the root and revocations come down from it (`link_relay.rs`). The organ
//! runs beside the supervised genome: it has no job logic, and its own loops (the
//! dialer's reconnect, the listener's accept) handle their failures.
//!
//! Every link event (up, down with its reason, enrolled, revoked) is appended to the
//! node's journal (`crate::journal`, bounded, oldest dropped) before it shows on the
//! board; `palm vitality` shows both.
//!
//! Links carry [`TreeMsg`] (`crate::wire`): the tree protocol's messages go to the hop
//! host (`crate::hop`), enrollment and revocations to the relay (`crate::link_relay`).
//! Liveness: QUIC keepalive plus the link's ping/pong and hello.

use crate::exit::CliError;
use crate::genome::{Genome, TreeOrgan, now_ms};
use crate::hop::{Here, Hop};
use crate::journal::NodeJournal;
pub use crate::wire::TreeMsg;
use palm_transport::endpoint::LinkEvent;
use palm_transport::pki::{NodeRecord, TreeCa, TreeFiles, tree_id};
use palm_transport::token::check_name;
use palm_transport::{
    Authority, Dialer, Direction, Hello, Inbound, Link, LinkConfig, Listener, PeerInfo, Role,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// Link events queued between the transport and the board.
const LINK_EVENTS_QUEUE_MAX: usize = 256;

/// What `palm up` asked of the tree.
#[derive(Clone, Debug)]
pub struct TreePlan {
    /// This node's role.
    pub role: Role,
    /// This node's name.
    pub name: String,
    /// What to do.
    pub kind: PlanKind,
}

/// Root or child.
#[derive(Clone, Debug)]
pub enum PlanKind {
    /// Accept children on this address.
    Root {
        /// Where.
        listen: SocketAddr,
    },
    /// Link to the parent (enrolling first if there is a token and no identity yet).
    Child {
        /// `HOST:PORT`.
        parent: String,
        /// The join token, for a first boot.
        token: Option<String>,
        /// A realm accepting children: where (enrollment is relayed to the root).
        listen: Option<SocketAddr>,
    },
}

/// The flags of `palm up` that concern the tree.
pub struct UpTree<'a> {
    /// `--profile`, if given.
    pub profile: Option<&'a str>,
    /// `--listen`.
    pub listen: Option<&'a str>,
    /// `--parent`.
    pub parent: Option<&'a str>,
    /// `--token`.
    pub token: Option<&'a str>,
    /// `--name`, else the config's name.
    pub name: Option<String>,
}

/// The profile and, for tree profiles, the plan. `Ok((profile, None))` is all-in-one.
pub fn plan(data: &Path, up: &UpTree<'_>) -> Result<(String, String, Option<TreePlan>), CliError> {
    let files = TreeFiles::new(data);
    let record = if files.path("node.json").is_file() {
        Some(files.load_record().map_err(|e| {
            CliError::failure("tree", format!("cannot read this node's tree record: {e}"))
        })?)
    } else {
        None
    };
    // No --profile: an enrolled node boots as its record says; a first boot with a join
    // token, as the role the token was issued for (`token create --role`).
    let from_token = match (up.profile, &record, up.token) {
        (None, None, Some(token)) => Some(
            palm_transport::JoinToken::decode(token)
                .map_err(|e| CliError::usage("invalid_token", e.to_string()))?
                .role,
        ),
        _ => None,
    };
    let profile = up
        .profile
        .map(str::to_owned)
        .or_else(|| record.as_ref().map(|r| r.role.as_str().to_owned()))
        .or_else(|| from_token.map(|role| role.as_str().to_owned()))
        .unwrap_or_else(|| "all-in-one".to_owned());
    let usage = |message: String| CliError::usage("invalid_input", message);
    if profile == "all-in-one" {
        for (flag, value, needs) in [
            ("--listen", up.listen, "--profile root"),
            ("--parent", up.parent, "--profile realm|edge"),
            ("--token", up.token, "--profile realm|edge"),
        ] {
            if value.is_some() {
                return Err(usage(format!("{flag} needs {needs}")));
            }
        }
        if let Some(record) = &record {
            return Err(usage(format!(
                "this data directory belongs to {} `{}` of tree {}; run `palm up --profile {}`",
                record.role, record.name, record.tree_id, record.role
            )));
        }
        let name = up
            .name
            .clone()
            .unwrap_or_else(crate::config::default_node_name);
        return Ok((profile, name, None));
    }
    let Some(role) = Role::parse(&profile) else {
        return Err(usage(format!(
            "unknown profile `{profile}`; profiles: all-in-one, root, realm, edge"
        )));
    };
    if let Some(record) = &record
        && record.role != role
    {
        return Err(usage(format!(
            "this data directory belongs to {} `{}`; it cannot boot as {role}",
            record.role, record.name
        )));
    }
    let name_check = |name: &str| {
        check_name(name).map_err(|e| usage(e.to_string()))?;
        if let Some(given) = &up.name
            && given != name
        {
            return Err(usage(format!(
                "--name {given} does not match this node's name `{name}` (from its {})",
                if record.is_some() {
                    "enrollment"
                } else {
                    "token"
                }
            )));
        }
        Ok(())
    };
    match role {
        Role::Root => {
            for (flag, value) in [("--parent", up.parent), ("--token", up.token)] {
                if value.is_some() {
                    return Err(usage(format!("{flag}: a root has no parent")));
                }
            }
            let Some(listen) = up.listen else {
                return Err(usage("--profile root needs --listen HOST:PORT".into()));
            };
            let listen = listen
                .to_socket_addrs()
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(|| usage(format!("--listen `{listen}` is not HOST:PORT")))?;
            let name = match &record {
                Some(record) => record.name.clone(),
                None => up
                    .name
                    .clone()
                    .unwrap_or_else(crate::config::default_node_name),
            };
            if record.is_some() {
                name_check(&name)?;
            } else {
                check_name(&name).map_err(|e| usage(e.to_string()))?;
            }
            Ok((
                profile,
                name.clone(),
                Some(TreePlan {
                    role,
                    name,
                    kind: PlanKind::Root { listen },
                }),
            ))
        }
        Role::Realm | Role::Edge => {
            let listen = match up.listen {
                None => None,
                Some(_) if role == Role::Edge => {
                    return Err(usage(
                        "--listen: an edge is a leaf and accepts no children; boot it as \
                         --profile realm to have children"
                            .into(),
                    ));
                }
                Some(listen) => Some(
                    listen
                        .to_socket_addrs()
                        .ok()
                        .and_then(|mut addrs| addrs.next())
                        .ok_or_else(|| usage(format!("--listen `{listen}` is not HOST:PORT")))?,
                ),
            };
            match &record {
                Some(record) => {
                    name_check(&record.name)?;
                    let parent = up
                        .parent
                        .map(str::to_owned)
                        .or_else(|| record.parent.clone())
                        .ok_or_else(|| usage("--parent HOST:PORT is required".into()))?;
                    if up.token.is_some() {
                        eprintln!(
                            "palm: this node is already enrolled as `{}`; --token is ignored",
                            record.name
                        );
                    }
                    Ok((
                        profile,
                        record.name.clone(),
                        Some(TreePlan {
                            role,
                            name: record.name.clone(),
                            kind: PlanKind::Child {
                                parent,
                                token: None,
                                listen,
                            },
                        }),
                    ))
                }
                None => {
                    let Some(token) = up.token else {
                        return Err(usage(format!(
                            "the first boot of a {role} needs --token TOKEN (`palm token create --name NAME --role {role}` on the root)"
                        )));
                    };
                    let Some(parent) = up.parent else {
                        return Err(usage("--parent HOST:PORT is required".into()));
                    };
                    let decoded = palm_transport::JoinToken::decode(token)
                        .map_err(|e| CliError::usage("invalid_token", e.to_string()))?;
                    if decoded.role != role {
                        return Err(CliError::usage(
                            "invalid_token",
                            format!(
                                "the token is for a {} but this node boots as {role}",
                                decoded.role
                            ),
                        ));
                    }
                    name_check(&decoded.name)?;
                    Ok((
                        profile,
                        decoded.name.clone(),
                        Some(TreePlan {
                            role,
                            name: decoded.name,
                            kind: PlanKind::Child {
                                parent: parent.to_owned(),
                                token: Some(token.to_owned()),
                                listen,
                            },
                        }),
                    ))
                }
            }
        }
    }
}

/// One row of the board.
#[derive(Clone, Debug)]
struct Row {
    peer: String,
    direction: Direction,
    up: bool,
    since: u64,
    role: Option<Role>,
    node_id: Option<String>,
    addr: String,
    reason: Option<String>,
    connection: Option<usize>,
    link: Option<Link<TreeMsg>>,
}

impl Row {
    fn to_json(&self) -> Value {
        json!({
            "peer": self.peer,
            "direction": self.direction.as_str(),
            "state": if self.up { "up" } else { "down" },
            "since": self.since,
            "role": self.role.map(Role::as_str),
            "node_id": self.node_id,
            "addr": self.addr,
            "reason": self.reason,
            "rtt_us": self.link.as_ref().filter(|_| self.up).map(|l| l.rtt().as_micros() as u64),
        })
    }
}

#[derive(Default)]
struct Board {
    parent: Option<Row>,
    children: BTreeMap<String, Row>,
}

/// The node's links, for vitality and for the organs to come (topology).
pub struct Tree {
    /// This node's role.
    pub role: Role,
    /// The tree's id.
    pub tree_id: String,
    /// This node's id.
    pub node_id: String,
    /// The root's authority (tokens, enrollment, revocation).
    pub authority: Option<Arc<Authority>>,
    /// Enrollment relay and revocation sync (a root, a realm with children).
    pub relay: Option<Arc<crate::link_relay::Relay>>,
    listen: Option<SocketAddr>,
    board: Mutex<Board>,
    listener: Mutex<Option<Listener<TreeMsg>>>,
    dialer: Mutex<Option<Dialer>>,
    pump: Mutex<Option<tokio::task::JoinHandle<()>>>,
    journal: NodeJournal,
    /// The topology state: routing, placement, projections (see `crate::hop`).
    pub hop: Hop,
}

impl Tree {
    fn lock(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The `links` array of vitality.
    pub fn links_json(&self) -> Value {
        let board = self.lock();
        let rows: Vec<Value> = board
            .parent
            .iter()
            .chain(board.children.values())
            .map(Row::to_json)
            .collect();
        Value::Array(rows)
    }

    /// The `tree` object of vitality.
    pub fn tree_json(&self) -> Value {
        json!({
            "role": self.role.as_str(),
            "tree_id": self.tree_id,
            "node_id": self.node_id,
            "listen": self.listen.map(|a| a.to_string()),
        })
    }

    /// Closes the links of revoked children; returns how many.
    pub fn close_revoked(&self) -> usize {
        self.listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or(0, Listener::close_revoked)
    }

    /// Records a node event durably (blocking: call off the async threads).
    pub fn record(&self, event: Value) {
        if let Err(err) = self.journal.append(event) {
            warn!(%err, "cannot record a node event");
        }
    }

    /// Stops dialing and listening (peers see `shutdown`), and records the last events.
    pub async fn shutdown(&self) {
        let dialer = self.dialer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(dialer) = dialer {
            dialer.stop().await;
        }
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(listener) = listener {
            listener.shutdown("shutdown").await;
        }
        let pump = self.pump.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(pump) = pump {
            // The pump ends when every sender is gone; give it a moment to record the
            // links' last events.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), pump).await;
        }
    }
}

impl TreeOrgan for Tree {
    fn cancel_placed(&self, child: &str, key: &str, token: u64) {
        self.hop.cancel_placed(child, key, token);
    }

    fn wake(&self) {
        self.hop.wake();
    }

    fn links_json(&self) -> Value {
        Tree::links_json(self)
    }

    fn tree_json(&self) -> Value {
        Tree::tree_json(self)
    }

    fn projection_json(&self) -> Value {
        self.hop.projection_json()
    }

    fn refused_json(&self) -> Value {
        self.hop.refused_json()
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// The tree organ of `genome`, once started (never on an all-in-one node).
pub fn tree_of(genome: &Genome) -> Option<Arc<Tree>> {
    let organ = Arc::clone(genome.tree.get()?);
    organ.into_any().downcast::<Tree>().ok()
}

fn tree_error(what: &str) -> impl Fn(palm_transport::pki::PkiError) -> CliError + '_ {
    move |e| CliError::failure("tree", format!("{what}: {e}"))
}

fn hello(name: &str, role: Role, node_id: String) -> Hello {
    Hello {
        name: name.to_owned(),
        role,
        node_id,
        software: env!("CARGO_PKG_VERSION").to_owned(),
    }
}

/// Loads the root's CA and authority, if this directory holds a tree CA. For a root whose
/// store is shared by replicas (`shared`), the trust book is also committed to that store
/// on every change (see [`crate::tree_store`]).
pub fn open_authority(
    data: &Path,
    shared: Option<Arc<dyn palm_actors::store::Store>>,
) -> Result<Option<Arc<Authority>>, CliError> {
    let files = TreeFiles::new(data);
    if !files.has_ca() {
        return Ok(None);
    }
    let ca = files
        .load_ca()
        .map_err(tree_error("cannot load the tree CA"))?;
    let book_path = files.path("trust.json");
    let book =
        Authority::load_book(&book_path).map_err(tree_error("cannot load the trust book"))?;
    let authority = Authority::new(ca, book, Some(book_path));
    Ok(Some(Arc::new(match shared {
        Some(store) => authority.mirrored(crate::tree_store::mirror(store)),
        None => authority,
    })))
}

/// Starts the tree organ for `plan` on a booted node; requests that reach their home
/// here over the tree are answered by `here` (`crate::node::Node::start_tree` gives the
/// control surface's). A child's first boot enrolls here (with the data directory
/// locked by the node); a refusal is returned as an error.
pub async fn start(
    genome: &Arc<Genome>,
    plan: TreePlan,
    config: LinkConfig,
    here: Here,
) -> Result<Arc<Tree>, CliError> {
    let data = genome.info.data.clone();
    let files = TreeFiles::new(&data);
    let journal = NodeJournal::new(Arc::clone(&genome.store));
    let (tx, events) = mpsc::channel::<LinkEvent<TreeMsg>>(LINK_EVENTS_QUEUE_MAX);
    let tree = match plan.kind {
        PlanKind::Root { listen } => {
            // A replicated root is one root whichever replica serves: its identity comes
            // from the shared store (or, from the first replica, goes into it).
            let shared = genome.store.replicated().then(|| Arc::clone(&genome.store));
            if let Some(store) = &shared {
                crate::tree_store::sync(&**store, &files)?;
            }
            if !files.has_ca() {
                let ca = TreeCa::generate().map_err(tree_error("cannot create the tree CA"))?;
                files
                    .save_ca(&ca)
                    .map_err(tree_error("cannot store the tree CA"))?;
                let identity = ca
                    .issue_identity(&plan.name)
                    .map_err(tree_error("cannot issue the root's certificate"))?;
                files
                    .save_identity(&identity)
                    .map_err(tree_error("cannot store the root's identity"))?;
                files
                    .save_record(&NodeRecord {
                        name: plan.name.clone(),
                        role: Role::Root,
                        parent: None,
                        tree_id: ca.tree_id(),
                    })
                    .map_err(tree_error("cannot store the node record"))?;
                if let Some(store) = &shared {
                    crate::tree_store::save(&**store, &files)?;
                }
                info!(tree = ca.tree_id(), "created the tree CA");
                eprintln!(
                    "palm: created tree {} (CA in {})",
                    ca.tree_id(),
                    files.dir().display()
                );
            }
            let authority = open_authority(&data, shared)?
                .ok_or_else(|| CliError::failure("tree", "the tree CA vanished"))?;
            let identity = files
                .load_identity()
                .map_err(tree_error("cannot load the root's identity"))?;
            let listener = Listener::bind(
                listen,
                &identity,
                Arc::clone(&authority),
                hello(&plan.name, Role::Root, identity.node_id()),
                config,
                tx,
            )
            .map_err(|e| CliError::failure("listen", e.to_string()))?;
            let bound = listener.local_addr();
            Arc::new(Tree {
                role: Role::Root,
                tree_id: authority.ca().tree_id(),
                node_id: identity.node_id(),
                relay: Some(crate::link_relay::Relay::root(Arc::clone(&authority))),
                authority: Some(authority),
                listen: bound,
                board: Mutex::new(Board::default()),
                listener: Mutex::new(Some(listener)),
                dialer: Mutex::new(None),
                pump: Mutex::new(None),
                journal,
                hop: Hop::start(genome, palm_topology::Role::Root, None, here),
            })
        }
        PlanKind::Child {
            parent,
            token,
            listen,
        } => {
            // Until the link is up the parent is known by its address only.
            let parent_name = parent.clone();
            if !files.has_identity() {
                let Some(token) = token else {
                    return Err(CliError::usage(
                        "invalid_input",
                        "this node is not enrolled: pass --token TOKEN",
                    ));
                };
                // Replicas of one parent: enroll with the first that answers.
                let mut enrolled = None;
                for address in palm_transport::parent_addresses(&parent) {
                    let attempt = palm_transport::enroll(&address, &token, &config).await;
                    let done = attempt.is_ok();
                    enrolled = Some(attempt);
                    if done {
                        break;
                    }
                }
                let (identity, granted) = enrolled
                    .unwrap_or_else(|| {
                        Err(palm_transport::EnrollError::Connect {
                            parent: parent.clone(),
                            reason: "no address".into(),
                        })
                    })
                    .map_err(|e| match &e {
                        // A realm could not reach the root: nothing is wrong with the
                        // token, try again later (exit 1, not a usage error).
                        palm_transport::EnrollError::Refused { kind, .. }
                            if kind == "unavailable" =>
                        {
                            CliError::failure("enroll_unavailable", e.to_string())
                        }
                        palm_transport::EnrollError::Refused { .. }
                        | palm_transport::EnrollError::Token(_) => {
                            CliError::usage("enroll_refused", e.to_string())
                        }
                        _ => CliError::failure("enroll", e.to_string()),
                    })?;
                files
                    .save_identity(&identity)
                    .map_err(tree_error("cannot store this node's identity"))?;
                files
                    .save_record(&NodeRecord {
                        name: granted.name.clone(),
                        role: granted.role,
                        parent: Some(parent.clone()),
                        tree_id: tree_id(identity.ca()),
                    })
                    .map_err(tree_error("cannot store the node record"))?;
                let event = json!({"event": "enrolled", "parent": parent, "name": granted.name, "node_id": identity.node_id()});
                let _ = tokio::task::block_in_place(|| journal.append(event));
                eprintln!(
                    "palm: enrolled as {} `{}` in tree {}",
                    granted.role,
                    granted.name,
                    tree_id(identity.ca())
                );
            } else if let Ok(mut record) = files.load_record()
                && record.parent.as_deref() != Some(parent.as_str())
            {
                record.parent = Some(parent.clone());
                files
                    .save_record(&record)
                    .map_err(tree_error("cannot store the node record"))?;
            }
            let identity = files
                .load_identity()
                .map_err(tree_error("cannot load this node's identity"))?;
            let client = palm_transport::tls::client_config(&identity, &config)
                .map_err(|e| CliError::failure("tls", e.to_string()))?;
            // A realm with children listens before it dials, so they can come back
            // while its parent is still away.
            let (relay, listener) = match listen {
                Some(listen) => {
                    let (relay, listener) = crate::link_relay::Relay::listen_realm(
                        &data,
                        hello(&plan.name, plan.role, identity.node_id()),
                        &identity,
                        listen,
                        &config,
                        tx.clone(),
                    )?;
                    (Some(relay), Some(listener))
                }
                None => {
                    if plan.role == Role::Realm {
                        crate::link_relay::warn_if_children_unheard(&data);
                    }
                    (None, None)
                }
            };
            let bound = listener.as_ref().and_then(Listener::local_addr);
            let dialer = Dialer::spawn::<TreeMsg>(
                parent.clone(),
                client,
                hello(&plan.name, plan.role, identity.node_id()),
                config,
                tx,
            );
            Arc::new(Tree {
                role: plan.role,
                tree_id: tree_id(identity.ca()),
                node_id: identity.node_id(),
                authority: None,
                relay,
                listen: bound,
                board: Mutex::new(Board {
                    parent: Some(Row {
                        peer: parent.clone(),
                        direction: Direction::Parent,
                        up: false,
                        since: now_ms(),
                        role: None,
                        node_id: None,
                        addr: parent,
                        reason: Some("connecting".into()),
                        connection: None,
                        link: None,
                    }),
                    children: BTreeMap::new(),
                }),
                listener: Mutex::new(listener),
                dialer: Mutex::new(Some(dialer)),
                pump: Mutex::new(None),
                journal,
                hop: Hop::start(genome, topo_role(plan.role), Some(&parent_name), here),
            })
        }
    };
    let pump = tokio::spawn(pump(Arc::clone(&tree), events));
    *tree.pump.lock().unwrap_or_else(|p| p.into_inner()) = Some(pump);
    if genome
        .tree
        .set(Arc::clone(&tree) as Arc<dyn TreeOrgan>)
        .is_err()
    {
        warn!("the tree organ was started twice");
    }
    Ok(tree)
}

fn up_event(peer: &PeerInfo) -> Value {
    json!({
        "event": "link_up",
        "peer": peer.name,
        "direction": peer.direction.as_str(),
        "role": peer.role.as_str(),
        "node_id": peer.node_id,
        "addr": peer.addr.to_string(),
    })
}

async fn pump(tree: Arc<Tree>, mut events: mpsc::Receiver<LinkEvent<TreeMsg>>) {
    while let Some(event) = events.recv().await {
        match event {
            LinkEvent::LinkUp { link, inbound } => {
                let peer = link.peer().clone();
                if peer.direction == Direction::Child {
                    let board = tree.lock();
                    if !board.children.contains_key(&peer.name)
                        && board.children.len() >= palm_topology::CHILDREN_MAX
                    {
                        drop(board);
                        warn!(
                            child = peer.name,
                            "refusing a child: this node has {} already",
                            palm_topology::CHILDREN_MAX
                        );
                        link.close(&format!(
                            "this node has {} children already (its bound); attach under a realm",
                            palm_topology::CHILDREN_MAX
                        ));
                        continue;
                    }
                }
                // Relay frames (enrollment, revocations) are served by link_relay.rs.
                if let Some(relay) = &tree.relay {
                    relay.attach(&link);
                }
                let record = Arc::clone(&tree);
                let event = up_event(&peer);
                let _ = tokio::task::spawn_blocking(move || record.record(event)).await;
                let row = Row {
                    peer: peer.name.clone(),
                    direction: peer.direction,
                    up: true,
                    since: now_ms(),
                    role: Some(peer.role),
                    node_id: Some(peer.node_id.clone()),
                    addr: peer.addr.to_string(),
                    reason: None,
                    connection: Some(link.connection_id()),
                    link: Some(link.clone()),
                };
                // The hop task hears of the link before the board shows it: a request
                // routed by someone who saw the link up (`vitality`, `tree`) goes through
                // the hop task's inbox after this `LinkUp`, never before it.
                tree.hop
                    .link_up(topo_direction(peer.direction), &link)
                    .await;
                {
                    let mut board = tree.lock();
                    match peer.direction {
                        Direction::Parent => board.parent = Some(row),
                        Direction::Child => {
                            board.children.insert(peer.name.clone(), row);
                        }
                    }
                }
                tokio::spawn(serve(Arc::clone(&tree), link, inbound));
            }
            LinkEvent::LinkDown {
                peer,
                connection,
                reason,
                up_ms,
            } => {
                let event = json!({
                    "event": "link_down",
                    "peer": peer.name,
                    "direction": peer.direction.as_str(),
                    "reason": reason,
                    "up_ms": up_ms,
                });
                let record = Arc::clone(&tree);
                let _ = tokio::task::spawn_blocking(move || record.record(event)).await;
                // The hop task knows which connection is current: a late "down" of a
                // replaced one changes nothing there.
                tree.hop
                    .link_down(&peer.name, topo_direction(peer.direction), connection)
                    .await;
                let mut board = tree.lock();
                let row = match peer.direction {
                    Direction::Parent => board.parent.as_mut(),
                    Direction::Child => board.children.get_mut(&peer.name),
                };
                // A newer connection of the same peer may be up already: leave it.
                if let Some(row) = row
                    && row.connection == Some(connection)
                {
                    row.up = false;
                    row.since = now_ms();
                    row.reason = Some(reason);
                    row.link = None;
                }
            }
            LinkEvent::DialFailed {
                parent,
                attempt,
                reason,
                retry_ms,
            } => {
                if attempt == 1 || attempt.is_multiple_of(20) {
                    warn!(parent, attempt, reason, retry_ms, "cannot reach the parent");
                }
                if let Some(row) = tree.lock().parent.as_mut()
                    && !row.up
                {
                    row.reason = Some(reason);
                }
            }
            LinkEvent::Enrolled { child, addr } => {
                let event = json!({
                    "event": "enrolled",
                    "peer": child.name,
                    "role": child.role.as_str(),
                    "node_id": child.node_id,
                    "addr": addr.to_string(),
                });
                let record = Arc::clone(&tree);
                let _ = tokio::task::spawn_blocking(move || record.record(event)).await;
            }
            LinkEvent::Refused { .. } => {} // logged by the transport
        }
    }
}

/// Serves what a peer sends, on one task per link: relay frames go to the relay (on a
/// root or a realm), probes are answered, topology frames go to the hop task in the order
/// they came.
async fn serve(
    tree: Arc<Tree>,
    link: Link<TreeMsg>,
    mut inbound: mpsc::Receiver<Inbound<TreeMsg>>,
) {
    let peer = link.peer().clone();
    while let Some(item) = inbound.recv().await {
        let item = match &tree.relay {
            Some(relay) => match relay.sift(&tree, &peer, item).await {
                Some(item) => item,
                None => continue,
            },
            None => item,
        };
        match item {
            Inbound::Message(TreeMsg::Topo(body)) => tree.hop.frame(&peer.name, body).await,
            Inbound::Request {
                body: TreeMsg::Topo(body),
                ..
            } => {
                // The tree protocol is one-way frames; a request carrying one is a peer
                // speaking another version. Dropped: its sender's deadline answers it.
                debug!(
                    peer = peer.name,
                    kind = body.kind(),
                    "topology frame sent as a request; dropped"
                );
            }
            Inbound::Request { body, responder } => {
                let _ = responder.respond(body).await;
            }
            Inbound::Message(_) | Inbound::Transfer(_) => {}
        }
    }
    if let Some(relay) = &tree.relay {
        relay.detach(&link);
    }
}

fn topo_direction(direction: Direction) -> palm_topology::Direction {
    match direction {
        Direction::Parent => palm_topology::Direction::Parent,
        Direction::Child => palm_topology::Direction::Child,
    }
}

fn topo_role(role: Role) -> palm_topology::Role {
    match role {
        Role::Root => palm_topology::Role::Root,
        Role::Realm => palm_topology::Role::Realm,
        Role::Edge => palm_topology::Role::Edge,
    }
}
