//! The verbs every surface shares, written once: what a CLI command, an MCP tool and (next)
//! a REST handler do around the control requests — read a FLOW argument, parse a
//! duration, turn a response into a result with its exit code, refuse a continue the node
//! would refuse (before booting anything), read one place spec, wait for a job to
//! settle with progress.

use crate::exit::{CliError, Code};
use crate::protocol::{ErrorBody, FlowArg, Request, Response};
use palm_actors::job::JobStatus;
use palm_actors::place::{PlaceSpec, parse_places};
use serde_json::{Map, Value, json};
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

/// Parses a duration like `500ms`, `30s`, `5m`, `1h`.
pub fn duration_ms(text: &str, flag: &str) -> Result<u64, CliError> {
    let parsed = text
        .parse::<u64>()
        .ok()
        .or_else(|| palm_actors::definition::parse_duration_ms(text));
    parsed.ok_or_else(|| {
        CliError::usage(
            "invalid_input",
            format!("{flag} `{text}` is not a duration (e.g. 500ms, 30s, 5m)"),
        )
    })
}

/// A FLOW argument: a file (read and parsed now, so a broken flow is refused before any
/// store is touched) or the name of a stored flow.
pub fn flow_arg(text: &str) -> Result<FlowArg, CliError> {
    let path = Path::new(text);
    if path.is_file() {
        let source = std::fs::read_to_string(path)
            .map_err(|e| CliError::usage("invalid_flow", format!("cannot read {text}: {e}")))?;
        if let Err(diagnostics) = palm_actors::definition::parse(&source, text) {
            let first = diagnostics[0].to_string();
            let more = diagnostics.len() - 1;
            let message = if more == 0 {
                first
            } else {
                format!(
                    "{first}
({more} more; `palm flows validate {text}` lists all)"
                )
            };
            return Err(CliError::usage("invalid_flow", message));
        }
        return Ok(FlowArg::Source {
            source,
            origin: text.to_owned(),
        });
    }
    if path.is_dir() {
        return Err(CliError::usage(
            "invalid_flow",
            format!("{text} is a directory, not a flow file"),
        ));
    }
    let looks_like_path = text.contains('/')
        || [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| text.ends_with(ext));
    if looks_like_path {
        return Err(CliError::usage("invalid_flow", format!("no such flow file: {text}"))
            .with_hint("FLOW is a path to a YAML/JSON file or the name of a stored flow (`palm flows list`)"));
    }
    Ok(FlowArg::Stored {
        name: text.to_owned(),
        revision: None,
    })
}

/// `flow` at `revision` (`--revision N`): only a stored flow has revisions.
pub fn at_revision(flow: FlowArg, revision: Option<u32>) -> Result<FlowArg, CliError> {
    match (flow, revision) {
        (flow, None) => Ok(flow),
        (FlowArg::Stored { name, .. }, Some(revision)) => Ok(FlowArg::Stored {
            name,
            revision: Some(revision),
        }),
        (FlowArg::Source { origin, .. }, Some(_)) => Err(CliError::usage(
            "invalid_input",
            format!("a revision names a version of a stored flow; {origin} is a file"),
        )
        .with_hint("`palm flows show NAME` lists a stored flow's revisions")),
    }
}

/// A team's board in its job's status view: the state value a `team` node saves (the
/// one with `tasks` and a `mailbox`, whatever its key).
pub fn team_board(view: &Value) -> Option<&Value> {
    view["state"]
        .as_object()?
        .values()
        .find(|v| v.get("tasks").is_some() && v.get("mailbox").is_some())
}

/// A response as a command's result: its value, or the error with its exit code.
pub fn into_result(response: Response) -> Result<Value, CliError> {
    if response.ok {
        return Ok(response.result.unwrap_or(Value::Null));
    }
    let error = response
        .error
        .unwrap_or_else(|| ErrorBody::failure("error", "the node refused the request"));
    Err(CliError {
        code: match error.exit {
            2 => Code::Usage,
            3 => Code::JobFailed,
            4 => Code::JobWaiting,
            5 => Code::JobCancelled,
            6 => Code::AlreadyRunning,
            _ => Code::Failure,
        },
        kind: error.kind,
        message: error.message,
        hint: error.hint,
        job: None,
    })
}

