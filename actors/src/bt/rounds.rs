//! The nodes that go round: `until_green` (verify → fix → verify), `loop` (iterations
//! until a terminal state) and `best_of` (N attempts at once, one winner).
//!
//! Their state is rebuilt by replay like every other node's: each round's check, each
//! iteration's report and each attempt's calls arrive as journaled outcomes, so a node
//! killed mid-round resumes at that round with every earlier round's evidence.

use super::tick::{stop_node, tick_node, unfinished_status};
use super::{
    EffectRequest, NodeState, Outcome, Program, RtNode, Runtime, SpecKind, Status, render_value,
};
use crate::definition::{
    AGENT_PROVIDER, ATTEMPT_BINDING, CallSpec, FIX_BINDINGS, GATE_PROVIDER, LoopRule, RankBy,
    VERIFY_PROVIDER,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most entries a loop keeps in its saved history (the oldest go first).
pub const LOOP_HISTORY_MAX: usize = 100;
/// Most failures of one round an `until_green` keeps in its evidence (the check's full
/// result is in the journal, its log an artifact).
const EVIDENCE_FAILURES_MAX: usize = 50;

/// The providers whose outcomes a `best_of` lane records.
const LANE_PROVIDERS: [&str; 3] = [AGENT_PROVIDER, VERIFY_PROVIDER, GATE_PROVIDER];

/// Where an `until_green` is.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct GreenState {
    /// The check in flight.
    verify: Option<String>,
    /// The fix is running.
    fixing: bool,
    /// Fixes that ran.
    fixes: u32,
    /// Every check's result, in order.
    evidence: Vec<Value>,
    /// The latest check's full result (bound as `verify` inside the fix).
    latest: Value,
}

/// Where a `loop` is.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LoopState {
    iterations: u32,
    errors: u32,
    streak: u32,
    signature: String,
    history: Vec<Value>,
    pause: Option<String>,
    deadline: Option<String>,
}

/// Where a `best_of` is.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct BestState {
    /// The ranking call in flight.
    ranking: Option<String>,
    /// Which entry of this node this is (1, 2, ...): a best_of entered again (inside a
    /// loop, a retry) gets fresh lanes, never the worktrees of an earlier entry.
    entry: u32,
}

/// Records what a call made in a `best_of` lane produced (a compact summary).
pub(super) fn note_lane(
    lanes: &mut BTreeMap<String, Vec<Value>>,
    request: &EffectRequest,
    outcome: &Outcome,
) {
    let (
        EffectRequest::Call { provider, args, .. },
        Outcome::Call {
            ok, value, error, ..
        },
    ) = (request, outcome)
    else {
        return;
    };
    if !LANE_PROVIDERS.contains(&provider.as_str()) {
        return;
    }
    let Some(lane) = args.0.get("lane").and_then(Value::as_str) else {
        return;
    };
    let value = &value.0;
    let fact = match provider.as_str() {
        AGENT_PROVIDER => json!({
            "kind": "agent",
            "ok": ok,
            "provider": value.get("provider"),
            "end": value.get("end"),
            "patch": value.get("patch"),
            "repo": args.0.get("repo"),
            "worktree": value.get("worktree"),
            "error": error,
        }),
        VERIFY_PROVIDER => json!({
            "kind": "verify",
            "ok": ok,
            "signature": value.get("signature"),
            "failures": value.get("failures").and_then(Value::as_array).map(Vec::len),
            "error": error,
        }),
        _ => json!({
            "kind": "gate",
            "ok": ok,
            "approved": value.get("approved"),
            "reason": value.get("reason"),
            "error": error,
        }),
    };
    lanes.entry(lane.to_owned()).or_default().push(fact);
}

/// Starts a `call` from its spec; the error says why its arguments did not render.
fn start_call(rt: &mut Runtime, path: &str, spec: &CallSpec) -> Result<String, String> {
    let args = render_value(&spec.args, &rt.scope())
        .map_err(|err| format!("call {} args: {err}", spec.provider))?;
    Ok(rt.start_effect(
        path,
        EffectRequest::Call {
            provider: spec.provider.clone(),
            args: args.into(),
            needs: spec.needs.clone(),
            timeout_ms: spec.timeout_ms,
        },
    ))
}

fn finish(node: &mut RtNode, p: &Program, rt: &mut Runtime, new: Status) -> Status {
    stop_node(node, p, rt, new);
    node.status = new;
    new
}

