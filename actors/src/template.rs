//! Templates (`"hello {{ input.who }}"`) and expressions (`state.echoed.exit_code == 0`).
//!
//! One engine serves both: minijinja. It is maintained, pure Rust, has no runtime
//! dependencies we would not already carry, compiles expressions separately from templates
//! (so `check:` and `for_each.items:` are real expressions, not templates that happen to
//! print "true"), reports syntax errors with positions, and can bound evaluation with fuel.
//!
//! Compiled forms are shared: each distinct source text is compiled once and kept in a
//! bounded cache ([`CACHE_MAX`] entries; when full, it starts afresh), so ticks never
//! recompile what the stored definitions use, while flows submitted by the thousand
//! (each with its own text) cannot grow memory without bound. A compiled form owns its
//! text; a definition holds its own reference, so eviction never invalidates one.
//!
//! A template whose whole text is one `{{ expression }}` evaluates to the expression's
//! native value (`"{{ state.n + 1 }}"` is the number 2, not the string "2"); any other
//! template renders to a string.

use minijinja::{Environment, ErrorKind, Expression, UndefinedBehavior, Value};
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};

/// Upper bound on template evaluation work (minijinja "fuel"), so a hostile or mistaken
/// template (`range(10**9)`) fails instead of hanging a tick.
const TEMPLATE_FUEL_MAX: u64 = 200_000;

/// Names every template and expression may use at the top level, besides the bindings of
/// enclosing `for_each` nodes.
pub const ROOT_NAMES: &[&str] = &["input", "state"];

/// minijinja's own global functions, which are not "undeclared variables" for us.
const GLOBAL_FUNCTIONS: &[&str] = &[
    "range",
    "dict",
    "debug",
    "namespace",
    "true",
    "false",
    "none",
];

/// Distinct compiled texts kept for reuse (expressions and templates each).
pub const CACHE_MAX: usize = 4_096;

/// The settings every template and expression is evaluated with.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    // Printing or indexing into something undefined is an error (a typo must not silently
    // render as ""), while testing it for truth (`check: "state.maybe"`) is false.
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    env.set_fuel(Some(TEMPLATE_FUEL_MAX));
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    // A map or a list prints as JSON (`{"v":3}`), which a command or a provider can
    // parse, rather than minijinja's debug-like form.
    env.set_formatter(|out, state, value| match json_text(value) {
        Some(text) => out.write_str(&text).map_err(minijinja::Error::from),
        None => minijinja::escape_formatter(out, state, value),
    });
    env
}

/// The JSON text of a map or a list; `None` for anything else.
fn json_text(value: &Value) -> Option<String> {
    matches!(
        value.kind(),
        minijinja::value::ValueKind::Map | minijinja::value::ValueKind::Seq
    )
    .then(|| serde_json::to_string(value).ok())
    .flatten()
}

static ENV: LazyLock<Environment<'static>> = LazyLock::new(environment);

type CompiledExpression = Arc<Expression<'static, 'static>>;

/// A text template: an environment holding just it (minijinja templates borrow their
/// environment, so the environment is what is shared).
type CompiledTemplate = Arc<Environment<'static>>;

/// The name of the one template in a [`CompiledTemplate`].
const TEMPLATE_NAME: &str = "t";

/// Compiled forms by source text, bounded (see the module docs).
#[derive(Default)]
struct Cache {
    expressions: HashMap<Arc<str>, CompiledExpression>,
    templates: HashMap<Arc<str>, CompiledTemplate>,
}

static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(Mutex::default);

fn cache() -> std::sync::MutexGuard<'static, Cache> {
    CACHE.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// Runs the template engine, turning a panic inside it into an error: flows come from
