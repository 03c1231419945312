//! The flags of `palm mcp` and `palm mcp install` (the binary flattens them in).

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// `palm mcp`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    /// Serve streamable HTTP on this address instead of stdio (e.g. 127.0.0.1:8765).
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
    /// Bearer token HTTP clients must send [default: generated, saved in DIR/mcp-token].
    #[arg(long, env = "PALM_MCP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Allow --http on an address other than loopback (anyone who can reach it and holds
    /// the token can run commands as this node).
    #[arg(long)]
    pub allow_remote: bool,
    /// Seats of the embedded node, when no node serves DIR [default: number of CPUs].
    #[arg(long)]
    pub seats: Option<usize>,
    /// What to do besides serving.
    #[command(subcommand)]
    pub command: Option<McpCommand>,
}

/// `palm mcp ...`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Print (or, with --write, merge into the client's config) the snippet that registers
    /// Palm with an MCP client.
    Install(McpInstallArgs),
}

/// `palm mcp install`.
#[derive(Debug, Args)]
pub struct McpInstallArgs {
    /// The client: claude (Claude Code, `.mcp.json`) or codex (`~/.codex/config.toml`).
    #[arg(long, value_parser = ["claude", "codex"])]
    pub client: String,
    /// Write the entry into the client's config instead of printing it.
    #[arg(long)]
    pub write: bool,
    /// The config file to write [default: ./.mcp.json for claude, ~/.codex/config.toml
    /// for codex].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Replace an existing `palm` entry that differs.
    #[arg(long)]
    pub force: bool,
}
