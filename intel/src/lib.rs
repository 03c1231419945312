//! Repo intelligence: fast, scriptable answers about a git repository before an edit.
//!
//! `palm index` builds `<repo>/.palm/index/` from two halves — the git half (`history`:
//! churn, recent touches, authors, co-change, commit subjects) and the content half
//! (`extract`: tree-sitter symbols, imports, references, cached by content hash) — plus a
//! tantivy BM25 index (`search`). The queries (`query`) answer from that index.
//! `overlap` predicts, from the same index, whether two tasks will touch a same file.
//!
//! This crate is the only one in the workspace that depends on git2, tree-sitter and
//! tantivy (see docs/ARCHITECTURE.md).
//!
//! Entry point: [`Intel::open`] on any path inside a working tree, then
//! [`Intel::index`] or a query.

pub mod error;
pub mod extract;
pub mod files;
pub mod history;
pub mod index;
pub mod knowledge;
pub mod lang;
pub mod overlap;
pub mod query;
pub mod resolve;
pub mod risk;
pub mod search;
pub mod store;
mod visible;

pub use error::IntelError;
pub use index::{IndexReport, NoProgress, Progress};
pub use query::Snapshot;

use extract::{Extractor, FileFacts, Parser};
use lang::Language;
use serde::Serialize;
use std::path::{Path, PathBuf};
use store::Layout;

/// One repository, opened.
pub struct Intel {
    repo: git2::Repository,
    root: PathBuf,
    layout: Layout,
}

