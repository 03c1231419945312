//! The `/v1` routes. Each turns an HTTP request into control requests and answers with
//! what the CLI prints for `--json`; a refusal is a problem document (`problem`).
//!
//! | route | control request |
//! |---|---|
//! | `GET /v1/jobs?status=&not_status=&flow=&limit=` | `jobs` (filtered here by flow and excluded statuses) |
//! | `POST /v1/jobs` `{"flow", "input", "args", "revision"}` | `submit`, then `status`: 201 with the status document |
//! | `GET /v1/jobs/{id}` | `status` |
//! | `GET /v1/jobs/{id}/journal` | `inspect` |
//! | `GET /v1/jobs/{id}/wait?timeout_ms=` | `wait` |
//! | `POST /v1/jobs/{id}/continue` `{"key", "input"}` | `continue` |
//! | `POST /v1/jobs/{id}/cancel` `{"reason"}` | `cancel` |
//! | `GET /v1/waits` | `waits`: every waiting job's status document (the inbox) |
//! | `GET /v1/flows`, `GET /v1/flows/{name}?revision=` | `flows_list`, `flows_show` |
//! | `POST /v1/flows` `{"source", "origin"}` | `flows_add` (201) |
//! | `POST /v1/flows/validate` `{"source"}` | parsed here, as `palm flows validate` |
//! | `GET /v1/places`, `/v1/vitality`, `/v1/tree`, `/v1/interests` | the same-named requests |
//! | `POST /v1/events/{name}` `{"data"}` | `emit` |
//! | `POST /v1/webhooks/{name}` (the body is the data, as sent) | `emit` |
//! | `POST /v1/tokens` `{"name", "role", "ttl"}` (or `ttl_ms`), `DELETE /v1/tokens/{name}` | `token_create`, `token_revoke` |
//!
//! Patches (`/v1/patches`, `/v1/patches/{id}`, `.../apply` `{"to"}`, `.../revert`),
//! worktrees (`/v1/worktrees`) and a job's artifacts (`/v1/jobs/{id}/artifacts[/{name}]`)
//! are files under the node's data directory, served by [`outputs`].

use crate::Backend;
use crate::outputs;
use crate::problem::Problem;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use palm_api::protocol::{FlowArg, REQUEST_BYTES_MAX, Request};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Most jobs one list answers.
pub const JOBS_LIMIT_MAX: usize = 10_000;
/// Jobs listed unless asked otherwise.
pub const JOBS_LIMIT_DEFAULT: usize = 100;
/// Waiting jobs the inbox reads in one request.
pub const WAITS_LIMIT_MAX: usize = 10_000;

type Shared = State<Arc<dyn Backend>>;

/// The routes, without the token check (`crate::router` adds it).
pub fn routes() -> Router<Arc<dyn Backend>> {
    Router::new()
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/jobs", get(jobs).post(submit))
        .route("/v1/jobs/{id}", get(status))
        .route("/v1/jobs/{id}/journal", get(journal))
        .route("/v1/jobs/{id}/wait", get(wait))
        .route("/v1/jobs/{id}/continue", post(continue_job))
        .route("/v1/jobs/{id}/cancel", post(cancel))
        .route("/v1/jobs/{id}/retry", post(retry))
        .route("/v1/waits", get(waits))
        .route("/v1/flows", get(flows).post(flows_add))
        .route("/v1/flows/validate", post(flows_validate))
        .route("/v1/flows/{name}", get(flow_show))
        .route("/v1/places", get(places))
        .route("/v1/vitality", get(vitality))
        .route("/v1/tree", get(tree))
        .route("/v1/interests", get(interests))
        .route("/v1/events/{name}", post(emit))
        .route("/v1/webhooks/{name}", post(webhook))
        .route("/v1/tokens", post(token_create))
        .route("/v1/tokens/{name}", delete(token_revoke))
        .route("/v1/patches", get(outputs::list_patches))
        .route("/v1/patches/{id}", get(outputs::show_patch))
        .route("/v1/patches/{id}/apply", post(outputs::apply_patch))
        .route("/v1/patches/{id}/revert", post(outputs::revert_patch))
        .route("/v1/worktrees", get(outputs::list_worktrees))
        .route("/v1/jobs/{id}/artifacts", get(outputs::list_artifacts))
        .route("/v1/jobs/{id}/artifacts/{name}", get(outputs::get_artifact))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(REQUEST_BYTES_MAX))
}

