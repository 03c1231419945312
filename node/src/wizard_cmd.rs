//! `palm wizard start|resume`: a wizard's steps answered from a terminal, from flags, or
//! both. Every answer is a `continue` of the step's wait, so each one is durable the
//! moment it is accepted: Ctrl-C (exit 130), a crash or a closed laptop loses nothing,
//! and `palm wizard resume JOB` — here, in another terminal, from MCP or the Explorer —
//! goes on at the same step.
//!
//! The step comes from the wait's schema (`x-palm-wizard`, see `palm_actors::bt`'s
//! wizard): its id, kind, position, proposal, options, items and where back can go. On a
//! terminal each step is a prompt (inquire): "[n/m]", the proposal as the default, Esc
//! goes back a step. `--set STEP=VALUE` answers a step without asking, `--yes` takes
//! each proposal; without a terminal, a step neither answers is an error (exit 2) naming
//! the flags still missing.

use crate::cli::WizardCommand;
use crate::ctx::{Ctx, print, settled_view, status_code};
use crate::exit::{CliError, CliResult, Code};
use crate::output;
use palm_api::protocol::{FlowArg, Request};
use palm_api::verbs::{
    at_revision, flow_arg, typed_text as shown, typed_value as typed, wizard_wait,
};
use palm_node::target::Target;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::io::IsTerminal;

/// `palm wizard ...`.
pub async fn run(ctx: &Ctx, command: WizardCommand) -> CliResult {
    let (start, job, answers) = match command {
        WizardCommand::Start(args) => {
            let flow = at_revision(flow_arg(&args.flow)?, args.revision)?;
            (Some((flow, args.inputs, args.flow)), None, args.answers)
        }
        WizardCommand::Resume(args) => (None, Some(args.job), args.answers),
    };
    let mut sets = Sets::parse(&answers.set)?;
    let mut target = Target::driving(&ctx.data, None).await?;
    let result = async {
        let (job, origin) = match (start, job) {
            (Some((flow, inputs, origin)), _) => {
                refuse_unless_wizard(&mut target, &flow, &origin).await?;
                let submitted = target
                    .call(Request::Submit {
                        flow,
                        input: Map::new(),
                        args: inputs,
                        started_by: None,
                        node: None,
                    })
                    .await?;
                let job = submitted["job"].as_str().unwrap_or_default().to_owned();
                (job, Some(origin))
            }
            (None, job) => (job.unwrap_or_default(), None),
        };
        drive(ctx, &mut target, &job, origin, &mut sets, answers.yes).await
    }
    .await;
    target.finish().await;
    result
}

/// Refuses to start a flow whose tree holds no wizard (nor a subflow, which may): such a
/// job would ask nothing, and `palm run` is what starts it.
async fn refuse_unless_wizard(
    target: &mut Target,
    flow: &FlowArg,
    origin: &str,
) -> Result<(), CliError> {
    let source = match flow {
        FlowArg::Source { source, .. } => source.clone(),
        FlowArg::Stored { name, revision } => {
            let shown = target
                .call(Request::FlowsShow {
                    name: name.clone(),
                    revision: *revision,
                })
                .await?;
            shown["source"].as_str().unwrap_or_default().to_owned()
        }
    };
    let Ok(definition) = palm_actors::definition::parse(&source, origin) else {
        // The node says what is wrong with it when it is submitted.
        return Ok(());
    };
    let mut asks = false;
    definition.tree.walk(&mut |node| {
        asks |= matches!(
            node.kind,
            palm_actors::definition::NodeKind::Wizard(_)
                | palm_actors::definition::NodeKind::Subflow { .. }
        );
    });
    if asks {
        return Ok(());
    }
    Err(CliError::usage(
        "not_a_wizard",
        format!(
            "flow `{}` ({origin}) has no wizard step: it asks nothing",
            definition.name
        ),
    )
    .with_hint(format!("`palm run {origin}` starts it")))
}

/// The current step of a waiting wizard: its wait key and what the schema says of it.
struct Step {
    key: String,
    prompt: String,
    about: Value,
    /// The schema an `answer` must meet (how typed text is read).
    answer: Value,
}

impl Step {
    fn id(&self) -> &str {
        self.about["step"].as_str().unwrap_or_default()
    }

    fn kind(&self) -> &str {
        self.about["kind"].as_str().unwrap_or_default()
    }

    fn label(&self) -> String {
        format!(
            "[step {}/{}] {}",
            self.about["n"], self.about["of"], self.prompt
        )
    }

