//! The knowledge map of a repository (`palm knowledge`): what each part is for, what was
//! decided and what went wrong, every claim cited as file:line or commit, so a claim can
//! be checked against the code it rests on.
//!
//! It works with no model. `build` derives the modules from the repo index (`modules`),
//! and mines decisions (ADRs, `Decision:` notes, commit messages) and incident candidates
//! (revert, rollback, hotfix commits) (`mining`). People add decision records of their own
//! (`decide`, which may supersede an older one); a model may add module summaries through
//! an agent leaf, and only cited claims whose citations resolve are kept. `audit`
//! re-reads every cited line and flags the claims whose evidence changed since
//! (`cite`). `search` and `why` answer from it (`find`); `context` sizes a brief of one
//! module for a prompt (`brief`).
//!
//! Files, under `<repo>/.palm/knowledge/` (Palm's own directory, never committed):
//! - `map.json` — what `build` derived; replaced whole by each build;
//! - `decisions.json` — decision records people wrote; builds never touch them;
//! - `summaries.json` — module summaries a model wrote, kept until replaced.
//!
//! Each is written to a temporary file and renamed, so a reader sees an old or a new one.

pub mod brief;
pub mod cite;
pub mod find;
pub mod mining;
pub mod modules;

use crate::error::IntelError;
use crate::query::Snapshot;
use cite::{Citation, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bumped when a stored shape changes; a map of another format is rebuilt.
pub const MAP_FORMAT: u32 = 1;
/// A decision record's text is at most this long (bytes).
pub const DECISION_BYTES_MAX: usize = 8 * 1024;
/// Most citations one decision record carries.
pub const DECISION_CITES_MAX: usize = 32;
/// How long `decide` waits for another writer of `decisions.json` (ms).
const LOCK_WAIT_MS: u64 = 5_000;
/// A lock file older than this is left over from a crash (ms).
const LOCK_STALE_MS: u64 = 30_000;

/// The purpose a module states about itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Purpose {
    /// Its words.
    pub text: String,
    /// Where they are.
    pub cite: Citation,
}

/// A symbol a module declares, ranked by use elsewhere.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Surface {
    /// Its name.
    pub name: String,
    /// function, struct, class, …
    pub kind: String,
    /// Its declaration, cut.
    pub signature: String,
    /// Files in other modules that reference the name.
    pub references: u32,
    /// Its declaration line.
    pub cite: Citation,
}

/// Someone who changed a module.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Owner {
    /// Author name.
    pub name: String,
    /// Commits of theirs touching the module.
    pub commits: u32,
}

/// A risky file of a module.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModuleRisk {
    /// The file.
    pub path: String,
    /// Its risk score (0–100).
    pub score: u32,
    /// low, medium, high.
    pub level: String,
}

/// A commit, briefly.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CommitRef {
    /// Full id.
    pub id: String,
    /// Seconds since the epoch.
    pub time: i64,
    /// Author name.
    pub author: String,
    /// First line.
    pub subject: String,
}

/// A part of the repository.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Module {
    /// Its name (the package's, or its path).
    pub name: String,
    /// Its directory, repository-relative (`.` for the root).
    pub path: String,
    /// cargo, npm, go, python, maven, gradle or directory.
    pub kind: String,
    /// Files in it (not in a module inside it).
    pub files: usize,
    /// Lines of its indexed files.
    pub lines: u64,
    /// Code files per language.
    pub languages: BTreeMap<String, usize>,
    /// What it says it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<Purpose>,
    /// Its most used symbols.
    pub surface: Vec<Surface>,
    /// Modules it imports from.
    pub depends_on: Vec<String>,
    /// Modules that import from it.
    pub used_by: Vec<String>,
    #[serde(skip)]
    pub(crate) depends_index: Vec<usize>,
    /// Who changes it most.
    pub owners: Vec<Owner>,
    /// Commits that touched it.
    pub churn: u32,
    /// Of those, in the last 30 days.
    pub touches_30d: u32,
    /// Its riskiest file's score.
    pub risk: u32,
    /// low, medium or high.
    pub risk_level: String,
    /// Its riskiest files.
    pub hotspots: Vec<ModuleRisk>,
    /// Its test files.
    pub tests: Vec<String>,
    /// Its newest commits.
    pub recent: Vec<CommitRef>,
    /// Decisions citing its files.
    pub decisions: Vec<String>,
    /// Incident candidates touching its files.
    pub incidents: Vec<String>,
}

