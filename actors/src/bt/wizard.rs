//! `wizard`: a form asked one step at a time on the wait plane, then one commit.
//!
//! Each asking step parks one wait on the wizard's key. The wait's schema accepts exactly
//! the moves the step allows — `{"answer"}`, `{"back"}`, a collection's `{"add"}`,
//! `{"edit"}`, `{"remove"}`, `{"done"}`, a summary's `{"commit": true}` — so the job path
//! refuses a wrong move before anything is journaled, and carries the step itself for
//! whoever asks (`x-palm-wizard`: step id, kind, position, defaults, where back can go,
//! the items so far). Answers land at `state.<key>.<step>` as they come: the draft is the
//! parked job, durable at every step.
//!
//! Going back reopens a step visited before (its answer kept as the proposal). A passed
//! `protected` step is a wall: neither it nor anything before it reopens. A `branch`
//! asks nothing and jumps forward. Once the last step is answered, the answers of steps
//! no longer on the path are dropped and `commit` runs — the wizard's only effects. When
//! it fails, `compensate` runs and the wizard fails with the commit's reason. This module
//! holds the steps' logic; `tick.rs` ticks the commit and the compensation.

use super::{Command, Delivery, NodeState, Parked, RtNode, Runtime};
use crate::definition::{StepKind, WizardStep};
use serde_json::{Map, Value, json};

/// Where a wizard is.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) enum Phase {
    /// Asking the step at the end of the history.
    #[default]
    Asking,
    /// Every step answered: the commit runs.
    Committing,
    /// The commit failed (the reason kept): compensation runs.
    Compensating(String),
}

/// A wizard's progress, rebuilt from the journal on replay like every node's.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct WizardState {
    /// The asking steps visited, in order; the last is the current one.
    history: Vec<usize>,
    /// The current step's wait.
    park: Option<String>,
    phase: Phase,
}

fn state(node: &mut RtNode) -> &mut WizardState {
    match &mut node.state {
        NodeState::Wizard(state) => state,
        _ => unreachable!("a wizard node has wizard state"),
    }
}

