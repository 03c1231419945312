//! `palm knowledge context MODULE --max-bytes N`: a brief of one module sized for a
//! prompt. Sections go in the order an agent about to edit the module needs them —
//! what it is for, what was decided, its surface, what it touches, where it is risky,
//! how to check a change, what went wrong before, who owns it — and items are added
//! while they fit, so a small budget keeps the most useful part whole. Every line that
//! states something carries its citation; a claim whose evidence changed says so.

use super::cite::Verdict;
use super::{Claim, Knowledge, Module};
use serde::Serialize;

/// The smallest budget a brief accepts (bytes).
pub const BRIEF_BYTES_MIN: usize = 256;
/// The default budget (bytes).
pub const BRIEF_BYTES_DEFAULT: usize = 12_000;

/// A brief.
#[derive(Clone, Debug, Serialize)]
pub struct Brief {
    /// The module's name.
    pub module: String,
    /// The budget.
    pub max_bytes: usize,
    /// The brief's size (≤ `max_bytes`).
    pub bytes: usize,
    /// True when items were left out to fit.
    pub truncated: bool,
    /// Items left out, per section.
    pub omitted: Vec<Omitted>,
    /// The brief (Markdown).
    pub text: String,
}

/// What a section left out.
#[derive(Clone, Debug, Serialize)]
pub struct Omitted {
    /// The section.
    pub section: &'static str,
    /// Items left out.
    pub items: usize,
}

struct Section {
    name: &'static str,
    heading: String,
    items: Vec<String>,
}

fn verdict_note(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Holds => String::new(),
        Verdict::Moved { line } => format!(" (now at line {line})"),
        Verdict::Changed { .. } => " (STALE: the cited lines changed since)".to_owned(),
        Verdict::Missing { reason } => format!(" (STALE: {reason})"),
    }
}

