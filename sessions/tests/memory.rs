//! The memory as a whole on a scratch data directory: incremental ingest, a file
//! rewritten in place, an overlong line, a crash between the catalog and the index
//! commit, forgetting and the archive's space.

use palm_sessions::{Memory, Recall, Sources};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

const SESSION: &str = "11111111-2222-4333-8444-555555555555";

fn prompt(uuid: &str, text: &str) -> String {
    format!(
        "{}\n",
        json!({"type": "user", "sessionId": SESSION, "uuid": uuid, "cwd": "/w",
               "timestamp": "2026-11-01T00:00:00Z",
               "message": {"role": "user", "content": text}})
    )
}

struct Scratch {
    _dir: tempfile::TempDir,
    data: PathBuf,
    file: PathBuf,
    sources: Sources,
}

fn scratch(first: &str) -> Scratch {
    let dir = tempfile::tempdir().expect("tmp");
    let projects = dir.path().join("projects");
    let project = projects.join("-w");
    std::fs::create_dir_all(&project).expect("project");
    let file = project.join(format!("{SESSION}.jsonl"));
    std::fs::write(&file, first).expect("write");
    let data = dir.path().join("data");
    Scratch {
        data,
        file,
        sources: Sources {
            claude: Some(projects),
            codex: Some(dir.path().join("no-codex")),
        },
        _dir: dir,
    }
}

fn hits(memory: &Memory, words: &str) -> usize {
    memory
        .recall(&Recall {
            query: words.into(),
            limit: 50,
            ..Recall::default()
        })
        .expect("recall")
        .len()
}

fn append(path: &Path, text: &str) {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open");
    file.write_all(text.as_bytes()).expect("append");
}

#[test]
fn a_file_rewritten_in_place_is_read_again_and_its_old_bytes_kept() {
    let s = scratch(&prompt("u1", "alpha beta"));
    let memory = Memory::open(&s.data).expect("open");
    assert_eq!(memory.ingest(&s.sources).expect("ingest").messages, 1);
    append(&s.file, &prompt("u2", "gamma delta"));
    let grown = memory.ingest(&s.sources).expect("ingest");
    assert_eq!((grown.messages, grown.files_changed), (1, 1));
    // Rewritten: different first bytes, shorter.
    std::fs::write(&s.file, prompt("u9", "omega")).expect("rewrite");
    let again = memory.ingest(&s.sources).expect("ingest");
    assert_eq!(again.messages, 1, "{again:?}");
    assert_eq!(hits(&memory, "omega"), 1);
    assert_eq!(
        hits(&memory, "alpha"),
        1,
        "the earlier version stays searchable"
    );
    let catalog = memory.catalog().expect("catalog");
    let state = catalog.files.values().next().expect("file");
    assert_eq!(
        state.previous.len(),
        1,
        "the earlier version's chunks are kept"
    );
}

#[test]
fn an_overlong_line_is_skipped_and_the_lines_after_it_keep_their_numbers() {
    let huge = format!(
        "{}\n",
        json!({"type": "user", "sessionId": SESSION, "message": {"content": "x".repeat(palm_sessions::ingest::LINE_BYTES_MAX + 10)}})
    );
    let s = scratch(&format!(
        "{}{huge}{}",
        prompt("u1", "before"),
        prompt("u3", "after")
    ));
    let memory = Memory::open(&s.data).expect("open");
    let report = memory.ingest(&s.sources).expect("ingest");
    assert_eq!(
        (report.messages, report.lines_skipped),
        (2, 1),
        "{report:?}"
    );
    let after = memory
        .recall(&Recall {
            query: "after".into(),
            limit: 5,
            ..Recall::default()
        })
        .expect("recall");
    assert_eq!(after[0].line, 3);
}

#[test]
fn a_crash_between_the_catalog_and_the_index_commit_loses_nothing_and_counts_nothing_twice() {
    let s = scratch(&prompt("u1", "first words"));
    let memory = Memory::open(&s.data).expect("open");
    memory.ingest(&s.sources).expect("ingest");
    let committed = memory.catalog().expect("catalog");
    // The next generation's catalog was written, then the process died before the
    // index commit: the index still names the committed generation.
    let mut ahead = committed.clone();
    ahead.generation += 1;
    ahead.files.clear();
    ahead.save(&s.data.join("sessions")).expect("save");
    drop(memory);
    let memory = Memory::open(&s.data).expect("reopen");
    assert_eq!(memory.catalog().expect("catalog"), committed);
    append(&s.file, &prompt("u2", "second words"));
    let report = memory.ingest(&s.sources).expect("ingest");
    assert_eq!(report.messages, 1);
    assert_eq!(hits(&memory, "first"), 1, "not indexed twice");
    assert_eq!(hits(&memory, "second"), 1);
}

