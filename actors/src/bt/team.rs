//! `team`: members of mixed providers working a durable board of tasks.
//!
//! The board, the claims and the mailbox are this node's state, rebuilt by replay like
//! every node's: a member's turn is an `agent` call (claimed by a seat under a lease, run
//! at least once, completed once), a task's completion gate is a `verify` call, and what
//! people and members post (`palm team post`, MCP) arrives as continues of the team's
//! standing wait. So a team survives any restart: an interrupted turn runs again, a
//! completed one is never run twice, and no message is lost.
//!
//! Scheduling is deterministic. By default one task is in progress at a time (members
//! share the job's worktree on the repo, so a check never runs while another member
//! edits): turns go round the members, and the next one takes the task it claimed (a
//! claim lapses after [`CLAIM_LEASE_MS`] untaken), else the first open task whose
//! dependencies are done. When the team has used its `max_turns`, or a turn ended
//! `budget`, nothing new starts: the team parks (`waiting`) until someone gives it more.
//!
//! With `parallel: N` (and a repo), up to N tasks are in progress at once, each in its
//! own *lane*: a worktree forked from the team's when the task starts, where the
//! member's turns and the task's check run, merged back into the team's worktree once
//! the check passes (one merge at a time, by the `merge_lane` provider). Before anything
//! starts, the `conflicts` provider predicts which pairs of tasks will probably touch a
//! same file (the repo index); two such tasks never run side by side: the later waits
//! until the earlier is merged, then forks from the result. Every decision — a task
//! held back for another (with the predicted files and score), a task started beside
//! others, a merge — is kept on the board with its evidence. A lane that does not merge
//! (a conflict the prediction missed) sends its task back to open, to start again from
//! a fresh fork.

use super::tick::stop_node;
use super::{
    Command, EffectRequest, NodeState, Outcome, Parked, Program, RtNode, Runtime, SpecKind,
};
use super::{Delivery, Status, render_value};
use crate::definition::{AGENT_PROVIDER, MERGE_PROVIDER, PREDICT_PROVIDER, TeamSpec, turn_schema};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Most tasks on one board.
pub const TASKS_MAX: usize = 500;
/// Most messages kept (the oldest go first).
pub const MAILBOX_MAX: usize = 1000;
/// The longest message kept.
const MESSAGE_BYTES_MAX: usize = 4096;
/// The longest task title and detail kept (a prompt carries them).
const TITLE_BYTES_MAX: usize = 200;
const DETAIL_BYTES_MAX: usize = 4096;
/// Most dependencies of one task.
const DEPENDS_MAX: usize = 64;
/// Most unread messages one prompt shows (the rest come in the next turn).
const MESSAGES_SHOWN_MAX: usize = 20;
/// Most tasks a prompt lists besides the member's own.
const BOARD_SHOWN_MAX: usize = 100;
/// Most messages one turn's answer may post.
const MESSAGES_PER_TURN_MAX: usize = 10;
/// The longest member or sender name kept.
const NAME_BYTES_MAX: usize = 64;
/// How much longer a turn's call may take than the turn itself.
const TURN_GRACE_MS: u64 = 60_000;
/// A claim (`{"op": "claim"}`) its member has not taken within this lapses, and the task
/// goes to whoever is free.
pub const CLAIM_LEASE_MS: u64 = 30 * 60 * 1000;
/// Most target files one task names.
const FILES_MAX: usize = 64;
/// The longest target file path kept.
const FILE_BYTES_MAX: usize = 512;
/// Most scheduling decisions the board keeps (the oldest go first).
const DECISIONS_MAX: usize = 200;
/// Most predicted pairs the board lists (all count).
const PAIRS_SHOWN_MAX: usize = 100;

/// Where a team is.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TeamState {
    tasks: Vec<Task>,
    members: Vec<Member>,
    mailbox: Vec<Value>,
    sent: BTreeMap<String, u64>,
    turns: u32,
    max_turns: u32,
    cost_usd: f64,
    repo: Option<String>,
    park: Option<String>,
    /// The last post refused (unknown task, unknown member).
    refused: Option<String>,
    /// The member whose turn comes next (turns go round, one at a time).
    next_member: usize,
    /// A turn ended `budget` (the flow's spending budget is used up): nothing starts
    /// until someone gives the team more.
    out_of_budget: bool,
    /// Tasks in progress at once; above 1 (with a repo), each works in its own lane.
    parallel: usize,
    /// The conflict prediction: in flight, then which pairs must not run side by side.
    plan: Plan,
    /// The prediction as the board shows it (source, reason, predicted pairs).
    schedule: Value,
    /// What the scheduler decided and why, newest last.
    decisions: Vec<Value>,
    /// Pairs (waiting task, task in progress) whose hold is already on record.
    held: std::collections::BTreeSet<(usize, usize)>,
    /// Members whose lane waits for its merge, first come first merged.
    merge_queue: Vec<usize>,
}

