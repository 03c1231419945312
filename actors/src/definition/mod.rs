//! Definitions: the flow format of design §5, parsed with positions and validated whole.
//!
//! A definition is YAML (or JSON, same schema) naming a flow, its inputs and a behavior tree.
//! [`parse`] turns source text into a [`Definition`] or into *every* problem it found, each a
//! [`Diagnostic`] with `file:line:col`, a message and, where one helps, a hint. Subflow
//! references are checked separately by [`check_subflows`], because they need the other
//! definitions a store (or a directory) holds.
//!
//! This module owns syntax and static meaning. How a tree runs is `crate::bt`'s business.

mod parse;
pub mod schema;
pub mod yaml;

use crate::json::Json;
use crate::jsonschema::Schema;
use crate::template::{Expr, Template};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

pub use parse::{
    AGENT_PROVIDER, ATTEMPT_BINDING, FIX_BINDINGS, GATE_PROVIDER, MERGE_PROVIDER, NODE_TYPES,
    PREDICT_PROVIDER, RANK_PROVIDER, VERIFY_PARSERS, VERIFY_PROVIDER, parse, parse_duration_ms,
    turn_schema,
};

/// A position in a source file (1-based line and column).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
}

/// One problem found in a definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file (or `<inline>`) the definition came from.
    pub origin: String,
    /// Where in it.
    pub span: Span,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when we can say.
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: error: {}",
            self.origin, self.span.line, self.span.col, self.message
        )?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// A parsed, statically valid flow definition.
#[derive(Clone, Debug)]
pub struct Definition {
    /// The flow's name (`[A-Za-z0-9_.-]+`).
    pub name: String,
    /// What the flow does, for people and agents.
    pub description: Option<String>,
    /// Declared inputs, in source order.
    pub input: Vec<InputField>,
    /// The behavior tree.
    pub tree: Node,
    /// Places each job of this flow owns (started with the job, stopped when it ends).
    pub places: Vec<crate::place::PlaceSpec>,
    /// `on:` triggers: events that start a job of this flow.
    pub interests: Vec<crate::interest::InterestSpec>,
    /// What becomes of the patches its agent runs leave (`patches:`).
    pub patches: PatchPolicy,
    /// Words for routing (`tags:`), lower case.
    pub tags: Vec<String>,
    /// The authority its agent runs need: declared (`authority:`), else the highest mode
    /// of its agent leaves (observe when it has none).
    pub authority: Authority,
    /// `authority:` was written (not inferred).
    pub authority_declared: bool,
    /// Where the source came from (a path or `<inline>`).
    pub origin: String,
}

/// What a flow's agents may do to a repository, lowest first: `observe` reads, `edit`
/// changes files, `execute` also runs commands. `palm route` never starts a flow that
/// needs more than its ceiling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Authority {
    /// Reads only.
    #[default]
    Observe,
    /// May change files.
    Edit,
    /// May change files and run commands.
    Execute,
}

impl Authority {
    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Authority::Observe => "observe",
            Authority::Edit => "edit",
            Authority::Execute => "execute",
        }
    }

    /// Parses a lower-case name.
    pub fn parse(text: &str) -> Option<Authority> {
        match text {
            "observe" => Some(Authority::Observe),
            "edit" => Some(Authority::Edit),
            "execute" => Some(Authority::Execute),
            _ => None,
        }
    }
}

/// `patches: review | apply_on_success`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PatchPolicy {
    /// Patches wait for a person (`palm patches apply`).
    #[default]
    Review,
    /// When the job succeeds, its latest patch per repo goes through the merge queue.
    ApplyOnSuccess,
}

/// One declared input.
#[derive(Clone, Debug)]
pub struct InputField {
    /// Field name.
    pub name: String,
    /// Its schema.
    pub schema: Schema,
    /// Value used when the submitter gives none. A field without a default is required.
    pub default: Option<Json>,
    /// Where it is declared.
    pub span: Span,
}

/// A node of the behavior tree as written.
#[derive(Clone, Debug)]
pub struct Node {
    /// What the node is.
    pub kind: NodeKind,
    /// Optional display name.
    pub name: Option<String>,
    /// Where it starts.
    pub span: Span,
}

/// When a `parallel` succeeds or fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    /// Every child.
    All,
    /// At least one child.
    Any,
    /// At least N children.
    AtLeast(u32),
}

