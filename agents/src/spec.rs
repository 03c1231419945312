//! What an `agent` leaf asks for: the arguments its `call` effect carries to the node's
//! `agent` provider, checked here so every surface (a flow, `palm agent run`, MCP) gets
//! the same errors.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The authority a run has: what it may do to the repository. Each provider's flags
/// carry it (`crate::claude::argv`, `crate::codex::argv`, `PALM_MODE`), and every run is
/// audited against it afterwards (`crate::audit`): past it, the run ends `violation` and
/// its changes never reach the checkout. Ordered: observe < edit < execute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Reads only: reading tools (and, for Codex and declared CLIs, commands that only
    /// read); no writing tool, no changed file.
    Observe,
    /// May change files: observe's tools and the editing ones; no command, no MCP tool.
    #[default]
    Edit,
    /// May change files and run commands: anything.
    Execute,
}

impl Mode {
    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Observe => "observe",
            Mode::Edit => "edit",
            Mode::Execute => "execute",
        }
    }

    /// Parses a lower-case name.
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "observe" => Some(Mode::Observe),
            "edit" => Some(Mode::Edit),
            "execute" => Some(Mode::Execute),
            _ => None,
        }
    }
}

/// The providers built in; any other name must be declared under `agents:` in palm.yaml.
pub const BUILTIN_PROVIDERS: [&str; 2] = ["claude", "codex"];

/// The longest prompt a run takes (it travels in the journal).
pub const PROMPT_BYTES_MAX: usize = 256 * 1024;

/// One run's request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// `claude`, `codex`, or a name under `agents:` in palm.yaml.
    pub provider: String,
    /// The rendered prompt.
    pub prompt: String,
    /// Its authority.
    #[serde(default)]
    pub mode: Mode,
    /// A git checkout (or any directory); absent: the node's working directory.
    #[serde(default)]
    pub repo: Option<String>,
    /// The provider's model, when it takes one.
    #[serde(default)]
    pub model: Option<String>,
    /// Stop after this many turns (claude: `--max-turns`).
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Kill the run (its whole process group) after this long.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// A run that reports a cost above this ends as `budget`.
    #[serde(default)]
    pub budget_usd: Option<f64>,
    /// Continue this session instead of starting one.
    #[serde(default)]
    pub resume: Option<String>,
    /// A JSON Schema the final answer must satisfy (the answer is then parsed as JSON).
    #[serde(default)]
    pub schema: Option<Value>,
    /// The job this run belongs to (its worktree is the job's); set by the node.
    #[serde(default)]
    pub job: Option<String>,
    /// What all the agent runs of the job may cost together (the flow's `budget.usd`).
    #[serde(default)]
    pub job_budget_usd: Option<f64>,
    /// How many turns they may take together (the flow's `budget.turns`).
    #[serde(default)]
    pub job_budget_turns: Option<u64>,
    /// A `best_of` attempt's lane: the run gets a worktree of its own (set by the flow).
    #[serde(default)]
    pub lane: Option<String>,
}

impl AgentSpec {
    /// Reads and checks a spec from a call's arguments; the error says which field.
    pub fn from_args(args: &Value) -> Result<AgentSpec, String> {
        if let Some(mode) = args.get("mode")
            && mode.as_str().and_then(Mode::parse).is_none()
        {
            return Err(format!(
                "agent: `mode` must be observe, edit or execute, not {mode}"
            ));
        }
        let spec: AgentSpec = serde_json::from_value(args.clone())
            .map_err(|e| format!("agent: invalid arguments: {e}"))?;
        spec.check()?;
        Ok(spec)
    }

