//! Claude Code headless: `claude -p --output-format stream-json --verbose`, the prompt on
//! stdin, and the parser of its stream.
//!
//! The stream opens with a `system`/`init` line (the session id), then `assistant` lines
//! (one content block per line, several sharing one `message.id`), `user` lines carrying
//! `tool_result` blocks, and ends with one `result` line: `subtype` `success`,
//! `error_max_turns` or `error_during_execution` (others may come), `is_error`,
//! `session_id`, `num_turns`, `total_cost_usd`, `usage`, `result` (the final text) and
//! `permission_denials`. A stream without its result line means the process died first.
//!
//! Every `tool_use` (and `server_tool_use`) block of an `assistant` line is recorded as
//! a tool use for the audit (`crate::audit`), sub-agents' included: its name, and as its
//! detail the `command` (Bash), the `file_path` (Read, Edit, Write...), the
//! `notebook_path`, `path`, `pattern`, `url`, `query` or `description` of its input,
//! else the input itself (bounded). A block seen twice (same id) counts once; one the
//! result line lists in `permission_denials` (by `tool_use_id`), or whose `tool_result`
//! is an error about permission, is marked denied.

use crate::end::{End, RunSummary, ToolUse};
use crate::spec::{AgentSpec, Mode};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// Tools that change files.
const EDIT_TOOLS: &str = "Edit,MultiEdit,Write,NotebookEdit";

/// The command line (the prompt goes on stdin).
pub fn argv(spec: &AgentSpec, program: &str) -> Vec<String> {
    let mut argv: Vec<String> = [program, "-p", "--output-format", "stream-json", "--verbose"]
        .map(str::to_owned)
        .to_vec();
    if let Some(model) = &spec.model {
        argv.extend(["--model".to_owned(), model.clone()]);
    }
    if let Some(turns) = spec.max_turns {
        argv.extend(["--max-turns".to_owned(), turns.to_string()]);
    }
    if let Some(session) = &spec.resume {
        argv.extend(["--resume".to_owned(), session.clone()]);
    }
    // The mode is the run's authority, mapped onto Claude's permission switches: in
    // print mode a tool that would need a prompt is refused (and reported as a denial).
    match spec.mode {
        // Plan mode is Claude's read-only one; the edit tools and the shell are refused
        // besides, so a build that lets plan mode write still cannot.
        Mode::Observe => argv.extend([
            "--permission-mode".to_owned(),
            "plan".to_owned(),
            "--disallowedTools".to_owned(),
            format!("Bash,{EDIT_TOOLS}"),
        ]),
        Mode::Edit => argv.extend([
            "--permission-mode".to_owned(),
            "acceptEdits".to_owned(),
            "--disallowedTools".to_owned(),
            "Bash".to_owned(),
        ]),
        Mode::Execute => argv.extend([
            "--permission-mode".to_owned(),
            "acceptEdits".to_owned(),
            "--allowedTools".to_owned(),
            "Bash".to_owned(),
        ]),
    }
    argv
}

