//! Node configuration: `DIR/palm.yaml` (or `palm up --config FILE`).
//!
//! Known keys: `name`, `seats`, `capabilities` (offered by the node itself), `places`
//! (workloads the node spawns or adopts; the format is `palm_actors::place::spec`'s) and
//! `link` (tunnel timings and bounds: `keepalive_ms`, `idle_timeout_ms`,
//! `backoff_ms_min`, `backoff_ms_max`, `frame_len_max`, `requests_in_flight_max`) and
//! `providers` (`file: {root: DIR}`, `http: {ca: FILE}`, and providers of the node's own:
//! `NAME: {command: [PROGRAM, ARG..] | url: URL, schema, timeout, env, cwd, headers,
//! description}`) and `retention` (how long ended jobs are kept:
//! `retention: 7d` for their journals, or `retention: {journal: 7d, summary: 90d}`, where
//! `summary` may be `forever`) and `webhooks` (`NAME: {secret_env: VAR}` or
//! `{secret_file: FILE}`: the secret with which a sender signs its posts to
//! `/v1/webhooks/NAME`, or which it carries, instead of an API token; see palm-web's
//! `auth`).

use crate::exit::CliError;
use palm_actors::definition::yaml::{self, Value};
use std::path::{Path, PathBuf};

/// Settings read from the configuration file.
#[derive(Clone, Debug, Default)]
pub struct NodeConfig {
    /// Node name.
    pub name: Option<String>,
    /// Seats.
    pub seats: Option<usize>,
    /// Capabilities the node offers by itself.
    pub capabilities: Vec<String>,
    /// Places the node spawns or adopts at boot.
    pub places: Vec<palm_actors::place::PlaceSpec>,
    /// Tunnel timings and bounds.
    pub link: palm_transport::LinkConfig,
    /// Provider settings.
    pub providers: crate::genome::provider::ProviderSettings,
    /// Lease on a claimed effect (ms); a holder that goes silent loses it after this.
    pub lease_ms: Option<u64>,
    /// How long ended jobs are kept (`retention:`).
    pub retention: Option<palm_actors::path::retention::Retention>,
    /// The session memory's tailing (`sessions:`).
    pub sessions: Option<SessionsConfig>,
    /// Webhooks whose senders sign their posts (`webhooks:`), by name.
    pub webhooks: Vec<(String, WebhookSecret)>,
}

/// Where a webhook's secret is kept: never in `palm.yaml` itself, which is read by
/// anyone who may read the node's configuration.
#[derive(Clone, Debug, PartialEq)]
pub enum WebhookSecret {
    /// An environment variable of `palm up`.
    Env(String),
    /// A file, its content less one trailing newline.
    File(PathBuf),
}

impl WebhookSecret {
    /// The secret's bytes; the error says where it should have been.
    pub fn read(&self) -> Result<Vec<u8>, String> {
        let secret = match self {
            WebhookSecret::Env(var) => std::env::var_os(var)
                .map(|v| v.into_encoded_bytes())
                .ok_or_else(|| format!("secret_env `{var}` is not set"))?,
            WebhookSecret::File(path) => {
                let mut bytes = std::fs::read(path)
                    .map_err(|e| format!("cannot read secret_file {}: {e}", path.display()))?;
                if bytes.ends_with(b"\n") {
                    bytes.pop();
                    if bytes.ends_with(b"\r") {
                        bytes.pop();
                    }
                }
                bytes
            }
        };
        if secret.is_empty() {
            return Err(match self {
                WebhookSecret::Env(var) => format!("secret_env `{var}` is empty"),
                WebhookSecret::File(path) => format!("secret_file {} is empty", path.display()),
            });
        }
        Ok(secret)
    }
}