/// A decision: mined (ADR, note, commit) or written by a person (`decide`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `D3` (written), `adr:PATH`, `note:PATH#DIGEST` or `commit:SHORT`.
    pub id: String,
    /// adr, note, commit or record.
    pub source: String,
    /// A title.
    pub title: String,
    /// What was decided.
    pub text: String,
    /// When (seconds since the epoch), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<i64>,
    /// Who, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// The status line an ADR gives itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adr_status: Option<String>,
    /// active or superseded.
    pub status: String,
    /// Its evidence.
    pub cites: Vec<Citation>,
    /// The decisions this one replaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supersedes: Vec<String>,
    /// The decision that replaced this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    /// Files a commit decision changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// Modules its citations or files fall in.
    #[serde(default)]
    pub modules: Vec<String>,
}

/// A commit that announces a revert, rollback, hotfix or outage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// `incident:SHORT`.
    pub id: String,
    /// revert, rollback, hotfix or incident.
    pub kind: String,
    /// The commit.
    pub commit: String,
    /// Seconds since the epoch.
    pub time: i64,
    /// Its author.
    pub author: String,
    /// Its subject.
    pub subject: String,
    /// The commit a revert undoes, when its message says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverts: Option<String>,
    /// Files it changed.
    pub files: Vec<String>,
    /// Modules those fall in.
    pub modules: Vec<String>,
    /// Always false: mined from a subject, never confirmed by a person.
    pub confirmed: bool,
    /// The commit.
    pub cites: Vec<Citation>,
}

/// One claim of a model-written summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SummaryClaim {
    /// What it says.
    pub text: String,
    /// Its evidence (at least one, every one resolved when stored).
    pub cites: Vec<Citation>,
}

/// A claim a summary proposed and Palm did not keep.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DroppedClaim {
    /// What it said.
    pub text: String,
    /// Why it was dropped.
    pub reason: String,
}

/// A module summary written by a model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The module.
    pub module: String,
    /// Who wrote it (`claude`, `codex`, …) and in which job.
    pub provider: String,
    /// The job that ran the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// When (seconds since the epoch).
    pub written_at: i64,
    /// HEAD then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// Its cited claims.
    pub claims: Vec<SummaryClaim>,
    /// Claims not kept, with the reason.
    pub dropped: Vec<DroppedClaim>,
}

/// What `build` derived.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Map {
    /// `MAP_FORMAT`.
    pub format: u32,
    /// When (seconds since the epoch).
    pub built_at: i64,
    /// HEAD then.
    pub head: Option<String>,
    /// The modules, by path.
    pub modules: Vec<Module>,
    /// Mined decisions.
    pub decisions: Vec<Decision>,
    /// Incident candidates, newest first.
    pub incidents: Vec<Incident>,
}

/// `decisions.json`: the records people wrote.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Records {
    /// `MAP_FORMAT`.
    pub format: u32,
    /// The number of the next record (`D<next>`).
    pub next: u64,
    /// Every record, superseded ones included.
    pub decisions: Vec<Decision>,
}

/// `summaries.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Summaries {
    /// `MAP_FORMAT`.
    pub format: u32,
    /// By module name.
    pub modules: BTreeMap<String, Summary>,
}

/// A claim, wherever it lives, for audits and briefs.
#[derive(Clone, Debug, Serialize)]
pub struct Claim<'a> {
    /// `purpose:MODULE`, `surface:MODULE:NAME`, a decision's or incident's id, or
    /// `summary:MODULE#N`.
    pub id: String,
    /// purpose, surface, decision, incident or summary.
    pub kind: &'static str,
    /// The module it is about, when one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<&'a str>,
    /// What it says.
    pub text: String,
    /// Its evidence.
    pub cites: &'a [Citation],
}

/// Where the files live.
#[derive(Clone, Debug)]
pub struct Paths {
    /// `<repo>/.palm/knowledge`.
    pub dir: PathBuf,
}

