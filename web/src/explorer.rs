//! The Explorer: server-rendered pages (minijinja templates, auto-escaped) over the same
//! control requests as `/v1`, enhanced with htmx (vendored, no build step) and its SSE
//! extension. Every page works without JavaScript; htmx answers in place and keeps a
//! running job's status live.
//!
//! - `/inbox` — every waiting job, each wait answered in place through a form built from
//!   its JSON Schema (a lone boolean or enum, or the wait's choices, become buttons);
//! - `/jobs` — filters (status, flow, age, waiting-on key, excluded statuses) kept in the
//!   URL, "in flight", paste an id to jump, child jobs folded under their parent;
//! - `/jobs/{id}` — actions the job's state allows (cancel with a confirmation, answer a
//!   wait), the behavior tree coloured and labelled by status, the blackboard, effects
//!   with attempts and next retry, the journal in compact, timeline and full views with a
//!   failed-only toggle and a JSON download, live over SSE while it runs;
//! - `/start?from=ID` — "start like this": a form prefilled from a run (its flow, its
//!   pinned revision, its input); `/compare?a=ID&b=ID` — two runs side by side, the fields
//!   and journal steps that differ marked;
//! - `/places`, `/tree` — the place book with health and what no seat can take; the
//!   node tree with link states.

use crate::Backend;
use crate::problem::Problem;
use crate::rest::{JobsQuery, ask, inbox, list_jobs};
use axum::Router;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use minijinja::{Environment, context};
use palm_api::protocol::Request;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::sync::{Arc, OnceLock};

/// Waiting jobs one page of the inbox shows.
pub const INBOX_PAGE: usize = 50;
/// Jobs the list shows at most.
pub const LIST_MAX: usize = 1_000;
/// Journal events a job page shows at most (the newest).
pub const EVENTS_MAX: usize = 2_000;
/// How long one live-update poll waits for the job to move (ms).
const LIVE_POLL_MS: u64 = 15_000;

type Shared = State<Arc<dyn Backend>>;

const HTMX: &str = include_str!("../assets/htmx-2.0.11.min.js");
const SSE: &str = include_str!("../assets/htmx-ext-sse-2.2.4.js");

/// The templates, parsed once.
fn templates() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        for (name, text) in [
            ("layout.html", include_str!("../templates/layout.html")),
            ("macros.html", include_str!("../templates/macros.html")),
            ("inbox.html", include_str!("../templates/inbox.html")),
            ("answered.html", include_str!("../templates/answered.html")),
            ("jobs.html", include_str!("../templates/jobs.html")),
            ("job.html", include_str!("../templates/job.html")),
            ("confirm.html", include_str!("../templates/confirm.html")),
            ("places.html", include_str!("../templates/places.html")),
            ("tree.html", include_str!("../templates/tree.html")),
            ("card.html", include_str!("../templates/card.html")),
            ("start.html", include_str!("../templates/start.html")),
            ("compare.html", include_str!("../templates/compare.html")),
            ("flows.html", include_str!("../templates/flows.html")),
            ("flow.html", include_str!("../templates/flow.html")),
            ("wizard.html", include_str!("../templates/wizard.html")),
        ] {
            // The templates are part of the binary; one that does not parse is a
            // build-time mistake the page tests catch.
            if let Err(e) = env.add_template(name, text) {
                eprintln!("palm-web: template {name}: {e}");
            }
        }
        env
    })
}

pub(crate) fn render(name: &str, ctx: minijinja::Value) -> Response {
    match templates().get_template(name).and_then(|t| t.render(ctx)) {
        Ok(html) => Html(html).into_response(),
        Err(e) => Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "template",
            format!("the page {name} failed to render: {e}"),
        )
        .into_response(),
    }
}

pub(crate) fn page_error(problem: Problem) -> Response {
    let status = problem.status;
    let text = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Palm: {}</title></head><body><main><h1>{}</h1><p role=\"alert\">{}</p>{}<p><a href=\"/inbox\">Inbox</a> · <a href=\"/jobs\">Jobs</a></p></main></body></html>",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        escape(&problem.body.message),
        problem
            .body
            .hint
            .as_deref()
            .map(|h| format!("<p>{}</p>", escape(h)))
            .unwrap_or_default()
    );
    (status, Html(text)).into_response()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The Explorer's routes.
pub fn routes() -> Router<Arc<dyn Backend>> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/inbox") }))
        .route("/assets/htmx.min.js", get(|| async { script(HTMX) }))
        .route("/assets/sse.js", get(|| async { script(SSE) }))
        .route("/inbox", get(inbox_page))
        .route("/jobs", get(jobs_page))
        .route("/jobs/{id}", get(job_page))
        .route("/jobs/{id}/answer", axum::routing::post(answer))
        .route("/jobs/{id}/cancel", get(cancel_confirm).post(cancel))
        .route("/jobs/{id}/retry", axum::routing::post(retry))
        .route("/jobs/{id}/live", get(live))
        .route(
            "/jobs/{id}/wizard",
            get(crate::wizard::page).post(crate::wizard::step),
        )
        .route("/start", get(start_form).post(start))
        .route("/compare", get(compare))
        .route("/flows", get(flows_page))
        .route("/flows/{name}", get(flow_page))
        .route("/places", get(places_page))
        .route("/tree", get(tree_page))
}

fn script(text: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        text,
    )
        .into_response()
}

/// The node's name and how many jobs wait (for the header).
pub(crate) async fn node_name(backend: &Arc<dyn Backend>) -> (String, usize) {
    let name = ask(backend, Request::Tree)
        .await
        .ok()
        .and_then(|t| t["node"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "palm".into());
    let waiting = ask(
        backend,
        Request::Waits {
            limit: Some(0),
            offset: None,
        },
    )
    .await
    .ok()
    .and_then(|v| v["total"].as_u64())
    .unwrap_or(0) as usize;
    (name, waiting)
}

/// A form field built from a property of a wait's schema.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Field {
    /// The property.
    pub name: String,
    /// Its label (title, else name).
    pub label: String,
    /// boolean, enum, integer, number, string or json.
    pub kind: &'static str,
    /// Its enum values.
    pub options: Vec<String>,
    /// Listed in `required`.
    pub required: bool,
    /// Its description.
    pub description: Option<String>,
    /// Its default, as JSON.
    pub default: Value,
    /// Its default, as the form shows it.
    pub default_text: String,
}