#[test]
fn forgetting_frees_the_archive_and_pruning_goes_by_age() {
    let s = scratch(&prompt("u1", "to be forgotten"));
    let memory = Memory::open(&s.data).expect("open");
    memory.ingest(&s.sources).expect("ingest");
    let (_, archive_before, _) = memory.sizes();
    assert!(archive_before > 0);
    // Nothing is older than the Unix epoch.
    assert_eq!(memory.prune(0).expect("prune").0.len(), 0);
    let (forgotten, freed) = memory.prune(i64::MAX).expect("prune");
    assert_eq!(forgotten, [SESSION]);
    assert_eq!(freed, archive_before);
    assert_eq!(hits(&memory, "forgotten"), 0);
    assert!(
        std::fs::metadata(&s.file).is_ok(),
        "the vendor's file is untouched"
    );
    assert!(
        memory.forget(&[SESSION.to_owned()]).is_err(),
        "already gone"
    );
}

/// Titles kept beside the transcripts: Codex's `session_index.jsonl` names a thread whose
/// rollout names none (its later line wins), and a Claude subagent's `.meta.json` names
/// the subagent; a change to either is read by the next ingest, with no transcript new.
#[test]
fn titles_kept_beside_the_transcripts_name_their_sessions() {
    let s = scratch(&prompt("u1", "main session"));
    let root = s.data.parent().expect("scratch").to_owned();
    let subagents = s.file.with_extension("").join("subagents");
    std::fs::create_dir_all(&subagents).expect("subagents");
    let line = json!({"type": "user", "sessionId": SESSION, "uuid": "s1", "cwd": "/w",
                      "isSidechain": true, "agentId": "a1b2", "timestamp": "2026-11-01T00:00:01Z",
                      "message": {"role": "user", "content": "look around"}});
    std::fs::write(subagents.join("agent-a1b2.jsonl"), format!("{line}\n")).expect("subagent");
    std::fs::write(
        subagents.join("agent-a1b2.meta.json"),
        json!({"agentType": "Explore", "description": "find the link writer", "spawnDepth": 1})
            .to_string(),
    )
    .expect("meta");
    let codex = root.join("codex");
    let day = codex.join("sessions/2026/11/21");
    std::fs::create_dir_all(&day).expect("codex");
    let thread = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
    let meta = json!({"timestamp": "2026-11-21T09:00:00Z", "type": "session_meta",
                      "payload": {"id": thread, "timestamp": "2026-11-21T09:00:00Z", "cwd": "/w",
                                  "originator": "codex_exec", "cli_version": "0.60.0"}});
    let said = json!({"timestamp": "2026-11-21T09:00:01Z", "type": "event_msg",
                      "payload": {"type": "user_message", "message": "batch the writes"}});
    std::fs::write(
        day.join(format!("rollout-2026-11-21T09-00-00-{thread}.jsonl")),
        format!("{meta}\n{said}\n"),
    )
    .expect("rollout");
    let index = codex.join("session_index.jsonl");
    std::fs::write(
        &index,
        format!(
            "{}\n{}\nnot json\n",
            json!({"id": thread, "thread_name": "first name", "updated_at": "2026-11-21T09:00:02Z"}),
            json!({"id": thread, "thread_name": "Batch the link's writes", "updated_at": "2026-11-21T09:05:00Z"})
        ),
    )
    .expect("index");
    let sources = Sources {
        claude: s.sources.claude.clone(),
        codex: Some(codex),
    };
    let memory = Memory::open(&s.data).expect("open");
    memory.ingest(&sources).expect("ingest");
    let title = |id: &str| {
        memory
            .list()
            .expect("list")
            .into_iter()
            .find(|l| l.session == id)
            .and_then(|l| l.title)
    };
    assert_eq!(title(thread).as_deref(), Some("Batch the link's writes"));
    assert_eq!(
        title("agent-a1b2").as_deref(),
        Some("Explore: find the link writer")
    );
    append(
        &index,
        &format!(
            "{}\n",
            json!({"id": thread, "thread_name": "Renamed", "updated_at": "2026-11-22T00:00:00Z"})
        ),
    );
    let again = memory.ingest(&sources).expect("ingest");
    assert_eq!(again.files_changed, 0, "{again:?}");
    assert_eq!(title(thread).as_deref(), Some("Renamed"));
    assert_eq!(title(SESSION), None, "a session nothing names has no title");
}
