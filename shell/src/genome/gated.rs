//! A process under a gate: the machinery every command Palm starts for an effect shares
//! (a `run` step's `sh -c`, a declared provider's program).
//!
//! The process starts blocked on one line of stdin, in its own process group. Its group
//! is recorded where the node's next life finds it (`super::live_groups`), and the gate
//! line is written only once that is done and the request the command runs for is
//! durable (`open_gate`): a node killed before that leaves the gate at end of file and
//! the command never starts, and a node killed after it finds the group at its next boot
//! (`super::orphans`). Stopping is by group: SIGTERM, then SIGKILL after
//! [`KILL_GRACE_MS`]. Output is kept with a bound ([`Tail`]).

use super::Genome;
use super::kernel::KernelMsg;
use super::live_groups::LiveGroups;
use palm_actors::path::ClaimedEffect;
use ractor::ActorRef;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tracing::{debug, error, warn};

/// Time between SIGTERM and SIGKILL when stopping a command.
pub const KILL_GRACE_MS: u64 = 2_000;

/// How long to keep reading output after the command exits (a background grandchild may
/// hold the pipe open forever).
pub const DRAIN_AFTER_EXIT_MS: u64 = 200;

/// Kills a process group when dropped: a caller that gives up on a gated process (its
/// timeout, a cancel, a lost lease drops the future) takes the whole group with it.
/// Drop it before the [`Recorded`] record, so the group is gone before it is forgotten.
pub struct GroupGuard(pub Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = crate::sys::kill_group(pgid, crate::sys::SIGKILL);
        }
    }
}

/// The script a `run` command starts under: it waits for one line on stdin (the gate),
/// then, with stdin from /dev/null and no positional parameters, runs CMD itself (`eval`)
/// — what `exec sh -c CMD` did, without a second shell's exec (about 0.4 ms of CPU per
/// command here, a third of a bare `sh -c true`). `$0` is `sh`. If the node dies before
/// opening the gate, stdin reaches end of file and the command never starts (exit 125).
const GATE_SHELL: &str = "read -r _ || exit 125; exec </dev/null; __palm_cmd=$1; shift; \
                          eval \"unset __palm_cmd; $__palm_cmd\"";

/// The script a program given as argv starts under: the same gate, then `exec` of the
/// argv with stdin left open, so what follows the gate line (a provider's arguments) is
/// the program's input. `read` takes one byte at a time from a pipe, so nothing past
/// the gate line is consumed.
const GATE_ARGV: &str = "read -r _ || exit 125; exec \"$@\"";

