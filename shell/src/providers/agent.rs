//! The `agent` provider: the effect behind an `agent` leaf. It runs `claude`, `codex` or
//! an agent CLI declared under `agents:` in palm.yaml, in the job's worktree, and answers
//! with an explicit end state (`palm_agents::end`).
//!
//! One run:
//! 1. The spec is checked (`palm_agents::spec`) and the provider resolved.
//! 2. In a git checkout, the job's worktree on it is made or reused
//!    (`palm_agents::git`), and snapshotted to a private ref before the run. Outside git
//!    the run happens in the directory itself, and leaves no patch.
//! 3. The program starts under the gate every effect's process uses
//!    (`crate::genome::gated`): its process group is recorded durably first, stopped by
//!    group on timeout or cancel, and found at the next boot if the node dies. The prompt
//!    goes on stdin (claude, codex) or in `PALM_PROMPT_FILE` (a declared CLI).
//! 4. Its stdout is parsed line by line and kept as the run's transcript (bounded, under
//!    `DATA/agents/runs/`), its stderr's end kept for errors.
//! 5. Afterwards the worktree is snapshotted again, and the run is audited against its
//!    mode (`palm_agents::audit`): the tool uses its transcript (or usage file) reported,
//!    and the files it changed. A run past its authority (an observe run that changed
//!    files or used a writing tool, a tool outside the mode's allowlist, a command in
//!    edit mode) is a `violation`: its changes are set aside on the snapshot's ref, undone
//!    in the worktree, and stored as a `violation` patch that is never applied; the
//!    saved result's `audit` keeps the evidence. Otherwise a change becomes the job's
//!    patch (base commit plus binary diff, secret-scanned), stored under
//!    `DATA/patches/`.
//! 6. A `schema` asks for the final answer as JSON satisfying it; a cost above
//!    `budget_usd` ends the run as `budget`.
//!
//! The call succeeds if and only if the end is `success`; the saved value is the
//! `AgentResult` either way.

use super::{CallContext, CallFuture, Failure, Provider};
use crate::genome::gated::{self, DRAIN_AFTER_EXIT_MS, GroupGuard, Program, StartError, Started};
use crate::genome::provider::DeclaredAgent;
use palm_agents::audit;
use palm_agents::custom::{self, Exit};
use palm_agents::git::{self, Worktree};
use palm_agents::patches::Patches;
use palm_agents::provision::{self, Provision};
use palm_agents::runs::{INTERRUPTED_FILE, run_dir};
use palm_agents::secrets;
use palm_agents::{AgentResult, AgentSpec, End, RunSummary};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The most of a run's stdout kept as its transcript; the parser reads all of it.
pub const TRANSCRIPT_BYTES_MAX: u64 = 16 << 20;

/// The longest line the parser takes (a longer one is kept in the transcript and
/// skipped).
const LINE_BYTES_MAX: usize = 4 << 20;

/// Where a run records its session id as soon as the provider says it (in the
/// effect's run directory), so a run interrupted by a crash is resumed, not restarted.
const SESSION_FILE: &str = "session.json";

/// A run's timeout when it gives none.
const TIMEOUT_MS_DEFAULT: u64 = 30 * 60 * 1000;

/// The `agent` provider of a node.
pub struct Agents {
    data: PathBuf,
    declared: HashMap<String, DeclaredAgent>,
    /// Worktree setup by checkout (canonical paths).
    repos: HashMap<PathBuf, Provision>,
    /// One run at a time in a worktree: a job's parallel branches on one repo queue here.
    held: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

impl Agents {
    /// The provider for a node on `data`, with the agent CLIs it declares.
    pub fn new(
        data: &Path,
        declared: &[DeclaredAgent],
        repos: &std::collections::BTreeMap<PathBuf, Provision>,
    ) -> Agents {
        // Worktree paths are handed to git running in other directories: absolute.
        let data = if data.is_absolute() {
            data.to_owned()
        } else {
            std::env::current_dir().unwrap_or_default().join(data)
        };
        Agents {
            data,
            declared: declared
                .iter()
                .map(|d| (d.name.clone(), d.clone()))
                .collect(),
            repos: repos
                .iter()
                .map(|(dir, p)| {
                    (
                        std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone()),
                        p.clone(),
                    )
                })
                .collect(),
            held: Mutex::new(HashMap::new()),
        }
    }

    fn lock_for(&self, path: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded by the runs in flight: a lock nobody holds or waits for goes.
        held.retain(|_, lock| Arc::strong_count(lock) > 1);
        held.entry(path.to_owned()).or_default().clone()
    }

    fn known(&self) -> String {
        let mut names: Vec<&str> = palm_agents::spec::BUILTIN_PROVIDERS.to_vec();
        names.extend(self.declared.keys().map(String::as_str));
        names.join(", ")
    }

