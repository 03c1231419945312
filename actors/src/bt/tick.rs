//! Ticking and stopping: the semantics of every node type.
//!
//! Sequence, selector, parallel, invert and the force decorators are transcribed from
//! py_trees 2.6 (`composites.py`, `decorators.py`, `behaviour.py`), including its quirks:
//! a composite that finishes keeps its children's statuses until its next fresh tick; a
//! selector invalidates lower-priority children only when its current child changes; a
//! decorator that stops to `idle` stops its child even when the child is already idle.
//! Every deviation is deliberate and documented in docs/ARCHITECTURE.md ("Tree semantics").
//!
//! `waiting` behaves as `running` everywhere; composites report `waiting` only when every
//! unfinished child is waiting, so a job is "waiting" exactly when nothing but input can
//! move it.

use super::{
    Delivery, EffectRequest, NodeState, Outcome, Parked, Program, RtNode, Runtime, SpecKind,
    Status, render_value,
};
use crate::definition::Threshold;
use std::sync::Arc;

/// Upper bound on `for_each` list length, so one expression cannot allocate without limit.
pub const FOR_EACH_ITEMS_MAX: usize = 100_000;

/// Ticks `node` (the root of a tick).
pub(super) fn tick(node: &mut RtNode, rt: &mut Runtime) -> Status {
    let program = Arc::clone(&rt.program);
    tick_node(node, &program, rt)
}

/// Stops `node` with `new` (the root of a halt).
pub(super) fn stop(node: &mut RtNode, rt: &mut Runtime, new: Status) {
    let program = Arc::clone(&rt.program);
    stop_node(node, &program, rt, new);
}

pub(super) fn tick_node(node: &mut RtNode, p: &Program, rt: &mut Runtime) -> Status {
    match &p.spec(node.spec).kind {
        SpecKind::Sequence { memory } => tick_sequence(node, p, rt, *memory),
        SpecKind::Selector { memory } => tick_selector(node, p, rt, *memory),
        SpecKind::Parallel {
            success,
            failure,
            synchronise,
        } => tick_parallel(node, p, rt, *success, *failure, *synchronise),
        SpecKind::ForEach {
            items,
            binding,
            max_concurrency,
        } => tick_for_each(node, p, rt, items, binding, *max_concurrency),
        SpecKind::Invert | SpecKind::ForceSuccess | SpecKind::ForceFailure => {
            tick_decorator(node, p, rt)
        }
        SpecKind::Retry { attempts, backoff } => tick_retry(node, p, rt, *attempts, backoff),
        SpecKind::Repeat { times } => tick_repeat(node, p, rt, *times),
        SpecKind::Timeout { ms } => tick_timeout(node, p, rt, *ms),
        SpecKind::UntilGreen { .. } => super::rounds::tick_until_green(node, p, rt),
        SpecKind::Loop(_) => super::rounds::tick_loop(node, p, rt),
        SpecKind::BestOf { .. } => super::rounds::tick_best_of(node, p, rt),
        SpecKind::Team(_) => super::team::tick_team(node, p, rt),
        SpecKind::Wizard { key, steps } => tick_wizard(node, p, rt, key, steps),
        _ => tick_leaf(node, p, rt),
    }
}

