//! `palm sessions ingest|list|show|forget|prune` and `palm recall`: the agents' session
//! memory (palm-sessions) on the command line, over the node's data directory.
//!
//! Ingest reads the vendors' transcript directories (the real ones under `$HOME` and
//! `$CODEX_HOME` unless `--claude-dir` / `--codex-dir` say otherwise) and never writes
//! there; forget and prune act on the archive only.

use crate::ctx::{Ctx, print};
use crate::exit::{CliError, CliResult, Code};
use crate::output::Output;
use clap::{Args, Subcommand};
use palm_actors::definition::parse_duration_ms;
use palm_sessions::{Memory, Recall, SessionsError, Sources, Vendor};
use serde_json::{Value, json};
use std::path::PathBuf;

/// `palm sessions ...`.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Archive and index what is new in the agents' transcripts (Claude, Codex).
    Ingest(IngestArgs),
    /// The sessions in the archive, the latest first.
    List,
    /// One session, read back from the archive, with the runs, patches and commits it is
    /// linked to.
    Show {
        /// The session id.
        id: String,
        /// Only the entries around this line of its file.
        #[arg(long)]
        at: Option<u64>,
    },
    /// Remove sessions from the archive and the index (the vendors' files are untouched,
    /// and never ingested again).
    Forget {
        /// Session ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// The sessions at work now, read from the vendors' files: running, idle (its turn
    /// ended, it waits for a person) or stuck (its turn is open and nothing moved).
    Live(LiveArgs),
    /// Forget the sessions whose last entry is older than a duration (e.g. 90d).
    Prune {
        /// How old.
        #[arg(long)]
        older_than: String,
    },
}

/// `palm sessions ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Claude Code's projects directory [default: ~/.claude/projects].
    #[arg(long)]
    pub claude_dir: Option<PathBuf>,
    /// Codex's home (its sessions/ and archived_sessions/) [default: $CODEX_HOME, else ~/.codex].
    #[arg(long)]
    pub codex_dir: Option<PathBuf>,
}

/// `palm sessions live`.
#[derive(Debug, Args)]
pub struct LiveArgs {
    /// Only sessions whose file was written this recently.
    #[arg(long, default_value = "24h")]
    pub within: String,
    /// An open turn with nothing written for this long is stuck.
    #[arg(long, default_value = "10m")]
    pub stuck_after: String,
    /// Claude Code's projects directory [default: ~/.claude/projects].
    #[arg(long)]
    pub claude_dir: Option<PathBuf>,
    /// Codex's home [default: $CODEX_HOME, else ~/.codex].
    #[arg(long)]
    pub codex_dir: Option<PathBuf>,
}

/// `palm recall "QUERY"`.
#[derive(Debug, Args)]
pub struct RecallArgs {
    /// What to look for (words; "quoted phrases", AND/OR/-word work).
    pub query: String,
    /// Only sessions that worked in this directory or below it.
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Only entries from this long ago or newer (e.g. 7d, 12h).
    #[arg(long)]
    pub since: Option<String>,
    /// Only this vendor's sessions: claude or codex.
    #[arg(long)]
    pub vendor: Option<String>,
    /// Most hits.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}

fn failed(err: SessionsError) -> CliError {
    if err.is_usage() {
        CliError::usage(err.kind(), err.to_string())
    } else {
        CliError::failure(err.kind(), err.to_string())
    }
}

fn memory(ctx: &Ctx) -> Result<Memory, CliError> {
    Memory::open(&ctx.data).map_err(failed)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn ago(flag: &str, text: &str) -> Result<i64, CliError> {
    let ms = parse_duration_ms(text).ok_or_else(|| {
        CliError::usage(
            "invalid_input",
            format!("{flag} `{text}` is not a duration (e.g. 12h, 7d)"),
        )
    })?;
    Ok(now_ms() - i64::try_from(ms).unwrap_or(i64::MAX / 2))
}

fn duration(flag: &str, text: &str) -> Result<i64, CliError> {
    parse_duration_ms(text)
        .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX / 2))
        .ok_or_else(|| {
            CliError::usage(
                "invalid_input",
                format!("{flag} `{text}` is not a duration (e.g. 10m, 24h)"),
            )
        })
}

