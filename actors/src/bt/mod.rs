//! The Behavior Tree engine: a pure, deterministic state machine.
//!
//! A [`Program`] is a definition compiled into a flat array of node specs (subflows inlined).
//! An [`Engine`] holds one running instance: the runtime tree with every node's status, the
//! blackboard (`input`, `state`), and the bookkeeping of effects in flight. The engine does
//! no I/O and reads no clock: a caller delivers facts ([`Engine::deliver`]) and asks for a
//! step at an explicit `now` ([`Engine::step`]); the engine answers with [`Command`]s (start
//! this effect, cancel that one, park here) for the caller to journal and carry out.
//!
//! Composite and decorator semantics follow py_trees 2.x exactly (see `tick.rs` and
//! docs/ARCHITECTURE.md): statuses are `success | failure | running | waiting | idle`, where
//! `waiting` is a `running` that only a continue can move, and `idle` is py_trees' INVALID.

mod rounds;
mod team;
mod tick;
pub mod trace;
mod wizard;

use crate::definition::{
    Backoff, CallSpec, Definition, LoopRule, NodeKind, RankBy, RunSpec, Span, SpawnSpec, Threshold,
    ValueTemplate, WaitSpec,
};
use crate::json::Json;
use crate::template::{Expr, Scope, Template};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Where the compiler is: how deep in subflows, and whether inside a `best_of` attempt.
#[derive(Clone, Copy, Debug)]
struct At {
    depth: usize,
    in_attempt: bool,
}

/// The providers that work in a job's worktree, and so in an attempt's own (its `lane`).
const LANE_PROVIDERS: [&str; 3] = ["agent", "verify", "gate"];

/// `spec` as it runs at `at`: inside a `best_of` attempt, a call of a provider that works
/// in the worktree carries the attempt's `lane`. The parser adds it to the leaves it
/// reads inside an attempt; a subflow's leaves, parsed on their own and inlined here,
/// get it the same way, so an attempt's subflow never works in the job's own worktree
/// beside the other attempts.
fn in_lane(spec: &CallSpec, at: At) -> CallSpec {
    let mut spec = spec.clone();
    if at.in_attempt
        && LANE_PROVIDERS.contains(&spec.provider.as_str())
        && let crate::definition::ValueTemplate::Map(args) = &mut spec.args
        && !args.iter().any(|(key, _)| key == "lane")
        && let Ok(lane) = crate::template::Template::compile("{{ attempt.lane }}")
    {
        args.push((
            "lane".to_owned(),
            crate::definition::ValueTemplate::Text(lane),
        ));
    }
    spec
}

/// Bound on subflow inlining depth. Validation refuses cycles; this guards the compiler
/// against a store that was edited behind validation's back.
pub const SUBFLOW_DEPTH_MAX: usize = 32;

/// Status of a tree node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Never ticked, or halted (py_trees' INVALID).
    Idle,
    /// Work in flight.
    Running,
    /// Parked until a continue (a `running` that only input can move).
    Waiting,
    /// Done, well.
    Success,
    /// Done, badly.
    Failure,
}

impl Status {
    /// Running or waiting: the node has not finished.
    pub fn is_running(self) -> bool {
        matches!(self, Status::Running | Status::Waiting)
    }

    /// The one-letter code used by `palm flows trace`.
    pub fn letter(self) -> &'static str {
        match self {
            Status::Idle => "I",
            Status::Running => "R",
            Status::Waiting => "W",
            Status::Success => "S",
            Status::Failure => "F",
        }
    }
}

/// Index of a spec in its program.
pub type SpecId = u32;

/// A compiled, immutable tree shared by every job of one definition revision.
#[derive(Debug)]
pub struct Program {
    specs: Vec<Spec>,
    root: SpecId,
}

/// One node of a program.
#[derive(Debug)]
pub struct Spec {
    /// What the node does.
    pub kind: SpecKind,
    /// Children, in order (decorators have one; leaves none; `for_each` one body).
    pub children: Vec<SpecId>,
    /// Display name: the node's `name`, else its type.
    pub label: String,
    /// A short description (the command, the key, the expression).
    pub detail: Option<String>,
    /// Where it is written.
    pub span: Option<Span>,
}