/// Which tasks may run side by side.
#[derive(Clone, Debug, Default, PartialEq)]
enum Plan {
    /// One task at a time: no prediction needed.
    #[default]
    Serial,
    /// The prediction is running (its effect key): nothing starts yet.
    Pending(String),
    /// Pairs `(i, j)`, `i < j`, predicted to touch a same file, with why; or every pair,
    /// when there is no prediction.
    Ready {
        apart: BTreeMap<(usize, usize), Value>,
        all: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
struct Task {
    id: String,
    title: String,
    detail: String,
    depends_on: Vec<String>,
    /// The same, as indexes into the board (resolved once).
    needs: Vec<usize>,
    /// open | claimed | checking | merging | done | failed
    status: &'static str,
    owner: Option<String>,
    /// A member that claimed it through a post, to take it next.
    wanted_by: Option<String>,
    attempts: u32,
    summary: Option<String>,
    last_failure: Option<String>,
    /// Files it names (for the conflict prediction).
    files: Vec<String>,
    /// When `wanted_by` claimed it.
    wanted_at: u64,
    /// Lanes it has forked so far (a lane that did not merge is not reused).
    forks: u32,
}

#[derive(Clone, Debug, PartialEq)]
struct Member {
    name: String,
    provider: String,
    mode: String,
    model: Option<String>,
    busy: Option<Busy>,
    /// Messages read so far (an index into the mailbox's sequence numbers).
    seen: u64,
    turns: u32,
}

#[derive(Clone, Debug, PartialEq)]
struct Busy {
    task: usize,
    /// The effect in flight (empty while its merge waits its turn).
    key: String,
    stage: Stage,
    /// The mailbox's last message number the turn's prompt showed: what the member has
    /// read once the turn ends.
    shown: u64,
    /// The member said it completed the task (a `complete` post during its turn).
    reported: bool,
}

/// Where a member's task is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Turn,
    Check,
    /// Checked, waiting for the one merge at a time.
    Queued,
    Merge,
}

impl Stage {
    fn as_str(self) -> &'static str {
        match self {
            Stage::Turn => "turn",
            Stage::Check => "check",
            Stage::Queued => "merge_queued",
            Stage::Merge => "merge",
        }
    }
}

fn state(node: &mut RtNode) -> &mut TeamState {
    match &mut node.state {
        NodeState::Team(state) => state,
        _ => unreachable!("a team node has team state"),
    }
}

/// What a standing wait accepts: a post, a claim, a completion, more budget.
fn ops_schema() -> Value {
    json!({
        "type": "object",
        "required": ["op"],
        "properties": {
            "op": {"enum": ["post", "claim", "complete", "budget"]},
            "from": {"type": "string"},
            "to": {"type": "string"},
            "text": {"type": "string"},
            "member": {"type": "string"},
            "task": {"type": "string"},
            "turns": {"type": "integer", "minimum": 1}
        }
    })
}

fn cut(text: &str, max: usize) -> String {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Reads the board a flow gives: `[{id, title, detail, depends_on}]`, checked (unique
/// ids, known dependencies, no cycle).
fn read_tasks(value: &Value) -> Result<Vec<Task>, String> {
    let Some(items) = value.as_array() else {
        return Err(format!("team tasks must be a list, not {value}"));
    };
    if items.len() > TASKS_MAX {
        return Err(format!(
            "a team board holds at most {TASKS_MAX} tasks, not {}",
            items.len()
        ));
    }
    let mut tasks: Vec<Task> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let text = |field: &str| item.get(field).and_then(Value::as_str).map(str::to_owned);
        let id = text("id").ok_or_else(|| format!("team task {i} has no `id`"))?;
        if id.is_empty() || id.len() > NAME_BYTES_MAX {
            return Err(format!(
                "team task {i}: an id has 1 to {NAME_BYTES_MAX} bytes"
            ));
        }
        if tasks.iter().any(|t| t.id == id) {
            return Err(format!("two team tasks have the id `{id}`"));
        }
        let mut depends_on: Vec<String> = match item.get("depends_on") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(deps)) => deps
                .iter()
                .map(|d| {
                    d.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("task `{id}`: depends_on holds {d}, not a task id"))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(format!(
                    "task `{id}`: depends_on must be a list, not {other}"
                ));
            }
        };
        depends_on.sort();
        depends_on.dedup();
        let files: Vec<String> = match item.get("files") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(files)) if files.len() <= FILES_MAX => files
                .iter()
                .map(|f| match f.as_str() {
                    Some(f) if !f.is_empty() && f.len() <= FILE_BYTES_MAX => Ok(f.to_owned()),
                    _ => Err(format!(
                        "task `{id}`: files holds {f}, not a path of 1 to {FILE_BYTES_MAX} bytes"
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(Value::Array(files)) => {
                return Err(format!(
                    "task `{id}` names {} files, more than {FILES_MAX}",
                    files.len()
                ));
            }
            Some(other) => {
                return Err(format!("task `{id}`: files must be a list, not {other}"));
            }
        };
        if depends_on.len() > DEPENDS_MAX {
            return Err(format!(
                "task `{id}` depends on {} tasks, more than {DEPENDS_MAX}",
                depends_on.len()
            ));
        }
        tasks.push(Task {
            title: cut(
                &text("title").unwrap_or_else(|| id.clone()),
                TITLE_BYTES_MAX,
            ),
            detail: cut(&text("detail").unwrap_or_default(), DETAIL_BYTES_MAX),
            id,
            depends_on,
            needs: Vec::new(),
            status: "open",
            owner: None,
            wanted_by: None,
            attempts: 0,
            summary: None,
            last_failure: None,
            files,
            wanted_at: 0,
            forks: 0,
        });
    }
    let index: BTreeMap<String, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.clone(), i))
        .collect();
    for task in tasks.iter_mut() {
        let mut needs = Vec::with_capacity(task.depends_on.len());
        for dep in &task.depends_on {
            match index.get(dep) {
                Some(&j) => needs.push(j),
                None => {
                    return Err(format!(
                        "task `{}` depends on `{dep}`, which is not on the board",
                        task.id
                    ));
                }
            }
        }
        task.needs = needs;
    }
    // A cycle would leave its tasks open forever: refuse it up front (Kahn's order, linear).
    let mut waiting: Vec<usize> = tasks.iter().map(|t| t.needs.len()).collect();
    let mut after: Vec<Vec<usize>> = vec![Vec::new(); tasks.len()];
    for (i, task) in tasks.iter().enumerate() {
        for &j in &task.needs {
            after[j].push(i);
        }
    }
    let mut free: Vec<usize> = (0..tasks.len()).filter(|&i| waiting[i] == 0).collect();
    let mut ordered = 0;
    while let Some(j) = free.pop() {
        ordered += 1;
        for &i in &after[j] {
            waiting[i] -= 1;
            if waiting[i] == 0 {
                free.push(i);
            }
        }
    }
    if ordered < tasks.len()
        && let Some(i) = (0..tasks.len()).find(|&i| waiting[i] > 0)
    {
        return Err(format!("task `{}` is in a dependency cycle", tasks[i].id));
    }
    Ok(tasks)
}

