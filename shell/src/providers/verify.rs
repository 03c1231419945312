//! The `verify` provider: the effect behind a `verify` leaf and every `until_green`
//! round. It runs a check command (`sh -c`, under the same gate as a `run` step), keeps
//! its whole output (stdout and stderr, interleaved) as an artifact of the job, parses
//! the failures out of it (`palm_agents::verify`: cargo, pytest, go, jest, TAP, JUnit),
//! and answers `{ok, exit_code, failures, signature, duration_ms, log, ...}`.
//!
//! With `repo:`, the command runs in the job's worktree on that repo (a `best_of`
//! attempt's own, with `lane`), so it sees what the job's agents changed. The check is
//! green when the command exits 0 and no failure was parsed. A red check with no
//! failure the parsers recognise (a build error, a crash) gets one synthetic failure
//! named after how it ended, so two rounds that broke the same way still compare equal.

use super::agent::job_workdir;
use super::{CallContext, CallFuture, Failure, Provider, cut};
use crate::genome::gated::{self, GroupGuard, Program, open_gate, stop_group};
use palm_agents::git;
use palm_agents::verify::{self, Parser};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The most of a check's output kept (as its log artifact and for the parsers).
pub const LOG_BYTES_MAX: usize = 16 << 20;
/// The most of a report file (`report:`, JUnit XML) read.
const REPORT_BYTES_MAX: u64 = 16 << 20;
/// The most failures the answer lists (every one counts in the signature).
pub const ANSWER_FAILURES_MAX: usize = 100;
/// The longest message of a failure in the answer.
const ANSWER_MESSAGE_BYTES_MAX: usize = 1024;
/// A check's timeout when it gives none.
const TIMEOUT_MS_DEFAULT: u64 = 30 * 60 * 1000;

/// The `verify` provider of a node.
pub struct Verify {
    data: PathBuf,
}

impl Verify {
    /// The provider for a node on `data`.
    pub fn new(data: &Path) -> Verify {
        let data = if data.is_absolute() {
            data.to_owned()
        } else {
            std::env::current_dir().unwrap_or_default().join(data)
        };
        Verify { data }
    }

    async fn run(&self, ctx: &CallContext<'_>, args: Value) -> Result<Value, Failure> {
        let cmd = super::string_arg(&args, "cmd", "verify")?.to_owned();
        let parser = match args.get("parser").and_then(Value::as_str) {
            None => Parser::Auto,
            Some(name) => Parser::parse_name(name).ok_or_else(|| {
                Failure::new(format!(
                    "verify: `parser` must be one of {}, not {name}",
                    Parser::NAMES.join(", ")
                ))
            })?,
        };
        let timeout_ms = args
            .get("timeout_ms")
            .and_then(Value::as_u64)
            .unwrap_or(TIMEOUT_MS_DEFAULT);
        let optional = |name: &str| {
            args.get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let lane = optional("lane");
        let dir = match optional("repo") {
            Some(repo) => {
                job_workdir(
                    &self.data,
                    &ctx.effect.job,
                    Some(&repo),
                    lane.as_deref(),
                    "verify",
                )
                .await?
                .1
            }
            None => std::env::current_dir().unwrap_or_default(),
        };
        let dir = match optional("cwd") {
            Some(cwd) => dir.join(cwd),
            None => dir,
        };
        if !dir.is_dir() {
            return Err(Failure::new(format!(
                "verify: {} is not a directory",
                dir.display()
            )));
        }
        let artifacts = self.data.join("artifacts").join(git::safe(&ctx.effect.job));
        std::fs::create_dir_all(&artifacts).map_err(|e| {
            Failure::new(format!(
                "verify: cannot create {}: {e}",
                artifacts.display()
            ))
        })?;
        let log_path = artifacts.join(format!(
            "verify-{}.log",
            git::content_id(ctx.effect.key.as_bytes())
        ));
        let started = Instant::now();
        let ran = run_check(ctx, &cmd, &dir, timeout_ms, &log_path).await?;
        let duration_ms = started.elapsed().as_millis() as u64;
        let report = match optional("report") {
            Some(report) => Some(read_report(&dir.join(report))?),
            None => None,
        };
        let text = String::from_utf8_lossy(&ran.output);
        let parsed = verify::parse(parser, &cmd, &text, report.as_deref());
        let mut failures = parsed.failures;
        let exited_well = ran.exit_code == Some(0) && !ran.timed_out;
        if !exited_well && failures.is_empty() {
            failures.push(synthetic_failure(&ran, &text));
        }
        let ok = exited_well && failures.is_empty();
        let signature = verify::signature(&failures);
        let total = failures.len();
        let listed: Vec<Value> = failures
            .iter()
            .take(ANSWER_FAILURES_MAX)
            .map(|f| {
                json!({
                    "name": f.name,
                    "file": f.file,
                    "line": f.line,
                    "message": cut(&f.message, ANSWER_MESSAGE_BYTES_MAX),
                })
            })
            .collect();
        let mut answer = json!({
            "ok": ok,
            "exit_code": ran.exit_code,
            "failures": listed,
            "failures_total": total,
            "signature": signature,
            "duration_ms": duration_ms,
            "log": log_path.display().to_string(),
            "log_bytes": ran.bytes,
            "parser": parsed.parser.as_str(),
            "passed": parsed.passed,
            "failed": parsed.failed,
            "cmd": cmd,
            "cwd": dir.display().to_string(),
        });
        if ran.timed_out {
            answer["timed_out"] = json!(true);
        }
        if ran.truncated {
            answer["log_truncated"] = json!(true);
        }
        if ok {
            return Ok(answer);
        }
        let names: Vec<&str> = failures.iter().take(3).map(|f| f.name.as_str()).collect();
        let more = if total > names.len() {
            format!(" and {} more", total - names.len())
        } else {
            String::new()
        };
        Err(Failure {
            reason: format!(
                "verify: {total} failure{}: {}{more}",
                if total == 1 { "" } else { "s" },
                names.join(", ")
            ),
            value: answer,
        })
    }
}

/// What the check command did.
struct Ran {
    exit_code: Option<i32>,
    timed_out: bool,
    /// The kept output (at most [`LOG_BYTES_MAX`]).
    output: Vec<u8>,
    /// All the bytes it wrote.
    bytes: u64,
    truncated: bool,
}

/// Runs `cmd` in `dir` under the effect gate, its stdout and stderr into one stream,
/// written to `log_path` as it comes.
async fn run_check(
    ctx: &CallContext<'_>,
    cmd: &str,
    dir: &Path,
    timeout_ms: u64,
    log_path: &Path,
) -> Result<Ran, Failure> {
    // One stream, in the order the command wrote it: failures and their summary lines
    // are interleaved across stdout and stderr by most test runners.
    let script = format!("{{\n{cmd}\n}} 2>&1");
    let mut process = gated::command(&Program::Shell(&script));
    process
        .current_dir(dir)
        .env("PALM_JOB_ID", &ctx.effect.job)
        .env("PALM_EFFECT_KEY", &ctx.effect.key);
    let mut child = process
        .spawn()
        .map_err(|e| Failure::new(format!("verify: cannot start sh: {e}")))?;
    let pgid = child.id();
    let Some(recorded) = open_gate(ctx.genome, ctx.effect, &mut child, pgid, None, b"").await
    else {
        stop_group(&mut child, pgid).await;
        return Err(Failure::new(
            "verify: not started (the effect is no longer this node's)",
        ));
    };
    let guard = GroupGuard(pgid);
    let mut log = tokio::fs::File::create(log_path)
        .await
        .map_err(|e| Failure::new(format!("verify: cannot write {}: {e}", log_path.display())))?;
    let Some(mut stdout) = child.stdout.take() else {
        return Err(Failure::new("verify: the command has no output pipe"));
    };
    drop(child.stderr.take());
    let mut output = Vec::new();
    let mut bytes = 0u64;
    let mut buffer = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    let mut timed_out = false;
    loop {
        match tokio::time::timeout_at(deadline, stdout.read(&mut buffer)).await {
            Err(_) => {
                timed_out = true;
                break;
            }
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                bytes += n as u64;
                let room = LOG_BYTES_MAX.saturating_sub(output.len());
                let kept = &buffer[..n.min(room)];
                if !kept.is_empty() {
                    output.extend_from_slice(kept);
                    log.write_all(kept).await.map_err(|e| {
                        Failure::new(format!("verify: cannot write {}: {e}", log_path.display()))
                    })?;
                }
            }
        }
    }
    let status = if timed_out {
        stop_group(&mut child, pgid).await;
        None
    } else {
        match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(Ok(status)) => Some(status),
            Ok(Err(e)) => return Err(Failure::new(format!("verify: {e}"))),
            Err(_) => {
                timed_out = true;
                stop_group(&mut child, pgid).await;
                None
            }
        }
    };
    drop(guard);
    drop(recorded);
    let truncated = bytes > output.len() as u64;
    if truncated {
        let note = format!(
            "\n[palm: the output went on for {} more bytes, not kept]\n",
            bytes - output.len() as u64
        );
        let _ = log.write_all(note.as_bytes()).await;
    }
    let _ = log.flush().await;
    Ok(Ran {
        exit_code: status.and_then(|s| s.code()),
        timed_out,
        output,
        bytes,
        truncated,
    })
}

