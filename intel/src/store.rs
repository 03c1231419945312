//! The index on disk, `<repo>/.palm/index/`:
//!
//! ```text
//! .palm/.gitignore        "*": git status stays clean without touching the repo's ignores
//! .palm/index/meta.json   format version, generation, time, HEAD
//! .palm/index/files.bin   postcard: the file table (path, hash, size, mtime, language,
//!                         counts, shard) and the skipped files with their reasons
//! .palm/index/shards/NN.bin postcard: the content half of the files whose path hashes
//!                         to shard NN (symbols, imports and their resolution, references)
//! .palm/index/history.bin postcard: the git half (commits, their files, paths)
//! .palm/index/search/     tantivy (BM25) over paths, symbols, docs, commit subjects
//! ```
//!
//! The content half is sharded so that a reindex after a small change reads and rewrites
//! only the shards of the files that changed, not the whole content of a large tree.
//!
//! Files are written to a temporary name and renamed, so a reader sees an old file or a
//! new one, never half of one. `meta.json` is written last; the tantivy commit carries
//! the same generation as its payload, so a search index that does not match the meta
//! (a crash between the two) is detected and rebuilt from the other files.

use crate::error::IntelError;
use crate::extract::{FileFacts, Parser};
use crate::files::SkipReason;
use crate::history::History;
use crate::lang::Language;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Bumped whenever a stored type changes shape; an index of another format is rebuilt.
pub const FORMAT_VERSION: u32 = 4;
/// Shards of the content half.
pub const SHARDS: u16 = 64;

/// Where the parts of an index live.
#[derive(Clone, Debug)]
pub struct Layout {
    /// `<repo>/.palm`.
    pub palm: PathBuf,
    /// `<repo>/.palm/index`.
    pub dir: PathBuf,
}

impl Layout {
    /// The layout for a repository's working tree.
    pub fn new(root: &Path) -> Layout {
        let palm = root.join(".palm");
        Layout {
            dir: palm.join("index"),
            palm,
        }
    }

    /// `meta.json`.
    pub fn meta(&self) -> PathBuf {
        self.dir.join("meta.json")
    }

    /// `files.bin`.
    pub fn files(&self) -> PathBuf {
        self.dir.join("files.bin")
    }

    /// `shards/NN.bin`.
    pub fn shard(&self, shard: u16) -> PathBuf {
        self.dir.join("shards").join(format!("{shard:02}.bin"))
    }

    /// `history.bin`.
    pub fn history(&self) -> PathBuf {
        self.dir.join("history.bin")
    }

    /// `search/`.
    pub fn search(&self) -> PathBuf {
        self.dir.join("search")
    }

    /// Creates the directories and `.palm/.gitignore`.
    pub fn create(&self) -> Result<(), IntelError> {
        std::fs::create_dir_all(self.search()).map_err(|e| IntelError::io(&self.dir, e))?;
        std::fs::create_dir_all(self.dir.join("shards"))
            .map_err(|e| IntelError::io(&self.dir, e))?;
        let ignore = self.palm.join(".gitignore");
        if !ignore.exists() {
            std::fs::write(
                &ignore,
                "# Palm's own files (palm index); never committed.\n*\n",
            )
            .map_err(|e| IntelError::io(&ignore, e))?;
        }
        Ok(())
    }
}

/// `meta.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    /// `FORMAT_VERSION` of the writer.
    pub format: u32,
    /// Bumped by every successful index; matches the search index's commit payload.
    pub generation: u64,
    /// When the last index started (ns since the Unix epoch): files modified after it
    /// are re-hashed even when their size and mtime look unchanged.
    pub started_ns: i128,
    /// When it finished (seconds since the Unix epoch).
    pub indexed_at: i64,
    /// HEAD at that time.
    pub head: Option<String>,
    /// Files in the content half.
    pub files: usize,
}

/// One indexed file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileRecord {
    /// Repository-relative path with `/`.
    pub path: String,
    /// Git blob id of the content (SHA-1, hex).
    pub hash: String,
    /// Bytes.
    pub size: u64,
    /// Modification time (ns since the Unix epoch).
    pub mtime_ns: i128,
    /// Its language.
    pub language: Language,
    /// Which extractor produced the facts.
    pub parser: Parser,
    /// The content half.
    pub facts: FileFacts,
    /// Per import (same order as `facts.imports`): the file it resolves to. Recomputed
    /// on every index (it depends on the other files), unlike `facts`.
    pub resolved: Vec<Option<String>>,
}

/// A file the index skipped, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedFile {
    /// Repository-relative path.
    pub path: String,
    /// Why.
    pub reason: SkipReason,
}

/// The content half, assembled from the file table and the shards.
#[derive(Clone, Debug, Default)]
pub struct ContentTable {
    /// Indexed files, sorted by path.
    pub records: Vec<FileRecord>,
    /// Skipped files, sorted by path.
    pub skipped: Vec<SkippedFile>,
}

