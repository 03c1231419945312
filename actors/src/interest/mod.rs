//! Interests: work that starts itself. A definition's `on:` triggers — another flow's job
//! ending, a place changing, a schedule, an emitted event — turn matching events into
//! durable *start intents*, which the job path starts when they are due.
//!
//! ```yaml
//! on:
//!   job: { flow: build, status: succeeded, where: "event.state.tests_passed" }
//!   coalesce_key: "{{ event.state.branch }}"   # latest payload wins while pending
//!   debounce: 2s                               # start once things are quiet this long
//! ```
//!
//! The core is sans-IO and lives inside the job path's step: an intent is written in the
//! same batch as the event that matched it, and starting it deletes it in the same batch
//! as the new job's submit. A crash therefore either keeps the intent (it starts after
//! the restart) or keeps the job (and the intent is gone): no start is lost, none is
//! doubled. Each started job records its intent's key (`started_by`).
//!
//! Completers announce themselves: interests see only events (a job's terminal status,
//! a place transition, an emit, the clock), never private callbacks; a continue of a
//! parked job is never a start. A started job's depth is one more than the job that
//! caused it; past [`DEPTH_MAX`] the start is refused and the refusal reported, so a
//! flow that triggers itself stops.

pub mod cron;

use crate::definition::Span;
use crate::store::{Store, StoreError, Table, WriteBatch};
use crate::template::{Expr, Scope, Template};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

pub use cron::{Cron, Zone, parse_offset};

/// Bound on a trigger chain: a job started by an interest at this depth may still run;
/// one more and the start is refused.
pub const DEPTH_MAX: u32 = 8;

/// Pending intents per flow; past it the oldest coalescing key keeps its payload and new
/// keys are refused (a storm must not fill the disk).
pub const PENDING_PER_FLOW_MAX: usize = 10_000;

/// Missed schedule runs `catch_up: all` starts at most, after a long outage.
pub const CATCH_UP_ALL_MAX: u64 = 100;

/// Which job endings a `job` trigger matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndFilter {
    /// Succeeded only.
    Succeeded,
    /// Failed only.
    Failed,
    /// Cancelled only.
    Cancelled,
    /// Any terminal status.
    Any,
}

/// Which place transitions a `place` trigger matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceFilter {
    /// Became ready.
    Ready,
    /// Became unready (or failed).
    Unready,
    /// Any change.
    Any,
}

/// What a schedule does about runs missed while the node was down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Nothing: wait for the next scheduled time.
    Skip,
    /// One start for all the missed runs (the default).
    #[default]
    Once,
    /// One start per missed run (at most [`CATCH_UP_ALL_MAX`]).
    All,
}

/// When a schedule fires.
#[derive(Clone, Debug)]
pub enum When {
    /// Every so many milliseconds.
    Every(u64),
    /// At a cron expression's times, in a zone.
    Cron(Cron, Zone),
}

/// What an interest listens to.
#[derive(Clone, Debug)]
pub enum Trigger {
    /// A job of `flow` reached a terminal status.
    Job {
        /// The flow.
        flow: String,
        /// Which ends.
        status: EndFilter,
        /// An expression over `event` that must hold.
        filter: Option<Expr>,
    },
    /// A place changed state.
    Place {
        /// The place.
        place: String,
        /// Which transitions.
        state: PlaceFilter,
    },
    /// The clock.
    Schedule {
        /// When.
        when: When,
        /// Missed runs.
        catch_up: CatchUp,
    },
    /// `palm emit NAME` (and, once the REST surface exists, a webhook).
    Event {
        /// The event's name.
        name: String,
    },
}

/// One `on:` entry of a definition.
#[derive(Clone, Debug)]
pub struct InterestSpec {
    /// What it listens to.
    pub trigger: Trigger,
    /// A template over `event`: matches with the same key coalesce while pending.
    pub coalesce_key: Option<Template>,
    /// Start only after no new match for this long (resets on each coalesced match).
    pub debounce_ms: u64,
    /// Start no sooner than this long after the first match.
    pub not_before_ms: u64,
    /// Where it is written.
    pub span: Span,
}

