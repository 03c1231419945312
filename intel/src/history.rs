//! The git half: every commit reachable from HEAD (newest `HISTORY_COMMITS_MAX`), with
//! its time, author, subject and the files it changed against its first parent.
//! Per-file churn, recent touches, authors and co-change are derived from it at query
//! time, so they are always measured against the present moment rather than against the
//! day the index was built. Updating is incremental: only commits not reachable from the
//! previously indexed HEAD are walked; a HEAD that is not a descendant of it (a rebase, a
//! reset) rebuilds the history.

use crate::error::IntelError;
use git2::{Oid, Repository, Sort};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// At most this many commits (the newest) are kept.
pub const HISTORY_COMMITS_MAX: usize = 20_000;
/// A commit's file list is cut at this many files.
pub const COMMIT_FILES_MAX: usize = 100_000;
/// Commits that change more files than this are left out of co-change (mass renames,
/// formatting sweeps and imports say nothing about coupling).
pub const COCHANGE_FILES_MAX: usize = 50;
/// "Recent" means within this many seconds of now (30 days).
pub const RECENT_WINDOW_S: i64 = 30 * 24 * 3600;
/// Co-change weights halve every this many seconds (30 days).
pub const COCHANGE_HALF_LIFE_S: f64 = 30.0 * 24.0 * 3600.0;

/// One commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitNote {
    /// Full hex id.
    pub id: String,
    /// Commit time, seconds since the Unix epoch.
    pub time: i64,
    /// Author name.
    pub author: String,
    /// Author email (what "distinct authors" counts).
    pub email: String,
    /// First line of the message.
    pub subject: String,
    /// Changed files (ids into `History::paths`), empty for merges.
    pub files: Vec<u32>,
    /// True for a commit with more than one parent.
    pub merge: bool,
}

/// The git half of the index.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct History {
    /// The HEAD commit this history was built up to.
    pub head: Option<String>,
    /// Commits, oldest first.
    pub commits: Vec<CommitNote>,
    /// Every path any kept commit changed.
    pub paths: Vec<String>,
    /// True when older commits were dropped by `HISTORY_COMMITS_MAX`.
    pub truncated: bool,
}

/// Per-file numbers from the history, as of a given moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileActivity {
    /// Commits (not merges) that changed the file.
    pub churn: u32,
    /// Of those, within `RECENT_WINDOW_S` of now.
    pub touches_30d: u32,
    /// Distinct author emails.
    pub authors: u32,
    /// Time of the newest commit that changed it.
    pub last_touched: Option<i64>,
}

/// A file that changes together with another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoChange {
    /// The other file.
    pub path: String,
    /// Commits that changed both.
    pub count: u32,
    /// Σ 0.5^(age / half-life) over those commits.
    pub weight: f64,
    /// Time of the newest such commit.
    pub last: i64,
}

/// What an update did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryUpdate {
    /// Commits added by this update.
    pub new_commits: usize,
    /// True when the history was rebuilt from scratch.
    pub rebuilt: bool,
}

/// Lookups derived once per loaded history.
#[derive(Debug, Default)]
pub struct HistoryView {
    by_path: HashMap<String, Vec<u32>>,
}

impl HistoryView {
    /// Positions (in `History::commits`) of the commits that changed a path, oldest first.
    pub fn indices_of(&self, path: &str) -> &[u32] {
        self.by_path.get(path).map_or(&[], Vec::as_slice)
    }
}

