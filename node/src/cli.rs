//! Command-line arguments (clap). Names and flags here are a contract (design §10):
//! extend, don't rename.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// The exit codes (`palm --help`; the table is `palm_api::exit`'s).
const EXIT_CODES: &str = "Exit codes:
  0   the job succeeded, or the command did what it was asked
  1   any other error (I/O, a store problem, a node that does not answer)
  2   usage error or invalid input
  3   the job failed
  4   the job is waiting for input
  5   the job was cancelled
  6   a loop with the same key is already running (nothing started)
  7   the job succeeded; its loop ended no_op
  8   the job failed; its loop ended blocked
  9   the job failed without progress (a loop stagnated, an until_green stalled)
  10  the job failed exhausted (out of rounds, iterations or time)
  130 interrupted by Ctrl-C at a prompt (`palm wizard`: the draft is kept)";

/// Palm: durable jobs on Behavior Trees that wait, resume, survive crashes and spread
/// over machines.
#[derive(Debug, Parser)]
#[command(
    name = "palm",
    version,
    propagate_version = true,
    disable_help_subcommand = true,
    after_long_help = EXIT_CODES
)]
pub struct Cli {
    /// Data directory [default: $PALM_HOME, else ~/.palm].
    #[arg(long, global = true, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Print one JSON document on stdout (logs and progress stay on stderr).
    #[arg(long, global = true)]
    pub json: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// `palm jobs` subcommands.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Collect ended jobs: older than the journal's retention they keep only their
    /// summary; older than the summary's, they are forgotten. Defaults come from
    /// `retention:` in palm.yaml (journal 30d, summary 365d).
    Gc(JobsGcArgs),
}

