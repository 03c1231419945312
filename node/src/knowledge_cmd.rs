//! `palm knowledge build|show|search|audit|decide|why|context|incidents`: the knowledge
//! map of a repository (palm-intel's `knowledge`) on the command line.
//!
//! Every command opens the repository given by `--repo` (default: the one holding the
//! current directory). `build` updates the repo index and derives the map; the others
//! read the stored map, building it first when there is none (with a warning on
//! stderr). `audit` exits 0 whatever it finds, unless `--check` asks for exit 1 when a
//! claim is flagged (for CI).

use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use crate::intel_cmd::{Bar, RepoArg, cli_error, emit, now_s, open, time_ago, warn};
use crate::output::Output;
use clap::{Args, Subcommand};
use palm_intel::knowledge::{self, Knowledge, brief, find};
use palm_intel::{Intel, Progress};
use serde_json::{Value, json};

/// `palm knowledge ...`.
#[derive(Debug, Subcommand)]
pub enum KnowledgeCommand {
    /// Derive the map: modules (packages and directories, with purpose, surface,
    /// dependencies, owners, churn, risk), decisions (ADRs, `Decision:` notes, commit
    /// messages) and incident candidates (revert, rollback, hotfix commits), all cited.
    Build(BuildArgs),
    /// One module: purpose, surface, dependencies, owners, risk, tests, decisions,
    /// incidents, each claim with its citation and whether it still holds.
    Show {
        /// A module's name or path, or a file inside it.
        module: String,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// Search modules, decisions, incidents and summaries (BM25), compact results.
    Search {
        /// Words to look for.
        query: String,
        /// At most this many results.
        #[arg(long, default_value_t = find::SEARCH_LIMIT_DEFAULT)]
        limit: usize,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// Re-read every cited line and commit; flag the claims whose evidence changed or is
    /// gone since they were made.
    Audit {
        /// Exit 1 when a claim is flagged.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// Record a decision, cited, possibly replacing an older one.
    Decide(DecideArgs),
    /// Answer a question from the decisions (active ones first), with their evidence.
    Why {
        /// The question.
        question: String,
        /// At most this many decisions.
        #[arg(long, default_value_t = find::SEARCH_LIMIT_DEFAULT)]
        limit: usize,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// A brief of one module sized for a prompt.
    Context {
        /// A module's name or path, or a file inside it.
        module: String,
        /// The brief's budget in bytes.
        #[arg(long, default_value_t = brief::BRIEF_BYTES_DEFAULT)]
        max_bytes: usize,
        #[command(flatten)]
        repo: RepoArg,
    },
    /// Incident candidates mined from revert, rollback, hotfix and outage commits.
    Incidents(RepoArg),
}

/// `palm knowledge build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Also have an agent (claude, codex, or one declared under `agents:`) write module
    /// summaries, through an `agent` leaf in observe mode; only claims whose citations
    /// resolve are kept.
    #[arg(long, value_name = "PROVIDER")]
    pub summarize: Option<String>,
    /// The modules to summarize (repeatable) [default: those with no summary, or with a
    /// claim the audit flags].
    #[arg(long = "module", value_name = "NAME")]
    pub modules: Vec<String>,
    /// At most this many summaries per build (each is one agent run).
    #[arg(long, default_value_t = 5)]
    pub limit: usize,
    /// Stop each agent run after this long.
    #[arg(long, default_value = "10m")]
    pub timeout: String,
    #[command(flatten)]
    pub repo: RepoArg,
}

/// `palm knowledge decide`.
#[derive(Debug, Args)]
pub struct DecideArgs {
    /// What was decided (and why).
    pub text: String,
    /// A short title [default: the text's first words].
    #[arg(long)]
    pub title: Option<String>,
    /// The decision this one replaces (an id `palm knowledge why` shows: D3, adr:PATH, ...);
    /// repeatable.
    #[arg(long, value_name = "ID")]
    pub supersedes: Vec<String>,
    /// Evidence: FILE:LINE, FILE:LINE-END, FILE or a commit; repeatable.
    #[arg(long, value_name = "REF")]
    pub cite: Vec<String>,
    #[command(flatten)]
    pub repo: RepoArg,
}

fn cwd() -> std::path::PathBuf {
    std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .unwrap_or_else(|_| ".".into())
}

/// The stored knowledge, built first when there is none.
fn load_or_build(
    intel: &Intel,
    warnings: &mut Vec<String>,
) -> Result<Knowledge, palm_intel::IntelError> {
    if let Some(k) = Knowledge::load(intel.root())? {
        return Ok(k);
    }
    warnings.push("no knowledge map yet: built one (palm knowledge build)".to_owned());
    let snapshot = intel.snapshot(warnings)?;
    Knowledge::build(&snapshot, intel.repository())
}

fn load(intel: &Intel, warnings: &mut Vec<String>) -> Result<Knowledge, CliError> {
    load_or_build(intel, warnings).map_err(cli_error)
}

/// A module's brief, with the checks of its riskiest file (or its first code file).
fn brief_of(
    intel: &Intel,
    k: &Knowledge,
    m: &knowledge::Module,
    max_bytes: usize,
    warnings: &mut Vec<String>,
) -> Result<brief::Brief, palm_intel::IntelError> {
    let snapshot = intel.snapshot(warnings)?;
    let file = m
        .hotspots
        .first()
        .map(|h| h.path.clone())
        .or_else(|| m.surface.first().and_then(|s| s.cite.file.clone()));
    let checks = file
        .map(|f| snapshot.checks(&f, &m.tests))
        .unwrap_or_default();
    Ok(brief::brief(k, intel.repository(), m, &checks, max_bytes))
}

/// Runs one knowledge command.
pub async fn run(ctx: &Ctx, command: KnowledgeCommand) -> CliResult {
    let out = &ctx.out;
    match command {
        KnowledgeCommand::Build(args) => {
            if args.summarize.is_none() && !args.modules.is_empty() {
                return Err(CliError::usage(
                    "invalid_input",
                    "--module names the modules to summarize: give --summarize PROVIDER too",
                ));
            }
            let timeout_ms = palm_api::verbs::duration_ms(&args.timeout, "--timeout")?;
            let intel = open(&args.repo)?;
            let mut bar = Bar::new();
            let report = intel.index(&mut bar).map_err(cli_error)?;
            bar.finish();
            warn(&report.warnings);
            let mut warnings = Vec::new();
            let snapshot = intel.snapshot(&mut warnings).map_err(cli_error)?;
            let mut k = Knowledge::build(&snapshot, intel.repository()).map_err(cli_error)?;
            let mut summaries = Vec::new();
            if let Some(provider) = &args.summarize {
                summaries = crate::knowledge_summary::summarize(
                    ctx,
                    &intel,
                    &mut k,
                    provider,
                    &args.modules,
                    args.limit,
                    timeout_ms,
                )
                .await?;
            }
            let decisions = k.decisions();
            let claims = k.claims().len();
            let value = json!({
                "summarized": summaries,
                "root": intel.root().display().to_string(),
                "head": k.map.head,
                "built_at": k.map.built_at,
                "file": k.paths.dir.join("map.json").display().to_string(),
                "counts": {
                    "modules": k.map.modules.len(),
                    "decisions": decisions.len(),
                    "records": k.records.decisions.len(),
                    "incidents": k.map.incidents.len(),
                    "summaries": k.summaries.modules.len(),
                    "claims": claims,
                },
                "modules": k.map.modules,
                "decisions": decisions,
                "incidents": k.map.incidents,
            });
            let failed = summaries.iter().any(|s| s["error"].is_string());
            emit(out, &value, &warnings, print_build)?;
            Ok(if failed { Code::Failure } else { Code::Ok })
        }
        KnowledgeCommand::Show { module, repo } => {
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let k = load(&intel, &mut warnings)?;
            let m = k.module(&module).map_err(cli_error)?;
            let decisions: Vec<knowledge::Decision> = k
                .decisions()
                .into_iter()
                .filter(|d| d.modules.contains(&m.name))
                .collect();
            let incidents: Vec<&knowledge::Incident> = k
                .map
                .incidents
                .iter()
                .filter(|i| i.modules.contains(&m.name))
                .collect();
            let claims: Vec<knowledge::AuditedClaim> = k
                .claims()
                .iter()
                .filter(|c| c.module == Some(m.name.as_str()))
                .map(|c| k.audit_claim(intel.repository(), c))
                .filter(|a| a.status != "holds")
                .collect();
            let value = json!({
                "module": m,
                "decisions": decisions,
                "incidents": incidents,
                "summary": k.summaries.modules.get(&m.name),
                "stale": claims,
            });
            emit(out, &value, &warnings, print_module)
        }
        KnowledgeCommand::Search { query, limit, repo } => {
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let k = load(&intel, &mut warnings)?;
            let hits = find::search(&k, &query, limit).map_err(cli_error)?;
            let value = json!({ "query": query, "hits": hits });
            emit(out, &value, &warnings, |out, v| {
                let hits = v["hits"].as_array().cloned().unwrap_or_default();
                if hits.is_empty() {
                    println!("{}", out.dim("nothing found"));
                }
                for h in hits {
                    println!(
                        "{} {}  {}",
                        out.dim(h["kind"].as_str().unwrap_or("")),
                        out.bold(h["id"].as_str().unwrap_or("")),
                        h["title"].as_str().unwrap_or("")
                    );
                    println!("    {}", h["snippet"].as_str().unwrap_or(""));
                    let cites = strings(&h["cites"]);
                    if !cites.is_empty() {
                        println!("    {}", out.dim(&cites.join(", ")));
                    }
                }
            })
        }
        KnowledgeCommand::Audit { check, repo } => {
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let k = load(&intel, &mut warnings)?;
            let report = k.audit(intel.repository(), intel.head());
            let flagged = !report.flagged.is_empty();
            emit(out, &report, &warnings, |out, r| {
                println!(
                    "{} claims, {} citations: {} hold, {} moved, {} flagged",
                    r.claims,
                    r.citations,
                    r.holding,
                    r.moved.len(),
                    if r.flagged.is_empty() {
                        out.green("0")
                    } else {
                        out.red(&r.flagged.len().to_string())
                    }
                );
                for claim in &r.flagged {
                    println!(
                        "{} {} {}: {}",
                        out.red(claim.status),
                        claim.kind,
                        out.bold(&claim.id),
                        claim.text
                    );
                    for c in &claim.cites {
                        let detail = match &c.verdict {
                            knowledge::cite::Verdict::Changed { now } => format!(
                                "was `{}`, now `{}`",
                                c.citation.excerpt.as_deref().unwrap_or(""),
                                now.as_deref().unwrap_or("(past the end of the file)")
                            ),
                            knowledge::cite::Verdict::Missing { reason } => reason.clone(),
                            knowledge::cite::Verdict::Moved { line } => {
                                format!("same lines, now at {line}")
                            }
                            knowledge::cite::Verdict::Holds => "holds".to_owned(),
                        };
                        println!("    {}  {}", c.cite, out.dim(&detail));
                    }
                }
                for claim in &r.moved {
                    let to: Vec<String> = claim
                        .cites
                        .iter()
                        .filter_map(|c| match c.verdict {
                            knowledge::cite::Verdict::Moved { line } => {
                                Some(format!("{} → line {line}", c.cite))
                            }
                            _ => None,
                        })
                        .collect();
                    println!(
                        "{} {} {}",
                        out.dim("moved"),
                        claim.id,
                        out.dim(&to.join(", "))
                    );
                }
                if !r.moved.is_empty() {
                    println!(
                        "{}",
                        out.dim("(moved lines read the same; `palm knowledge build` re-cites derived claims)")
                    );
                }
            })?;
            Ok(if check && flagged {
                Code::Failure
            } else {
                Code::Ok
            })
        }
        KnowledgeCommand::Decide(args) => {
            let intel = open(&args.repo)?;
            let mut warnings = Vec::new();
            let mut k = load(&intel, &mut warnings)?;
            let here = cwd();
            let cites = args
                .cite
                .iter()
                .map(|c| k.resolve_cite(intel.repository(), &here, c))
                .collect::<Result<Vec<_>, _>>()
                .map_err(cli_error)?;
            let author = intel
                .repository()
                .config()
                .ok()
                .and_then(|c| c.get_string("user.name").ok())
                .or_else(|| std::env::var("USER").ok());
            let decision = k
                .decide(
                    &args.text,
                    args.title.as_deref(),
                    cites,
                    args.supersedes.clone(),
                    now_s(),
                    author,
                )
                .map_err(cli_error)?;
            emit(out, &decision, &warnings, |out, d| {
                println!("recorded {}: {}", out.bold(&d.id), d.title);
                for c in &d.cites {
                    println!("  cites {}", c.label());
                }
                for old in &d.supersedes {
                    println!("  supersedes {old}");
                }
            })
        }
        KnowledgeCommand::Why {
            question,
            limit,
            repo,
        } => {
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let k = load(&intel, &mut warnings)?;
            let found = find::why(&k, &question, limit).map_err(cli_error)?;
            let decisions: Vec<Value> = found
                .iter()
                .map(|(d, score)| {
                    let claim = knowledge::Claim {
                        id: d.id.clone(),
                        kind: "decision",
                        module: None,
                        text: d.text.clone(),
                        cites: &d.cites,
                    };
                    let audited = k.audit_claim(intel.repository(), &claim);
                    let mut v = serde_json::to_value(d).unwrap_or(Value::Null);
                    v["evidence"] = json!(audited.status);
                    v["checked"] = serde_json::to_value(&audited.cites).unwrap_or(Value::Null);
                    v["score"] = json!(score);
                    v
                })
                .collect();
            let value = json!({ "question": question, "decisions": decisions });
            emit(out, &value, &warnings, |out, v| {
                let list = v["decisions"].as_array().cloned().unwrap_or_default();
                if list.is_empty() {
                    println!(
                        "{}",
                        out.dim(
                            "no decision answers this (`palm knowledge decide \"...\"` records one)"
                        )
                    );
                }
                for d in list {
                    let mut head = format!(
                        "{} {}",
                        out.bold(d["id"].as_str().unwrap_or("")),
                        d["title"].as_str().unwrap_or("")
                    );
                    if let Some(by) = d["superseded_by"].as_str() {
                        head.push_str(&out.dim(&format!("  (superseded by {by})")));
                    }
                    if let Some(t) = d["time"].as_i64() {
                        head.push_str(&out.dim(&format!("  {}", time_ago(now_s(), t))));
                    }
                    println!("{head}");
                    println!("    {}", d["text"].as_str().unwrap_or(""));
                    for c in d["checked"].as_array().cloned().unwrap_or_default() {
                        let status = c["status"].as_str().unwrap_or("");
                        let shown = if status == "holds" {
                            out.dim(status)
                        } else {
                            out.red(status)
                        };
                        println!("    {}  {shown}", c["cite"].as_str().unwrap_or(""));
                    }
                }
            })
        }
        KnowledgeCommand::Context {
            module,
            max_bytes,
            repo,
        } => {
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let k = load(&intel, &mut warnings)?;
            let m = k.module(&module).map_err(cli_error)?;
            let b = brief_of(&intel, &k, m, max_bytes, &mut warnings).map_err(cli_error)?;
            emit(out, &b, &warnings, |_, b| print!("{}", b.text))
        }
        KnowledgeCommand::Incidents(repo) => {
            let intel = open(&repo)?;
            let mut warnings = Vec::new();
            let k = load(&intel, &mut warnings)?;
            let value = json!({ "incidents": k.map.incidents });
            emit(out, &value, &warnings, |out, v| {
                let list = v["incidents"].as_array().cloned().unwrap_or_default();
                if list.is_empty() {
                    println!(
                        "{}",
                        out.dim("no revert, rollback, hotfix or outage commits")
                    );
                }
                for i in list {
                    println!(
                        "{} {:<8} {}  {}",
                        out.bold(
                            &i["commit"].as_str().unwrap_or("")
                                [..8.min(i["commit"].as_str().unwrap_or("").len())]
                        ),
                        i["kind"].as_str().unwrap_or(""),
                        i["subject"].as_str().unwrap_or(""),
                        out.dim(&format!(
                            "{} · {}",
                            time_ago(now_s(), i["time"].as_i64().unwrap_or(0)),
                            strings(&i["modules"]).join(", ")
                        ))
                    );
                }
            })
        }
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn print_build(out: &Output, v: &Value) {
    let c = &v["counts"];
    println!(
        "knowledge map of {}: {} modules, {} decisions ({} recorded), {} incident candidates, {} claims",
        out.bold(v["root"].as_str().unwrap_or("")),
        c["modules"],
        c["decisions"],
        c["records"],
        c["incidents"],
        c["claims"]
    );
    println!(
        "  {:<28} {:<28} {:>6} {:>8}  {:<6}  purpose",
        "MODULE", "PATH", "FILES", "LINES", "RISK"
    );
    for m in v["modules"].as_array().cloned().unwrap_or_default() {
        let purpose = m["purpose"]["text"].as_str().unwrap_or("");
        let purpose: String = purpose.chars().take(60).collect();
        println!(
            "  {:<28} {:<28} {:>6} {:>8}  {:<6}  {}",
            m["name"].as_str().unwrap_or(""),
            m["path"].as_str().unwrap_or(""),
            m["files"].as_u64().unwrap_or(0),
            m["lines"].as_u64().unwrap_or(0),
            m["risk_level"].as_str().unwrap_or(""),
            out.dim(&purpose)
        );
    }
    for s in v["summarized"].as_array().cloned().unwrap_or_default() {
        let module = s["module"].as_str().unwrap_or("");
        match s["error"].as_str() {
            Some(error) => println!("  summary of {module}: {}", out.red(error)),
            None => println!(
                "  summary of {module}: {} claims kept, {} dropped{}",
                s["kept"],
                s["dropped"],
                out.dim(&format!(" (job {})", s["job"].as_str().unwrap_or("")))
            ),
        }
    }
    println!(
        "{}",
        out.dim(&format!("written to {}", v["file"].as_str().unwrap_or("")))
    );
}

fn print_module(out: &Output, v: &Value) {
    let m = &v["module"];
    println!(
        "{}  {} ({}) · {} files, {} lines · risk {} ({})",
        out.bold(m["name"].as_str().unwrap_or("")),
        m["path"].as_str().unwrap_or(""),
        m["kind"].as_str().unwrap_or(""),
        m["files"],
        m["lines"],
        m["risk_level"].as_str().unwrap_or(""),
        m["risk"]
    );
    if let Some(p) = m["purpose"]["text"].as_str() {
        println!("  {p}");
        println!("  {}", out.dim(&cite_label(&m["purpose"]["cite"])));
    }
    println!("surface");
    for s in m["surface"].as_array().cloned().unwrap_or_default() {
        println!(
            "  {:<40} {:>3} files elsewhere  {}",
            s["signature"].as_str().unwrap_or(""),
            s["references"],
            out.dim(&cite_label(&s["cite"]))
        );
    }
    let list = |name: &str, key: &str| {
        let items = strings(&m[key]);
        if !items.is_empty() {
            println!("{name:<11} {}", items.join(", "));
        }
    };
    list("depends on", "depends_on");
    list("used by", "used_by");
    let owners: Vec<String> = m["owners"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|o| format!("{} ({})", o["name"].as_str().unwrap_or(""), o["commits"]))
        .collect();
    if !owners.is_empty() {
        println!("{:<11} {}", "owners", owners.join(", "));
    }
    println!(
        "{:<11} {} commits, {} in the last 30 days",
        "churn", m["churn"], m["touches_30d"]
    );
    for h in m["hotspots"].as_array().cloned().unwrap_or_default() {
        println!(
            "{:<11} {} {} ({})",
            "hotspot",
            h["path"].as_str().unwrap_or(""),
            h["score"],
            h["level"].as_str().unwrap_or("")
        );
    }
    list("tests", "tests");
    let decisions = v["decisions"].as_array().cloned().unwrap_or_default();
    if !decisions.is_empty() {
        println!("decisions");
        for d in decisions {
            let status = if d["superseded_by"].is_string() {
                out.dim(" (superseded)")
            } else {
                String::new()
            };
            println!(
                "  {}{status}  {}",
                out.bold(d["id"].as_str().unwrap_or("")),
                d["text"].as_str().unwrap_or("")
            );
        }
    }
    let incidents = v["incidents"].as_array().cloned().unwrap_or_default();
    if !incidents.is_empty() {
        println!("incident candidates");
        for i in incidents {
            println!(
                "  {} {}",
                i["kind"].as_str().unwrap_or(""),
                i["subject"].as_str().unwrap_or("")
            );
        }
    }
    if let Some(claims) = v["summary"]["claims"].as_array() {
        println!(
            "summary by {}",
            v["summary"]["provider"].as_str().unwrap_or("a model")
        );
        for c in claims {
            let cites: Vec<String> = c["cites"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(cite_label)
                .collect();
            println!(
                "  {}  {}",
                c["text"].as_str().unwrap_or(""),
                out.dim(&cites.join(", "))
            );
        }
    }
    for s in v["stale"].as_array().cloned().unwrap_or_default() {
        println!(
            "{} {} {}",
            out.red(s["status"].as_str().unwrap_or("")),
            s["id"].as_str().unwrap_or(""),
            out.dim("(palm knowledge audit says more)")
        );
    }
}

fn cite_label(c: &Value) -> String {
    match (c["file"].as_str(), c["commit"].as_str()) {
        (Some(file), _) => match (c["line"].as_u64(), c["end_line"].as_u64()) {
            (Some(l), Some(e)) if e > l => format!("{file}:{l}-{e}"),
            (Some(l), _) => format!("{file}:{l}"),
            _ => file.to_owned(),
        },
        (None, Some(commit)) => format!("commit {}", &commit[..commit.len().min(8)]),
        _ => String::new(),
    }
}

/// MCP's `palm_knowledge`: a module's brief (`module`) or a search (`query`) of the map
/// of the repository at `repo`, built first when there is none.
pub fn mcp_tool(
    arguments: &serde_json::Map<String, Value>,
) -> Result<palm_mcp::tools::Answer, palm_mcp::tools::ToolError> {
    use palm_mcp::tools::{Answer, ToolError};
    let failed = |e: palm_intel::IntelError| ToolError::new(e.kind(), e.to_string());
    let text = |name: &str| arguments.get(name).and_then(|v| v.as_str());
    let repo =
        text("repo").ok_or_else(|| ToolError::argument("palm_knowledge: `repo` is required"))?;
    let intel = Intel::open(std::path::Path::new(repo)).map_err(failed)?;
    let mut warnings = Vec::new();
    let k = load_or_build(&intel, &mut warnings).map_err(failed)?;
    if let Some(name) = text("module") {
        let m = k.module(name).map_err(failed)?;
        let max = arguments
            .get("max_bytes")
            .and_then(Value::as_u64)
            .unwrap_or(brief::BRIEF_BYTES_DEFAULT as u64) as usize;
        let b = brief_of(&intel, &k, m, max, &mut warnings).map_err(failed)?;
        let summary = format!(
            "brief of {} ({} bytes{})",
            b.module,
            b.bytes,
            if b.truncated { ", cut to fit" } else { "" }
        );
        let value = serde_json::to_value(&b).unwrap_or(Value::Null);
        return Ok(Answer { value, summary });
    }
    let Some(query) = text("query") else {
        return Err(ToolError::argument(
            "palm_knowledge: give `module` (a brief) or `query` (a search)",
        ));
    };
    let limit = arguments
        .get("limit")
        .and_then(Value::as_u64)
        .unwrap_or(find::SEARCH_LIMIT_DEFAULT as u64) as usize;
    let hits = find::search(&k, query, limit).map_err(failed)?;
    let summary = match hits.first() {
        Some(best) => format!("{} hits; best: {} {}", hits.len(), best.kind, best.id),
        None => "no hits".to_owned(),
    };
    Ok(Answer {
        value: json!({"query": query, "hits": hits}),
        summary,
    })
}