/// `webhooks: {NAME: {secret_env: VAR} | {secret_file: FILE}}`.
fn webhooks(
    value: &palm_actors::definition::yaml::Spanned,
) -> Result<Vec<(String, WebhookSecret)>, (palm_actors::definition::Span, String)> {
    let Value::Map(hooks) = &value.value else {
        return Err((
            value.span,
            "`webhooks` must be a mapping like `{push: {secret_env: GITHUB_WEBHOOK_SECRET}}`"
                .into(),
        ));
    };
    let mut out = Vec::new();
    for (name, settings) in hooks {
        let hook = name.as_str().unwrap_or_default();
        let Value::Map(fields) = &settings.value else {
            return Err((
                settings.span,
                format!(
                    "`webhooks.{hook}` must be `{{secret_env: VAR}}` or `{{secret_file: FILE}}`"
                ),
            ));
        };
        let mut secret = None;
        for (field, setting) in fields {
            let text = setting.as_str().filter(|t| !t.is_empty());
            let found = match field.as_str().unwrap_or_default() {
                "secret_env" => WebhookSecret::Env(
                    text.ok_or_else(|| {
                        (
                            setting.span,
                            format!("`webhooks.{hook}.secret_env` names a variable"),
                        )
                    })?
                    .to_owned(),
                ),
                "secret_file" => WebhookSecret::File(PathBuf::from(text.ok_or_else(|| {
                    (
                        setting.span,
                        format!("`webhooks.{hook}.secret_file` names a file"),
                    )
                })?)),
                "secret" => {
                    return Err((
                        field.span,
                        format!(
                            "`webhooks.{hook}.secret`: keep the secret out of palm.yaml; \
                             name it with `secret_env: VAR` or `secret_file: FILE`"
                        ),
                    ));
                }
                other => {
                    return Err((
                        field.span,
                        format!(
                            "unknown key `webhooks.{hook}.{other}`; known: secret_env, secret_file"
                        ),
                    ));
                }
            };
            if secret.replace(found).is_some() {
                return Err((
                    field.span,
                    format!("`webhooks.{hook}` takes one of secret_env and secret_file"),
                ));
            }
        }
        let secret = secret.ok_or_else(|| {
            (
                settings.span,
                format!("`webhooks.{hook}` needs `secret_env: VAR` or `secret_file: FILE`"),
            )
        })?;
        out.push((hook.to_owned(), secret));
    }
    Ok(out)
}

/// `sessions: {tail: DURATION, claude_dir: DIR, codex_dir: DIR}`: a node that keeps the
/// agents' transcripts archived, ingesting what is new every `tail`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionsConfig {
    /// How often (ms).
    pub every_ms: u64,
    /// Claude Code's projects directory [default: ~/.claude/projects].
    pub claude_dir: Option<PathBuf>,
    /// Codex's home [default: $CODEX_HOME, else ~/.codex].
    pub codex_dir: Option<PathBuf>,
}

/// The shortest tailing interval.
const SESSIONS_TAIL_MS_MIN: u64 = 1_000;

fn sessions(
    value: &palm_actors::definition::yaml::Spanned,
) -> Result<SessionsConfig, (palm_actors::definition::Span, String)> {
    use palm_actors::definition::parse_duration_ms;
    let Value::Map(fields) = &value.value else {
        return Err((
            value.span,
            "`sessions` must be a mapping like `{tail: 60s}`".into(),
        ));
    };
    let mut config = SessionsConfig::default();
    for (field, setting) in fields {
        let dir = || {
            setting.as_str().map(PathBuf::from).ok_or_else(|| {
                (
                    setting.span,
                    format!(
                        "`sessions.{}` must be a directory",
                        field.as_str().unwrap_or_default()
                    ),
                )
            })
        };
        match field.as_str().unwrap_or_default() {
            "tail" => {
                config.every_ms = setting
                    .as_str()
                    .and_then(parse_duration_ms)
                    .filter(|ms| *ms >= SESSIONS_TAIL_MS_MIN)
                    .ok_or_else(|| {
                        (
                            setting.span,
                            "`sessions.tail` must be a duration of at least 1s, like 60s".into(),
                        )
                    })?;
            }
            "claude_dir" => config.claude_dir = Some(dir()?),
            "codex_dir" => config.codex_dir = Some(dir()?),
            other => {
                return Err((
                    field.span,
                    format!("unknown key `sessions.{other}`; known: tail, claude_dir, codex_dir"),
                ));
            }
        }
    }
    if config.every_ms == 0 {
        return Err((value.span, "`sessions` needs `tail: DURATION`".into()));
    }
    Ok(config)
}

/// Loads `explicit`, else `DIR/palm.yaml` if it exists, else defaults.
pub fn load(data: &Path, explicit: Option<&Path>) -> Result<NodeConfig, CliError> {
    let path = match explicit {
        Some(path) => {
            if !path.is_file() {
                return Err(CliError::usage(
                    "config",
                    format!("no such config file: {}", path.display()),
                ));
            }
            path.to_owned()
        }
        None => {
            let default = data.join("palm.yaml");
            if !default.is_file() {
                return Ok(NodeConfig::default());
            }
            default
        }
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| CliError::usage("config", format!("cannot read {}: {e}", path.display())))?;
    parse(&text, &path.display().to_string())
}