/// What a spec node does.
// Specs are built once per definition and never moved in a hot path; boxing the large
// leaf variants would only add an indirection per tick.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum SpecKind {
    /// See [`NodeKind::Sequence`].
    Sequence {
        /// Resume at the running child.
        memory: bool,
    },
    /// See [`NodeKind::Selector`].
    Selector {
        /// Resume at the running child.
        memory: bool,
    },
    /// See [`NodeKind::Parallel`].
    Parallel {
        /// Successes needed.
        success: Threshold,
        /// Failures that fail the whole.
        failure: Threshold,
        /// Skip children that already finished (py_trees `synchronise`). Flows always
        /// synchronise: re-ticking a finished `run` would run its command again.
        synchronise: bool,
    },
    /// See [`NodeKind::ForEach`].
    ForEach {
        /// The list.
        items: Expr,
        /// The item's name in the body.
        binding: Arc<str>,
        /// Instances at once.
        max_concurrency: u32,
    },
    /// See [`NodeKind::Invert`].
    Invert,
    /// See [`NodeKind::ForceSuccess`].
    ForceSuccess,
    /// See [`NodeKind::ForceFailure`].
    ForceFailure,
    /// See [`NodeKind::Retry`].
    Retry {
        /// Total attempts, or unbounded (`until_success`).
        attempts: Option<u32>,
        /// Pacing.
        backoff: Backoff,
    },
    /// See [`NodeKind::Repeat`].
    Repeat {
        /// Successes needed.
        times: u32,
    },
    /// See [`NodeKind::Timeout`].
    Timeout {
        /// Limit.
        ms: u64,
    },
    /// See [`NodeKind::Run`].
    Run(RunSpec),
    /// See [`NodeKind::Wait`].
    Wait(WaitSpec),
    /// See [`NodeKind::Sleep`].
    Sleep {
        /// How long.
        ms: u64,
    },
    /// See [`NodeKind::Set`].
    Set(Vec<(String, ValueTemplate)>),
    /// See [`NodeKind::Check`].
    Check(Expr),
    /// Always succeeds.
    Succeed,
    /// Always fails.
    Fail(Option<Template>),
    /// See [`NodeKind::Call`].
    Call(CallSpec),
    /// See [`NodeKind::Spawn`].
    Spawn(SpawnSpec),
    /// See [`NodeKind::UntilGreen`]; its one child is the fix.
    UntilGreen {
        /// The check each round makes.
        verify: CallSpec,
        /// Fixes allowed.
        max_rounds: u32,
        /// Blackboard key for `{outcome, rounds, evidence}`.
        save: Option<String>,
    },
    /// See [`NodeKind::Loop`]; its one child is the iteration.
    Loop(LoopRule),
    /// See [`NodeKind::BestOf`]; its one child is the attempt, instantiated per attempt.
    BestOf {
        /// Attempts.
        n: u32,
        /// Providers, given in turn.
        providers: Vec<String>,
        /// Ranking keys.
        rank: Vec<RankBy>,
        /// Blackboard key for the choice.
        save: String,
    },
    /// See [`NodeKind::Team`].
    Team(crate::definition::TeamSpec),
    /// See [`NodeKind::Wizard`]; its children are the commit and, if any, the
    /// compensation.
    Wizard {
        /// The wait key and the answers' blackboard key.
        key: String,
        /// The steps.
        steps: Arc<[crate::definition::WizardStep]>,
    },
    /// A leaf that replays a script of statuses (the trace harness; never in flows).
    Scripted {
        /// Statuses returned by successive ticks.
        queue: Vec<Status>,
        /// Returned once the queue is exhausted; `None` means running.
        eventually: Option<Status>,
    },
}

impl SpecKind {
    /// The node type name.
    pub fn type_name(&self) -> &'static str {
        match self {
            SpecKind::Sequence { .. } => "sequence",
            SpecKind::Selector { .. } => "selector",
            SpecKind::Parallel { .. } => "parallel",
            SpecKind::ForEach { .. } => "for_each",
            SpecKind::Invert => "invert",
            SpecKind::ForceSuccess => "force_success",
            SpecKind::ForceFailure => "force_failure",
            SpecKind::Retry { attempts: None, .. } => "until_success",
            SpecKind::Retry { .. } => "retry",
            SpecKind::Repeat { .. } => "repeat",
            SpecKind::Timeout { .. } => "timeout",
            SpecKind::Run(_) => "run",
            SpecKind::Wait(_) => "wait",
            SpecKind::Sleep { .. } => "sleep",
            SpecKind::Set(_) => "set",
            SpecKind::Check(_) => "check",
            SpecKind::Succeed => "succeed",
            SpecKind::Fail(_) => "fail",
            SpecKind::Call(_) => "call",
            SpecKind::Spawn(_) => "spawn",
            SpecKind::UntilGreen { .. } => "until_green",
            SpecKind::Loop(_) => "loop",
            SpecKind::BestOf { .. } => "best_of",
            SpecKind::Team(_) => "team",
            SpecKind::Wizard { .. } => "wizard",
            SpecKind::Scripted { .. } => "leaf",
        }
    }
}