impl TeamState {
    fn ready(&self, i: usize) -> bool {
        let task = &self.tasks[i];
        task.status == "open" && task.needs.iter().all(|&j| self.tasks[j].status == "done")
    }

    fn post(&mut self, from: &str, to: &str, text: &str) {
        let (from, to) = (cut(from, NAME_BYTES_MAX), cut(to, NAME_BYTES_MAX));
        let (from, to) = (from.as_str(), to.as_str());
        let seq = self.sent.entry(from.to_owned()).or_insert(0);
        *seq += 1;
        let number = self
            .mailbox
            .last()
            .and_then(|m| m["n"].as_u64())
            .unwrap_or(0)
            + 1;
        self.mailbox.push(json!({
            "n": number,
            "from": from,
            "seq": *seq,
            "to": to,
            "text": cut(text, MESSAGE_BYTES_MAX),
        }));
        if self.mailbox.len() > MAILBOX_MAX {
            self.mailbox.remove(0);
        }
    }

    /// The board as saved (`state.<save>`) and shown by `palm team status`.
    fn board(&self, parked: Option<&str>, path: &str) -> Value {
        let lanes = self.lanes();
        json!({
            "tasks": self.tasks.iter().map(|t| json!({
                "id": t.id, "title": t.title, "status": t.status, "owner": t.owner,
                "depends_on": t.depends_on, "attempts": t.attempts, "summary": t.summary,
                "last_failure": t.last_failure, "files": t.files,
                "lane": (lanes && t.status != "open").then(|| lane_name(path, t)),
            })).collect::<Vec<_>>(),
            "members": self.members.iter().map(|m| json!({
                "name": m.name, "provider": m.provider, "mode": m.mode, "turns": m.turns,
                "working_on": m.busy.as_ref().map(|b| self.tasks[b.task].id.clone()),
                "stage": m.busy.as_ref().map(|b| b.stage.as_str()),
            })).collect::<Vec<_>>(),
            "mailbox": self.mailbox,
            "turns": self.turns,
            "max_turns": self.max_turns,
            "cost_usd": (self.cost_usd * 10_000.0).round() / 10_000.0,
            "parked": parked,
            "out_of_budget": self.out_of_budget,
            "refused": self.refused,
            "parallel": self.parallel,
            "schedule": self.schedule,
            "decisions": self.decisions,
        })
    }

    /// Whether tasks work in lanes of their own (several at once on a repo).
    fn lanes(&self) -> bool {
        self.parallel > 1 && self.repo.is_some()
    }

    fn decide(&mut self, decision: Value) {
        self.decisions.push(decision);
        if self.decisions.len() > DECISIONS_MAX {
            self.decisions.remove(0);
        }
    }

    /// Tasks in progress (a member busy with them, in any stage).
    fn in_progress(&self) -> Vec<usize> {
        self.members
            .iter()
            .filter_map(|m| m.busy.as_ref().map(|b| b.task))
            .collect()
    }

    /// Whether task `i` may start now beside the tasks in progress; when it may not,
    /// the first it waits for and why.
    fn clear_to_start(&self, i: usize) -> Result<(), (usize, Value)> {
        let Plan::Ready { apart, all } = &self.plan else {
            return Ok(());
        };
        for j in self.in_progress() {
            let pair = (i.min(j), i.max(j));
            if *all {
                return Err((j, json!({"why": self.schedule["reason"]})));
            }
            if let Some(why) = apart.get(&pair) {
                return Err((j, why.clone()));
            }
        }
        Ok(())
    }

    /// A member's prompt for a task, and the last message number it shows.
    fn prompt(&self, job: &str, member: usize, task: usize) -> (String, u64) {
        let me = &self.members[member];
        let t = &self.tasks[task];
        let mut text = format!(
            "You are {}, one of a team of {} working together. Your task now: [{}] {}\n",
            me.name,
            self.members.len(),
            t.id,
            t.title
        );
        if !t.detail.is_empty() {
            text.push_str(&format!("{}\n", t.detail));
        }
        if !t.files.is_empty() {
            text.push_str(&format!("Files it names: {}\n", t.files.join(", ")));
        }
        if self.lanes() {
            text.push_str(
                "You work in a worktree of your own for this task, forked from the team's; \
                 it is merged into the team's once the task's check passes.\n",
            );
        }
        if let Some(failure) = &t.last_failure {
            text.push_str(&format!(
                "Your last attempt at it did not pass: {}\n",
                cut(failure, 1024)
            ));
        }
        text.push_str("\nThe board:\n");
        for other in self.tasks.iter().take(BOARD_SHOWN_MAX) {
            let owner = other
                .owner
                .as_deref()
                .map(|o| format!(" ({o})"))
                .unwrap_or_default();
            let waits = if other.depends_on.is_empty() {
                String::new()
            } else {
                format!(", after {}", other.depends_on.join(", "))
            };
            text.push_str(&format!(
                "- [{}] {}: {}{owner}{waits}\n",
                other.status, other.id, other.title
            ));
        }
        if self.tasks.len() > BOARD_SHOWN_MAX {
            text.push_str(&format!(
                "- ... and {} more tasks\n",
                self.tasks.len() - BOARD_SHOWN_MAX
            ));
        }
        // The oldest unread first; what does not fit comes in the next turn.
        let unread: Vec<&Value> = self
            .mailbox
            .iter()
            .filter(|m| m["n"].as_u64().unwrap_or(0) > me.seen)
            .take(MESSAGES_SHOWN_MAX)
            .collect();
        let shown = unread
            .last()
            .and_then(|m| m["n"].as_u64())
            .unwrap_or(me.seen);
        let for_me: Vec<&&Value> = unread
            .iter()
            .filter(|m| m["from"] != me.name.as_str())
            .filter(|m| m["to"] == "all" || m["to"] == me.name.as_str())
            .collect();
        if !for_me.is_empty() {
            text.push_str("\nMessages for you:\n");
            for m in for_me {
                text.push_str(&format!(
                    "- from {}: {}\n",
                    m["from"].as_str().unwrap_or("?"),
                    m["text"].as_str().unwrap_or("")
                ));
            }
        }
        text.push_str(&format!(
            "\nThe team is job {job}: Palm's MCP tool palm_team (team: \"{job}\") reads the \
             board and the mailbox, posts messages and claims tasks.\n"
        ));
        text.push_str(
            "\nWhen your turn ends, answer with one JSON object and nothing else: \
             {\"done\": true|false, \"summary\": \"what you did\", \"messages\": \
             [{\"to\": \"a member's name or all\", \"text\": \"...\"}]}.",
        );
        (text, shown)
    }
}

