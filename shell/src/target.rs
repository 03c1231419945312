//! Where a request goes: a node serving the data directory (its socket), a node booted
//! in this process, or — with no node — the store directly through a desk. Shared by
//! every surface that drives jobs (the CLI, the MCP server).

use crate::control::server::socket_path;
use crate::exit::CliError;
use crate::genome::desk::{Answer, Desk};
use crate::genome::{NodeInfo, NodeSettings, now_ms};
use crate::node::{
    BootOptions, DataLock, LockError, Node, check_writable, has_store, open_store,
    open_store_read_only, store_path,
};
use palm_actors::path::{JobPath, JobPathConfig};
use palm_actors::store::{MemoryStore, Store};
use palm_api::client::Client;
use palm_api::protocol::Request;
use palm_api::verbs::into_result;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Whether a command only reads, or writes too.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads: without a node, the store is left exactly as found.
    Read,
    /// Writes: without a node, changes are committed directly.
    Write,
}

/// Where requests go.
pub enum Target {
    /// A node serving the data directory.
    Remote(Client),
    /// A node booted in this process.
    Embedded(Box<Node>),
    /// No node: the store, through a desk.
    Store {
        /// The desk.
        desk: Box<Desk>,
        /// Commit what requests write.
        writes: bool,
        /// Held while the desk is open, so no node boots under us.
        _lock: Option<DataLock>,
    },
}

/// The node serving `data`, if one answers on its socket.
pub async fn connect(data: &Path) -> Option<Client> {
    Client::connect(&socket_path(data)).await
}

/// Waits for a node that holds the lock but is still booting to open its socket.
async fn connect_when_up(data: &Path) -> Result<Client, CliError> {
    for _ in 0..100 {
        if let Some(client) = connect(data).await {
            return Ok(client);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(CliError::failure(
        "unavailable",
        format!(
            "a node holds {} but does not answer on its socket",
            data.display()
        ),
    )
    .with_hint("`palm doctor` checks the data directory"))
}

fn offline_info(data: &Path) -> NodeInfo {
    NodeInfo {
        name: crate::config::default_node_name(),
        profile: "all-in-one".to_owned(),
        data: data.to_owned(),
        pid: std::process::id(),
        started_at: now_ms(),
        embedded: true,
    }
}

fn open_desk(store: Arc<dyn Store>, data: &Path) -> Result<Desk, CliError> {
    let config = JobPathConfig {
        node: crate::config::default_node_name(),
        ..JobPathConfig::default()
    };
    let (path, _) = JobPath::open(&*store, config, crate::sys::random_u64())
        .map_err(|e| CliError::failure("store", format!("cannot open the job path: {e}")))?;
    Ok(Desk {
        path,
        store,
        info: offline_info(data),
        places: None,
    })
}

impl Target {
    /// A target for one request: a running node, else the store directly.
    pub async fn for_access(data: &Path, access: Access) -> Result<Target, CliError> {
        if let Some(client) = connect(data).await {
            return Ok(Target::Remote(client));
        }
        if access == Access::Read && !has_store(data) {
            // Nothing stored yet: answer from an empty store, without creating anything.
            let label = format!("none yet ({} does not exist)", store_path(data).display());
            let store: Arc<dyn Store> = Arc::new(MemoryStore::standing_in_for(label));
            return Ok(Target::Store {
                desk: Box::new(open_desk(store, data)?),
                writes: false,
                _lock: None,
            });
        }
        if access == Access::Write {
            check_writable(data)?;
        }
        let lock = match DataLock::acquire(data) {
            Ok(lock) => lock,
            Err(LockError::Busy { .. }) => return Ok(Target::Remote(connect_when_up(data).await?)),
            Err(LockError::Io(message)) => return Err(CliError::usage("data_dir", message)),
        };
        let store = match access {
            Access::Read => open_store_read_only(data)?,
            Access::Write => open_store(data)?,
        };
        Ok(Target::Store {
            desk: Box::new(open_desk(store, data)?),
            writes: access == Access::Write,
            _lock: Some(lock),
        })
    }

    /// A target that can drive jobs: a running node, else an embedded one.
    pub async fn driving(data: &Path, seats: Option<usize>) -> Result<Target, CliError> {
        if let Some(client) = connect(data).await {
            return Ok(Target::Remote(client));
        }
        // An embedded node is the same node `palm up` would run: same config.
        let config = crate::config::load(data, None)?;
        let mut settings = NodeSettings::default();
        if let Some(seats) = seats.or(config.seats) {
            settings.seats = seats.max(1);
        }
        settings.capabilities = config.capabilities;
        settings.places = config.places;
        settings.providers = config.providers;
        if let Some(lease_ms) = config.lease_ms {
            settings.lease_ms = lease_ms;
        }
        settings.retention = config.retention.unwrap_or_default();
        let options = BootOptions {
            data: data.to_owned(),
            name: config.name.unwrap_or_else(crate::config::default_node_name),
            profile: "all-in-one".to_owned(),
            settings,
            embedded: true,
            store: None,
        };
        match Node::boot(options).await {
            Ok(node) => Ok(Target::Embedded(Box::new(node))),
            Err(err) if err.kind == "already_running" => {
                Ok(Target::Remote(connect_when_up(data).await?))
            }
            Err(err) => Err(err),
        }
    }

    /// Sends one request.
    pub async fn call(&mut self, request: Request) -> Result<Value, CliError> {
        let response = match self {
            Target::Remote(client) => client.call(&request).await.map_err(|e| {
                CliError::failure("unavailable", format!("the node stopped answering: {e}"))
            })?,
            Target::Embedded(node) => node.call(request).await,
            Target::Store { desk, writes, .. } => {
                let answer = desk.answer(request, true);
                let batch = desk.path.take_batch();
                desk.path.take_notices();
                if *writes && !batch.is_empty() {
                    desk.store
                        .commit(&batch)
                        .and_then(|()| desk.store.flush())
                        .map_err(|e| CliError::failure("store", format!("cannot commit: {e}")))?;
                }
                match answer {
                    Answer::AfterCommit(response) => response,
                    Answer::Read(request) => desk.read(request, None),
                    // No node runs here, so nothing can move the job: answer as it is.
                    Answer::Watch(job) => desk.view(&job),
                }
            }
        };
        into_result(response)
    }

    /// True when requests reach no node (jobs will not move until one runs).
    pub fn is_offline(&self) -> bool {
        matches!(self, Target::Store { .. })
    }

    /// Releases the target (stops an embedded node).
    pub async fn finish(self) {
        if let Target::Embedded(node) = self {
            node.shutdown(Duration::ZERO).await;
        }
    }
}

impl palm_api::verbs::Caller for Target {
    type Error = CliError;

    fn call(
        &mut self,
        request: Request,
    ) -> impl std::future::Future<Output = Result<Value, CliError>> + Send {
        Target::call(self, request)
    }
}