/// outside, and an engine bug met by one flow's text must fail that flow, not the node.
/// (minijinja 2.24 panics with "empty lexer stack" on `a}}.b` as an expression; found by
/// the `flow_parse` fuzz target.)
fn engine<T>(run: impl FnOnce() -> Result<T, minijinja::Error>) -> Result<T, TemplateError> {
    quiet_panics_in_engine();
    ENGINE_RUNNING.with(|running| running.set(true));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
    ENGINE_RUNNING.with(|running| running.set(false));
    match outcome {
        Ok(result) => result.map_err(TemplateError::from_minijinja),
        Err(_) => Err(TemplateError::new(
            "the template engine failed on this text (an engine bug; rewrite the expression)",
        )),
    }
}

thread_local! {
    /// Set while this thread is inside the template engine.
    static ENGINE_RUNNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Wraps the process's panic hook (once) so a panic inside the engine, which [`engine`]
/// turns into an error, does not also print a panic report: every other panic is
/// reported by the hook that was there before.
fn quiet_panics_in_engine() {
    static WRAPPED: std::sync::Once = std::sync::Once::new();
    WRAPPED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !ENGINE_RUNNING.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
}

fn compile_expression(source: &str) -> Result<CompiledExpression, TemplateError> {
    if let Some(found) = cache().expressions.get(source) {
        return Ok(Arc::clone(found));
    }
    // Compiled outside the lock: another thread may compile the same text meanwhile;
    // both results are equal and either is kept.
    let compiled = engine(|| ENV.compile_expression_owned(source.to_owned()))?;
    let compiled = Arc::new(compiled);
    let mut cache = cache();
    if cache.expressions.len() >= CACHE_MAX {
        cache.expressions.clear();
    }
    cache
        .expressions
        .insert(Arc::from(source), Arc::clone(&compiled));
    Ok(compiled)
}

fn compile_template(source: &str) -> Result<CompiledTemplate, TemplateError> {
    if let Some(found) = cache().templates.get(source) {
        return Ok(Arc::clone(found));
    }
    let mut env = environment();
    engine(|| env.add_template_owned(TEMPLATE_NAME, source.to_owned()))?;
    let compiled = Arc::new(env);
    let mut cache = cache();
    if cache.templates.len() >= CACHE_MAX {
        cache.templates.clear();
    }
    cache
        .templates
        .insert(Arc::from(source), Arc::clone(&compiled));
    Ok(compiled)
}

/// The template of a [`CompiledTemplate`] (present: it was added when compiled).
fn template_of(env: &CompiledTemplate) -> Result<minijinja::Template<'_, '_>, TemplateError> {
    env.get_template(TEMPLATE_NAME)
        .map_err(TemplateError::from_minijinja)
}

/// An error compiling or evaluating a template or expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateError {
    /// What went wrong, in words.
    pub message: String,
    /// Byte offset of the problem inside the template text, when the engine knows it.
    pub offset: Option<usize>,
}

impl TemplateError {
    fn from_minijinja(err: minijinja::Error) -> Self {
        let what = match err.kind() {
            ErrorKind::SyntaxError => "syntax error",
            ErrorKind::UndefinedError => "undefined value",
            ErrorKind::UnknownFilter => "unknown filter",
            ErrorKind::UnknownFunction => "unknown function",
            ErrorKind::UnknownTest => "unknown test",
            ErrorKind::UnknownMethod => "unknown method",
            ErrorKind::InvalidOperation => "invalid operation",
            ErrorKind::OutOfFuel => "evaluation too long (out of fuel)",
            ErrorKind::TooManyArguments => "too many arguments",
            ErrorKind::MissingArgument => "missing argument",
            _ => "template error",
        };
        let message = match err.detail() {
            Some(detail) => format!("{what}: {detail}"),
            None => what.to_owned(),
        };
        TemplateError {
            message,
            offset: err.range().map(|range| range.start),
        }
    }

