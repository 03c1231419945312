//! Place specs and their YAML form, shared by the node config (`palm.yaml`), a flow's
//! `places:` and the CLI (which builds specs from flags and sends them as JSON).
//!
//! ```yaml
//! places:
//!   web:
//!     spawn: "python3 -m http.server 8123"      # sh -c; or {cmd, args, env, cwd}
//!     restart: on_failure                       # never | on_failure | always, or a mapping
//!     probe: "http://127.0.0.1:8123/"           # process | tcp://H:P | http://H:P/PATH | {command: CMD}
//!     stop: { signal: TERM, grace: 5s }
//!     capabilities: [web]
//!   db:
//!     adopt: "tcp://127.0.0.1:5432"             # or {pid: N} | {tcp: H:P} | {http: URL}
//! ```
//!
//! Errors carry the span of the offending value, so config and flow errors both point at
//! `file:line:col`.

use crate::definition::Span;
use crate::definition::yaml::{Spanned, Value};
use serde::{Deserialize, Serialize};

/// Default time between probes.
pub const PROBE_INTERVAL_MS_DEFAULT: u64 = 1_000;
/// Default probe timeout.
pub const PROBE_TIMEOUT_MS_DEFAULT: u64 = 1_000;
/// Default consecutive failures that make a ready place unready.
pub const PROBE_FAILURES_DEFAULT: u32 = 3;
/// Default consecutive successes that make a place ready.
pub const PROBE_SUCCESSES_DEFAULT: u32 = 1;
/// Smallest probe interval accepted (a probe storm helps nobody).
pub const PROBE_INTERVAL_MS_MIN: u64 = 50;
/// Default first restart delay (doubles per restart in the window).
pub const BACKOFF_MS_DEFAULT: u64 = 200;
/// Default cap on the restart delay.
pub const BACKOFF_MS_MAX_DEFAULT: u64 = 10_000;
/// Default restarts allowed within the window before giving up.
pub const RESTARTS_MAX_DEFAULT: u32 = 5;
/// Default restart window.
pub const RESTART_WINDOW_MS_DEFAULT: u64 = 60_000;
/// Default time between the stop signal and SIGKILL.
pub const STOP_GRACE_MS_DEFAULT: u64 = 5_000;

/// A named workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaceSpec {
    /// Name (`[A-Za-z0-9_.-]+`; job places are renamed `JOB/NAME` in the book).
    pub name: String,
    /// Spawned or adopted.
    pub source: Source,
    /// Health check.
    pub probe: Probe,
    /// Capabilities offered while ready.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Who owns it.
    #[serde(default)]
    pub owner: Owner,
}

/// Who owns a place.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    /// The node (config or run time).
    #[default]
    Node,
    /// A job: stopped when the job ends.
    Job(String),
}

/// Where a place comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A process the node starts and supervises.
    Spawn(SpawnSpec),
    /// Something that exists already; the node only watches it.
    Adopt(Adopt),
}

impl Source {
    /// One line: the command, or the adopted target.
    pub fn describe(&self) -> String {
        match self {
            Source::Spawn(spawn) if spawn.args.is_empty() => spawn.cmd.clone(),
            Source::Spawn(spawn) => format!("{} {}", spawn.cmd, spawn.args.join(" ")),
            Source::Adopt(Adopt::Pid(pid)) => format!("pid {pid}"),
            Source::Adopt(Adopt::Tcp(addr)) => format!("tcp://{addr}"),
            Source::Adopt(Adopt::Http(url)) => url.clone(),
        }
    }
}

/// A process to spawn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnSpec {
    /// The command: run by `sh -c` when `args` is empty, else executed directly.
    pub cmd: String,
    /// Arguments (direct execution).
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// When to restart it.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// First signal on stop.
    #[serde(default)]
    pub stop_signal: StopSignal,
    /// Time between the stop signal and SIGKILL.
    #[serde(default = "stop_grace_default")]
    pub stop_grace_ms: u64,
}