/// `palm jobs gc`.
#[derive(Debug, Args)]
pub struct JobsGcArgs {
    /// Keep ended jobs' journals this long (e.g. 7d, 12h, 0s).
    #[arg(long, value_name = "DURATION")]
    pub keep: Option<String>,
    /// Keep ended jobs' summaries this long, or `forever`.
    #[arg(long, value_name = "DURATION")]
    pub keep_summaries: Option<String>,
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node in the foreground until SIGINT/SIGTERM.
    Up(UpArgs),
    /// Run a flow and wait for its outcome (boots an embedded node if none serves DIR).
    Run(RunArgs),
    /// Submit a job and return at once.
    Submit(SubmitArgs),
    /// Show a job: status, what it waits on, its state, its error. With no job: the
    /// node at a glance, live (as `palm top`).
    Status {
        /// Job id.
        job: Option<String>,
        /// With no job: print one snapshot instead of redrawing.
        #[arg(long)]
        once: bool,
    },
    /// The node at a glance, redrawn in place: seats, queues, blocked work, jobs, the
    /// jobs waiting for input, places, links. One snapshot with --once, --json or no
    /// terminal.
    Top {
        /// Print one snapshot.
        #[arg(long)]
        once: bool,
        /// How often to redraw (default 1s).
        #[arg(long, value_name = "DURATION")]
        every: Option<String>,
    },
    /// List jobs (`palm jobs gc` collects ended ones).
    #[command(args_conflicts_with_subcommands = true)]
    Jobs {
        /// `gc`.
        #[command(subcommand)]
        command: Option<JobsCommand>,
        /// Only jobs with this status (pending, running, waiting, succeeded, failed, cancelled).
        #[arg(long)]
        status: Option<String>,
        /// At most this many.
        #[arg(long)]
        limit: Option<usize>,
        /// The jobs homed at this node of the tree (a root or a realm, by name)
        /// [default: the nearest home's].
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
    },
    /// Continue a waiting job: deliver input to the wait named KEY.
    Continue(ContinueArgs),
    /// Cancel a job.
    Cancel {
        /// Job id.
        job: String,
        /// Why (recorded in the journal).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Retry an ended job from a node of its tree (the path `palm inspect` shows): a new
    /// job keeps what the old one did before the node began and runs the rest again.
    Retry(RetryArgs),
    /// Show a job's journal and its tree with every node's status.
    Inspect {
        /// Job id.
        job: String,
    },
    /// Flow definitions: validate, schema, trace, add, list, show.
    #[command(subcommand)]
    Flows(FlowsCommand),
    /// The node's live self-report: seats, queues, jobs, places, links, memory.
    Vitality,
    /// The place book: workloads the node spawns or adopts, with health and readiness.
    Places {
        /// What to do [default: list].
        #[command(subcommand)]
        command: Option<PlacesCommand>,
    },
    /// Run the deterministic simulator: the real cores under seeded faults.
    Sim(palm_sim::cli::SimArgs),
    /// What starts what: the `on:` triggers of stored flows, last fired, next scheduled.
    Interests {
        /// What to do [default: list].
        #[command(subcommand)]
        command: Option<InterestsCommand>,
    },
    /// Emit a named event: flows with `on: {event: NAME}` start.
    Emit {
        /// Event name.
        event: String,
        /// Its data, as JSON (text that is not JSON is taken as a string). Not `--data`:
        /// that is every command's data directory.
        #[arg(long, value_name = "JSON", default_value = "null")]
        payload: String,
    },
    /// The providers `call` leaves can use on this node.
    Providers,
    /// The tree of nodes as this node sees it: roles, links, seats, capabilities.
    Tree,
    /// Join tokens for child nodes, and revocation (on a root).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Check this machine and data directory for problems.
    Doctor,
    /// Print a shell completion script (e.g. `palm completions bash > /etc/bash_completion.d/palm`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the version.
    Version {
        /// Build details too.
        #[arg(long)]
        full: bool,
    },
    /// Benchmarks measured against a raw baseline in the same run.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Serve MCP (stdio, or streamable HTTP with --http) so coding agents drive jobs.
    Mcp(palm_mcp::McpArgs),
    /// Coding agents: run one (claude, codex, or a CLI under `agents:` in palm.yaml).
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Which stored flow fits a task, within an authority ceiling (no model needed);
    /// `--execute` runs it.
    Route(RouteArgs),
    /// Do a task: route it within the edit ceiling, run it (or the built-in
    /// plan-and-verify flow when nothing fits) and report what ran, verdicts and patches.
    Start(StartArgs),
    /// Wizards: forms asked one step at a time, each step a parked wait (the draft
    /// survives Ctrl-C, a crash, a week away); start one, or resume one anywhere.
    #[command(subcommand)]
    Wizard(WizardCommand),
    /// A team of agents (mixed providers) on a durable board of tasks: start, status,
    /// post, resume, stop.
    #[command(subcommand)]
    Team(TeamCommand),
    /// Palm for the agents working in a repo: install the adoption block, print it.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Patches agent runs left: list, show, apply, revert.
    #[command(subcommand)]
    Patches(PatchesCommand),
    /// The jobs' worktrees: list them with their disk use, reclaim finished ones.
    #[command(subcommand)]
    Worktrees(WorktreesCommand),
    /// The agents' session memory: ingest Claude and Codex transcripts into an archive
    /// that outlives the vendors' sweeps; list, show, forget, prune.
    #[cfg(feature = "intel")]
    #[command(subcommand)]
    Sessions(crate::sessions_cmd::SessionsCommand),
    /// Search every archived agent session (Claude and Codex) at once.
    #[cfg(feature = "intel")]
    Recall(crate::sessions_cmd::RecallArgs),
    /// The knowledge map of a repo, every claim cited as file:line or commit: build,
    /// show, search, audit, decide, why, context, incidents.
    #[cfg(feature = "intel")]
    #[command(subcommand)]
    Knowledge(crate::knowledge_cmd::KnowledgeCommand),
    /// Repo intelligence: index, symbols, callers, search, neighbors, risk, changed-now,
    /// explain, handoff (see `intel_cmd.rs`).
    #[cfg(feature = "intel")]
    #[command(flatten)]
    Intel(crate::intel_cmd::IntelCommand),
}

/// `palm up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Phenotype: all-in-one, root, realm or edge [default: the role this data directory
    /// was enrolled as, else all-in-one].
    #[arg(long)]
    pub profile: Option<String>,
    /// Concurrent seats [default: number of CPUs].
    #[arg(long)]
    pub seats: Option<usize>,
    /// Address to accept child nodes on (root and realm profiles).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Parent node to link to; several addresses, comma-separated, for the replicas of
    /// one parent (a root on PostgreSQL): all are dialled at once, the one serving wins.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT]")]
    pub parent: Option<String>,
    /// One-time join token from the parent.
    #[arg(long)]
    pub token: Option<String>,
    /// Node configuration file [default: DIR/palm.yaml].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Node name [default: the host name].
    #[arg(long)]
    pub name: Option<String>,
    /// How long running effects may finish after SIGINT/SIGTERM, in ms.
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    pub grace_ms: u64,
    /// Serve the REST API (/v1) and the Explorer on HOST:PORT (`--http` alone:
    /// 127.0.0.1:7470; `:PORT` or `PORT`: loopback). Beyond loopback every request needs
    /// an API token (`palm token create --role api`).
    #[arg(long, value_name = "HOST:PORT", num_args = 0..=1, default_missing_value = crate::web::HTTP_DEFAULT)]
    pub http: Option<String>,
    /// Where the node keeps its truth: `redb` (the data directory's own file) or a
    /// `postgres://USER@HOST:PORT/DB[?schema=NAME&pool=N]` URL (a cloud root's replicated
    /// store). Recorded in DIR/store.url, so later commands on this directory use it too
    /// [default: as recorded, else redb].
    #[arg(long, value_name = "redb|URL", env = "PALM_STORE")]
    pub store: Option<String>,
}

