//! Providers declared in `palm.yaml`: a node's own `call` targets, without rebuilding
//! Palm.
//!
//! ```yaml
//! providers:
//!   ticket:
//!     command: [python3, tools/ticket.py]   # no shell; relative to the data directory
//!     schema: {type: object, required: [title], properties: {title: {type: string}}}
//!     timeout: 30s
//!   weather:
//!     url: https://api.example.com/weather  # POST, the arguments as JSON
//!     headers: {Authorization: "Bearer ..."}
//! ```
//!
//! The arguments are checked against `schema` before anything runs. A **command** gets
//! them as one JSON document on stdin and answers with one on stdout (empty stdout is
//! `null`); exit 0 succeeds, anything else fails with the end of stderr as the reason.
//! It runs like a `run` step's command: under the gate, its process group recorded before
//! it starts, stopped by group on timeout or cancel, found and stopped at the next boot if
//! the node dies meanwhile. An **endpoint** gets a POST with the arguments as JSON and an
//! `Idempotency-Key` header (the effect key, so a retried call can be recognised); a 2xx
//! JSON answer is the result. Both see the effect key, so they can be idempotent.

use super::http::Http;
use super::{CallContext, CallFuture, Failure, Provider};
use crate::genome::gated::{self, DRAIN_AFTER_EXIT_MS, GroupGuard, Program, StartError, Started};
use crate::genome::provider::{DeclaredProvider, DeclaredTarget};
use palm_actors::jsonschema::Schema;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The largest result a command may print on stdout.
pub const RESULT_BYTES_MAX: usize = 4 << 20;

/// A call's bound when the declaration sets none.
const TIMEOUT_MS_DEFAULT: u64 = 60_000;

/// A provider from `palm.yaml`.
pub struct Declared {
    spec: DeclaredProvider,
    schema: Option<Schema>,
    /// Where relative programs and working directories are resolved: the data directory.
    base: PathBuf,
    http: Arc<Http>,
}

impl Declared {
    /// A provider for `spec`; a schema that does not compile is refused (the
    /// configuration reader refuses it first, with its line).
    pub fn new(spec: DeclaredProvider, base: &Path, http: Arc<Http>) -> Result<Declared, String> {
        let schema = match &spec.schema {
            Some(source) => Some(
                Schema::compile(source)
                    .map_err(|e| format!("provider `{}`: schema {e}", spec.name))?,
            ),
            None => None,
        };
        Ok(Declared {
            spec,
            schema,
            base: base.to_owned(),
            http,
        })
    }

    fn timeout_ms(&self) -> u64 {
        self.spec.timeout_ms.unwrap_or(TIMEOUT_MS_DEFAULT)
    }

    fn check(&self, args: &Value) -> Result<(), Failure> {
        let Some(schema) = &self.schema else {
            return Ok(());
        };
        let violations = schema.validate(args);
        if violations.is_empty() {
            return Ok(());
        }
        let listed: Vec<String> = violations.iter().take(5).map(|v| v.to_string()).collect();
        Err(Failure::new(format!(
            "{}: the arguments do not match its schema: {}",
            self.spec.name,
            listed.join("; ")
        )))
    }

