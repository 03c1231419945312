//! [`Memory`]: a node's session memory under `DATA/sessions` — `objects/` (the archive),
//! `catalog-<N>.json` (what was ingested) and `index/` (recall) — and the operations the
//! CLI and MCP offer: ingest, recall, list, show, forget, prune.

use crate::archive::{Archive, dir_size};
use crate::catalog::{Catalog, Reader, SessionInfo};
use crate::error::SessionsError;
use crate::index::{Hit, Recall, RecallIndex};
use crate::ingest::{Ingest, IngestReport, Sources, discover};
use crate::links::{Links, Subject, links};
use crate::transcript::{Entry, Vendor};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Entries `show --at LINE` prints on each side of the line.
pub const AROUND_LINES: u64 = 20;

/// A node's session memory.
pub struct Memory {
    data: PathBuf,
    dir: PathBuf,
    archive: Archive,
    index: RecallIndex,
}

/// One session as `palm sessions list` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Listed {
    /// Its id.
    pub session: String,
    /// Whose.
    pub vendor: Option<Vendor>,
    /// Its title, if it has one.
    pub title: Option<String>,
    /// Where it worked.
    pub cwd: Option<String>,
    /// Its branch.
    pub branch: Option<String>,
    /// A subagent's, and whose.
    pub subagent: bool,
    /// See `subagent`.
    pub parent: Option<String>,
    /// Entries indexed.
    pub messages: u64,
    /// First and last entry times (RFC 3339).
    pub first: Option<String>,
    /// See `first`.
    pub last: Option<String>,
    /// The model, the last one its file names.
    pub model: Option<String>,
    /// Tokens it used, as its file counts them (each Claude message once; Codex's last
    /// totals): read (prompt and cache) and written.
    pub input_tokens: u64,
    /// See `input_tokens`.
    pub output_tokens: u64,
    /// Whether every file of it is still where the vendor keeps it.
    pub files_present: bool,
}

/// One entry as `palm sessions show` prints it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShownEntry {
    /// The vendor file (as last seen).
    pub file: String,
    /// The line.
    pub line: u64,
    /// When (RFC 3339).
    pub timestamp: Option<String>,
    /// What it is.
    pub role: &'static str,
    /// Its tool.
    pub tool: Option<String>,
    /// Its text, secrets redacted.
    pub text: String,
}

/// A whole session, read back from the archive.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Shown {
    /// What the list says of it.
    #[serde(flatten)]
    pub listed: Listed,
    /// Its files: `{path, bytes, present}`.
    pub files: Vec<serde_json::Value>,
    /// Its entries (all, or those around `--at`).
    pub entries: Vec<ShownEntry>,
    /// The work it is linked to.
    pub links: Links,
}

/// The earlier of two times, either of which may be unknown.
fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn rfc3339(ms: Option<i64>) -> Option<String> {
    ms.and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map(|t| t.to_string())
}

impl Memory {
    /// The memory of the node on `data` (made on first use).
    pub fn open(data: &Path) -> Result<Memory, SessionsError> {
        let dir = data.join("sessions");
        std::fs::create_dir_all(&dir).map_err(|e| SessionsError::io(&dir, e))?;
        Ok(Memory {
            data: data.to_owned(),
            archive: Archive::new(&dir.join("objects")),
            index: RecallIndex::open(&dir.join("index"))?,
            dir,
        })
    }

    /// The catalog the index's last commit names.
    pub fn catalog(&self) -> Result<Catalog, SessionsError> {
        Catalog::load(&self.dir, self.index.generation()?)
    }