/// Why a definition could not be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// A subflow names a flow the resolver does not know.
    #[error("unknown subflow `{0}`")]
    UnknownSubflow(String),
    /// Subflows nest deeper than [`SUBFLOW_DEPTH_MAX`] (a cycle).
    #[error("subflows nest deeper than {SUBFLOW_DEPTH_MAX} levels (a cycle through `{0}`?)")]
    TooDeep(String),
}

impl Program {
    /// Compiles a definition, inlining subflows found by `resolve`.
    pub fn compile(
        definition: &Definition,
        resolve: &dyn Fn(&str) -> Option<Arc<Definition>>,
    ) -> Result<Program, CompileError> {
        let mut program = Program {
            specs: Vec::new(),
            root: 0,
        };
        program.root = program.add(
            &definition.tree,
            resolve,
            At {
                depth: 0,
                in_attempt: false,
            },
        )?;
        Ok(program)
    }

    /// Builds a program from specs directly (the trace harness). `root` must index `specs`.
    pub fn from_specs(specs: Vec<Spec>, root: SpecId) -> Program {
        assert!((root as usize) < specs.len(), "root must be a spec");
        Program { specs, root }
    }

    /// The spec with this id.
    pub fn spec(&self, id: SpecId) -> &Spec {
        &self.specs[id as usize]
    }

    /// The root spec id.
    pub fn root(&self) -> SpecId {
        self.root
    }

    /// Number of specs.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// True for a program with no specs (never produced by `compile`).
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    fn push(&mut self, spec: Spec) -> SpecId {
        self.specs.push(spec);
        (self.specs.len() - 1) as SpecId
    }

