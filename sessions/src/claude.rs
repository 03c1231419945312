//! Claude Code transcripts: `~/.claude/projects/<slug>/<session>.jsonl`, and subagent
//! files (`<slug>/<session>/subagents/agent-<id>.jsonl` now, `<slug>/agent-<id>.jsonl`
//! with `isSidechain: true` before).
//!
//! The format is undocumented and changes between versions, so the reader takes what it
//! knows and passes over the rest:
//!
//! - `user` lines: a string content is a prompt (unless `isMeta`: injected, so `system`);
//!   an array's `text` blocks are a prompt, its `tool_result` blocks are results (a line
//!   holding only results is not a prompt); images are noted, not kept.
//! - `assistant` lines: one content block per line, several lines sharing a
//!   `message.id`: `text` → assistant, `thinking` → reasoning, `tool_use` → a call (its
//!   command, path or JSON input). Usage is counted once per `message.id`: the last
//!   usage seen for an id is what counts, and it is added when the next id starts.
//! - `system` lines: compact boundaries and notices → system.
//! - `summary`, `ai-title`, `custom-title` (no `uuid`): the session's title (a custom
//!   title wins) and a summary entry.
//! - Known state-only lines (`file-history-snapshot`, `queue-operation`, `progress`,
//!   `permission-mode`, ...) make nothing; an unknown type with text is kept `unknown`.
//!
//! **Subagents** are sessions of their own: a subagent file's entries belong to
//! `agent-<id>` (its file name), with the main session as its `parent`, so
//! `palm sessions show agent-<id>` shows it and the parent links it.

use crate::transcript::{Entry, Role, SessionMeta, open_line, session_of};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;

/// The longest text an entry keeps (a tool result can be megabytes).
pub const TEXT_BYTES_MAX: usize = 64 * 1024;
/// Tool-use ids remembered to name the tool of a later result.
const TOOL_IDS_MAX: usize = 256;

/// Line types that only carry state: nothing to index.
const STATE_ONLY: [&str; 9] = [
    "file-history-snapshot",
    "queue-operation",
    "progress",
    "permission-mode",
    "mode",
    "last-prompt",
    "agent-name",
    "cost-state",
    "result",
];

/// Reads one Claude transcript file, a line at a time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClaudeReader {
    meta: SessionMeta,
    /// The session id from the file name (`<uuid>` or `agent-<id>`).
    file_session: String,
    /// The message id being read, and its last usage (counted when the next one starts).
    message: Option<String>,
    pending_input: u64,
    pending_output: u64,
    /// Recent tool uses: id → tool name.
    tools: VecDeque<(String, String)>,
    /// A title set by a person (`custom-title`): an AI title does not replace it.
    custom_title: bool,
}