/// `wizard`: its steps move in `wizard.rs`; here its children run once they are all
/// answered — the commit, then, if it fails, the compensation.
fn tick_wizard(
    node: &mut RtNode,
    p: &Program,
    rt: &mut Runtime,
    key: &str,
    steps: &[crate::definition::WizardStep],
) -> Status {
    use super::wizard::{Stage, advance, compensate};
    let path = node.path.to_string();
    let finish = |node: &mut RtNode, rt: &mut Runtime, new: Status| {
        stop_node(node, p, rt, new);
        node.status = new;
        new
    };
    let mut stage = match advance(node, steps, key, rt, &path) {
        Ok(stage) => stage,
        Err(reason) => {
            rt.fail(&path, reason);
            return finish(node, rt, Status::Failure);
        }
    };
    if let Stage::Asking = stage {
        node.status = Status::Waiting;
        return Status::Waiting;
    }
    if let Stage::Committing = stage {
        match tick_node(&mut node.children[0], p, rt) {
            Status::Success => return finish(node, rt, Status::Success),
            Status::Failure if node.children.len() > 1 => {
                let reason = rt
                    .last_failure
                    .clone()
                    .unwrap_or_else(|| "the commit failed".to_owned());
                compensate(node, reason.clone());
                stage = Stage::Compensating(reason);
            }
            Status::Failure => return finish(node, rt, Status::Failure),
            running => {
                node.status = running;
                return running;
            }
        }
    }
    let Stage::Compensating(reason) = stage else {
        unreachable!("asking and committing returned above");
    };
    match tick_node(&mut node.children[1], p, rt) {
        Status::Success => {
            rt.fail(&path, format!("{reason}; compensated"));
            finish(node, rt, Status::Failure)
        }
        Status::Failure => {
            let also = rt
                .last_failure
                .clone()
                .unwrap_or_else(|| "it failed".to_owned());
            rt.fail(
                &path,
                format!("{reason}; the compensation failed too: {also}"),
            );
            finish(node, rt, Status::Failure)
        }
        running => {
            node.status = running;
            running
        }
    }
}

fn current(node: &RtNode) -> Option<usize> {
    match node.state {
        NodeState::Composite { current } => current,
        _ => None,
    }
}

fn set_current(node: &mut RtNode, value: Option<usize>) {
    if let NodeState::Composite { current } = &mut node.state {
        *current = value;
    }
}

fn first(node: &RtNode) -> Option<usize> {
    if node.children.is_empty() {
        None
    } else {
        Some(0)
    }
}

fn stop_children_from(node: &mut RtNode, p: &Program, rt: &mut Runtime, from: usize) {
    for child in node.children.iter_mut().skip(from) {
        if child.status != Status::Idle {
            stop_node(child, p, rt, Status::Idle);
        }
    }
}

/// py_trees `Sequence.tick`.
fn tick_sequence(node: &mut RtNode, p: &Program, rt: &mut Runtime, memory: bool) -> Status {
    let count = node.children.len();
    let mut index = 0;
    if !node.status.is_running() {
        set_current(node, first(node));
        stop_children_from(node, p, rt, 0);
    } else if memory && current(node).is_some() {
        index = current(node).unwrap_or(0);
    } else {
        set_current(node, first(node));
    }
    if count == 0 {
        set_current(node, None);
        stop_node(node, p, rt, Status::Success);
        return node.status;
    }
    for i in index..count {
        let status = tick_node(&mut node.children[i], p, rt);
        if status != Status::Success {
            if !memory {
                stop_children_from(node, p, rt, i + 1);
            }
            if status.is_running() {
                node.status = status;
            } else {
                stop_node(node, p, rt, status);
            }
            return node.status;
        }
        if i + 1 < count {
            set_current(node, Some(i + 1));
        }
    }
    stop_node(node, p, rt, Status::Success);
    node.status
}

/// py_trees `Selector.tick`.
fn tick_selector(node: &mut RtNode, p: &Program, rt: &mut Runtime, memory: bool) -> Status {
    let count = node.children.len();
    if !node.status.is_running() {
        set_current(node, first(node));
    }
    if count == 0 {
        set_current(node, None);
        stop_node(node, p, rt, Status::Failure);
        return node.status;
    }
    let index = if memory {
        let index = current(node).unwrap_or(0);
        for child in node.children.iter_mut().take(index) {
            if child.status != Status::Idle {
                stop_node(child, p, rt, Status::Idle);
            }
        }
        index
    } else {
        0
    };
    let previous = current(node);
    for i in index..count {
        let status = tick_node(&mut node.children[i], p, rt);
        if status.is_running() || status == Status::Success {
            set_current(node, Some(i));
            if previous != Some(i) {
                // A new child took over: invalidate everything of lower priority.
                stop_children_from(node, p, rt, i + 1);
            }
            if status == Status::Success {
                stop_node(node, p, rt, Status::Success);
            } else {
                node.status = status;
            }
            return node.status;
        }
    }
    stop_node(node, p, rt, Status::Failure);
    set_current(node, Some(count - 1));
    node.status
}

