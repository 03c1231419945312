//! The transcript readers on fixtures in the vendors' real formats, every pitfall of
//! `shared/reference/agent-transcripts.md` in at least one of them: what each line
//! becomes, what the meta says, that a reader's state survives serialization at every
//! line, that a file read while it grows loses nothing, that no garbage makes a reader
//! panic, and that its state stays bounded.

use palm_sessions::claude::{ClaudeReader, TEXT_BYTES_MAX};
use palm_sessions::codex::CodexReader;
use palm_sessions::{Entry, Role, SessionMeta};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::fmt::Debug;
use std::path::{Path, PathBuf};

const SESSION: &str = "5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70";
const CLAUDE: &str = "claude/-home-me-app/5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70.jsonl";
const CLAUDE_SUBAGENT: &str =
    "claude/-home-me-app/5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70/subagents/agent-a1b2c3d4.jsonl";
const CLAUDE_OLD_SUBAGENT: &str = "claude/-home-me-app/agent-d4e5f6a7.jsonl";
const CLAUDE_FIXTURES: [&str; 3] = [CLAUDE, CLAUDE_SUBAGENT, CLAUDE_OLD_SUBAGENT];

const THREAD: &str = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
const FORK: &str = "0199a1b2-ffff-7e5f-8a9b-0c1d2e3f4a5b";
const SPAWNED: &str = "0199a1b2-aaaa-7e5f-8a9b-0c1d2e3f4a5b";
const LEGACY: &str = "5a8b1c2d-0000-4000-8000-123456789abc";
const CODEX: &str = "codex/rollout-2026-11-21T09-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl";
const CODEX_FORK: &str =
    "codex/rollout-2026-11-21T09-30-00-0199a1b2-ffff-7e5f-8a9b-0c1d2e3f4a5b.jsonl";
const CODEX_SUBAGENT: &str =
    "codex/rollout-2026-11-21T09-00-50-0199a1b2-aaaa-7e5f-8a9b-0c1d2e3f4a5b.jsonl";
const CODEX_LEGACY: &str =
    "codex/rollout-2025-08-01T12-00-00-5a8b1c2d-0000-4000-8000-123456789abc.jsonl";
const CODEX_FIXTURES: [&str; 4] = [CODEX, CODEX_FORK, CODEX_SUBAGENT, CODEX_LEGACY];

/// Both readers, so one test runs over every fixture.
trait Reader: Clone + Debug + PartialEq + Serialize + DeserializeOwned {
    fn open(file_name: &str) -> Self;
    fn feed(&mut self, number: u64, text: &str, out: &mut Vec<Entry>);
    fn said(&self) -> &SessionMeta;
}

impl Reader for ClaudeReader {
    fn open(file_name: &str) -> Self {
        ClaudeReader::new(file_name)
    }
    fn feed(&mut self, number: u64, text: &str, out: &mut Vec<Entry>) {
        self.line(number, text, out);
    }
    fn said(&self) -> &SessionMeta {
        self.meta()
    }
}

impl Reader for CodexReader {
    fn open(file_name: &str) -> Self {
        CodexReader::new(file_name)
    }
    fn feed(&mut self, number: u64, text: &str, out: &mut Vec<Entry>) {
        self.line(number, text, out);
    }
    fn said(&self) -> &SessionMeta {
        self.meta()
    }
}

fn fixture(relative: &str) -> (String, String) {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(relative);
    let text = std::fs::read_to_string(&path).expect("fixture");
    let name = path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    (name, text)
}

/// The complete lines of a file: a last line without its newline is still being
/// written, and the ingest does not feed it.
fn complete_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    lines.pop();
    lines
}

fn feed_all<R: Reader>(reader: &mut R, lines: &[&str], first: usize, out: &mut Vec<Entry>) {
    for (i, line) in lines.iter().enumerate() {
        reader.feed((first + i) as u64 + 1, line, out);
    }
}

fn read<R: Reader>(relative: &str) -> (Vec<Entry>, SessionMeta) {
    let (name, text) = fixture(relative);
    let mut reader = R::open(&name);
    let mut out = Vec::new();
    feed_all(&mut reader, &complete_lines(&text), 0, &mut out);
    (out, reader.said().clone())
}

fn read_lines<R: Reader>(name: &str, lines: &[Value]) -> (Vec<Entry>, SessionMeta) {
    let mut reader = R::open(name);
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        reader.feed(i as u64 + 1, &line.to_string(), &mut out);
    }
    (out, reader.said().clone())
}

fn texts(entries: &[Entry], role: Role) -> Vec<&str> {
    entries
        .iter()
        .filter(|e| e.role == role)
        .map(|e| e.text.as_str())
        .collect()
}

/// Each tool entry of `role` as (text, tool, id).
fn tools(entries: &[Entry], role: Role) -> Vec<(&str, Option<&str>, Option<&str>)> {
    entries
        .iter()
        .filter(|e| e.role == role)
        .map(|e| (e.text.as_str(), e.tool.as_deref(), e.id.as_deref()))
        .collect()
}

fn lines_and_roles(entries: &[Entry]) -> Vec<(u64, Role)> {
    entries.iter().map(|e| (e.line, e.role)).collect()
}

// ----- Claude -----

