//! The MCP tools: their schemas, argument checking, and the control requests each sends.
//!
//! Every tool is a row of [`specs`]: a name, a description written for an agent, an input
//! JSON Schema and an output JSON Schema. Arguments are checked against the *same* input
//! schema that `tools/list` publishes (with `palm_actors::jsonschema`, the validator
//! flows use), so what an agent reads is exactly what is enforced, and a refusal names
//! the field and what was expected. A tool then sends control requests through the
//! [`ControlLink`] and reshapes the answer: no tool decides anything about a job.

use super::control_link::ControlLink;
use crate::control::WAIT_MS_MAX;
use palm_actors::jsonschema::Schema;
use palm_api::protocol::{ErrorBody, FlowArg, Request};
use rmcp::model::{
    CallToolResult, ContentBlock, JsonObject, ProgressNotificationParam, ProgressToken, Tool,
    ToolAnnotations,
};
use rmcp::{Peer, RoleServer};
use serde_json::{Map, Value, json};
use std::sync::{Arc, LazyLock};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often a waiting `palm_submit`/`palm_continue` reports progress (and re-asks the
/// node), in ms.
pub const PROGRESS_INTERVAL_MS: u64 = 1_000;

/// How long a `wait: true` call waits by default before answering with the job as it is.
pub const WAIT_MS_DEFAULT: u64 = 10 * 60 * 1000;

/// Jobs listed by `palm_jobs` unless `limit` says otherwise.
pub const JOBS_LIMIT_DEFAULT: usize = 50;

/// Journal events `palm_inspect` returns unless `events_max` says otherwise (the newest).
pub const EVENTS_DEFAULT: usize = 200;

/// Subflow lookups one `palm_flows validate` makes against the node before it gives up
/// (subflows nest at most this deep in practice; spawn depth is bounded by 16 as well).
pub const SUBFLOW_ROUNDS_MAX: usize = 16;

/// One tool.
pub struct ToolSpec {
    /// Tool name (`palm_*`).
    pub name: &'static str,
    /// Short human title.
    pub title: &'static str,
    /// What it does and when to use it, for an agent.
    pub description: &'static str,
    /// JSON Schema of the arguments.
    pub input: Value,
    /// JSON Schema of `structuredContent`.
    pub output: Value,
    /// Only reads.
    pub read_only: bool,
    /// May destroy work (cancel).
    pub destructive: bool,
    /// Calling twice with the same arguments changes nothing more.
    pub idempotent: bool,
    /// The compiled input schema (the one arguments are checked against).
    schema: Schema,
}

/// A refused or failed tool call: returned to the agent as a tool error result.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolError {
    /// Machine-readable kind (`invalid_argument`, `unknown_job`, `not_waiting`, ...).
    pub kind: String,
    /// What went wrong, naming the field when an argument was wrong.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl ToolError {
    /// A failure of `kind`.
    pub fn new(kind: &str, message: impl Into<String>) -> ToolError {
        ToolError {
            kind: kind.to_owned(),
            message: message.into(),
            hint: None,
        }
    }

    /// A bad argument.
    pub fn argument(message: impl Into<String>) -> ToolError {
        ToolError::new("invalid_argument", message)
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> ToolError {
        self.hint = Some(hint.into());
        self
    }

    /// The text an agent reads.
    pub fn text(&self) -> String {
        match &self.hint {
            Some(hint) => format!("error ({}): {}\nhint: {hint}", self.kind, self.message),
            None => format!("error ({}): {}", self.kind, self.message),
        }
    }

    /// As an MCP tool result (`isError: true`, the text only: an error does not claim to
    /// match the tool's output schema).
    pub fn into_result(self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(self.text())])
    }
}

impl From<ErrorBody> for ToolError {
    fn from(body: ErrorBody) -> ToolError {
        ToolError {
            kind: body.kind,
            message: body.message,
            hint: body.hint,
        }
    }
}

impl From<crate::exit::CliError> for ToolError {
    fn from(err: crate::exit::CliError) -> ToolError {
        ToolError {
            kind: err.kind,
            message: err.message,
            hint: err.hint,
        }
    }
}

/// A tool's successful answer: the structured value and its text rendering.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// `structuredContent`.
    pub value: Value,
    /// A few lines for people (and agents that read text), before the JSON.
    pub summary: String,
}

impl Answer {
    /// As an MCP tool result: the summary, then the JSON (clients that ignore
    /// `structuredContent` still get every field).
    pub fn into_result(self) -> CallToolResult {
        let mut result = CallToolResult::structured(self.value.clone());
        result.content = vec![ContentBlock::text(format!(
            "{}\n\n{}",
            self.summary, self.value
        ))];
        result
    }
}

/// What a running call may use besides its arguments.
#[derive(Clone)]
pub struct CallContext {
    /// Cancelled when the client cancels the request (or the session ends).
    pub cancel: CancellationToken,
    /// Where progress goes, when the client asked for it with a `progressToken`.
    pub progress: Option<(Peer<RoleServer>, ProgressToken)>,
}

impl CallContext {
    async fn report(&self, progress: f64, message: String) {
        if let Some((peer, token)) = &self.progress {
            let mut param = ProgressNotificationParam::new(token.clone(), progress);
            param.message = Some(message);
            // A client that went away cannot be told; the call itself goes on.
            let _ = peer.notify_progress(param).await;
        }
    }
}

fn string(description: &str) -> Value {
    json!({"type": "string", "minLength": 1, "description": description})
}

fn job_field() -> Value {
    string("A job id, as returned by palm_submit or listed by palm_jobs.")
}

fn wait_fields(what: &str) -> (Value, Value) {
    (
        json!({"type": "boolean", "default": false, "description": format!(
            "Wait until the job {what} succeeds, fails, is cancelled or waits for input \
             again, sending progress notifications meanwhile (when the request has a \
             progressToken). Default false: answer at once.")}),
        json!({"type": ["string", "integer"], "description":
            "With wait: how long to wait at most, as milliseconds or a duration like \
             \"30s\", \"5m\" (default 10m, at most 24h). The job goes on either way."}),
    )
}

fn status_output() -> Value {
    json!({
        "type": "object",
        "required": ["job", "status"],
        "properties": {
            "job": {"type": "string"},
            "flow": {"type": "string"},
            "status": {"type": "string", "enum": ["pending", "running", "waiting", "succeeded", "failed", "cancelled"]},
            "waiting_on": {"type": "array", "description": "The waits a waiting job is parked on: key, prompt, choices, schema."},
            "settled": {"type": "boolean", "description": "With wait: whether the job settled (terminal or waiting) before the timeout."},
            "next": {"type": "array", "description": "Calls that would move this job on."}
        }
    })
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// A row of the tool table: name, title, description, input schema, output schema,
/// `[read_only, destructive, idempotent]`.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    Value,
    Value,
    [bool; 3],
);