/// Running or waiting, from the unfinished children: waiting only if all of them wait.
pub(super) fn unfinished_status(children: &[RtNode]) -> Status {
    let any_running = children.iter().any(|c| c.status == Status::Running);
    let any_waiting = children.iter().any(|c| c.status == Status::Waiting);
    if any_waiting && !any_running {
        Status::Waiting
    } else {
        Status::Running
    }
}

/// py_trees `Parallel.tick`, generalised to success/failure thresholds. With the
/// defaults (`success: all`, `failure: any`) it is py_trees' `SuccessOnAll`; with
/// `success: any` it is `SuccessOnOne` (a failure still wins, as in py_trees).
fn tick_parallel(
    node: &mut RtNode,
    p: &Program,
    rt: &mut Runtime,
    success: Threshold,
    failure: Threshold,
    synchronise: bool,
) -> Status {
    if !node.status.is_running() {
        stop_children_from(node, p, rt, 0);
        set_current(node, None);
    }
    let count = node.children.len();
    if count == 0 {
        stop_node(node, p, rt, Status::Success);
        return node.status;
    }
    for child in node.children.iter_mut() {
        if synchronise && matches!(child.status, Status::Success | Status::Failure) {
            continue;
        }
        tick_node(child, p, rt);
    }
    let succeeded = node
        .children
        .iter()
        .filter(|c| c.status == Status::Success)
        .count();
    let failed = node
        .children
        .iter()
        .filter(|c| c.status == Status::Failure)
        .count();
    let needed = success.count(count);
    let new = if failed >= failure.count(count).max(1) {
        rt.fail_passing_on(
            &node.path,
            format!("{failed} of {count} parallel branches failed"),
        );
        Status::Failure
    } else if succeeded >= needed {
        Status::Success
    } else if count - failed < needed {
        rt.fail(
            &node.path,
            format!(
                "parallel needs {needed} successes, only {} branches left",
                count - failed
            ),
        );
        Status::Failure
    } else {
        unfinished_status(&node.children)
    };
    if !new.is_running() {
        stop_node(node, p, rt, new);
    }
    node.status = new;
    new
}

fn tick_for_each(
    node: &mut RtNode,
    p: &Program,
    rt: &mut Runtime,
    items_expr: &crate::template::Expr,
    binding: &Arc<str>,
    max_concurrency: u32,
) -> Status {
    let body = p.spec(node.spec).children[0];
    if !node.status.is_running() {
        stop_children_from(node, p, rt, 0);
        node.children.clear();
        let items = match items_expr.eval_json(&rt.scope()) {
            Ok(serde_json::Value::Array(items)) if items.len() <= FOR_EACH_ITEMS_MAX => items,
            Ok(serde_json::Value::Array(items)) => {
                let reason = format!(
                    "for_each has {} items, more than {FOR_EACH_ITEMS_MAX}",
                    items.len()
                );
                return finish_leaf_like(node, p, rt, reason);
            }
            Ok(other) => {
                let reason = format!(
                    "for_each items `{}` is {}, not a list",
                    items_expr.source(),
                    crate::jsonschema::type_of(&other)
                );
                return finish_leaf_like(node, p, rt, reason);
            }
            Err(err) => {
                let reason = format!("for_each items `{}`: {err}", items_expr.source());
                return finish_leaf_like(node, p, rt, reason);
            }
        };
        node.state = NodeState::ForEach { items, next: 0 };
    }
    let NodeState::ForEach { items, next } = &mut node.state else {
        unreachable!("a for_each node always has for_each state");
    };
    let items = std::mem::take(items);
    let mut next_item = *next;
    let mut failed = false;
    for (i, child) in node.children.iter_mut().enumerate() {
        if child.status.is_running() {
            rt.bindings.push((Arc::clone(binding), items[i].clone()));
            let status = tick_node(child, p, rt);
            rt.bindings.pop();
            if status == Status::Failure {
                failed = true;
                break;
            }
        }
    }
    while !failed
        && next_item < items.len()
        && node
            .children
            .iter()
            .filter(|c| c.status.is_running())
            .count()
            < max_concurrency as usize
    {
        let i = next_item;
        next_item += 1;
        let mut child = RtNode::new(p, body, format!("{}.{i}", node.path));
        rt.bindings.push((Arc::clone(binding), items[i].clone()));
        let status = tick_node(&mut child, p, rt);
        rt.bindings.pop();
        node.children.push(child);
        if status == Status::Failure {
            failed = true;
        }
    }
    let all_started = next_item >= items.len();
    node.state = NodeState::ForEach {
        items,
        next: next_item,
    };
    let new = if failed {
        Status::Failure
    } else if all_started && node.children.iter().all(|c| c.status == Status::Success) {
        Status::Success
    } else {
        unfinished_status(&node.children)
    };
    if !new.is_running() {
        stop_node(node, p, rt, new);
    }
    node.status = new;
    new
}