/// `palm sessions live`: straight from the vendors' files, no archive needed.
fn live(ctx: &Ctx, args: LiveArgs) -> CliResult {
    let mut sources = Sources::default_locations();
    if let Some(dir) = args.claude_dir {
        sources.claude = Some(dir);
    }
    if let Some(dir) = args.codex_dir {
        sources.codex = Some(dir);
    }
    let options = palm_sessions::live::LiveOptions {
        now_ms: now_ms(),
        window_ms: duration("--within", &args.within)?,
        stuck_after_ms: duration("--stuck-after", &args.stuck_after)?,
    };
    let sessions = palm_sessions::live::live(&sources, &options);
    let count = |state: palm_sessions::live::LiveState| {
        sessions.iter().filter(|s| s.state == state).count()
    };
    let value = json!({
        "counts": {
            "running": count(palm_sessions::live::LiveState::Running),
            "idle": count(palm_sessions::live::LiveState::Idle),
            "stuck": count(palm_sessions::live::LiveState::Stuck),
        },
        "sessions": sessions,
    });
    print(ctx, &value, |out, v| {
        let list = v["sessions"].as_array().cloned().unwrap_or_default();
        if list.is_empty() {
            println!("no session wrote anything within {}", args.within);
        }
        for s in &list {
            let state = s["state"].as_str().unwrap_or("");
            let shown = match state {
                "running" => out.green(state),
                "stuck" => out.red(state),
                _ => out.dim(state),
            };
            println!(
                "{shown:<8} {}  {}  {}{}",
                out.bold(s["session"].as_str().unwrap_or_default()),
                s["vendor"].as_str().unwrap_or(""),
                s["cwd"].as_str().unwrap_or(""),
                s["title"]
                    .as_str()
                    .map(|t| format!("  {t}"))
                    .unwrap_or_default()
            );
            println!("         {}", out.dim(s["reason"].as_str().unwrap_or("")));
        }
        let c = &v["counts"];
        println!(
            "{} running · {} stuck · {} idle",
            c["running"], c["stuck"], c["idle"]
        );
    });
    Ok(Code::Ok)
}

/// `palm sessions ...`.
pub fn run(ctx: &Ctx, command: SessionsCommand) -> CliResult {
    // `live` reads the vendors' files only: it needs no archive.
    if let SessionsCommand::Live(args) = command {
        return live(ctx, args);
    }
    let memory = memory(ctx)?;
    match command {
        SessionsCommand::Live(args) => live(ctx, args),
        SessionsCommand::Ingest(args) => {
            let mut sources = Sources::default_locations();
            if let Some(dir) = args.claude_dir {
                sources.claude = Some(dir);
            }
            if let Some(dir) = args.codex_dir {
                sources.codex = Some(dir);
            }
            let report = memory.ingest(&sources).map_err(failed)?;
            let (entries, archive_bytes, index_bytes) = memory.sizes();
            let mut value = serde_json::to_value(&report).unwrap_or(Value::Null);
            value["index_entries"] = json!(entries);
            value["archive_bytes"] = json!(archive_bytes);
            value["index_bytes"] = json!(index_bytes);
            print(ctx, &value, |out, v| {
                println!(
                    "{} files ({} with something new) · {} sessions · {} messages indexed · {} archived · {} ms",
                    v["files"],
                    v["files_changed"],
                    v["sessions"],
                    v["messages"],
                    bytes(v["bytes_archived"].as_u64().unwrap_or(0)),
                    v["duration_ms"]
                );
                println!(
                    "  archive {} · index {} ({} entries)",
                    bytes(v["archive_bytes"].as_u64().unwrap_or(0)),
                    bytes(v["index_bytes"].as_u64().unwrap_or(0)),
                    v["index_entries"]
                );
                for error in v["errors"].as_array().into_iter().flatten() {
                    println!("  {}", out.red(error.as_str().unwrap_or_default()));
                }
            });
            Ok(if report.errors.is_empty() {
                Code::Ok
            } else {
                Code::Failure
            })
        }
        SessionsCommand::List => {
            let listed = memory.list().map_err(failed)?;
            let value = json!({"sessions": listed});
            print(ctx, &value, |out, v| {
                let sessions = v["sessions"].as_array().cloned().unwrap_or_default();
                if sessions.is_empty() {
                    println!("no sessions archived (palm sessions ingest)");
                }
                for s in &sessions {
                    println!(
                        "{}  {}  {}  {} messages{}{}",
                        out.bold(s["session"].as_str().unwrap_or_default()),
                        s["vendor"].as_str().unwrap_or("?"),
                        s["last"].as_str().unwrap_or("-"),
                        s["messages"],
                        s["title"]
                            .as_str()
                            .map(|t| format!("  {t}"))
                            .unwrap_or_default(),
                        if s["files_present"] == false {
                            "  (archive only)"
                        } else {
                            ""
                        }
                    );
                }
            });
            Ok(Code::Ok)
        }
        SessionsCommand::Show { id, at } => {
            let shown = memory.show(&id, at).map_err(failed)?;
            let value = serde_json::to_value(&shown).unwrap_or(Value::Null);
            print(ctx, &value, print_session);
            Ok(Code::Ok)
        }
        SessionsCommand::Forget { ids } => {
            let (forgotten, freed) = memory.forget(&ids).map_err(failed)?;
            let value = json!({"forgotten": forgotten, "bytes_freed": freed});
            print(ctx, &value, |_, v| {
                println!(
                    "forgot {} session(s); {} freed",
                    v["forgotten"].as_array().map_or(0, Vec::len),
                    bytes(v["bytes_freed"].as_u64().unwrap_or(0))
                );
            });
            Ok(Code::Ok)
        }
        SessionsCommand::Prune { older_than } => {
            let before = ago("--older-than", &older_than)?;
            let (forgotten, freed) = memory.prune(before).map_err(failed)?;
            let value = json!({"forgotten": forgotten, "bytes_freed": freed});
            print(ctx, &value, |_, v| {
                println!(
                    "pruned {} session(s); {} freed",
                    v["forgotten"].as_array().map_or(0, Vec::len),
                    bytes(v["bytes_freed"].as_u64().unwrap_or(0))
                );
            });
            Ok(Code::Ok)
        }
    }
}

