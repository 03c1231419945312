//! Codex CLI rollouts: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`
//! (and `archived_sessions/`), lines `{"timestamp", "type", "payload"}`; older files
//! (before about September 2025) hold bare items instead.
//!
//! The reader never fails on a line, and decides everything line by line (it cannot
//! look ahead: the ingest feeds a file as it grows):
//!
//! - **Whose session.** The *first* `session_meta` names the file's session. A fork's
//!   file replays its parent, whose `session_meta` may follow (line 2): a later meta
//!   with another id replaces nothing, it only names the `parent` when the fork's own
//!   meta did not (`forked_from_id`). A subagent's meta (`source.subagent`) makes the
//!   session a subagent's, its parent the spawning thread. A resume appends to the same
//!   file without a new meta: reading just goes on. Every entry of a file belongs to the
//!   file's session, a fork's replayed parent items included: they are what the fork
//!   was given, `palm sessions show <fork>` shows them in place, and the parent's own
//!   file already holds them under the parent's id. A legacy file takes its id from its
//!   bare first line `{id, timestamp, instructions, git}`, else from the file name.
//! - **Prompts once.** Codex writes a prompt twice: a `response_item` user message,
//!   then an `event_msg.user_message`. Its user messages also carry injected context
//!   (`<environment_context>`, `# AGENTS.md instructions for …`, `<INSTRUCTIONS>`,
//!   `<user_instructions>`, ...), which the event leaves out. So in the rollout format
//!   (any line with a `payload`: always line 1) the event is the prompt, in whichever
//!   order the two copies come; a user message item is `system` when it looks
//!   injected, and otherwise skipped as the event's copy. Legacy files have no events:
//!   their user messages are prompts unless they look injected.
//! - **Answers and reasoning once.** The `response_item`s are authoritative (they are
//!   the history Codex itself resumes from, in both formats): assistant `output_text`
//!   and reasoning summaries are kept; `agent_message` and `agent_reasoning` events,
//!   copies made for the UI, are skipped.
//! - **Tools.** `function_call` (arguments are a JSON string: its `command` or `cmd`
//!   when it has one, `bash -lc` unwrapped), `custom_tool_call` (`apply_patch`: the
//!   patch), `local_shell_call` and `web_search_call` are calls; their outputs are
//!   results named by the call's tool through `call_id`, an output that is itself JSON
//!   `{"output": …}` decoded once more. A call's result is kept once: the extended
//!   mode's `exec_command_end` and `patch_apply_end` repeat the output item, and the
//!   first of them to come is the one kept. A call with no output (a resume cut it)
//!   is just a call.
//! - **Tokens.** `token_count.info` may be null (nothing changes); otherwise its
//!   `total_token_usage` is cumulative, so the last one wins (Codex counts cached input
//!   inside `input_tokens`).
//!
//! The reader's state is bounded (the last 256 call ids), so it can be persisted
//! between ingests whatever the file's length.

use crate::claude::{Found, TITLE_BYTES_MAX, capped, obvious_text, stamp, string};
use crate::transcript::{Entry, Role, SessionMeta, open_line, session_of};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;

/// Call ids remembered to name the tool of a later output and keep one result each.
const CALLS_MAX: usize = 256;

/// How injected user messages (context, not prompts) begin.
const INJECTED: [&str; 10] = [
    "<environment_context>",
    "# AGENTS.md instructions",
    "<user_instructions>",
    "<INSTRUCTIONS>",
    "<permissions instructions>",
    "<user_shell_command>",
    "<turn_aborted>",
    "<user_action>",
    "<skill>",
    "<developer_instructions>",
];

/// Line types of the rollout format, whose prompts come from `user_message` events.
const ROLLOUT_TYPES: [&str; 5] = [
    "session_meta",
    "response_item",
    "event_msg",
    "turn_context",
    "compacted",
];

