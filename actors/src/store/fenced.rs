//! The writer's lease of a store shared by the replicas of one root, as a state machine
//! with an explicit `now`: [`WriterLease`] says who may write, [`FencedStore`] is one
//! replica's handle whose every commit passes the fence.
//!
//! These are the rules `palm-pgstore` runs in SQL (`palm_lease`, `palm_fence`): the lease
//! is taken only once it has expired, and taking it raises the epoch; only the holder of
//! the current epoch renews it; a commit lands only if its epoch is the current one, and
//! the check and the write are one atomic step (in PostgreSQL the fence's `FOR SHARE`
//! inside the commit's transaction; here one lock held across both). The simulator hosts
//! these over a memory disk to put replica failover under seeded faults; the PostgreSQL
//! store's tests check its SQL against the same cases.

use super::{Store, StoreError, Table, Visit, WriteBatch};
use std::sync::{Arc, Mutex, MutexGuard};

/// Who holds the writer's lease, until when.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriterLease {
    epoch: u64,
    holder: Option<String>,
    expires_ms: u64,
}

/// A lease another replica holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseHeld {
    /// Its holder.
    pub holder: String,
    /// Its epoch.
    pub epoch: u64,
    /// When it ends unless renewed.
    pub expires_ms: u64,
}

impl WriterLease {
    /// No holder yet (epoch 0).
    pub fn new() -> WriterLease {
        WriterLease::default()
    }

    /// Takes the lease for `length_ms` if nobody holds it or it has expired; the new
    /// epoch is one more than the last.
    pub fn try_take(
        &mut self,
        now_ms: u64,
        holder: &str,
        length_ms: u64,
    ) -> Result<u64, LeaseHeld> {
        if let Some(current) = &self.holder
            && now_ms < self.expires_ms
        {
            return Err(LeaseHeld {
                holder: current.clone(),
                epoch: self.epoch,
                expires_ms: self.expires_ms,
            });
        }
        self.epoch += 1;
        self.holder = Some(holder.to_owned());
        self.expires_ms = now_ms + length_ms;
        Ok(self.epoch)
    }

    /// Extends the lease of `epoch` to `now + length`; false when `epoch` is not the
    /// current one (taken over: the caller is fenced).
    pub fn renew(&mut self, now_ms: u64, epoch: u64, length_ms: u64) -> bool {
        if self.holder.is_none() || self.epoch != epoch {
            return false;
        }
        self.expires_ms = self.expires_ms.max(now_ms + length_ms);
        true
    }

    /// Ends the lease of `epoch` now (a clean stop), so a standby need not wait it out.
    pub fn release(&mut self, now_ms: u64, epoch: u64) {
        if self.epoch == epoch {
            self.expires_ms = self.expires_ms.min(now_ms);
        }
    }

    /// The fence: true when a commit under `epoch` may land. An expired lease that no one
    /// took over still admits its holder (nobody else can have written).
    pub fn admits(&self, epoch: u64) -> bool {
        self.holder.is_some() && self.epoch == epoch
    }

    /// The current epoch (0 before the first take).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// A planted bug (feature `mutations`; nothing in a node ever sets one).
#[cfg(feature = "mutations")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceMutation {
    /// Commits land whatever their epoch.
    SkipCheck,
}

/// One replica's handle on a shared store: reads go straight through, commits pass the
/// fence under this replica's epoch.
pub struct FencedStore<S: Store> {
    inner: Arc<S>,
    lease: Arc<Mutex<WriterLease>>,
    epoch: u64,
    #[cfg(feature = "mutations")]
    mutation: Option<FenceMutation>,
}

