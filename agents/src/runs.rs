//! Where an agent run keeps what outlives it (`DATA/agents/runs/<run>/`: its transcript,
//! its session, the mark of a run stopped from outside), and the runs a job's journal
//! shows, for `palm inspect`. Pure but for reading those small files.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Where the run of `run_key` (an effect's key, `KEY#sub` for a gate's verifier) keeps
/// its transcript, its session and its marks.
pub fn run_dir(data: &Path, run_key: &str) -> PathBuf {
    data.join("agents")
        .join("runs")
        .join(crate::git::content_id(run_key.as_bytes()))
}

/// The agent runs a job's journal shows, oldest first: each `agent` call that ended, with
/// its end, provider, session, error and transcript (as its completion recorded them),
/// and each stopped from outside (its effect cancelled) as its run directory's mark says,
/// `interrupted`. `events` are the journal's events as JSON.
pub fn runs_in_journal(data: &Path, events: &[Value]) -> Vec<Value> {
    let mut runs = Vec::new();
    let mut agent_keys = std::collections::HashSet::new();
    for event in events {
        let key = event["key"].as_str().unwrap_or_default();
        match event["kind"].as_str() {
            Some("effect_requested") if event["request"]["call"]["provider"] == "agent" => {
                agent_keys.insert(key.to_owned());
            }
            Some("effect_completed") if agent_keys.contains(key) => {
                let value = &event["outcome"]["call"]["value"];
                if value["end"].is_string() {
                    runs.push(json!({
                        "key": key,
                        "provider": value["provider"],
                        "end": value["end"],
                        "session_id": value["session_id"],
                        "error": value["error"],
                        "transcript": value["transcript"],
                    }));
                }
            }
            Some("effect_cancelled") if agent_keys.contains(key) => {
                let mark = run_dir(data, key).join(INTERRUPTED_FILE);
                if let Ok(text) = std::fs::read_to_string(&mark)
                    && let Ok(run) = serde_json::from_str::<Value>(&text)
                {
                    runs.push(json!({
                        "key": key,
                        "provider": run["provider"],
                        "end": run["end"],
                        "session_id": run["session_id"],
                        "error": "its effect was cancelled while it ran",
                        "transcript": run["transcript"],
                    }));
                }
            }
            _ => {}
        }
    }
    runs
}

/// The file a run stopped from outside leaves in its run directory.
pub const INTERRUPTED_FILE: &str = "interrupted.json";

#[cfg(test)]
mod tests {
    use super::*;

    /// Ended runs come from their completions, a cancelled one from its mark; other
    /// effects and a cancelled run that left no mark are not runs.
    #[test]
    fn a_journal_shows_its_ended_and_its_interrupted_runs() {
        let data = tempfile::tempdir().expect("data");
        let cancelled = run_dir(data.path(), "j-1/0/2");
        std::fs::create_dir_all(&cancelled).expect("run dir");
        std::fs::write(
            cancelled.join(INTERRUPTED_FILE),
            json!({"end": "interrupted", "provider": "codex", "session_id": "t-9",
                   "transcript": {"path": "/x", "bytes": 5}})
            .to_string(),
        )
        .expect("mark");
        let agent = |key: &str| {
            json!({"kind": "effect_requested", "key": key,
                   "request": {"call": {"provider": "agent", "args": {}}}})
        };
        let events = [
            agent("j-1/0/1"),
            json!({"kind": "effect_requested", "key": "j-1/1/1", "request": {"run": {"cmd": "true"}}}),
            json!({"kind": "effect_completed", "key": "j-1/0/1", "outcome": {"call": {"ok": true,
                   "value": {"end": "success", "provider": "claude", "session_id": "s-1",
                             "error": null, "transcript": {"path": "/t", "bytes": 9, "lines": 2}}}}}),
            json!({"kind": "effect_completed", "key": "j-1/1/1", "outcome": {"run": {"exit_code": 0}}}),
            agent("j-1/0/2"),
            json!({"kind": "effect_cancelled", "key": "j-1/0/2"}),
            agent("j-1/0/3"),
            json!({"kind": "effect_cancelled", "key": "j-1/0/3"}),
        ];
        let runs = runs_in_journal(data.path(), &events);
        let seen: Vec<(&str, &str, &str)> = runs
            .iter()
            .map(|r| {
                (
                    r["key"].as_str().unwrap_or(""),
                    r["end"].as_str().unwrap_or(""),
                    r["session_id"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("j-1/0/1", "success", "s-1"),
                ("j-1/0/2", "interrupted", "t-9")
            ]
        );
    }
}
