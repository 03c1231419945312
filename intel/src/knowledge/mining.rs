//! Decisions and incidents found with no model, each cited:
//! - ADRs (files under an `adr`/`decisions` directory, or named `adr-*`): title, status
//!   and the decision section, cited at their lines;
//! - notes: a line that says `Decision:` or `Decided:` (a Markdown line or a code comment),
//!   cited at that line;
//! - commit messages that announce a decision (`decided`, `decision`, `we chose`,
//!   `opted for`, `in favour of`, `ADR-12`), cited as the commit;
//! - incidents: commits whose subject announces a revert, rollback, hotfix or outage.
//!   They are candidates, not confirmed incidents: every one is a real commit with its
//!   real file list, and says so (`confirmed: false`).

use super::cite::{self, Citation};
use super::{Decision, Incident};
use crate::query::Snapshot;

/// Most decisions mined from notes.
pub const NOTES_MAX: usize = 500;
/// Most decisions mined from commit messages (the newest).
pub const COMMIT_DECISIONS_MAX: usize = 300;
/// Commit messages read for decisions (the newest).
pub const COMMITS_SCANNED_MAX: usize = 5_000;
/// Most incidents kept (the newest).
pub const INCIDENTS_MAX: usize = 500;
/// Text files larger than this are not read for notes.
pub const NOTE_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// A decision's text is cut to this many characters.
pub const DECISION_CHARS_MAX: usize = 600;

const DOC_EXTENSIONS: &[&str] = &["md", "markdown", "rst", "txt", "adoc"];
const ADR_DIRS: &[&str] = &[
    "adr",
    "adrs",
    "decisions",
    "decision-records",
    "architecture-decisions",
];

fn cut(text: &str, max: usize) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// Lowercase words of a text (letters and digits).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn is_adr(path: &str) -> bool {
    let lower = path.to_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return false;
    };
    if !DOC_EXTENSIONS.contains(&ext) || stem.contains("template") || stem == "readme" {
        return false;
    }
    let in_dir = lower
        .split('/')
        .rev()
        .skip(1)
        .any(|d| ADR_DIRS.contains(&d));
    in_dir || stem.starts_with("adr-") || stem.starts_with("adr_")
}

/// The decisions ADR files record.
pub fn adrs(snapshot: &Snapshot, paths: &[String], out: &mut Vec<Decision>) {
    for path in paths.iter().filter(|p| is_adr(p)) {
        let Ok(lines) = cite::read_lines(&snapshot.root, path) else {
            continue;
        };
        let Some(title_at) = lines.iter().position(|l| !l.trim().is_empty()) else {
            continue;
        };
        let title = lines[title_at]
            .trim()
            .trim_start_matches('#')
            .trim()
            .to_owned();
        let heading = |l: &str| l.trim_start().starts_with('#');
        let section = |name: &str| -> Option<(usize, usize)> {
            let start = lines.iter().position(|l| {
                heading(l) && l.trim_start_matches('#').trim().eq_ignore_ascii_case(name)
            })?;
            let end = lines[start + 1..]
                .iter()
                .position(|l| heading(l))
                .map_or(lines.len(), |i| start + 1 + i);
            Some((start, end))
        };
        let mut status = None;
        if let Some((start, end)) = section("status") {
            status = lines[start + 1..end]
                .iter()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().to_owned());
        }
        if status.is_none() {
            status = lines.iter().find_map(|l| {
                let l = l.trim().trim_start_matches(['*', '-', ' ']);
                let lower = l.to_lowercase();
                lower.strip_prefix("status:").map(|_| {
                    l["status:".len()..]
                        .trim()
                        .trim_matches('*')
                        .trim()
                        .to_owned()
                })
            });
        }
        let mut cites = Vec::new();
        if let Ok(c) = cite::cite_lines(path, &lines, title_at as u32 + 1, title_at as u32 + 1) {
            cites.push(c);
        }
        let body = section("decision").or_else(|| section("decision outcome"));
        let text = match body {
            Some((start, end)) => {
                let first = (start + 1..end).find(|&i| !lines[i].trim().is_empty());
                if let Some(first) = first {
                    let last = (first..end)
                        .rev()
                        .find(|&i| !lines[i].trim().is_empty())
                        .unwrap_or(first)
                        .min(first + cite::CITED_LINES_MAX as usize - 1);
                    if let Ok(c) = cite::cite_lines(path, &lines, first as u32 + 1, last as u32 + 1)
                    {
                        cites.push(c);
                    }
                    cut(&lines[first..=last].join(" "), DECISION_CHARS_MAX)
                } else {
                    String::new()
                }
            }
            None => {
                // The first paragraph after the title that is not a status or date line.
                let mut paragraph = Vec::new();
                for line in &lines[title_at + 1..] {
                    let t = line.trim();
                    if t.is_empty() {
                        if !paragraph.is_empty() {
                            break;
                        }
                        continue;
                    }
                    let lower = t.to_lowercase();
                    if heading(t) || lower.starts_with("status") || lower.starts_with("date") {
                        if !paragraph.is_empty() {
                            break;
                        }
                        continue;
                    }
                    paragraph.push(t.to_owned());
                }
                cut(&paragraph.join(" "), DECISION_CHARS_MAX)
            }
        };
        let superseded = status.as_deref().is_some_and(|s| {
            s.to_lowercase().contains("supersed") || s.to_lowercase().contains("deprecated")
        });
        out.push(Decision {
            id: format!("adr:{path}"),
            source: "adr".into(),
            title,
            text,
            time: None,
            author: None,
            adr_status: status,
            status: if superseded { "superseded" } else { "active" }.into(),
            cites,
            ..Decision::default()
        });
    }
}

