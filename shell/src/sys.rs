//! The operating-system calls std does not offer: signalling a process group, reading
//! the process's own resource use, and raising a listener's accept queue. The only
//! `unsafe` in Palm lives here, each call small and commented.

#![allow(unsafe_code)]

use std::io;

/// Sends `signal` to every process in the group `pgid`.
pub fn kill_group(pgid: u32, signal: i32) -> io::Result<()> {
    let pgid =
        libc::pid_t::try_from(pgid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if pgid <= 1 {
        // Never signal group 0 (our own) or 1 (init's): a bug must not kill the machine.
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: killpg takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::killpg(pgid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Signal numbers used by the effect runner.
pub const SIGTERM: i32 = libc::SIGTERM;
/// See [`SIGTERM`].
pub const SIGKILL: i32 = libc::SIGKILL;

/// The signal number of a place's stop signal.
pub fn signal_number(signal: palm_actors::place::StopSignal) -> i32 {
    use palm_actors::place::StopSignal;
    match signal {
        StopSignal::Term => libc::SIGTERM,
        StopSignal::Int => libc::SIGINT,
        StopSignal::Hup => libc::SIGHUP,
        StopSignal::Quit => libc::SIGQUIT,
        StopSignal::Kill => libc::SIGKILL,
    }
}

/// Restores the default SIGPIPE action (Rust ignores it), so a command whose output is
/// piped into `head` ends quietly when the pipe closes, like any Unix tool, instead of
/// failing on a write. Not for `palm up`: a node must outlive a closed log pipe.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL touches no memory of ours.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Connections a listening TCP socket of Palm queues before they are accepted. std,
/// mio and tokio ask for 128: past it, each extra client of a burst loses its SYN and
/// waits a second for the retransmission. The kernel caps it at `net.core.somaxconn`
/// (4096 by default since Linux 5.4). (Unix sockets already ask for that cap on Linux.)
pub const LISTEN_BACKLOG: i32 = 4096;

/// Raises the accept queue of the listening socket `listener` to [`LISTEN_BACKLOG`].
pub fn raise_backlog(listener: &impl std::os::fd::AsRawFd) -> io::Result<()> {
    // SAFETY: listen takes a descriptor and an integer; called again on a listening
    // socket it only changes the queue's length (Linux, and POSIX leaves it allowed).
    let rc = unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// True while a process with this pid exists (it may belong to another user).
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is delivered.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Resident memory of this process, in bytes (Linux: /proc/self/statm).
pub fn rss_bytes() -> Option<u64> {
    rss_of("self")
}

/// Resident memory of process `pid` (`self` for this one), in bytes.
pub fn rss_of(pid: &str) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the running system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as u64 } else { 4096 }
}

/// CPU time (user + system) used by this process, in milliseconds.
pub fn cpu_ms() -> Option<u64> {
    cpu_ms_of("self")
}

/// CPU time (user + system) used so far by this process, and by the children it has
/// waited for (a `run` step's `sh`, a bare spawn), in milliseconds — with microsecond
/// resolution, where /proc's clock ticks are 10 ms.
pub fn cpu_own_and_children_ms() -> (f64, f64) {
    let used = |who| {
        // SAFETY: getrusage fills the zeroed struct it is given; it has no other effect.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut usage) } != 0 {
            return 0.0;
        }
        let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
        ms(usage.ru_utime) + ms(usage.ru_stime)
    };
    (used(libc::RUSAGE_SELF), used(libc::RUSAGE_CHILDREN))
}

/// CPU time (user + system) of process `pid` (`self` for this one), in milliseconds.
pub fn cpu_ms_of(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the running system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as u64 } else { 100 };
    Some((utime + stime) * 1000 / ticks)
}

/// When process `pid` started (clock ticks since boot, /proc/PID/stat field 22): with the
/// pid, it names one process even after the pid is reused.
pub fn start_ticks(pid: u32) -> Option<u64> {
    use std::io::Read;
    // One read into a buffer that holds any stat line (a 16-byte name and 52 numbers):
    // `read_to_string` grows from 32 bytes, six reads on every command's way to its gate.
    let mut buffer = [0u8; 1024];
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut len = 0;
    while len < buffer.len() {
        match file.read(&mut buffer[len..]).ok()? {
            0 => break,
            n => len += n,
        }
    }
    let stat = std::str::from_utf8(&buffer[..len]).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    // Field 3 (state) is the first after the name; start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The boot clock (CLOCK_BOOTTIME: time since boot, counting suspend) in clock ticks, as
/// /proc/PID/stat gives a process's start time; `None` where the clock cannot be read.
pub fn boot_ticks_now() -> Option<u64> {
    // SAFETY: clock_gettime fills the zeroed struct it is given; it has no other effect.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) } != 0 {
        return None;
    }
    // SAFETY: sysconf reads a constant of the running system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = if per_second > 0 {
        per_second as u64
    } else {
        100
    };
    let ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
    // The kernel's own conversion of a start time: whole ticks, rounded down.
    Some(ns / (1_000_000_000 / per_second))
}