/// What a gated process runs.
pub enum Program<'a> {
    /// `sh -c TEXT`, stdin from /dev/null.
    Shell(&'a str),
    /// A program and its arguments, no shell; stdin carries the gate's payload.
    Argv(&'a [String]),
}

/// A `tokio::process::Command` for `program` under its gate, in its own process group,
/// with every stream piped. The caller adds environment and working directory, then
/// spawns it and opens its gate with [`start`].
pub fn command(program: &Program<'_>) -> tokio::process::Command {
    let mut process = tokio::process::Command::new(crate::sys::shell());
    match program {
        Program::Shell(text) => {
            process.arg("-c").arg(GATE_SHELL).arg("sh").arg(text);
        }
        Program::Argv(argv) => {
            process
                .arg("-c")
                .arg(GATE_ARGV)
                .arg("palm-effect")
                .args(argv.iter());
        }
    }
    process
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    process
}

/// A gated process just spawned: the child, its process group, and its leader's start
/// time in clock ticks since boot (0 if unknown), which the group's record carries.
struct Spawned {
    child: tokio::process::Child,
    pgid: Option<u32>,
    start_ticks: u64,
}

/// Spawns a command made by [`command`], noting when, so the group's record need not
/// read the leader's start time from /proc (`sys::start_ticks_between`).
fn spawn(process: &mut tokio::process::Command) -> std::io::Result<Spawned> {
    let before = crate::sys::boot_ticks_now();
    let child = process.spawn()?;
    let after = crate::sys::boot_ticks_now();
    let pgid = child.id();
    let start_ticks = pgid
        .and_then(|pid| crate::sys::start_ticks_between(pid, before, after))
        .unwrap_or(0);
    Ok(Spawned {
        child,
        pgid,
        start_ticks,
    })
}

/// A gated command past its gate: running, its group recorded.
pub struct Started {
    /// The child (`sh`, or the program it became).
    pub child: tokio::process::Child,
    /// Its process group (the leader's pid).
    pub pgid: Option<u32>,
    /// The group's record, kept while the command runs (see [`Recorded`]).
    pub recorded: Recorded,
}

/// Why a gated command did not start.
pub enum StartError {
    /// The process could not be spawned.
    Spawn(std::io::Error),
    /// Its gate stayed shut (see `open_gate`); the process was stopped.
    NotStarted,
}

/// Spawns `process` (made by [`command`], with the caller's environment and directory)
/// and opens its gate (`open_gate`); a process whose gate stays shut is stopped
/// before this returns.
pub async fn start(
    genome: &Genome,
    effect: &ClaimedEffect,
    process: &mut tokio::process::Command,
    cancel: Option<&watch::Receiver<bool>>,
    payload: &[u8],
) -> Result<Started, StartError> {
    let mut spawned = spawn(process).map_err(StartError::Spawn)?;
    match open_gate(genome, effect, &mut spawned, cancel, payload).await {
        Some(recorded) => Ok(Started {
            child: spawned.child,
            pgid: spawned.pgid,
            recorded,
        }),
        None => {
            stop_group(&mut spawned.child, spawned.pgid).await;
            Err(StartError::NotStarted)
        }
    }
}

/// How long the kernel may take to answer for a command's group.
const RECORD_TIMEOUT_MS: u64 = 30_000;

/// A command's group, recorded while the command runs; dropping it forgets the record
/// (its file at once, the store's copy with the next batch).
pub struct Recorded {
    /// Told of the exit on drop; `None` once [`Recorded::exited`] handed the message out.
    kernel: Option<ActorRef<KernelMsg>>,
    key: String,
    token: u64,
    /// Forgotten as the kernel hears of the exit.
    _live: super::live_groups::LiveRecord,
}

impl Recorded {
    /// Forgets the record of a command that has exited and gives the kernel's message
    /// saying so to the caller, which sends it with the effect's completion in one
    /// message (`KernelHost::complete`) rather than as a message of its own.
    pub fn exited(mut self) -> KernelMsg {
        self.kernel = None;
        KernelMsg::Exited {
            key: std::mem::take(&mut self.key),
            token: self.token,
        }
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        if let Some(kernel) = self.kernel.take() {
            let _ = kernel.cast(KernelMsg::Exited {
                key: std::mem::take(&mut self.key),
                token: self.token,
            });
        }
    }
}

/// Records the gated command's process group where this node's next life will find it
/// ([`LiveGroups`]: a file under the data directory, which a killed process cannot take
/// back) and with the local kernel (whoever is the effect's home: a placed effect's group
/// is this node's to stop after a crash), and opens the gate once the kernel says the
/// batch that requested the effect is durable (at once for an effect placed here: its
/// home made its claim for this node durable before this node heard of it).
/// `None`: the command must not start (the claim is no longer current, the record cannot
/// be written, the kernel is gone, or the effect was cancelled meanwhile).
async fn open_gate(
    genome: &Genome,
    effect: &ClaimedEffect,
    spawned: &mut Spawned,
    cancel: Option<&watch::Receiver<bool>>,
    payload: &[u8],
) -> Option<Recorded> {
    use palm_actors::path::records::RunningGroup;
    use tokio::io::AsyncWriteExt;
    let pgid = spawned.pgid?;
    let kernel = genome.kernel()?;
    let group = RunningGroup {
        token: effect.token,
        pgid,
        boot: crate::sys::boot_id().to_owned(),
        start_ticks: spawned.start_ticks,
    };
    let live = match LiveGroups::new(&genome.info.data).record(&effect.key, &group) {
        Ok(live) => live,
        Err(err) => {
            error!(
                key = effect.key,
                %err,
                "cannot record the command's process group; not started"
            );
            return None;
        }
    };
    let recorded = Recorded {
        kernel: Some(kernel.clone()),
        key: effect.key.clone(),
        token: effect.token,
        _live: live,
    };
    let answer = kernel
        .call(
            |reply| KernelMsg::Started {
                key: effect.key.clone(),
                group,
                reply,
            },
            Some(Duration::from_millis(RECORD_TIMEOUT_MS)),
        )
        .await;
    match answer {
        Ok(ractor::rpc::CallResult::Success(Ok(()))) => {}
        Ok(ractor::rpc::CallResult::Success(Err(refused))) => {
            debug!(key = effect.key, refused, "command not started");
            return None;
        }
        _ => {
            warn!(
                key = effect.key,
                "the kernel did not record the command's group; not started"
            );
            return None;
        }
    }
    if cancel.is_some_and(|c| *c.borrow()) {
        return None;
    }
    let mut gate = spawned.child.stdin.take()?;
    gate.write_all(b"go\n").await.ok()?;
    // The payload goes after the gate line; a program that exits without reading it all
    // closes the pipe, which is its business, not a failure to start.
    let _ = gate.write_all(payload).await;
    drop(gate);
    Some(recorded)
}

/// Stops a process group: SIGTERM, then SIGKILL if it has not exited after the grace.
pub async fn stop_group(child: &mut tokio::process::Child, pgid: Option<u32>) {
    if let Some(pgid) = pgid {
        let _ = crate::sys::kill_group(pgid, crate::sys::SIGTERM);
    }
    let exited = tokio::time::timeout(Duration::from_millis(KILL_GRACE_MS), child.wait()).await;
    if let Some(pgid) = pgid {
        // Even if sh exited, members of its group (a `sleep` it started) may not have.
        let _ = crate::sys::kill_group(pgid, crate::sys::SIGKILL);
    }
    if exited.is_err() {
        let _ = child.kill().await;
    }
}

/// Keeps the last `max` bytes written to it.
pub struct Tail {
    bytes: Vec<u8>,
    dropped: usize,
    max: usize,
}

impl Tail {
    /// Keeps at most `max` bytes.
    pub fn new(max: usize) -> Tail {
        Tail {
            bytes: Vec::new(),
            dropped: 0,
            max,
        }
    }

    /// Appends, dropping the oldest bytes past the bound (the streams read straight
    /// into `bytes`, then [`Tail::trim`]).
    #[cfg(test)]
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        self.trim();
    }

    /// Drops the oldest bytes past the bound — once they are as many as the bound (or
    /// 8 KiB), so that a stream far longer than its bound costs each byte one move, not
    /// one per read. Until then the excess waits in `bytes`; the accessors skip it.
    fn trim(&mut self) {
        if self.bytes.len().saturating_sub(self.max) >= self.max.max(8192) {
            self.settle();
        }
    }

    /// Drops every byte past the bound.
    fn settle(&mut self) {
        if self.bytes.len() > self.max {
            let excess = self.bytes.len() - self.max;
            self.bytes.drain(..excess);
            self.dropped += excess;
        }
    }

    /// The bytes kept: the last `max` read.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[self.bytes.len().saturating_sub(self.max)..]
    }

    /// How many bytes were dropped past the bound (0: all were kept).
    pub fn dropped(&self) -> usize {
        self.dropped + self.bytes.len().saturating_sub(self.max)
    }

    /// The kept bytes as text, saying how many were dropped.
    pub fn into_text(mut self) -> String {
        self.settle();
        let text = String::from_utf8_lossy(&self.bytes).into_owned();
        if self.dropped > 0 {
            format!("[... {} bytes dropped]\n{text}", self.dropped)
        } else {
            text
        }
    }
}