impl Paths {
    /// For a working tree.
    pub fn new(root: &Path) -> Paths {
        Paths {
            dir: root.join(".palm").join("knowledge"),
        }
    }
    fn map(&self) -> PathBuf {
        self.dir.join("map.json")
    }
    fn records(&self) -> PathBuf {
        self.dir.join("decisions.json")
    }
    fn summaries(&self) -> PathBuf {
        self.dir.join("summaries.json")
    }
    fn lock(&self) -> PathBuf {
        self.dir.join("decisions.lock")
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), IntelError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| IntelError::io(dir, e))?;
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| IntelError::Knowledge(format!("cannot encode {}: {e}", path.display())))?;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| IntelError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| IntelError::io(path, e))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, IntelError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| IntelError::Corrupt {
                path: path.to_owned(),
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(IntelError::io(path, e)),
    }
}

/// The files of the working tree the map looks at: those git tracks or would add,
/// minus vendored and generated ones.
fn visible_paths(repo: &git2::Repository) -> Result<Vec<String>, IntelError> {
    Ok(crate::files::candidates(repo)?
        .into_iter()
        .filter(|p| crate::files::skip_by_path(p).is_none())
        .collect())
}

/// Derives the map from the index (and the files the citations read).
pub fn derive(snapshot: &Snapshot, repo: &git2::Repository) -> Result<Map, IntelError> {
    let paths = visible_paths(repo)?;
    let (mut modules, of) = modules::cluster(snapshot, &paths);
    modules::describe(snapshot, &mut modules, &of, &paths);
    let mut decisions = Vec::new();
    let mut incidents = Vec::new();
    mining::adrs(snapshot, &paths, &mut decisions);
    mining::notes(snapshot, &paths, &mut decisions);
    mining::commits(snapshot, repo, &mut decisions, &mut incidents);
    let module_of =
        |file: &str| -> Option<String> { of.get(file).map(|&m| modules[m].name.clone()) };
    for decision in &mut decisions {
        decision.modules = decision_modules(decision, &module_of);
    }
    for incident in &mut incidents {
        let set: BTreeSet<String> = incident.files.iter().filter_map(|f| module_of(f)).collect();
        incident.modules = set.into_iter().collect();
    }
    let mut map = Map {
        format: MAP_FORMAT,
        built_at: snapshot.now,
        head: snapshot.meta.head.clone(),
        modules,
        decisions,
        incidents,
    };
    link(&mut map);
    Ok(map)
}

fn decision_modules(
    decision: &Decision,
    module_of: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let set: BTreeSet<String> = decision
        .cites
        .iter()
        .filter_map(|c| c.file.as_deref())
        .chain(decision.files.iter().map(String::as_str))
        .filter_map(module_of)
        .collect();
    set.into_iter().collect()
}

/// Lists on each module the decisions and incidents that concern it.
fn link(map: &mut Map) {
    for module in &mut map.modules {
        module.decisions = map
            .decisions
            .iter()
            .filter(|d| d.modules.contains(&module.name))
            .map(|d| d.id.clone())
            .collect();
        module.incidents = map
            .incidents
            .iter()
            .filter(|i| i.modules.contains(&module.name))
            .map(|i| i.id.clone())
            .collect();
    }
}

/// The knowledge of one repository, loaded.
pub struct Knowledge {
    /// The working tree.
    pub root: PathBuf,
    /// Where its files live.
    pub paths: Paths,
    /// What `build` derived.
    pub map: Map,
    /// What people decided.
    pub records: Records,
    /// What models summarized.
    pub summaries: Summaries,
}