fn park(rt: &mut Runtime, spec: &TeamSpec, path: &str) -> String {
    let park = rt.next_key(path);
    let parked = Parked {
        key: spec.key.clone(),
        park: park.clone(),
        path: path.to_owned(),
        prompt: Some(
            "post to the team: {\"op\": \"post\", \"text\"} | {\"op\": \"claim\", \"member\", \"task\"} | {\"op\": \"complete\", \"member\", \"task\"} | {\"op\": \"budget\", \"turns\"}".to_owned(),
        ),
        choices: Vec::new(),
        schema: Some(ops_schema().into()),
        since: rt.now,
    };
    rt.parked.push(parked.clone());
    rt.commands.push(Command::Park(parked));
    park
}

fn unpark(rt: &mut Runtime, spec: &TeamSpec, park: Option<String>) {
    if let Some(park) = park
        && let Some(i) = rt.parked.iter().position(|p| p.park == park)
    {
        rt.parked.remove(i);
        rt.deliveries.remove(&park);
        rt.commands.push(Command::Unpark {
            key: spec.key.clone(),
            park,
        });
    }
}

/// Applies one post to the team (see [`ops_schema`]).
fn apply_op(team: &mut TeamState, op: &Value, now: u64) {
    let text = |field: &str| op.get(field).and_then(Value::as_str).unwrap_or("");
    team.refused = None;
    match text("op") {
        "post" => {
            let from = match text("from") {
                "" => "person",
                from => from,
            };
            let to = match text("to") {
                "" => "all",
                to => to,
            };
            team.post(from, to, text("text"));
        }
        "claim" => {
            let member = text("member");
            match team.tasks.iter().position(|t| t.id == text("task")) {
                Some(i)
                    if team.tasks[i].status == "open"
                        && team.members.iter().any(|m| m.name == member) =>
                {
                    team.tasks[i].wanted_by = Some(member.to_owned());
                    team.tasks[i].wanted_at = now;
                }
                _ => {
                    team.refused = Some(format!(
                        "claim of `{}` by `{member}`: no such open task or member",
                        text("task")
                    ));
                }
            }
        }
        "complete" => {
            let member = text("member");
            let task = text("task");
            let found = team
                .members
                .iter_mut()
                .find(|m| m.name == member)
                .and_then(|m| m.busy.as_mut().filter(|b| b.stage == Stage::Turn));
            match found {
                Some(busy) if team.tasks[busy.task].id == task => busy.reported = true,
                _ => {
                    team.refused = Some(format!(
                        "completion of `{task}` by `{member}`: it is not that member's task in progress"
                    ));
                }
            }
        }
        "budget" => {
            team.out_of_budget = false;
            let more = op.get("turns").and_then(Value::as_u64).unwrap_or(0);
            team.max_turns = team
                .max_turns
                .saturating_add(u32::try_from(more).unwrap_or(u32::MAX));
        }
        _ => {}
    }
}

/// A task's lane: one per fork, so a task whose lane did not merge starts again from a
/// fresh fork of the team's worktree.
fn lane_name(path: &str, task: &Task) -> String {
    format!("t{}-{}-{}", path.replace('.', "_"), task.id, task.forks)
}

/// The longest a conflict prediction may take.
const PREDICT_TIMEOUT_MS: u64 = 10 * 60 * 1000;
/// The longest a lane's merge may take.
const MERGE_TIMEOUT_MS: u64 = 10 * 60 * 1000;
/// The most of a task's detail the prediction reads.
const PREDICT_DETAIL_BYTES_MAX: usize = 1024;

/// Asks which tasks will probably touch a same file (before anything starts).
fn start_prediction(team: &mut TeamState, rt: &mut Runtime, path: &str) {
    if team.tasks.len() < 2 {
        team.plan = Plan::Ready {
            apart: BTreeMap::new(),
            all: false,
        };
        team.schedule = json!({"source": "none", "reason": "one task: nothing runs beside it"});
        return;
    }
    let tasks: Vec<Value> = team
        .tasks
        .iter()
        .map(|t| {
            json!({
                "id": t.id, "title": t.title, "files": t.files,
                "detail": cut(&t.detail, PREDICT_DETAIL_BYTES_MAX),
            })
        })
        .collect();
    let key = rt.start_effect(
        path,
        EffectRequest::Call {
            provider: PREDICT_PROVIDER.to_owned(),
            args: json!({"repo": team.repo, "tasks": tasks}).into(),
            needs: Vec::new(),
            timeout_ms: Some(PREDICT_TIMEOUT_MS),
        },
    );
    team.plan = Plan::Pending(key);
    team.schedule = json!({"source": "pending"});
}

