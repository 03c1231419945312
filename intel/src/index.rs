//! Building and updating the index (`palm index`).
//!
//! A file is parsed only when its content changed: a file whose size and mtime match
//! its entry (and whose mtime is safely older than the previous run) is reused without
//! being read; any other file is read and hashed (git's blob id), and a hash already
//! known — at that path or any other — reuses the stored facts. Only the shards holding
//! changed files are read and rewritten (all of them when files were added or removed,
//! since imports may now resolve differently). The git half walks only new commits; the
//! search index deletes and re-adds only changed files.

use crate::error::IntelError;
use crate::extract::Extractor;
use crate::files::{self, SkipReason};
use crate::history::{History, HistoryUpdate};
use crate::lang::Language;
use crate::resolve::Resolver;
use crate::search::{self, SearchUpdate};
use crate::store::{self, FileEntry, FileRecord, FileTable, Layout, Meta, Shard, SkippedFile};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A file modified less than this before the previous run started is re-hashed even when
/// its size and mtime match (its mtime may not have moved for an edit in the same tick).
pub const RACY_WINDOW_NS: i128 = 2_000_000_000;
/// Parsing threads at most.
pub const PARSE_THREADS_MAX: usize = 8;
/// Warnings kept per run (the rest are counted).
pub const WARNINGS_MAX: usize = 20;

/// Progress of a long index, for a progress bar.
pub trait Progress {
    /// A new phase with this many steps (0 when unknown).
    fn phase(&mut self, name: &str, total: u64);
    /// Steps done since the last call.
    fn advance(&mut self, steps: u64);
    /// The run is over.
    fn finish(&mut self) {}
}

/// No progress reporting.
pub struct NoProgress;

impl Progress for NoProgress {
    fn phase(&mut self, _: &str, _: u64) {}
    fn advance(&mut self, _: u64) {}
}

/// Skipped files by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SkipCounts {
    /// Contain NUL bytes.
    pub binary: usize,
    /// Under `vendor/`, `node_modules/`, ...
    pub vendored: usize,
    /// Lock files, minified files, `@generated` files.
    pub generated: usize,
    /// Over the size bound.
    pub oversized: usize,
    /// All of them.
    pub total: usize,
}

impl SkipCounts {
    fn add(&mut self, reason: SkipReason) {
        match reason {
            SkipReason::Binary => self.binary += 1,
            SkipReason::Vendored => self.vendored += 1,
            SkipReason::Generated => self.generated += 1,
            SkipReason::Oversized => self.oversized += 1,
        }
        self.total += 1;
    }
}

/// What `palm index` did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IndexReport {
    /// The repository's working tree.
    pub root: String,
    /// HEAD (none in a repository without commits).
    pub head: Option<String>,
    /// True when nothing of a previous index was reused.
    pub full: bool,
    /// Files in the index.
    pub files: usize,
    /// Files parsed in this run.
    pub parsed: usize,
    /// Files whose stored facts were reused (same content).
    pub reused: usize,
    /// Files gone since the previous run.
    pub removed: usize,
    /// Files not indexed, by reason.
    pub skipped: SkipCounts,
    /// Indexed files per language.
    pub languages: BTreeMap<String, usize>,
    /// Files read with the line-based fallback (no grammar).
    pub line_based: usize,
    /// Declared symbols.
    pub symbols: usize,
    /// Imports, and how many of them resolved to a file of the repository.
    pub imports: usize,
    /// Imports resolved to a file.
    pub imports_resolved: usize,
    /// Commits in the git half.
    pub commits: usize,
    /// Commits added by this run.
    pub new_commits: usize,
    /// Pairs of files changed in the same commit.
    pub cochange_edges: usize,
    /// Wall time of the run (seconds).
    pub seconds: f64,
    /// Wall time per phase (seconds): load, scan, parse, resolve, history, search, write.
    pub phases: BTreeMap<String, f64>,
    /// Problems that did not stop the run.
    pub warnings: Vec<String>,
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

fn mtime_ns(meta: &std::fs::Metadata) -> i128 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i128)
}

