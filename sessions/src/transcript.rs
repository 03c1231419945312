//! What a transcript line means once read: the [`Entry`] values a reader makes of a
//! vendor's lines, and the [`SessionMeta`] it learns on the way. Both vendors' readers
//! ([`crate::claude`], [`crate::codex`]) make the same shapes, so the archive, the index
//! and `palm sessions show` never look at a vendor's format.
//!
//! A reader is fed one complete line at a time, in file order, with its 1-based line
//! number; it never fails (a line it cannot read becomes nothing, or an `unknown` entry
//! when it holds text), and its state is serializable, so an ingest that stopped after
//! line N continues at line N + 1 days later exactly as if it had never stopped.

use serde::{Deserialize, Serialize};

/// Whose transcript.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// Claude Code: `~/.claude/projects/<slug>/<session>.jsonl` (and subagent files).
    Claude,
    /// Codex CLI: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl` (and archived ones).
    Codex,
}

impl Vendor {
    /// `claude` or `codex`.
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Claude => "claude",
            Vendor::Codex => "codex",
        }
    }

    /// The vendor named `name`.
    pub fn parse(name: &str) -> Option<Vendor> {
        match name {
            "claude" => Some(Vendor::Claude),
            "codex" => Some(Vendor::Codex),
            _ => None,
        }
    }
}

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A person's prompt (never injected context, never a line holding only tool results).
    User,
    /// The model's visible text.
    Assistant,
    /// The model's reasoning or thinking (a summary when that is all the file keeps).
    Reasoning,
    /// A tool the model called: `tool` names it, `text` holds its input (a command, a
    /// patch, arguments).
    ToolCall,
    /// What a tool answered (`tool` names the call's tool when known).
    ToolResult,
    /// Injected context, instructions, hook output, system notices, compaction markers.
    System,
    /// A title or summary of the session.
    Summary,
    /// A line of a type the reader does not know, kept for its text.
    Unknown,
}

impl Role {
    /// The role's name as JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Reasoning => "reasoning",
            Role::ToolCall => "tool_call",
            Role::ToolResult => "tool_result",
            Role::System => "system",
            Role::Summary => "summary",
            Role::Unknown => "unknown",
        }
    }
}

/// One searchable piece of a transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The session it belongs to (a file may hold another session's lines: a Codex fork
    /// replays its parent's).
    pub session: String,
    /// Its line in the file, 1-based (several entries may share a line).
    pub line: u64,
    /// When, in milliseconds since the Unix epoch, if the line says.
    pub timestamp_ms: Option<i64>,
    /// What it is.
    pub role: Role,
    /// Its text, as written (the index redacts secrets; the archive keeps the bytes).
    pub text: String,
    /// The tool of a call or a result, when known.
    pub tool: Option<String>,
    /// The vendor's id of the message or item (Claude `message.id` or `uuid`, Codex
    /// `call_id`), when it has one.
    pub id: Option<String>,
}

/// What a file says about its session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// The session's id (Claude `sessionId`, else the file's stem; Codex
    /// `session_meta.id`, else the id in the file name).
    pub id: Option<String>,
    /// The working directory it started in (the last one seen, when it changed).
    pub cwd: Option<String>,
    /// The git branch, when the vendor records it.
    pub branch: Option<String>,
    /// The git commit it started at (Codex `git.commit_hash`).
    pub commit: Option<String>,
    /// The session this one forked from or was spawned by (a Codex fork or subagent, a
    /// Claude subagent's parent session).
    pub parent: Option<String>,
    /// A subagent's (sidechain) transcript.
    pub subagent: bool,
    /// Its title (Claude `ai-title`/`custom-title`/`summary`, Codex thread name).
    pub title: Option<String>,
    /// The model, the last one seen.
    pub model: Option<String>,
    /// The vendor's CLI version.
    pub version: Option<String>,
    /// The first and last timestamps seen, in milliseconds since the epoch.
    pub first_ms: Option<i64>,
    /// See `first_ms`.
    pub last_ms: Option<i64>,
    /// Tokens used, each message counted once (Claude lines sharing a `message.id`
    /// counted once; Codex's last `token_count` totals).
    pub input_tokens: u64,
    /// See `input_tokens`.
    pub output_tokens: u64,
}

/// Milliseconds since the epoch of an RFC 3339 timestamp (`2025-09-14T10:02:03.123Z`).
pub fn timestamp_ms(text: &str) -> Option<i64> {
    let ts: jiff::Timestamp = text.parse().ok()?;
    Some(ts.as_millisecond())
}

/// An RFC 3339 timestamp (UTC) of milliseconds since the epoch.
pub fn rfc3339(ms: i64) -> Option<String> {
    jiff::Timestamp::from_millisecond(ms)
        .ok()
        .map(|t| t.to_string())
}

/// A transcript line as a JSON object, with the time it carries (`timestamp`), noted in
/// `meta`'s first and last times; `None` for anything else (not JSON, not an object).
pub(crate) fn open_line(
    text: &str,
    meta: &mut SessionMeta,
) -> Option<(serde_json::Value, Option<i64>)> {
    let value: serde_json::Value = serde_json::from_str(text.trim()).ok()?;
    if !value.is_object() {
        return None;
    }
    let ts = value
        .get("timestamp")
        .and_then(serde_json::Value::as_str)
        .and_then(timestamp_ms);
    if let Some(ms) = ts {
        meta.first_ms = Some(meta.first_ms.map_or(ms, |f| f.min(ms)));
        meta.last_ms = Some(meta.last_ms.map_or(ms, |l| l.max(ms)));
    }
    Some((value, ts))
}

/// The session an entry belongs to: the meta's id, else the one the file name gives.
pub(crate) fn session_of(meta: &SessionMeta, file_session: &str) -> String {
    meta.id.clone().unwrap_or_else(|| file_session.to_owned())
}
