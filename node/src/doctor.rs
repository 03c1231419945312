//! `palm doctor`: what is wrong with this setup, and what to do about it.

use crate::control::server::{SOCKET_PATH_MAX, socket_path};
use crate::ctx::Ctx;
use crate::exit::{CliResult, Code};
use crate::node::{DataLock, LockError, lock_path, open_store_read_only};
use palm_api::client::Client;
use palm_api::protocol::Request;
use palm_node::config::default_node_name;
use serde_json::{Value, json};

struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
    hint: Option<String>,
}

fn check(name: &'static str, ok: bool, detail: impl Into<String>, hint: Option<&str>) -> Check {
    Check {
        name,
        ok,
        detail: detail.into(),
        hint: if ok { None } else { hint.map(str::to_owned) },
    }
}

fn store_checks(data: &std::path::Path, checks: &mut Vec<Check>) {
    let store = match open_store_read_only(data) {
        Ok(store) => store,
        Err(err) => {
            checks.push(Check {
                name: "store",
                ok: false,
                detail: err.message,
                hint: err.hint.or(Some(
                    "move the store aside to start fresh (its jobs are then lost to Palm)".into(),
                )),
            });
            return;
        }
    };
    let config = palm_actors::path::JobPathConfig {
        node: default_node_name(),
        ..Default::default()
    };
    // Opening replays every unfinished journal; its writes are discarded (doctor reads only).
    match palm_actors::path::JobPath::open(&*store, config, 0) {
        Err(err) => checks.push(check(
            "store",
            false,
            err.to_string(),
            Some("the store may come from a newer Palm; upgrade, or move it aside"),
        )),
        Ok((path, report)) => {
            let total: usize = path.count_jobs(&*store).unwrap_or_default().values().sum();
            checks.push(check(
                "store",
                true,
                format!(
                    "{} opens; {} flow(s), {total} job(s)",
                    store.describe(),
                    path.definitions().len()
                ),
                None,
            ));
            if !report.broken.is_empty() {
                let listed: Vec<String> = report
                    .broken
                    .iter()
                    .map(|(j, e)| format!("{j}: {e}"))
                    .collect();
                checks.push(check(
                    "journals",
                    false,
                    format!(
                        "{} job(s) cannot be replayed: {}",
                        report.broken.len(),
                        listed.join("; ")
                    ),
                    Some("their journals are left untouched; `palm inspect JOB --json` shows them"),
                ));
            }
        }
    }
}

