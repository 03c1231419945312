//! In-memory store with crash semantics, for tests and the simulator.
//!
//! Committed batches are visible at once but stay *unflushed* until [`Store::flush`].
//! [`MemoryStore::crash`] throws away everything unflushed, exactly what a power cut does
//! to a disk whose writes were not yet synced; [`MemoryStore::crash_keeping`] keeps a
//! prefix of them (writes reach the disk in order, and batches are atomic).

use super::{Store, StoreError, Table, Visit, WriteBatch};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;

type Tables = [BTreeMap<Vec<u8>, Vec<u8>>; Table::ALL.len()];

#[derive(Default)]
struct State {
    live: Tables,
    durable: Tables,
    unflushed: Vec<WriteBatch>,
}

/// See the module docs.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// When set, every commit is immediately durable (no crash can lose it).
    auto_flush: bool,
    /// What `describe` says, when it stands in for a store that does not exist yet.
    label: Option<String>,
}

fn apply(tables: &mut Tables, batch: &WriteBatch) {
    for write in batch.writes() {
        let table = &mut tables[write.table.index()];
        match &write.value {
            Some(value) => {
                table.insert(write.key.clone(), value.clone());
            }
            None => {
                table.remove(&write.key);
            }
        }
    }
}

impl MemoryStore {
    /// A store whose commits stay unflushed until `flush` (crash semantics).
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A store where every commit is durable at once.
    pub fn durable() -> MemoryStore {
        MemoryStore {
            auto_flush: true,
            ..MemoryStore::default()
        }
    }

    /// An empty store standing in for one that does not exist yet (an offline read of a
    /// fresh data directory); `describe` says `label`.
    pub fn standing_in_for(label: String) -> MemoryStore {
        MemoryStore {
            label: Some(label),
            ..MemoryStore::durable()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave half a batch applied (apply runs on
        // a table map without early exits), so a poisoned lock is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Simulates a crash: unflushed batches are lost.
    pub fn crash(&self) {
        self.crash_keeping(0);
    }

    /// Simulates a crash in which the first `keep` unflushed batches reached the disk.
    pub fn crash_keeping(&self, keep: usize) {
        let mut state = self.lock();
        let unflushed = std::mem::take(&mut state.unflushed);
        for batch in unflushed.iter().take(keep) {
            apply(&mut state.durable, batch);
        }
        state.live = state.durable.clone();
    }

    /// Batches committed but not flushed.
    pub fn unflushed(&self) -> usize {
        self.lock().unflushed.len()
    }

    /// Total keys across tables (live view).
    pub fn len(&self) -> usize {
        self.lock().live.iter().map(BTreeMap::len).sum()
    }

    /// True when no table holds a key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Store for MemoryStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.lock().live[table.index()].get(key).cloned())
    }

    fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        // Copy out under the lock so a visitor may call back into the store.
        let entries: Vec<(Vec<u8>, Vec<u8>)> = {
            let state = self.lock();
            let upper = match end {
                Some(end) => Bound::Excluded(end.to_vec()),
                None => Bound::Unbounded,
            };
            state.live[table.index()]
                .range((Bound::Included(start.to_vec()), upper))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        for (key, value) in entries {
            if !visit(&key, &value) {
                break;
            }
        }
        Ok(())
    }

    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let mut state = self.lock();
        apply(&mut state.live, batch);
        if self.auto_flush {
            apply(&mut state.durable, batch);
        } else {
            state.unflushed.push(batch.clone());
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        let mut state = self.lock();
        let unflushed = std::mem::take(&mut state.unflushed);
        for batch in &unflushed {
            apply(&mut state.durable, batch);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.label.clone().unwrap_or_else(|| "memory".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conformance() {
        super::super::conformance::run(&|| Box::new(MemoryStore::new()));
        super::super::conformance::run(&|| Box::new(MemoryStore::durable()));
    }

    #[test]
    fn a_crash_loses_exactly_the_unflushed_batches() {
        let store = MemoryStore::new();
        let mut first = WriteBatch::new();
        first.put(Table::Jobs, b"a".to_vec(), b"1".to_vec());
        store.commit(&first).unwrap();
        store.flush().unwrap();
        let mut second = WriteBatch::new();
        second.put(Table::Jobs, b"b".to_vec(), b"2".to_vec());
        second.delete(Table::Jobs, b"a".to_vec());
        store.commit(&second).unwrap();
        let mut third = WriteBatch::new();
        third.put(Table::Jobs, b"c".to_vec(), b"3".to_vec());
        store.commit(&third).unwrap();
        assert_eq!(store.unflushed(), 2);
        assert_eq!(store.get(Table::Jobs, b"c").unwrap(), Some(b"3".to_vec()));
        store.crash_keeping(1);
        assert_eq!(
            store.get(Table::Jobs, b"a").unwrap(),
            None,
            "second batch kept whole"
        );
        assert_eq!(store.get(Table::Jobs, b"b").unwrap(), Some(b"2".to_vec()));
        assert_eq!(
            store.get(Table::Jobs, b"c").unwrap(),
            None,
            "third batch lost"
        );
        store.crash();
        assert_eq!(store.len(), 1);
    }
}