/// A claim's citation, checked.
#[derive(Clone, Debug, Serialize)]
pub struct CheckedCite {
    /// `file:line` or `commit …`.
    pub cite: String,
    /// The citation as stored.
    pub citation: Citation,
    /// What became of it.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// A claim with the verdict of each citation.
#[derive(Clone, Debug, Serialize)]
pub struct AuditedClaim {
    /// The claim's id.
    pub id: String,
    /// Its kind.
    pub kind: &'static str,
    /// Its module.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// What it says.
    pub text: String,
    /// holds, moved (all holding, some at other lines), changed or missing (the worst).
    pub status: &'static str,
    /// Each citation's verdict.
    pub cites: Vec<CheckedCite>,
}

/// `palm knowledge audit`.
#[derive(Clone, Debug, Serialize)]
pub struct AuditReport {
    /// Claims checked.
    pub claims: usize,
    /// Citations checked.
    pub citations: usize,
    /// Claims whose evidence reads as it did.
    pub holding: usize,
    /// Claims whose evidence moved to other lines but reads the same.
    pub moved: Vec<AuditedClaim>,
    /// Claims whose evidence changed or is gone.
    pub flagged: Vec<AuditedClaim>,
    /// HEAD when the map was built, and now.
    pub built_at_head: Option<String>,
    /// See `built_at_head`.
    pub head: Option<String>,
}

impl Knowledge {
    /// Loads what is stored; `None` when no map was built yet (or it is of another format).
    pub fn load(root: &Path) -> Result<Option<Knowledge>, IntelError> {
        let paths = Paths::new(root);
        let Some(map) = read_json::<Map>(&paths.map()).or_else(|e| match e {
            // A map of an older shape is rebuilt by the caller.
            IntelError::Corrupt { .. } => Ok(None),
            other => Err(other),
        })?
        else {
            return Ok(None);
        };
        if map.format != MAP_FORMAT {
            return Ok(None);
        }
        let records = read_json::<Records>(&paths.records())?.unwrap_or_default();
        let summaries = read_json::<Summaries>(&paths.summaries())?.unwrap_or_default();
        Ok(Some(Knowledge {
            root: root.to_owned(),
            paths,
            map,
            records,
            summaries,
        }))
    }

    /// Derives the map afresh and stores it; records and summaries are kept.
    pub fn build(snapshot: &Snapshot, repo: &git2::Repository) -> Result<Knowledge, IntelError> {
        let map = derive(snapshot, repo)?;
        let paths = Paths::new(&snapshot.root);
        write_json(&paths.map(), &map)?;
        let records = read_json::<Records>(&paths.records())?.unwrap_or_default();
        let summaries = read_json::<Summaries>(&paths.summaries())?.unwrap_or_default();
        Ok(Knowledge {
            root: snapshot.root.clone(),
            paths,
            map,
            records,
            summaries,
        })
    }

    /// The module named `name`, or whose path is `name`, or that holds the file `name`.
    pub fn module(&self, name: &str) -> Result<&Module, IntelError> {
        let wanted = name.trim_end_matches('/');
        let wanted = wanted.strip_prefix("./").unwrap_or(wanted);
        if let Some(m) = self
            .map
            .modules
            .iter()
            .find(|m| m.name == wanted || m.path == wanted)
        {
            return Ok(m);
        }
        if let Some(m) = self
            .map
            .modules
            .iter()
            .filter(|m| m.path == "." || wanted.starts_with(&format!("{}/", m.path)))
            .max_by_key(|m| if m.path == "." { 0 } else { m.path.len() })
            .filter(|_| self.root.join(wanted).exists())
        {
            return Ok(m);
        }
        let mut near: Vec<&str> = self
            .map
            .modules
            .iter()
            .map(|m| m.name.as_str())
            .filter(|n| n.contains(wanted) || wanted.contains(*n))
            .collect();
        near.truncate(5);
        Err(IntelError::Knowledge(if near.is_empty() {
            format!(
                "no module `{name}` (`palm knowledge build` lists them; {} modules)",
                self.map.modules.len()
            )
        } else {
            format!("no module `{name}`; did you mean {}?", near.join(", "))
        }))
    }

    /// Every decision: mined and written, with supersession applied.
    pub fn decisions(&self) -> Vec<Decision> {
        let mut all: Vec<Decision> = self
            .map
            .decisions
            .iter()
            .chain(&self.records.decisions)
            .cloned()
            .collect();
        let replaced: Vec<(String, String)> = self
            .records
            .decisions
            .iter()
            .flat_map(|d| d.supersedes.iter().map(|old| (old.clone(), d.id.clone())))
            .collect();
        for (old, new) in replaced {
            if let Some(d) = all.iter_mut().find(|d| d.id == old) {
                d.status = "superseded".into();
                d.superseded_by = Some(new);
            }
        }
        all
    }