/// Ends a composite or decorator that failed before ticking any child.
fn finish_leaf_like(node: &mut RtNode, p: &Program, rt: &mut Runtime, reason: String) -> Status {
    rt.fail(&node.path, reason);
    stop_node(node, p, rt, Status::Failure);
    node.status
}

/// py_trees `Decorator.tick` with `Inverter`, `FailureIsSuccess` (force_success) and
/// `SuccessIsFailure` (force_failure) as `update`.
fn tick_decorator(node: &mut RtNode, p: &Program, rt: &mut Runtime) -> Status {
    let child = tick_node(&mut node.children[0], p, rt);
    let new = match (&p.spec(node.spec).kind, child) {
        (SpecKind::Invert, Status::Success) => {
            rt.fail(&node.path, "inverted a success".to_owned());
            Status::Failure
        }
        (SpecKind::Invert, Status::Failure) => Status::Success,
        (SpecKind::ForceSuccess, Status::Failure) => Status::Success,
        (SpecKind::ForceFailure, Status::Success) => {
            rt.fail(&node.path, "forced failure".to_owned());
            Status::Failure
        }
        (_, other) => other,
    };
    if !new.is_running() {
        stop_node(node, p, rt, new);
    }
    node.status = new;
    new
}

/// py_trees `Retry`, plus backoff: after a failure the child is re-run once the backoff
/// timer fires (or on an immediate re-tick when there is no backoff).
fn tick_retry(
    node: &mut RtNode,
    p: &Program,
    rt: &mut Runtime,
    attempts: Option<u32>,
    backoff: &crate::definition::Backoff,
) -> Status {
    if !node.status.is_running() {
        node.state = NodeState::Retry {
            failures: 0,
            backoff: None,
        };
    }
    let NodeState::Retry {
        failures,
        backoff: pending,
    } = node.state.clone()
    else {
        unreachable!("a retry node always has retry state");
    };
    if let Some(key) = &pending {
        match rt.take_outcome(key) {
            Some(Outcome::TimerFired) => {
                node.state = NodeState::Retry {
                    failures,
                    backoff: None,
                };
            }
            _ => {
                node.status = Status::Running;
                return Status::Running;
            }
        }
    }
    let child = tick_node(&mut node.children[0], p, rt);
    let new = if child == Status::Failure {
        let failures = failures + 1;
        if attempts.is_none_or(|limit| failures < limit) {
            let delay = backoff.delay_ms(failures);
            let timer = if delay > 0 {
                Some(rt.start_timer(&node.path, delay))
            } else {
                rt.retick = true;
                None
            };
            node.state = NodeState::Retry {
                failures,
                backoff: timer,
            };
            Status::Running
        } else {
            node.state = NodeState::Retry {
                failures,
                backoff: None,
            };
            let reason = rt.last_failure.clone().unwrap_or_default();
            rt.last_failure = Some(format!("gave up after {failures} attempts: {reason}"));
            Status::Failure
        }
    } else {
        child
    };
    if !new.is_running() {
        stop_node(node, p, rt, new);
    }
    node.status = new;
    new
}