/// `palm recall "QUERY"`.
pub fn recall(ctx: &Ctx, args: RecallArgs) -> CliResult {
    let vendor = match &args.vendor {
        Some(name) => Some(Vendor::parse(name).ok_or_else(|| {
            CliError::usage(
                "invalid_input",
                format!("--vendor must be claude or codex, not `{name}`"),
            )
        })?),
        None => None,
    };
    let repo = match &args.repo {
        Some(dir) => Some(
            std::fs::canonicalize(dir)
                .map_err(|e| {
                    CliError::usage("invalid_input", format!("--repo {}: {e}", dir.display()))
                })?
                .display()
                .to_string(),
        ),
        None => None,
    };
    let since_ms = match &args.since {
        Some(text) => Some(ago("--since", text)?),
        None => None,
    };
    let hits = memory(ctx)?
        .recall(&Recall {
            query: args.query.clone(),
            repo,
            since_ms,
            vendor,
            limit: args.limit,
        })
        .map_err(failed)?;
    let value = json!({"hits": hits});
    print(ctx, &value, |out, v| {
        let hits = v["hits"].as_array().cloned().unwrap_or_default();
        if hits.is_empty() {
            println!("nothing found");
        }
        for h in &hits {
            println!(
                "{} {} {}:{}  {}  {}",
                out.bold(h["session"].as_str().unwrap_or_default()),
                h["vendor"].as_str().unwrap_or_default(),
                h["file"].as_str().unwrap_or_default(),
                h["line"],
                h["timestamp"].as_str().unwrap_or("-"),
                h["role"].as_str().unwrap_or_default()
            );
            println!("    {}", h["snippet"].as_str().unwrap_or_default());
        }
    });
    Ok(Code::Ok)
}