    /// Ingests what is new under `sources` (see [`crate::ingest`]).
    pub fn ingest(&self, sources: &Sources) -> Result<IngestReport, SessionsError> {
        let started = Instant::now();
        let mut writer = self.index.writer()?;
        let mut catalog = self.catalog()?;
        let found = discover(sources);
        let mut ingest = Ingest {
            catalog: &mut catalog,
            archive: &self.archive,
            index: &self.index,
            writer: &writer,
            report: IngestReport {
                files: found.len() as u64,
                ..IngestReport::default()
            },
        };
        for (vendor, path, key) in &found {
            if let Err(err) = ingest.file(*vendor, path, key) {
                ingest.report.errors.push(err.to_string());
            }
        }
        let mut report = std::mem::take(&mut ingest.report);
        let titled = crate::ingest::side_titles(sources, &mut catalog);
        if report.files_changed > 0 || titled {
            catalog.generation += 1;
            catalog.save(&self.dir)?;
            self.index.commit(&mut writer, catalog.generation)?;
            catalog.sweep(&self.dir);
        }
        report.sessions = catalog.sessions.len() as u64;
        report.duration_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Recall: the entries that match, best first.
    pub fn recall(&self, recall: &Recall) -> Result<Vec<Hit>, SessionsError> {
        self.index.recall(recall)
    }

    fn listed(id: &str, info: &SessionInfo, catalog: &Catalog) -> Listed {
        let present = info
            .files
            .iter()
            .all(|key| catalog.files.get(key).is_some_and(|f| f.path.exists()));
        Listed {
            session: id.to_owned(),
            vendor: info.vendor,
            title: info.meta.title.clone().or_else(|| info.side_title.clone()),
            cwd: info.meta.cwd.clone(),
            branch: info.meta.branch.clone(),
            subagent: info.meta.subagent,
            parent: info.meta.parent.clone(),
            messages: info.entries,
            // Lines that make no entry (a queued prompt, a title) have times too.
            first: rfc3339(earliest(info.first_ms, info.meta.first_ms)),
            last: rfc3339(info.last_ms.max(info.meta.last_ms)),
            model: info.meta.model.clone(),
            input_tokens: info.meta.input_tokens,
            output_tokens: info.meta.output_tokens,
            files_present: present,
        }
    }

    /// Every session, the latest first.
    pub fn list(&self) -> Result<Vec<Listed>, SessionsError> {
        let catalog = self.catalog()?;
        let mut sessions: Vec<(&String, &SessionInfo)> = catalog.sessions.iter().collect();
        sessions.sort_by(|a, b| {
            let last = |i: &SessionInfo| i.last_ms.max(i.meta.last_ms).unwrap_or(0);
            last(b.1).cmp(&last(a.1)).then(a.0.cmp(b.0))
        });
        Ok(sessions
            .into_iter()
            .map(|(id, info)| Memory::listed(id, info, &catalog))
            .collect())
    }

    /// A session read back from the archive (the vendor's files are not needed), with
    /// its links; with `at`, only the entries within [`AROUND_LINES`] of that line.
    pub fn show(&self, id: &str, at: Option<u64>) -> Result<Shown, SessionsError> {
        let catalog = self.catalog()?;
        let info = catalog
            .sessions
            .get(id)
            .ok_or_else(|| SessionsError::NotFound(id.to_owned()))?;
        let mut files = Vec::new();
        let mut entries = Vec::new();
        for key in &info.files {
            let Some(state) = catalog.files.get(key) else {
                continue;
            };
            files.push(serde_json::json!({
                "path": state.path.display().to_string(),
                "bytes": state.archived,
                "present": state.path.exists(),
            }));
            let name = state
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let shown_path = state.path.display().to_string();
            // Earlier versions of a file rewritten in place first (their entries are
            // still indexed), then the file as it is.
            let versions =
                state
                    .previous
                    .iter()
                    .map(|chunks| (chunks, None))
                    .chain(std::iter::once((
                        &state.chunks,
                        Some((state.fed, state.lines)),
                    )));
            for (chunks, read_to) in versions {
                let bytes = self.archive.read(chunks)?;
                // The lines ingested (a partial last line was not, and is not shown).
                let (fed, lines) = read_to.unwrap_or_else(|| {
                    let fed = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                    (fed as u64, u64::MAX)
                });
                let mut reader = Reader::new(state.vendor, &name);
                let mut read: Vec<Entry> = Vec::new();
                let complete = &bytes[..(fed as usize).min(bytes.len())];
                for (i, line) in complete.split(|&b| b == b'\n').enumerate() {
                    if i as u64 >= lines {
                        break;
                    }
                    let text = String::from_utf8_lossy(line);
                    let text = text.strip_suffix('\r').unwrap_or(&text);
                    reader.line(i as u64 + 1, text, &mut read);
                }
                for entry in read.into_iter().filter(|e| e.session == id) {
                    if let Some(at) = at
                        && entry.line.abs_diff(at) > AROUND_LINES
                    {
                        continue;
                    }
                    entries.push(ShownEntry {
                        file: shown_path.clone(),
                        line: entry.line,
                        timestamp: rfc3339(entry.timestamp_ms),
                        role: entry.role.as_str(),
                        tool: entry.tool,
                        text: palm_agents::secrets::redact(&entry.text).into_owned(),
                    });
                }
            }
        }
        let subject = Subject {
            id,
            cwd: info.meta.cwd.as_deref(),
            branch: info.meta.branch.as_deref(),
            first_ms: info.first_ms,
            last_ms: info.last_ms,
        };
        Ok(Shown {
            listed: Memory::listed(id, info, &catalog),
            files,
            entries,
            links: links(&self.data, &subject),
        })
    }

    /// Forgets sessions: their entries leave the index, their files leave the catalog
    /// (and are never ingested again), and archived bytes no other file holds are
    /// removed. The vendor's files are never touched. Answers the sessions forgotten and
    /// the bytes freed.
    pub fn forget(&self, ids: &[String]) -> Result<(Vec<String>, u64), SessionsError> {
        let mut writer = self.index.writer()?;
        let mut catalog = self.catalog()?;
        let mut forgotten = Vec::new();
        let mut files: BTreeSet<String> = BTreeSet::new();
        for id in ids {
            let Some(info) = catalog.sessions.remove(id) else {
                return Err(SessionsError::NotFound(id.clone()));
            };
            self.index.delete_session(&writer, id);
            files.extend(info.files);
            forgotten.push(id.clone());
        }
        // A file goes when no session left refers to it.
        let still: BTreeSet<String> = catalog
            .sessions
            .values()
            .flat_map(|i| i.files.iter().cloned())
            .collect();
        let mut dropped = Vec::new();
        for key in files.difference(&still) {
            if let Some(state) = catalog.files.remove(key) {
                dropped.extend(state.chunks);
                dropped.extend(state.previous.into_iter().flatten());
            }
            catalog.forgotten.insert(key.clone());
        }
        let kept: BTreeSet<&str> = catalog
            .files
            .values()
            .flat_map(|f| f.chunks.iter().chain(f.previous.iter().flatten()))
            .map(|c| c.hash.as_str())
            .collect();
        let orphans: Vec<String> = dropped
            .iter()
            .map(|c| c.hash.clone())
            .filter(|h| !kept.contains(h.as_str()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        catalog.generation += 1;
        catalog.save(&self.dir)?;
        self.index.commit(&mut writer, catalog.generation)?;
        catalog.sweep(&self.dir);
        let freed = self.archive.remove(&orphans);
        Ok((forgotten, freed))
    }

    /// Forgets the sessions whose last entry is older than `before_ms`.
    pub fn prune(&self, before_ms: i64) -> Result<(Vec<String>, u64), SessionsError> {
        let catalog = self.catalog()?;
        let old: Vec<String> = catalog
            .sessions
            .iter()
            .filter(|(_, i)| i.last_ms.or(i.meta.last_ms).is_some_and(|l| l < before_ms))
            .map(|(id, _)| id.clone())
            .collect();
        if old.is_empty() {
            return Ok((Vec::new(), 0));
        }
        self.forget(&old)
    }

    /// Entries in the index, and the bytes the archive and the index take.
    pub fn sizes(&self) -> (u64, u64, u64) {
        (
            self.index.entries(),
            self.archive.size(),
            dir_size(&self.dir.join("index")),
        )
    }
}
