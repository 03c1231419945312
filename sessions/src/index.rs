//! The recall index: one tantivy index across vendors, one document per transcript
//! entry, its text redacted of secrets.
//!
//! Fields: `session`, `vendor`, `role` (exact terms), `file`, `line`, `tool` (stored),
//! `timestamp` (i64 ms, indexed for `--since`), `dirs` (the session's working directory
//! and every ancestor, exact terms, so `--repo DIR` is one term) and `text` (BM25,
//! stored for snippets, cut at [`STORED_TEXT_BYTES_MAX`]).

use crate::error::SessionsError;
use crate::transcript::{Entry, Vendor};
use serde::Serialize;
use std::ops::Bound;
use std::path::Path;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, QueryParser, RangeQuery, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TEXT, Value,
};
use tantivy::snippet::SnippetGenerator;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

/// The writer's memory budget (tantivy needs at least 15 MB per thread).
pub const WRITER_BYTES: usize = 64 * 1024 * 1024;
/// The most text of an entry indexed and stored (bytes).
pub const STORED_TEXT_BYTES_MAX: usize = 16 * 1024;
/// Most hits a recall returns.
pub const HITS_MAX: usize = 200;
/// Snippet length (characters).
pub const SNIPPET_CHARS_MAX: usize = 200;

/// The index's fields.
#[derive(Clone, Copy, Debug)]
pub struct Fields {
    session: Field,
    vendor: Field,
    role: Field,
    file: Field,
    line: Field,
    tool: Field,
    timestamp: Field,
    dirs: Field,
    text: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let fields = Fields {
        session: b.add_text_field("session", STRING | STORED),
        vendor: b.add_text_field("vendor", STRING | STORED),
        role: b.add_text_field("role", STRING | STORED),
        file: b.add_text_field("file", STORED),
        line: b.add_u64_field("line", STORED),
        tool: b.add_text_field("tool", STORED),
        timestamp: b.add_i64_field("timestamp", INDEXED | STORED | FAST),
        dirs: b.add_text_field("dirs", STRING),
        text: b.add_text_field("text", TEXT | STORED),
    };
    (b.build(), fields)
}

/// One hit of a recall.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hit {
    /// The session.
    pub session: String,
    /// Whose.
    pub vendor: String,
    /// The vendor file (its path when ingested).
    pub file: String,
    /// The line in it.
    pub line: u64,
    /// When (RFC 3339), if the line said.
    pub timestamp: Option<String>,
    /// What the entry is (user, assistant, tool_call, ...).
    pub role: String,
    /// The matching passage, terms in `**bold**`.
    pub snippet: String,
    /// BM25 score.
    pub score: f64,
}

/// What a recall looks for.
#[derive(Clone, Debug, Default)]
pub struct Recall {
    /// Words (tantivy's query syntax, read leniently).
    pub query: String,
    /// Only sessions that worked in this directory or below it.
    pub repo: Option<String>,
    /// Only entries at or after this time (ms).
    pub since_ms: Option<i64>,
    /// Only this vendor's.
    pub vendor: Option<Vendor>,
    /// Most hits (capped at [`HITS_MAX`]).
    pub limit: usize,
}

/// The open index.
pub struct RecallIndex {
    index: Index,
    fields: Fields,
    reader: IndexReader,
}

impl RecallIndex {
    /// Opens (or makes) the index under `dir`.
    pub fn open(dir: &Path) -> Result<RecallIndex, SessionsError> {
        std::fs::create_dir_all(dir).map_err(|e| SessionsError::io(dir, e))?;
        let (schema, fields) = schema();
        let directory = tantivy::directory::MmapDirectory::open(dir)
            .map_err(|e| SessionsError::Index(e.to_string()))?;
        let index = Index::open_or_create(directory, schema)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(RecallIndex {
            index,
            fields,
            reader,
        })
    }