    /// Checks the fields serde cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.provider.trim().is_empty() {
            return Err(
                "agent: `provider` must name claude, codex or an agent declared in palm.yaml"
                    .into(),
            );
        }
        if self.prompt.trim().is_empty() && self.resume.is_none() {
            return Err("agent: `prompt` is empty".into());
        }
        if self.prompt.len() > PROMPT_BYTES_MAX {
            return Err(format!(
                "agent: the prompt is {} bytes, more than {PROMPT_BYTES_MAX}",
                self.prompt.len()
            ));
        }
        if self.max_turns == Some(0) {
            return Err("agent: `max_turns` must be at least 1".into());
        }
        if self.budget_usd.is_some_and(|b| !(b > 0.0 && b.is_finite())) {
            return Err("agent: `budget_usd` must be a positive number".into());
        }
        if let Some(resume) = &self.resume
            && (resume.is_empty() || resume.starts_with('-') || resume.len() > 200)
        {
            return Err(format!("agent: `resume` is not a session id: {resume:?}"));
        }
        if let Some(model) = &self.model
            && (model.is_empty() || model.starts_with('-'))
        {
            return Err(format!("agent: `model` is not a model name: {model:?}"));
        }
        Ok(())
    }
}

/// One agent run as a one-leaf flow (`palm agent run`, MCP `palm_agent_run`): its
/// source and its input. Everything a person typed travels as input, never as template
/// text, so a prompt holding `{{` is sent as written; numbers are literals.
pub fn one_leaf_flow(run: &AgentSpec) -> (String, serde_json::Map<String, Value>) {
    let mut leaf = String::from(
        "    provider: \"{{ input.provider }}\"\n    prompt: \"{{ input.prompt }}\"\n    mode: \"{{ input.mode }}\"\n    repo: \"{{ input.repo }}\"\n    save: result\n",
    );
    if let Some(turns) = run.max_turns {
        leaf.push_str(&format!("    max_turns: {turns}\n"));
    }
    if let Some(ms) = run.timeout_ms {
        leaf.push_str(&format!("    timeout: {ms}\n"));
    }
    if let Some(budget) = run.budget_usd {
        leaf.push_str(&format!("    budget_usd: {budget}\n"));
    }
    if run.resume.is_some() {
        leaf.push_str("    resume: \"{{ input.resume }}\"\n");
    }
    if run.model.is_some() {
        leaf.push_str("    model: \"{{ input.model }}\"\n");
    }
    let source = format!(
        "name: agent-run\ndescription: one agent run (palm agent run)\ninput:\n  provider: string\n  prompt: string\n  mode: string\n  repo: string\n  resume: {{ type: string, default: \"\" }}\n  model: {{ type: string, default: \"\" }}\ntree:\n  agent:\n{leaf}"
    );
    let mut input = serde_json::Map::new();
    input.insert("provider".into(), Value::String(run.provider.clone()));
    input.insert("prompt".into(), Value::String(run.prompt.clone()));
    input.insert("mode".into(), Value::String(run.mode.as_str().into()));
    input.insert(
        "repo".into(),
        Value::String(run.repo.clone().unwrap_or_default()),
    );
    if let Some(resume) = &run.resume {
        input.insert("resume".into(), Value::String(resume.clone()));
    }
    if let Some(model) = &run.model {
        input.insert("model".into(), Value::String(model.clone()));
    }
    (source, input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn specs_are_checked_field_by_field() {
        let spec = AgentSpec::from_args(&json!({"provider": "claude", "prompt": "fix it"}))
            .expect("minimal");
        assert_eq!(spec.mode, Mode::Edit);
        let bad = |args: Value| AgentSpec::from_args(&args).unwrap_err();
        assert!(bad(json!({"provider": "claude"})).contains("prompt"));
        assert!(bad(json!({"provider": "claude", "prompt": "x", "mode": "root"})).contains("mode"));
        assert!(bad(json!({"provider": "claude", "prompt": "x", "turns": 3})).contains("turns"));
        assert!(
            bad(json!({"provider": "claude", "prompt": "x", "max_turns": 0})).contains("max_turns")
        );
        assert!(
            bad(json!({"provider": "claude", "prompt": "x", "resume": "--help"}))
                .contains("resume")
        );
        assert!(
            bad(json!({"provider": "claude", "prompt": "x", "budget_usd": -1})).contains("budget")
        );
    }
}