/// The refusals a node would give a continue, decided from a status view.
pub fn check_continue(view: &Value, job: &str, key: &str, input: &Value) -> Result<(), CliError> {
    use palm_actors::job::ApplyError;
    let status = view["status"]
        .as_str()
        .and_then(JobStatus::parse)
        .unwrap_or(JobStatus::Pending);
    if status.is_terminal() {
        let err = ApplyError::Terminal {
            job: job.to_owned(),
            status,
        };
        return Err(CliError::usage("job_finished", err.to_string()));
    }
    let waits = view["waiting_on"].as_array().cloned().unwrap_or_default();
    let Some(wait) = waits.iter().find(|w| w["key"] == key) else {
        let waiting = waits
            .iter()
            .filter_map(|w| w["key"].as_str().map(str::to_owned))
            .collect();
        let err = ApplyError::NotWaitingOn {
            job: job.to_owned(),
            key: key.to_owned(),
            waiting,
        };
        return Err(CliError::usage("not_waiting", err.to_string()));
    };
    let choices: Vec<palm_actors::json::Json> = wait["choices"]
        .as_array()
        .map(|c| c.iter().cloned().map(palm_actors::json::Json).collect())
        .unwrap_or_default();
    let schema = wait
        .get("schema")
        .filter(|s| !s.is_null())
        .cloned()
        .map(palm_actors::json::Json);
    if let Err(problems) = palm_actors::job::validate_wait_input(&choices, schema.as_ref(), input) {
        let err = ApplyError::InvalidInput {
            key: key.to_owned(),
            problems,
        };
        return Err(CliError::usage("invalid_input", err.to_string()));
    }
    Ok(())
}

/// Parses `{places: {NAME: place}}` with the config parser.
pub fn one_spec(name: &str, place: Map<String, Value>) -> Result<PlaceSpec, CliError> {
    let document = json!({ "places": { name: place } }).to_string();
    let parsed = palm_actors::definition::yaml::read(&document)
        .map_err(|e| CliError::usage("invalid_input", e.message))?;
    let places = parsed.get("places").unwrap_or(&parsed);
    match parse_places(places) {
        Ok(mut specs) if specs.len() == 1 => Ok(specs.remove(0)),
        Ok(_) => Err(CliError::usage("invalid_input", "expected one place")),
        Err(errors) => {
            let first = &errors[0];
            let err = CliError::usage("invalid_input", first.message.clone());
            Err(match &first.hint {
                Some(hint) => err.with_hint(hint.clone()),
                None => err,
            })
        }
    }
}

/// The wait of a wizard's current step in a status document (its schema carries the
/// step as `x-palm-wizard`), if the job waits on one.
pub fn wizard_wait(view: &Value) -> Option<&Value> {
    view["waiting_on"]
        .as_array()?
        .iter()
        .find(|wait| wait["schema"]["x-palm-wizard"].is_object())
}

