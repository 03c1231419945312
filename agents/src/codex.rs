//! Codex headless: `codex exec --json`, the prompt on stdin (`-`), and the parser of its
//! event stream.
//!
//! Lines: `thread.started` (`thread_id`, the session to resume), `turn.started`,
//! `item.started|updated|completed` (an `item` with a `type`: `agent_message`,
//! `reasoning`, `command_execution`, `file_change`, `mcp_tool_call`, `web_search`,
//! `todo_list`, `error`, and more to come), `turn.completed` (`usage`), `turn.failed`
//! (`error.message`) and `error` (`message`). Codex reports no cost and has no turn limit
//! of its own.
//!
//! Tool items are recorded as tool uses for the audit (`crate::audit`), named by their
//! type, when first seen (`item.started` for a command, `item.completed` for a patch),
//! once per item id: `command_execution` (the `command`), `file_change` (the changes'
//! paths), `mcp_tool_call` (`server/tool`), `web_search` (the `query`), and any other
//! `*_call` item type (Codex's next tools; outside every allowlist but execute's). An item
//! whose `status` is `declined` never ran: it is marked denied.

use crate::end::{End, RunSummary, ToolUse};
use crate::spec::{AgentSpec, Mode};
use serde_json::{Value, json};
use std::collections::HashMap;

/// The command line. `schema_file`: where the node wrote the output schema, if any.
pub fn argv(
    spec: &AgentSpec,
    program: &str,
    workdir: &str,
    schema_file: Option<&str>,
) -> Vec<String> {
    let mut argv: Vec<String> = [program, "exec", "--json", "--skip-git-repo-check"]
        .map(str::to_owned)
        .to_vec();
    if let Some(model) = &spec.model {
        argv.extend(["-m".to_owned(), model.clone()]);
    }
    // The mode is the run's authority, mapped onto Codex's sandbox. Codex has no "edit
    // but never run a command": an edit run gets the workspace-write sandbox (commands
    // confined to the worktree, no network; the audit catches a command); execute runs
    // unsandboxed, as a command the user runs would (still in the job's worktree).
    let sandbox = match spec.mode {
        Mode::Observe => "read-only",
        Mode::Edit => "workspace-write",
        Mode::Execute => "danger-full-access",
    };
    argv.extend(["-s".to_owned(), sandbox.to_owned()]);
    argv.extend(["-C".to_owned(), workdir.to_owned()]);
    if let Some(file) = schema_file {
        argv.extend(["--output-schema".to_owned(), file.to_owned()]);
    }
    if let Some(session) = &spec.resume {
        argv.extend(["resume".to_owned(), session.clone()]);
    }
    argv.push("-".to_owned());
    argv
}

/// Reads a stream line by line.
#[derive(Debug, Default)]
pub struct Parser {
    summary: RunSummary,
    turns: u64,
    input_tokens: u64,
    cached_input_tokens: u64,
    output_tokens: u64,
    usage_seen: bool,
    items: u64,
    /// Tool items recorded and not completed yet, by item id: where they were kept.
    open_tools: HashMap<String, Option<usize>>,
}

impl Parser {
    /// A parser at the start of a stream.
    pub fn new() -> Parser {
        Parser::default()
    }