    /// Runs the agent a call asks for. `sub` names a run inside one effect (a gate's
    /// verifier and its skeptics): each has its own run directory, spending entry and
    /// snapshots; the effect's own run has none.
    pub(crate) async fn run_as(
        &self,
        ctx: &CallContext<'_>,
        args: Value,
        sub: Option<&str>,
    ) -> Result<Value, Failure> {
        let run_key = match sub {
            Some(sub) => format!("{}#{sub}", ctx.effect.key),
            None => ctx.effect.key.clone(),
        };
        let mut spec = AgentSpec::from_args(&args).map_err(Failure::new)?;
        spec.job = Some(ctx.effect.job.clone());
        let declared = self.declared.get(&spec.provider).cloned();
        if declared.is_none()
            && !palm_agents::spec::BUILTIN_PROVIDERS.contains(&spec.provider.as_str())
        {
            return Err(Failure::new(format!(
                "agent: no provider `{}` (known: {}; declare others under `agents:` in palm.yaml)",
                spec.provider,
                self.known()
            )));
        }
        let started = Instant::now();
        // The job's spending so far (other runs than this effect: a re-run replaces its
        // own entry), against the flow's `budget:`.
        let ledger = Ledger::of(&self.data, &ctx.effect.job);
        let spent = ledger.spent_except(&run_key);
        let over = match (spec.job_budget_usd, spec.job_budget_turns) {
            (Some(budget), _) if spent.0 >= budget => Some(format!(
                "the job has spent ${:.4} of its ${budget:.4} budget; the run was not started",
                spent.0
            )),
            (_, Some(budget)) if spent.1 >= budget => Some(format!(
                "the job has taken {} of its {budget} turns; the run was not started",
                spent.1
            )),
            _ => None,
        };
        if let Some(why) = over {
            return Err(ended_before_running(&spec, End::Budget, why, None, started));
        }
        if let Some(budget) = spec.job_budget_turns {
            let left = u32::try_from(budget - spent.1).unwrap_or(u32::MAX);
            spec.max_turns = Some(spec.max_turns.map_or(left, |own| own.min(left)));
        }
        let run_dir = run_dir(&self.data, &run_key);
        std::fs::create_dir_all(&run_dir).map_err(|e| {
            Failure::new(format!("agent: cannot create {}: {e}", run_dir.display()))
        })?;
        // An attempt of this same effect that died with its node (the run directory is
        // the effect's) left its session: continue it rather than start over.
        let mut resumed = None;
        if spec.resume.is_none()
            && let Ok(text) = std::fs::read_to_string(run_dir.join(SESSION_FILE))
            && let Ok(saved) = serde_json::from_str::<Value>(&text)
            && saved["provider"] == spec.provider.as_str()
            && let Some(session) = saved["session_id"].as_str()
        {
            spec.resume = Some(session.to_owned());
            spec.prompt = format!(
                "(Your previous attempt at this task was interrupted before it finished. Continue it.)\n\n{}",
                spec.prompt
            );
            resumed = Some(session.to_owned());
        }
        let (worktree, workdir) = job_workdir(
            &self.data,
            &ctx.effect.job,
            spec.repo.as_deref(),
            spec.lane.as_deref(),
            "agent",
        )
        .await?;
        let lock = self.lock_for(&workdir);
        let _held = lock.lock().await;
        if let Some(tree) = &worktree {
            let checkout = std::fs::canonicalize(&tree.repo).unwrap_or_else(|_| tree.repo.clone());
            if let Some(setup) = self.repos.get(&checkout)
                && !provision::marker(&tree.path).exists()
                && let Err(why) = self.provision(ctx, setup, &checkout, tree).await
            {
                return Err(ended_before_running(
                    &spec,
                    End::Error,
                    why,
                    Some(&tree.path),
                    started,
                ));
            }
        }
        let tree_env = worktree
            .as_ref()
            .map(|t| provision::env_of(&t.path))
            .unwrap_or_default();
        let tag = git::content_id(run_key.as_bytes());
        let before = match &worktree {
            Some(tree) => Some(
                snapshot(
                    tree,
                    &git::saved_ref(&ctx.effect.job, &format!("{tag}-before")),
                    "before an agent run",
                )
                .await?,
            ),
            None => None,
        };
        // A run stopped from outside (its job cancelled, its lease lost, its node
        // stopping) drops this future mid-way: the mark leaves its end, `interrupted`,
        // beside its transcript for `palm inspect`. A run that returns takes it back.
        let mark = InterruptedMark::arm(
            &run_dir,
            json!({
                "key": ctx.effect.key,
                "job": ctx.effect.job,
                "provider": spec.provider,
                "started_ms": crate::genome::now_ms(),
            }),
        );
        let ran = self
            .execute(ctx, &spec, declared.as_ref(), &workdir, &run_dir, &tree_env)
            .await;
        mark.disarm();
        let ran = ran?;
        let mut summary = ran.summary;
        let mut end = ran.end;
        let mut error = summary.error.take();
        if end == End::Success
            && let (Some(cost), Some(budget)) = (summary.cost_usd, spec.budget_usd)
            && cost > budget
        {
            end = End::Budget;
            error = Some(format!(
                "it cost ${cost:.4}, over its budget of ${budget:.4}"
            ));
        }
        ledger.record(
            &run_key,
            summary.cost_usd.unwrap_or(0.0),
            summary.turns.unwrap_or(0),
        );
        if end == End::Success
            && let Some(budget) = spec.job_budget_usd
        {
            let total = spent.0 + summary.cost_usd.unwrap_or(0.0);
            if total > budget {
                end = End::Budget;
                error = Some(format!(
                    "the job has now spent ${total:.4}, over its budget of ${budget:.4}"
                ));
            }
        }
        let mut structured = None;
        if let Some(schema) = &spec.schema
            && end == End::Success
        {
            match answer_as_json(&summary.text, schema) {
                Ok(value) => structured = Some(value),
                Err(why) => {
                    end = End::Error;
                    error = Some(why);
                }
            }
        }
        // What the run did to the worktree.
        let mut after = None;
        let mut changed = Vec::new();
        if let (Some(tree), Some(before)) = (&worktree, &before) {
            let now = snapshot(
                tree,
                &git::saved_ref(&ctx.effect.job, &format!("{tag}-after")),
                "after an agent run",
            )
            .await?;
            if now.tree != before.tree {
                changed = changed_files(tree, &before.tree, &now.tree).await?;
                if changed.is_empty() {
                    changed.push("(the worktree's tree changed)".to_owned());
                }
            }
            after = Some(now);
        }
        // The run against its authority: the tool uses it reported, the files it changed.
        let kind = audit::Kind::of(&spec.provider, declared.is_some());
        let mut violations = audit::audit(spec.mode, kind, &summary.tools, &changed);
        if spec.mode != palm_agents::Mode::Execute && summary.notable_dropped > 0 {
            violations.push(audit::Violation {
                rule: audit::Rule::Unaudited,
                tool: None,
                detail: format!(
                    "{} commands or tools past what the audit keeps went unjudged",
                    summary.notable_dropped
                ),
            });
        }
        if !violations.is_empty() {
            end = End::Violation;
            let listed: Vec<String> = violations.iter().take(3).map(|v| v.to_string()).collect();
            let more = match violations.len() {
                n if n > 3 => format!(" and {} more", n - 3),
                _ => String::new(),
            };
            let mut why = format!(
                "a run in {} mode went past its authority: {}{more}",
                spec.mode.as_str(),
                listed.join("; ")
            );
            if !changed.is_empty() {
                why.push_str(&format!(
                    "; its changes are kept on {} and undone in the worktree",
                    git::saved_ref(&ctx.effect.job, &format!("{tag}-after"))
                ));
            }
            error = Some(why);
        }
        let audit = audit::Audit::of(&summary, violations);
        let mut patch = None;
        if let (Some(tree), Some(before), Some(after)) = (&worktree, &before, &after)
            && after.tree != before.tree
        {
            if end == End::Violation {
                // The worktree goes back to its state before the run; the changes stay
                // on the `-after` ref, and the patch is stored as `violation`.
                let tree_copy = tree.clone();
                let before_tree = before.tree.clone();
                blocking(move || git::restore(&tree_copy, &before_tree).map_err(|e| e.to_string()))
                    .await?;
            }
            patch = Some(
                self.store_patch(ctx, &spec, tree, &after.tree, end == End::Violation)
                    .await?,
            );
        }
        let result = AgentResult {
            end,
            provider: spec.provider.clone(),
            session_id: summary.session_id.clone(),
            resumed,
            turns: summary.turns,
            cost_usd: summary.cost_usd,
            text: std::mem::take(&mut summary.text),
            structured,
            worktree: worktree.as_ref().map(|t| t.path.display().to_string()),
            patch,
            error: error.clone(),
            usage: summary.usage.clone(),
            transcript: ran.transcript,
            audit: Some(audit),
            duration_ms: started.elapsed().as_millis() as u64,
        };
        let value = result.to_json();
        if end == End::Success {
            Ok(value)
        } else {
            Err(Failure {
                reason: match error {
                    Some(why) => format!("agent {} ended {}: {why}", spec.provider, end.as_str()),
                    None => format!("agent {} ended {}", spec.provider, end.as_str()),
                },
                value,
            })
        }
    }

