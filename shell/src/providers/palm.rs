//! The `palm` provider: Palm calling Palm. Submits a flow — to the nearest home (this node
//! unless it is an edge), or to the node `node` names (a root or realm of the tree, which
//! the submit travels to over the links) — optionally waits for it, and saves
//! `{job, status, state, error}`. Every request goes where the node's own control
//! requests go (`control::dispatch`): the caller's status to its home, the wait to the
//! started job's.
//!
//! The call's effect key is the start's idempotency key: a call run twice (a seat died
//! after submitting) finds the job it started the first time. The started job's depth is
//! one more than its caller's; past the bound, or when the flow is already in the chain
//! of callers (a cycle), the call fails instead of starting anything.

use super::{CallContext, CallFuture, Failure, Provider};
use palm_actors::interest::{DEPTH_MAX, StartedBy};
use palm_api::protocol::{FlowArg, Request, Response};
use serde_json::{Value, json};
use std::time::Duration;

/// Default wait for a started job.
pub const WAIT_MS_DEFAULT: u64 = 600_000;

/// See the module docs.
pub struct Palm;

async fn ask(ctx: &CallContext<'_>, request: Request, timeout: Duration) -> Result<Value, Failure> {
    let answer = tokio::time::timeout(timeout, crate::control::dispatch(ctx.genome, request)).await;
    match answer {
        Ok(Response {
            ok: true, result, ..
        }) => Ok(result.unwrap_or(Value::Null)),
        Ok(Response { error, .. }) => Err(Failure::new(format!(
            "palm: {}",
            error
                .map(|e| match e.hint {
                    Some(hint) => format!("{} ({hint})", e.message),
                    None => e.message,
                })
                .unwrap_or_default()
        ))),
        Err(_) => Err(Failure::new(format!(
            "palm: no answer within {} ms",
            timeout.as_millis()
        ))),
    }
}

impl Provider for Palm {
    fn name(&self) -> &str {
        "palm"
    }

    fn describe(&self) -> Value {
        json!({
            "name": "palm",
            "description": "submit a flow (here, or on a named node of the tree) and (by default) wait for its job",
            "args": {
                "flow": "a stored flow name (required)",
                "input": "the job's input fields",
                "wait": "true (default): wait until the job settles",
                "timeout_ms": WAIT_MS_DEFAULT,
                "node": "the node to home the job (a root or realm of the tree, by name); default: the nearest home",
            },
            "depth_max": DEPTH_MAX,
        })
    }

    fn call<'a>(&'a self, ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(async move {
            let flow = super::string_arg(&args, "flow", "palm")?.to_owned();
            let node = match args.get("node") {
                None | Some(Value::Null) => None,
                Some(Value::String(node)) if !node.is_empty() => Some(node.clone()),
                Some(other) => {
                    return Err(Failure::new(format!(
                        "palm: `node` must be a node's name, found {other}"
                    )));
                }
            };
            let input = match args.get("input") {
                None | Some(Value::Null) => serde_json::Map::new(),
                Some(Value::Object(map)) => map.clone(),
                Some(other) => {
                    return Err(Failure::new(format!(
                        "palm: `input` must be a mapping, found {other}"
                    )));
                }
            };
            let wait = args.get("wait").and_then(Value::as_bool).unwrap_or(true);
            // Who calls: its depth and the chain of flows that led to it.
            let caller = ask(
                &ctx,
                Request::Status {
                    job: ctx.effect.job.clone(),
                },
                Duration::from_secs(30),
            )
            .await?;
            let caller_flow = caller["flow"].as_str().unwrap_or_default().to_owned();
            let caller_by: Option<StartedBy> =
                serde_json::from_value(caller["started_by"].clone()).ok();
            let (depth, mut chain) = caller_by.map_or((0, Vec::new()), |s| (s.depth, s.chain));
            chain.push(caller_flow.clone());
            if chain.contains(&flow) {
                return Err(Failure::new(format!(
                    "palm: calling `{flow}` would close a cycle: {} → {flow}",
                    chain.join(" → ")
                )));
            }
            if depth + 1 > DEPTH_MAX {
                return Err(Failure::new(format!(
                    "palm: calling `{flow}` would go {} deep (bound {DEPTH_MAX}): {}",
                    depth + 1,
                    chain.join(" → ")
                )));
            }
            let submitted = ask(
                &ctx,
                Request::Submit {
                    flow: FlowArg::Stored {
                        name: flow.clone(),
                        revision: None,
                    },
                    input,
                    args: Vec::new(),
                    started_by: Some(StartedBy {
                        key: ctx.effect.key.clone(),
                        cause: format!("call from job {} ({caller_flow})", ctx.effect.job),
                        depth: depth + 1,
                        chain,
                    }),
                    node,
                },
                Duration::from_secs(60),
            )
            .await?;
            let job = submitted["job"].as_str().unwrap_or_default().to_owned();
            if !wait {
                return Ok(json!({"job": job, "status": submitted["status"]}));
            }
            let timeout_ms = args
                .get("timeout_ms")
                .and_then(Value::as_u64)
                .unwrap_or(WAIT_MS_DEFAULT);
            let view = ask(
                &ctx,
                Request::Wait {
                    job: job.clone(),
                    timeout_ms: Some(timeout_ms),
                },
                Duration::from_millis(timeout_ms + 5_000),
            )
            .await?;
            let status = view["status"].as_str().unwrap_or_default().to_owned();
            let value = json!({"job": job, "status": status, "state": view["state"], "error": view["error"]});
            match status.as_str() {
                "succeeded" => Ok(value),
                "waiting" | "running" | "pending" => Err(Failure {
                    reason: format!(
                        "palm: job {job} of `{flow}` is still {status} after {timeout_ms} ms"
                    ),
                    value,
                }),
                _ => Err(Failure {
                    reason: format!(
                        "palm: job {job} of `{flow}` {status}{}",
                        view["error"]
                            .as_str()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    ),
                    value,
                }),
            }
        })
    }
}
