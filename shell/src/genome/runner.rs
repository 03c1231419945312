//! The effect runner: runs a claimed `run` effect as `sh -c CMD`, or a `call` through its
//! provider, and reports the outcome.
//!
//! The command runs under a gate in its own process group (`super::gated`), so
//! cancelling it (a halted branch, a timeout, a lost lease, the end of a shutdown grace)
//! signals the whole group: SIGTERM, then SIGKILL after [`KILL_GRACE_MS`]. Output is captured with a bound: the last
//! `output_bytes_max` bytes of each stream are kept. The lease is renewed while the
//! command runs; if a renewal is refused the effect is no longer ours and is stopped.
//! The command sees `PALM_JOB_ID`, `PALM_EFFECT_KEY` and `PALM_NODE_NAME`.

use super::Genome;
use super::gated::{
    DRAIN_AFTER_EXIT_MS, GroupGuard, Output, Program, Recorded, StartError, Started, start,
};
use super::kernel::KernelMsg;
use palm_actors::bt::{EffectRequest, Outcome, RunResult};
use palm_actors::path::ClaimedEffect;
use ractor::ActorRef;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{debug, warn};

pub use super::gated::KILL_GRACE_MS;

/// Where an effect's renewals go while it runs: the local kernel, or (for an effect
/// placed here by a parent) nowhere, since the tree core renews it. The outcome goes
/// home by [`KernelHost::complete`] or by the tree protocol.
pub trait EffectHost: Send + Sync {
    /// Extends the lease: `Ok(Some(until))` renewed, `Ok(None)` the home could not be
    /// asked just now (keep going; the lease may still be alive), `Err` refused (the
    /// effect is no longer ours: stop it).
    fn renew<'a>(
        &'a self,
        key: &'a str,
        token: u64,
    ) -> Pin<Box<dyn Future<Output = Result<Option<u64>, String>> + Send + 'a>>;
}

/// An effect run to its outcome.
pub struct Finished {
    /// What happened.
    pub outcome: Outcome,
    /// The record of the command's process group, for an effect that ran one: dropped,
    /// it tells the local kernel the command exited in a message of its own; a local
    /// effect's completion carries it instead ([`KernelHost::complete`]).
    pub group: Option<Recorded>,
}

/// The local kernel as an effect's host.
pub struct KernelHost(pub ActorRef<KernelMsg>);

impl EffectHost for KernelHost {
    fn renew<'a>(
        &'a self,
        key: &'a str,
        token: u64,
    ) -> Pin<Box<dyn Future<Output = Result<Option<u64>, String>> + Send + 'a>> {
        Box::pin(async move {
            let renewed = self
                .0
                .call(
                    |reply| KernelMsg::Renew {
                        key: key.to_owned(),
                        token,
                        from: None,
                        reply,
                    },
                    Some(Duration::from_secs(10)),
                )
                .await;
            match renewed {
                Ok(ractor::rpc::CallResult::Success(Ok(until))) => Ok(Some(until)),
                Ok(ractor::rpc::CallResult::Success(Err(refused))) => Err(refused),
                _ => Ok(None),
            }
        })
    }
}

impl KernelHost {
    /// Reports a local effect's outcome, and its command's exit when it ran one, in one
    /// message (the kernel took two, about one message's handling per `run` step more);
    /// `Err` says why it was not recorded.
    async fn complete(&self, key: &str, token: u64, finished: Finished) -> Result<(), String> {
        let Finished { outcome, group } = finished;
        let reply = self
            .0
            .call(
                |reply| {
                    let complete = KernelMsg::Complete {
                        key: key.to_owned(),
                        token,
                        outcome,
                        node: None,
                        from: None,
                        reply,
                    };
                    match group {
                        // The exit first, as when the record told it on its own.
                        Some(group) => KernelMsg::Batch(vec![group.exited(), complete]),
                        None => complete,
                    }
                },
                Some(Duration::from_secs(60)),
            )
            .await;
        match reply {
            Ok(ractor::rpc::CallResult::Success(result)) => result,
            // The kernel died before answering: the effect's claim dies with it and the
            // effect runs again (at least once).
            _ => Err("the kernel did not acknowledge the completion".to_owned()),
        }
    }
}