    fn add(
        &mut self,
        node: &crate::definition::Node,
        resolve: &dyn Fn(&str) -> Option<Arc<Definition>>,
        at: At,
    ) -> Result<SpecId, CompileError> {
        let mut children = Vec::new();
        let mut detail = None;
        let kind = match &node.kind {
            NodeKind::Subflow { flow } => {
                if at.depth >= SUBFLOW_DEPTH_MAX {
                    return Err(CompileError::TooDeep(flow.clone()));
                }
                let inner =
                    resolve(flow).ok_or_else(|| CompileError::UnknownSubflow(flow.clone()))?;
                let inlined = At {
                    depth: at.depth + 1,
                    ..at
                };
                let id = self.add(&inner.tree, resolve, inlined)?;
                let spec = &mut self.specs[id as usize];
                spec.detail = Some(match spec.detail.take() {
                    Some(d) => format!("subflow {flow}: {d}"),
                    None => format!("subflow {flow}"),
                });
                return Ok(id);
            }
            NodeKind::Sequence {
                memory,
                children: kids,
            } => {
                for kid in kids {
                    children.push(self.add(kid, resolve, at)?);
                }
                SpecKind::Sequence { memory: *memory }
            }
            NodeKind::Selector {
                memory,
                children: kids,
            } => {
                for kid in kids {
                    children.push(self.add(kid, resolve, at)?);
                }
                SpecKind::Selector { memory: *memory }
            }
            NodeKind::Parallel {
                success,
                failure,
                children: kids,
            } => {
                for kid in kids {
                    children.push(self.add(kid, resolve, at)?);
                }
                SpecKind::Parallel {
                    success: *success,
                    failure: *failure,
                    synchronise: true,
                }
            }
            NodeKind::ForEach {
                items,
                binding,
                max_concurrency,
                body,
            } => {
                children.push(self.add(body, resolve, at)?);
                detail = Some(format!("{binding} in {}", items.source()));
                SpecKind::ForEach {
                    items: items.clone(),
                    binding: Arc::from(binding.as_str()),
                    max_concurrency: *max_concurrency,
                }
            }
            NodeKind::Invert(body) => {
                children.push(self.add(body, resolve, at)?);
                SpecKind::Invert
            }
            NodeKind::ForceSuccess(body) => {
                children.push(self.add(body, resolve, at)?);
                SpecKind::ForceSuccess
            }
            NodeKind::ForceFailure(body) => {
                children.push(self.add(body, resolve, at)?);
                SpecKind::ForceFailure
            }
            NodeKind::Retry {
                attempts,
                backoff,
                body,
            } => {
                children.push(self.add(body, resolve, at)?);
                detail = attempts.map(|n| format!("{n} attempts"));
                SpecKind::Retry {
                    attempts: *attempts,
                    backoff: *backoff,
                }
            }
            NodeKind::Repeat { times, body } => {
                children.push(self.add(body, resolve, at)?);
                detail = Some(format!("{times} times"));
                SpecKind::Repeat { times: *times }
            }
            NodeKind::Timeout { ms, body } => {
                children.push(self.add(body, resolve, at)?);
                detail = Some(format!("{ms} ms"));
                SpecKind::Timeout { ms: *ms }
            }
            NodeKind::Run(spec) => {
                detail = Some(spec.cmd.source().to_owned());
                SpecKind::Run(spec.clone())
            }
            NodeKind::Wait(spec) => {
                detail = Some(format!("key {}", spec.key));
                SpecKind::Wait(spec.clone())
            }
            NodeKind::Sleep { ms } => {
                detail = Some(format!("{ms} ms"));
                SpecKind::Sleep { ms: *ms }
            }
            NodeKind::Set(writes) => {
                let keys: Vec<&str> = writes.iter().map(|(k, _)| k.as_str()).collect();
                detail = Some(keys.join(", "));
                SpecKind::Set(writes.clone())
            }
            NodeKind::Check(expr) => {
                detail = Some(expr.source().to_owned());
                SpecKind::Check(expr.clone())
            }
            NodeKind::Succeed => SpecKind::Succeed,
            NodeKind::Fail(message) => {
                detail = message.as_ref().map(|m| m.source().to_owned());
                SpecKind::Fail(message.clone())
            }
            NodeKind::Call(spec) => {
                detail = Some(spec.provider.clone());
                SpecKind::Call(in_lane(spec, at))
            }
            NodeKind::Spawn(spec) => {
                detail = Some(spec.flow.clone());
                SpecKind::Spawn(spec.clone())
            }
            NodeKind::UntilGreen(spec) => {
                children.push(self.add(&spec.fix, resolve, at)?);
                detail = Some(format!("{} rounds", spec.max_rounds));
                SpecKind::UntilGreen {
                    verify: in_lane(&spec.verify, at),
                    max_rounds: spec.max_rounds,
                    save: spec.save.clone(),
                }
            }
            NodeKind::Loop(spec) => {
                children.push(self.add(&spec.body, resolve, at)?);
                detail = Some(format!("at most {} iterations", spec.rule.max_iterations));
                SpecKind::Loop(spec.rule.clone())
            }
            NodeKind::Team(spec) => {
                detail = Some(format!(
                    "{} members, at most {} turns",
                    spec.members.len(),
                    spec.max_turns
                ));
                SpecKind::Team(spec.clone())
            }
            NodeKind::Wizard(spec) => {
                children.push(self.add(&spec.commit, resolve, at)?);
                if let Some(compensate) = &spec.compensate {
                    children.push(self.add(compensate, resolve, at)?);
                }
                detail = Some(format!("key {}, {} steps", spec.key, spec.steps.len()));
                SpecKind::Wizard {
                    key: spec.key.clone(),
                    steps: Arc::clone(&spec.steps),
                }
            }
            NodeKind::BestOf(spec) => {
                children.push(self.add(
                    &spec.attempt,
                    resolve,
                    At {
                        in_attempt: true,
                        ..at
                    },
                )?);
                detail = Some(format!("best of {}", spec.n));
                SpecKind::BestOf {
                    n: spec.n,
                    providers: spec.providers.clone(),
                    rank: spec.rank.clone(),
                    save: spec.save.clone(),
                }
            }
        };
        let label = node
            .name
            .clone()
            .unwrap_or_else(|| kind.type_name().to_owned());
        Ok(self.push(Spec {
            kind,
            children,
            label,
            detail,
            span: Some(node.span),
        }))
    }
}

/// A request to the world, made by a leaf (or a timer-driven decorator).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectRequest {
    /// Run a shell command.
    Run {
        /// The rendered command.
        cmd: String,
        /// Working directory.
        cwd: Option<String>,
        /// Extra environment.
        env: Vec<(String, String)>,
        /// Kill after this long.
        timeout_ms: Option<u64>,
        /// Places or capabilities that must be ready.
        needs: Vec<String>,
        /// Place to run at.
        place: Option<String>,
    },
    /// Call a registered provider.
    Call {
        /// Provider name.
        provider: String,
        /// Rendered arguments.
        args: Json,
        /// Places or capabilities that must be ready.
        needs: Vec<String>,
        /// Give up after this long.
        timeout_ms: Option<u64>,
    },
    /// Start a child job.
    Spawn {
        /// Flow name.
        flow: String,
        /// Rendered input.
        input: Json,
        /// Complete only when the child finishes.
        wait: bool,
    },
    /// Fire at `deadline` (ms since the Unix epoch).
    Timer {
        /// When.
        deadline: u64,
    },
}

impl EffectRequest {
    /// True for effects a seat claims (as opposed to timers and spawns a node handles).
    pub fn is_claimable(&self) -> bool {
        matches!(self, EffectRequest::Run { .. } | EffectRequest::Call { .. })
    }