fn stop_grace_default() -> u64 {
    STOP_GRACE_MS_DEFAULT
}

/// When a spawned place is restarted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartWhen {
    /// Never: an exit is final.
    Never,
    /// After a non-zero exit or a signal.
    #[default]
    OnFailure,
    /// After any exit.
    Always,
}

/// Restart policy: when, with what backoff, and when to give up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartPolicy {
    /// When.
    pub when: RestartWhen,
    /// First delay; doubles with each restart in the window.
    pub backoff_ms: u64,
    /// Cap on the delay.
    pub backoff_max_ms: u64,
    /// Restarts allowed within `window_ms`; one more and the place fails.
    pub restarts_max: u32,
    /// The window.
    pub window_ms: u64,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            when: RestartWhen::OnFailure,
            backoff_ms: BACKOFF_MS_DEFAULT,
            backoff_max_ms: BACKOFF_MS_MAX_DEFAULT,
            restarts_max: RESTARTS_MAX_DEFAULT,
            window_ms: RESTART_WINDOW_MS_DEFAULT,
        }
    }
}

/// The first signal sent to stop a spawned place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopSignal {
    /// SIGTERM.
    #[default]
    Term,
    /// SIGINT.
    Int,
    /// SIGHUP.
    Hup,
    /// SIGQUIT.
    Quit,
    /// SIGKILL.
    Kill,
}

impl StopSignal {
    /// Parses `TERM`, `SIGTERM`, `term`, ...
    pub fn parse(text: &str) -> Option<StopSignal> {
        let upper = text.trim().to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        Some(match name {
            "TERM" => StopSignal::Term,
            "INT" => StopSignal::Int,
            "HUP" => StopSignal::Hup,
            "QUIT" => StopSignal::Quit,
            "KILL" => StopSignal::Kill,
            _ => return None,
        })
    }
}

/// What an adopted place is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Adopt {
    /// A running process.
    Pid(u32),
    /// A TCP service, `host:port`.
    Tcp(String),
    /// An HTTP service, `http://host:port/path`.
    Http(String),
}

/// A health probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// What to check.
    pub check: Check,
    /// Time between probes.
    pub interval_ms: u64,
    /// A probe slower than this failed.
    pub timeout_ms: u64,
    /// Consecutive failures that make a ready place unready.
    pub failures: u32,
    /// Consecutive successes that make a place ready.
    pub successes: u32,
}

impl Probe {
    /// A probe of `check` with default timing.
    pub fn of(check: Check) -> Probe {
        Probe {
            check,
            interval_ms: PROBE_INTERVAL_MS_DEFAULT,
            timeout_ms: PROBE_TIMEOUT_MS_DEFAULT,
            failures: PROBE_FAILURES_DEFAULT,
            successes: PROBE_SUCCESSES_DEFAULT,
        }
    }

    /// The natural probe for a source: the process for spawned places and pids, the
    /// address itself for adopted services.
    pub fn default_for(source: &Source) -> Probe {
        Probe::of(match source {
            Source::Spawn(_) | Source::Adopt(Adopt::Pid(_)) => Check::Process,
            Source::Adopt(Adopt::Tcp(addr)) => Check::Tcp(addr.clone()),
            Source::Adopt(Adopt::Http(url)) => Check::Http(url.clone()),
        })
    }
}

/// What a probe checks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// The process is alive.
    Process,
    /// A TCP connect to `host:port` succeeds.
    Tcp(String),
    /// An HTTP GET answers 2xx.
    Http(String),
    /// A command (`sh -c`) exits 0.
    Command(String),
}

impl Check {
    /// One line, for output.
    pub fn describe(&self) -> String {
        match self {
            Check::Process => "process".to_owned(),
            Check::Tcp(addr) => format!("tcp://{addr}"),
            Check::Http(url) => url.clone(),
            Check::Command(cmd) => format!("command `{cmd}`"),
        }
    }
}

