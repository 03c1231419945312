//! Parsing of `wizard`: a form asked one step at a time on the wait plane, then one commit.
//!
//! ```yaml
//! wizard:
//!   key: service                     # the wait key; answers at state.service.<step>
//!   steps:
//!     - input: {id: name, prompt: "Name?", schema: {type: string, minLength: 1}, default: api}
//!     - choice: {id: language, options: [rust, go], default: rust}
//!     - choice: {id: features, options: [metrics, auth], multiple: true, protected: true}
//!     - branch: {id: route, cases: [{when: "state.service.language == 'go'", goto: review}]}
//!     - collection: {id: endpoints, item: {type: string}, min: 1, max: 20}
//!     - summary: {id: review}
//!   commit: { run: "make-service {{ state.service.name }}" }
//!   compensate: { run: "remove-service {{ state.service.name }}" }
//! ```

use super::{Parser, describe};
use crate::definition::yaml::{Spanned, Value};
use crate::definition::{Node, NodeKind, Span, StepKind, WizardSpec, WizardStep};
use crate::json::Json;
use crate::jsonschema::Schema;
use std::collections::HashMap;

/// Most steps in one wizard.
pub const WIZARD_STEPS_MAX: usize = 64;
/// Most items a collection step holds when it names no `max`.
pub const COLLECTION_ITEMS_MAX: u32 = 1000;

const STEP_TYPES: &[&str] = &["input", "choice", "collection", "branch", "summary"];

/// A step as read, before branch targets are resolved to indexes.
struct Draft {
    step: WizardStep,
    /// A branch's cases with their target ids and spans, and its `else`.
    targets: Vec<(String, Span)>,
    otherwise: Option<(String, Span)>,
    span: Span,
}

impl Parser {
    pub(super) fn wizard(&mut self, span: Span, body: &Spanned) -> Option<Node> {
        let options = self.leaf_options(
            "wizard",
            body,
            &["name", "key", "steps", "commit", "compensate"],
        )?;
        let hint = "`wizard: { key: service, steps: [{input: {id: name, prompt: \"Name?\"}}, {summary: {id: review}}], commit: {run: ...} }`";
        let key_node = self.required(&options, "key", "wizard", span, hint);
        let steps_node = self.required(&options, "steps", "wizard", span, hint);
        let commit_node = self.required(&options, "commit", "wizard", span, hint);
        let key = key_node.and_then(|node| {
            let key = self.identifier(node, "wizard `key`")?;
            self.claim_wait_key(&key, node.span);
            Some(key)
        });
        let steps = steps_node.and_then(|node| self.steps(node));
        let commit = commit_node.and_then(|node| self.node(node));
        let compensate = match options.get("compensate") {
            Some(node) => Some(Box::new(self.node(node)?)),
            None => None,
        };
        let name = self.name_option(&options);
        Some(Node {
            kind: NodeKind::Wizard(WizardSpec {
                key: key?,
                steps: steps?.into(),
                commit: Box::new(commit?),
                compensate,
            }),
            name,
            span,
        })
    }

    fn steps(&mut self, node: &Spanned) -> Option<Vec<WizardStep>> {
        let Value::Seq(items) = &node.value else {
            self.error(
                node.span,
                format!("`steps` must be a list of steps, found {}", describe(node)),
                None,
            );
            return None;
        };
        if items.is_empty() {
            self.error(node.span, "a wizard needs at least one step", None);
            return None;
        }
        if items.len() > WIZARD_STEPS_MAX {
            self.error(
                node.span,
                format!(
                    "a wizard has at most {WIZARD_STEPS_MAX} steps, found {}",
                    items.len()
                ),
                None,
            );
            return None;
        }
        let drafts: Vec<Option<Draft>> = items.iter().map(|item| self.step(item)).collect();
        let drafts: Vec<Draft> = drafts.into_iter().collect::<Option<_>>()?;
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut clean = true;
        for (i, draft) in drafts.iter().enumerate() {
            if ids.insert(draft.step.id.clone(), i).is_some() {
                self.error(
                    draft.span,
                    format!("duplicate step id `{}`", draft.step.id),
                    None,
                );
                clean = false;
            }
        }
        if drafts
            .iter()
            .all(|d| matches!(d.step.kind, StepKind::Branch { .. }))
        {
            self.error(node.span, "a wizard needs a step that asks something", None);
            return None;
        }
        let mut steps = Vec::with_capacity(drafts.len());
        for (i, mut draft) in drafts.into_iter().enumerate() {
            let id = draft.step.id.clone();
            let resolve = |parser: &mut Parser, (target, at): &(String, Span)| match ids
                .get(target.as_str())
            {
                Some(&j) if j > i => Some(j),
                Some(_) => {
                    parser.error(
                        *at,
                        format!("branch `{id}` goes to `{target}`, which is not after it"),
                        Some(
                            "a branch only jumps forward; to ask again, the person goes back"
                                .to_owned(),
                        ),
                    );
                    None
                }
                None => {
                    let mut known: Vec<&str> = ids.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    parser.error(
                        *at,
                        format!("branch `{id}` goes to `{target}`, which is no step"),
                        Some(format!("steps: {}", known.join(", "))),
                    );
                    None
                }
            };
            if let StepKind::Branch { cases, otherwise } = &mut draft.step.kind {
                for (case, target) in cases.iter_mut().zip(&draft.targets) {
                    match resolve(self, target) {
                        Some(j) => case.1 = j,
                        None => clean = false,
                    }
                }
                if let Some(target) = &draft.otherwise {
                    match resolve(self, target) {
                        Some(j) => *otherwise = Some(j),
                        None => clean = false,
                    }
                }
            }
            steps.push(draft.step);
        }
        clean.then_some(steps)
    }