/// A button that answers a wait in one click.
#[derive(Clone, Debug, Serialize)]
pub struct Button {
    /// The form field it sets.
    pub name: String,
    /// The value.
    pub value: String,
    /// What it says.
    pub label: String,
}

/// A wait, as a form.
#[derive(Clone, Debug, Serialize)]
pub struct WaitForm {
    /// The wait key.
    pub key: String,
    /// Its prompt.
    pub prompt: Option<String>,
    /// The fields (when not answered by buttons).
    pub fields: Vec<Field>,
    /// One-click answers, when the answer is a choice.
    pub buttons: Vec<Button>,
    /// What the buttons choose.
    pub buttons_label: String,
    /// A wizard's step (`x-palm-wizard`): answered on the wizard's own page.
    pub wizard: Option<Value>,
}

fn text_of(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The form of a wait (`waiting_on` item of a status document).
pub fn wait_form(wait: &Value) -> WaitForm {
    let key = wait["key"].as_str().unwrap_or_default().to_owned();
    let prompt = wait["prompt"].as_str().map(str::to_owned);
    let schema = &wait["schema"];
    let choices: Vec<String> = wait["choices"]
        .as_array()
        .map(|c| c.iter().map(text_of).collect())
        .unwrap_or_default();
    let mut form = WaitForm {
        key,
        prompt,
        fields: Vec::new(),
        buttons: Vec::new(),
        buttons_label: String::new(),
        wizard: schema
            .get("x-palm-wizard")
            .filter(|w| w.is_object())
            .cloned(),
    };
    if form.wizard.is_some() {
        return form;
    }
    // The wait's own choices: the answer is the chosen value itself.
    if !choices.is_empty() {
        form.buttons_label = "Choose".into();
        form.buttons = choices
            .into_iter()
            .map(|c| Button {
                name: "_choice".into(),
                label: c.clone(),
                value: c,
            })
            .collect();
        return form;
    }
    let properties = schema["properties"].as_object();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) =
        properties.filter(|_| schema["type"] == "object" || schema["type"].is_null())
    else {
        // No object schema: one JSON answer.
        form.fields.push(Field {
            name: "_json".into(),
            label: "Answer".into(),
            kind: "json",
            required: true,
            ..Field::default()
        });
        return form;
    };
    for (name, property) in properties {
        let kind = match (property["type"].as_str(), property["enum"].as_array()) {
            (_, Some(_)) => "enum",
            (Some("boolean"), _) => "boolean",
            (Some("integer"), _) => "integer",
            (Some("number"), _) => "number",
            (Some("string"), _) => "string",
            _ => "json",
        };
        let default = property["default"].clone();
        form.fields.push(Field {
            name: name.clone(),
            label: property["title"].as_str().unwrap_or(name).to_owned(),
            kind,
            options: property["enum"]
                .as_array()
                .map(|o| o.iter().map(text_of).collect())
                .unwrap_or_default(),
            required: required.contains(&name.as_str()),
            description: property["description"].as_str().map(str::to_owned),
            default_text: text_of(&default),
            default,
        });
    }
    // One choice to make (a lone boolean or enum): buttons.
    if form.fields.len() == 1 && matches!(form.fields[0].kind, "boolean" | "enum") {
        let field = form.fields.remove(0);
        form.buttons_label = field.label.clone();
        form.buttons = if field.kind == "boolean" {
            vec![
                Button {
                    name: field.name.clone(),
                    value: "true".into(),
                    label: "Yes".into(),
                },
                Button {
                    name: field.name.clone(),
                    value: "false".into(),
                    label: "No".into(),
                },
            ]
        } else {
            field
                .options
                .iter()
                .map(|o| Button {
                    name: field.name.clone(),
                    value: o.clone(),
                    label: o.clone(),
                })
                .collect()
        };
    }
    form
}

/// The JSON answer a submitted form means, typed by the wait's schema.
pub fn form_answer(wait: &Value, pairs: &[(String, String)]) -> Result<Value, String> {
    let get = |name: &str| -> Option<&str> {
        // A checkbox sends its hidden "false" first, then "true" when ticked: the last wins.
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if let Some(choice) = get("_choice") {
        // The wait's choices are values; give back the one whose text was chosen.
        let chosen = wait["choices"]
            .as_array()
            .and_then(|c| c.iter().find(|v| text_of(v) == choice).cloned())
            .unwrap_or_else(|| Value::String(choice.to_owned()));
        return Ok(chosen);
    }
    if let Some(text) = get("_json") {
        return serde_json::from_str(text).map_err(|e| format!("the answer is not JSON: {e}"));
    }
    let schema = &wait["schema"];
    let mut out = Map::new();
    for (name, property) in schema["properties"].as_object().into_iter().flatten() {
        let Some(raw) = get(name) else { continue };
        if raw.is_empty() && property["type"] != "string" {
            continue;
        }
        let value = match property["type"].as_str() {
            Some("boolean") => Value::Bool(raw == "true" || raw == "on"),
            Some("integer") => raw
                .trim()
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("{name}: `{raw}` is not a whole number"))?,
            Some("number") => raw
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| format!("{name}: `{raw}` is not a number"))?,
            Some("string") => Value::String(raw.to_owned()),
            _ if property["enum"].is_array() => property["enum"]
                .as_array()
                .and_then(|o| o.iter().find(|v| text_of(v) == raw).cloned())
                .unwrap_or_else(|| Value::String(raw.to_owned())),
            _ => serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned())),
        };
        out.insert(name.clone(), value);
    }
    Ok(Value::Object(out))
}

fn ago(now_ms: u64, then: &Value) -> String {
    let Some(then) = then.as_u64() else {
        return String::new();
    };
    let s = now_ms.saturating_sub(then) / 1000;
    match s {
        s if s < 60 => format!("{s} s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} days ago", s / 86_400),
    }
}