/// Reads the prediction: the pairs to keep apart, or every pair when there is none.
fn read_prediction(team: &mut TeamState, ok: bool, value: &Value, error: Option<String>) {
    let n = team.tasks.len();
    let pairs = n * n.saturating_sub(1) / 2;
    if !(ok && value["source"] == "intel") {
        let reason = value["reason"]
            .as_str()
            .map(str::to_owned)
            .or(error)
            .unwrap_or_else(|| "no prediction".to_owned());
        team.schedule = json!({
            "source": "none",
            "reason": format!("no conflict prediction ({reason}): every pair runs one after the other"),
            "pairs": pairs,
            "serialized": pairs,
        });
        team.plan = Plan::Ready {
            apart: BTreeMap::new(),
            all: true,
        };
        return;
    }
    let index: BTreeMap<&str, usize> = team
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    let mut apart = BTreeMap::new();
    let mut shown = Vec::new();
    for pair in value["serialize"].as_array().into_iter().flatten() {
        let at = |side: &str| pair[side].as_str().and_then(|id| index.get(id).copied());
        let (Some(a), Some(b)) = (at("a"), at("b")) else {
            continue;
        };
        if a == b {
            continue;
        }
        let why = json!({
            "score": pair["score"],
            "files": pair["files"],
            "why": "predicted to touch a same file",
        });
        apart.insert((a.min(b), a.max(b)), why);
        if shown.len() < PAIRS_SHOWN_MAX {
            shown.push(pair.clone());
        }
    }
    team.schedule = json!({
        "source": "intel",
        "threshold": value["threshold"],
        "pairs": pairs,
        "serialized": apart.len(),
        "serialize": shown,
        "footprints": value["footprints"],
    });
    team.plan = Plan::Ready { apart, all: false };
}

impl TeamState {
    /// The next (member, task) to start, if any: a free member's claimed task, else the
    /// first ready task for the next free member; a task predicted to touch what a task
    /// in progress touches waits (and the hold is recorded once).
    fn pick(&mut self, now: u64) -> Option<(usize, usize)> {
        for i in 0..self.tasks.len() {
            let task = &self.tasks[i];
            if task.status == "open"
                && let Some(who) = task.wanted_by.clone()
                && now.saturating_sub(task.wanted_at) > CLAIM_LEASE_MS
            {
                self.tasks[i].wanted_by = None;
                let id = self.tasks[i].id.clone();
                self.decide(json!({"task": id, "claim_lapsed": who, "at": now}));
            }
        }
        let count = self.members.len();
        let free: Vec<usize> = (0..count)
            .map(|k| (self.next_member + k) % count)
            .filter(|&m| self.members[m].busy.is_none())
            .collect();
        let first_free = *free.first()?;
        for &m in &free {
            for i in 0..self.tasks.len() {
                if self.ready(i)
                    && self.tasks[i].wanted_by.as_deref() == Some(self.members[m].name.as_str())
                    && self.cleared(i, now)
                {
                    return Some((m, i));
                }
            }
        }
        (0..self.tasks.len())
            .find(|&i| self.ready(i) && self.tasks[i].wanted_by.is_none() && self.cleared(i, now))
            .map(|i| (first_free, i))
    }

    /// [`TeamState::clear_to_start`], recording a hold the first time it happens.
    fn cleared(&mut self, i: usize, now: u64) -> bool {
        match self.clear_to_start(i) {
            Ok(()) => true,
            Err((j, why)) => {
                if self.held.insert((i, j)) {
                    let decision = json!({
                        "task": self.tasks[i].id,
                        "waits_for": self.tasks[j].id,
                        "score": why["score"],
                        "files": why["files"],
                        "why": why["why"],
                        "at": now,
                    });
                    self.decide(decision);
                }
                false
            }
        }
    }
}

/// Starts member `m`'s turn on task `i`.
fn start_turn(
    team: &mut TeamState,
    spec: &TeamSpec,
    rt: &mut Runtime,
    path: &str,
    m: usize,
    i: usize,
) {
    let (prompt, shown) = team.prompt(&rt.job, m, i);
    let lane = team.lanes().then(|| lane_name(path, &team.tasks[i]));
    let member = &team.members[m];
    let name = member.name.clone();
    let mut args = serde_json::Map::new();
    args.insert("provider".into(), json!(member.provider));
    args.insert("prompt".into(), json!(prompt));
    args.insert("mode".into(), json!(member.mode));
    if let Some(repo) = &team.repo {
        args.insert("repo".into(), json!(repo));
    }
    if let Some(lane) = &lane {
        args.insert("lane".into(), json!(lane));
    }
    if let Some(model) = &member.model {
        args.insert("model".into(), json!(model));
    }
    args.insert("schema".into(), turn_schema());
    args.insert("timeout_ms".into(), json!(spec.turn_timeout_ms));
    for (key, template) in &spec.budget {
        if let Ok(value) = render_value(template, &rt.scope()) {
            args.insert(key.clone(), value);
        }
    }
    let key = rt.start_effect(
        path,
        EffectRequest::Call {
            provider: AGENT_PROVIDER.to_owned(),
            args: Value::Object(args).into(),
            needs: Vec::new(),
            timeout_ms: Some(spec.turn_timeout_ms.saturating_add(TURN_GRACE_MS)),
        },
    );
    if let Some(lane) = lane {
        let beside: Vec<String> = team
            .in_progress()
            .into_iter()
            .map(|j| team.tasks[j].id.clone())
            .collect();
        let decision = json!({
            "task": team.tasks[i].id, "member": name, "lane": lane, "beside": beside,
            "at": rt.now,
        });
        team.decide(decision);
    }
    let count = team.members.len();
    team.tasks[i].status = "claimed";
    team.tasks[i].owner = Some(name);
    team.tasks[i].wanted_by = None;
    team.next_member = (m + 1) % count;
    team.members[m].busy = Some(Busy {
        task: i,
        key,
        stage: Stage::Turn,
        shown,
        reported: false,
    });
}