/// One indexed file in the file table: what a reindex needs to decide, without its facts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Repository-relative path with `/`.
    pub path: String,
    /// Git blob id of the content (SHA-1, hex).
    pub hash: String,
    /// Bytes.
    pub size: u64,
    /// Modification time (ns since the Unix epoch).
    pub mtime_ns: i128,
    /// Its language.
    pub language: Language,
    /// Which extractor produced the facts.
    pub parser: Parser,
    /// Symbols declared.
    pub symbols: u32,
    /// Imports.
    pub imports: u32,
    /// Imports resolved to a file.
    pub resolved: u32,
}

impl FileEntry {
    /// The entry of a record.
    pub fn of(record: &FileRecord) -> FileEntry {
        FileEntry {
            path: record.path.clone(),
            hash: record.hash.clone(),
            size: record.size,
            mtime_ns: record.mtime_ns,
            language: record.language,
            parser: record.parser,
            symbols: record.facts.symbols.len() as u32,
            imports: record.facts.imports.len() as u32,
            resolved: record.resolved.iter().filter(|r| r.is_some()).count() as u32,
        }
    }
}

/// `files.bin`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FileTable {
    /// Indexed files, sorted by path.
    pub entries: Vec<FileEntry>,
    /// Skipped files, sorted by path.
    pub skipped: Vec<SkippedFile>,
}

/// `shards/NN.bin`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Shard {
    /// The records of this shard's files, sorted by path.
    pub records: Vec<FileRecord>,
}

/// The shard of a path (FNV-1a, stable across runs and platforms).
pub fn shard_of(path: &str) -> u16 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in path.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(SHARDS)) as u16
}

/// Reads one shard; a missing shard is empty (no file of the index hashes to it).
pub fn read_shard(layout: &Layout, shard: u16) -> Result<Shard, IntelError> {
    let path = layout.shard(shard);
    if !path.exists() {
        return Ok(Shard::default());
    }
    read_bin(&path)
}

/// Writes a value with postcard, atomically.
pub fn write_bin<T: Serialize>(path: &Path, value: &T) -> Result<(), IntelError> {
    let bytes = postcard::to_allocvec(value).map_err(|e| IntelError::Corrupt {
        path: path.to_owned(),
        reason: format!("cannot encode: {e}"),
    })?;
    write_atomic(path, &bytes)
}

/// Reads a postcard value; a decode failure is `Corrupt`.
pub fn read_bin<T: DeserializeOwned>(path: &Path) -> Result<T, IntelError> {
    let bytes = std::fs::read(path).map_err(|e| corrupt_or_io(path, e))?;
    postcard::from_bytes(&bytes).map_err(|e| IntelError::Corrupt {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Writes `meta.json` atomically.
pub fn write_meta(layout: &Layout, meta: &Meta) -> Result<(), IntelError> {
    let text = serde_json::to_vec_pretty(meta).map_err(|e| IntelError::Corrupt {
        path: layout.meta(),
        reason: e.to_string(),
    })?;
    write_atomic(&layout.meta(), &text)
}

/// Reads `meta.json`; `Ok(None)` when there is no index yet.
pub fn read_meta(layout: &Layout) -> Result<Option<Meta>, IntelError> {
    let path = layout.meta();
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(IntelError::io(&path, e)),
    };
    let meta: Meta = serde_json::from_slice(&bytes).map_err(|e| IntelError::Corrupt {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if meta.format != FORMAT_VERSION {
        return Err(IntelError::Corrupt {
            path,
            reason: format!(
                "format {} (this palm reads format {FORMAT_VERSION})",
                meta.format
            ),
        });
    }
    Ok(Some(meta))
}

/// Reads the content half (file table and every shard) and the git half. Records a
/// shard holds for paths the table does not list (left by an interrupted run) are
/// dropped; a listed path with no record is corruption.
pub fn read_tables(layout: &Layout) -> Result<(ContentTable, History), IntelError> {
    let table: FileTable = read_bin(&layout.files())?;
    let listed: std::collections::HashSet<&str> =
        table.entries.iter().map(|e| e.path.as_str()).collect();
    let mut records = Vec::with_capacity(table.entries.len());
    for shard in 0..SHARDS {
        records.extend(
            read_shard(layout, shard)?
                .records
                .into_iter()
                .filter(|r| listed.contains(r.path.as_str())),
        );
    }
    if records.len() != table.entries.len() {
        return Err(IntelError::Corrupt {
            path: layout.dir.join("shards"),
            reason: format!(
                "{} files listed, {} records in the shards",
                table.entries.len(),
                records.len()
            ),
        });
    }
    records.sort_by(|a, b| a.path.cmp(&b.path));
    let history = read_bin(&layout.history())?;
    Ok((
        ContentTable {
            records,
            skipped: table.skipped,
        },
        history,
    ))
}

fn corrupt_or_io(path: &Path, e: std::io::Error) -> IntelError {
    if e.kind() == std::io::ErrorKind::NotFound {
        IntelError::Corrupt {
            path: path.to_owned(),
            reason: "missing".into(),
        }
    } else {
        IntelError::io(path, e)
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IntelError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| IntelError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| IntelError::io(path, e))
}
