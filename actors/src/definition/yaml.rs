//! A YAML (and JSON) reader that keeps the line and column of every value.
//!
//! Definition errors must point at `file:line:col`, which a plain `serde` deserializer
//! cannot do. This module drives yaml-rust2's event parser and builds a small tree of
//! [`Spanned`] values instead. Scalars are resolved with the YAML 1.2 core schema (the
//! one JSON also satisfies), so a `.json` flow and a `.yaml` flow mean the same thing.

use super::Span;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Bound on nesting depth: a hostile document cannot overflow the stack of later passes.
pub const DEPTH_MAX: usize = 128;

/// Bound on the values a document holds once its aliases are expanded: a small file of
/// nested aliases ("billion laughs") cannot make the reader build an enormous tree.
pub const NODES_MAX: usize = 100_000;

/// Bound on the scalar text a document holds once its aliases are expanded (bytes).
pub const EXPANDED_BYTES_MAX: usize = 16 << 20;

/// A value with the position where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Spanned {
    /// The value.
    pub value: Value,
    /// Where it starts in the source.
    pub span: Span,
}

/// A YAML value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`, `~` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating point number.
    Float(f64),
    /// A string (quoted, or plain but not another type).
    String(String),
    /// A sequence.
    Seq(Vec<Spanned>),
    /// A mapping, in source order; keys are strings (others are rejected while reading).
    Map(Vec<(Spanned, Spanned)>),
}

impl Spanned {
    /// A short name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::String(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    /// Looks up a mapping key.
    pub fn get(&self, key: &str) -> Option<&Spanned> {
        match &self.value {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// Converts to JSON (spans are dropped).
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => items.iter().map(Spanned::to_json).collect(),
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

/// An error reading the document: where and what.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadError {
    /// Where.
    pub span: Span,
    /// What.
    pub message: String,
}

/// Reads one document. An empty document is `Null`; several documents are an error.
pub fn read(source: &str) -> Result<Spanned, ReadError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(source);
    if let Err(err) = parser.load(&mut builder, true) {
        let mark = err.marker();
        return Err(ReadError {
            span: span_of(*mark),
            message: format!("invalid YAML: {}", err.info()),
        });
    }
    if let Some(err) = builder.error {
        return Err(err);
    }
    match builder.documents.len() {
        0 => Ok(Spanned {
            value: Value::Null,
            span: Span { line: 1, col: 1 },
        }),
        1 => Ok(builder.documents.remove(0)),
        _ => Err(ReadError {
            span: builder.documents[1].span,
            message: "a flow file holds one document; found a second one".to_owned(),
        }),
    }
}

fn span_of(mark: Marker) -> Span {
    Span {
        line: mark.line() as u32,
        col: mark.col() as u32 + 1,
    }
}

/// How much a value weighs once expanded: what an alias to it adds to the document.
#[derive(Clone, Copy, Debug, Default)]
struct Shape {
    /// Values in it, itself included.
    nodes: usize,
    /// Scalar text in it (bytes).
    bytes: usize,
    /// Levels of nesting it adds (0 for a scalar).
    height: usize,
}

/// A collection being read: where it started, the document's totals then, and its
/// height so far.
struct Open {
    span: Span,
    anchor: usize,
    nodes_before: usize,
    bytes_before: usize,
    height: usize,
}

enum Frame {
    Seq(Open, Vec<Spanned>),
    Map(Open, Vec<(Spanned, Spanned)>, Option<Spanned>),
}

impl Frame {
    fn open(&mut self) -> &mut Open {
        match self {
            Frame::Seq(open, _) | Frame::Map(open, _, _) => open,
        }
    }
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    documents: Vec<Spanned>,
    anchors: std::collections::HashMap<usize, (Spanned, Shape)>,
    /// Values read so far, aliases expanded.
    nodes: usize,
    /// Scalar bytes read so far, aliases expanded.
    bytes: usize,
    error: Option<ReadError>,
}

impl Builder {
    fn fail(&mut self, span: Span, message: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(ReadError {
                span,
                message: message.into(),
            });
        }
    }

