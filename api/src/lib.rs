//! Palm's control protocol, shared by every surface that drives jobs — the CLI, the MCP
//! server and the coming REST API — so each speaks the same requests and gets the same
//! JSON shapes, errors and exit codes.
//!
//! - [`protocol`]: `Request` / `Response` / `ErrorBody`, newline-delimited JSON on a
//!   node's `DIR/palm.sock`.
//! - [`client`]: the socket client.
//! - [`exit`]: the command error (`CliError`) and the documented exit codes (`Code`).
//! - [`verbs`]: what every surface does around the requests, written once.

pub mod client;
pub mod exit;
pub mod protocol;
pub mod verbs;
