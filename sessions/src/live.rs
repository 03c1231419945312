//! `palm sessions live`: which agent sessions are running, idle or stuck right now, read
//! straight from the vendors' files (the archive lags by one ingest; this must not).
//!
//! A session is listed when its file was written within a window (24 h by default). Its
//! state comes from where its last turn stands, read from the vendor's own markers:
//! - **idle** — the turn ended (Claude: an assistant line with `stop_reason: end_turn`, a
//!   `turn_duration` or `stop_hook_summary` system line, or a last answer with no tool
//!   call pending and nothing after it for `ANSWER_QUIET_MS`; Codex: `task_complete` /
//!   `turn_complete` or `turn_aborted`): it waits for a person;
//! - **running** — the turn is open (a prompt, a tool call waiting for its result, a tool
//!   result the model has not answered) and the file moved within the stuck threshold;
//! - **stuck** — the turn is open and nothing was written for longer than the threshold
//!   (10 min by default): a hung command, a permission prompt nobody answers, a dead CLI.
//!
//! Time is the last timestamp the lines carry (the file's mtime when none does), never
//! "now" of whoever copied the file.

use crate::ingest::{Sources, discover};
use crate::transcript::{self, Vendor};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Files written longer ago than this are not live (ms): 24 h.
pub const LIVE_WINDOW_MS_DEFAULT: i64 = 24 * 3600 * 1000;
/// An open turn quiet for longer than this is stuck (ms): 10 min.
pub const STUCK_AFTER_MS_DEFAULT: i64 = 10 * 60 * 1000;
/// A last answer with nothing after it for this long ended its turn (ms).
pub const ANSWER_QUIET_MS: i64 = 30 * 1000;
/// Of a file, at most this much of its end is read (bytes).
pub const TAIL_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// And this much of its start, for what the session is (bytes).
pub const HEAD_BYTES_MAX: u64 = 64 * 1024;

/// Where a session stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LiveState {
    /// Its turn is open and it is moving.
    Running,
    /// Its turn is open and nothing moved for too long.
    Stuck,
    /// Its turn ended: it waits for a person.
    Idle,
}

impl LiveState {
    /// `running`, `stuck` or `idle`.
    pub fn as_str(self) -> &'static str {
        match self {
            LiveState::Running => "running",
            LiveState::Stuck => "stuck",
            LiveState::Idle => "idle",
        }
    }
}

/// One live session.
#[derive(Clone, Debug, Serialize)]
pub struct LiveSession {
    /// Its id.
    pub session: String,
    /// claude or codex.
    pub vendor: Vendor,
    /// running, stuck or idle.
    pub state: LiveState,
    /// Why, in words.
    pub reason: String,
    /// The transcript file.
    pub file: String,
    /// Its working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Its branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Its title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A subagent's transcript.
    pub subagent: bool,
    /// The tool whose result it waits for, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_tool: Option<String>,
    /// Its last activity (RFC 3339).
    pub last_activity: Option<String>,
    /// Milliseconds since then.
    pub quiet_ms: i64,
}

/// What `live` looks at.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// Now (ms since the epoch).
    pub now_ms: i64,
    /// Files written longer ago are left out.
    pub window_ms: i64,
    /// An open turn quiet for longer is stuck.
    pub stuck_after_ms: i64,
}

/// Where a turn stands after a line.
#[derive(Clone, Debug, Default)]
struct Turn {
    /// True once a turn ended and no new one began.
    ended: bool,
    /// Why it ended (`aborted` for Codex's `turn_aborted`).
    ended_how: Option<&'static str>,
    /// Tool calls waiting for their result: id → tool.
    pending: BTreeMap<String, String>,
    /// The last line was the model's answer (no tool call in it).
    answered: bool,
    /// The last timestamp seen.
    last_ms: Option<i64>,
    /// Anything read at all.
    seen: bool,
}

impl Turn {
    fn begin(&mut self) {
        self.ended = false;
        self.ended_how = None;
        self.answered = false;
    }

