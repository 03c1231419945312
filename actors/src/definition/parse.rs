//! From spanned YAML to a [`Definition`], collecting every problem with its position.

use super::yaml::{self, Spanned, Value};
use super::{
    Backoff, CallSpec, Definition, Diagnostic, InputField, Node, NodeKind, RunSpec, Span,
    SpawnSpec, Threshold, ValueTemplate, WaitSpec,
};
use crate::interest::{CatchUp, Cron, EndFilter, InterestSpec, PlaceFilter, Trigger, When, Zone};
use crate::json::Json;
use crate::jsonschema::Schema;
use crate::template::{Expr, ROOT_NAMES, Template, TemplateError};
use std::collections::{BTreeSet, HashMap};

mod team;
mod verification;
mod wizard;
pub use team::{MERGE_PROVIDER, PREDICT_PROVIDER, turn_schema};
pub use verification::{
    ATTEMPT_BINDING, FIX_BINDINGS, GATE_PROVIDER, RANK_PROVIDER, VERIFY_PARSERS, VERIFY_PROVIDER,
};

/// Every node type a flow may use.
pub const NODE_TYPES: &[&str] = &[
    "sequence",
    "selector",
    "parallel",
    "for_each",
    "invert",
    "retry",
    "repeat",
    "timeout",
    "force_success",
    "force_failure",
    "until_success",
    "run",
    "wait",
    "sleep",
    "set",
    "check",
    "succeed",
    "fail",
    "call",
    "agent",
    "spawn",
    "subflow",
    "verify",
    "until_green",
    "gate",
    "loop",
    "best_of",
    "team",
    "wizard",
];

pub(crate) const TOP_LEVEL_KEYS: &[&str] = &[
    "name",
    "description",
    "input",
    "places",
    "on",
    "budget",
    "patches",
    "tags",
    "authority",
    "tree",
];

fn literal(value: serde_json::Value) -> ValueTemplate {
    ValueTemplate::Literal(Json(value))
}

/// The provider an `agent` leaf calls.
pub const AGENT_PROVIDER: &str = "agent";
/// An `agent` leaf's timeout when it gives none (30 min).
pub const AGENT_TIMEOUT_MS_DEFAULT: u64 = 30 * 60 * 1000;
/// How much longer the call may take than the run's own timeout (killing a process
/// group and saving the worktree take a moment).
const AGENT_TIMEOUT_GRACE_MS: u64 = 60_000;

/// Largest duration accepted anywhere (about 10 years), so arithmetic on deadlines
/// cannot overflow.
const DURATION_MS_MAX: u64 = 10 * 366 * 24 * 3600 * 1000;

/// Parses and validates a definition. Returns every problem found, not only the first.
pub fn parse(source: &str, origin: &str) -> Result<Definition, Vec<Diagnostic>> {
    let mut parser = Parser {
        origin: origin.to_owned(),
        diagnostics: Vec::new(),
        wait_keys: HashMap::new(),
        bindings: Vec::new(),
        in_interest: false,
        agent_budget: Vec::new(),
        lanes: 0,
        attempt_providers: false,
    };
    let document = match yaml::read(source) {
        Ok(document) => document,
        Err(err) => {
            return Err(vec![Diagnostic {
                origin: origin.to_owned(),
                span: err.span,
                message: err.message,
                hint: Some(
                    "the file is not YAML there: look for a tab used to indent, a `:` or `#` \
                     in unquoted text, or a bracket or quote left open just before this point"
                        .to_owned(),
                ),
            }]);
        }
    };
    let definition = parser.definition(&document);
    match definition {
        Some(definition) if parser.diagnostics.is_empty() => Ok(definition),
        _ => {
            let mut diagnostics = parser.diagnostics;
            diagnostics.sort_by_key(|d| d.span);
            diagnostics.dedup();
            Err(diagnostics)
        }
    }
}

struct Parser {
    origin: String,
    diagnostics: Vec<Diagnostic>,
    wait_keys: HashMap<String, Span>,
    /// Names bound by enclosing `for_each` nodes.
    bindings: Vec<String>,
    /// Parsing `on:`: templates and expressions see only `event`.
    in_interest: bool,
    /// The flow's `budget:`, handed to every `agent` leaf (`job_budget_usd`,
    /// `job_budget_turns`): the node's agent provider keeps each job's spending.
    agent_budget: Vec<(String, ValueTemplate)>,
    /// How many `best_of` attempts enclose the node being parsed: inside one, agent,
    /// verify and gate calls carry the attempt's `lane` (its own worktree).
    lanes: u32,
    /// The enclosing `best_of` names providers: an agent leaf may leave out its own.
    attempt_providers: bool,
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_flow_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Edit distance, for "did you mean" hints.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            current.push(
                (previous[j] + cost)
                    .min(previous[j + 1] + 1)
                    .min(current[j] + 1),
            );
        }
        previous = current;
    }
    previous[b.len()]
}

fn closest<'a>(word: &str, options: &[&'a str]) -> Option<&'a str> {
    options
        .iter()
        .map(|option| (distance(word, option), *option))
        .filter(|(d, option)| *d <= 2.max(option.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, option)| option)
}

/// Parses `250ms`, `5s`, `2m`, `1h`, `1d` and combinations like `1m30s`.
pub fn parse_duration_ms(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(number.checked_mul(factor)?)?;
    }
    Some(total)
}

impl Parser {
    fn error(&mut self, span: Span, message: impl Into<String>, hint: Option<String>) {
        self.diagnostics.push(Diagnostic {
            origin: self.origin.clone(),
            span,
            message: message.into(),
            hint,
        });
    }

    fn visible_names(&self) -> Vec<String> {
        if self.in_interest {
            return vec!["event".to_owned()];
        }
        let mut names: Vec<String> = ROOT_NAMES.iter().map(|s| (*s).to_owned()).collect();
        names.extend(self.bindings.iter().cloned());
        names
    }

    fn check_names(&mut self, span: Span, names: BTreeSet<String>, what: &str) {
        let visible = self.visible_names();
        for name in names {
            if visible.contains(&name) {
                continue;
            }
            let options: Vec<&str> = visible.iter().map(String::as_str).collect();
            let hint = match closest(&name, &options) {
                Some(close) => format!("did you mean `{close}`?"),
                None if name == "item" => "`item` exists only inside a `for_each` body".to_owned(),
                None => format!("{what}s can read: {}", options.join(", ")),
            };
            self.error(span, format!("unknown name `{name}` in {what}"), Some(hint));
        }
    }

    fn template_error(&mut self, span: Span, what: &str, source: &str, err: TemplateError) {
        self.error(
            span,
            format!("bad {what} `{source}`: {}", err.message),
            Some("templates use minijinja syntax: `{{ input.x }}`, `{{ state.y }}`".to_owned()),
        );
    }

    fn template(&mut self, node: &Spanned, what: &str) -> Option<Template> {
        let text = match &node.value {
            Value::String(s) => s.clone(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                let found = node.type_name();
                self.error(
                    node.span,
                    format!("{what} must be a string, found {found}"),
                    None,
                );
                return None;
            }
        };
        match Template::compile(&text) {
            Ok(template) => {
                self.check_names(node.span, template.names(), "template");
                Some(template)
            }
            Err(err) => {
                self.template_error(node.span, "template", &text, err);
                None
            }
        }
    }

    fn expression(&mut self, node: &Spanned, what: &str) -> Option<Expr> {
        let Some(text) = node.as_str() else {
            let found = node.type_name();
            self.error(
                node.span,
                format!("{what} must be a string expression, found {found}"),
                None,
            );
            return None;
        };
        match Expr::compile(text) {
            Ok(expr) => {
                self.check_names(node.span, expr.names(), "expression");
                Some(expr)
            }
            Err(err) => {
                self.error(
                    node.span,
                    format!("bad expression `{text}`: {}", err.message),
                    Some(
                        "expressions use minijinja syntax, e.g. `state.x.exit_code == 0`"
                            .to_owned(),
                    ),
                );
                None
            }
        }
    }

    fn value_template(&mut self, node: &Spanned) -> Option<ValueTemplate> {
        Some(match &node.value {
            Value::String(_) => ValueTemplate::Text(self.template(node, "value")?),
            Value::Seq(items) => {
                let mut out = Vec::new();
                for item in items {
                    out.push(self.value_template(item)?);
                }
                ValueTemplate::List(out)
            }
            Value::Map(entries) => {
                let mut out = Vec::new();
                for (key, value) in entries {
                    let key = key.as_str().unwrap_or_default().to_owned();
                    out.push((key, self.value_template(value)?));
                }
                ValueTemplate::Map(out)
            }
            _ => ValueTemplate::Literal(Json(node.to_json())),
        })
    }

