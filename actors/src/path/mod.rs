//! The job path of one node: definitions, jobs, effects, leases and timers — sans-IO.
//!
//! [`JobPath`] is the organ every node runs to hold durable jobs. It reads the [`Store`]
//! only when it opens (and for queries of finished jobs); every change it makes goes into
//! one pending [`WriteBatch`] that the host takes with [`JobPath::take_batch`], commits and
//! flushes **before** it acknowledges anything or acts on [`JobPath::take_notices`]. Many
//! calls may share one batch: that is group commit.
//!
//! If a commit fails, the in-memory state is ahead of the store: the host must drop this
//! `JobPath` and open a new one from the store (which still holds the last durable state).
//!
//! Time is always an explicit `now` (ms since the Unix epoch); randomness (the store tag
//! of a new store) comes from a caller's seed. No clock, no threads, no I/O beyond the
//! store trait.

pub mod migrate;
pub mod records;
pub mod retention;
pub mod retry;

use crate::bt::{CompileError, EffectRequest, NodeView, Outcome, Parked, Program};
use crate::definition::{self, Definition, Diagnostic};
use crate::interest::{Happening, Interests, StartedBy};
use crate::job::{
    ApplyError, EffectInfo, Event, EventKind, JobCore, JobStatus, NewJob, ParentLink, ReplayError,
};
use crate::json::Json;
use crate::store::{Store, StoreError, Table, WriteBatch, scan_prefix};
use records::{
    Claim, DefinitionRecord, EffectRecord, JobRecord, RunningGroup, decode, definition_key, encode,
    put_event, read_effects, read_journal, read_u64,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// Bound on spawn nesting: a flow that spawns itself stops here with an error.
pub const SPAWN_DEPTH_MAX: u32 = 16;

/// Finished jobs kept in memory for fast status reads (older ones are replayed from
/// their journals on demand).
pub const FINISHED_CACHED_MAX: usize = 1024;

/// Default lease on a claimed effect; a seat renews it while the effect runs.
pub const LEASE_MS_DEFAULT: u64 = 30_000;

/// Settings of a job path.
#[derive(Clone, Debug)]
pub struct JobPathConfig {
    /// This node's name: recorded as the home of its jobs and as where effects ran.
    pub node: String,
    /// Lease on a claimed effect.
    pub lease_ms: u64,
}

impl Default for JobPathConfig {
    fn default() -> Self {
        JobPathConfig {
            node: "local".to_owned(),
            lease_ms: LEASE_MS_DEFAULT,
        }
    }
}

/// A stored definition revision, parsed.
#[derive(Clone, Debug)]
pub struct StoredDefinition {
    /// The record as stored.
    pub record: DefinitionRecord,
    /// The parsed definition.
    pub definition: Arc<Definition>,
}

/// Which flow to run.
#[derive(Clone, Debug)]
pub enum FlowRef {
    /// A stored definition, at a revision or the latest.
    Stored {
        /// Flow name.
        name: String,
        /// Revision; `None` is the latest.
        revision: Option<u32>,
    },
    /// Source text, stored as a new revision if it differs from the latest.
    Source {
        /// YAML or JSON text.
        source: String,
        /// Where it came from, for error messages.
        origin: String,
    },
}

/// A submission.
#[derive(Clone, Debug)]
pub struct SubmitRequest {
    /// The flow.
    pub flow: FlowRef,
    /// Input fields; defaults are applied and the result validated.
    pub input: serde_json::Map<String, serde_json::Value>,
    /// `key=value` arguments, typed by the flow's declared inputs (they override `input`).
    pub args: Vec<(String, String)>,
    /// Set when the job starts itself (an interest, a `palm` call): its start key makes
    /// the start idempotent, its depth and chain guard against loops.
    pub started_by: Option<StartedBy>,
}

/// An accepted submission.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Submitted {
    /// The new job's id.
    pub job: String,
    /// Its status after the first step.
    pub status: JobStatus,
    /// Flow name.
    pub flow: String,
    /// Pinned revision.
    pub revision: u32,
    /// True when the start key named a job that already existed (nothing was started).
    pub existing: bool,
}

/// A definition stored by [`JobPath::add_definition`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DefinitionAdded {
    /// Flow name.
    pub name: String,
    /// Its revision (new, or the existing one with identical text).
    pub revision: u32,
    /// False when the text equals the latest revision's (nothing was written).
    pub created: bool,
}

/// Why a definition was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DefinitionError {
    /// Parse or validation problems, each with file:line:col.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Diagnostic>),
}

/// Why a submission was refused. Nothing was written.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SubmitError {
    /// No definition by this name.
    #[error("unknown flow `{name}`{}", known_hint(.known))]
    UnknownFlow {
        /// The name asked for.
        name: String,
        /// Names that exist.
        known: Vec<String>,
    },
    /// The flow exists but not at this revision.
    #[error("flow `{name}` has no revision {revision} (latest is {latest})")]
    UnknownRevision {
        /// Flow name.
        name: String,
        /// Revision asked for.
        revision: u32,
        /// Latest revision.
        latest: u32,
    },
    /// The source text is not a valid definition.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// The input does not fit the flow's declared inputs.
    #[error("invalid input: {}", .0.join("; "))]
    InvalidInput(Vec<String>),
    /// The definition could not be compiled (a subflow went missing).
    #[error("cannot compile flow: {0}")]
    Compile(#[from] CompileError),
    /// The store could not be read (looking up a start key).
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A job running the same loop (the same rendered loop key) has not ended yet.
    #[error("loop `{key}` is already running as job {job}")]
    AlreadyRunning {
        /// The loop's key.
        key: String,
        /// The job running it.
        job: String,
    },
}

/// The key of the first `loop` in a flow (looking into its subflows, as `resolve` finds
/// them), rendered against a job's input: `None` for a flow without a loop; the flow's
/// name when its loop gives no `key` (or the key does not render: a key reads `input`
/// only, since a job's state does not exist yet when it is submitted).
pub fn loop_key(
    definition: &Definition,
    input: &serde_json::Value,
    resolve: &dyn Fn(&str) -> Option<Arc<Definition>>,
) -> Option<String> {
    fn find(
        definition: &Definition,
        resolve: &dyn Fn(&str) -> Option<Arc<Definition>>,
        depth: usize,
    ) -> Option<Option<crate::template::Template>> {
        let mut found = None;
        let mut subflows = Vec::new();
        definition.tree.walk(&mut |node| match &node.kind {
            crate::definition::NodeKind::Loop(spec) if found.is_none() => {
                found = Some(spec.key.clone());
            }
            crate::definition::NodeKind::Subflow { flow } => subflows.push(flow.clone()),
            _ => {}
        });
        if found.is_some() || depth >= crate::bt::SUBFLOW_DEPTH_MAX {
            return found;
        }
        subflows
            .iter()
            .filter_map(|name| resolve(name))
            .find_map(|inner| find(&inner, resolve, depth + 1))
    }
    let template = find(definition, resolve, 0)?;
    let state = serde_json::Value::Object(Default::default());
    let rendered = template.and_then(|t| {
        t.render_string(&crate::template::Scope::new(input, &state, &[]))
            .ok()
    });
    Some(match rendered {
        Some(key) if !key.trim().is_empty() => key,
        _ => definition.name.clone(),
    })
}

fn known_hint(known: &[String]) -> String {
    if known.is_empty() {
        "; no flows are stored yet (add one with `palm flows add FILE`, or pass a file path)"
            .to_owned()
    } else {
        format!("; stored flows: {}", known.join(", "))
    }
}

/// Why an operation on a job was refused. Nothing was written.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum JobError {
    /// No job with this id.
    #[error("unknown job `{0}`")]
    UnknownJob(String),
    /// The job refused the input.
    #[error(transparent)]
    Refused(#[from] ApplyError),
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a completion was refused. Nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompleteError {
    /// The effect is not in flight: completed already, cancelled, or never requested.
    #[error("effect {0} is not in flight (already completed or cancelled)")]
    NotInFlight(String),
    /// The completion carries a fencing token other than the current claim's.
    #[error("effect {key}: stale fencing token {token} (current claim: {current:?})")]
    StaleToken {
        /// Effect key.
        key: String,
        /// Token presented.
        token: u64,
        /// Token of the current claim, if any.
        current: Option<u64>,
    },
    /// A report about a claim came from another holder than the one it names (a node
    /// the effect was not placed on).
    #[error("effect {key}: reported by {holder}, but the claim is {claimed_by}'s")]
    NotTheHolder {
        /// Effect key.
        key: String,
        /// Who reported.
        holder: String,
        /// Who holds the claim.
        claimed_by: String,
    },
}

/// Why a store could not be opened as a job path.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OpenError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store was written by an incompatible format.
    #[error("store format `{found}` is not supported by this build (expected `{expected}`)")]
    Format {
        /// Found.
        found: String,
        /// Expected.
        expected: String,
    },
}

/// What opening found.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OpenReport {
    /// Definitions loaded.
    pub definitions: usize,
    /// Unfinished jobs rebuilt from their journals.
    pub jobs_resumed: usize,
    /// Parked jobs left on disk until something moves them ([`JobPath::dormant_jobs`]).
    pub jobs_dormant: usize,
    /// Effects put back in the queue because their holder was this node's previous life.
    pub effects_requeued: usize,
    /// Timers armed.
    pub timers_armed: usize,
    /// Jobs whose journals could not be replayed (left untouched in the store).
    pub broken: Vec<(String, String)>,
    /// True when the store was new.
    pub created: bool,
    /// Process groups the previous life recorded as running effects: the host must stop
    /// them (or find them gone) before any seat claims work ([`JobPath::groups`]).
    pub orphan_groups: usize,
}

