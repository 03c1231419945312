//! The BM25 half: a tantivy index with one document per file (path, symbol signatures,
//! doc comments, prose: Markdown paragraphs and module docs) and one per commit
//! (subject). A hit in prose carries the line of the passage it matched. Text is split by `CodeTokenizer`, which
//! keeps whole identifiers *and* their snake_case / camelCase parts, so `open_store`,
//! `openStore`, `open` and `store` all find `fn open_store`.

use crate::error::IntelError;
use crate::history::CommitNote;
use crate::store::{FileRecord, Layout};
use serde::Serialize;
use std::collections::BTreeSet;
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::snippet::SnippetGenerator;
use tantivy::tokenizer::{
    LowerCaser, RemoveLongFilter, TextAnalyzer, Token, TokenStream, Tokenizer,
};
use tantivy::{Index, IndexWriter, ReloadPolicy, TantivyDocument, Term};

/// The writer's memory budget per indexing thread (tantivy needs ≥ 15 MB).
pub const WRITER_BYTES_PER_THREAD: usize = 32 * 1024 * 1024;
/// Indexing threads of the writer.
pub const WRITER_THREADS_MAX: usize = 2;
/// Most hits one search returns.
pub const SEARCH_HITS_MAX: usize = 200;
/// Snippet length (characters).
pub const SNIPPET_CHARS_MAX: usize = 160;
/// Snippets are cut from at most this much of a file's symbols or docs (bytes): building
/// a snippet tokenizes the text it is cut from, and a file can declare thousands.
pub const SNIPPET_SOURCE_BYTES_MAX: usize = 16 * 1024;
/// Tokens longer than this (bytes) are not indexed.
pub const TOKEN_BYTES_MAX: usize = 64;

pub(crate) const TOKENIZER: &str = "code";

/// Splits code text into identifiers and the words inside them.
#[derive(Clone, Default)]
pub struct CodeTokenizer {
    tokens: Vec<Token>,
}

/// The token stream of `CodeTokenizer`.
pub struct CodeTokenStream<'a> {
    tokens: &'a mut [Token],
    next: usize,
}

impl TokenStream for CodeTokenStream<'_> {
    fn advance(&mut self) -> bool {
        self.next += 1;
        self.next <= self.tokens.len()
    }

    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

impl Tokenizer for CodeTokenizer {
    type TokenStream<'a> = CodeTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> CodeTokenStream<'a> {
        self.tokens.clear();
        for (position, (start, word)) in identifiers(text).enumerate() {
            let parts = split_identifier(word);
            let mut push = |from: usize, to: usize| {
                self.tokens.push(Token {
                    offset_from: start + from,
                    offset_to: start + to,
                    position,
                    text: word[from..to].to_owned(),
                    position_length: 1,
                });
            };
            push(0, word.len());
            if parts.len() > 1 {
                for (from, to) in parts {
                    push(from, to);
                }
            }
        }
        CodeTokenStream {
            tokens: &mut self.tokens,
            next: 0,
        }
    }
}

/// Runs of letters, digits and `_`, with their byte offsets.
fn identifiers(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut start = None;
    let mut out = Vec::new();
    for (i, c) in text.char_indices() {
        let word = c.is_alphanumeric() || c == '_';
        match (word, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, &text[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, &text[s..]));
    }
    out.into_iter()
        .map(|(s, w)| {
            let trimmed = w.trim_matches('_');
            let lead = w.len() - w.trim_start_matches('_').len();
            (s + lead, trimmed)
        })
        .filter(|(_, w)| !w.is_empty())
}

/// The parts of an identifier: `open_store` → open, store; `HTTPServer2` → HTTP, Server2.
fn split_identifier(word: &str) -> Vec<(usize, usize)> {
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut parts = Vec::new();
    let mut start: Option<usize> = None;
    for (k, &(i, c)) in chars.iter().enumerate() {
        if c == '_' {
            if let Some(s) = start.take() {
                parts.push((s, i));
            }
            continue;
        }
        let Some(s) = start else {
            start = Some(i);
            continue;
        };
        let previous = chars[k - 1].1;
        let next = chars.get(k + 1).map(|&(_, n)| n);
        let boundary = (c.is_uppercase() && previous.is_lowercase())
            || (c.is_uppercase()
                && previous.is_uppercase()
                && next.is_some_and(|n| n.is_lowercase()))
            || (c.is_alphabetic() && previous.is_numeric() && c.is_uppercase());
        if boundary {
            parts.push((s, i));
            start = Some(i);
        }
    }
    if let Some(s) = start {
        parts.push((s, word.len()));
    }
    parts
}

