//! `palm mcp install --client claude|codex [--write]`: the entry that registers Palm
//! with an MCP client, printed or merged into the client's config.
//!
//! Merging never touches unrelated configuration: a new entry is added beside the
//! existing ones; an existing `palm` entry that is the same is left alone, one that
//! differs is refused unless `--force` (which replaces that entry only). Claude Code's
//! `.mcp.json` is JSON (re-serialized, so key order and spacing may change; every value
//! is kept); Codex's `config.toml` is edited as text — the `[mcp_servers.palm]` table is
//! appended or replaced in place — so comments and formatting elsewhere survive.

use crate::args::McpInstallArgs;
use crate::exit::{CliError, CliResult, Code};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The server name registered with clients.
pub const SERVER_NAME: &str = "palm";

/// What a client should run.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The `palm` executable (absolute).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_owned();
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .unwrap_or_else(|_| path.to_owned())
}

/// The launch line for this executable and data directory.
pub fn launch(data: &Path) -> Launch {
    let command = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "palm".to_owned());
    Launch {
        command,
        args: vec![
            "mcp".to_owned(),
            "--data".to_owned(),
            absolute(data).display().to_string(),
        ],
    }
}

fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| format!("\"{text}\""))
}

/// The `.mcp.json` entry of Claude Code.
pub fn claude_entry(launch: &Launch) -> Value {
    json!({"type": "stdio", "command": launch.command, "args": launch.args, "env": {}})
}

/// The `[mcp_servers.palm]` table of Codex.
pub fn codex_table(launch: &Launch) -> String {
    let args: Vec<String> = launch.args.iter().map(|a| toml_string(a)).collect();
    format!(
        "[mcp_servers.{SERVER_NAME}]\ncommand = {}\nargs = [{}]\n",
        toml_string(&launch.command),
        args.join(", ")
    )
}

/// Merges the palm entry into a `.mcp.json` text; `Ok(None)` when it is already there.
pub fn merge_claude(
    existing: Option<&str>,
    launch: &Launch,
    force: bool,
) -> Result<Option<String>, String> {
    let mut document: Value = match existing.map(str::trim) {
        None | Some("") => json!({}),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            format!("is not valid JSON ({e}); fix it or pass --config with another file")
        })?,
    };
    let Some(root) = document.as_object_mut() else {
        return Err("is not a JSON object".to_owned());
    };
    let servers = root.entry("mcpServers").or_insert_with(|| json!({}));
    let Some(servers) = servers.as_object_mut() else {
        return Err("has an `mcpServers` that is not an object".to_owned());
    };
    let entry = claude_entry(launch);
    match servers.get(SERVER_NAME) {
        Some(current) if *current == entry => return Ok(None),
        Some(current) if !force => {
            return Err(format!(
                "already registers a different `{SERVER_NAME}` server ({current}); pass --force to replace that entry"
            ));
        }
        _ => {}
    }
    servers.insert(SERVER_NAME.to_owned(), entry);
    serde_json::to_string_pretty(&document)
        .map(|text| Some(format!("{text}\n")))
        .map_err(|e| e.to_string())
}

/// Whether a TOML line opens the `[mcp_servers.palm]` table (any quoting, spacing).
fn opens_palm_table(line: &str) -> bool {
    let compact: String = line
        .split('#')
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '"' && *c != '\'')
        .collect();
    compact == format!("[mcp_servers.{SERVER_NAME}]")
}

/// Merges the palm table into a Codex `config.toml` text; `Ok(None)` when it is there.
pub fn merge_codex(
    existing: Option<&str>,
    launch: &Launch,
    force: bool,
) -> Result<Option<String>, String> {
    let table = codex_table(launch);
    let text = existing.unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let Some(start) = lines.iter().position(|l| opens_palm_table(l)) else {
        // Other spellings (inline tables, dotted keys) would clash with an appended table:
        // refuse rather than write an invalid file.
        let mentions = lines.iter().any(|l| {
            let l = l.split('#').next().unwrap_or_default();
            l.contains("mcp_servers") && l.contains(SERVER_NAME)
        });
        if mentions {
            return Err(format!(
                "defines `mcp_servers.{SERVER_NAME}` in a form this command does not edit; add the table below by hand:\n{table}"
            ));
        }
        let mut merged = text.to_owned();
        if !merged.is_empty() && !merged.ends_with('\n') {
            merged.push('\n');
        }
        if !merged.is_empty() {
            merged.push('\n');
        }
        merged.push_str(&table);
        return Ok(Some(merged));
    };
    // The table runs to the next table header.
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.trim_start().starts_with('['))
        .map_or(lines.len(), |i| start + 1 + i);
    let current: Vec<&str> = lines[start..end]
        .iter()
        .copied()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let wanted: Vec<&str> = table.lines().collect();
    if current == wanted {
        return Ok(None);
    }
    if !force {
        return Err(format!(
            "already has a different [mcp_servers.{SERVER_NAME}] table; pass --force to replace it"
        ));
    }
    let mut merged: Vec<String> = lines[..start].iter().map(|l| (*l).to_owned()).collect();
    merged.extend(wanted.iter().map(|l| (*l).to_owned()));
    if end < lines.len() {
        merged.push(String::new());
        merged.extend(lines[end..].iter().map(|l| (*l).to_owned()));
    }
    Ok(Some(format!("{}\n", merged.join("\n"))))
}

fn home() -> Result<PathBuf, CliError> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| CliError::usage("install", "HOME is not set; pass --config FILE"))
}

