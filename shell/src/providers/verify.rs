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
use crate::genome::gated::{
    self, DRAIN_AFTER_EXIT_MS, GroupGuard, Program, StartError, Started, stop_group,
};
use palm_agents::git;
use palm_agents::verify::{self, Parser};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
        let artifacts = palm_agents::artifacts::dir(&self.data, &ctx.effect.job);
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
        let started_at = std::time::SystemTime::now();
        let mut ran = run_check(ctx, &cmd, &dir, timeout_ms, &log_path).await?;
        let duration_ms = started.elapsed().as_millis() as u64;
        // A report the check did not write this time (a build that failed before the
        // tests ran, a stale file of an earlier round) is no evidence: the log decides.
        let report =
            optional("report").and_then(|report| read_report(&dir.join(report), started_at));
        let output = std::mem::take(&mut ran.output);
        let command = cmd.clone();
        let (parsed, text) = tokio::task::spawn_blocking(move || {
            let text = String::from_utf8_lossy(&output).into_owned();
            (
                verify::parse(parser, &command, &text, report.as_deref()),
                text,
            )
        })
        .await
        .map_err(|e| Failure::new(format!("verify: the parser stopped: {e}")))?;
        let mut failures = parsed.failures;
        let (mut signature, mut total) = (parsed.signature, parsed.total);
        let exited_well = ran.exit_code == Some(0) && !ran.timed_out;
        if !exited_well && failures.is_empty() {
            failures.push(synthetic_failure(&ran, &text));
            signature = verify::signature(&failures);
            total = 1;
        }
        let ok = exited_well && failures.is_empty();
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

/// Runs `cmd` in `dir` under the effect gate. Its stdout and stderr (the shell's own
/// errors included) share one pipe, so the log has them in the order they were written;
/// a reader thread writes it to `log_path` as it comes. The check ends when the shell
/// exits: output is drained for a moment after, then the group is killed, so a
/// background process that keeps the pipe open cannot hold the check to its timeout.
async fn run_check(
    ctx: &CallContext<'_>,
    cmd: &str,
    dir: &Path,
    timeout_ms: u64,
    log_path: &Path,
) -> Result<Ran, Failure> {
    let (reader, writer) =
        std::io::pipe().map_err(|e| Failure::new(format!("verify: cannot make a pipe: {e}")))?;
    let writer_too = writer
        .try_clone()
        .map_err(|e| Failure::new(format!("verify: cannot make a pipe: {e}")))?;
    let mut process = gated::command(&Program::Shell(cmd));
    process
        .current_dir(dir)
        .stdout(writer)
        .stderr(writer_too)
        .env("PALM_JOB_ID", &ctx.effect.job)
        .env("PALM_EFFECT_KEY", &ctx.effect.key)
        .env("PALM_NODE_NAME", &ctx.genome.info.name);
    let log = std::fs::File::create(log_path)
        .map_err(|e| Failure::new(format!("verify: cannot write {}: {e}", log_path.display())))?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(read_log(reader, log));
    });
    let started = gated::start(ctx.genome, ctx.effect, &mut process, None, b"").await;
    // The command holds this side's copies of the write end: without dropping them the
    // reader would never see the end of the output.
    drop(process);
    let Started {
        mut child,
        pgid,
        recorded,
    } = started.map_err(|err| match err {
        StartError::Spawn(e) => Failure::new(format!("verify: cannot start sh: {e}")),
        StartError::NotStarted => {
            Failure::new("verify: not started (the effect is no longer this node's)")
        }
    })?;
    let guard = GroupGuard(pgid);
    let status = match tokio::time::timeout(Duration::from_millis(timeout_ms), child.wait()).await {
        Ok(Ok(status)) => Some(status),
        Ok(Err(e)) => return Err(Failure::new(format!("verify: {e}"))),
        Err(_) => {
            stop_group(&mut child, pgid).await;
            None
        }
    };
    let mut done_rx = done_rx;
    let drained =
        tokio::time::timeout(Duration::from_millis(DRAIN_AFTER_EXIT_MS), &mut done_rx).await;
    // Whatever is left of the group (a background process holding the pipe) goes now,
    // which closes the pipe and ends the reader.
    drop(guard);
    drop(recorded);
    let read = match drained {
        Ok(read) => read,
        Err(_) => done_rx.await,
    }
    .map_err(|_| Failure::new("verify: the log reader stopped"))?
    .map_err(|e| Failure::new(format!("verify: cannot write {}: {e}", log_path.display())))?;
    Ok(Ran {
        exit_code: status.and_then(|s| s.code()),
        timed_out: status.is_none(),
        truncated: read.1 > read.0.len() as u64,
        output: read.0,
        bytes: read.1,
    })
}