fn build_specs() -> Vec<ToolSpec> {
    let (submit_wait, submit_timeout) = wait_fields("");
    let (continue_wait, continue_timeout) = wait_fields("");
    let rows: Vec<Row> = vec![
        (
            "palm_assist",
            "Which Palm tool fits a goal",
            "Start here. Given a goal in plain words (\"approve the waiting deploy\", \"run the \
             hello flow\", \"why did job X fail\"), looks at the flows and jobs this node has \
             and answers which Palm tool to call and with which arguments, plus alternatives. \
             Deterministic (keyword and state rules, no model); it only reads.",
            object(
                json!({"goal": {"type": "string", "minLength": 1, "maxLength": 4000,
                    "description": "What you want to do, in words; mention a job id or flow name if you know it."}}),
                &["goal"],
            ),
            json!({"type": "object", "required": ["tool", "arguments", "reason"], "properties": {
                "tool": {"type": "string"}, "arguments": {"type": "object"},
                "reason": {"type": "string"}, "alternatives": {"type": "array"},
                "seen": {"type": "object"}}}),
            [true, false, true],
        ),
        (
            "palm_flows",
            "List, describe, validate or store flow definitions",
            "Flow definitions (Behavior Trees in YAML or JSON). action=list: stored flows. \
             action=describe: one stored flow with its inputs and source (name, optional \
             revision). action=validate: check a definition sent inline (source) and get \
             every problem with line and column, without storing or running it. action=add: \
             store source as a new revision. action=schema: the JSON Schema of the flow \
             format.",
            object(
                json!({
                    "action": {"type": "string", "enum": ["list", "describe", "validate", "add", "schema"],
                        "description": "What to do."},
                    "name": string("describe: the flow's name."),
                    "revision": {"type": "integer", "minimum": 1, "description": "describe: a revision other than the latest."},
                    "source": {"type": "string", "minLength": 1, "description": "validate, add: the definition text (YAML or JSON)."}
                }),
                &["action"],
            ),
            json!({"type": "object"}),
            [false, false, true],
        ),
        (
            "palm_submit",
            "Start a job",
            "Start a job of a flow: a stored flow by name (see palm_flows list), a flow file \
             path on this node's machine, or an inline definition (source). Returns the job \
             id at once (status pending or running), or with wait: true once the job settles. \
             A job that reaches a `wait` leaf parks with status waiting until palm_continue \
             delivers its input; it survives restarts.",
            object(
                json!({
                    "flow": string("A stored flow's name, or the path of a flow file (YAML/JSON) on this node's machine (relative paths resolve against the server's working directory). Give flow or source, not both."),
                    "revision": {"type": "integer", "minimum": 1, "description": "With a stored flow: pin this revision instead of the latest."},
                    "source": {"type": "string", "minLength": 1, "description": "An inline flow definition (YAML or JSON text)."},
                    "input": {"type": "object", "description": "The job's input fields, checked against the flow's declared inputs."},
                    "node": {"type": "string", "minLength": 1, "description": "Home the job on this root or realm of the node's tree (a stored flow must be stored there). Default: the nearest home."},
                    "wait": submit_wait,
                    "timeout": submit_timeout
                }),
                &[],
            ),
            status_output(),
            [false, false, false],
        ),
        (
            "palm_agent_run",
            "Run a coding agent",
            "Run one coding agent (claude, codex, or an agent CLI the node declares under \
             `agents:` in palm.yaml) as a durable one-step job, in its own git worktree of \
             `repo`. mode is its authority: observe never writes (a run that changed files \
             is a `violation`, its changes set aside), edit may change files, execute may \
             also run commands. The result says how it ended (end: success, max_turns, \
             error, timeout, crashed, interrupted, denied, budget, violation), its \
             session_id (to resume), and the patch it left (land it with palm_patches \
             apply). With wait: false it returns the job id at once.",
            object(
                json!({
                    "provider": string("claude, codex, or an agent declared under agents: in the node's palm.yaml."),
                    "prompt": string("The task."),
                    "mode": {"type": "string", "enum": ["observe", "edit", "execute"], "default": "edit", "description": "Its authority."},
                    "repo": string("Absolute path of the git checkout to work on, on the node's machine."),
                    "timeout": {"type": ["string", "integer"], "description": "Kill the run after this long: milliseconds or a duration like \"20m\" (default 30m)."},
                    "max_turns": {"type": "integer", "minimum": 1},
                    "budget_usd": {"type": "number", "exclusiveMinimum": 0},
                    "resume": string("A session id to continue (a previous result's session_id)."),
                    "model": string("The provider's model."),
                    "wait": {"type": "boolean", "default": true, "description": "Wait for the run to end (default), with progress notifications."}
                }),
                &["provider", "prompt", "repo"],
            ),
            json!({
                "type": "object",
                "required": ["job", "status"],
                "properties": {
                    "job": {"type": "string"},
                    "status": {"type": "string"},
                    "result": {"description": "{end, provider, session_id, turns, cost_usd, text, structured, worktree, patch, error, usage, transcript, duration_ms}; null until the run ends."}
                }
            }),
            [false, false, false],
        ),
        (
            "palm_patches",
            "Patches agent runs left",
            "The patches agent runs left on this node. action=list (optionally one job's), \
             show (one patch with its diff and secret-scan findings), apply (land it on a \
             branch through the merge queue: rebased 3-way in a scratch worktree; a conflict \
             is an answer with status conflict and the paths, and changes nothing; the \
             user's uncommitted changes are never touched), revert (undo one applied patch). \
             Blocked (secrets found) and violation patches are never applied.",
            object(
                json!({
                    "action": {"type": "string", "enum": ["list", "show", "apply", "revert"]},
                    "id": string("A patch id (from list, or a run's result.patch.id). Required for show, apply and revert."),
                    "job": string("With list: only this job's patches."),
                    "to": string("With apply: the branch to land on (default: the one the checkout is on).")
                }),
                &["action"],
            ),
            json!({"type": "object"}),
            [false, false, false],
        ),
        (
            "palm_team",
            "A team's board and mailbox",
            "A team of agents on a durable board (a job started by palm team start). \
             action=board: its tasks (open, claimed, checking, merging, done, failed; \
             owner, depends_on, lane), members, turns and mailbox; with parallel, its \
             schedule (task pairs predicted to touch a same file run one after the \
             other) and the scheduler's decisions with their evidence. action=post: a message to the \
             mailbox (`text`, `to` a member or all, `from`). action=claim: `member` takes \
             `task` next. action=complete: `member` reports `task` done (its turn still \
             ends, then the task's check runs). action=budget: `turns` more member turns \
             for a team parked out of turns.",
            object(
                json!({
                    "team": string("The team: its job id."),
                    "action": {"type": "string", "enum": ["board", "post", "claim", "complete", "budget"]},
                    "text": string("With post: the message."),
                    "to": string("With post: a member's name (default: all)."),
                    "from": string("With post: who says it (default: person; a member posts as itself)."),
                    "member": string("With claim and complete: the member."),
                    "task": string("With claim and complete: the task id."),
                    "turns": {"type": "integer", "minimum": 1, "description": "With budget: how many more turns."}
                }),
                &["team", "action"],
            ),
            json!({"type": "object"}),
            [false, false, false],
        ),
        (
            "palm_wizard",
            "Fill in a wizard step by step",
            "A wizard is a flow whose tree asks steps one at a time (input, choice, \
             collection, branch, summary) and then runs its commit once; every answer is \
             durable, so a wizard can be finished later or from another surface (the CLI's \
             palm wizard resume, the Explorer). action=start: start one (flow or source) and \
             get its first step. action=step: where a wizard is. action=answer: answer the \
             current step (`answer`: the value; for a collection, the whole list), or make \
             another move (`move`: {\"add\": ITEM} | {\"edit\": {\"index\", \"item\"}} | \
             {\"remove\": INDEX} | {\"done\": true}). action=back: reopen the step before, \
             or `to` a step visited earlier. action=commit: confirm the summary; the commit \
             runs once (a second commit is refused) and this waits for it to end. Each answer \
             returns the next step: its id, kind, position n of, prompt, proposal \
             (`default`), options or items, and `moves`, the JSON Schema of what it accepts.",
            object(
                json!({
                    "action": {"type": "string", "enum": ["start", "step", "answer", "back", "commit"]},
                    "job": job_field(),
                    "flow": string("With start: a stored flow's name or a flow file's path."),
                    "source": {"type": "string", "minLength": 1, "description": "With start: an inline flow definition (YAML or JSON)."},
                    "input": {"type": "object", "description": "With start: the flow's input fields."},
                    "answer": {"description": "With answer: the current step's answer (any JSON value the step accepts)."},
                    "move": {"type": "object", "description": "With answer: a move other than an answer (a collection's add, edit, remove or done)."},
                    "to": string("With back: the id of the step to reopen (default: the one before)."),
                    "timeout": {"type": ["string", "integer"], "description": "How long to wait for the next step (or, with commit, for the commit to end) at most: milliseconds or a duration like \"30s\" (default 10m). The wizard goes on either way."}
                }),
                &["action"],
            ),
            json!({"type": "object", "required": ["job", "status"], "properties": {
                "job": {"type": "string"}, "status": {"type": "string"},
                "step": {"type": ["object", "null"]}, "prompt": {"type": ["string", "null"]},
                "moves": {"type": ["object", "null"]}, "answers": {},
                "error": {"type": ["string", "null"]}}}),
            [false, false, false],
        ),
        (
            "palm_status",
            "A job's status",
            "One job: status (pending, running, waiting, succeeded, failed, cancelled), what \
             it waits on (key, prompt, choices, input schema), its state (blackboard), its \
             error, its home node, its effects and what blocks them.",
            object(json!({"job": job_field()}), &["job"]),
            status_output(),
            [true, false, true],
        ),
        (
            "palm_jobs",
            "List jobs",
            "Jobs of this node, newest first, optionally only one status — status: waiting \
             lists the jobs that wait for input (each with the keys it waits on).",
            object(
                json!({
                    "status": {"type": "string", "enum": ["pending", "running", "waiting", "succeeded", "failed", "cancelled"],
                        "description": "Only jobs with this status."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "At most this many (default 50)."}
                }),
                &[],
            ),
            json!({"type": "object", "required": ["jobs"], "properties": {"jobs": {"type": "array"}}}),
            [true, false, true],
        ),
        (
            "palm_continue",
            "Deliver input to a waiting job",
            "Continue a job parked on a wait: deliver input to the wait named key. The input \
             must satisfy the wait's schema or choices (palm_status shows them under \
             waiting_on). Anyone may continue a job — a person with `palm continue` in a \
             shell, or you — and it may be days after it parked.",
            object(
                json!({
                    "job": job_field(),
                    "key": string("The wait's key (waiting_on[].key in palm_status; e.g. \"approve\")."),
                    "input": {"description": "The input for the wait: any JSON value the wait's schema accepts (e.g. {\"ok\": true}). Default null."},
                    "wait": continue_wait,
                    "timeout": continue_timeout
                }),
                &["job", "key"],
            ),
            status_output(),
            [false, false, false],
        ),
        (
            "palm_cancel",
            "Cancel a job",
            "Cancel a job that has not finished: its running commands are stopped and it \
             ends with status cancelled (final). The reason is recorded in its journal.",
            object(
                json!({"job": job_field(), "reason": {"type": "string", "description": "Why (kept in the journal)."}}),
                &["job"],
            ),
            json!({"type": "object", "required": ["job", "status"], "properties": {
                "job": {"type": "string"}, "status": {"type": "string"}}}),
            [false, true, true],
        ),
        (
            "palm_retry",
            "Retry an ended job from a node",
            "Start a new job that retries an ended (failed, cancelled or succeeded) job from one \
             node of its tree: what the old job did before that node is kept (completed \
             commands are not run again; their outputs stay on the blackboard), the node and \
             what came after run again. `from` is the node's path as palm_inspect's tree \
             shows it (\"0.2.1\"). `revision` runs another revision of the flow (a fixed \
             step), refused if it does not derive the same history up to the node. Asking \
             twice answers with the same new job (existing: true). Returns at once; follow \
             the new job with palm_status.",
            object(
                json!({
                    "job": job_field(),
                    "from": string("The node's path in the job's tree (palm_inspect), e.g. \"0.1\"."),
                    "revision": {"type": "integer", "minimum": 1, "description": "Run this revision of the flow instead of the job's own."}
                }),
                &["job", "from"],
            ),
            json!({"type": "object", "required": ["job", "status", "retry_of", "from"], "properties": {
                "job": {"type": "string"}, "status": {"type": "string"}, "retry_of": {"type": "string"},
                "from": {"type": "string"}, "flow": {"type": "string"}, "revision": {"type": "integer"},
                "kept_inputs": {"type": "integer"}, "dropped_inputs": {"type": "integer"},
                "existing": {"type": "boolean"}}}),
            [false, false, true],
        ),
        (
            "palm_inspect",
            "A job's journal and tree",
            "A job's journal (every event, oldest first; the newest events_max) and its tree \
             with every node's status: use it to see why a job failed or where it waits.",
            object(
                json!({"job": job_field(),
                    "events_max": {"type": "integer", "minimum": 1, "maximum": 100000, "description": "At most this many events, the newest (default 200)."}}),
                &["job"],
            ),
            json!({"type": "object", "required": ["job", "status", "events"], "properties": {
                "job": {"type": "string"}, "status": {"type": "string"},
                "events": {"type": "array"}, "events_total": {"type": "integer"}}}),
            [true, false, true],
        ),
        (
            "palm_places",
            "The place book: workloads beside the jobs",
            "Places are workloads the node spawns or adopts (a database, a dev server), with \
             health probes and readiness; effects that need a place wait while it is down. \
             action=list (default): every place with state and reason. action=events: the \
             node journal's place transitions (optional name, limit). action=add: add a \
             place (name, place: the same object as in palm.yaml, e.g. {\"spawn\": \"...\", \
             \"probe\": {\"http\": \"...\"}}). action=remove, action=restart: by name.",
            object(
                json!({
                    "action": {"type": "string", "enum": ["list", "events", "add", "remove", "restart"], "description": "What to do (default list)."},
                    "name": string("The place's name (events: only this place)."),
                    "place": {"type": "object", "description": "add: the place as in palm.yaml (spawn or adopt, probe, restart, capabilities)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "events: at most this many, the newest (default 50)."}
                }),
                &[],
            ),
            json!({"type": "object"}),
            [false, false, false],
        ),
        (
            "palm_tree",
            "The tree of nodes",
            "The nodes this node knows: itself (name, id, role) and the parent and \
             children it links to, with each link's state; `tree` is the whole subtree \
             as the topology sees it (roles, seats, capabilities, link states) and \
             `projection` says whether this node's view of its parent's truth is valid.",
            object(json!({}), &[]),
            json!({"type": "object", "required": ["nodes"], "properties": {
                "nodes": {"type": "array"}, "links": {"type": "array"},
                "tree": {"type": "object"}, "projection": {"type": "object"}}}),
            [true, false, true],
        ),
        (
            "palm_vitality",
            "The node's live self-report",
            "Seats (busy, idle, what runs), queues (ready effects, timers, leases), jobs by \
             status, places, links, store, memory and CPU of the node.",
            object(json!({}), &[]),
            json!({"type": "object", "required": ["node"], "properties": {"node": {"type": "string"}}}),
            [true, false, true],
        ),
        (
            "palm_recall",
            "Search past agent sessions",
            "Every archived Claude and Codex session of this machine, searched at once \
             (BM25; secrets redacted): what was tried, decided or said before. Hits name \
             the session, vendor, file and line, time, role (user, assistant, tool_call, \
             tool_result, reasoning, system, summary) and a snippet; palm_session shows \
             the session around a hit. Run `palm sessions ingest` (or a node that tails) \
             to archive new sessions.",
            object(
                json!({
                    "query": string("Words to look for (\"quoted phrases\", AND/OR/-word work)."),
                    "repo": string("Only sessions that worked in this directory or below it (absolute path)."),
                    "since": string("Only entries from this long ago or newer (e.g. 7d, 12h)."),
                    "vendor": {"type": "string", "enum": ["claude", "codex"]},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "Most hits (default 20)."}
                }),
                &["query"],
            ),
            json!({"type": "object", "required": ["hits"], "properties": {"hits": {"type": "array"}}}),
            [true, false, true],
        ),
        (
            "palm_session",
            "One past agent session",
            "A session read back from the archive (even after the vendor deleted its \
             file): its entries in order, its cwd, branch and times, and the Palm runs, \
             worktrees, patches and commits it is linked to. With `at`, only the entries \
             around that line of its file (a palm_recall hit's line).",
            object(
                json!({
                    "id": string("The session id (a palm_recall hit's `session`)."),
                    "at": {"type": "integer", "minimum": 1, "description": "Only the entries around this line."}
                }),
                &["id"],
            ),
            json!({"type": "object", "required": ["session", "entries"], "properties": {
                "session": {"type": "string"}, "entries": {"type": "array"}, "links": {"type": "object"}}}),
            [true, false, true],
        ),
        (
            "palm_knowledge",
            "What a part of a repo is for",
            "The repository's knowledge map (built with no model, every claim cited as \
             file:line or a commit): with `module` (a name, a path or a file inside it), a \
             brief sized for a prompt — purpose, decisions, surface, dependencies, risky \
             files, checks, incidents, owners — with claims whose cited lines changed \
             marked STALE; with `query`, the best matching modules, decisions, incidents \
             and summaries. The map is built on first use (`palm knowledge build`).",
            object(
                json!({
                    "repo": string("The repository (absolute path of its working tree or a path inside it)."),
                    "module": string("A module's name or path, or a file inside it: answers with its brief."),
                    "query": string("Words to look for: answers with hits."),
                    "max_bytes": {"type": "integer", "minimum": 256, "maximum": 200000, "description": "The brief's budget (default 12000)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Most hits (default 5)."}
                }),
                &["repo"],
            ),
            json!({"type": "object"}),
            [true, false, true],
        ),
    ];
    rows.into_iter()
        .map(
            |(name, title, description, input, output, [read_only, destructive, idempotent])| {
                let schema = Schema::compile(&input)
                    .unwrap_or_else(|e| panic!("the input schema of {name} is invalid: {e}"));
                ToolSpec {
                    name,
                    title,
                    description,
                    input,
                    output,
                    read_only,
                    destructive,
                    idempotent,
                    schema,
                }
            },
        )
        .collect()
}