/// Something the host must act on after committing the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A job's status changed.
    JobChanged {
        /// Job id.
        job: String,
        /// New status.
        status: JobStatus,
    },
    /// A claimable effect became ready.
    EffectReady,
    /// An interest matched but its flow was not started (depth bound, a bad input, a
    /// failing `where`): the host logs it.
    StartRefused {
        /// The flow not started.
        flow: String,
        /// Why.
        reason: String,
    },
    /// A job started whose flow declares places: the host's place book should hold them
    /// for as long as the job lives (they are stopped on its terminal `JobChanged`).
    PlacesWanted {
        /// Job id.
        job: String,
        /// The flow's places (names as declared; the book scopes them to the job).
        places: Vec<crate::place::PlaceSpec>,
    },
    /// A claimed effect is no longer wanted (halted, cancelled, or its lease expired):
    /// its holder should stop it.
    CancelEffect {
        /// Effect key.
        key: String,
        /// Fencing token of the claim to stop (a newer claim of the key is spared).
        token: u64,
        /// Claim holder.
        holder: String,
    },
}

/// A claimed effect, handed to a seat (or, placed, to another node).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimedEffect {
    /// Idempotency key (`PALM_EFFECT_KEY`).
    pub key: String,
    /// Owning job (`PALM_JOB_ID`).
    pub job: String,
    /// Fencing token to present at completion.
    pub token: u64,
    /// Lease expiry.
    pub lease_until: u64,
    /// What to do.
    pub request: EffectRequest,
}

/// What a completion did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed {
    /// The job's status afterwards.
    pub status: JobStatus,
}

/// Everything `palm status` shows about a job.
#[derive(Clone, Debug, Serialize)]
pub struct JobView {
    /// Job id.
    pub job: String,
    /// Flow name.
    pub flow: String,
    /// Pinned revision.
    pub revision: u32,
    /// Status.
    pub status: JobStatus,
    /// The node that is home of the job.
    pub home: String,
    /// Parked waits.
    pub waiting_on: Vec<Parked>,
    /// Input.
    pub input: serde_json::Value,
    /// Blackboard state.
    pub state: serde_json::Value,
    /// Why it failed.
    pub error: Option<String>,
    /// Effects requested, with where they ran.
    pub effects: Vec<EffectInfo>,
    /// Parent, for a spawned child.
    pub parent: Option<ParentLink>,
    /// What started it, when it started itself (an interest, a `palm` call).
    pub started_by: Option<StartedBy>,
    /// Submitted at.
    pub created_at: u64,
    /// Last change.
    pub updated_at: u64,
    /// Last journal seq.
    pub seq: u64,
    /// How its last `loop` or `until_green` ended (`stagnated`, `no_op`, `green`...),
    /// when one decided how the job ended; the exit code reports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The tree with every node's status.
    #[serde(skip)]
    pub tree: Option<NodeView>,
    /// The job ended long enough ago that only its summary is kept (no input, state,
    /// effects or tree; see `retention`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compacted: bool,
}

enum Internal {
    Input {
        job: String,
        input: EventKind,
    },
    Spawn {
        parent: String,
        key: String,
        flow: String,
        input: Json,
        wait: bool,
    },
    Cancel {
        job: String,
        reason: String,
    },
}

type ProgramKey = (String, u32, Vec<(String, u32)>);

/// The job path. See the module docs.
pub struct JobPath {
    config: JobPathConfig,
    tag: String,
    next_job: u64,
    next_token: u64,
    definitions: BTreeMap<String, BTreeMap<u32, Arc<StoredDefinition>>>,
    /// Digest of a definition's text → (name, revision), to recognise a resubmitted file.
    by_source: HashMap<u64, (String, u32)>,
    programs: HashMap<ProgramKey, Arc<Program>>,
    jobs: HashMap<String, JobCore>,
    /// Parked jobs left on disk (see [`JobPath::dormant_jobs`]): only their ids are held;
    /// a continue, a cancel or a migration loads one first.
    dormant: BTreeSet<String>,
    /// Jobs parked by a step of the batch being built, and of the one taken before it: a
    /// job of the older set still parked, and not in the newer one, goes dormant at the
    /// next take (its writes are durable by then; see [`JobPath::take_batch`]).
    touched: HashSet<String>,
    touched_taken: HashSet<String>,
    /// Jobs whose record the batch being built writes, and the one taken before it (see
    /// [`JobPath::written_in`]); older writes are durable once that batch is.
    written: HashSet<String>,
    written_taken: HashSet<String>,
    /// Recently finished jobs, oldest first in `finished_order`.
    finished: HashMap<String, JobCore>,
    finished_order: VecDeque<String>,
    effects: HashMap<String, EffectRecord>,
    ready: VecDeque<String>,
    /// Effects requested since the last take that no [`JobPath::claim_fresh`] has looked
    /// at yet, at the back of `ready`.
    fresh_ready: usize,
    timers: BTreeSet<(u64, String)>,
    leases: BTreeSet<(u64, String)>,
    resumes: VecDeque<String>,
    /// Child job → (parent job, parent's spawn effect), for children waited on.
    waiters: HashMap<String, (String, String)>,
    /// Parent's spawn effect → child job, so halting the effect cancels the child.
    spawned: HashMap<String, String>,
    batch: WriteBatch,
    /// How many of `batch`'s writes need no commit of their own (see
    /// [`JobPath::unforced`]): a batch holding only those waits for the next one that does.
    unforced: usize,
    /// The pending batch's number: [`JobPath::take_batch`] counts them (see
    /// [`JobPath::request_generation`]).
    generation: u64,
    /// Effect to run (`run`, `call`) → the generation of the batch that requested it,
    /// while it is in memory; none for effects this path found in the store at open.
    requested_in: HashMap<String, u64>,
    notices: Vec<Notice>,
    #[cfg(feature = "mutations")]
    mutation: Option<Mutation>,
    queue: VecDeque<Internal>,
    /// `on:` triggers and their pending start intents.
    interests: Interests,
    /// Start keys written into the batch being built, and into the one taken before it
    /// (whose commit may still be in flight); older ones are read from the store. Kept
    /// to two batches, so a node that starts jobs by key for months does not grow.
    starts: HashMap<String, String>,
    starts_taken: HashMap<String, String>,
    /// Process groups running effects' commands (see [`records::RunningGroup`]). At open,
    /// every entry is a leftover of the previous life.
    groups: BTreeMap<String, RunningGroup>,
}

/// The tag of the store (the prefix of the ids of the jobs it is home of), once a job
/// path has opened it.
pub fn store_tag(store: &dyn Store) -> Option<String> {
    store
        .get(Table::Meta, records::META_TAG)
        .ok()
        .flatten()
        .map(|tag| String::from_utf8_lossy(&tag).into_owned())
}

/// Characters in a new store's tag: 13 × 5 bits carry all 64 bits of the seed.
pub const TAG_CHARS: usize = 13;

/// A new store's tag from `seed` (the host draws it from the system's random source):
/// distinct seeds give distinct tags.
fn tag_from_seed(seed: u64) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijkmnpqrstuvwxyz23456789";
    // A bijective mix (splitmix64's finaliser), then 5 bits per character.
    let mut x = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (0..TAG_CHARS)
        .map(|i| ALPHABET[((x >> (5 * i)) & 31) as usize] as char)
        .collect()
}

/// A deliberate bug, switched on by a test to prove the simulator catches it (feature
/// `mutations`; nothing in a node ever sets one).
#[cfg(feature = "mutations")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Accept a completion whatever its fencing token.
    SkipFencing,
}

impl JobPath {
    /// Breaks this job path on purpose (see [`Mutation`]).
    #[cfg(feature = "mutations")]
    pub fn set_mutation(&mut self, mutation: Option<Mutation>) {
        self.mutation = mutation;
    }