    fn new(message: impl Into<String>) -> Self {
        TemplateError {
            message: message.into(),
            offset: None,
        }
    }
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TemplateError {}

/// The values a template sees: `input`, `state`, and `for_each` bindings.
#[derive(Clone, Debug)]
pub struct Scope {
    root: Value,
}

impl Scope {
    /// Builds a scope from the job's input, its state and the bindings of enclosing
    /// `for_each` nodes (innermost last; an inner binding shadows an outer one).
    pub fn new(
        input: &serde_json::Value,
        state: &serde_json::Value,
        bindings: &[(Arc<str>, serde_json::Value)],
    ) -> Scope {
        let mut entries: Vec<(String, Value)> = Vec::with_capacity(2 + bindings.len());
        entries.push(("input".to_owned(), Value::from_serialize(input)));
        entries.push(("state".to_owned(), Value::from_serialize(state)));
        for (name, value) in bindings {
            entries.retain(|(existing, _)| existing.as_str() != &**name);
            entries.push((name.to_string(), Value::from_serialize(value)));
        }
        Scope {
            root: Value::from_iter(entries),
        }
    }
}

/// A string that may contain `{{ }}` placeholders.
#[derive(Clone)]
pub struct Template {
    source: Arc<str>,
    kind: TemplateKind,
}

#[derive(Clone)]
enum TemplateKind {
    /// No placeholders: the text is the value.
    Literal,
    /// The whole text is one `{{ expression }}`: evaluates to a native value.
    Native(CompiledExpression),
    /// Text with placeholders: renders to a string.
    Text(CompiledTemplate),
}

impl fmt::Debug for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Template({:?})", self.source)
    }
}

impl PartialEq for Template {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

fn has_markup(text: &str) -> bool {
    text.contains("{{") || text.contains("{%") || text.contains("{#")
}

/// If `text` is exactly `{{ expr }}` (surrounding whitespace allowed), returns `expr`.
fn single_expression(text: &str) -> Option<&str> {
    let inner = text.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    let inner = inner.strip_prefix('-').unwrap_or(inner);
    let inner = inner.strip_suffix('-').unwrap_or(inner);
    if has_markup(inner) || inner.contains("}}") || inner.trim().is_empty() {
        return None;
    }
    Some(inner.trim())
}

impl Template {
    /// Compiles a template. Syntax errors are reported with their offset in `source`.
    pub fn compile(source: &str) -> Result<Template, TemplateError> {
        let kind = if !has_markup(source) {
            TemplateKind::Literal
        } else if let Some(expr) = single_expression(source) {
            TemplateKind::Native(compile_expression(expr).map_err(|mut err| {
                // Point into the original text, not into the extracted expression.
                let shift = source.find(expr).unwrap_or(0);
                err.offset = err.offset.map(|o| o + shift);
                err
            })?)
        } else {
            TemplateKind::Text(compile_template(source)?)
        };
        Ok(Template {
            source: Arc::from(source),
            kind,
        })
    }

    /// The text as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// True when the text has no placeholders.
    pub fn is_literal(&self) -> bool {
        matches!(self.kind, TemplateKind::Literal)
    }

    /// Top-level names the template reads (`input`, `state`, `item`, ...).
    pub fn names(&self) -> BTreeSet<String> {
        let names = match &self.kind {
            TemplateKind::Literal => Default::default(),
            TemplateKind::Native(expr) => expr.undeclared_variables(false),
            TemplateKind::Text(env) => template_of(env)
                .map(|tmpl| tmpl.undeclared_variables(false))
                .unwrap_or_default(),
        };
        names
            .into_iter()
            .filter(|name| !GLOBAL_FUNCTIONS.contains(&name.as_str()))
            .collect()
    }

    /// Renders to a string (a native value is converted to its text form).
    pub fn render_string(&self, scope: &Scope) -> Result<String, TemplateError> {
        match &self.kind {
            TemplateKind::Literal => Ok(self.source.to_string()),
            TemplateKind::Native(expr) => {
                let value = engine(|| expr.eval(&scope.root))?;
                value_to_text(&value)
            }
            TemplateKind::Text(env) => {
                let template = template_of(env)?;
                engine(|| template.render(&scope.root))
            }
        }
    }