/// Runs the command.
pub fn run(data: &Path, json: bool, args: McpInstallArgs) -> CliResult {
    let launch = launch(data);
    let command_line: Vec<String> = std::iter::once(launch.command.as_str())
        .chain(launch.args.iter().map(String::as_str))
        .map(shell_word)
        .collect();
    let command_line = command_line.join(" ");
    let (config, snippet, cli) = match args.client.as_str() {
        "claude" => (
            args.config
                .clone()
                .unwrap_or_else(|| PathBuf::from(".mcp.json")),
            serde_json::to_string_pretty(
                &json!({"mcpServers": {SERVER_NAME: claude_entry(&launch)}}),
            )
            .unwrap_or_default(),
            format!("claude mcp add --scope project {SERVER_NAME} -- {command_line}"),
        ),
        _ => (
            match args.config.clone() {
                Some(path) => path,
                None => home()?.join(".codex").join("config.toml"),
            },
            codex_table(&launch),
            format!("codex mcp add {SERVER_NAME} -- {command_line}"),
        ),
    };
    if !args.write {
        if json {
            print_json(&json!({
                "client": args.client, "config": config.display().to_string(),
                "snippet": snippet, "command": cli,
                "launch": {"command": launch.command, "args": launch.args},
            }));
        } else {
            println!("# add to {}:", config.display());
            println!("{}", snippet.trim_end());
            println!();
            println!("# or let the client do it:");
            println!("{cli}");
            eprintln!(
                "palm: `palm mcp install --client {} --write` merges it into {}",
                args.client,
                config.display()
            );
        }
        return Ok(Code::Ok);
    }
    let existing = match std::fs::read_to_string(&config) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(CliError::failure(
                "install",
                format!("cannot read {}: {e}", config.display()),
            ));
        }
    };
    let merged = match args.client.as_str() {
        "claude" => merge_claude(existing.as_deref(), &launch, args.force),
        _ => merge_codex(existing.as_deref(), &launch, args.force),
    }
    .map_err(|why| CliError::usage("install", format!("{} {why}", config.display())))?;
    let outcome = match merged {
        None => "already registered",
        Some(text) => {
            if let Some(parent) = config.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    CliError::failure(
                        "install",
                        format!("cannot create {}: {e}", parent.display()),
                    )
                })?;
            }
            // Write beside and rename, so a crash never leaves a half-written config.
            let temporary = config.with_extension("palm-tmp");
            std::fs::write(&temporary, text)
                .and_then(|()| std::fs::rename(&temporary, &config))
                .map_err(|e| {
                    CliError::failure("install", format!("cannot write {}: {e}", config.display()))
                })?;
            if existing.is_some() {
                "updated"
            } else {
                "created"
            }
        }
    };
    if json {
        print_json(
            &json!({"client": args.client, "config": config.display().to_string(), "outcome": outcome}),
        );
    } else {
        println!(
            "{outcome} {} ({SERVER_NAME} → {command_line})",
            config.display()
        );
    }
    Ok(Code::Ok)
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        Launch {
            command: "/usr/bin/palm".into(),
            args: vec!["mcp".into(), "--data".into(), "/home/me/.palm".into()],
        }
    }

    #[test]
    fn claude_entries_merge_beside_others() {
        let existing = r#"{"mcpServers": {"other": {"command": "x"}}, "keep": 1}"#;
        let merged = merge_claude(Some(existing), &launch(), false)
            .expect("merge")
            .expect("changed");
        let value: Value = serde_json::from_str(&merged).expect("json");
        assert_eq!(value["keep"], 1);
        assert_eq!(value["mcpServers"]["other"]["command"], "x");
        assert_eq!(value["mcpServers"]["palm"]["command"], "/usr/bin/palm");
        assert_eq!(merge_claude(Some(&merged), &launch(), false), Ok(None));
        let mut other = launch();
        other.command = "/opt/palm".into();
        let refused = merge_claude(Some(&merged), &other, false).expect_err("refused");
        assert!(refused.contains("--force"), "{refused}");
        assert!(merge_claude(Some(&merged), &other, true).is_ok());
        assert!(merge_claude(Some("[1]"), &launch(), false).is_err());
        assert!(merge_claude(Some("{oops"), &launch(), false).is_err());
        assert!(merge_claude(None, &launch(), false).expect("new").is_some());
    }

    #[test]
    fn codex_tables_append_and_replace_in_place() {
        let existing = "# my config\nmodel = \"o3\"\n\n[mcp_servers.other]\ncommand = \"x\"\n";
        let merged = merge_codex(Some(existing), &launch(), false)
            .expect("merge")
            .expect("changed");
        assert!(merged.starts_with(existing), "{merged}");
        assert!(merged.contains("[mcp_servers.palm]\ncommand = \"/usr/bin/palm\"\nargs = [\"mcp\", \"--data\", \"/home/me/.palm\"]\n"));
        assert_eq!(merge_codex(Some(&merged), &launch(), false), Ok(None));
        let mut other = launch();
        other.command = "/opt/palm".into();
        assert!(merge_codex(Some(&merged), &other, false).is_err());
        let forced = merge_codex(Some(&format!("{merged}\n[after]\nx = 1\n")), &other, true)
            .expect("merge")
            .expect("changed");
        assert!(forced.contains("command = \"/opt/palm\""), "{forced}");
        assert!(!forced.contains("/usr/bin/palm"), "{forced}");
        assert!(forced.contains("[mcp_servers.other]") && forced.contains("[after]\nx = 1"));
        let inline = "mcp_servers = { palm = { command = \"x\" } }\n";
        assert!(merge_codex(Some(inline), &launch(), false).is_err());
    }
}