/// One control request's result, or its error as a problem.
pub async fn ask(backend: &Arc<dyn Backend>, request: Request) -> Result<Value, Problem> {
    let response = backend.call(request).await;
    match (response.ok, response.result, response.error) {
        (true, Some(result), _) => Ok(result),
        (true, None, _) => Ok(Value::Null),
        (false, _, Some(error)) => Err(Problem::from_error(error)),
        (false, _, None) => Err(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "protocol",
            "the node refused without saying why",
        )),
    }
}

fn answer(result: Result<Value, Problem>) -> Response {
    match result {
        Ok(value) => axum::Json(value).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// A JSON object body, or a problem that says what is wrong with it.
pub(crate) fn body_object(bytes: &Bytes) -> Result<Map<String, Value>, Problem> {
    if bytes.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("the body must be a JSON object, not {}", kind_of(&other)),
        )),
        Err(e) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("the body is not JSON: {e}"),
        )),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn field_str(body: &Map<String, Value>, name: &str) -> Result<Option<String>, Problem> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("`{name}` must be a string, not {}", kind_of(other)),
        )),
    }
}

async fn openapi() -> Response {
    axum::Json(crate::openapi::document()).into_response()
}

async fn not_found() -> Response {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint (GET /v1/openapi.json lists them)",
    )
    .into_response()
}

/// A known path asked with a method it does not take (axum still sets `Allow`).
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} does not take {method} (the `Allow` header and GET /v1/openapi.json say what it takes)",
            uri.path()
        ),
    )
    .into_response()
}

/// `GET /v1/jobs` filters.
#[derive(Debug, Default, Deserialize)]
pub struct JobsQuery {
    /// Only this status.
    pub status: Option<String>,
    /// Not these statuses (comma-separated).
    pub not_status: Option<String>,
    /// Only this flow.
    pub flow: Option<String>,
    /// At most this many.
    pub limit: Option<usize>,
}

/// Lists jobs with the filters the node does not apply itself applied here.
pub async fn list_jobs(backend: &Arc<dyn Backend>, query: &JobsQuery) -> Result<Value, Problem> {
    let limit = query
        .limit
        .unwrap_or(JOBS_LIMIT_DEFAULT)
        .clamp(1, JOBS_LIMIT_MAX);
    let filtered = query.flow.is_some() || query.not_status.is_some();
    let mut value = ask(
        backend,
        Request::Jobs {
            status: query.status.clone().filter(|s| !s.is_empty()),
            // Filtering here: read up to the bound, cut to `limit` after.
            limit: Some(if filtered { JOBS_LIMIT_MAX } else { limit }),
            node: None,
        },
    )
    .await?;
    let excluded: Vec<&str> = query
        .not_status
        .as_deref()
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if let Some(list) = value.get_mut("jobs").and_then(Value::as_array_mut) {
        list.retain(|job| {
            query
                .flow
                .as_deref()
                .filter(|f| !f.is_empty())
                .is_none_or(|f| job["flow"] == f)
                && !excluded.iter().any(|s| job["status"] == *s)
        });
        list.truncate(limit);
    }
    Ok(value)
}

async fn jobs(State(backend): Shared, Query(query): Query<JobsQuery>) -> Response {
    answer(list_jobs(&backend, &query).await)
}

/// The flow of a submission: a stored name, inline source (YAML or JSON text, or a JSON
/// object), or `{"name", "revision"}` / `{"source", "origin"}`.
fn flow_arg(flow: Option<&Value>, revision: Option<u32>) -> Result<FlowArg, Problem> {
    let bad = |why: &str| Problem::new(StatusCode::BAD_REQUEST, "invalid_input", why.to_owned());
    match flow {
        None | Some(Value::Null) => Err(bad(
            "`flow` is required: a stored flow's name or a definition",
        )),
        Some(Value::String(text)) if text.contains('\n') || text.trim_start().starts_with('{') => {
            Ok(FlowArg::Source {
                source: text.clone(),
                origin: "<inline>".into(),
            })
        }
        Some(Value::String(name)) => Ok(FlowArg::Stored {
            name: name.clone(),
            revision,
        }),
        Some(Value::Object(object)) if object.contains_key("source") => Ok(FlowArg::Source {
            source: object["source"]
                .as_str()
                .ok_or_else(|| bad("`flow.source` must be a string"))?
                .to_owned(),
            origin: object
                .get("origin")
                .and_then(Value::as_str)
                .unwrap_or("<inline>")
                .to_owned(),
        }),
        Some(Value::Object(object))
            if object.contains_key("name") && !object.contains_key("tree") =>
        {
            Ok(FlowArg::Stored {
                name: object["name"]
                    .as_str()
                    .ok_or_else(|| bad("`flow.name` must be a string"))?
                    .to_owned(),
                revision: object
                    .get("revision")
                    .and_then(Value::as_u64)
                    .map(|r| r as u32)
                    .or(revision),
            })
        }
        // A definition written as a JSON object.
        Some(definition @ Value::Object(_)) => Ok(FlowArg::Source {
            source: definition.to_string(),
            origin: "<inline>".into(),
        }),
        Some(other) => Err(bad(&format!(
            "`flow` must be a name or a definition, not {}",
            kind_of(other)
        ))),
    }
}

