//! The PostgreSQL store against a real server: the same conformance checks as redb, then
//! what only a shared, networked store has to answer for — a second store on the same
//! schema sees the first's commits, a failing batch leaves nothing behind, a dropped
//! connection heals without the caller seeing it, schema versions are recorded and a newer schema is refused.
//!
//! The server comes from `PALM_TEST_POSTGRES` (`.ci/postgres` starts one and prints its
//! URL). Each test works in schemas of its own, dropped at the end.

use palm_actors::store::{Store, StoreError, Table, WriteBatch, conformance};
use palm_pgstore::{PgStore, schema_version};
use std::sync::atomic::{AtomicUsize, Ordering};

fn server() -> Option<String> {
    match std::env::var("PALM_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => panic!(
            "PALM_TEST_POSTGRES is not set: .ci/run starts PostgreSQL with .ci/postgres and sets it"
        ),
        _ => {
            eprintln!(
                "skipped: set PALM_TEST_POSTGRES (`.ci/postgres` starts a server and prints it)"
            );
            None
        }
    }
}

/// Schemas made by this test process, dropped when it is done with them.
struct Schemas {
    base: String,
    names: std::sync::Mutex<Vec<String>>,
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

impl Schemas {
    fn new(base: String) -> Schemas {
        Schemas {
            base,
            names: Default::default(),
        }
    }

    /// A URL for a fresh schema (plus `extra` parameters).
    fn fresh(&self, extra: &str) -> String {
        let name = format!(
            "palm_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.names.lock().unwrap().push(name.clone());
        self.url(&name, extra)
    }

    fn url(&self, schema: &str, extra: &str) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}schema={schema}{extra}", self.base)
    }

    fn sql(&self) -> postgres::Client {
        postgres::Client::connect(&self.base, postgres::NoTls).expect("connect for SQL")
    }
}

impl Drop for Schemas {
    fn drop(&mut self) {
        let names = std::mem::take(&mut *self.names.lock().unwrap());
        if names.is_empty() {
            return;
        }
        let mut client = self.sql();
        for name in names {
            let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"));
        }
    }
}

/// The schema a test URL names.
fn schema_of(url: &str) -> String {
    let after = url.split("schema=").nth(1).expect("a schema in the URL");
    after.split('&').next().unwrap_or(after).to_owned()
}

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

#[test]
fn the_store_conformance_checks_pass_on_postgres() {
    let Some(base) = server() else { return };
    let schemas = Schemas::new(base);
    conformance::run(&|| Box::new(PgStore::open(&schemas.fresh(""), "test").expect("open")));
    // And with a single connection, where scans and reads queue behind one another.
    conformance::run(&|| Box::new(PgStore::open(&schemas.fresh("&pool=1"), "test").expect("open")));
}