/// The previous index, when one can be read (the file table, not the shards).
struct Previous {
    meta: Meta,
    table: FileTable,
    history: History,
}

fn previous(layout: &Layout, warnings: &mut Vec<String>) -> Option<Previous> {
    let read = || -> Result<Option<Previous>, IntelError> {
        let Some(meta) = store::read_meta(layout)? else {
            return Ok(None);
        };
        Ok(Some(Previous {
            meta,
            table: store::read_bin(&layout.files())?,
            history: store::read_bin(&layout.history())?,
        }))
    };
    match read() {
        Ok(previous) => previous,
        Err(err) => {
            warnings.push(format!(
                "the index was unreadable ({err}); rebuilt it from scratch"
            ));
            None
        }
    }
}

/// What reading one file gave.
enum Outcome {
    /// Not indexed.
    Skipped(SkipReason),
    /// Content already known (at `from`, maybe this very path): its facts are reused.
    Known { entry: FileEntry, from: String },
    /// Parsed now.
    Parsed(FileRecord),
    /// Could not be read.
    Failed(String),
}

/// Old shards, read on first use.
struct OldShards<'l> {
    layout: &'l Layout,
    exists: bool,
    loaded: HashMap<u16, Shard>,
}

impl OldShards<'_> {
    fn shard(&mut self, shard: u16) -> Result<&mut Shard, IntelError> {
        if !self.loaded.contains_key(&shard) {
            let loaded = if self.exists {
                store::read_shard(self.layout, shard)?
            } else {
                Shard::default()
            };
            self.loaded.insert(shard, loaded);
        }
        Ok(self.loaded.entry(shard).or_default())
    }

    fn record(&mut self, path: &str) -> Result<FileRecord, IntelError> {
        let shard = self.shard(store::shard_of(path))?;
        shard
            .records
            .iter()
            .find(|r| r.path == path)
            .cloned()
            .ok_or_else(|| IntelError::Corrupt {
                path: self.layout.shard(store::shard_of(path)),
                reason: format!("no record for {path}"),
            })
    }
}

/// Builds or updates the index of the repository at `root`. An index found unreadable
/// half-way (a damaged shard) is dropped and built again from nothing, with a warning.
pub fn run(
    repo: &git2::Repository,
    root: &Path,
    progress: &mut dyn Progress,
) -> Result<IndexReport, IntelError> {
    match run_once(repo, root, progress, true) {
        Err(IntelError::Corrupt { path, reason }) => {
            let layout = Layout::new(root);
            if layout.dir.exists() {
                std::fs::remove_dir_all(&layout.dir).map_err(|e| IntelError::io(&layout.dir, e))?;
            }
            let mut report = run_once(repo, root, progress, false)?;
            report.warnings.insert(
                0,
                format!(
                    "the index was unreadable ({}: {reason}); rebuilt it from scratch",
                    path.display()
                ),
            );
            Ok(report)
        }
        other => other,
    }
}