    fn can_go_back(&self) -> bool {
        self.about["back"].as_array().is_some_and(|b| !b.is_empty())
    }
}

/// The wizard step a status document waits on, if any.
fn step_of(view: &Value) -> Option<Step> {
    let wait = wizard_wait(view)?;
    Some(Step {
        key: wait["key"].as_str().unwrap_or_default().to_owned(),
        prompt: wait["prompt"].as_str().unwrap_or_default().to_owned(),
        about: wait["schema"]["x-palm-wizard"].clone(),
        answer: wait["schema"]["properties"]["answer"].clone(),
    })
}

/// Answers given as `--set`, by step; each is used once (going back asks again).
struct Sets {
    by_step: BTreeMap<String, Vec<(Option<String>, Value)>>,
    /// `--set` in the order given, to print the equivalent command.
    given: Vec<String>,
}

impl Sets {
    fn parse(raw: &[String]) -> Result<Sets, CliError> {
        let mut by_step: BTreeMap<String, Vec<(Option<String>, Value)>> = BTreeMap::new();
        for item in raw {
            let Some((name, text)) = item.split_once('=') else {
                return Err(CliError::usage(
                    "invalid_input",
                    format!("--set `{item}` is not STEP=VALUE"),
                ));
            };
            let (step, field) = match name.split_once('.') {
                Some((step, field)) => (step, Some(field.to_owned())),
                None => (name, None),
            };
            if step.is_empty() {
                return Err(CliError::usage(
                    "invalid_input",
                    format!("--set `{item}` names no step"),
                ));
            }
            let value =
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
            by_step
                .entry(step.to_owned())
                .or_default()
                .push((field, value));
        }
        Ok(Sets {
            by_step,
            given: raw.to_vec(),
        })
    }

    /// The move `--set` makes at `step`, taking it.
    fn take(&mut self, step: &Step) -> Option<Value> {
        let given = self.by_step.remove(step.id())?;
        let value = if step.kind() == "collection" && given.iter().any(|(f, _)| f.is_some()) {
            // Items field by field: a field given again starts the next item
            // (`--set eps.path=/a --set eps.method=GET --set eps.path=/b ...`); a whole
            // item (`--set 'eps={...}'`) is one item.
            let mut items = Vec::new();
            let mut item = Map::new();
            for (field, value) in given {
                match field {
                    Some(field) => {
                        if item.contains_key(&field) {
                            items.push(Value::Object(std::mem::take(&mut item)));
                        }
                        item.insert(field, value);
                    }
                    None => {
                        if !item.is_empty() {
                            items.push(Value::Object(std::mem::take(&mut item)));
                        }
                        items.push(value);
                    }
                }
            }
            if !item.is_empty() {
                items.push(Value::Object(item));
            }
            Value::Array(items)
        } else if given.iter().any(|(field, _)| field.is_some()) {
            let mut object = Map::new();
            for (field, value) in given {
                object.insert(field.unwrap_or_default(), value);
            }
            Value::Object(object)
        } else if step.kind() == "collection" {
            match given.as_slice() {
                [(_, Value::Array(all))] => Value::Array(all.clone()),
                _ => Value::Array(given.into_iter().map(|(_, v)| v).collect()),
            }
        } else if step.about["multiple"] == true {
            match given.as_slice() {
                [(_, Value::Array(all))] => Value::Array(all.clone()),
                [(_, Value::String(text))] => Value::Array(
                    text.split(',')
                        .map(|s| Value::String(s.trim().to_owned()))
                        .collect(),
                ),
                _ => Value::Array(given.into_iter().map(|(_, v)| v).collect()),
            }
        } else {
            given.into_iter().next_back().map(|(_, v)| v)?
        };
        Some(json!({ "answer": value }))
    }
}

/// The move `--yes` makes: the proposal, done, or commit; `None` when there is nothing
/// to accept.
fn accept(step: &Step) -> Option<Value> {
    match step.kind() {
        "summary" => Some(json!({"commit": true})),
        "collection" => {
            let items = step.about["items"].as_array().map_or(0, Vec::len) as u64;
            (items >= step.about["min"].as_u64().unwrap_or(0)).then(|| json!({"done": true}))
        }
        _ => {
            let proposal = &step.about["default"];
            (!proposal.is_null()).then(|| json!({ "answer": proposal }))
        }
    }
}

/// What a person did at a prompt.
enum Typed {
    Move(Value),
    Back,
    /// Left an inner prompt: ask the step again.
    Again,
    Quit,
}