async fn submit(State(backend): Shared, bytes: Bytes) -> Response {
    let result = async {
        let body = body_object(&bytes)?;
        let revision = body
            .get("revision")
            .and_then(Value::as_u64)
            .map(|r| r as u32);
        let flow = flow_arg(body.get("flow"), revision)?;
        let node = match body.get("node") {
            None | Some(Value::Null) => None,
            Some(Value::String(node)) if !node.is_empty() => Some(node.clone()),
            Some(other) => {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_input",
                    format!("`node` must be a node's name, not {}", kind_of(other)),
                ));
            }
        };
        let input = match body.get("input") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(other) => {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_input",
                    format!("`input` must be an object, not {}", kind_of(other)),
                ));
            }
        };
        let args = match body.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|a| a.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    Problem::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_input",
                        "`args` must be strings KEY=VALUE",
                    )
                })?,
            Some(_) => {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_input",
                    "`args` must be an array of KEY=VALUE strings",
                ));
            }
        };
        let submitted = ask(
            &backend,
            Request::Submit {
                flow,
                input,
                args,
                started_by: None,
                node,
            },
        )
        .await?;
        let job = submitted["job"].as_str().unwrap_or_default().to_owned();
        let view = ask(&backend, Request::Status { job: job.clone() }).await?;
        Ok((job, view))
    }
    .await;
    match result {
        Ok((job, view)) => {
            let mut response = (StatusCode::CREATED, axum::Json(view)).into_response();
            if let Ok(location) = HeaderValue::from_str(&format!("/v1/jobs/{job}")) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            response
        }
        Err(problem) => problem.into_response(),
    }
}

async fn status(State(backend): Shared, Path(id): Path<String>) -> Response {
    answer(ask(&backend, Request::Status { job: id }).await)
}

async fn journal(State(backend): Shared, Path(id): Path<String>) -> Response {
    answer(ask(&backend, Request::Inspect { job: id }).await)
}

#[derive(Debug, Deserialize)]
struct WaitQuery {
    timeout_ms: Option<u64>,
}

async fn wait(
    State(backend): Shared,
    Path(id): Path<String>,
    Query(query): Query<WaitQuery>,
) -> Response {
    answer(
        ask(
            &backend,
            Request::Wait {
                job: id,
                timeout_ms: Some(query.timeout_ms.unwrap_or(30_000)),
            },
        )
        .await,
    )
}

async fn continue_job(State(backend): Shared, Path(id): Path<String>, bytes: Bytes) -> Response {
    let result = async {
        let body = body_object(&bytes)?;
        let key = field_str(&body, "key")?.ok_or_else(|| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                "`key` is required: the wait to answer (GET /v1/jobs/{id} lists them)",
            )
        })?;
        let input = body.get("input").cloned().unwrap_or(Value::Null);
        ask(
            &backend,
            Request::Continue {
                job: id,
                key,
                input,
            },
        )
        .await
    }
    .await;
    answer(result)
}

async fn cancel(State(backend): Shared, Path(id): Path<String>, bytes: Bytes) -> Response {
    let result = async {
        let body = body_object(&bytes)?;
        let reason = field_str(&body, "reason")?;
        ask(&backend, Request::Cancel { job: id, reason }).await
    }
    .await;
    answer(result)
}

