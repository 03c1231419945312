//! Palm's session memory: every Claude and Codex transcript kept, searchable, and linked
//! to the work it produced.
//!
//! - [`transcript`]: the vendor-neutral shapes ([`Entry`], [`SessionMeta`]);
//!   [`claude`] and [`codex`] read each vendor's JSONL lines into them, tolerating every
//!   known pitfall (partial lines, unknown types, injected context, resumes, forks).
//! - [`archive`]: the raw bytes, content-addressed, so they outlive the vendors' sweeps.
//! - [`catalog`]: what was ingested, per file and per session, one generation per ingest.
//! - [`ingest`]: finding the files and taking only what is new in each.
//! - [`index`]: one tantivy index across vendors, secrets redacted (`palm recall`).
//! - [`links`]: a session's runs, worktrees, patches and commits.
//! - [`live`]: which sessions are running, idle or stuck now, from the vendors' files.
//! - [`memory`]: [`Memory`], the whole, as the CLI and MCP use it.

pub mod archive;
pub mod catalog;
pub mod claude;
pub mod codex;
pub mod error;
pub mod index;
pub mod ingest;
pub mod links;
pub mod live;
pub mod memory;
pub mod transcript;

pub use error::SessionsError;
pub use index::{Hit, Recall};
pub use ingest::{IngestReport, Sources};
pub use memory::{Listed, Memory, Shown};
pub use transcript::{Entry, Role, SessionMeta, Vendor};