    /// Runs the program and reads its output; the end as far as the process tells.
    async fn execute(
        &self,
        ctx: &CallContext<'_>,
        spec: &AgentSpec,
        declared: Option<&DeclaredAgent>,
        workdir: &Path,
        run_dir: &Path,
        tree_env: &std::collections::BTreeMap<String, String>,
    ) -> Result<Ran, Failure> {
        let workdir_text = workdir.display().to_string();
        let prompt_file = run_dir.join("prompt.txt");
        let output_file = run_dir.join("output");
        let usage_file = run_dir.join("usage.json");
        let schema_file = run_dir.join("schema.json");
        let _ = std::fs::remove_file(&output_file);
        let _ = std::fs::remove_file(&usage_file);
        write(&prompt_file, spec.prompt.as_bytes())?;
        if let Some(schema) = &spec.schema {
            write(&schema_file, schema.to_string().as_bytes())?;
        }
        let schema_arg = spec
            .schema
            .as_ref()
            .map(|_| schema_file.display().to_string());
        let (argv, stdin, mut env): (Vec<String>, Vec<u8>, Vec<(String, String)>) = match (
            spec.provider.as_str(),
            declared,
        ) {
            (_, Some(declared)) => {
                let expand = |arg: &String| {
                    custom::expand(
                        arg,
                        &prompt_file.display().to_string(),
                        &output_file.display().to_string(),
                        &workdir_text,
                        spec.mode.as_str(),
                    )
                };
                let mut env: Vec<(String, String)> = vec![
                    (
                        custom::ENV_PROMPT_FILE.into(),
                        prompt_file.display().to_string(),
                    ),
                    (
                        custom::ENV_OUTPUT_FILE.into(),
                        output_file.display().to_string(),
                    ),
                    (
                        custom::ENV_USAGE_FILE.into(),
                        usage_file.display().to_string(),
                    ),
                    (custom::ENV_MODE.into(), spec.mode.as_str().into()),
                    (custom::ENV_WORKTREE.into(), workdir_text.clone()),
                ];
                if let Some(file) = &schema_arg {
                    env.push((custom::ENV_SCHEMA_FILE.into(), file.clone()));
                }
                if let Some(session) = &spec.resume {
                    env.push((custom::ENV_RESUME.into(), session.clone()));
                }
                if let Some(turns) = spec.max_turns {
                    env.push((custom::ENV_MAX_TURNS.into(), turns.to_string()));
                }
                env.extend(declared.env.iter().map(|(k, v)| (k.clone(), v.clone())));
                (
                    declared.command.iter().map(expand).collect(),
                    Vec::new(),
                    env,
                )
            }
            ("claude", None) => {
                let mut prompt = spec.prompt.clone();
                if let Some(schema) = &spec.schema {
                    prompt.push_str(&format!(
                            "\n\nAnswer with one JSON document, and nothing else, satisfying this JSON Schema:\n{schema}\n"
                        ));
                }
                (
                    palm_agents::claude::argv(spec, "claude"),
                    prompt.into_bytes(),
                    Vec::new(),
                )
            }
            _ => (
                palm_agents::codex::argv(spec, "codex", &workdir_text, schema_arg.as_deref()),
                spec.prompt.clone().into_bytes(),
                Vec::new(),
            ),
        };
        env.extend(tree_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.push(("PALM_JOB_ID".into(), ctx.effect.job.clone()));
        env.push(("PALM_EFFECT_KEY".into(), ctx.effect.key.clone()));
        env.push(("PALM_NODE_NAME".into(), ctx.genome.info.name.clone()));
        let mut process = gated::command(&Program::Argv(&argv));
        process.current_dir(workdir).envs(env);
        let Started {
            mut child,
            pgid,
            recorded,
        } = gated::start(ctx.genome, ctx.effect, &mut process, None, &stdin)
            .await
            .map_err(|err| match err {
                StartError::Spawn(e) => Failure::new(format!(
                    "agent: cannot start {} in {}: {e}",
                    argv[0],
                    workdir.display()
                )),
                StartError::NotStarted => {
                    Failure::new("agent: not started (the effect is no longer this node's)")
                }
            })?;
        let guard = GroupGuard(pgid);
        let transcript_path = run_dir.join("transcript.jsonl");
        // Stdout is the transcript, parsed by a reader of its own; stderr is kept.
        let stdout = child.stdout.take();
        let mut output = gated::Output::take(&mut child, 0, ctx.genome.settings.output_bytes_max);
        let provider = spec.provider.clone();
        let is_custom = declared.is_some();
        // Who the session works for: recorded beside its id as soon as the vendor names
        // it, so the session memory links the session to this run from its start.
        let origin = json!({
            "job": ctx.effect.job,
            "effect": ctx.effect.key,
            "worktree": workdir_text,
            "started_ms": crate::genome::now_ms(),
        });
        let reader = tokio::spawn(read_stream(
            stdout,
            transcript_path.clone(),
            provider,
            is_custom,
            origin,
        ));
        let timeout_ms = spec
            .timeout_ms
            .or(declared.and_then(|d| d.timeout_ms))
            .unwrap_or(TIMEOUT_MS_DEFAULT);
        let waited = tokio::time::timeout(
            Duration::from_millis(timeout_ms),
            output.wait_for(&mut child),
        )
        .await;
        let (status, timed_out) = match waited {
            Ok(status) => (status.ok(), false),
            Err(_) => {
                output.stop(&mut child, pgid).await;
                (child.wait().await.ok(), true)
            }
        };
        drop(guard);
        drop(recorded);
        let drain = Duration::from_millis(DRAIN_AFTER_EXIT_MS);
        let (_, stderr) = output.finish(drain).await;
        let stderr = stderr.into_text();
        let read = match tokio::time::timeout(drain * 10, reader).await {
            Ok(Ok(read)) => read,
            _ => StreamRead::default(),
        };
        let exit = status.map(|s| match s.code() {
            Some(code) => Exit::Code(code),
            None => {
                use std::os::unix::process::ExitStatusExt;
                Exit::Signal(s.signal().unwrap_or(0))
            }
        });
        let mut summary = match read.parsed {
            Parsed::Custom => {
                let output = std::fs::read_to_string(&output_file).ok();
                let usage = std::fs::read_to_string(&usage_file)
                    .ok()
                    .and_then(|t| serde_json::from_str::<Value>(&t).ok());
                custom::finish(
                    exit.as_ref().unwrap_or(&Exit::Signal(0)),
                    output.as_deref(),
                    usage.as_ref(),
                    &stderr,
                )
            }
            Parsed::Claude(summary) | Parsed::Codex(summary) => summary,
        };
        let end = if timed_out {
            summary.error = Some(format!(
                "timed out after {timeout_ms} ms; its process group was stopped"
            ));
            End::Timeout
        } else {
            match summary.end {
                Some(end) => end,
                None => {
                    let last = stderr
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .map(str::trim);
                    let how = match &exit {
                        Some(Exit::Code(code)) => format!("exited with {code}"),
                        Some(Exit::Signal(signal)) => format!("was killed by signal {signal}"),
                        None => "could not be waited for".to_owned(),
                    };
                    summary.error = Some(match last {
                        Some(line) => format!("it {how} before its result line: {line}"),
                        None => format!("it {how} before its result line"),
                    });
                    End::Crashed
                }
            }
        };
        Ok(Ran {
            summary,
            end,
            transcript: json!({
                "id": read.id,
                "path": transcript_path.display().to_string(),
                "bytes": read.bytes,
                "lines": read.lines,
                "truncated": read.truncated,
            }),
        })
    }

    /// Sets up a new worktree as its repo's `worktree:` says: copies, links, the
    /// environment, then `setup` and `smoke` (each under the effect gate, bounded).
    async fn provision(
        &self,
        ctx: &CallContext<'_>,
        setup: &Provision,
        checkout: &Path,
        tree: &Worktree,
    ) -> Result<(), String> {
        let (plan, from, path, root) = (
            setup.clone(),
            checkout.to_owned(),
            tree.path.clone(),
            self.data.join("worktrees"),
        );
        let env =
            tokio::task::spawn_blocking(move || provision::prepare(&plan, &from, &path, &root))
                .await
                .map_err(|e| e.to_string())??;
        for (what, command) in [("setup", &setup.setup), ("smoke", &setup.smoke)] {
            if let Some(command) = command {
                run_shell(ctx, command, &tree.path, &env, SETUP_TIMEOUT_MS)
                    .await
                    .map_err(|why| format!("worktree {what} `{command}` failed: {why}"))?;
            }
        }
        std::fs::write(provision::marker(&tree.path), b"")
            .map_err(|e| format!("worktree setup: {e}"))
    }

    /// Stores the job's cumulative patch (base to `tree`) and answers its description.
    async fn store_patch(
        &self,
        ctx: &CallContext<'_>,
        spec: &AgentSpec,
        worktree: &Worktree,
        tree: &str,
        violation: bool,
    ) -> Result<Value, Failure> {
        let made_by = PatchOrigin {
            job: &ctx.effect.job,
            effect: &ctx.effect.key,
            provider: &spec.provider,
            lane: spec.lane.as_deref(),
        };
        store_patch(&self.data, &made_by, worktree, tree, violation).await
    }
}

/// Marks a run `interrupted` unless it is taken back ([`InterruptedMark::disarm`]): the
/// run's future was dropped with the run unfinished. It writes, on drop, the run's end
/// with its session (as recorded so far) and its transcript's path and size. A run of
/// the same effect starting again removes an old mark.
struct InterruptedMark {
    dir: PathBuf,
    run: Option<Value>,
}

impl InterruptedMark {
    fn arm(dir: &Path, run: Value) -> InterruptedMark {
        let _ = std::fs::remove_file(dir.join(INTERRUPTED_FILE));
        InterruptedMark {
            dir: dir.to_owned(),
            run: Some(run),
        }
    }