impl Threshold {
    /// The number of children this threshold asks for, out of `children`.
    pub fn count(self, children: usize) -> usize {
        match self {
            Threshold::All => children,
            Threshold::Any => 1.min(children),
            Threshold::AtLeast(n) => n as usize,
        }
    }
}

/// Retry pacing: `backoff_ms × factor^(failures-1)`, capped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// Delay before the second attempt; 0 retries at once.
    pub initial_ms: u64,
    /// Growth per further attempt.
    pub factor: f64,
    /// Cap on any one delay.
    pub max_ms: u64,
}

impl Backoff {
    /// Delay after the `failures`-th failure (1-based).
    pub fn delay_ms(&self, failures: u32) -> u64 {
        if self.initial_ms == 0 {
            return 0;
        }
        let exponent = failures.saturating_sub(1).min(63) as i32;
        let delay = self.initial_ms as f64 * self.factor.powi(exponent);
        if !delay.is_finite() || delay >= self.max_ms as f64 {
            self.max_ms
        } else {
            delay as u64
        }
    }
}

/// A value to write: JSON whose strings are templates.
#[derive(Clone, Debug)]
pub enum ValueTemplate {
    /// A non-string scalar (or null), used as is.
    Literal(Json),
    /// A string template.
    Text(Template),
    /// A list of values.
    List(Vec<ValueTemplate>),
    /// A mapping of values.
    Map(Vec<(String, ValueTemplate)>),
}

/// The `run` leaf: a command as an effect.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Shell command (run with `sh -c`).
    pub cmd: Template,
    /// Working directory.
    pub cwd: Option<Template>,
    /// Extra environment.
    pub env: Vec<(String, Template)>,
    /// Kill the command after this long.
    pub timeout_ms: Option<u64>,
    /// Places or capabilities that must be ready before the effect may be claimed.
    pub needs: Vec<String>,
    /// A place the command must run at.
    pub place: Option<String>,
    /// Blackboard key for the result (`state.<save>`).
    pub save: Option<String>,
    /// A non-zero exit is a success too.
    pub allow_failure: bool,
}

/// The `wait` leaf: park until continued with `key`.
#[derive(Clone, Debug)]
pub struct WaitSpec {
    /// The key a continue must name; the input lands at `state.<key>`.
    pub key: String,
    /// What to ask.
    pub prompt: Option<Template>,
    /// Allowed answers (the input must equal one of them).
    pub choices: Vec<Json>,
    /// Schema the input must satisfy.
    pub schema: Option<Schema>,
    /// Fail the leaf if nobody continues within this long.
    pub timeout_ms: Option<u64>,
}

/// The `call` leaf: a registered provider.
#[derive(Clone, Debug)]
pub struct CallSpec {
    /// Provider name.
    pub provider: String,
    /// Arguments (templates rendered when the call starts).
    pub args: ValueTemplate,
    /// Blackboard key for the result.
    pub save: Option<String>,
    /// Places or capabilities that must be ready.
    pub needs: Vec<String>,
    /// Give up after this long.
    pub timeout_ms: Option<u64>,
}

/// The `spawn` leaf: start a child job.
#[derive(Clone, Debug)]
pub struct SpawnSpec {
    /// Flow name of the child.
    pub flow: String,
    /// Child input (templates).
    pub input: Vec<(String, ValueTemplate)>,
    /// Wait for the child to finish (its outcome is the leaf's).
    pub wait: bool,
    /// Blackboard key for the child's id and, when waited for, its outcome.
    pub save: Option<String>,
}

