//! The node shell, as a library: a Palm node's organs hosted on ractor and tokio — the
//! kernel (the job path through its `HomeHost`), seats and runner, the place book, the
//! ticker, the supervisor — its tree organ (links over `palm-transport`, the tree
//! protocol's `HopCore` hosted in `hop`), the control socket, the `call` providers,
//! boot and shutdown, and [`target`], where a surface's request goes.
//!
//! It knows no surface: the CLI (the `palm` binary) and the MCP server (`palm-mcp`) sit
//! on top, and neither repository intelligence (tantivy, tree-sitter, git2) nor MCP
//! (rmcp) is in its dependency tree.

pub use palm_api::exit;

pub mod api_tokens;
pub mod config;
pub mod control;
pub mod genome;
pub mod hop;
pub mod journal;
pub mod link;
pub mod link_relay;
pub mod node;
pub mod providers;
pub mod sys;
pub mod target;
pub mod tokens;
pub mod tree_store;
pub mod wire;
