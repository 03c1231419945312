//! `palm knowledge search` and `palm knowledge why`: BM25 over the map (tantivy, in
//! memory, built per question: a map is small), with the repo index's code tokenizer so
//! `open_store`, `openStore` and `store` find each other.
//!
//! `search` looks at everything (modules, decisions, incidents, summaries); `why` answers
//! a question from decisions only, active ones before the ones they replaced, each with
//! the state of its evidence now.

use super::{Decision, Knowledge};
use crate::error::IntelError;
use crate::search::{TOKENIZER, highlight, register};
use serde::Serialize;
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions, Value};
use tantivy::snippet::SnippetGenerator;
use tantivy::{Index, TantivyDocument, doc};

/// Hits `search` returns unless asked for more.
pub const SEARCH_LIMIT_DEFAULT: usize = 5;
/// Most hits either returns.
pub const SEARCH_LIMIT_MAX: usize = 50;
/// Snippet length (characters).
const SNIPPET_CHARS: usize = 200;

/// A searchable piece of the map.
struct Doc {
    kind: &'static str,
    id: String,
    title: String,
    body: String,
    cites: Vec<String>,
    module: Option<String>,
}

/// One hit.
#[derive(Clone, Debug, Serialize)]
pub struct Hit {
    /// module, decision, incident or summary.
    pub kind: &'static str,
    /// A module's name, or a decision's, incident's or summary's id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// The best matching passage, matches in `**bold**`.
    pub snippet: String,
    /// Its evidence (`file:line` or `commit …`).
    pub cites: Vec<String>,
    /// The module it is about, when one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// BM25 score.
    pub score: f64,
}

fn documents(knowledge: &Knowledge, decisions: &[Decision]) -> Vec<Doc> {
    let mut docs = Vec::new();
    for m in &knowledge.map.modules {
        let mut body = String::new();
        if let Some(p) = &m.purpose {
            body.push_str(&p.text);
            body.push('\n');
        }
        for s in &m.surface {
            body.push_str(&format!("{} {}\n", s.kind, s.name));
        }
        body.push_str(&m.languages.keys().cloned().collect::<Vec<_>>().join(" "));
        docs.push(Doc {
            kind: "module",
            id: m.name.clone(),
            title: format!("{} ({})", m.name, m.path),
            body,
            cites: m.purpose.iter().map(|p| p.cite.label()).collect(),
            module: Some(m.name.clone()),
        });
    }
    for d in decisions {
        docs.push(decision_doc(d));
    }
    for i in &knowledge.map.incidents {
        docs.push(Doc {
            kind: "incident",
            id: i.id.clone(),
            title: format!("{}: {}", i.kind, i.subject),
            body: i.files.join("\n"),
            cites: i.cites.iter().map(|c| c.label()).collect(),
            module: i.modules.first().cloned(),
        });
    }
    for (module, summary) in &knowledge.summaries.modules {
        for (n, claim) in summary.claims.iter().enumerate() {
            docs.push(Doc {
                kind: "summary",
                id: format!("summary:{module}#{}", n + 1),
                title: format!("{module} (summary by {})", summary.provider),
                body: claim.text.clone(),
                cites: claim.cites.iter().map(|c| c.label()).collect(),
                module: Some(module.clone()),
            });
        }
    }
    docs
}

fn decision_doc(d: &Decision) -> Doc {
    Doc {
        kind: "decision",
        id: d.id.clone(),
        title: d.title.clone(),
        body: d.text.clone(),
        cites: d.cites.iter().map(|c| c.label()).collect(),
        module: d.modules.first().cloned(),
    }
}

