//! The transcript readers on fixtures in the vendors' real formats, one pitfall each at
//! least (shared/reference/agent-transcripts.md): what each line becomes, what the meta
//! says, that a reader's state survives serialization at every line, and that no
//! garbage makes one panic.

use palm_sessions::catalog::Reader;
use palm_sessions::{Entry, Role, SessionMeta, Vendor};
use std::path::{Path, PathBuf};

fn fixture(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(relative)
}

/// The complete lines of a file (a last line without its newline is not fed, as the
/// ingest does not feed it).
fn complete_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    lines.pop();
    lines
}

fn read(vendor: Vendor, relative: &str) -> (Vec<Entry>, SessionMeta) {
    let path = fixture(relative);
    let text = std::fs::read_to_string(&path).expect("fixture");
    let name = path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let mut reader = Reader::new(vendor, &name);
    let mut out = Vec::new();
    for (i, line) in complete_lines(&text).into_iter().enumerate() {
        reader.line(i as u64 + 1, line, &mut out);
    }
    (out, reader.meta().clone())
}

fn of(entries: &[Entry], role: Role) -> Vec<&str> {
    entries
        .iter()
        .filter(|e| e.role == role)
        .map(|e| e.text.as_str())
        .collect()
}

const CLAUDE: &str = "claude/-home-me-app/5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70.jsonl";
const CODEX: &str = "codex/rollout-2026-11-21T09-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl";
const FIXTURES: [(Vendor, &str); 8] = [
    (Vendor::Claude, CLAUDE),
    (
        Vendor::Claude,
        "claude/-home-me-app/5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70/subagents/agent-a1b2c3.jsonl",
    ),
    (Vendor::Claude, "claude/-home-me-app/agent-d4e5f6.jsonl"),
    (Vendor::Codex, CODEX),
    (
        Vendor::Codex,
        "codex/rollout-2026-11-21T09-00-40-0199a1b2-ffff-7e5f-8a9b-0c1d2e3f4a5b.jsonl",
    ),
    (
        Vendor::Codex,
        "codex/rollout-2026-11-21T09-00-50-0199a1b2-aaaa-7e5f-8a9b-0c1d2e3f4a5b.jsonl",
    ),
    (
        Vendor::Codex,
        "codex/rollout-2025-08-01T12-00-00-5a8b1c2d-0000-4000-8000-123456789abc.jsonl",
    ),
    (Vendor::Claude, CLAUDE),
];

#[test]
fn a_claude_transcript_reads_with_every_pitfall() {
    let (entries, meta) = read(Vendor::Claude, CLAUDE);
    assert_eq!(
        meta.id.as_deref(),
        Some("5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70")
    );
    assert!(
        entries
            .iter()
            .all(|e| e.session == meta.id.clone().unwrap_or_default())
    );
    // One prompt: the isMeta line is injected, the tool-result line is no prompt.
    assert_eq!(
        of(&entries, Role::User),
        ["Why is the lease renewal test flaky?"]
    );
    assert_eq!(
        of(&entries, Role::System)[0],
        "<command-name>/clear</command-name>"
    );
    assert_eq!(
        of(&entries, Role::Reasoning),
        ["The timer and the renewal share a lock."]
    );
    assert_eq!(
        of(&entries, Role::Assistant),
        [
            "Let me run the test.",
            "The renewal must take the seat's lock first."
        ]
    );
    let call = entries
        .iter()
        .find(|e| e.role == Role::ToolCall)
        .expect("call");
    assert_eq!(
        (call.text.as_str(), call.tool.as_deref()),
        ("cargo test lease_renewal", Some("Bash"))
    );
    let result = entries
        .iter()
        .find(|e| e.role == Role::ToolResult)
        .expect("result");
    assert_eq!(
        result.tool.as_deref(),
        Some("Bash"),
        "named by its tool_use id"
    );
    assert_eq!(result.id.as_deref(), Some("toolu_01Run"));
    // The compact boundary, the titles, the unknown type with text; state-only lines
    // and a non-JSON line make nothing; the cut last line was not fed.
    assert!(
        of(&entries, Role::System)
            .iter()
            .any(|t| t.contains("compacted (trigger: auto, 154000"))
    );
    assert_eq!(
        of(&entries, Role::Summary),
        [
            "Lease renewal races",
            "Fix lease renewal race",
            "Lease race (mine)",
            "Another AI title"
        ]
    );
    assert_eq!(
        meta.title.as_deref(),
        Some("Lease race (mine)"),
        "a custom title wins"
    );
    assert_eq!(of(&entries, Role::Unknown), ["a future line with text"]);
    assert!(!entries.iter().any(|e| e.text.contains("cut off")));
    assert!(!entries.iter().any(|e| e.text.contains("check the seat")));
    // Usage once per message id: msg_01Lease's three lines count once (its last usage).
    assert_eq!(meta.input_tokens, 150 + 10);
    assert_eq!(meta.output_tokens, 30 + 7);
    assert_eq!(meta.model.as_deref(), Some("claude-opus-4-1"));
    assert_eq!(meta.cwd.as_deref(), Some("/home/me/app"));
    assert_eq!(meta.branch.as_deref(), Some("feature/lease"));
    assert!(!meta.subagent);
    assert!(meta.first_ms.is_some() && meta.first_ms < meta.last_ms);
}