/// What a node is.
// Built once per parse; see `SpecKind` for why the leaf variants are not boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum NodeKind {
    /// Children in order until one does not succeed.
    Sequence {
        /// Resume at the running child (true) or re-tick from the first (false, reactive).
        memory: bool,
        /// Children.
        children: Vec<Node>,
    },
    /// Children in order until one does not fail.
    Selector {
        /// See `Sequence::memory`.
        memory: bool,
        /// Children.
        children: Vec<Node>,
    },
    /// All children at once.
    Parallel {
        /// How many must succeed.
        success: Threshold,
        /// How many failures fail the whole.
        failure: Threshold,
        /// Children.
        children: Vec<Node>,
    },
    /// One instance of `body` per item of a list.
    ForEach {
        /// Expression giving the list.
        items: Expr,
        /// Name the item is bound to inside `body`.
        binding: String,
        /// How many instances run at once.
        max_concurrency: u32,
        /// The subtree instantiated per item.
        body: Box<Node>,
    },
    /// Success ↔ failure.
    Invert(Box<Node>),
    /// Failure becomes success.
    ForceSuccess(Box<Node>),
    /// Success becomes failure.
    ForceFailure(Box<Node>),
    /// Re-run the child on failure; `attempts: None` is `until_success`.
    Retry {
        /// Total attempts, or unbounded.
        attempts: Option<u32>,
        /// Delay between attempts.
        backoff: Backoff,
        /// Child.
        body: Box<Node>,
    },
    /// Run the child until it has succeeded `times` times.
    Repeat {
        /// Successes needed.
        times: u32,
        /// Child.
        body: Box<Node>,
    },
    /// Fail (halting the child) if it runs longer than `ms`.
    Timeout {
        /// Limit.
        ms: u64,
        /// Child.
        body: Box<Node>,
    },
    /// Run a command.
    Run(RunSpec),
    /// Park until continued.
    Wait(WaitSpec),
    /// A durable timer.
    Sleep {
        /// How long.
        ms: u64,
    },
    /// Blackboard writes.
    Set(Vec<(String, ValueTemplate)>),
    /// A condition.
    Check(Expr),
    /// Always succeeds.
    Succeed,
    /// Always fails, with an optional message.
    Fail(Option<Template>),
    /// A provider call.
    Call(CallSpec),
    /// A child job.
    Spawn(SpawnSpec),
    /// Another definition, inlined.
    Subflow {
        /// Its name.
        flow: String,
    },
    /// Verify, fix, verify again until green, stalled or out of rounds.
    UntilGreen(UntilGreenSpec),
    /// One iteration of the body per round until a terminal state.
    Loop(LoopSpec),
    /// N attempts at once, in separate worktrees; the best one wins.
    BestOf(BestOfSpec),
    /// Agents of mixed providers working a board of tasks with dependencies.
    Team(TeamSpec),
    /// Questions asked one step at a time on the wait plane, then one commit.
    Wizard(WizardSpec),
}

/// `wizard: {key, steps, commit, compensate}`: a form that parks at each step (its draft
/// is the parked job), can go back, and runs `commit` once every step is answered.
/// Answers land at `state.<key>.<step id>`. See docs/wizards.md.
#[derive(Clone, Debug)]
pub struct WizardSpec {
    /// The wait key every step parks on; the answers' blackboard key.
    pub key: String,
    /// The steps, in order (a `branch` jumps forward).
    pub steps: Arc<[WizardStep]>,
    /// What runs once every step is answered: the wizard's only effects.
    pub commit: Box<Node>,
    /// What runs when the commit fails (to undo what it did halfway).
    pub compensate: Option<Box<Node>>,
}

/// One step of a wizard.
#[derive(Clone, Debug)]
pub struct WizardStep {
    /// Unique within the wizard; the answer's key.
    pub id: String,
    /// What to ask (a template over the answers so far).
    pub prompt: Option<Template>,
    /// Once passed, this step and those before it cannot be reopened.
    pub protected: bool,
    /// What the step asks.
    pub kind: StepKind,
}

/// What a wizard step asks.
#[derive(Clone, Debug)]
pub enum StepKind {
    /// One value, checked by a schema.
    Input {
        /// The value's schema (any JSON value without one).
        schema: Option<Schema>,
        /// The proposed answer.
        default: Option<ValueTemplate>,
    },
    /// One of the options, or (multiple) a list of them.
    Choice {
        /// The options.
        options: Vec<Json>,
        /// A list of options rather than one.
        multiple: bool,
        /// The proposed answer.
        default: Option<ValueTemplate>,
    },
    /// A list built item by item (add, edit, remove, done).
    Collection {
        /// Each item's schema.
        item: Option<Schema>,
        /// Fewest items `done` accepts.
        min: u32,
        /// Most items.
        max: u32,
    },
    /// Asks nothing: the next step is the first case whose condition holds.
    Branch {
        /// (condition, index of the step to go to), in order.
        cases: Vec<(Expr, usize)>,
        /// Where to go when no case holds (`None`: the next step).
        otherwise: Option<usize>,
    },
    /// The answers shown whole; `commit` confirms them.
    Summary,
}

impl StepKind {
    /// The step type's name.
    pub fn type_name(&self) -> &'static str {
        match self {
            StepKind::Input { .. } => "input",
            StepKind::Choice { .. } => "choice",
            StepKind::Collection { .. } => "collection",
            StepKind::Branch { .. } => "branch",
            StepKind::Summary => "summary",
        }
    }
}