#[test]
fn claude_every_line_becomes_what_it_means() {
    use Role::*;
    let (entries, meta) = read::<ClaudeReader>(CLAUDE);
    assert_eq!(
        lines_and_roles(&entries),
        [
            (1, Summary),
            (3, User),
            (4, System),
            (5, System),
            (6, Reasoning),
            (7, Assistant),
            (8, ToolCall),
            (9, ToolResult),
            (11, System),
            (13, ToolCall),
            (14, ToolResult),
            (16, User),
            (18, System),
            (19, Summary),
            (20, Assistant),
            (21, ToolResult),
            (22, System),
            (23, Summary),
            (24, Summary),
            (25, Summary),
            (31, Unknown),
        ],
        "{entries:#?}"
    );
    assert!(entries.iter().all(|e| e.session == SESSION));
    assert_eq!(meta.id.as_deref(), Some(SESSION));
    assert_eq!(meta.parent, None);
    assert!(!meta.subagent);
    assert_eq!(meta.cwd.as_deref(), Some("/home/me/app"));
    assert_eq!(meta.branch.as_deref(), Some("feature/lease"));
    assert_eq!(meta.version.as_deref(), Some("2.0.14"));
    // The API error notice's `<synthetic>` model is no model.
    assert_eq!(meta.model.as_deref(), Some("claude-opus-4-1"));
    let prompt = &entries[1];
    assert_eq!(
        prompt.timestamp_ms,
        palm_sessions::transcript::timestamp_ms("2026-11-20T10:00:00.000Z")
    );
    assert_eq!(
        prompt.id.as_deref(),
        Some("7c0f4d1e-0a6b-4f5e-9d2c-000000000001")
    );
    assert_eq!(meta.first_ms, prompt.timestamp_ms);
    assert_eq!(
        meta.last_ms,
        palm_sessions::transcript::timestamp_ms("2026-11-20T10:00:51.000Z")
    );
}

#[test]
fn claude_prompts_are_only_what_a_person_typed() {
    let (entries, _) = read::<ClaudeReader>(CLAUDE);
    // Not the isMeta caveat, not command output, not the results-only lines, not the
    // compaction's summary, not the queued text (a state line), not the cut last line.
    assert_eq!(
        texts(&entries, Role::User),
        [
            "Why is the lease renewal test flaky?",
            "Also check the seat lock, see the screenshot\n[image]"
        ]
    );
    let system = texts(&entries, Role::System);
    assert!(
        system[0].starts_with("Caveat: The messages below"),
        "{system:?}"
    );
    assert_eq!(
        system[1],
        "<local-command-stdout>Set model to opus (claude-opus-4-1)</local-command-stdout>"
    );
    assert_eq!(
        system[2], "PostToolUse:Bash: lint: 0 warnings",
        "hook output"
    );
    assert_eq!(system[3], "compacted (trigger: auto, 154000 tokens before)");
    assert_eq!(system[4], "API Error: Request was aborted.");
    assert_eq!(
        system.len(),
        5,
        "turn_duration and stop_hook_summary say nothing"
    );
}

#[test]
fn claude_assistant_blocks_become_answers_reasoning_and_calls() {
    let (entries, _) = read::<ClaudeReader>(CLAUDE);
    assert_eq!(
        texts(&entries, Role::Reasoning),
        ["The timer and the renewal share a lock."]
    );
    assert_eq!(
        texts(&entries, Role::Assistant),
        [
            "Let me run the test first.",
            "The renewal must take the seat's lock before the timer's."
        ]
    );
    assert_eq!(
        tools(&entries, Role::ToolCall),
        [
            (
                "cargo test -p palm-actors lease_renewal",
                Some("Bash"),
                Some("msg_01HqL8xW3vKpT6yNcR2mZ9aF")
            ),
            (
                "/home/me/app/actors/src/lease.rs\nlet seat = self.seat.lock();\n        let timer = self.timer.lock();",
                Some("Edit"),
                Some("msg_01Jd4sQ7bE2uV9wXkM5nP3cG")
            ),
        ]
    );
    // Every block of one message carries its id.
    let first_message: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.id.as_deref() == Some("msg_01HqL8xW3vKpT6yNcR2mZ9aF"))
        .collect();
    assert_eq!(first_message.len(), 3);
}

#[test]
fn claude_tool_results_are_named_by_their_tool_use_id() {
    let (entries, _) = read::<ClaudeReader>(CLAUDE);
    assert_eq!(
        tools(&entries, Role::ToolResult),
        [
            (
                "test lease::tests::lease_renewal ... FAILED\n\nfailures:\n    lease::tests::lease_renewal",
                Some("Bash"),
                Some("toolu_01AbRq7sT2uV3wX4yZ5aB6cD")
            ),
            (
                "The file /home/me/app/actors/src/lease.rs has been updated.",
                Some("Edit"),
                Some("toolu_01EfGh8iJ9kL0mN1oP2qR3sT")
            ),
            // Its tool_use came before the compaction, in no line of this file.
            (
                "[error] Error: file changed on disk",
                None,
                Some("toolu_01ZzUnknownFromBeforeCompact")
            ),
        ]
    );
}