#[test]
fn claude_subagents_are_sessions_of_their_own_in_both_layouts() {
    for (relative, id) in [
        (
            "claude/-home-me-app/5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70/subagents/agent-a1b2c3.jsonl",
            "agent-a1b2c3",
        ),
        ("claude/-home-me-app/agent-d4e5f6.jsonl", "agent-d4e5f6"),
    ] {
        let (entries, meta) = read(Vendor::Claude, relative);
        assert!(meta.subagent, "{relative}");
        assert_eq!(meta.id.as_deref(), Some(id));
        assert_eq!(
            meta.parent.as_deref(),
            Some("5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70")
        );
        assert!(entries.iter().all(|e| e.session == id), "{entries:?}");
        assert_eq!(of(&entries, Role::User), ["Search the code for seat locks"]);
        assert_eq!(
            of(&entries, Role::Assistant),
            ["Found SeatLock in seats.rs"]
        );
    }
}

#[test]
fn a_codex_rollout_reads_with_every_pitfall() {
    let (entries, meta) = read(Vendor::Codex, CODEX);
    assert_eq!(
        meta.id.as_deref(),
        Some("0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
    );
    // Injected context is system; each prompt once though Codex writes it twice, in
    // either order; the resume (no new session_meta) goes on in the same session.
    assert_eq!(
        of(&entries, Role::User),
        ["Speed up the tunnel writer", "Now add a benchmark for it"]
    );
    let system = of(&entries, Role::System);
    assert!(
        system
            .iter()
            .any(|t| t.starts_with("# AGENTS.md instructions"))
    );
    assert!(
        system
            .iter()
            .any(|t| t.starts_with("<environment_context>"))
    );
    assert!(
        system
            .iter()
            .any(|t| t.contains("turn aborted: interrupted"))
    );
    // Answer and reasoning once each.
    assert_eq!(
        of(&entries, Role::Assistant),
        ["Writes are batched with write_vectored now."]
    );
    assert_eq!(of(&entries, Role::Reasoning), ["**Batching writes**"]);
    // Calls with their commands; outputs decoded once more and named by their call;
    // exec_command_end repeats an output and is skipped; a call with no output is kept.
    let calls: Vec<(&str, Option<&str>)> = entries
        .iter()
        .filter(|e| e.role == Role::ToolCall)
        .map(|e| (e.text.as_str(), e.tool.as_deref()))
        .collect();
    assert_eq!(
        calls[0],
        ("rg write_all transport/src", Some("exec_command"))
    );
    assert!(calls[1].0.starts_with("*** Begin Patch"));
    assert_eq!(calls[1].1, Some("apply_patch"));
    assert_eq!(calls[2], ("bash -lc cargo bench", Some("shell")));
    let results: Vec<(&str, Option<&str>)> = entries
        .iter()
        .filter(|e| e.role == Role::ToolResult)
        .map(|e| (e.text.as_str(), e.tool.as_deref()))
        .collect();
    assert_eq!(
        results,
        [
            (
                "transport/src/link.rs:42: stream.write_all(&frame)",
                Some("exec_command")
            ),
            (
                "Success. Updated the following files:\nM transport/src/link.rs\n",
                Some("apply_patch")
            ),
        ]
    );
    assert_eq!(of(&entries, Role::Unknown), ["a future line with text"]);
    // token_count with info null changes nothing; the last totals win.
    assert_eq!((meta.input_tokens, meta.output_tokens), (7000, 420));
    assert_eq!(
        meta.cwd.as_deref(),
        Some("/home/me/app/transport"),
        "the latest cwd"
    );
    assert_eq!(meta.model.as_deref(), Some("gpt-5-codex"));
    assert_eq!(meta.commit.as_deref(), Some("abc123"));
    assert_eq!(meta.branch.as_deref(), Some("main"));
    assert_eq!(meta.version.as_deref(), Some("0.46.0"));
}

#[test]
fn codex_forks_subagents_and_legacy_files_keep_their_own_ids() {
    let (fork, meta) = read(
        Vendor::Codex,
        "codex/rollout-2026-11-21T09-00-40-0199a1b2-ffff-7e5f-8a9b-0c1d2e3f4a5b.jsonl",
    );
    assert_eq!(
        meta.id.as_deref(),
        Some("0199a1b2-ffff-7e5f-8a9b-0c1d2e3f4a5b")
    );
    assert_eq!(
        meta.parent.as_deref(),
        Some("0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
    );
    assert_eq!(
        meta.version.as_deref(),
        Some("0.47.0"),
        "the parent's meta replaced nothing"
    );
    assert!(
        fork.iter()
            .all(|e| e.session == "0199a1b2-ffff-7e5f-8a9b-0c1d2e3f4a5b")
    );
    assert_eq!(
        of(&fork, Role::User),
        ["Speed up the tunnel writer", "Try io_uring instead"]
    );

    let (sub, meta) = read(
        Vendor::Codex,
        "codex/rollout-2026-11-21T09-00-50-0199a1b2-aaaa-7e5f-8a9b-0c1d2e3f4a5b.jsonl",
    );
    assert!(meta.subagent);
    assert_eq!(
        meta.parent.as_deref(),
        Some("0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
    );
    assert_eq!(meta.title.as_deref(), Some("scout"));
    assert_eq!(of(&sub, Role::User), ["Find every write_all"]);

    let (legacy, meta) = read(
        Vendor::Codex,
        "codex/rollout-2025-08-01T12-00-00-5a8b1c2d-0000-4000-8000-123456789abc.jsonl",
    );
    assert_eq!(
        meta.id.as_deref(),
        Some("5a8b1c2d-0000-4000-8000-123456789abc")
    );
    assert_eq!(meta.commit.as_deref(), Some("def456"));
    assert_eq!(of(&legacy, Role::User), ["Explain the legacy store"]);
    assert_eq!(of(&legacy, Role::Assistant), ["The legacy store is sled."]);
    assert_eq!(of(&legacy, Role::System).len(), 1, "the injected context");
    assert_eq!(of(&legacy, Role::ToolResult), ["Cargo.toml\nsrc"]);
}

#[test]
fn a_readers_state_survives_serialization_at_every_line() {
    for (vendor, relative) in FIXTURES {
        let (whole, whole_meta) = read(vendor, relative);
        let path = fixture(relative);
        let text = std::fs::read_to_string(&path).expect("fixture");
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let lines = complete_lines(&text);
        for split in 0..=lines.len() {
            let mut reader = Reader::new(vendor, &name);
            let mut out = Vec::new();
            for (i, line) in lines[..split].iter().enumerate() {
                reader.line(i as u64 + 1, line, &mut out);
            }
            let saved = serde_json::to_string(&reader).expect("serialize");
            let mut reader: Reader = serde_json::from_str(&saved).expect("deserialize");
            for (i, line) in lines.iter().enumerate().skip(split) {
                reader.line(i as u64 + 1, line, &mut out);
            }
            assert_eq!(out, whole, "{relative} split at {split}");
            assert_eq!(reader.meta(), &whole_meta, "{relative} split at {split}");
        }
    }
}

#[test]
fn a_line_completed_later_is_read_whole() {
    let path = fixture(CLAUDE);
    let text = std::fs::read_to_string(&path).expect("fixture");
    let (before, _) = read(Vendor::Claude, CLAUDE);
    let mut reader = Reader::new(Vendor::Claude, "5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70.jsonl");
    let mut out = Vec::new();
    let lines = complete_lines(&text);
    for (i, line) in lines.iter().enumerate() {
        reader.line(i as u64 + 1, line, &mut out);
    }
    assert_eq!(out, before);
    // The writer finishes the cut line.
    let cut = text.rsplit('\n').next().expect("cut line");
    let whole = format!(
        "{cut} sentence\"}},\"uuid\":\"u-9\",\"sessionId\":\"5f0c1b2a-7d3e-4c1a-9f11-2b3c4d5e6f70\"}}"
    );
    reader.line(lines.len() as u64 + 1, &whole, &mut out);
    let last = out.last().expect("the finished line");
    assert_eq!(
        (last.role, last.text.as_str()),
        (Role::User, "cut off mid sentence")
    );
    assert_eq!(last.line, lines.len() as u64 + 1);
}

#[test]
fn garbage_never_panics_and_makes_nothing_up() {
    let garbage = [
        "",
        "   ",
        "{",
        "[1,2,3]",
        "null",
        "\"a string\"",
        "{\"type\": 5}",
        "{\"type\": \"user\", \"message\": null}",
        "{\"type\": \"user\", \"message\": {\"content\": 5}}",
        "{\"type\": \"assistant\", \"message\": {\"content\": [5, null, {\"type\": 3}]}}",
        "{\"type\": \"assistant\", \"message\": {\"id\": 7, \"usage\": \"lots\", \"content\": \"plain\"}}",
        "{\"type\": \"response_item\", \"payload\": null}",
        "{\"type\": \"response_item\", \"payload\": {\"type\": \"function_call\", \"arguments\": 5}}",
        "{\"type\": \"response_item\", \"payload\": {\"type\": \"function_call_output\", \"output\": {\"x\": 1}}}",
        "{\"type\": \"event_msg\", \"payload\": {\"type\": \"token_count\", \"info\": 3}}",
        "{\"type\": \"session_meta\", \"payload\": {\"id\": 9, \"source\": {\"subagent\": 1}}}",
        "{\"timestamp\": \"not a time\", \"type\": \"event_msg\", \"payload\": {\"type\": \"user_message\", \"message\": [1]}}",
        "{\"type\": \"summary\", \"summary\": {\"nested\": true}}",
    ];
    for vendor in [Vendor::Claude, Vendor::Codex] {
        let mut reader = Reader::new(vendor, "whatever.jsonl");
        let mut out = Vec::new();
        for (i, line) in garbage.iter().enumerate() {
            reader.line(i as u64 + 1, line, &mut out);
        }
        // Random bytes, lossily decoded as the ingest does.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for n in 0..500 {
            let bytes: Vec<u8> = (0..(n % 97))
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed & 0xff) as u8
                })
                .collect();
            reader.line(100 + n, &String::from_utf8_lossy(&bytes), &mut out);
        }
        assert!(
            out.iter().all(|e| !e.text.trim().is_empty()),
            "{vendor:?}: {out:?}"
        );
    }
    // A huge text is cut, on a character boundary.
    let mut reader = Reader::new(Vendor::Claude, "s.jsonl");
    let mut out = Vec::new();
    let big = "é".repeat(100_000);
    let line = serde_json::json!({"type": "user", "sessionId": "s", "message": {"content": big}});
    reader.line(1, &line.to_string(), &mut out);
    assert!(out[0].text.len() <= palm_sessions::claude::TEXT_BYTES_MAX);
}