/// `palm run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A flow file (YAML or JSON) or the name of a stored flow.
    pub flow: String,
    /// Input field, KEY=VALUE (repeatable).
    #[arg(long = "input", short = 'i', value_name = "KEY=VALUE")]
    pub inputs: Vec<String>,
    /// Concurrent seats of the embedded node [default: number of CPUs].
    #[arg(long)]
    pub seats: Option<usize>,
    /// Stop waiting after this long (e.g. 30s, 5m); the job goes on.
    #[arg(long)]
    pub timeout: Option<String>,
    /// Run this revision of a stored flow [default: its latest].
    #[arg(long, value_name = "N")]
    pub revision: Option<u32>,
}

/// `palm submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// A flow file (YAML or JSON) or the name of a stored flow.
    pub flow: String,
    /// Input field, KEY=VALUE (repeatable).
    #[arg(long = "input", short = 'i', value_name = "KEY=VALUE")]
    pub inputs: Vec<String>,
    /// Submit this revision of a stored flow [default: its latest].
    #[arg(long, value_name = "N")]
    pub revision: Option<u32>,
    /// Home the job on this node of the tree (a root or a realm, by name; a stored flow
    /// must be stored there) [default: the nearest home, this node unless it is an edge].
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
}

/// `palm continue`.
#[derive(Debug, Args)]
pub struct ContinueArgs {
    /// Job id.
    pub job: String,
    /// The wait's key.
    #[arg(long)]
    pub key: String,
    /// The input, as JSON (text that is not JSON is taken as a string).
    #[arg(long, default_value = "null")]
    pub input: String,
    /// Return at once instead of waiting for the job to settle.
    #[arg(long)]
    pub no_wait: bool,
    /// Stop waiting after this long (e.g. 30s); the job goes on.
    #[arg(long)]
    pub timeout: Option<String>,
}

/// `palm retry`.
#[derive(Debug, Args)]
pub struct RetryArgs {
    /// The ended job.
    pub job: String,
    /// The node to run again from (`0.2.1`, as `palm inspect` shows it).
    #[arg(long, value_name = "PATH")]
    pub from: String,
    /// Run this revision of the flow (a fixed step); it must derive the same history
    /// up to the node. Default: the revision the job ran.
    #[arg(long)]
    pub revision: Option<u32>,
    /// Return once the new job is started instead of waiting for it to settle.
    #[arg(long)]
    pub no_wait: bool,
    /// Stop waiting after this long (e.g. 30s); the job goes on.
    #[arg(long)]
    pub timeout: Option<String>,
}

/// `palm wizard ...`.
#[derive(Debug, Subcommand)]
pub enum WizardCommand {
    /// Start a flow whose tree is a wizard and answer its steps (prompts on a terminal;
    /// without one, every answer comes from --set and --yes).
    Start(WizardStartArgs),
    /// Continue a wizard at the step it waits on, with the answers so far kept.
    Resume(WizardResumeArgs),
}

