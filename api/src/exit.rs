//! Exit codes and the error every command returns.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | the job succeeded, or the command did what it was asked |
//! | 1 | any other error (I/O, a store problem, a node that does not answer) |
//! | 2 | usage error or invalid input (bad flow, unknown job, wrong wait key, ...) |
//! | 3 | the job failed |
//! | 4 | the job is waiting for input |
//! | 5 | the job was cancelled |
//! | 6 | a loop with the same key is already running (`already_running`; nothing started) |
//! | 7 | the job succeeded, and its loop ended `no_op` (there was nothing to do) |
//! | 8 | the job failed: its loop ended `blocked` |
//! | 9 | the job failed: no progress (a loop `stagnated`, an until_green `stalled`) |
//! | 10 | the job failed: out of rounds, iterations or time (`exhausted`) |
//! | 130 | interrupted by Ctrl-C at a prompt (`palm wizard`: the draft is kept) |
//!
//! Codes 7 to 10 come from the job's `outcome` (how its last `loop` or `until_green`
//! ended, when nothing failed after it); without one, the status decides (0, 3, 4, 5).

use palm_actors::job::JobStatus;
use std::fmt;

/// Process exit codes (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// 0
    Ok = 0,
    /// 1
    Failure = 1,
    /// 2
    Usage = 2,
    /// 3
    JobFailed = 3,
    /// 4
    JobWaiting = 4,
    /// 5
    JobCancelled = 5,
    /// 6
    AlreadyRunning = 6,
    /// 7
    NoOp = 7,
    /// 8
    Blocked = 8,
    /// 9
    Stagnated = 9,
    /// 10
    Exhausted = 10,
    /// 130 (128 + SIGINT, the shell's convention)
    Interrupted = 130,
}

impl Code {
    /// The exit code that reports a job in this status.
    pub fn for_status(status: JobStatus) -> Code {
        match status {
            JobStatus::Succeeded => Code::Ok,
            JobStatus::Failed => Code::JobFailed,
            JobStatus::Waiting => Code::JobWaiting,
            JobStatus::Cancelled => Code::JobCancelled,
            // Still going (a wait that timed out, or `--no-wait`): the command itself worked.
            JobStatus::Pending | JobStatus::Running => Code::Ok,
        }
    }

    /// The exit code that reports a job in this status whose last loop or until_green
    /// ended with `outcome` (see the module docs).
    pub fn for_job(status: JobStatus, outcome: Option<&str>) -> Code {
        match (status, outcome) {
            (JobStatus::Succeeded, Some("no_op")) => Code::NoOp,
            (JobStatus::Failed, Some("blocked")) => Code::Blocked,
            (JobStatus::Failed, Some("stagnated" | "stalled")) => Code::Stagnated,
            (JobStatus::Failed, Some("exhausted")) => Code::Exhausted,
            (status, _) => Code::for_status(status),
        }
    }
}

/// A command's failure: what to tell the person, and how to exit.
#[derive(Debug)]
pub struct CliError {
    /// Exit code.
    pub code: Code,
    /// A short machine-readable kind (`unknown_job`, `invalid_input`, ...).
    pub kind: String,
    /// One line saying what went wrong.
    pub message: String,
    /// What to do about it, when we know.
    pub hint: Option<String>,
    /// The job the failure is about, when there is one the person can go on with (a
    /// wizard's job stopped at a step): `error.job` in `--json`.
    pub job: Option<String>,
}

impl CliError {
    /// Invalid input or usage (exit 2).
    pub fn usage(kind: &str, message: impl Into<String>) -> CliError {
        CliError {
            code: Code::Usage,
            kind: kind.to_owned(),
            message: message.into(),
            hint: None,
            job: None,
        }
    }

    /// Any other failure (exit 1).
    pub fn failure(kind: &str, message: impl Into<String>) -> CliError {
        CliError {
            code: Code::Failure,
            kind: kind.to_owned(),
            message: message.into(),
            hint: None,
            job: None,
        }
    }

    /// Adds a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> CliError {
        self.hint = Some(hint.into());
        self
    }

    /// Names the job the failure is about.
    pub fn with_job(mut self, job: impl Into<String>) -> CliError {
        self.job = Some(job.into());
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<anyhow::Error> for CliError {
    fn from(err: anyhow::Error) -> Self {
        CliError::failure("error", format!("{err:#}"))
    }
}

impl From<std::io::Error> for CliError {
    fn from(err: std::io::Error) -> Self {
        CliError::failure("io", err.to_string())
    }
}

/// Result of a command: the exit code to use on success paths (a job's outcome).
pub type CliResult = Result<Code, CliError>;
