//! The genome shell: the organs every node runs, hosted as ractor actors on tokio.
//!
//! ```text
//! node supervisor (rest_for_one)
//! ├── places      the place book: spawned/adopted workloads, probes (places.rs)
//! ├── kernel      the job path core + store (kernel.rs)
//! ├── ticker      durable timer wheel and lease reaper (ticker.rs)
//! ├── seats       a one_for_one supervisor of N seats (seats.rs, runner.rs)
//! └── control     the control socket DIR/palm.sock (../control)
//! ```
//!
//! Beside the tree, for the root, realm and edge profiles, runs the tree organ
//! (`crate::link`): the tunnels to the parent and the children. The organs reach it
//! through [`TreeOrgan`], so the genome does not depend on the organ started after it.
//!
//! Organs share one [`Genome`]: node identity, the store, the current kernel, the seat
//! board, the next deadline. A restarted kernel registers itself there, so organs started
//! after it always talk to the live one.

pub mod background;
pub mod desk;
pub mod gated;
pub mod kernel;
pub mod live_groups;
pub mod orphans;
pub mod places;
pub mod probe;
pub mod provider;
pub mod runner;
pub mod seats;
pub mod supervisor;
pub mod ticker;

use kernel::KernelMsg;
use palm_actors::store::Store;
use ractor::ActorRef;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

/// Milliseconds since the Unix epoch: the shell's clock, handed to the cores as `now`.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Who this node is.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// Node name (`--name`, else the host name).
    pub name: String,
    /// Profile (`all-in-one`).
    pub profile: String,
    /// Data directory.
    pub data: PathBuf,
    /// Process id.
    pub pid: u32,
    /// Boot time (ms since the epoch).
    pub started_at: u64,
    /// Whether this node runs inside a CLI command (`palm run`) rather than `palm up`.
    pub embedded: bool,
}

impl NodeInfo {
    /// The identity part of `ping` and `vitality`.
    pub fn to_json(&self) -> Value {
        json!({
            "node": self.name,
            "profile": self.profile,
            "data": self.data.display().to_string(),
            "pid": self.pid,
            "started_at": self.started_at,
            "embedded": self.embedded,
            "version": env!("CARGO_PKG_VERSION"),
        })
    }
}

/// Tunables of a node.
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// Concurrent seats.
    pub seats: usize,
    /// Lease on a claimed effect.
    pub lease_ms: u64,
    /// How long running effects may finish after a stop is asked.
    pub grace_ms: u64,
    /// Bound on captured output per stream (bytes, tail kept).
    pub output_bytes_max: usize,
    /// Capabilities the node offers by itself (config `capabilities:`), always ready.
    pub capabilities: Vec<String>,
    /// Places declared in the config (`places:`).
    pub places: Vec<palm_actors::place::PlaceSpec>,
    /// Provider settings (`providers:`).
    pub providers: provider::ProviderSettings,
    /// How long ended jobs are kept (`retention:`); the kernel collects them hourly.
    pub retention: palm_actors::path::retention::Retention,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            seats: crate::sys::cpus(),
            lease_ms: palm_actors::path::LEASE_MS_DEFAULT,
            grace_ms: 10_000,
            output_bytes_max: 64 * 1024,
            capabilities: Vec::new(),
            places: Vec::new(),
            providers: Default::default(),
            retention: Default::default(),
        }
    }
}

/// Counters for vitality and benchmarks.
#[derive(Default)]
pub struct Stats {
    /// Durable commits made.
    pub commits: AtomicU64,
    /// Writes committed.
    pub writes: AtomicU64,
    /// Bytes committed (keys and values).
    pub bytes: AtomicU64,
    /// Nanoseconds spent committing and flushing: over a run's wall time, how much of it
    /// the store was busy (`palm bench`'s `store_busy`).
    pub commit_nanos: AtomicU64,
    /// When set, a copy of every batch committed (for `palm bench`'s baselines: the
    /// shapes of its commits, and the same batches committed to a bare store).
    pub batches: std::sync::Mutex<Option<Vec<palm_actors::store::WriteBatch>>>,
}

/// What the genome's organs ask of the tree organ (`crate::link::Tree`). A trait
/// because that organ is built on the genome: the kernel and the desk reach it here
/// without depending on it.
pub trait TreeOrgan: Send + Sync {
    /// The home stopped wanting an effect it placed on `child`: tell the child.
    fn cancel_placed(&self, child: &str, key: &str, token: u64);
    /// Work became ready at home: look for placements now.
    fn wake(&self);
    /// The `links` array of vitality.
    fn links_json(&self) -> Value;
    /// The `tree` object of vitality.
    fn tree_json(&self) -> Value;
    /// The `projection` object of vitality.
    fn projection_json(&self) -> Value;
    /// The `refused` object of vitality: frames refused from peers.
    fn refused_json(&self) -> Value;
    /// The organ as itself, for the modules built on its type (`crate::link::tree_of`).
    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;
}

/// State shared by every organ of one node.
pub struct Genome {
    /// Identity.
    pub info: NodeInfo,
    /// Tunables.
    pub settings: NodeSettings,
    /// The store (opened once per process; kernels come and go over it).
    pub store: Arc<dyn Store>,
    /// Seats' shared board.
    pub seats: seats::SeatBoard,
    /// The place book's published readiness and views.
    pub places: places::PlaceBoard,
    /// The providers `call` leaves reach.
    pub providers: provider::Registry,
    /// Next timer or lease deadline, published by the kernel after each commit.
    pub deadline: watch::Sender<Option<u64>>,
    /// Counters.
    pub stats: Stats,
    /// Flips to true when shutdown begins; loops that sleep watch it to stop promptly.
    pub stopping: watch::Sender<bool>,
    /// The tree organ (links to parent and children), for tree profiles; set once
    /// when it starts, after the genome.
    pub tree: std::sync::OnceLock<Arc<dyn TreeOrgan>>,
    /// Work off the actors that shutdown waits for (patches landing).
    pub background: Arc<background::Background>,
    kernel: RwLock<Option<ActorRef<KernelMsg>>>,
    accepting: AtomicBool,
}

impl Genome {
    /// A genome for a node over `store`, whose `call` leaves reach `providers`.
    pub fn new(
        info: NodeInfo,
        settings: NodeSettings,
        store: Arc<dyn Store>,
        providers: provider::Registry,
    ) -> Arc<Genome> {
        let seats = seats::SeatBoard::new(settings.seats);
        let places = places::PlaceBoard::new(&settings.capabilities);
        Arc::new(Genome {
            places,
            providers,
            info,
            settings,
            store,
            seats,
            deadline: watch::Sender::new(None),
            stats: Stats::default(),
            stopping: watch::Sender::new(false),
            tree: std::sync::OnceLock::new(),
            background: Arc::default(),
            kernel: RwLock::new(None),
            accepting: AtomicBool::new(true),
        })
    }

    /// The live kernel, if one is running.
    pub fn kernel(&self) -> Option<ActorRef<KernelMsg>> {
        self.kernel
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_kernel(&self, kernel: Option<ActorRef<KernelMsg>>) {
        *self.kernel.write().unwrap_or_else(|p| p.into_inner()) = kernel;
    }

    /// False once shutdown began: no new claims, no new submissions.
    pub fn accepting_work(&self) -> bool {
        self.accepting.load(Ordering::SeqCst)
    }

    /// Begins shutdown: stop claiming and accepting.
    pub fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::SeqCst);
        let _ = self.stopping.send(true);
        self.seats.notify.notify_waiters();
    }
}