/// A command's stdout and stderr, each read to its end with its last bytes kept (up to
/// a bound per stream), by the task that waits for the command (a task of their own per
/// stream cost two spawns, and the wake-ups of their ends, on every command).
pub struct Output {
    stdout: Stream<tokio::process::ChildStdout>,
    stderr: Stream<tokio::process::ChildStderr>,
}

struct Stream<R> {
    /// `None` once at its end (or failed).
    reader: Option<R>,
    tail: Tail,
}

impl<R: tokio::io::AsyncRead + Unpin> Stream<R> {
    fn new(reader: Option<R>, max: usize) -> Stream<R> {
        Stream {
            reader,
            tail: Tail::new(max),
        }
    }

    /// Reads what the stream has into the tail. Cancel-safe: bytes land only when the
    /// read completes.
    async fn read_some(&mut self) {
        let Some(reader) = self.reader.as_mut() else {
            return std::future::pending().await;
        };
        self.tail.bytes.reserve(4096);
        match reader.read_buf(&mut self.tail.bytes).await {
            Ok(0) | Err(_) => self.reader = None,
            Ok(_) => self.tail.trim(),
        }
    }
}

impl Output {
    /// Takes the child's piped stdout and stderr (either may have been taken already),
    /// keeping at most the last `stdout_max` and `stderr_max` bytes of them.
    pub fn take(child: &mut tokio::process::Child, stdout_max: usize, stderr_max: usize) -> Output {
        Output {
            stdout: Stream::new(child.stdout.take(), stdout_max),
            stderr: Stream::new(child.stderr.take(), stderr_max),
        }
    }