fn print_session(out: &Output, v: &Value) {
    println!(
        "session {}  {}  {} messages{}",
        out.bold(v["session"].as_str().unwrap_or_default()),
        v["vendor"].as_str().unwrap_or("?"),
        v["messages"],
        v["title"]
            .as_str()
            .map(|t| format!("  {t}"))
            .unwrap_or_default()
    );
    for (label, field) in [
        ("cwd", "cwd"),
        ("branch", "branch"),
        ("first", "first"),
        ("last", "last"),
        ("parent", "parent"),
        ("model", "model"),
    ] {
        if let Some(text) = v[field].as_str() {
            println!("  {label}: {text}");
        }
    }
    let (read, written) = (
        v["input_tokens"].as_u64().unwrap_or(0),
        v["output_tokens"].as_u64().unwrap_or(0),
    );
    if read + written > 0 {
        println!("  tokens: {read} in, {written} out");
    }
    for f in v["files"].as_array().into_iter().flatten() {
        println!(
            "  file {} ({}){}",
            f["path"].as_str().unwrap_or_default(),
            bytes(f["bytes"].as_u64().unwrap_or(0)),
            if f["present"] == false {
                " · gone from the vendor's directory; shown from the archive"
            } else {
                ""
            }
        );
    }
    let links = &v["links"];
    for run in links["runs"].as_array().into_iter().flatten() {
        println!(
            "  run: job {} ({})",
            run["job"].as_str().unwrap_or("?"),
            run["provider"].as_str().unwrap_or("?")
        );
    }
    for tree in links["worktrees"].as_array().into_iter().flatten() {
        println!("  worktree: {}", tree["path"].as_str().unwrap_or_default());
    }
    for patch in links["patches"].as_array().into_iter().flatten() {
        println!(
            "  patch {} {}",
            patch["id"].as_str().unwrap_or_default(),
            patch["status"].as_str().unwrap_or_default()
        );
    }
    for commit in links["commits"].as_array().into_iter().flatten() {
        println!(
            "  commit {} {}",
            commit["commit"].as_str().unwrap_or_default(),
            commit["subject"].as_str().unwrap_or_default()
        );
    }
    println!();
    for e in v["entries"].as_array().into_iter().flatten() {
        let text = e["text"].as_str().unwrap_or_default();
        let shown: String = text.chars().take(2000).collect();
        println!(
            "{} {} {}{}",
            out.dim(&format!("{:>5}", e["line"])),
            e["timestamp"].as_str().unwrap_or(""),
            out.bold(e["role"].as_str().unwrap_or_default()),
            e["tool"]
                .as_str()
                .map(|t| format!(" ({t})"))
                .unwrap_or_default()
        );
        for line in shown.lines() {
            println!("      {line}");
        }
        if shown.len() < text.len() {
            println!("      … ({} bytes more)", text.len() - shown.len());
        }
    }
}

/// The node's tailing of the agents' transcripts (`sessions: {tail: 60s}` in palm.yaml):
/// an ingest now and every interval after, on a thread of its own, until the guard is
/// dropped (the node stops).
pub struct Tail {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tail {
    /// Starts tailing as `config` says, into the node on `data`.
    pub fn start(data: &std::path::Path, config: &palm_node::config::SessionsConfig) -> Tail {
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let mut sources = Sources::default_locations();
        if let Some(dir) = &config.claude_dir {
            sources.claude = Some(dir.clone());
        }
        if let Some(dir) = &config.codex_dir {
            sources.codex = Some(dir.clone());
        }
        let every = std::time::Duration::from_millis(config.every_ms);
        let (data, flag) = (data.to_owned(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("palm-sessions-tail".into())
            .spawn(move || {
                loop {
                    match Memory::open(&data).and_then(|m| m.ingest(&sources)) {
                        Ok(report) if report.files_changed > 0 => tracing::info!(
                            files = report.files_changed,
                            messages = report.messages,
                            bytes = report.bytes_archived,
                            "sessions ingested"
                        ),
                        Ok(_) => {}
                        Err(err) => tracing::warn!(%err, "sessions ingest failed"),
                    }
                    let (lock, wake) = &*flag;
                    let stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
                    let (stopped, _) = wake
                        .wait_timeout_while(stopped, every, |stopped| !*stopped)
                        .unwrap_or_else(|p| p.into_inner());
                    if *stopped {
                        return;
                    }
                }
            })
            .ok();
        Tail { stop, thread }
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let (lock, wake) = &*self.stop;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        wake.notify_all();
        // Not joined: an ingest in progress must not hold the node's shutdown, and one
        // cut short is read again by the next (the catalog and index commit together).
        drop(self.thread.take());
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}