/// `team: {members, tasks, repo, parallel, check, max_turns, attempts, key, save}`.
#[derive(Clone, Debug)]
pub struct TeamSpec {
    /// Who works, in order (an idle member takes the first ready task).
    pub members: Vec<TeamMember>,
    /// The board: a list of `{id, title, detail, depends_on}` (literal or a template).
    pub tasks: ValueTemplate,
    /// The checkout the members work on: one shared worktree, their runs taking turns;
    /// with `parallel` above 1, a lane per task forked from it and merged back.
    pub repo: Option<ValueTemplate>,
    /// Tasks in progress at once (1: one turn at a time). Above 1, two tasks predicted to
    /// touch a same file never run side by side.
    pub parallel: u32,
    /// A check a task's turn must pass before the task is done (the completion gate).
    pub check: Option<CallSpec>,
    /// Member turns the team may take before it parks (resumable with more).
    pub max_turns: u32,
    /// Turns one task may take before it fails.
    pub attempts: u32,
    /// Each turn's time limit.
    pub turn_timeout_ms: u64,
    /// The wait key the team listens on (posts, claims, completions, more budget).
    pub key: String,
    /// Blackboard key of the board, kept up to date.
    pub save: String,
    /// The flow's `budget:`, handed to every turn.
    pub budget: Vec<(String, ValueTemplate)>,
}

/// One member of a team.
#[derive(Clone, Debug, PartialEq)]
pub struct TeamMember {
    /// Its name on the board and in the mailbox.
    pub name: String,
    /// claude, codex or a declared agent.
    pub provider: String,
    /// Its authority (default edit).
    pub mode: String,
    /// The provider's model.
    pub model: Option<String>,
}

/// `until_green: {verify: {...}, fix: <subtree>, max_rounds: 3, save: KEY}`.
#[derive(Clone, Debug)]
pub struct UntilGreenSpec {
    /// The check, as the `call` of the node's `verify` provider it makes each round.
    pub verify: CallSpec,
    /// Fixes allowed before it ends `exhausted`.
    pub max_rounds: u32,
    /// Blackboard key for `{outcome, rounds, evidence}`.
    pub save: Option<String>,
    /// Ticked after each red check, with `failures`, `verify` and `round` bound.
    pub fix: Box<Node>,
}

/// `loop: {do: <subtree>, report: KEY, max_iterations, stagnation, every, timeout, key, save}`.
#[derive(Clone, Debug)]
pub struct LoopSpec {
    /// Only one job per rendered key runs the loop at a time (default: the flow's name).
    pub key: Option<Template>,
    /// How it goes round and when it stops.
    pub rule: LoopRule,
    /// One iteration.
    pub body: Box<Node>,
}

/// A `loop`'s rules: what the engine needs of it (the key is the job path's business).
#[derive(Clone, Debug)]
pub struct LoopRule {
    /// The state key each iteration writes `{state, signature}` to.
    pub report: String,
    /// Iterations (that did not error) before it ends `exhausted`.
    pub max_iterations: u32,
    /// The same non-empty signature this many times in a row ends it `stagnated`.
    pub stagnation: u32,
    /// Errored iterations in a row before it ends `exhausted`.
    pub max_errors: u32,
    /// Pause between iterations.
    pub every_ms: u64,
    /// The whole loop's time; past it, it ends `exhausted`.
    pub timeout_ms: Option<u64>,
    /// Blackboard key for `{outcome, iterations, errors, signature, history}`.
    pub save: Option<String>,
}

/// What `best_of` ranks attempts by, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankBy {
    /// More gates approved.
    Gates,
    /// Checks green.
    Verify,
    /// A smaller diff.
    DiffSize,
    /// Lower risk of the files touched (the repo index's score).
    Risk,
}