    /// Places or capabilities this effect needs.
    pub fn needs(&self) -> &[String] {
        match self {
            EffectRequest::Run { needs, .. } | EffectRequest::Call { needs, .. } => needs,
            _ => &[],
        }
    }

    /// Everything that must be ready before this effect may run: its `needs` and, for a
    /// `run` pinned to a place, that place.
    pub fn requirements(&self) -> Vec<String> {
        let mut all = self.needs().to_vec();
        if let EffectRequest::Run {
            place: Some(place), ..
        } = self
            && !all.contains(place)
        {
            all.push(place.clone());
        }
        all
    }

    /// Short kind name.
    pub fn kind_name(&self) -> &'static str {
        match self {
            EffectRequest::Run { .. } => "run",
            EffectRequest::Call { .. } => "call",
            EffectRequest::Spawn { .. } => "spawn",
            EffectRequest::Timer { .. } => "timer",
        }
    }
}

/// The result of a `run` effect.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Exit code; `None` when killed by a signal, timed out, or never started.
    pub exit_code: Option<i32>,
    /// Tail of standard output (bounded).
    pub stdout: String,
    /// Tail of standard error (bounded).
    pub stderr: String,
    /// Wall time.
    pub duration_ms: u64,
    /// Killed for exceeding `timeout_ms`.
    pub timed_out: bool,
    /// Could not start (bad cwd, no shell...), or killed by a signal.
    pub error: Option<String>,
}

impl RunResult {
    /// The blackboard form: `{exit_code, stdout, stderr, duration_ms, ...}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut object = serde_json::json!({
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "duration_ms": self.duration_ms,
        });
        if self.timed_out {
            object["timed_out"] = serde_json::Value::Bool(true);
        }
        if let Some(error) = &self.error {
            object["error"] = serde_json::Value::String(error.clone());
        }
        object
    }
}

/// What an effect produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A command finished.
    Run(RunResult),
    /// A provider answered.
    Call {
        /// Whether the call succeeded.
        ok: bool,
        /// Its value.
        value: Json,
        /// Why it failed.
        error: Option<String>,
    },
    /// A child job started (no wait) or finished (wait).
    Spawn {
        /// Child job id, if it could be started.
        job: Option<String>,
        /// Its terminal status when waited for (`succeeded`, `failed`, `cancelled`).
        status: Option<String>,
        /// Its final state, when waited for.
        state: Json,
        /// Why it could not start or failed.
        error: Option<String>,
    },
    /// A timer fired.
    TimerFired,
}

/// A fact delivered to a node in flight.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivery {
    /// An effect completed.
    Outcome(Outcome),
    /// A parked wait was continued with this input.
    Continued(serde_json::Value),
}

/// What the engine asks of its host after a step.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Start an effect under this idempotency key.
    StartEffect {
        /// `job/path/attempt`.
        key: String,
        /// Node path.
        path: String,
        /// What to do.
        request: EffectRequest,
    },
    /// A halted node no longer wants this effect (kill the process, drop the timer).
    CancelEffect {
        /// The key given at start.
        key: String,
    },
    /// A `wait` parked.
    Park(Parked),
    /// A parked `wait` was halted before anyone continued it.
    Unpark {
        /// The wait's key.
        key: String,
        /// Its park id.
        park: String,
    },
}

/// A parked `wait`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Parked {
    /// The key a continue names.
    pub key: String,
    /// Internal id (`job/path/attempt`), unique per parking.
    pub park: String,
    /// Node path.
    pub path: String,
    /// Rendered prompt.
    pub prompt: Option<String>,
    /// Allowed answers.
    pub choices: Vec<Json>,
    /// Input schema, as written.
    pub schema: Option<Json>,
    /// When it parked (ms since the epoch).
    pub since: u64,
}

/// An effect requested and not yet completed or cancelled.
#[derive(Clone, Debug, PartialEq)]
pub struct Outstanding {
    /// Node path.
    pub path: String,
    /// What was asked.
    pub request: EffectRequest,
}

/// One node of the runtime tree.
#[derive(Clone, Debug, PartialEq)]
pub struct RtNode {
    spec: SpecId,
    status: Status,
    state: NodeState,
    children: Vec<RtNode>,
    path: Box<str>,
}

#[derive(Clone, Debug, PartialEq)]
enum NodeState {
    Plain,
    Composite {
        current: Option<usize>,
    },
    ForEach {
        items: Vec<serde_json::Value>,
        next: usize,
    },
    Retry {
        failures: u32,
        backoff: Option<String>,
    },
    Repeat {
        successes: u32,
    },
    Timeout {
        timer: Option<String>,
    },
    Effect {
        key: Option<String>,
    },
    Wait {
        park: Option<String>,
        timer: Option<String>,
    },
    Scripted {
        position: usize,
    },
    UntilGreen(rounds::GreenState),
    Loop(rounds::LoopState),
    BestOf(rounds::BestState),
    Team(Box<team::TeamState>),
    Wizard(Box<wizard::WizardState>),
}