/// Item types older files write at the top level, with no envelope.
const LEGACY_ITEMS: [&str; 8] = [
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "web_search_call",
];

/// Events that make no entry: turn markers, and copies of items read elsewhere.
const QUIET_EVENTS: [&str; 9] = [
    "agent_message",
    "agent_reasoning",
    "agent_reasoning_raw_content",
    "task_started",
    "task_complete",
    "turn_started",
    "turn_complete",
    "entered_review_mode",
    "exited_review_mode",
];

/// A call seen: its tool, and whether its result was read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Call {
    id: String,
    tool: Option<String>,
    answered: bool,
}

/// Reads one Codex rollout file, a line at a time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CodexReader {
    meta: SessionMeta,
    /// The id in the file name (`rollout-<time>-<uuid>.jsonl`), else its stem.
    file_session: String,
    /// The file's own `session_meta` (its first) was read.
    own_meta: bool,
    /// The file is in the rollout format: prompts come from `user_message` events.
    rollout_format: bool,
    /// Recent calls, oldest first.
    calls: VecDeque<Call>,
}

impl CodexReader {
    /// A reader for the file named `file_name` (its last path component; the session id
    /// when the lines do not say).
    pub fn new(file_name: &str) -> CodexReader {
        let stem = file_name.strip_suffix(".jsonl").unwrap_or(file_name);
        // rollout-2025-09-14T10-02-03-<uuid>: the uuid is the last 36 characters.
        let id = match stem.len().checked_sub(36) {
            Some(start) if stem.starts_with("rollout-") && stem.is_char_boundary(start) => {
                &stem[start..]
            }
            _ => stem,
        };
        CodexReader {
            file_session: id.to_owned(),
            ..CodexReader::default()
        }
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
        let kind = value.get("type").and_then(Value::as_str);
        let enveloped = value.get("payload").is_some();
        if enveloped && kind.is_some_and(|k| ROLLOUT_TYPES.contains(&k)) {
            self.rollout_format = true;
        }
        let payload = &value["payload"];
        let mut found = Vec::new();
        match kind {
            Some("session_meta") => self.session_meta(payload),
            Some("turn_context") => {
                if let Some(cwd) = string(payload, "cwd").filter(|c| !c.is_empty()) {
                    self.meta.cwd = Some(cwd);
                }
                if let Some(model) = string(payload, "model").filter(|m| !m.is_empty()) {
                    self.meta.model = Some(model);
                }
            }
            Some("response_item") => self.item(payload, &mut found),
            Some("event_msg") => self.event(payload, &mut found),
            Some("compacted") => {
                let text = string(payload, "message").filter(|m| !m.trim().is_empty());
                let text = text.unwrap_or_else(|| "compacted".into());
                found.push(Found::new(Role::System, text));
            }
            Some(item) if !enveloped && LEGACY_ITEMS.contains(&item) => {
                self.item(&value, &mut found);
            }
            Some(_) => {
                if let Some(text) = obvious_text(&[payload, &value]) {
                    found.push(Found::new(Role::Unknown, text));
                }
            }
            None => self.legacy_meta(&value),
        }
        let session = session_of(&self.meta, &self.file_session);
        stamp(found, &session, number, timestamp_ms, out);
    }

    /// A legacy file's bare first line `{id, timestamp, instructions, git}` names the
    /// session; `{"record_type": "state"}` lines carry state only.
    fn legacy_meta(&mut self, value: &Value) {
        if value.get("record_type").is_some() || self.own_meta {
            return;
        }
        if let Some(id) = string(value, "id").filter(|id| !id.is_empty()) {
            self.own_meta = true;
            self.meta.id = Some(id);
            self.git(&value["git"]);
        }
    }