    fn open(&self) -> bool {
        self.stdout.reader.is_some() || self.stderr.reader.is_some()
    }

    /// Reads from whichever stream has output first; pending for ever once both are at
    /// their end. Poll it beside the command's exit so full pipes never stall it.
    pub async fn read(&mut self) {
        tokio::select! {
            () = self.stdout.read_some(), if self.stdout.reader.is_some() => {}
            () = self.stderr.read_some(), if self.stderr.reader.is_some() => {}
            else => std::future::pending().await,
        }
    }

    /// Waits for `child` to exit, reading its output meanwhile.
    pub async fn wait_for(
        &mut self,
        child: &mut tokio::process::Child,
    ) -> std::io::Result<std::process::ExitStatus> {
        loop {
            tokio::select! {
                status = child.wait() => return status,
                () = self.read() => {}
            }
        }
    }

    /// Stops the command's group (see [`stop_group`]) while still reading its output,
    /// so a command that writes on its way out is not held up by a full pipe until
    /// SIGKILL.
    pub async fn stop(&mut self, child: &mut tokio::process::Child, pgid: Option<u32>) {
        let stop = stop_group(child, pgid);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                () = self.read() => {}
            }
        }
    }

    /// Reads on after the command exited, for at most `wait` (a background grandchild
    /// may hold a pipe open for ever), and gives what was kept of stdout and stderr —
    /// what was read by then, if the wait runs out.
    pub async fn finish(mut self, wait: Duration) -> (Tail, Tail) {
        let _ = tokio::time::timeout(wait, async {
            while self.open() {
                self.read().await;
            }
        })
        .await;
        (self.stdout.tail, self.stderr.tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end() {
        let mut tail = Tail::new(5);
        tail.push(b"hello ");
        tail.push(b"world");
        assert_eq!(tail.bytes(), b"world");
        assert_eq!(tail.dropped(), 6);
        assert_eq!(tail.into_text(), "[... 6 bytes dropped]\nworld");
        let mut tail = Tail::new(100);
        tail.push(b"short");
        assert_eq!(tail.into_text(), "short");
        // A stream far past its bound: what is held stays bounded, the end is exact.
        let mut tail = Tail::new(10);
        for i in 0..100_000u32 {
            tail.push(format!("{:>10}", i).as_bytes());
            assert!(tail.bytes.len() <= 10 + 8192 + 10, "{}", tail.bytes.len());
        }
        assert_eq!(tail.bytes(), b"     99999");
        assert_eq!(tail.dropped(), 1_000_000 - 10);
        assert!(tail.into_text().ends_with("dropped]\n     99999"));
    }

    /// Spawns `text` under its gate and opens the gate, as `start` does once the kernel
    /// allows it.
    async fn open(text: &str) -> (tokio::process::Child, Option<u32>) {
        use tokio::io::AsyncWriteExt;
        let mut process = command(&Program::Shell(text));
        let mut spawned = spawn(&mut process).expect("sh starts");
        let mut gate = spawned.child.stdin.take().expect("a gate");
        gate.write_all(b"go\n").await.expect("the gate opens");
        (spawned.child, spawned.pgid)
    }

    #[tokio::test]
    async fn output_is_read_beside_the_exit_and_kept_to_its_bound() {
        // More than a pipe holds on each stream: the command finishes only if both are
        // read while it runs, and only the last `max` bytes of each are kept.
        let (mut child, _) = open(
            "i=0; while [ $i -lt 2000 ]; do echo \"out line $i ........................................\"; \
             echo \"err line $i ........................................\" >&2; i=$((i+1)); done; echo last",
        )
        .await;
        let mut output = Output::take(&mut child, 100, 100);
        let status = tokio::time::timeout(Duration::from_secs(20), output.wait_for(&mut child))
            .await
            .expect("the command is not held up by a full pipe")
            .expect("sh exits");
        assert!(status.success());
        let (stdout, stderr) = output.finish(Duration::from_secs(5)).await;
        let (stdout, stderr) = (stdout.into_text(), stderr.into_text());
        assert!(stdout.starts_with("[... "), "{stdout}");
        assert!(stdout.ends_with("...\nlast\n"), "{stdout}");
        assert!(stdout.len() < 100 + 40, "{stdout}");
        assert!(
            stderr.ends_with("err line 1999 ........................................\n"),
            "{stderr}"
        );
    }

    #[tokio::test]
    async fn output_a_grandchild_holds_open_is_kept_up_to_the_wait() {
        // A background grandchild keeps stdout open past the command's exit: what was
        // written by then is kept, and the wait is bounded.
        let (mut child, pgid) = open("echo before; echo oops >&2; sleep 30 & exit 3").await;
        let mut output = Output::take(&mut child, 1024, 1024);
        let status = output.wait_for(&mut child).await.expect("sh exits");
        assert_eq!(status.code(), Some(3));
        let begun = std::time::Instant::now();
        let (stdout, stderr) = output.finish(Duration::from_millis(200)).await;
        let (stdout, stderr) = (stdout.into_text(), stderr.into_text());
        let waited = begun.elapsed();
        if let Some(pgid) = pgid {
            let _ = crate::sys::kill_group(pgid, crate::sys::SIGKILL);
        }
        assert_eq!(stdout, "before\n");
        assert_eq!(stderr, "oops\n");
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
    }

    #[tokio::test]
    async fn a_spawned_leader_s_start_time_is_the_one_proc_reports() {
        // What the group's record carries must name the leader the way the next life
        // reads it from /proc (`orphans`), whether it came from the boot clock or /proc.
        for _ in 0..50 {
            let mut process = command(&Program::Shell("true"));
            let mut spawned = spawn(&mut process).expect("sh starts");
            let pid = spawned.pgid.expect("a pid");
            // The leader waits at its gate, so it is still there to be asked.
            assert_eq!(Some(spawned.start_ticks), crate::sys::start_ticks(pid));
            drop(spawned.child.stdin.take());
            let status = spawned.child.wait().await.expect("sh exits");
            assert_eq!(
                status.code(),
                Some(125),
                "a gate closed unopened: not started"
            );
        }
    }
}
