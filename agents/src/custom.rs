//! Any agent CLI, declared under `agents:` in palm.yaml:
//!
//! ```yaml
//! agents:
//!   aider:
//!     command: [aider, --yes, --message-file, "{prompt_file}"]
//!     env: {AIDER_MODEL: sonnet}
//!     timeout: 20m
//! ```
//!
//! The command runs in the run's worktree and is told, in its environment:
//! `PALM_PROMPT_FILE` (the prompt), `PALM_OUTPUT_FILE` (where it writes its final answer:
//! JSON or text), `PALM_SCHEMA_FILE` (when structured output is asked for), `PALM_MODE`
//! (`observe`, `edit`, `execute`), `PALM_USAGE_FILE` (where it may write
//! `{"turns", "cost_usd", "session_id", "end", "tools", ...}`), `PALM_WORKTREE`, and
//! `PALM_RESUME`/`PALM_MAX_TURNS` when set. `{prompt_file}`, `{output_file}`,
//! `{worktree}` and `{mode}` in `command` are replaced by the same values.
//!
//! `tools` is the list of the tool uses it made, for the audit after the run
//! (`crate::audit`): `[{"name": "Edit", "detail": "src/a.rs"}, {"name": "Bash", "detail":
//! "cargo test"}, ...]`, named with Claude's tool names (`Read`, `Grep`, `Edit`, `Write`,
//! `Bash`, `mcp__server__tool`...) or Codex's item types (`command_execution`,
//! `file_change`, `web_search`...); `"denied": true` marks one its own authority refused.
//! A bare string is a name. A name the audit does not know is outside every mode's
//! allowlist but execute's. Whatever it reports, its worktree's diff is checked too.
//!
//! Its end: the usage file's `end` when it names one; else exit 0 with an output file is
//! `success`, exit 0 without one is `error` (it said nothing), any other exit is `error`,
//! and death by a signal Palm did not send is `crashed`.

use crate::end::{End, RunSummary, ToolUse};
use serde_json::Value;

/// The environment variables of the contract.
pub const ENV_PROMPT_FILE: &str = "PALM_PROMPT_FILE";
/// Where the final answer goes.
pub const ENV_OUTPUT_FILE: &str = "PALM_OUTPUT_FILE";
/// The output schema, when asked for.
pub const ENV_SCHEMA_FILE: &str = "PALM_SCHEMA_FILE";
/// The run's authority.
pub const ENV_MODE: &str = "PALM_MODE";
/// Where usage may go.
pub const ENV_USAGE_FILE: &str = "PALM_USAGE_FILE";
/// Where it runs.
pub const ENV_WORKTREE: &str = "PALM_WORKTREE";
/// The session to continue.
pub const ENV_RESUME: &str = "PALM_RESUME";
/// The turn limit.
pub const ENV_MAX_TURNS: &str = "PALM_MAX_TURNS";

/// Replaces `{prompt_file}`, `{output_file}`, `{worktree}` and `{mode}` in one argument.
pub fn expand(
    arg: &str,
    prompt_file: &str,
    output_file: &str,
    worktree: &str,
    mode: &str,
) -> String {
    arg.replace("{prompt_file}", prompt_file)
        .replace("{output_file}", output_file)
        .replace("{worktree}", worktree)
        .replace("{mode}", mode)
}

/// How the process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

/// The summary of a run from its exit, its output file and its usage file.
pub fn finish(
    exit: &Exit,
    output: Option<&str>,
    usage: Option<&Value>,
    stderr: &str,
) -> RunSummary {
    let mut summary = RunSummary {
        text: output.unwrap_or_default().trim_end().to_owned(),
        ..RunSummary::default()
    };
    if let Some(usage) = usage {
        summary.turns = usage["turns"].as_u64();
        summary.cost_usd = usage["cost_usd"].as_f64();
        summary.session_id = usage["session_id"].as_str().map(str::to_owned);
        summary.usage = usage.clone();
        for tool in usage["tools"].as_array().into_iter().flatten() {
            let (name, detail) = match tool {
                Value::String(name) => (name.as_str(), ""),
                other => (
                    other["name"].as_str().unwrap_or_default(),
                    other["detail"].as_str().unwrap_or_default(),
                ),
            };
            let mut tool_use = ToolUse::new(name, detail);
            tool_use.denied = tool["denied"] == true;
            summary.record_tool(tool_use);
        }
    }
    let stated = usage
        .and_then(|u| u["end"].as_str())
        .and_then(|end| match end {
            "success" => Some(End::Success),
            "max_turns" => Some(End::MaxTurns),
            "error" => Some(End::Error),
            "denied" => Some(End::Denied),
            "budget" => Some(End::Budget),
            _ => None,
        });
    let last_stderr = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_owned());
    summary.end = Some(match (stated, exit, output) {
        (Some(end), Exit::Code(_), _) => end,
        (None, Exit::Code(0), Some(_)) => End::Success,
        (None, Exit::Code(0), None) => {
            summary.error = Some("it exited 0 without writing its output file".into());
            End::Error
        }
        (None, Exit::Code(code), _) => {
            summary.error = Some(match &last_stderr {
                Some(line) => format!("exited with {code}: {line}"),
                None => format!("exited with {code}"),
            });
            End::Error
        }
        (_, Exit::Signal(signal), _) => {
            summary.error = Some(format!("killed by signal {signal}"));
            End::Crashed
        }
    });
    if summary.end != Some(End::Success) && summary.error.is_none() {
        summary.error = last_stderr;
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_end_comes_from_the_usage_file_then_the_exit() {
        let ok = finish(
            &Exit::Code(0),
            Some("done\n"),
            Some(&json!({"turns": 2, "cost_usd": 0.5})),
            "",
        );
        assert_eq!(
            (ok.end, ok.turns, ok.text.as_str()),
            (Some(End::Success), Some(2), "done")
        );
        let turns = finish(
            &Exit::Code(0),
            Some("partial"),
            Some(&json!({"end": "max_turns"})),
            "",
        );
        assert_eq!(turns.end, Some(End::MaxTurns));
        let silent = finish(&Exit::Code(0), None, None, "");
        assert_eq!(silent.end, Some(End::Error));
        let failed = finish(&Exit::Code(3), None, None, "warming up\nno API key\n");
        assert_eq!(failed.error.as_deref(), Some("exited with 3: no API key"));
        assert_eq!(
            finish(&Exit::Signal(11), None, None, "").end,
            Some(End::Crashed)
        );
        assert_eq!(
            expand("--in={prompt_file}", "/p", "/o", "/w", "edit"),
            "--in=/p"
        );
    }

    #[test]
    fn the_usage_file_may_list_its_tool_uses() {
        let ran = finish(
            &Exit::Code(0),
            Some("ok"),
            Some(&json!({"tools": [
                {"name": "Edit", "detail": "src/a.rs", "extra": 1},
                "Read",
                {"name": "Bash", "detail": "rm -rf /", "denied": true},
                {"detail": "no name"},
                42,
            ]})),
            "",
        );
        let mut denied = ToolUse::new("Bash", "rm -rf /");
        denied.denied = true;
        assert_eq!(
            ran.tools,
            [
                ToolUse::new("Edit", "src/a.rs"),
                ToolUse::new("Read", ""),
                denied
            ]
        );
    }
}