/// `retention: DURATION` (journals; summaries keep their default) or
/// `retention: {journal: DURATION, summary: DURATION | forever}`.
fn retention(
    value: &palm_actors::definition::yaml::Spanned,
) -> Result<palm_actors::path::retention::Retention, (palm_actors::definition::Span, String)> {
    use palm_actors::definition::parse_duration_ms;
    use palm_actors::path::retention::Retention;
    let duration = |v: &palm_actors::definition::yaml::Spanned, what: &str| {
        v.as_str().and_then(parse_duration_ms).ok_or_else(|| {
            (
                v.span,
                format!("`{what}` must be a duration like 7d, 12h or 30m"),
            )
        })
    };
    let mut kept = Retention::default();
    match &value.value {
        Value::Map(fields) => {
            for (field, setting) in fields {
                match field.as_str().unwrap_or_default() {
                    "journal" => kept.journal_ms = duration(setting, "retention.journal")?,
                    "summary" if setting.as_str() == Some("forever") => kept.summary_ms = None,
                    "summary" => {
                        kept.summary_ms = Some(duration(setting, "retention.summary")?);
                    }
                    other => {
                        return Err((
                            field.span,
                            format!("unknown key `retention.{other}`; known: journal, summary"),
                        ));
                    }
                }
            }
        }
        _ => kept.journal_ms = duration(value, "retention")?,
    }
    if kept
        .summary_ms
        .is_some_and(|summary| summary < kept.journal_ms)
    {
        return Err((
            value.span,
            "`retention.summary` must be at least `retention.journal` (a summary outlives its journal)".into(),
        ));
    }
    Ok(kept)
}

/// `repos: {PATH: {worktree: {copy, link, env, setup, smoke}}}`: how a job's worktree of
/// that checkout is set up (`palm_agents::provision`).
fn repo_setup(
    path: &palm_actors::definition::yaml::Spanned,
    settings: &palm_actors::definition::yaml::Spanned,
) -> Result<(PathBuf, palm_agents::provision::Provision), (palm_actors::definition::Span, String)> {
    let text = path.as_str().unwrap_or_default();
    let dir = PathBuf::from(text);
    if !dir.is_absolute() {
        return Err((
            path.span,
            format!("`repos` keys are absolute checkout paths, not `{text}`"),
        ));
    }
    let worktree = match &settings.value {
        Value::Map(fields) => {
            for (field, _) in fields {
                if field.as_str() != Some("worktree") {
                    return Err((
                        field.span,
                        format!(
                            "unknown key `repos.{text}.{}`; known: worktree",
                            field.as_str().unwrap_or_default()
                        ),
                    ));
                }
            }
            settings.get("worktree")
        }
        _ => None,
    };
    let Some(worktree) = worktree else {
        return Err((
            settings.span,
            format!("`repos.{text}` needs `worktree: {{copy, link, env, setup, smoke}}`"),
        ));
    };
    let Value::Map(fields) = &worktree.value else {
        return Err((worktree.span, "`worktree` must be a mapping".into()));
    };
    let mut provision = palm_agents::provision::Provision::default();
    let list = |v: &palm_actors::definition::yaml::Spanned,
                what: &str|
     -> Result<Vec<String>, (palm_actors::definition::Span, String)> {
        match &v.value {
            Value::Seq(items) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(str::to_owned)
                        .ok_or((i.span, format!("`{what}` items must be paths")))
                })
                .collect(),
            _ => Err((v.span, format!("`{what}` must be a list of paths"))),
        }
    };
    for (field, value) in fields {
        match field.as_str().unwrap_or_default() {
            "copy" => provision.copy = list(value, "copy")?,
            "link" => provision.link = list(value, "link")?,
            "env" => provision.env = string_map(value, &format!("repos.{text}.worktree.env"))?,
            "setup" => {
                provision.setup = Some(
                    value
                        .as_str()
                        .ok_or((value.span, "`setup` must be a shell command".to_owned()))?
                        .to_owned(),
                )
            }
            "smoke" => {
                provision.smoke = Some(
                    value
                        .as_str()
                        .ok_or((value.span, "`smoke` must be a shell command".to_owned()))?
                        .to_owned(),
                )
            }
            other => {
                return Err((
                    field.span,
                    format!("unknown key `worktree.{other}`; known: copy, link, env, setup, smoke"),
                ));
            }
        }
    }
    provision.check().map_err(|m| (worktree.span, m))?;
    Ok((dir, provision))
}

