//! The default store: redb, an embedded B-tree with ACID transactions.
//!
//! Each [`Store::commit`] is one write transaction with `Durability::Immediate`: when it
//! returns, the data is fsynced. Throughput comes from the host putting many job steps in
//! one batch (group commit), never from weakening durability.

use super::{Store, StoreError, Table, Visit, WriteBatch};
use redb::{Database, ReadableDatabase, TableDefinition, TableHandle};
use std::ops::Bound;
use std::path::{Path, PathBuf};

const TABLES: [TableDefinition<'static, &'static [u8], &'static [u8]>; Table::ALL.len()] = [
    TableDefinition::new("meta"),
    TableDefinition::new("definitions"),
    TableDefinition::new("jobs"),
    TableDefinition::new("journal"),
    TableDefinition::new("effects"),
    TableDefinition::new("places"),
    TableDefinition::new("node_journal"),
    TableDefinition::new("intents"),
    TableDefinition::new("starts"),
    TableDefinition::new("kv"),
    TableDefinition::new("node_events"),
    TableDefinition::new("groups"),
];

/// A table of the store as redb opens it in a write transaction.
type BytesTable<'txn> = redb::Table<'txn, &'static [u8], &'static [u8]>;

fn definition(table: Table) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    TABLES[table.index()]
}

/// See the module docs.
pub struct RedbStore {
    db: Db,
    path: PathBuf,
}

/// Read-write, or read-only (for commands that must leave the file byte for byte as it
/// was: a read-write open alone updates redb's headers).
enum Db {
    ReadWrite(Database),
    ReadOnly(redb::ReadOnlyDatabase),
}

impl Db {
    fn begin_read(&self) -> Result<redb::ReadTransaction, redb::TransactionError> {
        match self {
            Db::ReadWrite(db) => db.begin_read(),
            Db::ReadOnly(db) => db.begin_read(),
        }
    }
}

fn open_error(path: &Path, err: redb::DatabaseError) -> StoreError {
    match err {
        redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked(path.display().to_string()),
        redb::DatabaseError::UpgradeRequired(version) => StoreError::Corrupt(format!(
            "{} is in redb file format {version}, which this build cannot read",
            path.display()
        )),
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(detail)) => {
            StoreError::Corrupt(format!("{}: {detail}", path.display()))
        }
        other => StoreError::Io(format!("{}: {other}", path.display())),
    }
}

fn io(err: impl std::fmt::Display) -> StoreError {
    StoreError::Io(err.to_string())
}

impl RedbStore {
    /// Opens (creating if needed) the store file at `path`.
    pub fn open(path: &Path) -> Result<RedbStore, StoreError> {
        let db = Database::create(path).map_err(|err| open_error(path, err))?;
        // Create every table up front, so reads never meet a missing table. Only when one
        // is missing: opening an existing store must not write to it (read-only commands
        // leave the file exactly as they found it).
        let existing: Vec<String> = {
            let txn = db.begin_read().map_err(io)?;
            txn.list_tables()
                .map_err(io)?
                .map(|handle| handle.name().to_owned())
                .collect()
        };
        if Table::ALL
            .iter()
            .any(|t| !existing.iter().any(|name| name == t.name()))
        {
            let txn = db.begin_write().map_err(io)?;
            for table in Table::ALL {
                txn.open_table(definition(table)).map_err(io)?;
            }
            txn.commit().map_err(io)?;
        }
        Ok(RedbStore {
            db: Db::ReadWrite(db),
            path: path.to_owned(),
        })
    }

    /// Opens an existing store file without writing to it; `commit` is refused. A store
    /// that needs recovery (its last writer was killed) cannot be opened this way: open it
    /// read-write to recover it.
    pub fn open_read_only(path: &Path) -> Result<RedbStore, StoreError> {
        let db = redb::ReadOnlyDatabase::open(path).map_err(|err| open_error(path, err))?;
        Ok(RedbStore {
            db: Db::ReadOnly(db),
            path: path.to_owned(),
        })
    }