    fn disarm(mut self) {
        self.run = None;
    }
}

impl Drop for InterruptedMark {
    fn drop(&mut self) {
        let Some(mut run) = self.run.take() else {
            return;
        };
        // A few small files, once per stopped run: written in place, not worth a task.
        let transcript = self.dir.join("transcript.jsonl");
        let session = std::fs::read_to_string(self.dir.join(SESSION_FILE))
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .and_then(|saved| saved["session_id"].as_str().map(str::to_owned));
        run["end"] = json!(End::Interrupted.as_str());
        run["session_id"] = json!(session);
        run["ended_ms"] = json!(crate::genome::now_ms());
        run["transcript"] = json!({
            "path": transcript.display().to_string(),
            "bytes": std::fs::metadata(&transcript).map_or(0, |m| m.len()),
        });
        let path = self.dir.join(INTERRUPTED_FILE);
        let fresh = path.with_extension("json.new");
        if let Err(err) =
            std::fs::write(&fresh, run.to_string()).and_then(|()| std::fs::rename(&fresh, &path))
        {
            tracing::warn!(
                "cannot mark the agent run in {} interrupted: {err}",
                self.dir.display()
            );
        }
    }
}

/// Who made a patch: the job, the effect, the provider, the lane (a `best_of` attempt's,
/// a team member's turn).
pub(crate) struct PatchOrigin<'a> {
    pub job: &'a str,
    pub effect: &'a str,
    pub provider: &'a str,
    pub lane: Option<&'a str>,
}

