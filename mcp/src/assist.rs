//! `palm_assist`: given a goal in words, which tool and arguments fit.
//!
//! Deterministic on purpose (no model): the words of the goal vote for tools by keyword
//! stems, the node's state fills in the arguments (the job that waits, the key it waits
//! on, an input its schema accepts, the flow that was named), and a fixed order breaks
//! ties. [`suggest`] is a pure function of the goal and a [`Seen`] snapshot, so it is
//! tested without a node; [`run`] gathers the snapshot with ordinary control requests.

use super::control_link::ControlLink;
use super::tools::{Answer, ToolError, ask};
use palm_api::protocol::Request;
use serde_json::{Map, Value, json};

/// Waiting jobs whose waits are looked up in detail (key, prompt, schema).
pub const WAITING_DETAILED_MAX: usize = 10;

/// Jobs looked at (the newest).
pub const JOBS_SEEN_MAX: usize = 50;

/// Alternatives offered besides the best suggestion.
pub const ALTERNATIVES_MAX: usize = 3;

/// A job as assist sees it.
#[derive(Clone, Debug, Default)]
pub struct JobSeen {
    /// Job id.
    pub job: String,
    /// Flow name.
    pub flow: String,
    /// Status.
    pub status: String,
    /// The waits it is parked on (`key`, `prompt`, `choices`, `schema`), when known.
    pub waits: Vec<Value>,
}

/// A stored flow as assist sees it.
#[derive(Clone, Debug, Default)]
pub struct FlowSeen {
    /// Flow name.
    pub name: String,
    /// Names of the inputs it requires (known only for flows the goal names).
    pub required: Option<Vec<String>>,
}

/// What the node showed: newest jobs first.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Stored flows.
    pub flows: Vec<FlowSeen>,
    /// Jobs, newest first.
    pub jobs: Vec<JobSeen>,
}

/// Tools in tie-breaking order, each with the stems that vote for it.
const VOTES: &[(&str, &[&str])] = &[
    (
        "palm_continue",
        &[
            "approv", "continu", "resum", "answer", "respond", "reply", "confirm", "accept",
            "reject", "deny", "denied", "declin", "unblock", "proceed", "input", "ship", "lgtm",
            "sign", "allow",
        ],
    ),
    (
        "palm_cancel",
        &["cancel", "abort", "kill", "stop", "terminat", "halt"],
    ),
    (
        "palm_submit",
        &[
            "run", "start", "submit", "launch", "execut", "kick", "trigger", "deploy", "begin",
        ],
    ),
    (
        "palm_inspect",
        &[
            "inspect", "journal", "why", "fail", "debug", "trace", "event", "history", "log",
            "error", "wrong", "broke",
        ],
    ),
    (
        "palm_status",
        &[
            "status", "progress", "state", "check", "how", "done", "finish", "result", "outcome",
        ],
    ),
    (
        "palm_jobs",
        &[
            "jobs", "list", "which", "waiting", "pending", "running", "recent", "all", "what",
        ],
    ),
    (
        "palm_flows",
        &[
            "flow",
            "definition",
            "validat",
            "schema",
            "yaml",
            "workflow",
            "author",
            "write",
            "describe",
            "availabl",
        ],
    ),
    (
        "palm_places",
        &[
            "place",
            "workload",
            "service",
            "server",
            "database",
            "probe",
            "readiness",
            "ready",
            "spawn",
            "adopt",
        ],
    ),
    (
        "palm_vitality",
        &[
            "vitality", "health", "load", "seat", "queue", "memory", "cpu", "busy", "capacity",
        ],
    ),
    (
        "palm_tree",
        &[
            "tree", "topology", "node", "parent", "child", "link", "cluster", "realm", "edge",
            "root",
        ],
    ),
];

/// Words that turn an approval into a refusal.
const NEGATIVE: &[&str] = &[
    "reject",
    "deny",
    "denied",
    "declin",
    "refus",
    "disapprov",
    "not",
    "no",
    "don't",
    "dont",
    "veto",
    "block",
    "don",
];

const STATUSES: &[&str] = &[
    "pending",
    "running",
    "waiting",
    "succeeded",
    "failed",
    "cancelled",
];