/// py_trees `Repeat`: success `times` times in a row; a failure fails.
fn tick_repeat(node: &mut RtNode, p: &Program, rt: &mut Runtime, times: u32) -> Status {
    if !node.status.is_running() {
        node.state = NodeState::Repeat { successes: 0 };
    }
    let child = tick_node(&mut node.children[0], p, rt);
    let new = match child {
        Status::Success => {
            let NodeState::Repeat { successes } = &mut node.state else {
                unreachable!("a repeat node always has repeat state");
            };
            *successes += 1;
            if *successes >= times {
                Status::Success
            } else {
                rt.retick = true;
                Status::Running
            }
        }
        other => other,
    };
    if !new.is_running() {
        stop_node(node, p, rt, new);
    }
    node.status = new;
    new
}

/// py_trees `Timeout`, on a durable timer instead of the wall clock. When the timer has
/// fired the child is halted without another tick (time, here, only moves by events).
fn tick_timeout(node: &mut RtNode, p: &Program, rt: &mut Runtime, ms: u64) -> Status {
    if !node.status.is_running() {
        let timer = rt.start_timer(&node.path, ms);
        node.state = NodeState::Timeout { timer: Some(timer) };
    }
    let fired = match &node.state {
        NodeState::Timeout { timer: Some(key) } => {
            let key = key.clone();
            matches!(rt.take_outcome(&key), Some(Outcome::TimerFired))
        }
        _ => false,
    };
    let new = if fired {
        node.state = NodeState::Timeout { timer: None };
        rt.fail(&node.path, format!("timed out after {ms} ms"));
        Status::Failure
    } else {
        tick_node(&mut node.children[0], p, rt)
    };
    if !new.is_running() {
        stop_node(node, p, rt, new);
    }
    node.status = new;
    new
}

/// py_trees `Behaviour.tick` for leaves: initialise when fresh, update, stop when done.
fn tick_leaf(node: &mut RtNode, p: &Program, rt: &mut Runtime) -> Status {
    let fresh = !node.status.is_running();
    let new = update_leaf(node, p, rt, fresh);
    if !new.is_running() {
        stop_node(node, p, rt, new);
    }
    node.status = new;
    new
}