/// Lowercased tokens of a text, as the index sees them.
pub fn query_tokens(text: &str) -> BTreeSet<String> {
    let mut tokenizer = CodeTokenizer::default();
    let mut stream = tokenizer.token_stream(text);
    let mut out = BTreeSet::new();
    while stream.advance() {
        out.insert(stream.token().text.to_lowercase());
    }
    out
}

struct Fields {
    id: Field,
    kind: Field,
    path: Field,
    symbols: Field,
    symbols_preview: Field,
    symbol_lines: Field,
    docs: Field,
    docs_preview: Field,
    prose: Field,
    prose_preview: Field,
    prose_lines: Field,
    subject: Field,
    time: Field,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let indexed = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let text = indexed.clone().set_stored();
    let fields = Fields {
        id: builder.add_text_field("id", STRING | STORED),
        kind: builder.add_text_field("kind", STRING | STORED),
        path: builder.add_text_field("path", text.clone()),
        symbols: builder.add_text_field("symbols", indexed.clone()),
        symbols_preview: builder.add_text_field("symbols_preview", STORED),
        symbol_lines: builder.add_text_field("symbol_lines", STORED),
        docs: builder.add_text_field("docs", indexed.clone()),
        docs_preview: builder.add_text_field("docs_preview", STORED),
        prose: builder.add_text_field("prose", indexed),
        prose_preview: builder.add_text_field("prose_preview", STORED),
        prose_lines: builder.add_text_field("prose_lines", STORED),
        subject: builder.add_text_field("subject", text),
        time: builder.add_i64_field("time", STORED),
    };
    (builder.build(), fields)
}

fn fields_of(schema: &Schema) -> Result<Fields, IntelError> {
    let field = |name: &str| {
        schema
            .get_field(name)
            .map_err(|e| IntelError::Search(e.to_string()))
    };
    Ok(Fields {
        id: field("id")?,
        kind: field("kind")?,
        path: field("path")?,
        symbols: field("symbols")?,
        symbols_preview: field("symbols_preview")?,
        symbol_lines: field("symbol_lines")?,
        docs: field("docs")?,
        docs_preview: field("docs_preview")?,
        prose: field("prose")?,
        prose_preview: field("prose_preview")?,
        prose_lines: field("prose_lines")?,
        subject: field("subject")?,
        time: field("time")?,
    })
}

pub(crate) fn register(index: &Index) {
    let analyzer = TextAnalyzer::builder(CodeTokenizer::default())
        .filter(RemoveLongFilter::limit(TOKEN_BYTES_MAX))
        .filter(LowerCaser)
        .build();
    index.tokenizers().register(TOKENIZER, analyzer);
}

/// Opens the search index and checks that it belongs to `generation`.
pub fn open(layout: &Layout, generation: u64) -> Result<Index, IntelError> {
    let index = Index::open_in_dir(layout.search()).map_err(|e| IntelError::Corrupt {
        path: layout.search(),
        reason: e.to_string(),
    })?;
    let payload = index.load_metas()?.payload;
    if payload.as_deref() != Some(generation.to_string().as_str()) {
        return Err(IntelError::Corrupt {
            path: layout.search(),
            reason: format!(
                "generation {} does not match the index's {generation}",
                payload.unwrap_or_else(|| "none".into())
            ),
        });
    }
    register(&index);
    Ok(index)
}

/// What to change in the search index.
pub struct SearchUpdate<'a> {
    /// Paths whose documents go (changed or removed files).
    pub remove: Vec<&'a str>,
    /// Files to add.
    pub add: Vec<&'a FileRecord>,
    /// Commits to add; `None` with `rebuild_commits` replaces them all.
    pub commits: &'a [CommitNote],
    /// Drop every commit document first (the history was rebuilt).
    pub rebuild_commits: bool,
}

/// Creates the search index from nothing.
pub fn create(
    layout: &Layout,
    files: &[FileRecord],
    commits: &[CommitNote],
    generation: u64,
) -> Result<(), IntelError> {
    let dir = layout.search();
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| IntelError::io(&dir, e))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| IntelError::io(&dir, e))?;
    let (schema, _) = schema();
    let index = Index::create_in_dir(&dir, schema)?;
    register(&index);
    apply(
        layout,
        &index,
        SearchUpdate {
            remove: Vec::new(),
            add: files.iter().collect(),
            commits,
            rebuild_commits: false,
        },
        generation,
    )
}