/// Stores a job's cumulative patch on `worktree` (its base to `tree`) under
/// `DATA/patches`, and answers its description. A diff with a secret in it is stored
/// `blocked`; one from a run past its authority, `violation`.
pub(crate) async fn store_patch(
    data: &Path,
    made_by: &PatchOrigin<'_>,
    worktree: &Worktree,
    tree: &str,
    violation: bool,
) -> Result<Value, Failure> {
    let worktree = worktree.clone();
    let tree = tree.to_owned();
    let diff = blocking(move || {
        git::diff(&worktree, &worktree.base.clone(), &tree)
            .map(|d| (d, worktree))
            .map_err(|e| e.to_string())
    })
    .await?;
    let (diff, worktree) = diff;
    let findings = secrets::scan_diff(&diff.text);
    let status = if violation {
        "violation"
    } else if !findings.is_empty() {
        "blocked"
    } else {
        "pending"
    };
    // One patch per effect (and lane) and diff: two jobs making the same edit keep a
    // patch each, while the same effect run again (at least once) finds its own.
    let id = git::content_id(
        format!(
            "{}\n{}\n{}\n{}\n{}",
            made_by.job,
            made_by.effect,
            made_by.lane.unwrap_or(""),
            worktree.base,
            diff.text
        )
        .as_bytes(),
    );
    let meta = json!({
        "id": id,
        "job": made_by.job,
        "effect": made_by.effect,
        "provider": made_by.provider,
        "lane": made_by.lane,
        "repo": worktree.repo.display().to_string(),
        "worktree": worktree.path.display().to_string(),
        "base": worktree.base,
        "files": diff.files,
        "added": diff.added,
        "removed": diff.removed,
        "status": status,
        "findings": findings,
        "created_at": crate::genome::now_ms(),
    });
    let patches = Patches::new(data);
    let text = diff.text;
    let meta = blocking(move || patches.record(meta, &text).map_err(|e| e.message)).await?;
    Ok(json!({
        "id": meta["id"],
        "base": meta["base"],
        "files": meta["files"],
        "added": meta["added"],
        "removed": meta["removed"],
        "status": meta["status"],
        "findings": meta["findings"],
    }))
}