    /// Every standing claim: purposes, surfaces, active decisions, incidents and summary
    /// claims.
    pub fn claims(&self) -> Vec<Claim<'_>> {
        let mut out = Vec::new();
        for module in &self.map.modules {
            if let Some(purpose) = &module.purpose {
                out.push(Claim {
                    id: format!("purpose:{}", module.name),
                    kind: "purpose",
                    module: Some(&module.name),
                    text: purpose.text.clone(),
                    cites: std::slice::from_ref(&purpose.cite),
                });
            }
            for s in &module.surface {
                out.push(Claim {
                    id: format!("surface:{}:{}", module.name, s.name),
                    kind: "surface",
                    module: Some(&module.name),
                    text: format!("{} declares {} `{}`", module.name, s.kind, s.name),
                    cites: std::slice::from_ref(&s.cite),
                });
            }
        }
        // A retired decision is history: what its lines read now does not matter.
        let retired: BTreeSet<&str> = self
            .records
            .decisions
            .iter()
            .flat_map(|d| d.supersedes.iter().map(String::as_str))
            .collect();
        for d in self
            .map
            .decisions
            .iter()
            .chain(&self.records.decisions)
            .filter(|d| !retired.contains(d.id.as_str()) && d.status != "superseded")
        {
            out.push(Claim {
                id: d.id.clone(),
                kind: "decision",
                module: d.modules.first().map(String::as_str),
                text: d.text.clone(),
                cites: &d.cites,
            });
        }
        for i in &self.map.incidents {
            out.push(Claim {
                id: i.id.clone(),
                kind: "incident",
                module: i.modules.first().map(String::as_str),
                text: i.subject.clone(),
                cites: &i.cites,
            });
        }
        for (module, summary) in &self.summaries.modules {
            for (n, claim) in summary.claims.iter().enumerate() {
                out.push(Claim {
                    id: format!("summary:{module}#{}", n + 1),
                    kind: "summary",
                    module: Some(module),
                    text: claim.text.clone(),
                    cites: &claim.cites,
                });
            }
        }
        out
    }

    /// Re-reads every citation (`palm knowledge audit`).
    pub fn audit(&self, repo: &git2::Repository, head: Option<String>) -> AuditReport {
        let claims = self.claims();
        let mut report = AuditReport {
            claims: claims.len(),
            citations: 0,
            holding: 0,
            moved: Vec::new(),
            flagged: Vec::new(),
            built_at_head: self.map.head.clone(),
            head,
        };
        for claim in claims {
            let audited = self.audit_claim(repo, &claim);
            report.citations += audited.cites.len();
            match audited.status {
                "holds" => report.holding += 1,
                "moved" => report.moved.push(audited),
                _ => report.flagged.push(audited),
            }
        }
        report
    }

    /// One claim's citations, checked.
    pub fn audit_claim(&self, repo: &git2::Repository, claim: &Claim<'_>) -> AuditedClaim {
        let cites: Vec<CheckedCite> = claim
            .cites
            .iter()
            .map(|c| CheckedCite {
                cite: c.label(),
                citation: c.clone(),
                verdict: cite::check(&self.root, repo, c),
            })
            .collect();
        let status = if cites
            .iter()
            .any(|c| matches!(c.verdict, Verdict::Missing { .. }))
        {
            "missing"
        } else if cites
            .iter()
            .any(|c| matches!(c.verdict, Verdict::Changed { .. }))
        {
            "changed"
        } else if cites
            .iter()
            .any(|c| matches!(c.verdict, Verdict::Moved { .. }))
        {
            "moved"
        } else {
            "holds"
        };
        AuditedClaim {
            id: claim.id.clone(),
            kind: claim.kind,
            module: claim.module.map(str::to_owned),
            text: claim.text.clone(),
            status,
            cites,
        }
    }

    /// Resolves `FILE[:LINE[-END]]` or a commit id to a fingerprinted citation; the
    /// error says what does not resolve.
    pub fn resolve_cite(
        &self,
        repo: &git2::Repository,
        cwd: &Path,
        text: &str,
    ) -> Result<Citation, IntelError> {
        let bad = |why: String| IntelError::Knowledge(format!("--cite {text}: {why}"));
        let looks_like_commit =
            text.len() >= 7 && text.len() <= 40 && text.chars().all(|c| c.is_ascii_hexdigit());
        if looks_like_commit && !self.root.join(text).exists() {
            let object = repo
                .revparse_single(text)
                .map_err(|_| bad("no such commit in this repository".into()))?;
            let commit = object
                .peel_to_commit()
                .map_err(|_| bad("not a commit".into()))?;
            return Ok(Citation::commit(
                &commit.id().to_string(),
                commit.summary().ok().flatten().unwrap_or(""),
            ));
        }
        let (file, range) = cite::parse_reference(text);
        let relative = crate::query::relative_path(&self.root, cwd, Path::new(&file))
            .map_err(|e| bad(e.to_string()))?;
        let lines = cite::read_lines(&self.root, &relative).map_err(bad)?;
        match range {
            Some((line, end)) => cite::cite_lines(&relative, &lines, line, end)
                .map_err(|e| IntelError::Knowledge(format!("--cite {e}"))),
            None => Ok(Citation {
                file: Some(relative),
                ..Citation::default()
            }),
        }
    }