/// Applies an update to an existing index (opened at the previous generation).
pub fn update(
    layout: &Layout,
    previous_generation: u64,
    change: SearchUpdate<'_>,
    generation: u64,
) -> Result<(), IntelError> {
    let index = open(layout, previous_generation)?;
    apply(layout, &index, change, generation)
}

fn apply(
    layout: &Layout,
    index: &Index,
    change: SearchUpdate<'_>,
    generation: u64,
) -> Result<(), IntelError> {
    let fields = fields_of(&index.schema())?;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, WRITER_THREADS_MAX);
    let mut writer: IndexWriter<TantivyDocument> = index
        .writer_with_num_threads(threads, threads * WRITER_BYTES_PER_THREAD)
        .map_err(|e| match e {
            tantivy::TantivyError::LockFailure(..) => IntelError::Busy {
                path: layout.dir.clone(),
            },
            other => IntelError::from(other),
        })?;
    for path in &change.remove {
        writer.delete_term(Term::from_field_text(fields.id, path));
    }
    if change.rebuild_commits {
        writer.delete_term(Term::from_field_text(fields.kind, "commit"));
    }
    for record in &change.add {
        writer.add_document(file_document(&fields, record))?;
    }
    for commit in change.commits {
        let mut doc = TantivyDocument::default();
        doc.add_text(fields.id, format!("commit:{}", commit.id));
        doc.add_text(fields.kind, "commit");
        doc.add_text(fields.subject, &commit.subject);
        doc.add_i64(fields.time, commit.time);
        writer.add_document(doc)?;
    }
    let mut prepared = writer.prepare_commit()?;
    prepared.set_payload(&generation.to_string());
    prepared.commit()?;
    writer.wait_merging_threads()?;
    Ok(())
}

fn file_document(fields: &Fields, record: &FileRecord) -> TantivyDocument {
    let mut doc = TantivyDocument::default();
    doc.add_text(fields.id, &record.path);
    doc.add_text(fields.kind, "file");
    doc.add_text(fields.path, &record.path);
    let mut signatures = String::new();
    let mut lines = String::new();
    let mut docs = String::new();
    for symbol in &record.facts.symbols {
        if symbol.signature.contains(&symbol.name) {
            signatures.push_str(&symbol.signature);
        } else {
            signatures.push_str(&format!("{} {}", symbol.name, symbol.signature));
        }
        signatures.push('\n');
        lines.push_str(&format!(
            "{}\t{}\t{}\n",
            symbol.line,
            symbol.kind.name(),
            symbol.name
        ));
        if let Some(doc_text) = &symbol.doc {
            docs.push_str(doc_text);
            docs.push('\n');
        }
    }
    doc.add_text(fields.symbols_preview, preview(&signatures));
    doc.add_text(fields.symbols, signatures);
    doc.add_text(fields.symbol_lines, lines);
    doc.add_text(fields.docs_preview, preview(&docs));
    doc.add_text(fields.docs, docs);
    let mut prose = String::new();
    let mut prose_lines = String::new();
    for passage in &record.facts.prose {
        prose.push_str(&passage.text);
        prose.push('\n');
        // One line per passage: its line, then its text on one line (to find which
        // passage a query matched).
        prose_lines.push_str(&format!(
            "{}\t{}\n",
            passage.line,
            passage.text.replace('\n', " ")
        ));
    }
    doc.add_text(fields.prose_preview, preview(&prose));
    doc.add_text(fields.prose, prose);
    doc.add_text(fields.prose_lines, prose_lines);
    doc
}