#[test]
fn claude_usage_counts_each_message_id_once() {
    let (_, meta) = read::<ClaudeReader>(CLAUDE);
    // msg_01…: three lines (thinking, text, tool_use), the last with the final output;
    // input is input + cache creation + cache reads.
    let first = (4 + 1200 + 15000, 156);
    let second = (6 + 16000, 220);
    let third = (3 + 500 + 9000, 40);
    assert_eq!(meta.input_tokens, first.0 + second.0 + third.0);
    assert_eq!(meta.output_tokens, first.1 + second.1 + third.1);

    // Lines of one message that repeat the same usage count once; lines of another
    // message in between do not make the first count twice.
    let usage = json!({"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 7});
    let assistant = |id: &str, text: &str| {
        json!({"type": "assistant", "sessionId": SESSION, "uuid": format!("u-{text}"),
               "message": {"id": id, "role": "assistant", "model": "claude-sonnet-4-5",
                           "content": [{"type": "text", "text": text}], "usage": usage}})
    };
    let (_, meta) = read_lines::<ClaudeReader>(
        &format!("{SESSION}.jsonl"),
        &[
            assistant("msg_01A", "one"),
            assistant("msg_01A", "two"),
            assistant("msg_01B", "three"),
            assistant("msg_01A", "four"),
            assistant("msg_01B", "five"),
        ],
    );
    assert_eq!((meta.input_tokens, meta.output_tokens), (200, 14));
}

#[test]
fn claude_titles_custom_beats_ai_beats_summary() {
    let (entries, meta) = read::<ClaudeReader>(CLAUDE);
    assert_eq!(meta.title.as_deref(), Some("Lease race (mine)"));
    let summaries = texts(&entries, Role::Summary);
    assert_eq!(summaries.len(), 5, "{summaries:?}");
    assert_eq!(summaries[0], "Lease renewal races");
    assert!(summaries[1].starts_with("This session is being continued"));
    // The repeated custom title (line 26) is no new summary.
    assert_eq!(
        summaries[2..],
        [
            "Fix lease renewal race",
            "Lease race (mine)",
            "Another AI title"
        ]
    );
    // Title lines carry no uuid, and no id is made up for them.
    assert!(
        entries
            .iter()
            .filter(|e| e.role == Role::Summary && e.line != 19)
            .all(|e| e.id.is_none())
    );
    // An AI title replaces an older one; a summary never replaces an AI title.
    let (_, meta) = read_lines::<ClaudeReader>(
        "s.jsonl",
        &[
            json!({"type": "ai-title", "aiTitle": "first"}),
            json!({"type": "ai-title", "aiTitle": "second"}),
            json!({"type": "summary", "summary": "older", "leafUuid": "x"}),
        ],
    );
    assert_eq!(meta.title.as_deref(), Some("second"));
}

#[test]
fn claude_state_only_unknown_and_non_json_lines_make_nothing_up() {
    let (entries, _) = read::<ClaudeReader>(CLAUDE);
    assert_eq!(texts(&entries, Role::Unknown), ["a future line with text"]);
    for line in [2, 10, 12, 15, 17, 26, 27, 28, 29, 30, 32, 33, 34] {
        assert!(
            entries.iter().all(|e| e.line != line),
            "line {line} made an entry"
        );
    }
    assert!(
        !entries
            .iter()
            .any(|e| e.text.contains("check the seat lock too"))
    );
    assert!(!entries.iter().any(|e| e.text.contains("cut off")));
}

#[test]
fn claude_subagents_are_sessions_of_their_own_in_both_layouts() {
    for (relative, id) in [
        (CLAUDE_SUBAGENT, "agent-a1b2c3d4"),
        (CLAUDE_OLD_SUBAGENT, "agent-d4e5f6a7"),
    ] {
        let (entries, meta) = read::<ClaudeReader>(relative);
        assert!(meta.subagent, "{relative}");
        assert_eq!(meta.id.as_deref(), Some(id));
        assert_eq!(meta.parent.as_deref(), Some(SESSION), "the main session");
        assert!(entries.iter().all(|e| e.session == id), "{entries:#?}");
        assert_eq!(
            texts(&entries, Role::User),
            ["Search the code for everything that takes the seat lock"]
        );
        let calls = tools(&entries, Role::ToolCall);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].1, Some("Grep"));
        let input: Value = serde_json::from_str(calls[0].0).expect("the input's JSON");
        assert_eq!(input["pattern"], "seat.lock()");
        assert_eq!(tools(&entries, Role::ToolResult)[0].1, Some("Grep"));
        assert_eq!(
            texts(&entries, Role::Assistant),
            ["SeatLock is taken in seats.rs:88 only."]
        );
        assert_eq!(
            (meta.input_tokens, meta.output_tokens),
            (5 + 3000 + 2 + 3100, 30 + 12)
        );
        assert_eq!(meta.model.as_deref(), Some("claude-haiku-4-5"));
    }
}

#[test]
fn claude_sidechain_file_of_another_name_is_a_subagents() {
    let line = |text: &str| {
        json!({"type": "user", "isSidechain": true, "sessionId": SESSION, "agentId": "f00dcafe",
               "uuid": format!("u-{text}"), "message": {"role": "user", "content": text}})
    };
    let (entries, meta) = read_lines::<ClaudeReader>(
        "0a0b0c0d-1111-4222-8333-444455556666.jsonl",
        &[line("look around"), line("and report")],
    );
    assert!(meta.subagent);
    assert_eq!(meta.id.as_deref(), Some("agent-f00dcafe"));
    assert_eq!(meta.parent.as_deref(), Some(SESSION));
    assert!(entries.iter().all(|e| e.session == "agent-f00dcafe"));

    // A main session's file whose first line is no sidechain stays the main session's.
    let (_, meta) = read_lines::<ClaudeReader>(
        &format!("{SESSION}.jsonl"),
        &[
            json!({"type": "user", "isSidechain": false, "sessionId": SESSION, "message": {"content": "hi"}}),
            line("a sidechain line in a main file (old builds)"),
        ],
    );
    assert!(!meta.subagent);
    assert_eq!(meta.id.as_deref(), Some(SESSION));
}