/// A task's work is checked (or needs no check): into the merge queue with lanes, else
/// done.
fn finished(team: &mut TeamState, m: usize, task: usize) {
    if team.lanes() {
        team.tasks[task].status = "merging";
        if let Some(busy) = team.members[m].busy.as_mut() {
            busy.stage = Stage::Queued;
            busy.key.clear();
        }
        team.merge_queue.push(m);
    } else {
        team.tasks[task].status = "done";
        team.members[m].busy = None;
    }
}

/// The one merge at a time: the first lane in the queue.
fn start_merge(team: &mut TeamState, rt: &mut Runtime, path: &str) {
    let merging = team
        .members
        .iter()
        .any(|m| m.busy.as_ref().is_some_and(|b| b.stage == Stage::Merge));
    if merging || team.merge_queue.is_empty() {
        return;
    }
    let m = team.merge_queue.remove(0);
    let Some(task) = team.members[m].busy.as_ref().map(|b| b.task) else {
        return;
    };
    let lane = lane_name(path, &team.tasks[task]);
    let key = rt.start_effect(
        path,
        EffectRequest::Call {
            provider: MERGE_PROVIDER.to_owned(),
            args: json!({"repo": team.repo, "lane": lane}).into(),
            needs: Vec::new(),
            timeout_ms: Some(MERGE_TIMEOUT_MS),
        },
    );
    if let Some(busy) = team.members[m].busy.as_mut() {
        busy.stage = Stage::Merge;
        busy.key = key;
    }
}

/// Ticks a team. See the module docs.
pub(super) fn tick_team(node: &mut RtNode, p: &Program, rt: &mut Runtime) -> Status {
    let SpecKind::Team(spec) = &p.spec(node.spec).kind else {
        unreachable!("a team node has team spec");
    };
    let path = node.path.to_string();
    if !node.status.is_running() {
        let scope = rt.scope();
        let tasks = render_value(&spec.tasks, &scope).map_err(|e| format!("team tasks: {e}"));
        let repo = match &spec.repo {
            Some(repo) => render_value(repo, &scope)
                .map(|v| v.as_str().map(str::to_owned))
                .map_err(|e| format!("team repo: {e}")),
            None => Ok(None),
        };
        let read = tasks
            .and_then(|t| read_tasks(&t))
            .and_then(|t| Ok((t, repo?)));
        let (tasks, repo) = match read {
            Ok(read) => read,
            Err(reason) => {
                rt.fail(&path, reason);
                stop_node(node, p, rt, Status::Failure);
                return Status::Failure;
            }
        };
        let mut team = TeamState {
            tasks,
            members: spec
                .members
                .iter()
                .map(|m| Member {
                    name: m.name.clone(),
                    provider: m.provider.clone(),
                    mode: m.mode.clone(),
                    model: m.model.clone(),
                    busy: None,
                    seen: 0,
                    turns: 0,
                })
                .collect(),
            max_turns: spec.max_turns,
            repo,
            parallel: spec.parallel.max(1) as usize,
            ..TeamState::default()
        };
        team.park = Some(park(rt, spec, &path));
        if team.lanes() {
            start_prediction(&mut team, rt, &path);
        }
        node.state = NodeState::Team(Box::new(team));
    }
    // Posts first: a claim or more budget changes what starts now.
    if let Some(key) = state(node).park.clone()
        && let Some(Delivery::Continued(op)) = rt.deliveries.remove(&key)
    {
        rt.parked.retain(|p| p.park != key);
        apply_op(state(node), &op, rt.now);
        let again = park(rt, spec, &path);
        state(node).park = Some(again);
    }
    if let Plan::Pending(key) = state(node).plan.clone()
        && let Some(outcome) = rt.take_outcome(&key)
    {
        let (ok, value, error) = call_outcome(outcome);
        read_prediction(state(node), ok, &value, error);
    }
    // Turns, checks and merges that ended.
    for m in 0..state(node).members.len() {
        let Some(busy) = state(node).members[m].busy.clone() else {
            continue;
        };
        if busy.key.is_empty() {
            continue;
        }
        let Some(outcome) = rt.take_outcome(&busy.key) else {
            continue;
        };
        let (ok, value, error) = call_outcome(outcome);
        match busy.stage {
            Stage::Check => check_ended(state(node), m, &busy, &value, error, spec),
            Stage::Merge => merge_ended(state(node), m, &busy, ok, &value, error, spec, rt.now),
            Stage::Turn => turn_ended(node, m, &busy, ok, value, error, spec, rt, &path),
            Stage::Queued => {}
        }
    }
    start_merge(state(node), rt, &path);
    // New turns while the budget lasts, as many tasks in progress as `parallel` allows.
    loop {
        let team = state(node);
        let pending = matches!(team.plan, Plan::Pending(_));
        if pending
            || team.out_of_budget
            || team.turns_started() >= team.max_turns
            || team.in_progress().len() >= team.parallel
        {
            break;
        }
        let Some((m, i)) = team.pick(rt.now) else {
            break;
        };
        start_turn(team, spec, rt, &path, m, i);
    }
    let team = state(node);
    let busy =
        team.members.iter().any(|m| m.busy.is_some()) || matches!(team.plan, Plan::Pending(_));
    let all_done = team.tasks.iter().all(|t| t.status == "done");
    let ready = (0..team.tasks.len()).any(|i| team.ready(i));
    let parked = (!busy && ready && !all_done).then_some("budget");
    let board = team.board(parked, &path);
    rt.write_state(&spec.save, board);
    if all_done {
        let park = state(node).park.take();
        unpark(rt, spec, park);
        stop_node(node, p, rt, Status::Success);
        return Status::Success;
    }
    if busy {
        node.status = Status::Running;
        return Status::Running;
    }
    if ready {
        // Out of turns: parked until someone gives the team more.
        node.status = Status::Waiting;
        return Status::Waiting;
    }
    let team = state(node);
    let failed: Vec<String> = team
        .tasks
        .iter()
        .filter(|t| t.status == "failed")
        .map(|t| {
            format!(
                "{} ({})",
                t.id,
                t.last_failure.as_deref().unwrap_or("failed")
            )
        })
        .collect();
    let park = team.park.take();
    unpark(rt, spec, park);
    rt.fail(
        &path,
        format!("the team cannot finish: failed tasks {}", failed.join("; ")),
    );
    stop_node(node, p, rt, Status::Failure);
    Status::Failure
}