#[test]
fn one_writer_at_a_time_and_a_replica_takes_over_what_it_acknowledged() {
    let Some(base) = server() else { return };
    let schemas = Schemas::new(base);
    let url = schemas.fresh("&lease_ms=600");
    let first = PgStore::open(&url, "replica-a").expect("open");
    let mut batch = WriteBatch::new();
    batch.put(Table::Jobs, b"j1".to_vec(), b"parked".to_vec());
    batch.put(
        Table::Meta,
        b"next_job".to_vec(),
        2u64.to_be_bytes().to_vec(),
    );
    first.commit(&batch).expect("commit");
    first.flush().expect("flush");
    // A second writer is refused while the first holds (and renews) the lease, well past
    // the lease's length; a reader is not, and reads what was acknowledged.
    for _ in 0..3 {
        let err = PgStore::open(&url, "replica-b").expect_err("lease held");
        assert!(
            matches!(&err, StoreError::Locked(m) if m.contains("held by replica-a, epoch 1")),
            "{err}"
        );
        std::thread::sleep(std::time::Duration::from_millis(400));
    }
    let reader = PgStore::open_read_only(&url).expect("reader");
    assert_eq!(
        reader.get(Table::Jobs, b"j1").expect("get"),
        Some(b"parked".to_vec())
    );
    assert!(reader.commit(&batch).is_err(), "a reader never writes");
    // A standby waits; the first stops cleanly (releasing the lease) and the standby
    // takes over at once with the next epoch, reading everything the first acknowledged.
    let standby = std::thread::spawn({
        let url = url.clone();
        move || {
            let mut heard = Vec::new();
            let store = PgStore::open_with(
                &url,
                "replica-b",
                palm_pgstore::Lease::Wait(&mut |held| heard.push(held.holder.clone())),
            )
            .expect("standby");
            (store, heard)
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let released = std::time::Instant::now();
    drop(first);
    let (second, heard) = standby.join().unwrap();
    assert!(
        released.elapsed() < std::time::Duration::from_millis(450),
        "{:?}",
        released.elapsed()
    );
    assert_eq!(heard, vec!["replica-a".to_owned()]);
    assert_eq!(second.epoch(), Some(2));
    // The first replica's commit markers went with its epoch.
    let schema = schema_of(&url);
    let markers: Vec<Vec<u8>> = schemas
        .sql()
        .query(
            &format!("SELECT key FROM \"{schema}\".palm_data WHERE tbl = 0"),
            &[],
        )
        .expect("markers")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(markers.is_empty(), "markers of epoch 1 left: {markers:?}");
    let mut marked = WriteBatch::new();
    marked.put(Table::Jobs, b"j2".to_vec(), b"2".to_vec());
    second.commit(&marked).expect("commit");
    assert_eq!(
        second.get(Table::Jobs, b"j1").expect("get"),
        Some(b"parked".to_vec())
    );
    assert_eq!(
        all(&second, Table::Jobs).len(),
        2,
        "j1 from the first, j2 from the second"
    );
    assert!(
        second.describe().contains("lease epoch 2"),
        "{}",
        second.describe()
    );
}

#[test]
fn a_replica_whose_lease_was_taken_over_can_never_write_again() {
    let Some(base) = server() else { return };
    let schemas = Schemas::new(base);
    let url = schemas.fresh("&lease_ms=60000");
    let schema = schema_of(&url);
    let stale = PgStore::open(&url, "stale").expect("open");
    let mut batch = WriteBatch::new();
    batch.put(Table::Jobs, b"j1".to_vec(), b"first".to_vec());
    stale
        .commit(&batch)
        .expect("commit while the lease is held");
    // The stale replica pauses (a GC, a partition) long enough for its lease to end —
    // planted here by ending it in the database — and another replica takes over.
    schemas
        .sql()
        .execute(
            &format!("UPDATE \"{schema}\".palm_lease SET expires_at = now() - interval '1 second'"),
            &[],
        )
        .expect("end the lease");
    let fresh = PgStore::open(&url, "fresh").expect("take over");
    assert_eq!(fresh.epoch(), Some(2));
    // The stale replica wakes and writes as if nothing happened: the fence inside its
    // commit refuses, even a batch that only deletes, and nothing of the batch lands.
    let mut deletes = WriteBatch::new();
    deletes.delete(Table::Jobs, b"j1".to_vec());
    let err = stale.commit(&deletes).expect_err("fenced");
    assert!(
        matches!(&err, StoreError::Locked(m) if m.contains("fenced")),
        "{err}"
    );
    assert_eq!(
        fresh.get(Table::Jobs, b"j1").expect("get"),
        Some(b"first".to_vec())
    );
    let mut batch = WriteBatch::new();
    batch.put(Table::Jobs, b"j1".to_vec(), b"stale".to_vec());
    batch.delete(Table::Meta, b"anything".to_vec());
    batch.put(Table::Journal, b"e".to_vec(), b"stale".to_vec());
    let err = stale.commit(&batch).expect_err("fenced");
    assert!(
        matches!(&err, StoreError::Locked(m) if m.contains("fenced")),
        "{err}"
    );
    assert_eq!(
        fresh.get(Table::Jobs, b"j1").expect("get"),
        Some(b"first".to_vec())
    );
    assert!(all(&fresh, Table::Journal).is_empty());
    // The store now knows it is fenced and refuses at once, without asking the database.
    assert!(stale.is_fenced());
    assert!(matches!(stale.commit(&batch), Err(StoreError::Locked(_))));
    let mut batch = WriteBatch::new();
    batch.put(Table::Jobs, b"j2".to_vec(), b"fresh".to_vec());
    fresh.commit(&batch).expect("the new writer writes");
}

#[test]
fn a_batch_the_database_refuses_leaves_nothing_behind() {
    let Some(base) = server() else { return };
    let schemas = Schemas::new(base);
    let url = schemas.fresh("");
    let store = PgStore::open(&url, "test").expect("open");
    let mut batch = WriteBatch::new();
    batch.put(Table::Jobs, b"keep".to_vec(), b"1".to_vec());
    batch.put(Table::Jobs, b"gone".to_vec(), b"1".to_vec());
    store.commit(&batch).expect("commit");
    // Poison one value: the database refuses the row, and with it the whole batch.
    let schema = schema_of(&url);
    schemas
        .sql()
        .batch_execute(&format!(
            "ALTER TABLE \"{schema}\".palm_data ADD CONSTRAINT no_poison CHECK (value <> 'poison')"
        ))
        .expect("constraint");
    let mut batch = WriteBatch::new();
    batch.put(Table::Jobs, b"new".to_vec(), b"1".to_vec());
    batch.put(Table::Jobs, b"keep".to_vec(), b"2".to_vec());
    batch.delete(Table::Jobs, b"gone".to_vec());
    batch.put(Table::Journal, b"bad".to_vec(), b"poison".to_vec());
    let err = store.commit(&batch).expect_err("refused");
    assert!(err.to_string().contains("no_poison"), "{err}");
    assert_eq!(
        all(&store, Table::Jobs),
        vec![
            (b"gone".to_vec(), b"1".to_vec()),
            (b"keep".to_vec(), b"1".to_vec())
        ],
        "nothing of the refused batch"
    );
    assert!(all(&store, Table::Journal).is_empty());
    // A key PostgreSQL's index could not hold is refused before it is sent, clearly.
    let mut batch = WriteBatch::new();
    batch.put(Table::Kv, vec![b'k'; 3_000], b"1".to_vec());
    let err = store.commit(&batch).expect_err("too long");
    assert!(err.to_string().contains("3000 bytes in table kv"), "{err}");
}

#[test]
fn a_dropped_connection_heals_without_losing_a_commit() {
    let Some(base) = server() else { return };
    let schemas = Schemas::new(base);
    let url = schemas.fresh("&pool=1&application_name=palm_heal_test");
    let store = PgStore::open(&url, "test").expect("open");
    for round in 0..3u8 {
        let mut batch = WriteBatch::new();
        batch.put(Table::Kv, vec![round], vec![round]);
        store.commit(&batch).expect("commit");
        // The server ends every connection of this store.
        let ended: i64 = schemas
            .sql()
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = 'palm_heal_test'",
                &[],
            )
            .expect("terminate")
            .get(0);
        assert!(ended >= 1, "the store's connections were found");
        // The next commit and reads find their connection gone, open a new one and try
        // once more: no error reaches the caller, nothing is lost.
        let mut batch = WriteBatch::new();
        batch.put(Table::Kv, vec![round, 1], vec![round]);
        store
            .commit(&batch)
            .expect("commit after the server ended the connection");
        assert_eq!(
            store.get(Table::Kv, &[round]).expect("get"),
            Some(vec![round])
        );
        assert_eq!(
            store.get(Table::Kv, &[round, 1]).expect("get"),
            Some(vec![round])
        );
    }
    assert_eq!(all(&store, Table::Kv).len(), 6);
}

#[test]
fn the_schema_version_is_recorded_and_a_newer_one_is_refused() {
    let Some(base) = server() else { return };
    let schemas = Schemas::new(base);
    let url = schemas.fresh("");
    // Several replicas opening a fresh schema at once: one migrates, the rest find it
    // done; then each either takes the writer's lease or is told who holds it.
    let opened: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let url = &url;
                scope.spawn(move || PgStore::open(url, &format!("r{i}")).map(|_| ()))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        opened
            .iter()
            .all(|r| matches!(r, Ok(()) | Err(StoreError::Locked(_))))
            && opened.iter().any(Result::is_ok),
        "{opened:?}"
    );
    let schema = schema_of(&url);
    let mut sql = schemas.sql();
    let versions: Vec<i32> = sql
        .query(
            &format!("SELECT version FROM \"{schema}\".palm_migrations ORDER BY version"),
            &[],
        )
        .expect("versions")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(versions, (1..=schema_version()).collect::<Vec<_>>());
    sql.execute(
        &format!(
            "INSERT INTO \"{schema}\".palm_migrations (version, description) VALUES ($1, 'from the future')"
        ),
        &[&(schema_version() + 1)],
    )
    .expect("plant a newer version");
    let err = PgStore::open(&url, "test").expect_err("newer schema");
    assert!(
        matches!(err, StoreError::Corrupt(_)) && err.to_string().contains("a newer palm wrote it"),
        "{err}"
    );
}

#[test]
fn an_unreachable_server_is_a_clear_error_not_a_hang() {
    // Nothing listens on port 9 of loopback; the error names where and what.
    let started = std::time::Instant::now();
    let err = PgStore::open(
        "postgres://palm:pw@127.0.0.1:9/palm?connect_timeout=2",
        "test",
    )
    .expect_err("nothing listens");
    let message = err.to_string();
    assert!(
        message.contains("postgres at 127.0.0.1:9/palm: cannot connect"),
        "{message}"
    );
    assert!(!message.contains("pw"), "{message}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn a_writer_that_cannot_renew_its_lease_counts_itself_fenced_within_its_length() {
    let Some(base) = server() else { return };
    let schemas = Schemas::new(base);
    let url = schemas.fresh("&lease_ms=600");
    let schema = schema_of(&url);
    let store = PgStore::open(&url, "partitioned").expect("open");
    let mut batch = WriteBatch::new();
    batch.put(Table::Jobs, b"j1".to_vec(), b"1".to_vec());
    store.commit(&batch).expect("commit");
    // Cut the writer off from its lease: another session holds the lease row, so every
    // renewal waits (as one would behind a partition).
    let mut blocker = schemas.sql();
    let mut hold = blocker.transaction().expect("begin");
    hold.execute(
        &format!("SELECT 1 FROM \"{schema}\".palm_lease FOR UPDATE"),
        &[],
    )
    .expect("lock the lease row");
    let cut = std::time::Instant::now();
    assert!(
        (0..60).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            store.is_fenced()
        }),
        "still not fenced {:?} after the renewals stopped",
        cut.elapsed()
    );
    assert!(
        cut.elapsed() <= std::time::Duration::from_millis(1_300),
        "{:?}",
        cut.elapsed()
    );
    assert!(matches!(store.commit(&batch), Err(StoreError::Locked(_))));
    hold.rollback().expect("release");
    // Fenced stays fenced, even once renewals could go through again.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(store.is_fenced());
}

