//! Parsing of the verification nodes: `verify` (a command whose failures are parsed),
//! `until_green` (verify → fix → verify), `gate` (a verifier agent or a person approves),
//! `loop` (iterations until a terminal state) and `best_of` (N attempts, one winner).
//!
//! `verify` and an agent `gate` are `call`s of the node's `verify` and `gate` providers,
//! like `agent`; a person's `gate` is a `wait` with the choices approve/reject followed
//! by the check of the answer. `until_green`, `loop` and `best_of` are node types of
//! their own (their rounds live in the engine, replayed from the journal like any
//! decorator's).

use super::{Parser, describe, literal};
use crate::definition::yaml::{Spanned, Value};
use crate::definition::{
    BestOfSpec, CallSpec, LoopRule, LoopSpec, Node, NodeKind, RankBy, Span, UntilGreenSpec,
    ValueTemplate, WaitSpec,
};
use crate::json::Json;
use crate::template::{Expr, Template};
use std::collections::HashMap;

/// The provider a `verify` leaf (and every `until_green` round) calls.
pub const VERIFY_PROVIDER: &str = "verify";
/// The provider an agent `gate` calls.
pub const GATE_PROVIDER: &str = "gate";
/// The provider `best_of` asks to rank its attempts.
pub const RANK_PROVIDER: &str = "best_of";
/// The parsers `verify` knows.
pub const VERIFY_PARSERS: [&str; 7] = ["auto", "cargo", "pytest", "go", "jest", "tap", "junit"];
/// A check's timeout when it gives none (30 min).
pub const VERIFY_TIMEOUT_MS_DEFAULT: u64 = 30 * 60 * 1000;
/// A gate's timeout when it gives none (20 min per verifier run).
pub const GATE_TIMEOUT_MS_DEFAULT: u64 = 20 * 60 * 1000;
/// How much longer a call may take than its own timeout (stopping a process group and
/// writing the log take a moment).
const CALL_GRACE_MS: u64 = 60_000;
/// Most attempts one `best_of` runs.
pub const BEST_OF_MAX: u32 = 16;
/// Most iterations a `loop` may be given.
pub const ROUNDS_MAX: u32 = 10_000;
/// Most fixes an `until_green` may be given (its evidence keeps every round).
pub const FIX_ROUNDS_MAX: u32 = 100;
/// The names bound inside an `until_green`'s `fix`.
pub const FIX_BINDINGS: [&str; 3] = ["failures", "verify", "round"];
/// The name bound inside a `best_of`'s `attempt`.
pub const ATTEMPT_BINDING: &str = "attempt";
/// A lane's template: `attempt.lane` is `<best_of path>-<index>`, unique in the job.
const LANE_TEMPLATE: &str = "{{ attempt.lane }}";
/// The attempt's provider, for agent leaves that name none.
pub(super) const ATTEMPT_PROVIDER_TEMPLATE: &str = "{{ attempt.provider }}";

impl Parser {
    fn text_template(&mut self, text: &str) -> ValueTemplate {
        match Template::compile(text) {
            Ok(template) => ValueTemplate::Text(template),
            // The constant templates above always compile.
            Err(_) => literal(serde_json::Value::String(text.to_owned())),
        }
    }

    /// Inside a `best_of` attempt: the `lane` argument that keeps its worktree apart.
    pub(super) fn lane_arg(&mut self) -> Option<(String, ValueTemplate)> {
        (self.lanes > 0).then(|| ("lane".to_owned(), self.text_template(LANE_TEMPLATE)))
    }

    /// What every call-like leaf ends with: inside a `best_of` attempt, the `lane`
    /// argument; and its `save`, `needs` and `name`.
    pub(super) fn call_tail(
        &mut self,
        options: &HashMap<&str, &Spanned>,
        args: &mut Vec<(String, ValueTemplate)>,
    ) -> (Option<String>, Vec<String>, Option<String>) {
        if let Some(lane) = self.lane_arg() {
            args.push(lane);
        }
        let save = options
            .get("save")
            .and_then(|node| self.identifier(node, "`save`"));
        let needs = options
            .get("needs")
            .map(|node| self.string_list(node, "`needs`"))
            .unwrap_or_default();
        (save, needs, self.name_option(options))
    }

    /// The attempt's provider as an agent leaf's default.
    pub(super) fn attempt_provider(&mut self) -> Option<ValueTemplate> {
        self.attempt_providers
            .then(|| self.text_template(ATTEMPT_PROVIDER_TEMPLATE))
    }

