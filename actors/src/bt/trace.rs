//! The trace harness: tick a tree of scripted leaves and report every node's status.
//!
//! `palm flows trace SPEC.json --ticks N` uses it to compare Palm's composites with
//! py_trees tick for tick. The SPEC grammar (JSON):
//!
//! ```text
//! {"type":"seq"|"sel","memory":bool,"name":str,"children":[...]}
//! {"type":"par","policy":"all"|"one","synchronise":bool,"name":str,"children":[...]}
//! {"type":"inv"|"force_success"|"force_failure","name":str,"child":{...}}
//! {"type":"leaf","name":str,"queue":["S","F","R",...],"eventually":"S"|"F"|"R"|null}
//! ```
//!
//! A leaf returns its queue's next status each time it is ticked, then `eventually`
//! (running when null or absent). Names must be unique: the output is keyed by them.

use super::{Engine, Program, Spec, SpecId, SpecKind, Status};
use crate::definition::Threshold;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;

/// Bound on spec size, so a hostile spec cannot exhaust memory.
pub const TRACE_NODES_MAX: usize = 10_000;

/// A problem in a trace spec: where (a JSON pointer) and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", if pointer.is_empty() { "at the root" } else { pointer.as_str() })]
pub struct SpecError {
    /// JSON pointer to the offending value.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

fn err(pointer: &str, message: impl Into<String>) -> SpecError {
    SpecError {
        pointer: pointer.to_owned(),
        message: message.into(),
    }
}

/// Builds a program from a trace spec.
pub fn program_from_spec(spec: &Value) -> Result<Program, SpecError> {
    let mut builder = Builder {
        specs: Vec::new(),
        names: HashSet::new(),
    };
    let root = builder.node(spec, "")?;
    Ok(Program::from_specs(builder.specs, root))
}

struct Builder {
    specs: Vec<Spec>,
    names: HashSet<String>,
}

fn letter(value: &Value, pointer: &str) -> Result<Status, SpecError> {
    match value.as_str() {
        Some("S") => Ok(Status::Success),
        Some("F") => Ok(Status::Failure),
        Some("R") => Ok(Status::Running),
        _ => Err(err(
            pointer,
            format!("expected \"S\", \"F\" or \"R\", found {value}"),
        )),
    }
}

impl Builder {
    fn node(&mut self, value: &Value, pointer: &str) -> Result<SpecId, SpecError> {
        if self.specs.len() >= TRACE_NODES_MAX {
            return Err(err(pointer, format!("more than {TRACE_NODES_MAX} nodes")));
        }
        let object = value
            .as_object()
            .ok_or_else(|| err(pointer, "a node must be an object"))?;
        let node_type = object
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| err(pointer, "missing string field `type`"))?;
        let name = object
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| err(pointer, "missing string field `name`"))?
            .to_owned();
        if !self.names.insert(name.clone()) {
            return Err(err(pointer, format!("duplicate node name `{name}`")));
        }
        let flag = |key: &str, default: bool| -> Result<bool, SpecError> {
            match object.get(key) {
                None => Ok(default),
                Some(Value::Bool(b)) => Ok(*b),
                Some(other) => Err(err(
                    &format!("{pointer}/{key}"),
                    format!("expected a boolean, found {other}"),
                )),
            }
        };
        let mut children = Vec::new();
        let kind = match node_type {
            "seq" | "sel" | "par" => {
                let list = object
                    .get("children")
                    .and_then(Value::as_array)
                    .ok_or_else(|| err(pointer, "missing list field `children`"))?;
                for (i, child) in list.iter().enumerate() {
                    children.push(self.node(child, &format!("{pointer}/children/{i}"))?);
                }
                match node_type {
                    "seq" => SpecKind::Sequence {
                        memory: flag("memory", true)?,
                    },
                    "sel" => SpecKind::Selector {
                        memory: flag("memory", true)?,
                    },
                    _ => match object.get("policy").and_then(Value::as_str) {
                        Some("all") => SpecKind::Parallel {
                            success: Threshold::All,
                            failure: Threshold::Any,
                            synchronise: flag("synchronise", true)?,
                        },
                        // py_trees' SuccessOnOne never synchronises.
                        Some("one") => SpecKind::Parallel {
                            success: Threshold::Any,
                            failure: Threshold::Any,
                            synchronise: false,
                        },
                        _ => {
                            return Err(err(
                                &format!("{pointer}/policy"),
                                "expected \"all\" or \"one\"",
                            ));
                        }
                    },
                }
            }
            "inv" | "force_success" | "force_failure" => {
                let child = object
                    .get("child")
                    .ok_or_else(|| err(pointer, "missing field `child`"))?;
                children.push(self.node(child, &format!("{pointer}/child"))?);
                match node_type {
                    "inv" => SpecKind::Invert,
                    "force_success" => SpecKind::ForceSuccess,
                    _ => SpecKind::ForceFailure,
                }
            }
            "leaf" => {
                let queue = match object.get("queue") {
                    None => Vec::new(),
                    Some(Value::Array(items)) => items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| letter(item, &format!("{pointer}/queue/{i}")))
                        .collect::<Result<_, _>>()?,
                    Some(other) => {
                        return Err(err(
                            &format!("{pointer}/queue"),
                            format!("expected a list, found {other}"),
                        ));
                    }
                };
                let eventually = match object.get("eventually") {
                    None | Some(Value::Null) => None,
                    Some(other) => Some(letter(other, &format!("{pointer}/eventually"))?),
                };
                SpecKind::Scripted { queue, eventually }
            }
            other => {
                return Err(err(
                    &format!("{pointer}/type"),
                    format!(
                        "unknown type `{other}`; expected seq, sel, par, inv, force_success, force_failure or leaf"
                    ),
                ));
            }
        };
        self.specs.push(Spec {
            kind,
            children,
            label: name,
            detail: None,
            span: None,
        });
        Ok((self.specs.len() - 1) as SpecId)
    }
}

