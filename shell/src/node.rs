//! Booting and stopping a node: the data directory, its lock, the store, the organ tree.
//!
//! `palm up` boots a node and serves until a signal; `palm run` (and the other commands,
//! when no node serves the data directory) boots the same node in-process, uses it, and
//! stops it. One node per data directory: the lock file refuses a second.

use crate::control::dispatch;
use crate::exit::CliError;
use crate::genome::kernel::Kernel;
use crate::genome::seats::{Seat, SeatArgs};
use crate::genome::supervisor::{ChildFactory, FnChild, Supervisor, SupervisorArgs, SupervisorMsg};
use crate::genome::ticker::Ticker;
use crate::genome::{Genome, NodeInfo, NodeSettings, now_ms};
use palm_actors::store::{RedbStore, Store, StoreError};
use palm_actors::supervisor::{ChildSpec, Intensity, Restart, Strategy};
use palm_api::protocol::{Request, Response};
use ractor::{Actor, ActorRef};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How long a stopping node waits for patches still landing (a merge of a large
/// repository under load takes seconds, not minutes).
const BACKGROUND_WAIT_MAX: Duration = Duration::from_secs(120);

/// The store file of a data directory.
pub fn store_path(data: &Path) -> PathBuf {
    data.join("palm.redb")
}

/// The file naming a data directory's PostgreSQL store, written by `palm up --store`.
pub fn store_url_path(data: &Path) -> PathBuf {
    data.join("store.url")
}

/// Where a data directory's truth is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// Its own redb file (the default).
    Redb(PathBuf),
    /// A PostgreSQL database (a cloud root's replicated truth).
    Postgres(String),
}

impl StoreLocation {
    /// `--store` as given: `redb`, or a `postgres://` URL.
    pub fn parse(data: &Path, choice: &str) -> Result<StoreLocation, CliError> {
        if choice == "redb" {
            return Ok(StoreLocation::Redb(store_path(data)));
        }
        if palm_pgstore::is_postgres_url(choice) {
            palm_pgstore::PgOptions::parse(choice)
                .map_err(|e| CliError::usage("store", e.to_string()))?;
            return Ok(StoreLocation::Postgres(choice.to_owned()));
        }
        Err(CliError::usage(
            "store",
            format!(
                "--store must be `redb` or a postgres:// URL, not {:?}",
                palm_pgstore::redact(choice)
            ),
        ))
    }

    /// Where `data` keeps its truth: the URL recorded by `palm up --store`, else its redb
    /// file.
    pub fn of(data: &Path) -> Result<StoreLocation, CliError> {
        let recorded = store_url_path(data);
        match std::fs::read_to_string(&recorded) {
            Ok(text) => StoreLocation::parse(data, text.trim()).map_err(|e| {
                CliError::usage("store", format!("{}: {}", recorded.display(), e.message))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(StoreLocation::Redb(store_path(data)))
            }
            Err(e) => Err(CliError::usage(
                "store",
                format!("cannot read {}: {e}", recorded.display()),
            )),
        }
    }

    /// Makes this the data directory's store for every later command (owner-only file:
    /// the URL may carry a password).
    pub fn record(&self, data: &Path) -> std::io::Result<()> {
        let path = store_url_path(data);
        match self {
            StoreLocation::Redb(_) => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
            StoreLocation::Postgres(url) => {
                use std::os::unix::fs::OpenOptionsExt;
                let temp = data.join("store.url.tmp");
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&temp)?;
                file.write_all(format!("{url}\n").as_bytes())?;
                file.sync_all()?;
                std::fs::rename(&temp, &path)
            }
        }
    }

    /// For messages: the redb path, or the URL without its password.
    pub fn describe(&self) -> String {
        match self {
            StoreLocation::Redb(path) => path.display().to_string(),
            StoreLocation::Postgres(url) => palm_pgstore::redact(url),
        }
    }
}

/// True when `data` has a store to read (a redb file, or a PostgreSQL store named).
pub fn has_store(data: &Path) -> bool {
    match StoreLocation::of(data) {
        Ok(StoreLocation::Redb(path)) => path.exists(),
        Ok(StoreLocation::Postgres(_)) | Err(_) => true,
    }
}

/// The lock file of a data directory.
pub fn lock_path(data: &Path) -> PathBuf {
    data.join("palm.lock")
}

/// An exclusive hold on a data directory, released when dropped.
pub struct DataLock {
    _file: File,
}