    /// Renders to a JSON value: native for a single `{{ expression }}`, a string otherwise.
    pub fn render_value(&self, scope: &Scope) -> Result<serde_json::Value, TemplateError> {
        match &self.kind {
            TemplateKind::Literal => Ok(serde_json::Value::String(self.source.to_string())),
            TemplateKind::Native(expr) => {
                let value = engine(|| expr.eval(&scope.root))?;
                value_to_json(&value)
            }
            TemplateKind::Text(_) => self.render_string(scope).map(serde_json::Value::String),
        }
    }
}

fn value_to_text(value: &Value) -> Result<String, TemplateError> {
    if value.is_undefined() {
        return Err(TemplateError::new("undefined value"));
    }
    match value.as_str() {
        Some(text) => Ok(text.to_owned()),
        None => Ok(json_text(value).unwrap_or_else(|| value.to_string())),
    }
}

fn value_to_json(value: &Value) -> Result<serde_json::Value, TemplateError> {
    if value.is_undefined() {
        return Err(TemplateError::new("undefined value"));
    }
    serde_json::to_value(value)
        .map_err(|err| TemplateError::new(format!("value is not representable as JSON: {err}")))
}

/// An expression over `input`, `state` and `for_each` bindings (`check:`, `for_each.items:`).
#[derive(Clone)]
pub struct Expr {
    source: Arc<str>,
    compiled: CompiledExpression,
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expr({:?})", self.source)
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Expr {
    /// Compiles an expression. Writing it inside `{{ }}` is accepted too.
    pub fn compile(source: &str) -> Result<Expr, TemplateError> {
        let text = single_expression(source).unwrap_or(source);
        if text.trim().is_empty() {
            return Err(TemplateError::new("empty expression"));
        }
        let shift = source.find(text).unwrap_or(0);
        let compiled = compile_expression(text).map_err(|mut err| {
            err.offset = err.offset.map(|o| o + shift);
            err
        })?;
        Ok(Expr {
            source: Arc::from(source),
            compiled,
        })
    }

    /// The text as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Top-level names the expression reads.
    pub fn names(&self) -> BTreeSet<String> {
        self.compiled
            .undeclared_variables(false)
            .into_iter()
            .filter(|name| !GLOBAL_FUNCTIONS.contains(&name.as_str()))
            .collect()
    }

    /// Evaluates to a truth value (an undefined name tests false).
    pub fn eval_bool(&self, scope: &Scope) -> Result<bool, TemplateError> {
        let value = engine(|| self.compiled.eval(&scope.root))?;
        Ok(value.is_true())
    }

    /// Evaluates to a JSON value.
    pub fn eval_json(&self, scope: &Scope) -> Result<serde_json::Value, TemplateError> {
        let value = engine(|| self.compiled.eval(&scope.root))?;
        value_to_json(&value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scope() -> Scope {
        Scope::new(
            &json!({"who": "world", "items": [1, 2, 3]}),
            &json!({"n": 1, "echoed": {"exit_code": 0}}),
            &[(Arc::from("item"), json!(7))],
        )
    }

    #[test]
    fn an_engine_panic_is_an_error_not_a_crash() {
        // minijinja 2.24 panics ("empty lexer stack") on this expression: found by the
        // flow_parse fuzz target in a `check:`.
        let err = Expr::compile("statg}}.echoed.exit_code == 0").expect_err("refused");
        assert!(err.message.contains("engine failed"), "{err:?}");
        // Whatever the engine makes of it as a template, no panic escapes.
        let _ = Template::compile("{{ statg}}.echoed }}");
    }

    #[test]
    fn literal_text_renders_as_is() {
        let t = Template::compile("plain text").unwrap();
        assert!(t.is_literal());
        assert_eq!(t.render_string(&scope()).unwrap(), "plain text");
    }

    #[test]
    fn mixed_template_renders_a_string() {
        let t = Template::compile("hello {{ input.who }} #{{ item }}").unwrap();
        assert_eq!(t.render_string(&scope()).unwrap(), "hello world #7");
        assert_eq!(t.render_value(&scope()).unwrap(), json!("hello world #7"));
    }

    #[test]
    fn maps_and_lists_print_as_json() {
        let mixed = Template::compile("data={{ state.echoed }} items={{ input.items }}").unwrap();
        assert_eq!(
            mixed.render_string(&scope()).unwrap(),
            r#"data={"exit_code":0} items=[1,2,3]"#
        );
        let alone = Template::compile("{{ state.echoed }}").unwrap();
        assert_eq!(alone.render_string(&scope()).unwrap(), r#"{"exit_code":0}"#);
    }

    #[test]
    fn single_expression_keeps_its_type() {
        let t = Template::compile("{{ state.n + 1 }}").unwrap();
        assert_eq!(t.render_value(&scope()).unwrap(), json!(2));
        assert_eq!(t.render_string(&scope()).unwrap(), "2");
        let list = Template::compile("{{ input.items }}").unwrap();
        assert_eq!(list.render_value(&scope()).unwrap(), json!([1, 2, 3]));
    }

    #[test]
    fn expressions_evaluate() {
        let e = Expr::compile("state.echoed.exit_code == 0").unwrap();
        assert!(e.eval_bool(&scope()).unwrap());
        let e = Expr::compile("state.missing").unwrap();
        assert!(!e.eval_bool(&scope()).unwrap(), "undefined tests false");
        let e = Expr::compile("input.items").unwrap();
        assert_eq!(e.eval_json(&scope()).unwrap(), json!([1, 2, 3]));
    }

    #[test]
    fn printing_an_undefined_value_is_an_error() {
        let t = Template::compile("echo {{ state.nope }}").unwrap();
        let err = t.render_string(&scope()).unwrap_err();
        assert!(err.message.contains("undefined"), "{err}");
        let t = Template::compile("{{ state.nope.deeper }}").unwrap();
        assert!(t.render_value(&scope()).is_err());
    }

    #[test]
    fn syntax_errors_are_reported() {
        let err = Template::compile("echo {{ input.who ").unwrap_err();
        assert!(err.message.starts_with("syntax error"), "{err}");
        let err = Expr::compile("state.x ==").unwrap_err();
        assert!(err.message.starts_with("syntax error"), "{err}");
        assert!(Expr::compile("  ").is_err());
    }

    #[test]
    fn names_lists_top_level_variables() {
        let t = Template::compile(
            "{{ input.a }} {{ stat.b }} {% for x in range(3) %}{{ x }}{% endfor %}",
        )
        .unwrap();
        let names: Vec<_> = t.names().into_iter().collect();
        assert_eq!(names, vec!["input", "stat"]);
        let e = Expr::compile("item > 2 and state.ok").unwrap();
        let names: Vec<_> = e.names().into_iter().collect();
        assert_eq!(names, vec!["item", "state"]);
    }

    #[test]
    fn runaway_templates_run_out_of_fuel() {
        let t = Template::compile(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        )
        .unwrap();
        assert!(t.render_string(&scope()).is_err());
    }

    #[test]
    fn the_cache_stays_bounded_and_evicted_forms_keep_working() {
        let first = Template::compile("hello {{ input.who }} #first").expect("compiles");
        let first_expr = Expr::compile("state.n + 1000000").expect("compiles");
        for n in 0..(CACHE_MAX + 10) {
            Template::compile(&format!("t{n} {{{{ input.who }}}}")).expect("compiles");
            Expr::compile(&format!("state.n + {n}")).expect("compiles");
        }
        {
            let cache = cache();
            assert!(cache.templates.len() <= CACHE_MAX);
            assert!(cache.expressions.len() <= CACHE_MAX);
        }
        assert_eq!(
            first.render_string(&scope()).expect("renders"),
            "hello world #first"
        );
        assert_eq!(
            first_expr.eval_json(&scope()).expect("evaluates"),
            json!(1000001)
        );
    }
}
