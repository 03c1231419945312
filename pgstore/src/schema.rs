//! Versioned schema migrations.
//!
//! `palm_migrations` records every migration applied, by version. Opening a store takes a
//! transaction-scoped advisory lock (so two replicas booting at once do not both migrate),
//! applies the missing migrations in order in that one transaction, and refuses a
//! database already migrated past what this binary knows: a newer Palm wrote it, and an
//! older one must not guess at its rows.

use palm_actors::store::StoreError;

/// One migration: its version, what it does, and its SQL with `{schema}` for the schema.
struct Migration {
    version: i32,
    description: &'static str,
    sql: &'static str,
}

/// Every migration, oldest first. Never edit one that has shipped: add the next.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "palm_data: every Palm table's keys and values, ordered by (table, key)",
        sql: "CREATE TABLE {schema}.palm_data (
                  tbl   smallint NOT NULL,
                  key   bytea    NOT NULL,
                  value bytea    NOT NULL,
                  PRIMARY KEY (tbl, key)
              )",
    },
    Migration {
        version: 2,
        description: "palm_lease and palm_fence: one writing replica at a time, fenced by epoch",
        // The fence runs inside every commit statement. FOR SHARE holds the lease row
        // until that commit ends, so a takeover (an UPDATE of the row) waits for commits
        // in flight and every commit after it sees the new epoch and fails.
        sql: "CREATE TABLE {schema}.palm_lease (
                  id         smallint    PRIMARY KEY CHECK (id = 1),
                  epoch      bigint      NOT NULL,
                  holder     text        NOT NULL,
                  expires_at timestamptz NOT NULL
              );
              CREATE FUNCTION {schema}.palm_fence(ours bigint) RETURNS boolean
              LANGUAGE plpgsql AS $fence$
              BEGIN
                  PERFORM 1 FROM {schema}.palm_lease WHERE id = 1 AND epoch = ours FOR SHARE;
                  IF NOT FOUND THEN
                      RAISE EXCEPTION 'fenced: lease epoch % was taken over by another replica', ours
                          USING ERRCODE = 'PA001';
                  END IF;
                  RETURN true;
              END
              $fence$",
    },
];

/// The newest schema version this binary knows.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// `"schema"`, quoted for SQL (the name was checked to be a plain identifier).
pub fn quoted(schema: &str) -> String {
    format!("\"{schema}\"")
}

/// Brings `schema` up to [`latest`]; returns the version found before.
pub fn migrate(
    client: &mut postgres::Client,
    schema: &str,
    location: &str,
) -> Result<i32, StoreError> {
    let fail = |what: &str, e: postgres::Error| crate::error(location, what, e);
    let mut tx = client
        .transaction()
        .map_err(|e| fail("begin a migration", e))?;
    // One migrator per schema at a time, across every process sharing the database.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('palm-migrate:' || $1::text))",
        &[&schema],
    )
    .map_err(|e| fail("take the migration lock", e))?;
    let q = quoted(schema);
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {q};
         CREATE TABLE IF NOT EXISTS {q}.palm_migrations (
             version     integer     PRIMARY KEY,
             description text        NOT NULL,
             applied_at  timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .map_err(|e| fail("create the migrations table", e))?;
    let found: i32 = tx
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {q}.palm_migrations"),
            &[],
        )
        .map_err(|e| fail("read the schema version", e))?
        .get(0);
    if found > latest() {
        return Err(StoreError::Corrupt(format!(
            "postgres at {location}: schema {schema} is at version {found}, but this palm knows \
             only up to {}; a newer palm wrote it, so run that one (or a new schema)",
            latest()
        )));
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.batch_execute(&migration.sql.replace("{schema}", &q))
            .map_err(|e| fail(&format!("apply migration {}", migration.version), e))?;
        tx.execute(
            &format!("INSERT INTO {q}.palm_migrations (version, description) VALUES ($1, $2)"),
            &[&migration.version, &migration.description],
        )
        .map_err(|e| fail("record a migration", e))?;
    }
    tx.commit().map_err(|e| fail("commit the migrations", e))?;
    Ok(found)
}

/// Checks, without changing anything, that `schema` is at [`latest`] (a reader must not
/// migrate: it may lack the rights, and a newer binary's read command must not upgrade
/// the schema under an older running writer).
pub fn check(
    client: &mut postgres::Client,
    schema: &str,
    location: &str,
) -> Result<(), StoreError> {
    let q = quoted(schema);
    let found: i32 = match client.query_one(
        &format!("SELECT coalesce(max(version), 0) FROM {q}.palm_migrations"),
        &[],
    ) {
        Ok(row) => row.get(0),
        // 3F000: no such schema; 42P01: no such table.
        Err(e)
            if e.code()
                .is_some_and(|c| ["3F000", "42P01"].contains(&c.code())) =>
        {
            0
        }
        Err(e) => return Err(crate::error(location, "read the schema version", e)),
    };
    match found {
        0 => Err(StoreError::Io(format!(
            "postgres at {location}: schema {schema} holds no Palm store yet; \
             `palm up --store URL` creates it"
        ))),
        v if v > latest() => Err(StoreError::Corrupt(format!(
            "postgres at {location}: schema {schema} is at version {v}, but this palm knows \
             only up to {}; a newer palm wrote it, so run that one (or a new schema)",
            latest()
        ))),
        v if v < latest() => Err(StoreError::Io(format!(
            "postgres at {location}: schema {schema} is at version {v} and this palm reads \
             version {}; a writer (`palm up`) migrates it",
            latest()
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_rise_one_by_one_from_one() {
        for (i, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(migration.version, i as i32 + 1, "{}", migration.description);
            assert!(
                migration.sql.contains("CREATE TABLE {schema}."),
                "schema-qualified"
            );
        }
    }
}
