//! Routing a task to a capability (a stored flow), deterministically and with no model:
//! the task's words against each flow's tags, name, description and inputs, weighted by
//! how rare each word is among the flows, plus words the repo index adds (the languages
//! and directories of the files the task's words hit). Synonyms of common engineering
//! verbs count a little less than the word itself.
//!
//! Authority is a ceiling: a flow that needs more than it is never chosen. When the best
//! match needs more, the task is refused (no choice) rather than sent to a weaker match,
//! and the refusal says why.

use crate::spec::Mode;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What routing knows of a stored flow.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowCard {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// Its routing words.
    pub tags: Vec<String>,
    /// The authority its agents need.
    pub authority: Mode,
    /// Its declared inputs.
    pub inputs: Vec<String>,
}

/// A word the repo index adds to the task, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Hint {
    /// The word (a language, a directory).
    pub word: String,
    /// Where it came from.
    pub why: String,
}

/// A flow that fits, with its score and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Choice {
    /// The flow.
    pub flow: String,
    /// Its score (higher fits better; 0 means nothing matched).
    pub score: f64,
    /// What matched.
    pub reasons: Vec<String>,
}

/// A flow that fits but needs more authority than the ceiling.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Refusal {
    /// The flow.
    pub flow: String,
    /// The authority it needs.
    pub needs: String,
    /// Why it was refused.
    pub reason: String,
}

/// The answer of [`route`] (`palm route --json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Routing {
    /// The chosen flow, if one fits within the ceiling.
    pub choice: Option<Choice>,
    /// The runners-up, best first.
    pub alternatives: Vec<Choice>,
    /// Flows that fit but need more than the ceiling.
    pub refused: Vec<Refusal>,
}

/// The least score that counts as a fit: one distinctive word matched in a tag, or a few
/// in the description.
pub const SCORE_MIN: f64 = 1.0;
/// Most runners-up listed.
pub const ALTERNATIVES_MAX: usize = 4;

const WEIGHT_TAG: f64 = 3.0;
const WEIGHT_NAME: f64 = 2.5;
const WEIGHT_DESCRIPTION: f64 = 1.0;
const WEIGHT_INPUT: f64 = 0.5;
/// A match through a synonym counts this much of a match of the word itself.
const SYNONYM: f64 = 0.6;
/// A word the repo index added counts this much of a word of the task.
const HINTED: f64 = 0.5;

const STOPWORDS: &[&str] = &[
    "a", "an", "the", "and", "or", "to", "of", "in", "on", "for", "with", "this", "that", "it",
    "its", "is", "are", "be", "please", "our", "my", "we", "us", "all", "some", "from", "into",
    "by", "at", "as", "so", "then", "can", "you", "i", "me", "do", "does", "make", "sure", "there",
    "their", "these", "those", "any", "every", "each", "also", "just", "get", "let", "should",
    "would", "could", "will", "what", "which", "when", "where", "why", "how", "not", "no", "but",
    "if", "up", "via", "about", "again", "new",
];

/// Groups of words that name the same kind of work; the first is the group's name.
const SYNONYMS: &[&[&str]] = &[
    &[
        "fix",
        "repair",
        "bug",
        "broken",
        "fail",
        "crash",
        "error",
        "regression",
        "resolve",
        "defect",
        "wrong",
    ],
    &[
        "test", "check", "verify", "coverage", "spec", "flaky", "assert", "unittest",
    ],
    &[
        "review", "audit", "inspect", "critique", "assess", "examine", "scrutin",
    ],
    &[
        "doc",
        "document",
        "readme",
        "comment",
        "explain",
        "guide",
        "changelog",
        "docstring",
    ],
    &[
        "refactor",
        "cleanup",
        "clean",
        "restructure",
        "simplify",
        "tidy",
        "rename",
        "reorganiz",
        "dedup",
        "duplicat",
    ],
    &[
        "deploy", "release", "ship", "publish", "rollout", "rollback",
    ],
    &[
        "upgrade",
        "bump",
        "update",
        "dependency",
        "dep",
        "version",
        "outdat",
    ],
    &[
        "security", "vulnerab", "cve", "secret", "leak", "inject", "xss", "exploit", "sanitiz",
    ],
    &[
        "perform",
        "perf",
        "slow",
        "speed",
        "fast",
        "optimiz",
        "latency",
        "benchmark",
        "profil",
    ],
    &[
        "feature",
        "add",
        "implement",
        "build",
        "create",
        "support",
        "introduc",
    ],
    &["triage", "issue", "label", "prioritiz", "backlog", "ticket"],
    &["migrat", "port", "convert", "translat"],
    &[
        "lint", "format", "style", "clippy", "fmt", "prettier", "eslint",
    ],
    &[
        "research",
        "investigat",
        "explor",
        "understand",
        "analyz",
        "question",
    ],
];