    fn end(&mut self, how: &'static str) {
        self.ended = true;
        self.ended_how = Some(how);
        self.pending.clear();
        self.answered = false;
    }

    fn claude(&mut self, line: &Value) {
        let kind = line["type"].as_str().unwrap_or("");
        let message = &line["message"];
        match kind {
            "user" => {
                if line["isMeta"].as_bool() == Some(true) {
                    return;
                }
                if let Some(blocks) = message["content"].as_array() {
                    for block in blocks {
                        if block["type"] == "tool_result"
                            && let Some(id) = block["tool_use_id"].as_str()
                        {
                            self.pending.remove(id);
                        }
                    }
                }
                // A prompt, or tool results: either way the model's turn.
                self.begin();
            }
            "assistant" => {
                self.begin();
                let mut called = false;
                if let Some(blocks) = message["content"].as_array() {
                    for block in blocks {
                        if block["type"] == "tool_use" {
                            called = true;
                            if let Some(id) = block["id"].as_str() {
                                let name = block["name"].as_str().unwrap_or("tool").to_owned();
                                self.pending.insert(id.to_owned(), name);
                            }
                        }
                    }
                }
                match message["stop_reason"].as_str() {
                    Some("end_turn" | "stop_sequence" | "max_tokens") if !called => {
                        self.end("answered");
                    }
                    _ => self.answered = !called && self.pending.is_empty(),
                }
            }
            "system"
                if matches!(
                    line["subtype"].as_str(),
                    Some("turn_duration" | "stop_hook_summary")
                ) && self.pending.is_empty() =>
            {
                self.end("answered");
            }
            _ => {}
        }
    }

    fn codex(&mut self, line: &Value) {
        let payload = &line["payload"];
        let kind = payload["type"].as_str().unwrap_or("");
        match line["type"].as_str().unwrap_or("") {
            "event_msg" => match kind {
                "task_started" | "turn_started" | "user_message" => self.begin(),
                "task_complete" | "turn_complete" => self.end("answered"),
                "turn_aborted" => self.end("aborted"),
                _ => {}
            },
            "response_item" => match kind {
                "function_call" | "custom_tool_call" | "local_shell_call" => {
                    self.begin();
                    if let Some(id) = payload["call_id"].as_str() {
                        let name = payload["name"].as_str().unwrap_or("shell").to_owned();
                        self.pending.insert(id.to_owned(), name);
                    }
                }
                "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
                    if let Some(id) = payload["call_id"].as_str() {
                        self.pending.remove(id);
                    }
                    self.answered = false;
                }
                "message" if payload["role"] == "assistant" => {
                    self.answered = self.pending.is_empty();
                }
                _ => {}
            },
            _ => {}
        }
    }
}

/// The bytes worth reading of a file: all of it when small, else its head and its tail
/// (from the first whole line); and whether the two were apart.
fn read_parts(path: &Path) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    if size <= HEAD_BYTES_MAX + TAIL_BYTES_MAX {
        let mut all = Vec::with_capacity(size as usize);
        file.read_to_end(&mut all)?;
        return Ok((all, Vec::new()));
    }
    let mut head = vec![0; HEAD_BYTES_MAX as usize];
    file.read_exact(&mut head)?;
    if let Some(end) = head.iter().rposition(|&b| b == b'\n') {
        head.truncate(end + 1);
    }
    file.seek(SeekFrom::Start(size - TAIL_BYTES_MAX))?;
    let mut tail = Vec::with_capacity(TAIL_BYTES_MAX as usize);
    file.read_to_end(&mut tail)?;
    let start = tail
        .iter()
        .position(|&b| b == b'\n')
        .map_or(tail.len(), |i| i + 1);
    tail.drain(..start);
    Ok((head, tail))
}

