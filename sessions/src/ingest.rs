//! Ingest: find the vendors' transcript files, archive the bytes each gained since the
//! last ingest, read its new complete lines, and index what they say.
//!
//! A file whose size and modification time have not changed is not even opened, so an
//! ingest with nothing new costs a `stat` per file. A file that grew is read from where
//! its complete lines ended: a last line still being written is archived but read only
//! once its newline arrives. A file rewritten in place (shorter, or its first bytes
//! changed) starts over, its earlier version kept in the archive.

use crate::archive::{Archive, CHUNK_BYTES, sha256_hex};
use crate::catalog::{Catalog, FileState, Reader, file_key};
use crate::error::SessionsError;
use crate::index::RecallIndex;
use crate::transcript::{Entry, Vendor};
use serde::Serialize;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use tantivy::IndexWriter;

/// How many first bytes of a file tell a rewrite from growth.
const HEAD_BYTES: u64 = 4096;
/// A line longer than this is skipped (counted, not read): a transcript line is a JSON
/// object, and one this large is a tool's whole output, not worth holding in memory.
pub const LINE_BYTES_MAX: usize = 16 << 20;
/// How deep below a vendor's root files are looked for.
const DEPTH_MAX: usize = 6;

/// Where the vendors keep their transcripts.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    /// Claude Code's projects directory (`~/.claude/projects`).
    pub claude: Option<PathBuf>,
    /// Codex's home (`$CODEX_HOME`, `~/.codex`): its `sessions/` and
    /// `archived_sessions/` are read.
    pub codex: Option<PathBuf>,
}

impl Sources {
    /// The real locations: `$HOME/.claude/projects` and `$CODEX_HOME` (else
    /// `$HOME/.codex`).
    pub fn default_locations() -> Sources {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let codex = std::env::var_os("CODEX_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".codex")));
        Sources {
            claude: home.map(|h| h.join(".claude").join("projects")),
            codex,
        }
    }
}

/// What an ingest did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IngestReport {
    /// Vendor files found.
    pub files: u64,
    /// Files that had something new.
    pub files_changed: u64,
    /// Sessions the archive knows.
    pub sessions: u64,
    /// Entries indexed by this ingest.
    pub messages: u64,
    /// Bytes archived by this ingest.
    pub bytes_archived: u64,
    /// Lines too long to read (skipped, still archived).
    pub lines_skipped: u64,
    /// Files that could not be read, with why (the others were ingested).
    pub errors: Vec<String>,
    /// Milliseconds it took.
    pub duration_ms: u64,
}

