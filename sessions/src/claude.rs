//! Claude Code transcripts: `~/.claude/projects/<slug>/<session>.jsonl`, and subagent
//! files (`<slug>/<session>/subagents/agent-<id>.jsonl` now, `<slug>/agent-<id>.jsonl`
//! with `isSidechain: true` before).
//!
//! The format is undocumented and changes between versions, so the reader takes what it
//! knows and passes over the rest; it never fails on a line:
//!
//! - `user` lines: a string content is a prompt (unless `isMeta`: injected, so `system`;
//!   command output and interruption notices Claude Code writes as user lines are
//!   `system` too; a compaction's `isCompactSummary` line is a `summary`). An array's
//!   `text` blocks are one prompt, each `tool_result` block is a result named by the
//!   `tool_use` it answers (a line holding only results is no prompt); images are
//!   noted as `[image]`, never kept.
//! - `assistant` lines: one content block per line, several lines sharing a
//!   `message.id` (each entry's `id`): `text` → assistant, `thinking` → reasoning,
//!   `tool_use`/`server_tool_use` → a call (a Bash command; an edited file's path and
//!   new text; else the input's JSON). API error notices (`isApiErrorMessage`) are
//!   `system`.
//! - `system` lines: compact boundaries (`compacted (trigger: auto, N tokens before)`)
//!   and notices with a `content`.
//! - `summary`, `ai-title`, `custom-title` lines (no `uuid`): a summary entry, and the
//!   session's title: a custom title beats an AI title, which beats an old summary.
//! - `attachment` lines: hook output is `system`; other attachments make nothing.
//! - Known state-only lines (`file-history-snapshot`, `queue-operation`, `progress`,
//!   `permission-mode`, ...) make nothing; a line of an unknown type is kept as
//!   `unknown` when it carries an obvious text, else it makes nothing too.
//!
//! **Usage** is counted once per `message.id`: its lines repeat (or grow) the same
//! usage, so each message counts the largest input and output seen on its lines. Input
//! is everything the model read: `input_tokens` plus `cache_creation_input_tokens`
//! plus `cache_read_input_tokens` (Claude reports them apart; Codex counts cached input
//! inside its input, so both vendors' totals mean the same). The last few message ids
//! are remembered, so lines of one message need not be adjacent.
//!
//! **Session ids.** A file's entries belong to the file's session: a `<uuid>.jsonl`
//! file is session `<uuid>` (should its lines name another `sessionId`, as history
//! copied from an earlier session does, that one is the `parent`); another name takes
//! the first `sessionId` of its lines, else the name itself.
//!
//! **Subagents** are sessions of their own: the entries of `agent-<id>.jsonl` belong to
//! `agent-<id>`, not to the main session its lines name, which becomes its `parent`.
//! So `palm sessions show agent-<id>` shows the subagent's work alone, the main
//! session's transcript is not interleaved with its subagents', and the parent link
//! still joins them. A file of another name whose first line is a sidechain
//! (`isSidechain: true`) is a subagent's as well: `agent-<agentId>` when the line says.
//!
//! The reader's state is bounded (the last 256 tool-use ids, the last 8 message ids),
//! so it can be persisted between ingests whatever the file's length.

use crate::transcript::{Entry, Role, SessionMeta, open_line, session_of};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;

/// The longest text an entry keeps, in bytes (a tool result can be megabytes).
pub const TEXT_BYTES_MAX: usize = 64 * 1024;
/// The longest title kept, in bytes.
pub(crate) const TITLE_BYTES_MAX: usize = 200;
/// Tool-use ids remembered to name the tool of a later result.
const TOOL_IDS_MAX: usize = 256;
/// Message ids remembered to count each message's usage once.
const MESSAGE_IDS_MAX: usize = 8;

/// Line types that only carry state: nothing to index.
const STATE_ONLY: [&str; 10] = [
    "file-history-snapshot",
    "queue-operation",
    "progress",
    "permission-mode",
    "mode",
    "last-prompt",
    "agent-name",
    "cost-state",
    "tag",
    // A headless run's last line, should one land in a transcript.
    "result",
];