/// Runs every check.
/// Where `program` is on the PATH (or the path itself, when it names one).
fn on_path(program: &str) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        let path = std::path::PathBuf::from(program);
        return path.is_file().then_some(path);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Coding agents: git (worktrees, patches), the agent CLIs (optional: only the runs
/// that name one need it), and every CLI declared under `agents:` (declared, so needed).
fn agent_checks(ctx: &Ctx, checks: &mut Vec<Check>) {
    let git = std::process::Command::new("git").arg("--version").output();
    checks.push(match git {
        Ok(out) if out.status.success() => check(
            "git",
            true,
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            None,
        ),
        _ => check(
            "git",
            false,
            "`git` is not on the PATH: agent runs need it for worktrees and patches",
            Some("install git"),
        ),
    });
    for program in palm_agents::spec::BUILTIN_PROVIDERS {
        let detail = match on_path(program) {
            Some(path) => format!("{program} at {}", path.display()),
            None => format!(
                "{program} is not on the PATH (only agent runs with provider {program} need it)"
            ),
        };
        checks.push(check(
            if program == "claude" {
                "agent claude"
            } else {
                "agent codex"
            },
            true,
            detail,
            None,
        ));
    }
    if let Ok(config) = crate::config::load(&ctx.data, None) {
        for agent in &config.providers.agents {
            let program = &agent.command[0];
            checks.push(match on_path(program) {
                Some(path) => check(
                    "agent",
                    true,
                    format!("{} runs {}", agent.name, path.display()),
                    None,
                ),
                None => check(
                    "agent",
                    false,
                    format!(
                        "agents.{} runs `{program}`, which is not on the PATH",
                        agent.name
                    ),
                    Some("install it, or give its full path in palm.yaml"),
                ),
            });
        }
    }
}

pub async fn run(ctx: &Ctx) -> CliResult {
    let data = &ctx.data;
    let mut checks = Vec::new();

    let exists = data.is_dir();
    let writable = exists && {
        let probe = data.join(format!(".palm-doctor-{}", std::process::id()));
        let ok = std::fs::write(&probe, b"").is_ok();
        let _ = std::fs::remove_file(&probe);
        ok
    };
    checks.push(if !exists {
        check(
            "data directory",
            true,
            format!(
                "{} does not exist yet; the first command creates it",
                data.display()
            ),
            None,
        )
    } else {
        check(
            "data directory",
            writable,
            format!(
                "{} {}",
                data.display(),
                if writable {
                    "is writable"
                } else {
                    "is not writable"
                }
            ),
            Some("fix its permissions, or pass another --data DIR / PALM_HOME"),
        )
    });

    let socket = socket_path(data);
    let length = socket.as_os_str().len();
    checks.push(check(
        "socket path",
        length <= SOCKET_PATH_MAX,
        format!(
            "{} ({length} bytes, limit {SOCKET_PATH_MAX})",
            socket.display()
        ),
        Some("use a shorter data directory path"),
    ));

    let node = match Client::connect(&socket).await {
        Some(mut client) => client
            .call(&Request::Ping)
            .await
            .ok()
            .and_then(|r| r.result),
        None => None,
    };
    match &node {
        Some(info) => checks.push(check(
            "node",
            true,
            format!("node {} (pid {}) serves this directory", info["node"].as_str().unwrap_or("?"), info["pid"]),
            None,
        )),
        None if exists => match DataLock::acquire(data) {
            Ok(lock) => {
                if socket.exists() {
                    checks.push(check("node", true, "no node running (a stale socket file will be replaced at boot)", None));
                } else {
                    checks.push(check("node", true, "no node running; commands boot one in-process", None));
                }
                if crate::node::has_store(data) {
                    store_checks(data, &mut checks);
                } else {
                    checks.push(check("store", true, "no store yet; the first command creates it", None));
                }
                drop(lock);
            }
            Err(LockError::Busy { pid }) => checks.push(check(
                "node",
                false,
                format!(
                    "{} is locked by pid {} but nothing answers on {}",
                    lock_path(data).display(),
                    pid.map_or("?".into(), |p| p.to_string()),
                    socket.display()
                ),
                Some("the node may be starting, hung or stuck; if that pid is not a palm node, stop it"),
            )),
            Err(LockError::Io(message)) => checks.push(check("node", false, message, Some("check the data directory's permissions"))),
        },
        None => {}
    }

    let shell = std::process::Command::new("sh")
        .arg("-c")
        .arg("true")
        .status();
    checks.push(check(
        "shell",
        matches!(shell, Ok(status) if status.success()),
        "`sh -c` runs `run` effects",
        Some("install a POSIX shell as `sh` on the PATH"),
    ));

    agent_checks(ctx, &mut checks);

    let now = crate::genome::now_ms();
    checks.push(check(
        "clock",
        now > 1_600_000_000_000,
        format!("wall clock at {now} ms since the epoch"),
        Some("set the system clock: timers and leases use it"),
    ));

    let ok = checks.iter().all(|c| c.ok);
    if ctx.out.json {
        let list: Vec<Value> = checks
            .iter()
            .map(|c| json!({"check": c.name, "ok": c.ok, "detail": c.detail, "hint": c.hint}))
            .collect();
        ctx.out.json(&json!({"ok": ok, "checks": list}));
    } else {
        for c in &checks {
            let mark = if c.ok {
                ctx.out.status("success")
            } else {
                ctx.out.status("failure")
            };
            println!("{mark:>9}  {:<15} {}", c.name, c.detail);
            if let Some(hint) = &c.hint {
                println!(
                    "{:>9}  {:<15} {}",
                    "",
                    "",
                    ctx.out.dim(&format!("hint: {hint}"))
                );
            }
        }
    }
    Ok(if ok { Code::Ok } else { Code::Failure })
}