/// The goal split into lowercase words; identifiers (`ab-12`, `examples/x.yaml`,
/// `who=world`) stay whole.
fn words(goal: &str) -> Vec<String> {
    goal.split(|c: char| c.is_whitespace() || ",;:!?()[]{}\"'`".contains(c))
        .map(|w| w.trim_matches(|c: char| c == '.' || c == '-').to_owned())
        .filter(|w| !w.is_empty())
        .collect()
}

fn has_stem(words: &[String], stem: &str) -> bool {
    words.iter().any(|w| w.to_lowercase().starts_with(stem))
}

fn status_word(words: &[String]) -> Option<&'static str> {
    for word in words {
        let word = word.to_lowercase();
        for status in STATUSES {
            // "failing" → failed, "waits" → waiting, "canceled" → cancelled.
            let stem = &status[..4];
            if word.starts_with(stem) {
                return Some(status);
            }
        }
    }
    None
}

/// A word shaped like a job id (`TAG-N`).
fn looks_like_job(word: &str) -> bool {
    word.split_once('-').is_some_and(|(tag, n)| {
        !tag.is_empty() && !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())
    })
}

/// `key=value` words, typed like JSON when they parse as JSON.
fn assignments(words: &[String]) -> Map<String, Value> {
    let mut input = Map::new();
    for word in words {
        if let Some((key, value)) = word.split_once('=')
            && !key.is_empty()
            && key.chars().all(|c| c.is_alphanumeric() || c == '_')
        {
            let value =
                serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
            input.insert(key.to_owned(), value);
        }
    }
    input
}

fn flow_file(words: &[String]) -> Option<String> {
    words
        .iter()
        .find(|w| {
            [".yaml", ".yml", ".json"]
                .iter()
                .any(|ext| w.to_lowercase().ends_with(ext))
        })
        .cloned()
}

/// An input a wait accepts, from its choices or schema and the goal's polarity; `None`
/// means the agent has to fill something in (named in the reason).
fn input_for(wait: &Value, negative: bool, words: &[String]) -> (Value, Option<String>) {
    if let Some(choices) = wait["choices"].as_array().filter(|c| !c.is_empty()) {
        let named = choices.iter().find(|choice| {
            let text = match choice {
                Value::String(s) => s.to_lowercase(),
                other => other.to_string(),
            };
            words.iter().any(|w| w.to_lowercase() == text)
        });
        let picked = named.cloned().unwrap_or_else(|| choices[0].clone());
        let note = named
            .is_none()
            .then(|| format!("pick one of the choices {}", Value::Array(choices.clone())));
        return (picked, note);
    }
    let schema = &wait["schema"];
    match schema["type"].as_str() {
        Some("boolean") => (json!(!negative), None),
        Some("object") => {
            let mut input = Map::new();
            let mut missing = Vec::new();
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for name in required {
                let property = &schema["properties"][name];
                match property["type"].as_str() {
                    Some("boolean") => {
                        input.insert(name.to_owned(), json!(!negative));
                    }
                    _ => match property["enum"].as_array().and_then(|e| e.first()) {
                        Some(first) => {
                            input.insert(name.to_owned(), first.clone());
                        }
                        None => missing.push(format!(
                            "`{name}` ({})",
                            property["type"].as_str().unwrap_or("any")
                        )),
                    },
                }
            }
            let note = (!missing.is_empty()).then(|| format!("fill in {}", missing.join(", ")));
            (Value::Object(input), note)
        }
        Some(other) => (Value::Null, Some(format!("the wait expects a {other}"))),
        None if negative => (json!(false), None),
        None => (json!(true), None),
    }
}

struct Pick {
    tool: &'static str,
    arguments: Value,
    reason: String,
}

fn pick(tool: &'static str, arguments: Value, reason: impl Into<String>) -> Pick {
    Pick {
        tool,
        arguments,
        reason: reason.into(),
    }
}