/// Runs one claimed effect on a local seat and reports it to the kernel.
pub async fn run(
    genome: &Arc<Genome>,
    seat: usize,
    kernel: &ActorRef<KernelMsg>,
    effect: ClaimedEffect,
) {
    let cancel = genome.seats.start(seat, &effect.key, &effect.job);
    let host = KernelHost(kernel.clone());
    let finished = execute(genome, &host, &effect, cancel).await;
    genome.seats.finish(seat, &effect.key);
    let Some(finished) = finished else {
        debug!(
            key = effect.key,
            "effect stopped before completion; not reported"
        );
        return;
    };
    if let Err(refused) = host.complete(&effect.key, effect.token, finished).await {
        debug!(key = effect.key, refused, "completion not recorded");
    }
}

/// Runs an effect to its outcome (`None`: cancelled, or its lease lost), renewing its
/// lease through `host` while it runs.
pub async fn execute(
    genome: &Arc<Genome>,
    host: &dyn EffectHost,
    effect: &ClaimedEffect,
    cancel: watch::Receiver<bool>,
) -> Option<Finished> {
    match &effect.request {
        EffectRequest::Run {
            cmd,
            cwd,
            env,
            timeout_ms,
            ..
        } => {
            let command = Command {
                cmd,
                cwd: cwd.as_deref(),
                env,
                timeout_ms: *timeout_ms,
            };
            run_command(genome, host, effect, &command, cancel)
                .await
                .map(|(result, group)| Finished {
                    outcome: Outcome::Run(result),
                    group,
                })
        }
        EffectRequest::Call {
            provider,
            args,
            timeout_ms,
            ..
        } => run_call(
            genome,
            host,
            effect,
            provider,
            args.0.clone(),
            *timeout_ms,
            cancel,
        )
        .await
        .map(|outcome| Finished {
            outcome,
            group: None,
        }),
        other => {
            warn!(
                key = effect.key,
                kind = other.kind_name(),
                "seat claimed an effect it cannot run"
            );
            None
        }
    }
}

/// How often to renew a claim: a third of its lease — the home's lease, as the claim
/// says (an effect placed here by a parent runs under the parent's lease, not ours).
fn renew_interval(genome: &Genome, effect: &ClaimedEffect) -> Duration {
    let granted = effect.lease_until.saturating_sub(super::now_ms());
    let lease = if granted > 0 {
        granted
    } else {
        genome.settings.lease_ms
    };
    Duration::from_millis((lease / 3).max(100))
}

/// Default bound on one provider call (its own `timeout_ms` may be longer or shorter).
const CALL_TIMEOUT_MS_DEFAULT: u64 = 600_000;

/// Runs one `call` through its provider, renewing the lease while it runs; `None` when
/// the effect was cancelled or its lease lost (nothing is reported then).
async fn run_call(
    genome: &Arc<Genome>,
    host: &dyn EffectHost,
    effect: &ClaimedEffect,
    provider: &str,
    args: serde_json::Value,
    timeout_ms: Option<u64>,
    mut cancel: watch::Receiver<bool>,
) -> Option<Outcome> {
    let failed = |error: String, value: serde_json::Value| Outcome::Call {
        ok: false,
        value: palm_actors::json::Json(value),
        error: Some(error),
    };
    let Some(handler) = genome.providers.get(provider) else {
        let known = genome.providers.names().join(", ");
        return Some(failed(
            format!("no provider `{provider}` is registered on this node (known: {known})"),
            serde_json::Value::Null,
        ));
    };
    let timeout_ms = timeout_ms.unwrap_or(CALL_TIMEOUT_MS_DEFAULT);
    // Providers that go through a kernel use this node's (a `kv` call placed here writes
    // this node's namespace).
    let Some(kernel) = genome.kernel() else {
        return Some(failed(
            "the node's kernel is restarting".to_owned(),
            serde_json::Value::Null,
        ));
    };
    let context = super::provider::CallContext {
        genome,
        kernel: &kernel,
        effect,
    };
    let call = handler.call(context, args);
    tokio::pin!(call);
    let deadline = tokio::time::sleep(Duration::from_millis(timeout_ms));
    tokio::pin!(deadline);
    let renew_every = renew_interval(genome, effect);
    let mut renew =
        tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    loop {
        tokio::select! {
            result = &mut call => {
                return Some(match result {
                    Ok(value) => Outcome::Call { ok: true, value: palm_actors::json::Json(value), error: None },
                    Err(failure) => failed(failure.reason, failure.value),
                });
            }
            () = &mut deadline => {
                return Some(failed(format!("call {provider} timed out after {timeout_ms} ms"), serde_json::Value::Null));
            }
            changed = cancel.changed() => {
                if changed.is_err() || *cancel.borrow() {
                    return None;
                }
            }
            _ = renew.tick() => {
                if let Err(refused) = host.renew(&effect.key, effect.token).await {
                    debug!(key = effect.key, refused, "lease lost; abandoning the call");
                    return None;
                }
            }
        }
    }
}

