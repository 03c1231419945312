//! The `kv` provider: a durable key-value namespace per node, stored in the node's store
//! through its kernel. A `put` or `delete` rides with the batch of the step's completion
//! (`KernelMsg::Effect`): both are durable together, or neither is and the step runs
//! again.

use super::{CallContext, CallFuture, Failure, Provider};
use crate::genome::kernel::KernelMsg;
use palm_api::protocol::Request;
use serde_json::{Value, json};
use std::time::Duration;

/// See the module docs.
pub struct Kv;

impl Provider for Kv {
    fn name(&self) -> &str {
        "kv"
    }

    fn describe(&self) -> Value {
        json!({
            "name": "kv",
            "description": "a durable key-value namespace of this node",
            "args": {
                "op": "get, put, delete or list",
                "key": "the key (a prefix for list)",
                "value": "for put: any JSON",
            },
        })
    }

    fn call<'a>(&'a self, ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(async move {
            let op = super::string_arg(&args, "op", "kv")?.to_owned();
            let key = match (op.as_str(), args.get("key")) {
                ("list", None) => String::new(),
                _ => super::string_arg(&args, "key", "kv")?.to_owned(),
            };
            let request = Request::Kv {
                action: op,
                key,
                value: args.get("value").cloned().unwrap_or(Value::Null),
            };
            let answer = ctx
                .kernel
                .call(
                    |reply| KernelMsg::Effect(request, reply),
                    Some(Duration::from_secs(30)),
                )
                .await;
            match answer {
                Ok(ractor::rpc::CallResult::Success(response)) if response.ok => {
                    Ok(response.result.unwrap_or(Value::Null))
                }
                Ok(ractor::rpc::CallResult::Success(response)) => Err(Failure::new(format!(
                    "kv: {}",
                    response.error.map(|e| e.message).unwrap_or_default()
                ))),
                _ => Err(Failure::new("kv: the node's kernel did not answer")),
            }
        })
    }
}