/// `[PROGRAM, ARG..]`: a non-empty list of strings, the first not empty (no shell).
fn argv_of(
    value: &palm_actors::definition::yaml::Spanned,
    what: &str,
) -> Result<Vec<String>, (palm_actors::definition::Span, String)> {
    let items: Option<Vec<String>> = match &value.value {
        Value::Seq(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => None,
    };
    match items {
        Some(items) if !items.is_empty() && !items[0].is_empty() => Ok(items),
        _ => Err((
            value.span,
            format!(
                "`{what}` must be a non-empty list of strings: the program, then its arguments (no shell)"
            ),
        )),
    }
}

/// A mapping of names to strings (numbers and booleans read as their text).
fn string_map(
    value: &palm_actors::definition::yaml::Spanned,
    what: &str,
) -> Result<std::collections::BTreeMap<String, String>, (palm_actors::definition::Span, String)> {
    let Value::Map(entries) = &value.value else {
        return Err((
            value.span,
            format!("`{what}` must be a mapping of names to strings"),
        ));
    };
    entries
        .iter()
        .map(|(k, v)| {
            let text = match &v.value {
                Value::String(s) => s.clone(),
                Value::Int(i) => i.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return Err((v.span, format!("`{what}` values must be strings"))),
            };
            Ok((k.as_str().unwrap_or_default().to_owned(), text))
        })
        .collect()
}

/// A declared provider's or agent's name: lowercase letters, digits, `_`, `-`, starting
/// with a letter, at most [`PROVIDER_NAME_LEN_MAX`].
fn checked_name<'a>(
    name: &'a palm_actors::definition::yaml::Spanned,
    what: &str,
) -> Result<&'a str, (palm_actors::definition::Span, String)> {
    let text = name.as_str().unwrap_or_default();
    let valid = !text.is_empty()
        && text.len() <= PROVIDER_NAME_LEN_MAX
        && text.starts_with(|c: char| c.is_ascii_lowercase())
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if valid {
        Ok(text)
    } else {
        Err((
            name.span,
            format!(
                "{what} name `{text}` must be lowercase letters, digits, `_` or `-`, starting with a letter (at most {PROVIDER_NAME_LEN_MAX})"
            ),
        ))
    }
}

/// `agents: {NAME: {command: [PROGRAM, ARG..], env: {..}, timeout: DURATION}}`: an agent
/// CLI an `agent` leaf can name as its provider (`palm_agents::custom` has the contract).
fn declared_agent(
    name: &palm_actors::definition::yaml::Spanned,
    settings: &palm_actors::definition::yaml::Spanned,
) -> Result<crate::genome::provider::DeclaredAgent, (palm_actors::definition::Span, String)> {
    use palm_actors::definition::parse_duration_ms;
    let text = checked_name(name, "agent")?;
    if palm_agents::spec::BUILTIN_PROVIDERS.contains(&text) {
        return Err((
            name.span,
            format!("`{text}` is a built-in agent provider; give yours another name"),
        ));
    }
    let Value::Map(fields) = &settings.value else {
        return Err((
            settings.span,
            format!("`agents.{text}` must be a mapping with `command: [...]`"),
        ));
    };
    let mut agent = crate::genome::provider::DeclaredAgent {
        name: text.to_owned(),
        command: Vec::new(),
        env: Default::default(),
        timeout_ms: None,
    };
    for (field, value) in fields {
        match field.as_str().unwrap_or_default() {
            "command" => agent.command = argv_of(value, &format!("agents.{text}.command"))?,
            "env" => agent.env = string_map(value, &format!("agents.{text}.env"))?,
            "timeout" => match value.as_str().and_then(parse_duration_ms) {
                Some(ms) if ms > 0 => agent.timeout_ms = Some(ms),
                _ => {
                    return Err((
                        value.span,
                        format!("`agents.{text}.timeout` must be a duration like 20m"),
                    ));
                }
            },
            other => {
                return Err((
                    field.span,
                    format!("unknown key `agents.{text}.{other}`; known: command, env, timeout"),
                ));
            }
        }
    }
    if agent.command.is_empty() {
        return Err((
            settings.span,
            format!("`agents.{text}` needs `command: [PROGRAM, ARG..]`"),
        ));
    }
    Ok(agent)
}

/// The longest a declared provider's name may be.
const PROVIDER_NAME_LEN_MAX: usize = 64;

