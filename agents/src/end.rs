//! How a run ended, and the result an `agent` leaf saves.
//!
//! Every run ends in exactly one [`End`], decided from what the provider said (its
//! result line, its exit code, its output file), never from scraping a terminal. The
//! leaf succeeds if and only if the end is `success`.

use crate::audit::Audit;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The tool uses a summary keeps in the order they came.
pub const TOOLS_KEPT_MAX: usize = 1_000;

/// Past [`TOOLS_KEPT_MAX`], how many more are kept: only those the audit could flag
/// and the worktree's diff could not show (commands, MCP and unknown tools); the rest
/// are counted in [`RunSummary::tools_dropped`].
pub const TOOLS_NOTABLE_MAX: usize = 1_000;

/// The longest `detail` of a tool use kept (in characters; longer is cut, with `…`).
pub const TOOL_DETAIL_MAX: usize = 500;

/// One tool use a transcript (or a declared CLI's usage file) reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolUse {
    /// The tool: Claude's name (`Read`, `Edit`, `Bash`, `mcp__server__tool`...) or
    /// Codex's item type (`command_execution`, `file_change`, `mcp_tool_call`,
    /// `web_search`...).
    pub name: String,
    /// What it was used on: the command, the file(s), the pattern, the URL (bounded).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Its authority refused it (a permission denial, a declined command): it never ran,
    /// and the audit passes over it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub denied: bool,
}

impl ToolUse {
    /// A tool use, its detail cut to [`TOOL_DETAIL_MAX`] characters.
    pub fn new(name: &str, detail: &str) -> ToolUse {
        let detail = detail.trim();
        let detail = match detail.char_indices().nth(TOOL_DETAIL_MAX) {
            Some((at, _)) => format!("{}…", &detail[..at]),
            None => detail.to_owned(),
        };
        ToolUse {
            name: name.trim().to_owned(),
            detail,
            denied: false,
        }
    }
}

/// The end states of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// The provider says it finished its task.
    Success,
    /// It stopped at its turn limit.
    MaxTurns,
    /// It says it failed (an API error, a failed turn, a non-zero exit with an answer).
    Error,
    /// It ran past its timeout and was killed (its whole process group).
    Timeout,
    /// It died without saying how it ended (no result line); its partial output is kept.
    Crashed,
    /// It was cancelled (a halted branch, a cancelled job, a lost lease).
    Interrupted,
    /// Its authority refused what it tried (permission denials).
    Denied,
    /// It cost more than its budget.
    Budget,
    /// It went past its authority (see [`crate::audit`]): an observe run that changed
    /// files or used a writing tool, a tool outside its mode's allowlist, a command run in
    /// edit mode. Its changes were set aside, never applied.
    Violation,
}

impl End {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            End::Success => "success",
            End::MaxTurns => "max_turns",
            End::Error => "error",
            End::Timeout => "timeout",
            End::Crashed => "crashed",
            End::Interrupted => "interrupted",
            End::Denied => "denied",
            End::Budget => "budget",
            End::Violation => "violation",
        }
    }
}

/// What a provider's output said, once the process is gone.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunSummary {
    /// How it ended, as far as the output tells (`None`: it never said).
    pub end: Option<End>,
    /// The session (claude) or thread (codex) id, for resuming.
    pub session_id: Option<String>,
    /// Turns taken.
    pub turns: Option<u64>,
    /// Cost reported by the provider, in US dollars.
    pub cost_usd: Option<f64>,
    /// Token usage as the provider reported it (summed over turns for codex).
    pub usage: Value,
    /// The final answer (claude's `result`, codex's last agent message, a CLI's output).
    pub text: String,
    /// Why it failed, when it said.
    pub error: Option<String>,
    /// Tools its authority refused.
    pub denials: Vec<String>,
    /// JSON lines read.
    pub lines: u64,
    /// Lines that were not JSON (kept in the transcript, otherwise ignored).
    pub bad_lines: u64,
    /// Lines of a type this parser does not know (ignored).
    pub unknown_lines: u64,
    /// The tool uses it reported, in order, bounded (see [`RunSummary::record_tool`]).
    pub tools: Vec<ToolUse>,
    /// Tool uses seen but not kept (past the bounds).
    pub tools_dropped: u64,
    /// Of those, uses the audit would have had to judge (commands, MCP, unknown tools):
    /// a run below execute that dropped any cannot be shown to have stayed within.
    pub notable_dropped: u64,
}

impl RunSummary {
    /// Records one tool use: the first [`TOOLS_KEPT_MAX`] are kept, then only notable
    /// ones ([`crate::audit::notable`]) up to [`TOOLS_NOTABLE_MAX`] more; the rest are
    /// counted. Answers where it was kept.
    pub fn record_tool(&mut self, tool: ToolUse) -> Option<usize> {
        if tool.name.is_empty() {
            return None;
        }
        let kept = self.tools.len();
        if kept < TOOLS_KEPT_MAX
            || (kept < TOOLS_KEPT_MAX + TOOLS_NOTABLE_MAX && crate::audit::notable(&tool))
        {
            self.tools.push(tool);
            Some(kept)
        } else {
            self.tools_dropped += 1;
            if crate::audit::notable(&tool) {
                self.notable_dropped += 1;
            }
            None
        }
    }
}

/// The result an `agent` leaf saves (`save: KEY`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentResult {
    /// How it ended.
    pub end: End,
    /// `claude`, `codex` or the declared name.
    pub provider: String,
    /// The session to resume.
    pub session_id: Option<String>,
    /// The session an interrupted attempt of this same run left, which this one resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed: Option<String>,
    /// Turns taken.
    pub turns: Option<u64>,
    /// Reported cost.
    pub cost_usd: Option<f64>,
    /// The final answer.
    pub text: String,
    /// The answer parsed as JSON, when a schema was given and it satisfied it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Where it ran.
    pub worktree: Option<String>,
    /// The patch it left (`{id, base, files, added, removed, status, findings}`), if any.
    pub patch: Option<Value>,
    /// Why it did not succeed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Token usage.
    pub usage: Value,
    /// The raw output: `{id, path, bytes, lines, truncated}`.
    pub transcript: Value,
    /// The run checked against its authority: `{violations, tools, unaudited, by_name}`
    /// (absent when no program ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<Audit>,
    /// How long it ran (ms).
    pub duration_ms: u64,
}

impl AgentResult {
    /// As the JSON the leaf saves.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