    fn session_meta(&mut self, meta: &Value) {
        let id = string(meta, "id").filter(|id| !id.is_empty());
        if self.own_meta && id.is_some() && self.meta.id != id {
            // A fork replays its parent: the parent's meta names the parent, if the
            // fork's own did not.
            if self.meta.parent.is_none() {
                self.meta.parent = id;
            }
            return;
        }
        self.own_meta = true;
        if id.is_some() {
            self.meta.id = id;
        }
        if let Some(cwd) = string(meta, "cwd").filter(|c| !c.is_empty()) {
            self.meta.cwd = Some(cwd);
        }
        if let Some(version) = string(meta, "cli_version") {
            self.meta.version = Some(version);
        }
        if let Some(parent) = string(meta, "forked_from_id") {
            self.meta.parent = Some(parent);
        }
        // `{"subagent": {"thread_spawn": {...}}}`, or `{"subagent": "review"}`.
        if let Some(spawn) = meta["source"].get("subagent") {
            self.meta.subagent = true;
            if let Some(parent) = string(&spawn["thread_spawn"], "parent_thread_id") {
                self.meta.parent = Some(parent);
            }
        }
        if let Some(name) = string(meta, "thread_name").or_else(|| string(meta, "agent_nickname")) {
            self.meta.title = Some(capped(&name, TITLE_BYTES_MAX));
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

    fn item(&mut self, item: &Value, found: &mut Vec<Found>) {
        let id = string(item, "id");
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let text = content_text(&item["content"]);
                match item.get("role").and_then(Value::as_str) {
                    Some("user") => {
                        if looks_injected(&text) {
                            found.push(Found::new(Role::System, text).id(id));
                        } else if !self.rollout_format {
                            found.push(Found::new(Role::User, text).id(id));
                        }
                        // Else the `user_message` event carries this prompt.
                    }
                    Some("assistant") => found.push(Found::new(Role::Assistant, text).id(id)),
                    _ => found.push(Found::new(Role::System, text).id(id)),
                }
            }
            Some("reasoning") => {
                let mut text = content_text(&item["summary"]);
                if text.trim().is_empty() {
                    // Open models write their reasoning itself, not a summary.
                    text = content_text(&item["content"]);
                }
                found.push(Found::new(Role::Reasoning, text).id(id));
            }
            Some("function_call") => {
                let name = string(item, "name").unwrap_or_else(|| "function".into());
                let call = string(item, "call_id");
                self.call(call.as_deref(), &name);
                let text = match &item["arguments"] {
                    Value::String(arguments) => arguments_text(arguments),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                found.push(Found::new(Role::ToolCall, text).tool(Some(name)).id(call));
            }
            Some("custom_tool_call") => {
                let name = string(item, "name").unwrap_or_else(|| "tool".into());
                let call = string(item, "call_id");
                self.call(call.as_deref(), &name);
                let input = string(item, "input").unwrap_or_default();
                found.push(Found::new(Role::ToolCall, input).tool(Some(name)).id(call));
            }
            Some("local_shell_call") => {
                let call = string(item, "call_id").or(id);
                self.call(call.as_deref(), "local_shell");
                let text = command_text(&item["action"]["command"]).unwrap_or_default();
                let tool = Some("local_shell".to_owned());
                found.push(Found::new(Role::ToolCall, text).tool(tool).id(call));
            }
            Some("web_search_call") => {
                let action = &item["action"];
                let text = string(action, "query")
                    .or_else(|| string(action, "url"))
                    .unwrap_or_default();
                let tool = Some("web_search".to_owned());
                found.push(Found::new(Role::ToolCall, text).tool(tool).id(id));
            }
            Some("function_call_output" | "custom_tool_call_output") => {
                let call = string(item, "call_id");
                if let Some(tool) = self.first_result(call.as_deref()) {
                    let text = output_text(&item["output"]);
                    found.push(Found::new(Role::ToolResult, text).tool(tool).id(call));
                }
            }
            Some("compaction") => found.push(Found::new(Role::System, "compacted".into())),
            // `ghost_snapshot` and items to come: nothing to read, unless they say it.
            _ => {
                if let Some(text) = obvious_text(&[item]) {
                    found.push(Found::new(Role::Unknown, text).id(id));
                }
            }
        }
    }

    fn event(&mut self, event: &Value, found: &mut Vec<Found>) {
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "user_message" => {
                let mut text = string(event, "message").unwrap_or_default();
                let images = event["images"].as_array().map_or(0, Vec::len);
                if text.trim().is_empty() && images > 0 {
                    text = "[image]".into();
                }
                // Injected context is read from its item (as `system`), never twice.
                if !looks_injected(&text) {
                    found.push(Found::new(Role::User, text));
                }
            }
            "token_count" => {
                let total = &event["info"]["total_token_usage"];
                if let (Some(input), Some(output)) = (
                    total.get("input_tokens").and_then(Value::as_u64),
                    total.get("output_tokens").and_then(Value::as_u64),
                ) {
                    self.meta.input_tokens = input;
                    self.meta.output_tokens = output;
                }
            }
            "exec_command_end" => {
                let call = string(event, "call_id");
                if let Some(tool) = self.first_result(call.as_deref()) {
                    let output = string(event, "aggregated_output").unwrap_or_else(|| {
                        let out = string(event, "stdout").unwrap_or_default();
                        let err = string(event, "stderr").unwrap_or_default();
                        format!("{out}{err}")
                    });
                    let text = match event["exit_code"].as_i64() {
                        Some(code) if code != 0 => format!("[exit {code}] {output}"),
                        _ => output,
                    };
                    found.push(Found::new(Role::ToolResult, text).tool(tool).id(call));
                }
            }
            "patch_apply_end" => {
                let call = string(event, "call_id");
                if let Some(tool) = self.first_result(call.as_deref()) {
                    let out = string(event, "stdout").unwrap_or_default();
                    let err = string(event, "stderr").unwrap_or_default();
                    let text = match event["success"].as_bool() {
                        Some(false) => format!("[failed] {out}{err}"),
                        _ => format!("{out}{err}"),
                    };
                    let tool = tool.or_else(|| Some("apply_patch".into()));
                    found.push(Found::new(Role::ToolResult, text).tool(tool).id(call));
                }
            }
            "turn_aborted" => {
                let why = string(event, "reason").unwrap_or_else(|| "interrupted".into());
                found.push(Found::new(Role::System, format!("turn aborted: {why}")));
            }
            "context_compacted" => {
                found.push(Found::new(Role::System, "context compacted".into()));
            }
            "thread_rolled_back" => {
                let text = match event["num_turns"].as_u64() {
                    Some(turns) => format!("thread rolled back ({turns} turns)"),
                    None => "thread rolled back".to_owned(),
                };
                found.push(Found::new(Role::System, text));
            }
            "thread_name_updated" => {
                if let Some(name) = string(event, "thread_name").filter(|n| !n.trim().is_empty()) {
                    self.meta.title = Some(capped(&name, TITLE_BYTES_MAX));
                    found.push(Found::new(Role::Summary, name));
                }
            }
            "error" | "warning" | "stream_error" | "undo_completed" => {
                if let Some(text) = string(event, "message") {
                    found.push(Found::new(Role::System, text));
                }
            }
            // Persisted for plan items only (the others are copies of response items):
            // the plan is the agent's own text, kept as such.
            "item_completed" => {
                let item = &event["item"];
                let is_plan = item["type"]
                    .as_str()
                    .is_some_and(|kind| kind.eq_ignore_ascii_case("plan"));
                if is_plan && let Some(text) = string(item, "text") {
                    found.push(Found::new(Role::Assistant, text));
                }
            }
            kind if QUIET_EVENTS.contains(&kind) => {}
            _ => {
                if let Some(text) = obvious_text(&[event]) {
                    found.push(Found::new(Role::Unknown, text));
                }
            }
        }
    }