impl RankBy {
    /// The name as written.
    pub fn as_str(self) -> &'static str {
        match self {
            RankBy::Gates => "gates",
            RankBy::Verify => "verify",
            RankBy::DiffSize => "diff_size",
            RankBy::Risk => "risk",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Option<RankBy> {
        match name {
            "gates" => Some(RankBy::Gates),
            "verify" => Some(RankBy::Verify),
            "diff_size" => Some(RankBy::DiffSize),
            "risk" => Some(RankBy::Risk),
            _ => None,
        }
    }
}

/// `best_of: {n, providers, attempt: <subtree>, rank: [...], save}`.
#[derive(Clone, Debug)]
pub struct BestOfSpec {
    /// Attempts.
    pub n: u32,
    /// Agent providers, given to attempts in turn (`attempt.provider`).
    pub providers: Vec<String>,
    /// Ranking keys, most important first.
    pub rank: Vec<RankBy>,
    /// Blackboard key for the choice and its reasons.
    pub save: String,
    /// One attempt, with `attempt` bound (`index`, `provider`, `lane`).
    pub attempt: Box<Node>,
}

impl NodeKind {
    /// The node type as written in a flow.
    pub fn type_name(&self) -> &'static str {
        match self {
            NodeKind::Sequence { .. } => "sequence",
            NodeKind::Selector { .. } => "selector",
            NodeKind::Parallel { .. } => "parallel",
            NodeKind::ForEach { .. } => "for_each",
            NodeKind::Invert(_) => "invert",
            NodeKind::ForceSuccess(_) => "force_success",
            NodeKind::ForceFailure(_) => "force_failure",
            NodeKind::Retry { attempts: None, .. } => "until_success",
            NodeKind::Retry { .. } => "retry",
            NodeKind::Repeat { .. } => "repeat",
            NodeKind::Timeout { .. } => "timeout",
            NodeKind::Run(_) => "run",
            NodeKind::Wait(_) => "wait",
            NodeKind::Sleep { .. } => "sleep",
            NodeKind::Set(_) => "set",
            NodeKind::Check(_) => "check",
            NodeKind::Succeed => "succeed",
            NodeKind::Fail(_) => "fail",
            NodeKind::Call(_) => "call",
            NodeKind::Spawn(_) => "spawn",
            NodeKind::Subflow { .. } => "subflow",
            NodeKind::UntilGreen(_) => "until_green",
            NodeKind::Loop(_) => "loop",
            NodeKind::BestOf(_) => "best_of",
            NodeKind::Team(_) => "team",
            NodeKind::Wizard(_) => "wizard",
        }
    }
}

impl Node {
    /// Visits this node and its descendants, depth first, parents before children.
    pub fn walk<'a>(&'a self, visit: &mut dyn FnMut(&'a Node)) {
        visit(self);
        match &self.kind {
            NodeKind::Sequence { children, .. }
            | NodeKind::Selector { children, .. }
            | NodeKind::Parallel { children, .. } => {
                for child in children {
                    child.walk(visit);
                }
            }
            NodeKind::ForEach { body, .. }
            | NodeKind::Invert(body)
            | NodeKind::ForceSuccess(body)
            | NodeKind::ForceFailure(body)
            | NodeKind::Retry { body, .. }
            | NodeKind::Repeat { body, .. }
            | NodeKind::Timeout { body, .. } => body.walk(visit),
            NodeKind::UntilGreen(spec) => spec.fix.walk(visit),
            NodeKind::Loop(spec) => spec.body.walk(visit),
            NodeKind::BestOf(spec) => spec.attempt.walk(visit),
            NodeKind::Wizard(spec) => {
                spec.commit.walk(visit);
                if let Some(compensate) = &spec.compensate {
                    compensate.walk(visit);
                }
            }
            _ => {}
        }
    }
}

impl Definition {
    /// Names of the flows this definition inlines (`subflow`) or starts (`spawn`): what
    /// else runs on its behalf.
    pub fn flows_reached(&self) -> Vec<String> {
        let mut names = Vec::new();
        self.tree.walk(&mut |node| {
            let name = match &node.kind {
                NodeKind::Subflow { flow } => flow,
                NodeKind::Spawn(spec) => &spec.flow,
                _ => return,
            };
            if !names.contains(name) {
                names.push(name.clone());
            }
        });
        names
    }

