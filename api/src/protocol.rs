//! The control protocol: newline-delimited JSON requests and responses over `DIR/palm.sock`.
//!
//! One request per line, one response per line, in order. A request is an object with an
//! `op` field; a response is `{"ok": true, "result": ...}` or
//! `{"ok": false, "error": {"kind", "message", "hint", "exit"}}`. The CLI and the MCP server
//! speak it; so can any script (`socat - UNIX:$PALM_HOME/palm.sock`).

use serde::{Deserialize, Serialize};

/// Bound on one request line (a flow source travels inside `submit`).
pub const REQUEST_BYTES_MAX: usize = 4 << 20;

/// Longest a `wait` request may block (a longer `timeout_ms` is cut to this).
pub const WAIT_MS_MAX: u64 = 24 * 3600 * 1000;

/// Which flow to run: a stored name (optionally a revision) or source text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FlowArg {
    /// Source text (YAML or JSON) and where it came from.
    Source {
        /// The text.
        source: String,
        /// A path or `<inline>`, for error messages.
        origin: String,
    },
    /// A stored definition.
    Stored {
        /// Flow name.
        name: String,
        /// Revision, or the latest.
        #[serde(default)]
        revision: Option<u32>,
    },
}

/// A request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Who are you?
    Ping,
    /// Start a job.
    Submit {
        /// The flow.
        flow: FlowArg,
        /// Input fields.
        #[serde(default)]
        input: serde_json::Map<String, serde_json::Value>,
        /// `key=value` arguments, typed by the flow's declared inputs.
        #[serde(default)]
        args: Vec<String>,
        /// Set by Palm itself when a job starts another (the `palm` provider): the start
        /// key makes it idempotent; depth and chain guard against loops.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        started_by: Option<palm_actors::interest::StartedBy>,
        /// The node to home the job (a root or a realm of the tree, by name): the submit
        /// travels there (`palm submit --node`, the `palm` provider's `node`). Absent:
        /// the nearest home, this node unless it is an edge.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// Continue a parked wait.
    Continue {
        /// Job id.
        job: String,
        /// Wait key.
        key: String,
        /// The input.
        #[serde(default)]
        input: serde_json::Value,
    },
    /// Cancel a job.
    Cancel {
        /// Job id.
        job: String,
        /// Why.
        #[serde(default)]
        reason: Option<String>,
    },
    /// Start a new job that retries an ended one from a node of its tree: what the
    /// ended job did before the node began is kept, the node and what came after run
    /// again (`palm retry`).
    Retry {
        /// The ended job.
        job: String,
        /// The node's path (`0.2.1`, as `palm inspect` shows it).
        from: String,
        /// Run this revision of the flow (it must derive the same history up to the
        /// node); absent: the revision the job ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<u32>,
    },
    /// A job's status.
    Status {
        /// Job id.
        job: String,
    },
    /// List jobs.
    Jobs {
        /// Only this status.
        #[serde(default)]
        status: Option<String>,
        /// At most this many.
        #[serde(default)]
        limit: Option<usize>,
        /// The jobs homed at this node of the tree (a root or a realm, by name): the
        /// request travels there (`palm jobs --node`). Absent: the nearest home's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// The waiting jobs, each with its status document (`waiting_on`: keys, prompts,
    /// schemas, choices), a page at a time, with how many wait in all (`total`): an inbox
    /// in one request.
    Waits {
        /// At most this many, in submission order.
        #[serde(default)]
        limit: Option<usize>,
        /// Skip this many first (a page of the inbox).
        #[serde(default)]
        offset: Option<usize>,
    },
    /// A job's journal and tree.
    Inspect {
        /// Job id.
        job: String,
    },
    /// Answer when the job is terminal or waiting (or after `timeout_ms`).
    Wait {
        /// Job id.
        job: String,
        /// Give up after this long and answer with the current status.
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// Store a definition revision.
    FlowsAdd {
        /// Source text.
        source: String,
        /// Where it came from.
        origin: String,
    },
    /// Move unfinished jobs of a flow to another of its revisions: those whose history
    /// the revision derives unchanged (`palm flows migrate`).
    FlowsMigrate {
        /// Flow name.
        name: String,
        /// The target revision.
        to: u32,
        /// Only these jobs (empty: every unfinished job of the flow).
        #[serde(default)]
        jobs: Vec<String>,
        /// Check and report only; move nothing.
        #[serde(default)]
        dry_run: bool,
    },
    /// List stored flows.
    FlowsList,
    /// Show one stored flow.
    FlowsShow {
        /// Flow name.
        name: String,
        /// Revision, or the latest.
        #[serde(default)]
        revision: Option<u32>,
    },
    /// The node's live self-report.
    Vitality,
    /// The place book: every place with its state.
    Places,
    /// Add a place at run time (spawned or adopted); it is stored and survives restarts.
    PlacesAdd {
        /// What to add.
        spec: palm_actors::place::PlaceSpec,
    },
    /// Remove a place added at run time (a spawned one is stopped first).
    PlacesRemove {
        /// Place name.
        name: String,
    },
    /// Restart a place (stop and start a spawned one; probe an adopted one afresh).
    PlacesRestart {
        /// Place name.
        name: String,
    },
    /// The node journal's place (and link) events, oldest first.
    PlacesEvents {
        /// Only this place's events.
        #[serde(default)]
        place: Option<String>,
        /// At most this many (the newest).
        #[serde(default)]
        limit: Option<usize>,
    },
    /// Emit a named event: interests listening to it (`on: {event: NAME}`) start flows.
    Emit {
        /// Event name.
        event: String,
        /// Its data (`event.data` in the started job's input).
        #[serde(default)]
        data: serde_json::Value,
    },
    /// The interests of the stored flows and their pending starts.
    Interests,
    /// The tree as this node sees it.
    Tree,
    /// The `kv` provider's namespace: get, put, delete or list.
    Kv {
        /// `get`, `put`, `delete` or `list`.
        action: String,
        /// The key (a prefix for `list`).
        #[serde(default)]
        key: String,
        /// The value, for `put`.
        #[serde(default)]
        value: serde_json::Value,
    },
    /// Issue a one-time join token (a root only).
    TokenCreate {
        /// The child's name.
        name: String,
        /// `realm` or `edge`.
        role: String,
        /// Lifetime in ms.
        ttl_ms: u64,
    },
    /// Revoke a child (its certificates, its unused tokens and its name).
    TokenRevoke {
        /// The child's name.
        name: String,
    },
    /// One bounded step of job retention (`palm jobs gc` repeats it until `cursor` comes
    /// back empty): ended jobs older than `journal_ms` keep only their summary, older
    /// than `summary_ms` (absent: for ever) they are forgotten.
    JobsGc {
        /// Where to continue (from the previous step's answer); absent: the beginning.
        #[serde(default)]
        cursor: Option<String>,
        /// Keep an ended job's journal this long (ms).
        journal_ms: u64,
        /// Keep an ended job's summary this long (ms); absent: for ever.
        #[serde(default)]
        summary_ms: Option<u64>,
        /// Jobs visited in this step (bounded by the node).
        #[serde(default)]
        budget: Option<usize>,
    },
}

impl Request {
    /// True for requests the places organ answers (not the kernel).
    pub fn is_places(&self) -> bool {
        matches!(
            self,
            Request::Places
                | Request::PlacesAdd { .. }
                | Request::PlacesRemove { .. }
                | Request::PlacesRestart { .. }
                | Request::PlacesEvents { .. }
        )
    }
}

/// A refused or failed request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable kind (`unknown_job`, `invalid_input`, `not_waiting`, ...).
    pub kind: String,
    /// One line for people.
    pub message: String,
    /// What to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The exit code a CLI should use.
    pub exit: u8,
}

impl ErrorBody {
    /// An invalid-input error (exit 2).
    pub fn invalid(kind: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            kind: kind.to_owned(),
            message: message.into(),
            hint: None,
            exit: 2,
        }
    }

    /// Any other failure (exit 1).
    pub fn failure(kind: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            kind: kind.to_owned(),
            message: message.into(),
            hint: None,
            exit: 1,
        }
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> ErrorBody {
        self.hint = Some(hint.into());
        self
    }
}