/// True for a usable place name.
pub fn valid_place_name(name: &str) -> bool {
    let plain = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    // `JOB/NAME` is how job places are named in the book.
    name.len() <= 128
        && match name.split_once('/') {
            Some((job, place)) => plain(job) && plain(place),
            None => plain(name),
        }
}

/// Splits `host:port` (the port must be a number).
pub fn parse_tcp_addr(text: &str) -> Result<(String, u16), String> {
    let text = text.strip_prefix("tcp://").unwrap_or(text);
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("`{text}` is not HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}` in `{text}` is not a port number"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("`{text}` has no host"));
    }
    Ok((host.to_owned(), port))
}

/// Splits `http://host[:port][/path]` into host, port (80 by default) and path.
pub fn parse_http_url(text: &str) -> Result<(String, u16, String), String> {
    let rest = match text.strip_prefix("http://") {
        Some(rest) => rest,
        None if text.starts_with("https://") => {
            return Err(format!(
                "`{text}`: https probes are not supported; probe the plain HTTP port, or use a command probe"
            ));
        }
        None => return Err(format!("`{text}` is not an http:// URL")),
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let (host, port) = if authority.contains(':') {
        parse_tcp_addr(authority)?
    } else {
        (authority.to_owned(), 80)
    };
    if host.is_empty() {
        return Err(format!("`{text}` has no host"));
    }
    Ok((host, port, path.to_owned()))
}

/// A problem in a places section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// Where.
    pub span: Span,
    /// What.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

struct Reader {
    errors: Vec<SpecError>,
}

const PLACE_KEYS: &[&str] = &["spawn", "adopt", "probe", "restart", "stop", "capabilities"];
const SPAWN_KEYS: &[&str] = &["cmd", "args", "env", "cwd"];
const RESTART_KEYS: &[&str] = &["policy", "backoff", "backoff_max", "max", "window"];
const PROBE_KEYS: &[&str] = &[
    "process",
    "tcp",
    "http",
    "command",
    "interval",
    "timeout",
    "failures",
    "successes",
];
const PROBE_KINDS: &[&str] = &["process", "tcp", "http", "command"];
const ADOPT_KINDS: &[&str] = &["pid", "tcp", "http"];
const STOP_KEYS: &[&str] = &["signal", "grace"];

/// Parses a `places:` mapping (`NAME: {spawn|adopt, probe, restart, stop, capabilities}`),
/// reporting every problem.
pub fn parse_places(node: &Spanned) -> Result<Vec<PlaceSpec>, Vec<SpecError>> {
    let mut reader = Reader { errors: Vec::new() };
    let mut specs = Vec::new();
    match &node.value {
        Value::Null => {}
        Value::Map(entries) => {
            for (key, value) in entries {
                let name = key.as_str().unwrap_or_default();
                if !valid_place_name(name) || name.contains('/') {
                    reader.error(
                        key.span,
                        format!("place name `{name}` is not valid"),
                        Some("use letters, digits, `_`, `-` and `.`"),
                    );
                    continue;
                }
                if let Some(spec) = reader.place(name, value) {
                    specs.push(spec);
                }
            }
        }
        _ => reader.error(
            node.span,
            format!(
                "`places` must be a mapping of names to places, found {}",
                node.type_name()
            ),
            Some("e.g. `places: {web: {spawn: \"python3 -m http.server 8123\"}}`"),
        ),
    }
    if reader.errors.is_empty() {
        Ok(specs)
    } else {
        Err(reader.errors)
    }
}

fn entries(node: &Spanned) -> Option<&[(Spanned, Spanned)]> {
    match &node.value {
        Value::Map(entries) => Some(entries),
        _ => None,
    }
}

impl Reader {
    fn error(&mut self, span: Span, message: impl Into<String>, hint: Option<&str>) {
        self.errors.push(SpecError {
            span,
            message: message.into(),
            hint: hint.map(str::to_owned),
        });
    }

    /// Checks the keys of a mapping against `allowed`.
    fn keys(&mut self, what: &str, entries: &[(Spanned, Spanned)], allowed: &[&str]) {
        for (key, _) in entries {
            let name = key.as_str().unwrap_or_default();
            if !allowed.contains(&name) {
                self.error(
                    key.span,
                    format!("unknown field `{name}` in {what}"),
                    Some(&format!("{what} accepts: {}", allowed.join(", "))),
                );
            }
        }
    }

    fn string(&mut self, node: &Spanned, what: &str) -> Option<String> {
        match &node.value {
            Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            _ => {
                self.error(
                    node.span,
                    format!(
                        "{what} must be a non-empty string, found {}",
                        node.type_name()
                    ),
                    None,
                );
                None
            }
        }
    }

    fn strings(&mut self, node: &Spanned, what: &str) -> Vec<String> {
        match &node.value {
            Value::Seq(items) => items
                .iter()
                .filter_map(|item| self.string(item, what))
                .collect(),
            _ => {
                self.error(
                    node.span,
                    format!(
                        "{what} must be a list of strings, found {}",
                        node.type_name()
                    ),
                    None,
                );
                Vec::new()
            }
        }
    }

    fn count(&mut self, node: &Spanned, what: &str) -> Option<u32> {
        match node.value {
            Value::Int(n) if (1..=1_000_000).contains(&n) => Some(n as u32),
            _ => {
                self.error(
                    node.span,
                    format!("{what} must be a whole number ≥ 1"),
                    None,
                );
                None
            }
        }
    }

    fn duration(&mut self, node: &Spanned, what: &str) -> Option<u64> {
        let ms = match &node.value {
            Value::Int(i) if *i > 0 => Some(*i as u64),
            Value::String(s) => crate::definition::parse_duration_ms(s).filter(|ms| *ms > 0),
            _ => None,
        };
        if ms.is_none() {
            self.error(
                node.span,
                format!("{what} must be a duration like `500ms`, `5s`, `2m`"),
                None,
            );
        }
        ms
    }

    fn place(&mut self, name: &str, node: &Spanned) -> Option<PlaceSpec> {
        let Some(fields) = entries(node) else {
            self.error(
                node.span,
                format!("place `{name}` must be a mapping with `spawn` or `adopt`"),
                None,
            );
            return None;
        };
        self.keys(&format!("place `{name}`"), fields, PLACE_KEYS);
        let source = match (node.get("spawn"), node.get("adopt")) {
            (Some(_), Some(adopt)) => {
                self.error(
                    adopt.span,
                    format!("place `{name}` has both `spawn` and `adopt`"),
                    Some("a place is either started by the node or adopted, not both"),
                );
                None
            }
            (Some(spawn), None) => self.spawn(spawn, node).map(Source::Spawn),
            (None, Some(adopt)) => self.adopt(adopt).map(Source::Adopt),
            (None, None) => {
                self.error(
                    node.span,
                    format!("place `{name}` needs `spawn` or `adopt`"),
                    Some("`spawn: \"CMD\"` starts a process; `adopt: \"tcp://HOST:PORT\"` watches a service"),
                );
                None
            }
        };
        let probe = match node.get("probe") {
            Some(probe) => self.probe(probe),
            None => source.as_ref().map(Probe::default_for),
        };
        let capabilities = node
            .get("capabilities")
            .map(|c| self.strings(c, "capabilities"))
            .unwrap_or_default();
        if let (Some(Source::Adopt(_)), Some(key)) = (&source, node.get("restart")) {
            self.error(
                key.span,
                "`restart` applies to spawned places only",
                Some("an adopted place is watched, never restarted"),
            );
        }
        Some(PlaceSpec {
            name: name.to_owned(),
            source: source?,
            probe: probe?,
            capabilities,
            owner: Owner::Node,
        })
    }

    fn spawn(&mut self, node: &Spanned, place: &Spanned) -> Option<SpawnSpec> {
        let mut spec = SpawnSpec {
            cmd: String::new(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            restart: RestartPolicy::default(),
            stop_signal: StopSignal::Term,
            stop_grace_ms: STOP_GRACE_MS_DEFAULT,
        };
        match &node.value {
            Value::String(_) => spec.cmd = self.string(node, "`spawn`")?,
            Value::Map(fields) => {
                self.keys("`spawn`", fields, SPAWN_KEYS);
                spec.cmd = match node.get("cmd") {
                    Some(cmd) => self.string(cmd, "`cmd`")?,
                    None => {
                        self.error(node.span, "`spawn` needs `cmd`", None);
                        return None;
                    }
                };
                if let Some(args) = node.get("args") {
                    spec.args = self.strings(args, "`args`");
                }
                if let Some(cwd) = node.get("cwd") {
                    spec.cwd = self.string(cwd, "`cwd`");
                }
                if let Some(env) = node.get("env") {
                    match entries(env) {
                        Some(vars) => {
                            for (key, value) in vars {
                                let key_text = key.as_str().unwrap_or_default().to_owned();
                                let value = match &value.value {
                                    Value::String(s) => s.clone(),
                                    Value::Int(i) => i.to_string(),
                                    Value::Bool(b) => b.to_string(),
                                    Value::Float(f) => f.to_string(),
                                    _ => {
                                        self.error(
                                            value.span,
                                            format!("env `{key_text}` must be a scalar"),
                                            None,
                                        );
                                        continue;
                                    }
                                };
                                spec.env.push((key_text, value));
                            }
                        }
                        None => self.error(env.span, "`env` must be a mapping", None),
                    }
                }
            }
            _ => {
                self.error(
                    node.span,
                    format!(
                        "`spawn` must be a command string or a mapping, found {}",
                        node.type_name()
                    ),
                    None,
                );
                return None;
            }
        }
        if let Some(restart) = place.get("restart") {
            spec.restart = self.restart(restart)?;
        }
        if let Some(stop) = place.get("stop") {
            match entries(stop) {
                Some(fields) => {
                    self.keys("`stop`", fields, STOP_KEYS);
                    if let Some(signal) = stop.get("signal") {
                        match signal.as_str().and_then(StopSignal::parse) {
                            Some(parsed) => spec.stop_signal = parsed,
                            None => self.error(
                                signal.span,
                                "unknown stop signal",
                                Some("use TERM, INT, HUP, QUIT or KILL"),
                            ),
                        }
                    }
                    if let Some(grace) = stop.get("grace") {
                        spec.stop_grace_ms = self.duration(grace, "`grace`")?;
                    }
                }
                None => self.error(stop.span, "`stop` must be a mapping {signal, grace}", None),
            }
        }
        Some(spec)
    }

    fn restart(&mut self, node: &Spanned) -> Option<RestartPolicy> {
        let mut policy = RestartPolicy::default();
        let when = |text: &str| match text {
            "never" => Some(RestartWhen::Never),
            "on_failure" | "on-failure" => Some(RestartWhen::OnFailure),
            "always" => Some(RestartWhen::Always),
            _ => None,
        };
        let hint = Some("use never, on_failure or always");
        match &node.value {
            Value::String(text) => match when(text) {
                Some(w) => policy.when = w,
                None => {
                    self.error(node.span, format!("unknown restart policy `{text}`"), hint);
                    return None;
                }
            },
            Value::Map(fields) => {
                self.keys("`restart`", fields, RESTART_KEYS);
                if let Some(p) = node.get("policy") {
                    match p.as_str().and_then(when) {
                        Some(w) => policy.when = w,
                        None => self.error(p.span, "unknown restart policy", hint),
                    }
                }
                if let Some(b) = node.get("backoff") {
                    policy.backoff_ms = self.duration(b, "`backoff`")?;
                }
                if let Some(b) = node.get("backoff_max") {
                    policy.backoff_max_ms = self.duration(b, "`backoff_max`")?;
                }
                if let Some(m) = node.get("max") {
                    policy.restarts_max = match m.value {
                        Value::Int(0) => 0,
                        _ => self.count(m, "`max`")?,
                    };
                }
                if let Some(w) = node.get("window") {
                    policy.window_ms = self.duration(w, "`window`")?;
                }
            }
            _ => {
                self.error(
                    node.span,
                    "`restart` must be a policy name or a mapping",
                    hint,
                );
                return None;
            }
        }
        Some(policy)
    }

    fn adopt(&mut self, node: &Spanned) -> Option<Adopt> {
        let hint = Some("adopt `tcp://HOST:PORT`, `http://HOST:PORT/PATH`, or `{pid: N}`");
        match &node.value {
            Value::String(text) => self.adopt_target(node.span, text),
            Value::Map(fields) => {
                let [(key, value)] = fields.as_slice() else {
                    self.error(
                        node.span,
                        "`adopt` takes exactly one of pid, tcp, http",
                        hint,
                    );
                    return None;
                };
                let kind = key.as_str().unwrap_or_default();
                match kind {
                    "pid" => match value.value {
                        Value::Int(pid) if pid > 0 && pid <= i64::from(i32::MAX) => {
                            Some(Adopt::Pid(pid as u32))
                        }
                        _ => {
                            self.error(value.span, "`pid` must be a process id", None);
                            None
                        }
                    },
                    "tcp" | "http" => {
                        let text = self.string(value, &format!("`{kind}`"))?;
                        let text = if kind == "tcp" && !text.starts_with("tcp://") {
                            format!("tcp://{text}")
                        } else {
                            text
                        };
                        self.adopt_target(value.span, &text)
                    }
                    other => {
                        self.error(
                            key.span,
                            format!("unknown adopt kind `{other}`"),
                            Some(&format!("adopt kinds: {}", ADOPT_KINDS.join(", "))),
                        );
                        None
                    }
                }
            }
            _ => {
                self.error(
                    node.span,
                    format!(
                        "`adopt` must be a string or mapping, found {}",
                        node.type_name()
                    ),
                    hint,
                );
                None
            }
        }
    }

    fn adopt_target(&mut self, span: Span, text: &str) -> Option<Adopt> {
        if let Some(addr) = text.strip_prefix("tcp://") {
            return match parse_tcp_addr(addr) {
                Ok(_) => Some(Adopt::Tcp(addr.to_owned())),
                Err(err) => {
                    self.error(span, err, None);
                    None
                }
            };
        }
        if text.starts_with("http://") || text.starts_with("https://") {
            return match parse_http_url(text) {
                Ok(_) => Some(Adopt::Http(text.to_owned())),
                Err(err) => {
                    self.error(span, err, None);
                    None
                }
            };
        }
        if let Some(pid) = text
            .strip_prefix("pid:")
            .and_then(|p| p.trim().parse().ok())
        {
            return Some(Adopt::Pid(pid));
        }
        self.error(
            span,
            format!("cannot adopt `{text}`"),
            Some("adopt `tcp://HOST:PORT`, `http://HOST:PORT/PATH`, or `{pid: N}`"),
        );
        None
    }

    fn check_string(&mut self, span: Span, text: &str) -> Option<Check> {
        if text == "process" {
            return Some(Check::Process);
        }
        if let Some(addr) = text.strip_prefix("tcp://") {
            return match parse_tcp_addr(addr) {
                Ok(_) => Some(Check::Tcp(addr.to_owned())),
                Err(err) => {
                    self.error(span, err, None);
                    None
                }
            };
        }
        if text.starts_with("http://") || text.starts_with("https://") {
            return match parse_http_url(text) {
                Ok(_) => Some(Check::Http(text.to_owned())),
                Err(err) => {
                    self.error(span, err, None);
                    None
                }
            };
        }
        let kind = text.split("://").next().unwrap_or(text);
        self.error(
            span,
            format!("unknown probe kind `{kind}`"),
            Some("probe kinds: process, tcp://HOST:PORT, http://HOST:PORT/PATH, {command: CMD}"),
        );
        None
    }

    fn probe(&mut self, node: &Spanned) -> Option<Probe> {
        match &node.value {
            Value::String(text) => self.check_string(node.span, text).map(Probe::of),
            Value::Map(fields) => {
                let kinds: Vec<&Spanned> = fields
                    .iter()
                    .map(|(k, _)| k)
                    .filter(|k| PROBE_KINDS.contains(&k.as_str().unwrap_or_default()))
                    .collect();
                for (key, _) in fields {
                    let name = key.as_str().unwrap_or_default();
                    if !PROBE_KEYS.contains(&name) {
                        self.error(
                            key.span,
                            format!("unknown probe kind `{name}`"),
                            Some("probe kinds: process, tcp, http, command; options: interval, timeout, failures, successes"),
                        );
                        return None;
                    }
                }
                let check = match kinds.as_slice() {
                    [kind] => {
                        let value = node.get(kind.as_str().unwrap_or_default())?;
                        match kind.as_str().unwrap_or_default() {
                            "process" => Check::Process,
                            "tcp" => {
                                let addr = self.string(value, "`tcp`")?;
                                let addr = addr.strip_prefix("tcp://").unwrap_or(&addr).to_owned();
                                if let Err(err) = parse_tcp_addr(&addr) {
                                    self.error(value.span, err, None);
                                    return None;
                                }
                                Check::Tcp(addr)
                            }
                            "http" => {
                                let url = self.string(value, "`http`")?;
                                if let Err(err) = parse_http_url(&url) {
                                    self.error(value.span, err, None);
                                    return None;
                                }
                                Check::Http(url)
                            }
                            _ => Check::Command(self.string(value, "`command`")?),
                        }
                    }
                    [] => {
                        self.error(
                            node.span,
                            "the probe names no kind",
                            Some("give one of process, tcp, http, command"),
                        );
                        return None;
                    }
                    [_, second, ..] => {
                        self.error(second.span, "a probe has exactly one kind", None);
                        return None;
                    }
                };
                let mut probe = Probe::of(check);
                if let Some(i) = node.get("interval") {
                    probe.interval_ms = self.duration(i, "`interval`")?;
                    if probe.interval_ms < PROBE_INTERVAL_MS_MIN {
                        self.error(
                            i.span,
                            format!("`interval` must be at least {PROBE_INTERVAL_MS_MIN}ms"),
                            None,
                        );
                    }
                }
                if let Some(t) = node.get("timeout") {
                    probe.timeout_ms = self.duration(t, "`timeout`")?;
                }
                if let Some(f) = node.get("failures") {
                    probe.failures = self.count(f, "`failures`")?;
                }
                if let Some(s) = node.get("successes") {
                    probe.successes = self.count(s, "`successes`")?;
                }
                Some(probe)
            }
            _ => {
                self.error(
                    node.span,
                    format!(
                        "`probe` must be a string or a mapping, found {}",
                        node.type_name()
                    ),
                    None,
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::yaml;

    fn parse(text: &str) -> Result<Vec<PlaceSpec>, Vec<SpecError>> {
        let doc = yaml::read(text).expect("yaml");
        parse_places(doc.get("places").expect("places"))
    }

    fn first_error(text: &str) -> (u32, u32, String) {
        let errors = parse(text).expect_err("should fail");
        let e = &errors[0];
        (e.span.line, e.span.col, e.message.clone())
    }

    #[test]
    fn reads_spawned_and_adopted_places() {
        let specs = parse(
            "places:\n  web:\n    spawn: \"python3 -m http.server 8123\"\n    probe: { http: \"http://127.0.0.1:8123/\", interval: 200ms, failures: 2 }\n    restart: { policy: always, backoff: 100ms, max: 3, window: 10s }\n    stop: { signal: INT, grace: 2s }\n    capabilities: [web, static]\n  db:\n    adopt: \"tcp://127.0.0.1:5432\"\n  agent:\n    adopt: { pid: 4242 }\n",
        )
        .expect("valid");
        assert_eq!(specs.len(), 3);
        let web = &specs[0];
        let Source::Spawn(spawn) = &web.source else {
            panic!("spawned")
        };
        assert_eq!(spawn.cmd, "python3 -m http.server 8123");
        assert_eq!(spawn.restart.when, RestartWhen::Always);
        assert_eq!(spawn.restart.backoff_ms, 100);
        assert_eq!(spawn.restart.restarts_max, 3);
        assert_eq!(spawn.restart.window_ms, 10_000);
        assert_eq!(spawn.stop_signal, StopSignal::Int);
        assert_eq!(spawn.stop_grace_ms, 2_000);
        assert_eq!(
            web.probe.check,
            Check::Http("http://127.0.0.1:8123/".into())
        );
        assert_eq!(web.probe.interval_ms, 200);
        assert_eq!(web.probe.failures, 2);
        assert_eq!(web.capabilities, vec!["web", "static"]);
        assert_eq!(
            specs[1].source,
            Source::Adopt(Adopt::Tcp("127.0.0.1:5432".into()))
        );
        assert_eq!(specs[1].probe.check, Check::Tcp("127.0.0.1:5432".into()));
        assert_eq!(specs[2].source, Source::Adopt(Adopt::Pid(4242)));
        assert_eq!(specs[2].probe.check, Check::Process);
    }

    #[test]
    fn errors_point_at_the_value() {
        assert_eq!(
            first_error("places:\n  web:\n    spawn: x\n    probe: \"grpc://h:1\"\n"),
            (4, 12, "unknown probe kind `grpc`".into())
        );
        assert_eq!(
            first_error("places:\n  web:\n    spawn: x\n    probe: { grpc: x }\n"),
            (4, 14, "unknown probe kind `grpc`".into())
        );
        assert_eq!(
            first_error("places:\n  web:\n    probe: process\n"),
            (3, 5, "place `web` needs `spawn` or `adopt`".into())
        );
        assert_eq!(
            first_error("places:\n  web:\n    spawn: x\n    restart: sometimes\n"),
            (4, 14, "unknown restart policy `sometimes`".into())
        );
        assert_eq!(
            first_error("places:\n  db:\n    adopt: \"tcp://nohost\"\n"),
            (3, 12, "`nohost` is not HOST:PORT".into())
        );
        assert_eq!(
            first_error("places:\n  db:\n    adopt: \"tcp://h:1\"\n    restart: always\n"),
            (4, 14, "`restart` applies to spawned places only".into())
        );
        assert_eq!(
            first_error("places:\n  web:\n    spawn: x\n    colour: red\n"),
            (4, 5, "unknown field `colour` in place `web`".into())
        );
    }

    #[test]
    fn urls_and_addresses() {
        assert_eq!(
            parse_http_url("http://127.0.0.1:8080/health"),
            Ok(("127.0.0.1".into(), 8080, "/health".into()))
        );
        assert_eq!(
            parse_http_url("http://localhost"),
            Ok(("localhost".into(), 80, "/".into()))
        );
        assert!(
            parse_http_url("https://x")
                .unwrap_err()
                .contains("not supported")
        );
        assert_eq!(parse_tcp_addr("[::1]:80"), Ok(("::1".into(), 80)));
        assert!(parse_tcp_addr("h:port").is_err());
        assert!(valid_place_name("web"));
        assert!(valid_place_name("ab12-3/db"));
        assert!(!valid_place_name("a b"));
        assert!(!valid_place_name("a/b/c"));
    }

    #[test]
    fn specs_round_trip_through_postcard_and_json() {
        let specs = parse("places:\n  web:\n    spawn: { cmd: python3, args: [-m, http.server], env: { A: 1 } }\n").expect("valid");
        let bytes = postcard::to_allocvec(&specs[0]).expect("encode");
        let back: PlaceSpec = postcard::from_bytes(&bytes).expect("decode");
        assert_eq!(back, specs[0]);
        let json = serde_json::to_string(&specs[0]).expect("json");
        let back: PlaceSpec = serde_json::from_str(&json).expect("json decode");
        assert_eq!(back, specs[0]);
    }
}