    /// `verify: "cargo test"` or `verify: {cmd, cwd, parser, timeout, repo, report, save,
    /// needs, name}`: the call a check makes, its `save` and its `name`.
    pub(super) fn verify_call(
        &mut self,
        span: Span,
        body: &Spanned,
    ) -> Option<(CallSpec, Option<String>, Option<String>)> {
        let hint = "`verify: { cmd: \"cargo test\", parser: cargo, repo: \"{{ input.repo }}\" }`";
        let (options, cmd_node) = match &body.value {
            Value::String(_) => (HashMap::new(), Some(body)),
            _ => {
                let options = self.leaf_options(
                    "verify",
                    body,
                    &[
                        "name", "cmd", "cwd", "parser", "timeout", "repo", "report", "save",
                        "needs",
                    ],
                )?;
                let cmd = self.required(&options, "cmd", "verify", span, hint);
                (options, cmd)
            }
        };
        let cmd = self.value_template(cmd_node?)?;
        let mut args = vec![("cmd".to_owned(), cmd)];
        let parser = match options.get("parser") {
            Some(node) => match node.as_str() {
                Some(name) if VERIFY_PARSERS.contains(&name) => name.to_owned(),
                _ => {
                    self.error(
                        node.span,
                        format!(
                            "`parser` must be one of {}, found {}",
                            VERIFY_PARSERS.join(", "),
                            describe(node)
                        ),
                        Some("`auto` guesses from the command and its output".to_owned()),
                    );
                    return None;
                }
            },
            None => "auto".to_owned(),
        };
        args.push(("parser".to_owned(), literal(serde_json::json!(parser))));
        for field in ["cwd", "repo", "report"] {
            if let Some(node) = options.get(field) {
                args.push((field.to_owned(), self.value_template(node)?));
            }
        }
        let timeout_ms = match options.get("timeout") {
            Some(node) => self.duration(node, "`timeout`", false)?,
            None => VERIFY_TIMEOUT_MS_DEFAULT,
        };
        args.push((
            "timeout_ms".to_owned(),
            literal(serde_json::json!(timeout_ms)),
        ));
        let (save, needs, name) = self.call_tail(&options, &mut args);
        Some((
            CallSpec {
                provider: VERIFY_PROVIDER.to_owned(),
                args: ValueTemplate::Map(args),
                save: None,
                needs,
                timeout_ms: Some(timeout_ms.saturating_add(CALL_GRACE_MS)),
            },
            save,
            name,
        ))
    }

    /// The `verify` leaf: succeeds when the check is green; `save` keeps the result
    /// (`{ok, exit_code, failures, signature, duration_ms, log}`) either way.
    pub(super) fn verify(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let (mut call, save, name) = self.verify_call(span, body)?;
        call.save = save;
        Some(Node {
            kind: NodeKind::Call(call),
            name: name.or_else(|| Some("verify".to_owned())),
            span,
        })
    }

    /// `gate`: `{agent: PROVIDER | {provider, model, max_turns, timeout}, criteria,
    /// evidence, repo, skeptic, save}` asks a verifier agent in observe mode;
    /// `{human: {key, prompt, timeout}}` asks a person (approve or reject).
    pub(super) fn gate(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let options = self.leaf_options(
            "gate",
            body,
            &[
                "name", "agent", "human", "criteria", "evidence", "repo", "skeptic", "save",
                "needs", "timeout",
            ],
        )?;
        let name = self.name_option(&options);
        let agent = options.get("agent").copied();
        let human = options.get("human").copied();
        match (agent, human) {
            (Some(_), Some(human)) => {
                self.error(
                    human.span,
                    "a `gate` is either an `agent` gate or a `human` one, not both",
                    None,
                );
                None
            }
            (None, None) => {
                self.error(
                    span,
                    "a `gate` needs `agent:` (a verifier agent) or `human:` (a person)",
                    Some("`gate: { agent: claude, criteria: \"the tests cover the fix\" }` or `gate: { human: { key: review } }`".to_owned()),
                );
                None
            }
            (None, Some(human)) => {
                for field in ["criteria", "evidence", "repo", "skeptic", "needs"] {
                    if let Some(node) = options.get(field) {
                        self.error(
                            node.span,
                            format!("`{field}` belongs to an agent gate, not a human one"),
                            None,
                        );
                    }
                }
                let save = options
                    .get("save")
                    .and_then(|node| self.identifier(node, "`save`"));
                let timeout = options.get("timeout").copied();
                self.human_gate(span, human, save, timeout, name)
            }
            (Some(agent), None) => self.agent_gate(span, agent, &options, name),
        }
    }