    fn string(&mut self, node: &Spanned, what: &str) -> Option<String> {
        match node.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                let found = node.type_name();
                self.error(
                    node.span,
                    format!("{what} must be a string, found {found}"),
                    None,
                );
                None
            }
        }
    }

    fn boolean(&mut self, node: &Spanned, what: &str) -> Option<bool> {
        match node.value {
            Value::Bool(b) => Some(b),
            _ => {
                let found = node.type_name();
                self.error(
                    node.span,
                    format!("{what} must be true or false, found {found}"),
                    None,
                );
                None
            }
        }
    }

    fn count(&mut self, node: &Spanned, what: &str, min: i64) -> Option<u32> {
        match node.value {
            Value::Int(i) if i >= min && i <= i64::from(u32::MAX) => Some(i as u32),
            Value::Int(i) => {
                self.error(
                    node.span,
                    format!("{what} must be at least {min}, found {i}"),
                    None,
                );
                None
            }
            _ => {
                let found = node.type_name();
                self.error(
                    node.span,
                    format!("{what} must be an integer, found {found}"),
                    None,
                );
                None
            }
        }
    }

    fn duration(&mut self, node: &Spanned, what: &str, allow_zero: bool) -> Option<u64> {
        let ms = match &node.value {
            Value::Int(i) if *i >= 0 => Some(*i as u64),
            Value::String(s) => parse_duration_ms(s),
            _ => None,
        };
        match ms {
            None => {
                self.error(
                    node.span,
                    format!("{what} must be milliseconds or a duration, found {}", describe(node)),
                    Some("write an integer of milliseconds, or a duration like `500ms`, `5s`, `2m`, `1h`".to_owned()),
                );
                None
            }
            Some(0) if !allow_zero => {
                self.error(node.span, format!("{what} must be longer than 0"), None);
                None
            }
            Some(ms) if ms > DURATION_MS_MAX => {
                self.error(node.span, format!("{what} is longer than 10 years"), None);
                None
            }
            Some(ms) => Some(ms),
        }
    }

    fn identifier(&mut self, node: &Spanned, what: &str) -> Option<String> {
        let text = self.string(node, what)?;
        if is_identifier(&text) {
            Some(text)
        } else {
            self.error(
                node.span,
                format!("{what} `{text}` is not a valid name"),
                Some("use letters, digits and `_`, starting with a letter, so templates can read it as `state.NAME`".to_owned()),
            );
            None
        }
    }

    fn string_list(&mut self, node: &Spanned, what: &str) -> Vec<String> {
        match &node.value {
            Value::String(s) => vec![s.clone()],
            Value::Seq(items) => items
                .iter()
                .filter_map(|item| self.string(item, what))
                .collect(),
            _ => {
                let found = node.type_name();
                self.error(
                    node.span,
                    format!("{what} must be a list of names, found {found}"),
                    None,
                );
                Vec::new()
            }
        }
    }

    /// Splits a node's option mapping, reporting unknown options.
    fn options<'a>(
        &mut self,
        node_type: &str,
        entries: &'a [(Spanned, Spanned)],
        allowed: &[&str],
    ) -> HashMap<&'a str, &'a Spanned> {
        let mut found = HashMap::new();
        for (key, value) in entries {
            let name = key.as_str().unwrap_or_default();
            if allowed.contains(&name) {
                found.insert(name, value);
            } else {
                let hint = match closest(name, allowed) {
                    Some(close) => format!("did you mean `{close}`?"),
                    None => format!("`{node_type}` accepts: {}", allowed.join(", ")),
                };
                self.error(
                    key.span,
                    format!("unknown field `{name}` in `{node_type}`"),
                    Some(hint),
                );
            }
        }
        found
    }

    /// The value of a duration field that may be written by either of two names (`timeout`
    /// or `timeout_ms`; the short one is design.md's word, the long one says its unit when
    /// given a bare number). Both at once is an error at the second.
    fn either<'a>(
        &mut self,
        options: &HashMap<&str, &'a Spanned>,
        name: &str,
        long: &str,
    ) -> Option<(&'a Spanned, String)> {
        match (options.get(name), options.get(long)) {
            (Some(_), Some(second)) => {
                self.error(
                    second.span,
                    format!("`{name}` and `{long}` are the same field; give one"),
                    None,
                );
                None
            }
            (Some(node), None) => Some((node, format!("`{name}`"))),
            (None, Some(node)) => Some((node, format!("`{long}`"))),
            (None, None) => None,
        }
    }

    /// An optional duration field written `name` or `long` (see [`Parser::either`]).
    fn optional_duration(
        &mut self,
        options: &HashMap<&str, &Spanned>,
        name: &str,
        long: &str,
    ) -> Option<u64> {
        let (node, what) = self.either(options, name, long)?;
        self.duration(node, &what, false)
    }

    fn definition(&mut self, document: &Spanned) -> Option<Definition> {
        let Value::Map(entries) = &document.value else {
            let found = document.type_name();
            self.error(
                document.span,
                format!("a flow must be a mapping with `name` and `tree`, found {found}"),
                None,
            );
            return None;
        };
        let options = self.options("flow", entries, TOP_LEVEL_KEYS);
        let name = match options.get("name") {
            Some(node) => {
                let name = self.string(node, "`name`");
                if let Some(name) = &name
                    && !is_flow_name(name)
                {
                    self.error(
                        node.span,
                        format!("flow name `{name}` is not valid"),
                        Some("use letters, digits, `_`, `-` and `.`".to_owned()),
                    );
                }
                name
            }
            None => {
                self.error(
                    document.span,
                    "missing field `name`",
                    Some("every flow starts with `name: my-flow`".to_owned()),
                );
                None
            }
        };
        let description = options
            .get("description")
            .and_then(|node| self.string(node, "`description`"));
        let mut input = options
            .get("input")
            .map(|node| self.inputs(node))
            .unwrap_or_default();
        let interests = match options.get("on") {
            Some(node) => self.interests(node),
            None => Vec::new(),
        };
        if !interests.is_empty() && !input.iter().any(|field| field.name == "event") {
            // A flow that starts itself receives what started it at `input.event`.
            input.push(InputField {
                name: "event".to_owned(),
                schema: Schema::compile(&serde_json::json!({})).expect("the empty schema compiles"),
                default: Some(Json(serde_json::json!({}))),
                span: options.get("on").map_or(document.span, |n| n.span),
            });
        }
        if let Some(node) = options.get("budget") {
            self.budget(node);
        }
        let tree = match options.get("tree") {
            Some(node) => self.node(node),
            None => {
                self.error(
                    document.span,
                    "missing field `tree`",
                    Some(
                        "`tree:` holds the behavior tree, e.g. `tree: {sequence: [...]}`"
                            .to_owned(),
                    ),
                );
                None
            }
        };
        let places = match options.get("places") {
            Some(node) => match crate::place::parse_places(node) {
                Ok(places) => places,
                Err(errors) => {
                    for error in errors {
                        self.error(error.span, error.message, error.hint);
                    }
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        let patches = match options.get("patches") {
            None => super::PatchPolicy::Review,
            Some(node) => match node.as_str() {
                Some("review") => super::PatchPolicy::Review,
                Some("apply_on_success") => super::PatchPolicy::ApplyOnSuccess,
                _ => {
                    self.error(
                        node.span,
                        format!("`patches` must be review or apply_on_success, found {}", describe(node)),
                        Some("review (the default) leaves patches for `palm patches apply`; apply_on_success lands them when the job succeeds".to_owned()),
                    );
                    super::PatchPolicy::Review
                }
            },
        };
        let tags = match options.get("tags") {
            Some(node) => self.tags(node),
            None => Vec::new(),
        };
        let declared = match options.get("authority") {
            Some(node) => match node.as_str().and_then(super::Authority::parse) {
                Some(authority) => Some((authority, node.span)),
                None => {
                    self.error(
                        node.span,
                        format!("`authority` must be observe, edit or execute, found {}", describe(node)),
                        Some("the most the flow's agents may do: observe reads, edit changes files, execute also runs commands".to_owned()),
                    );
                    None
                }
            },
            None => None,
        };
        let tree = tree?;
        let authority = self.authority(&tree, declared);
        Some(Definition {
            name: name?,
            description,
            input,
            tree,
            places,
            interests,
            patches,
            tags,
            authority,
            authority_declared: declared.is_some(),
            origin: self.origin.clone(),
        })
    }

    /// `tags: [word, ...]`: lower-case words for routing.
    fn tags(&mut self, node: &Spanned) -> Vec<String> {
        let mut tags = Vec::new();
        for tag in self.string_list(node, "`tags`") {
            let clean = tag.trim().to_lowercase();
            if clean.is_empty() || clean.len() > 64 || clean.chars().any(char::is_whitespace) {
                self.error(
                    node.span,
                    format!("tag `{tag}` must be one word of at most 64 characters"),
                    None,
                );
            } else if !tags.contains(&clean) {
                tags.push(clean);
            }
        }
        tags
    }

    /// The authority a flow needs: the highest mode among its agent leaves (a templated
    /// mode counts as execute), checked against a declared `authority`, which must cover
    /// every agent leaf and give each a literal mode.
    fn authority(
        &mut self,
        tree: &Node,
        declared: Option<(super::Authority, Span)>,
    ) -> super::Authority {
        let mut needed = super::Authority::Observe;
        let mut problems = Vec::new();
        tree.walk(&mut |node| {
            // Every agent a node may run: an agent leaf (`call` of the agent provider; its
            // arguments a template: anything), a team's members.
            let modes: Vec<(super::Authority, bool)> = match &node.kind {
                NodeKind::Call(call) if call.provider == AGENT_PROVIDER => match &call.args {
                    ValueTemplate::Map(args) => {
                        let mode = args.iter().find(|(key, _)| key == "mode").map(|(_, v)| v);
                        vec![match mode {
                            None => (super::Authority::Edit, true),
                            Some(ValueTemplate::Text(text)) => {
                                match super::Authority::parse(text.source()) {
                                    Some(mode) => (mode, true),
                                    None => (super::Authority::Execute, false),
                                }
                            }
                            Some(_) => (super::Authority::Execute, false),
                        }]
                    }
                    _ => vec![(super::Authority::Execute, false)],
                },
                NodeKind::Team(team) => team
                    .members
                    .iter()
                    .map(|m| {
                        (
                            super::Authority::parse(&m.mode).unwrap_or(super::Authority::Execute),
                            true,
                        )
                    })
                    .collect(),
                _ => Vec::new(),
            };
            for (mode, literal) in modes {
            needed = needed.max(mode);
            if let Some((ceiling, _)) = declared {
                if !literal {
                    problems.push((
                        node.span,
                        format!("the flow declares `authority: {}`, so this agent's `mode` must be written out (observe, edit or execute), not a template", ceiling.as_str()),
                    ));
                } else if mode > ceiling {
                    problems.push((
                        node.span,
                        format!("this agent runs in {} mode, more than the flow's `authority: {}`", mode.as_str(), ceiling.as_str()),
                    ));
                }
            }
            }
        });
        for (span, message) in problems {
            self.error(
                span,
                message,
                Some("raise the flow's `authority`, or lower the agent's `mode`".to_owned()),
            );
        }
        declared.map_or(needed, |(ceiling, _)| ceiling)
    }

    /// `on:` — one trigger entry, or a list of them.
    fn interests(&mut self, node: &Spanned) -> Vec<InterestSpec> {
        let entries: Vec<&Spanned> = match &node.value {
            Value::Seq(items) => items.iter().collect(),
            Value::Map(_) => vec![node],
            _ => {
                let found = node.type_name();
                self.error(
                    node.span,
                    format!("`on` must be a trigger mapping or a list of them, found {found}"),
                    Some("e.g. `on: {job: {flow: build, status: succeeded}}` or `on: {schedule: {every: 5m}}`".to_owned()),
                );
                return Vec::new();
            }
        };
        self.in_interest = true;
        let specs = entries
            .into_iter()
            .filter_map(|entry| self.interest(entry))
            .collect();
        self.in_interest = false;
        specs
    }

    fn interest(&mut self, node: &Spanned) -> Option<InterestSpec> {
        let Value::Map(entries) = &node.value else {
            let found = node.type_name();
            self.error(
                node.span,
                format!("an `on` entry must be a mapping, found {found}"),
                None,
            );
            return None;
        };
        let options = self.options(
            "on",
            entries,
            &[
                "job",
                "place",
                "schedule",
                "event",
                "webhook",
                "coalesce_key",
                "debounce",
                "not_before",
            ],
        );
        let kinds: Vec<&str> = ["job", "place", "schedule", "event", "webhook"]
            .into_iter()
            .filter(|k| options.contains_key(k))
            .collect();
        let kind = match kinds.as_slice() {
            [kind] => *kind,
            [] => {
                self.error(
                    node.span,
                    "an `on` entry needs a trigger",
                    Some("give one of `job`, `place`, `schedule`, `event`, `webhook`".to_owned()),
                );
                return None;
            }
            [_, second, ..] => {
                let span = options[second].span;
                self.error(
                    span,
                    "an `on` entry has exactly one trigger",
                    Some("write two entries in a list to listen to both".to_owned()),
                );
                return None;
            }
        };
        let value = options[kind];
        // Every part is checked, so one pass reports every problem of the entry.
        let trigger = match kind {
            "job" => self.job_trigger(value),
            "place" => self.place_trigger(value),
            "schedule" => self.schedule_trigger(value),
            // A webhook is an event that arrives over HTTP (`POST /v1/webhooks/NAME`, its
            // body the data); `palm emit NAME` and `POST /v1/events/NAME` send the same.
            "webhook" => self
                .string(value, "`webhook`")
                .map(|name| Trigger::Event { name }),
            _ => self
                .string(value, "`event`")
                .map(|name| Trigger::Event { name }),
        };
        let coalesce_key = options
            .get("coalesce_key")
            .map(|node| self.template(node, "`coalesce_key`"));
        let debounce_ms = options
            .get("debounce")
            .map(|node| self.duration(node, "`debounce`", true));
        let not_before_ms = options
            .get("not_before")
            .map(|node| self.duration(node, "`not_before`", true));
        Some(InterestSpec {
            trigger: trigger?,
            coalesce_key: match coalesce_key {
                Some(template) => Some(template?),
                None => None,
            },
            debounce_ms: debounce_ms.unwrap_or(Some(0))?,
            not_before_ms: not_before_ms.unwrap_or(Some(0))?,
            span: node.span,
        })
    }

    fn job_trigger(&mut self, node: &Spanned) -> Option<Trigger> {
        if let Some(flow) = node.as_str() {
            return Some(Trigger::Job {
                flow: flow.to_owned(),
                status: EndFilter::Succeeded,
                filter: None,
            });
        }
        let Value::Map(entries) = &node.value else {
            self.error(
                node.span,
                "`job` must be a flow name or {flow, status, where}",
                None,
            );
            return None;
        };
        let options = self.options("job trigger", entries, &["flow", "status", "where"]);
        let Some(flow) = options.get("flow") else {
            self.error(node.span, "missing field `flow` in the `job` trigger", None);
            return None;
        };
        let flow = self.string(flow, "`flow`")?;
        let status = match options.get("status") {
            None => EndFilter::Succeeded,
            Some(status) => match status.as_str() {
                Some("succeeded") => EndFilter::Succeeded,
                Some("failed") => EndFilter::Failed,
                Some("cancelled") => EndFilter::Cancelled,
                Some("any") => EndFilter::Any,
                _ => {
                    self.error(
                        status.span,
                        "unknown job status for a trigger",
                        Some("use succeeded, failed, cancelled or any".to_owned()),
                    );
                    return None;
                }
            },
        };
        let filter = match options.get("where") {
            Some(node) => Some(self.expression(node, "`where`")?),
            None => None,
        };
        Some(Trigger::Job {
            flow,
            status,
            filter,
        })
    }

    fn place_trigger(&mut self, node: &Spanned) -> Option<Trigger> {
        if let Some(place) = node.as_str() {
            return Some(Trigger::Place {
                place: place.to_owned(),
                state: PlaceFilter::Ready,
            });
        }
        let Value::Map(entries) = &node.value else {
            self.error(
                node.span,
                "`place` must be a place name or {name, state}",
                None,
            );
            return None;
        };
        let options = self.options("place trigger", entries, &["name", "state"]);
        let Some(name) = options.get("name") else {
            self.error(
                node.span,
                "missing field `name` in the `place` trigger",
                None,
            );
            return None;
        };
        let place = self.string(name, "`name`")?;
        let state = match options.get("state").map(|s| (s.as_str(), s.span)) {
            None | Some((Some("ready"), _)) => PlaceFilter::Ready,
            Some((Some("unready"), _)) => PlaceFilter::Unready,
            Some((Some("any"), _)) => PlaceFilter::Any,
            Some((_, span)) => {
                self.error(
                    span,
                    "unknown place state for a trigger",
                    Some("use ready, unready or any".to_owned()),
                );
                return None;
            }
        };
        Some(Trigger::Place { place, state })
    }

    fn schedule_trigger(&mut self, node: &Spanned) -> Option<Trigger> {
        let cron_or_every = |parser: &mut Parser, node: &Spanned| -> Option<When> {
            let text = node.as_str()?;
            if text.split_whitespace().count() >= 5 || text.starts_with('@') {
                match Cron::parse(text) {
                    Ok(cron) => Some(When::Cron(cron, Zone::Fixed(0))),
                    Err(err) => {
                        parser.error(node.span, format!("bad cron expression: {err}"), None);
                        None
                    }
                }
            } else {
                parser.duration(node, "`schedule`", false).map(When::Every)
            }
        };
        match &node.value {
            Value::String(_) => {
                let when = cron_or_every(self, node)?;
                Some(Trigger::Schedule {
                    when,
                    catch_up: CatchUp::Once,
                })
            }
            Value::Map(entries) => {
                let options =
                    self.options("schedule", entries, &["every", "cron", "tz", "catch_up"]);
                let mut when = match (options.get("every"), options.get("cron")) {
                    (Some(every), None) => When::Every(self.duration(every, "`every`", false)?),
                    (None, Some(cron)) => {
                        let text = self.string(cron, "`cron`")?;
                        match Cron::parse(&text) {
                            Ok(cron) => When::Cron(cron, Zone::Fixed(0)),
                            Err(err) => {
                                self.error(cron.span, format!("bad cron expression: {err}"), None);
                                return None;
                            }
                        }
                    }
                    (Some(_), Some(cron)) => {
                        self.error(
                            cron.span,
                            "a schedule has `every` or `cron`, not both",
                            None,
                        );
                        return None;
                    }
                    (None, None) => {
                        self.error(node.span, "a schedule needs `every` or `cron`", Some("e.g. `schedule: {every: 5m}` or `schedule: {cron: \"0 9 * * mon-fri\", tz: \"Europe/Paris\"}`".to_owned()));
                        return None;
                    }
                };
                if let Some(tz) = options.get("tz") {
                    let text = self.string(tz, "`tz`")?;
                    match (&mut when, Zone::parse(&text)) {
                        (When::Cron(_, zone), Ok(parsed)) => *zone = parsed,
                        (When::Every(_), Ok(_)) => {
                            self.error(tz.span, "`tz` applies to `cron` schedules", None)
                        }
                        (_, Err(err)) => self.error(tz.span, err, None),
                    }
                }
                let catch_up = match options.get("catch_up") {
                    None => CatchUp::Once,
                    Some(node) => match node.as_str() {
                        Some("skip") => CatchUp::Skip,
                        Some("once") => CatchUp::Once,
                        Some("all") => CatchUp::All,
                        _ => {
                            self.error(
                                node.span,
                                "unknown catch-up policy",
                                Some("use skip, once or all".to_owned()),
                            );
                            return None;
                        }
                    },
                };
                Some(Trigger::Schedule { when, catch_up })
            }
            _ => {
                self.error(node.span, "`schedule` must be a duration, a cron expression or {every|cron, tz, catch_up}", None);
                None
            }
        }
    }

    fn inputs(&mut self, node: &Spanned) -> Vec<InputField> {
        let Value::Map(entries) = &node.value else {
            let found = node.type_name();
            self.error(
                node.span,
                format!("`input` must be a mapping of field names to schemas, found {found}"),
                None,
            );
            return Vec::new();
        };
        let mut fields = Vec::new();
        for (key, spec) in entries {
            let Some(name) = self.identifier(key, "input field") else {
                continue;
            };
            let mut schema_json = match &spec.value {
                // `who: string` is shorthand for `who: {type: string}`.
                Value::String(type_name) => serde_json::json!({ "type": type_name }),
                Value::Map(_) => spec.to_json(),
                Value::Null => serde_json::json!({}),
                _ => {
                    let found = spec.type_name();
                    self.error(
                        spec.span,
                        format!(
                            "input `{name}` must be a schema mapping or a type name, found {found}"
                        ),
                        None,
                    );
                    continue;
                }
            };
            let default = schema_json
                .as_object_mut()
                .and_then(|object| object.remove("default"))
                .map(Json);
            let schema = match Schema::compile(&schema_json) {
                Ok(schema) => schema,
                Err(err) => {
                    self.error(
                        spec.span,
                        format!("input `{name}`: invalid schema: {err}"),
                        None,
                    );
                    continue;
                }
            };
            if let Some(default) = &default {
                for violation in schema.validate(default) {
                    self.error(
                        spec.span,
                        format!("input `{name}`: default does not match its schema: {violation}"),
                        None,
                    );
                }
            }
            fields.push(InputField {
                name,
                schema,
                default,
                span: key.span,
            });
        }
        fields
    }

    fn node(&mut self, node: &Spanned) -> Option<Node> {
        match &node.value {
            Value::String(bare) => match bare.as_str() {
                "succeed" => Some(Node {
                    kind: NodeKind::Succeed,
                    name: None,
                    span: node.span,
                }),
                "fail" => Some(Node {
                    kind: NodeKind::Fail(None),
                    name: None,
                    span: node.span,
                }),
                other if NODE_TYPES.contains(&other) => {
                    self.error(
                        node.span,
                        format!("`{other}` needs fields"),
                        Some(format!("write it as a mapping, e.g. `{other}: {{...}}`")),
                    );
                    None
                }
                other => {
                    self.unknown_type(node.span, other);
                    None
                }
            },
            Value::Map(entries) => {
                let types: Vec<&(Spanned, Spanned)> = entries
                    .iter()
                    .filter(|(key, _)| NODE_TYPES.contains(&key.as_str().unwrap_or_default()))
                    .collect();
                match types.as_slice() {
                    [] => {
                        let (key, _) = entries.first()?;
                        let name = key.as_str().unwrap_or_default().to_owned();
                        self.unknown_type(key.span, &name);
                        None
                    }
                    [(key, body)] => {
                        if entries.len() > 1 {
                            let extra: Vec<&str> = entries
                                .iter()
                                .filter(|(k, _)| k.as_str() != key.as_str())
                                .map(|(k, _)| k.as_str().unwrap_or_default())
                                .collect();
                            let node_type = key.as_str().unwrap_or_default();
                            self.error(
                                node.span,
                                format!("a node is a mapping with one key, its type; found `{node_type}` and `{}`", extra.join("`, `")),
                                Some(format!("put options inside `{node_type}:`, e.g. `{node_type}: {{ name: ..., ... }}`")),
                            );
                        }
                        let node_type = key.as_str().unwrap_or_default().to_owned();
                        self.typed_node(&node_type, key.span, body)
                    }
                    [(first, _), (second, _), ..] => {
                        let a = first.as_str().unwrap_or_default();
                        let b = second.as_str().unwrap_or_default();
                        self.error(
                            second.span,
                            format!("a node has exactly one type; found both `{a}` and `{b}`"),
                            Some("wrap several nodes in a `sequence`".to_owned()),
                        );
                        None
                    }
                }
            }
            _ => {
                let found = node.type_name();
                self.error(
                    node.span,
                    format!("expected a node, found {found}"),
                    Some("a node is a mapping like `run: {cmd: ...}`".to_owned()),
                );
                None
            }
        }
    }

    fn unknown_type(&mut self, span: Span, name: &str) {
        let hint = match closest(name, NODE_TYPES) {
            Some(close) => format!("did you mean `{close}`?"),
            None => format!("node types: {}", NODE_TYPES.join(", ")),
        };
        self.error(span, format!("unknown node type `{name}`"), Some(hint));
    }

    fn typed_node(&mut self, node_type: &str, span: Span, body: &Spanned) -> Option<Node> {
        match node_type {
            "sequence" | "selector" => self.sequence_like(node_type, span, body),
            "parallel" => self.parallel(span, body),
            "for_each" => self.for_each(span, body),
            "invert" | "force_success" | "force_failure" => {
                self.simple_decorator(node_type, span, body)
            }
            "retry" | "until_success" => self.retry(node_type, span, body),
            "repeat" => self.repeat(span, body),
            "timeout" => self.timeout(span, body),
            "run" => self.run(span, body),
            "wait" => self.wait(span, body),
            "sleep" => self.sleep(span, body),
            "set" => self.set(span, body),
            "check" => self.check(span, body),
            "succeed" => self.succeed(span, body),
            "fail" => self.fail(span, body),
            "call" => self.call(span, body),
            "agent" => self.agent(span, body),
            "spawn" => self.spawn(span, body),
            "subflow" => self.subflow(span, body),
            "verify" => self.verify(span, body),
            "until_green" => self.until_green(span, body),
            "gate" => self.gate(span, body),
            "loop" => self.loop_node(span, body),
            "best_of" => self.best_of(span, body),
            "team" => self.team(span, body),
            "wizard" => self.wizard(span, body),
            _ => {
                self.unknown_type(span, node_type);
                None
            }
        }
    }

    fn name_option(&mut self, options: &HashMap<&str, &Spanned>) -> Option<String> {
        options
            .get("name")
            .and_then(|node| self.string(node, "`name`"))
    }

    fn children(&mut self, node: &Spanned, parent: &str) -> Vec<Node> {
        match &node.value {
            Value::Seq(items) => items.iter().filter_map(|item| self.node(item)).collect(),
            _ => {
                let found = node.type_name();
                self.error(
                    node.span,
                    format!("`{parent}` children must be a list, found {found}"),
                    None,
                );
                Vec::new()
            }
        }
    }

    /// A composite body: either a list of children or a mapping with options and `children`.
    fn composite_body<'a>(
        &mut self,
        node_type: &str,
        span: Span,
        body: &'a Spanned,
        allowed: &[&str],
    ) -> Option<(HashMap<&'a str, &'a Spanned>, Vec<Node>)> {
        match &body.value {
            Value::Seq(_) => Some((HashMap::new(), self.children(body, node_type))),
            Value::Map(entries) => {
                let options = self.options(node_type, entries, allowed);
                let children = match options.get("children") {
                    Some(list) => self.children(list, node_type),
                    None => {
                        self.error(span, format!("missing field `children` in `{node_type}`"), Some(format!("`{node_type}:` takes a list of nodes, or a mapping with options and `children:`")));
                        return None;
                    }
                };
                Some((options, children))
            }
            _ => {
                let found = body.type_name();
                self.error(body.span, format!("`{node_type}` takes a list of children or a mapping with `children`, found {found}"), None);
                None
            }
        }
    }

    fn sequence_like(&mut self, node_type: &str, span: Span, body: &Spanned) -> Option<Node> {
        let (options, children) =
            self.composite_body(node_type, span, body, &["name", "memory", "children"])?;
        let memory = match options.get("memory") {
            Some(node) => self.boolean(node, "`memory`")?,
            None => true,
        };
        let name = self.name_option(&options);
        let kind = if node_type == "sequence" {
            NodeKind::Sequence { memory, children }
        } else {
            NodeKind::Selector { memory, children }
        };
        Some(Node { kind, name, span })
    }

    fn threshold(&mut self, node: &Spanned, what: &str, children: usize) -> Option<Threshold> {
        let threshold = match &node.value {
            Value::String(s) if s == "all" => Threshold::All,
            Value::String(s) if s == "any" => Threshold::Any,
            Value::Int(n) if *n >= 1 => Threshold::AtLeast(*n as u32),
            _ => {
                self.error(
                    node.span,
                    format!(
                        "{what} must be `all`, `any` or a count ≥ 1, found {}",
                        describe(node)
                    ),
                    None,
                );
                return None;
            }
        };
        if let Threshold::AtLeast(n) = threshold
            && n as usize > children
        {
            self.error(
                node.span,
                format!("{what} is {n} but the parallel has {children} children"),
                None,
            );
            return None;
        }
        Some(threshold)
    }

    fn parallel(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let (options, children) = self.composite_body(
            "parallel",
            span,
            body,
            &["name", "success", "failure", "children"],
        )?;
        let success = match options.get("success") {
            Some(node) => self.threshold(node, "`success`", children.len())?,
            None => Threshold::All,
        };
        let failure = match options.get("failure") {
            Some(node) => self.threshold(node, "`failure`", children.len())?,
            None => Threshold::Any,
        };
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Parallel {
                success,
                failure,
                children,
            },
            name,
            span,
        })
    }

    /// A decorator body: a mapping with options and the child under `do`.
    fn decorator_body<'a>(
        &mut self,
        node_type: &str,
        span: Span,
        body: &'a Spanned,
        allowed: &[&str],
    ) -> Option<(HashMap<&'a str, &'a Spanned>, Option<Node>)> {
        let Value::Map(entries) = &body.value else {
            let found = body.type_name();
            self.error(
                body.span,
                format!("`{node_type}` takes a mapping with its child under `do`, found {found}"),
                Some(format!("`{node_type}: {{ do: {{ run: ... }} }}`")),
            );
            return None;
        };
        let options = self.options(node_type, entries, allowed);
        let child = match options.get("do") {
            Some(node) => self.node(node),
            None => {
                self.error(
                    span,
                    format!("missing field `do` in `{node_type}`"),
                    Some(format!(
                        "a decorator wraps one child: `{node_type}: {{ do: ... }}`"
                    )),
                );
                None
            }
        };
        Some((options, child))
    }

    fn simple_decorator(&mut self, node_type: &str, span: Span, body: &Spanned) -> Option<Node> {
        let (options, child) = self.decorator_body(node_type, span, body, &["name", "do"])?;
        let name = self.name_option(&options);
        let child = Box::new(child?);
        let kind = match node_type {
            "invert" => NodeKind::Invert(child),
            "force_success" => NodeKind::ForceSuccess(child),
            _ => NodeKind::ForceFailure(child),
        };
        Some(Node { kind, name, span })
    }

    fn backoff(&mut self, options: &HashMap<&str, &Spanned>) -> Option<Backoff> {
        let initial_ms = match self.either(options, "backoff", "backoff_ms") {
            Some((node, what)) => self.duration(node, &what, true)?,
            None => 0,
        };
        let factor = match options.get("backoff_factor") {
            Some(node) => match node.value {
                Value::Int(i) if i >= 1 => i as f64,
                Value::Float(f) if (1.0..=100.0).contains(&f) => f,
                _ => {
                    self.error(
                        node.span,
                        format!(
                            "`backoff_factor` must be a number from 1 to 100, found {}",
                            describe(node)
                        ),
                        None,
                    );
                    return None;
                }
            },
            None => 2.0,
        };
        let max_ms = match options.get("backoff_max_ms") {
            Some(node) => self.duration(node, "`backoff_max_ms`", false)?,
            None => 60_000.max(initial_ms),
        };
        Some(Backoff {
            initial_ms,
            factor,
            max_ms,
        })
    }

    fn retry(&mut self, node_type: &str, span: Span, body: &Spanned) -> Option<Node> {
        let allowed: &[&str] = if node_type == "retry" {
            &[
                "name",
                "attempts",
                "backoff",
                "backoff_ms",
                "backoff_factor",
                "backoff_max_ms",
                "do",
            ]
        } else {
            &[
                "name",
                "backoff",
                "backoff_ms",
                "backoff_factor",
                "backoff_max_ms",
                "do",
            ]
        };
        let (options, child) = self.decorator_body(node_type, span, body, allowed)?;
        let attempts = if node_type == "retry" {
            match options.get("attempts") {
                Some(node) => Some(self.count(node, "`attempts`", 1)?),
                None => {
                    self.error(span, "missing field `attempts` in `retry`", Some("`retry: { attempts: 3, do: ... }`; use `until_success` to retry without bound".to_owned()));
                    return None;
                }
            }
        } else {
            None
        };
        let backoff = self.backoff(&options)?;
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Retry {
                attempts,
                backoff,
                body: Box::new(child?),
            },
            name,
            span,
        })
    }

    fn repeat(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let (options, child) = self.decorator_body("repeat", span, body, &["name", "n", "do"])?;
        let times = match options.get("n") {
            Some(node) => self.count(node, "`n`", 1)?,
            None => {
                self.error(
                    span,
                    "missing field `n` in `repeat`",
                    Some("`repeat: { n: 3, do: ... }`".to_owned()),
                );
                return None;
            }
        };
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Repeat {
                times,
                body: Box::new(child?),
            },
            name,
            span,
        })
    }

    fn timeout(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let (options, child) =
            self.decorator_body("timeout", span, body, &["name", "duration", "ms", "do"])?;
        let ms = match self.either(&options, "duration", "ms") {
            Some((node, what)) => self.duration(node, &what, false)?,
            // Both names given: `either` has reported it at the second.
            None if options.contains_key("duration") => return None,
            None => {
                self.error(
                    span,
                    "missing field `duration` in `timeout`",
                    Some("`timeout: { duration: 5s, do: ... }` (or `ms: 5000`)".to_owned()),
                );
                return None;
            }
        };
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Timeout {
                ms,
                body: Box::new(child?),
            },
            name,
            span,
        })
    }

    fn for_each(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let Value::Map(entries) = &body.value else {
            let found = body.type_name();
            self.error(
                body.span,
                format!("`for_each` takes a mapping with `items` and `do`, found {found}"),
                None,
            );
            return None;
        };
        let options = self.options(
            "for_each",
            entries,
            &["name", "items", "as", "max_concurrency", "do"],
        );
        let items = match options.get("items") {
            Some(node) => self.expression(node, "`items`"),
            None => {
                self.error(
                    span,
                    "missing field `items` in `for_each`",
                    Some("`items:` is an expression giving a list, e.g. `input.files`".to_owned()),
                );
                None
            }
        };
        let binding = match options.get("as") {
            Some(node) => {
                let binding = self.identifier(node, "`as`")?;
                if ROOT_NAMES.contains(&binding.as_str()) {
                    self.error(
                        node.span,
                        format!("`as: {binding}` would hide the job's `{binding}`"),
                        Some("pick another name, e.g. `item`".to_owned()),
                    );
                    return None;
                }
                binding
            }
            None => "item".to_owned(),
        };
        let max_concurrency = match options.get("max_concurrency") {
            Some(node) => self.count(node, "`max_concurrency`", 1)?,
            None => 1,
        };
        self.bindings.push(binding.clone());
        let child = match options.get("do") {
            Some(node) => self.node(node),
            None => {
                self.error(
                    span,
                    "missing field `do` in `for_each`",
                    Some("`do:` is the node run for each item".to_owned()),
                );
                None
            }
        };
        self.bindings.pop();
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::ForEach {
                items: items?,
                binding,
                max_concurrency,
                body: Box::new(child?),
            },
            name,
            span,
        })
    }

    fn leaf_options<'a>(
        &mut self,
        node_type: &str,
        body: &'a Spanned,
        allowed: &[&str],
    ) -> Option<HashMap<&'a str, &'a Spanned>> {
        match &body.value {
            Value::Map(entries) => Some(self.options(node_type, entries, allowed)),
            _ => {
                let found = body.type_name();
                self.error(
                    body.span,
                    format!("`{node_type}` takes a mapping, found {found}"),
                    None,
                );
                None
            }
        }
    }

    fn required<'a>(
        &mut self,
        options: &HashMap<&str, &'a Spanned>,
        field: &str,
        node_type: &str,
        span: Span,
        hint: &str,
    ) -> Option<&'a Spanned> {
        match options.get(field) {
            Some(node) => Some(node),
            None => {
                self.error(
                    span,
                    format!("missing field `{field}` in `{node_type}`"),
                    Some(hint.to_owned()),
                );
                None
            }
        }
    }

    fn run(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        if let Value::String(_) = body.value {
            let cmd = self.template(body, "`cmd`")?;
            return Some(Node {
                kind: NodeKind::Run(RunSpec {
                    cmd,
                    cwd: None,
                    env: Vec::new(),
                    timeout_ms: None,
                    needs: Vec::new(),
                    place: None,
                    save: None,
                    allow_failure: false,
                }),
                name: None,
                span,
            });
        }
        let options = self.leaf_options(
            "run",
            body,
            &[
                "name",
                "cmd",
                "cwd",
                "env",
                "timeout",
                "timeout_ms",
                "needs",
                "place",
                "save",
                "allow_failure",
            ],
        )?;
        let cmd = self
            .required(
                &options,
                "cmd",
                "run",
                span,
                "`run: { cmd: \"echo hello\" }`",
            )
            .and_then(|node| self.template(node, "`cmd`"));
        let cwd = options
            .get("cwd")
            .and_then(|node| self.template(node, "`cwd`"));
        let mut env = Vec::new();
        if let Some(node) = options.get("env") {
            match &node.value {
                Value::Map(entries) => {
                    for (key, value) in entries {
                        let key = key.as_str().unwrap_or_default().to_owned();
                        if let Some(value) = self.template(value, "an `env` value") {
                            env.push((key, value));
                        }
                    }
                }
                _ => {
                    let found = node.type_name();
                    self.error(
                        node.span,
                        format!("`env` must be a mapping, found {found}"),
                        None,
                    );
                }
            }
        }
        let timeout_ms = self.optional_duration(&options, "timeout", "timeout_ms");
        let needs = options
            .get("needs")
            .map(|node| self.string_list(node, "`needs`"))
            .unwrap_or_default();
        let place = options
            .get("place")
            .and_then(|node| self.string(node, "`place`"));
        let save = options
            .get("save")
            .and_then(|node| self.identifier(node, "`save`"));
        let allow_failure = match options.get("allow_failure") {
            Some(node) => self.boolean(node, "`allow_failure`").unwrap_or(false),
            None => false,
        };
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Run(RunSpec {
                cmd: cmd?,
                cwd,
                env,
                timeout_ms,
                needs,
                place,
                save,
                allow_failure,
            }),
            name,
            span,
        })
    }

    fn wait(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let (options, key_node) = match &body.value {
            Value::String(_) => (HashMap::new(), Some(body)),
            Value::Null => {
                self.error(span, "a `wait` without a key", Some("`wait: { key: approve, prompt: ... }`; `palm continue JOB --key approve` resumes it".to_owned()));
                return None;
            }
            _ => {
                let options = self.leaf_options(
                    "wait",
                    body,
                    &[
                        "name",
                        "key",
                        "prompt",
                        "choices",
                        "schema",
                        "timeout",
                        "timeout_ms",
                    ],
                )?;
                let key = options.get("key").copied();
                if key.is_none() {
                    self.error(
                        span,
                        "a `wait` without a key",
                        Some(
                            "add `key: NAME`; `palm continue JOB --key NAME` resumes it".to_owned(),
                        ),
                    );
                }
                (options, key)
            }
        };
        let key = key_node.and_then(|node| self.identifier(node, "wait `key`"));
        if let (Some(key), Some(node)) = (&key, key_node) {
            self.claim_wait_key(key, node.span);
        }
        let prompt = options
            .get("prompt")
            .and_then(|node| self.template(node, "`prompt`"));
        let choices = match options.get("choices") {
            Some(node) => match &node.value {
                Value::Seq(items) if !items.is_empty() => {
                    items.iter().map(|item| Json(item.to_json())).collect()
                }
                _ => {
                    self.error(node.span, "`choices` must be a non-empty list", None);
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        let schema =
            options
                .get("schema")
                .and_then(|node| match Schema::compile(&node.to_json()) {
                    Ok(schema) => Some(schema),
                    Err(err) => {
                        self.error(node.span, format!("invalid `schema`: {err}"), None);
                        None
                    }
                });
        let timeout_ms = self.optional_duration(&options, "timeout", "timeout_ms");
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Wait(WaitSpec {
                key: key?,
                prompt,
                choices,
                schema,
                timeout_ms,
            }),
            name,
            span,
        })
    }

    /// Records a wait key, refusing a reserved or duplicate one.
    fn claim_wait_key(&mut self, key: &str, span: Span) {
        if ROOT_NAMES.contains(&key) {
            self.error(span, format!("wait key `{key}` is reserved"), None);
        } else if let Some(first) = self.wait_keys.get(key) {
            let first = *first;
            self.error(
                span,
                format!("duplicate wait key `{key}`"),
                Some(format!(
                    "first used at line {}, column {}; a continue must name exactly one wait",
                    first.line, first.col
                )),
            );
        } else {
            self.wait_keys.insert(key.to_owned(), span);
        }
    }

    fn sleep(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let (ms, name) = match &body.value {
            Value::Int(_) | Value::String(_) => (self.duration(body, "`sleep`", true)?, None),
            _ => {
                let options = self.leaf_options("sleep", body, &["name", "ms"])?;
                let ms = self.required(
                    &options,
                    "ms",
                    "sleep",
                    span,
                    "`sleep: { ms: 500 }` or `sleep: 5s`",
                )?;
                (self.duration(ms, "`ms`", true)?, self.name_option(&options))
            }
        };
        Some(Node {
            kind: NodeKind::Sleep { ms },
            name,
            span,
        })
    }

    fn set(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let Value::Map(entries) = &body.value else {
            let found = body.type_name();
            self.error(
                body.span,
                format!("`set` takes a mapping of state keys to values, found {found}"),
                Some("`set: { greeting: \"hello {{ input.who }}\" }`".to_owned()),
            );
            return None;
        };
        if entries.is_empty() {
            self.error(span, "`set` with nothing to set", None);
            return None;
        }
        let mut writes = Vec::new();
        for (key, value) in entries {
            let key = self.identifier(key, "state key");
            let value = self.value_template(value);
            if let (Some(key), Some(value)) = (key, value) {
                writes.push((key, value));
            }
        }
        Some(Node {
            kind: NodeKind::Set(writes),
            name: None,
            span,
        })
    }

    fn check(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let (expr_node, name) = match &body.value {
            Value::String(_) => (body, None),
            _ => {
                let options = self.leaf_options("check", body, &["name", "expr"])?;
                let node =
                    self.required(&options, "expr", "check", span, "`check: \"state.x == 1\"`")?;
                (node, self.name_option(&options))
            }
        };
        let expr = self.expression(expr_node, "`check`")?;
        Some(Node {
            kind: NodeKind::Check(expr),
            name,
            span,
        })
    }

    fn succeed(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let name = match &body.value {
            Value::Null => None,
            _ => {
                let options = self.leaf_options("succeed", body, &["name"])?;
                self.name_option(&options)
            }
        };
        Some(Node {
            kind: NodeKind::Succeed,
            name,
            span,
        })
    }

    fn fail(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let (message, name) = match &body.value {
            Value::Null => (None, None),
            Value::String(_) => (Some(self.template(body, "`fail` message")?), None),
            _ => {
                let options = self.leaf_options("fail", body, &["name", "message"])?;
                let message = options
                    .get("message")
                    .and_then(|node| self.template(node, "`message`"));
                (message, self.name_option(&options))
            }
        };
        Some(Node {
            kind: NodeKind::Fail(message),
            name,
            span,
        })
    }

    fn call(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let options = self.leaf_options(
            "call",
            body,
            &[
                "name",
                "provider",
                "args",
                "save",
                "needs",
                "timeout",
                "timeout_ms",
            ],
        )?;
        let provider = self
            .required(
                &options,
                "provider",
                "call",
                span,
                "`call: { provider: http, args: {...} }`",
            )
            .and_then(|node| self.string(node, "`provider`"));
        let args = match options.get("args") {
            Some(node) => self.value_template(node),
            None => Some(ValueTemplate::Map(Vec::new())),
        };
        let save = options
            .get("save")
            .and_then(|node| self.identifier(node, "`save`"));
        let needs = options
            .get("needs")
            .map(|node| self.string_list(node, "`needs`"))
            .unwrap_or_default();
        let timeout_ms = self.optional_duration(&options, "timeout", "timeout_ms");
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Call(CallSpec {
                provider: provider?,
                args: args?,
                save,
                needs,
                timeout_ms,
            }),
            name,
            span,
        })
    }

    /// `budget: {usd: N, turns: N}`: what all the agent runs of one job may spend together.
    fn budget(&mut self, node: &Spanned) {
        let Value::Map(entries) = &node.value else {
            self.error(
                node.span,
                "`budget` takes a mapping like `{usd: 5, turns: 200}`",
                None,
            );
            return;
        };
        let options = self.options("budget", entries, &["usd", "turns"]);
        if let Some(usd) = options.get("usd")
            && let Some(usd) = self.positive_number(usd, "`budget.usd`")
        {
            self.agent_budget
                .push(("job_budget_usd".to_owned(), literal(serde_json::json!(usd))));
        }
        if let Some(turns) = options.get("turns")
            && let Some(turns) = self.positive_integer(turns, "`budget.turns`")
        {
            self.agent_budget.push((
                "job_budget_turns".to_owned(),
                literal(serde_json::json!(turns)),
            ));
        }
    }

    /// A number above 0 (an integer is one too), or an error naming `what`.
    fn positive_number(&mut self, node: &Spanned, what: &str) -> Option<f64> {
        match node.value {
            Value::Int(n) if n > 0 => Some(n as f64),
            Value::Float(f) if f > 0.0 && f.is_finite() => Some(f),
            _ => {
                self.error(
                    node.span,
                    format!("{what} must be a positive number, found {}", describe(node)),
                    None,
                );
                None
            }
        }
    }

    /// An integer of at least 1, or an error naming `what`.
    fn positive_integer(&mut self, node: &Spanned, what: &str) -> Option<i64> {
        match node.value {
            Value::Int(n) if n >= 1 => Some(n),
            _ => {
                self.error(
                    node.span,
                    format!(
                        "{what} must be an integer of at least 1, found {}",
                        describe(node)
                    ),
                    None,
                );
                None
            }
        }
    }

    /// `agent: {provider, prompt, mode, repo, model, max_turns, timeout, budget_usd,
    /// resume, schema, save, needs}`: a coding agent run, carried as a `call` of the
    /// node's `agent` provider (a lease, a timeout, placement by `needs`, like any call).
    /// Literal fields are checked here; templated ones when the call is made.
    fn agent(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let options = self.leaf_options(
            "agent",
            body,
            &[
                "name",
                "provider",
                "prompt",
                "mode",
                "repo",
                "model",
                "max_turns",
                "timeout",
                "budget_usd",
                "resume",
                "schema",
                "save",
                "needs",
            ],
        )?;
        let hint = "`agent: { provider: claude, prompt: \"Fix {{ input.bug }}\", mode: edit }`";
        let provider = match (options.get("provider"), self.attempt_provider()) {
            (Some(node), _) => self.value_template(node),
            (None, Some(from_attempt)) => Some(from_attempt),
            (None, None) => self
                .required(&options, "provider", "agent", span, hint)
                .and_then(|node| self.value_template(node)),
        };
        let prompt = self
            .required(&options, "prompt", "agent", span, hint)
            .and_then(|node| self.value_template(node));
        let mut args = vec![
            ("provider".to_owned(), provider?),
            ("prompt".to_owned(), prompt?),
        ];
        if let Some(node) = options.get("mode") {
            match node.as_str() {
                Some("observe" | "edit" | "execute") => {}
                Some(text) if text.contains("{{") => {}
                _ => {
                    self.error(
                        node.span,
                        format!("`mode` must be observe, edit or execute, found {}", describe(node)),
                        Some("observe never writes; edit may change files; execute may also run commands".to_owned()),
                    );
                    return None;
                }
            }
            args.push(("mode".to_owned(), self.value_template(node)?));
        }
        for field in ["repo", "model", "resume"] {
            if let Some(node) = options.get(field) {
                args.push((field.to_owned(), self.value_template(node)?));
            }
        }
        if let Some(node) = options.get("max_turns") {
            let turns = self.positive_integer(node, "`max_turns`")?;
            args.push(("max_turns".to_owned(), literal(serde_json::json!(turns))));
        }
        if let Some(node) = options.get("budget_usd") {
            let usd = self.positive_number(node, "`budget_usd`")?;
            args.push(("budget_usd".to_owned(), literal(serde_json::json!(usd))));
        }
        if let Some(node) = options.get("schema") {
            let schema = node.to_json();
            if let Err(err) = crate::jsonschema::Schema::compile(&schema) {
                self.error(node.span, format!("`schema`: {err}"), None);
                return None;
            }
            args.push(("schema".to_owned(), ValueTemplate::Literal(Json(schema))));
        }
        let timeout_ms = match options.get("timeout") {
            Some(node) => self.duration(node, "`timeout`", false)?,
            None => AGENT_TIMEOUT_MS_DEFAULT,
        };
        args.push((
            "timeout_ms".to_owned(),
            ValueTemplate::Literal(Json(serde_json::json!(timeout_ms))),
        ));
        args.extend(self.agent_budget.iter().cloned());
        let (save, needs, name) = self.call_tail(&options, &mut args);
        Some(Node {
            kind: NodeKind::Call(CallSpec {
                provider: AGENT_PROVIDER.to_owned(),
                args: ValueTemplate::Map(args),
                save,
                needs,
                // The run's own timeout fires first and ends it as `timeout`; this bound
                // is for a provider that stopped answering altogether.
                timeout_ms: Some(timeout_ms.saturating_add(AGENT_TIMEOUT_GRACE_MS)),
            }),
            name,
            span,
        })
    }

    fn flow_name(&mut self, node: &Spanned) -> Option<String> {
        let name = self.string(node, "flow name")?;
        if is_flow_name(&name) {
            Some(name)
        } else {
            self.error(
                node.span,
                format!("`{name}` is not a valid flow name"),
                None,
            );
            None
        }
    }

    fn spawn(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let (options, flow_node) = match &body.value {
            Value::String(_) => (HashMap::new(), Some(body)),
            _ => {
                let options =
                    self.leaf_options("spawn", body, &["name", "flow", "input", "wait", "save"])?;
                let flow = self.required(
                    &options,
                    "flow",
                    "spawn",
                    span,
                    "`spawn: { flow: NAME, input: {...}, wait: true }`",
                );
                (options, flow)
            }
        };
        let flow = flow_node.and_then(|node| self.flow_name(node));
        let mut input = Vec::new();
        if let Some(node) = options.get("input") {
            match &node.value {
                Value::Map(entries) => {
                    for (key, value) in entries {
                        if let Some(value) = self.value_template(value) {
                            input.push((key.as_str().unwrap_or_default().to_owned(), value));
                        }
                    }
                }
                _ => {
                    let found = node.type_name();
                    self.error(
                        node.span,
                        format!("`input` must be a mapping, found {found}"),
                        None,
                    );
                }
            }
        }
        let wait = match options.get("wait") {
            Some(node) => self.boolean(node, "`wait`").unwrap_or(false),
            None => false,
        };
        let save = options
            .get("save")
            .and_then(|node| self.identifier(node, "`save`"));
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Spawn(SpawnSpec {
                flow: flow?,
                input,
                wait,
                save,
            }),
            name,
            span,
        })
    }

    fn subflow(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let (flow_node, name) = match &body.value {
            Value::String(_) => (body, None),
            _ => {
                let options = self.leaf_options("subflow", body, &["name", "flow"])?;
                let node = self.required(
                    &options,
                    "flow",
                    "subflow",
                    span,
                    "`subflow: NAME` or `subflow: { flow: NAME }`",
                )?;
                (node, self.name_option(&options))
            }
        };
        let flow = self.flow_name(flow_node)?;
        Some(Node {
            kind: NodeKind::Subflow { flow },
            name,
            span,
        })
    }
}

