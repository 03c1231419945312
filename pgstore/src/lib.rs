//! PostgreSQL behind Palm's [`Store`] trait: the truth of a cloud root, replicated by the
//! database rather than by a protocol of Palm's own.
//!
//! Every Palm table lives in one PostgreSQL table, `palm_data (tbl, key, value)`, keyed by
//! `(tbl, key)`; `bytea` compares byte by byte, so scans come back in the order redb
//! gives. A [`WriteBatch`] becomes one SQL statement — a `DELETE` of the batch's deletes in
//! a data-modifying `WITH`, then an upsert of its puts — which PostgreSQL runs as one
//! transaction: all or none, one round trip. The batch is first reduced to the last write
//! per key, as the trait wants. `COMMIT` returns only once the WAL is flushed (every
//! connection sets `synchronous_commit` to `on`, or keeps `remote_apply`), so `flush` is
//! free.
//!
//! The [`Store`] trait is synchronous and is called from the node's tokio threads, where
//! the blocking `postgres` client (which drives a runtime of its own) may not run. So a
//! [`PgStore`] owns a small pool of worker threads, one connection each; a call hands its
//! request to whichever worker is free and blocks for the answer, as a redb commit blocks
//! on `fsync`. A worker whose connection is lost reconnects and tries the request once
//! more; a commit first looks whether its first try landed (see [`work`]), so a batch is
//! never applied twice.
//!
//! Scans are read in pages (64 rows, doubling to 4,096), each page from a fresh
//! statement. A long scan is therefore not one snapshot: a batch committed while it runs
//! may show in later pages only. Every key is still seen at most once and in order.

mod lease;
mod options;
mod schema;
mod tls;

pub use self::lease::Held;
pub use self::options::{PgOptions, is_postgres_url, redact, with_schema};
pub use self::schema::latest as schema_version;

use palm_actors::store::{Store, StoreError, Table, Visit, WriteBatch};
use postgres::{Client, Statement};
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The longest key the store takes. PostgreSQL's btree refuses index entries over about a
/// third of a page (2,704 bytes); a clear error here beats its at commit time.
pub const KEY_MAX: usize = 2_000;
/// `palm_data.tbl` of the workers' commit markers (see [`work`]); no Palm table.
const MARKER_TABLE: i16 = 0;
/// The longest any one statement may run.
const STATEMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// The SQLSTATE `palm_fence` raises (see `schema.rs`).
const FENCED: &str = "PA001";
/// The first scan page; later pages double up to [`PAGE_MAX`].
const PAGE_FIRST: i64 = 64;
const PAGE_MAX: i64 = 4_096;

/// A Palm table's number in `palm_data.tbl`. Spelled out, never derived from the enum's
/// order, because the numbers are on disk.
fn table_id(table: Table) -> i16 {
    match table {
        Table::Meta => 1,
        Table::Definitions => 2,
        Table::Jobs => 3,
        Table::Journal => 4,
        Table::Effects => 5,
        Table::Places => 6,
        Table::NodeJournal => 7,
        Table::Intents => 8,
        Table::Starts => 9,
        Table::Kv => 10,
        Table::NodeEvents => 11,
        Table::Groups => 12,
    }
}

/// A driver error as a store error that names the database and what was being done.
pub(crate) fn error(location: &str, what: &str, e: postgres::Error) -> StoreError {
    if e.code().is_some_and(|c| c.code() == FENCED) {
        return StoreError::Locked(format!(
            "postgres at {location} (fenced: another replica took the writer's lease over)"
        ));
    }
    let detail = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            // The driver's own words are generic ("error performing TLS handshake"); the
            // cause is in its sources ("invalid peer certificate: UnknownIssuer").
            let mut detail = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !detail.contains(&cause_text) {
                    detail = format!("{detail}: {cause_text}");
                }
                source = cause.source();
            }
            detail
        }
    };
    StoreError::Io(format!("postgres at {location}: cannot {what}: {detail}"))
}

type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// A batch reduced to its last write per key, as columns for `unnest`.
#[derive(Default)]
struct Columns {
    delete_tables: Vec<i16>,
    delete_keys: Vec<Vec<u8>>,
    put_tables: Vec<i16>,
    put_keys: Vec<Vec<u8>>,
    put_values: Vec<Vec<u8>>,
}