/// A value as a person reads and types it: text as is, nothing for null, anything else
/// as JSON.
pub fn typed_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What a person typed, read as `schema` expects: text for a string schema, else JSON
/// (text when it is no JSON).
pub fn typed_value(text: &str, schema: &Value) -> Value {
    if schema["type"] == "string" {
        return Value::String(text.to_owned());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// True when a status view shows a settled job (terminal, or waiting for input).
pub fn is_settled(view: &Value) -> bool {
    view["status"]
        .as_str()
        .and_then(JobStatus::parse)
        .is_some_and(JobStatus::is_settled)
}

/// Where a surface sends its requests (a CLI target, an MCP server's control link).
pub trait Caller {
    /// What a refused or failed request is, for this surface.
    type Error;
    /// Sends one request and returns its result.
    fn call(&mut self, request: Request)
    -> impl Future<Output = Result<Value, Self::Error>> + Send;
}

/// Waits for `job` to settle, within `timeout_ms`: sends `Request::Wait` through
/// `caller` in slices of `slice_ms`, and between slices tells `progress` (the round, the
/// view as it is). Returns the last view with `"settled": true|false`. Used by
/// `palm run`/`palm continue` and by MCP's `palm_submit`/`palm_continue` with `wait`.
pub async fn settle<C, Progress, Reported>(
    caller: &mut C,
    job: &str,
    timeout_ms: u64,
    slice_ms: u64,
    mut progress: Progress,
) -> Result<Value, C::Error>
where
    C: Caller,
    Progress: FnMut(u32, &Value) -> Reported,
    Reported: Future<Output = ()>,
{
    let started = Instant::now();
    let mut round = 0u32;
    loop {
        let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let left = timeout_ms.saturating_sub(elapsed);
        let request = Request::Wait {
            job: job.to_owned(),
            timeout_ms: Some(left.min(slice_ms.max(1))),
        };
        let mut view = caller.call(request).await?;
        let done = is_settled(&view);
        if done || left == 0 {
            if let Some(object) = view.as_object_mut() {
                object.insert("settled".into(), json!(done));
            }
            return Ok(view);
        }
        round += 1;
        progress(round, &view).await;
        // A node that answers a wait at once without the job settling (it should not)
        // must not make this loop spin.
        let due = Duration::from_millis(u64::from(round) * slice_ms / 2);
        if started.elapsed() < due {
            tokio::time::sleep(Duration::from_millis(slice_ms / 2)).await;
        }
    }
}

/// One line on a job still moving: `job J running (2 effects in flight, 14 s)`.
pub fn progress_line(job: &str, view: &Value, since: Instant) -> String {
    let in_flight = view["effects"].as_array().map_or(0, |effects| {
        effects.iter().filter(|e| e["state"] != "completed").count()
    });
    format!(
        "job {job} {} ({in_flight} effects in flight, {:.0} s)",
        view["status"].as_str().unwrap_or_default(),
        since.elapsed().as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_text_follows_the_answer_schema() {
        use serde_json::json;
        assert_eq!(typed_value("42", &json!({"type": "string"})), json!("42"));
        assert_eq!(typed_value("42", &json!({"type": "integer"})), json!(42));
        assert_eq!(typed_value("[1, 2]", &json!(true)), json!([1, 2]));
        assert_eq!(
            typed_value("plain words", &json!(true)),
            json!("plain words")
        );
        assert_eq!(typed_text(&json!("a")), "a");
        assert_eq!(typed_text(&json!(null)), "");
        assert_eq!(typed_text(&json!([1])), "[1]");
        let view = json!({"waiting_on": [{"key": "a", "schema": {}},
                                         {"key": "w", "schema": {"x-palm-wizard": {"step": "s"}}}]});
        assert_eq!(wizard_wait(&view).map(|w| &w["key"]), Some(&json!("w")));
    }

    /// A node that says `running` for the first `running` waits, then `succeeded`.
    struct Scripted {
        running: u32,
        asked: Vec<Option<u64>>,
    }

    impl Caller for Scripted {
        type Error = CliError;

        fn call(
            &mut self,
            request: Request,
        ) -> impl Future<Output = Result<Value, CliError>> + Send {
            let Request::Wait { timeout_ms, .. } = request else {
                panic!("settle only waits");
            };
            self.asked.push(timeout_ms);
            let status = if self.asked.len() as u32 > self.running {
                "succeeded"
            } else {
                "running"
            };
            std::future::ready(Ok(json!({"job": "j-1", "status": status, "effects": []})))
        }
    }

    #[tokio::test]
    async fn settle_re_asks_in_slices_and_reports_progress_until_settled() {
        let mut node = Scripted {
            running: 2,
            asked: Vec::new(),
        };
        let mut rounds = Vec::new();
        let view = settle(&mut node, "j-1", 60_000, 20, |round, view| {
            rounds.push((round, view["status"].clone()));
            std::future::ready(())
        })
        .await
        .expect("settles");
        assert_eq!(view["status"], "succeeded");
        assert_eq!(view["settled"], true);
        assert_eq!(rounds, vec![(1, json!("running")), (2, json!("running"))]);
        assert_eq!(node.asked, vec![Some(20); 3], "every wait is one slice");
    }

    #[tokio::test]
    async fn settle_gives_up_at_its_timeout_with_the_job_as_it_is() {
        let mut node = Scripted {
            running: u32::MAX,
            asked: Vec::new(),
        };
        let view = settle(&mut node, "j-1", 0, 20, |_, _| std::future::ready(()))
            .await
            .expect("answers");
        assert_eq!(view["status"], "running");
        assert_eq!(view["settled"], false);
        assert_eq!(node.asked, vec![Some(0)]);
    }

    #[test]
    fn a_continue_the_node_would_refuse_is_refused_here() {
        let waiting = json!({
            "status": "waiting",
            "waiting_on": [{"key": "approve", "choices": [true, false]}],
        });
        assert!(check_continue(&waiting, "j-1", "approve", &json!(true)).is_ok());
        let wrong_key = check_continue(&waiting, "j-1", "other", &json!(true)).unwrap_err();
        assert_eq!(wrong_key.kind, "not_waiting");
        let bad_input = check_continue(&waiting, "j-1", "approve", &json!("maybe")).unwrap_err();
        assert_eq!(bad_input.kind, "invalid_input");
        let done = json!({"status": "succeeded"});
        let finished = check_continue(&done, "j-1", "approve", &json!(true)).unwrap_err();
        assert_eq!(finished.kind, "job_finished");
        assert_eq!(finished.code, Code::Usage);
    }
}
