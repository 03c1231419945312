//! Orphaned effect commands: the process groups a previous life of this node left
//! running, stopped at boot before any seat claims work.
//!
//! Every command runs in its own process group, held at a gate until the group is
//! recorded where a crash of this process cannot take it back (`super::live_groups`; the
//! store's `Table::Groups` gets a copy with the next batch). A node killed with `kill -9`
//! leaves those groups running; its next life requeues their claims at once, so without this
//! step the same effect key would run twice at the same moment. The kernel calls
//! [`stop_orphans`] in its `pre_start`, before it answers any claim.
//!
//! A recorded group is stopped only when it is provably the one recorded: same boot of
//! the machine, and either its leader has the recorded start time or one of its members
//! was started with the effect's `PALM_EFFECT_KEY`. A pid reused by an unrelated process
//! is left alone. Adoption (letting the orphan finish and keeping its outcome) is not
//! attempted: its output pipes died with the old node, so its outcome cannot be known.

use super::live_groups::LiveGroups;
use crate::sys;
use palm_actors::path::JobPath;
use palm_actors::path::records::RunningGroup;
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

/// Between SIGTERM and SIGKILL for an orphaned group (as the runner allows its own).
const TERM_GRACE_MS: u64 = 2_000;

/// After SIGKILL, how long to wait for a group to disappear before giving up on it.
const KILL_WAIT_MS: u64 = 5_000;

/// What [`stop_orphans`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrphanReport {
    /// Groups recorded by the previous life.
    pub recorded: usize,
    /// Of those, groups still running that were stopped.
    pub stopped: usize,
    /// Groups that would not die even after SIGKILL (a process stuck in the kernel).
    pub stuck: usize,
}

/// Stops every group the previous life recorded and still running — in its store or in
/// its live-group files (the one a gate waits for) — then forgets the records (the
/// store's in the path's next batch, the files at once).
pub async fn stop_orphans(path: &mut JobPath, files: &LiveGroups) -> OrphanReport {
    let mut recorded: Vec<(String, RunningGroup)> = path
        .groups()
        .iter()
        .map(|(key, group)| (key.clone(), group.clone()))
        .collect();
    for (key, group) in files.read_all() {
        if !recorded
            .iter()
            .any(|(k, g)| *k == key && g.token == group.token)
        {
            recorded.push((key, group));
        }
    }
    let mut report = OrphanReport {
        recorded: recorded.len(),
        ..OrphanReport::default()
    };
    let live: Vec<&(String, RunningGroup)> = recorded
        .iter()
        .filter(|(key, group)| is_ours_and_alive(key, group))
        .collect();
    for (key, group) in &live {
        warn!(
            key,
            pgid = group.pgid,
            "an effect's command outlived the previous run of this node; stopping it"
        );
        let _ = sys::kill_group(group.pgid, sys::SIGTERM);
    }
    let mut left = wait_gone(&live, Duration::from_millis(TERM_GRACE_MS)).await;
    for (_, group) in &left {
        let _ = sys::kill_group(group.pgid, sys::SIGKILL);
    }
    if !left.is_empty() {
        left = wait_gone(&left, Duration::from_millis(KILL_WAIT_MS)).await;
    }
    for (key, group) in &left {
        error!(
            key,
            pgid = group.pgid,
            "an orphaned effect's process group survived SIGKILL; its effect may run twice"
        );
    }
    report.stopped = live.len() - left.len();
    report.stuck = left.len();
    for (key, group) in &recorded {
        path.forget_group(key, group.token);
    }
    files.clear();
    if report.recorded > 0 {
        info!(
            recorded = report.recorded,
            stopped = report.stopped,
            "process groups left by the previous run handled"
        );
    }
    report
}

/// Whether the recorded group is still running and is the one recorded (not a later
/// process that was given the same id).
fn is_ours_and_alive(key: &str, group: &RunningGroup) -> bool {
    if !group.boot.is_empty() && group.boot != sys::boot_id() {
        // The machine rebooted since: nothing of that boot runs.
        return false;
    }
    match sys::group_members(group.pgid) {
        // No /proc to check identities: trust the record if the group exists.
        None => sys::kill_group(group.pgid, 0).is_ok(),
        Some(members) => members.iter().any(|&pid| {
            (pid == group.pgid
                && group.start_ticks != 0
                && sys::start_ticks(pid) == Some(group.start_ticks))
                || sys::started_with_env(pid, "PALM_EFFECT_KEY", key)
        }),
    }
}

fn group_alive(group: &RunningGroup) -> bool {
    match sys::group_members(group.pgid) {
        Some(members) => !members.is_empty(),
        None => sys::kill_group(group.pgid, 0).is_ok(),
    }
}