impl Columns {
    fn of(batch: &WriteBatch) -> Result<Columns, StoreError> {
        let mut last: HashMap<(i16, &[u8]), Option<&[u8]>> = HashMap::with_capacity(batch.len());
        let mut order = Vec::with_capacity(batch.len());
        for write in batch.writes() {
            if write.key.len() > KEY_MAX {
                return Err(StoreError::Io(format!(
                    "a key of {} bytes in table {} is longer than the PostgreSQL store takes ({KEY_MAX})",
                    write.key.len(),
                    write.table.name()
                )));
            }
            let slot = (table_id(write.table), write.key.as_slice());
            if last.insert(slot, write.value.as_deref()).is_none() {
                order.push(slot);
            }
        }
        // Rows are locked in (table, key) order, whatever order the batch wrote them in,
        // so two commits touching the same keys cannot deadlock each other.
        order.sort_unstable();
        let mut columns = Columns::default();
        for slot in order {
            match last[&slot] {
                Some(value) => {
                    columns.put_tables.push(slot.0);
                    columns.put_keys.push(slot.1.to_vec());
                    columns.put_values.push(value.to_vec());
                }
                None => {
                    columns.delete_tables.push(slot.0);
                    columns.delete_keys.push(slot.1.to_vec());
                }
            }
        }
        Ok(columns)
    }
}

/// What a worker is asked.
enum Request {
    Get {
        table: i16,
        key: Vec<u8>,
        reply: SyncSender<Result<Option<Vec<u8>>, StoreError>>,
    },
    Page {
        table: i16,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        limit: i64,
        reply: SyncSender<Result<Rows, StoreError>>,
    },
    Commit {
        columns: Columns,
        epoch: i64,
        reply: SyncSender<Result<(), StoreError>>,
    },
}

/// One connection and its prepared statements.
pub(crate) struct Connection {
    client: Client,
    get: Statement,
    page_from: Statement,
    page_range: Statement,
    commit: Statement,
}

impl Connection {
    /// A bare client, for migrations (before the statements can be prepared).
    pub(crate) fn open_plain(options: &PgOptions) -> Result<Client, StoreError> {
        let location = options.location.as_str();
        let mut client = options
            .config
            .connect(options.tls.clone())
            .map_err(|e| error(location, "connect", e))?;
        // Acknowledged means durable, on every connection (the lease's too): whatever the
        // server's default, a commit returns only once the WAL is flushed (`on`), or
        // applied on synchronous standbys too (`remote_apply`, kept when set).
        let synchronous: String = client
            .query_one("SHOW synchronous_commit", &[])
            .map_err(|e| error(location, "read synchronous_commit", e))?
            .get(0);
        let synchronous = if synchronous == "remote_apply" {
            "remote_apply"
        } else {
            "on"
        };
        // A statement stuck behind a dead link or a lock must not hold a node's thread
        // for ever.
        client
            .batch_execute(&format!(
                "SET synchronous_commit = {synchronous}; SET statement_timeout = '{}ms'",
                STATEMENT_TIMEOUT.as_millis()
            ))
            .map_err(|e| error(location, "set the session's durability", e))?;
        Ok(client)
    }

    fn open(options: &PgOptions) -> Result<Connection, StoreError> {
        let location = options.location.as_str();
        let mut client = Connection::open_plain(options)?;
        let q = schema::quoted(&options.schema);
        let mut prepare = |sql: String| {
            client
                .prepare(&sql)
                .map_err(|e| error(location, "prepare a statement", e))
        };
        let get = prepare(format!(
            "SELECT value FROM {q}.palm_data WHERE tbl = $1 AND key = $2"
        ))?;
        let page_from = prepare(format!(
            "SELECT key, value FROM {q}.palm_data WHERE tbl = $1 AND key >= $2 \
             ORDER BY key LIMIT $3"
        ))?;
        let page_range = prepare(format!(
            "SELECT key, value FROM {q}.palm_data WHERE tbl = $1 AND key >= $2 AND key < $3 \
             ORDER BY key LIMIT $4"
        ))?;
        // Data-modifying WITH clauses run exactly once whether or not they are read, and
        // the whole statement is one transaction. Deleted and put keys are disjoint (the
        // batch was reduced to one write per key), so no row is touched twice. The fence
        // (see `lease`) gates both: a replica whose lease was taken over changes nothing.
        let commit = prepare(format!(
            "WITH fence AS (SELECT {q}.palm_fence($6) AS ok),
             gone AS (
                 DELETE FROM {q}.palm_data AS d
                 USING unnest($1::int2[], $2::bytea[]) AS g(tbl, key)
                 WHERE d.tbl = g.tbl AND d.key = g.key AND (SELECT ok FROM fence)
             )
             INSERT INTO {q}.palm_data (tbl, key, value)
             SELECT * FROM unnest($3::int2[], $4::bytea[], $5::bytea[])
             WHERE (SELECT ok FROM fence)
             ON CONFLICT (tbl, key) DO UPDATE SET value = EXCLUDED.value"
        ))?;
        Ok(Connection {
            client,
            get,
            page_from,
            page_range,
            commit,
        })
    }
}