/// `providers: {NAME: {command: [PROGRAM, ARG..] | url: URL, ...}}`: a provider of the
/// node's own. Everything is checked here, so a node never boots with a provider that
/// cannot be called (a schema that does not compile, an empty command, a URL that is
/// not http).
fn declared_provider(
    name: &palm_actors::definition::yaml::Spanned,
    settings: &palm_actors::definition::yaml::Spanned,
) -> Result<crate::genome::provider::DeclaredProvider, (palm_actors::definition::Span, String)> {
    use crate::genome::provider::{DeclaredProvider, DeclaredTarget};
    use palm_actors::definition::parse_duration_ms;
    let text = checked_name(name, "provider")?;
    let Value::Map(fields) = &settings.value else {
        return Err((
            settings.span,
            format!("`providers.{text}` must be a mapping with `command: [...]` or `url: ...`"),
        ));
    };
    let (mut argv, mut url, mut env, mut headers, mut cwd) = (None, None, None, None, None);
    let mut declared = DeclaredProvider {
        name: text.to_owned(),
        description: None,
        schema: None,
        timeout_ms: None,
        target: DeclaredTarget::Endpoint {
            url: String::new(),
            headers: Default::default(),
        },
    };
    for (field, value) in fields {
        match field.as_str().unwrap_or_default() {
            "command" => argv = Some(argv_of(value, &format!("providers.{text}.command"))?),
            "url" => match value.as_str() {
                Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                    url = Some(u.to_owned())
                }
                _ => {
                    return Err((
                        value.span,
                        format!("`providers.{text}.url` must be an http:// or https:// URL"),
                    ));
                }
            },
            "env" => env = Some(string_map(value, &format!("providers.{text}.env"))?),
            "headers" => headers = Some(string_map(value, &format!("providers.{text}.headers"))?),
            "cwd" => match value.as_str() {
                Some(dir) if !dir.is_empty() => cwd = Some(PathBuf::from(dir)),
                _ => {
                    return Err((
                        value.span,
                        format!("`providers.{text}.cwd` must be a directory"),
                    ));
                }
            },
            "description" => match value.as_str() {
                Some(d) => declared.description = Some(d.to_owned()),
                None => {
                    return Err((
                        value.span,
                        format!("`providers.{text}.description` must be a string"),
                    ));
                }
            },
            "timeout" => match value.as_str().and_then(parse_duration_ms) {
                Some(ms) if ms > 0 => declared.timeout_ms = Some(ms),
                _ => {
                    return Err((
                        value.span,
                        format!("`providers.{text}.timeout` must be a duration like 30s or 5m"),
                    ));
                }
            },
            "schema" => {
                let schema = value.to_json();
                if let Err(err) = palm_actors::jsonschema::Schema::compile(&schema) {
                    return Err((value.span, format!("`providers.{text}.schema`: {err}")));
                }
                declared.schema = Some(schema);
            }
            other => {
                return Err((
                    field.span,
                    format!(
                        "unknown key `providers.{text}.{other}`; known: command, url, env, headers, cwd, description, timeout, schema"
                    ),
                ));
            }
        }
    }
    declared.target = match (argv, url) {
        (Some(argv), None) => {
            if headers.is_some() {
                return Err((
                    settings.span,
                    format!("`providers.{text}.headers` applies to `url` providers"),
                ));
            }
            DeclaredTarget::Command {
                argv,
                env: env.unwrap_or_default(),
                cwd,
            }
        }
        (None, Some(url)) => {
            if env.is_some() || cwd.is_some() {
                return Err((
                    settings.span,
                    format!("`providers.{text}.env` and `cwd` apply to `command` providers"),
                ));
            }
            DeclaredTarget::Endpoint {
                url,
                headers: headers.unwrap_or_default(),
            }
        }
        (Some(_), Some(_)) => {
            return Err((
                settings.span,
                format!("`providers.{text}` has `command` or `url`, not both"),
            ));
        }
        (None, None) => {
            return Err((
                settings.span,
                format!(
                    "`providers.{text}` needs `command: [PROGRAM, ARG..]` (a program) or `url: URL` (an HTTP endpoint)"
                ),
            ));
        }
    };
    Ok(declared)
}