impl InterestSpec {
    /// One line for people: what starts this flow.
    pub fn describe(&self) -> String {
        let mut text = match &self.trigger {
            Trigger::Job {
                flow,
                status,
                filter,
            } => {
                let status = match status {
                    EndFilter::Succeeded => "succeeded",
                    EndFilter::Failed => "failed",
                    EndFilter::Cancelled => "cancelled",
                    EndFilter::Any => "ended",
                };
                match filter {
                    Some(f) => format!("a `{flow}` job {status} where {}", f.source()),
                    None => format!("a `{flow}` job {status}"),
                }
            }
            Trigger::Place { place, state } => {
                let state = match state {
                    PlaceFilter::Ready => "became ready",
                    PlaceFilter::Unready => "became unready",
                    PlaceFilter::Any => "changed",
                };
                format!("place `{place}` {state}")
            }
            Trigger::Schedule { when, .. } => match when {
                When::Every(ms) => format!("every {}", crate::place::human_ms(*ms)),
                When::Cron(cron, zone) => {
                    format!("cron `{}` at {}", cron.source(), zone_text(zone))
                }
            },
            Trigger::Event { name } => format!("event `{name}`"),
        };
        if let Some(key) = &self.coalesce_key {
            text.push_str(&format!(", coalesced by `{}`", key.source()));
        }
        if self.debounce_ms > 0 {
            text.push_str(&format!(
                ", debounce {}",
                crate::place::human_ms(self.debounce_ms)
            ));
        }
        if self.not_before_ms > 0 {
            text.push_str(&format!(
                ", not before {}",
                crate::place::human_ms(self.not_before_ms)
            ));
        }
        text
    }
}

/// Who started a job, when it was not a person: recorded in its `submitted` event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedBy {
    /// The start's idempotency key: an intent id, or the effect key of a `palm` call.
    /// A second start with the same key returns the first job.
    pub key: String,
    /// What caused it, for people (`job ab12-7 succeeded`, `every 2s`, `call ...`).
    pub cause: String,
    /// Trigger depth: 0 for a person's submit, one more per automatic start.
    pub depth: u32,
    /// The flows that led here, oldest first.
    pub chain: Vec<String>,
}

/// A durable start intent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    /// Its id (the started job's start key).
    pub id: String,
    /// The flow to start.
    pub flow: String,
    /// Which `on:` entry matched (its index in the flow's list).
    pub interest: u32,
    /// The event that matched last (the latest payload wins when coalescing).
    pub payload: crate::json::Json,
    /// Why.
    pub cause: String,
    /// The coalescing key, if any.
    pub coalesce: Option<String>,
    /// The new job's depth and chain.
    pub depth: u32,
    /// Flows that led here.
    pub chain: Vec<String>,
    /// First match.
    pub first_at: u64,
    /// Due time.
    pub due_at: u64,
    /// Matches coalesced into it.
    pub matches: u64,
}

/// Per-interest bookkeeping: when it last started something, and a schedule's next time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterestState {
    /// Fingerprint of the trigger it was computed for (a new revision resets it).
    pub fingerprint: String,
    /// A schedule's next scheduled time.
    pub next_at: Option<u64>,
    /// Last time it enqueued a start.
    pub last_fired: Option<u64>,
    /// Starts enqueued so far.
    pub fired: u64,
}

/// Something the host should log (interests never fail a job; they refuse a start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The flow that was not started.
    pub flow: String,
    /// Why.
    pub reason: String,
}

/// What `palm interests` shows for one `on:` entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InterestView {
    /// The flow it starts.
    pub flow: String,
    /// Its revision.
    pub revision: u32,
    /// Index of the entry in the flow's `on:`.
    pub index: u32,
    /// What starts it.
    pub trigger: String,
    /// Last time it enqueued a start.
    pub last_fired: Option<u64>,
    /// Starts so far.
    pub fired: u64,
    /// A schedule's next time.
    pub next_at: Option<u64>,
    /// Intents waiting to start.
    pub pending: usize,
}

/// An event interests may match.
#[derive(Clone, Debug)]
pub enum Happening {
    /// A job ended.
    JobEnded {
        /// Its flow.
        flow: String,
        /// Its id.
        job: String,
        /// `succeeded`, `failed` or `cancelled`.
        status: String,
        /// Its final state (the blackboard).
        state: Value,
        /// Its error.
        error: Option<String>,
        /// Its own depth and chain.
        started_by: Option<StartedBy>,
    },
    /// A place changed state.
    PlaceChanged {
        /// The place.
        place: String,
        /// New state (`ready`, `unready`, ...).
        state: String,
        /// Why.
        reason: String,
    },
    /// `palm emit`.
    Emitted {
        /// Event name.
        name: String,
        /// Its data.
        data: Value,
    },
}

