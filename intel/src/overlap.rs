//! Conflict prediction: which files a task will probably touch (its *footprint*), and
//! whether two tasks are likely to touch a same file (their *overlap*), before either
//! runs. A scheduler serializes two tasks whose overlap score reaches
//! [`SERIALIZE_SCORE_MIN`] and runs the others side by side.
//!
//! A footprint weighs each file by an estimate of the chance that the task changes it:
//!
//! - **Seeds**, what the task names: its files (1), the files its text names
//!   (`gated.rs`, `README`: 0.8), the files that declare the symbols it names or that its
//!   text spells like code (`HopCore`, `check_holder`: 0.9) and, when it names no file,
//!   the best hits of a search of its words in the tantivy index (up to 0.6).
//! - **A prior** for every other file, a mixture of: who imports or uses a seed and what
//!   it imports; ownership (what the seed's primary author changes in its area, the first
//!   directory of its path); the files of the past commits whose subjects share the most
//!   (rare) words with the task; and the base rate of the files most commits change.
//! - **Co-change** of each seed, from history: of its `n` commits, `k` changed the file
//!   too, and the estimate is `(k + m·prior) / (n + m)` with `m = PRIOR_COMMITS`: the
//!   prior alone for a seed without history, its own record as that history grows.
//! - **Breadth**: the estimates are scaled by the length of the task's title against the
//!   median length of the repository's commit subjects (within 0.5..3): a task described
//!   at length reaches further than a terse one.
//!
//! [`replay`] measures the method on a repository's own history: each recent commit is a
//! task that names only what a person knew before doing it (its subject line and the
//! first file it touched), footprints are built from the history strictly before the
//! earlier commit of each pair, and the prediction is compared with the files the two
//! commits really shared. docs/intel.md ("Predicting conflicts") has the figures.

use crate::Intel;
use crate::error::IntelError;
use crate::extract::SymbolKind;
use crate::files;
use crate::history::{COCHANGE_FILES_MAX, CommitNote, History};
use crate::query::Snapshot;
use crate::search;
use crate::store::Layout;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

/// Two tasks are serialized when their overlap score is at least this: the estimated
/// chance that they touch a same file (see [`predict`]). Chosen on Palm's own history
/// (docs/intel.md, "Predicting conflicts").
pub const SERIALIZE_SCORE_MIN: f64 = 0.85;
/// A footprint keeps at most this many files (the heaviest).
pub const FOOTPRINT_FILES_MAX: usize = 50;
/// Shared files and evidence lines an [`Overlap`] lists at most.
pub const OVERLAP_FILES_SHOWN: usize = 10;

/// Weight of a file the task's text mentions by name (`gated.rs`, `docs/agents.md`).
const MENTIONED_WEIGHT: f64 = 0.8;
/// A mention that matches more files than this says nothing.
const MENTION_MATCHES_MAX: usize = 3;
/// Weight of the file that declares a named symbol (shared when several do).
const DECLARER_WEIGHT: f64 = 0.9;
/// A symbol declared by more files than this is too common to place a task.
const DECLARERS_MAX: usize = 4;
/// Weight of the best search hit when the task names no file (others by their score).
const SEARCH_WEIGHT: f64 = 0.6;
/// File hits of a search that seed a footprint.
const SEARCH_FILE_HITS: usize = 5;
/// Seeds with at least this weight spread (co-change, users, ownership).
const SPREAD_WEIGHT_MIN: f64 = 0.25;
/// At most this many seeds spread, the heaviest.
const SPREAD_SEEDS_MAX: usize = 8;
/// Seeds with at least this weight spread to their import neighbours and owners.
const GRAPH_SEED_MIN: f64 = 0.5;
/// Weight of the prior against a seed's own history, in commits (see `footprint`).
const PRIOR_COMMITS: f64 = 2.0;
/// Share of a seed's import neighbours (times the seed's weight).
const GRAPH_SHARE: f64 = 0.3;
/// Share of a seed's ownership: what its primary author changes in its area.
const AREA_SHARE: f64 = 0.5;
/// Share of the past commits with like words.
const SIMILAR_SHARE: f64 = 0.5;
/// Share of the files most commits change (the base rate).
const HUB_SHARE: f64 = 0.3;
/// Chance that a user of a seed changes with it (shared among many users).
const USER_CHANCE: f64 = 0.25;
/// Users beyond this many share `USER_CHANCE` (a hub's users are each less likely).
const USERS_FULL: usize = 4;
/// Chance that a file a seed imports changes with it.
const IMPORT_CHANCE: f64 = 0.15;
/// Past commits with like words that count.
const SIMILAR_COMMITS: usize = 5;
/// Ownership looks at most at this many of the author's newest commits in the area.
const AREA_COMMITS_MAX: usize = 200;
/// Breadth: (words of the task / median words of past subjects) ^ this.
const BREADTH_EXPONENT: f64 = 1.0;
/// Breadth is kept within these bounds.
const BREADTH_MIN: f64 = 0.5;
/// See `BREADTH_MIN`.
const BREADTH_MAX: f64 = 3.0;
/// Words that carry no meaning for a search.
const STOP_WORDS: [&str; 48] = [
    "the", "and", "for", "with", "from", "into", "onto", "that", "this", "these", "those", "its",
    "are", "was", "were", "been", "being", "has", "have", "had", "not", "but", "all", "any", "one",
    "two", "each", "when", "then", "than", "only", "also", "now", "new", "out", "off", "via",
    "per", "who", "what", "which", "where", "why", "how", "can", "may", "does", "did",
];

/// Which sources a footprint uses (all, except in replay ablations).
#[derive(Clone, Copy, Debug)]
struct Sources {
    /// Import neighbours, users and ownership.
    graph: bool,
    /// Search hits and past commits with like words.
    words: bool,
    /// Breadth from the length of the task's title.
    breadth: bool,
}

impl Default for Sources {
    fn default() -> Self {
        Sources {
            graph: true,
            words: true,
            breadth: true,
        }
    }
}

/// What a task names before it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskScope {
    /// Target files, repository-relative.
    pub files: Vec<String>,
    /// Symbols it names (`Snapshot::footprint` also finds code-like words in `text`).
    pub symbols: Vec<String>,
    /// Its words (a title, a description).
    pub text: String,
}

impl TaskScope {
    /// A scope from words alone.
    pub fn from_text(text: &str) -> TaskScope {
        TaskScope {
            files: Vec::new(),
            symbols: Vec::new(),
            text: text.to_owned(),
        }
    }
}

/// The files a task will probably touch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Footprint {
    /// Repository-relative path → estimated chance that the task touches it (0..1].
    pub files: BTreeMap<String, f64>,
    /// One line per file, heaviest first: "`path` weight: why".
    pub evidence: Vec<String>,
}