/// How user lines that no person typed begin: output of local commands and `!` shell
/// commands, interruption notices.
const NOT_TYPED: [&str; 5] = [
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-stdout>",
    "<bash-stderr>",
    "[Request interrupted by user",
];

/// Where a title came from; a title from a higher source is not replaced by a lower.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum TitleSource {
    /// No title yet.
    #[default]
    None,
    /// An older build's `summary` line (the first one stays: later ones summarize
    /// other branches).
    Summary,
    /// `ai-title`: the latest one.
    Ai,
    /// `custom-title`, set by a person: the latest one.
    Custom,
}

/// Usage counted for one message id.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Counted {
    id: String,
    input: u64,
    output: u64,
}

/// Reads one Claude transcript file, a line at a time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClaudeReader {
    meta: SessionMeta,
    /// The session id the file name gives (`<uuid>` or `agent-<id>`).
    file_session: String,
    /// Whether a line saying `isSidechain` was read (the first one tells a subagent's
    /// file whose name does not).
    sidechain_known: bool,
    /// Usage counted for the last few message ids.
    counted: VecDeque<Counted>,
    /// Recent tool uses: id → tool name.
    tools: VecDeque<(String, String)>,
    /// Where the title came from.
    title_source: TitleSource,
}

/// At most `max` bytes of `text`, cut on a character boundary.
pub(crate) fn capped(text: &str, max: usize) -> String {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// What a line yields before it is stamped with its session, number and time.
pub(crate) struct Found {
    pub(crate) role: Role,
    pub(crate) text: String,
    pub(crate) tool: Option<String>,
    pub(crate) id: Option<String>,
}

impl Found {
    pub(crate) fn new(role: Role, text: String) -> Found {
        Found {
            role,
            text,
            tool: None,
            id: None,
        }
    }

    pub(crate) fn tool(mut self, tool: Option<String>) -> Found {
        self.tool = tool;
        self
    }

    pub(crate) fn id(mut self, id: Option<String>) -> Found {
        self.id = id;
        self
    }
}

/// Turns what a line yielded into entries: blank texts dropped, long ones capped.
pub(crate) fn stamp(
    found: Vec<Found>,
    session: &str,
    line: u64,
    timestamp_ms: Option<i64>,
    out: &mut Vec<Entry>,
) {
    for found in found {
        if found.text.trim().is_empty() {
            continue;
        }
        out.push(Entry {
            session: session.to_owned(),
            line,
            timestamp_ms,
            role: found.role,
            text: capped(&found.text, TEXT_BYTES_MAX),
            tool: found.tool,
            id: found.id,
        });
    }
}

/// The string at `key`, if it is one.
pub(crate) fn string(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The text a line of an unknown type obviously carries: a `content`, `text`,
/// `message` or `summary` string of one of `places`, or a `message.content` string or
/// text blocks.
pub(crate) fn obvious_text(places: &[&Value]) -> Option<String> {
    for place in places {
        for key in ["content", "text", "message", "summary"] {
            if let Some(text) = place.get(key).and_then(Value::as_str) {
                return Some(text.to_owned());
            }
        }
        let content = &place["message"]["content"];
        if let Some(text) = content.as_str() {
            return Some(text.to_owned());
        }
        let blocks = text_blocks(content);
        if !blocks.is_empty() {
            return Some(blocks);
        }
    }
    None
}

/// The `text` of an array's blocks, one per line.
fn text_blocks(content: &Value) -> String {
    content
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `stem` is a UUID (`8-4-4-4-12` hex digits), as session file names are.
fn is_uuid(stem: &str) -> bool {
    stem.len() == 36
        && stem.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
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
        } else if is_uuid(stem) {
            reader.meta.id = Some(stem.to_owned());
        }
        reader
    }

    /// What the lines so far said about the session.
    pub fn meta(&self) -> &SessionMeta {
        &self.meta
    }

    /// Reads line `number` (1-based, complete, without its newline) into `out`.
    pub fn line(&mut self, number: u64, text: &str, out: &mut Vec<Entry>) {
        let Some((value, timestamp_ms)) = open_line(text, &mut self.meta) else {
            return;
        };
        self.envelope(&value);
        let mut found = Vec::new();
        let uuid = string(&value, "uuid");
        match value.get("type").and_then(Value::as_str).unwrap_or("") {
            "user" => self.user(&value, uuid, &mut found),
            "assistant" => self.assistant(&value, uuid, &mut found),
            "system" => {
                let text = match value.get("subtype").and_then(Value::as_str) {
                    Some("compact_boundary") => compact_boundary(&value["compactMetadata"]),
                    _ => string(&value, "content").unwrap_or_default(),
                };
                found.push(Found::new(Role::System, text).id(uuid));
            }
            "summary" => {
                let text = string(&value, "summary").unwrap_or_default();
                self.title(&text, TitleSource::Summary, &mut found);
            }
            "ai-title" => {
                let text = string(&value, "aiTitle").unwrap_or_default();
                self.title(&text, TitleSource::Ai, &mut found);
            }
            "custom-title" => {
                let text = string(&value, "customTitle").unwrap_or_default();
                self.title(&text, TitleSource::Custom, &mut found);
            }
            "attachment" => {
                if let Some(said) = attachment(&value["attachment"]) {
                    found.push(said.id(uuid));
                }
            }
            kind if STATE_ONLY.contains(&kind) => {}
            _ => {
                if let Some(text) = obvious_text(&[&value]) {
                    found.push(Found::new(Role::Unknown, text).id(uuid));
                }
            }
        }
        let session = session_of(&self.meta, &self.file_session);
        stamp(found, &session, number, timestamp_ms, out);
    }

    /// The envelope's session facts: whose session, its parent, where, which build.
    fn envelope(&mut self, value: &Value) {
        if !self.sidechain_known
            && let Some(sidechain) = value.get("isSidechain").and_then(Value::as_bool)
        {
            self.sidechain_known = true;
            if sidechain && !self.meta.subagent {
                // A subagent's file named otherwise: its own session, not its parent's.
                self.meta.subagent = true;
                self.meta.id = Some(match string(value, "agentId") {
                    Some(agent) => format!("agent-{agent}"),
                    None => session_of(&self.meta, &self.file_session),
                });
            }
        }
        if let Some(session) = string(value, "sessionId").filter(|s| !s.is_empty()) {
            match &self.meta.id {
                None => self.meta.id = Some(session),
                // A subagent's lines name the main session; a session's file holding
                // another session's lines continues that one.
                Some(own) if *own != session && self.meta.parent.is_none() => {
                    self.meta.parent = Some(session);
                }
                Some(_) => {}
            }
        }
        if let Some(cwd) = string(value, "cwd").filter(|c| !c.is_empty()) {
            self.meta.cwd = Some(cwd);
        }
        if let Some(branch) = string(value, "gitBranch").filter(|b| !b.is_empty()) {
            self.meta.branch = Some(branch);
        }
        if let Some(version) = string(value, "version").filter(|v| !v.is_empty()) {
            self.meta.version = Some(version);
        }
    }

    fn user(&mut self, value: &Value, uuid: Option<String>, found: &mut Vec<Found>) {
        let flag = |key: &str| value.get(key).and_then(Value::as_bool) == Some(true);
        let role_of = |text: &str| {
            if flag("isCompactSummary") {
                Role::Summary
            } else if flag("isMeta") || NOT_TYPED.iter().any(|m| text.trim_start().starts_with(m)) {
                Role::System
            } else {
                Role::User
            }
        };
        match &value["message"]["content"] {
            Value::String(text) => found.push(Found::new(role_of(text), text.clone()).id(uuid)),
            Value::Array(blocks) => {
                let mut said = Vec::new();
                for block in blocks {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => said.extend(string(block, "text")),
                        Some("image") => said.push("[image]".to_owned()),
                        Some("tool_result") => {
                            let id = string(block, "tool_use_id");
                            let tool = id.as_deref().and_then(|id| self.tool_of(id));
                            let mut text = result_text(&block["content"]);
                            if block.get("is_error").and_then(Value::as_bool) == Some(true) {
                                text.insert_str(0, "[error] ");
                            }
                            found.push(Found::new(Role::ToolResult, text).tool(tool).id(id));
                        }
                        _ => {}
                    }
                }
                // Images alone say nothing worth keeping.
                if said.iter().any(|t| t != "[image]") {
                    let text = said.join("\n");
                    found.push(Found::new(role_of(&text), text).id(uuid));
                }
            }
            _ => {}
        }
    }

    fn assistant(&mut self, value: &Value, uuid: Option<String>, found: &mut Vec<Found>) {
        let message = &value["message"];
        let id = string(message, "id").or(uuid);
        self.usage(id.as_deref(), &message["usage"]);
        // Claude Code's own notices (API errors) carry the model `<synthetic>`.
        if let Some(model) = string(message, "model").filter(|m| !m.starts_with('<')) {
            self.meta.model = Some(model);
        }
        let notice = value.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true);
        let said = if notice {
            Role::System
        } else {
            Role::Assistant
        };
        if let Value::String(text) = &message["content"] {
            found.push(Found::new(said, text.clone()).id(id.clone()));
        }
        for block in message["content"].as_array().into_iter().flatten() {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let text = string(block, "text").unwrap_or_default();
                    found.push(Found::new(said, text).id(id.clone()));
                }
                Some("thinking") => {
                    let text = string(block, "thinking").unwrap_or_default();
                    found.push(Found::new(Role::Reasoning, text).id(id.clone()));
                }
                Some("tool_use" | "server_tool_use") => {
                    let name = string(block, "name").unwrap_or_else(|| "tool".into());
                    if let Some(tool_id) = string(block, "id") {
                        self.remember(tool_id, name.clone());
                    }
                    let text = tool_input(&block["input"]);
                    found.push(
                        Found::new(Role::ToolCall, text)
                            .tool(Some(name))
                            .id(id.clone()),
                    );
                }
                // A server tool's answer (web search) comes in the assistant's message.
                Some("web_search_tool_result") => {
                    let call = string(block, "tool_use_id");
                    let tool = call.as_deref().and_then(|c| self.tool_of(c));
                    let text = search_results(&block["content"]);
                    found.push(Found::new(Role::ToolResult, text).tool(tool).id(call));
                }
                _ => {}
            }
        }
    }

    /// A title line: a summary entry (unless it repeats the title), and the title
    /// unless a better source already set one.
    fn title(&mut self, text: &str, source: TitleSource, found: &mut Vec<Found>) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let title = capped(text, TITLE_BYTES_MAX);
        if self.meta.title.as_deref() == Some(title.as_str()) {
            self.title_source = self.title_source.max(source);
            return;
        }
        found.push(Found::new(Role::Summary, text.to_owned()));
        let replaces = match source {
            TitleSource::Summary => self.title_source == TitleSource::None,
            _ => self.title_source <= source,
        };
        if replaces {
            self.meta.title = Some(title);
            self.title_source = source;
        }
    }

    /// Counts a message's usage once: the largest input and output seen on its lines.
    fn usage(&mut self, id: Option<&str>, usage: &Value) {
        if !usage.is_object() {
            return;
        }
        let tokens = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
        let input = tokens("input_tokens")
            .saturating_add(tokens("cache_creation_input_tokens"))
            .saturating_add(tokens("cache_read_input_tokens"));
        let output = tokens("output_tokens");
        let (more_input, more_output) = match id {
            Some(id) => match self.counted.iter_mut().find(|c| c.id == id) {
                Some(counted) => {
                    let more = (
                        input.saturating_sub(counted.input),
                        output.saturating_sub(counted.output),
                    );
                    counted.input = counted.input.max(input);
                    counted.output = counted.output.max(output);
                    more
                }
                None => {
                    self.counted.push_back(Counted {
                        id: id.to_owned(),
                        input,
                        output,
                    });
                    if self.counted.len() > MESSAGE_IDS_MAX {
                        self.counted.pop_front();
                    }
                    (input, output)
                }
            },
            // A line with no id at all is a message of its own.
            None => (input, output),
        };
        self.meta.input_tokens = self.meta.input_tokens.saturating_add(more_input);
        self.meta.output_tokens = self.meta.output_tokens.saturating_add(more_output);
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

/// A compact boundary's notice: what triggered it and how many tokens it replaced.
fn compact_boundary(metadata: &Value) -> String {
    let trigger = metadata["trigger"].as_str().unwrap_or("unknown");
    match metadata["preTokens"].as_u64() {
        Some(tokens) => format!("compacted (trigger: {trigger}, {tokens} tokens before)"),
        None => format!("compacted (trigger: {trigger})"),
    }
}

/// What an attachment says that is worth keeping: a hook's output (`system`), or a
/// prompt queued while the model worked (`user`); other attachments (files, todos,
/// snippets of edited files) are context the transcript holds elsewhere.
fn attachment(attachment: &Value) -> Option<Found> {
    if attachment.get("type").and_then(Value::as_str) == Some("queued_command") {
        return string(attachment, "prompt").map(|p| Found::new(Role::User, p));
    }
    let mut parts: Vec<String> = Vec::new();
    for key in ["content", "stdout", "stderr", "text", "message"] {
        match attachment.get(key) {
            Some(Value::String(text)) if !text.trim().is_empty() => parts.push(text.clone()),
            Some(Value::Array(items)) => parts.extend(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|t| !t.trim().is_empty())
                    .map(str::to_owned),
            ),
            _ => {}
        }
    }
    if let Some(blocking) = attachment["blockingError"]["blockingError"].as_str() {
        parts.push(blocking.to_owned());
    }
    if parts.is_empty() {
        return None;
    }
    let text = parts.join("\n");
    let text = match string(attachment, "hookName") {
        Some(hook) => format!("{hook}: {text}"),
        None => text,
    };
    Some(Found::new(Role::System, text))
}