fn call_outcome(outcome: Outcome) -> (bool, Value, Option<String>) {
    match outcome {
        Outcome::Call { ok, value, error } => (ok, value.0, error),
        other => (
            false,
            Value::Null,
            Some(format!("unexpected outcome {other:?}")),
        ),
    }
}

/// A task's check ended: on to the merge (or done), else back to open.
fn check_ended(
    team: &mut TeamState,
    m: usize,
    busy: &Busy,
    value: &Value,
    error: Option<String>,
    spec: &TeamSpec,
) {
    if value["ok"] == true {
        finished(team, m, busy.task);
        return;
    }
    team.members[m].busy = None;
    let names: Vec<&str> = value["failures"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|x| x["name"].as_str())
                .take(10)
                .collect()
        })
        .unwrap_or_default();
    let why = if names.is_empty() {
        error.unwrap_or_else(|| "the check failed".to_owned())
    } else {
        format!("the check failed: {}", names.join(", "))
    };
    reopen(&mut team.tasks[busy.task], why, spec.attempts);
}

/// A lane's merge ended: the task is done, or (it did not apply) open again, to start
/// over from a fresh fork.
#[allow(clippy::too_many_arguments)]
fn merge_ended(
    team: &mut TeamState,
    m: usize,
    busy: &Busy,
    ok: bool,
    value: &Value,
    error: Option<String>,
    spec: &TeamSpec,
    now: u64,
) {
    team.members[m].busy = None;
    let id = team.tasks[busy.task].id.clone();
    if ok {
        team.tasks[busy.task].status = "done";
        let decision = json!({
            "task": id, "merged": value["files"], "patch": value["patch"]["id"], "at": now,
        });
        team.decide(decision);
        // Holds against it are over: a later one is recorded again.
        team.held.retain(|&(_, j)| j != busy.task);
        return;
    }
    let why = format!(
        "its lane did not merge into the team's worktree: {}",
        error.unwrap_or_else(|| "the merge failed".to_owned())
    );
    team.decide(json!({"task": id, "merge_failed": why, "at": now}));
    team.held.retain(|&(_, j)| j != busy.task);
    let task = &mut team.tasks[busy.task];
    task.forks += 1;
    reopen(task, why, spec.attempts);
}

/// A member's turn ended: its messages posted, then the check, the merge, or done.
#[allow(clippy::too_many_arguments)]
fn turn_ended(
    node: &mut RtNode,
    m: usize,
    busy: &Busy,
    ok: bool,
    value: Value,
    error: Option<String>,
    spec: &TeamSpec,
    rt: &mut Runtime,
    path: &str,
) {
    let team = state(node);
    let member_name = team.members[m].name.clone();
    // What the prompt showed is read, whatever came of the turn; what was posted
    // meanwhile comes in the member's next prompt.
    team.members[m].seen = team.members[m].seen.max(busy.shown);
    if value["end"] == "budget" {
        // The flow's spending budget is used up: not the task's fault. The team parks.
        team.out_of_budget = true;
        team.members[m].busy = None;
        let task = &mut team.tasks[busy.task];
        task.status = "open";
        task.owner = None;
        task.last_failure = error.map(|e| cut(&e, MESSAGE_BYTES_MAX));
        return;
    }
    team.turns += 1;
    team.members[m].turns += 1;
    team.cost_usd += value["cost_usd"].as_f64().unwrap_or(0.0);
    let answer = &value["structured"];
    let messages = answer["messages"].as_array().into_iter().flatten();
    for message in messages.take(MESSAGES_PER_TURN_MAX) {
        let to = message["to"].as_str().unwrap_or("all").to_owned();
        let text = message["text"].as_str().unwrap_or("").to_owned();
        if !text.is_empty() {
            team.post(&member_name, &to, &text);
        }
    }
    let done = ok && (answer["done"] != false || busy.reported);
    team.tasks[busy.task].summary = answer["summary"]
        .as_str()
        .map(|s| cut(s, MESSAGE_BYTES_MAX));
    if !done {
        let why = error.unwrap_or_else(|| "the member said it is not done".to_owned());
        team.members[m].busy = None;
        reopen(&mut team.tasks[busy.task], why, spec.attempts);
        return;
    }
    let Some(check) = &spec.check else {
        finished(team, m, busy.task);
        return;
    };
    team.tasks[busy.task].status = "checking";
    let lane = team
        .lanes()
        .then(|| lane_name(path, &team.tasks[busy.task]));
    match render_value(&check.args, &rt.scope()) {
        Ok(mut args) => {
            // The check runs where the task's work is: its lane.
            if let (Some(lane), Some(map)) = (lane, args.as_object_mut()) {
                map.entry("lane").or_insert(json!(lane));
            }
            let key = rt.start_effect(
                path,
                EffectRequest::Call {
                    provider: check.provider.clone(),
                    args: args.into(),
                    needs: check.needs.clone(),
                    timeout_ms: check.timeout_ms,
                },
            );
            state(node).members[m].busy = Some(Busy {
                task: busy.task,
                key,
                stage: Stage::Check,
                shown: busy.shown,
                reported: false,
            });
        }
        Err(err) => {
            let team = state(node);
            team.members[m].busy = None;
            reopen(&mut team.tasks[busy.task], format!("check args: {err}"), 0);
        }
    }
}