/// A response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Whether the request succeeded.
    pub ok: bool,
    /// The answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// The failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl Response {
    /// A success.
    pub fn ok(result: serde_json::Value) -> Response {
        Response {
            ok: true,
            result: Some(result),
            error: None,
        }
    }

    /// A failure.
    pub fn err(error: ErrorBody) -> Response {
        Response {
            ok: false,
            result: None,
            error: Some(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_as_documented() {
        let text = r#"{"op":"submit","flow":{"name":"hello"},"input":{"who":"x"}}"#;
        let request: Request = serde_json::from_str(text).expect("parse");
        assert_eq!(
            request,
            Request::Submit {
                flow: FlowArg::Stored {
                    name: "hello".into(),
                    revision: None
                },
                input: serde_json::json!({"who": "x"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                args: vec![],
                started_by: None,
                node: None,
            }
        );
        let text = r#"{"op":"submit","flow":{"source":"name: x","origin":"<inline>"}}"#;
        assert!(matches!(
            serde_json::from_str::<Request>(text),
            Ok(Request::Submit {
                flow: FlowArg::Source { .. },
                ..
            })
        ));
        assert!(serde_json::from_str::<Request>(r#"{"op":"explode"}"#).is_err());
        let ok = serde_json::to_string(&Response::ok(serde_json::json!(1))).expect("json");
        assert_eq!(ok, r#"{"ok":true,"result":1}"#);
    }
}