/// The answers so far (`state.<key>`).
fn answers(rt: &Runtime, key: &str) -> Map<String, Value> {
    rt.state
        .get(key)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Where a tick leaves a wizard: what its node must do next.
pub(super) enum Stage {
    /// Parked on the current step.
    Asking,
    /// Every step answered: tick the commit.
    Committing,
    /// The commit failed (why): tick the compensation.
    Compensating(String),
}

/// Moves a wizard as far as its answers allow: starts it when fresh, applies the move
/// delivered to its step, parks the next step. The node ticks its children (commit,
/// compensation) itself (`tick.rs`), so this module never ticks a tree.
pub(super) fn advance(
    node: &mut RtNode,
    steps: &[WizardStep],
    key: &str,
    rt: &mut Runtime,
    path: &str,
) -> Result<Stage, String> {
    if !node.status.is_running() {
        node.state = NodeState::Wizard(Box::default());
        if !rt.state.get(key).is_some_and(Value::is_object) {
            rt.write_state(key, json!({}));
        }
        match next_asking(steps, None, rt, path)? {
            Some(first) => state(node).history.push(first),
            None => state(node).phase = Phase::Committing,
        }
    }
    if state(node).phase == Phase::Asking {
        if let Some(park) = state(node).park.clone()
            && let Some(Delivery::Continued(input)) = rt.deliveries.remove(&park)
        {
            rt.parked.retain(|p| p.park != park);
            state(node).park = None;
            apply(node, steps, key, &input, rt, path)?;
        }
        if state(node).phase == Phase::Asking {
            if state(node).park.is_none() {
                let park = park(node, steps, key, rt, path)?;
                state(node).park = Some(park);
            }
            return Ok(Stage::Asking);
        }
        // Every step answered: keep only the answers of the path taken.
        let taken: Vec<&str> = state(node)
            .history
            .iter()
            .map(|&i| steps[i].id.as_str())
            .collect();
        let mut kept = answers(rt, key);
        kept.retain(|id, _| taken.contains(&id.as_str()));
        rt.write_state(key, Value::Object(kept));
    }
    Ok(match state(node).phase.clone() {
        Phase::Asking => Stage::Asking,
        Phase::Committing => Stage::Committing,
        Phase::Compensating(reason) => Stage::Compensating(reason),
    })
}

/// The commit failed for `reason`: the compensation runs from now on.
pub(super) fn compensate(node: &mut RtNode, reason: String) {
    state(node).phase = Phase::Compensating(reason);
}

/// The first asking step after `from` (from the start with `None`), following branches;
/// `None` past the last step.
fn next_asking(
    steps: &[WizardStep],
    from: Option<usize>,
    rt: &Runtime,
    path: &str,
) -> Result<Option<usize>, String> {
    let mut at = from.map_or(0, |i| i + 1);
    // Branches only jump forward, so this ends within `steps.len()` turns.
    while let Some(step) = steps.get(at) {
        let StepKind::Branch { cases, otherwise } = &step.kind else {
            return Ok(Some(at));
        };
        let scope = rt.scope();
        let mut target = None;
        for (when, to) in cases {
            match when.eval_bool(&scope) {
                Ok(true) => {
                    target = Some(*to);
                    break;
                }
                Ok(false) => {}
                Err(err) => {
                    return Err(format!(
                        "wizard branch `{}` at {path}: `{}`: {err}",
                        step.id,
                        when.source()
                    ));
                }
            }
        }
        at = target.or(*otherwise).unwrap_or(at + 1);
    }
    Ok(None)
}

/// The steps `back` may reopen: those visited before the current one, after the last
/// passed protected step.
fn reopenable(history: &[usize], steps: &[WizardStep]) -> Vec<usize> {
    let Some((_, passed)) = history.split_last() else {
        return Vec::new();
    };
    let wall = passed
        .iter()
        .rposition(|&i| steps[i].protected)
        .map_or(0, |w| w + 1);
    passed[wall..].to_vec()
}

/// The items of a collection step so far.
fn items_of(answers: &Map<String, Value>, id: &str) -> Vec<Value> {
    answers
        .get(id)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Applies one validated move to the current step.
fn apply(
    node: &mut RtNode,
    steps: &[WizardStep],
    key: &str,
    input: &Value,
    rt: &mut Runtime,
    path: &str,
) -> Result<(), String> {
    let wizard = state(node);
    let Some(&current) = wizard.history.last() else {
        return Ok(());
    };
    let step = &steps[current];
    let mut answers = answers(rt, key);
    if let Some(back) = input.get("back") {
        let open = reopenable(&wizard.history, steps);
        let target = match back {
            Value::String(id) => open.iter().rev().find(|&&i| steps[i].id == *id).copied(),
            _ => open.last().copied(),
        };
        // The schema offered only these targets; a replay of an older flow may not.
        if let Some(target) = target
            && let Some(at) = wizard.history.iter().rposition(|&i| i == target)
        {
            wizard.history.truncate(at + 1);
        }
        return Ok(());
    }
    let mut advance = false;
    match &step.kind {
        StepKind::Collection { .. } => {
            let mut items = items_of(&answers, &step.id);
            if let Some(all) = input.get("answer").and_then(Value::as_array) {
                items = all.clone();
                advance = true;
            } else if let Some(item) = input.get("add") {
                items.push(item.clone());
            } else if let Some(edit) = input.get("edit") {
                let at = edit["index"].as_u64().unwrap_or(u64::MAX) as usize;
                if let Some(slot) = items.get_mut(at) {
                    *slot = edit["item"].clone();
                }
            } else if let Some(at) = input.get("remove").and_then(Value::as_u64) {
                if (at as usize) < items.len() {
                    items.remove(at as usize);
                }
            } else if input.get("done").is_some() {
                advance = true;
            }
            answers.insert(step.id.clone(), Value::Array(items));
        }
        StepKind::Summary => {
            advance = input.get("commit").is_some();
        }
        _ => {
            if let Some(answer) = input.get("answer") {
                answers.insert(step.id.clone(), answer.clone());
                advance = true;
            }
        }
    }
    rt.write_state(key, Value::Object(answers));
    if advance {
        match next_asking(steps, Some(current), rt, path)? {
            Some(next) => state(node).history.push(next),
            None => state(node).phase = Phase::Committing,
        }
    }
    Ok(())
}

/// Parks the current step: its prompt, and a schema of exactly the moves it allows.
fn park(
    node: &mut RtNode,
    steps: &[WizardStep],
    key: &str,
    rt: &mut Runtime,
    path: &str,
) -> Result<String, String> {
    let wizard = state(node);
    let current = *wizard.history.last().expect("an asking wizard has a step");
    let step = &steps[current];
    let scope = rt.scope();
    let prompt = match &step.prompt {
        Some(template) => Some(
            template
                .render_string(&scope)
                .map_err(|e| format!("wizard step `{}` prompt: {e}", step.id))?,
        ),
        None => None,
    };
    let answers = answers(rt, key);
    let back: Vec<&str> = reopenable(&wizard.history, steps)
        .into_iter()
        .map(|i| steps[i].id.as_str())
        .collect();
    let asking: Vec<usize> = (0..steps.len())
        .filter(|&i| !matches!(steps[i].kind, StepKind::Branch { .. }))
        .collect();
    let position = asking.iter().position(|&i| i == current).unwrap_or(0) + 1;
    let mut about = json!({
        "wizard": key,
        "step": step.id,
        "kind": step.kind.type_name(),
        "n": position,
        "of": asking.len(),
        "protected": step.protected,
        "back": back,
        "steps": asking
            .iter()
            .map(|&i| json!({"id": steps[i].id, "kind": steps[i].kind.type_name()}))
            .collect::<Vec<_>>(),
    });
    let mut moves: Vec<(&str, Value)> = Vec::new();
    let proposal = |default: &Option<crate::definition::ValueTemplate>| -> Result<Value, String> {
        if let Some(previous) = answers.get(&step.id) {
            return Ok(previous.clone());
        }
        match default {
            Some(template) => super::render_value(template, &scope)
                .map_err(|e| format!("wizard step `{}` default: {e}", step.id)),
            None => Ok(Value::Null),
        }
    };
    match &step.kind {
        StepKind::Input { schema, default } => {
            let mut answer = schema.as_ref().map_or(json!(true), |s| s.source().clone());
            let proposed = proposal(default)?;
            if !proposed.is_null()
                && let Some(object) = answer.as_object_mut()
            {
                object.insert("default".into(), proposed.clone());
            }
            about["default"] = proposed;
            moves.push(("answer", answer));
        }
        StepKind::Choice {
            options,
            multiple,
            default,
        } => {
            let listed: Vec<Value> = options.iter().map(|o| o.0.clone()).collect();
            let answer = if *multiple {
                json!({"type": "array", "items": {"enum": listed}})
            } else {
                json!({"enum": listed})
            };
            about["options"] = Value::Array(listed);
            about["multiple"] = json!(multiple);
            about["default"] = proposal(default)?;
            moves.push(("answer", answer));
        }
        StepKind::Collection { item, min, max } => {
            let items = items_of(&answers, &step.id);
            let item_schema = item.as_ref().map_or(json!(true), |s| s.source().clone());
            let count = items.len() as u64;
            moves.push((
                "answer",
                json!({"type": "array", "items": item_schema, "minItems": min, "maxItems": max}),
            ));
            if count < u64::from(*max) {
                moves.push(("add", item_schema.clone()));
            }
            if count > 0 {
                moves.push((
                    "edit",
                    json!({"type": "object", "required": ["index", "item"], "additionalProperties": false,
                           "properties": {"index": {"type": "integer", "minimum": 0, "maximum": count - 1},
                                          "item": item_schema}}),
                ));
                moves.push((
                    "remove",
                    json!({"type": "integer", "minimum": 0, "maximum": count - 1}),
                ));
            }
            if count >= u64::from(*min) {
                moves.push(("done", json!({"const": true})));
            }
            about["items"] = Value::Array(items);
            about["item_schema"] = item_schema;
            about["min"] = json!(min);
            about["max"] = json!(max);
        }
        StepKind::Summary => {
            moves.push(("commit", json!({"const": true})));
            about["answers"] = Value::Object(answers.clone());
        }
        StepKind::Branch { .. } => unreachable!("branches never park"),
    }
    if !back.is_empty() {
        let mut targets: Vec<Value> = vec![json!(true)];
        targets.extend(back.iter().map(|id| json!(id)));
        moves.push(("back", json!({"enum": targets})));
    }
    let mut properties = Map::new();
    let mut one_of = Vec::new();
    for (name, schema) in &moves {
        properties.insert((*name).to_owned(), schema.clone());
        one_of.push(json!({"required": [name]}));
    }
    let schema = json!({
        "type": "object",
        "title": format!("step {position}/{} · {}", asking.len(), step.id),
        "properties": properties,
        "additionalProperties": false,
        "oneOf": one_of,
        "x-palm-wizard": about,
    });
    let park = rt.next_key(path);
    let parked = Parked {
        key: key.to_owned(),
        park: park.clone(),
        path: path.to_owned(),
        prompt: prompt.or_else(|| Some(format!("{} ({})", step.id, step.kind.type_name()))),
        choices: Vec::new(),
        schema: Some(schema.into()),
        since: rt.now,
    };
    rt.parked.push(parked.clone());
    rt.commands.push(Command::Park(parked));
    Ok(park)
}

/// Halted: the current step's wait is withdrawn.
pub(super) fn terminate(node: &mut RtNode, rt: &mut Runtime) {
    let NodeState::Wizard(wizard) = &mut node.state else {
        return;
    };
    if let Some(park) = wizard.park.take()
        && let Some(i) = rt.parked.iter().position(|p| p.park == park)
    {
        let parked = rt.parked.remove(i);
        rt.deliveries.remove(&park);
        rt.commands.push(Command::Unpark {
            key: parked.key,
            park,
        });
    }
}
