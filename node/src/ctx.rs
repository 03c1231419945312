//! What every command knows (the data directory, the output mode) and the two things
//! most do with it: send one request, print the answer. A leaf: the commands use it; it
//! uses none of them.

use crate::exit::CliError;
use crate::output::Output;
use palm_api::protocol::Request;
use palm_node::target::{Access, Target};
use serde_json::Value;
use std::path::PathBuf;

/// What every command knows.
pub struct Ctx {
    /// Data directory.
    pub data: PathBuf,
    /// Output mode.
    pub out: Output,
}

/// Prints `value`: one JSON document with `--json`, else `human`'s rendering.
pub fn print(ctx: &Ctx, value: &Value, human: impl Fn(&Output, &Value)) {
    if ctx.out.json {
        ctx.out.json(value);
    } else {
        human(&ctx.out, value);
    }
}

/// Sends one request wherever it goes ([`Target::for_access`]) and returns its result.
pub async fn one_call(ctx: &Ctx, access: Access, request: Request) -> Result<Value, CliError> {
    let mut target = Target::for_access(&ctx.data, access).await?;
    let result = target.call(request).await;
    target.finish().await;
    result
}
