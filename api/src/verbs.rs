//! The verbs every surface shares, written once: what a CLI command, an MCP tool and (next)
//! a REST handler do around the control requests — read a FLOW argument, parse a
//! duration, turn a response into a result with its exit code, refuse a continue the node
//! would refuse (before booting anything), read one place spec.

use crate::exit::{CliError, Code};
use crate::protocol::{ErrorBody, FlowArg, Response};
use palm_actors::job::JobStatus;
use palm_actors::place::{PlaceSpec, parse_places};
use serde_json::{Map, Value, json};
use std::path::Path;

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
            _ => Code::Failure,
        },
        kind: error.kind,
        message: error.message,
        hint: error.hint,
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