impl History {
    /// Brings the history up to the repository's HEAD.
    pub fn update(&mut self, repo: &Repository) -> Result<HistoryUpdate, IntelError> {
        let head = match repo.head().ok().and_then(|h| h.peel_to_commit().ok()) {
            Some(commit) => commit.id(),
            None => {
                let rebuilt = self.head.is_some();
                *self = History::default();
                return Ok(HistoryUpdate {
                    new_commits: 0,
                    rebuilt,
                });
            }
        };
        let previous = self.head.as_deref().and_then(|h| Oid::from_str(h).ok());
        let incremental = match previous {
            Some(old) if old == head => return Ok(HistoryUpdate::default()),
            Some(old) => repo.graph_descendant_of(head, old).unwrap_or(false),
            None => false,
        };
        if !incremental {
            *self = History::default();
        }
        let mut walk = repo.revwalk()?;
        walk.set_sorting(Sort::TOPOLOGICAL | Sort::TIME)?;
        walk.push(head)?;
        if incremental && let Some(old) = previous {
            walk.hide(old)?;
        }
        // Newest first, bounded; reversed below so commits stay oldest first.
        let mut ids = Vec::new();
        for id in walk {
            ids.push(id?);
            if ids.len() >= HISTORY_COMMITS_MAX {
                self.truncated = true;
                break;
            }
        }
        let mut interned: HashMap<String, u32> = self
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| (p.clone(), i as u32))
            .collect();
        let mut new = Vec::with_capacity(ids.len());
        for id in ids.iter().rev() {
            new.push(self.note(repo, *id, &mut interned)?);
        }
        let new_commits = new.len();
        self.commits.extend(new);
        if self.commits.len() > HISTORY_COMMITS_MAX {
            let drop = self.commits.len() - HISTORY_COMMITS_MAX;
            self.commits.drain(..drop);
            self.truncated = true;
        }
        self.head = Some(head.to_string());
        Ok(HistoryUpdate {
            new_commits,
            rebuilt: !incremental,
        })
    }

    fn note(
        &mut self,
        repo: &Repository,
        id: Oid,
        interned: &mut HashMap<String, u32>,
    ) -> Result<CommitNote, IntelError> {
        let commit = repo.find_commit(id)?;
        let merge = commit.parent_count() > 1;
        let mut files = Vec::new();
        if !merge {
            let tree = commit.tree()?;
            let parent_tree = match commit.parent(0) {
                Ok(parent) => Some(parent.tree()?),
                Err(_) => None,
            };
            let mut options = git2::DiffOptions::new();
            options.skip_binary_check(true).ignore_submodules(true);
            let diff =
                repo.diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), Some(&mut options))?;
            let mut seen = BTreeSet::new();
            for delta in diff.deltas() {
                let path = delta.new_file().path().or_else(|| delta.old_file().path());
                let Some(path) = path.and_then(|p| p.to_str()) else {
                    continue;
                };
                if seen.len() >= COMMIT_FILES_MAX {
                    break;
                }
                let next = self.paths.len() as u32;
                let path_id = *interned.entry(path.to_owned()).or_insert_with(|| {
                    self.paths.push(path.to_owned());
                    next
                });
                seen.insert(path_id);
            }
            files = seen.into_iter().collect();
        }
        let author = commit.author();
        Ok(CommitNote {
            id: id.to_string(),
            time: commit.time().seconds(),
            author: author.name().unwrap_or("").to_owned(),
            email: author.email().unwrap_or("").to_owned(),
            subject: commit.summary().ok().flatten().unwrap_or("").to_owned(),
            files,
            merge,
        })
    }

    /// Builds the per-path lookups.
    pub fn view(&self) -> HistoryView {
        let mut by_path: HashMap<String, Vec<u32>> = HashMap::new();
        for (index, commit) in self.commits.iter().enumerate() {
            for &file in &commit.files {
                if let Some(path) = self.paths.get(file as usize) {
                    by_path.entry(path.clone()).or_default().push(index as u32);
                }
            }
        }
        HistoryView { by_path }
    }

    /// The commits that changed a path, oldest first.
    pub fn commits_of<'h>(&'h self, view: &HistoryView, path: &str) -> Vec<&'h CommitNote> {
        view.by_path
            .get(path)
            .map(|ids| {
                ids.iter()
                    .filter_map(|&i| self.commits.get(i as usize))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Churn, recent touches, authors and last touch of a path, as of `now`.
    pub fn activity(&self, view: &HistoryView, path: &str, now: i64) -> FileActivity {
        let commits = self.commits_of(view, path);
        let authors: BTreeSet<&str> = commits.iter().map(|c| c.email.as_str()).collect();
        FileActivity {
            churn: commits.len() as u32,
            touches_30d: commits
                .iter()
                .filter(|c| now - c.time <= RECENT_WINDOW_S)
                .count() as u32,
            authors: authors.len() as u32,
            last_touched: commits.iter().map(|c| c.time).max(),
        }
    }

    /// Files that changed in the same commits as `path`, strongest first (by weight,
    /// then count, then path).
    pub fn cochanges(&self, view: &HistoryView, path: &str, now: i64) -> Vec<CoChange> {
        let mut edges: BTreeMap<u32, CoChange> = BTreeMap::new();
        for commit in self.commits_of(view, path) {
            if commit.files.len() > COCHANGE_FILES_MAX {
                continue;
            }
            let age = (now - commit.time).max(0) as f64;
            let weight = 0.5f64.powf(age / COCHANGE_HALF_LIFE_S);
            for &other in &commit.files {
                let Some(other_path) = self.paths.get(other as usize) else {
                    continue;
                };
                if other_path == path {
                    continue;
                }
                let edge = edges.entry(other).or_insert_with(|| CoChange {
                    path: other_path.clone(),
                    count: 0,
                    weight: 0.0,
                    last: commit.time,
                });
                edge.count += 1;
                edge.weight += weight;
                edge.last = edge.last.max(commit.time);
            }
        }
        let mut list: Vec<CoChange> = edges.into_values().collect();
        list.sort_by(|a, b| {
            b.weight
                .total_cmp(&a.weight)
                .then(b.count.cmp(&a.count))
                .then(a.path.cmp(&b.path))
        });
        list
    }

    /// Co-change edges over the whole history (pairs of files changed together).
    pub fn edge_count(&self) -> usize {
        let mut pairs = BTreeSet::new();
        for commit in &self.commits {
            if commit.files.len() > COCHANGE_FILES_MAX {
                continue;
            }
            for (i, &a) in commit.files.iter().enumerate() {
                for &b in &commit.files[i + 1..] {
                    pairs.insert((a.min(b), a.max(b)));
                }
            }
        }
        pairs.len()
    }
}