/// Run two tasks side by side, or one after the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// No file is likely to be touched by both.
    Parallel,
    /// The tasks probably touch a same file: run them one after the other.
    Serialize,
}

/// The predicted overlap of two tasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Overlap {
    /// Estimated chance that both touch at least one same file: 1 − Π (1 − wa·wb) over
    /// the files both footprints hold.
    pub score: f64,
    /// Files both may touch, most likely first (at most `OVERLAP_FILES_SHOWN`).
    pub files: Vec<String>,
    /// Why, per shared file.
    pub evidence: Vec<String>,
    /// `Serialize` when `score >= SERIALIZE_SCORE_MIN`.
    pub decision: Decision,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Why `path` is in a footprint (its evidence line without the path and weight).
fn reason_of<'f>(footprint: &'f Footprint, path: &str) -> &'f str {
    let prefix = format!("`{path}` ");
    footprint
        .evidence
        .iter()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|rest| rest.split_once(": ").map_or(rest, |(_, why)| why))
        .unwrap_or("")
}

/// Predicts whether two tasks touch a same file, from their footprints.
pub fn predict(a: &Footprint, b: &Footprint) -> Overlap {
    predict_at(a, b, SERIALIZE_SCORE_MIN)
}

fn predict_at(a: &Footprint, b: &Footprint, threshold: f64) -> Overlap {
    let mut shared: Vec<(&str, f64, f64)> = a
        .files
        .iter()
        .filter_map(|(path, wa)| b.files.get(path).map(|wb| (path.as_str(), *wa, *wb)))
        .collect();
    let miss: f64 = shared
        .iter()
        .map(|(_, wa, wb)| 1.0 - (wa * wb).clamp(0.0, 1.0))
        .product();
    let score = round3(1.0 - miss);
    shared.sort_by(|x, y| (y.1 * y.2).total_cmp(&(x.1 * x.2)).then(x.0.cmp(y.0)));
    shared.truncate(OVERLAP_FILES_SHOWN);
    let evidence = shared
        .iter()
        .map(|(path, wa, wb)| {
            format!(
                "`{path}` {:.3} = {wa:.3} × {wb:.3}: first task: {}; second task: {}",
                wa * wb,
                reason_of(a, path),
                reason_of(b, path)
            )
        })
        .collect();
    Overlap {
        score,
        files: shared.iter().map(|(p, _, _)| (*p).to_owned()).collect(),
        evidence,
        decision: if score >= threshold {
            Decision::Serialize
        } else {
            Decision::Parallel
        },
    }
}

impl Snapshot {
    /// The files `task` will probably touch, from this index as it is now (history up to
    /// its HEAD, the files of the working tree, the search index on disk).
    pub fn footprint(&self, task: &TaskScope) -> Footprint {
        self.footprints(std::slice::from_ref(task))
            .pop()
            .unwrap_or_default()
    }

    /// [`Snapshot::footprint`] of several tasks (the lookups built once).
    pub fn footprints(&self, tasks: &[TaskScope]) -> Vec<Footprint> {
        let search = search::open(&Layout::new(&self.root), self.meta.generation).ok();
        let basis = Basis::new(self, &self.history, search);
        let moment = Moment {
            cutoff: self.history.commits.len(),
            files: Files::Now,
            repo: None,
        };
        tasks.iter().map(|t| basis.footprint(&moment, t)).collect()
    }
}

/// A team's schedule: which pairs of its tasks to run one after the other.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The score from which a pair is serialized ([`SERIALIZE_SCORE_MIN`]).
    pub threshold: f64,
    /// The pairs to serialize, highest score first.
    pub serialize: Vec<ScheduledPair>,
    /// Pairs that may run side by side.
    pub parallel: usize,
    /// Each task's likeliest files (at most five), by task id.
    pub footprints: BTreeMap<String, Vec<String>>,
}

/// Two tasks predicted to touch a same file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduledPair {
    /// The first task's id (in board order).
    pub a: String,
    /// The second's.
    pub b: String,
    /// See [`Overlap::score`].
    pub score: f64,
    /// The files both may touch, likeliest first.
    pub files: Vec<String>,
    /// Why, per file.
    pub evidence: Vec<String>,
}

impl Snapshot {
    /// The schedule of `tasks` (id, scope): every pair's predicted overlap, from this
    /// index as it is now.
    pub fn schedule(&self, tasks: &[(String, TaskScope)]) -> Schedule {
        let scopes: Vec<TaskScope> = tasks.iter().map(|(_, scope)| scope.clone()).collect();
        let prints = self.footprints(&scopes);
        let mut serialize = Vec::new();
        let mut parallel = 0;
        for i in 0..tasks.len() {
            for j in i + 1..tasks.len() {
                let overlap = predict(&prints[i], &prints[j]);
                if overlap.decision == Decision::Serialize {
                    serialize.push(ScheduledPair {
                        a: tasks[i].0.clone(),
                        b: tasks[j].0.clone(),
                        score: overlap.score,
                        files: overlap.files,
                        evidence: overlap.evidence,
                    });
                } else {
                    parallel += 1;
                }
            }
        }
        serialize.sort_by(|x, y| y.score.total_cmp(&x.score));
        let footprints = tasks
            .iter()
            .zip(&prints)
            .map(|((id, _), print)| {
                let mut files: Vec<(&String, &f64)> = print.files.iter().collect();
                files.sort_by(|x, y| y.1.total_cmp(x.1).then(x.0.cmp(y.0)));
                (
                    id.clone(),
                    files.into_iter().take(5).map(|(f, _)| f.clone()).collect(),
                )
            })
            .collect();
        Schedule {
            threshold: SERIALIZE_SCORE_MIN,
            serialize,
            parallel,
            footprints,
        }
    }
}

/// Code-like words of a text: `snake_case`, `CamelCase`, `a::b` parts, `name()`.
pub fn symbols_in(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for raw in text.split(|c: char| c.is_whitespace() || ",;()[]{}'\"`<>|=!?".contains(c)) {
        let word = raw.trim_matches(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'));
        if word.is_empty() || looks_like_file(word) {
            continue;
        }
        for part in word.split("::") {
            let part = part.trim_matches(|c: char| !(c.is_alphanumeric() || c == '_'));
            if part.chars().count() < 3 || !part.chars().all(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let chars: Vec<char> = part.chars().collect();
            let snake = part.trim_matches('_').contains('_');
            let camel = chars
                .windows(2)
                .any(|w| w[0].is_lowercase() && w[1].is_uppercase());
            let qualified = word.contains("::");
            if (snake || camel || qualified) && !out.iter().any(|o| o == part) {
                out.push(part.to_owned());
            }
        }
    }
    out
}

fn looks_like_file(word: &str) -> bool {
    const EXTENSIONS: [&str; 22] = [
        "rs", "md", "toml", "py", "go", "js", "ts", "tsx", "jsx", "java", "c", "h", "cpp", "hpp",
        "json", "yaml", "yml", "lock", "sh", "txt", "html", "css",
    ];
    if word.contains('/') && !word.contains("://") {
        return true;
    }
    match word.rsplit_once('.') {
        Some((stem, extension)) => !stem.is_empty() && EXTENSIONS.contains(&extension),
        None => false,
    }
}

/// The first line of a text (a task's title; a commit's subject).
fn title(text: &str) -> &str {
    text.trim_start().lines().next().unwrap_or("")
}

/// Words of a text worth searching for (no stop words, at least 3 characters).
fn search_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        let lower = word.to_lowercase();
        if lower.chars().count() >= 3
            && !lower.chars().all(|c| c.is_ascii_digit())
            && !STOP_WORDS.contains(&lower.as_str())
            && !out.contains(&lower)
        {
            out.push(lower);
        }
    }
    out
}