/// A moment (ms since the epoch) as UTC wall-clock time, `2026-12-05 14:22:32.903Z`
/// (civil date from days: Howard Hinnant's algorithm).
fn utc_time(ms: u64) -> String {
    let days = (ms / 86_400_000) as i64;
    let in_day = ms % 86_400_000;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// When a moment still to come is, from now (`in 12 s`; `due now` once past).
fn until(now_ms: u64, due: u64) -> String {
    if due <= now_ms {
        return "due now".to_owned();
    }
    let s = (due - now_ms).div_ceil(1000);
    match s {
        s if s < 60 => format!("in {s} s"),
        s if s < 3600 => format!("in {} min", s.div_ceil(60)),
        s if s < 86_400 => format!("in {} h", s / 3600),
        s => format!("in {} days", s / 86_400),
    }
}

/// One line per `retry` node waiting out its backoff: how many attempts failed and when
/// the next one starts (its backoff timer is `job/PATH/N`, N = the failures so far).
fn retrying_lines(tree: &Value, effects: &Value, now: u64) -> Vec<String> {
    fn retry_nodes<'a>(node: &'a Value, out: &mut Vec<&'a Value>) {
        if node["type"] == "retry" {
            out.push(node);
        }
        for child in node["children"].as_array().into_iter().flatten() {
            retry_nodes(child, out);
        }
    }
    let mut nodes = Vec::new();
    retry_nodes(tree, &mut nodes);
    let mut lines = Vec::new();
    for node in nodes {
        let path = node["path"].as_str().unwrap_or_default();
        for effect in effects.as_array().into_iter().flatten() {
            let (Some("timer"), Some("requested"), Some(key), Some(due)) = (
                effect["kind"].as_str(),
                effect["state"].as_str(),
                effect["key"].as_str(),
                effect["due_at"].as_u64(),
            ) else {
                continue;
            };
            let Some((rest, failures)) = key.rsplit_once('/') else {
                continue;
            };
            if !rest.ends_with(&format!("/{path}")) {
                continue;
            }
            let failures: u64 = failures.parse().unwrap_or(0);
            lines.push(format!(
                "Retry node {path}: {failures} attempt{} failed; attempt {} starts {}",
                if failures == 1 { "" } else { "s" },
                failures + 1,
                until(now, due)
            ));
        }
    }
    lines
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn inbox_card(view: &Value, error: Option<(&str, String)>) -> minijinja::Value {
    let waits: Vec<WaitForm> = view["waiting_on"]
        .as_array()
        .map(|w| w.iter().map(wait_form).collect())
        .unwrap_or_default();
    let since = view["waiting_on"][0]["since"].clone();
    context! {
        job => view["job"].as_str().unwrap_or_default(),
        flow => view["flow"].as_str().unwrap_or_default(),
        since => ago(now_ms(), &since),
        waits => waits,
        error_key => error.as_ref().map(|e| e.0.to_owned()),
        error => error.map(|e| e.1),
    }
}

#[derive(Debug, Default, serde::Deserialize)]
struct PageQuery {
    page: Option<usize>,
}

async fn inbox_page(State(backend): Shared, Query(q): Query<PageQuery>) -> Response {
    let page = q.page.unwrap_or(1).max(1);
    let (jobs, total) = match inbox(&backend, INBOX_PAGE, (page - 1) * INBOX_PAGE).await {
        Ok(found) => found,
        Err(problem) => return page_error(problem),
    };
    let node = ask(&backend, Request::Tree)
        .await
        .ok()
        .and_then(|t| t["node"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "palm".into());
    let cards: Vec<minijinja::Value> = jobs.iter().map(|v| inbox_card(v, None)).collect();
    let pages = total.div_ceil(INBOX_PAGE).max(1);
    render(
        "inbox.html",
        context! { node => node, page => "inbox", waiting => total, jobs => cards, total => total,
        number => page, pages => pages, first => (page - 1) * INBOX_PAGE + 1 },
    )
}

fn is_htmx(headers: &HeaderMap) -> bool {
    headers.contains_key("hx-request")
}

async fn answer(
    State(backend): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let pairs: Vec<(String, String)> = form_urlencoded(&body);
    let Some(key) = pairs
        .iter()
        .find(|(k, _)| k == "_key")
        .map(|(_, v)| v.clone())
    else {
        return page_error(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "the form names no wait (_key)",
        ));
    };
    let view = match ask(&backend, Request::Status { job: id.clone() }).await {
        Ok(view) => view,
        Err(problem) => return page_error(problem),
    };
    let Some(wait) = view["waiting_on"]
        .as_array()
        .and_then(|w| w.iter().find(|w| w["key"] == key.as_str()))
        .cloned()
    else {
        return page_error(
            Problem::new(
                StatusCode::CONFLICT,
                "not_waiting",
                format!("job {id} no longer waits on `{key}`"),
            )
            .hint("someone may have answered it already"),
        );
    };
    let refused = |message: String| {
        if is_htmx(&headers) {
            // In place: the form again, with the error beside it.
            let form = wait_form(&wait);
            let page = render(
                "card.html",
                context! { job => id.clone(), wait => form, error => message },
            );
            return (StatusCode::BAD_REQUEST, page).into_response();
        }
        let card = inbox_card(&view, Some((&key, message)));
        let node = view["home"].as_str().unwrap_or("palm").to_owned();
        let page = render(
            "inbox.html",
            context! { node => node, page => "inbox", waiting => 1, jobs => vec![card], total => 1, number => 1, pages => 1, first => 1 },
        );
        (StatusCode::BAD_REQUEST, page).into_response()
    };
    let input = match form_answer(&wait, &pairs) {
        Ok(input) => input,
        Err(message) => return refused(message),
    };
    match ask(
        &backend,
        Request::Continue {
            job: id.clone(),
            key: key.clone(),
            input,
        },
    )
    .await
    {
        Ok(_) => {}
        Err(problem) if problem.status == StatusCode::BAD_REQUEST => {
            return refused(problem.body.message);
        }
        Err(problem) => return page_error(problem),
    }
    if is_htmx(&headers) {
        let status = ask(&backend, Request::Status { job: id.clone() })
            .await
            .map(|v| v["status"].as_str().unwrap_or("unknown").to_owned())
            .unwrap_or_else(|_| "unknown".into());
        return render(
            "answered.html",
            context! { job => id, key => key, status => status },
        );
    }
    Redirect::to(&format!("/jobs/{id}")).into_response()
}

/// The first value of form field `name`.
pub(crate) fn form_field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// `application/x-www-form-urlencoded` pairs, in order.
pub(crate) fn form_urlencoded(body: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The list filters, as the URL carries them (`not_status` may repeat).
#[derive(Clone, Debug, Default, Serialize)]
struct Filters {
    status: Option<String>,
    flow: Option<String>,
    age: Option<String>,
    waiting_on: Option<String>,
    not_status: Vec<String>,
    active: bool,
}

fn filters_of(query: Option<&str>) -> (Filters, Option<String>) {
    let pairs = form_urlencoded(query.unwrap_or_default().as_bytes());
    let mut f = Filters::default();
    let mut jump = None;
    for (k, v) in pairs {
        if v.is_empty() {
            continue;
        }
        match k.as_str() {
            "status" => f.status = Some(v),
            "flow" => f.flow = Some(v),
            "age" => f.age = Some(v),
            "waiting_on" => f.waiting_on = Some(v),
            "not_status" => f.not_status.extend(v.split(',').map(str::to_owned)),
            "id" => jump = Some(v.trim().to_owned()),
            _ => {}
        }
    }
    f.active = f.status.is_some()
        || f.flow.is_some()
        || f.age.is_some()
        || f.waiting_on.is_some()
        || !f.not_status.is_empty();
    (f, jump)
}

const STATUSES: [&str; 6] = [
    "pending",
    "running",
    "waiting",
    "succeeded",
    "failed",
    "cancelled",
];
const AGES: [(&str, &str); 5] = [
    ("", "any time"),
    ("1h", "the last hour"),
    ("24h", "the last day"),
    ("7d", "the last week"),
    ("30d", "the last 30 days"),
];

fn age_ms(age: &str) -> Option<u64> {
    let (n, unit) = age.split_at(age.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = n.parse().ok()?;
    Some(
        n * match unit {
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        },
    )
}

#[derive(Debug, Serialize)]
struct Row {
    job: String,
    flow: String,
    status: String,
    waiting_on: String,
    updated: String,
    depth: usize,
    children: usize,
}

async fn jobs_page(State(backend): Shared, RawQuery(query): RawQuery) -> Response {
    let (filters, jump) = filters_of(query.as_deref());
    if let Some(id) = jump {
        return Redirect::to(&format!("/jobs/{}", id.replace(['/', '?', '#'], ""))).into_response();
    }
    let listed = list_jobs(
        &backend,
        &JobsQuery {
            status: filters.status.clone(),
            not_status: (!filters.not_status.is_empty()).then(|| filters.not_status.join(",")),
            flow: filters.flow.clone(),
            limit: Some(LIST_MAX),
        },
    )
    .await;
    let listed = match listed {
        Ok(v) => v,
        Err(problem) => return page_error(problem),
    };
    let now = now_ms();
    let min_created = filters
        .age
        .as_deref()
        .and_then(age_ms)
        .map(|ms| now.saturating_sub(ms));
    let jobs: Vec<&Value> = listed["jobs"]
        .as_array()
        .map(|j| j.iter().collect())
        .unwrap_or_default();
    let jobs: Vec<&Value> = jobs
        .into_iter()
        .filter(|j| min_created.is_none_or(|min| j["created_at"].as_u64().unwrap_or(0) >= min))
        .filter(|j| {
            filters.waiting_on.as_deref().is_none_or(|key| {
                j["waiting"]
                    .as_array()
                    .is_some_and(|w| w.iter().any(|w| w == key))
            })
        })
        .collect();
    // Children under their parent (when the parent is listed too), in list order.
    let listed_ids: std::collections::HashSet<&str> =
        jobs.iter().filter_map(|j| j["job"].as_str()).collect();
    let mut rows = Vec::new();
    fn push<'a>(rows: &mut Vec<Row>, all: &[&'a Value], job: &'a Value, depth: usize, now: u64) {
        let id = job["job"].as_str().unwrap_or_default();
        let kids: Vec<&Value> = all.iter().copied().filter(|j| j["parent"] == id).collect();
        rows.push(Row {
            job: id.to_owned(),
            flow: job["flow"].as_str().unwrap_or_default().to_owned(),
            status: job["status"].as_str().unwrap_or_default().to_owned(),
            waiting_on: job["waiting"]
                .as_array()
                .map(|w| {
                    w.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default(),
            updated: ago(now, &job["updated_at"]),
            depth,
            children: kids.len(),
        });
        if depth < 8 {
            for kid in kids {
                push(rows, all, kid, depth + 1, now);
            }
        }
    }
    for job in &jobs {
        let parent_listed = job["parent"]
            .as_str()
            .is_some_and(|p| listed_ids.contains(p));
        if !parent_listed {
            push(&mut rows, &jobs, job, 0, now);
        }
    }
    let (node, waiting) = node_name(&backend).await;
    render(
        "jobs.html",
        context! { node => node, page => "jobs", waiting => waiting, rows => rows,
        filters => filters, statuses => STATUSES, ages => AGES },
    )
}

#[derive(Debug, Default, serde::Deserialize)]
struct JobView {
    view: Option<String>,
    failed: Option<String>,
}

fn tree_view(node: &Value) -> Value {
    json!({
        "name": node["name"], "status": node["status"], "detail": node["detail"], "path": node["path"],
        "children": node["children"].as_array().map(|c| c.iter().map(tree_view).collect::<Vec<_>>()).unwrap_or_default(),
    })
}

fn event_row(event: &Value, first_at: u64) -> Value {
    let kind = event["kind"].as_str().unwrap_or_default();
    let what = match kind {
        "effect_requested" => event["request"]
            .as_object()
            .and_then(|r| r.iter().next())
            .map(|(k, v)| {
                format!(
                    "{k} {}",
                    v.get("cmd")
                        .or(v.get("provider"))
                        .map(text_of)
                        .unwrap_or_default()
                )
            })
            .unwrap_or_default(),
        "effect_completed" | "effect_failed" => {
            let outcome = &event["outcome"];
            let error = outcome
                .as_object()
                .and_then(|o| o.values().next())
                .and_then(|v| v["error"].as_str());
            match error {
                Some(e) => format!("error: {e}"),
                None => event["node"]
                    .as_str()
                    .map(|n| format!("on {n}"))
                    .unwrap_or_default(),
            }
        }
        "parked" => format!("waits on {}", event["key"].as_str().unwrap_or_default()),
        "continued" => format!("{} answered", event["key"].as_str().unwrap_or_default()),
        _ => event["error"]
            .as_str()
            .or(event["reason"].as_str())
            .unwrap_or_default()
            .to_owned(),
    };
    let at = event["at"].as_u64().unwrap_or(0);
    json!({
        "seq": event["seq"], "kind": kind, "path": event["path"].as_str().unwrap_or_default(),
        "what": what, "at": utc_time(at), "offset": format!("+{}", at.saturating_sub(first_at)),
        "json": serde_json::to_string_pretty(event).unwrap_or_default(),
    })
}

fn failed_event(event: &Value) -> bool {
    let kind = event["kind"].as_str().unwrap_or_default();
    kind.contains("fail")
        || kind.contains("cancel")
        || event["error"].is_string()
        || event["outcome"]
            .as_object()
            .and_then(|o| o.values().next())
            .is_some_and(|v| {
                v["error"].is_string() || v["exit_code"].as_i64().is_some_and(|c| c != 0)
            })
}

fn blocked_lines(view: &Value) -> Vec<String> {
    view["blocked_on"]
        .as_array()
        .map(|b| {
            b.iter()
                .map(|b| {
                    format!(
                        "No seat can take this work: it needs `{}` — {}",
                        b["place"].as_str().unwrap_or("?"),
                        b["reason"].as_str().unwrap_or("not ready")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn job_page(
    State(backend): Shared,
    Path(id): Path<String>,
    Query(q): Query<JobView>,
) -> Response {
    let view = match ask(&backend, Request::Status { job: id.clone() }).await {
        Ok(v) => v,
        Err(problem) => return page_error(problem),
    };
    let inspected = match ask(&backend, Request::Inspect { job: id.clone() }).await {
        Ok(v) => v,
        Err(problem) => return page_error(problem),
    };
    let status = view["status"].as_str().unwrap_or_default();
    let live = matches!(status, "pending" | "running");
    let failed = q.failed.as_deref().is_some_and(|f| f == "1" || f == "true");
    let mode = match q.view.as_deref() {
        Some("timeline") => "timeline",
        Some("full") => "full",
        _ => "compact",
    };
    let all: Vec<&Value> = inspected["events"]
        .as_array()
        .map(|e| e.iter().collect())
        .unwrap_or_default();
    let first_at = all.first().and_then(|e| e["at"].as_u64()).unwrap_or(0);
    let skip = all.len().saturating_sub(EVENTS_MAX);
    let events: Vec<Value> = all
        .into_iter()
        .skip(skip)
        .filter(|e| !failed || failed_event(e))
        .map(|e| event_row(e, first_at))
        .collect();
    let effects: Vec<Value> = view["effects"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|e| {
                    // An effect key is `job/path/N`: N counts the attempts at that node.
                    let attempt = e["key"]
                        .as_str()
                        .and_then(|k| k.rsplit_once('/'))
                        .and_then(|(_, n)| n.parse::<u64>().ok())
                        .map(|n| n.to_string())
                        .unwrap_or_default();
                    let due = match (e["state"].as_str(), e["due_at"].as_u64()) {
                        (Some("requested"), Some(due)) => until(now_ms(), due),
                        _ => String::new(),
                    };
                    json!({"key": e["key"], "kind": e["kind"], "state": e["state"],
                           "attempt": attempt, "node": e["node"], "due": due})
                })
                .collect()
        })
        .unwrap_or_default();
    let waits: Vec<WaitForm> = view["waiting_on"]
        .as_array()
        .map(|w| w.iter().map(wait_form).collect())
        .unwrap_or_default();
    let (node, waiting) = node_name(&backend).await;
    let left = crate::outputs::left_by(&backend, &id).await;
    render(
        "job.html",
        context! {
            node => node, page => "jobs", waiting => waiting,
            job => view.clone(), live => live, view => mode, failed => failed,
            cancellable => matches!(status, "pending" | "running" | "waiting"),
            retryable => matches!(status, "succeeded" | "failed" | "cancelled"),
            retry_of => retry_of(&view),
            blocked => blocked_lines(&view),
            retrying => retrying_lines(&inspected["tree"], &view["effects"], now_ms()),
            waits => waits,
            tree => tree_view(&inspected["tree"]),
            state => serde_json::to_string_pretty(&view["state"]).unwrap_or_default(),
            effects => effects, events => events,
            patches => left["patches"], artifacts => left["artifacts"],
        },
    )
}

/// `{job, from}` when the job is a retry (its start key is `retry/JOB/PATH/rN`).
fn retry_of(view: &Value) -> Option<Value> {
    let key = view["started_by"]["key"].as_str()?.strip_prefix("retry/")?;
    let (rest, _revision) = key.rsplit_once('/')?;
    let (job, from) = rest.split_once('/')?;
    Some(json!({"job": job, "from": from}))
}

/// "Retry from here": a new job from the node, then its page.
async fn retry(
    State(backend): Shared,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let fields = form_urlencoded(&body);
    let field = |name: &str| form_field(&fields, name).filter(|v| !v.is_empty());
    let Some(from) = field("from") else {
        return page_error(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "choose the node to retry from",
        ));
    };
    let revision = field("revision").and_then(|r| r.parse().ok());
    match ask(
        &backend,
        Request::Retry {
            job: id,
            from,
            revision,
        },
    )
    .await
    {
        Ok(retried) => Redirect::to(&format!(
            "/jobs/{}",
            retried["job"].as_str().unwrap_or_default()
        ))
        .into_response(),
        Err(problem) => page_error(problem),
    }
}

async fn cancel_confirm(State(backend): Shared, Path(id): Path<String>) -> Response {
    let (node, waiting) = node_name(&backend).await;
    render(
        "confirm.html",
        context! { node => node, page => "jobs", waiting => waiting, job => id },
    )
}

async fn cancel(
    State(backend): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let reason = form_urlencoded(&body)
        .into_iter()
        .find(|(k, _)| k == "reason")
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
        .or_else(|| Some("cancelled from the Explorer".into()));
    match ask(
        &backend,
        Request::Cancel {
            job: id.clone(),
            reason,
        },
    )
    .await
    {
        Ok(_) if is_htmx(&headers) => {
            let mut response = StatusCode::NO_CONTENT.into_response();
            if let Ok(to) = format!("/jobs/{id}").parse() {
                response.headers_mut().insert("hx-redirect", to);
            }
            response
        }
        Ok(_) => Redirect::to(&format!("/jobs/{id}")).into_response(),
        Err(problem) => page_error(problem),
    }
}

/// Server-sent events while the job runs: `status` (the badge, re-rendered) each time it
/// moves, then `done` once it settled or waits, and the stream ends.
async fn live(State(backend): Shared, Path(id): Path<String>) -> Response {
    if let Err(problem) = ask(&backend, Request::Status { job: id.clone() }).await {
        return problem.into_response();
    }
    // State: (backend, job, last status sent, phase) with phase 0 = watching,
    // 1 = settled (send `done`), 2 = over.
    let stream = futures_util::stream::unfold(
        (backend, id, None::<String>, 0u8),
        |(backend, id, last, phase)| async move {
            match phase {
                2 => return None,
                1 => {
                    // `sse-close="done"` on the page closes the EventSource (it would
                    // reconnect otherwise).
                    let event = Event::default().event("done").data("done");
                    return Some((
                        Ok::<_, std::convert::Infallible>(event),
                        (backend, id, last, 2),
                    ));
                }
                _ => {}
            }
            // The first answer is at once; later ones when the job moves (or a poll ends).
            let timeout_ms = if last.is_none() { 0 } else { LIVE_POLL_MS };
            let view = ask(
                &backend,
                Request::Wait {
                    job: id.clone(),
                    timeout_ms: Some(timeout_ms),
                },
            )
            .await;
            let (status, settled) = match &view {
                Ok(v) => {
                    let s = v["status"].as_str().unwrap_or("unknown").to_owned();
                    let settled = !matches!(s.as_str(), "pending" | "running");
                    (s, settled)
                }
                Err(_) => ("unknown".to_owned(), true),
            };
            let mut badge = format!("<span class=\"badge s-{0}\">{0}</span>", escape(&status));
            if settled {
                // The live indicator turns off with the same swap (out of band).
                badge.push_str("<span class=\"live dim\" id=\"live\" data-on=\"false\" hx-swap-oob=\"true\">not live</span>");
            }
            let event = if !settled && last.as_deref() == Some(status.as_str()) {
                Event::default().comment(format!("still {status}"))
            } else {
                Event::default().event("status").data(badge)
            };
            let next = if settled { 1 } else { 0 };
            Some((
                Ok::<_, std::convert::Infallible>(event),
                (backend, id, Some(status), next),
            ))
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn places_page(State(backend): Shared) -> Response {
    let places = match ask(&backend, Request::Places).await {
        Ok(v) => v,
        Err(problem) => return page_error(problem),
    };
    let rows: Vec<Value> = places["places"]
        .as_array()
        .map(|p| {
            p.iter()
                .map(|p| {
                    json!({"name": p["name"], "state": p["state"],
                           "capabilities": p["capabilities"].as_array().map(|c| c.iter().map(text_of).collect::<Vec<_>>().join(", ")).unwrap_or_default(),
                           "detail": p["reason"].as_str().map(str::to_owned).unwrap_or_else(|| text_of(&p["target"]))})
                })
                .collect()
        })
        .unwrap_or_default();
    // What waits for a place or capability no seat offers, in plain words: one line per
    // need, from the node's own tally of its ready effects (vitality `queue.blocked`).
    let blocked: Vec<Value> = match ask(&backend, Request::Vitality).await {
        Ok(vitality) => vitality["queue"]["blocked"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                let effects = b["effects"].as_u64().unwrap_or(0);
                json!({
                    "line": format!(
                        "No seat can take work that needs `{}`: {} effect{} wait{} — {} (since {}).",
                        b["need"].as_str().unwrap_or("?"),
                        effects,
                        if effects == 1 { "" } else { "s" },
                        if effects == 1 { "s" } else { "" },
                        b["reason"].as_str().unwrap_or("not ready"),
                        ago(now_ms(), &b["since"]),
                    ),
                    "jobs": b["jobs"].clone(),
                })
            })
            .collect(),
        Err(problem) => return page_error(problem),
    };
    let (node, waiting) = node_name(&backend).await;
    render(
        "places.html",
        context! { node => node, page => "places", waiting => waiting, places => rows, blocked => blocked },
    )
}

fn tree_node(n: &Value) -> Value {
    let state = if n["self"] == true {
        "self".to_owned()
    } else {
        n["link"]["state"].as_str().unwrap_or("unknown").to_owned()
    };
    let mut detail = text_of(&n["role"]);
    if let Some(seats) = n["seats"].as_u64() {
        detail.push_str(&format!(" · {seats} seats"));
    }
    if n["self"] == true {
        detail.push_str(" · this node");
    }
    json!({
        "name": n["name"], "status": state, "detail": detail, "path": "",
        "children": n["children"].as_array().map(|c| c.iter().map(tree_node).collect::<Vec<_>>()).unwrap_or_default(),
    })
}

async fn tree_page(State(backend): Shared) -> Response {
    let tree = match ask(&backend, Request::Tree).await {
        Ok(v) => v,
        Err(problem) => return page_error(problem),
    };
    let now = now_ms();
    let links: Vec<Value> = ask(&backend, Request::Vitality)
        .await
        .ok()
        .and_then(|v| v["links"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .map(|mut l| {
            l["since"] = json!(ago(now, &l["since"]));
            l
        })
        .collect();
    let (node, waiting) = node_name(&backend).await;
    render(
        "tree.html",
        context! { node => node, page => "tree", waiting => waiting, role => tree["role"].clone(),
        parent => tree["parent"].as_str(), tree => tree_node(&tree["tree"]), links => links },
    )
}

#[derive(Debug, Default, serde::Deserialize)]
struct FromQuery {
    from: Option<String>,
    /// A fresh start of a stored flow (from its page), when there is no run to copy.
    flow: Option<String>,
    revision: Option<u32>,
}

async fn start_form(State(backend): Shared, Query(q): Query<FromQuery>) -> Response {
    let (node, waiting) = node_name(&backend).await;
    if let Some(from) = q.from.filter(|f| !f.is_empty()) {
        let view = match ask(&backend, Request::Status { job: from.clone() }).await {
            Ok(v) => v,
            Err(problem) => return page_error(problem),
        };
        return render(
            "start.html",
            context! {
                node => node, page => "jobs", waiting => waiting, from => from,
                flow => view["flow"].as_str().unwrap_or_default(),
                revision => view["revision"].as_u64().unwrap_or(1),
                input => serde_json::to_string_pretty(&view["input"]).unwrap_or_else(|_| "{}".into()),
                error => None::<String>,
            },
        );
    }
    let Some(flow) = q.flow.filter(|f| !f.is_empty()) else {
        return page_error(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "start what? (/start?from=JOB, or /start?flow=NAME)",
        ));
    };
    let shown = match ask(
        &backend,
        Request::FlowsShow {
            name: flow.clone(),
            revision: q.revision,
        },
    )
    .await
    {
        Ok(v) => v,
        Err(problem) => return page_error(problem),
    };
    // The declared inputs, each with its default (or null to fill in).
    let input: Map<String, Value> = shown["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|field| Some((field["name"].as_str()?.to_owned(), field["default"].clone())))
        .collect();
    render(
        "start.html",
        context! {
            node => node, page => "flows", waiting => waiting, from => "",
            flow => flow, revision => shown["revision"].as_u64().unwrap_or(1),
            input => serde_json::to_string_pretty(&input).unwrap_or_else(|_| "{}".into()),
            error => None::<String>,
        },
    )
}

async fn start(State(backend): Shared, body: axum::body::Bytes) -> Response {
    let pairs = form_urlencoded(&body);
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let (from, flow, text) = (get("from"), get("flow"), get("input"));
    let revision = get("revision").parse::<u32>().ok();
    let outcome = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(input)) => {
            let submitted = ask(
                &backend,
                Request::Submit {
                    flow: palm_api::protocol::FlowArg::Stored {
                        name: flow.clone(),
                        revision,
                    },
                    input,
                    args: Vec::new(),
                    started_by: None,
                    node: None,
                },
            )
            .await;
            match submitted {
                Ok(v) => Ok(v["job"].as_str().unwrap_or_default().to_owned()),
                Err(problem) if problem.status.is_client_error() => Err(problem.body.message),
                Err(problem) => return page_error(problem),
            }
        }
        Ok(_) => Err("the input must be a JSON object".to_owned()),
        Err(e) => Err(format!("the input is not JSON: {e}")),
    };
    match outcome {
        Ok(job) => Redirect::to(&format!("/jobs/{job}")).into_response(),
        Err(message) => {
            let (node, waiting) = node_name(&backend).await;
            let page = render(
                "start.html",
                context! { node => node, page => "jobs", waiting => waiting, from => from, flow => flow,
                revision => revision.unwrap_or(1), input => text, error => message },
            );
            (StatusCode::BAD_REQUEST, page).into_response()
        }
    }
}

#[derive(Debug, Default, serde::Deserialize)]
struct CompareQuery {
    a: Option<String>,
    b: Option<String>,
}

#[derive(Debug, Serialize)]
struct CompareRow {
    field: String,
    a: String,
    b: String,
    same: bool,
}

fn shown(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

async fn compare(State(backend): Shared, Query(q): Query<CompareQuery>) -> Response {
    let (node, waiting) = node_name(&backend).await;
    let a = q.a.filter(|x| !x.is_empty());
    let b = q.b.filter(|x| !x.is_empty());
    let (Some(a), Some(b)) = (a.clone(), b.clone()) else {
        return render(
            "compare.html",
            context! { node => node, page => "jobs", waiting => waiting, a => a, b => b },
        );
    };
    let mut views = Vec::new();
    for id in [&a, &b] {
        let status = ask(&backend, Request::Status { job: id.clone() }).await;
        let journal = ask(&backend, Request::Inspect { job: id.clone() }).await;
        match (status, journal) {
            (Ok(s), Ok(j)) => views.push((s, j)),
            (Err(p), _) | (_, Err(p)) => {
                return (
                    p.status,
                    render(
                        "compare.html",
                        context! { node => node, page => "jobs", waiting => waiting,
                        a => a, b => b, error => p.body.message },
                    ),
                )
                    .into_response();
            }
        }
    }
    let (sa, ja) = &views[0];
    let (sb, jb) = &views[1];
    let mut rows = Vec::new();
    let mut row = |field: String, x: &Value, y: &Value| {
        rows.push(CompareRow {
            same: x == y,
            a: shown(x),
            b: shown(y),
            field,
        });
    };
    for field in ["status", "flow", "revision", "error", "input"] {
        row(field.to_owned(), &sa[field], &sb[field]);
    }
    // The blackboard key by key, so a difference points at its key.
    let empty = Map::new();
    let (ma, mb) = (
        sa["state"].as_object().unwrap_or(&empty),
        sb["state"].as_object().unwrap_or(&empty),
    );
    let keys: std::collections::BTreeSet<&String> = ma.keys().chain(mb.keys()).collect();
    for key in keys {
        row(
            format!("state.{key}"),
            ma.get(key).unwrap_or(&Value::Null),
            mb.get(key).unwrap_or(&Value::Null),
        );
    }
    let steps = |j: &Value| -> Vec<String> {
        j["events"]
            .as_array()
            .map(|e| {
                e.iter()
                    .map(|e| {
                        format!(
                            "{} {}",
                            e["kind"].as_str().unwrap_or(""),
                            e["path"].as_str().unwrap_or("")
                        )
                        .trim()
                        .to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (ea, eb) = (steps(ja), steps(jb));
    let events: Vec<Value> = (0..ea.len().max(eb.len()).min(EVENTS_MAX))
        .map(|i| {
            let (x, y) = (
                ea.get(i).cloned().unwrap_or_default(),
                eb.get(i).cloned().unwrap_or_default(),
            );
            json!({"a": x, "b": y, "same": x == y})
        })
        .collect();
    render(
        "compare.html",
        context! { node => node, page => "jobs", waiting => waiting, a => a, b => b, rows => rows, events => events },
    )
}

async fn flows_page(State(backend): Shared) -> Response {
    let listed = match ask(&backend, Request::FlowsList).await {
        Ok(v) => v,
        Err(problem) => return page_error(problem),
    };
    let (node, waiting) = node_name(&backend).await;
    render(
        "flows.html",
        context! { node => node, page => "flows", waiting => waiting, flows => listed["flows"].clone() },
    )
}

#[derive(Debug, Default, serde::Deserialize)]
struct FlowQuery {
    /// The revision shown (absent: the latest).
    rev: Option<u32>,
    /// Diff the shown revision against this one.
    diff: Option<u32>,
}

/// Jobs of a flow listed per revision on its page.
const PINNED_SHOWN: usize = 50;

/// A flow: its revisions, each with the jobs pinned to it (counted by status), the
/// source of one, the jobs pinned to that one, and a diff against another.
async fn flow_page(
    State(backend): Shared,
    Path(name): Path<String>,
    Query(q): Query<FlowQuery>,
) -> Response {
    let shown = match ask(
        &backend,
        Request::FlowsShow {
            name: name.clone(),
            revision: q.rev,
        },
    )
    .await
    {
        Ok(v) => v,
        Err(problem) => return page_error(problem),
    };
    let revision = shown["revision"].as_u64().unwrap_or(0);
    let jobs = match list_jobs(
        &backend,
        &JobsQuery {
            flow: Some(name.clone()),
            limit: Some(crate::rest::JOBS_LIMIT_MAX),
            ..JobsQuery::default()
        },
    )
    .await
    {
        Ok(v) => v["jobs"].as_array().cloned().unwrap_or_default(),
        Err(problem) => return page_error(problem),
    };
    // Per revision: how many jobs pin it, by status (unfinished first: they are what a
    // migration would move).
    let revisions: Vec<Value> = shown["revisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .rev()
        .map(|r| {
            let pinned: Vec<&Value> = jobs.iter().filter(|j| j["revision"] == r).collect();
            let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
            for job in &pinned {
                *counts
                    .entry(job["status"].as_str().unwrap_or("?").to_owned())
                    .or_default() += 1;
            }
            let unfinished = pinned
                .iter()
                .filter(|j| matches!(j["status"].as_str(), Some("pending" | "running" | "waiting")))
                .count();
            json!({"revision": r, "jobs": pinned.len(), "unfinished": unfinished,
                   "counts": counts.into_iter().map(|(s, n)| json!({"status": s, "n": n})).collect::<Vec<_>>()})
        })
        .collect();
    let pinned: Vec<Value> = jobs
        .iter()
        .filter(|j| j["revision"] == revision)
        .take(PINNED_SHOWN)
        .cloned()
        .collect();
    let pinned_total = jobs.iter().filter(|j| j["revision"] == revision).count();
    let diff = match q.diff.filter(|d| u64::from(*d) != revision) {
        Some(other) => match ask(
            &backend,
            Request::FlowsShow {
                name: name.clone(),
                revision: Some(other),
            },
        )
        .await
        {
            Ok(base) => Some(json!({
                "from": other,
                "hunks": diff_hunks(
                    base["source"].as_str().unwrap_or_default(),
                    shown["source"].as_str().unwrap_or_default(),
                ),
            })),
            Err(problem) => return page_error(problem),
        },
        None => None,
    };
    let previous = shown["revisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .filter(|r| *r < revision)
        .max();
    let (node, waiting) = node_name(&backend).await;
    render(
        "flow.html",
        context! {
            node => node, page => "flows", waiting => waiting,
            flow => shown, revisions => revisions, pinned => pinned,
            pinned_total => pinned_total, diff => diff, previous => previous,
        },
    )
}

/// Lines of context around each change in a diff.
const DIFF_CONTEXT: usize = 3;

/// A unified line diff of two sources, in hunks: each line with its sign (`-`, `+`, ` `),
/// its numbers in the old and new text, and its text.
fn diff_hunks(old: &str, new: &str) -> Vec<Value> {
    use similar::{ChangeTag, TextDiff};
    let diff = TextDiff::from_lines(old, new);
    diff.grouped_ops(DIFF_CONTEXT)
        .iter()
        .map(|group| {
            let lines: Vec<Value> = group
                .iter()
                .flat_map(|op| diff.iter_changes(op))
                .map(|change| {
                    let (sign, class) = match change.tag() {
                        ChangeTag::Delete => ("-", "del"),
                        ChangeTag::Insert => ("+", "ins"),
                        ChangeTag::Equal => (" ", "same"),
                    };
                    json!({
                        "sign": sign, "class": class,
                        "old": change.old_index().map(|i| i + 1),
                        "new": change.new_index().map(|i| i + 1),
                        "text": change.value().trim_end_matches(['\n', '\r']),
                    })
                })
                .collect();
            json!({"lines": lines})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_read_as_utc_wall_clock_time() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(utc_time(1_796_481_208_903), "2026-12-05 14:33:28.903Z");
        // The last moment of a leap day, and a century that is no leap year after it.
        assert_eq!(
            utc_time(951_782_400_000 + 86_399_999),
            "2000-02-29 23:59:59.999Z"
        );
        assert_eq!(utc_time(4_102_444_800_000), "2100-01-01 00:00:00.000Z");
    }
}