    /// Remembers call `id` of `tool`, forgetting the oldest beyond [`CALLS_MAX`].
    fn call(&mut self, id: Option<&str>, tool: &str) {
        let Some(id) = id else {
            return;
        };
        self.calls.retain(|c| c.id != id);
        self.calls.push_back(Call {
            id: id.to_owned(),
            tool: Some(tool.to_owned()),
            answered: false,
        });
        if self.calls.len() > CALLS_MAX {
            self.calls.pop_front();
        }
    }

    /// For a result of call `id`: `Some(its tool, when known)` when it is the call's
    /// first result (now marked answered), `None` when one was read already.
    fn first_result(&mut self, id: Option<&str>) -> Option<Option<String>> {
        let Some(id) = id else {
            return Some(None);
        };
        if let Some(call) = self.calls.iter_mut().find(|c| c.id == id) {
            if call.answered {
                return None;
            }
            call.answered = true;
            return Some(call.tool.clone());
        }
        // A call forgotten, or none (a person's `!` command): remember the answer.
        self.calls.push_back(Call {
            id: id.to_owned(),
            tool: None,
            answered: true,
        });
        if self.calls.len() > CALLS_MAX {
            self.calls.pop_front();
        }
        Some(None)
    }
}

/// Whether a user message is context Codex injected rather than a person's prompt.
fn looks_injected(text: &str) -> bool {
    let text = text.trim_start();
    INJECTED.iter().any(|marker| text.starts_with(marker))
}

