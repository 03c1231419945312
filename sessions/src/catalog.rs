//! The catalog: what has been ingested, per vendor file (its archived chunks, how far its
//! lines were read, its reader's state) and per session (its files, meta, counts).
//!
//! It is one JSON document per ingest *generation*, `DATA/sessions/catalog-<N>.json`,
//! written (synced, renamed) before the index commit that names `N` in its payload. So
//! the catalog and the index always agree: a crash between the two leaves the index at
//! `N - 1`, whose catalog is still there, and the next ingest reads those bytes again.

use crate::archive::Chunk;
use crate::claude::ClaudeReader;
use crate::codex::CodexReader;
use crate::error::SessionsError;
use crate::transcript::{Entry, SessionMeta, Vendor};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The catalog's format.
pub const CATALOG_VERSION: u32 = 1;

/// A vendor's reader, with its state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reader {
    /// Claude Code.
    Claude(ClaudeReader),
    /// Codex CLI.
    Codex(CodexReader),
}

impl Reader {
    /// A fresh reader for `vendor`'s file named `file_name`.
    pub fn new(vendor: Vendor, file_name: &str) -> Reader {
        match vendor {
            Vendor::Claude => Reader::Claude(ClaudeReader::new(file_name)),
            Vendor::Codex => Reader::Codex(CodexReader::new(file_name)),
        }
    }

    /// Reads one complete line.
    pub fn line(&mut self, number: u64, text: &str, out: &mut Vec<Entry>) {
        match self {
            Reader::Claude(r) => r.line(number, text, out),
            Reader::Codex(r) => r.line(number, text, out),
        }
    }

    /// What the lines so far said.
    pub fn meta(&self) -> &SessionMeta {
        match self {
            Reader::Claude(r) => r.meta(),
            Reader::Codex(r) => r.meta(),
        }
    }
}

/// One vendor file, as far as it was ingested.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileState {
    /// Whose.
    pub vendor: Vendor,
    /// Where it was last seen.
    pub path: PathBuf,
    /// Its bytes, archived, in order.
    pub chunks: Vec<Chunk>,
    /// Bytes archived (the sum of the chunks).
    pub archived: u64,
    /// Bytes read as complete lines (a partial last line waits for its end).
    pub fed: u64,
    /// Complete lines read.
    pub lines: u64,
    /// SHA-256 of its first bytes (at most `HEAD_BYTES`): a file rewritten in place is
    /// told apart from one that grew.
    pub head: String,
    /// Size and modification time when last ingested: unchanged, it is not even opened.
    pub size: u64,
    /// See `size`.
    pub mtime_ms: i64,
    /// The reader's state after `lines` lines.
    pub reader: Reader,
    /// Entries indexed from it.
    pub entries: u64,
    /// Earlier versions of a file rewritten in place (kept: nothing archived is lost).
    pub previous: Vec<Vec<Chunk>>,
}

/// What the archive knows of one session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Whose.
    pub vendor: Option<Vendor>,
    /// The files holding its entries (catalog keys).
    pub files: BTreeSet<String>,
    /// What its own file says about it.
    pub meta: SessionMeta,
    /// Entries indexed.
    pub entries: u64,
    /// The first and last timestamps of its entries.
    pub first_ms: Option<i64>,
    /// See `first_ms`.
    pub last_ms: Option<i64>,
    /// A title the vendor keeps beside the transcript (Codex's `session_index.jsonl`, a
    /// Claude subagent's `.meta.json`), for a session whose own lines name none.
    #[serde(default)]
    pub side_title: Option<String>,
}

/// The whole catalog.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    /// [`CATALOG_VERSION`].
    pub version: u32,
    /// The ingest generation it belongs to.
    pub generation: u64,
    /// Vendor files by key (`vendor/name`, see [`file_key`]).
    pub files: BTreeMap<String, FileState>,
    /// Sessions by id.
    pub sessions: BTreeMap<String, SessionInfo>,
    /// File keys forgotten on purpose: never ingested again.
    pub forgotten: BTreeSet<String>,
    /// Size and modification time of Codex's `session_index.jsonl` when its titles were
    /// last read: unchanged, it is not read again.
    #[serde(default)]
    pub session_index: Option<(u64, i64)>,
}

/// The catalog key of a vendor file: its vendor and the path below the vendor's root, so
/// a Codex session moved to `archived_sessions/` is the same file, and a Claude subagent
/// file keeps its session directory.
pub fn file_key(vendor: Vendor, relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if vendor == Vendor::Codex {
        // sessions/2025/09/14/rollout-….jsonl and archived_sessions/…: the name is unique.
        parts = parts.split_off(parts.len().saturating_sub(1));
    }
    format!("{}/{}", vendor.as_str(), parts.join("/"))
}

fn path_of(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("catalog-{generation}.json"))
}

impl Catalog {
    /// The catalog of `generation` under `dir` (empty for generation 0).
    pub fn load(dir: &Path, generation: u64) -> Result<Catalog, SessionsError> {
        if generation == 0 {
            return Ok(Catalog {
                version: CATALOG_VERSION,
                ..Catalog::default()
            });
        }
        let path = path_of(dir, generation);
        let text = std::fs::read(&path).map_err(|e| SessionsError::io(&path, e))?;
        let catalog: Catalog = serde_json::from_slice(&text).map_err(|e| {
            SessionsError::Corrupt(format!("{}: not a session catalog: {e}", path.display()))
        })?;
        if catalog.version != CATALOG_VERSION {
            return Err(SessionsError::Corrupt(format!(
                "{}: catalog format {}, this palm reads {CATALOG_VERSION}",
                path.display(),
                catalog.version
            )));
        }
        Ok(catalog)
    }

    /// Writes this catalog as its generation's file (synced), before the index commit
    /// that names it.
    pub fn save(&self, dir: &Path) -> Result<(), SessionsError> {
        let path = path_of(dir, self.generation);
        let tmp = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(self)
            .map_err(|e| SessionsError::Corrupt(format!("the catalog does not serialize: {e}")))?;
        let mut file = std::fs::File::create(&tmp).map_err(|e| SessionsError::io(&tmp, e))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_data())
            .map_err(|e| SessionsError::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| SessionsError::io(&path, e))?;
        Ok(())
    }

    /// Removes the catalogs of generations before this one's predecessor (the
    /// predecessor stays until the next commit: a crash may still need it).
    pub fn sweep(&self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let generation = name
                .strip_prefix("catalog-")
                .and_then(|rest| rest.strip_suffix(".json"))
                .and_then(|n| n.parse::<u64>().ok());
            if generation.is_some_and(|g| g + 1 < self.generation) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Records an entry read from file `key`.
    pub fn note_entry(&mut self, key: &str, vendor: Vendor, entry: &Entry) {
        let info = self.sessions.entry(entry.session.clone()).or_default();
        info.vendor.get_or_insert(vendor);
        info.files.insert(key.to_owned());
        info.entries += 1;
        if let Some(ms) = entry.timestamp_ms {
            info.first_ms = Some(info.first_ms.map_or(ms, |f| f.min(ms)));
            info.last_ms = Some(info.last_ms.map_or(ms, |l| l.max(ms)));
        }
    }

    /// Takes a file's meta for the session it describes.
    pub fn note_meta(&mut self, key: &str, vendor: Vendor, meta: &SessionMeta) {
        if let Some(id) = &meta.id {
            let info = self.sessions.entry(id.clone()).or_default();
            info.vendor.get_or_insert(vendor);
            info.files.insert(key.to_owned());
            info.meta = meta.clone();
        }
    }
}