struct Command<'a> {
    cmd: &'a str,
    cwd: Option<&'a str>,
    env: &'a [(String, String)],
    timeout_ms: Option<u64>,
}

async fn run_command(
    genome: &Arc<Genome>,
    host: &dyn EffectHost,
    effect: &ClaimedEffect,
    command: &Command<'_>,
    mut cancel: watch::Receiver<bool>,
) -> Option<(RunResult, Option<Recorded>)> {
    let started = Instant::now();
    let mut process = super::gated::command(&Program::Shell(command.cmd));
    process
        .env("PALM_JOB_ID", &effect.job)
        .env("PALM_EFFECT_KEY", &effect.key)
        .env("PALM_NODE_NAME", &genome.info.name);
    for (key, value) in command.env {
        process.env(key, value);
    }
    if let Some(cwd) = command.cwd {
        process.current_dir(cwd);
    }
    // The command waits at its gate until its group is recorded durably; a node killed
    // from here on finds the group at its next boot and stops it.
    let Started {
        mut child,
        pgid,
        recorded,
    } = match start(genome, effect, &mut process, Some(&cancel), b"").await {
        Ok(started) => started,
        Err(StartError::Spawn(err)) => {
            let place = command.cwd.map(|c| format!(" in {c}")).unwrap_or_default();
            let result = RunResult {
                error: Some(format!("cannot start `sh -c`{place}: {err}")),
                duration_ms: started.elapsed().as_millis() as u64,
                ..RunResult::default()
            };
            return Some((result, None));
        }
        Err(StartError::NotStarted) => return None,
    };
    // If this future is dropped mid-command (the node's runtime shutting down, a caller
    // giving up), the whole group goes with it, not only `sh` (`kill_on_drop`): a
    // command's own children (`sleep` under `sh -c`) would outlive it. Dropped before the
    // record. Defused once the command has exited on its own.
    let mut guard = GroupGuard(pgid);
    let max = genome.settings.output_bytes_max;
    let mut output = Output::take(&mut child, max, max);
    let renew_every = renew_interval(genome, effect);
    let mut renew =
        tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    let deadline = command
        .timeout_ms
        .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let mut timed_out = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = output.read() => {}
            () = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            } => {
                timed_out = true;
                output.stop(&mut child, pgid).await;
                break child.wait().await;
            }
            changed = cancel.changed() => {
                if changed.is_err() || *cancel.borrow() {
                    output.stop(&mut child, pgid).await;
                    return None;
                }
            }
            _ = renew.tick() => {
                if let Err(refused) = host.renew(&effect.key, effect.token).await {
                    debug!(key = effect.key, refused, "lease lost; stopping the command");
                    output.stop(&mut child, pgid).await;
                    return None;
                }
            }
        }
    };
    guard.0 = None;
    let (stdout, stderr) = output
        .finish(Duration::from_millis(DRAIN_AFTER_EXIT_MS))
        .await;
    let (stdout, stderr) = (stdout.into_text(), stderr.into_text());
    let (exit_code, error) = match status {
        Ok(status) => match status.code() {
            Some(code) => (Some(code), None),
            None => {
                use std::os::unix::process::ExitStatusExt;
                (
                    None,
                    status.signal().map(|s| format!("killed by signal {s}")),
                )
            }
        },
        Err(err) => (None, Some(format!("cannot wait for the command: {err}"))),
    };
    let result = RunResult {
        exit_code: if timed_out { None } else { exit_code },
        stdout,
        stderr,
        duration_ms: started.elapsed().as_millis() as u64,
        timed_out,
        error: if timed_out {
            Some(format!(
                "timed out after {} ms",
                command.timeout_ms.unwrap_or_default()
            ))
        } else {
            error
        },
    };
    Some((result, Some(recorded)))
}
