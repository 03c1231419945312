//! The `Store` trait: the one seam between Palm's cores and durable bytes.
//!
//! Deliberately narrow: point reads, ordered range scans, one atomic batch of writes per
//! commit, and `flush`. Cores read through it and hand their writes back as a
//! [`WriteBatch`]; the host commits the batch and only then acknowledges anything.
//!
//! This directory is the one fenced place in `palm-actors` that does I/O: the redb
//! implementation (the default, durable when `commit` returns), the in-memory one (with
//! crash semantics, for tests and the simulator), sled (behind the `sled` feature; see
//! `sled.rs` for why it is not the default), and `fenced.rs`: the writer's lease of a
//! store shared by a root's replicas, whose rules `palm-pgstore` runs in SQL.

mod fenced;
mod memory;
mod redb;
#[cfg(feature = "sled")]
mod sled;

#[cfg(feature = "mutations")]
pub use self::fenced::FenceMutation;
pub use self::fenced::{FencedStore, LeaseHeld, WriterLease};
pub use self::memory::MemoryStore;
pub use self::redb::RedbStore;
#[cfg(feature = "sled")]
pub use self::sled::SledStore;

use std::fmt;

/// The tables every store holds. Keys and values are bytes; encodings are the cores'.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// Counters and identity (`store_tag`, `next_job`, `next_token`, `format`).
    Meta,
    /// `name \0 revision(be32)` → definition record.
    Definitions,
    /// `job id` → job summary (status, flow, times) for listing without replay.
    Jobs,
    /// `job id \0 seq(be64)` → event.
    Journal,
    /// `effect key` → effect record (request, claim, lease).
    Effects,
    /// `place name` → place spec added at run time (config places are not stored).
    Places,
    /// `seq(be64)` → node event (place transitions, links): the node's own journal.
    NodeJournal,
    /// `intent\0ID` → pending start intent; `state\0FLOW\0INDEX` → interest state.
    Intents,
    /// start key → job id: a second start with the same key finds the first job.
    Starts,
    /// The `kv` provider's durable namespace: key → JSON value.
    Kv,
    /// `at_ms(be64) seq(be32)` → a link event (up, down, enrolled, revoked), written by
    /// the node's tree organ (place events are in `NodeJournal`).
    NodeEvents,
    /// `effect key` → the process group running it ([`crate::path::records::RunningGroup`]),
    /// written before the command may start, so a restarted node finds what its previous
    /// life left running.
    Groups,
}

impl Table {
    /// Every table, in a fixed order.
    pub const ALL: [Table; 12] = [
        Table::Meta,
        Table::Definitions,
        Table::Jobs,
        Table::Journal,
        Table::Effects,
        Table::Places,
        Table::NodeJournal,
        Table::Intents,
        Table::Starts,
        Table::Kv,
        Table::NodeEvents,
        Table::Groups,
    ];