/// Which files exist at the moment a footprint is taken.
enum Files<'r> {
    /// As indexed now (or on disk).
    Now,
    /// As in this tree (the parent of the earlier commit of a replayed pair).
    Tree(git2::Tree<'r>),
    /// Before the first commit: none.
    Empty,
}

/// What was known when a footprint is taken: the commits before `cutoff` and the files
/// of that moment.
struct Moment<'r> {
    cutoff: usize,
    files: Files<'r>,
    repo: Option<&'r git2::Repository>,
}

/// Numbers of the history before one cutoff, computed once per cutoff.
struct Epoch {
    /// Commits (as in `Basis::by_path`) before the cutoff.
    commits: u32,
    /// Median count of search words in their subjects.
    median_words: f64,
    /// The files most commits changed (that still existed), with their commit counts.
    hubs: Vec<(String, u32)>,
    /// Every file of the moment.
    listing: Vec<String>,
}

/// One source of chances in a footprint's mixture.
struct Component {
    /// Its share of the mixture.
    share: f64,
    /// Path → (chance that the task touches it by this source's account, why).
    chances: BTreeMap<String, (f64, String)>,
}

/// Lookups shared by every footprint of one index.
struct Basis<'s> {
    snapshot: &'s Snapshot,
    history: &'s History,
    /// Per path: the commits (indices, ascending) that changed it, merges and mass edits
    /// left out ("eligible" commits).
    by_path: HashMap<&'s str, Vec<u32>>,
    /// Per area (first path component, "" for the root): the eligible commits that
    /// changed a file in it.
    by_area: HashMap<&'s str, Vec<u32>>,
    /// Per subject word: the eligible commits whose subject has it.
    postings: HashMap<String, Vec<u32>>,
    /// Per commit: how many search words its subject has.
    subject_words: Vec<u32>,
    /// Eligible commits before each index.
    eligible_before: Vec<u32>,
    /// Symbol name → files that declare it (sections and modules left out).
    declarers: HashMap<&'s str, Vec<&'s str>>,
    search: Option<tantivy::Index>,
    users: RefCell<HashMap<String, Vec<String>>>,
    /// Blob id → its tokens (for the "known at that moment" checks).
    tokens: RefCell<HashMap<git2::Oid, BTreeSet<String>>>,
    epochs: RefCell<HashMap<usize, std::rc::Rc<Epoch>>>,
    sources: Sources,
}