    fn agent_gate(
        &mut self,
        span: Span,
        agent: &Spanned,
        options: &HashMap<&str, &Spanned>,
        name: Option<String>,
    ) -> Option<Node> {
        let mut args = Vec::new();
        let mut timeout_ms = GATE_TIMEOUT_MS_DEFAULT;
        match &agent.value {
            Value::String(_) => args.push(("provider".to_owned(), self.value_template(agent)?)),
            Value::Map(entries) => {
                let agent_options = self.options(
                    "gate.agent",
                    entries,
                    &["provider", "model", "max_turns", "timeout"],
                );
                let provider = match agent_options.get("provider") {
                    Some(node) => self.value_template(node)?,
                    None => match self.attempt_provider() {
                        Some(template) => template,
                        None => {
                            self.error(
                                agent.span,
                                "missing field `provider` in `gate.agent`",
                                None,
                            );
                            return None;
                        }
                    },
                };
                args.push(("provider".to_owned(), provider));
                if let Some(node) = agent_options.get("model") {
                    args.push(("model".to_owned(), self.value_template(node)?));
                }
                if let Some(node) = agent_options.get("max_turns") {
                    let turns = self.positive_integer(node, "`max_turns`")?;
                    args.push(("max_turns".to_owned(), literal(serde_json::json!(turns))));
                }
                if let Some(node) = agent_options.get("timeout") {
                    timeout_ms = self.duration(node, "`timeout`", false)?;
                }
            }
            _ => {
                self.error(
                    agent.span,
                    format!(
                        "`agent` names the verifier (`claude`, `codex`, a declared agent) or is a mapping with `provider`, found {}",
                        describe(agent)
                    ),
                    None,
                );
                return None;
            }
        }
        let criteria = self.required(
            options,
            "criteria",
            "gate",
            span,
            "`criteria: \"the change fixes the bug and adds a test\"`",
        )?;
        args.push(("criteria".to_owned(), self.value_template(criteria)?));
        for field in ["evidence", "repo"] {
            if let Some(node) = options.get(field) {
                args.push((field.to_owned(), self.value_template(node)?));
            }
        }
        let skeptic = match options.get("skeptic") {
            Some(node) => self.boolean(node, "`skeptic`")?,
            None => false,
        };
        args.push(("skeptic".to_owned(), literal(serde_json::json!(skeptic))));
        if let Some(node) = options.get("timeout") {
            timeout_ms = self.duration(node, "`timeout`", false)?;
        }
        args.push((
            "timeout_ms".to_owned(),
            literal(serde_json::json!(timeout_ms)),
        ));
        let (save, needs, _) = self.call_tail(options, &mut args);
        // A skeptic runs one more verifier per finding; the bound covers a few of them.
        let runs: u64 = if skeptic { 6 } else { 1 };
        Some(Node {
            kind: NodeKind::Call(CallSpec {
                provider: GATE_PROVIDER.to_owned(),
                args: ValueTemplate::Map(args),
                save,
                needs,
                timeout_ms: Some(
                    timeout_ms
                        .saturating_mul(runs)
                        .saturating_add(CALL_GRACE_MS),
                ),
            }),
            name: name.or_else(|| Some("gate".to_owned())),
            span,
        })
    }