/// How a wizard's steps are answered without prompts.
#[derive(Debug, Clone, Args)]
pub struct WizardAnswers {
    /// Answer a step: STEP=VALUE (VALUE is JSON, or else text), STEP.FIELD=VALUE for a
    /// step that asks an object; repeat it for a collection's items (or give a JSON list).
    #[arg(long = "set", value_name = "STEP=VALUE")]
    pub set: Vec<String>,
    /// Accept each step's proposed answer (its default, or the answer given before);
    /// a collection is done once it holds enough items; the summary commits.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `palm wizard start`.
#[derive(Debug, Args)]
pub struct WizardStartArgs {
    /// A flow file (YAML/JSON) or the name of a stored flow.
    pub flow: String,
    /// Run this stored revision.
    #[arg(long)]
    pub revision: Option<u32>,
    /// The flow's inputs, `key=value`.
    #[arg(value_name = "KEY=VALUE")]
    pub inputs: Vec<String>,
    #[command(flatten)]
    pub answers: WizardAnswers,
}

/// `palm wizard resume`.
#[derive(Debug, Args)]
pub struct WizardResumeArgs {
    /// The wizard's job.
    pub job: String,
    #[command(flatten)]
    pub answers: WizardAnswers,
}

/// `palm flows ...`.
#[derive(Debug, Subcommand)]
pub enum FlowsCommand {
    /// Check flow files; every problem is reported as FILE:LINE:COL.
    Validate {
        /// Flow files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the JSON Schema of the flow format.
    Schema,
    /// Tick a tree of scripted leaves and print every node's status per tick.
    Trace {
        /// Trace spec (JSON).
        spec: PathBuf,
        /// Ticks to run.
        #[arg(long, default_value_t = 10)]
        ticks: u32,
    },
    /// Store a flow file as a new revision.
    Add {
        /// Flow file.
        file: PathBuf,
    },
    /// List stored flows.
    List,
    /// Show a stored flow.
    Show {
        /// Flow name.
        name: String,
        /// A revision other than the latest.
        #[arg(long)]
        revision: Option<u32>,
    },
    /// Move unfinished jobs to another revision: shows which can move (the revision must
    /// derive their history unchanged), then moves them. Exit 1 if some cannot move.
    Migrate(FlowsMigrateArgs),
}

/// `palm team ...`.
#[derive(Debug, Subcommand)]
pub enum TeamCommand {
    /// Start a team on a board (a YAML or JSON list of {id, title, detail, depends_on})
    /// and wait until it is done, fails or parks.
    Start(TeamStartArgs),
    /// The board: tasks, members, turns, the mailbox.
    Status {
        /// The team (its job id).
        team: String,
    },
    /// Post a message to the team's mailbox (to all, or --to one member).
    Post {
        /// The team.
        team: String,
        /// The message.
        text: String,
        /// A member's name [default: all].
        #[arg(long)]
        to: Option<String>,
        /// Who says it [default: person].
        #[arg(long)]
        from: Option<String>,
    },
    /// Give a parked team more turns and wait for it again.
    Resume {
        /// The team.
        team: String,
        /// How many more member turns.
        #[arg(long)]
        turns: u32,
    },
    /// Stop a team (cancels its job; turns in flight are stopped).
    Stop {
        /// The team.
        team: String,
    },
}

/// `palm team start TASKS`.
#[derive(Debug, Args)]
pub struct TeamStartArgs {
    /// The board: a YAML or JSON file with a list of tasks ({id, title, detail,
    /// depends_on, files}), or `tasks:` holding one.
    pub tasks: PathBuf,
    /// A member: NAME=PROVIDER or NAME=PROVIDER:MODE (mode: observe, edit, execute).
    #[arg(long = "member", required = true)]
    pub members: Vec<String>,
    /// The checkout the team works on.
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// A check every task's turn must pass before it is done (e.g. "cargo test").
    #[arg(long)]
    pub check: Option<String>,
    /// Member turns before the team parks [default: 50].
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Tasks in progress at once, each in its own worktree merged back when its check
    /// passes; tasks predicted to touch a same file (the repo index) never run side by
    /// side [default: 1].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub parallel: Option<u32>,
    /// Return once it has started.
    #[arg(long)]
    pub no_wait: bool,
}

/// `palm route "TASK"`.
#[derive(Debug, Args)]
pub struct RouteArgs {
    /// The task, in plain words.
    pub task: String,
    /// The ceiling: observe, edit or execute. A flow that needs more is refused.
    #[arg(long, default_value = "edit")]
    pub authority: String,
    /// The checkout the task is about (its languages and the repo index inform the choice;
    /// a routed flow's `repo` input).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Run the chosen flow and wait for it.
    #[arg(long)]
    pub execute: bool,
}

/// `palm start "TASK"`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// The task, in plain words.
    pub task: String,
    /// The checkout to work on [default: the current directory].
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// The ceiling: observe, edit or execute.
    #[arg(long, default_value = "edit")]
    pub authority: String,
    /// The checks of the built-in flow [default: from the repo: cargo test, go test,
    /// npm test, pytest, make test].
    #[arg(long)]
    pub test: Option<String>,
    /// The agent of the built-in flow.
    #[arg(long, default_value = "claude")]
    pub provider: String,
}

/// `palm agent ...`.
#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Run one agent as a one-leaf job and wait for its end state.
    Run(AgentRunArgs),
}