    fn step(&mut self, item: &Spanned) -> Option<Draft> {
        let Value::Map(entries) = &item.value else {
            self.error(
                item.span,
                format!(
                    "a step is a mapping like `input: {{id: name}}`, found {}",
                    describe(item)
                ),
                None,
            );
            return None;
        };
        let [(kind_node, body)] = entries.as_slice() else {
            self.error(
                item.span,
                "a step is a mapping with one key, its type (input, choice, collection, branch, summary)",
                None,
            );
            return None;
        };
        let kind = kind_node.as_str().unwrap_or_default();
        let allowed: &[&str] = match kind {
            "input" => &["id", "prompt", "protected", "schema", "default"],
            "choice" => &[
                "id",
                "prompt",
                "protected",
                "options",
                "multiple",
                "default",
            ],
            "collection" => &["id", "prompt", "protected", "item", "min", "max"],
            "branch" => &["id", "cases", "else"],
            "summary" => &["id", "prompt", "protected"],
            other => {
                let hint = format!("step types: {}", STEP_TYPES.join(", "));
                self.error(
                    kind_node.span,
                    format!("unknown step type `{other}`"),
                    Some(hint),
                );
                return None;
            }
        };
        let options = self.leaf_options(&format!("{kind} step"), body, allowed)?;
        let id = self
            .required(
                &options,
                "id",
                &format!("{kind} step"),
                body.span,
                "every step has an `id`: its answer's name",
            )
            .and_then(|node| self.identifier(node, "step `id`"));
        let prompt = match options.get("prompt") {
            Some(node) => Some(self.template(node, "`prompt`")?),
            None => None,
        };
        let protected = match options.get("protected") {
            Some(node) => self.boolean(node, "`protected`")?,
            None => false,
        };
        let schema_of = |parser: &mut Parser, field: &str| match options.get(field) {
            Some(node) => match Schema::compile(&node.to_json()) {
                Ok(schema) => Some(Some(schema)),
                Err(err) => {
                    parser.error(node.span, format!("invalid `{field}` schema: {err}"), None);
                    None
                }
            },
            None => Some(None),
        };
        let mut targets = Vec::new();
        let mut otherwise = None;
        let kind = match kind {
            "input" => {
                let schema = schema_of(self, "schema")?;
                let default = match options.get("default") {
                    Some(node) => Some(self.value_template(node)?),
                    None => None,
                };
                StepKind::Input { schema, default }
            }
            "choice" => {
                let options_node = self.required(
                    &options,
                    "options",
                    "choice step",
                    body.span,
                    "`choice: {id: language, options: [rust, go]}`",
                )?;
                let list = match &options_node.value {
                    Value::Seq(items) if !items.is_empty() => {
                        items.iter().map(|i| Json(i.to_json())).collect()
                    }
                    _ => {
                        self.error(
                            options_node.span,
                            "`options` must be a non-empty list",
                            None,
                        );
                        return None;
                    }
                };
                let multiple = match options.get("multiple") {
                    Some(node) => self.boolean(node, "`multiple`")?,
                    None => false,
                };
                let default = match options.get("default") {
                    Some(node) => Some(self.value_template(node)?),
                    None => None,
                };
                StepKind::Choice {
                    options: list,
                    multiple,
                    default,
                }
            }
            "collection" => {
                let item = schema_of(self, "item")?;
                let min = match options.get("min") {
                    Some(node) => self.count(node, "`min`", 0)?,
                    None => 0,
                };
                let max = match options.get("max") {
                    Some(node) => self.count(node, "`max`", 1)?,
                    None => COLLECTION_ITEMS_MAX,
                };
                if min > max || max > COLLECTION_ITEMS_MAX {
                    self.error(
                        body.span,
                        format!("a collection needs min ≤ max ≤ {COLLECTION_ITEMS_MAX}, found min {min}, max {max}"),
                        None,
                    );
                    return None;
                }
                StepKind::Collection { item, min, max }
            }
            "branch" => {
                let cases_node = self.required(
                    &options,
                    "cases",
                    "branch step",
                    body.span,
                    "`branch: {id: route, cases: [{when: \"state.KEY.STEP == 'x'\", goto: STEP}], else: STEP}`",
                )?;
                let Value::Seq(items) = &cases_node.value else {
                    self.error(
                        cases_node.span,
                        "`cases` must be a list of {when, goto}",
                        None,
                    );
                    return None;
                };
                let mut cases = Vec::new();
                for case in items {
                    let Value::Map(entries) = &case.value else {
                        self.error(case.span, "a case is `{when: EXPR, goto: STEP}`", None);
                        return None;
                    };
                    let fields = self.options("branch case", entries, &["when", "goto"]);
                    let when = self
                        .required(
                            &fields,
                            "when",
                            "branch case",
                            case.span,
                            "`{when: EXPR, goto: STEP}`",
                        )
                        .and_then(|n| self.expression(n, "`when`"));
                    let goto = self
                        .required(
                            &fields,
                            "goto",
                            "branch case",
                            case.span,
                            "`{when: EXPR, goto: STEP}`",
                        )
                        .and_then(|n| Some((self.identifier(n, "`goto`")?, n.span)));
                    let (when, goto) = (when?, goto?);
                    cases.push((when, 0));
                    targets.push(goto);
                }
                if let Some(node) = options.get("else") {
                    otherwise = Some((self.identifier(node, "`else`")?, node.span));
                }
                StepKind::Branch {
                    cases,
                    otherwise: None,
                }
            }
            _ => StepKind::Summary,
        };
        Some(Draft {
            step: WizardStep {
                id: id?,
                prompt,
                protected,
                kind,
            },
            targets,
            otherwise,
            span: item.span,
        })
    }
}