/// Why a data directory could not be locked.
pub enum LockError {
    /// Another process holds it.
    Busy {
        /// The holder's pid, if it wrote one.
        pid: Option<u32>,
    },
    /// The directory cannot be used.
    Io(String),
}

impl DataLock {
    /// Takes the lock of `data`, creating the directory if needed.
    pub fn acquire(data: &Path) -> Result<DataLock, LockError> {
        create_data_dir(data).map_err(|e| {
            LockError::Io(format!(
                "cannot create data directory {}: {e}",
                data.display()
            ))
        })?;
        let path = lock_path(data);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| LockError::Io(format!("cannot open {}: {e}", path.display())))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Busy {
                    pid: text.trim().parse().ok(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(LockError::Io(format!(
                    "cannot lock {}: {e}",
                    path.display()
                )));
            }
        }
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = writeln!(file, "{}", std::process::id());
        let _ = file.flush();
        Ok(DataLock { _file: file })
    }
}

/// How to boot a node.
#[derive(Clone, Debug)]
pub struct BootOptions {
    /// Data directory.
    pub data: PathBuf,
    /// Node name.
    pub name: String,
    /// Profile.
    pub profile: String,
    /// Tunables.
    pub settings: NodeSettings,
    /// Booted by a command rather than `palm up`.
    pub embedded: bool,
    /// `--store`: where the truth is kept from now on [default: as recorded, else redb].
    pub store: Option<StoreLocation>,
}

/// A running node.
pub struct Node {
    genome: Arc<Genome>,
    root: ActorRef<SupervisorMsg>,
    join: tokio::task::JoinHandle<()>,
    _lock: DataLock,
}

/// Opens the store of a data directory read-only (a redb file stays byte for byte as it
/// was, falling back to a read-write open when it needs recovery after a crash; a
/// PostgreSQL store is opened without the writer's lease).
pub fn open_store_read_only(data: &Path) -> Result<Arc<dyn Store>, CliError> {
    match StoreLocation::of(data)? {
        StoreLocation::Redb(path) => match RedbStore::open_read_only(&path) {
            Ok(store) => Ok(Arc::new(store)),
            Err(_) => open_store(data),
        },
        postgres => open_store_at(&postgres, StoreAccess::Read),
    }
}

/// Opens the store of a data directory to write, mapping failures to clear errors.
pub fn open_store(data: &Path) -> Result<Arc<dyn Store>, CliError> {
    let holder = format!(
        "{} (pid {}, a command)",
        crate::config::default_node_name(),
        std::process::id()
    );
    open_store_at(
        &StoreLocation::of(data)?,
        StoreAccess::Write { holder: &holder },
    )
}

/// How a store is opened.
pub enum StoreAccess<'a> {
    /// Only to read (a PostgreSQL store: without the writer's lease).
    Read,
    /// To write: a PostgreSQL store's writer's lease is taken now, or the open fails
    /// naming its holder.
    Write {
        /// Who this is, for the other replicas' messages.
        holder: &'a str,
    },
    /// To write, standing by until the writer's lease is free (a root replica).
    Standby {
        /// Who this is.
        holder: &'a str,
    },
}

/// Opens a store, mapping failures to clear errors.
pub fn open_store_at(
    location: &StoreLocation,
    access: StoreAccess<'_>,
) -> Result<Arc<dyn Store>, CliError> {
    let path = match location {
        StoreLocation::Redb(path) => path,
        StoreLocation::Postgres(url) => {
            use palm_pgstore::{Lease, PgStore};
            let opened = match access {
                StoreAccess::Read => PgStore::open_read_only(url),
                StoreAccess::Write { holder } => PgStore::open_with(url, holder, Lease::Take),
                StoreAccess::Standby { holder } => {
                    let mut waiting = |held: &palm_pgstore::Held| {
                        eprintln!(
                            "palm: standing by: {} holds the store {} (lease epoch {}, {} ms left \
                             unless renewed); taking over when it ends",
                            held.holder,
                            location.describe(),
                            held.epoch,
                            held.remaining.as_millis()
                        );
                    };
                    PgStore::open_with(url, holder, Lease::Wait(&mut waiting))
                }
            };
            return match opened {
                Ok(store) => Ok(Arc::new(store)),
                Err(StoreError::Locked(message)) => Err(CliError::failure(
                    "locked",
                    format!("the store {message} is in use by another replica"),
                )
                .with_hint(
                    "send commands to the replica that holds it, or `palm up` here to stand by",
                )),
                Err(err) => Err(CliError::failure("store", err.to_string()).with_hint(
                    "check that the database answers (`psql URL`) and that the URL's user may \
                     create the schema; `palm doctor` checks the data directory",
                )),
            };
        }
    };
    match RedbStore::open(path) {
        Ok(store) => Ok(Arc::new(store)),
        Err(StoreError::Locked(_)) => Err(CliError::failure(
            "locked",
            format!("the store {} is in use by another process", path.display()),
        )),
        Err(err) => Err(CliError::failure(
            "store",
            format!("cannot open {}: {err}", path.display()),
        )
        .with_hint("`palm doctor` checks the data directory")),
    }
}

