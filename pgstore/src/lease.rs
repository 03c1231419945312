//! The writer's lease: one replica at a time writes a schema, fenced by an epoch.
//!
//! `palm_lease` holds one row: the epoch, the holder and when the lease ends (by the
//! database's clock, so replicas' clocks never have to agree). Taking the lease is one
//! statement that succeeds only when the lease has ended, and raises the epoch. The
//! holder renews it from a thread of its own every third of its length; every commit
//! carries the epoch into `palm_fence`, inside the commit's own transaction, so a replica
//! that lost the lease — paused, partitioned, or simply slow — can never write again,
//! whatever it believes. And it stops believing soon: a holder that has not renewed for
//! a whole lease length (by its own monotonic clock, counted from before it asked)
//! counts itself fenced, since a standby may hold the lease by then.

use crate::options::PgOptions;
use crate::schema::quoted;
use palm_actors::store::StoreError;
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Who holds a lease that could not be taken.
#[derive(Clone, Debug, PartialEq)]
pub struct Held {
    /// The holder's description.
    pub holder: String,
    /// Its epoch.
    pub epoch: i64,
    /// How long until it ends if not renewed.
    pub remaining: Duration,
}

fn interval(d: Duration) -> String {
    format!("{} milliseconds", d.as_millis())
}

/// Takes the lease if it has ended (or never existed): `Ok(epoch)`, else who holds it.
pub(crate) fn try_take(
    client: &mut Client,
    options: &PgOptions,
    holder: &str,
) -> Result<Result<i64, Held>, StoreError> {
    let q = quoted(&options.schema);
    let fail = |what: &str, e| crate::error(&options.location, what, e);
    let taken = client
        .query_opt(
            &format!(
                "INSERT INTO {q}.palm_lease AS l (id, epoch, holder, expires_at)
                 VALUES (1, 1, $1, clock_timestamp() + $2::text::interval)
                 ON CONFLICT (id) DO UPDATE
                     SET epoch = l.epoch + 1, holder = EXCLUDED.holder,
                         expires_at = EXCLUDED.expires_at
                     WHERE l.expires_at <= clock_timestamp()
                 RETURNING epoch"
            ),
            &[&holder, &interval(options.lease)],
        )
        .map_err(|e| fail("take the writer's lease", e))?;
    if let Some(row) = taken {
        let epoch: i64 = row.get(0);
        // The commit markers of earlier epochs (see `work` in lib.rs) can no longer be
        // asked about: their writers are fenced. Keys order by epoch (big-endian).
        let mut below = b"commit/".to_vec();
        below.extend_from_slice(&epoch.to_be_bytes());
        client
            .execute(
                &format!("DELETE FROM {q}.palm_data WHERE tbl = 0 AND key < $1"),
                &[&below],
            )
            .map_err(|e| fail("prune old commit markers", e))?;
        return Ok(Ok(epoch));
    }
    let row = client
        .query_one(
            &format!(
                "SELECT holder, epoch,
                        greatest(0, extract(epoch FROM expires_at - clock_timestamp()) * 1000)::float8
                 FROM {q}.palm_lease WHERE id = 1"
            ),
            &[],
        )
        .map_err(|e| fail("read the writer's lease", e))?;
    let remaining_ms: f64 = row.get(2);
    Ok(Err(Held {
        holder: row.get(0),
        epoch: row.get(1),
        remaining: Duration::from_millis(remaining_ms as u64),
    }))
}

/// Keeps a taken lease alive; releases it when dropped (so a standby need not wait out
/// its length after a clean stop).
pub(crate) struct Lease {
    pub(crate) epoch: i64,
    pub(crate) lost: Arc<AtomicBool>,
    /// When the last renewal that succeeded was asked for.
    renewed: Arc<Mutex<Instant>>,
    length: Duration,
    stop: Option<Sender<()>>,
    renewer: Option<JoinHandle<()>>,
}

impl Lease {
    /// Holds a lease taken with `taken_at` (an instant from before the take was asked).
    pub(crate) fn hold(
        options: &PgOptions,
        epoch: i64,
        taken_at: Instant,
    ) -> Result<Lease, StoreError> {
        let lost = Arc::new(AtomicBool::new(false));
        let renewed = Arc::new(Mutex::new(taken_at));
        let last = Arc::clone(&renewed);
        let (stop, stopped) = channel::<()>();
        let length = options.lease;
        let options = options.clone();
        let flag = Arc::clone(&lost);
        let renewer = std::thread::Builder::new()
            .name("palm-pg-lease".into())
            .spawn(move || {
                let every = options.lease / 3;
                let mut client: Option<Client> = None;
                let q = quoted(&options.schema);
                // Until the store drops the sender (a clean stop).
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(every)
                {
                    if client.as_ref().is_some_and(Client::is_closed) {
                        client = None;
                    }
                    if client.is_none() {
                        // Durable like any other write; and a renewal stuck longer than
                        // the lease is worthless, so it gives up then.
                        client = crate::Connection::open_plain(&options).ok().and_then(|mut c| {
                            c.batch_execute(&format!(
                                "SET statement_timeout = '{}ms'",
                                options.lease.as_millis()
                            ))
                            .ok()
                            .map(|()| c)
                        });
                    }
                    let Some(c) = client.as_mut() else { continue };
                    let asked = Instant::now();
                    match c.execute(
                        &format!(
                            "UPDATE {q}.palm_lease
                             SET expires_at = clock_timestamp() + $2::text::interval
                             WHERE id = 1 AND epoch = $1"
                        ),
                        &[&epoch, &interval(options.lease)],
                    ) {
                        Ok(0) => {
                            // Taken over: every commit from now on fails, without asking.
                            flag.store(true, Ordering::SeqCst);
                            return;
                        }
                        Ok(_) => *last.lock().unwrap_or_else(|p| p.into_inner()) = asked,
                        Err(_) => client = None, // tried again next time
                    }
                }
                // Stopped cleanly: end the lease now, if it is still ours.
                if let Some(c) = client
                    .filter(|c| !c.is_closed())
                    .or_else(|| crate::Connection::open_plain(&options).ok())
                    .as_mut()
                {
                    let _ = c.execute(
                        &format!(
                            "UPDATE {q}.palm_lease SET expires_at = now() WHERE id = 1 AND epoch = $1"
                        ),
                        &[&epoch],
                    );
                }
            })
            .map_err(|e| StoreError::Io(format!("cannot start the lease thread: {e}")))?;
        Ok(Lease {
            epoch,
            lost,
            renewed,
            length,
            stop: Some(stop),
            renewer: Some(renewer),
        })
    }

    /// True once the lease was taken over, or may have been: not renewed for a whole
    /// length (a partition from the database, a paused process).
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::SeqCst) {
            return true;
        }
        let renewed = *self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        if renewed.elapsed() >= self.length {
            self.lost.store(true, Ordering::SeqCst);
            return true;
        }
        false
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
    }
}