    /// A person's gate: a wait for approve/reject at `key` (default `approval`), then the
    /// answer checked. `palm continue JOB --key KEY --input '"approve"'` answers it.
    fn human_gate(
        &mut self,
        span: Span,
        human: &Spanned,
        save: Option<String>,
        timeout: Option<&Spanned>,
        name: Option<String>,
    ) -> Option<Node> {
        let (key, prompt) = match &human.value {
            Value::Bool(true) | Value::Null => (None, None),
            Value::Map(entries) => {
                let options = self.options("gate.human", entries, &["key", "prompt"]);
                let key = match options.get("key") {
                    Some(node) => Some((self.identifier(node, "gate `key`")?, node.span)),
                    None => None,
                };
                let prompt = match options.get("prompt") {
                    Some(node) => Some(self.template(node, "`prompt`")?),
                    None => None,
                };
                (key, prompt)
            }
            _ => {
                self.error(
                    human.span,
                    format!(
                        "`human` is `true` or a mapping with `key` and `prompt`, found {}",
                        describe(human)
                    ),
                    None,
                );
                return None;
            }
        };
        if save.is_some() {
            // The answer already lands at `state.<key>`; `save` would be a second name.
            self.error(
                span,
                "a human gate's answer is kept at `state.<key>`; use `human: {key: NAME}` instead of `save`",
                None,
            );
            return None;
        }
        let (key, key_span) = key.unwrap_or_else(|| ("approval".to_owned(), human.span));
        self.claim_wait_key(&key, key_span);
        let timeout_ms = match timeout {
            Some(node) => Some(self.duration(node, "`timeout`", false)?),
            None => None,
        };
        let prompt = prompt.or_else(|| Template::compile("Approve or reject?").ok());
        let wait = Node {
            kind: NodeKind::Wait(WaitSpec {
                key: key.clone(),
                prompt,
                choices: vec![
                    Json(serde_json::json!("approve")),
                    Json(serde_json::json!("reject")),
                ],
                schema: None,
                timeout_ms,
            }),
            name: Some(format!("gate {key}")),
            span,
        };
        let approved = Expr::compile(&format!("state.{key} == \"approve\""))
            .map_err(|e| e.message)
            .ok()?;
        let verdict = Node {
            kind: NodeKind::Selector {
                memory: false,
                children: vec![
                    Node {
                        kind: NodeKind::Check(approved),
                        name: Some("approved".to_owned()),
                        span,
                    },
                    Node {
                        kind: NodeKind::Fail(
                            Template::compile(&format!("gate `{key}`: rejected by a person")).ok(),
                        ),
                        name: Some("rejected".to_owned()),
                        span,
                    },
                ],
            },
            name: Some("verdict".to_owned()),
            span,
        };
        Some(Node {
            kind: NodeKind::Sequence {
                memory: true,
                children: vec![wait, verdict],
            },
            name: name.or_else(|| Some("gate".to_owned())),
            span,
        })
    }