/// Creates a data directory (owner-only, since it holds jobs and the control socket).
pub fn create_data_dir(data: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if data.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data)
}

/// Checks that `data` can be written (before anything else is attempted there).
pub fn check_writable(data: &Path) -> Result<(), CliError> {
    if let Err(e) = create_data_dir(data) {
        return Err(CliError::usage(
            "data_dir",
            format!("cannot create data directory {}: {e}", data.display()),
        ));
    }
    let probe = data.join(format!(".palm-write-probe-{}", std::process::id()));
    match std::fs::write(&probe, b"") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(CliError::usage(
            "data_dir",
            format!("data directory {} is not writable: {e}", data.display()),
        )
        .with_hint("pass a writable --data DIR, or set PALM_HOME")),
    }
}

fn child<A>(
    name: &str,
    restart: Restart,
    make: impl Fn() -> (A, A::Arguments) + Send + Sync + 'static,
) -> Arc<dyn ChildFactory>
where
    A: Actor,
{
    let make = Arc::new(make);
    FnChild::factory(
        ChildSpec {
            name: name.to_owned(),
            restart,
        },
        move |supervisor| {
            let make = Arc::clone(&make);
            Box::pin(async move {
                let (actor, args) = make();
                Actor::spawn_linked(None, actor, args, supervisor)
                    .await
                    .map(|(actor, _)| actor.get_cell())
            })
        },
    )
}

impl Node {
    /// Boots a node over `options.data`.
    pub async fn boot(options: BootOptions) -> Result<Node, CliError> {
        check_writable(&options.data)?;
        let lock = match DataLock::acquire(&options.data) {
            Ok(lock) => lock,
            Err(LockError::Busy { pid }) => {
                let who = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
                return Err(CliError::failure(
                    "already_running",
                    format!(
                        "a node is already running on {}{who}",
                        options.data.display()
                    ),
                )
                .with_hint("stop it first, or use another --data directory"));
            }
            Err(LockError::Io(message)) => return Err(CliError::usage("data_dir", message)),
        };
        let location = match &options.store {
            Some(location) => location.clone(),
            None => StoreLocation::of(&options.data)?,
        };
        let holder = format!(
            "node {} (pid {}, data {})",
            options.name,
            std::process::id(),
            options.data.display()
        );
        // A served node stands by for a replicated store's lease; a command's node does
        // not wait. Off the runtime's threads: the wait blocks.
        let embedded = options.embedded;
        let store = {
            let location = location.clone();
            tokio::task::spawn_blocking(move || {
                let access = if embedded {
                    StoreAccess::Write { holder: &holder }
                } else {
                    StoreAccess::Standby { holder: &holder }
                };
                open_store_at(&location, access)
            })
            .await
            .map_err(|e| CliError::failure("store", format!("opening the store failed: {e}")))??
        };
        if options.store.is_some() {
            location.record(&options.data).map_err(|e| {
                CliError::failure(
                    "store",
                    format!("cannot record the store in {}: {e}", options.data.display()),
                )
            })?;
        }
        info!(store = %store.describe(), "store open");
        let info = NodeInfo {
            name: options.name.clone(),
            profile: options.profile.clone(),
            data: options.data.clone(),
            pid: std::process::id(),
            started_at: now_ms(),
            embedded: options.embedded,
        };
        let providers = crate::providers::builtin(&info.data, &options.settings.providers);
        let genome = Genome::new(info, options.settings.clone(), store, providers);
        let g = Arc::clone(&genome);
        let kernel = child("kernel", Restart::Permanent, move || {
            (Kernel, Arc::clone(&g))
        });
        let g = Arc::clone(&genome);
        let places = child("places", Restart::Permanent, move || {
            (crate::genome::places::Places, Arc::clone(&g))
        });
        let g = Arc::clone(&genome);
        let ticker = child("ticker", Restart::Permanent, move || {
            (Ticker, Arc::clone(&g))
        });
        let seat_children: Vec<Arc<dyn ChildFactory>> = (0..options.settings.seats)
            .map(|index| {
                let g = Arc::clone(&genome);
                child(&format!("seat-{index}"), Restart::Permanent, move || {
                    (
                        Seat,
                        SeatArgs {
                            genome: Arc::clone(&g),
                            index,
                        },
                    )
                })
            })
            .collect();
        let seat_children = Arc::new(seat_children);
        let seats = child("seats", Restart::Permanent, move || {
            (
                Supervisor,
                SupervisorArgs {
                    name: "seats".into(),
                    strategy: Strategy::OneForOne,
                    intensity: Intensity {
                        restarts_max: 10,
                        period_ms: 10_000,
                    },
                    children: seat_children.as_ref().clone(),
                    log: None,
                },
            )
        });
        let g = Arc::clone(&genome);
        let control = child("control", Restart::Permanent, move || {
            (crate::control::server::ControlServer, Arc::clone(&g))
        });
        let (root, join) = Actor::spawn(
            None,
            Supervisor,
            SupervisorArgs {
                name: "node".into(),
                // Places first, then the kernel: everything after the kernel talks to
                // it, so if it restarts they restart too (rest_for_one); a kernel restart
                // leaves running places alone.
                strategy: Strategy::RestForOne,
                intensity: Intensity::default(),
                children: vec![places, kernel, ticker, seats, control],
                log: None,
            },
        )
        .await
        .map_err(|err| CliError::failure("boot", format!("cannot start the node: {err}")))?;
        info!(node = options.name, data = %options.data.display(), seats = options.settings.seats, "node up");
        Ok(Node {
            genome,
            root,
            join,
            _lock: lock,
        })
    }