/// Arguments for `tool` given what the goal names and what the node has.
fn arguments_for(tool: &'static str, goal: &Goal<'_>, seen: &Seen) -> Pick {
    let job_named = goal
        .job
        .and_then(|id| seen.jobs.iter().find(|j| j.job == id));
    match tool {
        "palm_continue" => {
            let waiting: Vec<&JobSeen> =
                seen.jobs.iter().filter(|j| j.status == "waiting").collect();
            if let Some(named) = job_named.filter(|j| j.status != "waiting") {
                return pick(
                    "palm_status",
                    json!({"job": named.job}),
                    format!(
                        "job {} is {}, not waiting: nothing to continue",
                        named.job, named.status
                    ),
                );
            }
            let chosen = job_named
                .or_else(|| {
                    goal.flow
                        .and_then(|flow| waiting.iter().copied().find(|j| j.flow == flow))
                })
                .or_else(|| waiting.first().copied());
            let Some(job) = chosen else {
                return pick(
                    "palm_jobs",
                    json!({"status": "waiting"}),
                    "no job waits for input right now; list the waiting jobs to be sure",
                );
            };
            let wait = job
                .waits
                .iter()
                .find(|w| {
                    w["key"]
                        .as_str()
                        .is_some_and(|k| goal.words.iter().any(|w| w == k))
                })
                .or_else(|| job.waits.first());
            let Some(wait) = wait else {
                return pick(
                    "palm_status",
                    json!({"job": job.job}),
                    format!(
                        "job {} waits, but on what is not known yet: its status names the key",
                        job.job
                    ),
                );
            };
            let key = wait["key"].as_str().unwrap_or_default();
            let (input, note) = input_for(wait, goal.negative, &goal.words);
            let mut reason = format!("job {} ({}) waits on `{key}`", job.job, job.flow);
            if let Some(prompt) = wait["prompt"].as_str() {
                reason.push_str(&format!(": \"{prompt}\""));
            }
            if waiting.len() > 1 && job_named.is_none() {
                reason.push_str(&format!(
                    "; {} jobs wait, this is the newest — name a job id to choose another",
                    waiting.len()
                ));
            }
            if let Some(note) = note {
                reason.push_str(&format!("; {note}"));
            }
            pick(
                "palm_continue",
                json!({"job": job.job, "key": key, "input": input}),
                reason,
            )
        }
        "palm_cancel" => {
            if let Some(named) = job_named
                .filter(|j| ["succeeded", "failed", "cancelled"].contains(&j.status.as_str()))
            {
                return pick(
                    "palm_status",
                    json!({"job": named.job}),
                    format!(
                        "job {} already {}: there is nothing to cancel",
                        named.job, named.status
                    ),
                );
            }
            let chosen = job_named.or_else(|| {
                seen.jobs.iter().find(|j| {
                    ["pending", "running", "waiting"].contains(&j.status.as_str())
                        && goal.flow.is_none_or(|f| f == j.flow)
                })
            });
            match chosen {
                Some(job) => pick(
                    "palm_cancel",
                    json!({"job": job.job}),
                    format!("job {} ({}) is {}", job.job, job.flow, job.status),
                ),
                None => pick(
                    "palm_jobs",
                    json!({"status": "running"}),
                    "no unfinished job to cancel was found; list the running ones",
                ),
            }
        }
        "palm_status" | "palm_inspect" => {
            let chosen = job_named.or_else(|| {
                let failed = tool == "palm_inspect" && has_stem(&goal.words, "fail");
                seen.jobs.iter().find(|j| {
                    (!failed || j.status == "failed") && goal.flow.is_none_or(|f| f == j.flow)
                })
            });
            match (chosen, goal.job) {
                (Some(job), _) => pick(
                    tool,
                    json!({"job": job.job}),
                    format!("job {} ({}) is {}", job.job, job.flow, job.status),
                ),
                (None, Some(unknown)) => pick(
                    tool,
                    json!({"job": unknown}),
                    format!("the goal names job {unknown}"),
                ),
                (None, None) => pick(
                    "palm_jobs",
                    json!({}),
                    "no job to look at was found; list them",
                ),
            }
        }
        "palm_jobs" => match status_word(&goal.words) {
            Some(status) => pick(
                "palm_jobs",
                json!({"status": status}),
                format!("the {status} jobs"),
            ),
            None => pick("palm_jobs", json!({}), "the newest jobs"),
        },
        "palm_submit" => {
            let flow = goal
                .file
                .clone()
                .or_else(|| goal.flow.map(str::to_owned))
                .or_else(|| (seen.flows.len() == 1).then(|| seen.flows[0].name.clone()));
            let Some(flow) = flow else {
                return pick(
                    "palm_flows",
                    json!({"action": "list"}),
                    "name the flow to run: these are the stored ones (or submit a file path or inline source)",
                );
            };
            let mut arguments = json!({"flow": flow, "input": Value::Object(goal.input.clone())});
            let wait = has_stem(&goal.words, "wait") || has_stem(&goal.words, "until");
            if wait {
                arguments["wait"] = json!(true);
            }
            let mut reason = format!("start a job of {flow}");
            if let Some(required) = seen
                .flows
                .iter()
                .find(|f| f.name == flow)
                .and_then(|f| f.required.as_ref())
            {
                let missing: Vec<&String> = required
                    .iter()
                    .filter(|r| !goal.input.contains_key(*r))
                    .collect();
                if !missing.is_empty() {
                    let names: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
                    reason.push_str(&format!("; it requires input {}", names.join(", ")));
                }
            }
            pick("palm_submit", arguments, reason)
        }
        "palm_flows" => {
            if has_stem(&goal.words, "validat") {
                pick(
                    "palm_flows",
                    json!({"action": "validate", "source": "<the flow's YAML>"}),
                    "send the definition as source to get every problem with line and column",
                )
            } else if has_stem(&goal.words, "schema") {
                pick(
                    "palm_flows",
                    json!({"action": "schema"}),
                    "the JSON Schema of the flow format",
                )
            } else if let Some(flow) = goal.flow {
                pick(
                    "palm_flows",
                    json!({"action": "describe", "name": flow}),
                    format!("flow {flow}: its inputs and source"),
                )
            } else {
                pick("palm_flows", json!({"action": "list"}), "the stored flows")
            }
        }
        "palm_places" => {
            if has_stem(&goal.words, "event") || has_stem(&goal.words, "histor") {
                pick(
                    "palm_places",
                    json!({"action": "events"}),
                    "the place book's transitions",
                )
            } else {
                pick(
                    "palm_places",
                    json!({"action": "list"}),
                    "every place with its state",
                )
            }
        }
        "palm_vitality" => pick("palm_vitality", json!({}), "the node's live self-report"),
        _ => pick("palm_tree", json!({}), "this node and its links"),
    }
}

