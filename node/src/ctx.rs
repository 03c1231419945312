//! What every command knows (the data directory, the output mode) and the two things
//! most do with it: send one request, print the answer. A leaf: the commands use it; it
//! uses none of them.

use crate::exit::{CliError, Code};
use crate::output::Output;
use indicatif::{ProgressBar, ProgressStyle};
use palm_actors::job::JobStatus;
use palm_api::protocol::Request;
use palm_node::target::{Access, Target};
use serde_json::Value;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

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

pub fn spinner(ctx: &Ctx, message: String) -> Option<ProgressBar> {
    if ctx.out.json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(100));
    Some(bar)
}

pub fn status_code(view: &Value) -> Code {
    let outcome = view.get("outcome").and_then(Value::as_str);
    view.get("status")
        .and_then(Value::as_str)
        .and_then(JobStatus::parse)
        .map_or(Code::Ok, |status| Code::for_job(status, outcome))
}

/// Waits for a job to settle (terminal or waiting, or `timeout_ms`), a spinner labelled
/// `label` showing its progress; its status view as the node shows it.
pub async fn settled_view(
    ctx: &Ctx,
    target: &mut Target,
    job: &str,
    label: &str,
    timeout_ms: Option<u64>,
) -> Result<Value, CliError> {
    let bar = spinner(ctx, label.to_owned());
    let started = std::time::Instant::now();
    let timeout_ms = timeout_ms.unwrap_or(crate::control::WAIT_MS_MAX);
    let view = palm_api::verbs::settle(target, job, timeout_ms, WAIT_SLICE_MS, |_, view| {
        if let Some(bar) = &bar {
            bar.set_message(palm_api::verbs::progress_line(job, view, started));
        }
        std::future::ready(())
    })
    .await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let mut view = view?;
    // Whether it settled is its status.
    if let Some(object) = view.as_object_mut() {
        object.remove("settled");
    }
    Ok(view)
}

/// How often `palm run`/`palm continue` re-ask while waiting (the spinner's news).
pub const WAIT_SLICE_MS: u64 = 1_000;