/// `palm agent run PROVIDER "PROMPT"`.
#[derive(Debug, Args)]
pub struct AgentRunArgs {
    /// claude, codex, or a name under `agents:` in palm.yaml.
    pub provider: String,
    /// The task.
    pub prompt: String,
    /// Its authority: observe (never writes), edit, execute.
    #[arg(long, default_value = "edit")]
    pub mode: String,
    /// The git checkout to work on [default: the current directory].
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Kill the run after this long (e.g. 20m).
    #[arg(long)]
    pub timeout: Option<String>,
    /// Stop after this many turns.
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Continue this session.
    #[arg(long)]
    pub resume: Option<String>,
    /// The provider's model.
    #[arg(long)]
    pub model: Option<String>,
    /// A cost above this (US dollars) ends the run as `budget`.
    #[arg(long)]
    pub budget_usd: Option<f64>,
}

/// `palm agents ...`.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Write (or update, between its markers) the block that tells agents how to use
    /// Palm into AGENTS.md / CLAUDE.md (those that exist, else AGENTS.md).
    Install {
        /// The repository [default: the current directory].
        #[arg(long)]
        repo: Option<PathBuf>,
        /// Write this file instead (repeatable; relative to the repo).
        #[arg(long)]
        file: Vec<String>,
    },
    /// Print the block's text.
    Guide,
}

/// `palm worktrees ...`.
#[derive(Debug, Subcommand)]
pub enum WorktreesCommand {
    /// Every job worktree with its job's status and disk use.
    List,
    /// Remove the worktrees of jobs that ended (or that this node does not know), each
    /// saved first on a private ref (`refs/palm/saved/JOB/gc`); prune git's records of
    /// worktrees that are gone.
    Gc,
}

/// `palm patches ...`.
#[derive(Debug, Subcommand)]
pub enum PatchesCommand {
    /// List patches (newest first).
    List {
        /// Only this job's.
        #[arg(long)]
        job: Option<String>,
    },
    /// Show one patch: what it changes, its findings, its diff.
    Show {
        /// Patch id.
        id: String,
    },
    /// Land a patch on a branch through the merge queue: rebased (3-way) onto the
    /// branch's tip in a scratch worktree; a conflict changes nothing (exit 1). Your
    /// uncommitted changes are never touched.
    Apply {
        /// Patch id.
        id: String,
        /// The branch [default: the one the patch's checkout is on].
        #[arg(long)]
        to: Option<String>,
    },
    /// Undo exactly one applied patch (a revert commit on the branch it landed on).
    Revert {
        /// Patch id.
        id: String,
    },
}