    fn push_value(&mut self, node: Spanned, anchor: usize, shape: Shape) {
        if anchor > 0 {
            self.anchors.insert(anchor, (node.clone(), shape));
        }
        if let Some(frame) = self.stack.last_mut() {
            let open = frame.open();
            open.height = open.height.max(shape.height + 1);
        }
        let mut problem: Option<(Span, String)> = None;
        match self.stack.last_mut() {
            None => self.documents.push(node),
            Some(Frame::Seq(_, items)) => items.push(node),
            Some(Frame::Map(_, entries, pending_key)) => match pending_key.take() {
                None => {
                    let key = match &node.value {
                        Value::String(_) => Some(node),
                        Value::Int(i) => Some(Spanned {
                            value: Value::String(i.to_string()),
                            span: node.span,
                        }),
                        Value::Bool(b) => Some(Spanned {
                            value: Value::String(b.to_string()),
                            span: node.span,
                        }),
                        _ => {
                            let what = node.type_name();
                            problem = Some((
                                node.span,
                                format!("mapping keys must be strings, found {what}"),
                            ));
                            None
                        }
                    };
                    if let Some(key) = key {
                        let first = entries
                            .iter()
                            .find(|(k, _)| k.as_str() == key.as_str())
                            .map(|(k, _)| k.span);
                        if let Some(first) = first {
                            let name = key.as_str().unwrap_or_default();
                            problem = Some((
                                key.span,
                                format!(
                                    "duplicate key `{name}` (first at line {}, column {})",
                                    first.line, first.col
                                ),
                            ));
                        }
                        *pending_key = Some(key);
                    }
                }
                Some(key) => entries.push((key, node)),
            },
        }
        if let Some((span, message)) = problem {
            self.fail(span, message);
        }
    }

    fn depth_check(&mut self, span: Span) -> bool {
        if self.stack.len() >= DEPTH_MAX {
            self.fail(span, format!("nesting deeper than {DEPTH_MAX} levels"));
            return false;
        }
        true
    }

    /// Counts `shape` into the document's totals; false (and the error) past a bound.
    /// `how` says how the values came: read, or through an alias.
    fn count(&mut self, span: Span, shape: Shape, how: &str) -> bool {
        self.nodes = self.nodes.saturating_add(shape.nodes);
        self.bytes = self.bytes.saturating_add(shape.bytes);
        if self.nodes > NODES_MAX {
            self.fail(
                span,
                format!("the document {how} more than {NODES_MAX} values"),
            );
            return false;
        }
        if self.bytes > EXPANDED_BYTES_MAX {
            self.fail(
                span,
                format!("the document {how} more than {EXPANDED_BYTES_MAX} bytes of text"),
            );
            return false;
        }
        true
    }

    fn start(&mut self, span: Span, anchor: usize) -> Option<Open> {
        if !self.depth_check(span) {
            return None;
        }
        let open = Open {
            span,
            anchor,
            nodes_before: self.nodes,
            bytes_before: self.bytes,
            height: 1,
        };
        let one = Shape {
            nodes: 1,
            ..Shape::default()
        };
        self.count(span, one, "holds").then_some(open)
    }