impl RtNode {
    fn new(program: &Program, spec: SpecId, path: String) -> RtNode {
        let spec_ref = program.spec(spec);
        let state = match &spec_ref.kind {
            SpecKind::Sequence { .. } | SpecKind::Selector { .. } | SpecKind::Parallel { .. } => {
                NodeState::Composite { current: None }
            }
            SpecKind::ForEach { .. } => NodeState::ForEach {
                items: Vec::new(),
                next: 0,
            },
            SpecKind::Retry { .. } => NodeState::Retry {
                failures: 0,
                backoff: None,
            },
            SpecKind::Repeat { .. } => NodeState::Repeat { successes: 0 },
            SpecKind::Timeout { .. } => NodeState::Timeout { timer: None },
            SpecKind::Run(_) | SpecKind::Call(_) | SpecKind::Spawn(_) | SpecKind::Sleep { .. } => {
                NodeState::Effect { key: None }
            }
            SpecKind::Wait(_) => NodeState::Wait {
                park: None,
                timer: None,
            },
            SpecKind::Scripted { .. } => NodeState::Scripted { position: 0 },
            SpecKind::UntilGreen { .. } => NodeState::UntilGreen(Default::default()),
            SpecKind::Loop(_) => NodeState::Loop(Default::default()),
            SpecKind::BestOf { .. } => NodeState::BestOf(Default::default()),
            SpecKind::Team(_) => NodeState::Team(Default::default()),
            SpecKind::Wizard { .. } => NodeState::Wizard(Box::default()),
            SpecKind::Invert
            | SpecKind::ForceSuccess
            | SpecKind::ForceFailure
            | SpecKind::Set(_)
            | SpecKind::Check(_)
            | SpecKind::Succeed
            | SpecKind::Fail(_) => NodeState::Plain,
        };
        // A for_each's body and a best_of's attempt are instantiated at run time.
        let children = if matches!(
            spec_ref.kind,
            SpecKind::ForEach { .. } | SpecKind::BestOf { .. }
        ) {
            Vec::new()
        } else {
            spec_ref
                .children
                .iter()
                .enumerate()
                .map(|(i, child)| RtNode::new(program, *child, format!("{path}.{i}")))
                .collect()
        };
        RtNode {
            spec,
            status: Status::Idle,
            state,
            children,
            path: path.into_boxed_str(),
        }
    }

    /// The node's status.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The node's path (`0`, `0.1`, `0.1.3`...).
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// A read-only view of a runtime node, for `inspect` and traces.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeView {
    /// Path.
    pub path: String,
    /// Node type.
    #[serde(rename = "type")]
    pub node_type: String,
    /// Display name.
    pub name: String,
    /// Short description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Status.
    pub status: Status,
    /// Children.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<NodeView>,
}

/// Everything of a running tree except the tree itself (kept apart so ticking can borrow
/// a node mutably while updating the rest).
#[derive(Clone, Debug)]
pub(crate) struct Runtime {
    program: Arc<Program>,
    job: Arc<str>,
    input: serde_json::Value,
    state: serde_json::Value,
    now: u64,
    attempts: HashMap<Box<str>, u32>,
    deliveries: HashMap<String, Delivery>,
    outstanding: BTreeMap<String, Outstanding>,
    parked: Vec<Parked>,
    commands: Vec<Command>,
    bindings: Vec<(Arc<str>, serde_json::Value)>,
    retick: bool,
    last_failure: Option<String>,
    /// How the last `loop` or `until_green` to finish ended (`stagnated`, `green`...),
    /// cleared by any later failure: what the job's exit code reports.
    outcome: Option<String>,
    /// What the calls of each `best_of` lane produced, for its ranking.
    lanes: BTreeMap<String, Vec<serde_json::Value>>,
}

impl PartialEq for Runtime {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.program, &other.program)
            && self.job == other.job
            && self.input == other.input
            && self.state == other.state
            && self.attempts == other.attempts
            && self.deliveries == other.deliveries
            && self.outstanding == other.outstanding
            && self.parked == other.parked
            && self.last_failure == other.last_failure
            && self.outcome == other.outcome
            && self.lanes == other.lanes
    }
}

/// One running instance of a program. See the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct Engine {
    root: RtNode,
    rt: Runtime,
}

/// What a step did.
#[derive(Clone, Debug, PartialEq)]
pub struct StepReport {
    /// Root status after the step.
    pub status: Status,
    /// Ticks taken.
    pub ticks: u32,
    /// The tick budget ran out while the tree still wanted to loop; step again soon.
    pub budget_exhausted: bool,
}