#[test]
fn claude_file_holding_another_sessions_lines_keeps_its_own_id() {
    // History copied from an earlier session (a resume or fork of old builds): the
    // file is its own session, the earlier one its parent.
    let earlier = "11111111-2222-4333-8444-555555555555";
    let line = |session: &str, text: &str| {
        json!({"type": "user", "sessionId": session, "uuid": format!("u-{text}"),
               "message": {"role": "user", "content": text}})
    };
    let (entries, meta) = read_lines::<ClaudeReader>(
        &format!("{SESSION}.jsonl"),
        &[line(earlier, "copied"), line(SESSION, "new")],
    );
    assert_eq!(meta.id.as_deref(), Some(SESSION));
    assert_eq!(meta.parent.as_deref(), Some(earlier));
    assert!(entries.iter().all(|e| e.session == SESSION));

    // A file not named by a uuid takes its lines' session, else its name.
    let (_, meta) = read_lines::<ClaudeReader>("notes.jsonl", &[line(earlier, "x")]);
    assert_eq!((meta.id.as_deref(), meta.parent), (Some(earlier), None));
    let (entries, meta) = read_lines::<ClaudeReader>(
        "notes.jsonl",
        &[json!({"type": "user", "message": {"content": "no id"}})],
    );
    assert_eq!(meta.id, None);
    assert_eq!(entries[0].session, "notes");
}

#[test]
fn claude_partial_trailing_line_is_read_once_completed() {
    let (name, text) = fixture(CLAUDE);
    assert!(!text.ends_with('\n'), "the fixture ends in a cut line");
    let (before, _) = read::<ClaudeReader>(CLAUDE);
    let lines = complete_lines(&text);
    let mut reader = ClaudeReader::new(&name);
    let mut out = Vec::new();
    feed_all(&mut reader, &lines, 0, &mut out);
    assert_eq!(out, before);
    // The writer finishes the cut line.
    let cut = text.rsplit('\n').next().expect("cut line");
    let whole = format!(
        "{cut} sentence\"}},\"uuid\":\"7c0f4d1e-0a6b-4f5e-9d2c-000000000021\",\"timestamp\":\"2026-11-20T10:01:00.000Z\"}}"
    );
    assert!(serde_json::from_str::<Value>(&whole).is_ok(), "{whole}");
    reader.line(lines.len() as u64 + 1, &whole, &mut out);
    assert_eq!(out.len(), before.len() + 1);
    let last = out.last().expect("the finished line");
    assert_eq!(
        (last.line, last.role, last.text.as_str()),
        (35, Role::User, "cut off mid sentence")
    );
}

// ----- Codex -----

#[test]
fn codex_every_line_becomes_what_it_means() {
    use Role::*;
    let (entries, meta) = read::<CodexReader>(CODEX);
    assert_eq!(
        lines_and_roles(&entries),
        [
            (2, System),
            (3, System),
            (4, System),
            (7, User),
            (10, Reasoning),
            (11, ToolCall),
            (12, ToolResult),
            (14, ToolCall),
            (15, ToolResult),
            (17, ToolCall),
            (18, ToolResult),
            (19, Assistant),
            (24, System),
            (25, User),
            (28, Assistant),
            (29, ToolCall),
            (30, System),
            (33, System),
            (34, System),
            (36, Unknown),
        ],
        "{entries:#?}"
    );
    assert!(entries.iter().all(|e| e.session == THREAD));
    assert_eq!(meta.id.as_deref(), Some(THREAD));
    assert_eq!(meta.parent, None);
    assert!(!meta.subagent);
    assert_eq!(meta.model.as_deref(), Some("gpt-5-codex"));
    assert_eq!(
        meta.commit.as_deref(),
        Some("3f1c9a2e7b4d5c6e8f9a0b1c2d3e4f5a6b7c8d9e")
    );
    assert_eq!(meta.branch.as_deref(), Some("main"));
    assert_eq!(meta.version.as_deref(), Some("0.46.0"));
    assert_eq!(texts(&entries, Role::Unknown), ["a future line with text"]);
}

#[test]
fn codex_injected_context_is_system_and_prompts_come_once_in_order() {
    let (entries, _) = read::<CodexReader>(CODEX);
    // The first prompt's item came before its event, the second's after: once each.
    assert_eq!(
        texts(&entries, Role::User),
        ["Speed up the tunnel writer", "Now add a benchmark for it"]
    );
    let system = texts(&entries, Role::System);
    assert!(system[0].starts_with("<permissions instructions>"));
    assert!(system[1].starts_with("# AGENTS.md instructions for /home/me/app"));
    assert!(system[2].starts_with("<environment_context>"));
    assert!(system[3].contains("<cwd>/home/me/app/transport</cwd>"));
    assert_eq!(
        system[4..],
        [
            "turn aborted: interrupted",
            "Summary: writes are batched with write_vectored; a criterion bench for the writer is next.",
            "context compacted"
        ]
    );
}