    fn shape_of(&self, open: &Open) -> Shape {
        Shape {
            nodes: self.nodes - open.nodes_before,
            bytes: self.bytes - open.bytes_before,
            height: open.height,
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let span = span_of(mark);
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let shape = Shape {
                    nodes: 1,
                    bytes: text.len(),
                    height: 0,
                };
                if self.count(span, shape, "holds") {
                    let value = resolve_scalar(text, style, tag.as_ref());
                    self.push_value(Spanned { value, span }, anchor, shape);
                }
            }
            Event::SequenceStart(anchor, _) => {
                if let Some(open) = self.start(span, anchor) {
                    self.stack.push(Frame::Seq(open, Vec::new()));
                }
            }
            Event::MappingStart(anchor, _) => {
                if let Some(open) = self.start(span, anchor) {
                    self.stack.push(Frame::Map(open, Vec::new(), None));
                }
            }
            Event::SequenceEnd => {
                if let Some(Frame::Seq(open, items)) = self.stack.pop() {
                    let shape = self.shape_of(&open);
                    let node = Spanned {
                        value: Value::Seq(items),
                        span: open.span,
                    };
                    self.push_value(node, open.anchor, shape);
                }
            }
            Event::MappingEnd => {
                if let Some(Frame::Map(open, entries, _)) = self.stack.pop() {
                    let shape = self.shape_of(&open);
                    // yaml-rust2 marks a block mapping where its first key ends; point at
                    // the first key instead, which is where a reader looks.
                    let start = entries.first().map_or(open.span, |(key, _)| key.span);
                    let node = Spanned {
                        value: Value::Map(entries),
                        span: start,
                    };
                    self.push_value(node, open.anchor, shape);
                }
            }
            Event::Alias(id) => match self.anchors.get(&id).map(|(_, shape)| *shape) {
                Some(shape) if self.stack.len() + shape.height > DEPTH_MAX => {
                    self.fail(
                        span,
                        format!("nesting deeper than {DEPTH_MAX} levels through an alias"),
                    );
                }
                Some(shape) => {
                    // Count before cloning: the bound is what keeps the clone small.
                    if self.count(span, shape, "expands through aliases to")
                        && let Some((node, _)) = self.anchors.get(&id)
                    {
                        let mut node = node.clone();
                        node.span = span;
                        self.push_value(node, 0, shape);
                    }
                }
                None => self.fail(span, "alias to an unknown anchor"),
            },
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

/// YAML 1.2 core schema resolution for plain scalars; quoted and block scalars are strings.
fn resolve_scalar(text: String, style: TScalarStyle, tag: Option<&Tag>) -> Value {
    if let Some(tag) = tag
        && (tag.handle == "tag:yaml.org,2002:" || tag.handle == "!!")
    {
        match tag.suffix.as_str() {
            "str" => return Value::String(text),
            "null" => return Value::Null,
            _ => {}
        }
    }
    if style != TScalarStyle::Plain {
        return Value::String(text);
    }
    match text.as_str() {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    if let Some(int) = parse_int(&text) {
        return Value::Int(int);
    }
    if looks_like_float(&text)
        && let Ok(float) = text.parse::<f64>()
    {
        return Value::Float(float);
    }
    Value::String(text)
}

fn parse_int(text: &str) -> Option<i64> {
    if let Some(hex) = text.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok();
    }
    if let Some(oct) = text.strip_prefix("0o") {
        return i64::from_str_radix(oct, 8).ok();
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn looks_like_float(text: &str) -> bool {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    !body.is_empty()
        && body.bytes().any(|b| b.is_ascii_digit())
        && body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_positions() {
        let doc = read("name: x\ntree:\n  sequence:\n    - succeed\n").unwrap();
        let tree = doc.get("tree").unwrap();
        assert_eq!(tree.span, Span { line: 3, col: 3 });
        let seq = tree.get("sequence").unwrap();
        match &seq.value {
            Value::Seq(items) => assert_eq!(items[0].span, Span { line: 4, col: 7 }),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn resolves_scalars_like_json() {
        let doc = read("a: 1\nb: 2.5\nc: true\nd: ~\ne: '1'\nf: hello\ng: -3\nh: 1e3").unwrap();
        let json = doc.to_json();
        assert_eq!(
            json,
            serde_json::json!({"a": 1, "b": 2.5, "c": true, "d": null, "e": "1", "f": "hello", "g": -3, "h": 1000.0})
        );
    }

    #[test]
    fn reads_json_with_tabs() {
        let doc = read("{\n\t\"name\": \"x\",\n\t\"tree\": {\"succeed\": null}\n}\n").unwrap();
        assert_eq!(doc.get("name").unwrap().as_str(), Some("x"));
        assert_eq!(doc.get("tree").unwrap().span.line, 3);
    }

    #[test]
    fn rejects_duplicate_keys_with_position() {
        let err = read("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(err.span, Span { line: 3, col: 1 });
        assert!(err.message.contains("duplicate key `a`"), "{}", err.message);
    }

    #[test]
    fn syntax_errors_have_positions() {
        let err = read("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.message.starts_with("invalid YAML"), "{}", err.message);
        assert!(err.span.line >= 1);
    }

    #[test]
    fn anchors_and_aliases_expand() {
        let doc = read("a: &x {k: 1}\nb: *x\n").unwrap();
        assert_eq!(doc.get("b").unwrap().to_json(), serde_json::json!({"k": 1}));
    }

    #[test]
    fn billion_laughs_is_refused_at_the_alias_that_crosses_the_bound() {
        let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for level in 1..10 {
            let prev = level - 1;
            let refs = vec![format!("*a{prev}"); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{refs}]\n"));
        }
        let err = read(&text).unwrap_err();
        assert!(
            err.message.contains(&format!(
                "expands through aliases to more than {NODES_MAX} values"
            )),
            "{}",
            err.message
        );
        // Level 5 holds 10^5 laughs: its aliases are where the bound is crossed.
        assert_eq!(err.span.line, 5, "{err:?}");
    }

    #[test]
    fn long_text_repeated_through_aliases_is_refused() {
        let long = "x".repeat(1 << 20);
        let refs = vec!["*t"; 20].join(", ");
        let text = format!("t: &t {long}\nmany: [{refs}]\n");
        let err = read(&text).unwrap_err();
        assert!(err.message.contains("bytes of text"), "{}", err.message);
        assert_eq!(err.span.line, 2);
    }

    #[test]
    fn an_alias_cannot_nest_past_the_depth_bound() {
        let half = DEPTH_MAX / 2 + 2;
        let deep = "[".repeat(half) + &"]".repeat(half);
        let wrap = "[".repeat(half) + "*d" + &"]".repeat(half);
        let text = format!("d: &d {deep}\ne: {wrap}\n");
        let err = read(&text).unwrap_err();
        assert!(err.message.contains("through an alias"), "{}", err.message);
    }

    #[test]
    fn aliases_within_the_bounds_still_expand() {
        let doc = read("a: &a [1, 2, 3]\nb: [*a, *a, *a]\n").unwrap();
        assert_eq!(
            doc.get("b").unwrap().to_json(),
            serde_json::json!([[1, 2, 3], [1, 2, 3], [1, 2, 3]])
        );
    }

    #[test]
    fn deep_nesting_is_refused() {
        let text = "[".repeat(DEPTH_MAX + 5) + &"]".repeat(DEPTH_MAX + 5);
        let err = read(&text).unwrap_err();
        assert!(err.message.contains("nesting"), "{}", err.message);
    }
}