fn update_leaf(node: &mut RtNode, p: &Program, rt: &mut Runtime, fresh: bool) -> Status {
    // The cheapest leaves first: they need no path and allocate nothing.
    match &p.spec(node.spec).kind {
        SpecKind::Scripted { queue, eventually } => {
            let NodeState::Scripted { position } = &mut node.state else {
                unreachable!("a scripted leaf always has scripted state");
            };
            return match queue.get(*position) {
                Some(status) => {
                    *position += 1;
                    *status
                }
                None => eventually.unwrap_or(Status::Running),
            };
        }
        SpecKind::Succeed => return Status::Success,
        _ => {}
    }
    let path = node.path.clone();
    match &p.spec(node.spec).kind {
        SpecKind::Scripted { .. } | SpecKind::Succeed => unreachable!("handled above"),
        SpecKind::Fail(message) => {
            let reason = match message {
                Some(template) => template
                    .render_string(&rt.scope())
                    .unwrap_or_else(|_| template.source().to_owned()),
                None => "fail".to_owned(),
            };
            rt.fail(&path, reason);
            Status::Failure
        }
        SpecKind::Check(expr) => match expr.eval_bool(&rt.scope()) {
            Ok(true) => Status::Success,
            Ok(false) => {
                rt.fail(&path, format!("check `{}` is false", expr.source()));
                Status::Failure
            }
            Err(err) => {
                rt.fail(&path, format!("check `{}`: {err}", expr.source()));
                Status::Failure
            }
        },
        SpecKind::Set(writes) => {
            let scope = rt.scope();
            let mut rendered = Vec::with_capacity(writes.len());
            for (key, template) in writes {
                match render_value(template, &scope) {
                    Ok(value) => rendered.push((key, value)),
                    Err(err) => {
                        rt.fail(&path, format!("set `{key}`: {err}"));
                        return Status::Failure;
                    }
                }
            }
            for (key, value) in rendered {
                rt.write_state(key, value);
            }
            Status::Success
        }
        SpecKind::Sleep { ms } => {
            if fresh {
                if *ms == 0 {
                    return Status::Success;
                }
                let key = rt.start_timer(&path, *ms);
                node.state = NodeState::Effect { key: Some(key) };
            }
            match effect_outcome(node, rt) {
                Some(Outcome::TimerFired) => Status::Success,
                Some(other) => unexpected(rt, &path, &other),
                None => Status::Running,
            }
        }
        SpecKind::Run(spec) => {
            if fresh {
                let scope = rt.scope();
                let request = (|| {
                    Ok::<_, String>(EffectRequest::Run {
                        cmd: spec
                            .cmd
                            .render_string(&scope)
                            .map_err(|e| format!("cmd: {e}"))?,
                        cwd: match &spec.cwd {
                            Some(cwd) => {
                                Some(cwd.render_string(&scope).map_err(|e| format!("cwd: {e}"))?)
                            }
                            None => None,
                        },
                        env: spec
                            .env
                            .iter()
                            .map(|(k, v)| {
                                Ok((
                                    k.clone(),
                                    v.render_string(&scope)
                                        .map_err(|e| format!("env {k}: {e}"))?,
                                ))
                            })
                            .collect::<Result<_, String>>()?,
                        timeout_ms: spec.timeout_ms,
                        needs: spec.needs.clone(),
                        place: spec.place.clone(),
                    })
                })();
                match request {
                    Ok(request) => {
                        let key = rt.start_effect(&path, request);
                        node.state = NodeState::Effect { key: Some(key) };
                    }
                    Err(reason) => {
                        rt.fail(&path, format!("run {reason}"));
                        return Status::Failure;
                    }
                }
            }
            match effect_outcome(node, rt) {
                Some(Outcome::Run(result)) => {
                    if let Some(save) = &spec.save {
                        rt.write_state(save, result.to_json());
                    }
                    if result.exit_code == Some(0) || spec.allow_failure {
                        Status::Success
                    } else {
                        rt.fail(&path, describe_run_failure(&result));
                        Status::Failure
                    }
                }
                Some(other) => unexpected(rt, &path, &other),
                None => Status::Running,
            }
        }
        SpecKind::Call(spec) => {
            if fresh {
                match render_value(&spec.args, &rt.scope()) {
                    Ok(args) => {
                        let key = rt.start_effect(
                            &path,
                            EffectRequest::Call {
                                provider: spec.provider.clone(),
                                args: args.into(),
                                needs: spec.needs.clone(),
                                timeout_ms: spec.timeout_ms,
                            },
                        );
                        node.state = NodeState::Effect { key: Some(key) };
                    }
                    Err(err) => {
                        rt.fail(&path, format!("call {} args: {err}", spec.provider));
                        return Status::Failure;
                    }
                }
            }
            match effect_outcome(node, rt) {
                Some(Outcome::Call { ok, value, error }) => {
                    if let Some(save) = &spec.save {
                        rt.write_state(save, value.0);
                    }
                    if ok {
                        Status::Success
                    } else {
                        let reason = error.unwrap_or_else(|| "call failed".to_owned());
                        rt.fail(&path, format!("call {}: {reason}", spec.provider));
                        Status::Failure
                    }
                }
                Some(other) => unexpected(rt, &path, &other),
                None => Status::Running,
            }
        }
        SpecKind::Spawn(spec) => {
            if fresh {
                let scope = rt.scope();
                let mut input = serde_json::Map::new();
                for (key, template) in &spec.input {
                    match render_value(template, &scope) {
                        Ok(value) => {
                            input.insert(key.clone(), value);
                        }
                        Err(err) => {
                            rt.fail(&path, format!("spawn {} input `{key}`: {err}", spec.flow));
                            return Status::Failure;
                        }
                    }
                }
                let key = rt.start_effect(
                    &path,
                    EffectRequest::Spawn {
                        flow: spec.flow.clone(),
                        input: serde_json::Value::Object(input).into(),
                        wait: spec.wait,
                    },
                );
                node.state = NodeState::Effect { key: Some(key) };
            }
            match effect_outcome(node, rt) {
                Some(Outcome::Spawn {
                    job,
                    status,
                    state,
                    error,
                }) => {
                    if let Some(save) = &spec.save {
                        rt.write_state(
                            save,
                            serde_json::json!({"job": job, "status": status, "state": state.0, "error": error}),
                        );
                    }
                    match (error, spec.wait, status.as_deref()) {
                        (Some(error), _, _) => {
                            rt.fail(&path, format!("spawn {}: {error}", spec.flow));
                            Status::Failure
                        }
                        (None, false, _) | (None, true, Some("succeeded")) => Status::Success,
                        (None, true, other) => {
                            rt.fail(
                                &path,
                                format!(
                                    "child job {} of flow {} ended {}",
                                    job.unwrap_or_default(),
                                    spec.flow,
                                    other.unwrap_or("without a status")
                                ),
                            );
                            Status::Failure
                        }
                    }
                }
                Some(other) => unexpected(rt, &path, &other),
                None => Status::Running,
            }
        }
        SpecKind::Wait(spec) => {
            if fresh {
                let prompt = match &spec.prompt {
                    Some(template) => match template.render_string(&rt.scope()) {
                        Ok(prompt) => Some(prompt),
                        Err(err) => {
                            rt.fail(&path, format!("wait {} prompt: {err}", spec.key));
                            return Status::Failure;
                        }
                    },
                    None => None,
                };
                let park = rt.next_key(&path);
                let timer = spec.timeout_ms.map(|ms| rt.start_timer(&path, ms));
                let parked = Parked {
                    key: spec.key.clone(),
                    park: park.clone(),
                    path: path.to_string(),
                    prompt,
                    choices: spec.choices.clone(),
                    schema: spec.schema.as_ref().map(|s| s.source().clone().into()),
                    since: rt.now,
                };
                rt.parked.push(parked.clone());
                rt.commands.push(super::Command::Park(parked));
                node.state = NodeState::Wait {
                    park: Some(park),
                    timer,
                };
            }
            let NodeState::Wait { park, timer } = node.state.clone() else {
                unreachable!("a wait leaf always has wait state");
            };
            let Some(park) = park else {
                return Status::Failure;
            };
            if let Some(Delivery::Continued(input)) = rt.deliveries.remove(&park) {
                rt.parked.retain(|p| p.park != park);
                if let Some(timer) = &timer {
                    rt.cancel_effect(timer);
                }
                rt.write_state(&spec.key, input);
                node.state = NodeState::Wait {
                    park: None,
                    timer: None,
                };
                return Status::Success;
            }
            let timed_out = match &timer {
                Some(key) => matches!(rt.take_outcome(key), Some(Outcome::TimerFired)),
                None => false,
            };
            if timed_out {
                rt.parked.retain(|p| p.park != park);
                rt.commands.push(super::Command::Unpark {
                    key: spec.key.clone(),
                    park,
                });
                node.state = NodeState::Wait {
                    park: None,
                    timer: None,
                };
                rt.fail(&path, format!("nobody continued `{}` in time", spec.key));
                return Status::Failure;
            }
            Status::Waiting
        }
        composite => unreachable!("{} is not a leaf", composite.type_name()),
    }
}

