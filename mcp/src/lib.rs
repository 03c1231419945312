//! `palm-mcp`: the node's MCP surface (`palm mcp`), so coding agents drive the same jobs
//! as people.
//!
//! This module is a *transport*: every tool call becomes one or more control
//! [`Request`](palm_api::protocol::Request)s, sent to the node serving the data
//! directory over `DIR/palm.sock` (or to a node this process boots, like `palm run`).
//! It holds no job logic and no identity of its own; what a tool answers is what the
//! control request answered, reshaped for an agent.
//!
//! - `control_link.rs` — where requests go (an attached node or an embedded one), bounded.
//! - `tools.rs` — the tool table: input and output schemas, argument checking (against
//!   the same schemas that `tools/list` publishes), and each tool's requests.
//! - `assist.rs` — `palm_assist`: a deterministic goal → tool suggestion, no model.
//! - `resources.rs` — the agent card, the guide, `palm://flows/{name}`, `palm://jobs/{id}`.
//! - `server.rs` — the rmcp `ServerHandler` tying them together.
//! - `stdio.rs` — the stdio transport with a bounded request line.
//! - `http.rs` — streamable HTTP behind a bearer token.
//! - `install.rs` — `palm mcp install`: registering Palm with Claude Code or Codex.
//! - `args.rs` — the flags, flattened into the `palm` binary's CLI.

pub mod args;
pub mod assist;
pub mod control_link;
pub mod http;
pub mod install;
pub mod resources;
pub mod server;
pub mod stdio;
pub mod tools;

pub use args::{McpArgs, McpCommand, McpInstallArgs};
use control_link::ControlLink;
use palm_api::exit::{self, CliResult, Code};
use palm_node::{control, genome, node};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Runs `palm mcp` on the data directory `data` (`json`: machine output for the
/// commands that print).
pub async fn run(data: &Path, json: bool, args: McpArgs) -> CliResult {
    if let Some(McpCommand::Install(install)) = args.command {
        return install::run(data, json, install);
    }
    if args.seats == Some(0) {
        return Err(crate::exit::CliError::usage(
            "invalid_input",
            "--seats must be at least 1",
        ));
    }
    // Resolve where requests go before speaking MCP: a node that cannot start is a clear
    // error on stderr and an exit code, not a session whose every call fails.
    let link = Arc::new(ControlLink::open(data, args.seats).await?);
    tracing::info!(target: "palm::mcp", attached = link.describe(), "mcp server starting");
    let served = match &args.http {
        Some(address) => {
            http::serve(
                Arc::clone(&link),
                data,
                address,
                args.token.clone(),
                args.allow_remote,
            )
            .await
        }
        None => stdio::serve(Arc::clone(&link)).await,
    };
    link.finish(Duration::ZERO).await;
    served.map(|()| Code::Ok)
}