#[test]
fn codex_prompt_copies_in_either_order_make_one_prompt() {
    let meta = json!({"timestamp": "2026-11-21T09:00:00Z", "type": "session_meta",
                      "payload": {"id": THREAD, "cwd": "/w", "cli_version": "0.46.0", "source": "exec"}});
    let item = |text: &str| {
        json!({"timestamp": "2026-11-21T09:00:01Z", "type": "response_item",
               "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}})
    };
    let event = |text: &str| {
        json!({"timestamp": "2026-11-21T09:00:01Z", "type": "event_msg",
               "payload": {"type": "user_message", "message": text, "images": []}})
    };
    let name = format!("rollout-2026-11-21T09-00-00-{THREAD}.jsonl");
    let orders = [
        vec![
            meta.clone(),
            item("a"),
            event("a"),
            item("b"),
            event("b"),
            item("a"),
            event("a"),
        ],
        vec![
            meta.clone(),
            event("a"),
            item("a"),
            event("b"),
            item("b"),
            event("a"),
            item("a"),
        ],
        vec![
            meta.clone(),
            item("a"),
            event("a"),
            event("b"),
            item("b"),
            item("a"),
            event("a"),
        ],
    ];
    for lines in orders {
        let (entries, _) = read_lines::<CodexReader>(&name, &lines);
        // A prompt typed twice is two prompts.
        assert_eq!(texts(&entries, Role::User), ["a", "b", "a"], "{lines:#?}");
    }
    // Injected context in an event too is read once, from its item.
    let context = "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>";
    let (entries, _) = read_lines::<CodexReader>(&name, &[meta, item(context), event(context)]);
    assert_eq!(texts(&entries, Role::System), [context]);
    assert_eq!(texts(&entries, Role::User), Vec::<&str>::new());
}

#[test]
fn codex_answers_and_reasoning_come_once() {
    let (entries, _) = read::<CodexReader>(CODEX);
    // The first answer's item came before its agent_message, the second's after.
    assert_eq!(
        texts(&entries, Role::Assistant),
        [
            "Writes are batched with write_vectored now; the tests pass.",
            "I'll add a criterion bench for the writer."
        ]
    );
    assert_eq!(
        entries
            .iter()
            .find(|e| e.role == Role::Assistant)
            .and_then(|e| e.id.as_deref()),
        Some("msg_68f1a2b3c4d5e6f8")
    );
    // agent_reasoning came first; the reasoning item is what is kept.
    assert_eq!(
        texts(&entries, Role::Reasoning),
        ["**Batching writes**\n\nThe writer flushes once per frame."]
    );
    assert_eq!(
        entries
            .iter()
            .find(|e| e.role == Role::Reasoning)
            .map(|e| e.line),
        Some(10)
    );
}

#[test]
fn codex_a_plan_is_kept_and_other_completed_items_are_not_read_twice() {
    let (entries, _) = read_lines::<CodexReader>(
        "rollout-2026-11-21T09-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl",
        &[
            json!({"timestamp": "2026-11-21T09:00:01Z", "type": "event_msg", "payload": {"type": "item_completed", "thread_id": "t", "turn_id": "1", "item": {"type": "Plan", "id": "p1", "text": "1. read the link\n2. batch its writes"}}}),
            json!({"timestamp": "2026-11-21T09:00:02Z", "type": "event_msg", "payload": {"type": "item_completed", "thread_id": "t", "turn_id": "1", "item": {"type": "AgentMessage", "id": "m1", "content": [{"type": "Text", "text": "a copy"}]}}}),
        ],
    );
    assert_eq!(
        texts(&entries, Role::Assistant),
        ["1. read the link\n2. batch its writes"]
    );
    assert_eq!(entries.len(), 1, "{entries:?}");
}

#[test]
fn codex_calls_and_results_are_joined_by_call_id() {
    let (entries, _) = read::<CodexReader>(CODEX);
    let patch = "*** Begin Patch\n*** Update File: transport/src/link.rs\n@@\n-        stream.write_all(&frame)?;\n+        stream.write_vectored(&frames)?;\n*** End Patch";
    assert_eq!(
        tools(&entries, Role::ToolCall),
        [
            (
                "rg -n write_all transport/src",
                Some("exec_command"),
                Some("call_9kQm2VxT4bLpR7sN1cYw3HdA")
            ),
            (
                patch,
                Some("apply_patch"),
                Some("call_2LmN8pQr5sTuV6wXyZ1aB3cD")
            ),
            (
                "cargo test -p palm-transport",
                Some("shell"),
                Some("call_7HjK3lMn9oPqR2sTuV4wX5yZ")
            ),
            // Interrupted: no output ever came.
            (
                "cargo bench --bench writer",
                Some("shell"),
                Some("call_5AbC1dEf2gHi3jKl4mNo5pQr")
            ),
        ]
    );
    assert_eq!(
        tools(&entries, Role::ToolResult),
        [
            // exec_command_end came first; the output item repeating it is skipped.
            (
                "transport/src/link.rs:42:        stream.write_all(&frame)?;\n",
                Some("exec_command"),
                Some("call_9kQm2VxT4bLpR7sN1cYw3HdA")
            ),
            // The output item came first (decoded once more); patch_apply_end is skipped.
            (
                "Success. Updated the following files:\nM transport/src/link.rs\n",
                Some("apply_patch"),
                Some("call_2LmN8pQr5sTuV6wXyZ1aB3cD")
            ),
            (
                "test result: ok. 12 passed; 0 failed\n",
                Some("shell"),
                Some("call_7HjK3lMn9oPqR2sTuV4wX5yZ")
            ),
        ]
    );
}

#[test]
fn codex_tokens_are_the_last_token_count() {
    let (_, meta) = read::<CodexReader>(CODEX);
    // A null info after the totals changes nothing; totals are cumulative, not summed.
    assert_eq!((meta.input_tokens, meta.output_tokens), (31000, 1800));
    let (_, text) = fixture(CODEX);
    let lines = complete_lines(&text);
    let mut reader = CodexReader::new("x.jsonl");
    feed_all(&mut reader, &lines[..8], 0, &mut Vec::new());
    assert_eq!(
        (reader.meta().input_tokens, reader.meta().output_tokens),
        (0, 0),
        "only a null info so far"
    );
}

#[test]
fn codex_resume_in_the_same_file_continues_the_session() {
    let (entries, meta) = read::<CodexReader>(CODEX);
    assert_eq!(meta.id.as_deref(), Some(THREAD));
    assert_eq!(
        meta.cwd.as_deref(),
        Some("/home/me/app/transport"),
        "the latest cwd"
    );
    let resumed: Vec<&Entry> = entries.iter().filter(|e| e.line >= 23).collect();
    assert!(!resumed.is_empty());
    assert!(resumed.iter().all(|e| e.session == THREAD));
    assert_eq!(
        meta.first_ms,
        palm_sessions::transcript::timestamp_ms("2026-11-21T09:00:00.000Z")
    );
    assert_eq!(
        meta.last_ms,
        palm_sessions::transcript::timestamp_ms("2026-11-23T08:05:03.000Z")
    );
}

#[test]
fn codex_fork_keeps_its_own_id_and_names_its_parent() {
    let (entries, meta) = read::<CodexReader>(CODEX_FORK);
    assert_eq!(meta.id.as_deref(), Some(FORK));
    assert_eq!(meta.parent.as_deref(), Some(THREAD));
    assert_eq!(
        meta.version.as_deref(),
        Some("0.47.0"),
        "the parent's meta replaced nothing"
    );
    assert!(!meta.subagent);
    // The replayed parent items are in this file: they are read as the fork's.
    assert!(entries.iter().all(|e| e.session == FORK));
    assert_eq!(
        texts(&entries, Role::User),
        ["Speed up the tunnel writer", "Try io_uring instead"]
    );
    assert_eq!(
        texts(&entries, Role::Assistant),
        [
            "Writes are batched with write_vectored now; the tests pass.",
            "io_uring removes the copies; here is the plan."
        ]
    );
    assert_eq!((meta.input_tokens, meta.output_tokens), (26000, 1500));

    // A fork whose own meta does not say its parent learns it from the replayed one.
    let meta_line = |id: &str| {
        json!({"timestamp": "2026-11-21T09:00:00Z", "type": "session_meta",
               "payload": {"id": id, "cwd": "/w", "cli_version": "0.47.0", "source": "cli"}})
    };
    let (_, meta) = read_lines::<CodexReader>(
        &format!("rollout-2026-11-21T09-30-00-{FORK}.jsonl"),
        &[meta_line(FORK), meta_line(THREAD), meta_line(SPAWNED)],
    );
    assert_eq!(meta.id.as_deref(), Some(FORK));
    assert_eq!(
        meta.parent.as_deref(),
        Some(THREAD),
        "the first replayed meta"
    );
}

#[test]
fn codex_subagent_names_its_spawner() {
    let (entries, meta) = read::<CodexReader>(CODEX_SUBAGENT);
    assert!(meta.subagent);
    assert_eq!(meta.id.as_deref(), Some(SPAWNED));
    assert_eq!(meta.parent.as_deref(), Some(THREAD));
    assert_eq!(meta.title.as_deref(), Some("scout"));
    assert!(entries.iter().all(|e| e.session == SPAWNED));
    assert_eq!(
        texts(&entries, Role::User),
        ["Find every write_all in transport/"]
    );
    assert_eq!(
        tools(&entries, Role::ToolResult),
        [(
            "transport/src/link.rs:42:        stream.write_all(&frame)?;",
            Some("exec_command"),
            Some("call_3SuBaGeNt4rG5wR6iT7eA8lL")
        )]
    );
    assert_eq!(
        texts(&entries, Role::Assistant),
        ["One call site: transport/src/link.rs:42."]
    );
}

#[test]
fn codex_legacy_file_reads_without_session_meta() {
    use Role::*;
    let (entries, meta) = read::<CodexReader>(CODEX_LEGACY);
    assert_eq!(meta.id.as_deref(), Some(LEGACY));
    assert_eq!(
        meta.commit.as_deref(),
        Some("def4567890abcdef1234567890abcdef12345678")
    );
    assert_eq!(meta.branch.as_deref(), Some("old-store"));
    assert_eq!(
        lines_and_roles(&entries),
        [
            (3, System),
            (4, System),
            (5, User),
            (7, Reasoning),
            (8, ToolCall),
            (9, ToolResult),
            (10, Assistant)
        ]
    );
    assert!(
        entries
            .iter()
            .all(|e| e.session == LEGACY && e.timestamp_ms.is_none())
    );
    // No user_message events in a legacy file: its user items are the prompts.
    assert_eq!(texts(&entries, User), ["Explain the legacy store"]);
    assert_eq!(
        tools(&entries, ToolCall),
        [(
            "ls store",
            Some("shell"),
            Some("call_LeGaCy1aBcDeFgHiJkLmNoPq")
        )]
    );
    assert_eq!(
        tools(&entries, ToolResult),
        [(
            "Cargo.toml\nsrc\n",
            Some("shell"),
            Some("call_LeGaCy1aBcDeFgHiJkLmNoPq")
        )]
    );
    assert_eq!(
        meta.first_ms,
        palm_sessions::transcript::timestamp_ms("2025-08-01T12:00:00.000Z")
    );
}

#[test]
fn codex_session_id_falls_back_to_the_file_name() {
    let name = format!("rollout-2025-08-01T12-00-00-{LEGACY}.jsonl");
    let (entries, meta) = read_lines::<CodexReader>(
        &name,
        &[
            json!({"record_type": "state"}),
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}),
        ],
    );
    assert_eq!(meta.id, None);
    assert_eq!(entries[0].session, LEGACY);
    let (entries, _) = read_lines::<CodexReader>(
        "odd.jsonl",
        &[json!({"type": "message", "role": "user", "content": "hello"})],
    );
    assert_eq!(entries[0].session, "odd");
}