    /// Opens the job path over a store: loads definitions, rebuilds unfinished jobs from
    /// their journals, re-queues effects held by this node's previous life and re-arms
    /// timers. `seed` names a new store (its job id prefix). Writes made while opening are
    /// in the pending batch.
    pub fn open(
        store: &dyn Store,
        config: JobPathConfig,
        seed: u64,
    ) -> Result<(JobPath, OpenReport), OpenError> {
        let mut report = OpenReport::default();
        let mut batch = WriteBatch::new();
        let tag = match store.get(Table::Meta, records::META_FORMAT)? {
            Some(format)
                if !records::FORMATS_READ
                    .iter()
                    .any(|known| known.as_bytes() == format) =>
            {
                return Err(OpenError::Format {
                    found: String::from_utf8_lossy(&format).into_owned(),
                    expected: records::FORMAT.to_owned(),
                });
            }
            Some(format) => match store.get(Table::Meta, records::META_TAG)? {
                Some(tag) => {
                    if format != records::FORMAT.as_bytes() {
                        // An older format this build reads: from the next write on, the
                        // store is this build's (nothing stored needs converting).
                        batch.put(
                            Table::Meta,
                            records::META_FORMAT.to_vec(),
                            records::FORMAT.as_bytes().to_vec(),
                        );
                    }
                    String::from_utf8_lossy(&tag).into_owned()
                }
                None => {
                    return Err(OpenError::Store(StoreError::Corrupt(
                        "store has a format but no tag".to_owned(),
                    )));
                }
            },
            None => {
                report.created = true;
                let tag = tag_from_seed(seed);
                batch.put(
                    Table::Meta,
                    records::META_FORMAT.to_vec(),
                    records::FORMAT.as_bytes().to_vec(),
                );
                batch.put(
                    Table::Meta,
                    records::META_TAG.to_vec(),
                    tag.as_bytes().to_vec(),
                );
                tag
            }
        };
        let mut path = JobPath {
            tag,
            next_job: read_u64(store, records::META_NEXT_JOB)?.unwrap_or(1),
            next_token: read_u64(store, records::META_NEXT_TOKEN)?.unwrap_or(1),
            config,
            definitions: BTreeMap::new(),
            by_source: HashMap::new(),
            programs: HashMap::new(),
            jobs: HashMap::new(),
            dormant: BTreeSet::new(),
            touched: HashSet::new(),
            touched_taken: HashSet::new(),
            written: HashSet::new(),
            written_taken: HashSet::new(),
            finished: HashMap::new(),
            finished_order: VecDeque::new(),
            effects: HashMap::new(),
            ready: VecDeque::new(),
            fresh_ready: 0,
            timers: BTreeSet::new(),
            leases: BTreeSet::new(),
            resumes: VecDeque::new(),
            waiters: HashMap::new(),
            spawned: HashMap::new(),
            batch,
            unforced: 0,
            generation: 0,
            requested_in: HashMap::new(),
            notices: Vec::new(),
            #[cfg(feature = "mutations")]
            mutation: None,
            interests: Interests::open(store)?,
            starts: HashMap::new(),
            starts_taken: HashMap::new(),
            queue: VecDeque::new(),
            groups: BTreeMap::new(),
        };
        path.load_definitions(store)?;
        report.definitions = path.definitions.values().map(BTreeMap::len).sum();
        path.activate_interests(0);
        let effects = read_effects(store)?;
        path.load_jobs(store, &effects, &mut report)?;
        path.load_effects(effects, &mut report);
        path.load_groups(store)?;
        report.orphan_groups = path.groups.len();
        Ok((path, report))
    }

    fn load_definitions(&mut self, store: &dyn Store) -> Result<(), StoreError> {
        let mut records = Vec::new();
        let mut failure = None;
        store.scan(Table::Definitions, b"", None, &mut |_, value| {
            match decode::<DefinitionRecord>(value, "definition") {
                Ok(record) => records.push(record),
                Err(err) => failure = Some(err),
            }
            failure.is_none()
        })?;
        if let Some(err) = failure {
            return Err(err);
        }
        for record in records {
            // Stored definitions were valid when stored; a parser change that rejects one
            // must not make the store unopenable, so such a revision is skipped (jobs that
            // pin it report a missing definition).
            if let Ok(definition) = definition::parse(&record.source, &record.origin) {
                self.by_source.insert(
                    source_digest(&record.source),
                    (record.name.clone(), record.revision),
                );
                self.definitions
                    .entry(record.name.clone())
                    .or_default()
                    .insert(
                        record.revision,
                        Arc::new(StoredDefinition {
                            record,
                            definition: Arc::new(definition),
                        }),
                    );
            }
        }
        Ok(())
    }

    fn load_jobs(
        &mut self,
        store: &dyn Store,
        effects: &[(String, EffectRecord)],
        report: &mut OpenReport,
    ) -> Result<(), StoreError> {
        let with_effects: HashSet<&str> = effects.iter().map(|(_, r)| r.job.as_str()).collect();
        let mut active = Vec::new();
        let mut failure = None;
        store.scan(Table::Jobs, b"", None, &mut |_, value| {
            match decode::<JobRecord>(value, "job record") {
                Ok(record) if !record.status.is_terminal() => active.push(record),
                Ok(_) => {}
                Err(err) => failure = Some(err),
            }
            failure.is_none()
        })?;
        if let Some(err) = failure {
            return Err(err);
        }
        for record in active {
            if !with_effects.contains(record.id.as_str()) && self.may_sleep(&record) {
                self.dormant.insert(record.id);
                report.jobs_dormant += 1;
                continue;
            }
            let events = read_journal(store, &record.id)?;
            match self.replay(&record.id, &events) {
                Ok(job) => {
                    for event in events.iter() {
                        if matches!(event.kind, EventKind::Yielded) {
                            // A yield is resumed by the next input; if it was the last
                            // event, the job must be resumed now.
                            if event.seq == job.seq() {
                                self.resumes.push_back(record.id.clone());
                            }
                        }
                    }
                    if let Some(parent) = job.parent() {
                        if parent.wait {
                            self.waiters.insert(
                                record.id.clone(),
                                (parent.job.clone(), parent.effect.clone()),
                            );
                        }
                        self.spawned
                            .insert(parent.effect.clone(), record.id.clone());
                    }
                    self.jobs.insert(record.id.clone(), job);
                    report.jobs_resumed += 1;
                }
                Err(err) => report.broken.push((record.id.clone(), err.to_string())),
            }
        }
        Ok(())
    }

    /// Whether a stored unfinished job may stay on disk at open (the caller checked that
    /// no effect of it is in flight): parked on a wait, not a child (its parent's spawn
    /// effect finds it in memory), with no places to hold and no `loop` key to guard
    /// (both are read off the jobs in memory).
    fn may_sleep(&self, record: &JobRecord) -> bool {
        record.status == JobStatus::Waiting
            && record.parent.is_none()
            && self.sleeps_with(&record.flow, record.revision)
    }

    /// Whether a parked job of `flow` at `revision` may leave memory: its flow holds no
    /// places and guards no `loop` key (both are read off the jobs in memory).
    fn sleeps_with(&self, flow: &str, revision: u32) -> bool {
        let Some(stored) = self.definition(flow, Some(revision)) else {
            return false;
        };
        let resolve = |name: &str| {
            self.definition(name, None)
                .map(|d| Arc::clone(&d.definition))
        };
        stored.definition.places.is_empty()
            && loop_key(&stored.definition, &serde_json::Value::Null, &resolve).is_none()
    }

    /// Loads dormant job `id` into memory (it is about to be stepped); nothing for any
    /// other job. A journal that no longer replays leaves the job dormant and says why.
    fn wake(&mut self, store: &dyn Store, id: &str) -> Result<(), StoreError> {
        if !self.dormant.contains(id) {
            return Ok(());
        }
        let events = read_journal(store, id)?;
        let job = self.replay(id, &events).map_err(|err| {
            StoreError::Corrupt(format!("parked job {id} cannot be replayed: {err}"))
        })?;
        self.dormant.remove(id);
        self.jobs.insert(id.to_owned(), job);
        // Considered again at the next takes, so a job woken and then not moved (a
        // refused continue) does not stay in memory.
        self.touched.insert(id.to_owned());
        Ok(())
    }

    fn load_effects(&mut self, effects: Vec<(String, EffectRecord)>, report: &mut OpenReport) {
        let own_holder = format!("{}/", self.config.node);
        let mut ordered: Vec<(String, EffectRecord)> = effects;
        ordered.sort_by(|a, b| a.1.created_at.cmp(&b.1.created_at).then(a.0.cmp(&b.0)));
        for (key, mut record) in ordered {
            let Some(job) = self.jobs.get(&record.job) else {
                // Its job ended or is broken: the record is a leftover.
                continue;
            };
            if !job.engine().outstanding().contains_key(&key) {
                continue;
            }
            match &record.request {
                EffectRequest::Timer { deadline } => {
                    self.timers.insert((*deadline, key.clone()));
                    report.timers_armed += 1;
                }
                EffectRequest::Spawn { flow, input, wait } => {
                    if !self.spawned.contains_key(&key) {
                        self.queue.push_back(Internal::Spawn {
                            parent: record.job.clone(),
                            key: key.clone(),
                            flow: flow.clone(),
                            input: input.clone(),
                            wait: *wait,
                        });
                    }
                }
                EffectRequest::Run { .. } | EffectRequest::Call { .. } => {
                    match &record.claim {
                        Some(claim) if !claim.holder.starts_with(&own_holder) => {
                            self.leases.insert((claim.lease_until, key.clone()));
                        }
                        Some(_) => {
                            // Held by this node's previous life, whose seats are gone.
                            record.claim = None;
                            self.batch.put(
                                Table::Effects,
                                key.as_bytes().to_vec(),
                                encode(&record),
                            );
                            self.ready.push_back(key.clone());
                            report.effects_requeued += 1;
                        }
                        None => self.ready.push_back(key.clone()),
                    }
                }
            }
            self.effects.insert(key, record);
        }
    }

    fn load_groups(&mut self, store: &dyn Store) -> Result<(), StoreError> {
        let mut failure = None;
        let groups = &mut self.groups;
        store.scan(Table::Groups, b"", None, &mut |key, value| {
            match decode::<RunningGroup>(value, "process group") {
                Ok(group) => {
                    groups.insert(String::from_utf8_lossy(key).into_owned(), group);
                }
                Err(err) => failure = Some(err),
            }
            failure.is_none()
        })?;
        failure.map_or(Ok(()), Err)
    }

    fn replay(&mut self, id: &str, events: &[Event]) -> Result<JobCore, ReplayError> {
        let definitions = &self.definitions;
        let programs = &mut self.programs;
        let mut lookup = |flow: &str, revision: u32, subflows: &[(String, u32)]| {
            program_for(definitions, programs, flow, revision, subflows)
        };
        JobCore::replay(events, &mut lookup, id)
    }

    /// The node name.
    pub fn node(&self) -> &str {
        &self.config.node
    }