fn run_once(
    repo: &git2::Repository,
    root: &Path,
    progress: &mut dyn Progress,
    reuse: bool,
) -> Result<IndexReport, IntelError> {
    let started = Instant::now();
    let started_ns = now_ns();
    let layout = Layout::new(root);
    layout.create()?;
    let mut report = IndexReport {
        root: root.display().to_string(),
        ..IndexReport::default()
    };
    let mut clock = Instant::now();
    let mut lap = |report: &mut IndexReport, phase: &str| {
        let now = Instant::now();
        let seconds = (now - clock).as_secs_f64();
        clock = now;
        report
            .phases
            .insert(phase.to_owned(), (seconds * 1000.0).round() / 1000.0);
    };
    let previous = if reuse {
        previous(&layout, &mut report.warnings)
    } else {
        None
    };
    lap(&mut report, "load");
    report.full = previous.is_none();

    progress.phase("scanning", 0);
    let candidates = files::candidates(repo)?;
    let old: HashMap<&str, &FileEntry> = previous
        .iter()
        .flat_map(|p| p.table.entries.iter().map(|e| (e.path.as_str(), e)))
        .collect();
    let known: HashMap<(&str, Language), &str> = old
        .values()
        .map(|e| ((e.hash.as_str(), e.language), e.path.as_str()))
        .collect();
    let trusted_before = previous
        .as_ref()
        .map_or(i128::MIN, |p| p.meta.started_ns - RACY_WINDOW_NS);

    let mut entries: Vec<FileEntry> = Vec::with_capacity(candidates.len());
    let mut skipped: Vec<SkippedFile> = Vec::new();
    let mut work: Vec<(String, u64, i128)> = Vec::new();
    for path in candidates {
        if let Some(reason) = files::skip_by_path(&path) {
            skipped.push(SkippedFile { path, reason });
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(root.join(&path)) else {
            continue; // Deleted in the working tree: nothing to index.
        };
        if !meta.is_file() {
            continue; // Symlinks and other non-files are not content.
        }
        if meta.len() > files::FILE_BYTES_MAX {
            skipped.push(SkippedFile {
                path,
                reason: SkipReason::Oversized,
            });
            continue;
        }
        let mtime = mtime_ns(&meta);
        match old.get(path.as_str()) {
            Some(entry)
                if entry.size == meta.len()
                    && entry.mtime_ns == mtime
                    && mtime < trusted_before =>
            {
                entries.push((*entry).clone());
            }
            _ => work.push((path, meta.len(), mtime)),
        }
    }
    report.reused = entries.len();

    lap(&mut report, "scan");
    progress.phase("parsing", work.len() as u64);
    let outcomes = parse_all(root, &work, &known, progress);
    let mut shards = OldShards {
        layout: &layout,
        exists: previous.is_some(),
        loaded: HashMap::new(),
    };
    // Records whose content is new at their path: they go into their shards.
    let mut changed: BTreeMap<String, FileRecord> = BTreeMap::new();
    for ((path, _, _), outcome) in work.iter().zip(outcomes) {
        match outcome {
            Outcome::Skipped(reason) => skipped.push(SkippedFile {
                path: path.clone(),
                reason,
            }),
            Outcome::Known { entry, from } => {
                report.reused += 1;
                let same = old.get(path.as_str()).is_some_and(|o| o.hash == entry.hash);
                if !same {
                    let mut record = shards.record(&from)?;
                    record.path = path.clone();
                    record.hash = entry.hash.clone();
                    record.size = entry.size;
                    record.mtime_ns = entry.mtime_ns;
                    record.language = entry.language;
                    record.resolved = Vec::new();
                    changed.insert(path.clone(), record);
                }
                match old.get(path.as_str()) {
                    // A touched but unchanged file keeps its record; only its entry moves.
                    Some(previous) if same => entries.push(FileEntry {
                        size: entry.size,
                        mtime_ns: entry.mtime_ns,
                        ..(*previous).clone()
                    }),
                    // Counts are filled in from the record below.
                    _ => entries.push(entry),
                }
            }
            Outcome::Parsed(record) => {
                report.parsed += 1;
                entries.push(FileEntry::of(&record));
                changed.insert(path.clone(), record);
            }
            Outcome::Failed(message) => {
                if report.warnings.len() < WARNINGS_MAX {
                    report.warnings.push(message);
                }
            }
        }
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    let present: HashSet<String> = entries.iter().map(|e| e.path.clone()).collect();
    let removed: Vec<String> = old
        .keys()
        .filter(|p| !present.contains(**p))
        .map(|p| (*p).to_owned())
        .collect();
    report.removed = removed.len();

    lap(&mut report, "parse");
    // Import resolution depends on the whole file set and on the manifests (Cargo.toml,
    // go.mod). While neither changed, an unchanged file's resolution still holds and
    // only changed files are resolved; otherwise every file is, and the shards whose
    // resolutions moved are rewritten.
    let same_files = entries.len() == old.len()
        && entries.iter().all(|e| old.contains_key(e.path.as_str()))
        && !changed.keys().any(|p| {
            let name = p.rsplit('/').next().unwrap_or(p);
            name == "Cargo.toml" || name == "go.mod"
        });
    let mut dirty: BTreeSet<u16> = changed
        .keys()
        .chain(removed.iter())
        .map(|p| store::shard_of(p))
        .collect();
    if !same_files || changed.values().any(|r| !r.facts.imports.is_empty()) {
        let resolver = Resolver::new(root, entries.iter().map(|e| e.path.as_str()));
        let resolve = |record: &FileRecord| -> Vec<Option<String>> {
            record
                .facts
                .imports
                .iter()
                .map(|i| resolver.resolve(&record.path, record.language, &i.module))
                .collect()
        };
        for record in changed.values_mut() {
            record.resolved = resolve(record);
        }
        if !same_files {
            for shard in 0..store::SHARDS {
                let old_shard = shards.shard(shard)?;
                for record in &mut old_shard.records {
                    if changed.contains_key(&record.path) || !present.contains(record.path.as_str())
                    {
                        continue;
                    }
                    let resolved = resolve(record);
                    if resolved != record.resolved {
                        record.resolved = resolved;
                        dirty.insert(shard);
                    }
                }
            }
        }
    }
    // Entries carry the counts of their records.
    for entry in &mut entries {
        if let Some(record) = changed.get(&entry.path) {
            *entry = FileEntry {
                mtime_ns: entry.mtime_ns,
                ..FileEntry::of(record)
            };
        } else if !same_files
            && let Some(record) = shards
                .loaded
                .get(&store::shard_of(&entry.path))
                .and_then(|s| s.records.iter().find(|r| r.path == entry.path))
        {
            entry.resolved = record.resolved.iter().filter(|r| r.is_some()).count() as u32;
        }
    }

    lap(&mut report, "resolve");
    progress.phase("history", 0);
    let (mut history, previous_generation) = match previous {
        Some(p) => (p.history, Some(p.meta.generation)),
        None => (History::default(), None),
    };
    let update: HistoryUpdate = history.update(repo)?;
    // New commits are appended, so they are the last ones (a rebuild makes all new).
    let first_new = if update.rebuilt {
        0
    } else {
        history.commits.len().saturating_sub(update.new_commits)
    };
    let new_commits = &history.commits[first_new..];

    lap(&mut report, "history");
    progress.phase("search", 0);
    let generation = previous_generation.map_or(1, |g| g + 1);
    let added: Vec<&FileRecord> = changed.values().collect();
    let incremental = match previous_generation {
        Some(previous_generation) => {
            let remove: Vec<&str> = changed
                .keys()
                .map(String::as_str)
                .chain(removed.iter().map(String::as_str))
                .collect();
            search::update(
                &layout,
                previous_generation,
                SearchUpdate {
                    remove,
                    add: added.clone(),
                    commits: new_commits,
                    rebuild_commits: update.rebuilt,
                },
                generation,
            )
        }
        None => Err(IntelError::Search("no previous index".into())),
    };
    if let Err(err) = incremental {
        if let IntelError::Busy { .. } = err {
            return Err(err);
        }
        if previous_generation.is_some() {
            report
                .warnings
                .push(format!("the search index was unusable ({err}); rebuilt it"));
        }
        // A full rebuild of the search index needs every record.
        let mut all: Vec<FileRecord> = Vec::with_capacity(entries.len());
        for entry in &entries {
            match changed.get(&entry.path) {
                Some(record) => all.push(record.clone()),
                None => all.push(shards.record(&entry.path)?),
            }
        }
        search::create(&layout, &all, &history.commits, generation)?;
    }

    lap(&mut report, "search");
    // Shards, then the file table, then the history, then meta: see store.rs.
    for shard in &dirty {
        let mut records: Vec<FileRecord> = std::mem::take(&mut shards.shard(*shard)?.records)
            .into_iter()
            .filter(|r| present.contains(r.path.as_str()) && !changed.contains_key(&r.path))
            .collect();
        records.extend(
            changed
                .values()
                .filter(|r| store::shard_of(&r.path) == *shard)
                .cloned(),
        );
        records.sort_by(|a, b| a.path.cmp(&b.path));
        store::write_bin(&layout.shard(*shard), &Shard { records })?;
    }
    report.files = entries.len();
    for entry in &entries {
        *report
            .languages
            .entry(entry.language.name().to_owned())
            .or_default() += 1;
        if entry.parser == crate::extract::Parser::LineBased {
            report.line_based += 1;
        }
        report.symbols += entry.symbols as usize;
        report.imports += entry.imports as usize;
        report.imports_resolved += entry.resolved as usize;
    }
    for file in &skipped {
        report.skipped.add(file.reason);
    }
    report.head = history.head.clone();
    report.commits = history.commits.len();
    report.new_commits = update.new_commits;
    report.cochange_edges = history.edge_count();
    if history.head.is_none() {
        report
            .warnings
            .push("the repository has no commits yet: the git half is empty".into());
    }
    let files = entries.len();
    store::write_bin(&layout.files(), &FileTable { entries, skipped })?;
    store::write_bin(&layout.history(), &history)?;
    store::write_meta(
        &layout,
        &Meta {
            format: store::FORMAT_VERSION,
            generation,
            started_ns,
            indexed_at: (now_ns() / 1_000_000_000) as i64,
            head: history.head.clone(),
            files,
        },
    )?;
    // Freeing the loaded shards (large for a big tree) is not on the way to the answer.
    let loaded = std::mem::take(&mut shards.loaded);
    std::thread::spawn(move || drop(loaded));
    lap(&mut report, "write");
    progress.finish();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn parse_all(
    root: &Path,
    work: &[(String, u64, i128)],
    known: &HashMap<(&str, Language), &str>,
    progress: &mut dyn Progress,
) -> Vec<Outcome> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, PARSE_THREADS_MAX)
        .min(work.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Outcome>>> = Mutex::new((0..work.len()).map(|_| None).collect());
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let done_tx = done_tx.clone();
            let (next, results) = (&next, &results);
            scope.spawn(move || {
                let mut extractor = Extractor::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((path, size, mtime)) = work.get(i) else {
                        break;
                    };
                    let outcome = one(root, path, *size, *mtime, known, &mut extractor);
                    results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(outcome);
                    let _ = done_tx.send(());
                }
            });
        }
        drop(done_tx);
        // The progress bar lives on this thread; workers only say "one more".
        for () in done_rx {
            progress.advance(1);
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Outcome::Failed("a parse worker stopped early".into())))
        .collect()
}

