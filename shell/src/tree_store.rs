//! A replicated root's tree identity, kept in its shared store so every replica is the
//! same root: the tree CA, the root's own certificate and key, its record, and the trust
//! book (tokens, enrolled children, revocations).
//!
//! The files stay where the tree organ reads them (`DIR/tree`); the store is their truth.
//! At a root's boot the store's copies are written over the directory's; the first
//! replica, which creates the CA, puts the files into the store; every later change of
//! the trust book is committed to the store (through the writer's lease, so a fenced
//! replica cannot change it) before the token or enrollment is answered. They live in
//! the store's `meta` table under `tree/FILE`.

use crate::exit::CliError;
use palm_actors::store::{Store, Table, WriteBatch, scan_prefix};
use palm_transport::pki::TreeFiles;
use std::sync::Arc;

/// The key prefix in `meta`.
const PREFIX: &str = "tree/";
/// The files a root keeps in the store (all of a root's tree directory but scratch).
const FILES: [&str; 7] = [
    "ca.key.der",
    "ca.cert.der",
    "node.key.der",
    "node.cert.der",
    "tree-ca.cert.der",
    "node.json",
    "trust.json",
];

fn failure(what: String) -> CliError {
    CliError::failure("tree", what)
}

/// True when the store holds a tree CA.
pub fn has_ca(store: &dyn Store) -> Result<bool, CliError> {
    store
        .get(Table::Meta, format!("{PREFIX}ca.cert.der").as_bytes())
        .map(|v| v.is_some())
        .map_err(|e| failure(format!("cannot read the tree identity from the store: {e}")))
}

/// Writes the store's tree files over `files`' directory; returns how many it wrote.
pub fn restore(store: &dyn Store, files: &TreeFiles) -> Result<usize, CliError> {
    let mut found = Vec::new();
    scan_prefix(store, Table::Meta, PREFIX.as_bytes(), &mut |key, value| {
        let name = String::from_utf8_lossy(&key[PREFIX.len()..]).into_owned();
        found.push((name, value.to_vec()));
        true
    })
    .map_err(|e| failure(format!("cannot read the tree identity from the store: {e}")))?;
    let mut written = 0;
    for (name, bytes) in found {
        // Only the files this module puts there: a key is never a path.
        if !FILES.contains(&name.as_str()) {
            continue;
        }
        let path = files.path(&name);
        if std::fs::read(&path).is_ok_and(|current| current == bytes) {
            continue;
        }
        palm_transport::pki::write_atomic(files.dir(), &path, &bytes, true)
            .map_err(|e| failure(format!("cannot write {}: {e}", path.display())))?;
        written += 1;
    }
    Ok(written)
}

/// Puts `files`' tree files into the store, in one commit.
pub fn save(store: &dyn Store, files: &TreeFiles) -> Result<(), CliError> {
    let mut batch = WriteBatch::new();
    for name in FILES {
        match std::fs::read(files.path(name)) {
            Ok(bytes) => batch.put(Table::Meta, format!("{PREFIX}{name}").into_bytes(), bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(failure(format!(
                    "cannot read {}: {e}",
                    files.path(name).display()
                )));
            }
        }
    }
    store
        .commit(&batch)
        .and_then(|()| store.flush())
        .map_err(|e| failure(format!("cannot put the tree identity into the store: {e}")))
}

/// The trust book's mirror into the store (see [`palm_transport::Authority::mirrored`]).
pub fn mirror(store: Arc<dyn Store>) -> palm_transport::Mirror {
    Box::new(move |bytes: &[u8]| {
        let mut batch = WriteBatch::new();
        batch.put(
            Table::Meta,
            format!("{PREFIX}trust.json").into_bytes(),
            bytes.to_vec(),
        );
        store
            .commit(&batch)
            .and_then(|()| store.flush())
            .map_err(|e| format!("the shared store did not take the trust book: {e}"))
    })
}

/// Before a replicated root's tree organ starts: the store's identity wins; a directory
/// with an identity the store lacks (the first replica, or one from before) gives it.
pub fn sync(store: &dyn Store, files: &TreeFiles) -> Result<(), CliError> {
    if has_ca(store)? {
        restore(store, files)?;
    } else if files.has_ca() {
        save(store, files)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use palm_actors::store::MemoryStore;

    #[test]
    fn a_second_replica_gets_the_first_ones_identity_and_trust_book() {
        let store = MemoryStore::new();
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (files_a, files_b) = (TreeFiles::new(a.path()), TreeFiles::new(b.path()));
        let ca = palm_transport::TreeCa::generate().expect("ca");
        files_a.save_ca(&ca).expect("save ca");
        files_a
            .save_identity(&ca.issue_identity("root").expect("identity"))
            .expect("save identity");
        sync(&store, &files_a).expect("first replica gives");
        assert!(has_ca(&store).unwrap());
        sync(&store, &files_b).expect("second replica takes");
        assert!(files_b.has_ca() && files_b.has_identity());
        assert_eq!(
            std::fs::read(files_a.path("ca.key.der")).unwrap(),
            std::fs::read(files_b.path("ca.key.der")).unwrap()
        );
        // A trust book change through the mirror reaches the other replica's next boot.
        let shared: Arc<dyn Store> = Arc::new(store);
        (mirror(Arc::clone(&shared)))(b"{\"tokens\":{}}").expect("mirror");
        sync(&*shared, &files_b).expect("sync");
        assert_eq!(
            std::fs::read(files_b.path("trust.json")).unwrap(),
            b"{\"tokens\":{}}"
        );
    }
}