/// The text after a `Decision:`/`Decided:` marker (capitalized, then a space) at the
/// start of a line, after any list bullet or quote; in code (`comment_only`) only inside a
/// comment, so a field `decided: bool` or a path `Decision::Keep` is no note.
fn note_marker(line: &str, comment_only: bool) -> Option<&str> {
    let trimmed = line.trim_start();
    let leaders = ["//", "#", "--", "/*", "*", ";", "<!--"];
    let in_comment = leaders.iter().any(|l| trimmed.starts_with(l));
    if comment_only && !in_comment {
        return None;
    }
    let body = trimmed
        .trim_start_matches(['/', '#', '*', '-', '>', ';', '!', '<', ' ', '\t'])
        .trim_start();
    for marker in [
        "Decision:",
        "DECISION:",
        "Decided:",
        "DECIDED:",
        "Decision record:",
    ] {
        let Some(rest) = body.strip_prefix(marker) else {
            continue;
        };
        if !rest.starts_with([' ', '\t']) {
            return None;
        }
        let rest = rest
            .trim()
            .trim_end_matches("-->")
            .trim_end_matches("*/")
            .trim();
        return (!rest.is_empty()).then_some(rest);
    }
    None
}

/// The decisions notes record (`Decision: …` lines in docs and comments).
pub fn notes(snapshot: &Snapshot, paths: &[String], out: &mut Vec<Decision>) {
    let mut found = 0;
    for path in paths {
        if found >= NOTES_MAX || is_adr(path) {
            continue;
        }
        // Indexed text only: the index already left out binaries, vendored and
        // generated files.
        if snapshot.record(path).is_none() {
            continue;
        }
        let size = std::fs::metadata(snapshot.root.join(path)).map_or(u64::MAX, |m| m.len());
        if size > NOTE_FILE_BYTES_MAX {
            continue;
        }
        let Ok(bytes) = std::fs::read(snapshot.root.join(path)) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let lower = text.to_lowercase();
        if !lower.contains("decision:") && !lower.contains("decided:") {
            continue;
        }
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let code = snapshot
            .record(path)
            .is_some_and(|r| r.language != crate::lang::Language::Text);
        for (at, line) in lines.iter().enumerate() {
            let Some(rest) = note_marker(line, code) else {
                continue;
            };
            let Ok(citation) = cite::cite_lines(path, &lines, at as u32 + 1, at as u32 + 1) else {
                continue;
            };
            let digest = citation.digest.clone().unwrap_or_default();
            let mut id = format!("note:{path}#{}", &digest[..digest.len().min(8)]);
            // The same words twice in one file: the later ones say where they are.
            if out.iter().any(|d| d.id == id) {
                id = format!("{id}-{}", at + 1);
            }
            out.push(Decision {
                id,
                source: "note".into(),
                title: cut(rest, 80),
                text: cut(rest, DECISION_CHARS_MAX),
                status: "active".into(),
                cites: vec![citation],
                ..Decision::default()
            });
            found += 1;
            if found >= NOTES_MAX {
                break;
            }
        }
    }
}