const META_NEXT_INTENT: &[u8] = b"next_intent";
const PREFIX_INTENT: &[u8] = b"intent\0";
const PREFIX_STATE: &[u8] = b"state\0";

fn state_key(flow: &str, index: u32) -> Vec<u8> {
    let mut key = PREFIX_STATE.to_vec();
    key.extend_from_slice(flow.as_bytes());
    key.push(0);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

fn intent_key(id: &str) -> Vec<u8> {
    let mut key = PREFIX_INTENT.to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

fn fingerprint(spec: &InterestSpec) -> String {
    match &spec.trigger {
        Trigger::Schedule { when, catch_up } => match when {
            When::Every(ms) => format!("every {ms} {catch_up:?}"),
            // A fixed offset keeps the fingerprint it had before named zones existed, so
            // an upgrade does not reset a schedule's state.
            When::Cron(cron, Zone::Fixed(offset)) => {
                format!("cron {} {offset} {catch_up:?}", cron.source())
            }
            When::Cron(cron, Zone::Named { name, .. }) => {
                format!("cron {} {name} {catch_up:?}", cron.source())
            }
        },
        _ => spec.describe(),
    }
}

/// An active interest: a flow's latest revision's `on:` entry.
#[derive(Clone, Debug)]
struct Active {
    flow: String,
    revision: u32,
    index: u32,
    spec: InterestSpec,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Interests {
    active: Vec<Active>,
    intents: BTreeMap<String, Intent>,
    /// `(flow, coalesce key)` → pending intent id.
    coalescing: HashMap<(String, String), String>,
    states: BTreeMap<(String, u32), InterestState>,
    next_intent: u64,
    refusals: Vec<Refusal>,
}

fn decode<T: for<'a> Deserialize<'a>>(bytes: &[u8], what: &str) -> Result<T, StoreError> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

impl Interests {
    /// Loads pending intents and interest states.
    pub fn open(store: &dyn Store) -> Result<Interests, StoreError> {
        let mut interests = Interests {
            next_intent: match store.get(Table::Meta, META_NEXT_INTENT)? {
                Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
                    .map(u64::from_be_bytes)
                    .unwrap_or(1),
                None => 1,
            },
            ..Interests::default()
        };
        let mut failure = None;
        store.scan(Table::Intents, b"", None, &mut |key, value| {
            if let Some(id) = key.strip_prefix(PREFIX_INTENT) {
                match decode::<Intent>(value, "start intent") {
                    Ok(intent) => {
                        if let Some(coalesce) = &intent.coalesce {
                            interests
                                .coalescing
                                .insert((intent.flow.clone(), coalesce.clone()), intent.id.clone());
                        }
                        interests
                            .intents
                            .insert(String::from_utf8_lossy(id).into_owned(), intent);
                    }
                    Err(err) => failure = Some(err),
                }
            } else if let Some(rest) = key.strip_prefix(PREFIX_STATE)
                && let Some(zero) = rest.iter().position(|b| *b == 0)
                && let Ok(index) = <[u8; 4]>::try_from(&rest[zero + 1..])
            {
                match decode::<InterestState>(value, "interest state") {
                    Ok(state) => {
                        let flow = String::from_utf8_lossy(&rest[..zero]).into_owned();
                        interests
                            .states
                            .insert((flow, u32::from_be_bytes(index)), state);
                    }
                    Err(err) => failure = Some(err),
                }
            }
            failure.is_none()
        })?;
        match failure {
            Some(err) => Err(err),
            None => Ok(interests),
        }
    }

    /// Sets the active interests: every flow's latest revision's `on:` entries. New
    /// schedules start counting from `now`; a schedule whose trigger did not change keeps
    /// its next time (so runs missed while the node was down are caught up).
    pub fn activate(
        &mut self,
        now: u64,
        flows: &[(String, u32, Vec<InterestSpec>)],
        batch: &mut WriteBatch,
    ) {
        self.active.clear();
        for (flow, revision, specs) in flows {
            for (index, spec) in specs.iter().enumerate() {
                let index = index as u32;
                let print = fingerprint(spec);
                let state = self.states.entry((flow.clone(), index)).or_default();
                if state.fingerprint != print {
                    state.fingerprint = print;
                    state.next_at = match &spec.trigger {
                        Trigger::Schedule { when, .. } => next_time(when, now),
                        _ => None,
                    };
                    batch.put(
                        Table::Intents,
                        state_key(flow, index),
                        postcard::to_allocvec(&*state).expect("states encode"),
                    );
                }
                self.active.push(Active {
                    flow: flow.clone(),
                    revision: *revision,
                    index,
                    spec: spec.clone(),
                });
            }
        }
    }

    /// Matches an event against every active interest, writing intents. Returns how many
    /// interests matched (a refused start counts: it matched).
    pub fn happened(&mut self, now: u64, happening: &Happening, batch: &mut WriteBatch) -> usize {
        if !self.listening() {
            return 0;
        }
        let (payload, depth, chain, cause) = match happening {
            Happening::JobEnded {
                flow,
                job,
                status,
                state,
                error,
                started_by,
            } => {
                let (depth, mut chain) = started_by
                    .as_ref()
                    .map_or((0, Vec::new()), |s| (s.depth, s.chain.clone()));
                chain.push(flow.clone());
                (
                    json!({"kind": "job", "flow": flow, "job": job, "status": status,
                           "state": state, "error": error}),
                    depth + 1,
                    chain,
                    format!("job {job} {status}"),
                )
            }
            Happening::PlaceChanged {
                place,
                state,
                reason,
            } => (
                json!({"kind": "place", "place": place, "state": state, "reason": reason}),
                1,
                Vec::new(),
                format!("place {place} {state}"),
            ),
            Happening::Emitted { name, data } => (
                json!({"kind": "event", "event": name, "data": data}),
                1,
                Vec::new(),
                format!("event {name}"),
            ),
        };
        let matching: Vec<Active> = self
            .active
            .iter()
            .filter(|a| matches(&a.spec.trigger, happening))
            .cloned()
            .collect();
        let mut matched = 0;
        for active in matching {
            if let Trigger::Job {
                filter: Some(filter),
                ..
            } = &active.spec.trigger
            {
                match filter.eval_bool(&event_scope(&payload)) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(err) => {
                        self.refuse(
                            &active.flow,
                            format!("its `where` failed on {cause}: {err}"),
                        );
                        continue;
                    }
                }
            }
            matched += 1;
            self.enqueue(
                now,
                &active,
                payload.clone(),
                cause.clone(),
                depth,
                chain.clone(),
                batch,
            );
        }
        matched
    }

    /// True when some `on:` trigger is active: without one, nothing that happens needs
    /// building into an event.
    pub fn listening(&self) -> bool {
        !self.active.is_empty()
    }

    /// Turns due schedules into intents.
    pub fn tick(&mut self, now: u64, batch: &mut WriteBatch) {
        let schedules: Vec<Active> = self
            .active
            .iter()
            .filter(|a| matches!(a.spec.trigger, Trigger::Schedule { .. }))
            .cloned()
            .collect();
        for active in schedules {
            let Trigger::Schedule { when, catch_up } = &active.spec.trigger else {
                continue;
            };
            let key = (active.flow.clone(), active.index);
            let Some(next) = self.states.get(&key).and_then(|s| s.next_at) else {
                continue;
            };
            if next > now {
                continue;
            }
            // Scheduled times up to now; the first is on time, the rest were missed.
            let mut due = vec![next];
            let mut cursor = next;
            while let Some(t) = next_time(when, cursor).filter(|t| *t <= now) {
                if due.len() as u64 > CATCH_UP_ALL_MAX + 1 {
                    break;
                }
                due.push(t);
                cursor = t;
            }
            let period = next_time(when, next).map(|t| t - next);
            let late = period.is_some_and(|p| now - next >= p);
            let fire: Vec<u64> = match (catch_up, late) {
                (_, false) => vec![next],
                (CatchUp::Skip, true) => Vec::new(),
                (CatchUp::Once, true) => vec![*due.last().expect("non-empty")],
                (CatchUp::All, true) => due
                    .iter()
                    .copied()
                    .take(CATCH_UP_ALL_MAX as usize)
                    .collect(),
            };
            let missed = due.len() as u64 - u64::from(!late);
            for scheduled in &fire {
                let payload = json!({"kind": "schedule", "scheduled_for": scheduled,
                                     "at": now, "missed": missed});
                let cause = if late {
                    format!("{} (catching up {missed} missed)", active.spec.describe())
                } else {
                    active.spec.describe()
                };
                self.enqueue(now, &active, payload, cause, 1, Vec::new(), batch);
            }
            let state = self.states.entry(key).or_default();
            state.next_at = next_time(when, now);
            batch.put(
                Table::Intents,
                state_key(&active.flow, active.index),
                postcard::to_allocvec(&*state).expect("states encode"),
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &mut self,
        now: u64,
        active: &Active,
        payload: Value,
        cause: String,
        depth: u32,
        chain: Vec<String>,
        batch: &mut WriteBatch,
    ) {
        if depth > DEPTH_MAX {
            self.refuse(
                &active.flow,
                format!(
                    "trigger chain too deep: {cause} would start it at depth {depth} (bound {DEPTH_MAX}) after {}",
                    chain.join(" → ")
                ),
            );
            return;
        }
        let coalesce = match &active.spec.coalesce_key {
            None => None,
            Some(template) => match template.render_string(&event_scope(&payload)) {
                Ok(key) => Some(key),
                Err(err) => {
                    self.refuse(
                        &active.flow,
                        format!("its `coalesce_key` failed on {cause}: {err}"),
                    );
                    return;
                }
            },
        };
        let existing = coalesce
            .as_ref()
            .and_then(|k| self.coalescing.get(&(active.flow.clone(), k.clone())))
            .cloned();
        let intent = match existing.and_then(|id| self.intents.get_mut(&id)) {
            Some(intent) => {
                intent.payload = crate::json::Json(payload);
                intent.cause = cause;
                intent.depth = intent.depth.max(depth);
                intent.chain = chain;
                intent.matches += 1;
                intent.due_at = (intent.first_at + active.spec.not_before_ms)
                    .max(now + active.spec.debounce_ms);
                intent.clone()
            }
            None => {
                let pending = self
                    .intents
                    .values()
                    .filter(|i| i.flow == active.flow)
                    .count();
                if pending >= PENDING_PER_FLOW_MAX {
                    self.refuse(
                        &active.flow,
                        format!("{pending} starts already pending (bound {PENDING_PER_FLOW_MAX}); {cause} dropped"),
                    );
                    return;
                }
                let id = format!("{}@{}", active.flow, self.next_intent);
                self.next_intent += 1;
                batch.put(
                    Table::Meta,
                    META_NEXT_INTENT.to_vec(),
                    self.next_intent.to_be_bytes().to_vec(),
                );
                let intent = Intent {
                    id: id.clone(),
                    flow: active.flow.clone(),
                    interest: active.index,
                    payload: crate::json::Json(payload),
                    cause,
                    coalesce: coalesce.clone(),
                    depth,
                    chain,
                    first_at: now,
                    due_at: now + active.spec.not_before_ms.max(active.spec.debounce_ms),
                    matches: 1,
                };
                if let Some(key) = coalesce {
                    self.coalescing
                        .insert((active.flow.clone(), key), id.clone());
                }
                self.intents.insert(id, intent.clone());
                intent
            }
        };
        batch.put(
            Table::Intents,
            intent_key(&intent.id),
            postcard::to_allocvec(&intent).expect("intents encode"),
        );
        let state = self
            .states
            .entry((active.flow.clone(), active.index))
            .or_default();
        state.last_fired = Some(now);
        state.fired += 1;
        batch.put(
            Table::Intents,
            state_key(&active.flow, active.index),
            postcard::to_allocvec(&*state).expect("states encode"),
        );
    }

    fn refuse(&mut self, flow: &str, reason: String) {
        self.refusals.push(Refusal {
            flow: flow.to_owned(),
            reason,
        });
    }

    /// Intents due at `now`, oldest first. The caller starts each and then calls
    /// [`Interests::started`] in the same batch.
    pub fn due(&self, now: u64) -> Vec<Intent> {
        let mut due: Vec<Intent> = self
            .intents
            .values()
            .filter(|i| i.due_at <= now)
            .cloned()
            .collect();
        due.sort_by(|a, b| (a.due_at, &a.id).cmp(&(b.due_at, &b.id)));
        due
    }

    /// An intent was started (or refused for good): it is gone.
    pub fn started(&mut self, id: &str, batch: &mut WriteBatch) {
        if let Some(intent) = self.intents.remove(id) {
            if let Some(key) = intent.coalesce {
                self.coalescing.remove(&(intent.flow, key));
            }
            batch.delete(Table::Intents, intent_key(id));
        }
    }

    /// The next moment something is due (an intent or a schedule).
    pub fn next_deadline(&self) -> Option<u64> {
        let intent = self.intents.values().map(|i| i.due_at).min();
        let schedule = self
            .active
            .iter()
            .filter(|a| matches!(a.spec.trigger, Trigger::Schedule { .. }))
            .filter_map(|a| self.states.get(&(a.flow.clone(), a.index))?.next_at)
            .min();
        match (intent, schedule) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Refusals since the last call (for the host's log).
    pub fn take_refusals(&mut self) -> Vec<Refusal> {
        std::mem::take(&mut self.refusals)
    }

    /// Every active interest.
    pub fn views(&self) -> Vec<InterestView> {
        self.active
            .iter()
            .map(|a| {
                let state = self.states.get(&(a.flow.clone(), a.index));
                InterestView {
                    flow: a.flow.clone(),
                    revision: a.revision,
                    index: a.index,
                    trigger: a.spec.describe(),
                    last_fired: state.and_then(|s| s.last_fired),
                    fired: state.map_or(0, |s| s.fired),
                    next_at: state.and_then(|s| s.next_at),
                    pending: self
                        .intents
                        .values()
                        .filter(|i| i.flow == a.flow && i.interest == a.index)
                        .count(),
                }
            })
            .collect()
    }

    /// Pending intents.
    pub fn pending(&self) -> impl Iterator<Item = &Intent> {
        self.intents.values()
    }
}

fn next_time(when: &When, after: u64) -> Option<u64> {
    match when {
        When::Every(ms) => Some(after + ms.max(&1)),
        When::Cron(cron, zone) => cron.next_in(after, zone),
    }
}

fn event_scope(payload: &Value) -> Scope {
    let binding: [(std::sync::Arc<str>, Value); 1] =
        [(std::sync::Arc::from("event"), payload.clone())];
    Scope::new(&Value::Null, &Value::Null, &binding)
}

fn matches(trigger: &Trigger, happening: &Happening) -> bool {
    match (trigger, happening) {
        (
            Trigger::Job {
                flow: want,
                status: filter,
                ..
            },
            Happening::JobEnded { flow, status, .. },
        ) => {
            want == flow
                && match filter {
                    EndFilter::Any => true,
                    EndFilter::Succeeded => status == "succeeded",
                    EndFilter::Failed => status == "failed",
                    EndFilter::Cancelled => status == "cancelled",
                }
        }
        (
            Trigger::Place {
                place: want,
                state: filter,
            },
            Happening::PlaceChanged { place, state, .. },
        ) => {
            want == place
                && match filter {
                    PlaceFilter::Any => true,
                    PlaceFilter::Ready => state == "ready",
                    PlaceFilter::Unready => matches!(state.as_str(), "unready" | "failed"),
                }
        }
        (Trigger::Event { name: want }, Happening::Emitted { name, .. }) => want == name,
        _ => false,
    }
}

#[cfg(test)]
mod tests;

/// A fixed offset as people write it: `UTC`, `UTC+02:00`, `UTC-05:30`.
fn zone_text(zone: &Zone) -> String {
    match zone {
        Zone::Fixed(minutes) => offset_text(*minutes),
        Zone::Named { name, .. } => name.clone(),
    }
}

fn offset_text(minutes: i32) -> String {
    if minutes == 0 {
        return "UTC".to_owned();
    }
    let sign = if minutes < 0 { '-' } else { '+' };
    let minutes = minutes.unsigned_abs();
    format!("UTC{sign}{:02}:{:02}", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod offset_tests {
    #[test]
    fn offsets_read_as_people_write_them() {
        assert_eq!(super::offset_text(0), "UTC");
        assert_eq!(super::offset_text(120), "UTC+02:00");
        assert_eq!(super::offset_text(-330), "UTC-05:30");
    }
}