/// A footprint's prior: path → (chance, and the parts of it with their reasons).
type Mixture<'a> = BTreeMap<&'a str, (f64, Vec<(f64, &'a str)>)>;

/// Seeds of a footprint: path → (weight, why).
type Seeds = BTreeMap<String, (f64, String)>;

fn seed(seeds: &mut Seeds, path: &str, weight: f64, reason: String) {
    let entry = seeds
        .entry(path.to_owned())
        .or_insert_with(|| (0.0, String::new()));
    if weight > entry.0 {
        *entry = (weight.clamp(0.0, 1.0), reason);
    }
}

fn area(path: &str) -> &str {
    path.split_once('/').map_or("", |(a, _)| a)
}

fn is_eligible(commit: &CommitNote) -> bool {
    !commit.merge && !commit.files.is_empty() && commit.files.len() <= COCHANGE_FILES_MAX
}

impl<'s> Basis<'s> {
    fn new(snapshot: &'s Snapshot, history: &'s History, search: Option<tantivy::Index>) -> Self {
        let mut by_path: HashMap<&str, Vec<u32>> = HashMap::new();
        let mut by_area: HashMap<&str, Vec<u32>> = HashMap::new();
        let mut postings: HashMap<String, Vec<u32>> = HashMap::new();
        let mut subject_words = Vec::with_capacity(history.commits.len());
        let mut eligible_before = vec![0u32];
        for (index, commit) in history.commits.iter().enumerate() {
            let words = search_words(&commit.subject);
            subject_words.push(words.len() as u32);
            let eligible = is_eligible(commit);
            eligible_before.push(eligible_before[index] + u32::from(eligible));
            if !eligible {
                continue;
            }
            let index = index as u32;
            for word in words {
                postings.entry(word).or_default().push(index);
            }
            for &file in &commit.files {
                if let Some(path) = history.paths.get(file as usize) {
                    by_path.entry(path.as_str()).or_default().push(index);
                    let list = by_area.entry(area(path)).or_default();
                    if list.last() != Some(&index) {
                        list.push(index);
                    }
                }
            }
        }
        let mut declarers: HashMap<&str, Vec<&str>> = HashMap::new();
        for record in &snapshot.content.records {
            for symbol in &record.facts.symbols {
                if matches!(symbol.kind, SymbolKind::Section | SymbolKind::Module) {
                    continue;
                }
                let list = declarers.entry(symbol.name.as_str()).or_default();
                if list.last() != Some(&record.path.as_str()) {
                    list.push(record.path.as_str());
                }
            }
        }
        Basis {
            snapshot,
            history,
            by_path,
            by_area,
            postings,
            subject_words,
            eligible_before,
            declarers,
            search,
            users: RefCell::new(HashMap::new()),
            tokens: RefCell::new(HashMap::new()),
            epochs: RefCell::new(HashMap::new()),
            sources: Sources::default(),
        }
    }

    /// The eligible commits of `list` before the moment.
    fn before<'l>(moment: &Moment<'_>, list: &'l [u32]) -> &'l [u32] {
        let end = list.partition_point(|&i| (i as usize) < moment.cutoff);
        &list[..end]
    }

    /// The commits before the moment that changed `path` (indices).
    fn commits_of(&self, moment: &Moment<'_>, path: &str) -> &[u32] {
        Self::before(moment, self.by_path.get(path).map_or(&[][..], |v| v))
    }

    fn commit(&self, index: u32) -> &CommitNote {
        &self.history.commits[index as usize]
    }

    fn path_of(&self, id: u32) -> &str {
        self.history
            .paths
            .get(id as usize)
            .map_or("", |p| p.as_str())
    }

    fn exists(&self, moment: &Moment<'_>, path: &str) -> bool {
        match &moment.files {
            Files::Now => {
                self.snapshot.record(path).is_some() || self.snapshot.root.join(path).is_file()
            }
            Files::Tree(tree) => tree
                .get_path(Path::new(path))
                .is_ok_and(|e| e.kind() == Some(git2::ObjectType::Blob)),
            Files::Empty => false,
        }
    }

    fn epoch(&self, moment: &Moment<'_>) -> std::rc::Rc<Epoch> {
        if let Some(epoch) = self.epochs.borrow().get(&moment.cutoff) {
            return epoch.clone();
        }
        let cutoff = moment.cutoff.min(self.history.commits.len());
        let mut words: Vec<u32> = (0..cutoff)
            .filter(|&i| is_eligible(&self.history.commits[i]))
            .map(|i| self.subject_words[i])
            .collect();
        words.sort_unstable();
        let median_words = words.get(words.len() / 2).map_or(0.0, |&w| f64::from(w));
        let mut hubs: Vec<(String, u32)> = self
            .by_path
            .iter()
            .map(|(path, list)| (*path, Self::before(moment, list).len() as u32))
            .filter(|(_, n)| *n > 0)
            .map(|(p, n)| (p.to_owned(), n))
            .collect();
        hubs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let hubs: Vec<(String, u32)> = hubs
            .into_iter()
            .filter(|(p, _)| self.exists(moment, p))
            .take(FOOTPRINT_FILES_MAX)
            .collect();
        let listing = match &moment.files {
            Files::Now => self
                .snapshot
                .content
                .records
                .iter()
                .map(|r| r.path.clone())
                .chain(self.snapshot.content.skipped.iter().map(|s| s.path.clone()))
                .collect(),
            Files::Tree(tree) => {
                let mut out = Vec::new();
                let _ = tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
                    if entry.kind() == Some(git2::ObjectType::Blob)
                        && let Ok(name) = entry.name()
                    {
                        out.push(format!("{dir}{name}"));
                    }
                    git2::TreeWalkResult::Ok
                });
                out
            }
            Files::Empty => Vec::new(),
        };
        let epoch = std::rc::Rc::new(Epoch {
            commits: self.eligible_before[cutoff],
            median_words,
            hubs,
            listing,
        });
        self.epochs
            .borrow_mut()
            .insert(moment.cutoff, epoch.clone());
        epoch
    }

    /// The lowercased tokens of a file as it was at the moment (its path's included);
    /// `None` when it did not exist or is not readable, or the moment is now.
    fn tokens_then(&self, moment: &Moment<'_>, path: &str) -> Option<BTreeSet<String>> {
        let Files::Tree(tree) = &moment.files else {
            return None;
        };
        let repo = moment.repo?;
        let entry = tree.get_path(Path::new(path)).ok()?;
        let id = entry.id();
        if let Some(tokens) = self.tokens.borrow().get(&id) {
            return Some(tokens.clone());
        }
        let blob = repo.find_blob(id).ok()?;
        let mut tokens = search::query_tokens(&String::from_utf8_lossy(blob.content()));
        tokens.extend(search::query_tokens(path));
        self.tokens.borrow_mut().insert(id, tokens.clone());
        Some(tokens)
    }

    /// True when `name` was a word of `path` at the moment (always true now).
    fn known_then(&self, moment: &Moment<'_>, path: &str, name: &str) -> bool {
        match &moment.files {
            Files::Now => true,
            Files::Empty => false,
            Files::Tree(_) => self
                .tokens_then(moment, path)
                .is_some_and(|t| t.contains(&name.to_lowercase())),
        }
    }

    fn users_of(&self, path: &str) -> Vec<String> {
        if let Some(users) = self.users.borrow().get(path) {
            return users.clone();
        }
        let users: Vec<String> = self
            .snapshot
            .used_by(path)
            .into_iter()
            .map(|u| u.path)
            .collect();
        self.users
            .borrow_mut()
            .insert(path.to_owned(), users.clone());
        users
    }

    /// The author email with the most commits on `path` before the moment.
    fn primary_author(&self, moment: &Moment<'_>, path: &str) -> Option<&str> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for &i in self.commits_of(moment, path) {
            *counts.entry(self.commit(i).email.as_str()).or_default() += 1;
        }
        counts
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
            .map(|(email, _)| email)
    }

    fn footprint(&self, moment: &Moment<'_>, task: &TaskScope) -> Footprint {
        let epoch = self.epoch(moment);
        // What the task names, with the weight of each.
        let mut seeds = Seeds::new();
        let mut named = false;
        for file in &task.files {
            let file = file.trim_start_matches("./");
            if !file.is_empty() {
                seed(&mut seeds, file, 1.0, "named by the task".to_owned());
                named = true;
            }
        }
        self.mentions(&epoch, task, &mut seeds);
        self.symbols(moment, task, &mut seeds);
        if !named && self.sources.words {
            self.search_hits(moment, task, &mut seeds);
        }
        // Where else such a task goes. A prior: a mixture of sources, each a chance per
        // file (import neighbours, ownership, past commits with like words, hubs).
        let mut spread: Vec<(String, f64)> = seeds
            .iter()
            .map(|(p, (w, _))| (p.clone(), *w))
            .filter(|(_, w)| *w >= SPREAD_WEIGHT_MIN)
            .collect();
        spread.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        spread.truncate(SPREAD_SEEDS_MAX);
        let mut components: Vec<Component> = Vec::new();
        if self.sources.graph {
            for (path, weight) in spread.iter().filter(|s| s.1 >= GRAPH_SEED_MIN) {
                if let Some(chances) = self.neighbours(moment, path) {
                    components.push(Component {
                        share: GRAPH_SHARE * weight,
                        chances,
                    });
                }
                if let Some(chances) = self.owners(moment, path) {
                    components.push(Component {
                        share: AREA_SHARE * weight,
                        chances,
                    });
                }
            }
        }
        if self.sources.words
            && let Some(chances) = self.similar_commits(moment, &epoch, task)
        {
            components.push(Component {
                share: SIMILAR_SHARE,
                chances,
            });
        }
        if !epoch.hubs.is_empty() {
            let total = f64::from(epoch.commits.max(1));
            components.push(Component {
                share: HUB_SHARE,
                chances: epoch
                    .hubs
                    .iter()
                    .map(|(path, n)| {
                        (
                            path.clone(),
                            (
                                f64::from(*n) / total,
                                format!("changed by {n} of all {} commits", epoch.commits),
                            ),
                        )
                    })
                    .collect(),
            });
        }
        let prior_share: f64 = components.iter().map(|c| c.share).sum();
        let mut prior: Mixture<'_> = BTreeMap::new();
        for component in &components {
            for (path, (chance, why)) in &component.chances {
                let part = component.share / prior_share * chance;
                let entry = prior.entry(path).or_insert_with(|| (0.0, Vec::new()));
                entry.0 += part;
                entry.1.push((part, why));
            }
        }
        // Then each seed's own history: of its n commits, k changed the file too. The
        // estimate is (k + m · prior) / (n + m), m = PRIOR_COMMITS: the prior alone for a
        // seed without history, its co-change as that history grows.
        let histories: Vec<(&str, f64, u32, BTreeMap<String, u32>)> = spread
            .iter()
            .map(|(path, weight)| {
                let (n, counts) = self.cochanges(moment, path);
                (path.as_str(), *weight, n, counts)
            })
            .collect();
        let seeds_weight: f64 = histories.iter().map(|h| h.1).sum();
        let mut keys: BTreeSet<&str> = prior.keys().copied().collect();
        for (_, _, _, counts) in &histories {
            keys.extend(counts.keys().map(|k| k.as_str()));
        }
        // A task described at length reaches further than a terse one.
        let breadth = if self.sources.breadth && epoch.median_words > 0.0 {
            let words = search_words(title(&task.text)).len().max(1) as f64;
            (words / epoch.median_words)
                .powf(BREADTH_EXPONENT)
                .clamp(BREADTH_MIN, BREADTH_MAX)
        } else {
            1.0
        };
        let m = PRIOR_COMMITS;
        let mut files: Vec<(String, f64, String)> = Vec::new();
        for path in keys {
            let (base, mut reasons) = prior.remove(path).unwrap_or_default();
            reasons.sort_by(|a, b| b.0.total_cmp(&a.0));
            let mut why: Vec<String> = Vec::new();
            let chance = if seeds_weight > 0.0 {
                let mut sum = 0.0;
                let mut best: Option<(f64, String)> = None;
                for (seed, weight, n, counts) in &histories {
                    let k = counts.get(path).copied().unwrap_or(0);
                    let estimate = (f64::from(k) + m * base) / (f64::from(*n) + m);
                    sum += weight * estimate;
                    if k > 0 && best.as_ref().is_none_or(|b| estimate > b.0) {
                        best = Some((
                            estimate,
                            format!("co-changes with {seed} in {k} of {n} commits"),
                        ));
                    }
                }
                why.extend(best.map(|b| b.1));
                sum / seeds_weight
            } else {
                base
            };
            why.extend(
                reasons
                    .iter()
                    .take(2 - why.len().min(1))
                    .map(|r| r.1.to_owned()),
            );
            let mut weight = (chance * breadth).min(1.0);
            if let Some((named_weight, named_why)) = seeds.remove(path) {
                weight = 1.0 - (1.0 - named_weight) * (1.0 - weight);
                why.insert(0, named_why);
            }
            files.push((path.to_owned(), weight, why.join("; ")));
        }
        for (path, (weight, why)) in seeds {
            files.push((path, weight, why));
        }
        files.retain(|f| f.1 > 0.0);
        files.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        files.truncate(FOOTPRINT_FILES_MAX);
        let mut footprint = Footprint::default();
        for (path, weight, why) in files {
            let weight = round3(weight).max(0.001);
            footprint
                .evidence
                .push(format!("`{path}` {weight:.3}: {why}"));
            footprint.files.insert(path, weight);
        }
        footprint
    }

    /// Co-change of `path` before the moment: its commits, and per other file that
    /// still exists then, how many of them changed it too.
    fn cochanges(&self, moment: &Moment<'_>, path: &str) -> (u32, BTreeMap<String, u32>) {
        let commits = self.commits_of(moment, path);
        let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
        for &i in commits {
            for &file in &self.commit(i).files {
                *counts.entry(file).or_default() += 1;
            }
        }
        let counts = counts
            .into_iter()
            .map(|(file, count)| (self.path_of(file), count))
            .filter(|(other, _)| *other != path && self.exists(moment, other))
            .map(|(other, count)| (other.to_owned(), count))
            .collect();
        (commits.len() as u32, counts)
    }

    /// Files the task's text names (`gated.rs`, `docs/agents.md`, `README`).
    fn mentions(&self, epoch: &Epoch, task: &TaskScope, seeds: &mut Seeds) {
        let words: Vec<&str> = task
            .text
            .split(|c: char| c.is_whitespace() || ",;()[]{}'\"`<>|".contains(c))
            .map(|w| w.trim_end_matches([':', '.']).trim_start_matches("./"))
            .filter(|w| {
                looks_like_file(w)
                    || (w.chars().count() >= 4
                        && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            })
            .collect();
        for word in words {
            let matches: Vec<&String> = epoch
                .listing
                .iter()
                .filter(|path| {
                    path.as_str() == word
                        || path.ends_with(&format!("/{word}"))
                        || (!word.contains('.')
                            && path.rsplit('/').next().and_then(|n| n.split('.').next())
                                == Some(word))
                })
                .collect();
            if matches.is_empty() || matches.len() > MENTION_MATCHES_MAX {
                continue;
            }
            let weight = MENTIONED_WEIGHT / matches.len() as f64;
            for path in matches {
                seed(seeds, path, weight, format!("the task's text names {word}"));
            }
        }
    }

    /// Files that declare the task's symbols (named, or code-like words of its text).
    fn symbols(&self, moment: &Moment<'_>, task: &TaskScope, seeds: &mut Seeds) {
        let mut names: Vec<String> = task.symbols.clone();
        for name in symbols_in(&task.text) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        for name in names {
            let name = name.rsplit("::").next().unwrap_or(&name).to_owned();
            let Some(declarers) = self.declarers.get(name.as_str()) else {
                continue;
            };
            let then: Vec<&str> = declarers
                .iter()
                .copied()
                .filter(|p| self.exists(moment, p) && self.known_then(moment, p, &name))
                .collect();
            if then.is_empty() || then.len() > DECLARERS_MAX {
                continue;
            }
            let weight = DECLARER_WEIGHT / (then.len() as f64).sqrt();
            for path in then {
                seed(seeds, path, weight, format!("declares `{name}`"));
            }
        }
    }

    /// The best file hits of a search of the task's words (the tantivy index). At a past
    /// moment a hit counts by the share of its matching words it already had then.
    fn search_hits(&self, moment: &Moment<'_>, task: &TaskScope, seeds: &mut Seeds) {
        let Some(index) = &self.search else {
            return;
        };
        let words = search_words(&task.text);
        if words.is_empty() {
            return;
        }
        let query = words.join(" ");
        let Ok(hits) = search::search(index, &query, 4 * SEARCH_FILE_HITS) else {
            return;
        };
        let mut found: Vec<(String, f64)> = Vec::new();
        for hit in hits {
            let Some(path) = hit.path else { continue };
            if found.len() >= SEARCH_FILE_HITS || !self.exists(moment, &path) {
                continue;
            }
            let share = match &moment.files {
                Files::Now => 1.0,
                _ => {
                    let then = self.tokens_then(moment, &path).unwrap_or_default();
                    let now = std::fs::read_to_string(self.snapshot.root.join(&path))
                        .map(|t| search::query_tokens(&t))
                        .unwrap_or_default();
                    let matched_now = words.iter().filter(|w| now.contains(*w)).count();
                    let matched_then = words.iter().filter(|w| then.contains(*w)).count();
                    if matched_now == 0 {
                        0.0
                    } else {
                        (matched_then as f64 / matched_now as f64).min(1.0)
                    }
                }
            };
            if share > 0.0 {
                found.push((path, hit.score * share));
            }
        }
        let best = found.iter().map(|f| f.1).fold(0.0, f64::max);
        if best <= 0.0 {
            return;
        }
        for (path, score) in &found {
            seed(
                seeds,
                path,
                SEARCH_WEIGHT * score / best,
                format!("matches the words \"{}\"", shorten(&query)),
            );
        }
    }

    /// The files of the past commits whose subjects are most like the task's words
    /// (BM25-like: the rarer a shared word then, the more it counts), each file by the
    /// share of that similarity its commits carry.
    fn similar_commits(
        &self,
        moment: &Moment<'_>,
        epoch: &Epoch,
        task: &TaskScope,
    ) -> Option<BTreeMap<String, (f64, String)>> {
        let total = f64::from(epoch.commits.max(1));
        let mut scores: HashMap<u32, f64> = HashMap::new();
        for word in search_words(&task.text) {
            let Some(list) = self.postings.get(&word) else {
                continue;
            };
            let list = Self::before(moment, list);
            if list.is_empty() {
                continue;
            }
            let idf = (total / list.len() as f64).ln();
            if idf <= 0.0 {
                continue;
            }
            for &i in list {
                *scores.entry(i).or_default() += idf;
            }
        }
        let mut ranked: Vec<(u32, f64)> = scores.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        ranked.truncate(SIMILAR_COMMITS);
        let sum: f64 = ranked.iter().map(|r| r.1).sum();
        if ranked.is_empty() || sum <= 0.0 {
            return None;
        }
        let mut chances: BTreeMap<String, (f64, String)> = BTreeMap::new();
        for &(i, score) in &ranked {
            let commit = self.commit(i);
            for &file in &commit.files {
                let path = self.path_of(file);
                if !self.exists(moment, path) {
                    continue;
                }
                let entry = chances.entry(path.to_owned()).or_insert_with(|| {
                    (
                        0.0,
                        format!(
                            "changed by a past commit with like words ({} {})",
                            &commit.id[..commit.id.len().min(8)],
                            shorten(&commit.subject)
                        ),
                    )
                });
                entry.0 += score / sum;
            }
        }
        Some(chances)
    }

    /// Files that use `path` (import it or reference its names) and files it imports.
    fn neighbours(
        &self,
        moment: &Moment<'_>,
        path: &str,
    ) -> Option<BTreeMap<String, (f64, String)>> {
        let mut chances: BTreeMap<String, (f64, String)> = BTreeMap::new();
        let users: Vec<String> = self
            .users_of(path)
            .into_iter()
            .filter(|u| u != path && self.exists(moment, u))
            .collect();
        let share = USERS_FULL as f64 / users.len().max(USERS_FULL) as f64;
        for user in users {
            chances.insert(user, (USER_CHANCE * share, format!("uses {path}")));
        }
        if let Some(record) = self.snapshot.record(path) {
            for imported in record.resolved.iter().flatten() {
                if imported != path && self.exists(moment, imported) {
                    chances
                        .entry(imported.clone())
                        .or_insert_with(|| (IMPORT_CHANCE, format!("imported by {path}")));
                }
            }
        }
        (!chances.is_empty()).then_some(chances)
    }

    /// Ownership: what the primary author of `path` changes in its area (the first
    /// directory of its path), from their newest commits there.
    fn owners(&self, moment: &Moment<'_>, path: &str) -> Option<BTreeMap<String, (f64, String)>> {
        let author = self.primary_author(moment, path);
        let place = area(path);
        let list = Self::before(moment, self.by_area.get(place).map_or(&[][..], |v| v));
        let commits: Vec<u32> = list
            .iter()
            .rev()
            .copied()
            .filter(|&i| author.is_none_or(|a| self.commit(i).email == a))
            .take(AREA_COMMITS_MAX)
            .collect();
        if commits.is_empty() {
            return None;
        }
        let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
        for &i in &commits {
            for &file in &self.commit(i).files {
                *counts.entry(file).or_default() += 1;
            }
        }
        let total = commits.len() as u32;
        let place = if place.is_empty() {
            "the top directory".to_owned()
        } else {
            format!("{place}/")
        };
        let who = author.map_or(String::new(), |a| format!(" by {a}"));
        Some(
            counts
                .into_iter()
                .map(|(file, count)| (self.path_of(file), count))
                .filter(|(other, _)| *other != path && self.exists(moment, other))
                .map(|(other, count)| {
                    (
                        other.to_owned(),
                        (
                            f64::from(count) / f64::from(total),
                            format!("changed by {count} of the {total} commits{who} under {place}"),
                        ),
                    )
                })
                .collect(),
        )
    }
}