impl Engine {
    /// A fresh instance for job `job` with a prepared input.
    pub fn new(program: Arc<Program>, job: &str, input: serde_json::Value) -> Engine {
        let root = RtNode::new(&program, program.root(), "0".to_owned());
        Engine {
            root,
            rt: Runtime {
                program,
                job: Arc::from(job),
                input,
                state: serde_json::Value::Object(Default::default()),
                now: 0,
                attempts: HashMap::new(),
                deliveries: HashMap::new(),
                outstanding: BTreeMap::new(),
                parked: Vec::new(),
                commands: Vec::new(),
                bindings: Vec::new(),
                retick: false,
                last_failure: None,
                outcome: None,
                lanes: BTreeMap::new(),
            },
        }
    }

    /// Root status.
    pub fn status(&self) -> Status {
        self.root.status
    }

    /// Ticks until the tree stops asking for an immediate re-tick, or `ticks_max` runs out.
    ///
    /// A plain tick is not always enough in an event-driven host: `retry` with no backoff,
    /// `repeat` and `for_each` return `running` while wanting their child ticked again at
    /// once, with nothing in flight to wake them. They raise a flag, and the step loops.
    pub fn step(&mut self, now: u64, ticks_max: u32) -> StepReport {
        self.rt.now = now;
        let mut ticks = 0;
        loop {
            self.rt.retick = false;
            tick::tick(&mut self.root, &mut self.rt);
            ticks += 1;
            if !(self.rt.retick && self.root.status.is_running()) {
                return StepReport {
                    status: self.root.status,
                    ticks,
                    budget_exhausted: false,
                };
            }
            if ticks >= ticks_max {
                return StepReport {
                    status: self.root.status,
                    ticks,
                    budget_exhausted: true,
                };
            }
        }
    }

    /// One tick of the root, exactly as py_trees' `tick_once` (the trace harness).
    pub fn tick_once(&mut self, now: u64) -> Status {
        self.rt.now = now;
        self.rt.retick = false;
        tick::tick(&mut self.root, &mut self.rt);
        self.root.status
    }

    /// Halts the whole tree (cancel): every running node goes idle, every effect in flight
    /// is cancelled and every parked wait unparked.
    pub fn halt(&mut self, now: u64) {
        self.rt.now = now;
        if self.root.status != Status::Idle {
            tick::stop(&mut self.root, &mut self.rt, Status::Idle);
        }
    }

    /// Delivers a fact for an outstanding effect or a parked wait. Returns false (and
    /// changes nothing) if nothing in flight has this key.
    pub fn deliver(&mut self, key: &str, delivery: Delivery) -> bool {
        let known = match &delivery {
            Delivery::Outcome(_) => self.rt.outstanding.contains_key(key),
            Delivery::Continued(_) => self.rt.parked.iter().any(|p| p.park == key),
        };
        if known {
            self.rt.deliveries.insert(key.to_owned(), delivery);
        }
        known
    }

    /// Commands produced since the last call.
    pub fn take_commands(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.rt.commands)
    }

    /// Effects in flight, by key.
    pub fn outstanding(&self) -> &BTreeMap<String, Outstanding> {
        &self.rt.outstanding
    }

    /// Parked waits, oldest first.
    pub fn parked(&self) -> &[Parked] {
        &self.rt.parked
    }

    /// The job's input.
    pub fn input(&self) -> &serde_json::Value {
        &self.rt.input
    }

    /// The job's state (the blackboard's `state`).
    pub fn state(&self) -> &serde_json::Value {
        &self.rt.state
    }

    /// Writes `state.<key>` (a continue's input lands here before the wait is ticked).
    pub fn write_state(&mut self, key: &str, value: serde_json::Value) {
        if let Some(object) = self.rt.state.as_object_mut() {
            object.insert(key.to_owned(), value);
        }
    }

    /// The reason of the most recent leaf failure, for the job's `error`.
    pub fn last_failure(&self) -> Option<&str> {
        self.rt.last_failure.as_deref()
    }

    /// How the last `loop` or `until_green` to finish ended, unless something failed
    /// after it: `success`, `no_op`, `blocked`, `stagnated`, `exhausted` (a loop), `green`,
    /// `stalled`, `exhausted` (an until_green).
    pub fn outcome(&self) -> Option<&str> {
        self.rt.outcome.as_deref()
    }

    /// The program this engine runs.
    pub fn program(&self) -> &Arc<Program> {
        &self.rt.program
    }

    /// The runtime tree as a view.
    pub fn view(&self) -> NodeView {
        view(&self.root, &self.rt.program)
    }

    /// The status of the node at `path` (`0`, `0.2`, `0.2.1`...), `None` when the tree
    /// has no such node now (a `for_each` body exists only while it runs).
    pub fn status_at(&self, path: &str) -> Option<Status> {
        let mut segments = path.split('.');
        if segments.next() != Some("0") {
            return None;
        }
        let mut node = &self.root;
        for segment in segments {
            let index: usize = segment.parse().ok()?;
            node = node.children.get(index)?;
        }
        Some(node.status)
    }

    /// Every node's status in pre-order, with its label (the trace harness).
    pub fn statuses(&self) -> Vec<(String, Status)> {
        let mut out = Vec::new();
        collect_statuses(&self.root, &self.rt.program, &mut out);
        out
    }
}

