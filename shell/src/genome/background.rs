//! Work a node starts off its actors that must end before its process does: a job's
//! patch landing on its checkout once the job's success is durable. Counted as it
//! starts and ends, so a node shutting down (`palm run` ending, `palm up` stopping)
//! waits for it rather than leaving a patch merged but still described as pending, or
//! never landed at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// The node's background work in flight.
#[derive(Default)]
pub struct Background {
    running: AtomicUsize,
    ended: Notify,
}

/// Counts one piece of work as ended when dropped, even if it panicked.
struct Running(Arc<Background>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
        self.0.ended.notify_waiters();
    }
}

impl Background {
    /// Runs `work` on the blocking pool, counted until it returns.
    pub fn spawn_blocking(self: &Arc<Self>, work: impl FnOnce() + Send + 'static) {
        self.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(Arc::clone(self));
        tokio::task::spawn_blocking(move || {
            let _running = running;
            work();
        });
    }

    /// Work in flight now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Waits until no work is in flight, at most `max`; true when none is left.
    pub async fn drained(&self, max: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + max;
        loop {
            let ended = self.ended.notified();
            if self.running() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self.running() == 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_waits_for_work_in_flight_and_no_longer_than_asked() {
        let background = Arc::new(Background::default());
        let (release, gate) = std::sync::mpsc::channel::<()>();
        background.spawn_blocking(move || {
            let _ = gate.recv();
        });
        assert_eq!(background.running(), 1);
        assert!(
            !background.drained(Duration::from_millis(50)).await,
            "still running"
        );
        release.send(()).expect("release");
        assert!(background.drained(Duration::from_secs(5)).await);
        // Work that panics still counts as ended.
        background.spawn_blocking(|| panic!("a failed landing"));
        assert!(background.drained(Duration::from_secs(5)).await);
    }
}