fn parse(text: &str, origin: &str) -> Result<NodeConfig, CliError> {
    let at = |span: palm_actors::definition::Span, message: String| {
        CliError::usage(
            "config",
            format!("{origin}:{}:{}: {message}", span.line, span.col),
        )
    };
    let document = yaml::read(text).map_err(|e| at(e.span, e.message))?;
    let mut config = NodeConfig::default();
    let entries = match &document.value {
        Value::Null => return Ok(config),
        Value::Map(entries) => entries,
        _ => return Err(at(document.span, "the config must be a mapping".to_owned())),
    };
    for (key, value) in entries {
        match key.as_str().unwrap_or_default() {
            "name" => {
                config.name = Some(
                    value
                        .as_str()
                        .ok_or_else(|| at(value.span, "`name` must be a string".into()))?
                        .to_owned(),
                );
            }
            "seats" => match value.value {
                Value::Int(n) if n >= 1 => config.seats = Some(n as usize),
                _ => return Err(at(value.span, "`seats` must be an integer ≥ 1".into())),
            },
            "capabilities" => match &value.value {
                Value::Seq(items) => {
                    for item in items {
                        let capability = item
                            .as_str()
                            .ok_or_else(|| at(item.span, "capabilities are strings".into()))?;
                        config.capabilities.push(capability.to_owned());
                    }
                }
                _ => return Err(at(value.span, "`capabilities` must be a list".into())),
            },
            "places" => match palm_actors::place::parse_places(value) {
                Ok(places) => config.places = places,
                Err(errors) => {
                    let first = &errors[0];
                    let mut err = at(first.span, first.message.clone());
                    if errors.len() > 1 {
                        err.message
                            .push_str(&format!(" ({} more problems)", errors.len() - 1));
                    }
                    return Err(match &first.hint {
                        Some(hint) => err.with_hint(hint.clone()),
                        None => err,
                    });
                }
            },
            "link" => {
                let Value::Map(fields) = &value.value else {
                    return Err(at(value.span, "`link` must be a mapping".into()));
                };
                for (field, number) in fields {
                    let name = field.as_str().unwrap_or_default();
                    let Value::Int(n) = number.value else {
                        return Err(at(number.span, format!("`link.{name}` must be an integer")));
                    };
                    let n = u64::try_from(n)
                        .ok()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| at(number.span, format!("`link.{name}` must be ≥ 1")))?;
                    let link = &mut config.link;
                    match name {
                        "keepalive_ms" => link.keepalive_ms = n,
                        "idle_timeout_ms" => link.idle_timeout_ms = n,
                        "backoff_ms_min" => link.backoff_ms_min = n,
                        "backoff_ms_max" => link.backoff_ms_max = n,
                        "frame_len_max" => link.frame_len_max = n as usize,
                        "requests_in_flight_max" => link.requests_in_flight_max = n as usize,
                        other => {
                            return Err(at(
                                field.span,
                                format!(
                                    "unknown key `link.{other}`; known: keepalive_ms, idle_timeout_ms, backoff_ms_min, backoff_ms_max, frame_len_max, requests_in_flight_max"
                                ),
                            ));
                        }
                    }
                }
                if config.link.keepalive_ms >= config.link.idle_timeout_ms {
                    return Err(at(
                        value.span,
                        "`link.keepalive_ms` must be below `link.idle_timeout_ms`".into(),
                    ));
                }
            }
            "retention" => {
                config.retention = Some(retention(value).map_err(|(span, m)| at(span, m))?)
            }
            "sessions" => config.sessions = Some(sessions(value).map_err(|(span, m)| at(span, m))?),
            "webhooks" => config.webhooks = webhooks(value).map_err(|(span, m)| at(span, m))?,
            "lease_ms" => match value.value {
                Value::Int(n) if n >= 500 => config.lease_ms = Some(n as u64),
                _ => return Err(at(value.span, "`lease_ms` must be an integer ≥ 500".into())),
            },
            "repos" => {
                let Value::Map(repos) = &value.value else {
                    return Err(at(
                        value.span,
                        "`repos` must be a mapping of checkout paths to `{worktree: {...}}`".into(),
                    ));
                };
                for (path, settings) in repos {
                    let (dir, provision) =
                        repo_setup(path, settings).map_err(|(span, m)| at(span, m))?;
                    config.providers.repos.insert(dir, provision);
                }
            }
            "agents" => {
                let Value::Map(agents) = &value.value else {
                    return Err(at(
                        value.span,
                        "`agents` must be a mapping of names to `{command: [...]}`".into(),
                    ));
                };
                for (name, settings) in agents {
                    let agent = declared_agent(name, settings).map_err(|(span, m)| at(span, m))?;
                    config.providers.agents.push(agent);
                }
            }
            "providers" => {
                let Value::Map(providers) = &value.value else {
                    return Err(at(value.span, "`providers` must be a mapping".into()));
                };
                for (name, settings) in providers {
                    match name.as_str().unwrap_or_default() {
                        "file" => {
                            let root =
                                settings
                                    .get("root")
                                    .and_then(|r| r.as_str())
                                    .ok_or_else(|| {
                                        at(
                                            settings.span,
                                            "`providers.file` needs `root: DIR`".into(),
                                        )
                                    })?;
                            config.providers.file_root = Some(std::path::PathBuf::from(root));
                        }
                        "http" => {
                            let ca = settings.get("ca").and_then(|r| r.as_str()).ok_or_else(
                                || {
                                    at(
                                        settings.span,
                                        "`providers.http` takes `ca: FILE` (PEM certificates to trust)"
                                            .into(),
                                    )
                                },
                            )?;
                            config.providers.http_ca = Some(std::path::PathBuf::from(ca));
                        }
                        "kv" | "palm" | "agent" | "verify" | "gate" | "best_of" | "conflicts"
                        | "merge_lane" => {
                            return Err(at(
                                name.span,
                                format!(
                                    "`{}` is a built-in provider and takes no settings",
                                    name.as_str().unwrap_or_default()
                                ),
                            ));
                        }
                        _ => {
                            let declared = declared_provider(name, settings)
                                .map_err(|(span, m)| at(span, m))?;
                            config.providers.declared.push(declared);
                        }
                    }
                }
            }
            other => {
                return Err(at(
                    key.span,
                    format!(
                        "unknown key `{other}`; known: name, seats, capabilities, places, link, providers, agents, repos, lease_ms, retention, sessions, webhooks"
                    ),
                ));
            }
        }
    }
    Ok(config)
}