fn shorten(text: &str) -> String {
    const SHOWN: usize = 60;
    if text.chars().count() <= SHOWN {
        text.to_owned()
    } else {
        let head: String = text.chars().take(SHOWN).collect();
        format!("{head}…")
    }
}

// ---------------------------------------------------------------------------------------
// Replay

/// Commits a replay takes by default.
pub const REPLAY_COMMITS_DEFAULT: usize = 150;
/// Examples a replay report lists per outcome.
const EXAMPLES_PER_OUTCOME: usize = 4;
/// Seed of the sample of disjoint pairs (a fixed seed: the same history, the same
/// sample).
const SAMPLE_SEED: u64 = 0x005E_ED0F_0E7E;

/// How a replay is run (the defaults are what [`replay`] does).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayOptions {
    /// The newest this many commits (non-merge, touching 1..=50 files).
    pub commits: usize,
    /// Each task names its first touched file (in path order, lock and generated files
    /// left out); when false a task is its subject line alone.
    pub name_first_file: bool,
    /// Spread through imports, users and ownership (off: history and words only). Off,
    /// the replay has no leakage from today's index.
    pub graph: bool,
    /// Scale a footprint by the length of the task's title (off: every task alike).
    pub breadth: bool,
    /// The decision threshold.
    pub threshold: f64,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            commits: REPLAY_COMMITS_DEFAULT,
            name_first_file: true,
            graph: true,
            breadth: true,
            threshold: SERIALIZE_SCORE_MIN,
        }
    }
}

