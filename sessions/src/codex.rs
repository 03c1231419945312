//! Codex CLI rollouts: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`
//! (and `archived_sessions/`), lines `{"timestamp", "type", "payload"}`.
//!
//! - `session_meta` names the session (the *first* one: a fork's file replays its
//!   parent, whose `session_meta` may follow; the fork keeps its own id and records the
//!   parent). A resume appends to the same file with no new meta: reading just goes on.
//!   Without a `session_meta` (legacy files: a bare first line `{id, timestamp, ...}`,
//!   `record_type` lines, top-level `message` items) the id comes from that line, else
//!   from the file name.
//! - Codex writes a prompt twice (a `response_item` user message and an
//!   `event_msg.user_message`), an answer twice (`output_text` and `agent_message`) and
//!   reasoning twice (summary and `agent_reasoning`), in either order: the first copy is
//!   kept, the second (same text, among the last few of its kind) skipped.
//! - The first user messages are injected context (`<environment_context>`, AGENTS.md
//!   instructions, `<user_instructions>`): they are `system`, never prompts.
//! - Tool calls (`function_call` with JSON-string arguments, `custom_tool_call`
//!   `apply_patch`, `local_shell_call`, `web_search_call`) and their outputs (decoded once
//!   more when the output is itself JSON) are calls and results, the result named by its
//!   call's tool. `exec_command_end` and `patch_apply_end` repeat a call's output and
//!   are skipped.
//! - `token_count.info` may be null; otherwise its totals are cumulative: the last wins.
//!
//! A replayed parent's items in a fork are in the fork's file, and are read as the
//! fork's: they are what that session was given.

use crate::claude::{TEXT_BYTES_MAX, capped};
use crate::transcript::{Entry, Role, SessionMeta, open_line, session_of};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;

/// Texts remembered per kind to skip Codex's second copy.
const RECENT_MAX: usize = 8;
/// Call ids remembered to name the tool of a later output.
const CALLS_MAX: usize = 256;

/// Markers of injected user messages (context, not prompts).
const INJECTED: [&str; 6] = [
    "<environment_context>",
    "# AGENTS.md instructions",
    "<user_instructions>",
    "<INSTRUCTIONS>",
    "<permissions instructions>",
    "<user_shell_command>",
];

/// Reads one Codex rollout file, a line at a time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CodexReader {
    meta: SessionMeta,
    /// The id in the file name (`rollout-<time>-<uuid>.jsonl`).
    file_session: String,
    /// Recent (role, text) kept, with the source they came from (`item` or `event`).
    recent: VecDeque<(Role, String, bool)>,
    /// Recent calls: id → tool.
    calls: VecDeque<(String, String)>,
}