/// `palm flows migrate NAME --to R`.
#[derive(Debug, Args)]
pub struct FlowsMigrateArgs {
    /// Flow name.
    pub name: String,
    /// The target revision.
    #[arg(long)]
    pub to: u32,
    /// Only this job (repeatable); default: every unfinished job of the flow.
    #[arg(long)]
    pub job: Vec<String>,
    /// Show the impact and move nothing.
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,
    /// Move without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `palm places ...`.
#[derive(Debug, Subcommand)]
pub enum PlacesCommand {
    /// List places with their state, probe and process.
    List,
    /// Spawn a new place: a command the node starts, probes and restarts.
    Add(PlacesAddArgs),
    /// Adopt something that already runs (a pid, a TCP or HTTP service); never stopped.
    Adopt(PlacesAdoptArgs),
    /// Remove a place added at run time (a spawned one is stopped first).
    Remove {
        /// Place name.
        name: String,
    },
    /// Restart a place (a spawned one is stopped and started; an adopted one re-probed).
    Restart {
        /// Place name.
        name: String,
    },
    /// The node journal's place events (transitions with reasons).
    Events {
        /// Only this place.
        name: Option<String>,
        /// At most this many, the newest.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
}

/// Probe and capability flags shared by `places add` and `places adopt`.
#[derive(Debug, Args)]
pub struct PlaceProbeArgs {
    /// Health probe: process, tcp://HOST:PORT, http://HOST:PORT/PATH or command:CMD.
    #[arg(long)]
    pub probe: Option<String>,
    /// Time between probes (e.g. 500ms, 2s).
    #[arg(long)]
    pub interval: Option<String>,
    /// A probe slower than this failed.
    #[arg(long)]
    pub probe_timeout: Option<String>,
    /// Consecutive failures that make a ready place unready.
    #[arg(long)]
    pub failures: Option<u32>,
    /// Consecutive successes that make a place ready.
    #[arg(long)]
    pub successes: Option<u32>,
    /// A capability the place offers while ready (repeatable).
    #[arg(long = "capability", value_name = "NAME")]
    pub capabilities: Vec<String>,
}

/// `palm places add`.
#[derive(Debug, Args)]
pub struct PlacesAddArgs {
    /// Place name.
    pub name: String,
    /// The command (run by `sh -c` unless --arg is given).
    #[arg(long, value_name = "CMD")]
    pub spawn: String,
    /// An argument: the command is then executed directly (repeatable).
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    pub args: Vec<String>,
    /// Environment variable KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Working directory.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Restart policy: never, on_failure or always.
    #[arg(long)]
    pub restart: Option<String>,
    /// Restarts allowed within the window before giving up.
    #[arg(long)]
    pub restarts_max: Option<u32>,
    /// The restart window (e.g. 60s).
    #[arg(long)]
    pub restart_window: Option<String>,
    /// First restart delay; doubles per restart (e.g. 200ms).
    #[arg(long)]
    pub backoff: Option<String>,
    /// First stop signal: TERM, INT, HUP, QUIT or KILL.
    #[arg(long)]
    pub stop_signal: Option<String>,
    /// Time between the stop signal and SIGKILL (e.g. 5s).
    #[arg(long)]
    pub stop_grace: Option<String>,
    /// Probe and capabilities.
    #[command(flatten)]
    pub probe: PlaceProbeArgs,
}

/// `palm places adopt`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "tcp", "http"])))]
pub struct PlacesAdoptArgs {
    /// Place name.
    pub name: String,
    /// A running process.
    #[arg(long)]
    pub pid: Option<u32>,
    /// A TCP service, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub tcp: Option<String>,
    /// An HTTP service, http://HOST:PORT/PATH.
    #[arg(long, value_name = "URL")]
    pub http: Option<String>,
    /// Probe and capabilities.
    #[command(flatten)]
    pub probe: PlaceProbeArgs,
}

/// `palm interests ...`.
#[derive(Debug, Subcommand)]
pub enum InterestsCommand {
    /// List interests and pending starts.
    List,
}

/// `palm token ...`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a one-time join token for a child node (a root), or an API token for the
    /// REST API and the Explorer beyond loopback (`--role api`, any node).
    Create {
        /// The child's (or API token's) name [default: ROLE-xxxxxx].
        #[arg(long)]
        name: Option<String>,
        /// The child's role (realm or edge), or `api`.
        #[arg(long, default_value = "edge")]
        role: String,
        /// How long the token is valid (e.g. 10m, 1h, 7d).
        #[arg(long, default_value = crate::tokens::TOKEN_TTL_DEFAULT)]
        ttl: String,
    },
    /// Refuse a child from now on (its certificates, its unused tokens, its name), or
    /// revoke the API tokens of that name.
    Revoke {
        /// The child's (or API token's) name.
        name: String,
    },
    /// Tokens (live, used, expired, revoked; never their secrets) and enrolled children.
    List,
}

/// `palm bench ...`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Durable job throughput and latency versus raw store commits.
    Jobs(BenchJobsArgs),
    /// Effect steps versus their baselines in the same run: a `kv` step versus a `set`
    /// step, a `run` step versus bare spawns of the same command, an `http` step to a
    /// loopback server versus bare requests to it.
    Effects(BenchEffectsArgs),
    /// A `palm up` over a store of many parked and running jobs versus one over an empty
    /// store: time until ready (socket answers, seats claim), memory per parked job.
    Restart(BenchRestartArgs),
    /// Repo index time versus universal-ctags, incremental reindex, search latency
    /// versus ripgrep.
    #[cfg(feature = "intel")]
    Index(crate::bench_index::BenchIndexArgs),
    /// Session memory: ingest of a generated corpus of transcripts versus the floor of
    /// reading, hashing and parsing it; a second ingest; recall latency.
    #[cfg(feature = "intel")]
    Sessions(crate::bench_sessions::BenchSessionsArgs),
    /// One QUIC tunnel on loopback versus a bare quinn framed echo.
    Tunnel(BenchTunnelArgs),
    /// The Explorer's inbox with many waiting jobs (default 10,000) versus the data
    /// request alone.
    Explorer(crate::bench_explorer::BenchExplorerArgs),
    /// Placement across a tree of real processes (root <- realm <- edges) versus the
    /// same flow on one all-in-one node.
    Tree(BenchTreeArgs),
}