fn describe(node: &Spanned) -> String {
    match &node.value {
        Value::String(s) => format!("`{s}`"),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        _ => node.type_name().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(source: &str) -> Vec<String> {
        match parse(source, "f.yaml") {
            Ok(_) => Vec::new(),
            Err(diagnostics) => diagnostics
                .iter()
                .map(|d| format!("{}:{} {}", d.span.line, d.span.col, d.message))
                .collect(),
        }
    }

    #[test]
    fn agent_leaves_say_what_is_wrong_and_where() {
        let flow = |body: &str| format!("name: a\ntree:\n  agent: {body}\n");
        assert_eq!(
            errors(&flow("{ provider: claude, prompt: x, mode: root }")),
            ["3:47 `mode` must be observe, edit or execute, found `root`"]
        );
        assert_eq!(
            errors(&flow("{ provider: claude }")),
            ["3:3 missing field `prompt` in `agent`"]
        );
        assert!(
            errors(&flow("{ provider: claude, prompt: x, max_turns: 0 }"))[0].contains("max_turns")
        );
        assert!(
            errors(&flow(
                "{ provider: claude, prompt: x, schema: { typ: object } }"
            ))[0]
                .contains("`schema`")
        );
        assert!(errors(&flow("{ provider: claude, prompt: x, turns: 3 }"))[0].contains("turns"));
        assert!(
            errors(&flow(
                "{ provider: claude, prompt: x, mode: \"{{ input.mode }}\" }"
            ))
            .is_empty()
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("250ms"), Some(250));
        assert_eq!(parse_duration_ms("5s"), Some(5000));
        assert_eq!(parse_duration_ms("1m30s"), Some(90_000));
        assert_eq!(parse_duration_ms("2h"), Some(7_200_000));
        assert_eq!(parse_duration_ms("5"), None);
        assert_eq!(parse_duration_ms("s"), None);
        assert_eq!(parse_duration_ms("5x"), None);
    }

    #[test]
    fn a_flows_authority_is_declared_or_inferred_and_covers_its_agents() {
        let flow = |head: &str, mode: &str| {
            format!(
                "name: f\n{head}tree:\n  sequence:\n    - agent: {{ provider: claude, prompt: x{mode} }}\n    - gate: {{ agent: codex, criteria: y }}\n"
            )
        };
        let parsed = |source: String| parse(&source, "f.yaml");
        let inferred = parsed(flow("", "")).expect("parses");
        assert_eq!(inferred.authority, super::super::Authority::Edit);
        assert!(!inferred.authority_declared);
        let observe = parsed(flow("", ", mode: observe")).expect("parses");
        assert_eq!(observe.authority, super::super::Authority::Observe);
        let templated = parsed(flow("", ", mode: \"{{ input.m }}\"")).expect("parses");
        assert_eq!(templated.authority, super::super::Authority::Execute);
        let declared = parsed(flow("authority: execute\ntags: [Fix, bug]\n", "")).expect("parses");
        assert_eq!(declared.authority, super::super::Authority::Execute);
        assert_eq!(declared.tags, ["fix", "bug"]);
        let too_low = parsed(flow("authority: observe\n", ", mode: edit"))
            .expect_err("an edit agent under an observe ceiling");
        assert!(
            too_low[0]
                .message
                .contains("more than the flow's `authority: observe`")
        );
        assert_eq!(too_low[0].span.line, 5, "the agent's line");
        let templated = parsed(flow("authority: execute\n", ", mode: \"{{ input.m }}\""))
            .expect_err("a templated mode under a declared ceiling");
        assert!(templated[0].message.contains("must be written out"));
        assert!(parsed(flow("authority: root\n", "")).is_err());
    }

    #[test]
    fn every_shape_of_every_node_parses() {
        let source = r#"
name: all-nodes
description: every node type
input:
  who: string
  n: { type: integer, default: 2 }
tree:
  sequence:
    name: root
    memory: false
    children:
      - selector: [succeed, fail]
      - selector: { memory: false, children: [succeed] }
      - parallel: { success: any, failure: 2, children: [succeed, fail, succeed] }
      - for_each: { items: "input.who", as: f, max_concurrency: 2, do: { run: "echo {{ f }}" } }
      - invert: { do: fail }
      - force_success: { do: fail }
      - force_failure: { do: succeed }
      - retry: { attempts: 3, backoff_ms: 1s, do: { run: { cmd: "true", timeout_ms: 5s, allow_failure: true, env: { A: "{{ input.n }}" }, save: r } } }
      - until_success: { do: { check: "state.r.exit_code == 0" } }
      - repeat: { n: 2, do: { sleep: 10ms } }
      - timeout: { ms: 5000, do: { wait: { key: go, prompt: "go?", choices: [yes, no], timeout_ms: 1h } } }
      - sleep: { ms: 5 }
      - set: { a: 1, b: "{{ input.n + 1 }}", c: [x, "{{ input.who }}"] }
      - check: { expr: "state.a == 1", name: is-one }
      - fail: { message: "no {{ input.who }}" }
      - call: { provider: http, args: { url: "http://x/{{ input.who }}" }, save: resp }
      - agent: { provider: claude, prompt: "fix {{ input.who }}", mode: edit, max_turns: 3, timeout: 5m, budget_usd: 0.5, save: fix, schema: { type: object } }
      - spawn: { flow: other, input: { who: "{{ input.who }}" }, wait: true, save: child }
      - subflow: other
      - wait: plain
      - verify: { cmd: "cargo test", parser: cargo, repo: ".", timeout: 10m, save: tests }
      - until_green: { verify: "cargo test", fix: { agent: { provider: codex, prompt: "fix {{ failures }}" } }, max_rounds: 2, save: green }
      - gate: { agent: { provider: claude, max_turns: 5 }, criteria: "tests cover it", evidence: "{{ state.tests }}", skeptic: true, save: verdict }
      - gate: { human: { key: review, prompt: "ship?" } }
      - loop: { do: { set: { iteration: done } }, max_iterations: 3, stagnation: 2, every: 1s, timeout: 1h, key: "l-{{ input.who }}", save: looped }
      - best_of: { n: 2, providers: [claude, codex], attempt: { agent: { prompt: "try {{ attempt.index }}" } }, rank: [verify, diff_size] }
      - team: { members: [{name: ann, provider: claude}, {name: ben, provider: codex, mode: observe}], tasks: [{id: a, title: x}, {id: b, depends_on: [a]}], repo: ".", parallel: 2, check: "cargo test", max_turns: 9, attempts: 2, turn_timeout: 5m }
      - wizard: { key: form, steps: [{input: {id: a, prompt: "A?", schema: {type: string}, default: x, protected: true}}, {choice: {id: b, options: [x, y], multiple: true}}, {branch: {id: r, cases: [{when: "state.form.a == 'x'", goto: d}], else: c}}, {collection: {id: c, item: {type: integer}, min: 1, max: 3}}, {summary: {id: d}}], commit: { run: "echo {{ state.form.a }}" }, compensate: succeed }
"#;
        let definition = parse(source, "f.yaml").unwrap_or_else(|d| panic!("{d:#?}"));
        let mut types = Vec::new();
        definition
            .tree
            .walk(&mut |node| types.push(node.kind.type_name()));
        // `agent`, `verify` and an agent `gate` are `call`s of the node's providers; a
        // human `gate` is a wait and its check.
        for expected in NODE_TYPES
            .iter()
            .filter(|t| !["agent", "verify", "gate"].contains(*t))
        {
            assert!(
                types.contains(expected),
                "{expected} missing from {types:?}"
            );
        }
        let mut agent_calls = 0;
        definition.tree.walk(&mut |node| {
            if let NodeKind::Call(call) = &node.kind
                && call.provider == AGENT_PROVIDER
            {
                if agent_calls == 0 {
                    assert_eq!(call.timeout_ms, Some(5 * 60_000 + AGENT_TIMEOUT_GRACE_MS));
                }
                agent_calls += 1;
            }
        });
        assert_eq!(agent_calls, 3, "the leaf, the fix and the attempt");
        assert_eq!(definition.input.len(), 2);
        assert_eq!(definition.subflow_names(), vec!["other"]);
    }

    #[test]
    fn unknown_node_type_with_suggestion() {
        let source = "name: x\ntree:\n  sequense:\n    - succeed\n";
        let diagnostics = parse(source, "f.yaml").unwrap_err();
        assert_eq!(diagnostics.len(), 1);
        assert_eq!(diagnostics[0].span, Span { line: 3, col: 3 });
        assert_eq!(diagnostics[0].message, "unknown node type `sequense`");
        assert_eq!(
            diagnostics[0].hint.as_deref(),
            Some("did you mean `sequence`?")
        );
    }

    #[test]
    fn text_that_is_not_yaml_says_where_and_what_to_look_for() {
        let source = "name: x\ntree:\n  sequence: [succeed\n";
        let diagnostics = parse(source, "f.yaml").unwrap_err();
        assert_eq!(diagnostics.len(), 1);
        assert!(diagnostics[0].message.starts_with("invalid YAML"));
        assert!(
            diagnostics[0]
                .hint
                .as_deref()
                .is_some_and(|hint| hint.contains("left open")),
            "{:?}",
            diagnostics[0]
        );
    }

    #[test]
    fn reports_every_error_not_only_the_first() {
        let source = "\
name: x
tree:
  sequence:
    - run: {}
    - wait: { prompt: hi }
    - check: \"state.a ==\"
    - set: { greeting: \"{{ stat.x }}\" }
    - retry: { do: succeed }
";
        let got = errors(source);
        assert_eq!(
            got,
            vec![
                "4:7 missing field `cmd` in `run`",
                "5:7 a `wait` without a key",
                "6:14 bad expression `state.a ==`: syntax error: unexpected end of input, expected expression",
                "7:24 unknown name `stat` in template",
                "8:7 missing field `attempts` in `retry`",
            ]
        );
    }

    #[test]
    fn durations_take_design_words_and_unit_words_alike() {
        // design.md names `timeout` (run, wait), `backoff` (retry) and `duration` (the
        // timeout decorator); the parser also takes the names that say the unit. Each
        // pair parses to the same tree (the aliased field is last on its line, so every
        // node keeps its position).
        let flow = |timeout: &str, backoff: &str, duration: &str| {
            format!(
                "name: d\ntree:\n  sequence:\n    - run: {{ cmd: \"true\", {timeout}: 5s }}\n    - wait: {{ key: go, {timeout}: 1h }}\n    - call: {{ provider: http, {timeout}: 2000 }}\n    - retry: {{ attempts: 2, do: succeed, {backoff}: 1s }}\n    - until_success: {{ do: succeed, {backoff}: 250ms }}\n    - timeout: {{ do: succeed, {duration}: 3s }}\n"
            )
        };
        let short = parse(&flow("timeout", "backoff", "duration"), "f.yaml").expect("short names");
        let long = parse(&flow("timeout_ms", "backoff_ms", "ms"), "f.yaml").expect("long names");
        assert_eq!(format!("{:?}", short.tree), format!("{:?}", long.tree));
        let NodeKind::Sequence { children, .. } = &short.tree.kind else {
            panic!("a sequence");
        };
        let NodeKind::Run(run) = &children[0].kind else {
            panic!("a run");
        };
        assert_eq!(run.timeout_ms, Some(5_000));
        let NodeKind::Timeout { ms, .. } = &children[5].kind else {
            panic!("a timeout");
        };
        assert_eq!(*ms, 3_000);
        // Both names at once: one field given twice, an error at the second.
        assert_eq!(
            errors("name: d\ntree:\n  run: { cmd: \"true\", timeout: 5s, timeout_ms: 5000 }\n"),
            ["3:48 `timeout` and `timeout_ms` are the same field; give one"]
        );
        assert_eq!(
            errors("name: d\ntree:\n  timeout: { duration: 1s, ms: 1000, do: succeed }\n"),
            ["3:32 `duration` and `ms` are the same field; give one"]
        );
        assert_eq!(
            errors("name: d\ntree:\n  timeout: { do: succeed }\n"),
            ["3:3 missing field `duration` in `timeout`"]
        );
    }

    #[test]
    fn duplicate_wait_keys() {
        let source = "name: x\ntree:\n  sequence:\n    - wait: ok\n    - wait: { key: ok }\n";
        assert_eq!(errors(source), vec!["5:20 duplicate wait key `ok`"]);
    }

    #[test]
    fn item_only_inside_for_each() {
        let source = "name: x\ntree:\n  run: \"echo {{ item }}\"\n";
        assert_eq!(errors(source), vec!["3:8 unknown name `item` in template"]);
    }

    #[test]
    fn input_defaults_must_match() {
        let source = "name: x\ninput:\n  n: { type: integer, default: nope }\ntree: succeed\n";
        let got = errors(source);
        assert_eq!(got.len(), 1);
        assert!(got[0].contains("default does not match"), "{got:?}");
    }

    #[test]
    fn prepare_input_applies_defaults_and_refuses_unknowns() {
        let definition = parse(
            "name: x\ninput:\n  who: { type: string, default: world }\n  n: integer\ntree: succeed\n",
            "f.yaml",
        )
        .unwrap();
        let mut given = serde_json::Map::new();
        given.insert("n".into(), serde_json::json!(3));
        let input = definition.prepare_input(given).unwrap();
        assert_eq!(input, serde_json::json!({"who": "world", "n": 3}));
        let mut bad = serde_json::Map::new();
        bad.insert("n".into(), serde_json::json!("three"));
        bad.insert("whom".into(), serde_json::json!("x"));
        let problems = definition.prepare_input(bad).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn not_a_mapping_or_missing_fields() {
        assert_eq!(errors("- a\n- b\n").len(), 1);
        assert_eq!(errors("tree: succeed\n"), vec!["1:1 missing field `name`"]);
    }
}