/// `palm search QUERY`.
#[derive(Clone, Debug, Serialize)]
pub struct SearchReport {
    /// The query as given.
    pub query: String,
    /// Hits, best first.
    pub hits: Vec<search::SearchHit>,
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Intel {
    /// Opens the repository whose working tree contains `path`.
    pub fn open(path: &Path) -> Result<Intel, IntelError> {
        let not_a_repository = || IntelError::NotARepository {
            path: path.to_owned(),
        };
        if !path.exists() {
            return Err(not_a_repository());
        }
        let repo = git2::Repository::discover(path).map_err(|e| match e.code() {
            git2::ErrorCode::NotFound => not_a_repository(),
            _ => IntelError::Git(e),
        })?;
        let workdir = repo
            .workdir()
            .ok_or_else(|| IntelError::BareRepository {
                path: repo.path().to_owned(),
            })?
            .to_owned();
        let root = workdir
            .canonicalize()
            .map_err(|e| IntelError::io(&workdir, e))?;
        let layout = Layout::new(&root);
        Ok(Intel { repo, root, layout })
    }

    /// The working tree.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The repository.
    pub fn repository(&self) -> &git2::Repository {
        &self.repo
    }

    /// The current HEAD commit id, if any.
    pub fn head(&self) -> Option<String> {
        self.repo
            .head()
            .ok()
            .and_then(|h| h.peel_to_commit().ok())
            .map(|c| c.id().to_string())
    }

    /// Builds or updates the index.
    pub fn index(&self, progress: &mut dyn Progress) -> Result<IndexReport, IntelError> {
        index::run(&self.repo, &self.root, progress)
    }

    /// Loads the index, building it first when there is none and rebuilding it when it
    /// is unreadable. Notes for the person (a build, a rebuild, a stale index) go to
    /// `warnings`.
    pub fn snapshot(&self, warnings: &mut Vec<String>) -> Result<Snapshot, IntelError> {
        let loaded = store::read_meta(&self.layout).and_then(|meta| match meta {
            Some(meta) => store::read_tables(&self.layout).map(|t| Some((meta, t))),
            None => Ok(None),
        });
        let (meta, (content, history)) = match loaded {
            Ok(Some(loaded)) => loaded,
            Ok(None) => {
                warnings.push("no index yet: built one (palm index)".to_owned());
                self.rebuild(warnings)?
            }
            Err(IntelError::Corrupt { path, reason }) => {
                warnings.push(format!(
                    "the index was corrupt ({}: {reason}); rebuilt it",
                    path.display()
                ));
                self.rebuild(warnings)?
            }
            Err(other) => return Err(other),
        };
        if meta.head != self.head() {
            warnings.push(format!(
                "the index was built at {} but HEAD is {}; run `palm index` to update it",
                short(meta.head.as_deref()),
                short(self.head().as_deref())
            ));
        }
        Ok(Snapshot::new(
            self.root.clone(),
            meta,
            content,
            history,
            now_s(),
        ))
    }

    fn rebuild(
        &self,
        warnings: &mut Vec<String>,
    ) -> Result<(store::Meta, (store::ContentTable, history::History)), IntelError> {
        if self.layout.dir.exists() {
            std::fs::remove_dir_all(&self.layout.dir)
                .map_err(|e| IntelError::io(&self.layout.dir, e))?;
        }
        let report = self.index(&mut NoProgress)?;
        warnings.extend(report.warnings);
        let meta = store::read_meta(&self.layout)?.ok_or_else(|| IntelError::Corrupt {
            path: self.layout.meta(),
            reason: "missing right after it was written".into(),
        })?;
        Ok((meta, store::read_tables(&self.layout)?))
    }

    /// Resolves a FILE argument (see [`query::relative_path`]).
    pub fn relative(&self, cwd: &Path, argument: &Path) -> Result<String, IntelError> {
        query::relative_path(&self.root, cwd, argument)
    }

    /// The facts of a file as it is now on disk: from the index when its content is
    /// unchanged, else parsed on the spot. Binary and oversized files are refused.
    pub fn current_facts(
        &self,
        snapshot: Option<&Snapshot>,
        path: &str,
    ) -> Result<(Language, Parser, FileFacts), IntelError> {
        let absolute = self.root.join(path);
        let meta = match std::fs::metadata(&absolute) {
            Ok(meta) if meta.is_file() => meta,
            _ => {
                return Err(IntelError::UnknownFile {
                    path: path.to_owned(),
                });
            }
        };
        if meta.len() > files::FILE_BYTES_MAX {
            return Err(IntelError::NotIndexed {
                path: path.to_owned(),
                reason: files::SkipReason::Oversized.explain(),
            });
        }
        let bytes = std::fs::read(&absolute).map_err(|e| IntelError::io(&absolute, e))?;
        if let Some(reason @ files::SkipReason::Binary) = files::skip_by_content(meta.len(), &bytes)
        {
            return Err(IntelError::NotIndexed {
                path: path.to_owned(),
                reason: reason.explain(),
            });
        }
        let language = Language::detect(path);
        if let Some(record) = snapshot.and_then(|s| s.record(path)) {
            let hash = git2::Oid::hash_object(git2::ObjectType::Blob, &bytes)?.to_string();
            if hash == record.hash {
                return Ok((record.language, record.parser, record.facts.clone()));
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        let (parser, facts) = Extractor::new().extract(language, path, &text);
        Ok((language, parser, facts))
    }

    /// `palm symbols FILE`: parsed from the file as it is now (the index is not needed).
    pub fn symbols(&self, path: &str) -> Result<query::SymbolsReport, IntelError> {
        let (language, parser, facts) = self.current_facts(None, path)?;
        Ok(query::SymbolsReport {
            path: path.to_owned(),
            language,
            parser,
            lines: facts.lines,
            symbols: facts.symbols,
        })
    }

    /// `palm explain FILE`.
    pub fn explain(
        &self,
        snapshot: &Snapshot,
        path: &str,
    ) -> Result<query::ExplainReport, IntelError> {
        let current = self.current_facts(Some(snapshot), path)?;
        let resolved = match snapshot.record(path) {
            Some(record) if record.facts == current.2 => record.resolved.clone(),
            _ => {
                let resolver = resolve::Resolver::new(
                    &self.root,
                    snapshot.content.records.iter().map(|r| r.path.as_str()),
                );
                current
                    .2
                    .imports
                    .iter()
                    .map(|i| resolver.resolve(path, current.0, &i.module))
                    .collect()
            }
        };
        Ok(snapshot.explain(path, current, resolved))
    }

    /// `palm search QUERY`: opens only the meta and the search index (fast path).
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        warnings: &mut Vec<String>,
    ) -> Result<SearchReport, IntelError> {
        if query.trim().is_empty() {
            return Err(IntelError::EmptyQuery);
        }
        let meta = match store::read_meta(&self.layout) {
            Ok(Some(meta)) => meta,
            Ok(None) | Err(IntelError::Corrupt { .. }) => self.snapshot(warnings)?.meta,
            Err(other) => return Err(other),
        };
        let index = match search::open(&self.layout, meta.generation) {
            Ok(index) => index,
            Err(IntelError::Corrupt { reason, .. }) => {
                warnings.push(format!(
                    "the search index was unusable ({reason}); rebuilt it"
                ));
                let snapshot = self.snapshot(warnings)?;
                search::create(
                    &self.layout,
                    &snapshot.content.records,
                    &snapshot.history.commits,
                    snapshot.meta.generation,
                )?;
                search::open(&self.layout, snapshot.meta.generation)?
            }
            Err(other) => return Err(other),
        };
        Ok(SearchReport {
            query: query.to_owned(),
            hits: search::search(&index, query, limit)?,
        })
    }
}

fn short(id: Option<&str>) -> String {
    match id {
        Some(id) => id.chars().take(12).collect(),
        None => "no commit".to_owned(),
    }
}