/// `palm bench tree`.
#[derive(Debug, Args)]
pub struct BenchTreeArgs {
    /// Edges under the realm, each offering `blue`.
    #[arg(long, default_value_t = 4)]
    pub edges: usize,
    /// Seats per edge (the all-in-one baseline gets edges x seats).
    #[arg(long, default_value_t = 2)]
    pub seats: usize,
    /// Effects for each throughput measurement.
    #[arg(long, default_value_t = 1000)]
    pub effects: usize,
    /// Jobs in flight during the throughput measurement.
    #[arg(long, default_value_t = 64)]
    pub in_flight: usize,
    /// Latency samples (one job at a time), per round.
    #[arg(long, default_value_t = 100)]
    pub samples: usize,
    /// Rounds of tree-then-baseline measurements; each ratio is the median of the
    /// rounds' (both setups stay up for the whole run).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

/// `palm bench tunnel`.
#[derive(Debug, Args)]
pub struct BenchTunnelArgs {
    /// Seconds per rate measurement.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Requests in flight for the pipelined rate.
    #[arg(long, default_value_t = 64)]
    pub in_flight: usize,
    /// MiB moved by each bulk measurement.
    #[arg(long, default_value_t = 256)]
    pub bulk_mib: usize,
    /// Rounds of link-then-bare measurements; each ratio is the median of the rounds'.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

/// `palm bench jobs`.
#[derive(Debug, Args)]
pub struct BenchJobsArgs {
    /// Jobs per measurement.
    #[arg(long, default_value_t = 2_000)]
    pub jobs: usize,
    /// Jobs in flight at once.
    #[arg(long, default_value_t = 64)]
    pub in_flight: usize,
    /// Latency samples (one job at a time).
    #[arg(long, default_value_t = 200)]
    pub samples: usize,
    /// Seats of the benchmark node.
    #[arg(long)]
    pub seats: Option<usize>,
    /// Also measure a node on this PostgreSQL store (`postgres://…`), in fresh schemas
    /// dropped afterwards, next to redb in the same run.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

/// `palm bench restart`.
#[derive(Debug, Args)]
pub struct BenchRestartArgs {
    /// Jobs parked on a wait.
    #[arg(long, default_value_t = 100_000)]
    pub parked: usize,
    /// Jobs running (sleeping on a timer).
    #[arg(long, default_value_t = 1_000)]
    pub running: usize,
}

/// `palm bench effects`.
#[derive(Debug, Args)]
pub struct BenchEffectsArgs {
    /// Jobs (and spawns) per measurement.
    #[arg(long, default_value_t = 2_000)]
    pub jobs: usize,
    /// Jobs (and spawns) in flight at once.
    #[arg(long, default_value_t = 64)]
    pub in_flight: usize,
    /// Latency samples (one at a time).
    #[arg(long, default_value_t = 200)]
    pub samples: usize,
    /// Seats of the benchmark node (default: as many as in flight).
    #[arg(long)]
    pub seats: Option<usize>,
    /// Rounds: each measures every flow and its baseline in turn; each ratio is the median
    /// of the rounds' ratios, the rates shown the best round's, latencies the median round's.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
}

#[cfg(test)]
mod tests {
    //! The docs test: every `palm ...` command line in README.md and docs/*.md parses with
    //! this CLI (a renamed flag, a removed command, or two flags clashing, like `emit
    //! --data` once did with the global `--data`, fails here, naming the file and line).

    use super::Cli;
    use clap::{CommandFactory, Parser};

    /// `palm --help` lists every exit code the CLI can return, each once.
    #[test]
    fn the_help_lists_every_exit_code() {
        use palm_api::exit::Code;
        let codes = [
            Code::Ok,
            Code::Failure,
            Code::Usage,
            Code::JobFailed,
            Code::JobWaiting,
            Code::JobCancelled,
            Code::AlreadyRunning,
            Code::NoOp,
            Code::Blocked,
            Code::Stagnated,
            Code::Exhausted,
            Code::Interrupted,
        ];
        let listed: Vec<u8> = super::EXIT_CODES
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect();
        let expected: Vec<u8> = codes.iter().map(|c| *c as u8).collect();
        assert_eq!(listed, expected);
    }