/// Where a job's step works on `repo` (absent: the node's working directory): in a git
/// checkout, the job's worktree (the `lane`'s own for a `best_of` attempt) at the same
/// place inside the checkout; elsewhere, the directory itself. `what` names the provider
/// in errors.
pub(crate) async fn job_workdir(
    data: &Path,
    job: &str,
    repo: Option<&str>,
    lane: Option<&str>,
    what: &str,
) -> Result<(Option<Worktree>, PathBuf), Failure> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let repo = match repo {
        Some(dir) if Path::new(dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => cwd.join(dir),
        None => cwd,
    };
    if !repo.is_dir() {
        return Err(Failure::new(format!(
            "{what}: repo {} is not a directory",
            repo.display()
        )));
    }
    let top = blocking({
        let repo = repo.clone();
        move || Ok(git::toplevel(&repo))
    })
    .await?;
    let Some(top) = top else {
        return Ok((None, repo));
    };
    // The same place inside the checkout as the repo asked for.
    let inner = repo.strip_prefix(&top).unwrap_or(Path::new("")).to_owned();
    let worktrees = data.join("worktrees");
    let job = job.to_owned();
    let lane = lane.map(str::to_owned);
    let tree = blocking(move || {
        git::ensure_worktree(&worktrees, &job, &top, lane.as_deref()).map_err(|e| e.to_string())
    })
    .await?;
    if let Some(state) = &tree.restored {
        tracing::warn!(
            path = %tree.path.display(),
            restored = %state,
            "the job's worktree had vanished; made again with its last recorded files"
        );
    }
    let workdir = tree.path.join(inner);
    Ok((Some(tree), workdir))
}

