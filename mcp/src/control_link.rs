//! Where the MCP server's control requests go: the node serving the data directory, or a
//! node this process boots for the session's life.
//!
//! The choice is the CLI's own ([`Target::driving`]): attach to `DIR/palm.sock` when a
//! node answers there, else boot the same all-in-one node `palm run` would, which also
//! serves `DIR/palm.sock` so a `palm status` in another terminal sees the same jobs.
//! Attached calls use one socket connection each (the control protocol answers one
//! request at a time per connection, and a `wait` may hold its connection for minutes).
//! If the attached node goes away, the next call boots an embedded node and goes on.

use crate::control::dispatch;
use crate::control::server::socket_path;
use crate::exit::CliError;
use crate::genome::Genome;
use crate::node::Node;
use palm_api::client::Client;
use palm_api::protocol::{ErrorBody, Request, Response};
use palm_node::target::Target;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{Mutex, Semaphore};

/// Control requests one MCP server has in flight at once; more are refused with `busy`
/// rather than queued, so a client that floods calls cannot grow memory without bound.
pub const CALLS_IN_FLIGHT_MAX: usize = 64;

/// See the module docs.
pub struct ControlLink {
    data: PathBuf,
    socket: PathBuf,
    seats: Option<usize>,
    /// The node this process booted, kept to shut it down at the end.
    node: Mutex<Option<Box<Node>>>,
    /// Its genome, read on every call without waiting for the boot lock.
    genome: RwLock<Option<Arc<Genome>>>,
    slots: Semaphore,
    /// Set by [`ControlLink::finish`]: no call may boot a node after the session ended.
    closed: AtomicBool,
}

impl ControlLink {
    /// Attaches to the node serving `data`, or boots an embedded one.
    pub async fn open(data: &Path, seats: Option<usize>) -> Result<ControlLink, CliError> {
        let link = ControlLink {
            data: data.to_owned(),
            socket: socket_path(data),
            seats,
            node: Mutex::new(None),
            genome: RwLock::new(None),
            slots: Semaphore::new(CALLS_IN_FLIGHT_MAX),
            closed: AtomicBool::new(false),
        };
        link.attach_or_boot().await?;
        Ok(link)
    }

    /// The data directory it serves.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// One line for logs: what this server is attached to.
    pub fn describe(&self) -> String {
        match self.embedded() {
            Some(_) => format!("embedded node on {}", self.data.display()),
            None => format!("node at {}", self.socket.display()),
        }
    }

    fn embedded(&self) -> Option<Arc<Genome>> {
        self.genome
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Attaches (nothing to keep: calls connect afresh) or boots an embedded node.
    async fn attach_or_boot(&self) -> Result<(), CliError> {
        let mut node = self.node.lock().await;
        if node.is_some() {
            return Ok(());
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err(CliError::failure(
                "shutting_down",
                "the MCP session is ending",
            ));
        }
        match Target::driving(&self.data, self.seats).await? {
            Target::Embedded(booted) => {
                *self
                    .genome
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) =
                    Some(Arc::clone(booted.genome()));
                eprintln!(
                    "palm mcp: no node served {}; running an embedded node for this session (socket {})",
                    self.data.display(),
                    self.socket.display()
                );
                *node = Some(booted);
            }
            other => {
                eprintln!(
                    "palm mcp: attached to the node serving {}",
                    self.data.display()
                );
                other.finish().await;
            }
        }
        Ok(())
    }

    /// Sends one control request and returns its response (errors included: a node that
    /// cannot be reached is an `unavailable` response, never a panic).
    pub async fn call(&self, request: Request) -> Response {
        let Ok(_slot) = self.slots.try_acquire() else {
            return Response::err(
                ErrorBody::failure(
                    "busy",
                    format!("{CALLS_IN_FLIGHT_MAX} calls are already in flight on this MCP server"),
                )
                .hint("wait for earlier calls (e.g. palm_submit with wait: true) to finish"),
            );
        };
        if let Some(genome) = self.embedded() {
            return dispatch(&genome, request).await;
        }
        if let Some(mut client) = Client::connect(&self.socket).await {
            return match client.call(&request).await {
                Ok(response) => response,
                // The request may have been applied before the connection broke, so it is
                // not retried: the caller is told and can check with palm_status.
                Err(err) => Response::err(
                    ErrorBody::failure(
                        "unavailable",
                        format!("the node serving {} stopped answering: {err}", self.data.display()),
                    )
                    .hint("check with palm_status or palm_jobs whether the request took effect, then retry"),
                ),
            };
        }
        // Nothing was sent: the attached node went away before this call. Take over with
        // an embedded node, as `palm mcp` would have at start.
        if let Err(err) = self.attach_or_boot().await {
            let mut body = ErrorBody::failure(&err.kind, err.message);
            body.hint = err.hint;
            return Response::err(body);
        }
        match self.embedded() {
            Some(genome) => dispatch(&genome, request).await,
            None => match Client::connect(&self.socket).await {
                Some(mut client) => client.call(&request).await.unwrap_or_else(|err| {
                    Response::err(ErrorBody::failure("unavailable", err.to_string()))
                }),
                None => Response::err(ErrorBody::failure(
                    "unavailable",
                    format!("no node answers on {}", self.socket.display()),
                )),
            },
        }
    }

    /// Stops the embedded node, if this process booted one.
    pub async fn finish(&self, grace: Duration) {
        self.closed.store(true, Ordering::SeqCst);
        let node = self.node.lock().await.take();
        *self
            .genome
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        if let Some(node) = node {
            node.shutdown(grace).await;
        }
    }
}