/// The start time (see [`start_ticks`]) of a process started between two readings of
/// [`boot_ticks_now`]: when both fall in one tick, that tick — the kernel stamps a new
/// process with the same clock — without opening /proc (which costs about as much as a
/// third of the spawn itself); else read from /proc.
pub fn start_ticks_between(pid: u32, before: Option<u64>, after: Option<u64>) -> Option<u64> {
    match (before, after) {
        (Some(before), Some(after)) if before == after => Some(before),
        _ => start_ticks(pid),
    }
}

/// This boot of the machine (Linux: /proc/sys/kernel/random/boot_id), or `""` where the
/// system has none. Read once.
pub fn boot_id() -> &'static str {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|id| id.trim().to_owned())
            .unwrap_or_default()
    })
}

/// The live (not zombie) members of process group `pgid`, from /proc; `None` where /proc
/// cannot be read (then only `killpg` can tell whether the group exists).
pub fn group_members(pgid: u32) -> Option<Vec<u32>> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut members = Vec::new();
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let group = fields.nth(1).and_then(|g| g.parse::<u32>().ok());
        // A zombie holds nothing (no files, no locks): it is only waiting to be reaped.
        if group == Some(pgid) && state != Some("Z") && state != Some("X") {
            members.push(pid);
        }
    }
    Some(members)
}

/// Whether process `pid` was started with `NAME=VALUE` in its environment
/// (/proc/PID/environ; false when it cannot be read).
pub fn started_with_env(pid: u32, name: &str, value: &str) -> bool {
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let wanted = format!("{name}={value}");
    environ
        .split(|b| *b == 0)
        .any(|entry| entry == wanted.as_bytes())
}

/// 64 random bits from the system (/dev/urandom), for what must differ between nodes
/// started at the same instant with the same pid (a new store's tag: containers all run
/// as pid 1). Falls back to the clock and pid where the device cannot be read.
pub fn random_u64() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            now ^ (u64::from(std::process::id()) << 32)
        }
    }
}

/// This machine's host name, for the default node name.
pub fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// Logical CPUs, for the default number of seats.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The `sh` commands run under: the first executable `sh` on this process's `PATH`,
/// resolved once (else plain `"sh"`, looked up at each spawn). Spawning by path spares
/// every command a walk of `PATH` in the forked child — one failed `execve` per entry
/// before the right one.
pub fn shell() -> &'static std::path::Path {
    static SHELL: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    SHELL.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("sh"))
            .find(|candidate| {
                candidate.is_absolute()
                    && std::fs::metadata(candidate)
                        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| std::path::PathBuf::from("sh"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// How many of `burst` connections to `listener`, nobody accepting, are made within
    /// 300 ms each (a lost SYN is sent again only after a second).
    async fn connected_at_once(listener: &tokio::net::TcpListener, burst: usize) -> usize {
        let address = listener.local_addr().expect("address");
        let mut held = Vec::new();
        for _ in 0..burst {
            let connect = tokio::net::TcpStream::connect(address);
            match tokio::time::timeout(Duration::from_millis(300), connect).await {
                Ok(Ok(stream)) => held.push(stream),
                Ok(Err(e)) => panic!("connect: {e}"),
                Err(_) => break,
            }
        }
        held.len()
    }

    #[tokio::test]
    async fn a_raised_backlog_queues_a_burst_of_connections_nobody_accepts_yet() {
        let default = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let made = connected_at_once(&default, 300).await;
        assert!(made < 300, "the default queue of 128 took a burst of 300");
        let raised = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        raise_backlog(&raised).expect("listen again");
        assert_eq!(connected_at_once(&raised, 300).await, 300);
    }

    #[tokio::test]
    async fn a_node_whose_accept_queue_is_full_is_waited_for_not_taken_for_absent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("palm.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        // A queue of 2, filled without accepting: the next connect fails with EAGAIN.
        // SAFETY: listen on a listening socket only changes its queue's length.
        assert_eq!(
            unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&listener), 2) },
            0
        );
        let mut held = Vec::new();
        loop {
            match tokio::net::UnixStream::connect(&path).await {
                Ok(stream) => held.push(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("connect: {e}"),
            }
            assert!(held.len() < 100, "a queue of 2 took 100 connections");
        }
        let waiting = tokio::spawn({
            let path = path.clone();
            async move { palm_api::client::Client::connect(&path).await.is_some() }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "the client gave up on a busy node");
        // The node gets to its queue: the waiting client is let in.
        for _ in 0..=held.len() {
            let _ = listener.accept().await.expect("accept");
        }
        assert!(
            waiting.await.expect("joined"),
            "a busy node was taken for no node"
        );
        // Where nothing listens the answer is still `None`, at once.
        drop(listener);
        let _ = std::fs::remove_file(&path);
        assert!(palm_api::client::Client::connect(&path).await.is_none());
    }
}