/// True when `e` means the connection is gone rather than the statement refused: the
/// server ended it (class 57P), the link failed (class 08), or the client saw it close.
fn connection_lost(e: &postgres::Error, connection: &Connection) -> bool {
    let code = e.code().map(|c| c.code()).unwrap_or("");
    e.is_closed()
        || connection.client.is_closed()
        || code.starts_with("08")
        || code.starts_with("57P")
}

/// Runs `op` on the worker's connection, opening one if needed. A connection found lost
/// is replaced and `op` tried once more: `op` learns it is the second try, so a commit can
/// first look whether its first try landed (see [`work`]).
fn attempt<T>(
    slot: &mut Option<Connection>,
    options: &PgOptions,
    what: &str,
    mut op: impl FnMut(&mut Connection, bool) -> Result<T, postgres::Error>,
) -> Result<T, StoreError> {
    let mut tries = 0;
    loop {
        tries += 1;
        if slot.as_ref().is_some_and(|c| c.client.is_closed()) {
            *slot = None;
        }
        let connection = match slot {
            Some(connection) => connection,
            None => slot.insert(Connection::open(options)?),
        };
        match op(connection, tries > 1) {
            Ok(value) => return Ok(value),
            Err(e) if tries == 1 && connection_lost(&e, connection) => *slot = None,
            Err(e) => return Err(error(&options.location, what, e)),
        }
    }
}

/// One worker: serves requests on its connection, reconnecting after a failure.
///
/// Every commit also writes this worker's marker row (`tbl` 0, which no Palm table uses):
/// `commit/EPOCH/WORKER` → a sequence number. When the connection is lost during a
/// commit, the outcome is unknown; on a new connection the worker reads its marker —
/// the marker is in the same transaction as the batch, so it is there exactly when the
/// batch landed — and sends the batch again only if it did not.
fn work(index: usize, options: PgOptions, requests: Arc<Mutex<Receiver<Request>>>) {
    let mut slot: Option<Connection> = None;
    let mut sequence: u64 = 0;
    loop {
        let request = {
            let receiver = requests.lock().unwrap_or_else(|p| p.into_inner());
            match receiver.recv() {
                Ok(request) => request,
                Err(_) => return, // the store was dropped
            }
        };
        match request {
            Request::Get { table, key, reply } => {
                let answer = attempt(&mut slot, &options, "read", |c, _| {
                    c.client.query_opt(&c.get, &[&table, &key])
                })
                .map(|row| row.map(|row| row.get::<_, Vec<u8>>(0)));
                let _ = reply.send(answer);
            }
            Request::Page {
                table,
                start,
                end,
                limit,
                reply,
            } => {
                let answer = attempt(&mut slot, &options, "scan", |c, _| match &end {
                    Some(end) => c
                        .client
                        .query(&c.page_range, &[&table, &start, end, &limit]),
                    None => c.client.query(&c.page_from, &[&table, &start, &limit]),
                })
                .map(|rows| {
                    rows.into_iter()
                        .map(|row| (row.get::<_, Vec<u8>>(0), row.get::<_, Vec<u8>>(1)))
                        .collect()
                });
                let _ = reply.send(answer);
            }
            Request::Commit {
                mut columns,
                epoch,
                reply,
            } => {
                sequence += 1;
                let mut marker_key = b"commit/".to_vec();
                marker_key.extend_from_slice(&epoch.to_be_bytes());
                marker_key.extend_from_slice(&(index as u32).to_be_bytes());
                let marker = sequence.to_be_bytes().to_vec();
                columns.put_tables.push(MARKER_TABLE);
                columns.put_keys.push(marker_key.clone());
                columns.put_values.push(marker.clone());
                let answer = attempt(&mut slot, &options, "commit", |c, again| {
                    if again {
                        let landed = c
                            .client
                            .query_opt(&c.get, &[&MARKER_TABLE, &marker_key])?
                            .map(|row| row.get::<_, Vec<u8>>(0));
                        if landed.as_deref() == Some(marker.as_slice()) {
                            return Ok(0);
                        }
                    }
                    c.client.execute(
                        &c.commit,
                        &[
                            &columns.delete_tables,
                            &columns.delete_keys,
                            &columns.put_tables,
                            &columns.put_keys,
                            &columns.put_values,
                            &epoch,
                        ],
                    )
                })
                .map(|_| ());
                let _ = reply.send(answer);
            }
        }
    }
}