/// The texts of a message's content parts (`input_text`, `output_text`,
/// `summary_text`, ...), one per line; a plain string as it is.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A function call's arguments (a JSON string), as a person would search for them: its
/// command (`command: [..]` or `cmd: ".."`), its patch (`input`), else as written.
fn arguments_text(arguments: &str) -> String {
    let Ok(parsed) = serde_json::from_str::<Value>(arguments) else {
        return arguments.to_owned();
    };
    if let Some(command) = parsed
        .get("command")
        .or_else(|| parsed.get("cmd"))
        .and_then(command_text)
    {
        return command;
    }
    match parsed.get("input").and_then(Value::as_str) {
        Some(patch) => patch.to_owned(),
        None => arguments.to_owned(),
    }
}

/// A command as a shell line: a string as it is; an argv joined, a shell's `-lc`
/// script unwrapped (`["bash", "-lc", "cargo test"]` is `cargo test`).
fn command_text(command: &Value) -> Option<String> {
    match command {
        Value::String(line) => Some(line.clone()),
        Value::Array(argv) => {
            let argv: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
            if let [shell, flag, script] = argv.as_slice() {
                let shell = shell.rsplit('/').next().unwrap_or(shell);
                if matches!(shell, "bash" | "sh" | "zsh") && matches!(*flag, "-lc" | "-c") {
                    return Some((*script).to_owned());
                }
            }
            let quoted: Vec<String> = argv
                .iter()
                .map(|arg| {
                    if arg.is_empty() || arg.contains(char::is_whitespace) {
                        format!("'{arg}'")
                    } else {
                        (*arg).to_owned()
                    }
                })
                .collect();
            Some(quoted.join(" "))
        }
        _ => None,
    }
}

/// A call's output: a string, often JSON holding `{"output": …, "metadata": …}` once
/// more, or content parts.
fn output_text(output: &Value) -> String {
    match output {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(decoded)) => match decoded.get("output").and_then(Value::as_str) {
                Some(inner) => inner.to_owned(),
                None => text.clone(),
            },
            _ => text.clone(),
        },
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| match part.get("type").and_then(Value::as_str) {
                Some("input_image") => Some("[image]".to_owned()),
                _ => string(part, "text"),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => ["output", "content"]
            .iter()
            .find_map(|key| match other.get(*key) {
                Some(Value::String(text)) => Some(text.clone()),
                Some(inner @ Value::Array(_)) => Some(output_text(inner)),
                _ => None,
            })
            .unwrap_or_else(|| other.to_string()),
    }
}