// ----- Both -----

fn resumes_at_every_line<R: Reader>(relative: &str) {
    let (whole, whole_meta) = read::<R>(relative);
    let (name, text) = fixture(relative);
    let lines = complete_lines(&text);
    for split in 0..=lines.len() {
        let mut reader = R::open(&name);
        let mut out = Vec::new();
        feed_all(&mut reader, &lines[..split], 0, &mut out);
        let saved = serde_json::to_string(&reader).expect("serialize");
        let mut restored: R = serde_json::from_str(&saved).expect("deserialize");
        assert_eq!(restored, reader, "{relative}: state at {split}");
        feed_all(&mut restored, &lines[split..], split, &mut out);
        assert_eq!(out, whole, "{relative} split at {split}");
        assert_eq!(restored.said(), &whole_meta, "{relative} split at {split}");
    }
}

#[test]
fn every_fixture_resumes_from_serialized_state_at_every_line() {
    for relative in CLAUDE_FIXTURES {
        resumes_at_every_line::<ClaudeReader>(relative);
    }
    for relative in CODEX_FIXTURES {
        resumes_at_every_line::<CodexReader>(relative);
    }
}

/// The file as an ingest sees it while it is written: cut inside each line in turn,
/// the complete lines read, the state saved; then the rest read on a later run.
fn grows<R: Reader>(relative: &str) {
    let (whole, whole_meta) = read::<R>(relative);
    let (name, text) = fixture(relative);
    let mut start = 0;
    for line in complete_lines(&text) {
        let mut cut = start + line.len() / 2;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let written = &text[..cut];
        let mut reader = R::open(&name);
        let mut out = Vec::new();
        let done = complete_lines(written);
        feed_all(&mut reader, &done, 0, &mut out);
        let saved = serde_json::to_string(&reader).expect("serialize");
        let mut reader: R = serde_json::from_str(&saved).expect("deserialize");
        // Later, the whole file: what was not fed yet is fed now.
        let all = complete_lines(&text);
        feed_all(&mut reader, &all[done.len()..], done.len(), &mut out);
        assert_eq!(out, whole, "{relative} cut at byte {cut}");
        assert_eq!(reader.said(), &whole_meta, "{relative} cut at byte {cut}");
        start += line.len() + 1;
    }
}