fn string(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

impl CodexReader {
    /// A reader for the file named `file_name` (its last path component; the session id
    /// when the lines do not say).
    pub fn new(file_name: &str) -> CodexReader {
        let stem = file_name.strip_suffix(".jsonl").unwrap_or(file_name);
        // rollout-2025-09-14T10-02-03-<uuid>: the uuid is the last 36 characters.
        let id = if stem.len() >= 36 && stem.starts_with("rollout-") {
            stem[stem.len() - 36..].to_owned()
        } else {
            stem.to_owned()
        };
        CodexReader {
            file_session: id,
            ..CodexReader::default()
        }
    }

    /// What the lines so far said about the session.
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
        let kind = value.get("type").and_then(Value::as_str);
        let payload = &value["payload"];
        let mut found: Vec<(Role, String, Option<String>, Option<String>)> = Vec::new();
        match kind {
            Some("session_meta") => self.session_meta(payload),
            Some("turn_context") => {
                if let Some(cwd) = string(payload, "cwd") {
                    self.meta.cwd = Some(cwd);
                }
                if let Some(model) = string(payload, "model") {
                    self.meta.model = Some(model);
                }
            }
            Some("response_item") => self.item(payload, &mut found),
            Some("event_msg") => self.event(payload, &mut found),
            Some("compacted") => {
                let text = string(payload, "message").unwrap_or_default();
                found.push((Role::System, format!("compacted: {text}"), None, None));
            }
            // Legacy items at the top level.
            Some(
                "message"
                | "function_call"
                | "function_call_output"
                | "reasoning"
                | "custom_tool_call"
                | "custom_tool_call_output"
                | "local_shell_call",
            ) => self.item(&value, &mut found),
            Some(_) => {
                if let Some(text) = string(payload, "message").or_else(|| string(payload, "text")) {
                    found.push((Role::Unknown, text, None, None));
                }
            }
            None => {
                // A legacy first line `{id, timestamp, instructions, git}`; `record_type`
                // lines carry state only.
                if value.get("record_type").is_none()
                    && self.meta.id.is_none()
                    && let Some(id) = string(&value, "id")
                {
                    self.meta.id = Some(id);
                    self.git(&value["git"]);
                }
            }
        }
        let session = self.session();
        for (role, text, tool, id) in found {
            if text.trim().is_empty() {
                continue;
            }
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
    }

    fn session_meta(&mut self, meta: &Value) {
        let id = string(meta, "id");
        if self.meta.id.is_some() && self.meta.id != id {
            // A fork replays its parent: the parent's meta names the parent, if the
            // fork's own did not.
            if self.meta.parent.is_none() {
                self.meta.parent = id;
            }
            return;
        }
        self.meta.id = id;
        if let Some(cwd) = string(meta, "cwd") {
            self.meta.cwd = Some(cwd);
        }
        self.meta.version = string(meta, "cli_version").or(self.meta.version.take());
        if let Some(parent) = string(meta, "forked_from_id") {
            self.meta.parent = Some(parent);
        }
        if let Some(spawn) = meta["source"].get("subagent") {
            self.meta.subagent = true;
            if let Some(parent) = spawn
                .get("thread_spawn")
                .and_then(|t| string(t, "parent_thread_id"))
            {
                self.meta.parent = Some(parent);
            }
        }
        if let Some(name) = string(meta, "agent_nickname").or_else(|| string(meta, "thread_name")) {
            self.meta.title = Some(capped(&name, 200));
        }
        self.git(&meta["git"]);
    }

    fn git(&mut self, git: &Value) {
        if let Some(commit) = string(git, "commit_hash") {
            self.meta.commit = Some(commit);
        }
        if let Some(branch) = string(git, "branch") {
            self.meta.branch = Some(branch);
        }
    }

    /// Whether `text` in `role` is Codex's second copy of one kept from the other
    /// source; else it is remembered.
    fn second_copy(&mut self, role: Role, text: &str, from_event: bool) -> bool {
        let text = text.trim();
        if let Some(i) = self
            .recent
            .iter()
            .position(|(r, t, e)| *r == role && t == text && *e != from_event)
        {
            self.recent.remove(i);
            return true;
        }
        self.recent.push_back((role, text.to_owned(), from_event));
        if self.recent.len() > RECENT_MAX {
            self.recent.pop_front();
        }
        false
    }

    fn call(&mut self, id: Option<String>, tool: &str) {
        if let Some(id) = id {
            self.calls.push_back((id, tool.to_owned()));
            if self.calls.len() > CALLS_MAX {
                self.calls.pop_front();
            }
        }
    }

    fn tool_of(&self, id: Option<&str>) -> Option<String> {
        let id = id?;
        self.calls
            .iter()
            .rev()
            .find(|(known, _)| known == id)
            .map(|(_, tool)| tool.clone())
    }

    fn item(
        &mut self,
        item: &Value,
        found: &mut Vec<(Role, String, Option<String>, Option<String>)>,
    ) {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let text = item["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n");
                let text = match &item["content"] {
                    Value::String(s) => s.clone(),
                    _ => text,
                };
                match item.get("role").and_then(Value::as_str) {
                    Some("user") => {
                        let trimmed = text.trim_start();
                        if INJECTED.iter().any(|m| trimmed.starts_with(m)) {
                            found.push((Role::System, text, None, None));
                        } else if !self.second_copy(Role::User, &text, false) {
                            found.push((Role::User, text, None, None));
                        }
                    }
                    Some("assistant") => {
                        if !self.second_copy(Role::Assistant, &text, false) {
                            found.push((Role::Assistant, text, None, None));
                        }
                    }
                    _ => found.push((Role::System, text, None, None)),
                }
            }
            Some("reasoning") => {
                let text = item["summary"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n");
                if !text.is_empty() && !self.second_copy(Role::Reasoning, &text, false) {
                    found.push((Role::Reasoning, text, None, None));
                }
            }
            Some("function_call") => {
                let name = string(item, "name").unwrap_or_else(|| "function".into());
                let id = string(item, "call_id");
                self.call(id.clone(), &name);
                let arguments = string(item, "arguments").unwrap_or_default();
                found.push((Role::ToolCall, command_of(&arguments), Some(name), id));
            }
            Some("custom_tool_call") => {
                let name = string(item, "name").unwrap_or_else(|| "tool".into());
                let id = string(item, "call_id");
                self.call(id.clone(), &name);
                let input = string(item, "input").unwrap_or_default();
                found.push((Role::ToolCall, input, Some(name), id));
            }
            Some("function_call_output") | Some("custom_tool_call_output") => {
                let id = string(item, "call_id");
                let tool = self.tool_of(id.as_deref());
                found.push((Role::ToolResult, output_of(&item["output"]), tool, id));
            }
            Some("local_shell_call") => {
                let id = string(item, "call_id");
                self.call(id.clone(), "local_shell");
                let command = &item["action"]["command"];
                let text = match command {
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                    other => other.as_str().unwrap_or_default().to_owned(),
                };
                found.push((Role::ToolCall, text, Some("local_shell".into()), id));
            }
            Some("web_search_call") => {
                let query = string(&item["action"], "query").unwrap_or_default();
                found.push((Role::ToolCall, query, Some("web_search".into()), None));
            }
            Some("compaction") => {
                found.push((Role::System, "compacted".into(), None, None));
            }
            _ => {}
        }
    }

    fn event(
        &mut self,
        event: &Value,
        found: &mut Vec<(Role, String, Option<String>, Option<String>)>,
    ) {
        match event.get("type").and_then(Value::as_str) {
            Some("user_message") => {
                let text = string(event, "message").unwrap_or_default();
                if !self.second_copy(Role::User, &text, true) {
                    found.push((Role::User, text, None, None));
                }
            }
            Some("agent_message") => {
                let text = string(event, "message").unwrap_or_default();
                if !self.second_copy(Role::Assistant, &text, true) {
                    found.push((Role::Assistant, text, None, None));
                }
            }
            Some("agent_reasoning") => {
                let text = string(event, "text").unwrap_or_default();
                if !self.second_copy(Role::Reasoning, &text, true) {
                    found.push((Role::Reasoning, text, None, None));
                }
            }
            Some("token_count") => {
                let total = &event["info"]["total_token_usage"];
                if let (Some(input), Some(output)) = (
                    total.get("input_tokens").and_then(Value::as_u64),
                    total.get("output_tokens").and_then(Value::as_u64),
                ) {
                    self.meta.input_tokens = input;
                    self.meta.output_tokens = output;
                }
            }
            Some("turn_aborted") => {
                let why = string(event, "reason").unwrap_or_else(|| "interrupted".into());
                found.push((Role::System, format!("turn aborted: {why}"), None, None));
            }
            Some("context_compacted") => {
                found.push((Role::System, "context compacted".into(), None, None));
            }
            Some("thread_rolled_back") => {
                found.push((Role::System, "thread rolled back".into(), None, None));
            }
            _ => {}
        }
    }
}

/// A function call's arguments (a JSON string): its command when it has one.
fn command_of(arguments: &str) -> String {
    let Ok(parsed) = serde_json::from_str::<Value>(arguments) else {
        return arguments.to_owned();
    };
    match parsed.get("command").or_else(|| parsed.get("cmd")) {
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        Some(Value::String(cmd)) => cmd.clone(),
        _ => arguments.to_owned(),
    }
}

/// A call's output: a string, often JSON holding `{"output": ...}` once more.
fn output_of(output: &Value) -> String {
    let text = match output {
        Value::String(text) => text.clone(),
        Value::Null => return String::new(),
        other => {
            return other
                .get("output")
                .or_else(|| other.get("content"))
                .and_then(Value::as_str)
                .map_or_else(|| other.to_string(), str::to_owned);
        }
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => match map.get("output").and_then(Value::as_str) {
            Some(inner) => inner.to_owned(),
            None => text,
        },
        _ => text,
    }
}