/// Ticks a spec `ticks` times; returns one JSON line per tick:
/// `{"tick": N, "status": {"<name>": "S"|"F"|"R"|"I", ...}}`, nodes in pre-order.
pub fn trace(spec: &Value, ticks: u32) -> Result<Vec<String>, SpecError> {
    let program = Arc::new(program_from_spec(spec)?);
    let mut engine = Engine::new(program, "trace", Value::Object(Default::default()));
    let mut lines = Vec::with_capacity(ticks as usize);
    for tick in 1..=ticks {
        engine.tick_once(u64::from(tick));
        let mut line = format!("{{\"tick\": {tick}, \"status\": {{");
        for (i, (name, status)) in engine.statuses().iter().enumerate() {
            if i > 0 {
                line.push_str(", ");
            }
            line.push_str(&serde_json::to_string(name).unwrap_or_default());
            line.push_str(": \"");
            line.push_str(status.letter());
            line.push('"');
        }
        line.push_str("}}");
        lines.push(line);
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn statuses(spec: Value, ticks: u32) -> Vec<String> {
        let lines = trace(&spec, ticks).expect("valid spec");
        lines
            .iter()
            .map(|line| {
                let v: Value = serde_json::from_str(line).expect("json line");
                v["status"]
                    .as_object()
                    .expect("status object")
                    .iter()
                    .map(|(k, s)| format!("{k}={}", s.as_str().unwrap_or("?")))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    #[test]
    fn sequence_with_memory_resumes_at_the_running_child() {
        let spec = json!({"type": "seq", "memory": true, "name": "root", "children": [
            {"type": "leaf", "name": "a", "queue": ["S", "F"], "eventually": "S"},
            {"type": "leaf", "name": "b", "queue": ["R", "S"], "eventually": "S"}
        ]});
        assert_eq!(
            statuses(spec, 3),
            vec!["a=S b=R root=R", "a=S b=S root=S", "a=F b=I root=F"]
        );
    }

    #[test]
    fn reactive_sequence_re_ticks_from_the_first_child() {
        let spec = json!({"type": "seq", "memory": false, "name": "root", "children": [
            {"type": "leaf", "name": "a", "queue": ["S", "F"], "eventually": "S"},
            {"type": "leaf", "name": "b", "queue": ["R"], "eventually": "S"}
        ]});
        assert_eq!(statuses(spec, 2), vec!["a=S b=R root=R", "a=F b=I root=F"]);
    }

    #[test]
    fn bad_specs_say_where() {
        let spec = json!({"type": "seq", "name": "r", "children": [{"type": "wat", "name": "x"}]});
        let err = trace(&spec, 1).unwrap_err();
        assert_eq!(err.pointer, "/children/0/type");
        let spec = json!({"type": "seq", "name": "r", "children": [{"type": "leaf", "name": "r"}]});
        assert!(trace(&spec, 1).unwrap_err().message.contains("duplicate"));
        let spec = json!({"type": "leaf", "name": "r", "queue": ["X"]});
        assert_eq!(trace(&spec, 1).unwrap_err().pointer, "/queue/0");
    }
}