fn read_report(path: &Path) -> Result<String, Failure> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| {
        Failure::new(format!(
            "verify: cannot read the report {}: {e}",
            path.display()
        ))
    })?;
    let mut text = String::new();
    file.take(REPORT_BYTES_MAX)
        .read_to_string(&mut text)
        .map_err(|e| {
            Failure::new(format!(
                "verify: cannot read the report {}: {e}",
                path.display()
            ))
        })?;
    Ok(text)
}

/// The failure of a red check the parsers found nothing in: named by how it ended (a
/// stable name, so equal endings compare equal), its message the output's last lines.
fn synthetic_failure(ran: &Ran, text: &str) -> verify::Failure {
    let name = if ran.timed_out {
        "(the check timed out)".to_owned()
    } else {
        match ran.exit_code {
            Some(code) => format!("(the check exited {code})"),
            None => "(the check was killed by a signal)".to_owned(),
        }
    };
    let lines: Vec<&str> = text
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(20)
        .collect();
    let message = lines.into_iter().rev().collect::<Vec<_>>().join("\n");
    verify::Failure {
        name,
        file: None,
        line: None,
        message: cut(&message, ANSWER_MESSAGE_BYTES_MAX).to_owned(),
    }
}

impl Provider for Verify {
    fn name(&self) -> &str {
        "verify"
    }

    fn describe(&self) -> Value {
        json!({
            "name": "verify",
            "description": "a check (the `verify` leaf, each `until_green` round): runs a test command, keeps its log as an artifact of the job, parses its failures; answers {ok, exit_code, failures: [{name, file, line, message}], signature, duration_ms, log}",
            "args": {
                "cmd": "the command (sh -c) (required)",
                "parser": format!("one of {} (default auto)", Parser::NAMES.join(", ")),
                "repo": "run in the job's worktree on this checkout",
                "cwd": "a directory (inside the worktree when `repo` is given)",
                "report": "a report file to parse too (JUnit XML), relative to the directory",
                "timeout_ms": TIMEOUT_MS_DEFAULT,
            },
        })
    }

    fn call<'a>(&'a self, ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(async move { self.run(&ctx, args).await })
    }
}