/// The head of a text, cut at a character boundary.
fn preview(text: &str) -> String {
    let mut end = text.len().min(SNIPPET_SOURCE_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// A symbol of a hit whose name matches the query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SymbolHit {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// Its line.
    pub line: u32,
}

/// One ranked result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchHit {
    /// `file` or `commit`.
    pub kind: String,
    /// The file (file hits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The commit id (commit hits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Commit time (commit hits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<i64>,
    /// BM25 score (rounded to 3 decimals).
    pub score: f64,
    /// The best matching passage, matches in `**bold**`.
    pub snippet: String,
    /// Symbols whose names match a query word (file hits).
    pub symbols: Vec<SymbolHit>,
    /// The line of the prose passage the query matched (file hits found by their prose).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// Runs a query; hits best first.
pub fn search(index: &Index, query: &str, limit: usize) -> Result<Vec<SearchHit>, IntelError> {
    if query.trim().is_empty() {
        return Err(IntelError::EmptyQuery);
    }
    let fields = fields_of(&index.schema())?;
    let reader = index
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into()?;
    let searcher = reader.searcher();
    let mut parser = QueryParser::for_index(
        index,
        vec![
            fields.path,
            fields.symbols,
            fields.docs,
            fields.prose,
            fields.subject,
        ],
    );
    parser.set_field_boost(fields.path, 2.0);
    parser.set_field_boost(fields.symbols, 1.5);
    // Lenient: a stray quote or colon in what a person typed is not an error.
    let (parsed, _) = parser.parse_query_lenient(query);
    let limit = limit.clamp(1, SEARCH_HITS_MAX);
    let top = searcher.search(&parsed, &TopDocs::with_limit(limit).order_by_score())?;
    // Each generator knows the query's terms on an indexed field and cuts its snippet
    // from the stored text of the same content (a bounded preview for symbols and docs).
    let mut generators = Vec::new();
    for (field, source) in [
        (fields.symbols, fields.symbols_preview),
        (fields.docs, fields.docs_preview),
        (fields.prose, fields.prose_preview),
        (fields.subject, fields.subject),
        (fields.path, fields.path),
    ] {
        let mut generator = SnippetGenerator::create(&searcher, &*parsed, field)?;
        generator.set_max_num_chars(SNIPPET_CHARS_MAX);
        generators.push((generator, source));
    }
    let wanted = query_tokens(query);
    let mut hits = Vec::with_capacity(top.len());
    for (score, address) in top {
        let doc: TantivyDocument = searcher.doc(address)?;
        let text = |field: Field| {
            doc.get_first(field)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_owned()
        };
        let kind = text(fields.kind);
        let snippet = generators
            .iter()
            .map(|(generator, source)| generator.snippet(&text(*source)))
            .find(|s| !s.highlighted().is_empty())
            .map(|s| highlight(s.fragment(), s.highlighted()))
            .unwrap_or_else(|| {
                let fallback = if kind == "commit" {
                    text(fields.subject)
                } else {
                    text(fields.path)
                };
                fallback.chars().take(SNIPPET_CHARS_MAX).collect()
            });
        let score = (f64::from(score) * 1000.0).round() / 1000.0;
        if kind == "commit" {
            hits.push(SearchHit {
                kind,
                path: None,
                commit: Some(text(fields.id).trim_start_matches("commit:").to_owned()),
                time: doc.get_first(fields.time).and_then(|v| v.as_i64()),
                score,
                snippet,
                symbols: Vec::new(),
                line: None,
            });
        } else {
            let symbols = text(fields.symbol_lines)
                .lines()
                .filter_map(|line| {
                    let mut parts = line.splitn(3, '\t');
                    let number = parts.next()?.parse().ok()?;
                    let kind = parts.next()?.to_owned();
                    let name = parts.next()?.to_owned();
                    let matched = query_tokens(&name).iter().any(|t| wanted.contains(t));
                    matched.then_some(SymbolHit {
                        name,
                        kind,
                        line: number,
                    })
                })
                .collect();
            let line = text(fields.prose_lines).lines().find_map(|passage| {
                let (number, words) = passage.split_once('\t')?;
                query_tokens(words)
                    .iter()
                    .any(|t| wanted.contains(t))
                    .then(|| number.parse().ok())
                    .flatten()
            });
            hits.push(SearchHit {
                kind,
                path: Some(text(fields.id)),
                commit: None,
                time: None,
                score,
                snippet,
                symbols,
                line,
            });
        }
    }
    Ok(hits)
}

pub(crate) fn highlight(fragment: &str, ranges: &[std::ops::Range<usize>]) -> String {
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
    out.replace('\n', " ⏎ ").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_into_words() {
        let tokens = query_tokens("fn open_store(path: &Path) -> HTTPServer2");
        for expected in [
            "open_store",
            "open",
            "store",
            "path",
            "httpserver2",
            "http",
            "server2",
            "fn",
        ] {
            assert!(tokens.contains(expected), "{expected} in {tokens:?}");
        }
        assert_eq!(
            query_tokens("__init__"),
            ["init".to_owned()].into_iter().collect()
        );
    }
}