    /// The ingest generation of the last commit (0: never committed).
    pub fn generation(&self) -> Result<u64, SessionsError> {
        let metas = self.index.load_metas()?;
        Ok(metas
            .payload
            .as_deref()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0))
    }

    /// A writer (one at a time: a second ingest gets `Busy`).
    pub fn writer(&self) -> Result<IndexWriter, SessionsError> {
        Ok(self.index.writer_with_num_threads(1, WRITER_BYTES)?)
    }

    /// Adds an entry of `file` from a session that worked in `cwd`.
    pub fn add(
        &self,
        writer: &IndexWriter,
        vendor: Vendor,
        file: &str,
        cwd: Option<&str>,
        entry: &Entry,
    ) -> Result<(), SessionsError> {
        let f = &self.fields;
        let mut doc = TantivyDocument::default();
        doc.add_text(f.session, &entry.session);
        doc.add_text(f.vendor, vendor.as_str());
        doc.add_text(f.role, entry.role.as_str());
        doc.add_text(f.file, file);
        doc.add_u64(f.line, entry.line);
        if let Some(tool) = &entry.tool {
            doc.add_text(f.tool, tool);
        }
        if let Some(ms) = entry.timestamp_ms {
            doc.add_i64(f.timestamp, ms);
        }
        if let Some(cwd) = cwd {
            for dir in Path::new(cwd).ancestors() {
                let dir = dir.to_string_lossy();
                if !dir.is_empty() {
                    doc.add_text(f.dirs, dir.trim_end_matches('/'));
                }
            }
        }
        let text = cut(&entry.text, STORED_TEXT_BYTES_MAX);
        doc.add_text(f.text, palm_agents::secrets::redact(text));
        writer
            .add_document(doc)
            .map_err(|e| SessionsError::Index(e.to_string()))?;
        Ok(())
    }

    /// Deletes a session's entries (committed with the writer's next commit).
    pub fn delete_session(&self, writer: &IndexWriter, session: &str) {
        writer.delete_term(Term::from_field_text(self.fields.session, session));
    }

    /// Commits what `writer` added, naming the ingest `generation`.
    pub fn commit(&self, writer: &mut IndexWriter, generation: u64) -> Result<(), SessionsError> {
        let mut prepared = writer.prepare_commit()?;
        prepared.set_payload(&generation.to_string());
        prepared.commit()?;
        self.reader.reload()?;
        Ok(())
    }

    /// Entries indexed.
    pub fn entries(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// The hits of `recall`, best first.
    pub fn recall(&self, recall: &Recall) -> Result<Vec<Hit>, SessionsError> {
        if recall.query.trim().is_empty() {
            return Err(SessionsError::Usage(
                "recall needs words to look for".into(),
            ));
        }
        let f = &self.fields;
        self.reader.reload()?;
        let searcher = self.reader.searcher();
        let parser = QueryParser::for_index(&self.index, vec![f.text]);
        let (words, _) = parser.parse_query_lenient(&recall.query);
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, words.box_clone())];
        if let Some(vendor) = recall.vendor {
            clauses.push((
                Occur::Must,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.vendor, vendor.as_str()),
                    IndexRecordOption::Basic,
                )),
            ));
        }
        if let Some(repo) = &recall.repo {
            clauses.push((
                Occur::Must,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.dirs, repo.trim_end_matches('/')),
                    IndexRecordOption::Basic,
                )),
            ));
        }
        if let Some(since) = recall.since_ms {
            clauses.push((
                Occur::Must,
                Box::new(RangeQuery::new(
                    Bound::Included(Term::from_field_i64(f.timestamp, since)),
                    Bound::Unbounded,
                )),
            ));
        }
        let query = BooleanQuery::new(clauses);
        let limit = recall.limit.clamp(1, HITS_MAX);
        let top = searcher.search(&query, &TopDocs::with_limit(limit).order_by_score())?;
        let mut snippets = SnippetGenerator::create(&searcher, &*words, f.text)?;
        snippets.set_max_num_chars(SNIPPET_CHARS_MAX);
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address)?;
            let text = |field: Field| {
                doc.get_first(field)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_owned()
            };
            let body = text(f.text);
            let snippet = snippets.snippet(&body);
            let snippet = if snippet.highlighted().is_empty() {
                body.chars().take(SNIPPET_CHARS_MAX).collect()
            } else {
                highlight(snippet.fragment(), snippet.highlighted())
            };
            let timestamp = doc
                .get_first(f.timestamp)
                .and_then(|v| v.as_i64())
                .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
                .map(|t| t.to_string());
            hits.push(Hit {
                session: text(f.session),
                vendor: text(f.vendor),
                file: text(f.file),
                line: doc.get_first(f.line).and_then(|v| v.as_u64()).unwrap_or(0),
                timestamp,
                role: text(f.role),
                snippet: snippet.split_whitespace().collect::<Vec<_>>().join(" "),
                score: (f64::from(score) * 1000.0).round() / 1000.0,
            });
        }
        Ok(hits)
    }
}

/// `fragment` with the highlighted ranges in `**bold**`.
fn highlight(fragment: &str, ranges: &[std::ops::Range<usize>]) -> String {
    let mut out = String::with_capacity(fragment.len() + ranges.len() * 4);
    let mut at = 0;
    for range in ranges {
        if range.start < at || range.end > fragment.len() {
            continue;
        }
        out.push_str(&fragment[at..range.start]);
        out.push_str("**");
        out.push_str(&fragment[range.clone()]);
        out.push_str("**");
        at = range.end;
    }
    out.push_str(&fragment[at..]);
    out
}

/// At most `max` bytes of `text`, cut on a character boundary.
pub fn cut(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
