//! How the job path lays its data out in the [`Store`]: keys and postcard records.
//!
//! Everything here is versioned by the `format` meta key; a store written by a newer
//! format is refused at open rather than misread.

use crate::bt::EffectRequest;
use crate::job::{Event, JobStatus, ParentLink};
use crate::store::{Store, StoreError, Table, WriteBatch, scan_prefix};
use serde::{Deserialize, Serialize};

/// The on-disk format this build writes.
/// Version 2: a job's `submitted` event says what started it (`started_by`).
/// Version 3: a new store's tag is 13 characters drawn from 64 random bits (a tree of a
/// million nodes is unlikely to see two alike; 4 characters gave a 38% chance of a
/// collision at 1,000 nodes), and the `groups` table. Records are unchanged.
/// Version 4: a journal may hold a `migrated` event (a job moved to another revision of
/// its flow); an older build cannot read one, so it must refuse the store up front
/// rather than fail on the first migrated job. Nothing else changed.
pub const FORMAT: &str = "palm-store/4";

/// Formats this build opens. Versions 2 and 3 are read as they are (a version 2 store's
/// short tag stays: job ids never change) and marked version 4 by their next write.
pub const FORMATS_READ: [&str; 3] = ["palm-store/2", "palm-store/3", FORMAT];

pub(crate) const META_FORMAT: &[u8] = b"format";
pub(crate) const META_TAG: &[u8] = b"tag";
pub(crate) const META_NEXT_JOB: &[u8] = b"next_job";
pub(crate) const META_NEXT_TOKEN: &[u8] = b"next_token";

/// A stored definition revision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DefinitionRecord {
    /// Flow name.
    pub name: String,
    /// Revision, from 1.
    pub revision: u32,
    /// Source text as given.
    pub source: String,
    /// Where it came from (a path or `<inline>`).
    pub origin: String,
    /// When it was stored.
    pub added_at: u64,
}

/// The summary of a job kept for listing without replaying journals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Job id.
    pub id: String,
    /// Flow name.
    pub flow: String,
    /// Pinned revision.
    pub revision: u32,
    /// Current status.
    pub status: JobStatus,
    /// Submitted at.
    pub created_at: u64,
    /// Last change.
    pub updated_at: u64,
    /// Parent job, for spawned children.
    pub parent: Option<ParentLink>,
    /// Why it failed.
    pub error: Option<String>,
    /// Keys it waits on.
    pub waiting: Vec<String>,
    /// Last journal seq.
    pub seq: u64,
}

/// A claim on an effect: who holds it, until when, under which fencing token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// Fencing token: strictly increasing per store; a completion must carry the
    /// token of the current claim.
    pub token: u64,
    /// `node/seat`.
    pub holder: String,
    /// Lease expiry (ms since the epoch).
    pub lease_until: u64,
}

/// An effect in flight.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EffectRecord {
    /// Owning job.
    pub job: String,
    /// What to do.
    pub request: EffectRequest,
    /// Current claim, if any.
    pub claim: Option<Claim>,
    /// Requested at.
    pub created_at: u64,
}

/// The process group running an effect's command, recorded before the command may start
/// (the runner holds it at a gate until then; the node keeps a copy a crash of its
/// process cannot take back, and this one rides with the next batch). At boot, a node stops the groups
/// its previous life left running before any seat claims work, so one effect key never
/// runs twice at the same moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningGroup {
    /// Fencing token of the claim the command runs under.
    pub token: u64,
    /// Process group id (the leader's pid).
    pub pgid: u32,
    /// The machine's boot id when it started (empty where the system has none): after a
    /// reboot no process of the old boot is alive, and the id may name someone else.
    pub boot: String,
    /// The leader's start time in clock ticks since boot (0 if unknown): tells the
    /// leader from a later process that was given the same pid.
    pub start_ticks: u64,
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(value).expect("postcard encoding of an in-memory record cannot fail")
}

pub(crate) fn decode<T: for<'de> Deserialize<'de>>(
    bytes: &[u8],
    what: &str,
) -> Result<T, StoreError> {
    postcard::from_bytes(bytes).map_err(|err| StoreError::Decode {
        what: what.to_owned(),
        detail: err.to_string(),
    })
}

pub(crate) fn definition_key(name: &str, revision: u32) -> Vec<u8> {
    let mut key = name.as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(&revision.to_be_bytes());
    key
}

pub(crate) fn journal_key(job: &str, seq: u64) -> Vec<u8> {
    let mut key = job.as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

pub(crate) fn journal_prefix(job: &str) -> Vec<u8> {
    let mut key = job.as_bytes().to_vec();
    key.push(0);
    key
}

pub(crate) fn put_event(batch: &mut WriteBatch, job: &str, event: &Event) {
    batch.put(Table::Journal, journal_key(job, event.seq), encode(event));
}

/// Every stored effect record, with its key.
pub fn read_effects(store: &dyn Store) -> Result<Vec<(String, EffectRecord)>, StoreError> {
    let mut effects = Vec::new();
    let mut failure = None;
    store.scan(Table::Effects, b"", None, &mut |key, value| {
        match decode::<EffectRecord>(value, "effect record") {
            Ok(record) => effects.push((String::from_utf8_lossy(key).into_owned(), record)),
            Err(err) => failure = Some(err),
        }
        failure.is_none()
    })?;
    failure.map_or(Ok(effects), Err)
}

/// Reads a job's whole journal from the store.
pub fn read_journal(store: &dyn Store, job: &str) -> Result<Vec<Event>, StoreError> {
    let mut events = Vec::new();
    let mut failure = None;
    scan_prefix(
        store,
        Table::Journal,
        &journal_prefix(job),
        &mut |_, value| match decode::<Event>(value, "journal event") {
            Ok(event) => {
                events.push(event);
                true
            }
            Err(err) => {
                failure = Some(err);
                false
            }
        },
    )?;
    match failure {
        Some(err) => Err(err),
        None => Ok(events),
    }
}

pub(crate) fn read_u64(store: &dyn Store, key: &[u8]) -> Result<Option<u64>, StoreError> {
    match store.get(Table::Meta, key)? {
        None => Ok(None),
        Some(bytes) => {
            let array: [u8; 8] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| StoreError::Decode {
                    what: String::from_utf8_lossy(key).into_owned(),
                    detail: format!("expected 8 bytes, found {}", bytes.len()),
                })?;
            Ok(Some(u64::from_be_bytes(array)))
        }
    }
}
