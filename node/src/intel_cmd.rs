//! `palm index`, `symbols`, `callers`, `search`, `neighbors`, `risk`, `changed-now`,
//! `explain`, `handoff`: repo intelligence (palm-intel) on the command line.
//!
//! Each command opens the repository given by `--repo` (default: the one holding the
//! current directory), answers from `<repo>/.palm/index/` (building it when missing,
//! rebuilding it when corrupt, with a warning on stderr) and prints either one JSON
//! document (`--json`) or a readable form. Library errors map to exit 2 when they are
//! about the input (not a repository, a path outside it, an unknown file, ...), else 1.

use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use crate::output::Output;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use palm_intel::query::{self, Neighbor};
use palm_intel::{Intel, IntelError, Progress};
use serde::Serialize;
use serde_json::Value;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// `--repo PATH`, shared by every repo-intelligence command.
#[derive(Debug, Args)]
pub struct RepoArg {
    /// The repository (any path inside its working tree) [default: the current directory].
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
}

/// The repo-intelligence commands (flattened into the top level of `palm`).
#[derive(Debug, Subcommand)]
pub enum IntelCommand {
    /// Build or update the repository's index (<repo>/.palm/index/).
    Index(RepoArg),
    /// The symbols a file declares: kind, name, signature, doc comment, lines.
    Symbols {
        /// The file.
        file: PathBuf,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// Files and lines that reference a name.
    Callers {
        /// The name (a function, type, method, ...).
        name: String,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// Ranked search over paths, symbols, doc comments and commit subjects (BM25).
    Search {
        /// Words to look for.
        query: String,
        /// At most this many hits.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// Files that change together with FILE (co-change in the git history).
    Neighbors {
        /// The file.
        file: PathBuf,
        /// At most this many neighbours.
        #[arg(long, default_value_t = query::NEIGHBORS_DEFAULT)]
        limit: usize,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// How risky changing FILE is: a score, a level and the reasons.
    Risk {
        /// The file.
        file: PathBuf,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// Working-tree changes with their risk and the neighbours not yet touched.
    ChangedNow(RepoArg),
    /// Everything about FILE: what it declares, who uses it, what changes with it, its
    /// tests, recent commits, risk and the checks to run.
    Explain {
        /// The file.
        file: PathBuf,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// Conflict-aware scheduling: predict whether two tasks will touch the same files
    /// (`predict`), or measure the predictor on the repo's own history (`replay`).
    #[command(subcommand)]
    Conflicts(ConflictsCommand),
    /// What changed since BASE (default: where HEAD left main/master, else HEAD), the
    /// risky spots and the checks to run.
    Handoff {
        /// A commit, branch or tag.
        base: Option<String>,
        #[command(flatten)]
        repo: RepoArg,
    },
}

/// `palm conflicts ...`.
#[derive(Debug, Subcommand)]
pub enum ConflictsCommand {
    /// Two tasks' predicted footprints (files, with why) and whether to run them side by
    /// side or one after the other.
    Predict {
        /// The first task: its title (the first line decides how broad it looks).
        first: String,
        /// The second task.
        second: String,
        /// A file the first task names (repeatable).
        #[arg(long = "first-file")]
        first_files: Vec<String>,
        /// A file the second task names (repeatable).
        #[arg(long = "second-file")]
        second_files: Vec<String>,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// Replays the newest commits as tasks (each knowing its subject and one file) and
    /// reports how well overlaps are predicted: precision, recall, AUC.
    Replay {
        /// Commits to replay.
        #[arg(long, default_value_t = palm_intel::overlap::REPLAY_COMMITS_DEFAULT)]
        commits: usize,
        #[command(flatten)]
        repo: RepoArg,
    },
}

pub(crate) fn cli_error(err: IntelError) -> CliError {
    let message = err.to_string();
    let hint = match &err {
        IntelError::NotARepository { .. } => {
            Some("pass --repo PATH or run inside a git working tree")
        }
        IntelError::Busy { .. } => Some("wait for the other `palm index` to finish"),
        _ => None,
    };
    let error = if err.is_usage() {
        CliError::usage(err.kind(), message)
    } else {
        CliError::failure(err.kind(), message)
    };
    match hint {
        Some(hint) => error.with_hint(hint),
        None => error,
    }
}

pub(crate) fn open(repo: &RepoArg) -> Result<Intel, CliError> {
    let path = match &repo.repo {
        Some(path) => path.clone(),
        None => std::env::current_dir()?,
    };
    Intel::open(&path).map_err(cli_error)
}

pub(crate) fn file_arg(intel: &Intel, file: &Path) -> Result<String, CliError> {
    let cwd = std::env::current_dir()?
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from("."));
    intel.relative(&cwd, file).map_err(cli_error)
}

pub(crate) fn warn(warnings: &[String]) {
    for warning in warnings {
        eprintln!("palm: warning: {warning}");
    }
}

pub(crate) fn emit<T: Serialize>(
    out: &Output,
    report: &T,
    warnings: &[String],
    human: impl Fn(&Output, &T),
) -> CliResult {
    warn(warnings);
    if out.json {
        let mut value =
            serde_json::to_value(report).map_err(|e| CliError::failure("json", e.to_string()))?;
        if !warnings.is_empty()
            && let Value::Object(map) = &mut value
        {
            map.entry("warnings").or_insert_with(|| {
                Value::Array(warnings.iter().cloned().map(Value::String).collect())
            });
        }
        out.json(&value);
    } else {
        human(out, report);
    }
    Ok(Code::Ok)
}

/// A progress bar on stderr when it is a terminal.
pub(crate) struct Bar {
    bar: Option<ProgressBar>,
}

impl Bar {
    pub(crate) fn new() -> Bar {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg:<9} [{bar:30}] {pos}/{len} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(100));
            bar
        });
        Bar { bar }
    }
}

impl Progress for Bar {
    fn phase(&mut self, name: &str, total: u64) {
        if let Some(bar) = &self.bar {
            // A phase of unknown length gets a spinner, not a full-looking bar.
            let template = if total == 0 {
                "{spinner} {msg:<9} {elapsed}"
            } else {
                "{spinner} {msg:<9} [{bar:30}] {pos}/{len} {elapsed}"
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.set_message(name.to_owned());
            bar.set_position(0);
            bar.set_length(total);
        }
    }

    fn advance(&mut self, steps: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(steps);
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.finish();
    }
}

pub(crate) fn time_ago(now: i64, then: i64) -> String {
    let seconds = (now - then).max(0);
    match seconds {
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} days ago", s / 86_400),
    }
}

pub(crate) fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn print_neighbors(out: &Output, neighbors: &[Neighbor], indent: &str) {
    if neighbors.is_empty() {
        println!("{indent}{}", out.dim("none"));
    }
    for n in neighbors {
        println!(
            "{indent}{}  {} commits together, weight {:.2}, last {}",
            n.path,
            n.count,
            n.weight,
            time_ago(now_s(), n.last_together)
        );
    }
}

/// Runs one repo-intelligence command.
pub fn run(ctx: &Ctx, command: IntelCommand) -> CliResult {
    let out = &ctx.out;
    match command {
        IntelCommand::Index(repo) => {
            let intel = open(&repo)?;
            let mut bar = Bar::new();
            let report = intel.index(&mut bar).map_err(cli_error)?;
            bar.finish();
            // The report carries its warnings; stderr gets them in both output modes.
            warn(&report.warnings);
            emit(out, &report, &[], |out, r| {
                println!(
                    "indexed {} in {:.2} s: {} files ({} parsed, {} reused, {} removed)",
                    out.bold(&r.root),
                    r.seconds,
                    r.files,
                    r.parsed,
                    r.reused,
                    r.removed
                );
                let languages: Vec<String> = r
                    .languages
                    .iter()
                    .map(|(l, n)| format!("{l} {n}"))
                    .collect();
                println!("  languages  {}", languages.join(", "));
                if r.line_based > 0 {
                    println!(
                        "  line-based {} files (no grammar: symbols from headings and keywords)",
                        r.line_based
                    );
                }
                println!(
                    "  skipped    {} ({} binary, {} vendored, {} generated, {} oversized)",
                    r.skipped.total,
                    r.skipped.binary,
                    r.skipped.vendored,
                    r.skipped.generated,
                    r.skipped.oversized
                );
                println!(
                    "  content    {} symbols, {} imports ({} resolved to files)",
                    r.symbols, r.imports, r.imports_resolved
                );
                println!(
                    "  history    {} commits ({} new), {} co-change edges",
                    r.commits, r.new_commits, r.cochange_edges
                );
            })
        }
        IntelCommand::Symbols { file, repo } => {
            let intel = open(&repo)?;
            let path = file_arg(&intel, &file)?;
            let report = intel.symbols(&path).map_err(cli_error)?;
            let mut warnings = Vec::new();
            if report.parser == palm_intel::extract::Parser::LineBased {
                warnings.push(format!(
                    "{path}: no grammar for this language; symbols come from the line-based fallback"
                ));
            }
            emit(out, &report, &warnings, |out, r| {
                println!(
                    "{}  {} ({}), {} lines, {} symbols",
                    out.bold(&r.path),
                    r.language.name(),
                    r.parser.name(),
                    r.lines,
                    r.symbols.len()
                );
                for s in &r.symbols {
                    let name = match &s.parent {
                        Some(parent) => format!("{parent}::{}", s.name),
                        None => s.name.clone(),
                    };
                    println!(
                        "  {:>5}-{:<5} {:<9} {}  {}",
                        s.line,
                        s.end_line,
                        s.kind.name(),
                        out.bold(&name),
                        out.dim(&s.signature)
                    );
                    if let Some(doc) = &s.doc
                        && let Some(first) = doc.lines().next()
                    {
                        println!("{:23}{}", "", out.dim(first));
                    }
                }
            })
        }
        IntelCommand::Callers { name, repo } => {
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let snapshot = intel.snapshot(&mut warnings).map_err(cli_error)?;
            let report = snapshot.callers(&name);
            emit(out, &report, &warnings, |out, r| {
                if r.definitions.is_empty() && r.references.is_empty() {
                    println!(
                        "{}",
                        out.dim(&format!("no definition of or reference to `{}`", r.name))
                    );
                    return;
                }
                for d in &r.definitions {
                    println!("defined  {}:{}  {}", d.path, d.line, d.kind.name());
                }
                println!("{} references in {} files", r.references.len(), r.files);
                for site in &r.references {
                    println!("  {}:{}  {}", site.path, site.line, out.dim(&site.text));
                }
            })
        }
        IntelCommand::Search { query, limit, repo } => {
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let report = intel
                .search(&query, limit, &mut warnings)
                .map_err(cli_error)?;
            emit(out, &report, &warnings, |out, r| {
                if r.hits.is_empty() {
                    println!("{}", out.dim("no hits"));
                }
                for hit in &r.hits {
                    match (&hit.path, &hit.commit) {
                        (Some(path), _) => println!("{:>7.3}  {}", hit.score, out.bold(path)),
                        (None, Some(commit)) => println!(
                            "{:>7.3}  commit {}",
                            hit.score,
                            out.bold(&commit.chars().take(12).collect::<String>())
                        ),
                        _ => {}
                    }
                    println!("         {}", hit.snippet);
                    for s in &hit.symbols {
                        println!("         {} {} (line {})", s.kind, s.name, s.line);
                    }
                }
            })
        }
        IntelCommand::Neighbors { file, limit, repo } => {
            let intel = open(&repo)?;
            let path = file_arg(&intel, &file)?;
            let mut warnings = Vec::new();
            let snapshot = intel.snapshot(&mut warnings).map_err(cli_error)?;
            let report = snapshot.neighbors(&path, limit).map_err(cli_error)?;
            emit(out, &report, &warnings, |out, r| {
                println!(
                    "{}  changed in {} commits; changes together with:",
                    out.bold(&r.path),
                    r.commits
                );
                print_neighbors(out, &r.neighbors, "  ");
            })
        }
        IntelCommand::Risk { file, repo } => {
            let intel = open(&repo)?;
            let path = file_arg(&intel, &file)?;
            let mut warnings = Vec::new();
            let snapshot = intel.snapshot(&mut warnings).map_err(cli_error)?;
            let report = snapshot.risk(&path).map_err(cli_error)?;
            emit(out, &report, &warnings, print_risk)
        }
        IntelCommand::ChangedNow(repo) => {
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let snapshot = intel.snapshot(&mut warnings).map_err(cli_error)?;
            let report = snapshot
                .changed_now(intel.repository())
                .map_err(cli_error)?;
            emit(out, &report, &warnings, |out, r| {
                if r.changes.is_empty() {
                    println!("{}", out.dim("no changes in the working tree"));
                }
                for change in &r.changes {
                    println!(
                        "{:<10} {}  risk {} ({}){}",
                        change.status,
                        out.bold(&change.path),
                        change.risk.score,
                        change.risk.level,
                        if change.staged { ", staged" } else { "" }
                    );
                    if !change.neighbors_untouched.is_empty() {
                        println!("           usually changes with (untouched):");
                        print_neighbors(out, &change.neighbors_untouched, "             ");
                    }
                }
            })
        }
        IntelCommand::Explain { file, repo } => {
            let intel = open(&repo)?;
            let path = file_arg(&intel, &file)?;
            let mut warnings = Vec::new();
            let snapshot = intel.snapshot(&mut warnings).map_err(cli_error)?;
            let report = intel.explain(&snapshot, &path).map_err(cli_error)?;
            emit(out, &report, &warnings, |out, r| {
                println!(
                    "{}  {} ({}), {} lines",
                    out.bold(&r.path),
                    r.language.name(),
                    r.parser.name(),
                    r.lines
                );
                println!("declares");
                if r.declares.is_empty() {
                    println!("  {}", out.dim("nothing"));
                }
                for s in &r.declares {
                    println!("  {:>5}  {:<9} {}", s.line, s.kind.name(), s.name);
                }
                println!("imports");
                for i in &r.imports {
                    match &i.resolved {
                        Some(file) => println!("  {:>5}  {} → {}", i.line, i.module, file),
                        None => println!("  {:>5}  {}", i.line, out.dim(&i.module)),
                    }
                }
                println!("used by");
                if r.used_by.is_empty() {
                    println!("  {}", out.dim("no file found"));
                }
                for u in &r.used_by {
                    let how = match (u.imports, u.names.is_empty()) {
                        (true, true) => "imports it".to_owned(),
                        (true, false) => format!("imports it; uses {}", u.names.join(", ")),
                        (false, _) => format!("uses {}", u.names.join(", ")),
                    };
                    println!("  {}  {}", u.path, out.dim(&how));
                }
                println!("changes with");
                print_neighbors(out, &r.cochanges, "  ");
                println!("tests");
                if r.tests.is_empty() {
                    println!("  {}", out.dim("none found"));
                }
                for t in &r.tests {
                    println!("  {t}");
                }
                println!("recent commits");
                for c in &r.recent_commits {
                    println!(
                        "  {}  {}  {}  {}",
                        &c.id[..c.id.len().min(12)],
                        time_ago(now_s(), c.time),
                        c.author,
                        c.subject
                    );
                }
                print!("risk ");
                print_risk(out, &r.risk);
                println!("checks");
                for check in &r.checks {
                    println!("  {check}");
                }
            })
        }
        IntelCommand::Conflicts(ConflictsCommand::Predict {
            first,
            second,
            first_files,
            second_files,
            repo,
        }) => {
            use palm_intel::overlap::{TaskScope, predict};
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let snapshot = intel.snapshot(&mut warnings).map_err(cli_error)?;
            let scope = |text: &str, files: &[String]| -> Result<TaskScope, CliError> {
                let files = files
                    .iter()
                    .map(|f| file_arg(&intel, Path::new(f)))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(TaskScope {
                    files,
                    ..TaskScope::from_text(text)
                })
            };
            let scopes = [scope(&first, &first_files)?, scope(&second, &second_files)?];
            let footprints = snapshot.footprints(&scopes);
            let overlap = predict(&footprints[0], &footprints[1]);
            let report = serde_json::json!({
                "decision": overlap.decision,
                "score": overlap.score,
                "files": overlap.files,
                "evidence": overlap.evidence,
                "first": footprints[0],
                "second": footprints[1],
            });
            emit(out, &report, &warnings, |out, r| {
                println!(
                    "{}  (overlap score {:.2})",
                    out.bold(r["decision"].as_str().unwrap_or_default()),
                    r["score"].as_f64().unwrap_or(0.0)
                );
                for file in r["files"].as_array().into_iter().flatten().take(10) {
                    println!("  both may touch {}", file.as_str().unwrap_or_default());
                }
                for line in r["evidence"].as_array().into_iter().flatten().take(10) {
                    println!("  {}", out.dim(line.as_str().unwrap_or_default()));
                }
            })
        }
        IntelCommand::Conflicts(ConflictsCommand::Replay { commits, repo }) => {
            let intel = open(&repo)?;
            let report = palm_intel::overlap::replay(&intel, commits).map_err(cli_error)?;
            emit(out, &report, &[], |out, r| {
                println!(
                    "{} commits, {} pairs: {} overlapping, {} disjoint sampled",
                    r.commits, r.pairs, r.overlapping, r.disjoint_sampled
                );
                println!(
                    "{}  precision {:.3}  recall {:.3}  AUC {:.3}  (threshold {:.2})",
                    out.bold("serialize"),
                    r.precision,
                    r.recall,
                    r.auc,
                    r.threshold
                );
                for note in &r.notes {
                    println!("  {}", out.dim(note));
                }
            })
        }
        IntelCommand::Handoff { base, repo } => {
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let snapshot = intel.snapshot(&mut warnings).map_err(cli_error)?;
            let report = snapshot
                .handoff(intel.repository(), base.as_deref())
                .map_err(cli_error)?;
            emit(out, &report, &warnings, |out, r| {
                println!(
                    "since {} ({}): {} commits, {} files changed",
                    out.bold(&r.base),
                    &r.base_commit[..r.base_commit.len().min(12)],
                    r.commits.len(),
                    r.changed.len()
                );
                for c in &r.commits {
                    println!("  {}  {}", &c.id[..c.id.len().min(12)], c.subject);
                }
                println!("changed");
                for f in &r.changed {
                    println!(
                        "  {:<10} {}  +{} -{}  risk {} ({})",
                        f.status, f.path, f.added, f.removed, f.risk.score, f.risk.level
                    );
                }
                println!("risky");
                if r.risky.is_empty() {
                    println!("  {}", out.dim("nothing at medium or high risk"));
                }
                for risk in &r.risky {
                    let reasons: Vec<&str> =
                        risk.reasons.iter().map(|x| x.detail.as_str()).collect();
                    println!(
                        "  {}  {} ({}): {}",
                        risk.path,
                        risk.score,
                        risk.level,
                        reasons.join("; ")
                    );
                }
                if !r.untouched_neighbors.is_empty() {
                    println!("usually changed with these, but untouched");
                    for n in &r.untouched_neighbors {
                        println!("  {}  (with {}, {} commits)", n.path, n.with, n.count);
                    }
                }
                println!("checks");
                for check in &r.checks {
                    println!("  {check}");
                }
            })
        }
    }
}

fn print_risk(out: &Output, r: &query::RiskReport) {
    println!("{}  {} ({})", out.bold(&r.path), r.score, r.level);
    for reason in &r.reasons {
        println!(
            "  +{:>4.1}  {:<9} {}",
            reason.points, reason.factor, reason.detail
        );
    }
}