fn view(node: &RtNode, program: &Program) -> NodeView {
    let spec = program.spec(node.spec);
    NodeView {
        path: node.path.to_string(),
        node_type: spec.kind.type_name().to_owned(),
        name: spec.label.clone(),
        detail: spec.detail.clone(),
        status: node.status,
        children: node.children.iter().map(|c| view(c, program)).collect(),
    }
}

fn collect_statuses(node: &RtNode, program: &Program, out: &mut Vec<(String, Status)>) {
    out.push((program.spec(node.spec).label.clone(), node.status));
    for child in &node.children {
        collect_statuses(child, program, out);
    }
}

impl Runtime {
    fn scope(&self) -> Scope {
        Scope::new(&self.input, &self.state, &self.bindings)
    }

    fn next_key(&mut self, path: &str) -> String {
        let counter = self.attempts.entry(Box::from(path)).or_insert(0);
        *counter += 1;
        format!("{}/{}/{}", self.job, path, counter)
    }

    fn start_effect(&mut self, path: &str, request: EffectRequest) -> String {
        let key = self.next_key(path);
        self.outstanding.insert(
            key.clone(),
            Outstanding {
                path: path.to_owned(),
                request: request.clone(),
            },
        );
        self.commands.push(Command::StartEffect {
            key: key.clone(),
            path: path.to_owned(),
            request,
        });
        key
    }

    fn start_timer(&mut self, path: &str, delay_ms: u64) -> String {
        let deadline = self.now.saturating_add(delay_ms);
        self.start_effect(path, EffectRequest::Timer { deadline })
    }

    fn cancel_effect(&mut self, key: &str) {
        self.deliveries.remove(key);
        if self.outstanding.remove(key).is_some() {
            self.commands.push(Command::CancelEffect {
                key: key.to_owned(),
            });
        }
    }

    /// Takes the delivery for `key`, if one arrived; the effect is no longer outstanding.
    fn take_outcome(&mut self, key: &str) -> Option<Outcome> {
        match self.deliveries.remove(key) {
            Some(Delivery::Outcome(outcome)) => {
                if let Some(done) = self.outstanding.remove(key) {
                    rounds::note_lane(&mut self.lanes, &done.request, &outcome);
                }
                Some(outcome)
            }
            Some(other) => {
                self.deliveries.insert(key.to_owned(), other);
                None
            }
            None => None,
        }
    }

    fn fail(&mut self, path: &str, reason: String) {
        let spec_label = path;
        self.last_failure = Some(format!("{reason} (at node {spec_label})"));
        self.outcome = None;
    }

    /// A failure that only passes a child's on (a parallel's branch, a retry giving up):
    /// how a loop or until_green below it ended still explains the job's end.
    fn fail_passing_on(&mut self, path: &str, reason: String) {
        let outcome = self.outcome.take();
        self.fail(path, reason);
        self.outcome = outcome;
    }

    fn write_state(&mut self, key: &str, value: serde_json::Value) {
        if let Some(object) = self.state.as_object_mut() {
            object.insert(key.to_owned(), value);
        }
    }

    fn remove_state(&mut self, key: &str) {
        if let Some(object) = self.state.as_object_mut() {
            object.remove(key);
        }
    }
}

/// Renders a value template against a scope.
pub(crate) fn render_value(
    template: &ValueTemplate,
    scope: &Scope,
) -> Result<serde_json::Value, crate::template::TemplateError> {
    Ok(match template {
        ValueTemplate::Literal(json) => json.0.clone(),
        ValueTemplate::Text(text) => text.render_value(scope)?,
        ValueTemplate::List(items) => serde_json::Value::Array(
            items
                .iter()
                .map(|item| render_value(item, scope))
                .collect::<Result<_, _>>()?,
        ),
        ValueTemplate::Map(entries) => serde_json::Value::Object(
            entries
                .iter()
                .map(|(k, v)| Ok((k.clone(), render_value(v, scope)?)))
                .collect::<Result<_, crate::template::TemplateError>>()?,
        ),
    })
}