/// At most `max` bytes of `text`, cut on a character boundary.
pub(crate) fn capped(text: &str, max: usize) -> String {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

fn string(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

impl ClaudeReader {
    /// A reader for the file named `file_name` (its last path component; the session id
    /// when the lines do not say).
    pub fn new(file_name: &str) -> ClaudeReader {
        let stem = file_name.strip_suffix(".jsonl").unwrap_or(file_name);
        let mut reader = ClaudeReader {
            file_session: stem.to_owned(),
            ..ClaudeReader::default()
        };
        if stem.starts_with("agent-") {
            reader.meta.subagent = true;
            reader.meta.id = Some(stem.to_owned());
        }
        reader
    }

    /// What the lines so far said about the session (usage includes the message being
    /// read).
    pub fn meta(&self) -> &SessionMeta {
        &self.meta
    }

    fn session(&self) -> String {
        session_of(&self.meta, &self.file_session)
    }

    /// Reads line `number` (1-based, complete, without its newline) into `out`.
    pub fn line(&mut self, number: u64, text: &str, out: &mut Vec<Entry>) {
        let Some((value, ts)) = open_line(text, &mut self.meta) else {
            return;
        };
        self.envelope(&value);
        let session = self.session();
        let mut push = |role: Role, text: String, tool: Option<String>, id: Option<String>| {
            if !text.trim().is_empty() {
                out.push(Entry {
                    session: session.clone(),
                    line: number,
                    timestamp_ms: ts,
                    role,
                    text: capped(&text, TEXT_BYTES_MAX),
                    tool,
                    id,
                });
            }
        };
        let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
        let uuid = string(&value, "uuid");
        match kind {
            "user" => {
                let meta_line = value.get("isMeta").and_then(Value::as_bool) == Some(true);
                let content = &value["message"]["content"];
                match content {
                    Value::String(text) => {
                        let role = if meta_line { Role::System } else { Role::User };
                        push(role, text.clone(), None, uuid);
                    }
                    Value::Array(blocks) => {
                        let mut said = Vec::new();
                        for block in blocks {
                            match block.get("type").and_then(Value::as_str) {
                                Some("text") => {
                                    if let Some(t) = block.get("text").and_then(Value::as_str) {
                                        said.push(t.to_owned());
                                    }
                                }
                                Some("image") => said.push("[image]".to_owned()),
                                Some("tool_result") => {
                                    let id = string(block, "tool_use_id");
                                    let tool = id.as_deref().and_then(|id| self.tool_of(id));
                                    let text = result_text(&block["content"]);
                                    let text = if block.get("is_error") == Some(&Value::Bool(true))
                                    {
                                        format!("[error] {text}")
                                    } else {
                                        text
                                    };
                                    push(Role::ToolResult, text, tool, id);
                                }
                                _ => {}
                            }
                        }
                        // A line of images alone, or of results alone, is no prompt.
                        if said.iter().any(|t| t != "[image]") {
                            let role = if meta_line { Role::System } else { Role::User };
                            push(role, said.join("\n"), None, uuid);
                        }
                    }
                    _ => {}
                }
            }
            "assistant" => {
                let message = &value["message"];
                let id = string(message, "id").or(uuid);
                self.usage(id.as_deref(), &message["usage"]);
                if let Some(model) = string(message, "model") {
                    self.meta.model = Some(model);
                }
                for block in message["content"].as_array().into_iter().flatten() {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let text = string(block, "text").unwrap_or_default();
                            push(Role::Assistant, text, None, id.clone());
                        }
                        Some("thinking") => {
                            let text = string(block, "thinking").unwrap_or_default();
                            push(Role::Reasoning, text, None, id.clone());
                        }
                        Some("tool_use") | Some("server_tool_use") => {
                            let name = string(block, "name").unwrap_or_else(|| "tool".into());
                            if let Some(tool_id) = string(block, "id") {
                                self.remember(tool_id, name.clone());
                            }
                            push(
                                Role::ToolCall,
                                tool_input(&block["input"]),
                                Some(name),
                                id.clone(),
                            );
                        }
                        _ => {}
                    }
                }
                if let Value::String(text) = &message["content"] {
                    push(Role::Assistant, text.clone(), None, id);
                }
            }
            "system" => {
                let text = match value.get("subtype").and_then(Value::as_str) {
                    Some("compact_boundary") => {
                        let meta = &value["compactMetadata"];
                        format!(
                            "compacted (trigger: {}, {} tokens before)",
                            meta["trigger"].as_str().unwrap_or("?"),
                            meta["preTokens"]
                                .as_u64()
                                .map_or("?".into(), |n| n.to_string())
                        )
                    }
                    _ => string(&value, "content").unwrap_or_default(),
                };
                push(Role::System, text, None, uuid);
            }
            "summary" => {
                let text = string(&value, "summary").unwrap_or_default();
                if self.meta.title.is_none() && !text.is_empty() {
                    self.meta.title = Some(capped(&text, 200));
                }
                push(Role::Summary, text, None, None);
            }
            "ai-title" | "custom-title" => {
                let field = if kind == "ai-title" {
                    "aiTitle"
                } else {
                    "customTitle"
                };
                let text = string(&value, field).unwrap_or_default();
                if !text.is_empty() && (kind == "custom-title" || !self.custom_title) {
                    self.meta.title = Some(capped(&text, 200));
                    self.custom_title |= kind == "custom-title";
                }
                push(Role::Summary, text, None, None);
            }
            "attachment" => {
                let attachment = &value["attachment"];
                let text = ["content", "stdout", "text", "message"]
                    .iter()
                    .find_map(|k| string(attachment, k))
                    .unwrap_or_default();
                push(Role::System, text, None, uuid);
            }
            kind if STATE_ONLY.contains(&kind) => {}
            _ => {
                let text = ["content", "text", "message", "summary"]
                    .iter()
                    .find_map(|k| value.get(*k).and_then(Value::as_str).map(str::to_owned))
                    .or_else(|| string(&value["message"], "content"))
                    .unwrap_or_default();
                push(Role::Unknown, text, None, uuid);
            }
        }
    }

    /// The envelope's session facts.
    fn envelope(&mut self, value: &Value) {
        let sidechain = value.get("isSidechain").and_then(Value::as_bool) == Some(true);
        if let Some(session) = string(value, "sessionId") {
            if self.meta.subagent || (sidechain && self.file_session.starts_with("agent-")) {
                // A subagent's lines name its parent's session.
                self.meta.subagent = true;
                self.meta.id = Some(self.file_session.clone());
                if self.meta.parent.is_none() && session != self.file_session {
                    self.meta.parent = Some(session);
                }
            } else if self.meta.id.is_none() {
                self.meta.id = Some(session);
            }
        }
        if let Some(cwd) = string(value, "cwd") {
            self.meta.cwd = Some(cwd);
        }
        if let Some(branch) = string(value, "gitBranch").filter(|b| !b.is_empty()) {
            self.meta.branch = Some(branch);
        }
        if let Some(version) = string(value, "version") {
            self.meta.version = Some(version);
        }
    }

    /// Counts a message's usage once: the last usage seen for an id, added to the meta
    /// (replacing the earlier count of the same id).
    fn usage(&mut self, id: Option<&str>, usage: &Value) {
        let input = [
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ]
        .iter()
        .filter_map(|k| usage.get(*k).and_then(Value::as_u64))
        .sum::<u64>();
        let output = usage
            .get("output_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if usage.is_null() {
            return;
        }
        let same = id.is_some() && self.message.as_deref() == id;
        if same {
            // The same message again: its newer usage replaces the earlier.
            self.meta.input_tokens = self.meta.input_tokens.saturating_sub(self.pending_input);
            self.meta.output_tokens = self.meta.output_tokens.saturating_sub(self.pending_output);
        }
        self.message = id.map(str::to_owned);
        self.pending_input = input;
        self.pending_output = output;
        self.meta.input_tokens += input;
        self.meta.output_tokens += output;
    }

    fn remember(&mut self, id: String, name: String) {
        self.tools.push_back((id, name));
        if self.tools.len() > TOOL_IDS_MAX {
            self.tools.pop_front();
        }
    }

    fn tool_of(&self, id: &str) -> Option<String> {
        self.tools
            .iter()
            .rev()
            .find(|(known, _)| known == id)
            .map(|(_, name)| name.clone())
    }
}

/// A tool result's text: a string, or the texts of its blocks.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|i| match i.get("type").and_then(Value::as_str) {
                Some("text") => i.get("text").and_then(Value::as_str).map(str::to_owned),
                Some("image") => Some("[image]".to_owned()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What a tool was asked: a command, a path and what is written, else its JSON input.
fn tool_input(input: &Value) -> String {
    if let Some(command) = input.get("command").and_then(Value::as_str) {
        return command.to_owned();
    }
    if let Some(path) = input.get("file_path").and_then(Value::as_str) {
        let written = ["new_string", "content"]
            .iter()
            .find_map(|k| input.get(*k).and_then(Value::as_str));
        return match written {
            Some(text) => format!("{path}\n{text}"),
            None => path.to_owned(),
        };
    }
    match input {
        Value::Null => String::new(),
        other => other.to_string(),
    }
}