/// A tool result's text: a string, or the texts of its blocks.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|i| match i.get("type").and_then(Value::as_str) {
                Some("text") => string(i, "text"),
                Some("image") => Some("[image]".to_owned()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A web search's results: a title and address a line.
fn search_results(content: &Value) -> String {
    match content {
        Value::Array(results) => results
            .iter()
            .map(|r| {
                let title = r["title"].as_str().unwrap_or_default();
                let url = r["url"].as_str().unwrap_or_default();
                format!("{title} {url}").trim().to_owned()
            })
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What a tool was asked, as a person would search for it: a shell command; a file's
/// path and the text written to it (Edit, MultiEdit, Write, NotebookEdit; a path alone
/// for Read); else the input's JSON.
fn tool_input(input: &Value) -> String {
    let text_at = |key: &str| input.get(key).and_then(Value::as_str);
    if let Some(command) = text_at("command") {
        return command.to_owned();
    }
    if let Some(path) = text_at("file_path").or_else(|| text_at("notebook_path")) {
        let mut text = path.to_owned();
        let edits = input["edits"].as_array().into_iter().flatten();
        let written = ["new_string", "content", "new_source"]
            .iter()
            .filter_map(|key| text_at(key))
            .chain(edits.filter_map(|e| e.get("new_string").and_then(Value::as_str)));
        for piece in written {
            text.push('\n');
            text.push_str(piece);
        }
        return text;
    }
    match input {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