    /// `until_green: {verify, fix, max_rounds, save}`.
    pub(super) fn until_green(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let options = self.leaf_options(
            "until_green",
            body,
            &["name", "verify", "fix", "max_rounds", "save"],
        )?;
        let hint = "`until_green: { verify: { cmd: \"cargo test\" }, fix: { agent: { provider: claude, prompt: \"Fix: {{ failures }}\" } }, max_rounds: 3 }`";
        let verify_node = self.required(&options, "verify", "until_green", span, hint);
        let fix_node = self.required(&options, "fix", "until_green", span, hint);
        let verify = match verify_node {
            Some(node) => {
                if let Some(save) = node_field(node, "save") {
                    self.error(
                        save.span,
                        "an `until_green`'s check keeps its rounds under the until_green's own `save`",
                        None,
                    );
                }
                self.verify_call(node.span, node).map(|(call, _, _)| call)
            }
            None => None,
        };
        let max_rounds = match options.get("max_rounds") {
            Some(node) => self.rounds(node, "`max_rounds`", FIX_ROUNDS_MAX)?,
            None => 3,
        };
        let save = options
            .get("save")
            .and_then(|node| self.identifier(node, "`save`"));
        for name in FIX_BINDINGS {
            self.bindings.push(name.to_owned());
        }
        let fix = fix_node.and_then(|node| self.node(node));
        for _ in FIX_BINDINGS {
            self.bindings.pop();
        }
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::UntilGreen(UntilGreenSpec {
                verify: verify?,
                max_rounds,
                save,
                fix: Box::new(fix?),
            }),
            name,
            span,
        })
    }

    fn rounds(&mut self, node: &Spanned, what: &str, max: u32) -> Option<u32> {
        let n = self.positive_integer(node, what)?;
        if n > i64::from(max) {
            self.error(
                node.span,
                format!("{what} must be at most {max}, found {n}"),
                None,
            );
            return None;
        }
        Some(n as u32)
    }

    /// `loop: {do, report, max_iterations, stagnation, max_errors, every, timeout, key, save}`.
    pub(super) fn loop_node(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let options = self.leaf_options(
            "loop",
            body,
            &[
                "name",
                "do",
                "report",
                "max_iterations",
                "stagnation",
                "max_errors",
                "every",
                "timeout",
                "key",
                "save",
            ],
        )?;
        let hint = "`loop: { do: ..., report: iteration, max_iterations: 10 }`; each iteration writes `{state: continue|done|no_op|blocked, signature}` to `state.iteration`";
        let body_node = self.required(&options, "do", "loop", span, hint);
        let report = match options.get("report") {
            Some(node) => self.identifier(node, "`report`")?,
            None => "iteration".to_owned(),
        };
        let max_iterations = match options.get("max_iterations") {
            Some(node) => self.rounds(node, "`max_iterations`", ROUNDS_MAX)?,
            None => 10,
        };
        let stagnation = match options.get("stagnation") {
            Some(node) => self.rounds(node, "`stagnation`", ROUNDS_MAX)?,
            None => 3,
        };
        let max_errors = match options.get("max_errors") {
            Some(node) => self.rounds(node, "`max_errors`", ROUNDS_MAX)?,
            None => 3,
        };
        let every_ms = match options.get("every") {
            Some(node) => self.duration(node, "`every`", true)?,
            None => 0,
        };
        let timeout_ms = match options.get("timeout") {
            Some(node) => Some(self.duration(node, "`timeout`", false)?),
            None => None,
        };
        let key = match options.get("key") {
            Some(node) => Some(self.template(node, "`key`")?),
            None => None,
        };
        let save = options
            .get("save")
            .and_then(|node| self.identifier(node, "`save`"));
        let inner = body_node.and_then(|node| self.node(node));
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Loop(LoopSpec {
                key,
                rule: LoopRule {
                    report,
                    max_iterations,
                    stagnation,
                    max_errors,
                    every_ms,
                    timeout_ms,
                    save,
                },
                body: Box::new(inner?),
            }),
            name,
            span,
        })
    }

    /// `best_of: {n, providers, attempt, rank, save}`.
    pub(super) fn best_of(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let options = self.leaf_options(
            "best_of",
            body,
            &["name", "n", "providers", "attempt", "rank", "save"],
        )?;
        let hint = "`best_of: { n: 3, providers: [claude, codex], attempt: { sequence: [ { agent: { prompt: ... } }, { verify: ... } ] } }`";
        let attempt_node = self.required(&options, "attempt", "best_of", span, hint);
        let providers = options
            .get("providers")
            .map(|node| self.string_list(node, "`providers`"))
            .unwrap_or_default();
        let n = match options.get("n") {
            Some(node) => {
                let n = self.positive_integer(node, "`n`")?;
                if n > i64::from(BEST_OF_MAX) {
                    self.error(
                        node.span,
                        format!("`n` must be at most {BEST_OF_MAX}, found {n}"),
                        None,
                    );
                    return None;
                }
                n as u32
            }
            None if !providers.is_empty() && providers.len() <= BEST_OF_MAX as usize => {
                providers.len() as u32
            }
            None => {
                self.error(
                    span,
                    "missing field `n` in `best_of`",
                    Some(hint.to_owned()),
                );
                return None;
            }
        };
        let rank = match options.get("rank") {
            Some(node) => {
                let mut rank = Vec::new();
                for name in self.string_list(node, "`rank`") {
                    match RankBy::parse(&name) {
                        Some(by) if !rank.contains(&by) => rank.push(by),
                        Some(_) => {}
                        None => {
                            self.error(
                                node.span,
                                format!(
                                    "`rank` takes gates, verify, diff_size and risk, found `{name}`"
                                ),
                                None,
                            );
                            return None;
                        }
                    }
                }
                rank
            }
            None => vec![
                RankBy::Gates,
                RankBy::Verify,
                RankBy::DiffSize,
                RankBy::Risk,
            ],
        };
        let save = match options.get("save") {
            Some(node) => self.identifier(node, "`save`")?,
            None => "best_of".to_owned(),
        };
        self.bindings.push(ATTEMPT_BINDING.to_owned());
        self.lanes += 1;
        let outer_providers = self.attempt_providers;
        self.attempt_providers = !providers.is_empty();
        let attempt = attempt_node.and_then(|node| self.node(node));
        self.attempt_providers = outer_providers;
        self.lanes -= 1;
        self.bindings.pop();
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::BestOf(BestOfSpec {
                n,
                providers,
                rank,
                save,
                attempt: Box::new(attempt?),
            }),
            name,
            span,
        })
    }
}

fn node_field<'a>(node: &'a Spanned, field: &str) -> Option<&'a Spanned> {
    let Value::Map(entries) = &node.value else {
        return None;
    };
    entries
        .iter()
        .find(|(key, _)| key.as_str() == Some(field))
        .map(|(_, value)| value)
}