/// Every transcript file under the sources: (vendor, path, catalog key).
pub fn discover(sources: &Sources) -> Vec<(Vendor, PathBuf, String)> {
    let mut found = Vec::new();
    if let Some(root) = &sources.claude {
        let mut files = Vec::new();
        walk(root, 0, &mut files);
        for path in files {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if name.is_some_and(|n| n.ends_with(".jsonl"))
                && let Ok(relative) = path.strip_prefix(root)
            {
                let key = file_key(Vendor::Claude, relative);
                found.push((Vendor::Claude, path, key));
            }
        }
    }
    if let Some(home) = &sources.codex {
        for dir in ["sessions", "archived_sessions"] {
            let root = home.join(dir);
            let mut files = Vec::new();
            walk(&root, 0, &mut files);
            for path in files {
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if name.starts_with("rollout-")
                    && name.ends_with(".jsonl")
                    && let Ok(relative) = path.strip_prefix(&root)
                {
                    let key = file_key(Vendor::Codex, relative);
                    found.push((Vendor::Codex, path, key));
                }
            }
        }
    }
    found.sort_by(|a, b| a.2.cmp(&b.2));
    // A Codex file both live and archived (moved mid-ingest): the first one seen.
    found.dedup_by(|a, b| a.2 == b.2);
    found
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > DEPTH_MAX {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            walk(&entry.path(), depth + 1, out);
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
}

fn mtime_ms(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}

/// The most of Codex's `session_index.jsonl` read for titles.
const SESSION_INDEX_BYTES_MAX: u64 = 64 << 20;
/// The most of a subagent's `.meta.json` read.
const SUBAGENT_META_BYTES_MAX: u64 = 64 << 10;

/// Reads the titles the vendors keep beside their transcripts into the catalog's
/// sessions (`side_title`): Codex's `session_index.jsonl` (`{id, thread_name,
/// updated_at}` lines, a later line for the same id winning) and, for a Claude
/// subagent's file `agent-<id>.jsonl`, its `agent-<id>.meta.json` (`agentType`,
/// `description`). True when the catalog changed. The index is read again only once it
/// changed; a subagent's description, until it is found.
pub fn side_titles(sources: &Sources, catalog: &mut Catalog) -> bool {
    let mut titles: HashMap<String, String> = HashMap::new();
    let mut changed = false;
    let index = sources
        .codex
        .as_ref()
        .map(|home| home.join("session_index.jsonl"));
    let stamp = index
        .as_ref()
        .and_then(|path| std::fs::metadata(path).ok())
        .map(|meta| (meta.len(), mtime_ms(&meta)));
    if stamp != catalog.session_index
        && let Some(index) = &index
        && let Some(text) = read_bounded(index, SESSION_INDEX_BYTES_MAX)
    {
        catalog.session_index = stamp;
        changed = true;
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let (Some(id), Some(name)) = (value["id"].as_str(), value["thread_name"].as_str())
                && !name.trim().is_empty()
            {
                titles.insert(id.to_owned(), name.trim().to_owned());
            }
        }
    }
    for (id, info) in &catalog.sessions {
        // A subagent's description is written once, as it starts: read until found.
        if info.vendor != Some(Vendor::Claude) || !info.meta.subagent || info.side_title.is_some() {
            continue;
        }
        for key in &info.files {
            let Some(file) = catalog.files.get(key) else {
                continue;
            };
            let Some(text) = read_bounded(
                &file.path.with_extension("meta.json"),
                SUBAGENT_META_BYTES_MAX,
            ) else {
                continue;
            };
            let Ok(meta) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            let kind = meta["agentType"].as_str().filter(|t| !t.trim().is_empty());
            let about = meta["description"]
                .as_str()
                .filter(|t| !t.trim().is_empty());
            let title = match (kind, about) {
                (Some(kind), Some(about)) => format!("{kind}: {about}"),
                (Some(one), None) | (None, Some(one)) => one.to_owned(),
                (None, None) => continue,
            };
            titles.insert(id.clone(), title);
        }
    }
    for (id, title) in titles {
        if let Some(info) = catalog.sessions.get_mut(&id) {
            let title = crate::claude::capped(&title, crate::claude::TITLE_BYTES_MAX);
            if info.side_title.as_deref() != Some(title.as_str()) {
                info.side_title = Some(title);
                changed = true;
            }
        }
    }
    changed
}

/// A small text file's contents; none when it is missing, unreadable or past `max`.
fn read_bounded(path: &Path, max: u64) -> Option<String> {
    let size = std::fs::metadata(path).ok()?.len();
    (size <= max).then(|| std::fs::read_to_string(path).ok())?
}

/// The work of one ingest: the catalog it updates, the archive and index it writes.
pub struct Ingest<'a> {
    /// The catalog being updated.
    pub catalog: &'a mut Catalog,
    /// Where bytes go.
    pub archive: &'a Archive,
    /// Where entries go.
    pub index: &'a RecallIndex,
    /// The index's writer.
    pub writer: &'a IndexWriter,
    /// What it did so far.
    pub report: IngestReport,
}