    /// The store's tag (job id prefix).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Takes the writes made since the last call. Commit and flush them before acting on
    /// notices or acknowledging anything.
    pub fn take_batch(&mut self) -> WriteBatch {
        // The batch before this one is committed by now (a host commits its batches in
        // order, one at a time): its start keys are readable from the store.
        self.starts_taken = std::mem::take(&mut self.starts);
        self.written_taken = std::mem::take(&mut self.written);
        self.unforced = 0;
        self.generation += 1;
        self.fresh_ready = 0;
        // Likewise the jobs it wrote: those still parked, and untouched since, can be
        // read back from the store, so they leave memory.
        let settled = std::mem::replace(&mut self.touched_taken, std::mem::take(&mut self.touched));
        for id in settled {
            if !self.touched_taken.contains(&id) && self.can_sleep(&id) {
                self.jobs.remove(&id);
                self.dormant.insert(id);
            }
        }
        std::mem::take(&mut self.batch)
    }

    /// Whether job `id`, in memory, may leave it: see [`JobPath::may_sleep`]; and nothing
    /// of it in flight or queued.
    fn can_sleep(&self, id: &str) -> bool {
        let Some(core) = self.jobs.get(id) else {
            return false;
        };
        core.status() == JobStatus::Waiting
            && core.parent().is_none()
            && core.engine().outstanding().is_empty()
            && !self.resumes.iter().any(|r| r == id)
            && self.sleeps_with(core.flow(), core.revision())
    }