/// One point of the threshold sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayPoint {
    /// Serialize when the score is at least this.
    pub threshold: f64,
    /// Pairs serialized.
    pub predicted: usize,
    /// Of those, pairs that really overlapped.
    pub true_positives: usize,
    /// `true_positives / predicted` on the evaluated pairs.
    pub precision: f64,
    /// `true_positives / overlapping`.
    pub recall: f64,
}

/// The figures of a part of the evaluated pairs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplaySlice {
    /// `older half` (both commits in the older half of the window), `newer half`, or
    /// `across` (one in each).
    pub name: String,
    /// Evaluated pairs in it.
    pub pairs: usize,
    /// Of those, overlapping.
    pub overlapping: usize,
    /// Predicted `Serialize`.
    pub predicted: usize,
    /// Predicted and overlapping.
    pub true_positives: usize,
    /// `true_positives / predicted`.
    pub precision: f64,
    /// `true_positives / overlapping`.
    pub recall: f64,
}

/// A replayed pair, shown as an example.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayExample {
    /// `true_positive`, `false_negative` or `false_positive`.
    pub outcome: String,
    /// The earlier commit: short id and subject.
    pub earlier: String,
    /// The later commit.
    pub later: String,
    /// The file each task named (earlier, later).
    pub named: (Option<String>, Option<String>),
    /// Files both commits really touched.
    pub shared: Vec<String>,
    /// The prediction.
    pub score: f64,
    /// The predicted shared files, best first.
    pub predicted_files: Vec<String>,
}

