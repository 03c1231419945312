//! Palm's coding-agent kit: what it takes to run `claude`, `codex` or any CLI as a step of
//! a durable job and know for sure how it ended.
//!
//! - [`spec`]: what an `agent` leaf asks for (provider, prompt, mode, repo, limits).
//! - [`end`]: the explicit end states and the result a leaf saves.
//! - [`audit`]: a run's tool uses and diff checked against its mode's authority.
//! - [`claude`], [`codex`], [`custom`]: each provider's command line and the parser of
//!   its output, fed line by line, tolerant of unknown fields and line types, of a
//!   partial last line and of a process that dies before saying how it ended.
//! - [`git`]: the job's worktree (one per job and repo), snapshots to private refs, and
//!   the patch an edit run leaves (base commit plus binary diff).
//! - [`secrets`]: the scan that blocks a patch carrying keys or passwords.
//! - [`merge`]: the merge queue's road from a stored patch to a branch.
//! - [`patches`]: the stored patches (list, show, land), shared by the CLI and MCP.
//! - [`install`]: the adoption block for AGENTS.md / CLAUDE.md.
//! - [`provision`]: a repo's declarative worktree setup (copy, link, env, setup, smoke).
//! - [`verify`]: the parsers of a verify step's test output (cargo, pytest, go, jest, TAP,
//!   JUnit) into failures (name, file, line, message) and a stable signature of the set.
//! - [`rank`]: the choice of a `best_of`'s winner (gates, checks, diff size, risk).
//! - [`route`]: a task to a stored flow, within an authority ceiling, with no model.
//! - [`runs`]: where a run keeps its transcript and marks; the runs a journal shows.
//!
//! Parsers and argument builders are pure; [`git`] runs `git`. Running the process, its
//! lease and its process group are the node's business (`palm-node`'s `agent` provider).

pub mod artifacts;
pub mod audit;
pub mod claude;
pub mod codex;
pub mod custom;
pub mod end;
pub mod git;
pub mod install;
pub mod merge;
pub mod patches;
pub mod provision;
pub mod rank;
pub mod route;
pub mod runs;
pub mod secrets;
pub mod spec;
pub mod verify;

pub use end::{AgentResult, End, RunSummary};
pub use spec::{AgentSpec, Mode};