fn human_ms(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// The sessions whose files moved within the window, running and stuck first, then the
/// most recently active.
pub fn live(sources: &Sources, options: &LiveOptions) -> Vec<LiveSession> {
    let mut out = Vec::new();
    // Codex moves a session it archives out of `sessions/`: none there is live.
    let archived = sources
        .codex
        .as_ref()
        .map(|home| home.join("archived_sessions"));
    for (vendor, path, _key) in discover(sources) {
        if archived.as_ref().is_some_and(|dir| path.starts_with(dir)) {
            continue;
        }
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        let mtime_ms = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as i64);
        if options.now_ms - mtime_ms > options.window_ms {
            continue;
        }
        if let Some(session) = one(vendor, &path, mtime_ms, options) {
            out.push(session);
        }
    }
    out.sort_by(|a, b| a.state.cmp(&b.state).then(a.quiet_ms.cmp(&b.quiet_ms)));
    out
}

fn one(vendor: Vendor, path: &Path, mtime_ms: i64, options: &LiveOptions) -> Option<LiveSession> {
    let (head, tail) = read_parts(path).ok()?;
    let file_name = path.file_name()?.to_string_lossy().into_owned();
    let mut reader = crate::catalog::Reader::new(vendor, &file_name);
    let mut turn = Turn::default();
    let mut entries = Vec::new();
    let mut number = 0u64;
    let mut last_session: Option<String> = None;
    for part in [&head, &tail] {
        // Only whole lines: a line still being written is read next time.
        let whole = part.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        for raw in part[..whole].split(|&b| b == b'\n') {
            number += 1;
            let Ok(text) = std::str::from_utf8(raw) else {
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            entries.clear();
            reader.line(number, text, &mut entries);
            if let Some(entry) = entries.last() {
                last_session = Some(entry.session.clone());
            }
            let Ok(value) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            turn.seen = true;
            if let Some(ms) = value["timestamp"]
                .as_str()
                .and_then(transcript::timestamp_ms)
            {
                turn.last_ms = Some(turn.last_ms.map_or(ms, |l: i64| l.max(ms)));
            }
            match vendor {
                Vendor::Claude => turn.claude(&value),
                Vendor::Codex => turn.codex(&value),
            }
        }
    }
    if !turn.seen {
        return None;
    }
    let meta = reader.meta();
    let last_ms = turn.last_ms.unwrap_or(mtime_ms);
    let quiet_ms = (options.now_ms - last_ms).max(0);
    let pending_tool = turn.pending.values().next_back().cloned();
    let (state, reason) = if turn.ended {
        (
            LiveState::Idle,
            match turn.ended_how {
                Some("aborted") => format!("the turn was aborted {} ago", human_ms(quiet_ms)),
                _ => format!("answered {} ago; waits for a prompt", human_ms(quiet_ms)),
            },
        )
    } else if turn.answered && quiet_ms >= ANSWER_QUIET_MS {
        (
            LiveState::Idle,
            format!("answered {} ago; waits for a prompt", human_ms(quiet_ms)),
        )
    } else if quiet_ms > options.stuck_after_ms {
        let reason = match &pending_tool {
            Some(tool) => format!(
                "{tool} has had no result for {} (a hung command, or a permission prompt nobody answered)",
                human_ms(quiet_ms)
            ),
            None => format!(
                "its turn is open and nothing was written for {}",
                human_ms(quiet_ms)
            ),
        };
        (LiveState::Stuck, reason)
    } else {
        let reason = match &pending_tool {
            Some(tool) => format!("running {tool} for {}", human_ms(quiet_ms)),
            None => format!("the model's turn, last output {} ago", human_ms(quiet_ms)),
        };
        (LiveState::Running, reason)
    };
    let session = last_session
        .or_else(|| meta.id.clone())
        .unwrap_or_else(|| file_name.trim_end_matches(".jsonl").to_owned());
    Some(LiveSession {
        session,
        vendor,
        state,
        reason,
        file: path.display().to_string(),
        cwd: meta.cwd.clone(),
        branch: meta.branch.clone(),
        title: meta.title.clone(),
        subagent: meta.subagent,
        pending_tool,
        last_activity: transcript::rfc3339(last_ms),
        quiet_ms,
    })
}
