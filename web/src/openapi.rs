//! The OpenAPI 3.1 document of `/v1`, served at `/v1/openapi.json`. It is built from
//! [`OPERATIONS`], the one list of endpoints the tests also walk (every listed operation
//! must be routed, and every route listed), so the document cannot drift from the router.

use serde_json::{Map, Value, json};

/// One endpoint: method, path, operation id, summary, request body (a JSON Schema) if
/// any, and its success status.
pub struct Operation {
    /// `get`, `post` or `delete`.
    pub method: &'static str,
    /// The path, with `{params}`.
    pub path: &'static str,
    /// A unique id.
    pub id: &'static str,
    /// What it does.
    pub summary: &'static str,
    /// Query parameters: (name, JSON type, description).
    pub query: &'static [(&'static str, &'static str, &'static str)],
    /// Its body's schema (JSON text), if it takes one.
    pub body: Option<&'static str>,
    /// The status of a success.
    pub success: u16,
    /// The media type of a success ([`JSON`] but for raw files).
    pub media: &'static str,
}

/// A success answered with the CLI's `--json` document.
pub const JSON: &str = "application/json";

/// Every endpoint of `/v1`.
pub const OPERATIONS: &[Operation] = &[
    Operation {
        method: "get",
        path: "/v1/openapi.json",
        id: "openapi",
        summary: "This document",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/jobs",
        id: "listJobs",
        summary: "Jobs, newest first (as `palm jobs --json`)",
        query: &[
            ("status", "string", "Only this status"),
            (
                "not_status",
                "string",
                "Not these statuses (comma-separated)",
            ),
            ("flow", "string", "Only this flow"),
            (
                "limit",
                "integer",
                "At most this many (default 100, at most 10000)",
            ),
        ],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/jobs",
        id: "submitJob",
        summary: "Start a job; answers its status document (as `palm status --json`)",
        query: &[],
        body: Some(
            r#"{"type": "object", "required": ["flow"], "properties": {"flow": {"description": "A stored flow's name, a definition (YAML/JSON text or a JSON object), or {name, revision} / {source, origin}"}, "input": {"type": "object"}, "args": {"type": "array", "items": {"type": "string"}}, "revision": {"type": "integer", "minimum": 1}, "node": {"type": "string", "minLength": 1, "description": "Home the job on this root or realm of the tree (default: the nearest home)"}}}"#,
        ),
        success: 201,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/jobs/{id}",
        id: "jobStatus",
        summary: "A job's status document (as `palm status --json`)",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/jobs/{id}/journal",
        id: "jobJournal",
        summary: "A job's journal and tree (as `palm inspect --json`)",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/jobs/{id}/wait",
        id: "jobWait",
        summary: "Answers when the job ends or waits, or after timeout_ms",
        query: &[(
            "timeout_ms",
            "integer",
            "Give up after this long (default 30000)",
        )],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/jobs/{id}/continue",
        id: "continueJob",
        summary: "Answer a wait of a parked job",
        query: &[],
        body: Some(
            r#"{"type": "object", "required": ["key"], "properties": {"key": {"type": "string"}, "input": {}}}"#,
        ),
        success: 200,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/jobs/{id}/cancel",
        id: "cancelJob",
        summary: "Cancel a job",
        query: &[],
        body: Some(r#"{"type": "object", "properties": {"reason": {"type": "string"}}}"#),
        success: 200,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/jobs/{id}/retry",
        id: "retryJob",
        summary: "Retry an ended job from a node of its tree, as a new job",
        query: &[],
        body: Some(
            r#"{"type": "object", "required": ["from"], "properties": {"from": {"type": "string", "description": "The node's path, as the journal's tree shows it"}, "revision": {"type": "integer", "minimum": 1}}}"#,
        ),
        success: 201,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/waits",
        id: "listWaits",
        summary: "The inbox: every waiting job with its waits",
        query: &[("limit", "integer", "At most this many")],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/flows",
        id: "listFlows",
        summary: "Stored flows",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/flows",
        id: "addFlow",
        summary: "Store a flow as a new revision",
        query: &[],
        body: Some(
            r#"{"type": "object", "required": ["source"], "properties": {"source": {"type": "string"}, "origin": {"type": "string"}}}"#,
        ),
        success: 201,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/flows/validate",
        id: "validateFlow",
        summary: "Check a flow (as `palm flows validate --json`)",
        query: &[],
        body: Some(
            r#"{"type": "object", "required": ["source"], "properties": {"source": {"type": "string"}, "origin": {"type": "string"}}}"#,
        ),
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/flows/{name}",
        id: "showFlow",
        summary: "A stored flow",
        query: &[("revision", "integer", "This revision (default the latest)")],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/places",
        id: "listPlaces",
        summary: "The place book",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/vitality",
        id: "vitality",
        summary: "The node's self-report (as `palm vitality --json`)",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/tree",
        id: "tree",
        summary: "The tree as this node sees it, with its links",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/interests",
        id: "interests",
        summary: "Interests of the stored flows",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/events/{name}",
        id: "emitEvent",
        summary: "Emit a named event",
        query: &[],
        body: Some(r#"{"type": "object", "properties": {"data": {}}}"#),
        success: 200,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/webhooks/{name}",
        id: "webhook",
        summary: "A webhook: the body, whatever JSON it is (text when not JSON), is the event's data; flows with `on: {webhook: NAME}` (or `event: NAME`) start. For a webhook the node keeps a secret for (`webhooks:` in palm.yaml), `X-Hub-Signature-256: sha256=HEX` (the body's HMAC-SHA256), `X-Gitlab-Token: SECRET`, `Stripe-Signature: t=UNIX,v1=HEX` or Standard Webhooks' `webhook-id`/`webhook-timestamp`/`webhook-signature` stands in for the bearer token",
        query: &[],
        body: Some(r#"{}"#),
        success: 200,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/tokens",
        id: "createToken",
        summary: "Create a token: api (any node), realm or edge (a root)",
        query: &[],
        body: Some(
            r#"{"type": "object", "required": ["role"], "properties": {"role": {"type": "string", "enum": ["api", "realm", "edge"]}, "name": {"type": "string"}, "ttl": {"type": "string", "description": "a duration: 90s, 10m, 1h, 7d (default 1h)"}, "ttl_ms": {"type": "integer", "minimum": 1, "description": "the same in milliseconds; give one of ttl and ttl_ms"}}}"#,
        ),
        success: 201,
        media: JSON,
    },
    Operation {
        method: "delete",
        path: "/v1/tokens/{name}",
        id: "revokeToken",
        summary: "Revoke a token (or a child of the tree)",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/patches",
        id: "listPatches",
        summary: "The patches agent runs left, newest first (as `palm patches list --json`)",
        query: &[("job", "string", "Only this job's patches")],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/patches/{id}",
        id: "showPatch",
        summary: "One patch with its diff and secret-scan findings",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/patches/{id}/apply",
        id: "applyPatch",
        summary: "Land a patch on a branch through the merge queue; a conflict changes nothing and answers 409 with the conflicting paths",
        query: &[],
        body: Some(
            r#"{"type": "object", "properties": {"to": {"type": "string", "description": "The branch to land on (default: the checkout's current branch)"}}}"#,
        ),
        success: 200,
        media: JSON,
    },
    Operation {
        method: "post",
        path: "/v1/patches/{id}/revert",
        id: "revertPatch",
        summary: "Undo one applied patch",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/worktrees",
        id: "listWorktrees",
        summary: "The jobs' git worktrees on this node, with disk use and each job's status",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/jobs/{id}/artifacts",
        id: "listArtifacts",
        summary: "A job's artifacts on this node (a check's log, ...): name, bytes, modified_at",
        query: &[],
        body: None,
        success: 200,
        media: JSON,
    },
    Operation {
        method: "get",
        path: "/v1/jobs/{id}/artifacts/{name}",
        id: "getArtifact",
        summary: "One artifact's bytes (text/plain for logs)",
        query: &[],
        body: None,
        success: 200,
        media: "application/octet-stream",
    },
];

fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|p| p.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
        .collect()
}

/// The document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for op in OPERATIONS {
        let mut parameters: Vec<Value> = path_params(op.path)
            .into_iter()
            .map(|name| {
                json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}})
            })
            .collect();
        for (name, kind, description) in op.query {
            parameters.push(json!({"name": name, "in": "query", "required": false,
                                   "description": description, "schema": {"type": kind}}));
        }
        let mut operation = json!({
            "operationId": op.id,
            "summary": op.summary,
            "responses": {
                op.success.to_string(): {
                    "description": if op.media == JSON { "Success: the same JSON as the CLI's --json" } else { "Success: the file's bytes" },
                    "content": {op.media: {"schema": {}}}
                },
                "default": {
                    "description": "A problem (RFC 9457)",
                    "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
                }
            }
        });
        if !parameters.is_empty() {
            operation["parameters"] = Value::Array(parameters);
        }
        if let Some(body) = op.body {
            let schema: Value = serde_json::from_str(body).unwrap_or(json!({}));
            operation["requestBody"] = json!({
                "required": true,
                "content": {"application/json": {"schema": schema}}
            });
        }
        let entry = paths.entry(op.path.to_owned()).or_insert_with(|| json!({}));
        entry[op.method] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Palm",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Palm's REST API: the node's control requests over HTTP, with the shapes of the CLI's --json. From beyond loopback every request needs `Authorization: Bearer TOKEN` (`palm token create --role api`)."
        },
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": {
                "Problem": {
                    "type": "object",
                    "required": ["type", "title", "status", "detail", "kind", "exit"],
                    "properties": {
                        "type": {"type": "string"},
                        "title": {"type": "string"},
                        "status": {"type": "integer"},
                        "detail": {"type": "string"},
                        "kind": {"type": "string"},
                        "hint": {"type": "string"},
                        "exit": {"type": "integer"}
                    }
                }
            },
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "An API token (palm token create --role api); not needed from loopback"}
            }
        },
        "security": [{}, {"bearer": []}]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_body_schema_is_json_and_ids_are_unique() {
        let mut ids = std::collections::BTreeSet::new();
        for op in OPERATIONS {
            assert!(ids.insert(op.id), "duplicate {}", op.id);
            if let Some(body) = op.body {
                serde_json::from_str::<Value>(body).expect(op.id);
            }
        }
        let doc = document();
        assert_eq!(doc["paths"]["/v1/jobs"]["post"]["operationId"], "submitJob");
        assert_eq!(
            doc["paths"]["/v1/jobs/{id}/continue"]["post"]["parameters"][0]["name"],
            "id"
        );
    }
}