fn one(
    root: &Path,
    path: &str,
    size: u64,
    mtime: i128,
    known: &HashMap<(&str, Language), &str>,
    extractor: &mut Extractor,
) -> Outcome {
    let bytes = match std::fs::read(root.join(path)) {
        Ok(bytes) => bytes,
        Err(err) => return Outcome::Failed(format!("{path}: {err}")),
    };
    let size = size.max(bytes.len() as u64);
    if let Some(reason) = files::skip_by_content(size, &bytes) {
        return Outcome::Skipped(reason);
    }
    let hash = match git2::Oid::hash_object(git2::ObjectType::Blob, &bytes) {
        Ok(oid) => oid.to_string(),
        Err(err) => return Outcome::Failed(format!("{path}: {err}")),
    };
    let language = Language::detect(path);
    if let Some(from) = known.get(&(hash.as_str(), language)).copied() {
        return Outcome::Known {
            entry: FileEntry {
                path: path.to_owned(),
                hash,
                size,
                mtime_ns: mtime,
                language,
                parser: crate::extract::Parser::TreeSitter,
                symbols: 0,
                imports: 0,
                resolved: 0,
            },
            from: from.to_owned(),
        };
    }
    let text = String::from_utf8_lossy(&bytes);
    let (parser, facts) = extractor.extract(language, path, &text);
    Outcome::Parsed(FileRecord {
        path: path.to_owned(),
        hash,
        size,
        mtime_ns: mtime,
        language,
        parser,
        facts,
        resolved: Vec::new(),
    })
}