/// Reads a stream line by line.
#[derive(Debug, Default)]
pub struct Parser {
    summary: RunSummary,
    messages: BTreeSet<String>,
    last_text: String,
    /// Kept tool uses by their `tool_use` id.
    tool_ids: HashMap<String, usize>,
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
        if let Some(id) = value.get("session_id").and_then(Value::as_str) {
            self.summary.session_id = Some(id.to_owned());
        }
        match value.get("type").and_then(Value::as_str) {
            Some("system") => {}
            Some("user") => self.user(&value),
            Some("assistant") => self.assistant(&value),
            Some("result") => self.result(&value),
            _ => self.summary.unknown_lines += 1,
        }
    }

    fn assistant(&mut self, value: &Value) {
        let message = &value["message"];
        if let Some(id) = message.get("id").and_then(Value::as_str) {
            self.messages.insert(id.to_owned());
        }
        for block in message["content"].as_array().into_iter().flatten() {
            if matches!(
                block["type"].as_str(),
                Some("tool_use") | Some("server_tool_use")
            ) {
                self.tool_use(block);
            }
        }
        let texts: Vec<&str> = message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|block| block["type"] == "text")
            .filter_map(|block| block["text"].as_str())
            .collect();
        if !texts.is_empty() {
            self.last_text = texts.join("\n");
        }
    }

    /// A user line's `tool_result` blocks: one the CLI refused (an error that speaks of
    /// permission, as print mode answers a tool it may not run) marks its tool use denied,
    /// so a run that dies before its result line is not charged with it.
    fn user(&mut self, value: &Value) {
        for block in value["message"]["content"].as_array().into_iter().flatten() {
            if block["type"] != "tool_result" || block["is_error"] != true {
                continue;
            }
            let text = match &block["content"] {
                Value::String(text) => text.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|part| part["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => continue,
            };
            if text.to_ascii_lowercase().contains("permission")
                && let Some(&at) = block["tool_use_id"]
                    .as_str()
                    .and_then(|id| self.tool_ids.get(id))
            {
                self.summary.tools[at].denied = true;
            }
        }
    }

    fn tool_use(&mut self, block: &Value) {
        let Some(name) = block["name"].as_str() else {
            return;
        };
        let id = block["id"].as_str();
        if id.is_some_and(|id| self.tool_ids.contains_key(id)) {
            return;
        }
        let input = &block["input"];
        let detail = [
            "command",
            "file_path",
            "notebook_path",
            "path",
            "pattern",
            "url",
            "query",
            "description",
        ]
        .iter()
        .find_map(|key| input[*key].as_str().map(str::to_owned))
        .unwrap_or_else(|| match input {
            Value::Null => String::new(),
            Value::Object(map) if map.is_empty() => String::new(),
            other => other.to_string(),
        });
        if let Some(at) = self.summary.record_tool(ToolUse::new(name, &detail))
            && let Some(id) = id
        {
            self.tool_ids.insert(id.to_owned(), at);
        }
    }

    fn result(&mut self, value: &Value) {
        let subtype = value["subtype"].as_str().unwrap_or_default();
        let is_error = value["is_error"].as_bool().unwrap_or(false);
        for denial in value["permission_denials"].as_array().into_iter().flatten() {
            if let Some(&at) = denial["tool_use_id"]
                .as_str()
                .and_then(|id| self.tool_ids.get(id))
            {
                self.summary.tools[at].denied = true;
            }
        }
        self.summary.denials = value["permission_denials"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| {
                d.get("tool_name")
                    .and_then(Value::as_str)
                    .or_else(|| d.as_str())
                    .map(str::to_owned)
            })
            .collect();
        let end = match subtype {
            "success" if !is_error => End::Success,
            "success" => End::Error,
            "error_max_turns" => End::MaxTurns,
            s if s.contains("budget") => End::Budget,
            _ if !self.summary.denials.is_empty() => End::Denied,
            _ => End::Error,
        };
        self.summary.end = Some(end);
        self.summary.turns = value["num_turns"].as_u64();
        self.summary.cost_usd = value["total_cost_usd"].as_f64();
        if let Some(usage) = value.get("usage") {
            self.summary.usage = usage.clone();
        }
        if let Some(text) = value["result"].as_str() {
            self.summary.text = text.to_owned();
        }
        if end != End::Success {
            let detail = value["result"]
                .as_str()
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .or_else(|| {
                    // `errors`: strings as they are, anything else as JSON; none is no detail.
                    let errors: Vec<String> = value["errors"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|x| match x {
                            Value::String(text) => text.clone(),
                            other => other.to_string(),
                        })
                        .filter(|text| !text.is_empty())
                        .collect();
                    (!errors.is_empty()).then(|| errors.join("; "))
                });
            self.summary.error = Some(match detail {
                Some(detail) => format!("{subtype}: {detail}"),
                None => subtype.to_owned(),
            });
        }
    }

    /// The session id, once the stream has said it.
    pub fn session_id(&self) -> Option<&str> {
        self.summary.session_id.as_deref()
    }

    /// The summary of everything read. `end` is `None` when no result line came.
    pub fn finish(mut self) -> RunSummary {
        if self.summary.text.is_empty() {
            self.summary.text = self.last_text;
        }
        if self.summary.turns.is_none() && !self.messages.is_empty() {
            // Without a result line, the assistant messages seen are the best count.
            self.summary.turns = Some(self.messages.len() as u64);
        }
        self.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(lines: &[&str]) -> RunSummary {
        let mut parser = Parser::new();
        for line in lines {
            parser.line(line);
        }
        parser.finish()
    }

    #[test]
    fn a_whole_stream_with_its_pitfalls() {
        let summary = parse(&[
            r#"{"type":"system","subtype":"init","session_id":"s-1","tools":["Read"],"model":"m","permissionMode":"acceptEdits","cwd":"/w","new_field":1}"#,
            r#"{"type":"assistant","message":{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"hm"}],"usage":{"input_tokens":3}},"session_id":"s-1"}"#,
            r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"tool_use","id":"toolu_1","name":"Edit","input":{}}]},"session_id":"s-1"}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]},"session_id":"s-1"}"#,
            r#"{"type":"stream_event","event":{"type":"content_block_delta"}}"#,
            "not json at all",
            r#"{"type":"assistant","message":{"id":"msg_2","content":[{"type":"text","text":"Fixed."}]},"session_id":"s-1"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":12,"num_turns":2,"result":"Fixed the bug.","session_id":"s-1","total_cost_usd":0.0123,"usage":{"input_tokens":10,"output_tokens":5},"permission_denials":[]}"#,
        ]);
        assert_eq!(summary.end, Some(End::Success));
        assert_eq!(summary.session_id.as_deref(), Some("s-1"));
        assert_eq!(summary.turns, Some(2));
        assert_eq!(summary.cost_usd, Some(0.0123));
        assert_eq!(summary.text, "Fixed the bug.");
        assert_eq!(
            summary.usage,
            json!({"input_tokens": 10, "output_tokens": 5})
        );
        assert_eq!((summary.bad_lines, summary.unknown_lines), (1, 1));
        assert_eq!(summary.tools, [ToolUse::new("Edit", "")]);
    }

    #[test]
    fn every_tool_use_is_recorded_with_its_detail() {
        let summary = parse(&[
            r#"{"type":"system","subtype":"init","session_id":"s-2","tools":["Read","Edit","Bash"]}"#,
            r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/w/src/lib.rs","limit":40}}]},"session_id":"s-2"}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"fn main() {}"}]},"toolUseResult":{"type":"text","file":{"filePath":"/w/src/lib.rs"}}}"#,
            r#"{"type":"assistant","message":{"id":"msg_2","content":[{"type":"text","text":"Let me run it."},{"type":"tool_use","id":"toolu_2","name":"Bash","input":{"command":"cargo test","description":"run the tests"}}]}}"#,
            r#"{"type":"assistant","message":{"id":"msg_2","content":[{"type":"tool_use","id":"toolu_2","name":"Bash","input":{"command":"cargo test"}}]}}"#,
            r#"{"type":"assistant","parent_tool_use_id":"toolu_9","message":{"id":"msg_3","content":[{"type":"tool_use","id":"toolu_3","name":"Write","input":{"file_path":"notes.md","content":"hi"}}]}}"#,
            r#"{"type":"assistant","message":{"id":"msg_4","content":[{"type":"tool_use","id":"toolu_4","name":"mcp__github__create_issue","input":{"title":"x"}},{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"rust 2024"}},{"type":"tool_use","id":"toolu_5","name":"KillShell","input":{}},{"type":"tool_use","input":{}}]}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"num_turns":4,"result":"ok","session_id":"s-2","permission_denials":[{"tool_name":"mcp__github__create_issue","tool_use_id":"toolu_4","tool_input":{"title":"x"}}]}"#,
        ]);
        let seen: Vec<(&str, &str, bool)> = summary
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.detail.as_str(), t.denied))
            .collect();
        assert_eq!(
            seen,
            [
                ("Read", "/w/src/lib.rs", false),
                ("Bash", "cargo test", false),
                ("Write", "notes.md", false),
                ("mcp__github__create_issue", r#"{"title":"x"}"#, true),
                ("web_search", "rust 2024", false),
                ("KillShell", "", false),
            ]
        );
        assert_eq!(summary.end, Some(End::Success));
        assert_eq!(summary.denials, ["mcp__github__create_issue"]);
    }

    #[test]
    fn every_end_the_result_line_can_say() {
        let end = |line: &str| parse(&[line]).end;
        assert_eq!(
            end(r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":3}"#),
            Some(End::MaxTurns)
        );
        assert_eq!(
            end(r#"{"type":"result","subtype":"error_during_execution","is_error":true}"#),
            Some(End::Error)
        );
        assert_eq!(
            end(r#"{"type":"result","subtype":"error_max_budget_usd","is_error":true}"#),
            Some(End::Budget)
        );
        assert_eq!(
            end(
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"permission_denials":[{"tool_name":"Bash","tool_input":{}}]}"#
            ),
            Some(End::Denied)
        );
        assert_eq!(
            end(
                r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500"}"#
            ),
            Some(End::Error)
        );
    }

    #[test]
    fn a_tool_the_cli_refused_is_denied_even_without_a_result_line() {
        let summary = parse(&[
            r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"rm -rf build"}}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"Claude requested permissions to use Bash, but you haven't granted it yet.","is_error":true}]}}"#,
            r#"{"type":"assistant","message":{"id":"msg_2","content":[{"type":"tool_use","id":"toolu_2","name":"Read","input":{"file_path":"/w/x"}}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"File does not exist."}],"is_error":true}]}}"#,
        ]);
        assert_eq!(summary.end, None);
        let denied: Vec<(&str, bool)> = summary
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.denied))
            .collect();
        assert_eq!(denied, [("Bash", true), ("Read", false)]);
    }

    #[test]
    fn an_error_says_its_subtype_and_its_errors_as_written() {
        let error = |line: &str| parse(&[line]).error;
        assert_eq!(
            error(r#"{"type":"result","subtype":"error_max_turns","is_error":true,"errors":[]}"#)
                .as_deref(),
            Some("error_max_turns")
        );
        assert_eq!(
            error(
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["Tool permission request failed: boom",{"code":7}]}"#
            )
            .as_deref(),
            Some(r#"error_during_execution: Tool permission request failed: boom; {"code":7}"#)
        );
    }

    #[test]
    fn a_stream_cut_short_has_no_end_and_keeps_what_it_saw() {
        let summary = parse(&[
            r#"{"type":"system","subtype":"init","session_id":"s-9"}"#,
            r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"text","text":"Working on it"}]}}"#,
            r#"{"type":"assistant","message":{"id":"msg_2","content":[{"type":"te"#,
        ]);
        assert_eq!(summary.end, None);
        assert_eq!(summary.session_id.as_deref(), Some("s-9"));
        assert_eq!(summary.text, "Working on it");
        assert_eq!(summary.bad_lines, 1);
    }

    #[test]
    fn the_mode_is_mapped_onto_permission_switches() {
        let spec = |mode: Mode| AgentSpec {
            provider: "claude".into(),
            prompt: "x".into(),
            mode,
            repo: None,
            model: Some("sonnet".into()),
            max_turns: Some(5),
            timeout_ms: None,
            budget_usd: None,
            resume: Some("s-1".into()),
            schema: None,
            job: None,
            job_budget_usd: None,
            job_budget_turns: None,
            lane: None,
        };
        let observe = argv(&spec(Mode::Observe), "claude").join(" ");
        assert!(observe.starts_with("claude -p --output-format stream-json --verbose --model sonnet --max-turns 5 --resume s-1"), "{observe}");
        assert!(observe.ends_with(
            "--permission-mode plan --disallowedTools Bash,Edit,MultiEdit,Write,NotebookEdit"
        ));
        assert!(
            argv(&spec(Mode::Edit), "claude")
                .join(" ")
                .ends_with("acceptEdits --disallowedTools Bash")
        );
        assert!(
            argv(&spec(Mode::Execute), "claude")
                .join(" ")
                .ends_with("--allowedTools Bash")
        );
    }
}