/// A [`Store`] in a PostgreSQL database. See the crate docs.
pub struct PgStore {
    requests: Option<SyncSender<Request>>,
    workers: Vec<JoinHandle<()>>,
    /// The writer's lease; `None` when opened to read only.
    lease: Option<lease::Lease>,
    describe: String,
}

/// How [`PgStore::open_with`] treats a lease another replica holds.
pub enum Lease<'a> {
    /// Read only: no lease, and every commit refused.
    ReadOnly,
    /// Take the lease now, or fail with [`StoreError::Locked`] naming its holder.
    Take,
    /// Stand by until the lease ends, then take it; `waiting` hears who holds it, at
    /// most once per holder and epoch.
    Wait(&'a mut dyn FnMut(&Held)),
}

/// A client that may be dropped on a tokio thread: closing it blocks, so that happens on
/// a thread of its own.
struct OffThread(Option<Client>);

impl Drop for OffThread {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            let _ = std::thread::spawn(move || drop(client)).join();
        }
    }
}

/// How often a standby looks at the lease.
const STANDBY_POLL: std::time::Duration = std::time::Duration::from_millis(200);

impl PgStore {
    /// Opens `url` to write, as `holder`: takes the writer's lease or fails naming who
    /// holds it. See [`PgStore::open_with`].
    pub fn open(url: &str, holder: &str) -> Result<PgStore, StoreError> {
        PgStore::open_with(url, holder, Lease::Take)
    }

    /// Opens `url` to read only (no lease; every commit is refused).
    pub fn open_read_only(url: &str) -> Result<PgStore, StoreError> {
        PgStore::open_with(url, "reader", Lease::ReadOnly)
    }

    /// Connects to `url`, brings its schema up to date, takes the writer's lease as
    /// `lease` says, and starts the connection pool. Fails when the database cannot be
    /// reached or was written by a newer Palm.
    pub fn open_with(url: &str, holder: &str, lease: Lease<'_>) -> Result<PgStore, StoreError> {
        let options = PgOptions::parse(url)?;
        // Off the caller's thread: the blocking client may not run inside a tokio runtime.
        let off_thread =
            |f: &mut (dyn FnMut() -> Result<Option<Result<i64, Held>>, StoreError> + Send)| {
                std::thread::scope(|scope| {
                    scope
                        .spawn(f)
                        .join()
                        .unwrap_or_else(|_| Err(StoreError::Io("a store thread panicked".into())))
                })
            };
        let mut client = OffThread(None);
        let mut take = |take_it: bool| -> Result<Option<Result<i64, Held>>, StoreError> {
            if client.0.as_ref().is_none_or(Client::is_closed) {
                let mut fresh = Connection::open_plain(&options)?;
                if take_it {
                    schema::migrate(&mut fresh, &options.schema, &options.location)?;
                } else {
                    schema::check(&mut fresh, &options.schema, &options.location)?;
                }
                client.0 = Some(fresh);
            }
            match (take_it, client.0.as_mut()) {
                (true, Some(c)) => lease::try_take(c, &options, holder).map(Some),
                _ => Ok(None),
            }
        };
        let mut asked = std::time::Instant::now();
        let epoch = match lease {
            Lease::ReadOnly => {
                off_thread(&mut || take(false))?;
                None
            }
            Lease::Take => match off_thread(&mut || take(true))? {
                Some(Ok(epoch)) => Some(epoch),
                Some(Err(held)) => return Err(locked(&options, &held)),
                None => None,
            },
            Lease::Wait(waiting) => {
                let mut heard: Option<(String, i64)> = None;
                loop {
                    asked = std::time::Instant::now();
                    match off_thread(&mut || take(true))? {
                        Some(Ok(epoch)) => break Some(epoch),
                        Some(Err(held)) => {
                            let seen = Some((held.holder.clone(), held.epoch));
                            if heard != seen {
                                waiting(&held);
                                heard = seen;
                            }
                            std::thread::sleep(
                                STANDBY_POLL.min(held.remaining.max(STANDBY_POLL / 4)),
                            );
                        }
                        None => break None,
                    }
                }
            }
        };
        drop(client);
        let lease = epoch
            .map(|epoch| lease::Lease::hold(&options, epoch, asked))
            .transpose()?;
        let (sender, receiver) = sync_channel::<Request>(options.pool * 4);
        let receiver = Arc::new(Mutex::new(receiver));
        let mut workers = Vec::with_capacity(options.pool);
        for index in 0..options.pool {
            let options = options.clone();
            let receiver = Arc::clone(&receiver);
            let worker = std::thread::Builder::new()
                .name(format!("palm-pg-{index}"))
                .spawn(move || work(index, options, receiver))
                .map_err(|e| StoreError::Io(format!("cannot start a store thread: {e}")))?;
            workers.push(worker);
        }
        let role = match &lease {
            Some(lease) => format!("writer, lease epoch {}", lease.epoch),
            None => "read only".to_owned(),
        };
        let store = PgStore {
            requests: Some(sender),
            workers,
            lease,
            describe: format!(
                "postgres at {} (schema {}, {} connections, {role})",
                options.location, options.schema, options.pool
            ),
        };
        // Prove the pool serves before anyone relies on it.
        store.get(Table::Meta, b"")?;
        Ok(store)
    }