impl TeamState {
    /// Turns taken plus turns in flight (a turn in flight counts against the budget).
    fn turns_started(&self) -> u32 {
        let in_flight = self
            .members
            .iter()
            .filter(|m| m.busy.as_ref().is_some_and(|b| b.stage == Stage::Turn))
            .count() as u32;
        self.turns + in_flight
    }
}

fn reopen(task: &mut Task, why: String, attempts: u32) {
    task.attempts += 1;
    task.last_failure = Some(cut(&why, MESSAGE_BYTES_MAX));
    task.owner = None;
    task.status = if attempts > 0 && task.attempts >= attempts {
        "failed"
    } else {
        "open"
    };
}

/// Releases a halted team: its members' turns and checks, and its standing wait.
pub(super) fn terminate(node: &mut RtNode, p: &Program, rt: &mut Runtime) {
    let SpecKind::Team(spec) = &p.spec(node.spec).kind else {
        return;
    };
    let NodeState::Team(team) = &mut node.state else {
        return;
    };
    for member in team.members.iter_mut() {
        if let Some(busy) = member.busy.take()
            && !busy.key.is_empty()
        {
            rt.cancel_effect(&busy.key);
        }
    }
    team.merge_queue.clear();
    if let Plan::Pending(key) = std::mem::take(&mut team.plan) {
        rt.cancel_effect(&key);
    }
    let park = team.park.take();
    unpark(rt, spec, park);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_board_is_checked_before_anyone_works() {
        let ok = read_tasks(&json!([
            {"id": "a", "title": "first"},
            {"id": "b", "depends_on": ["a"]}
        ]))
        .expect("a board");
        assert_eq!(ok[1].title, "b");
        for (board, expected) in [
            (json!({"id": "a"}), "must be a list"),
            (json!([{"title": "x"}]), "has no `id`"),
            (json!([{"id": "a"}, {"id": "a"}]), "two team tasks"),
            (
                json!([{"id": "a", "depends_on": ["z"]}]),
                "not on the board",
            ),
            (
                json!([{"id": "a", "depends_on": ["b"]}, {"id": "b", "depends_on": ["a"]}]),
                "cycle",
            ),
        ] {
            let err = read_tasks(&board).expect_err("refused");
            assert!(err.contains(expected), "{err}");
        }
    }

    fn member(name: &str) -> Member {
        Member {
            name: name.to_owned(),
            provider: "claude".to_owned(),
            mode: "edit".to_owned(),
            model: None,
            busy: None,
            seen: 0,
            turns: 0,
        }
    }

    fn working(task: usize) -> Option<Busy> {
        Some(Busy {
            task,
            key: format!("k{task}"),
            stage: Stage::Turn,
            shown: 0,
            reported: false,
        })
    }

    #[test]
    fn tasks_predicted_to_overlap_never_run_side_by_side() {
        let tasks = read_tasks(&json!([
            {"id": "a", "files": ["src/parser.rs"]},
            {"id": "b", "files": ["src/parser.rs"]},
            {"id": "c"},
        ]))
        .expect("board");
        let mut apart = BTreeMap::new();
        apart.insert(
            (0, 1),
            json!({"score": 1.0, "files": ["src/parser.rs"], "why": "w"}),
        );
        let mut team = TeamState {
            tasks,
            members: vec![member("ann"), member("ben"), member("cat")],
            parallel: 3,
            repo: Some("/r".to_owned()),
            plan: Plan::Ready { apart, all: false },
            ..TeamState::default()
        };
        team.tasks[0].status = "claimed";
        team.members[0].busy = working(0);
        team.next_member = 1;
        // b waits for a; c goes to the next free member; the hold is recorded once.
        assert_eq!(team.pick(0), Some((1, 2)));
        team.tasks[2].status = "claimed";
        team.members[1].busy = working(2);
        assert_eq!(team.pick(0), None);
        let holds: Vec<&Value> = team
            .decisions
            .iter()
            .filter(|d| d["waits_for"] == "a")
            .collect();
        assert_eq!(holds.len(), 1, "{:?}", team.decisions);
        assert_eq!(holds[0]["task"], "b");
        assert_eq!(holds[0]["files"], json!(["src/parser.rs"]));
        // Once a is no longer in progress, b may start.
        team.members[0].busy = None;
        team.tasks[0].status = "done";
        assert_eq!(team.pick(0), Some((2, 1)));
        // With no prediction, nothing runs beside anything.
        team.plan = Plan::Ready {
            apart: BTreeMap::new(),
            all: true,
        };
        team.tasks[0].status = "open";
        assert_eq!(team.pick(0), None, "c is in progress");
    }

    #[test]
    fn a_claim_not_taken_within_its_lease_lapses() {
        let tasks = read_tasks(&json!([{"id": "a"}, {"id": "b"}])).expect("board");
        let mut team = TeamState {
            tasks,
            members: vec![member("ann"), member("ben")],
            ..TeamState::default()
        };
        apply_op(
            &mut team,
            &json!({"op": "claim", "member": "ben", "task": "a"}),
            1_000,
        );
        team.members[1].busy = working(1);
        team.tasks[1].status = "claimed";
        // ben is busy: a stays his while the lease lasts...
        assert_eq!(team.pick(1_000 + CLAIM_LEASE_MS), None);
        // ...and goes to whoever is free after it.
        assert_eq!(team.pick(1_001 + CLAIM_LEASE_MS), Some((0, 0)));
        assert!(team.decisions.iter().any(|d| d["claim_lapsed"] == "ben"));
    }
}