/// The failure of a run that ended before its program started (over the job's budget, a
/// worktree whose setup failed): the saved result says which end and why.
fn ended_before_running(
    spec: &AgentSpec,
    end: End,
    why: String,
    worktree: Option<&Path>,
    started: Instant,
) -> Failure {
    let result = AgentResult {
        end,
        provider: spec.provider.clone(),
        session_id: None,
        resumed: None,
        turns: None,
        cost_usd: None,
        text: String::new(),
        structured: None,
        worktree: worktree.map(|p| p.display().to_string()),
        patch: None,
        error: Some(why.clone()),
        usage: Value::Null,
        transcript: Value::Null,
        audit: None,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    Failure {
        reason: format!("agent {} ended {}: {why}", spec.provider, end.as_str()),
        value: result.to_json(),
    }
}

/// The longest a worktree's `setup` or `smoke` may take.
const SETUP_TIMEOUT_MS: u64 = 20 * 60 * 1000;

/// Runs `sh -c COMMAND` in `dir` under the effect gate; `Err` says how it failed.
async fn run_shell(
    ctx: &CallContext<'_>,
    command: &str,
    dir: &Path,
    env: &std::collections::BTreeMap<String, String>,
    timeout_ms: u64,
) -> Result<(), String> {
    let mut process = gated::command(&Program::Shell(command));
    process
        .current_dir(dir)
        .envs(env)
        .env("PALM_JOB_ID", &ctx.effect.job)
        .env("PALM_EFFECT_KEY", &ctx.effect.key)
        .env("PALM_NODE_NAME", &ctx.genome.info.name);
    let Started {
        mut child,
        pgid,
        recorded,
    } = gated::start(ctx.genome, ctx.effect, &mut process, None, b"")
        .await
        .map_err(|err| match err {
            StartError::Spawn(e) => format!("cannot start sh: {e}"),
            StartError::NotStarted => "not started (the effect is no longer this node's)".into(),
        })?;
    let guard = GroupGuard(pgid);
    let mut output = gated::Output::take(&mut child, 8 * 1024, 8 * 1024);
    let waited = tokio::time::timeout(
        Duration::from_millis(timeout_ms),
        output.wait_for(&mut child),
    )
    .await;
    let status = match waited {
        Ok(status) => status.map_err(|e| e.to_string())?,
        Err(_) => {
            output.stop(&mut child, pgid).await;
            return Err(format!("timed out after {timeout_ms} ms"));
        }
    };
    drop(guard);
    drop(recorded);
    let (_, stderr) = output
        .finish(Duration::from_millis(DRAIN_AFTER_EXIT_MS))
        .await;
    let stderr = stderr.into_text();
    if status.success() {
        return Ok(());
    }
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_owned();
    Err(match status.code() {
        Some(code) if last.is_empty() => format!("exit {code}"),
        Some(code) => format!("exit {code}: {last}"),
        None => "killed by a signal".to_owned(),
    })
}

/// What one job's agent runs have spent, by effect key, in `DATA/agents/jobs/<job>.json`
/// (written whole and renamed, so a crash leaves the old or the new). Recording is a
/// read-modify-write, one at a time in the process (the node owns its data directory):
/// two runs of one job ending together (parallel branches on two repos, a team's
/// lanes) used to each write the file from the same read, and one entry was lost.
struct Ledger {
    path: PathBuf,
}

impl Ledger {
    fn of(data: &Path, job: &str) -> Ledger {
        let name: String = job
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Ledger {
            path: data
                .join("agents")
                .join("jobs")
                .join(format!("{name}.json")),
        }
    }

    fn read(&self) -> serde_json::Map<String, Value> {
        std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v.get("runs").and_then(Value::as_object).cloned())
            .unwrap_or_default()
    }

    /// (dollars, turns) spent by the job's other runs.
    fn spent_except(&self, key: &str) -> (f64, u64) {
        self.read().iter().filter(|(k, _)| k.as_str() != key).fold(
            (0.0, 0),
            |(usd, turns), (_, run)| {
                (
                    usd + run["cost_usd"].as_f64().unwrap_or(0.0),
                    turns + run["turns"].as_u64().unwrap_or(0),
                )
            },
        )
    }

    fn record(&self, key: &str, cost_usd: f64, turns: u64) {
        static RECORDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = RECORDING.lock().unwrap_or_else(|p| p.into_inner());
        let mut runs = self.read();
        runs.insert(
            key.to_owned(),
            json!({"cost_usd": cost_usd, "turns": turns}),
        );
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let fresh = self.path.with_extension("json.new");
        let written = std::fs::write(&fresh, json!({"runs": runs}).to_string())
            .and_then(|()| std::fs::rename(&fresh, &self.path));
        if let Err(err) = written {
            tracing::warn!(path = %self.path.display(), %err, "the job's agent spending was not recorded");
        }
    }
}

/// What running the program gave.
struct Ran {
    summary: RunSummary,
    end: End,
    transcript: Value,
}

enum Parsed {
    Claude(RunSummary),
    Codex(RunSummary),
    Custom,
}

struct StreamRead {
    parsed: Parsed,
    id: String,
    bytes: u64,
    lines: u64,
    truncated: bool,
}

impl Default for StreamRead {
    fn default() -> StreamRead {
        StreamRead {
            parsed: Parsed::Custom,
            id: String::new(),
            bytes: 0,
            lines: 0,
            truncated: false,
        }
    }
}

/// Reads stdout to its end: every line to the parser, the first
/// [`TRANSCRIPT_BYTES_MAX`] bytes to the transcript file (with a content id).
async fn read_stream(
    stdout: Option<tokio::process::ChildStdout>,
    path: PathBuf,
    provider: String,
    custom: bool,
    origin: Value,
) -> StreamRead {
    let mut claude = palm_agents::claude::Parser::new();
    let mut codex = palm_agents::codex::Parser::new();
    let mut read = StreamRead::default();
    let mut hasher = git::ContentHasher::new();
    let mut saved_session: Option<String> = None;
    let mut file = tokio::fs::File::create(&path).await.ok();
    if let Some(stdout) = stdout {
        let mut lines = BufReader::new(stdout);
        let mut buffer = Vec::new();
        // A line longer than LINE_BYTES_MAX is read in pieces (memory stays bounded),
        // kept in the transcript, and not parsed; this says we are inside one.
        let mut overlong = false;
        loop {
            buffer.clear();
            let limit = LINE_BYTES_MAX as u64 + 1;
            match (&mut lines)
                .take(limit)
                .read_until(b'\n', &mut buffer)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    read.bytes += n as u64;
                    if read.bytes <= TRANSCRIPT_BYTES_MAX {
                        hasher.update(&buffer);
                        if let Some(file) = file.as_mut() {
                            let _ = file.write_all(&buffer).await;
                        }
                    } else {
                        read.truncated = true;
                    }
                    let ends = buffer.ends_with(b"\n");
                    let skip = overlong || (!ends && n as u64 == limit);
                    overlong = skip && !ends;
                    if ends {
                        read.lines += 1;
                    }
                    if custom || skip {
                        continue;
                    }
                    let line = String::from_utf8_lossy(&buffer);
                    let session = match provider.as_str() {
                        "claude" => {
                            claude.line(&line);
                            claude.session_id()
                        }
                        _ => {
                            codex.line(&line);
                            codex.session_id()
                        }
                    };
                    if let Some(session) = session
                        && saved_session.as_deref() != Some(session)
                    {
                        let mut record = origin.clone();
                        record["provider"] = json!(provider);
                        record["session_id"] = json!(session);
                        let _ =
                            tokio::fs::write(path.with_file_name(SESSION_FILE), record.to_string())
                                .await;
                        saved_session = Some(session.to_owned());
                    }
                }
            }
        }
    }
    if let Some(mut file) = file {
        let _ = file.flush().await;
    }
    read.id = hasher.finish();
    read.parsed = if custom {
        Parsed::Custom
    } else if provider == "claude" {
        Parsed::Claude(claude.finish())
    } else {
        Parsed::Codex(codex.finish())
    };
    read
}