/// The sentence of a commit message that announces a decision, if one does.
fn decision_sentence(message: &str) -> Option<String> {
    const SINGLE: &[&str] = &["decided", "decision", "decide", "opted"];
    const PAIRS: &[(&str, &str)] = &[
        ("we", "chose"),
        ("chose", "to"),
        ("in", "favour"),
        ("in", "favor"),
        ("rationale", ""),
    ];
    for sentence in message
        .split(['\n', '.', '!', '?'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let w = words(sentence);
        let adr = w
            .windows(2)
            .any(|p| p[0] == "adr" && p[1].chars().all(|c| c.is_ascii_digit()))
            || w.iter().any(|x| {
                x.strip_prefix("adr")
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            });
        let single = w.iter().any(|x| SINGLE.contains(&x.as_str()));
        let pair = w.windows(2).any(|p| {
            PAIRS
                .iter()
                .any(|(a, b)| p[0] == *a && (b.is_empty() || p[1] == *b))
        });
        if adr || single || pair {
            return Some(cut(sentence, DECISION_CHARS_MAX));
        }
    }
    None
}

/// Decisions announced in commit messages, and incident candidates; both from the
/// newest commits first.
pub fn commits(
    snapshot: &Snapshot,
    repo: &git2::Repository,
    decisions: &mut Vec<Decision>,
    incidents: &mut Vec<Incident>,
) {
    let history = &snapshot.history;
    let mut found = 0;
    for note in history.commits.iter().rev().take(COMMITS_SCANNED_MAX) {
        let kind = incident_kind(&note.subject);
        let message = git2::Oid::from_str(&note.id)
            .ok()
            .and_then(|oid| repo.find_commit(oid).ok())
            .and_then(|c| c.message().ok().map(str::to_owned))
            .unwrap_or_else(|| note.subject.clone());
        if let Some(kind) = kind
            && incidents.len() < INCIDENTS_MAX
        {
            let reverts = message.lines().find_map(|l| {
                let l = l.trim();
                let rest = l.strip_prefix("This reverts commit ")?;
                let id: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
                (id.len() >= 7).then_some(id)
            });
            incidents.push(Incident {
                id: format!("incident:{}", cite::short(&note.id)),
                kind: kind.to_owned(),
                commit: note.id.clone(),
                time: note.time,
                author: note.author.clone(),
                subject: note.subject.clone(),
                reverts,
                files: note
                    .files
                    .iter()
                    .filter_map(|&f| history.paths.get(f as usize).cloned())
                    .collect(),
                confirmed: false,
                cites: vec![Citation::commit(&note.id, &note.subject)],
                ..Incident::default()
            });
        }
        if kind.is_some() || found >= COMMIT_DECISIONS_MAX || note.merge {
            continue;
        }
        if let Some(sentence) = decision_sentence(&message) {
            decisions.push(Decision {
                id: format!("commit:{}", cite::short(&note.id)),
                source: "commit".into(),
                title: cut(&note.subject, 80),
                text: sentence,
                time: Some(note.time),
                author: Some(note.author.clone()),
                status: "active".into(),
                cites: vec![Citation::commit(&note.id, &note.subject)],
                files: note
                    .files
                    .iter()
                    .filter_map(|&f| history.paths.get(f as usize).cloned())
                    .collect(),
                ..Decision::default()
            });
            found += 1;
        }
    }
}

/// `revert`, `rollback`, `hotfix` or `incident` when a commit subject announces one.
pub fn incident_kind(subject: &str) -> Option<&'static str> {
    let w = words(subject);
    let has = |x: &str| w.iter().any(|y| y == x);
    let pair = |a: &str, b: &str| w.windows(2).any(|p| p[0] == a && p[1] == b);
    if w.iter()
        .any(|x| matches!(x.as_str(), "revert" | "reverts" | "reverted" | "reverting"))
    {
        Some("revert")
    } else if has("rollback") || pair("roll", "back") || pair("rolled", "back") {
        Some("rollback")
    } else if has("hotfix") || pair("hot", "fix") || pair("hot", "fixes") {
        Some("hotfix")
    } else if [
        "outage",
        "incident",
        "postmortem",
        "sev1",
        "sev0",
        "emergency",
    ]
    .iter()
    .any(|x| has(x))
        || pair("post", "mortem")
    {
        Some("incident")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incident_subjects() {
        assert_eq!(incident_kind("Revert \"Add cache\""), Some("revert"));
        assert_eq!(incident_kind("hotfix: null deref in login"), Some("hotfix"));
        assert_eq!(incident_kind("Roll back the pool size"), Some("rollback"));
        assert_eq!(incident_kind("Fix outage in EU"), Some("incident"));
        assert_eq!(incident_kind("Add RevertButton widget"), None);
        assert_eq!(incident_kind("Fix typo"), None);
    }

    #[test]
    fn decision_sentences() {
        assert_eq!(
            decision_sentence("Store jobs in redb\n\nWe chose redb over sled. It is maintained."),
            Some("We chose redb over sled".into())
        );
        assert!(decision_sentence("Implements ADR-12 for the cache").is_some());
        assert!(decision_sentence("Fix a typo in the README").is_none());
        assert!(decision_sentence("Decisions: none").is_none());
    }

    #[test]
    fn note_markers() {
        assert_eq!(
            note_marker("// DECISION: keep redb", true),
            Some("keep redb")
        );
        assert_eq!(
            note_marker("- Decided: one writer", false),
            Some("one writer")
        );
        assert_eq!(
            note_marker("<!-- Decision: no ORM -->", false),
            Some("no ORM")
        );
        assert_eq!(note_marker("the decision: was", false), None);
        assert_eq!(note_marker("Decision:", false), None);
        assert_eq!(note_marker("    Decision::Restart {", true), None);
        assert_eq!(
            note_marker("    decided: BTreeMap<String, Decided>,", true),
            None
        );
        assert_eq!(note_marker("Decision: keep redb", true), None);
    }

    #[test]
    fn adr_paths() {
        assert!(is_adr("docs/adr/0001-use-redb.md"));
        assert!(is_adr("ADR-7.md"));
        assert!(!is_adr("docs/adr/template.md"));
        assert!(!is_adr("docs/adr/README.md"));
        assert!(!is_adr("src/adr.rs"));
    }
}