    /// Takes one line (without its newline). Never fails: what it cannot read is counted.
    pub fn line(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            self.summary.bad_lines += 1;
            return;
        };
        self.summary.lines += 1;
        match value.get("type").and_then(Value::as_str) {
            Some("thread.started") => {
                if let Some(id) = value["thread_id"].as_str() {
                    self.summary.session_id = Some(id.to_owned());
                }
            }
            Some("turn.started") => {
                self.turns += 1;
                // A new turn is running: whatever the last one said is not the end.
                self.summary.end = None;
            }
            Some("turn.completed") => {
                self.summary.end = Some(End::Success);
                self.summary.error = None;
                let usage = &value["usage"];
                if usage.is_object() {
                    self.usage_seen = true;
                    self.input_tokens += usage["input_tokens"].as_u64().unwrap_or(0);
                    self.cached_input_tokens += usage["cached_input_tokens"].as_u64().unwrap_or(0);
                    self.output_tokens += usage["output_tokens"].as_u64().unwrap_or(0);
                }
            }
            Some("turn.failed") => {
                self.summary.end = Some(End::Error);
                let message = value["error"]["message"]
                    .as_str()
                    .unwrap_or("the turn failed");
                self.summary.error = Some(message.to_owned());
            }
            Some("error") => {
                let message = value["message"].as_str().unwrap_or("error");
                self.summary.error = Some(message.to_owned());
                if self.summary.end != Some(End::Success) {
                    self.summary.end = Some(End::Error);
                }
            }
            Some("item.started") | Some("item.updated") => self.tool_item(&value["item"], false),
            Some("item.completed") => {
                self.tool_item(&value["item"], true);
                self.item(&value["item"]);
            }
            _ => self.summary.unknown_lines += 1,
        }
    }

    /// Records a tool item the first time its id is seen (`completed`: the last time).
    fn tool_item(&mut self, item: &Value, completed: bool) {
        let Some(kind) = item["type"].as_str() else {
            return;
        };
        let detail = match kind {
            "command_execution" => item["command"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| {
                    // Some builds give the argv.
                    item["command"].as_array().map(|argv| {
                        argv.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                })
                .unwrap_or_default(),
            "file_change" => item["changes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["path"].as_str())
                .collect::<Vec<_>>()
                .join(", "),
            "mcp_tool_call" => format!(
                "{}/{}",
                item["server"].as_str().unwrap_or_default(),
                item["tool"].as_str().unwrap_or_default()
            ),
            "web_search" => item["query"].as_str().unwrap_or_default().to_owned(),
            other if other.ends_with("_call") => item["tool"]
                .as_str()
                .or_else(|| item["name"].as_str())
                .unwrap_or_default()
                .to_owned(),
            _ => return,
        };
        let declined = item["status"] == "declined";
        let id = item["id"].as_str().map(str::to_owned);
        let at = match id.as_ref().and_then(|id| self.open_tools.get(id)) {
            Some(at) => *at,
            None if !completed && id.is_none() => return,
            None => {
                let at = self.summary.record_tool(ToolUse::new(kind, &detail));
                if let Some(id) = &id
                    && !completed
                {
                    self.open_tools.insert(id.clone(), at);
                }
                at
            }
        };
        if let Some(at) = at {
            self.summary.tools[at].denied = declined;
        }
        if completed && let Some(id) = &id {
            self.open_tools.remove(id);
        }
    }

    fn item(&mut self, item: &Value) {
        self.items += 1;
        match item["type"].as_str() {
            Some("agent_message") => {
                if let Some(text) = item["text"].as_str() {
                    self.summary.text = text.to_owned();
                }
            }
            Some("error") => {
                if let Some(message) = item["message"].as_str() {
                    self.summary.error = Some(message.to_owned());
                }
            }
            _ => {}
        }
    }

    /// The thread id, once the stream has said it.
    pub fn session_id(&self) -> Option<&str> {
        self.summary.session_id.as_deref()
    }

    /// The summary of everything read. `end` is `None` when the last turn never ended.
    pub fn finish(mut self) -> RunSummary {
        self.summary.turns = (self.turns > 0).then_some(self.turns);
        if self.usage_seen {
            self.summary.usage = json!({
                "input_tokens": self.input_tokens,
                "cached_input_tokens": self.cached_input_tokens,
                "output_tokens": self.output_tokens,
            });
        }
        self.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &[&str]) -> RunSummary {
        let mut parser = Parser::new();
        for line in lines {
            parser.line(line);
        }
        parser.finish()
    }

    #[test]
    fn a_whole_stream() {
        let summary = parse(&[
            r#"{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"ls","status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"ls","aggregated_output":"a\n","exit_code":0,"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"file_change","changes":[{"path":"a.rs","kind":"update"}],"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_2","type":"todo_list","items":[{"text":"x","completed":true}]}}"#,
            r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Done: a.rs fixed."}}"#,
            r#"{"type":"world_state","ordinal":7}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":1200,"cached_input_tokens":200,"output_tokens":345}}"#,
        ]);
        assert_eq!(summary.end, Some(End::Success));
        assert_eq!(
            summary.session_id.as_deref(),
            Some("0199a213-81c0-7800-8aa1-bbab2a035a53")
        );
        assert_eq!(summary.turns, Some(1));
        assert_eq!(summary.text, "Done: a.rs fixed.");
        assert_eq!(summary.usage["output_tokens"], 345);
        assert_eq!(summary.cost_usd, None);
        assert_eq!(summary.unknown_lines, 1);
        assert_eq!(
            summary.tools,
            [
                ToolUse::new("command_execution", "ls"),
                ToolUse::new("file_change", "a.rs"),
            ],
            "a command seen started and completed counts once; a todo list is no tool"
        );
    }

    #[test]
    fn every_tool_item_is_recorded_once() {
        let summary = parse(&[
            r#"{"type":"thread.started","thread_id":"t"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'cargo test'","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
            r#"{"type":"item.updated","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'cargo test'","aggregated_output":"running","status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'cargo test'","aggregated_output":"ok","exit_code":0,"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"a.rs","kind":"update"},{"path":"b.rs","kind":"add"}],"status":"completed"}}"#,
            r#"{"type":"item.started","item":{"id":"item_3","type":"mcp_tool_call","server":"github","tool":"create_issue","arguments":{},"status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_4","type":"web_search","query":"tokio select"}}"#,
            r#"{"type":"item.started","item":{"id":"item_5","type":"command_execution","command":"rm -rf /","status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_5","type":"command_execution","command":"rm -rf /","status":"declined"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_6","type":"collab_tool_call","tool":"spawn_agent","status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_7","type":"reasoning","text":"hm"}}"#,
            r#"{"type":"item.completed","item":{"type":"command_execution","command":["ls","-la"],"status":"completed"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}"#,
        ]);
        let seen: Vec<(&str, &str, bool)> = summary
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.detail.as_str(), t.denied))
            .collect();
        assert_eq!(
            seen,
            [
                ("command_execution", "bash -lc 'cargo test'", false),
                ("file_change", "a.rs, b.rs", false),
                ("mcp_tool_call", "github/create_issue", false),
                ("web_search", "tokio select", false),
                ("command_execution", "rm -rf /", true),
                ("collab_tool_call", "spawn_agent", false),
                ("command_execution", "ls -la", false),
            ],
            "an MCP call started and never completed still counts"
        );
    }

    #[test]
    fn failures_and_a_stream_cut_short() {
        let failed = parse(&[
            r#"{"type":"thread.started","thread_id":"t"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"error","message":"You've hit your usage limit."}"#,
            r#"{"type":"turn.failed","error":{"message":"usage limit"}}"#,
        ]);
        assert_eq!(failed.end, Some(End::Error));
        assert_eq!(failed.error.as_deref(), Some("usage limit"));
        let cut = parse(&[
            r#"{"type":"thread.started","thread_id":"t"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.completed","item":{"type":"agent_message","text":"half"}}"#,
            r#"{"type":"item.comp"#,
        ]);
        assert_eq!(cut.end, None);
        assert_eq!(cut.text, "half");
        assert_eq!(cut.bad_lines, 1);
    }

    #[test]
    fn the_command_line_maps_mode_resume_and_schema() {
        let spec = AgentSpec {
            provider: "codex".into(),
            prompt: "x".into(),
            mode: Mode::Observe,
            repo: None,
            model: Some("gpt-5".into()),
            max_turns: None,
            timeout_ms: None,
            budget_usd: None,
            resume: Some("t-1".into()),
            schema: None,
            job: None,
            job_budget_usd: None,
            job_budget_turns: None,
            lane: None,
        };
        assert_eq!(
            argv(&spec, "codex", "/w", Some("/s.json")).join(" "),
            "codex exec --json --skip-git-repo-check -m gpt-5 -s read-only -C /w --output-schema /s.json resume t-1 -"
        );
    }
}