/// Waits up to `within` for the groups to disappear; returns those still alive.
async fn wait_gone<'a>(
    groups: &[&'a (String, RunningGroup)],
    within: Duration,
) -> Vec<&'a (String, RunningGroup)> {
    let deadline = Instant::now() + within;
    loop {
        let alive: Vec<&(String, RunningGroup)> = groups
            .iter()
            .copied()
            .filter(|(_, group)| group_alive(group))
            .collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use palm_actors::path::JobPathConfig;
    use palm_actors::store::MemoryStore;

    /// A `sleep` in a group of its own, started with `PALM_EFFECT_KEY=key`, returned once
    /// its environment can be read.
    ///
    /// `spawn` (glibc's `posix_spawn`, a vfork) returns when the child's `execve` has
    /// replaced its memory, a moment before the kernel writes the new environment:
    /// `/proc/PID/environ` read at once came back without the key in 876 of 3,000
    /// spawns here. A record from an earlier life is never that young.
    fn orphan(key: &str) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("sleep")
            .arg("30")
            .env("PALM_EFFECT_KEY", key)
            .process_group(0)
            .spawn()
            .expect("spawn sleep");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !sys::started_with_env(child.id(), "PALM_EFFECT_KEY", key) {
            assert!(
                Instant::now() < deadline,
                "the environment of `sleep` (pid {}) never showed its key",
                child.id()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        child
    }

    fn recorded(child: &std::process::Child, token: u64) -> RunningGroup {
        RunningGroup {
            token,
            pgid: child.id(),
            boot: sys::boot_id().to_owned(),
            start_ticks: sys::start_ticks(child.id()).unwrap_or(0),
        }
    }

    #[test]
    fn only_the_recorded_group_counts_as_ours() {
        let mut child = orphan("job-1/0.0/1");
        let group = recorded(&child, 3);
        assert!(is_ours_and_alive("job-1/0.0/1", &group));
        // Another boot, or a leader with another start time and another key: a stranger.
        let rebooted = RunningGroup {
            boot: "another-boot".to_owned(),
            ..group.clone()
        };
        assert!(!is_ours_and_alive("job-1/0.0/1", &rebooted));
        let stranger = RunningGroup {
            start_ticks: group.start_ticks + 1,
            ..group.clone()
        };
        assert!(!is_ours_and_alive("job-2/0.0/1", &stranger));
        assert!(
            is_ours_and_alive("job-1/0.0/1", &stranger),
            "the key in its environment is enough"
        );
        let _ = child.kill();
        let _ = child.wait();
        assert!(!is_ours_and_alive("job-1/0.0/1", &group), "gone");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn orphans_are_stopped_and_their_records_forgotten() {
        let store = MemoryStore::new();
        // The previous life wrote its records under `before`; this one reads them from a
        // copy of its data directory (a process of its own, holding none of them).
        let (before, data) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let previous = LiveGroups::new(before.path());
        let (mut path, _) =
            JobPath::open(&store, JobPathConfig::default(), 1).expect("open a memory store");
        let mut child = orphan("job-9/0.0/1");
        path.record_group("job-9/0.0/1", recorded(&child, 1))
            .expect("record");
        // The same group in its file too (the usual case): counted once.
        // (Forgotten, not dropped: the process that held them died.)
        std::mem::forget(
            previous
                .record("job-9/0.0/1", &recorded(&child, 1))
                .expect("record"),
        );
        // Killed before the store's copy was committed: only the file knows it.
        let mut unflushed = orphan("job-8/0.0/1");
        std::mem::forget(
            previous
                .record("job-8/0.0/1", &recorded(&unflushed, 5))
                .expect("record"),
        );
        path.record_group(
            "gone/0.0/1",
            RunningGroup {
                token: 2,
                pgid: u32::MAX - 7,
                boot: sys::boot_id().to_owned(),
                start_ticks: 1,
            },
        )
        .expect("record");
        std::fs::copy(
            before.path().join("groups.live"),
            data.path().join("groups.live"),
        )
        .expect("copy");
        let live = LiveGroups::new(data.path());
        let report = stop_orphans(&mut path, &live).await;
        assert_eq!(
            report,
            OrphanReport {
                recorded: 3,
                stopped: 2,
                stuck: 0
            }
        );
        for child in [&mut child, &mut unflushed] {
            let status = child.wait().expect("reap");
            assert!(!status.success(), "the orphan was signalled: {status:?}");
        }
        assert!(path.groups().is_empty());
        assert!(live.read_all().is_empty(), "the files are forgotten too");
    }
}