fn effect_outcome(node: &mut RtNode, rt: &mut Runtime) -> Option<Outcome> {
    let NodeState::Effect { key } = &mut node.state else {
        return None;
    };
    let found = rt.take_outcome(key.as_deref()?)?;
    *key = None;
    Some(found)
}

fn unexpected(rt: &mut Runtime, path: &str, outcome: &Outcome) -> Status {
    rt.fail(path, format!("unexpected outcome {outcome:?}"));
    Status::Failure
}

fn describe_run_failure(result: &super::RunResult) -> String {
    let last_line = |text: &str| {
        text.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_owned())
    };
    let mut reason = if result.timed_out {
        "command timed out".to_owned()
    } else if let Some(error) = &result.error {
        format!("command failed: {error}")
    } else {
        match result.exit_code {
            Some(code) => format!("command exited with {code}"),
            None => "command ended without an exit code".to_owned(),
        }
    };
    if let Some(line) = last_line(&result.stderr) {
        reason.push_str(": ");
        reason.push_str(&line);
    }
    reason
}

/// py_trees `stop`: composites, decorators and leaves each stop their own way.
pub(super) fn stop_node(node: &mut RtNode, p: &Program, rt: &mut Runtime, new: Status) {
    match &p.spec(node.spec).kind {
        SpecKind::Sequence { .. } | SpecKind::Selector { .. } => {
            stop_composite(node, p, rt, new);
        }
        SpecKind::Parallel { .. } | SpecKind::ForEach { .. } => {
            for child in node.children.iter_mut() {
                if child.status.is_running() {
                    stop_node(child, p, rt, Status::Idle);
                }
            }
            stop_composite(node, p, rt, new);
        }
        SpecKind::UntilGreen { .. } | SpecKind::Loop(_) | SpecKind::BestOf { .. } => {
            super::rounds::terminate(node, p, rt);
            node.status = new;
        }
        SpecKind::Team(_) => {
            super::team::terminate(node, p, rt);
            node.status = new;
        }
        SpecKind::Wizard { .. } => {
            super::wizard::terminate(node, rt);
            for child in node.children.iter_mut() {
                if child.status.is_running() || new == Status::Idle {
                    stop_node(child, p, rt, Status::Idle);
                }
            }
            node.status = new;
        }
        SpecKind::Invert
        | SpecKind::ForceSuccess
        | SpecKind::ForceFailure
        | SpecKind::Retry { .. }
        | SpecKind::Repeat { .. }
        | SpecKind::Timeout { .. } => {
            terminate_decorator(node, rt);
            if new == Status::Idle {
                stop_node(&mut node.children[0], p, rt, Status::Idle);
            }
            if node.children[0].status.is_running() {
                stop_node(&mut node.children[0], p, rt, Status::Idle);
            }
            node.status = new;
        }
        _ => {
            if new == Status::Idle && node.status.is_running() {
                terminate_leaf(node, rt);
            }
            node.status = new;
        }
    }
}

