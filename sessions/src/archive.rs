//! The archive: the raw bytes of every transcript ingested, content-addressed, so they
//! outlive the vendors' sweeps (Claude deletes transcripts after 30 days by default).
//!
//! A file is archived as the list of its chunks, in order: each ingest stores the bytes
//! the file gained since the last one (split at [`CHUNK_BYTES`]) as objects named by
//! their SHA-256, under `DATA/sessions/objects/ab/<hash>`. An object is written to a
//! temporary file, synced and renamed, so a crash never leaves a torn one; an object
//! already there is not written again. Reading a file back is concatenating its chunks,
//! each checked against its name.

use crate::error::SessionsError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The most bytes one chunk holds.
pub const CHUNK_BYTES: usize = 4 << 20;

/// One stored piece of a file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// SHA-256 of its bytes, hex.
    pub hash: String,
    /// Its length.
    pub len: u64,
}

/// The object store under a directory.
#[derive(Clone, Debug)]
pub struct Archive {
    root: PathBuf,
}

/// SHA-256, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Archive {
    /// The archive under `root` (`DATA/sessions/objects`).
    pub fn new(root: &Path) -> Archive {
        Archive {
            root: root.to_owned(),
        }
    }

    fn path_of(&self, hash: &str) -> PathBuf {
        let (head, _) = hash.split_at(2.min(hash.len()));
        self.root.join(head).join(hash)
    }

    /// Stores `bytes` as chunks; answers them in order.
    pub fn put(&self, bytes: &[u8]) -> Result<Vec<Chunk>, SessionsError> {
        let mut chunks = Vec::new();
        for piece in bytes.chunks(CHUNK_BYTES) {
            let hash = sha256_hex(piece);
            let path = self.path_of(&hash);
            if !path.exists() {
                let dir = path.parent().unwrap_or(&self.root);
                std::fs::create_dir_all(dir).map_err(|e| SessionsError::io(dir, e))?;
                let tmp = dir.join(format!(".{hash}.{}", std::process::id()));
                let mut file =
                    std::fs::File::create(&tmp).map_err(|e| SessionsError::io(&tmp, e))?;
                file.write_all(piece)
                    .and_then(|()| file.sync_data())
                    .map_err(|e| SessionsError::io(&tmp, e))?;
                std::fs::rename(&tmp, &path).map_err(|e| SessionsError::io(&path, e))?;
            }
            chunks.push(Chunk {
                hash,
                len: piece.len() as u64,
            });
        }
        Ok(chunks)
    }

    /// The bytes of `chunks`, in order, each checked against its hash.
    pub fn read(&self, chunks: &[Chunk]) -> Result<Vec<u8>, SessionsError> {
        let mut out = Vec::with_capacity(chunks.iter().map(|c| c.len as usize).sum());
        for chunk in chunks {
            let path = self.path_of(&chunk.hash);
            let bytes = std::fs::read(&path).map_err(|e| SessionsError::io(&path, e))?;
            if sha256_hex(&bytes) != chunk.hash {
                return Err(SessionsError::Corrupt(format!(
                    "archived chunk {} does not match its hash",
                    path.display()
                )));
            }
            out.extend_from_slice(&bytes);
        }
        Ok(out)
    }

    /// Removes the objects named in `hashes` (those no file refers to any more).
    pub fn remove(&self, hashes: &[String]) -> u64 {
        let mut freed = 0;
        for hash in hashes {
            let path = self.path_of(hash);
            if let Ok(meta) = std::fs::metadata(&path)
                && std::fs::remove_file(&path).is_ok()
            {
                freed += meta.len();
            }
        }
        freed
    }

    /// Bytes the objects take on disk.
    pub fn size(&self) -> u64 {
        dir_size(&self.root)
    }
}

/// Bytes of the files under `dir`.
pub fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_back_as_stored_and_a_damaged_chunk_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let archive = Archive::new(dir.path());
        let bytes: Vec<u8> = (0..(CHUNK_BYTES + 10)).map(|i| (i % 251) as u8).collect();
        let chunks = archive.put(&bytes).expect("put");
        assert_eq!(chunks.len(), 2);
        assert_eq!(archive.read(&chunks).expect("read"), bytes);
        // The same bytes again: nothing new written.
        let again = archive.put(&bytes).expect("put again");
        assert_eq!(again, chunks);
        std::fs::write(archive.path_of(&chunks[1].hash), b"damaged").expect("damage");
        let err = archive.read(&chunks).expect_err("refused");
        assert!(err.to_string().contains("does not match"), "{err}");
    }
}