/// What a replay measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// Commits replayed (the newest eligible ones, at most the number asked for).
    pub commits: usize,
    /// True when the repository is a shallow clone (its history is cut).
    pub shallow: bool,
    /// Pairs of replayed commits.
    pub pairs: usize,
    /// Pairs that touched at least one same file (all evaluated).
    pub overlapping: usize,
    /// Disjoint pairs evaluated (a seeded sample as large as `overlapping`).
    pub disjoint_sampled: usize,
    /// Disjoint pairs in all.
    pub disjoint: usize,
    /// Evaluated pairs predicted `Serialize`.
    pub predicted: usize,
    /// Of those, pairs that really overlapped.
    pub true_positives: usize,
    /// `true_positives / predicted` on the evaluated pairs (half overlapping).
    pub precision: f64,
    /// `true_positives / overlapping`.
    pub recall: f64,
    /// Precision extrapolated to all pairs (false positives scaled from the sample to
    /// every disjoint pair).
    pub precision_all_pairs: f64,
    /// The threshold used.
    pub threshold: f64,
    /// The chance that an overlapping pair scores above a disjoint one (ties count half):
    /// how well the score ranks, whatever the threshold.
    pub auc: f64,
    /// Precision and recall at other thresholds.
    pub curve: Vec<ReplayPoint>,
    /// The same at the threshold, by where the pairs lie in the window: the newer half
    /// has the most history behind it.
    pub slices: Vec<ReplaySlice>,
    /// Some pairs of each outcome.
    pub examples: Vec<ReplayExample>,
    /// How the replay was made and what it could not avoid.
    pub notes: Vec<String>,
}

/// Replays the newest `commits` commits of the repository's history as tasks (see the
/// module docs) and measures how well their overlaps are predicted.
pub fn replay(intel: &Intel, commits: usize) -> Result<ReplayReport, IntelError> {
    replay_with(
        intel,
        &ReplayOptions {
            commits,
            ..ReplayOptions::default()
        },
    )
}

fn short_id(commit: &CommitNote) -> String {
    format!(
        "{} {}",
        &commit.id[..commit.id.len().min(8)],
        shorten(&commit.subject)
    )
}

/// The scope a person had before making `commit`: its subject and, when asked, the first
/// of its files in path order (lock, generated and vendored files left out).
fn scope_of(history: &History, commit: &CommitNote, name_first_file: bool) -> TaskScope {
    let mut paths: Vec<&str> = commit
        .files
        .iter()
        .filter_map(|&f| history.paths.get(f as usize).map(|p| p.as_str()))
        .filter(|p| files::skip_by_path(p).is_none())
        .collect();
    paths.sort_unstable();
    TaskScope {
        files: if name_first_file {
            paths
                .first()
                .map(|p| vec![(*p).to_owned()])
                .unwrap_or_default()
        } else {
            Vec::new()
        },
        symbols: Vec::new(),
        text: commit.subject.clone(),
    }
}

/// splitmix64.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        round3(a as f64 / b as f64)
    }
}