    async fn run_program(
        &self,
        ctx: &CallContext<'_>,
        argv: &[String],
        env: &std::collections::BTreeMap<String, String>,
        cwd: Option<&Path>,
        args: &Value,
    ) -> Result<Value, Failure> {
        let name = &self.spec.name;
        let cwd = match cwd {
            Some(dir) => self.base.join(dir),
            None => self.base.clone(),
        };
        let mut process = gated::command(&Program::Argv(argv));
        process
            .current_dir(&cwd)
            .env("PALM_JOB_ID", &ctx.effect.job)
            .env("PALM_EFFECT_KEY", &ctx.effect.key)
            .env("PALM_NODE_NAME", &ctx.genome.info.name)
            .env("PALM_PROVIDER", name)
            .envs(env);
        let mut payload = serde_json::to_vec(args).unwrap_or_default();
        payload.push(b'\n');
        let Started {
            mut child,
            pgid,
            recorded,
        } = gated::start(ctx.genome, ctx.effect, &mut process, None, &payload)
            .await
            .map_err(|err| match err {
                StartError::Spawn(e) => Failure::new(format!(
                    "{name}: cannot start {} in {}: {e}",
                    argv[0],
                    cwd.display()
                )),
                StartError::NotStarted => Failure::new(format!(
                    "{name}: not started (the effect is no longer this node's)"
                )),
            })?;
        // Dropped first if the runner gives up on this call (its own timeout, a cancel, a
        // lost lease): the whole group is killed before the record of it is forgotten.
        let guard = GroupGuard(pgid);
        // Stdout is read to its end (so the program never blocks on a full pipe); more
        // than the result's bound is an error, so keeping its last bytes is enough.
        let mut output = gated::Output::take(
            &mut child,
            RESULT_BYTES_MAX,
            ctx.genome.settings.output_bytes_max,
        );
        let timeout_ms = self.timeout_ms();
        let waited = tokio::time::timeout(
            Duration::from_millis(timeout_ms),
            output.wait_for(&mut child),
        )
        .await;
        let Ok(status) = waited else {
            output.stop(&mut child, pgid).await;
            return Err(Failure::new(format!(
                "{name}: timed out after {timeout_ms} ms"
            )));
        };
        // Members of the group other than the program (a daemon it forked) end with it.
        drop(guard);
        drop(recorded);
        let (stdout, stderr) = output
            .finish(Duration::from_millis(DRAIN_AFTER_EXIT_MS))
            .await;
        let stderr = stderr.into_text();
        let status = status.map_err(|e| Failure::new(format!("{name}: cannot wait: {e}")))?;
        let exit_code = status.code();
        if stdout.dropped() > 0 {
            return Err(Failure::new(format!(
                "{name}: printed more than {RESULT_BYTES_MAX} bytes on stdout"
            )));
        }
        let text = String::from_utf8_lossy(stdout.bytes());
        let parsed: Result<Value, _> = if text.trim().is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str(&text)
        };
        if exit_code == Some(0) {
            return parsed.map_err(|e| Failure {
                reason: format!("{name}: stdout is not one JSON document ({e})"),
                value: json!({"stdout": text, "stderr": stderr}),
            });
        }
        let why = match exit_code {
            Some(code) => format!("exited with {code}"),
            None => {
                use std::os::unix::process::ExitStatusExt;
                format!("killed by signal {}", status.signal().unwrap_or_default())
            }
        };
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        Err(Failure {
            reason: match last {
                Some(line) => format!("{name}: {why}: {}", line.trim()),
                None => format!("{name}: {why}"),
            },
            value: json!({
                "exit_code": exit_code,
                "stdout": parsed.unwrap_or(Value::String(text.into_owned())),
                "stderr": stderr,
            }),
        })
    }

    async fn post(
        &self,
        ctx: CallContext<'_>,
        url: &str,
        headers: &std::collections::BTreeMap<String, String>,
        args: Value,
    ) -> Result<Value, Failure> {
        let name = &self.spec.name;
        let mut sent: Map<String, Value> = headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        sent.insert(
            "Idempotency-Key".into(),
            Value::String(ctx.effect.key.clone()),
        );
        sent.insert("X-Palm-Job".into(), Value::String(ctx.effect.job.clone()));
        let request = json!({
            "url": url,
            "method": "POST",
            "headers": sent,
            "body": if args.is_null() { json!({}) } else { args },
            "timeout_ms": self.timeout_ms(),
            "json": true,
        });
        match self.http.call(ctx, request).await {
            Ok(answer) => Ok(answer.get("body").cloned().unwrap_or(Value::Null)),
            Err(failure) => Err(Failure {
                reason: format!(
                    "{name}: {}",
                    failure
                        .reason
                        .strip_prefix("http: ")
                        .unwrap_or(&failure.reason)
                ),
                value: failure.value,
            }),
        }
    }
}

impl Provider for Declared {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn describe(&self) -> Value {
        let (kind, target) = match &self.spec.target {
            DeclaredTarget::Command { argv, .. } => ("command", json!({"command": argv})),
            DeclaredTarget::Endpoint { url, .. } => ("endpoint", json!({"url": url})),
        };
        let description = self.spec.description.clone().unwrap_or_else(|| match kind {
            "command" => "declared in palm.yaml: runs a program, arguments as JSON on stdin, result as JSON on stdout".to_owned(),
            _ => "declared in palm.yaml: POSTs the arguments as JSON, the JSON answer is the result".to_owned(),
        });
        let mut described = json!({
            "name": self.spec.name,
            "description": description,
            "declared": true,
            "kind": kind,
            "timeout_ms": self.timeout_ms(),
            "schema": self.spec.schema,
        });
        if let (Value::Object(out), Value::Object(target)) = (&mut described, target) {
            out.extend(target);
        }
        if let Some(args) = args_from_schema(self.spec.schema.as_ref()) {
            described["args"] = args;
        }
        described
    }

    fn call<'a>(&'a self, ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(async move {
            self.check(&args)?;
            match &self.spec.target {
                DeclaredTarget::Command { argv, env, cwd } => {
                    self.run_program(&ctx, argv, env, cwd.as_deref(), &args)
                        .await
                }
                DeclaredTarget::Endpoint { url, headers } => {
                    self.post(ctx, url, headers, args).await
                }
            }
        })
    }
}

/// One line per property of an object schema, for `palm providers`.
fn args_from_schema(schema: Option<&Value>) -> Option<Value> {
    let schema = schema?;
    let properties = schema.get("properties")?.as_object()?;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let lines: Map<String, Value> = properties
        .iter()
        .map(|(name, property)| {
            let kind = match property.get("type") {
                Some(Value::String(t)) => t.clone(),
                Some(other) => other.to_string(),
                None => "any".to_owned(),
            };
            let mut line = kind;
            if required.contains(&name.as_str()) {
                line.push_str(", required");
            }
            if let Some(about) = property.get("description").and_then(Value::as_str) {
                line.push_str(": ");
                line.push_str(about);
            }
            (name.clone(), Value::String(line))
        })
        .collect();
    Some(Value::Object(lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_listed_from_the_schema() {
        let schema = json!({
            "type": "object",
            "required": ["title"],
            "properties": {
                "title": {"type": "string", "description": "one line"},
                "labels": {"type": "array"},
            },
        });
        let args = args_from_schema(Some(&schema)).expect("object schema");
        assert_eq!(args["title"], "string, required: one line");
        assert_eq!(args["labels"], "array");
        assert_eq!(args_from_schema(None), None);
    }
}