/// Ranks `docs` for `query`: (position in `docs`, score, snippet), best first.
fn rank(docs: &[Doc], query: &str, limit: usize) -> Result<Vec<(usize, f64, String)>, IntelError> {
    if query.trim().is_empty() {
        return Err(IntelError::EmptyQuery);
    }
    let mut builder = Schema::builder();
    let text = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(TOKENIZER)
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        )
        .set_stored();
    let position = builder.add_u64_field("position", STORED);
    let title = builder.add_text_field("title", text.clone());
    let body = builder.add_text_field("body", text);
    let index = Index::create_in_ram(builder.build());
    register(&index);
    let mut writer = index.writer_with_num_threads(1, 15_000_000)?;
    for (at, d) in docs.iter().enumerate() {
        writer.add_document(doc!(
            position => at as u64,
            title => d.title.as_str(),
            body => d.body.as_str(),
        ))?;
    }
    writer.commit()?;
    let reader = index.reader()?;
    let searcher = reader.searcher();
    let mut parser = QueryParser::for_index(&index, vec![title, body]);
    parser.set_field_boost(title, 2.0);
    let (parsed, _) = parser.parse_query_lenient(query);
    let top = searcher.search(
        &parsed,
        &TopDocs::with_limit(limit.clamp(1, SEARCH_LIMIT_MAX)).order_by_score(),
    )?;
    let mut generator = SnippetGenerator::create(&searcher, &*parsed, body)?;
    generator.set_max_num_chars(SNIPPET_CHARS);
    let mut out = Vec::new();
    for (score, address) in top {
        let found: TantivyDocument = searcher.doc(address)?;
        let at = found
            .get_first(position)
            .and_then(|v| v.as_u64())
            .unwrap_or(0) as usize;
        let Some(d) = docs.get(at) else { continue };
        let snippet = generator.snippet(&d.body);
        let snippet = if snippet.highlighted().is_empty() {
            d.body
                .chars()
                .take(SNIPPET_CHARS)
                .collect::<String>()
                .replace('\n', " · ")
        } else {
            highlight(snippet.fragment(), snippet.highlighted())
        };
        out.push((at, (f64::from(score) * 1000.0).round() / 1000.0, snippet));
    }
    Ok(out)
}

/// `palm knowledge search QUERY`.
pub fn search(knowledge: &Knowledge, query: &str, limit: usize) -> Result<Vec<Hit>, IntelError> {
    let decisions = knowledge.decisions();
    let docs = documents(knowledge, &decisions);
    Ok(rank(&docs, query, limit)?
        .into_iter()
        .map(|(at, score, snippet)| {
            let d = &docs[at];
            Hit {
                kind: d.kind,
                id: d.id.clone(),
                title: d.title.clone(),
                snippet,
                cites: d.cites.clone(),
                module: d.module.clone(),
                score,
            }
        })
        .collect())
}

/// The decisions that answer a question, best first, active ones before superseded
/// ones of equal rank (each superseded one names its successor).
pub fn why(
    knowledge: &Knowledge,
    question: &str,
    limit: usize,
) -> Result<Vec<(Decision, f64)>, IntelError> {
    let decisions = knowledge.decisions();
    let docs: Vec<Doc> = decisions.iter().map(decision_doc).collect();
    if docs.is_empty() {
        return Ok(Vec::new());
    }
    let mut ranked = rank(&docs, question, limit)?;
    // A superseded decision sinks below the active ones; its successor is pulled in.
    ranked.sort_by(|a, b| {
        let active = |at: usize| decisions[at].superseded_by.is_none();
        active(b.0).cmp(&active(a.0)).then(b.1.total_cmp(&a.1))
    });
    let mut out: Vec<(Decision, f64)> = Vec::new();
    for (at, score, _) in ranked {
        let d = &decisions[at];
        if let Some(next) = &d.superseded_by
            && !out.iter().any(|(o, _)| &o.id == next)
            && let Some(successor) = decisions.iter().find(|x| &x.id == next)
        {
            out.push((successor.clone(), score));
        }
        if !out.iter().any(|(o, _)| o.id == d.id) {
            out.push((d.clone(), score));
        }
    }
    out.truncate(limit.max(1));
    Ok(out)
}