    /// The file backing the store.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Store for RedbStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = match txn.open_table(definition(table)) {
            Ok(table) => table,
            // A read-only store from an older build may lack a table: nothing is in it.
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(err) => return Err(io(err)),
        };
        Ok(table.get(key).map_err(io)?.map(|v| v.value().to_vec()))
    }

    fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        let txn = self.db.begin_read().map_err(io)?;
        let table = match txn.open_table(definition(table)) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(err) => return Err(io(err)),
        };
        let upper = match end {
            Some(end) => Bound::Excluded(end),
            None => Bound::Unbounded,
        };
        let range = table
            .range::<&[u8]>((Bound::Included(start), upper))
            .map_err(io)?;
        for entry in range {
            let (key, value) = entry.map_err(io)?;
            if !visit(key.value(), value.value()) {
                break;
            }
        }
        Ok(())
    }

    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let Db::ReadWrite(db) = &self.db else {
            return Err(StoreError::Io(format!(
                "{} is open read-only",
                self.path.display()
            )));
        };
        // A key written more than once in a batch — a job's summary rewritten at each of
        // its steps, an effect requested, claimed and completed in one batch — is written
        // once, with its last write: the transaction's outcome is the same, and each
        // write spared is a B-tree descent. The writes left go in key order, table by
        // table: a batch's keys cluster (a job's journal entries, jobs ids allocated in
        // order), so each descent finds the pages the one before it touched.
        let writes = batch.writes();
        let mut last: std::collections::HashMap<(usize, &[u8]), usize> =
            std::collections::HashMap::with_capacity(writes.len());
        for (at, write) in writes.iter().enumerate() {
            last.insert((write.table.index(), write.key.as_slice()), at);
        }
        let mut order: Vec<(usize, &[u8], usize)> = last
            .into_iter()
            .map(|((table, key), at)| (table, key, at))
            .collect();
        order.sort_unstable();
        let txn = db.begin_write().map_err(io)?;
        {
            // The table open now, by its index.
            let mut open: Option<(usize, BytesTable<'_>)> = None;
            for (table_index, key, at) in order {
                let write = &writes[at];
                if open.as_ref().is_none_or(|(index, _)| *index != table_index) {
                    // Tables come in order: the previous one is done.
                    open = Some((
                        table_index,
                        txn.open_table(definition(write.table)).map_err(io)?,
                    ));
                }
                let (_, table) = open.as_mut().expect("opened just above");
                match &write.value {
                    Some(value) => {
                        table.insert(key, value.as_slice()).map_err(io)?;
                    }
                    None => {
                        table.remove(key).map_err(io)?;
                    }
                }
            }
        }
        txn.commit().map_err(io)
    }

    fn flush(&self) -> Result<(), StoreError> {
        // Commits use Durability::Immediate: durable on return.
        Ok(())
    }

    fn describe(&self) -> String {
        format!("redb at {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_is_named_as_the_trait_names_it() {
        for table in Table::ALL {
            assert_eq!(definition(table).name(), table.name());
        }
    }

    #[test]
    fn conformance() {
        let dir = tempfile::tempdir().expect("tempdir");
        let counter = std::cell::Cell::new(0);
        super::super::conformance::run(&|| {
            counter.set(counter.get() + 1);
            let path = dir.path().join(format!("store-{}.redb", counter.get()));
            Box::new(RedbStore::open(&path).expect("open"))
        });
    }

    #[test]
    fn survives_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("palm.redb");
        {
            let store = RedbStore::open(&path).expect("open");
            let mut batch = WriteBatch::new();
            batch.put(Table::Jobs, b"j1".to_vec(), b"x".to_vec());
            store.commit(&batch).expect("commit");
        }
        let store = RedbStore::open(&path).expect("reopen");
        assert_eq!(
            store.get(Table::Jobs, b"j1").expect("get"),
            Some(b"x".to_vec())
        );
    }

    #[test]
    fn read_only_opens_leave_the_file_untouched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("palm.redb");
        {
            let store = RedbStore::open(&path).expect("open");
            let mut batch = WriteBatch::new();
            batch.put(Table::Jobs, b"j1".to_vec(), b"x".to_vec());
            store.commit(&batch).expect("commit");
        }
        let before = std::fs::read(&path).expect("read");
        {
            let store = RedbStore::open_read_only(&path).expect("open read-only");
            assert_eq!(
                store.get(Table::Jobs, b"j1").expect("get"),
                Some(b"x".to_vec())
            );
            let mut batch = WriteBatch::new();
            batch.put(Table::Jobs, b"j2".to_vec(), b"y".to_vec());
            assert!(store.commit(&batch).is_err(), "read-only refuses writes");
        }
        assert_eq!(
            std::fs::read(&path).expect("read"),
            before,
            "not a byte changed"
        );
    }

    #[test]
    fn a_second_open_is_refused_while_the_first_lives() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("palm.redb");
        let _first = RedbStore::open(&path).expect("open");
        match RedbStore::open(&path) {
            Err(StoreError::Locked(_)) => {}
            Err(other) => panic!("expected Locked, got {other}"),
            Ok(_) => panic!("second open succeeded"),
        }
    }

    #[test]
    fn garbage_file_is_reported_not_panicked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("palm.redb");
        std::fs::write(&path, vec![0xAB; 8192]).expect("write");
        match RedbStore::open(&path) {
            Err(err) => assert!(!err.to_string().is_empty()),
            Ok(_) => panic!("opened garbage"),
        }
    }
}
