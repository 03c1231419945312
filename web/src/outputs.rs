//! What runs leave on the node's disk, over `/v1`: the patches agent runs left (listed,
//! shown, landed through the merge queue, reverted), the jobs' git worktrees, and the
//! jobs' artifacts (a check's log, kept under `DATA/artifacts/JOB/`).
//!
//! These are files under the node's data directory, not control requests: the handlers
//! use the same code as `palm patches` and `palm worktrees` (and MCP's `palm_patches`),
//! so the JSON is the CLI's `--json`. Git runs off the async workers
//! (`spawn_blocking`). A job's worktrees and artifacts are those of this node: a job
//! placed on a child node keeps them there.

use crate::Backend;
use crate::problem::Problem;
use crate::rest::ask;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use palm_agents::patches::{PatchError, Patches};
use palm_api::protocol::{ErrorBody, Request};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

type Shared = State<Arc<dyn Backend>>;

/// The largest artifact served in one answer; a larger one is read on the node.
pub const ARTIFACT_BYTES_MAX: u64 = 64 << 20;

/// A patch operation's refusal as a problem: `unknown_patch` is 404; a patch in the wrong
/// state for the operation is 409.
fn patch_problem(err: PatchError) -> Problem {
    let body = ErrorBody {
        kind: err.kind.to_owned(),
        message: err.message,
        hint: err.hint,
        exit: if err.usage { 2 } else { 1 },
    };
    Problem::from_error(body)
}

/// Runs blocking file and git work off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Problem> + Send + 'static,
) -> Result<T, Problem> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the request's worker stopped: {e}"),
        ))
    })
}

fn json_answer(result: Result<Value, Problem>) -> Response {
    match result {
        Ok(value) => axum::Json(value).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// `GET /v1/patches?job=` filter.
#[derive(Debug, Default, Deserialize)]
pub struct PatchesQuery {
    /// Only this job's patches.
    pub job: Option<String>,
}

/// `GET /v1/patches`: as `palm patches list --json`.
pub async fn list_patches(State(backend): Shared, Query(query): Query<PatchesQuery>) -> Response {
    let data = backend.data_dir().to_owned();
    json_answer(
        blocking(move || {
            let job = query.job.filter(|j| !j.is_empty());
            let patches = Patches::new(&data)
                .list(job.as_deref())
                .map_err(patch_problem)?;
            Ok(json!({"patches": patches}))
        })
        .await,
    )
}

/// `GET /v1/patches/{id}`: as `palm patches show --json` (with the diff).
pub async fn show_patch(State(backend): Shared, Path(id): Path<String>) -> Response {
    let data = backend.data_dir().to_owned();
    json_answer(blocking(move || Patches::new(&data).show(&id).map_err(patch_problem)).await)
}

/// `POST /v1/patches/{id}/apply` `{"to"}`: lands the patch through the merge queue, as
/// `palm patches apply --json`. A conflict changes nothing and answers 409 with the same
/// document (`status: "conflict"`, `conflicts`).
pub async fn apply_patch(State(backend): Shared, Path(id): Path<String>, bytes: Bytes) -> Response {
    let body = match crate::rest::body_object(&bytes) {
        Ok(body) => body,
        Err(problem) => return problem.into_response(),
    };
    let to = match crate::rest::field_str(&body, "to") {
        Ok(to) => to.filter(|t| !t.is_empty()),
        Err(problem) => return problem.into_response(),
    };
    land(backend.data_dir().to_owned(), id, to, false).await
}

/// `POST /v1/patches/{id}/revert`: undoes one applied patch, as `palm patches revert`.
pub async fn revert_patch(State(backend): Shared, Path(id): Path<String>) -> Response {
    land(backend.data_dir().to_owned(), id, None, true).await
}

async fn land(data: PathBuf, id: String, to: Option<String>, revert: bool) -> Response {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let landed = blocking(move || {
        Patches::new(&data)
            .land(&id, to, revert, now_ms)
            .map_err(patch_problem)
    })
    .await;
    match landed {
        Ok(answer) if answer["status"] == "conflict" => {
            (StatusCode::CONFLICT, axum::Json(answer)).into_response()
        }
        other => json_answer(other),
    }
}

/// `GET /v1/worktrees`: as `palm worktrees list --json`, each with its job's status.
pub async fn list_worktrees(State(backend): Shared) -> Response {
    json_answer(worktrees(&backend).await)
}

async fn worktrees(backend: &Arc<dyn Backend>) -> Result<Value, Problem> {
    let root = backend.data_dir().join("worktrees");
    let found = blocking(move || {
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        Ok(palm_agents::git::list_worktrees(&root))
    })
    .await?;
    let mut listed = Vec::with_capacity(found.len());
    for tree in found {
        let status = match ask(
            backend,
            Request::Status {
                job: tree.job.clone(),
            },
        )
        .await
        {
            Ok(view) => view["status"].as_str().unwrap_or("unknown").to_owned(),
            Err(problem) if problem.body.kind == "unknown_job" => "unknown".to_owned(),
            Err(problem) => return Err(problem),
        };
        listed.push((tree, status));
    }
    let trees = blocking(move || {
        Ok(listed
            .iter()
            .map(|(tree, status)| palm_agents::git::describe_worktree(tree, status))
            .collect::<Vec<Value>>())
    })
    .await?;
    let total: u64 = trees.iter().filter_map(|t| t["bytes"].as_u64()).sum();
    Ok(json!({"worktrees": trees, "bytes": total}))
}

/// A job's artifact directory, once the node knows the job.
async fn artifacts_dir(backend: &Arc<dyn Backend>, job: &str) -> Result<PathBuf, Problem> {
    ask(
        backend,
        Request::Status {
            job: job.to_owned(),
        },
    )
    .await?;
    Ok(palm_agents::artifacts::dir(backend.data_dir(), job))
}

/// The artifacts in `dir`, by name: `[{name, bytes, modified_at}]` (none when it does not
/// exist).
fn artifact_list(dir: &std::path::Path) -> Result<Vec<Value>, Problem> {
    let mut artifacts = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(artifacts),
        Err(e) => {
            return Err(Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "io",
                format!("cannot read {}: {e}", dir.display()),
            ));
        }
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified_at = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64);
        artifacts.push(json!({
            "name": entry.file_name().to_string_lossy(),
            "bytes": meta.len(),
            "modified_at": modified_at,
        }));
    }
    artifacts.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(artifacts)
}