/// Resolves the data directory: `--data`, else `$PALM_HOME`, else `~/.palm`.
pub fn data_dir(flag: Option<PathBuf>) -> Result<PathBuf, CliError> {
    if let Some(dir) = flag {
        return Ok(dir);
    }
    if let Some(home) = std::env::var_os("PALM_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".palm")),
        None => Err(CliError::usage(
            "data_dir",
            "no data directory: pass --data DIR or set PALM_HOME",
        )),
    }
}

/// The node name when none is configured: the host's name.
pub fn default_node_name() -> String {
    crate::sys::hostname().unwrap_or_else(|| "local".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhooks_name_where_their_secrets_are_kept_never_the_secrets() {
        let config = parse(
            "webhooks:\n  push: {secret_env: HOOK_SECRET}\n  deploy:\n    secret_file: /etc/palm/deploy.secret\n",
            "palm.yaml",
        )
        .expect("ok");
        assert_eq!(
            config.webhooks,
            vec![
                ("push".to_owned(), WebhookSecret::Env("HOOK_SECRET".into())),
                (
                    "deploy".to_owned(),
                    WebhookSecret::File("/etc/palm/deploy.secret".into())
                ),
            ]
        );
        for (text, expected) in [
            (
                "webhooks:\n  push: {secret: hunter2}\n",
                "palm.yaml:2:10: `webhooks.push.secret`: keep the secret out of palm.yaml",
            ),
            (
                "webhooks:\n  push: {secret_env: A, secret_file: /b}\n",
                "takes one of secret_env and secret_file",
            ),
            ("webhooks:\n  push: {}\n", "needs `secret_env: VAR`"),
            (
                "webhooks:\n  push: {signing: x}\n",
                "unknown key `webhooks.push.signing`",
            ),
            ("webhooks: [push]\n", "must be a mapping"),
        ] {
            let err = parse(text, "palm.yaml").expect_err(text);
            assert!(err.message.contains(expected), "{text}: {}", err.message);
            assert!(!err.message.contains("hunter2"), "{}", err.message);
        }
        // A file's secret loses one trailing newline (as `echo` leaves it); an empty or
        // missing one says where it should have been.
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("s");
        std::fs::write(&file, "sesame\n").expect("write");
        assert_eq!(
            WebhookSecret::File(file.clone()).read().expect("read"),
            b"sesame"
        );
        std::fs::write(&file, "\n").expect("write");
        let err = WebhookSecret::File(file).read().expect_err("empty");
        assert!(err.contains("is empty"), "{err}");
        let err = WebhookSecret::Env("PALM_NO_SUCH_SECRET_VAR".into())
            .read()
            .expect_err("unset");
        assert_eq!(err, "secret_env `PALM_NO_SUCH_SECRET_VAR` is not set");
    }

    #[test]
    fn sessions_tailing_is_read_and_checked() {
        let config = parse("sessions: {tail: 60s, claude_dir: /c}\n", "palm.yaml").expect("ok");
        let sessions = config.sessions.expect("sessions");
        assert_eq!(sessions.every_ms, 60_000);
        assert_eq!(sessions.claude_dir, Some(PathBuf::from("/c")));
        for (text, expected) in [
            ("sessions: {tail: 10ms}\n", "at least 1s"),
            ("sessions: {claude_dir: /c}\n", "needs `tail"),
            (
                "sessions: {tail: 1m, every: 2}\n",
                "unknown key `sessions.every`",
            ),
            ("sessions: yes\n", "must be a mapping"),
        ] {
            let err = parse(text, "palm.yaml").expect_err(text);
            assert!(err.message.contains(expected), "{text}: {}", err.message);
        }
    }

    #[test]
    fn reads_known_keys_and_refuses_others() {
        let config = parse("name: box\nseats: 3\ncapabilities: [gpu]\n", "palm.yaml")
            .map_err(|e| e.message)
            .unwrap();
        assert_eq!(config.name.as_deref(), Some("box"));
        assert_eq!(config.seats, Some(3));
        assert_eq!(config.capabilities, vec!["gpu"]);
        let err = parse("name: box\nseets: 3\n", "palm.yaml").unwrap_err();
        assert_eq!(
            err.message,
            "palm.yaml:2:1: unknown key `seets`; known: name, seats, capabilities, places, link, providers, agents, repos, lease_ms, retention, sessions, webhooks"
        );
        assert!(parse("seats: 0\n", "palm.yaml").is_err());
        let config = parse(
            "link: { idle_timeout_ms: 1500, keepalive_ms: 250 }\n",
            "palm.yaml",
        )
        .map_err(|e| e.message)
        .unwrap();
        assert_eq!(
            (config.link.idle_timeout_ms, config.link.keepalive_ms),
            (1500, 250)
        );
        assert!(parse("link: { idle_ms: 1 }\n", "palm.yaml").is_err());
        assert!(parse("link: { keepalive_ms: 5000 }\n", "palm.yaml").is_err());
        let config = parse(
            "places:\n  web:\n    spawn: \"python3 -m http.server 8000\"\n    probe: \"http://127.0.0.1:8000/\"\n",
            "palm.yaml",
        )
        .map_err(|e| e.message)
        .unwrap();
        assert_eq!(config.places.len(), 1);
        let err = parse(
            "places:\n  web:\n    spawn: x\n    probe: \"grpc://h:1\"\n",
            "palm.yaml",
        )
        .unwrap_err();
        assert_eq!(err.message, "palm.yaml:4:12: unknown probe kind `grpc`");
    }

    #[test]
    fn declared_providers_are_read_and_checked_with_their_line() {
        use crate::genome::provider::DeclaredTarget;
        let config = parse(
            "providers:\n  file: {root: /srv}\n  ticket:\n    command: [python3, tools/ticket.py]\n    env: {MODE: test}\n    timeout: 30s\n    schema: {type: object, required: [title]}\n  weather:\n    url: https://api.example.com/w\n    headers: {Authorization: Bearer x}\n",
            "palm.yaml",
        )
        .map_err(|e| e.message)
        .unwrap();
        let declared = &config.providers.declared;
        assert_eq!(declared.len(), 2);
        assert_eq!(declared[0].name, "ticket");
        assert_eq!(declared[0].timeout_ms, Some(30_000));
        assert!(
            matches!(&declared[0].target, DeclaredTarget::Command { argv, env, .. } if argv[1] == "tools/ticket.py" && env["MODE"] == "test")
        );
        assert!(
            matches!(&declared[1].target, DeclaredTarget::Endpoint { url, headers } if url.ends_with("/w") && headers.len() == 1)
        );
        let refused = |yaml: &str| parse(yaml, "palm.yaml").unwrap_err().message;
        assert_eq!(
            refused("providers:\n  t:\n    command: []\n"),
            "palm.yaml:3:14: `providers.t.command` must be a non-empty list of strings: the program, then its arguments (no shell)"
        );
        assert!(refused("providers:\n  t:\n    url: ftp://x\n").starts_with("palm.yaml:3:10: "));
        assert!(refused("providers:\n  t: {command: [x], url: http://x}\n").contains("not both"));
        assert!(refused("providers:\n  t: {timeout: 5s}\n").contains("needs `command"));
        assert!(refused("providers:\n  Bad: {command: [x]}\n").contains("provider name `Bad`"));
        assert!(refused("providers:\n  kv: {command: [x]}\n").contains("built-in"));
        assert!(refused("providers:\n  verify: {command: [x]}\n").contains("built-in"));
        let schema = refused(
            "providers:\n  t:\n    command: [x]\n    schema: {type: object, patternz: 1}\n",
        );
        assert!(
            schema.starts_with("palm.yaml:4:14: `providers.t.schema`"),
            "{schema}"
        );
        assert!(
            refused("providers:\n  t: {command: [x], colour: red}\n")
                .contains("unknown key `providers.t.colour`")
        );
    }

    #[test]
    fn repos_and_agents_are_read_and_checked_with_their_line() {
        let config = parse(
            "agents:\n  aider:\n    command: [aider, --yes]\n    timeout: 20m\nrepos:\n  /srv/app:\n    worktree:\n      copy: [.env]\n      env: {PORT: auto}\n      setup: make deps\n",
            "palm.yaml",
        )
        .map_err(|e| e.message)
        .unwrap();
        assert_eq!(config.providers.agents[0].timeout_ms, Some(20 * 60_000));
        let setup = &config.providers.repos[&PathBuf::from("/srv/app")];
        assert_eq!(
            (setup.copy.len(), setup.setup.as_deref()),
            (1, Some("make deps"))
        );
        let refused = |yaml: &str| parse(yaml, "palm.yaml").unwrap_err().message;
        assert!(refused("agents:\n  claude:\n    command: [x]\n").contains("built-in"));
        assert!(refused("agents:\n  a: {env: {}}\n").contains("needs `command"));
        assert!(refused("repos:\n  app:\n    worktree: {}\n").contains("absolute"));
        assert!(
            refused("repos:\n  /a:\n    worktree:\n      copy: [../x]\n")
                .contains("inside the checkout")
        );
        assert!(
            refused("repos:\n  /a:\n    worktree:\n      run: x\n")
                .starts_with("palm.yaml:4:7: unknown key `worktree.run`")
        );
    }
}