/// Lower-case words of `text`, without stopwords, lightly stemmed.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for raw in text.split(|c: char| !c.is_alphanumeric()) {
        if raw.is_empty() {
            continue;
        }
        // camelCase and snake_case parts, as well as the whole.
        let lower = raw.to_lowercase();
        if STOPWORDS.contains(&lower.as_str()) || lower.len() > 64 {
            continue;
        }
        out.push(stem(&lower));
    }
    out
}

/// A light suffix stemmer: enough that "fixing", "fixes" and "fixed" meet "fix", and
/// "documentation" meets "document".
pub fn stem(word: &str) -> String {
    let mut w = word.to_owned();
    let strip = |w: &mut String, suffix: &str, min: usize| -> bool {
        if w.len() >= suffix.len() + min && w.ends_with(suffix) {
            w.truncate(w.len() - suffix.len());
            true
        } else {
            false
        }
    };
    if strip(&mut w, "ies", 2) {
        w.push('y');
        return w;
    }
    let _ = strip(&mut w, "ations", 3)
        || strip(&mut w, "ation", 3)
        || strip(&mut w, "ements", 3)
        || strip(&mut w, "ement", 3)
        || strip(&mut w, "ness", 3)
        || strip(&mut w, "ings", 3)
        || strip(&mut w, "ing", 3)
        || strip(&mut w, "ers", 3)
        || strip(&mut w, "ed", 3)
        || (["ses", "xes", "zes", "ches", "shes"]
            .iter()
            .any(|s| w.ends_with(s))
            && strip(&mut w, "es", 2))
        || (!w.ends_with("ss") && !w.ends_with("us") && strip(&mut w, "s", 2));
    // "running" → "runn" → "run"; "fixed" → "fix".
    let bytes = w.as_bytes();
    if bytes.len() >= 4
        && bytes[bytes.len() - 1] == bytes[bytes.len() - 2]
        && !b"aeiouls".contains(&bytes[bytes.len() - 1])
    {
        w.pop();
    }
    if w.ends_with('e') && w.len() > 4 {
        w.pop();
    }
    w
}

/// The synonym groups with their members stemmed, once.
static STEMMED: std::sync::LazyLock<Vec<(&'static str, Vec<String>)>> =
    std::sync::LazyLock::new(|| {
        SYNONYMS
            .iter()
            .map(|members| (members[0], members.iter().map(|m| stem(m)).collect()))
            .collect()
    });

/// The synonym group of a stemmed word, if any (prefix match on the group's stems).
fn group(word: &str) -> Option<&'static str> {
    STEMMED.iter().find_map(|(name, members)| {
        members
            .iter()
            .any(|m| word == m || (m.len() >= 4 && word.starts_with(m.as_str())))
            .then_some(*name)
    })
}

/// One field of a flow, as matchable words.
struct Field {
    kind: &'static str,
    weight: f64,
    words: BTreeSet<String>,
    groups: BTreeMap<&'static str, String>,
}

impl Field {
    fn new(kind: &'static str, weight: f64, text: &str) -> Field {
        let words: BTreeSet<String> = words(text).into_iter().collect();
        let groups = words
            .iter()
            .filter_map(|w| group(w).map(|g| (g, w.clone())))
            .collect();
        Field {
            kind,
            weight,
            words,
            groups,
        }
    }
}