/// One round's evidence, kept small: the failures capped, everything else as the check
/// said it.
fn evidence_of(round: u32, value: &Value) -> Value {
    let mut entry = json!({ "round": round });
    if let (Some(entry), Some(result)) = (entry.as_object_mut(), value.as_object()) {
        for (key, field) in result {
            let field = match (key.as_str(), field) {
                ("failures", Value::Array(failures)) if failures.len() > EVIDENCE_FAILURES_MAX => {
                    Value::Array(failures[..EVIDENCE_FAILURES_MAX].to_vec())
                }
                _ => field.clone(),
            };
            entry.insert(key.clone(), field);
        }
    }
    entry
}

/// `until_green`: check; while red and rounds remain, fix (with `failures`, `verify` and
/// `round` bound) and check again. Ends `green` (success), `stalled` (a check failed
/// exactly as the one before it) or `exhausted` (red after `max_rounds` fixes).
pub(super) fn tick_until_green(node: &mut RtNode, p: &Program, rt: &mut Runtime) -> Status {
    let SpecKind::UntilGreen {
        verify,
        max_rounds,
        save,
    } = &p.spec(node.spec).kind
    else {
        unreachable!("an until_green node has until_green spec");
    };
    let path = node.path.to_string();
    if !node.status.is_running() {
        node.state = NodeState::UntilGreen(GreenState::default());
        match start_call(rt, &path, verify) {
            Ok(key) => green_state(node).verify = Some(key),
            Err(reason) => {
                rt.fail(&path, format!("until_green check: {reason}"));
                return finish(node, p, rt, Status::Failure);
            }
        }
    }
    if green_state(node).fixing {
        let state = green_state(node);
        // In FIX_BINDINGS' order: failures, verify, round.
        let values = [
            state.latest["failures"].clone(),
            state.latest.clone(),
            json!(state.fixes + 1),
        ];
        for (name, value) in FIX_BINDINGS.iter().zip(values) {
            rt.bindings.push((Arc::from(*name), value));
        }
        let fixed = tick_node(&mut node.children[0], p, rt);
        for _ in FIX_BINDINGS {
            rt.bindings.pop();
        }
        if fixed.is_running() {
            node.status = fixed;
            return fixed;
        }
        let fix = if fixed == Status::Success {
            "succeeded"
        } else {
            "failed"
        };
        let state = green_state(node);
        state.fixing = false;
        state.fixes += 1;
        if let Some(last) = state.evidence.last_mut().and_then(Value::as_object_mut) {
            last.insert("fix".into(), json!(fix));
        }
        match start_call(rt, &path, verify) {
            Ok(key) => green_state(node).verify = Some(key),
            Err(reason) => {
                rt.fail(&path, format!("until_green check: {reason}"));
                return finish(node, p, rt, Status::Failure);
            }
        }
        node.status = Status::Running;
        return Status::Running;
    }
    let Some(key) = green_state(node).verify.clone() else {
        return finish(node, p, rt, Status::Failure);
    };
    let Some(outcome) = rt.take_outcome(&key) else {
        node.status = Status::Running;
        return Status::Running;
    };
    green_state(node).verify = None;
    let (value, error) = match outcome {
        Outcome::Call { value, error, .. } => (value.0, error),
        other => {
            rt.fail(&path, format!("unexpected outcome {other:?}"));
            return finish(node, p, rt, Status::Failure);
        }
    };
    let state = green_state(node);
    let round = state.fixes;
    state.evidence.push(evidence_of(round, &value));
    let previous = state
        .evidence
        .len()
        .checked_sub(2)
        .and_then(|i| state.evidence.get(i))
        .and_then(|e| e["signature"].as_str())
        .map(str::to_owned);
    state.latest = value.clone();
    let fixes = state.fixes;
    let evidence = state.evidence.clone();
    let green = value["ok"] == json!(true);
    let signature = value["signature"].as_str().unwrap_or_default().to_owned();
    let checked = value.get("ok").is_some();
    let outcome = if green {
        Some("green")
    } else if !checked {
        None
    } else if fixes > 0 && previous.as_deref() == Some(signature.as_str()) {
        Some("stalled")
    } else if fixes >= *max_rounds {
        Some("exhausted")
    } else {
        None
    };
    let summary =
        |outcome: &str| json!({ "outcome": outcome, "rounds": fixes, "evidence": evidence });
    if let Some(save) = save {
        rt.write_state(save, summary(outcome.unwrap_or("running")));
    }
    if !checked {
        // The check itself could not run (a bad cwd, no shell): nothing to fix.
        let why = error.unwrap_or_else(|| "the check gave no verdict".to_owned());
        if let Some(save) = save {
            rt.write_state(save, summary("error"));
        }
        rt.fail(&path, format!("until_green check: {why}"));
        return finish(node, p, rt, Status::Failure);
    }
    match outcome {
        Some("green") => {
            rt.outcome = Some("green".to_owned());
            finish(node, p, rt, Status::Success)
        }
        Some(end) => {
            let failing = value["failures"]
                .as_array()
                .map(|f| {
                    f.iter()
                        .filter_map(|x| x["name"].as_str())
                        .take(5)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            let reason = match end {
                "stalled" => format!(
                    "until_green stalled after {fixes} round(s): the check failed the same way twice ({failing})"
                ),
                _ => format!("until_green exhausted: still red after {fixes} round(s) ({failing})"),
            };
            rt.fail(&path, reason);
            rt.outcome = Some(end.to_owned());
            finish(node, p, rt, Status::Failure)
        }
        None => {
            green_state(node).fixing = true;
            rt.retick = true;
            node.status = Status::Running;
            Status::Running
        }
    }
}

fn green_state(node: &mut RtNode) -> &mut GreenState {
    match &mut node.state {
        NodeState::UntilGreen(state) => state,
        _ => unreachable!("an until_green node has until_green state"),
    }
}

fn loop_state(node: &mut RtNode) -> &mut LoopState {
    match &mut node.state {
        NodeState::Loop(state) => state,
        _ => unreachable!("a loop node has loop state"),
    }
}

/// `loop`: ticks its body to the end once per iteration and reads the report the
/// iteration wrote (`{state, signature}` at `state.<report>`). See docs/verification.md.
pub(super) fn tick_loop(node: &mut RtNode, p: &Program, rt: &mut Runtime) -> Status {
    let SpecKind::Loop(rule) = &p.spec(node.spec).kind else {
        unreachable!("a loop node has loop spec");
    };
    let path = node.path.to_string();
    if !node.status.is_running() {
        node.state = NodeState::Loop(LoopState::default());
        rt.remove_state(&rule.report);
        if let Some(ms) = rule.timeout_ms {
            let timer = rt.start_timer(&path, ms);
            loop_state(node).deadline = Some(timer);
        }
    }
    if let Some(deadline) = loop_state(node).deadline.clone()
        && matches!(rt.take_outcome(&deadline), Some(Outcome::TimerFired))
    {
        loop_state(node).deadline = None;
        let reason = format!(
            "loop exhausted: out of time after {} iteration(s)",
            loop_state(node).iterations
        );
        return end_loop(node, p, rt, rule, "exhausted", reason);
    }
    if let Some(pause) = loop_state(node).pause.clone() {
        match rt.take_outcome(&pause) {
            Some(Outcome::TimerFired) => loop_state(node).pause = None,
            _ => {
                node.status = Status::Running;
                return Status::Running;
            }
        }
    }
    let body = tick_node(&mut node.children[0], p, rt);
    if body.is_running() {
        node.status = body;
        return body;
    }
    let report = rt.state.get(&rule.report).cloned();
    rt.remove_state(&rule.report);
    let parsed = match (body, &report) {
        (Status::Success, Some(report)) => read_report(report),
        (Status::Success, None) => Err(format!(
            "the iteration wrote no report at `state.{}`",
            rule.report
        )),
        _ => Err(rt
            .last_failure
            .clone()
            .unwrap_or_else(|| "the iteration failed".to_owned())),
    };
    let state = loop_state(node);
    let (verdict, signature) = match parsed {
        Ok(parsed) => parsed,
        Err(why) => {
            // An errored iteration neither advances the loop nor resets stagnation.
            state.errors += 1;
            push_history(state, json!({ "state": "error", "error": why }));
            if state.errors >= rule.max_errors {
                let reason = format!(
                    "loop exhausted: {} iteration(s) in a row failed; the last: {why}",
                    state.errors
                );
                return end_loop(node, p, rt, rule, "exhausted", reason);
            }
            return next_iteration(node, rt, rule, &path);
        }
    };
    state.errors = 0;
    push_history(state, json!({ "state": verdict, "signature": signature }));
    match verdict.as_str() {
        "done" => end_loop(node, p, rt, rule, "success", String::new()),
        "no_op" => end_loop(node, p, rt, rule, "no_op", String::new()),
        "blocked" => {
            let reason = format!(
                "loop blocked after {} iteration(s)",
                loop_state(node).iterations + 1
            );
            end_loop(node, p, rt, rule, "blocked", reason)
        }
        _ => {
            let state = loop_state(node);
            state.iterations += 1;
            if signature.is_empty() {
                state.streak = 0;
            } else if signature == state.signature {
                state.streak += 1;
            } else {
                state.streak = 1;
            }
            state.signature = signature.clone();
            if state.streak >= rule.stagnation {
                let reason = format!(
                    "loop stagnated: the same signature {signature} {} times in a row",
                    state.streak
                );
                return end_loop(node, p, rt, rule, "stagnated", reason);
            }
            if state.iterations >= rule.max_iterations {
                let reason = format!(
                    "loop exhausted: {} iterations without finishing",
                    state.iterations
                );
                return end_loop(node, p, rt, rule, "exhausted", reason);
            }
            next_iteration(node, rt, rule, &path)
        }
    }
}

fn push_history(state: &mut LoopState, entry: Value) {
    if state.history.len() >= LOOP_HISTORY_MAX {
        state.history.remove(0);
    }
    state.history.push(entry);
}

/// `{state: continue|done|no_op|blocked, signature}`; a bare string is a state. A saved
/// `run` result reports through the last line of its stdout (the JSON a script printed)
/// and an agent's through its structured answer.
fn read_report(report: &Value) -> Result<(String, String), String> {
    if report.get("state").is_none() {
        let printed = report
            .get("stdout")
            .and_then(Value::as_str)
            .and_then(|out| out.lines().rev().find(|l| !l.trim().is_empty()))
            .and_then(|line| serde_json::from_str::<Value>(line.trim()).ok());
        let inner = report
            .get("structured")
            .filter(|s| s.get("state").is_some())
            .cloned()
            .or(printed);
        if let Some(inner) = inner
            && inner != *report
        {
            return read_report(&inner);
        }
    }
    let (verdict, signature) = match report {
        Value::String(s) => (Some(s.as_str()), String::new()),
        Value::Object(map) => (
            map.get("state").and_then(Value::as_str),
            match map.get("signature") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            },
        ),
        _ => (None, String::new()),
    };
    match verdict {
        Some(v @ ("continue" | "done" | "no_op" | "blocked")) => Ok((v.to_owned(), signature)),
        _ => {
            let shown = report.to_string();
            let shown = match shown.char_indices().nth(200) {
                Some((end, _)) => format!("{}...", &shown[..end]),
                None => shown,
            };
            Err(format!(
                "the iteration's report {shown} has no `state` of continue, done, no_op or blocked"
            ))
        }
    }
}

fn next_iteration(node: &mut RtNode, rt: &mut Runtime, rule: &LoopRule, path: &str) -> Status {
    if rule.every_ms > 0 {
        let timer = rt.start_timer(path, rule.every_ms);
        loop_state(node).pause = Some(timer);
    } else {
        rt.retick = true;
    }
    if let Some(save) = &rule.save {
        let summary = loop_summary(loop_state(node), "running");
        rt.write_state(save, summary);
    }
    node.status = Status::Running;
    Status::Running
}

fn loop_summary(state: &LoopState, outcome: &str) -> Value {
    json!({
        "outcome": outcome,
        "iterations": state.iterations,
        "errors": state.errors,
        "signature": state.signature,
        "history": state.history,
    })
}

fn end_loop(
    node: &mut RtNode,
    p: &Program,
    rt: &mut Runtime,
    rule: &LoopRule,
    outcome: &str,
    reason: String,
) -> Status {
    if let Some(save) = &rule.save {
        let summary = loop_summary(loop_state(node), outcome);
        rt.write_state(save, summary);
    }
    let status = if matches!(outcome, "success" | "no_op") {
        Status::Success
    } else {
        rt.fail(&node.path, reason);
        Status::Failure
    };
    rt.outcome = Some(outcome.to_owned());
    finish(node, p, rt, status)
}

/// `best_of`: every attempt at once, each with `attempt` bound (`index`, `provider`,
/// `lane`); when all have ended, the node's `best_of` provider ranks them (it can read
/// diffs and the repo index) and the winner's index decides.
pub(super) fn tick_best_of(node: &mut RtNode, p: &Program, rt: &mut Runtime) -> Status {
    let SpecKind::BestOf {
        n,
        providers,
        rank,
        save,
    } = &p.spec(node.spec).kind
    else {
        unreachable!("a best_of node has best_of spec");
    };
    let body = p.spec(node.spec).children[0];
    let path = node.path.to_string();
    if !node.status.is_running() {
        // A per-path counter, like effect keys: the same on replay.
        let entry = rt.next_key(&format!("{path}#entry"));
        let entry = entry
            .rsplit('/')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        node.state = NodeState::BestOf(BestState {
            ranking: None,
            entry,
        });
    }
    let entry = match &node.state {
        NodeState::BestOf(state) => state.entry,
        _ => 1,
    };
    let lane_of = |i: u32| format!("b{}-{entry}-{i}", path.replace('.', "_"));
    let attempt = |i: u32| {
        let provider = if providers.is_empty() {
            Value::Null
        } else {
            json!(providers[i as usize % providers.len()])
        };
        json!({ "index": i, "provider": provider, "lane": lane_of(i), "n": n })
    };
    if !node.status.is_running() {
        for child in node.children.iter_mut() {
            if child.status.is_running() {
                stop_node(child, p, rt, Status::Idle);
            }
        }
        node.children = (0..*n)
            .map(|i| RtNode::new(p, body, format!("{path}.{i}")))
            .collect();
        for i in 0..*n {
            rt.lanes.remove(&lane_of(i));
        }
    }
    let ranking = match &node.state {
        NodeState::BestOf(state) => state.ranking.clone(),
        _ => None,
    };
    if let Some(key) = ranking {
        let Some(outcome) = rt.take_outcome(&key) else {
            node.status = Status::Running;
            return Status::Running;
        };
        let (value, error) = match outcome {
            Outcome::Call { value, error, .. } => (value.0, error),
            other => {
                rt.fail(&path, format!("unexpected outcome {other:?}"));
                return finish(node, p, rt, Status::Failure);
            }
        };
        rt.write_state(save, value.clone());
        for i in 0..*n {
            rt.lanes.remove(&lane_of(i));
        }
        return match value["winner"].as_u64() {
            Some(_) => finish(node, p, rt, Status::Success),
            None => {
                let why = error.unwrap_or_else(|| "no attempt left a patch to choose".into());
                rt.fail(&path, format!("best_of: {why}"));
                finish(node, p, rt, Status::Failure)
            }
        };
    }
    for (i, child) in node.children.iter_mut().enumerate() {
        if matches!(child.status, Status::Success | Status::Failure) {
            continue;
        }
        rt.bindings
            .push((Arc::from(ATTEMPT_BINDING), attempt(i as u32)));
        tick_node(child, p, rt);
        rt.bindings.pop();
    }
    if node.children.iter().any(|c| c.status.is_running()) {
        let status = unfinished_status(&node.children);
        node.status = status;
        return status;
    }
    let attempts: Vec<Value> = node
        .children
        .iter()
        .enumerate()
        .map(|(i, child)| {
            let mut entry = attempt(i as u32);
            entry["status"] = json!(if child.status == Status::Success {
                "succeeded"
            } else {
                "failed"
            });
            entry["facts"] = json!(
                rt.lanes
                    .get(&lane_of(i as u32))
                    .cloned()
                    .unwrap_or_default()
            );
            entry
        })
        .collect();
    let rank: Vec<&str> = rank.iter().map(|r: &RankBy| r.as_str()).collect();
    let key = rt.start_effect(
        &path,
        EffectRequest::Call {
            provider: crate::definition::RANK_PROVIDER.to_owned(),
            args: json!({ "rank": rank, "attempts": attempts }).into(),
            needs: Vec::new(),
            timeout_ms: Some(10 * 60 * 1000),
        },
    );
    node.state = NodeState::BestOf(BestState {
        ranking: Some(key),
        entry,
    });
    node.status = Status::Running;
    Status::Running
}

/// Releases what a round node holds when it is halted or ends: its check, its timers,
/// its ranking call, and its running children.
pub(super) fn terminate(node: &mut RtNode, p: &Program, rt: &mut Runtime) {
    let keys: Vec<String> = match &mut node.state {
        NodeState::UntilGreen(state) => {
            state.fixing = false;
            state.verify.take().into_iter().collect()
        }
        NodeState::Loop(state) => [state.pause.take(), state.deadline.take()]
            .into_iter()
            .flatten()
            .collect(),
        NodeState::BestOf(state) => state.ranking.take().into_iter().collect(),
        _ => Vec::new(),
    };
    for key in keys {
        rt.cancel_effect(&key);
    }
    for child in node.children.iter_mut() {
        if child.status.is_running() {
            stop_node(child, p, rt, Status::Idle);
        }
    }
}