async fn drive(
    ctx: &Ctx,
    target: &mut Target,
    job: &str,
    origin: Option<String>,
    sets: &mut Sets,
    yes: bool,
) -> CliResult {
    let interactive =
        std::io::stdin().is_terminal() && std::io::stdout().is_terminal() && !ctx.out.json;
    let mut flow = origin;
    let mut refused: Option<String> = None;
    let mut wizard_key: Option<String> = None;
    loop {
        let view = settled_view(ctx, target, job, &format!("wizard {job}"), None).await?;
        if flow.is_none() {
            flow = view["flow"].as_str().map(str::to_owned);
        }
        let Some(step) = step_of(&view) else {
            // Past the last step: the commit ran (or the job is no wizard's).
            let answers = match &wizard_key {
                Some(key) => view["state"][key].clone(),
                None => view["state"].clone(),
            };
            let out = json!({"job": job, "status": view["status"], "answers": answers,
                             "error": view["error"], "view": view});
            print(ctx, &out, |o, v| output::print_status(o, &v["view"]));
            return Ok(status_code(&view));
        };
        wizard_key = step.about["wizard"].as_str().map(str::to_owned);
        if step.kind() == "summary" && !ctx.out.json {
            print_summary(&step, job, flow.as_deref(), sets);
        }
        let chosen = if let Some(reason) = refused.take() {
            if !interactive {
                return Err(CliError::usage(
                    "invalid_input",
                    format!("step `{}`: {reason}", step.id()),
                )
                .with_hint(format!("`palm wizard resume {job}` goes on at this step"))
                .with_job(job));
            }
            eprintln!("palm: {reason}");
            None
        } else {
            sets.take(&step)
                .or_else(|| yes.then(|| accept(&step)).flatten())
        };
        let input = match chosen {
            Some(input) => input,
            None if interactive => match ask(&step).await? {
                Typed::Move(input) => input,
                Typed::Back if step.can_go_back() => json!({"back": true}),
                Typed::Back => {
                    eprintln!("palm: this is the first step that can be changed");
                    continue;
                }
                Typed::Again => continue,
                Typed::Quit => {
                    eprintln!(
                        "\npalm: quit at step {}/{}; the draft is kept: palm wizard resume {job}",
                        step.about["n"], step.about["of"]
                    );
                    return Ok(Code::Interrupted);
                }
            },
            None => return Err(missing(&step, job, sets)),
        };
        match target
            .call(Request::Continue {
                job: job.to_owned(),
                key: step.key.clone(),
                input,
            })
            .await
        {
            Ok(_) => {}
            Err(err) if err.kind == "invalid_input" => refused = Some(err.message),
            Err(err) => return Err(err),
        }
    }
}