    /// Names of the flows this definition inlines with `subflow`.
    pub fn subflow_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        self.tree.walk(&mut |node| {
            if let NodeKind::Subflow { flow } = &node.kind
                && !names.contains(flow)
            {
                names.push(flow.clone());
            }
        });
        names
    }

    /// Applies defaults and validates a submitted input against the declared fields.
    /// Undeclared fields are refused, so a typo in `--input` is not silently ignored.
    pub fn prepare_input(
        &self,
        mut given: serde_json::Map<String, serde_json::Value>,
    ) -> Result<serde_json::Value, Vec<String>> {
        let mut problems = Vec::new();
        for name in given.keys() {
            if !self.input.iter().any(|field| &field.name == name) {
                let declared: Vec<&str> = self.input.iter().map(|f| f.name.as_str()).collect();
                problems.push(if declared.is_empty() {
                    format!(
                        "unknown input `{name}`: flow `{}` declares no inputs",
                        self.name
                    )
                } else {
                    format!(
                        "unknown input `{name}`; flow `{}` declares: {}",
                        self.name,
                        declared.join(", ")
                    )
                });
            }
        }
        for field in &self.input {
            match given.get(&field.name) {
                Some(value) => {
                    for violation in field.schema.validate(value) {
                        problems.push(format!("input `{}`: {violation}", field.name));
                    }
                }
                None => match &field.default {
                    Some(default) => {
                        given.insert(field.name.clone(), default.0.clone());
                    }
                    None => problems.push(format!("missing required input `{}`", field.name)),
                },
            }
        }
        if problems.is_empty() {
            Ok(serde_json::Value::Object(given))
        } else {
            Err(problems)
        }
    }

    /// Turns `key=value` arguments (from a command line) into input fields. A field
    /// declared as a string takes the text as is; any other value is read as JSON when it
    /// parses (`n=3`, `flags=[1,2]`, `ok=true`) and as text otherwise.
    pub fn input_from_args(
        &self,
        args: &[(String, String)],
    ) -> serde_json::Map<String, serde_json::Value> {
        args.iter()
            .map(|(key, text)| {
                let value = match self.input_type(key) {
                    Some("string") => serde_json::Value::String(text.clone()),
                    _ => serde_json::from_str(text)
                        .unwrap_or_else(|_| serde_json::Value::String(text.clone())),
                };
                (key.clone(), value)
            })
            .collect()
    }

    /// The declared type of an input field, if it names exactly one.
    pub fn input_type(&self, name: &str) -> Option<&str> {
        let field = self.input.iter().find(|f| f.name == name)?;
        field.schema.source().get("type")?.as_str()
    }
}

/// Checks `subflow` references: each must resolve, and none may lead back to a flow on the
/// current path (a cycle would inline forever). `resolve` looks a flow up by name.
pub fn check_subflows(
    definition: &Definition,
    resolve: &dyn Fn(&str) -> Option<Arc<Definition>>,
) -> Vec<Diagnostic> {
    let mut diagnostics = Vec::new();
    let mut path = vec![definition.name.clone()];
    let mut done: BTreeMap<String, ()> = BTreeMap::new();
    visit_subflows(
        definition,
        resolve,
        &mut path,
        &mut done,
        &mut diagnostics,
        None,
    );
    diagnostics
}

fn visit_subflows(
    definition: &Definition,
    resolve: &dyn Fn(&str) -> Option<Arc<Definition>>,
    path: &mut Vec<String>,
    done: &mut BTreeMap<String, ()>,
    diagnostics: &mut Vec<Diagnostic>,
    // Where the outermost reference that led here is written: nested problems are
    // reported there, since that is the file being validated.
    anchor: Option<(String, Span)>,
) {
    let mut references = Vec::new();
    definition.tree.walk(&mut |node| {
        if let NodeKind::Subflow { flow } = &node.kind {
            references.push((flow.clone(), node.span));
        }
    });
    for (flow, span) in references {
        let (origin, at) = anchor
            .clone()
            .unwrap_or_else(|| (definition.origin.clone(), span));
        if let Some(start) = path.iter().position(|name| name == &flow) {
            let mut cycle: Vec<&str> = path[start..].iter().map(String::as_str).collect();
            cycle.push(&flow);
            diagnostics.push(Diagnostic {
                origin,
                span: at,
                message: format!("subflow cycle: {}", cycle.join(" → ")),
                hint: Some(
                    "a subflow is inlined; use `spawn` to start a flow as a separate job instead"
                        .to_owned(),
                ),
            });
            continue;
        }
        if done.contains_key(&flow) {
            continue;
        }
        match resolve(&flow) {
            None => diagnostics.push(Diagnostic {
                origin,
                span: at,
                message: format!("unknown flow `{flow}` in subflow"),
                hint: Some(format!(
                    "add it with `palm flows add`, or put {flow}.yaml beside this file"
                )),
            }),
            Some(found) => {
                path.push(flow.clone());
                visit_subflows(&found, resolve, path, done, diagnostics, Some((origin, at)));
                path.pop();
                done.insert(flow, ());
            }
        }
    }
}