    fn ask<T>(
        &self,
        request: impl FnOnce(SyncSender<Result<T, StoreError>>) -> Request,
    ) -> Result<T, StoreError> {
        let (reply, answer) = sync_channel(1);
        let gone = || StoreError::Io("the PostgreSQL store's workers have stopped".into());
        self.requests
            .as_ref()
            .ok_or_else(gone)?
            .send(request(reply))
            .map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}

/// Drops the schema `url` names, with everything in it (benchmarks and tests clean up
/// with it). Irreversible: every job stored there is gone.
pub fn drop_schema(url: &str) -> Result<(), StoreError> {
    let options = PgOptions::parse(url)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut client = Connection::open_plain(&options)?;
                client
                    .batch_execute(&format!(
                        "DROP SCHEMA IF EXISTS {} CASCADE",
                        schema::quoted(&options.schema)
                    ))
                    .map_err(|e| error(&options.location, "drop the schema", e))
            })
            .join()
            .unwrap_or_else(|_| Err(StoreError::Io("a store thread panicked".into())))
    })
}

fn locked(options: &PgOptions, held: &Held) -> StoreError {
    StoreError::Locked(format!(
        "postgres {} schema {} (its writer's lease is held by {}, epoch {}, for {} ms more \
         unless renewed)",
        options.location,
        options.schema,
        held.holder,
        held.epoch,
        held.remaining.as_millis()
    ))
}

impl PgStore {
    /// The writer's lease epoch, if this store writes.
    pub fn epoch(&self) -> Option<i64> {
        self.lease.as_ref().map(|l| l.epoch)
    }

    /// True once another replica took the lease over: every commit now fails.
    pub fn is_fenced(&self) -> bool {
        self.lease.as_ref().is_some_and(lease::Lease::is_lost)
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.requests.take();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
        // Last: the lease ends only once no commit of ours can still be in flight.
        self.lease.take();
    }
}

impl Store for PgStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.ask(|reply| Request::Get {
            table: table_id(table),
            key: key.to_vec(),
            reply,
        })
    }

    fn scan(
        &self,
        table: Table,
        start: &[u8],
        end: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        let mut from = start.to_vec();
        let mut limit = PAGE_FIRST;
        loop {
            let rows = self.ask(|reply| Request::Page {
                table: table_id(table),
                start: from.clone(),
                end: end.map(<[u8]>::to_vec),
                limit,
                reply,
            })?;
            let full = rows.len() as i64 == limit;
            let Some(last) = rows.last().map(|(key, _)| key.clone()) else {
                return Ok(());
            };
            for (key, value) in &rows {
                if !visit(key, value) {
                    return Ok(());
                }
            }
            if !full {
                return Ok(());
            }
            // The next key after `last` in byte order is `last` followed by a zero byte.
            from = last;
            from.push(0);
            limit = (limit * 2).min(PAGE_MAX);
        }
    }

    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let Some(lease) = &self.lease else {
            return Err(StoreError::Io(format!(
                "{}: opened to read, not to write",
                self.describe
            )));
        };
        if lease.is_lost() {
            return Err(StoreError::Locked(format!(
                "{} (fenced: another replica took the writer's lease over)",
                self.describe
            )));
        }
        let columns = Columns::of(batch)?;
        let epoch = lease.epoch;
        let result = self.ask(|reply| Request::Commit {
            columns,
            epoch,
            reply,
        });
        if let Err(StoreError::Locked(_)) = &result {
            lease.lost.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        result
    }

    fn flush(&self) -> Result<(), StoreError> {
        // COMMIT returned after the WAL was flushed (synchronous_commit is at least on).
        Ok(())
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn fenced(&self) -> bool {
        self.is_fenced()
    }

    fn replicated(&self) -> bool {
        true
    }
}