#[test]
fn a_reader_neither_creates_nor_migrates_a_schema() {
    let Some(base) = server() else { return };
    let schemas = Schemas::new(base);
    let url = schemas.fresh("");
    let err = PgStore::open_read_only(&url).expect_err("nothing there yet");
    assert!(err.to_string().contains("holds no Palm store yet"), "{err}");
    let schema = schema_of(&url);
    let exists: i64 = schemas
        .sql()
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
            &[&schema],
        )
        .expect("count")
        .get(0);
    assert_eq!(exists, 0, "a reader created the schema");
    drop(PgStore::open(&url, "writer").expect("a writer creates it"));
    PgStore::open_read_only(&url).expect("then a reader opens it");
}

/// Whether each connection of the store whose URL names `application_name=app` speaks
/// TLS, as the server sees them.
fn tls_of(sql: &mut postgres::Client, app: &str) -> Vec<bool> {
    sql.query(
        "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = $1",
        &[&app],
    )
    .expect("pg_stat_ssl")
    .iter()
    .map(|row| row.get(0))
    .collect()
}

#[test]
fn connections_speak_tls_as_sslmode_says_and_check_what_it_says() {
    let Some(base) = server() else { return };
    let schemas = Schemas::new(base.clone());
    let mut sql = schemas.sql();
    let ssl: String = sql.query_one("SHOW ssl", &[]).expect("ssl").get(0);
    assert_eq!(
        ssl, "on",
        "the test server serves no TLS (.ci/postgres starts it with ssl=on)"
    );
    let data: String = sql
        .query_one("SHOW data_directory", &[])
        .expect("data_directory")
        .get(0);
    let ca = format!("{data}/root.crt");
    let cases = [
        ("", true),
        ("&sslmode=disable", false),
        ("&sslmode=prefer", true),
        ("&sslmode=require", true),
        (&*format!("&sslmode=verify-ca&sslrootcert={ca}"), true),
        (&*format!("&sslmode=verify-full&sslrootcert={ca}"), true),
    ];
    for (i, (extra, tls)) in cases.into_iter().enumerate() {
        let app = format!("palm_tls_{}_{i}", std::process::id());
        let url = schemas.fresh(&format!("{extra}&application_name={app}&pool=2"));
        let store = PgStore::open(&url, "test").expect(extra);
        let mut batch = WriteBatch::new();
        batch.put(Table::Jobs, b"j".to_vec(), b"over the wire".to_vec());
        store.commit(&batch).expect("commit");
        assert_eq!(
            store.get(Table::Jobs, b"j").expect("get").as_deref(),
            Some(&b"over the wire"[..])
        );
        let seen = tls_of(&mut sql, &app);
        assert!(
            seen.len() >= 2,
            "{extra}: the store's connections: {seen:?}"
        );
        assert!(seen.iter().all(|&s| s == tls), "{extra}: TLS {seen:?}");
    }
    // Authorities that did not sign the server's certificate: refused, saying why.
    let err = PgStore::open(
        &schemas.fresh("&sslmode=verify-full&sslrootcert=system"),
        "test",
    )
    .expect_err("an unknown authority is refused");
    assert!(err.to_string().contains("certificate"), "{err}");
    // A name the certificate is not for (the address is the server's, the name another):
    // verify-full refuses it, verify-ca does not look at names.
    let other = base.replacen("@127.0.0.1:", "@palm-not-this-host:", 1);
    assert_ne!(other, base, "the test server's URL names 127.0.0.1");
    let other = Schemas::new(format!(
        "{other}{}hostaddr=127.0.0.1",
        if other.contains('?') { '&' } else { '?' }
    ));
    let err = PgStore::open(
        &other.fresh(&format!("&sslmode=verify-full&sslrootcert={ca}")),
        "test",
    )
    .expect_err("a certificate for another name is refused");
    assert!(err.to_string().contains("certificate"), "{err}");
    PgStore::open(
        &other.fresh(&format!("&sslmode=verify-ca&sslrootcert={ca}")),
        "test",
    )
    .expect("verify-ca takes the certificate whatever its name");
    // What cannot work is said when the URL is read, before any connection.
    for (extra, needle) in [
        ("&sslmode=verify-full", "needs sslrootcert"),
        ("&sslmode=allow", "not supported"),
        ("&sslrootcert=/no/such/root.crt", "cannot read sslrootcert"),
        ("&sslcert=/x.crt", "client certificates are not supported"),
    ] {
        let err = PgStore::open(&schemas.fresh(extra), "test").expect_err(extra);
        assert!(err.to_string().contains(needle), "{extra}: {err}");
    }
}