/// [`replay`] with options (ablations, another threshold).
pub fn replay_with(intel: &Intel, options: &ReplayOptions) -> Result<ReplayReport, IntelError> {
    let repo = intel.repository();
    let shallow = repo.is_shallow();
    let mut warnings = Vec::new();
    let snapshot = intel.snapshot(&mut warnings)?;
    // The history straight from git (the index's may be behind HEAD).
    let mut history = History::default();
    history.update(repo)?;
    let search = search::open(&Layout::new(intel.root()), snapshot.meta.generation).ok();
    let mut basis = Basis::new(&snapshot, &history, search);
    basis.sources = Sources {
        graph: options.graph,
        words: true,
        breadth: options.breadth,
    };

    let eligible: Vec<usize> = history
        .commits
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.merge && !c.files.is_empty() && c.files.len() <= COCHANGE_FILES_MAX)
        .map(|(i, _)| i)
        .collect();
    let window: Vec<usize> = eligible[eligible.len().saturating_sub(options.commits)..].to_vec();
    let touched: Vec<HashSet<u32>> = window
        .iter()
        .map(|&i| history.commits[i].files.iter().copied().collect())
        .collect();
    let mut overlapping = Vec::new();
    let mut disjoint = Vec::new();
    for a in 0..window.len() {
        for b in a + 1..window.len() {
            if touched[a].is_disjoint(&touched[b]) {
                disjoint.push((a, b));
            } else {
                overlapping.push((a, b));
            }
        }
    }
    let pairs = overlapping.len() + disjoint.len();
    let disjoint_total = disjoint.len();
    // A seeded partial shuffle: the first `overlapping.len()` disjoint pairs.
    let mut state = SAMPLE_SEED;
    let take = overlapping.len().min(disjoint.len());
    for k in 0..take {
        let pick = k + (next_random(&mut state) % (disjoint.len() - k) as u64) as usize;
        disjoint.swap(k, pick);
    }
    disjoint.truncate(take);

    // Footprints as of the parent of the earlier commit of each pair.
    let mut trees: HashMap<usize, Option<git2::Tree<'_>>> = HashMap::new();
    let mut cache: HashMap<(usize, usize), Footprint> = HashMap::new();
    let scopes: Vec<TaskScope> = window
        .iter()
        .map(|&i| scope_of(&history, &history.commits[i], options.name_first_file))
        .collect();
    let mut scored: Vec<((usize, usize), bool, Overlap)> = Vec::new();
    for (&(a, b), actual) in overlapping
        .iter()
        .map(|p| (p, true))
        .chain(disjoint.iter().map(|p| (p, false)))
    {
        let cutoff = window[a];
        if let std::collections::hash_map::Entry::Vacant(slot) = trees.entry(cutoff) {
            let tree = repo
                .find_commit(git2::Oid::from_str(&history.commits[cutoff].id)?)?
                .parent(0)
                .ok()
                .map(|p| p.tree())
                .transpose()?;
            slot.insert(tree);
        }
        let files = match &trees[&cutoff] {
            Some(tree) => Files::Tree(tree.clone()),
            None => Files::Empty,
        };
        let moment = Moment {
            cutoff,
            files,
            repo: Some(repo),
        };
        for task in [a, b] {
            cache
                .entry((task, cutoff))
                .or_insert_with(|| basis.footprint(&moment, &scopes[task]));
        }
        let overlap = predict_at(
            &cache[&(a, cutoff)],
            &cache[&(b, cutoff)],
            options.threshold,
        );
        scored.push(((a, b), actual, overlap));
    }

    let count = |threshold: f64| {
        let predicted = scored.iter().filter(|s| s.2.score >= threshold).count();
        let hits = scored
            .iter()
            .filter(|s| s.1 && s.2.score >= threshold)
            .count();
        (predicted, hits)
    };
    let (predicted, true_positives) = count(options.threshold);
    let false_positives = predicted - true_positives;
    let scale = if take == 0 {
        0.0
    } else {
        disjoint_total as f64 / take as f64
    };
    let precision_all_pairs = if true_positives == 0 {
        0.0
    } else {
        round3(true_positives as f64 / (true_positives as f64 + false_positives as f64 * scale))
    };
    let curve = (1..=19)
        .map(|k| {
            let threshold = round3(f64::from(k) * 0.05);
            let (predicted, hits) = count(threshold);
            ReplayPoint {
                threshold: round3(threshold),
                predicted,
                true_positives: hits,
                precision: ratio(hits, predicted),
                recall: ratio(hits, overlapping.len()),
            }
        })
        .collect();

    let positives: Vec<f64> = scored.iter().filter(|s| s.1).map(|s| s.2.score).collect();
    let mut negatives: Vec<f64> = scored.iter().filter(|s| !s.1).map(|s| s.2.score).collect();
    negatives.sort_by(f64::total_cmp);
    let mut wins = 0.0;
    for p in &positives {
        let below = negatives.partition_point(|n| n < p);
        let not_above = negatives.partition_point(|n| n <= p);
        wins += below as f64 + (not_above - below) as f64 / 2.0;
    }
    let auc = if positives.is_empty() || negatives.is_empty() {
        0.0
    } else {
        round3(wins / (positives.len() * negatives.len()) as f64)
    };
    let half = window.len() / 2;
    // Where a pair lies: 0 both in the older half, 1 both in the newer, 2 across.
    let place = |a: usize, b: usize| match (a >= half, b >= half) {
        (false, false) => 0,
        (true, true) => 1,
        _ => 2,
    };
    let slices = [(0, "older half"), (1, "newer half"), (2, "across")];
    let slices = slices
        .into_iter()
        .map(|(which, name)| {
            let part: Vec<&((usize, usize), bool, Overlap)> = scored
                .iter()
                .filter(|s| place(s.0.0, s.0.1) == which)
                .collect();
            let overlapping = part.iter().filter(|s| s.1).count();
            let predicted = part
                .iter()
                .filter(|s| s.2.decision == Decision::Serialize)
                .count();
            let true_positives = part
                .iter()
                .filter(|s| s.1 && s.2.decision == Decision::Serialize)
                .count();
            ReplaySlice {
                name: name.to_owned(),
                pairs: part.len(),
                overlapping,
                predicted,
                true_positives,
                precision: ratio(true_positives, predicted),
                recall: ratio(true_positives, overlapping),
            }
        })
        .collect();

    // Examples spread over the window (pairs are in window order).
    let mut examples = Vec::new();
    for (outcome, actual, serialized) in [
        ("true_positive", true, true),
        ("false_negative", true, false),
        ("false_positive", false, true),
    ] {
        let matching: Vec<&((usize, usize), bool, Overlap)> = scored
            .iter()
            .filter(|s| s.1 == actual && (s.2.decision == Decision::Serialize) == serialized)
            .collect();
        let picks: BTreeSet<usize> = (0..EXAMPLES_PER_OUTCOME.min(matching.len()))
            .map(|k| k * matching.len() / EXAMPLES_PER_OUTCOME.min(matching.len()))
            .collect();
        for ((a, b), _, overlap) in picks.into_iter().map(|k| matching[k]) {
            let shared: BTreeSet<String> = touched[*a]
                .intersection(&touched[*b])
                .filter_map(|&f| history.paths.get(f as usize).cloned())
                .collect();
            examples.push(ReplayExample {
                outcome: outcome.to_owned(),
                earlier: short_id(&history.commits[window[*a]]),
                later: short_id(&history.commits[window[*b]]),
                named: (
                    scopes[*a].files.first().cloned(),
                    scopes[*b].files.first().cloned(),
                ),
                shared: shared.into_iter().collect(),
                score: overlap.score,
                predicted_files: overlap.files.iter().take(5).cloned().collect(),
            });
        }
    }

    let mut notes = vec![
        "a task is its commit's subject line and, at most, the first file it touched (in path order, lock and generated files left out)".to_owned(),
        "footprints use the history strictly before the earlier commit of the pair, and only files that existed in its parent's tree".to_owned(),
        "a symbol's declarer or a search hit counts only if the word was already in the file then".to_owned(),
        "leakage: import and user links come from the index as it is now (restricted to files that existed then), and search ranks by today's text".to_owned(),
    ];
    if shallow {
        notes.push("the repository is a shallow clone: its history is cut".to_owned());
    }
    notes.extend(warnings);
    Ok(ReplayReport {
        commits: window.len(),
        shallow,
        pairs,
        overlapping: overlapping.len(),
        disjoint_sampled: take,
        disjoint: disjoint_total,
        predicted,
        true_positives,
        precision: ratio(true_positives, predicted),
        recall: ratio(true_positives, overlapping.len()),
        precision_all_pairs,
        threshold: options.threshold,
        auc,
        curve,
        slices,
        examples,
        notes,
    })
}