    /// The table's name in the backing store.
    pub fn name(self) -> &'static str {
        match self {
            Table::Meta => "meta",
            Table::Definitions => "definitions",
            Table::Jobs => "jobs",
            Table::Journal => "journal",
            Table::Effects => "effects",
            Table::Places => "places",
            Table::NodeJournal => "node_journal",
            Table::Intents => "intents",
            Table::Starts => "starts",
            Table::Kv => "kv",
            Table::NodeEvents => "node_events",
            Table::Groups => "groups",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One write: a put (`Some`) or a delete (`None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// Table.
    pub table: Table,
    /// Key.
    pub key: Vec<u8>,
    /// New value; `None` deletes.
    pub value: Option<Vec<u8>>,
}

/// Writes applied atomically by one [`Store::commit`]: all or none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    writes: Vec<Write>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, table: Table, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.writes.push(Write {
            table,
            key: key.into(),
            value: Some(value.into()),
        });
    }

    /// Removes `key`.
    pub fn delete(&mut self, table: Table, key: impl Into<Vec<u8>>) {
        self.writes.push(Write {
            table,
            key: key.into(),
            value: None,
        });
    }

    /// Appends another batch's writes (later writes to a key win).
    pub fn append(&mut self, other: &mut WriteBatch) {
        self.writes.append(&mut other.writes);
    }

    /// The writes, in order.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Bytes of keys and values.
    pub fn bytes(&self) -> usize {
        self.writes
            .iter()
            .map(|w| w.key.len() + w.value.as_ref().map_or(0, Vec::len))
            .sum()
    }
}

/// A store failure. Operating errors, not bugs: the caller reports and stops.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Another process holds the store.
    #[error("the store at {0} is in use by another process")]
    Locked(String),
    /// The backing file could not be read or written.
    #[error("store I/O error: {0}")]
    Io(String),
    /// The backing file is damaged or of an unknown format.
    #[error("store is corrupt: {0}")]
    Corrupt(String),
    /// A value could not be decoded.
    #[error("cannot decode {what}: {detail}")]
    Decode {
        /// What was being decoded.
        what: String,
        /// Why it failed.
        detail: String,
    },
}

/// Visitor for [`Store::scan`]: return `false` to stop.
pub type Visit<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> bool;

/// Durable, ordered, atomically batched key-value storage. See the module docs.
pub trait Store: Send + Sync {
    /// Reads one value.
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Visits `[start, end)` in key order (`end: None` is unbounded) until `visit` says stop.
    fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError>;

    /// Applies `batch` atomically. After `commit` returns, reads see the batch.
    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError>;

    /// Makes every committed batch durable. Hosts acknowledge only after `flush`.
    /// (redb is durable at commit, so its flush is free.)
    fn flush(&self) -> Result<(), StoreError>;

    /// A short description for logs and `palm doctor` (`redb at /path`).
    fn describe(&self) -> String;

    /// True once this process may no longer write the store: a replicated store's
    /// writer's lease was taken over by another replica. Local stores never are.
    fn fenced(&self) -> bool {
        false
    }

    /// True when other processes (a root's replicas) share this store, so what a node
    /// would otherwise keep in its data directory must be kept here too.
    fn replicated(&self) -> bool {
        false
    }
}

impl fmt::Debug for dyn Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The smallest key greater than every key starting with `prefix`, if any.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Visits every key starting with `prefix`.
pub fn scan_prefix(
    store: &dyn Store,
    table: Table,
    prefix: &[u8],
    visit: Visit<'_>,
) -> Result<(), StoreError> {
    let end = prefix_end(prefix);
    store.scan(table, prefix, end.as_deref(), visit)
}

/// Store conformance: every implementation must pass these, run by each backend's tests
/// (here for redb, memory and sled; `palm-pgstore`'s tests for PostgreSQL, through the
/// `conformance` feature).
#[cfg(any(test, feature = "conformance"))]
pub mod conformance {
    use super::*;

    fn all(store: &dyn Store, table: Table) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        store
            .scan(table, b"", None, &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                true
            })
            .expect("scan");
        out
    }

    /// Puts, deletes, overwrites and reads back, with tables kept apart.
    pub fn basic(store: &dyn Store) {
        let mut batch = WriteBatch::new();
        batch.put(Table::Jobs, b"b".to_vec(), b"2".to_vec());
        batch.put(Table::Jobs, b"a".to_vec(), b"1".to_vec());
        batch.put(Table::Journal, b"a".to_vec(), b"other table".to_vec());
        store.commit(&batch).expect("commit");
        store.flush().expect("flush");
        assert_eq!(
            store.get(Table::Jobs, b"a").expect("get"),
            Some(b"1".to_vec())
        );
        assert_eq!(store.get(Table::Jobs, b"zz").expect("get"), None);
        assert_eq!(store.get(Table::Meta, b"a").expect("get"), None);
        let mut batch = WriteBatch::new();
        batch.delete(Table::Jobs, b"b".to_vec());
        batch.put(Table::Jobs, b"a".to_vec(), b"one".to_vec());
        batch.put(Table::Jobs, b"a".to_vec(), b"uno".to_vec());
        batch.delete(Table::Jobs, b"never-existed".to_vec());
        store.commit(&batch).expect("commit");
        assert_eq!(
            all(store, Table::Jobs),
            vec![(b"a".to_vec(), b"uno".to_vec())]
        );
        assert_eq!(all(store, Table::Journal).len(), 1);
        store.commit(&WriteBatch::new()).expect("empty commit");
        // The last write to a key in a batch wins, whatever came before it: put then
        // delete leaves nothing, delete then put leaves the put, the same key in another
        // table is its own.
        let mut batch = WriteBatch::new();
        batch.put(Table::Jobs, b"c".to_vec(), b"3".to_vec());
        batch.delete(Table::Jobs, b"c".to_vec());
        batch.delete(Table::Jobs, b"a".to_vec());
        batch.put(Table::Jobs, b"a".to_vec(), b"again".to_vec());
        batch.put(Table::Meta, b"a".to_vec(), b"meta".to_vec());
        batch.delete(Table::Meta, b"a".to_vec());
        batch.put(Table::Meta, b"a".to_vec(), b"meta, last".to_vec());
        store.commit(&batch).expect("commit");
        assert_eq!(
            all(store, Table::Jobs),
            vec![(b"a".to_vec(), b"again".to_vec())]
        );
        assert_eq!(
            store.get(Table::Meta, b"a").expect("get"),
            Some(b"meta, last".to_vec())
        );
    }

    /// Scans are ordered, bounded, prefix-limited and stoppable.
    pub fn scans(store: &dyn Store) {
        let mut batch = WriteBatch::new();
        for job in ["j1", "j2", "j10"] {
            for seq in [1u64, 2, 300] {
                let mut key = job.as_bytes().to_vec();
                key.push(0);
                key.extend_from_slice(&seq.to_be_bytes());
                batch.put(Table::Journal, key, seq.to_string().into_bytes());
            }
        }
        store.commit(&batch).expect("commit");
        let mut seen = Vec::new();
        scan_prefix(store, Table::Journal, b"j1\0", &mut |k, v| {
            assert!(k.starts_with(b"j1\0"));
            seen.push(String::from_utf8(v.to_vec()).expect("utf8"));
            true
        })
        .expect("scan");
        assert_eq!(seen, vec!["1", "2", "300"], "ordered by big-endian seq");
        let mut first_two = 0;
        store
            .scan(Table::Journal, b"", None, &mut |_, _| {
                first_two += 1;
                first_two < 2
            })
            .expect("scan");
        assert_eq!(first_two, 2, "visit can stop a scan");
        let mut bounded = 0;
        store
            .scan(Table::Journal, b"j10", Some(b"j2"), &mut |k, _| {
                assert!(k.starts_with(b"j10") || k.starts_with(b"j1\0"));
                bounded += 1;
                true
            })
            .expect("scan");
        assert_eq!(bounded, 3, "[j10, j2) holds only j10's events");
        assert_eq!(prefix_end(&[1, 255]), Some(vec![2]));
        assert_eq!(prefix_end(&[255, 255]), None);
    }

    /// Larger values and many keys in one batch.
    pub fn large_batches(store: &dyn Store) {
        let mut batch = WriteBatch::new();
        for i in 0..2_000u32 {
            batch.put(
                Table::Effects,
                i.to_be_bytes().to_vec(),
                vec![(i % 251) as u8; 300],
            );
        }
        batch.put(Table::Meta, b"big".to_vec(), vec![7u8; 1 << 20]);
        store.commit(&batch).expect("commit");
        store.flush().expect("flush");
        assert_eq!(all(store, Table::Effects).len(), 2_000);
        assert_eq!(
            store
                .get(Table::Meta, b"big")
                .expect("get")
                .map(|v| v.len()),
            Some(1 << 20)
        );
    }

    /// Keys order byte by byte, unsigned, a prefix before its extensions, whatever the
    /// bytes (NUL and 0xff included); empty values read back empty, not absent.
    pub fn bytewise_order(store: &dyn Store) {
        let keys: [&[u8]; 7] = [
            b"\xff\x00",
            b"a",
            b"\x00\x00",
            b"\xff",
            b"\x01",
            b"\x00",
            b"\x7f\xff",
        ];
        let mut batch = WriteBatch::new();
        for key in keys {
            batch.put(Table::Kv, key.to_vec(), Vec::new());
        }
        store.commit(&batch).expect("commit");
        let mut expected: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        expected.sort();
        let seen: Vec<Vec<u8>> = all(store, Table::Kv).into_iter().map(|(k, _)| k).collect();
        assert_eq!(seen, expected, "unsigned byte order");
        assert_eq!(
            store.get(Table::Kv, b"\xff").expect("get"),
            Some(Vec::new())
        );
        let mut from_ff = Vec::new();
        store
            .scan(Table::Kv, b"\xff", None, &mut |k, _| {
                from_ff.push(k.to_vec());
                true
            })
            .expect("scan");
        assert_eq!(from_ff, vec![b"\xff".to_vec(), b"\xff\x00".to_vec()]);
    }

    /// A scan longer than any backend's page sees every key once, in order, and a
    /// visitor may stop it anywhere.
    pub fn long_scans(store: &dyn Store) {
        let mut batch = WriteBatch::new();
        for i in 0..5_000u32 {
            batch.put(
                Table::Jobs,
                i.to_be_bytes().to_vec(),
                i.to_le_bytes().to_vec(),
            );
        }
        store.commit(&batch).expect("commit");
        let mut next = 0u32;
        store
            .scan(Table::Jobs, b"", None, &mut |k, v| {
                assert_eq!(k, next.to_be_bytes(), "every key once, in order");
                assert_eq!(v, next.to_le_bytes());
                next += 1;
                true
            })
            .expect("scan");
        assert_eq!(next, 5_000);
        let mut seen = 0u32;
        store
            .scan(
                Table::Jobs,
                &1_000u32.to_be_bytes(),
                Some(&4_000u32.to_be_bytes()),
                &mut |_, _| {
                    seen += 1;
                    seen < 2_500
                },
            )
            .expect("scan");
        assert_eq!(seen, 2_500, "stopped where the visitor said");
    }

    /// Runs every check on fresh stores from `open`.
    pub fn run(open: &dyn Fn() -> Box<dyn Store>) {
        basic(&*open());
        scans(&*open());
        large_batches(&*open());
        bytewise_order(&*open());
        long_scans(&*open());
    }
}