#[test]
fn a_file_read_while_it_is_written_loses_nothing() {
    for relative in CLAUDE_FIXTURES {
        grows::<ClaudeReader>(relative);
    }
    for relative in CODEX_FIXTURES {
        grows::<CodexReader>(relative);
    }
}

const GARBAGE: [&str; 24] = [
    "",
    "   ",
    "{",
    "[1,2,3]",
    "null",
    "\"a string\"",
    "{\"type\": 5}",
    "{\"type\": \"user\", \"message\": null}",
    "{\"type\": \"user\", \"message\": {\"content\": 5}}",
    "{\"type\": \"user\", \"message\": {\"content\": [5, null, {\"type\": \"tool_result\", \"content\": 7}]}}",
    "{\"type\": \"assistant\", \"message\": {\"content\": [5, null, {\"type\": 3}]}}",
    "{\"type\": \"assistant\", \"message\": {\"id\": 7, \"usage\": \"lots\", \"content\": \"plain\"}}",
    "{\"type\": \"assistant\", \"message\": {\"id\": \"m\", \"usage\": {\"input_tokens\": -5, \"output_tokens\": 1e400}}}",
    "{\"type\": \"system\", \"subtype\": \"compact_boundary\", \"compactMetadata\": 3}",
    "{\"type\": \"custom-title\", \"customTitle\": null, \"sessionId\": []}",
    "{\"type\": \"response_item\", \"payload\": null}",
    "{\"type\": \"response_item\", \"payload\": {\"type\": \"function_call\", \"arguments\": 5}}",
    "{\"type\": \"response_item\", \"payload\": {\"type\": \"function_call_output\", \"output\": {\"x\": 1}}}",
    "{\"type\": \"response_item\", \"payload\": {\"type\": \"message\", \"role\": 4, \"content\": {\"a\": 1}}}",
    "{\"type\": \"event_msg\", \"payload\": {\"type\": \"token_count\", \"info\": 3}}",
    "{\"type\": \"session_meta\", \"payload\": {\"id\": 9, \"source\": {\"subagent\": 1}}}",
    "{\"timestamp\": \"not a time\", \"type\": \"event_msg\", \"payload\": {\"type\": \"user_message\", \"message\": [1]}}",
    "{\"type\": \"summary\", \"summary\": {\"nested\": true}}",
    "{\"id\": 12, \"git\": \"none\"}",
];

/// Every node of a JSON value, as pointers, at most `max`.
fn pointers(value: &Value, at: String, into: &mut Vec<String>, max: usize) {
    if into.len() >= max {
        return;
    }
    into.push(at.clone());
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let key = key.replace('~', "~0").replace('/', "~1");
                pointers(inner, format!("{at}/{key}"), into, max);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate().take(4) {
                pointers(inner, format!("{at}/{i}"), into, max);
            }
        }
        _ => {}
    }
}