/// The final answer as JSON satisfying `schema` (a fenced ```json block is unwrapped).
fn answer_as_json(text: &str, schema: &Value) -> Result<Value, String> {
    let trimmed = text.trim();
    let body = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    let value: Value = serde_json::from_str(body)
        .map_err(|e| format!("its answer is not JSON ({e}), but a schema was asked for"))?;
    let schema = palm_actors::jsonschema::Schema::compile(schema)
        .map_err(|e| format!("the schema does not compile: {e}"))?;
    let violations = schema.validate(&value);
    if violations.is_empty() {
        Ok(value)
    } else {
        let listed: Vec<String> = violations.iter().take(5).map(|v| v.to_string()).collect();
        Err(format!(
            "its answer does not satisfy the schema: {}",
            listed.join("; ")
        ))
    }
}

/// The files that differ between two snapshots' trees (renames as a delete and an add).
async fn changed_files(tree: &Worktree, from: &str, to: &str) -> Result<Vec<String>, Failure> {
    let (path, from, to) = (tree.path.clone(), from.to_owned(), to.to_owned());
    blocking(move || {
        git::git(
            &path,
            &["diff", "--name-only", "--no-renames", "-z", &from, &to],
            &[],
        )
        .map(|out| {
            out.split('\0')
                .filter(|f| !f.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .map_err(|e| e.to_string())
    })
    .await
}

pub(crate) async fn snapshot(
    tree: &Worktree,
    reference: &str,
    message: &str,
) -> Result<git::Snapshot, Failure> {
    let (tree, reference, message) = (tree.clone(), reference.to_owned(), message.to_owned());
    blocking(move || git::snapshot(&tree, &reference, &message).map_err(|e| e.to_string())).await
}

/// Runs blocking git work off the runtime's threads.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, Failure> {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(Failure::new(format!("agent: {err}"))),
        Err(err) => Err(Failure::new(format!("agent: {err}"))),
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    std::fs::write(path, bytes)
        .map_err(|e| Failure::new(format!("agent: cannot write {}: {e}", path.display())))
}

impl Provider for Agents {
    fn name(&self) -> &str {
        "agent"
    }

    fn describe(&self) -> Value {
        json!({
            "name": "agent",
            "description": "a coding agent run (the `agent` leaf): claude, codex or a CLI under `agents:` in palm.yaml, in the job's worktree, audited against its mode afterwards; saves {end, provider, session_id, turns, cost_usd, text, structured, worktree, patch, audit}",
            "args": {
                "provider": format!("one of: {} (required)", self.known()),
                "prompt": "the task (required)",
                "mode": "observe, edit (default) or execute: the authority ceiling; a run past it ends `violation`",
                "repo": "a git checkout; default: the node's working directory",
                "model": "the provider's model",
                "max_turns": "stop after this many turns",
                "timeout_ms": TIMEOUT_MS_DEFAULT,
                "budget_usd": "a cost above it ends the run as `budget`",
                "resume": "a session id to continue",
                "schema": "a JSON Schema the final answer must satisfy",
            },
        })
    }

    fn call<'a>(&'a self, ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(async move { self.run_as(&ctx, args, None).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_structured_answer_is_parsed_and_checked() {
        let schema = json!({"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}});
        assert_eq!(
            answer_as_json("```json\n{\"ok\": true}\n```", &schema),
            Ok(json!({"ok": true}))
        );
        assert!(
            answer_as_json("{\"ok\": 1}", &schema)
                .unwrap_err()
                .contains("/ok")
        );
        assert!(
            answer_as_json("sure!", &schema)
                .unwrap_err()
                .contains("not JSON")
        );
    }

    #[test]
    fn parallel_runs_of_one_job_all_keep_their_spending() {
        let data = tempfile::tempdir().expect("data");
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let data = data.path().to_owned();
                std::thread::spawn(move || {
                    for round in 0..8 {
                        Ledger::of(&data, "j-1").record(&format!("run-{i}-{round}"), 0.5, 1);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("a recording thread");
        }
        let ledger = Ledger::of(data.path(), "j-1");
        assert_eq!(ledger.read().len(), 16 * 8, "every run's entry is kept");
        assert_eq!(ledger.spent_except("none"), (64.0, 128));
    }
}