    /// The number of the pending batch: the batches taken so far by
    /// [`JobPath::take_batch`].
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The [`JobPath::generation`] of the batch that requested effect `key` (a `run` or a
    /// `call`), or `None` when its request was already in the store when this path
    /// opened — durable. A host that commits its batches in order can tell from it when
    /// the request alone is durable: what a seat may wait for before acting on a claim,
    /// rather than every write made so far.
    pub fn request_generation(&self, key: &str) -> Option<u64> {
        self.requested_in.get(key).copied()
    }

    /// The [`JobPath::generation`] of the last batch that wrote job `job` (its journal
    /// and record), when that is the pending batch or the one taken before it; `None`
    /// when every write of the job is older. A host that commits its batches in order
    /// can tell from it when what memory shows of the job is durable: a read of it
    /// may then be answered at once rather than after the next commit.
    pub fn written_in(&self, job: &str) -> Option<u64> {
        if self.written.contains(job) {
            Some(self.generation)
        } else if self.written_taken.contains(job) {
            self.generation.checked_sub(1)
        } else {
            None
        }
    }

    /// True when there are writes that need a commit (writes made under
    /// [`JobPath::unforced`] alone do not).
    pub fn has_writes(&self) -> bool {
        self.batch.len() > self.unforced
    }

    /// Runs `change` with its writes *unforced*: they go into the pending batch in order,
    /// like any other, but do not by themselves ask the host for a commit — they ride
    /// with the next batch that does. For writes nobody outside this process can have
    /// heard of, whose loss in a crash changes nothing anyone relied on: a claim for a
    /// seat of this node (the seat dies with the claim, and the effect is ready again
    /// after a restart), a `kv` write by a provider running in this process (its effect's
    /// completion, which carries the write's consequences out, is in the same batch or a
    /// later one, and batches are durable in order). `change` must raise no notice: a
    /// notice would wait for a commit nobody asks for.
    pub fn unforced<T>(&mut self, change: impl FnOnce(&mut JobPath) -> T) -> T {
        let before = (self.batch.len(), self.notices.len());
        let out = change(self);
        debug_assert_eq!(
            self.notices.len(),
            before.1,
            "an unforced change raised a notice"
        );
        self.unforced += self.batch.len() - before.0;
        out
    }

    /// Takes the notices produced since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    // ----- definitions -----

    /// The stored revision whose text is exactly `source`, if any.
    fn stored_revision_of(&self, source: &str) -> Option<(String, u32)> {
        let (name, revision) = self.by_source.get(&source_digest(source))?;
        let stored = self.definitions.get(name)?.get(revision)?;
        (stored.record.source == source).then(|| (name.clone(), *revision))
    }

    /// Parses, validates and stores a definition as a new revision (or finds the identical
    /// latest one).
    pub fn add_definition(
        &mut self,
        now: u64,
        source: &str,
        origin: &str,
    ) -> Result<DefinitionAdded, DefinitionError> {
        // Submitting the same file again is the common case: recognise the text without
        // parsing it (a hash finds the candidate; the text itself decides).
        let digest = source_digest(source);
        if let Some((name, revision)) = self.by_source.get(&digest) {
            let latest = self
                .definitions
                .get(name)
                .and_then(|revs| revs.values().next_back());
            if let Some(latest) = latest
                && latest.record.revision == *revision
                && latest.record.source == source
            {
                return Ok(DefinitionAdded {
                    name: name.clone(),
                    revision: *revision,
                    created: false,
                });
            }
        }
        let parsed = definition::parse(source, origin).map_err(DefinitionError::Invalid)?;
        let name = parsed.name.clone();
        let parsed = Arc::new(parsed);
        let diagnostics = {
            let this = Arc::clone(&parsed);
            let definitions = &self.definitions;
            definition::check_subflows(&parsed, &|flow: &str| {
                if flow == this.name {
                    return Some(Arc::clone(&this));
                }
                definitions
                    .get(flow)
                    .and_then(|revs| revs.values().next_back())
                    .map(|d| Arc::clone(&d.definition))
            })
        };
        if !diagnostics.is_empty() {
            return Err(DefinitionError::Invalid(diagnostics));
        }
        let latest = self
            .definitions
            .get(&name)
            .and_then(|revs| revs.values().next_back());
        if let Some(latest) = latest
            && latest.record.source == source
        {
            return Ok(DefinitionAdded {
                name,
                revision: latest.record.revision,
                created: false,
            });
        }
        let revision = latest.map_or(1, |l| l.record.revision + 1);
        self.by_source.insert(digest, (name.clone(), revision));
        let record = DefinitionRecord {
            name: name.clone(),
            revision,
            source: source.to_owned(),
            origin: origin.to_owned(),
            added_at: now,
        };
        self.batch.put(
            Table::Definitions,
            definition_key(&name, revision),
            encode(&record),
        );
        self.definitions.entry(name.clone()).or_default().insert(
            revision,
            Arc::new(StoredDefinition {
                record,
                definition: parsed,
            }),
        );
        // A new revision's `on:` replaces the old one's.
        self.activate_interests(now);
        Ok(DefinitionAdded {
            name,
            revision,
            created: true,
        })
    }

    fn activate_interests(&mut self, now: u64) {
        let flows: Vec<(String, u32, Vec<crate::interest::InterestSpec>)> = self
            .definitions
            .values()
            .filter_map(|revs| revs.values().next_back())
            .filter(|d| !d.definition.interests.is_empty())
            .map(|d| {
                (
                    d.record.name.clone(),
                    d.record.revision,
                    d.definition.interests.clone(),
                )
            })
            .collect();
        self.interests.activate(now, &flows, &mut self.batch);
    }

    /// The interests (`on:` triggers) of the stored flows, with their pending starts.
    pub fn interests(&self) -> &Interests {
        &self.interests
    }

    /// Starts what is due: schedules become intents, due intents become jobs (each start
    /// deletes its intent in the same batch). Returns how many jobs started.
    pub fn fire_interests(&mut self, now: u64, store: &dyn Store) -> usize {
        self.interests.tick(now, &mut self.batch);
        let mut started = 0;
        for intent in self.interests.due(now) {
            let mut input = serde_json::Map::new();
            input.insert("event".to_owned(), intent.payload.0.clone());
            let request = SubmitRequest {
                flow: FlowRef::Stored {
                    name: intent.flow.clone(),
                    revision: None,
                },
                input,
                args: Vec::new(),
                started_by: Some(StartedBy {
                    key: intent.id.clone(),
                    cause: intent.cause.clone(),
                    depth: intent.depth,
                    chain: intent.chain.clone(),
                }),
            };
            match self.submit(now, request, store) {
                Ok(submitted) if !submitted.existing => started += 1,
                Ok(_) => {}
                Err(err) => self.notices.push(Notice::StartRefused {
                    flow: intent.flow.clone(),
                    reason: format!("{}: {err}", intent.cause),
                }),
            }
            self.interests.started(&intent.id, &mut self.batch);
        }
        self.take_interest_refusals();
        started
    }

    fn take_interest_refusals(&mut self) {
        for refusal in self.interests.take_refusals() {
            self.notices.push(Notice::StartRefused {
                flow: refusal.flow,
                reason: refusal.reason,
            });
        }
    }

    /// An event emitted by name (`palm emit`): interests listening to it enqueue starts.
    /// Returns how many interests matched.
    pub fn emit(&mut self, now: u64, name: &str, data: serde_json::Value) -> usize {
        let happening = Happening::Emitted {
            name: name.to_owned(),
            data,
        };
        let matched = self.interests.happened(now, &happening, &mut self.batch);
        self.take_interest_refusals();
        matched
    }

    /// A place changed state: interests listening to it enqueue starts.
    pub fn place_changed(&mut self, now: u64, place: &str, state: &str, reason: &str) {
        let happening = Happening::PlaceChanged {
            place: place.to_owned(),
            state: state.to_owned(),
            reason: reason.to_owned(),
        };
        self.interests.happened(now, &happening, &mut self.batch);
        self.take_interest_refusals();
    }

    /// Bound on one `kv` value (JSON text).
    pub const KV_VALUE_BYTES_MAX: usize = 1 << 20;

    /// Sets a key of the node's `kv` namespace (durable with the batch).
    pub fn kv_put(&mut self, key: &str, value: &serde_json::Value) -> Result<(), String> {
        if key.is_empty() || key.len() > 1024 {
            return Err("a kv key is 1 to 1024 bytes".to_owned());
        }
        let text = value.to_string();
        if text.len() > Self::KV_VALUE_BYTES_MAX {
            return Err(format!(
                "a kv value is at most {} bytes of JSON",
                Self::KV_VALUE_BYTES_MAX
            ));
        }
        self.batch
            .put(Table::Kv, key.as_bytes().to_vec(), text.into_bytes());
        Ok(())
    }

    /// Deletes a key of the `kv` namespace.
    pub fn kv_delete(&mut self, key: &str) {
        self.batch.delete(Table::Kv, key.as_bytes().to_vec());
    }

    /// Reads a key of the `kv` namespace (committed values).
    pub fn kv_get(
        &self,
        store: &dyn Store,
        key: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        Ok(store
            .get(Table::Kv, key.as_bytes())?
            .and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    /// Keys of the `kv` namespace under `prefix` (at most `limit`).
    pub fn kv_list(
        &self,
        store: &dyn Store,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let mut keys = Vec::new();
        crate::store::scan_prefix(store, Table::Kv, prefix.as_bytes(), &mut |key, _| {
            keys.push(String::from_utf8_lossy(key).into_owned());
            keys.len() < limit
        })?;
        Ok(keys)
    }

    /// The job a start key started, if any.
    pub fn started_job(&self, store: &dyn Store, key: &str) -> Result<Option<String>, StoreError> {
        if let Some(job) = self.starts.get(key).or_else(|| self.starts_taken.get(key)) {
            return Ok(Some(job.clone()));
        }
        Ok(store
            .get(Table::Starts, key.as_bytes())?
            .map(|job| String::from_utf8_lossy(&job).into_owned()))
    }

    /// A stored definition: a revision, or the latest.
    pub fn definition(&self, name: &str, revision: Option<u32>) -> Option<Arc<StoredDefinition>> {
        let revisions = self.definitions.get(name)?;
        match revision {
            Some(revision) => revisions.get(&revision).cloned(),
            None => revisions.values().next_back().cloned(),
        }
    }

    /// Every stored flow with its latest revision.
    pub fn definitions(&self) -> Vec<Arc<StoredDefinition>> {
        self.definitions
            .values()
            .filter_map(|revs| revs.values().next_back().cloned())
            .collect()
    }

    /// Every revision of one flow, oldest first.
    pub fn revisions(&self, name: &str) -> Vec<Arc<StoredDefinition>> {
        self.definitions
            .get(name)
            .map(|revs| revs.values().cloned().collect())
            .unwrap_or_default()
    }

    // ----- jobs -----

    /// Submits a job. Its first step runs at once; effects it asks for are queued.
    pub fn submit(
        &mut self,
        now: u64,
        request: SubmitRequest,
        store: &dyn Store,
    ) -> Result<Submitted, SubmitError> {
        if let Some(started_by) = &request.started_by
            && let Some(job) = self.started_job(store, &started_by.key)?
        {
            // The same start again (a retried `palm` call, a replayed intent): the first
            // job answers.
            let view = self.job_view(store, &job)?;
            return Ok(Submitted {
                status: view.as_ref().map_or(JobStatus::Pending, |v| v.status),
                flow: view.as_ref().map_or_else(String::new, |v| v.flow.clone()),
                revision: view.as_ref().map_or(0, |v| v.revision),
                job,
                existing: true,
            });
        }
        let (name, revision) = match request.flow {
            // A source already stored as any revision runs as that revision: resubmitting
            // the same text (an agent's inline flow, again and again) adds nothing.
            FlowRef::Source { source, origin } => match self.stored_revision_of(&source) {
                Some((name, revision)) => (name, Some(revision)),
                None => {
                    let added = self.add_definition(now, &source, &origin)?;
                    (added.name, Some(added.revision))
                }
            },
            FlowRef::Stored { name, revision } => (name, revision),
        };
        let stored = self.resolve_flow(&name, revision)?;
        let mut fields = request.input;
        fields.extend(stored.definition.input_from_args(&request.args));
        let input = stored
            .definition
            .prepare_input(fields)
            .map_err(SubmitError::InvalidInput)?;
        let started_by = request.started_by;
        if let Some(by) = &started_by {
            self.starts.insert(by.key.clone(), String::new());
        }
        let job = self.start_job(now, &stored, input, None, started_by.clone())?;
        if let Some(by) = started_by {
            self.batch.put(
                Table::Starts,
                by.key.as_bytes().to_vec(),
                job.as_bytes().to_vec(),
            );
            self.starts.insert(by.key, job.clone());
        }
        self.drain(now);
        let status = self
            .jobs
            .get(&job)
            .map_or_else(|| self.finished_status(&job), JobCore::status);
        Ok(Submitted {
            job,
            status,
            flow: stored.record.name.clone(),
            revision: stored.record.revision,
            existing: false,
        })
    }

    fn resolve_flow(
        &self,
        name: &str,
        revision: Option<u32>,
    ) -> Result<Arc<StoredDefinition>, SubmitError> {
        let Some(revisions) = self.definitions.get(name) else {
            return Err(SubmitError::UnknownFlow {
                name: name.to_owned(),
                known: self.definitions.keys().cloned().collect(),
            });
        };
        match revision {
            None => Ok(Arc::clone(
                revisions
                    .values()
                    .next_back()
                    .expect("a flow has revisions"),
            )),
            Some(revision) => {
                revisions
                    .get(&revision)
                    .cloned()
                    .ok_or_else(|| SubmitError::UnknownRevision {
                        name: name.to_owned(),
                        revision,
                        latest: *revisions.keys().next_back().expect("a flow has revisions"),
                    })
            }
        }
    }

    /// Pins the latest revision of every subflow reachable from `definition`.
    fn pin_subflows(&self, definition: &Definition) -> Vec<(String, u32)> {
        let mut pins: BTreeMap<String, u32> = BTreeMap::new();
        let mut pending = definition.subflow_names();
        while let Some(name) = pending.pop() {
            if pins.contains_key(&name) {
                continue;
            }
            if let Some(latest) = self.definition(&name, None) {
                pins.insert(name, latest.record.revision);
                pending.extend(latest.definition.subflow_names());
            }
        }
        pins.into_iter().collect()
    }

    /// One loop per key at a time (a submit and a spawn alike): the key is rendered from
    /// the input, and every live job of a flow with a loop is asked for its own.
    fn check_loop_key(
        &self,
        definition: &Definition,
        input: &serde_json::Value,
    ) -> Result<(), SubmitError> {
        let resolve = |name: &str| {
            self.definition(name, None)
                .map(|d| Arc::clone(&d.definition))
        };
        let Some(key) = loop_key(definition, input, &resolve) else {
            return Ok(());
        };
        for (id, core) in &self.jobs {
            if core.status().is_terminal() {
                continue;
            }
            let Some(theirs) = self.definition(core.flow(), Some(core.revision())) else {
                continue;
            };
            if loop_key(&theirs.definition, core.engine().input(), &resolve).as_deref()
                == Some(&key)
            {
                return Err(SubmitError::AlreadyRunning {
                    key,
                    job: id.clone(),
                });
            }
        }
        Ok(())
    }

    /// The next job id of this path (`tag-N`); the counter is written in the batch.
    fn allocate_job_id(&mut self) -> String {
        let id = format!("{}-{}", self.tag, self.next_job);
        self.next_job += 1;
        self.batch.put(
            Table::Meta,
            records::META_NEXT_JOB.to_vec(),
            self.next_job.to_be_bytes().to_vec(),
        );
        id
    }

    fn start_job(
        &mut self,
        now: u64,
        stored: &StoredDefinition,
        input: serde_json::Value,
        parent: Option<ParentLink>,
        started_by: Option<StartedBy>,
    ) -> Result<String, SubmitError> {
        self.check_loop_key(&stored.definition, &input)?;
        let subflows = self.pin_subflows(&stored.definition);
        let program = program_for(
            &self.definitions,
            &mut self.programs,
            &stored.record.name,
            stored.record.revision,
            &subflows,
        )
        .ok_or_else(|| {
            SubmitError::Compile(CompileError::UnknownSubflow(
                stored.definition.subflow_names().join(", "),
            ))
        })?;
        let id = self.allocate_job_id();
        if let Some(link) = &parent {
            if link.wait {
                self.waiters
                    .insert(id.clone(), (link.job.clone(), link.effect.clone()));
            }
            self.spawned.insert(link.effect.clone(), id.clone());
        }
        let (job, events) = JobCore::start(
            NewJob {
                id: id.clone(),
                flow: stored.record.name.clone(),
                revision: stored.record.revision,
                subflows,
                input,
                parent,
                started_by,
            },
            program,
            now,
        );
        self.jobs.insert(id.clone(), job);
        if !stored.definition.places.is_empty() {
            self.notices.push(Notice::PlacesWanted {
                job: id.clone(),
                places: stored.definition.places.clone(),
            });
        }
        self.absorb(now, &id, events);
        Ok(id)
    }

    /// The places of every active job whose flow declares some (for a host's place book
    /// at boot).
    pub fn active_job_places(&self) -> Vec<(String, Vec<crate::place::PlaceSpec>)> {
        let mut wanted: Vec<(String, Vec<crate::place::PlaceSpec>)> = self
            .jobs
            .values()
            .filter_map(|core| {
                let stored = self.definition(core.flow(), Some(core.revision()))?;
                (!stored.definition.places.is_empty())
                    .then(|| (core.id().to_owned(), stored.definition.places.clone()))
            })
            .collect();
        wanted.sort_by(|a, b| a.0.cmp(&b.0));
        wanted
    }

    fn finished_status(&self, finished: &str) -> JobStatus {
        // Only reached for a job that finished during this call; `absorb` noted its final
        // status in the last notice for it.
        self.notices
            .iter()
            .rev()
            .find_map(|n| match n {
                Notice::JobChanged { job, status } if job == finished => Some(*status),
                _ => None,
            })
            .unwrap_or(JobStatus::Pending)
    }

    /// Continues a parked wait with `input` (validated against the wait's schema).
    pub fn continue_job(
        &mut self,
        now: u64,
        job: &str,
        key: &str,
        input: serde_json::Value,
        store: &dyn Store,
    ) -> Result<JobStatus, JobError> {
        self.apply_to(
            now,
            job,
            EventKind::Continued {
                key: key.to_owned(),
                input: Json(input),
            },
            store,
        )
    }

    /// Cancels a job (and the children it waits on). Cancelling a finished job is refused.
    pub fn cancel(
        &mut self,
        now: u64,
        job: &str,
        reason: Option<String>,
        store: &dyn Store,
    ) -> Result<JobStatus, JobError> {
        self.apply_to(now, job, EventKind::CancelRequested { reason }, store)
    }

    fn apply_to(
        &mut self,
        now: u64,
        job: &str,
        input: EventKind,
        store: &dyn Store,
    ) -> Result<JobStatus, JobError> {
        self.wake(store, job)?;
        let Some(core) = self.jobs.get_mut(job) else {
            // Not active: finished (terminal is final), or unknown.
            return match self.record(store, job)? {
                Some(record) => Err(JobError::Refused(ApplyError::Terminal {
                    job: job.to_owned(),
                    status: record.status,
                })),
                None => Err(JobError::UnknownJob(job.to_owned())),
            };
        };
        let events = core.apply(input, now)?;
        let status = core.status();
        self.absorb(now, job, events);
        self.drain(now);
        Ok(status)
    }

    /// The stored summary of a job (committed state).
    pub fn record(&self, store: &dyn Store, job: &str) -> Result<Option<JobRecord>, StoreError> {
        match store.get(Table::Jobs, job.as_bytes())? {
            Some(bytes) => Ok(Some(decode(&bytes, "job record")?)),
            None => Ok(None),
        }
    }

    /// Records the events of one job step, and everything they imply for queues, timers,
    /// children and parents.
    fn absorb(&mut self, now: u64, job_id: &str, events: Vec<Event>) {
        for event in &events {
            put_event(&mut self.batch, job_id, event);
            match &event.kind {
                EventKind::EffectRequested { key, request, .. } => {
                    let record = EffectRecord {
                        job: job_id.to_owned(),
                        request: request.clone(),
                        claim: None,
                        created_at: now,
                    };
                    self.batch
                        .put(Table::Effects, key.as_bytes().to_vec(), encode(&record));
                    match request {
                        EffectRequest::Timer { deadline } => {
                            self.timers.insert((*deadline, key.clone()));
                        }
                        EffectRequest::Spawn { flow, input, wait } => {
                            self.queue.push_back(Internal::Spawn {
                                parent: job_id.to_owned(),
                                key: key.clone(),
                                flow: flow.clone(),
                                input: input.clone(),
                                wait: *wait,
                            });
                        }
                        EffectRequest::Run { .. } | EffectRequest::Call { .. } => {
                            self.ready.push_back(key.clone());
                            self.fresh_ready += 1;
                            self.notices.push(Notice::EffectReady);
                            self.requested_in.insert(key.clone(), self.generation);
                        }
                    }
                    self.effects.insert(key.clone(), record);
                }
                EventKind::EffectCancelled { key } => self.drop_effect(key, true),
                EventKind::EffectCompleted { key, .. } | EventKind::TimerFired { key } => {
                    self.drop_effect(key, false);
                }
                EventKind::Yielded => self.resumes.push_back(job_id.to_owned()),
                _ => {}
            }
        }
        let Some(core) = self.jobs.get(job_id) else {
            return;
        };
        let record = JobRecord {
            id: job_id.to_owned(),
            flow: core.flow().to_owned(),
            revision: core.revision(),
            status: core.status(),
            created_at: core.created_at(),
            updated_at: core.updated_at(),
            parent: core.parent().cloned(),
            error: core.error().map(str::to_owned),
            waiting: core.waiting_on().iter().map(|p| p.key.clone()).collect(),
            seq: core.seq(),
        };
        self.batch
            .put(Table::Jobs, job_id.as_bytes().to_vec(), encode(&record));
        if !self.written.contains(job_id) {
            self.written.insert(job_id.to_owned());
        }
        // Parked by this step: it may leave memory once this batch is durable. (A job
        // that leaves `waiting` needs no entry: it cannot sleep.)
        if record.status == JobStatus::Waiting && !self.touched.contains(job_id) {
            self.touched.insert(job_id.to_owned());
        }
        self.notices.push(Notice::JobChanged {
            job: job_id.to_owned(),
            status: record.status,
        });
        if record.status.is_terminal() {
            let core = self.jobs.remove(job_id).expect("checked above");
            // Completers announce themselves: the job's end is an event interests may
            // match, written in this same batch (built only when some trigger listens:
            // it copies the job's state).
            if self.interests.listening() {
                let happening = Happening::JobEnded {
                    flow: core.flow().to_owned(),
                    job: job_id.to_owned(),
                    status: core.status().as_str().to_owned(),
                    state: core.engine().state().clone(),
                    error: core.error().map(str::to_owned),
                    started_by: core.started_by().cloned(),
                };
                self.interests.happened(now, &happening, &mut self.batch);
                self.take_interest_refusals();
            }
            if let Some((parent, effect)) = self.waiters.remove(job_id) {
                self.spawned.remove(&effect);
                let status = core.status();
                self.queue.push_back(Internal::Input {
                    job: parent,
                    input: EventKind::EffectCompleted {
                        key: effect,
                        outcome: Outcome::Spawn {
                            job: Some(job_id.to_owned()),
                            status: Some(status.as_str().to_owned()),
                            state: Json(core.engine().state().clone()),
                            error: core.error().map(str::to_owned),
                        },
                        node: Some(self.config.node.clone()),
                    },
                });
            }
            self.remember_finished(core);
        }
    }

    fn remember_finished(&mut self, core: JobCore) {
        if self.finished_order.len() >= FINISHED_CACHED_MAX
            && let Some(oldest) = self.finished_order.pop_front()
        {
            self.finished.remove(&oldest);
        }
        self.finished_order.push_back(core.id().to_owned());
        self.finished.insert(core.id().to_owned(), core);
    }

    fn drop_effect(&mut self, key: &str, cancelled: bool) {
        let Some(record) = self.effects.remove(key) else {
            return;
        };
        self.requested_in.remove(key);
        self.batch.delete(Table::Effects, key.as_bytes().to_vec());
        match &record.request {
            EffectRequest::Timer { deadline } => {
                self.timers.remove(&(*deadline, key.to_owned()));
            }
            EffectRequest::Spawn { .. } => {
                if let Some(child) = self.spawned.remove(key) {
                    self.waiters.remove(&child);
                    if cancelled {
                        self.queue.push_back(Internal::Cancel {
                            job: child,
                            reason: format!("its parent's spawn {key} was halted"),
                        });
                    }
                }
            }
            EffectRequest::Run { .. } | EffectRequest::Call { .. } => {
                if let Some(claim) = &record.claim {
                    self.leases.remove(&(claim.lease_until, key.to_owned()));
                    if cancelled {
                        self.notices.push(Notice::CancelEffect {
                            key: key.to_owned(),
                            token: claim.token,
                            holder: claim.holder.clone(),
                        });
                    }
                }
            }
        }
    }

    /// Runs the internal work a step caused: spawns, parent completions, cascaded cancels.
    fn drain(&mut self, now: u64) {
        while let Some(item) = self.queue.pop_front() {
            match item {
                Internal::Input { job, input } => {
                    if let Some(core) = self.jobs.get_mut(&job)
                        && let Ok(events) = core.apply(input, now)
                    {
                        self.absorb(now, &job, events);
                    }
                }
                Internal::Cancel { job, reason } => {
                    if let Some(core) = self.jobs.get_mut(&job)
                        && let Ok(events) = core.apply(
                            EventKind::CancelRequested {
                                reason: Some(reason),
                            },
                            now,
                        )
                    {
                        self.absorb(now, &job, events);
                    }
                }
                Internal::Spawn {
                    parent,
                    key,
                    flow,
                    input,
                    wait,
                } => self.spawn(now, &parent, &key, &flow, input, wait),
            }
        }
    }

    fn spawn(&mut self, now: u64, parent: &str, key: &str, flow: &str, input: Json, wait: bool) {
        let Some(parent_core) = self.jobs.get(parent) else {
            return;
        };
        if !parent_core.engine().outstanding().contains_key(key) {
            return;
        }
        let depth = parent_core.parent().map_or(1, |p| p.depth + 1);
        let failed = |error: String| Internal::Input {
            job: parent.to_owned(),
            input: EventKind::EffectCompleted {
                key: key.to_owned(),
                outcome: Outcome::Spawn {
                    job: None,
                    status: None,
                    state: Json::NULL,
                    error: Some(error),
                },
                node: None,
            },
        };
        if depth > SPAWN_DEPTH_MAX {
            self.queue.push_back(failed(format!(
                "spawn depth {depth} exceeds {SPAWN_DEPTH_MAX}"
            )));
            return;
        }
        let stored = match self.resolve_flow(flow, None) {
            Ok(stored) => stored,
            Err(err) => {
                self.queue.push_back(failed(err.to_string()));
                return;
            }
        };
        let fields = match input.0 {
            serde_json::Value::Object(fields) => fields,
            _ => serde_json::Map::new(),
        };
        let input = match stored.definition.prepare_input(fields) {
            Ok(input) => input,
            Err(problems) => {
                self.queue
                    .push_back(failed(format!("invalid input: {}", problems.join("; "))));
                return;
            }
        };
        let link = ParentLink {
            job: parent.to_owned(),
            effect: key.to_owned(),
            wait,
            depth,
        };
        match self.start_job(now, &stored, input, Some(link), None) {
            Ok(child) => {
                if !wait {
                    self.spawned.remove(key);
                    self.queue.push_back(Internal::Input {
                        job: parent.to_owned(),
                        input: EventKind::EffectCompleted {
                            key: key.to_owned(),
                            outcome: Outcome::Spawn {
                                job: Some(child),
                                status: None,
                                state: Json::NULL,
                                error: None,
                            },
                            node: Some(self.config.node.clone()),
                        },
                    });
                }
            }
            Err(err) => self.queue.push_back(failed(err.to_string())),
        }
    }

    // ----- effects: claims, leases, completions -----

    /// Claims the oldest ready effect that `accept(job, request)` takes, for `holder`
    /// (`node/seat`). The host decides what it can run (readiness gates: `needs`).
    pub fn claim(
        &mut self,
        now: u64,
        holder: &str,
        accept: &dyn Fn(&str, &EffectRequest) -> bool,
    ) -> Option<ClaimedEffect> {
        for _ in 0..self.ready.len() {
            let key = self.ready.pop_front()?;
            let Some(record) = self.effects.get_mut(&key) else {
                continue;
            };
            if record.claim.is_some() {
                continue;
            }
            if !accept(&record.job, &record.request) {
                self.ready.push_back(key);
                continue;
            }
            return self.claim_key(now, holder, key);
        }
        None
    }

    /// Like [`JobPath::claim`], among the effects made ready since the last
    /// [`JobPath::take_batch`] that no call before looked at (the back of the queue, as
    /// far as it still holds them): for a host that runs some kinds of effect itself as
    /// they appear, after every message, without walking a long queue of others each
    /// time. `accept` must say the same of an effect every time it is asked: one it turns
    /// down is not offered again and stays ready for seats.
    pub fn claim_fresh(
        &mut self,
        now: u64,
        holder: &str,
        accept: &dyn Fn(&str, &EffectRequest) -> bool,
    ) -> Option<ClaimedEffect> {
        let fresh = self.fresh_ready.min(self.ready.len());
        let found = (self.ready.len() - fresh..self.ready.len()).find(|&at| {
            self.effects
                .get(&self.ready[at])
                .is_some_and(|r| r.claim.is_none() && accept(&r.job, &r.request))
        });
        let Some(at) = found else {
            self.fresh_ready = 0;
            return None;
        };
        let key = self.ready.remove(at)?;
        // Those before it were turned down; those after it are still to be looked at.
        self.fresh_ready = self.ready.len() - at;
        self.claim_key(now, holder, key)
    }

    /// Claims ready effect `key` (taken off the queue by the caller) for `holder`.
    fn claim_key(&mut self, now: u64, holder: &str, key: String) -> Option<ClaimedEffect> {
        let record = self.effects.get_mut(&key)?;
        let token = self.next_token;
        self.next_token += 1;
        let lease_until = now.saturating_add(self.config.lease_ms);
        record.claim = Some(Claim {
            token,
            holder: holder.to_owned(),
            lease_until,
        });
        let claimed = ClaimedEffect {
            key: key.clone(),
            job: record.job.clone(),
            token,
            lease_until,
            request: record.request.clone(),
        };
        self.batch
            .put(Table::Effects, key.as_bytes().to_vec(), encode(&*record));
        self.batch.put(
            Table::Meta,
            records::META_NEXT_TOKEN.to_vec(),
            self.next_token.to_be_bytes().to_vec(),
        );
        self.leases.insert((lease_until, key));
        Some(claimed)
    }

    /// Number of claimable effects waiting for a seat.
    pub fn ready_len(&self) -> usize {
        self.ready
            .iter()
            .filter(|k| self.effects.get(*k).is_some_and(|r| r.claim.is_none()))
            .count()
    }

    /// Effects in flight (all kinds), with their claims.
    pub fn effects(&self) -> &HashMap<String, EffectRecord> {
        &self.effects
    }

    /// Gives a claim back (the holder will not run it: a child refused a placement): the
    /// effect is ready again at once. Refused for a stale token.
    pub fn release(&mut self, key: &str, token: u64) -> Result<(), CompleteError> {
        let Some(record) = self.effects.get_mut(key) else {
            return Err(CompleteError::NotInFlight(key.to_owned()));
        };
        match &record.claim {
            Some(claim) if claim.token == token => {}
            other => {
                return Err(CompleteError::StaleToken {
                    key: key.to_owned(),
                    token,
                    current: other.as_ref().map(|c| c.token),
                });
            }
        }
        record.claim = None;
        self.batch
            .put(Table::Effects, key.as_bytes().to_vec(), encode(&*record));
        self.ready.push_back(key.to_owned());
        self.notices.push(Notice::EffectReady);
        Ok(())
    }

    /// Records the process group about to run `key`'s command under claim `token` (the
    /// command waits at its gate until its host has recorded it too). Refused when this path is the
    /// effect's home and `token` is no longer its current claim: the command must not
    /// start. An effect placed here by another home is not in this path; its group is
    /// recorded all the same, so this node's next life can stop it.
    pub fn record_group(&mut self, key: &str, group: RunningGroup) -> Result<(), CompleteError> {
        if let Some(record) = self.effects.get(key) {
            let current = record.claim.as_ref().map(|c| c.token);
            if current != Some(group.token) {
                return Err(CompleteError::StaleToken {
                    key: key.to_owned(),
                    token: group.token,
                    current,
                });
            }
        }
        self.batch
            .put(Table::Groups, key.as_bytes().to_vec(), encode(&group));
        self.groups.insert(key.to_owned(), group);
        Ok(())
    }

    /// Forgets the group of `key` (its command exited, or a restarted node stopped it).
    /// A group recorded later under another token is kept.
    pub fn forget_group(&mut self, key: &str, token: u64) {
        if self.groups.get(key).is_some_and(|g| g.token == token) {
            self.groups.remove(key);
            self.batch.delete(Table::Groups, key.as_bytes().to_vec());
        }
    }

    /// Process groups recorded as running effects' commands, by effect key. Right after
    /// [`JobPath::open`], all of them are the previous life's.
    pub fn groups(&self) -> &BTreeMap<String, RunningGroup> {
        &self.groups
    }

    /// Whether a report about the claim of `key` under `token` may come from `holder`:
    /// refused only when that claim is current and someone else's. A stale or unknown
    /// token passes here and is refused by the fence in `renew` / `complete` (the one
    /// place tokens are checked).
    pub fn check_holder(&self, key: &str, token: u64, holder: &str) -> Result<(), CompleteError> {
        match self
            .effects
            .get(key)
            .and_then(|record| record.claim.as_ref())
        {
            Some(claim) if claim.token == token && claim.holder != holder => {
                Err(CompleteError::NotTheHolder {
                    key: key.to_owned(),
                    holder: holder.to_owned(),
                    claimed_by: claim.holder.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Extends the lease of a claimed effect. Refused for a stale token.
    pub fn renew(&mut self, now: u64, key: &str, token: u64) -> Result<u64, CompleteError> {
        let Some(record) = self.effects.get_mut(key) else {
            return Err(CompleteError::NotInFlight(key.to_owned()));
        };
        match &mut record.claim {
            Some(claim) if claim.token == token => {
                self.leases.remove(&(claim.lease_until, key.to_owned()));
                claim.lease_until = now.saturating_add(self.config.lease_ms);
                let until = claim.lease_until;
                self.leases.insert((until, key.to_owned()));
                self.batch
                    .put(Table::Effects, key.as_bytes().to_vec(), encode(&*record));
                Ok(until)
            }
            other => Err(CompleteError::StaleToken {
                key: key.to_owned(),
                token,
                current: other.as_ref().map(|c| c.token),
            }),
        }
    }

    /// Records an effect's completion, under the claim's fencing token. A second delivery,
    /// or one with a stale token, is refused and changes nothing.
    pub fn complete(
        &mut self,
        now: u64,
        key: &str,
        token: u64,
        outcome: Outcome,
        node: Option<String>,
    ) -> Result<Completed, CompleteError> {
        let Some(record) = self.effects.get(key) else {
            return Err(CompleteError::NotInFlight(key.to_owned()));
        };
        match &record.claim {
            Some(claim) if claim.token == token => {}
            #[cfg(feature = "mutations")]
            _ if self.mutation == Some(Mutation::SkipFencing) => {}
            other => {
                return Err(CompleteError::StaleToken {
                    key: key.to_owned(),
                    token,
                    current: other.as_ref().map(|c| c.token),
                });
            }
        }
        let job_id = record.job.clone();
        let Some(core) = self.jobs.get_mut(&job_id) else {
            return Err(CompleteError::NotInFlight(key.to_owned()));
        };
        let events = core
            .apply(
                EventKind::EffectCompleted {
                    key: key.to_owned(),
                    outcome,
                    node,
                },
                now,
            )
            .map_err(|_| CompleteError::NotInFlight(key.to_owned()))?;
        let status = core.status();
        self.absorb(now, &job_id, events);
        self.drain(now);
        Ok(Completed { status })
    }

    /// Fires every timer due at `now`. Returns how many fired.
    pub fn fire_timers(&mut self, now: u64) -> usize {
        let mut fired = 0;
        while let Some((deadline, key)) = self.timers.first().cloned() {
            if deadline > now {
                break;
            }
            self.timers.pop_first();
            let Some(record) = self.effects.get(&key) else {
                continue;
            };
            let job_id = record.job.clone();
            if let Some(core) = self.jobs.get_mut(&job_id)
                && let Ok(events) = core.apply(EventKind::TimerFired { key: key.clone() }, now)
            {
                self.absorb(now, &job_id, events);
                fired += 1;
            }
            self.drain(now);
        }
        fired
    }

    /// Returns expired leases to the ready queue (their holders are told to stop).
    /// Returns how many expired.
    pub fn reap_leases(&mut self, now: u64) -> usize {
        let mut reaped = 0;
        while let Some((until, key)) = self.leases.first().cloned() {
            if until > now {
                break;
            }
            self.leases.pop_first();
            let Some(record) = self.effects.get_mut(&key) else {
                continue;
            };
            match record.claim.take() {
                Some(claim) if claim.lease_until == until => {
                    self.notices.push(Notice::CancelEffect {
                        key: key.clone(),
                        token: claim.token,
                        holder: claim.holder,
                    });
                    self.batch
                        .put(Table::Effects, key.as_bytes().to_vec(), encode(&*record));
                    self.ready.push_back(key);
                    self.notices.push(Notice::EffectReady);
                    reaped += 1;
                }
                other => record.claim = other,
            }
        }
        reaped
    }

    /// Resumes jobs that yielded their tick budget (one round). Returns how many.
    pub fn resume_yielded(&mut self, now: u64) -> usize {
        let round: Vec<String> = self.resumes.drain(..).collect();
        let mut resumed = 0;
        for job in round {
            if let Some(core) = self.jobs.get_mut(&job)
                && let Ok(events) = core.apply(EventKind::Resumed, now)
            {
                self.absorb(now, &job, events);
                resumed += 1;
            }
        }
        self.drain(now);
        resumed
    }

    /// True when yielded jobs wait to be resumed.
    pub fn has_resumes(&self) -> bool {
        !self.resumes.is_empty()
    }

    /// The next moment something is due (a timer or a lease expiry).
    pub fn next_deadline(&self) -> Option<u64> {
        let timer = self.timers.first().map(|(t, _)| *t);
        let lease = self.leases.first().map(|(t, _)| *t);
        [timer, lease, self.interests.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    // ----- queries -----

    /// Unfinished jobs held in memory (the dormant ones are not: see
    /// [`JobPath::dormant_jobs`]).
    pub fn active_jobs(&self) -> impl Iterator<Item = &JobCore> {
        self.jobs.values()
    }

    /// Parked jobs left on disk, by id. A store opened with many jobs parked on waits
    /// does not replay them: each costs its id in memory until a continue, a cancel or a
    /// migration loads it ([`JobPath::job_view`] reads one from the store meanwhile).
    /// All are `waiting`.
    pub fn dormant_jobs(&self) -> impl Iterator<Item = &str> {
        self.dormant.iter().map(String::as_str)
    }

    /// True when `id` is a dormant job.
    pub fn is_dormant(&self, id: &str) -> bool {
        self.dormant.contains(id)
    }

    /// One unfinished job.
    pub fn active_job(&self, id: &str) -> Option<&JobCore> {
        self.jobs.get(id)
    }

    /// A job's core: active, or finished recently (still cached).
    pub fn job_core(&self, id: &str) -> Option<&JobCore> {
        self.jobs.get(id).or_else(|| self.finished.get(id))
    }

    /// Rebuilds a job from its stored journal alone (the fold of what is durable), for
    /// checkers that compare it with the live core.
    pub fn rebuild(&mut self, store: &dyn Store, id: &str) -> Result<Option<JobCore>, String> {
        let events = read_journal(store, id).map_err(|e| e.to_string())?;
        if events.is_empty() {
            return Ok(None);
        }
        self.replay(id, &events)
            .map(Some)
            .map_err(|e| e.to_string())
    }

    /// Everything about a job: from memory when unfinished, else replayed from its journal.
    pub fn job_view(&mut self, store: &dyn Store, id: &str) -> Result<Option<JobView>, StoreError> {
        if let Some(core) = self.jobs.get(id).or_else(|| self.finished.get(id)) {
            return Ok(Some(self.view_of(core)));
        }
        let Some(record) = self.record(store, id)? else {
            return Ok(None);
        };
        let events = read_journal(store, id)?;
        let compacted = events.is_empty() && record.status.is_terminal();
        let replayed = if compacted {
            Err(None)
        } else {
            self.replay(id, &events).map_err(Some)
        };
        match replayed {
            Ok(core) => Ok(Some(self.view_of(&core))),
            Err(err) => Ok(Some(JobView {
                job: record.id,
                flow: record.flow,
                revision: record.revision,
                status: record.status,
                home: self.config.node.clone(),
                waiting_on: Vec::new(),
                input: serde_json::Value::Null,
                state: serde_json::Value::Null,
                error: match (record.error, err) {
                    (Some(error), _) => Some(error),
                    (None, Some(err)) => Some(format!("cannot replay: {err}")),
                    (None, None) => None,
                },
                effects: Vec::new(),
                parent: record.parent,
                started_by: None,
                created_at: record.created_at,
                updated_at: record.updated_at,
                seq: record.seq,
                outcome: None,
                tree: None,
                compacted,
            })),
        }
    }

    fn view_of(&self, core: &JobCore) -> JobView {
        JobView {
            job: core.id().to_owned(),
            flow: core.flow().to_owned(),
            revision: core.revision(),
            status: core.status(),
            home: self.config.node.clone(),
            waiting_on: core.waiting_on().to_vec(),
            input: core.engine().input().clone(),
            state: core.engine().state().clone(),
            error: core.error().map(str::to_owned),
            effects: core.effects().values().cloned().collect(),
            parent: core.parent().cloned(),
            started_by: core.started_by().cloned(),
            created_at: core.created_at(),
            updated_at: core.updated_at(),
            seq: core.seq(),
            outcome: core.engine().outcome().map(str::to_owned),
            tree: Some(core.tree()),
            compacted: false,
        }
    }

    /// A job's journal (committed events).
    pub fn journal(&self, store: &dyn Store, id: &str) -> Result<Vec<Event>, StoreError> {
        read_journal(store, id)
    }

    /// Stored job summaries, optionally only those with `status`, in id order.
    pub fn list_jobs(
        &self,
        store: &dyn Store,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let mut out = Vec::new();
        let mut failure = None;
        store.scan(Table::Jobs, b"", None, &mut |_, value| {
            match decode::<JobRecord>(value, "job record") {
                Ok(record) => {
                    if status.is_none_or(|s| s == record.status) {
                        out.push(record);
                    }
                }
                Err(err) => failure = Some(err),
            }
            failure.is_none() && out.len() < limit
        })?;
        if let Some(err) = failure {
            return Err(err);
        }
        // Ids are `tag-N`: order by N, the order of submission.
        out.sort_by_key(|r| {
            r.id.rsplit_once('-')
                .and_then(|(_, n)| n.parse::<u64>().ok())
                .unwrap_or(u64::MAX)
        });
        Ok(out)
    }

    /// Counts of stored jobs per status.
    pub fn count_jobs(&self, store: &dyn Store) -> Result<BTreeMap<JobStatus, usize>, StoreError> {
        let mut counts = BTreeMap::new();
        let mut failure = None;
        scan_prefix(store, Table::Jobs, b"", &mut |_, value| {
            match decode::<JobRecord>(value, "job record") {
                Ok(record) => *counts.entry(record.status).or_insert(0) += 1,
                Err(err) => failure = Some(err),
            }
            failure.is_none()
        })?;
        match failure {
            Some(err) => Err(err),
            None => Ok(counts),
        }
    }
}

fn source_digest(source: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: deterministic across runs; collisions only cost a parse.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    source.hash(&mut hasher);
    hasher.finish()
}

fn program_for(
    definitions: &BTreeMap<String, BTreeMap<u32, Arc<StoredDefinition>>>,
    programs: &mut HashMap<ProgramKey, Arc<Program>>,
    flow: &str,
    revision: u32,
    subflows: &[(String, u32)],
) -> Option<Arc<Program>> {
    let key = (flow.to_owned(), revision, subflows.to_vec());
    if let Some(program) = programs.get(&key) {
        return Some(Arc::clone(program));
    }
    let stored = definitions.get(flow)?.get(&revision)?;
    let resolve = |name: &str| {
        let (_, pinned) = subflows.iter().find(|(n, _)| n == name)?;
        definitions
            .get(name)?
            .get(pinned)
            .map(|d| Arc::clone(&d.definition))
    };
    let program = Arc::new(Program::compile(&stored.definition, &resolve).ok()?);
    programs.insert(key, Arc::clone(&program));
    Some(program)
}