fn survives_garbage<R: Reader>(relatives: &[&str]) {
    let mut reader = R::open("whatever.jsonl");
    let mut out = Vec::new();
    for (i, line) in GARBAGE.iter().enumerate() {
        reader.feed(i as u64 + 1, line, &mut out);
    }
    // Random bytes, lossily decoded as the ingest does.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for n in 0..500u64 {
        let bytes: Vec<u8> = (0..(n % 97))
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed & 0xff) as u8
            })
            .collect();
        reader.feed(100 + n, &String::from_utf8_lossy(&bytes), &mut out);
    }
    for relative in relatives {
        let (name, text) = fixture(relative);
        let mut reader = R::open(&name);
        for (i, line) in complete_lines(&text).into_iter().enumerate() {
            let number = i as u64 + 1;
            // Every prefix of the line: truncated JSON.
            for (cut, _) in line.char_indices().step_by(7) {
                reader.clone().feed(number, &line[..cut], &mut out);
            }
            // Every node of it of another type.
            if let Ok(value) = serde_json::from_str::<Value>(line) {
                let mut at = Vec::new();
                pointers(&value, String::new(), &mut at, 200);
                for pointer in at.iter().skip(1) {
                    for wrong in [
                        json!(null),
                        json!(5),
                        json!(""),
                        json!([]),
                        json!({}),
                        json!([7]),
                    ] {
                        let mut broken = value.clone();
                        if let Some(node) = broken.pointer_mut(pointer) {
                            *node = wrong;
                        }
                        reader.clone().feed(number, &broken.to_string(), &mut out);
                    }
                }
            }
            reader.feed(number, line, &mut out);
        }
    }
    assert!(
        out.iter()
            .all(|e| !e.text.trim().is_empty() && e.text.len() <= TEXT_BYTES_MAX),
        "an entry made of nothing"
    );
}

#[test]
fn garbage_never_panics_and_makes_nothing_up() {
    survives_garbage::<ClaudeReader>(&CLAUDE_FIXTURES);
    survives_garbage::<CodexReader>(&CODEX_FIXTURES);
    // Garbage alone makes no entry.
    for line in GARBAGE {
        let mut out = Vec::new();
        ClaudeReader::new("g.jsonl").line(1, line, &mut out);
        CodexReader::new("g.jsonl").line(1, line, &mut out);
        assert!(
            out.iter().all(|e| e.role != Role::User),
            "{line} made a prompt: {out:?}"
        );
    }
}

#[test]
fn texts_are_capped_on_a_char_boundary() {
    let big = "é".repeat(100_000);
    let mut out = Vec::new();
    let claude = json!({"type": "user", "sessionId": SESSION, "message": {"content": [
        {"type": "tool_result", "tool_use_id": "toolu_01X", "content": big}]}});
    ClaudeReader::new("s.jsonl").line(1, &claude.to_string(), &mut out);
    let codex = json!({"type": "response_item", "payload": {"type": "function_call_output",
        "call_id": "call_1", "output": big}});
    CodexReader::new("c.jsonl").line(1, &codex.to_string(), &mut out);
    assert_eq!(out.len(), 2);
    for entry in &out {
        assert_eq!(entry.role, Role::ToolResult);
        assert!(entry.text.len() <= TEXT_BYTES_MAX);
        assert!(
            entry.text.len() > TEXT_BYTES_MAX - 2,
            "cut at the cap, not before"
        );
        assert!(entry.text.chars().all(|c| c == 'é'));
    }
}

#[test]
fn reader_state_stays_bounded_however_long_the_file() {
    let mut claude = ClaudeReader::new(&format!("{SESSION}.jsonl"));
    let mut codex = CodexReader::new(&format!("rollout-2026-11-21T09-00-00-{THREAD}.jsonl"));
    let mut out = Vec::new();
    let mut sizes = Vec::new();
    for n in 0..20_000u64 {
        let call = json!({"type": "assistant", "sessionId": SESSION, "uuid": format!("u{n}"),
            "message": {"id": format!("msg_{n:020}"), "model": "claude-sonnet-4-5",
                "content": [{"type": "tool_use", "id": format!("toolu_{n:020}"), "name": "Bash",
                             "input": {"command": "ls"}}],
                "usage": {"input_tokens": 1, "output_tokens": 1}}});
        claude.line(n + 1, &call.to_string(), &mut out);
        let call = json!({"type": "response_item", "payload": {"type": "function_call",
            "name": "shell", "arguments": "{\"command\":[\"ls\"]}", "call_id": format!("call_{n:020}")}});
        codex.line(n + 1, &call.to_string(), &mut out);
        out.clear();
        if n == 1_000 || n == 19_999 {
            sizes.push((
                serde_json::to_string(&claude).expect("claude").len(),
                serde_json::to_string(&codex).expect("codex").len(),
            ));
        }
    }
    // Only the token counts' digits grew.
    assert!(
        sizes[1].0 <= sizes[0].0 + 8 && sizes[1].1 <= sizes[0].1 + 8,
        "the state stopped growing: {sizes:?}"
    );
    assert!(
        sizes[1].0 < 64 * 1024 && sizes[1].1 < 64 * 1024,
        "{sizes:?}"
    );
    assert_eq!(
        claude.meta().input_tokens,
        20_000,
        "every message counted once"
    );
    // The oldest tool ids are forgotten, the recent ones still name their results.
    let result = |id: &str| {
        json!({"type": "user", "sessionId": SESSION, "message": {"content": [
            {"type": "tool_result", "tool_use_id": id, "content": "ok"}]}})
        .to_string()
    };
    claude.line(20_001, &result(&format!("toolu_{:020}", 19_999)), &mut out);
    claude.line(20_002, &result(&format!("toolu_{:020}", 0)), &mut out);
    assert_eq!(out[0].tool.as_deref(), Some("Bash"));
    assert_eq!(out[1].tool, None);
}