    /// Writes a decision record (`palm knowledge decide`): `D<n>`, citing `cites`,
    /// replacing the decisions in `supersedes` (which must exist and not be replaced
    /// already). Serialized with any other writer by a lock file.
    pub fn decide(
        &mut self,
        text: &str,
        title: Option<&str>,
        cites: Vec<Citation>,
        supersedes: Vec<String>,
        now: i64,
        author: Option<String>,
    ) -> Result<Decision, IntelError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(IntelError::Knowledge("a decision needs its text".into()));
        }
        if text.len() > DECISION_BYTES_MAX {
            return Err(IntelError::Knowledge(format!(
                "the decision is {} bytes; at most {DECISION_BYTES_MAX}",
                text.len()
            )));
        }
        if cites.len() > DECISION_CITES_MAX {
            return Err(IntelError::Knowledge(format!(
                "{} citations; at most {DECISION_CITES_MAX}",
                cites.len()
            )));
        }
        let _lock = Lock::take(&self.paths.lock())?;
        // Re-read under the lock: another writer may have added records since load.
        self.records = read_json::<Records>(&self.paths.records())?.unwrap_or_default();
        let all = self.decisions();
        for old in &supersedes {
            match all.iter().find(|d| &d.id == old) {
                None => {
                    return Err(IntelError::Knowledge(format!(
                        "--supersedes {old}: no such decision (`palm knowledge why` lists them)"
                    )));
                }
                Some(d) if d.superseded_by.is_some() => {
                    return Err(IntelError::Knowledge(format!(
                        "--supersedes {old}: already superseded by {}",
                        d.superseded_by.as_deref().unwrap_or("?")
                    )));
                }
                Some(_) => {}
            }
        }
        let number = self.records.next.max(1);
        let mut decision = Decision {
            id: format!("D{number}"),
            source: "record".into(),
            title: title
                .map(str::to_owned)
                .unwrap_or_else(|| first_words(text, 80)),
            text: text.to_owned(),
            time: Some(now),
            author,
            status: "active".into(),
            cites,
            supersedes,
            ..Decision::default()
        };
        decision.modules = {
            let modules = &self.map.modules;
            let module_of = |file: &str| -> Option<String> {
                modules
                    .iter()
                    .filter(|m| m.path == "." || file.starts_with(&format!("{}/", m.path)))
                    .max_by_key(|m| if m.path == "." { 0 } else { m.path.len() })
                    .map(|m| m.name.clone())
            };
            decision_modules(&decision, &module_of)
        };
        self.records.format = MAP_FORMAT;
        self.records.next = number + 1;
        self.records.decisions.push(decision.clone());
        write_json(&self.paths.records(), &self.records)?;
        Ok(decision)
    }

    /// Stores a module's summary, replacing the one before.
    pub fn store_summary(&mut self, summary: Summary) -> Result<(), IntelError> {
        self.summaries.format = MAP_FORMAT;
        self.summaries
            .modules
            .insert(summary.module.clone(), summary);
        write_json(&self.paths.summaries(), &self.summaries)
    }
}

fn first_words(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or(text);
    cite::excerpt(&line.chars().take(max).collect::<String>())
}

/// An exclusive lock on `decisions.json` (a file created with `create_new`).
struct Lock {
    path: PathBuf,
}

impl Lock {
    fn take(path: &Path) -> Result<Lock, IntelError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| IntelError::io(dir, e))?;
        let started = std::time::Instant::now();
        loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(_) => {
                    return Ok(Lock {
                        path: path.to_owned(),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let stale = std::fs::metadata(path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age.as_millis() as u64 > LOCK_STALE_MS);
                    if stale {
                        let _ = std::fs::remove_file(path);
                        continue;
                    }
                    if started.elapsed().as_millis() as u64 > LOCK_WAIT_MS {
                        return Err(IntelError::Knowledge(format!(
                            "{} is held by another writer (remove it if none is running)",
                            path.display()
                        )));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(IntelError::io(path, e)),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