/// Copies the check's output to its log, keeping the first [`LOG_BYTES_MAX`] bytes (in
/// memory too, for the parsers); answers them and how many bytes came in all.
fn read_log(
    mut reader: std::io::PipeReader,
    mut log: std::fs::File,
) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::{Read, Write};
    let mut output = Vec::new();
    let mut bytes = 0u64;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        bytes += n as u64;
        let room = LOG_BYTES_MAX.saturating_sub(output.len());
        let kept = &buffer[..n.min(room)];
        if !kept.is_empty() {
            output.extend_from_slice(kept);
            log.write_all(kept)?;
        }
    }
    if bytes > output.len() as u64 {
        writeln!(
            log,
            "\n[palm: the output went on for {} more bytes, not kept]",
            bytes - output.len() as u64
        )?;
    }
    log.flush()?;
    Ok((output, bytes))
}

/// A report file written since the check started, or `None` (missing, stale,
/// unreadable: the log is parsed instead).
fn read_report(path: &Path, since: std::time::SystemTime) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let modified = file.metadata().and_then(|m| m.modified()).ok()?;
    // File times can be coarser than the clock: a second's slack.
    if modified + Duration::from_secs(1) < since {
        return None;
    }
    let mut text = String::new();
    file.take(REPORT_BYTES_MAX).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The failure of a red check the parsers found nothing in: named by how it ended (a
/// stable name, so equal endings compare equal), its message the output's last lines.
fn synthetic_failure(ran: &Ran, text: &str) -> verify::Failure {
    let ending = if ran.timed_out {
        "the check timed out".to_owned()
    } else {
        match ran.exit_code {
            Some(code) => format!("the check exited {code}"),
            None => "the check was killed by a signal".to_owned(),
        }
    };
    // The first error line (a compiler's, an interpreter's) names the failure, without
    // the places it points at: fixing one build error into another is progress, and
    // must not read as the same failure.
    let name = match first_error(text) {
        Some(error) => format!("({ending}: {error})"),
        None => format!("({ending})"),
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

/// The first line of `text` that reports an error, with paths and `file:line`
/// locations taken out (they move between runs), at most 200 bytes.
fn first_error(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|line| {
        let lower = line.to_ascii_lowercase();
        lower.starts_with("error")
            || lower.contains("error:")
            || lower.contains("error[")
            || lower.starts_with("fatal")
            || lower.contains("exception")
    })?;
    let located = |word: &str| {
        word.split(':')
            .skip(1)
            .any(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
    };
    let cleaned: String = line
        .split_whitespace()
        .filter(|word| !(word.contains('/') || word.starts_with("-->") || located(word)))
        .collect::<Vec<_>>()
        .join(" ");
    Some(cut(&cleaned, 200).to_owned())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_error_names_its_failure_without_the_places_it_points_at() {
        let one = "   Compiling calc v0.1.0\nerror[E0425]: cannot find value `x` in this scope\n --> src/lib.rs:2:5\n";
        let moved = "error[E0425]: cannot find value `x` in this scope\n --> src/lib.rs:9:1\n";
        let other = "error[E0308]: mismatched types\n --> src/lib.rs:2:5\n";
        assert_eq!(first_error(one), first_error(moved));
        assert_ne!(first_error(one), first_error(other));
        assert_eq!(
            first_error("src/main.py:3: error: name 'x' is not defined").as_deref(),
            Some("error: name 'x' is not defined")
        );
        assert_eq!(first_error("all good\n"), None);
    }
}