static SPECS: LazyLock<Vec<ToolSpec>> = LazyLock::new(build_specs);

/// Every tool, in the order `tools/list` shows them.
pub fn specs() -> &'static [ToolSpec] {
    &SPECS
}

/// The tool named `name`.
pub fn spec(name: &str) -> Option<&'static ToolSpec> {
    SPECS.iter().find(|s| s.name == name)
}

fn as_object(value: &Value) -> Arc<JsonObject> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

impl ToolSpec {
    /// The MCP tool description.
    pub fn tool(&self) -> Tool {
        let mut tool = Tool::new(self.name, self.description, as_object(&self.input))
            .with_title(self.title)
            .with_raw_output_schema(as_object(&self.output));
        tool.annotations = Some(
            ToolAnnotations::with_title(self.title)
                .read_only(self.read_only)
                .destructive(self.destructive)
                .idempotent(self.idempotent)
                // Jobs run commands and places spawn processes: those reach beyond Palm.
                .open_world(matches!(
                    self.name,
                    "palm_submit" | "palm_continue" | "palm_retry" | "palm_places" | "palm_wizard"
                )),
        );
        tool
    }

    fn field_names(&self) -> Vec<String> {
        self.input["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn usage(&self) -> String {
        let required: Vec<&str> = self.input["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let fields: Vec<String> = self
            .field_names()
            .into_iter()
            .map(|f| {
                if required.contains(&f.as_str()) {
                    f
                } else {
                    format!("{f}?")
                }
            })
            .collect();
        format!("{} takes {{{}}}", self.name, fields.join(", "))
    }

    /// Checks arguments against the input schema; the first problem becomes an error
    /// naming the field, what was expected, and what the field is for.
    pub fn check(&self, arguments: Option<&JsonObject>) -> Result<Map<String, Value>, ToolError> {
        let arguments = arguments.cloned().unwrap_or_default();
        let value = Value::Object(arguments);
        let violations = self.schema.validate(&value);
        let Some(first) = violations.first() else {
            let Value::Object(arguments) = value else {
                unreachable!("built from an object");
            };
            return Ok(arguments);
        };
        // The pointer names the field (`/job`), or is empty for problems of the whole
        // object (a missing or unknown property, named in the message itself).
        let field = first
            .pointer
            .trim_start_matches('/')
            .split('/')
            .next()
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .or_else(|| quoted(&first.message));
        let about = field
            .as_deref()
            .and_then(|f| self.input["properties"][f]["description"].as_str())
            .map(|d| format!(" (`{}`: {d})", field.as_deref().unwrap_or_default()))
            .unwrap_or_default();
        let message = match &first.pointer {
            p if p.is_empty() => format!("{}: {}{about}", self.name, first.message),
            p => format!(
                "{}: argument `{}`: {}{about}",
                self.name,
                p.trim_start_matches('/'),
                first.message
            ),
        };
        let mut hint = self.usage();
        if first.message.starts_with("unexpected property") {
            hint = format!("{hint}; known arguments: {}", self.field_names().join(", "));
        }
        Err(ToolError::argument(message).hint(hint))
    }
}

/// The first `name` quoted with backticks in a message.
fn quoted(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_owned())
}

fn str_arg<'a>(arguments: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    arguments.get(name).and_then(Value::as_str)
}