/// `GET /v1/jobs/{id}/artifacts`: `{job, artifacts: [{name, bytes, modified_at}]}`, by
/// name; empty when the job kept none.
pub async fn list_artifacts(State(backend): Shared, Path(job): Path<String>) -> Response {
    let dir = match artifacts_dir(&backend, &job).await {
        Ok(dir) => dir,
        Err(problem) => return problem.into_response(),
    };
    json_answer(blocking(move || Ok(json!({"job": job, "artifacts": artifact_list(&dir)?}))).await)
}

/// What a job left on this node, for its Explorer page: `{patches, artifacts}` (each
/// empty when there is none or it cannot be read: the page shows the job regardless).
pub async fn left_by(backend: &Arc<dyn Backend>, job: &str) -> Value {
    let data = backend.data_dir().to_owned();
    let job = job.to_owned();
    blocking(move || {
        let patches = Patches::new(&data).list(Some(&job)).unwrap_or_default();
        let dir = data.join("artifacts").join(palm_agents::git::safe(&job));
        let artifacts = artifact_list(&dir).unwrap_or_default();
        Ok(json!({"patches": patches, "artifacts": artifacts}))
    })
    .await
    .unwrap_or_else(|_| json!({"patches": [], "artifacts": []}))
}

/// True when `name` names a file directly inside a directory (no separators, no `..`).
fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// The media type an artifact is served as, by its extension.
fn media_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("log" | "txt" | "out") => "text/plain; charset=utf-8",
        Some("json") => "application/json",
        Some("xml") => "application/xml",
        _ => "application/octet-stream",
    }
}

/// `GET /v1/jobs/{id}/artifacts/{name}`: the artifact's bytes.
pub async fn get_artifact(
    State(backend): Shared,
    Path((job, name)): Path<(String, String)>,
) -> Response {
    if !plain_name(&name) {
        return Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("`{name}` is not an artifact name (a file name, no `/` or `..`)"),
        )
        .into_response();
    }
    let dir = match artifacts_dir(&backend, &job).await {
        Ok(dir) => dir,
        Err(problem) => return problem.into_response(),
    };
    let path = dir.join(&name);
    let media = media_type(&name);
    let read = blocking(move || {
        let missing = || {
            Problem::new(
                StatusCode::NOT_FOUND,
                "unknown_artifact",
                format!("job {job} has no artifact `{name}`"),
            )
            .hint(format!("GET /v1/jobs/{job}/artifacts lists them"))
        };
        let meta = std::fs::metadata(&path).map_err(|_| missing())?;
        if !meta.is_file() {
            return Err(missing());
        }
        if meta.len() > ARTIFACT_BYTES_MAX {
            return Err(Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!(
                    "artifact `{name}` is {} bytes, more than the {} served over HTTP",
                    meta.len(),
                    ARTIFACT_BYTES_MAX
                ),
            )
            .hint(format!("read it on the node: {}", path.display())));
        }
        std::fs::read(&path).map_err(|e| {
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "io",
                format!("cannot read {}: {e}", path.display()),
            )
        })
    })
    .await;
    match read {
        Ok(bytes) => {
            let mut response = bytes.into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
            response
        }
        Err(problem) => problem.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_names_stay_inside_the_job_directory() {
        assert!(plain_name("verify-a1.log"));
        for bad in ["", ".", "..", "../etc", "a/b", "a\\b", "x\0"] {
            assert!(!plain_name(bad), "{bad:?}");
        }
        assert_eq!(media_type("verify-a1.log"), "text/plain; charset=utf-8");
        assert_eq!(media_type("report.json"), "application/json");
        assert_eq!(media_type("blob"), "application/octet-stream");
    }
}