struct Goal<'a> {
    words: Vec<String>,
    job: Option<&'a str>,
    flow: Option<&'a str>,
    file: Option<String>,
    input: Map<String, Value>,
    negative: bool,
}

/// The suggestion for `goal` given `seen`: `{tool, arguments, reason, alternatives, seen}`.
pub fn suggest(goal: &str, seen: &Seen) -> Value {
    let all = words(goal);
    let known_job = all.iter().find_map(|w| {
        seen.jobs
            .iter()
            .find(|j| j.job == *w)
            .map(|j| j.job.as_str())
    });
    // A job-id-looking word the node does not know is still worth asking about.
    let looks_like_job = all.iter().find(|w| looks_like_job(w));
    let job = known_job.or(looks_like_job.map(String::as_str));
    let flow = all.iter().find_map(|w| {
        seen.flows
            .iter()
            .find(|f| f.name == *w)
            .map(|f| f.name.as_str())
    });
    let file = flow_file(&all);
    // Words that name a job, a flow or a file are objects, not verbs: "run approval"
    // must not vote for palm_continue through "approv".
    let verbs: Vec<String> = all
        .iter()
        .filter(|w| {
            Some(w.as_str()) != job && Some(w.as_str()) != flow && Some(*w) != file.as_ref()
        })
        .filter(|w| !w.contains('='))
        .map(|w| w.to_lowercase())
        .collect();
    let negative = verbs.iter().any(|w| {
        NEGATIVE
            .iter()
            .any(|n| w == n || (n.len() > 4 && w.starts_with(n)))
    });
    let parsed = Goal {
        words: all.clone(),
        job,
        flow,
        file: file.clone(),
        input: assignments(&all),
        negative,
    };
    let waiting = seen.jobs.iter().filter(|j| j.status == "waiting").count();
    let mut scores: Vec<(&'static str, f64)> = VOTES
        .iter()
        .map(|(tool, stems)| {
            let votes = verbs
                .iter()
                .filter(|w| stems.iter().any(|s| w.starts_with(s)))
                .count();
            let mut score = votes as f64;
            // What the goal names makes some tools likelier.
            if job.is_some()
                && matches!(
                    *tool,
                    "palm_status" | "palm_inspect" | "palm_continue" | "palm_cancel"
                )
            {
                score += 0.25;
            }
            if (flow.is_some() || file.is_some()) && *tool == "palm_submit" && votes > 0 {
                score += 0.5;
            }
            (*tool, score)
        })
        .collect();
    // Stable sort keeps VOTES' order for ties.
    scores.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (best, best_score) = scores[0];
    let best = if best_score > 0.0 {
        best
    } else if file.is_some() || flow.is_some() {
        "palm_submit"
    } else if job.is_some() {
        "palm_status"
    } else if waiting > 0 {
        "palm_jobs"
    } else {
        "palm_flows"
    };
    let chosen = if best_score == 0.0 && best == "palm_jobs" {
        pick(
            "palm_jobs",
            json!({"status": "waiting"}),
            format!("the goal names no tool; {waiting} jobs wait for input"),
        )
    } else {
        arguments_for(best, &parsed, seen)
    };
    // Other tools that got votes, as they would be called; one that resolves to the
    // same call as the choice (or as an earlier alternative) is left out.
    let mut alternatives: Vec<Value> = Vec::new();
    for (tool, score) in &scores {
        if *score <= 0.0 || *tool == best || alternatives.len() == ALTERNATIVES_MAX {
            continue;
        }
        let alt = arguments_for(tool, &parsed, seen);
        let duplicate = (alt.tool == chosen.tool && alt.arguments == chosen.arguments)
            || alternatives
                .iter()
                .any(|a| a["tool"] == alt.tool && a["arguments"] == alt.arguments);
        if !duplicate {
            alternatives
                .push(json!({"tool": alt.tool, "arguments": alt.arguments, "reason": alt.reason}));
        }
    }
    json!({
        "tool": chosen.tool,
        "arguments": chosen.arguments,
        "reason": chosen.reason,
        "alternatives": alternatives,
        "seen": {"flows": seen.flows.len(), "jobs": seen.jobs.len(), "waiting": waiting},
    })
}

/// Gathers what the node has and suggests (see the module docs).
pub async fn run(link: &ControlLink, arguments: &Map<String, Value>) -> Result<Answer, ToolError> {
    let goal = arguments
        .get("goal")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let all = words(goal);
    let flows = ask(link, Request::FlowsList).await?;
    let mut seen = Seen::default();
    for flow in flows["flows"].as_array().into_iter().flatten() {
        let name = flow["name"].as_str().unwrap_or_default().to_owned();
        // Only a flow the goal names is worth a second request (its required inputs).
        let required = if all.contains(&name) {
            ask(
                link,
                Request::FlowsShow {
                    name: name.clone(),
                    revision: None,
                },
            )
            .await
            .ok()
            .map(|shown| {
                shown["input"]
                    .as_array()
                    .map(|fields| {
                        fields
                            .iter()
                            .filter(|f| f["required"] == json!(true))
                            .filter_map(|f| f["name"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default()
            })
        } else {
            None
        };
        seen.flows.push(FlowSeen { name, required });
    }
    let jobs = ask(
        link,
        Request::Jobs {
            status: None,
            limit: Some(JOBS_SEEN_MAX),
            node: None,
        },
    )
    .await?;
    let mut detailed = 0;
    for job in jobs["jobs"].as_array().into_iter().flatten() {
        let mut seen_job = JobSeen {
            job: job["job"].as_str().unwrap_or_default().to_owned(),
            flow: job["flow"].as_str().unwrap_or_default().to_owned(),
            status: job["status"].as_str().unwrap_or_default().to_owned(),
            waits: Vec::new(),
        };
        if seen_job.status == "waiting" && detailed < WAITING_DETAILED_MAX {
            detailed += 1;
            if let Ok(view) = ask(
                link,
                Request::Status {
                    job: seen_job.job.clone(),
                },
            )
            .await
            {
                seen_job.waits = view["waiting_on"].as_array().cloned().unwrap_or_default();
            }
        }
        seen.jobs.push(seen_job);
    }
    // A job named in the goal but older than the newest JOBS_SEEN_MAX is looked up too.
    if let Some(id) = all
        .iter()
        .find(|w| looks_like_job(w) && !seen.jobs.iter().any(|j| j.job == **w))
        && let Ok(view) = ask(link, Request::Status { job: id.clone() }).await
    {
        seen.jobs.push(JobSeen {
            job: id.clone(),
            flow: view["flow"].as_str().unwrap_or_default().to_owned(),
            status: view["status"].as_str().unwrap_or_default().to_owned(),
            waits: view["waiting_on"].as_array().cloned().unwrap_or_default(),
        });
    }
    let value = suggest(goal, &seen);
    let summary = format!(
        "call {} {} — {}",
        value["tool"].as_str().unwrap_or_default(),
        value["arguments"],
        value["reason"].as_str().unwrap_or_default()
    );
    Ok(Answer { summary, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Seen {
        Seen {
            flows: vec![
                FlowSeen {
                    name: "approval".into(),
                    required: Some(vec![]),
                },
                FlowSeen {
                    name: "hello".into(),
                    required: Some(vec!["who".into()]),
                },
            ],
            jobs: vec![
                JobSeen {
                    job: "ab-3".into(),
                    flow: "approval".into(),
                    status: "waiting".into(),
                    waits: vec![json!({"key": "approve", "prompt": "Ship the build?",
                        "schema": {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}})],
                },
                JobSeen {
                    job: "ab-2".into(),
                    flow: "hello".into(),
                    status: "failed".into(),
                    waits: vec![],
                },
                JobSeen {
                    job: "ab-1".into(),
                    flow: "hello".into(),
                    status: "running".into(),
                    waits: vec![],
                },
            ],
        }
    }

    fn check(goal: &str, tool: &str, arguments: Value) {
        let got = suggest(goal, &seen());
        assert_eq!(got["tool"], tool, "{goal}: {got}");
        assert_eq!(got["arguments"], arguments, "{goal}: {got}");
        assert!(got["reason"].as_str().is_some_and(|r| !r.is_empty()));
    }

    #[test]
    fn goals_map_to_tools_and_arguments() {
        check(
            "approve the waiting job",
            "palm_continue",
            json!({"job": "ab-3", "key": "approve", "input": {"ok": true}}),
        );
        check(
            "reject the deploy, do not ship",
            "palm_continue",
            json!({"job": "ab-3", "key": "approve", "input": {"ok": false}}),
        );
        check(
            "continue ab-3",
            "palm_continue",
            json!({"job": "ab-3", "key": "approve", "input": {"ok": true}}),
        );
        check(
            "run the approval flow",
            "palm_submit",
            json!({"flow": "approval", "input": {}}),
        );
        check(
            "start hello with who=world and wait",
            "palm_submit",
            json!({"flow": "hello", "input": {"who": "world"}, "wait": true}),
        );
        check(
            "submit examples/approval.yaml",
            "palm_submit",
            json!({"flow": "examples/approval.yaml", "input": {}}),
        );
        check("why did it fail?", "palm_inspect", json!({"job": "ab-2"}));
        check(
            "what is the status of ab-1",
            "palm_status",
            json!({"job": "ab-1"}),
        );
        check("cancel ab-1", "palm_cancel", json!({"job": "ab-1"}));
        check(
            "list the waiting jobs",
            "palm_jobs",
            json!({"status": "waiting"}),
        );
        check(
            "validate my flow",
            "palm_flows",
            json!({"action": "validate", "source": "<the flow's YAML>"}),
        );
        check(
            "is the node healthy? seats busy?",
            "palm_vitality",
            json!({}),
        );
        check("show the topology", "palm_tree", json!({}));
        check(
            "which places are ready",
            "palm_places",
            json!({"action": "list"}),
        );
        check(
            "hello",
            "palm_submit",
            json!({"flow": "hello", "input": {}}),
        );
        check("", "palm_jobs", json!({"status": "waiting"}));
    }

    #[test]
    fn missing_state_leads_to_the_tool_that_finds_it() {
        let empty = Seen::default();
        let got = suggest("approve it", &empty);
        assert_eq!(got["tool"], "palm_jobs");
        assert_eq!(got["arguments"], json!({"status": "waiting"}));
        let got = suggest("run something", &empty);
        assert_eq!(got["tool"], "palm_flows");
        let got = suggest("continue ab-2", &seen());
        assert_eq!(got["tool"], "palm_status", "{got}");
        assert!(
            got["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("not waiting")
        );
    }

    #[test]
    fn the_same_goal_gives_the_same_answer() {
        let a = suggest("approve and then check the status", &seen());
        let b = suggest("approve and then check the status", &seen());
        assert_eq!(a, b);
        assert!(
            a["alternatives"]
                .as_array()
                .is_some_and(|alts| !alts.is_empty())
        );
    }
}
