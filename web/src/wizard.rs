//! A wizard in the Explorer: one page per step (`/jobs/{id}/wizard`), then its summary.
//!
//! The page reads the step from the job's wait (`x-palm-wizard` on its schema: id, kind,
//! position, proposal, options, items, where back can go) and posts one move per form —
//! answer, back, a collection's add / remove / done, commit — as a `continue` of that
//! wait, so the web, the CLI (`palm wizard resume`) and MCP (`palm_wizard`) take turns on
//! the same draft. A form for a step the wizard has left (answered elsewhere meanwhile)
//! is refused, never applied to the step that came after.

use crate::Backend;
use crate::explorer::{form_field, form_urlencoded, node_name, page_error, render};
use crate::rest::ask;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;
use palm_api::protocol::Request;
use palm_api::verbs::{typed_text as shown, typed_value as typed, wizard_wait};
use serde_json::{Value, json};
use std::sync::Arc;

type Shared = State<Arc<dyn Backend>>;

/// The wait a wizard's current step parked: (key, prompt, step, answer schema).
fn current(view: &Value) -> Option<(String, String, Value, Value)> {
    let wait = wizard_wait(view)?;
    Some((
        wait["key"].as_str().unwrap_or_default().to_owned(),
        wait["prompt"].as_str().unwrap_or_default().to_owned(),
        wait["schema"]["x-palm-wizard"].clone(),
        wait["schema"]["properties"]["answer"].clone(),
    ))
}

/// `GET /jobs/{id}/wizard`: the current step as a form, or where the wizard ended.
pub async fn page(State(backend): Shared, Path(id): Path<String>) -> Response {
    show(&backend, &id, None, StatusCode::OK).await
}

async fn show(
    backend: &Arc<dyn Backend>,
    id: &str,
    error: Option<String>,
    status: StatusCode,
) -> Response {
    let view = match ask(backend, Request::Status { job: id.to_owned() }).await {
        Ok(view) => view,
        Err(problem) => return page_error(problem),
    };
    let (node, waiting) = node_name(backend).await;
    let Some((key, prompt, step, answer)) = current(&view) else {
        let page = render(
            "wizard.html",
            context! { node => node, page => "inbox", waiting => waiting, job => id,
            status => view["status"].clone(), error => view["error"].clone(),
            step => Value::Null, answers => Value::Null },
        );
        return (status, page).into_response();
    };
    let options: Vec<Value> = step["options"]
        .as_array()
        .map(|options| {
            options
                .iter()
                .enumerate()
                .map(|(i, option)| {
                    let chosen = if step["multiple"] == true {
                        step["default"]
                            .as_array()
                            .is_some_and(|d| d.contains(option))
                    } else {
                        &step["default"] == option
                    };
                    json!({"index": i, "label": shown(option), "chosen": chosen})
                })
                .collect()
        })
        .unwrap_or_default();
    let items: Vec<Value> = step["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .enumerate()
                .map(|(i, item)| json!({"index": i, "label": shown(item)}))
                .collect()
        })
        .unwrap_or_default();
    let count = items.len() as u64;
    let answers: Vec<Value> = step["answers"]
        .as_object()
        .map(|a| {
            a.iter()
                .map(|(id, value)| json!({"id": id, "value": shown(value)}))
                .collect()
        })
        .unwrap_or_default();
    let page = render(
        "wizard.html",
        context! {
            node => node, page => "inbox", waiting => waiting, job => id,
            status => view["status"].clone(), key => key, prompt => prompt,
            step => step.clone(), proposal => shown(&step["default"]),
            wants_text => answer["type"] == "string",
            options => options, items => items,
            can_add => count < step["max"].as_u64().unwrap_or(u64::MAX),
            can_finish => count >= step["min"].as_u64().unwrap_or(0),
            can_go_back => step["back"].as_array().is_some_and(|b| !b.is_empty()),
            answers => answers, error => error,
        },
    );
    (status, page).into_response()
}

/// `POST /jobs/{id}/wizard`: one move of the step the form was for.
pub async fn step(
    State(backend): Shared,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let fields = form_urlencoded(&body);
    let field = |name: &str| form_field(&fields, name);
    let view = match ask(&backend, Request::Status { job: id.clone() }).await {
        Ok(view) => view,
        Err(problem) => return page_error(problem),
    };
    let Some((key, _, step, answer)) = current(&view) else {
        return show(
            &backend,
            &id,
            Some("this wizard waits on no step any more".into()),
            StatusCode::CONFLICT,
        )
        .await;
    };
    if field("_step").as_deref() != step["step"].as_str() {
        return show(
            &backend,
            &id,
            Some(format!(
                "the wizard moved on (to step {} of {}) while this form was open; here it is now",
                step["n"], step["of"]
            )),
            StatusCode::CONFLICT,
        )
        .await;
    }
    let options = step["options"].as_array().cloned().unwrap_or_default();
    let option = |text: &str| {
        text.parse::<usize>()
            .ok()
            .and_then(|i| options.get(i).cloned())
    };
    let value = field("value").unwrap_or_default();
    let made = field("_move").unwrap_or_else(|| "answer".into());
    let input = match made.as_str() {
        "back" => json!({"back": true}),
        "commit" => json!({"commit": true}),
        "done" => json!({"done": true}),
        removal if removal.starts_with("remove:") => {
            let index = removal["remove:".len()..]
                .parse::<u64>()
                .unwrap_or(u64::MAX);
            json!({ "remove": index })
        }
        "add" => json!({ "add": typed(&value, &step["item_schema"]) }),
        _ if step["kind"] == "choice" && step["multiple"] == true => {
            let chosen: Vec<Value> = fields
                .iter()
                .filter(|(k, _)| k == "values")
                .filter_map(|(_, v)| option(v))
                .collect();
            json!({ "answer": chosen })
        }
        _ if step["kind"] == "choice" => match option(&value) {
            Some(chosen) => json!({ "answer": chosen }),
            None => {
                return show(
                    &backend,
                    &id,
                    Some("choose one of the options".into()),
                    StatusCode::BAD_REQUEST,
                )
                .await;
            }
        },
        _ => json!({ "answer": typed(&value, &answer) }),
    };
    let committing = input.get("commit").is_some();
    match ask(
        &backend,
        Request::Continue {
            job: id.clone(),
            key,
            input,
        },
    )
    .await
    {
        // The commit runs now: the job page follows it live.
        Ok(_) if committing => Redirect::to(&format!("/jobs/{id}")).into_response(),
        Ok(_) => Redirect::to(&format!("/jobs/{id}/wizard")).into_response(),
        Err(problem) if problem.status == StatusCode::BAD_REQUEST => {
            show(
                &backend,
                &id,
                Some(problem.body.message),
                StatusCode::BAD_REQUEST,
            )
            .await
        }
        Err(problem) => page_error(problem),
    }
}