/// `POST /v1/jobs/{id}/retry` `{"from": PATH, "revision"?}`: 201 with what `palm retry
/// --json` prints, and the new job's Location.
async fn retry(State(backend): Shared, Path(id): Path<String>, bytes: Bytes) -> Response {
    let result = async {
        let body = body_object(&bytes)?;
        let from = field_str(&body, "from")?.ok_or_else(|| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                "`from` is required: the path of the node to run again from (`0.2.1`)",
            )
        })?;
        let revision = match body.get("revision") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .and_then(|r| u32::try_from(r).ok())
                    .ok_or_else(|| {
                        Problem::new(
                            StatusCode::BAD_REQUEST,
                            "invalid_input",
                            "`revision` must be a revision number",
                        )
                    })?,
            ),
        };
        ask(
            &backend,
            Request::Retry {
                job: id,
                from,
                revision,
            },
        )
        .await
    }
    .await;
    match result {
        Ok(retried) => {
            let job = retried["job"].as_str().unwrap_or_default().to_owned();
            let mut response = (StatusCode::CREATED, axum::Json(retried)).into_response();
            if let Ok(location) = HeaderValue::from_str(&format!("/v1/jobs/{job}")) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            response
        }
        Err(problem) => problem.into_response(),
    }
}

/// A page of the inbox: waiting jobs with their status documents (`waiting_on`
/// included), and how many wait in all; one `waits` request however many wait.
pub async fn inbox(
    backend: &Arc<dyn Backend>,
    limit: usize,
    offset: usize,
) -> Result<(Vec<Value>, usize), Problem> {
    let listed = ask(
        backend,
        Request::Waits {
            limit: Some(limit.clamp(1, WAITS_LIMIT_MAX)),
            offset: Some(offset),
        },
    )
    .await?;
    let total = listed["total"].as_u64().unwrap_or(0) as usize;
    let jobs = match listed {
        Value::Object(mut map) => match map.remove("jobs") {
            Some(Value::Array(jobs)) => jobs,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    Ok((jobs, total))
}

#[derive(Debug, Deserialize)]
struct PageQuery {
    limit: Option<usize>,
    offset: Option<usize>,
}

async fn waits(State(backend): Shared, Query(query): Query<PageQuery>) -> Response {
    let limit = query.limit.unwrap_or(JOBS_LIMIT_DEFAULT);
    answer(
        inbox(&backend, limit, query.offset.unwrap_or(0))
            .await
            .map(|(jobs, total)| json!({"jobs": jobs, "total": total})),
    )
}

async fn flows(State(backend): Shared) -> Response {
    answer(ask(&backend, Request::FlowsList).await)
}

#[derive(Debug, Deserialize)]
struct RevisionQuery {
    revision: Option<u32>,
}

async fn flow_show(
    State(backend): Shared,
    Path(name): Path<String>,
    Query(query): Query<RevisionQuery>,
) -> Response {
    answer(
        ask(
            &backend,
            Request::FlowsShow {
                name,
                revision: query.revision,
            },
        )
        .await,
    )
}

fn source_of(body: &Map<String, Value>) -> Result<String, Problem> {
    field_str(body, "source")?.ok_or_else(|| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "`source` is required: the flow's YAML or JSON text",
        )
    })
}

async fn flows_add(State(backend): Shared, bytes: Bytes) -> Response {
    let result = async {
        let body = body_object(&bytes)?;
        let source = source_of(&body)?;
        let origin = field_str(&body, "origin")?.unwrap_or_else(|| "<rest>".into());
        ask(&backend, Request::FlowsAdd { source, origin }).await
    }
    .await;
    match result {
        Ok(value) => (StatusCode::CREATED, axum::Json(value)).into_response(),
        Err(problem) => problem.into_response(),
    }
}

async fn flows_validate(bytes: Bytes) -> Response {
    let result = (|| {
        let body = body_object(&bytes)?;
        let source = source_of(&body)?;
        let origin = field_str(&body, "origin")?.unwrap_or_else(|| "<inline>".into());
        let report = match palm_actors::definition::parse(&source, &origin) {
            Ok(parsed) => json!({"file": origin, "valid": true, "flow": parsed.name, "errors": []}),
            Err(diagnostics) => {
                let errors: Vec<Value> = diagnostics
                    .iter()
                    .map(|d| {
                        json!({"file": d.origin, "line": d.span.line, "col": d.span.col,
                               "message": d.message, "hint": d.hint})
                    })
                    .collect();
                json!({"file": origin, "valid": false, "errors": errors})
            }
        };
        let valid = report["valid"] == true;
        Ok(json!({"valid": valid, "files": [report]}))
    })();
    answer(result)
}

async fn places(State(backend): Shared) -> Response {
    answer(ask(&backend, Request::Places).await)
}