fn stop_composite(node: &mut RtNode, p: &Program, rt: &mut Runtime, new: Status) {
    if new == Status::Idle {
        set_current(node, None);
        stop_children_from(node, p, rt, 0);
    }
    node.status = new;
}

/// Releases what a decorator holds (its timers).
fn terminate_decorator(node: &mut RtNode, rt: &mut Runtime) {
    match &mut node.state {
        NodeState::Retry { backoff, .. } => {
            if let Some(key) = backoff.take() {
                rt.cancel_effect(&key);
            }
        }
        NodeState::Timeout { timer } => {
            if let Some(key) = timer.take() {
                rt.cancel_effect(&key);
            }
        }
        _ => {}
    }
}

/// A running leaf was halted: cancel its effect or unpark it.
fn terminate_leaf(node: &mut RtNode, rt: &mut Runtime) {
    match &mut node.state {
        NodeState::Effect { key } => {
            if let Some(key) = key.take() {
                rt.cancel_effect(&key);
            }
        }
        NodeState::Wait { park, timer } => {
            if let Some(park) = park.take() {
                if let Some(parked) = rt.parked.iter().position(|p| p.park == park) {
                    let parked = rt.parked.remove(parked);
                    rt.commands.push(super::Command::Unpark {
                        key: parked.key,
                        park: park.clone(),
                    });
                }
                rt.deliveries.remove(&park);
            }
            if let Some(timer) = timer.take() {
                rt.cancel_effect(&timer);
            }
        }
        _ => {}
    }
}