fn fields(card: &FlowCard) -> Vec<Field> {
    let mut fields = vec![
        Field::new("tag", WEIGHT_TAG, &card.tags.join(" ")),
        Field::new("name", WEIGHT_NAME, &card.name),
    ];
    if let Some(description) = &card.description {
        fields.push(Field::new("description", WEIGHT_DESCRIPTION, description));
    }
    fields.push(Field::new("input", WEIGHT_INPUT, &card.inputs.join(" ")));
    fields
}

/// How well one query word matches a flow: the best field, directly or by synonym.
fn best_match(word: &str, fields: &[Field]) -> Option<(f64, String)> {
    let mut best: Option<(f64, String)> = None;
    for field in fields {
        let found = if field.words.contains(word) {
            Some((field.weight, format!("{} `{word}`", field.kind)))
        } else {
            group(word).and_then(|g| {
                field.groups.get(g).map(|theirs| {
                    (
                        field.weight * SYNONYM,
                        format!("{} `{theirs}` (like `{word}`)", field.kind),
                    )
                })
            })
        };
        if let Some(found) = found
            && best.as_ref().is_none_or(|b| found.0 > b.0)
        {
            best = Some(found);
        }
    }
    best
}

/// Routes `task` within `ceiling` over `flows` (see the module docs).
pub fn route(task: &str, ceiling: Mode, flows: &[FlowCard], hints: &[Hint]) -> Routing {
    let mut query: Vec<(String, f64, Option<String>)> = Vec::new();
    let mut seen = BTreeSet::new();
    for word in words(task) {
        if seen.insert(word.clone()) {
            query.push((word, 1.0, None));
        }
    }
    for hint in hints {
        for word in words(&hint.word) {
            if seen.insert(word.clone()) {
                query.push((word, HINTED, Some(hint.why.clone())));
            }
        }
    }
    let indexed: Vec<Vec<Field>> = flows.iter().map(fields).collect();
    // Rarer words decide more: a word every flow has tells nothing.
    let count = flows.len().max(1) as f64;
    let rarity: BTreeMap<&str, f64> = query
        .iter()
        .map(|(word, _, _)| {
            let with = indexed
                .iter()
                .filter(|fields| best_match(word, fields).is_some())
                .count() as f64;
            (word.as_str(), (1.0 + count / (1.0 + with)).ln())
        })
        .collect();
    let rarity = |word: &str| rarity.get(word).copied().unwrap_or(0.0);
    let mut scored: Vec<(usize, Choice)> = flows
        .iter()
        .enumerate()
        .map(|(i, card)| {
            let mut score = 0.0;
            let mut reasons = Vec::new();
            for (word, weight, why) in &query {
                if let Some((points, matched)) = best_match(word, &indexed[i]) {
                    let gained = points * weight * rarity(word);
                    score += gained;
                    reasons.push(match why {
                        Some(why) => format!("{matched} matches the repo: {why} (+{gained:.2})"),
                        None => format!("{matched} matches the task (+{gained:.2})"),
                    });
                }
            }
            let score = (score * 100.0).round() / 100.0;
            (
                i,
                Choice {
                    flow: card.name.clone(),
                    score,
                    reasons,
                },
            )
        })
        .collect();
    scored.sort_by(|(_, a), (_, b)| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.flow.cmp(&b.flow))
    });
    let fits: Vec<(usize, Choice)> = scored
        .into_iter()
        .filter(|(_, c)| c.score >= SCORE_MIN)
        .collect();
    let mut refused = Vec::new();
    let mut allowed = Vec::new();
    for (i, choice) in fits {
        let needs = flows[i].authority;
        if needs > ceiling {
            refused.push((
                choice.score,
                Refusal {
                    flow: choice.flow.clone(),
                    needs: needs.as_str().to_owned(),
                    reason: format!(
                        "it needs {} authority, above the ceiling of {} (score {:.2})",
                        needs.as_str(),
                        ceiling.as_str(),
                        choice.score
                    ),
                },
            ));
        } else {
            allowed.push(choice);
        }
    }
    // Never widen authority: when the best fit is refused, the task is refused too.
    let best_refused = refused.first().map(|(score, _)| *score);
    let choice = match (allowed.first(), best_refused) {
        (Some(best), Some(refused)) if refused > best.score => None,
        (Some(_), _) => Some(allowed.remove(0)),
        (None, _) => None,
    };
    allowed.truncate(ALTERNATIVES_MAX);
    Routing {
        choice,
        alternatives: allowed,
        refused: refused.into_iter().map(|(_, r)| r).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(name: &str, description: &str, tags: &[&str], authority: Mode) -> FlowCard {
        FlowCard {
            name: name.into(),
            description: Some(description.into()),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            authority,
            inputs: vec!["task".into(), "repo".into()],
        }
    }

    fn flows() -> Vec<FlowCard> {
        vec![
            card(
                "fix-bug",
                "an agent fixes a bug until the tests pass",
                &["fix", "bug"],
                Mode::Edit,
            ),
            card(
                "review-pr",
                "a read-only review of a change",
                &["review"],
                Mode::Observe,
            ),
            card(
                "write-docs",
                "write or update documentation",
                &["docs"],
                Mode::Edit,
            ),
            card(
                "release",
                "cut a release and publish it",
                &["deploy"],
                Mode::Execute,
            ),
        ]
    }

    #[test]
    fn words_are_stemmed_and_stopwords_dropped() {
        assert_eq!(words("Fixing the failing tests"), ["fix", "fail", "test"]);
        assert_eq!(stem("documentation"), "document");
        assert_eq!(stem("fixes"), "fix");
        assert_eq!(stem("fixed"), "fix");
        assert_eq!(stem("running"), "run");
        assert_eq!(stem("class"), "class");
        assert_eq!(group("repair"), Some("fix"));
        assert_eq!(group("optimizing"), Some("perform"));
    }

    #[test]
    fn the_best_fit_wins_with_reasons_and_runners_up() {
        let routing = route("Fix the crash in the parser", Mode::Edit, &flows(), &[]);
        let choice = routing.choice.expect("a choice");
        assert_eq!(choice.flow, "fix-bug");
        assert!(
            choice.reasons.iter().any(|r| r.contains("tag `fix`")),
            "{choice:?}"
        );
        let routing = route(
            "please document the config format",
            Mode::Edit,
            &flows(),
            &[],
        );
        assert_eq!(routing.choice.expect("docs").flow, "write-docs");
        let routing = route("audit this change", Mode::Observe, &flows(), &[]);
        assert_eq!(routing.choice.expect("review").flow, "review-pr");
        let routing = route("order pizza", Mode::Execute, &flows(), &[]);
        assert_eq!(routing.choice, None, "nothing fits");
    }

    #[test]
    fn authority_is_a_ceiling_that_refuses_rather_than_widens() {
        let routing = route("fix the login bug", Mode::Observe, &flows(), &[]);
        assert_eq!(routing.choice, None, "{routing:?}");
        assert_eq!(routing.refused[0].flow, "fix-bug");
        assert_eq!(routing.refused[0].needs, "edit");
        assert!(
            routing.refused[0]
                .reason
                .contains("above the ceiling of observe")
        );
        let routing = route("ship the release", Mode::Edit, &flows(), &[]);
        assert_eq!(routing.choice, None);
        assert_eq!(routing.refused[0].flow, "release");
        let routing = route("ship the release", Mode::Execute, &flows(), &[]);
        assert_eq!(routing.choice.expect("release").flow, "release");
    }

    #[test]
    fn repo_hints_break_ties() {
        let mut all = flows();
        all.push(card(
            "fix-python",
            "fix a bug",
            &["fix", "python"],
            Mode::Edit,
        ));
        all.push(card("fix-rust", "fix a bug", &["fix", "rust"], Mode::Edit));
        let hints = [Hint {
            word: "rust".into(),
            why: "src/parser.rs is rust".into(),
        }];
        let routing = route("fix the parser", Mode::Edit, &all, &hints);
        let choice = routing.choice.expect("a choice");
        assert_eq!(choice.flow, "fix-rust");
        assert!(
            choice
                .reasons
                .iter()
                .any(|r| r.contains("matches the repo"))
        );
    }
}