async fn vitality(State(backend): Shared) -> Response {
    answer(ask(&backend, Request::Vitality).await)
}

async fn tree(State(backend): Shared) -> Response {
    answer(ask(&backend, Request::Tree).await)
}

async fn interests(State(backend): Shared) -> Response {
    answer(ask(&backend, Request::Interests).await)
}

async fn emit(State(backend): Shared, Path(event): Path<String>, bytes: Bytes) -> Response {
    let result = async {
        let body = body_object(&bytes)?;
        let data = body.get("data").cloned().unwrap_or(Value::Null);
        ask(&backend, Request::Emit { event, data }).await
    }
    .await;
    answer(result)
}

/// A webhook: the sender's body is the event's data as it is (a service posting its own
/// JSON knows nothing of `{"data": ...}`); a body that is not JSON is kept as text.
async fn webhook(State(backend): Shared, Path(event): Path<String>, bytes: Bytes) -> Response {
    let result = async {
        let data = if bytes.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else if let Ok(value) = serde_json::from_slice::<Value>(&bytes) {
            value
        } else {
            match std::str::from_utf8(&bytes) {
                Ok(text) => Value::String(text.to_owned()),
                Err(_) => {
                    return Err(Problem::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_input",
                        "a webhook's body must be JSON or UTF-8 text",
                    ));
                }
            }
        };
        ask(&backend, Request::Emit { event, data }).await
    }
    .await;
    answer(result)
}

async fn token_create(State(backend): Shared, bytes: Bytes) -> Response {
    let result = async {
        let body = body_object(&bytes)?;
        let role = field_str(&body, "role")?.ok_or_else(|| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                "`role` is required: api, realm or edge",
            )
        })?;
        let name = field_str(&body, "name")?.unwrap_or_default();
        let ttl_ms = token_ttl_ms(&body)?;
        ask(&backend, Request::TokenCreate { name, role, ttl_ms }).await
    }
    .await;
    match result {
        Ok(value) => (StatusCode::CREATED, axum::Json(value)).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// A token's life from a `POST /v1/tokens` body: `ttl` as the CLI's `--ttl` takes it
/// (`90s`, `10m`, `1h`, `7d`) or `ttl_ms` in milliseconds, one of them; an hour if
/// neither.
fn token_ttl_ms(body: &Map<String, Value>) -> Result<u64, Problem> {
    let bad = |message: String| Problem::new(StatusCode::BAD_REQUEST, "invalid_input", message);
    match (body.get("ttl"), body.get("ttl_ms")) {
        (Some(_), Some(_)) => Err(bad("give `ttl` or `ttl_ms`, not both".to_owned())),
        (None, None) => Ok(3_600_000),
        (None, Some(ms)) => ms
            .as_u64()
            .filter(|ms| *ms > 0)
            .ok_or_else(|| bad(format!("`ttl_ms` must be a positive integer, not {ms}"))),
        (Some(Value::String(text)), None) => palm_api::verbs::duration_ms(text, "`ttl`")
            .ok()
            .filter(|ms| *ms > 0)
            .ok_or_else(|| {
                bad(format!(
                    "`ttl` {text:?} is not a duration like 90s, 10m, 1h or 7d"
                ))
            }),
        (Some(other), None) => Err(bad(format!(
            "`ttl` must be a duration string like \"10m\", not {other}"
        ))),
    }
}

async fn token_revoke(State(backend): Shared, Path(name): Path<String>) -> Response {
    answer(ask(&backend, Request::TokenRevoke { name }).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_is_a_name_or_a_definition() {
        assert!(matches!(
            flow_arg(Some(&json!("hello")), Some(2)),
            Ok(FlowArg::Stored { name, revision: Some(2) }) if name == "hello"
        ));
        assert!(matches!(
            flow_arg(Some(&json!("name: x\ntree: {set: {a: 1}}\n")), None),
            Ok(FlowArg::Source { .. })
        ));
        assert!(matches!(
            flow_arg(Some(&json!({"name": "x", "tree": {"set": {"a": 1}}})), None),
            Ok(FlowArg::Source { .. })
        ));
        assert!(matches!(
            flow_arg(Some(&json!({"name": "x", "revision": 3})), None),
            Ok(FlowArg::Stored {
                revision: Some(3),
                ..
            })
        ));
        assert!(flow_arg(None, None).is_err());
        assert!(flow_arg(Some(&json!(7)), None).is_err());
    }
}