impl<S: Store> FencedStore<S> {
    /// A handle writing under `epoch` (from [`WriterLease::try_take`]).
    pub fn new(inner: Arc<S>, lease: Arc<Mutex<WriterLease>>, epoch: u64) -> FencedStore<S> {
        FencedStore {
            inner,
            lease,
            epoch,
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }

    /// This handle's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Plants a bug (tests of the simulator only).
    #[cfg(feature = "mutations")]
    pub fn set_mutation(&mut self, mutation: Option<FenceMutation>) {
        self.mutation = mutation;
    }

    fn lease(&self) -> MutexGuard<'_, WriterLease> {
        self.lease.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn skips_check(&self) -> bool {
        #[cfg(feature = "mutations")]
        if self.mutation == Some(FenceMutation::SkipCheck) {
            return true;
        }
        false
    }
}

impl<S: Store> Store for FencedStore<S> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(table, key)
    }

    fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        self.inner.scan(table, start, end, visit)
    }

    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        // The check and the write under one lock: a takeover cannot slip between them.
        let lease = self.lease();
        if !lease.admits(self.epoch) && !self.skips_check() {
            return Err(StoreError::Locked(format!(
                "{} (fenced: lease epoch {} was taken over, now {})",
                self.inner.describe(),
                self.epoch,
                lease.epoch()
            )));
        }
        self.inner.commit(batch)
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush()
    }

    fn describe(&self) -> String {
        format!(
            "{} (writer, lease epoch {})",
            self.inner.describe(),
            self.epoch
        )
    }

    fn fenced(&self) -> bool {
        !self.lease().admits(self.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn the_lease_is_taken_only_once_expired_and_each_take_raises_the_epoch() {
        let mut lease = WriterLease::new();
        assert_eq!(lease.try_take(1_000, "a", 3_000), Ok(1));
        let held = lease.try_take(2_000, "b", 3_000).expect_err("held");
        assert_eq!(
            (held.holder.as_str(), held.epoch, held.expires_ms),
            ("a", 1, 4_000)
        );
        assert!(lease.renew(3_500, 1, 3_000), "the holder renews");
        assert!(
            lease.try_take(5_000, "b", 3_000).is_err(),
            "renewed until 6.5 s"
        );
        assert_eq!(lease.try_take(6_500, "b", 3_000), Ok(2));
        assert!(!lease.renew(6_600, 1, 3_000), "the old holder cannot renew");
        assert!(!lease.admits(1) && lease.admits(2));
        lease.release(7_000, 1);
        assert!(
            lease.try_take(7_000, "c", 3_000).is_err(),
            "a stale release ends nothing"
        );
        lease.release(7_000, 2);
        assert_eq!(
            lease.try_take(7_000, "c", 3_000),
            Ok(3),
            "a clean stop hands over at once"
        );
    }

    #[test]
    fn a_replica_whose_lease_was_taken_over_writes_nothing() {
        let disk = Arc::new(MemoryStore::new());
        let lease = Arc::new(Mutex::new(WriterLease::new()));
        let first_epoch = lease.lock().unwrap().try_take(0, "a", 1_000).expect("take");
        let first = FencedStore::new(Arc::clone(&disk), Arc::clone(&lease), first_epoch);
        let mut batch = WriteBatch::new();
        batch.put(Table::Jobs, b"j".to_vec(), b"1".to_vec());
        first.commit(&batch).expect("the holder writes");
        // Expired and not taken: the holder still writes (nobody else can have).
        first.commit(&batch).expect("still the only writer at 2 s");
        let second_epoch = lease
            .lock()
            .unwrap()
            .try_take(2_000, "b", 1_000)
            .expect("take over");
        let second = FencedStore::new(Arc::clone(&disk), Arc::clone(&lease), second_epoch);
        let mut stale = WriteBatch::new();
        stale.put(Table::Jobs, b"j".to_vec(), b"stale".to_vec());
        assert!(matches!(first.commit(&stale), Err(StoreError::Locked(_))));
        assert!(first.fenced() && !second.fenced());
        assert_eq!(
            second.get(Table::Jobs, b"j").expect("get"),
            Some(b"1".to_vec())
        );
        second.commit(&stale).expect("the new holder writes");
    }

    #[test]
    fn the_holder_passes_the_store_conformance_checks() {
        crate::store::conformance::run(&|| {
            let lease = Arc::new(Mutex::new(WriterLease::new()));
            let epoch = lease.lock().unwrap().try_take(0, "t", 1).expect("take");
            Box::new(FencedStore::new(Arc::new(MemoryStore::new()), lease, epoch))
        });
    }
}