/// Builds the brief of `module` within `max_bytes`; `checks` are commands worth running
/// after a change to it.
pub fn brief(
    knowledge: &Knowledge,
    repo: &git2::Repository,
    module: &Module,
    checks: &[String],
    max_bytes: usize,
) -> Brief {
    let max_bytes = max_bytes.max(BRIEF_BYTES_MIN);
    let check = |claim: &Claim<'_>| -> String {
        let audited = knowledge.audit_claim(repo, claim);
        let labels: Vec<String> = audited
            .cites
            .iter()
            .map(|c| format!("{}{}", c.cite, verdict_note(&c.verdict)))
            .collect();
        labels.join(", ")
    };
    let mut sections: Vec<Section> = Vec::new();
    let mut head = vec![format!(
        "{} files, {} lines{}; risk {} ({}); {} commits, {} in the last 30 days",
        module.files,
        module.lines,
        if module.languages.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                module
                    .languages
                    .iter()
                    .map(|(l, n)| format!("{l} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        module.risk_level,
        module.risk,
        module.churn,
        module.touches_30d
    )];
    if let Some(p) = &module.purpose {
        let claim = Claim {
            id: String::new(),
            kind: "purpose",
            module: None,
            text: p.text.clone(),
            cites: std::slice::from_ref(&p.cite),
        };
        head.push(format!("Purpose: {} [{}]", p.text, check(&claim)));
    }
    sections.push(Section {
        name: "module",
        heading: format!("# {} ({}, {})", module.name, module.path, module.kind),
        items: head,
    });
    let decisions = knowledge.decisions();
    let mut decided: Vec<&super::Decision> = decisions
        .iter()
        .filter(|d| d.modules.contains(&module.name))
        .collect();
    decided.sort_by_key(|d| (d.superseded_by.is_some(), std::cmp::Reverse(d.time)));
    sections.push(Section {
        name: "decisions",
        heading: "## Decisions".into(),
        items: decided
            .iter()
            .map(|d| {
                let claim = Claim {
                    id: d.id.clone(),
                    kind: "decision",
                    module: None,
                    text: d.text.clone(),
                    cites: &d.cites,
                };
                let status = match &d.superseded_by {
                    Some(by) => format!(" (superseded by {by})"),
                    None => String::new(),
                };
                format!("- {}{status}: {} [{}]", d.id, d.text, check(&claim))
            })
            .collect(),
    });
    if let Some(summary) = knowledge.summaries.modules.get(&module.name) {
        sections.push(Section {
            name: "summary",
            heading: format!("## Summary (written by {}, cited)", summary.provider),
            items: summary
                .claims
                .iter()
                .map(|c| {
                    let claim = Claim {
                        id: String::new(),
                        kind: "summary",
                        module: None,
                        text: c.text.clone(),
                        cites: &c.cites,
                    };
                    format!("- {} [{}]", c.text, check(&claim))
                })
                .collect(),
        });
    }
    sections.push(Section {
        name: "surface",
        heading: "## Surface (most used elsewhere first)".into(),
        items: module
            .surface
            .iter()
            .map(|s| {
                let claim = Claim {
                    id: String::new(),
                    kind: "surface",
                    module: None,
                    text: String::new(),
                    cites: std::slice::from_ref(&s.cite),
                };
                format!(
                    "- `{}` — {} files elsewhere [{}]",
                    s.signature,
                    s.references,
                    check(&claim)
                )
            })
            .collect(),
    });
    let mut links = Vec::new();
    if !module.depends_on.is_empty() {
        links.push(format!("- depends on: {}", module.depends_on.join(", ")));
    }
    if !module.used_by.is_empty() {
        links.push(format!("- used by: {}", module.used_by.join(", ")));
    }
    sections.push(Section {
        name: "dependencies",
        heading: "## Dependencies".into(),
        items: links,
    });
    sections.push(Section {
        name: "risk",
        heading: "## Risky files".into(),
        items: module
            .hotspots
            .iter()
            .map(|h| format!("- {} — risk {} ({})", h.path, h.score, h.level))
            .collect(),
    });
    let mut checking: Vec<String> = checks.iter().map(|c| format!("- `{c}`")).collect();
    checking.extend(module.tests.iter().map(|t| format!("- test file {t}")));
    sections.push(Section {
        name: "checks",
        heading: "## Checks and tests".into(),
        items: checking,
    });
    sections.push(Section {
        name: "incidents",
        heading: "## Incident candidates (unconfirmed, from commit subjects)".into(),
        items: knowledge
            .map
            .incidents
            .iter()
            .filter(|i| i.modules.contains(&module.name))
            .map(|i| {
                format!(
                    "- {} {}: {} [commit {}]",
                    i.kind,
                    super::cite::short(&i.commit),
                    i.subject,
                    super::cite::short(&i.commit)
                )
            })
            .collect(),
    });
    let mut people: Vec<String> = module
        .owners
        .iter()
        .map(|o| format!("- owner {} ({} commits)", o.name, o.commits))
        .collect();
    people.extend(module.recent.iter().map(|c| {
        format!(
            "- recent {} {} — {}",
            super::cite::short(&c.id),
            c.author,
            c.subject
        )
    }));
    sections.push(Section {
        name: "history",
        heading: "## Owners and recent commits".into(),
        items: people,
    });
    fit(&module.name, sections, max_bytes)
}

/// Adds sections and their items in order while they fit in `max_bytes`.
fn fit(module: &str, sections: Vec<Section>, max_bytes: usize) -> Brief {
    // Room kept for the closing line that says what was left out.
    const TAIL: usize = 96;
    let mut text = String::new();
    let mut omitted = Vec::new();
    for section in sections {
        if section.items.is_empty() {
            continue;
        }
        let heading = format!("{}\n", section.heading);
        let mut added = 0;
        for item in &section.items {
            let line = format!("{item}\n");
            let need = line.len() + if added == 0 { heading.len() + 1 } else { 0 };
            if text.len() + need + TAIL > max_bytes {
                break;
            }
            if added == 0 {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&heading);
            }
            text.push_str(&line);
            added += 1;
        }
        if added < section.items.len() {
            omitted.push(Omitted {
                section: section.name,
                items: section.items.len() - added,
            });
        }
    }
    if !omitted.is_empty() {
        let list: Vec<String> = omitted
            .iter()
            .map(|o| format!("{} {}", o.items, o.section))
            .collect();
        let mut tail = format!(
            "\n(left out to fit {max_bytes} bytes: {})\n",
            list.join(", ")
        );
        if text.len() + tail.len() > max_bytes {
            tail = "\n(more left out)\n".to_owned();
        }
        if text.len() + tail.len() <= max_bytes {
            text.push_str(&tail);
        }
    }
    // A single item longer than the whole budget is cut at a character boundary.
    if text.len() > max_bytes {
        let mut cut = max_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    Brief {
        module: module.to_owned(),
        max_bytes,
        bytes: text.len(),
        truncated: !omitted.is_empty(),
        omitted,
        text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_brief_never_exceeds_its_budget() {
        let sections = vec![
            Section {
                name: "module",
                heading: "# m".into(),
                items: vec!["x".repeat(100)],
            },
            Section {
                name: "surface",
                heading: "## Surface".into(),
                items: (0..100)
                    .map(|i| format!("- item {i} {}", "é".repeat(20)))
                    .collect(),
            },
        ];
        for budget in [256, 300, 1000, 5000] {
            let b = fit("m", sections_clone(&sections), budget);
            assert!(b.bytes <= budget, "{} > {budget}", b.bytes);
            assert_eq!(b.bytes, b.text.len());
            assert!(b.truncated);
            assert!(b.text.starts_with("# m\n"));
        }
        let whole = fit("m", sections_clone(&sections), 100_000);
        assert!(!whole.truncated);
        assert!(whole.text.contains("item 99"));
    }

    fn sections_clone(s: &[Section]) -> Vec<Section> {
        s.iter()
            .map(|x| Section {
                name: x.name,
                heading: x.heading.clone(),
                items: x.items.clone(),
            })
            .collect()
    }
}