/// Without a terminal: the flags this step and the ones after it still need.
fn missing(step: &Step, job: &str, sets: &Sets) -> CliError {
    let from = step.about["n"].as_u64().unwrap_or(1) as usize;
    let needed: Vec<String> = step.about["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .skip(from.saturating_sub(1))
        .filter(|s| {
            s["kind"] != "summary" && !sets.by_step.contains_key(s["id"].as_str().unwrap_or(""))
        })
        .map(|s| {
            let id = s["id"].as_str().unwrap_or_default();
            if id == step.id() {
                flags_for(step)
            } else {
                format!("--set {id}=…")
            }
        })
        .collect();
    let mut message = format!(
        "no terminal to ask step {}/{} `{}` ({}) on, and no --set answers it",
        step.about["n"],
        step.about["of"],
        step.id(),
        step.prompt
    );
    if !needed.is_empty() {
        message.push_str(&format!("; still missing: {}", needed.join(" ")));
    }
    CliError::usage("missing_answer", message)
        .with_hint(format!(
            "answer with --set (and --yes to take the proposals), e.g. `palm wizard resume {job} {} --yes`",
            needed.first().map_or("", |first| bare_flags(first))
        ))
        .with_job(job)
}

/// The flags that answer `step`: one per field when its answer (or a collection's item)
/// is an object with named fields, else one for the step.
fn flags_for(step: &Step) -> String {
    let schema = if step.kind() == "collection" {
        &step.answer["items"]
    } else {
        &step.answer
    };
    match schema["properties"].as_object().filter(|p| !p.is_empty()) {
        Some(fields) => {
            let flags: Vec<String> = fields
                .keys()
                .map(|field| format!("--set {}.{field}=…", step.id()))
                .collect();
            let repeat = if step.kind() == "collection" {
                " (again for each item)"
            } else {
                ""
            };
            format!("{}{repeat}", flags.join(" "))
        }
        None => format!("--set {}=…", step.id()),
    }
}

/// The flags of [`flags_for`] alone, as a command line takes them.
fn bare_flags(needed: &str) -> &str {
    needed.split(" (").next().unwrap_or(needed)
}

/// The summary: every answer, and the command that gives them without questions.
fn print_summary(step: &Step, job: &str, flow: Option<&str>, sets: &Sets) {
    let answers = step.about["answers"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    eprintln!("{}", step.label());
    let mut flags = Vec::new();
    for (id, value) in &answers {
        let shown = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        eprintln!("  {id}: {shown}");
        flags.push(format!("--set {}", shell_word(&format!("{id}={shown}"))));
    }
    if flags.is_empty() {
        flags = sets
            .given
            .iter()
            .map(|s| format!("--set {}", shell_word(s)))
            .collect();
    }
    let flow = flow.unwrap_or(job);
    eprintln!(
        "  the same without questions: palm wizard start {} {} --yes",
        shell_word(flow),
        flags.join(" ")
    );
}

/// `text` as one shell word.
fn shell_word(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+".contains(c))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Asks one step at the terminal (inquire, on a blocking thread).
async fn ask(step: &Step) -> Result<Typed, CliError> {
    let label = step.label();
    let about = step.about.clone();
    let answer = step.answer.clone();
    tokio::task::spawn_blocking(move || prompt(&label, &about, &answer))
        .await
        .map_err(|e| CliError::failure("terminal", format!("the prompt stopped: {e}")))?
}

fn prompt(label: &str, about: &Value, answer: &Value) -> Result<Typed, CliError> {
    use inquire::InquireError;
    let help = "Enter: answer · Esc: back · Ctrl-C: quit (the draft is kept)";
    let outcome = |result: Result<Value, InquireError>| match result {
        Ok(value) => Ok(Typed::Move(value)),
        Err(InquireError::OperationCanceled) => Ok(Typed::Back),
        Err(InquireError::OperationInterrupted) => Ok(Typed::Quit),
        Err(err) => Err(CliError::failure("terminal", format!("cannot ask: {err}"))),
    };
    let options: Vec<String> = about["options"]
        .as_array()
        .map(|o| o.iter().map(shown).collect())
        .unwrap_or_default();
    let raw_options: Vec<Value> = about["options"].as_array().cloned().unwrap_or_default();
    let proposal = &about["default"];
    match about["kind"].as_str().unwrap_or_default() {
        "choice" if about["multiple"] == true => {
            let chosen: Vec<usize> = proposal
                .as_array()
                .map(|p| {
                    p.iter()
                        .filter_map(|v| raw_options.iter().position(|o| o == v))
                        .collect()
                })
                .unwrap_or_default();
            outcome(
                inquire::MultiSelect::new(label, options.clone())
                    .with_default(&chosen)
                    .with_help_message(help)
                    .raw_prompt()
                    .map(|picked| {
                        json!({"answer": picked.iter().map(|o| raw_options[o.index].clone()).collect::<Vec<_>>()})
                    }),
            )
        }
        "choice" => {
            let start = raw_options.iter().position(|o| o == proposal).unwrap_or(0);
            outcome(
                inquire::Select::new(label, options.clone())
                    .with_starting_cursor(start)
                    .with_help_message(help)
                    .raw_prompt()
                    .map(|picked| json!({"answer": raw_options[picked.index].clone()})),
            )
        }
        "collection" => collection(label, about, help).or_else(|err| outcome(Err(err))),
        "summary" => outcome(
            inquire::Confirm::new("Commit these answers?")
                .with_default(true)
                .with_help_message("y: commit (it runs once) · n or Esc: back · Ctrl-C: quit")
                .prompt()
                .map(|yes| {
                    if yes {
                        json!({"commit": true})
                    } else {
                        json!({"back": true})
                    }
                }),
        ),
        _ => {
            let text = shown(proposal);
            let mut question = inquire::Text::new(label).with_help_message(help);
            if !proposal.is_null() {
                question = question.with_default(&text);
            }
            outcome(
                question
                    .prompt()
                    .map(|t| json!({"answer": typed(&t, answer)})),
            )
        }
    }
}

/// A collection step: pick an action, then its item (Esc at the item: the list again).
fn collection(label: &str, about: &Value, help: &str) -> Result<Typed, inquire::InquireError> {
    use inquire::InquireError;
    let items = about["items"].as_array().cloned().unwrap_or_default();
    let min = about["min"].as_u64().unwrap_or(0) as usize;
    let max = about["max"].as_u64().unwrap_or(u64::MAX) as usize;
    // (label, the move it makes, or None for an item still to type; the item edited)
    let mut actions: Vec<(String, Option<Value>, Option<usize>)> = Vec::new();
    if items.len() >= min {
        actions.push((
            format!("Done ({} items)", items.len()),
            Some(json!({"done": true})),
            None,
        ));
    }
    if items.len() < max {
        actions.push(("Add an item".to_owned(), None, None));
    }
    for (i, item) in items.iter().enumerate() {
        actions.push((format!("Edit #{}: {}", i + 1, shown(item)), None, Some(i)));
    }
    for (i, item) in items.iter().enumerate() {
        actions.push((
            format!("Remove #{}: {}", i + 1, shown(item)),
            Some(json!({"remove": i})),
            None,
        ));
    }
    let labels: Vec<String> = actions.iter().map(|(l, _, _)| l.clone()).collect();
    let picked = match inquire::Select::new(label, labels)
        .with_help_message(help)
        .raw_prompt()
    {
        Ok(picked) => picked.index,
        Err(InquireError::OperationCanceled) => return Ok(Typed::Back),
        Err(InquireError::OperationInterrupted) => return Ok(Typed::Quit),
        Err(err) => return Err(err),
    };
    let (_, made, editing) = actions.swap_remove(picked);
    if let Some(made) = made {
        return Ok(Typed::Move(made));
    }
    let current = editing.and_then(|i| items.get(i));
    let text = current.map(shown).unwrap_or_default();
    let mut question =
        inquire::Text::new("Item").with_help_message("Enter: keep · Esc: back to the list");
    if current.is_some() {
        question = question.with_initial_value(&text);
    }
    match question.prompt() {
        Ok(text) => {
            let item = typed(&text, &about["item_schema"]);
            Ok(Typed::Move(match editing {
                Some(index) => json!({"edit": {"index": index, "item": item}}),
                None => json!({"add": item}),
            }))
        }
        Err(InquireError::OperationCanceled) => Ok(Typed::Again),
        Err(InquireError::OperationInterrupted) => Ok(Typed::Quit),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(about: Value) -> Step {
        Step {
            key: "service".into(),
            prompt: "p".into(),
            about,
            answer: Value::Null,
        }
    }

    #[test]
    fn set_flags_become_each_steps_move() {
        let mut sets = Sets::parse(&[
            "name=ledger".into(),
            "size=3".into(),
            "endpoints=/a".into(),
            "endpoints=/b".into(),
            "features=metrics,auth".into(),
            "db.host=h".into(),
            "db.port=5432".into(),
        ])
        .expect("sets");
        let input = |id: &str| step(json!({"step": id, "kind": "input"}));
        assert_eq!(sets.take(&input("name")), Some(json!({"answer": "ledger"})));
        assert_eq!(sets.take(&input("name")), None, "used once");
        assert_eq!(sets.take(&input("size")), Some(json!({"answer": 3})));
        assert_eq!(
            sets.take(&step(json!({"step": "endpoints", "kind": "collection"}))),
            Some(json!({"answer": ["/a", "/b"]}))
        );
        assert_eq!(
            sets.take(&step(
                json!({"step": "features", "kind": "choice", "multiple": true})
            )),
            Some(json!({"answer": ["metrics", "auth"]}))
        );
        assert_eq!(
            sets.take(&input("db")),
            Some(json!({"answer": {"host": "h", "port": 5432}}))
        );
        assert!(Sets::parse(&["novalue".into()]).is_err());
    }

    #[test]
    fn yes_takes_proposals_and_commits() {
        assert_eq!(
            accept(&step(json!({"kind": "input", "default": "x"}))),
            Some(json!({"answer": "x"}))
        );
        assert_eq!(
            accept(&step(json!({"kind": "input", "default": null}))),
            None
        );
        assert_eq!(
            accept(&step(json!({"kind": "collection", "items": [], "min": 1}))),
            None
        );
        assert_eq!(
            accept(&step(json!({"kind": "collection", "items": [1], "min": 1}))),
            Some(json!({"done": true}))
        );
        assert_eq!(
            accept(&step(json!({"kind": "summary"}))),
            Some(json!({"commit": true}))
        );
        assert_eq!(shell_word("name=ledger"), "name=ledger");
        assert_eq!(shell_word("a b"), "'a b'");
    }
}
