//! sled as an optional store (cargo feature `sled`), kept for comparison, not recommended.
//!
//! It passes the same conformance tests as redb. What we found about its durability, and
//! why redb is the default (details in docs/ARCHITECTURE.md, "Storage"):
//! - sled 0.34.7 is the last release (2021); the rewrite never shipped.
//! - `Db::flush` syncs with `sync_file_range`, which does not flush file metadata or the
//!   drive's write cache the way `fsync`/`fdatasync` do, so "flushed" is weaker than redb's
//!   commit.
//! - Its background flusher runs every 500 ms by default: without an explicit `flush`, a
//!   crash can lose that much acknowledged work. This store flushes on every `flush()`.
//! - Multi-tree transactions are serializable but retried on conflict in a loop; that is
//!   fine for one writer (a node's store has exactly one).

use super::{Store, StoreError, Table, Visit, WriteBatch};
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use std::path::{Path, PathBuf};

/// How long [`SledStore::open`] waits for a lock held by a handle just dropped.
pub const LOCK_WAIT_MS: u64 = 1_000;

/// See the module docs.
pub struct SledStore {
    db: sled::Db,
    trees: Vec<sled::Tree>,
    path: PathBuf,
}

fn io(err: impl std::fmt::Display) -> StoreError {
    StoreError::Io(err.to_string())
}

impl SledStore {
    /// Opens (creating if needed) the sled directory at `path`.
    ///
    /// sled lets go of its file lock only when its background flusher thread ends, a
    /// moment after the last handle is dropped: a store closed and opened again at once
    /// (a restart in the same process) would find it still locked. So a lock is retried
    /// for up to [`LOCK_WAIT_MS`] before it is reported.
    pub fn open(path: &Path) -> Result<SledStore, StoreError> {
        let started = std::time::Instant::now();
        loop {
            match SledStore::open_once(path) {
                Err(StoreError::Locked(_))
                    if started.elapsed() < std::time::Duration::from_millis(LOCK_WAIT_MS) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                result => return result,
            }
        }
    }

    fn open_once(path: &Path) -> Result<SledStore, StoreError> {
        let db = sled::open(path).map_err(|err| match err {
            sled::Error::Io(io_err) if io_err.kind() == std::io::ErrorKind::WouldBlock => {
                StoreError::Locked(path.display().to_string())
            }
            sled::Error::Corruption { .. } => {
                StoreError::Corrupt(format!("{}: {err}", path.display()))
            }
            other => {
                let text = other.to_string();
                if text.contains("lock") {
                    StoreError::Locked(path.display().to_string())
                } else {
                    StoreError::Io(format!("{}: {text}", path.display()))
                }
            }
        })?;
        let trees = Table::ALL
            .iter()
            .map(|table| db.open_tree(table.name()).map_err(io))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SledStore {
            db,
            trees,
            path: path.to_owned(),
        })
    }
}

impl Store for SledStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.trees[table.index()]
            .get(key)
            .map_err(io)?
            .map(|v| v.to_vec()))
    }

    fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        let tree = &self.trees[table.index()];
        let iter = match end {
            Some(end) => tree.range(start..end),
            None => tree.range(start..),
        };
        for entry in iter {
            let (key, value) = entry.map_err(io)?;
            if !visit(&key, &value) {
                break;
            }
        }
        Ok(())
    }

    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let result: Result<(), TransactionError<()>> = self.trees.as_slice().transaction(|trees| {
            for write in batch.writes() {
                let tree = &trees[write.table.index()];
                match &write.value {
                    Some(value) => {
                        tree.insert(write.key.as_slice(), value.as_slice())?;
                    }
                    None => {
                        tree.remove(write.key.as_slice())?;
                    }
                }
            }
            Ok::<(), ConflictableTransactionError<()>>(())
        });
        result.map_err(|err| StoreError::Io(format!("{err:?}")))
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map(|_| ()).map_err(io)
    }

    fn describe(&self) -> String {
        format!("sled at {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conformance() {
        let dir = tempfile::tempdir().expect("tempdir");
        let counter = std::cell::Cell::new(0);
        super::super::conformance::run(&|| {
            counter.set(counter.get() + 1);
            let path = dir.path().join(format!("store-{}.sled", counter.get()));
            Box::new(SledStore::open(&path).expect("open"))
        });
    }

    #[test]
    fn survives_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("palm.sled");
        {
            let store = SledStore::open(&path).expect("open");
            let mut batch = WriteBatch::new();
            batch.put(Table::Jobs, b"j1".to_vec(), b"x".to_vec());
            store.commit(&batch).expect("commit");
            store.flush().expect("flush");
        }
        let store = SledStore::open(&path).expect("reopen");
        assert_eq!(
            store.get(Table::Jobs, b"j1").expect("get"),
            Some(b"x".to_vec())
        );
    }
}