    const DOCS: [(&str, &str); 11] = [
        ("README.md", include_str!("../../README.md")),
        ("docs/agents.md", include_str!("../../docs/agents.md")),
        (
            "docs/verification.md",
            include_str!("../../docs/verification.md"),
        ),
        (
            "docs/ARCHITECTURE.md",
            include_str!("../../docs/ARCHITECTURE.md"),
        ),
        ("docs/flows.md", include_str!("../../docs/flows.md")),
        ("docs/intel.md", include_str!("../../docs/intel.md")),
        ("docs/mcp.md", include_str!("../../docs/mcp.md")),
        ("docs/mcp-card.md", include_str!("../../docs/mcp-card.md")),
        ("docs/sessions.md", include_str!("../../docs/sessions.md")),
        ("docs/knowledge.md", include_str!("../../docs/knowledge.md")),
        ("docs/web.md", include_str!("../../docs/web.md")),
    ];

    /// Splits a shell command line into words: single and double quotes, backslash
    /// escapes in double quotes, `#` comments outside quotes; a trailing `&` dropped.
    fn words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut in_word = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' => {
                    in_word = true;
                    for q in chars.by_ref() {
                        if q == '\'' {
                            break;
                        }
                        word.push(q);
                    }
                }
                '"' => {
                    in_word = true;
                    while let Some(q) = chars.next() {
                        match q {
                            '"' => break,
                            '\\' => word.extend(chars.next()),
                            other => word.push(other),
                        }
                    }
                }
                '#' if !in_word => break,
                c if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut word));
                        in_word = false;
                    }
                }
                other => {
                    in_word = true;
                    word.push(other);
                }
            }
        }
        if in_word {
            words.push(word);
        }
        if words.last().is_some_and(|w| w == "&") {
            words.pop();
        }
        words
    }

    /// `(line number, command line, whole)` for every line starting with `palm ` inside a code
    /// block (backslash continuations joined; `whole`: it must parse as it stands), and
    /// every `palm ...` span in backticks in prose.
    fn command_lines(text: &str) -> Vec<(usize, String, bool)> {
        let mut found = Vec::new();
        let mut in_code = false;
        let mut lines = text.lines().enumerate();
        while let Some((at, line)) = lines.next() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("```") {
                in_code = !in_code;
                continue;
            }
            let command = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
            if !in_code || !command.starts_with("palm ") {
                continue;
            }
            let mut joined = command.to_owned();
            while joined.trim_end().ends_with('\\') {
                let trimmed = joined.trim_end();
                joined = trimmed[..trimmed.len() - 1].to_owned();
                match lines.next() {
                    Some((_, next)) => joined.push_str(next),
                    None => break,
                }
            }
            found.push((at + 1, joined, true));
        }
        // Prose (fenced blocks blanked, line numbers kept): every `palm ...` span in
        // backticks, even one that wraps onto the next line.
        let mut prose = String::new();
        let mut in_code = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
            } else if !in_code {
                prose.push_str(line);
            }
            prose.push('\n');
        }
        let mut at = 1;
        for (i, span) in prose.split('`').enumerate() {
            if i % 2 == 1 && span.starts_with("palm ") {
                found.push((at, span.replace('\n', " "), false));
            }
            at += span.matches('\n').count();
        }
        found
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_documented_command_line_parses() {
        let mut checked = 0;
        for (file, text) in DOCS {
            for (line, command, whole) in command_lines(text) {
                // A synopsis (`[--probe URL]`, `observe|edit`, `ARG...`) is read with
                // its optional parts in and the first of each choice.
                let words: Vec<String> = words(&command)
                    .into_iter()
                    .map(|w| w.replace(['[', ']'], ""))
                    .map(|w| match w.split_once('|') {
                        Some((first, _)) if !w.starts_with('{') => first.to_owned(),
                        _ => w,
                    })
                    .filter(|w| !w.is_empty() && w != "..." && w != "…")
                    .collect();
                if let Err(err) = Cli::try_parse_from(&words) {
                    // Prose may name a command without its arguments ("`palm flows
                    // trace` prints..."); anything else is a wrong line.
                    let naming = matches!(
                        err.kind(),
                        clap::error::ErrorKind::MissingRequiredArgument
                            | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                            | clap::error::ErrorKind::MissingSubcommand
                    );
                    if whole || !naming {
                        panic!("{file}:{line}: `{command}` does not parse:\n{err}");
                    }
                }
                checked += 1;
            }
        }
        assert!(
            checked >= 30,
            "the docs show at least 30 command lines ({checked})"
        );
    }

    #[test]
    fn the_word_splitter_reads_quotes_comments_and_background() {
        assert_eq!(
            words(r#"palm continue JOB --input '{"ok": true}' --key "a b" &  # ships it"#),
            vec![
                "palm",
                "continue",
                "JOB",
                "--input",
                r#"{"ok": true}"#,
                "--key",
                "a b"
            ]
        );
    }
}