impl Ingest<'_> {
    /// Ingests one file (see the module docs).
    pub fn file(&mut self, vendor: Vendor, path: &Path, key: &str) -> Result<(), SessionsError> {
        if self.catalog.forgotten.contains(key) {
            return Ok(());
        }
        let meta = std::fs::metadata(path).map_err(|e| SessionsError::io(path, e))?;
        let (size, mtime) = (meta.len(), mtime_ms(&meta));
        if let Some(state) = self.catalog.files.get(key)
            && state.size == size
            && state.mtime_ms == mtime
        {
            if state.path != path {
                // Moved (Codex archives a session): the same bytes, found elsewhere.
                if let Some(state) = self.catalog.files.get_mut(key) {
                    state.path = path.to_owned();
                }
            }
            return Ok(());
        }
        let mut file = std::fs::File::open(path).map_err(|e| SessionsError::io(path, e))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut state = match self.catalog.files.remove(key) {
            Some(state) if !rewritten(&mut file, &state, size, path)? => state,
            Some(mut old) => {
                // Rewritten in place: start over, the earlier bytes kept.
                let mut previous = std::mem::take(&mut old.previous);
                previous.push(old.chunks);
                let mut fresh = fresh_state(vendor, path, &name);
                fresh.previous = previous;
                fresh
            }
            None => fresh_state(vendor, path, &name),
        };
        state.path = path.to_owned();
        self.read_new(&mut file, &mut state, key, size, path)?;
        state.size = size;
        state.mtime_ms = mtime;
        self.catalog.note_meta(key, vendor, state.reader.meta());
        self.catalog.files.insert(key.to_owned(), state);
        self.report.files_changed += 1;
        Ok(())
    }

    /// Archives the bytes past `state.archived` and reads the complete lines past
    /// `state.fed`, in blocks of [`CHUNK_BYTES`].
    fn read_new(
        &mut self,
        file: &mut std::fs::File,
        state: &mut FileState,
        key: &str,
        size: u64,
        path: &Path,
    ) -> Result<(), SessionsError> {
        let vendor = state.vendor;
        file.seek(SeekFrom::Start(state.fed))
            .map_err(|e| SessionsError::io(path, e))?;
        let mut offset = state.fed;
        let mut pending: Vec<u8> = Vec::new();
        let mut skipping = false;
        let mut block = vec![0u8; CHUNK_BYTES];
        let mut entries: Vec<Entry> = Vec::new();
        while offset < size {
            let want = ((size - offset) as usize).min(CHUNK_BYTES);
            let got =
                read_full(file, &mut block[..want]).map_err(|e| SessionsError::io(path, e))?;
            if got == 0 {
                break;
            }
            let bytes = &block[..got];
            let start = offset;
            offset += got as u64;
            // The part not archived yet.
            if offset > state.archived {
                let from = (state.archived.max(start) - start) as usize;
                let chunks = self.archive.put(&bytes[from..])?;
                state.archived = offset;
                self.report.bytes_archived += (got - from) as u64;
                state.chunks.extend(chunks);
                if state.head.is_empty() || start < HEAD_BYTES {
                    state.head = head_hash(&state.chunks, self.archive)?;
                }
            }
            // Complete lines.
            let mut at = 0;
            while let Some(newline) = bytes[at..].iter().position(|&b| b == b'\n') {
                let line_end = at + newline;
                state.lines += 1;
                if skipping || pending.len() + (line_end - at) > LINE_BYTES_MAX {
                    skipping = false;
                    self.report.lines_skipped += 1;
                } else {
                    pending.extend_from_slice(&bytes[at..line_end]);
                    let text = String::from_utf8_lossy(&pending);
                    let text = text.strip_suffix('\r').unwrap_or(&text);
                    state.reader.line(state.lines, text, &mut entries);
                }
                pending.clear();
                state.fed = start + line_end as u64 + 1;
                at = line_end + 1;
            }
            if !skipping {
                pending.extend_from_slice(&bytes[at..]);
                if pending.len() > LINE_BYTES_MAX {
                    pending.clear();
                    skipping = true;
                }
            }
            for entry in entries.drain(..) {
                self.index_entry(vendor, key, state, &entry)?;
            }
        }
        Ok(())
    }

    fn index_entry(
        &mut self,
        vendor: Vendor,
        key: &str,
        state: &mut FileState,
        entry: &Entry,
    ) -> Result<(), SessionsError> {
        let cwd = state.reader.meta().cwd.clone();
        let shown = state.path.display().to_string();
        self.index
            .add(self.writer, vendor, &shown, cwd.as_deref(), entry)?;
        self.catalog.note_entry(key, vendor, entry);
        state.entries += 1;
        self.report.messages += 1;
        Ok(())
    }
}

fn fresh_state(vendor: Vendor, path: &Path, name: &str) -> FileState {
    FileState {
        vendor,
        path: path.to_owned(),
        chunks: Vec::new(),
        archived: 0,
        fed: 0,
        lines: 0,
        head: String::new(),
        size: 0,
        mtime_ms: 0,
        reader: Reader::new(vendor, name),
        entries: 0,
        previous: Vec::new(),
    }
}

/// Whether the file on disk is no longer the one archived (shorter, or its first bytes
/// differ).
fn rewritten(
    file: &mut std::fs::File,
    state: &FileState,
    size: u64,
    path: &Path,
) -> Result<bool, SessionsError> {
    if size < state.archived {
        return Ok(true);
    }
    let n = state.archived.min(HEAD_BYTES) as usize;
    let mut head = vec![0u8; n];
    file.seek(SeekFrom::Start(0))
        .map_err(|e| SessionsError::io(path, e))?;
    let got = read_full(file, &mut head).map_err(|e| SessionsError::io(path, e))?;
    Ok(got < n || sha256_hex(&head[..got]) != state.head)
}

/// The hash of the first [`HEAD_BYTES`] archived.
fn head_hash(chunks: &[crate::archive::Chunk], archive: &Archive) -> Result<String, SessionsError> {
    let mut taken = Vec::new();
    let mut total = 0;
    for chunk in chunks {
        taken.push(chunk.clone());
        total += chunk.len;
        if total >= HEAD_BYTES {
            break;
        }
    }
    let bytes = archive.read(&taken)?;
    let n = (HEAD_BYTES as usize).min(bytes.len());
    Ok(sha256_hex(&bytes[..n]))
}

fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