fn u64_arg(arguments: &Map<String, Value>, name: &str) -> Option<u64> {
    arguments.get(name).and_then(Value::as_u64)
}

fn bool_arg(arguments: &Map<String, Value>, name: &str) -> bool {
    arguments
        .get(name)
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn required_str<'a>(
    tool: &str,
    arguments: &'a Map<String, Value>,
    name: &str,
    why: &str,
) -> Result<&'a str, ToolError> {
    str_arg(arguments, name).ok_or_else(|| {
        ToolError::argument(format!("{tool}: argument `{name}` is required {why}"))
            .hint(spec(tool).map(ToolSpec::usage).unwrap_or_default())
    })
}

/// The wait timeout of a call: `timeout` as ms or a duration, bounded by 24 h.
fn timeout_ms(tool: &str, arguments: &Map<String, Value>) -> Result<u64, ToolError> {
    let ms = match arguments.get("timeout") {
        None => WAIT_MS_DEFAULT,
        Some(Value::Number(n)) => n.as_u64().ok_or_else(|| {
            ToolError::argument(format!(
                "{tool}: argument `timeout`: expected a non-negative number of milliseconds, found {n}"
            ))
        })?,
        Some(Value::String(text)) => text
            .parse::<u64>()
            .ok()
            .or_else(|| palm_actors::definition::parse_duration_ms(text))
            .ok_or_else(|| {
                ToolError::argument(format!(
                    "{tool}: argument `timeout`: `{text}` is not a duration (expected e.g. 500ms, 30s, 5m, or a number of milliseconds)"
                ))
            })?,
        Some(other) => {
            return Err(ToolError::argument(format!(
                "{tool}: argument `timeout`: expected a string or an integer, found {other}"
            )));
        }
    };
    Ok(ms.min(WAIT_MS_MAX))
}

/// Sends one request; a refusal becomes a tool error carrying the node's kind and hint.
pub async fn ask(link: &ControlLink, request: Request) -> Result<Value, ToolError> {
    let response = link.call(request).await;
    if response.ok {
        return Ok(response.result.unwrap_or(Value::Null));
    }
    Err(response
        .error
        .map(ToolError::from)
        .unwrap_or_else(|| ToolError::new("error", "the node refused the request")))
}

/// Runs a tool whose arguments passed [`ToolSpec::check`].
pub async fn call(
    link: &ControlLink,
    tool: &ToolSpec,
    arguments: Map<String, Value>,
    ctx: &CallContext,
) -> Result<Answer, ToolError> {
    match tool.name {
        "palm_assist" => super::assist::run(link, &arguments).await,
        "palm_flows" => flows(link, &arguments).await,
        "palm_submit" => submit(link, &arguments, ctx).await,
        "palm_agent_run" => agent_run(link, &arguments, ctx).await,
        "palm_patches" => patches(link, &arguments),
        "palm_team" => team(link, &arguments).await,
        "palm_wizard" => wizard(link, &arguments, ctx).await,
        "palm_status" => {
            let job = required_str(tool.name, &arguments, "job", "")?;
            let view = ask(
                link,
                Request::Status {
                    job: job.to_owned(),
                },
            )
            .await?;
            Ok(status_answer(view))
        }
        "palm_jobs" => jobs(link, &arguments).await,
        "palm_continue" => continue_job(link, &arguments, ctx).await,
        "palm_cancel" => {
            let job = required_str(tool.name, &arguments, "job", "")?;
            let reason = str_arg(&arguments, "reason").map(str::to_owned);
            let value = ask(
                link,
                Request::Cancel {
                    job: job.to_owned(),
                    reason,
                },
            )
            .await?;
            Ok(Answer {
                summary: format!(
                    "job {job} {}",
                    value["status"].as_str().unwrap_or("cancelled")
                ),
                value,
            })
        }
        "palm_retry" => {
            let job = required_str(tool.name, &arguments, "job", "")?;
            let from = required_str(tool.name, &arguments, "from", "")?;
            let revision = arguments
                .get("revision")
                .and_then(Value::as_u64)
                .and_then(|r| u32::try_from(r).ok());
            let value = ask(
                link,
                Request::Retry {
                    job: job.to_owned(),
                    from: from.to_owned(),
                    revision,
                },
            )
            .await?;
            Ok(Answer {
                summary: format!(
                    "job {} retries {job} from node {from}: {}",
                    value["job"].as_str().unwrap_or("?"),
                    value["status"].as_str().unwrap_or("?")
                ),
                value,
            })
        }
        "palm_inspect" => inspect(link, &arguments).await,
        "palm_places" => places(link, &arguments).await,
        "palm_tree" => tree(link).await,
        "palm_vitality" => {
            let value = ask(link, Request::Vitality).await?;
            Ok(Answer {
                summary: vitality_summary(&value),
                value,
            })
        }
        "palm_recall" | "palm_session" | "palm_knowledge" => {
            let hook = SESSIONS.get().ok_or_else(|| {
                ToolError::new(
                    "unavailable",
                    "this palm was built without the session memory (feature `intel`)",
                )
            })?;
            let data = link.data().to_owned();
            let name = tool.name;
            tokio::task::spawn_blocking(move || hook(&data, name, &arguments))
                .await
                .map_err(|e| ToolError::new("error", e.to_string()))?
        }
        other => Err(ToolError::new(
            "unknown_tool",
            format!("no tool named `{other}`"),
        )),
    }
}

/// Runs `palm_recall`, `palm_session` (on a node's data directory) and `palm_knowledge`
/// (on a repository): the session memory and the repo index are in the binary built
/// with them, which installs this (the MCP crate stays thin).
pub type SessionsHook = Arc<
    dyn Fn(&std::path::Path, &str, &Map<String, Value>) -> Result<Answer, ToolError> + Send + Sync,
>;

static SESSIONS: std::sync::OnceLock<SessionsHook> = std::sync::OnceLock::new();

/// Installs the session memory's tools (the first one installed stays).
pub fn set_sessions(hook: SessionsHook) {
    let _ = SESSIONS.set(hook);
}