    /// The node's shared state.
    pub fn genome(&self) -> &Arc<Genome> {
        &self.genome
    }

    /// Starts the tree organ for `plan` (`palm up` with a tree profile): requests that
    /// reach their home here over the tree are answered as the control socket would.
    pub async fn start_tree(
        &self,
        plan: crate::link::TreePlan,
        config: palm_transport::LinkConfig,
    ) -> Result<Arc<crate::link::Tree>, CliError> {
        let here: crate::hop::Here = Arc::new(|genome, request| {
            Box::pin(async move { crate::control::dispatch_here(&genome, request).await })
        });
        crate::link::start(&self.genome, plan, config, here).await
    }

    /// Answers a control request in-process.
    pub async fn call(&self, request: Request) -> Response {
        dispatch(&self.genome, request).await
    }

    /// Resolves once the node's store may no longer be written by it — another replica
    /// took the store's writer's lease over, so nothing it does can be durable and it
    /// must stop (looked at every 200 ms).
    pub fn when_fenced(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let genome = Arc::clone(&self.genome);
        async move {
            while !genome.store.fenced() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    /// Waits until the organ tree stops by itself (an escalation).
    pub async fn stopped(&mut self) {
        let _ = (&mut self.join).await;
    }

    /// Stops the node: no new claims or submissions, running effects get `grace` to
    /// finish (then are killed and left to run again on the next boot), pending writes
    /// are committed, organs stop in reverse order.
    pub async fn shutdown(self, grace: Duration) {
        let genome = Arc::clone(&self.genome);
        genome.stop_accepting();
        let started = Instant::now();
        while genome.seats.busy() > 0 && started.elapsed() < grace {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if genome.seats.busy() > 0 {
            info!(
                busy = genome.seats.busy(),
                "grace period over; stopping running effects"
            );
            genome.seats.cancel_all();
            let kill_wait = Duration::from_millis(crate::genome::runner::KILL_GRACE_MS + 1_000);
            let killing = Instant::now();
            while genome.seats.busy() > 0 && killing.elapsed() < kill_wait {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let _ = self
            .root
            .stop_and_wait(Some("shutdown".into()), Some(Duration::from_secs(60)))
            .await;
        let _ = self.join.await;
        // Patches landing after their jobs' success: a process ending under them would
        // leave a patch merged but described as pending, or not landed at all.
        if genome.background.running() > 0 {
            info!(
                running = genome.background.running(),
                "waiting for patches being landed"
            );
            if !genome.background.drained(BACKGROUND_WAIT_MAX).await {
                warn!(
                    running = genome.background.running(),
                    "patches still landing after {} s; stopping anyway",
                    BACKGROUND_WAIT_MAX.as_secs()
                );
            }
        }
        info!("node stopped");
    }
}