/// The calls that would move a job on: a `palm_continue` per wait it is parked on.
fn next_calls(view: &Value) -> Vec<Value> {
    let job = view["job"].as_str().unwrap_or_default();
    view["waiting_on"]
        .as_array()
        .map(|waits| {
            waits
                .iter()
                .filter_map(|w| w["key"].as_str())
                .map(|key| {
                    json!({"tool": "palm_continue", "arguments": {"job": job, "key": key, "input": null}})
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One line about a job's status (and what it waits on, or why it failed).
pub fn status_line(view: &Value) -> String {
    let job = view["job"].as_str().unwrap_or_default();
    let flow = view["flow"].as_str().unwrap_or_default();
    let status = view["status"].as_str().unwrap_or_default();
    let mut line = format!("job {job} (flow {flow}) is {status}");
    if let Some(waits) = view["waiting_on"].as_array().filter(|w| !w.is_empty()) {
        let described: Vec<String> = waits
            .iter()
            .map(|w| {
                let key = w["key"].as_str().unwrap_or_default();
                match w["prompt"].as_str() {
                    Some(prompt) => format!("`{key}` ({prompt})"),
                    None => format!("`{key}`"),
                }
            })
            .collect();
        line.push_str(&format!(
            " on {}; deliver input with palm_continue",
            described.join(", ")
        ));
    }
    if let Some(error) = view["error"].as_str() {
        line.push_str(&format!(": {error}"));
    }
    line
}

fn status_answer(mut view: Value) -> Answer {
    let next = next_calls(&view);
    if let Some(object) = view.as_object_mut()
        && !next.is_empty()
    {
        object.insert("next".into(), Value::Array(next));
    }
    Answer {
        summary: status_line(&view),
        value: view,
    }
}

/// The control link as the shared verbs' [`palm_api::verbs::Caller`].
struct LinkCaller<'a>(&'a ControlLink);

impl palm_api::verbs::Caller for LinkCaller<'_> {
    type Error = ToolError;

    fn call(
        &mut self,
        request: Request,
    ) -> impl std::future::Future<Output = Result<Value, ToolError>> + Send {
        ask(self.0, request)
    }
}

/// Waits for a job to settle (terminal or waiting) with the shared verb, re-asking every
/// [`PROGRESS_INTERVAL_MS`] and reporting progress meanwhile. A cancelled call stops
/// waiting; the job goes on.
async fn settle(
    link: &ControlLink,
    job: &str,
    timeout_ms: u64,
    ctx: &CallContext,
) -> Result<Value, ToolError> {
    let started = Instant::now();
    let mut caller = LinkCaller(link);
    let waiting = palm_api::verbs::settle(
        &mut caller,
        job,
        timeout_ms,
        PROGRESS_INTERVAL_MS,
        |round, view| {
            let line = palm_api::verbs::progress_line(job, view, started);
            ctx.report(f64::from(round), line)
        },
    );
    tokio::select! {
        view = waiting => view,
        () = ctx.cancel.cancelled() => {
            Err(ToolError::new("cancelled", format!("stopped waiting for job {job}; the job goes on"))
                .hint("palm_status shows where it is"))
        }
    }
}

async fn submit(
    link: &ControlLink,
    arguments: &Map<String, Value>,
    ctx: &CallContext,
) -> Result<Answer, ToolError> {
    let usage = spec("palm_submit").map(ToolSpec::usage).unwrap_or_default();
    let flow = match (str_arg(arguments, "flow"), str_arg(arguments, "source")) {
        (Some(_), Some(_)) => {
            return Err(ToolError::argument(
                "palm_submit: give either `flow` (a stored name or a file path) or `source` (an inline definition), not both",
            )
            .hint(usage));
        }
        (None, None) => {
            return Err(ToolError::argument(
                "palm_submit: argument `flow` or `source` is required: `flow` names a stored flow (palm_flows list) or a flow file; `source` is an inline YAML/JSON definition",
            )
            .hint(usage));
        }
        (Some(text), None) => palm_api::verbs::at_revision(
            palm_api::verbs::flow_arg(text)?,
            u64_arg(arguments, "revision").and_then(|r| u32::try_from(r).ok()),
        )?,
        (None, Some(source)) => FlowArg::Source {
            source: source.to_owned(),
            origin: "<inline>".to_owned(),
        },
    };
    let wait = bool_arg(arguments, "wait");
    let timeout = timeout_ms("palm_submit", arguments)?;
    let input = arguments
        .get("input")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let submitted = ask(
        link,
        Request::Submit {
            flow,
            input,
            args: Vec::new(),
            // An agent's submit is a start from outside, like the CLI's.
            started_by: None,
            node: str_arg(arguments, "node").map(str::to_owned),
        },
    )
    .await?;
    let job = submitted["job"].as_str().unwrap_or_default().to_owned();
    if !wait {
        let summary = format!(
            "submitted job {job} (flow {} revision {}): {}",
            submitted["flow"].as_str().unwrap_or_default(),
            submitted["revision"],
            submitted["status"].as_str().unwrap_or_default()
        );
        return Ok(Answer {
            summary,
            value: submitted,
        });
    }
    ctx.report(0.0, format!("job {job} submitted")).await;
    let view = settle(link, &job, timeout, ctx).await?;
    Ok(status_answer(view))
}

async fn agent_run(
    link: &ControlLink,
    arguments: &Map<String, Value>,
    ctx: &CallContext,
) -> Result<Answer, ToolError> {
    let timeout_ms = match arguments.get("timeout") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(text)) => Some(palm_api::verbs::duration_ms(text, "timeout")?),
        Some(other) => {
            return Err(ToolError::argument(format!(
                "palm_agent_run: argument `timeout` must be milliseconds or a duration, found {other}"
            )));
        }
    };
    let spec = palm_agents::AgentSpec {
        provider: str_arg(arguments, "provider")
            .unwrap_or_default()
            .to_owned(),
        prompt: str_arg(arguments, "prompt").unwrap_or_default().to_owned(),
        mode: str_arg(arguments, "mode")
            .and_then(palm_agents::Mode::parse)
            .unwrap_or_default(),
        repo: str_arg(arguments, "repo").map(str::to_owned),
        model: str_arg(arguments, "model").map(str::to_owned),
        max_turns: u64_arg(arguments, "max_turns").and_then(|n| u32::try_from(n).ok()),
        timeout_ms,
        budget_usd: arguments.get("budget_usd").and_then(Value::as_f64),
        resume: str_arg(arguments, "resume").map(str::to_owned),
        schema: None,
        job: None,
        job_budget_usd: None,
        job_budget_turns: None,
        lane: None,
    };
    spec.check().map_err(ToolError::argument)?;
    if !spec
        .repo
        .as_deref()
        .is_some_and(|r| std::path::Path::new(r).is_absolute())
    {
        return Err(ToolError::argument(
            "palm_agent_run: argument `repo` must be an absolute path on the node's machine",
        ));
    }
    let (source, input) = palm_agents::spec::one_leaf_flow(&spec);
    let submitted = ask(
        link,
        Request::Submit {
            flow: FlowArg::Source {
                source,
                origin: "<palm_agent_run>".to_owned(),
            },
            input,
            args: Vec::new(),
            started_by: None,
            node: None,
        },
    )
    .await?;
    let job = submitted["job"].as_str().unwrap_or_default().to_owned();
    let wait = arguments
        .get("wait")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let view = if wait {
        ctx.report(0.0, format!("agent {} running in job {job}", spec.provider))
            .await;
        let limit = spec.timeout_ms.unwrap_or(30 * 60 * 1000) + 120_000;
        settle(link, &job, limit.min(WAIT_MS_MAX), ctx).await?
    } else {
        submitted
    };
    let result = view["state"]["result"].clone();
    let value = json!({"job": job, "status": view["status"], "result": result});
    let summary = match result["end"].as_str() {
        Some(end) => format!(
            "agent {} ended {end} in job {job}{}",
            spec.provider,
            result["patch"]["id"]
                .as_str()
                .map(|id| format!(
                    "; patch {id} ({})",
                    result["patch"]["status"].as_str().unwrap_or_default()
                ))
                .unwrap_or_default()
        ),
        None => format!(
            "agent {} in job {job}: {}",
            spec.provider,
            view["status"].as_str().unwrap_or_default()
        ),
    };
    Ok(Answer { summary, value })
}

/// `palm_team`: the board (a team's saved state) or a post on its standing wait.
async fn team(link: &ControlLink, arguments: &Map<String, Value>) -> Result<Answer, ToolError> {
    let team = required_str("palm_team", arguments, "team", "")?.to_owned();
    let action = str_arg(arguments, "action").unwrap_or_default();
    if action == "board" {
        let view = ask(link, Request::Status { job: team.clone() }).await?;
        let board = palm_api::verbs::team_board(&view)
            .cloned()
            .ok_or_else(|| ToolError::new("not_a_team", format!("job {team} has no team board")))?;
        let done = board["tasks"]
            .as_array()
            .map_or(0, |t| t.iter().filter(|t| t["status"] == "done").count());
        let total = board["tasks"].as_array().map_or(0, Vec::len);
        return Ok(Answer {
            summary: format!(
                "team {team} {}: {done}/{total} tasks done",
                view["status"].as_str().unwrap_or("?")
            ),
            value: json!({"team": team, "status": view["status"], "board": board}),
        });
    }
    let mut input = json!({"op": action});
    for field in ["text", "to", "from", "member", "task"] {
        if let Some(value) = str_arg(arguments, field) {
            input[field] = json!(value);
        }
    }
    if let Some(turns) = arguments.get("turns") {
        input["turns"] = turns.clone();
    }
    let needed: &[&str] = match action {
        "post" => &["text"],
        "claim" | "complete" => &["member", "task"],
        "budget" => &["turns"],
        other => {
            return Err(ToolError::argument(format!(
                "palm_team: argument `action`: unknown action `{other}`"
            )));
        }
    };
    for field in needed {
        if input.get(*field).is_none() {
            return Err(ToolError::argument(format!(
                "palm_team: action={action} needs `{field}`"
            )));
        }
    }
    let value = ask(
        link,
        Request::Continue {
            job: team.clone(),
            key: "team".to_owned(),
            input,
        },
    )
    .await?;
    // A claim or completion the board could not take is said on the board itself.
    let view = ask(link, Request::Status { job: team.clone() }).await?;
    if let Some(refused) = palm_api::verbs::team_board(&view)
        .and_then(|board| board["refused"].as_str())
        .filter(|_| matches!(action, "claim" | "complete"))
    {
        return Err(ToolError::new("refused", refused.to_owned()));
    }
    Ok(Answer {
        summary: format!("team {team}: {action} accepted"),
        value,
    })
}

fn patches(link: &ControlLink, arguments: &Map<String, Value>) -> Result<Answer, ToolError> {
    let store = palm_agents::patches::Patches::new(link.data());
    let failed = |err: palm_agents::patches::PatchError| ToolError {
        kind: err.kind.to_owned(),
        message: err.message,
        hint: err.hint,
    };
    let action = str_arg(arguments, "action").unwrap_or_default();
    let id = || {
        required_str(
            "palm_patches",
            arguments,
            "id",
            &format!("with action={action}"),
        )
    };
    let value = match action {
        "list" => json!({"patches": store.list(str_arg(arguments, "job")).map_err(failed)?}),
        "show" => store.show(id()?).map_err(failed)?,
        "apply" => store
            .land(
                id()?,
                str_arg(arguments, "to").map(str::to_owned),
                false,
                crate::genome::now_ms(),
            )
            .map_err(failed)?,
        "revert" => store
            .land(id()?, None, true, crate::genome::now_ms())
            .map_err(failed)?,
        other => {
            return Err(ToolError::argument(format!(
                "palm_patches: argument `action`: unknown action `{other}`"
            )));
        }
    };
    let summary = match action {
        "list" => format!(
            "{} patches",
            value["patches"].as_array().map_or(0, Vec::len)
        ),
        "show" => format!(
            "patch {} {}",
            value["id"].as_str().unwrap_or_default(),
            value["status"].as_str().unwrap_or_default()
        ),
        _ => format!(
            "patch {} {}{}",
            value["id"].as_str().unwrap_or_default(),
            value["status"].as_str().unwrap_or_default(),
            value["branch"]
                .as_str()
                .map(|b| format!(" on {b}"))
                .unwrap_or_default()
        ),
    };
    Ok(Answer { summary, value })
}

/// The wizard a status document waits on: `{job, status, step, prompt, moves, answers,
/// error}` (`step` null once the wizard has ended).
fn wizard_view(job: &str, view: &Value, key: Option<&str>) -> Value {
    let wait = palm_api::verbs::wizard_wait(view);
    let step = wait.map(|w| w["schema"]["x-palm-wizard"].clone());
    let key = step
        .as_ref()
        .and_then(|s| s["wizard"].as_str())
        .or(key)
        .unwrap_or_default();
    let moves = wait.map(|w| {
        let mut schema = w["schema"].clone();
        if let Some(object) = schema.as_object_mut() {
            object.remove("x-palm-wizard");
        }
        schema
    });
    json!({
        "job": job,
        "status": view["status"],
        "step": step,
        "prompt": wait.map(|w| w["prompt"].clone()),
        "moves": moves,
        "answers": if key.is_empty() { Value::Null } else { view["state"][key].clone() },
        "error": view["error"],
        "wizard": key,
    })
}

fn wizard_summary(value: &Value) -> String {
    let job = value["job"].as_str().unwrap_or_default();
    match value["step"].as_object() {
        Some(step) => format!(
            "wizard {job}: step {}/{} `{}` ({}){}",
            step.get("n").cloned().unwrap_or_default(),
            step.get("of").cloned().unwrap_or_default(),
            step.get("step").and_then(Value::as_str).unwrap_or_default(),
            step.get("kind").and_then(Value::as_str).unwrap_or_default(),
            value["prompt"]
                .as_str()
                .map(|p| format!(": {p}"))
                .unwrap_or_default()
        ),
        None => format!(
            "wizard {job} {}{}",
            value["status"].as_str().unwrap_or_default(),
            value["error"]
                .as_str()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ),
    }
}

/// `palm_wizard`: start, step, answer, back, commit.
async fn wizard(
    link: &ControlLink,
    arguments: &Map<String, Value>,
    ctx: &CallContext,
) -> Result<Answer, ToolError> {
    let action = str_arg(arguments, "action").unwrap_or_default();
    let timeout = timeout_ms("palm_wizard", arguments)?;
    let job = if action == "start" {
        let mut started = arguments.clone();
        started.remove("action");
        started.insert("wait".into(), json!(false));
        for field in ["answer", "move", "to", "job"] {
            started.remove(field);
        }
        let submitted = submit(link, &started, ctx).await?;
        submitted.value["job"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    } else {
        required_str(
            "palm_wizard",
            arguments,
            "job",
            &format!("with action={action}"),
        )?
        .to_owned()
    };
    let here = settle(link, &job, timeout, ctx).await?;
    let current = wizard_view(&job, &here, None);
    let input = match action {
        "start" | "step" => None,
        "answer" => match (arguments.get("answer"), arguments.get("move")) {
            (Some(answer), None) => Some(json!({ "answer": answer })),
            (None, Some(made @ Value::Object(_))) => Some(made.clone()),
            _ => {
                return Err(ToolError::argument(
                    "palm_wizard: action=answer takes `answer` (the step's value) or `move` (add, edit, remove, done), one of them",
                ));
            }
        },
        "back" => {
            Some(json!({ "back": str_arg(arguments, "to").map_or(json!(true), |to| json!(to)) }))
        }
        "commit" => Some(json!({"commit": true})),
        other => {
            return Err(ToolError::argument(format!(
                "palm_wizard: argument `action`: unknown action `{other}`"
            )));
        }
    };
    let Some(input) = input else {
        return Ok(Answer {
            summary: wizard_summary(&current),
            value: current,
        });
    };
    let Some(key) = current["wizard"].as_str().filter(|k| !k.is_empty()) else {
        return Err(ToolError::new(
            "not_waiting",
            format!(
                "job {job} waits on no wizard step (it is {})",
                here["status"].as_str().unwrap_or("unknown")
            ),
        )
        .hint(format!(
            "palm_status {{\"job\": \"{job}\"}} shows where it is"
        )));
    };
    let key = key.to_owned();
    ask(
        link,
        Request::Continue {
            job: job.clone(),
            key: key.clone(),
            input,
        },
    )
    .await
    .map_err(|err| match err.kind.as_str() {
        "invalid_input" if err.hint.is_none() => err.hint(format!(
            "palm_wizard {{\"action\": \"step\", \"job\": \"{job}\"}} shows the moves this step accepts"
        )),
        _ => err,
    })?;
    let next = settle(link, &job, timeout, ctx).await?;
    let value = wizard_view(&job, &next, Some(&key));
    Ok(Answer {
        summary: wizard_summary(&value),
        value,
    })
}

async fn continue_job(
    link: &ControlLink,
    arguments: &Map<String, Value>,
    ctx: &CallContext,
) -> Result<Answer, ToolError> {
    let job = required_str("palm_continue", arguments, "job", "")?.to_owned();
    let key = required_str("palm_continue", arguments, "key", "")?.to_owned();
    let input = arguments.get("input").cloned().unwrap_or(Value::Null);
    let wait = bool_arg(arguments, "wait");
    let timeout = timeout_ms("palm_continue", arguments)?;
    let continued = ask(
        link,
        Request::Continue {
            job: job.clone(),
            key: key.clone(),
            input,
        },
    )
    .await
    .map_err(|err| match err.kind.as_str() {
        "not_waiting" | "invalid_input" if err.hint.is_none() => {
            err.hint(format!("palm_status {{\"job\": \"{job}\"}} shows the keys it waits on and the input each accepts"))
        }
        _ => err,
    })?;
    if !wait {
        return Ok(Answer {
            summary: format!(
                "continued job {job} at `{key}`: now {}",
                continued["status"].as_str().unwrap_or_default()
            ),
            value: continued,
        });
    }
    let view = settle(link, &job, timeout, ctx).await?;
    Ok(status_answer(view))
}

async fn jobs(link: &ControlLink, arguments: &Map<String, Value>) -> Result<Answer, ToolError> {
    let status = str_arg(arguments, "status").map(str::to_owned);
    let limit = u64_arg(arguments, "limit")
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(JOBS_LIMIT_DEFAULT);
    let value = ask(
        link,
        Request::Jobs {
            status: status.clone(),
            limit: Some(limit),
            node: None,
        },
    )
    .await?;
    let list = value["jobs"].as_array().cloned().unwrap_or_default();
    let mut lines = vec![match (&status, list.len()) {
        (Some(s), 0) => format!("no {s} jobs"),
        (None, 0) => "no jobs".to_owned(),
        (Some(s), n) => format!("{n} {s} jobs:"),
        (None, n) => format!("{n} jobs:"),
    }];
    for job in &list {
        let waiting = job["waiting"]
            .as_array()
            .filter(|w| !w.is_empty())
            .map(|w| {
                let keys: Vec<&str> = w.iter().filter_map(Value::as_str).collect();
                format!(" (waits on {})", keys.join(", "))
            })
            .unwrap_or_default();
        lines.push(format!(
            "- {} {} {}{waiting}",
            job["job"].as_str().unwrap_or_default(),
            job["flow"].as_str().unwrap_or_default(),
            job["status"].as_str().unwrap_or_default(),
        ));
    }
    Ok(Answer {
        summary: lines.join("\n"),
        value,
    })
}

async fn inspect(link: &ControlLink, arguments: &Map<String, Value>) -> Result<Answer, ToolError> {
    let job = required_str("palm_inspect", arguments, "job", "")?;
    let max = u64_arg(arguments, "events_max")
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(EVENTS_DEFAULT);
    let mut value = ask(
        link,
        Request::Inspect {
            job: job.to_owned(),
        },
    )
    .await?;
    let total = value["events"].as_array().map_or(0, Vec::len);
    if let Some(events) = value.get_mut("events").and_then(Value::as_array_mut)
        && events.len() > max
    {
        events.drain(..events.len() - max);
    }
    if let Some(object) = value.as_object_mut() {
        object.insert("events_total".into(), json!(total));
    }
    let shown = value["events"].as_array().map_or(0, Vec::len);
    let summary = format!(
        "job {job} is {}; {total} journal events{}",
        value["status"].as_str().unwrap_or_default(),
        if shown < total {
            format!(" (the newest {shown} shown)")
        } else {
            String::new()
        }
    );
    Ok(Answer { summary, value })
}

async fn flows(link: &ControlLink, arguments: &Map<String, Value>) -> Result<Answer, ToolError> {
    let action = str_arg(arguments, "action").unwrap_or("list");
    match action {
        "list" => {
            let value = ask(link, Request::FlowsList).await?;
            let list = value["flows"].as_array().cloned().unwrap_or_default();
            let mut lines = vec![if list.is_empty() {
                "no flows stored (submit a file path or inline source, or store one with action=add)".to_owned()
            } else {
                format!("{} stored flows:", list.len())
            }];
            for flow in &list {
                lines.push(format!(
                    "- {} rev {}{}",
                    flow["name"].as_str().unwrap_or_default(),
                    flow["revision"],
                    flow["description"]
                        .as_str()
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default()
                ));
            }
            Ok(Answer {
                summary: lines.join("\n"),
                value,
            })
        }
        "describe" => {
            let name = required_str("palm_flows", arguments, "name", "with action=describe")?;
            let revision = u64_arg(arguments, "revision").and_then(|r| u32::try_from(r).ok());
            let value = ask(
                link,
                Request::FlowsShow {
                    name: name.to_owned(),
                    revision,
                },
            )
            .await?;
            let inputs: Vec<String> = value["input"]
                .as_array()
                .map(|fields| {
                    fields
                        .iter()
                        .map(|f| {
                            let name = f["name"].as_str().unwrap_or_default();
                            if f["required"].as_bool() == Some(true) {
                                name.to_owned()
                            } else {
                                format!("{name}?")
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(Answer {
                summary: format!(
                    "flow {name} rev {} (inputs: {})",
                    value["revision"],
                    if inputs.is_empty() {
                        "none".to_owned()
                    } else {
                        inputs.join(", ")
                    }
                ),
                value,
            })
        }
        "validate" => {
            let source = required_str("palm_flows", arguments, "source", "with action=validate")?;
            let value = validate(link, source).await;
            let summary = if value["valid"] == json!(true) {
                format!("valid: flow {}", value["flow"].as_str().unwrap_or_default())
            } else {
                let errors: Vec<String> = value["errors"]
                    .as_array()
                    .map(|errors| {
                        errors
                            .iter()
                            .map(|e| {
                                format!(
                                    "{}:{}: {}",
                                    e["line"],
                                    e["col"],
                                    e["message"].as_str().unwrap_or_default()
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                format!("invalid:\n{}", errors.join("\n"))
            };
            Ok(Answer { summary, value })
        }
        "add" => {
            let source = required_str("palm_flows", arguments, "source", "with action=add")?;
            let value = ask(
                link,
                Request::FlowsAdd {
                    source: source.to_owned(),
                    origin: "<mcp>".to_owned(),
                },
            )
            .await?;
            Ok(Answer {
                summary: format!(
                    "{} flow {} revision {}",
                    if value["created"] == json!(true) {
                        "stored"
                    } else {
                        "unchanged:"
                    },
                    value["name"].as_str().unwrap_or_default(),
                    value["revision"]
                ),
                value,
            })
        }
        "schema" => {
            let schema: Value = serde_json::from_str(palm_actors::definition::schema::FLOW_SCHEMA)
                .map_err(|e| ToolError::new("internal", format!("flow schema: {e}")))?;
            Ok(Answer {
                summary: "the JSON Schema of the flow format".to_owned(),
                value: json!({ "schema": schema }),
            })
        }
        other => Err(ToolError::argument(format!(
            "palm_flows: argument `action`: unknown action `{other}`"
        ))),
    }
}

/// Parses a definition and resolves its subflows against the node's stored flows.
/// Nothing is stored and nothing runs.
async fn validate(link: &ControlLink, source: &str) -> Value {
    use palm_actors::definition::{self, Definition, Diagnostic};
    use std::collections::HashMap;
    let errors = |diagnostics: Vec<Diagnostic>| -> Value {
        let errors: Vec<Value> = diagnostics
            .iter()
            .map(|d| json!({"line": d.span.line, "col": d.span.col, "message": d.message, "hint": d.hint}))
            .collect();
        json!({"valid": false, "errors": errors})
    };
    let parsed = match definition::parse(source, "<inline>") {
        Ok(parsed) => Arc::new(parsed),
        Err(diagnostics) => return errors(diagnostics),
    };
    // check_subflows resolves names synchronously, so fetch what it asks for and retry
    // until it asks for nothing new (bounded by SUBFLOW_ROUNDS_MAX).
    let mut known: HashMap<String, Option<Arc<Definition>>> = HashMap::new();
    for _ in 0..SUBFLOW_ROUNDS_MAX {
        let asked = std::sync::Mutex::new(Vec::new());
        let this = Arc::clone(&parsed);
        let problems = definition::check_subflows(&parsed, &|name: &str| {
            if name == this.name {
                return Some(Arc::clone(&this));
            }
            match known.get(name) {
                Some(found) => found.clone(),
                None => {
                    asked
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(name.to_owned());
                    None
                }
            }
        });
        let asked = asked.into_inner().unwrap_or_else(|p| p.into_inner());
        if asked.is_empty() {
            if problems.is_empty() {
                return json!({"valid": true, "flow": parsed.name, "errors": []});
            }
            return errors(problems);
        }
        for name in asked {
            let stored = ask(
                link,
                Request::FlowsShow {
                    name: name.clone(),
                    revision: None,
                },
            )
            .await
            .ok()
            .and_then(|shown| {
                let text = shown["source"].as_str()?;
                definition::parse(text, &name).ok().map(Arc::new)
            });
            known.insert(name, stored);
        }
    }
    json!({"valid": false, "errors": [{"line": 1, "col": 1, "message": "subflows nest too deep to resolve", "hint": null}]})
}

async fn places(link: &ControlLink, arguments: &Map<String, Value>) -> Result<Answer, ToolError> {
    let action = str_arg(arguments, "action").unwrap_or("list");
    let name = str_arg(arguments, "name").map(str::to_owned);
    let request = match action {
        "list" => Request::Places,
        "events" => Request::PlacesEvents {
            place: name,
            limit: u64_arg(arguments, "limit").and_then(|l| usize::try_from(l).ok()),
        },
        "add" => {
            let name = required_str("palm_places", arguments, "name", "with action=add")?;
            let place = arguments
                .get("place")
                .and_then(Value::as_object)
                .cloned()
                .ok_or_else(|| {
                    ToolError::argument(
                        "palm_places: argument `place` is required with action=add: the place as in palm.yaml, e.g. {\"spawn\": \"exec python3 -m http.server 8123\", \"probe\": {\"tcp\": \"127.0.0.1:8123\"}}",
                    )
                })?;
            let spec = palm_api::verbs::one_spec(name, place)?;
            Request::PlacesAdd { spec }
        }
        "remove" => Request::PlacesRemove {
            name: required_str("palm_places", arguments, "name", "with action=remove")?.to_owned(),
        },
        "restart" => Request::PlacesRestart {
            name: required_str("palm_places", arguments, "name", "with action=restart")?.to_owned(),
        },
        other => {
            return Err(ToolError::argument(format!(
                "palm_places: argument `action`: unknown action `{other}`"
            )));
        }
    };
    let value = ask(link, request).await?;
    let summary = match action {
        "list" => {
            let list = value["places"].as_array().cloned().unwrap_or_default();
            let mut lines = vec![if list.is_empty() {
                "no places".to_owned()
            } else {
                format!("{} places:", list.len())
            }];
            for place in &list {
                lines.push(format!(
                    "- {} {}{}",
                    place["name"].as_str().unwrap_or_default(),
                    place["state"].as_str().unwrap_or_default(),
                    place["reason"]
                        .as_str()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ));
            }
            lines.join("\n")
        }
        "events" => format!(
            "{} place events",
            value["events"].as_array().map_or(0, Vec::len)
        ),
        done => format!(
            "place {}: {done} done",
            str_arg(arguments, "name").unwrap_or_default()
        ),
    };
    Ok(Answer { summary, value })
}

async fn tree(link: &ControlLink) -> Result<Answer, ToolError> {
    let vitality = ask(link, Request::Vitality).await?;
    let links: Vec<Value> = vitality["links"].as_array().cloned().unwrap_or_default();
    let tree = &vitality["tree"];
    let role = tree["role"]
        .as_str()
        .or(vitality["profile"].as_str())
        .unwrap_or("all-in-one")
        .to_owned();
    let parent = links
        .iter()
        .find(|l| l["direction"] == "parent")
        .map(|l| l["peer"].clone());
    let mut nodes = vec![json!({
        "node": vitality["node"],
        "node_id": tree["node_id"],
        "tree_id": tree["tree_id"],
        "role": role,
        "profile": vitality["profile"],
        "self": true,
        "listen": tree["listen"],
        "parent": parent,
        "running": vitality["running"],
        "embedded": vitality["embedded"],
    })];
    // The peers this node links to directly; their own subtrees are theirs to tell
    // (the topology will gather them).
    for peer in &links {
        nodes.push(json!({
            "node": peer["peer"],
            "node_id": peer["node_id"],
            "role": peer["role"],
            "self": false,
            "relation": peer["direction"],
            "state": peer["state"],
            "since": peer["since"],
        }));
    }
    let described: Vec<String> = links
        .iter()
        .map(|l| {
            format!(
                "{} {} {}",
                l["direction"].as_str().unwrap_or_default(),
                l["peer"].as_str().unwrap_or_default(),
                l["state"].as_str().unwrap_or_default()
            )
        })
        .collect();
    let summary = format!(
        "node {} ({role}); {}",
        vitality["node"].as_str().unwrap_or_default(),
        if described.is_empty() {
            "no links".to_owned()
        } else {
            format!("links: {}", described.join(", "))
        }
    );
    let topology = ask(link, Request::Tree).await.unwrap_or(Value::Null);
    Ok(Answer {
        summary,
        value: json!({
            "nodes": nodes,
            "links": links,
            "tree": topology["tree"],
            "projection": topology["projection"],
        }),
    })
}

fn vitality_summary(v: &Value) -> String {
    format!(
        "node {} ({}): seats {}/{} busy, {} ready effects, {} active jobs",
        v["node"].as_str().unwrap_or_default(),
        v["profile"].as_str().unwrap_or_default(),
        v["seats"]["busy"],
        v["seats"]["total"],
        v["queue"]["ready"],
        v["jobs"]["active"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(tool: &str, arguments: Value) -> Result<Map<String, Value>, ToolError> {
        let spec = spec(tool).expect("tool exists");
        spec.check(arguments.as_object())
    }

    #[test]
    fn every_schema_compiles_and_every_tool_is_listed() {
        let names: Vec<&str> = specs().iter().map(|s| s.name).collect();
        for expected in [
            "palm_assist",
            "palm_flows",
            "palm_submit",
            "palm_agent_run",
            "palm_patches",
            "palm_team",
            "palm_status",
            "palm_jobs",
            "palm_continue",
            "palm_cancel",
            "palm_retry",
            "palm_wizard",
            "palm_inspect",
            "palm_places",
            "palm_tree",
            "palm_vitality",
        ] {
            assert!(names.contains(&expected), "{expected} missing");
        }
        for spec in specs() {
            let tool = spec.tool();
            assert_eq!(tool.input_schema["type"], "object", "{}", spec.name);
            assert!(tool.output_schema.is_some(), "{}", spec.name);
            assert!(
                spec.description.len() > 40,
                "{} needs a real description",
                spec.name
            );
        }
    }

    #[test]
    fn good_arguments_pass() {
        assert!(check("palm_status", json!({"job": "j1"})).is_ok());
        assert!(check("palm_jobs", json!({})).is_ok());
        assert!(check("palm_jobs", json!({"status": "waiting", "limit": 5})).is_ok());
        assert!(
            check(
                "palm_continue",
                json!({"job": "j", "key": "approve", "input": {"ok": true}})
            )
            .is_ok()
        );
        assert!(
            check(
                "palm_submit",
                json!({"flow": "hello", "wait": true, "timeout": "30s"})
            )
            .is_ok()
        );
        assert!(check("palm_tree", json!({})).is_ok());
    }

    #[test]
    fn bad_arguments_name_the_field_and_what_was_expected() {
        let cases: &[(&str, Value, &[&str])] = &[
            ("palm_status", json!({}), &["`job`", "missing", "job id"]),
            (
                "palm_status",
                json!({"job": 5}),
                &["argument `job`", "string"],
            ),
            (
                "palm_status",
                json!({"job": ""}),
                &["argument `job`", "at least 1"],
            ),
            (
                "palm_continue",
                json!({"job": "j"}),
                &["missing required property `key`", "wait's key"],
            ),
            (
                "palm_jobs",
                json!({"status": "sleeping"}),
                &["argument `status`", "waiting"],
            ),
            (
                "palm_jobs",
                json!({"limit": 0}),
                &["argument `limit`", ">= 1"],
            ),
            (
                "palm_submit",
                json!({"flow": "x", "input": [1]}),
                &["argument `input`", "object"],
            ),
            (
                "palm_submit",
                json!({"flow": "x", "wait": "yes"}),
                &["argument `wait`", "boolean"],
            ),
            (
                "palm_status",
                json!({"job": "j", "jbo": 1}),
                &["unexpected property `jbo`"],
            ),
            ("palm_assist", json!({}), &["`goal`"]),
        ];
        for (tool, arguments, needles) in cases {
            let err = check(tool, arguments.clone()).expect_err("refused");
            assert_eq!(err.kind, "invalid_argument");
            let text = err.text();
            for needle in *needles {
                assert!(
                    text.contains(needle),
                    "{tool} {arguments}: {text:?} lacks {needle:?}"
                );
            }
            assert!(text.contains(&format!("{tool} takes {{")), "{text}");
        }
        let unknown = check("palm_status", json!({"job": "j", "jbo": 1})).expect_err("refused");
        assert!(
            unknown.text().contains("known arguments: job"),
            "{}",
            unknown.text()
        );
    }

    #[test]
    fn timeouts_parse_and_are_bounded() {
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert_eq!(timeout_ms("t", &args(json!({}))), Ok(WAIT_MS_DEFAULT));
        assert_eq!(
            timeout_ms("t", &args(json!({"timeout": "30s"}))),
            Ok(30_000)
        );
        assert_eq!(timeout_ms("t", &args(json!({"timeout": 250}))), Ok(250));
        assert_eq!(
            timeout_ms("t", &args(json!({"timeout": 999_999_999_999u64}))),
            Ok(WAIT_MS_MAX)
        );
        let err = timeout_ms("t", &args(json!({"timeout": "soon"}))).expect_err("refused");
        assert!(
            err.message.contains("`soon` is not a duration"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_waiting_job_says_how_to_continue_it() {
        let view = json!({"job": "j1", "flow": "approval", "status": "waiting",
            "waiting_on": [{"key": "approve", "prompt": "Ship the build?"}]});
        let answer = status_answer(view);
        assert!(
            answer
                .summary
                .contains("waiting on `approve` (Ship the build?)"),
            "{}",
            answer.summary
        );
        assert_eq!(answer.value["next"][0]["tool"], "palm_continue");
        assert_eq!(answer.value["next"][0]["arguments"]["key"], "approve");
    }
}
