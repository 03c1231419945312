//! The node's durable event journal (the store's `node_events` table): link events — up,
//! down with its reason, enrolled, revoked — appended by the tree organ, read back by
//! vitality (recent events, and the links as last seen when the node is not running).
//!
//! A leaf of the shell: the tree organ writes it, the desk reads it, and it knows
//! neither.

use crate::genome::now_ms;
use palm_actors::store::{Store, Table, WriteBatch};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// Node events kept in the store; older ones are dropped.
pub const NODE_EVENTS_MAX: usize = 10_000;

/// Recent events shown by vitality.
const RECENT_EVENTS_SHOWN: usize = 20;

/// The durable record of node events in the store's `node_events` table.
pub struct NodeJournal {
    store: Arc<dyn Store>,
    seq: AtomicU32,
    count: Mutex<usize>,
}

fn event_key(at_ms: u64, seq: u32) -> Vec<u8> {
    let mut key = at_ms.to_be_bytes().to_vec();
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

impl NodeJournal {
    /// The journal over `store` (counts what is already there).
    pub fn new(store: Arc<dyn Store>) -> NodeJournal {
        let mut count = 0usize;
        let _ = store.scan(Table::NodeEvents, b"", None, &mut |_, _| {
            count += 1;
            true
        });
        NodeJournal {
            store,
            seq: AtomicU32::new(0),
            count: Mutex::new(count),
        }
    }

    /// Appends `event` (stamped `at`) durably, dropping the oldest beyond the bound.
    /// Blocking: call off the async threads.
    pub fn append(&self, mut event: Value) -> Result<(), String> {
        let at = now_ms();
        if let Some(object) = event.as_object_mut() {
            object.insert("at".into(), json!(at));
        }
        let mut batch = WriteBatch::new();
        let bytes = serde_json::to_vec(&event).map_err(|e| e.to_string())?;
        batch.put(
            Table::NodeEvents,
            event_key(at, self.seq.fetch_add(1, Ordering::Relaxed)),
            bytes,
        );
        let mut count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        let excess = (*count + 1).saturating_sub(NODE_EVENTS_MAX);
        if excess > 0 {
            let mut oldest = Vec::new();
            let _ = self
                .store
                .scan(Table::NodeEvents, b"", None, &mut |key, _| {
                    oldest.push(key.to_vec());
                    oldest.len() < excess
                });
            for key in oldest {
                batch.delete(Table::NodeEvents, key);
            }
        }
        self.store
            .commit(&batch)
            .and_then(|()| self.store.flush())
            .map_err(|e| e.to_string())?;
        *count = (*count + 1).min(NODE_EVENTS_MAX);
        Ok(())
    }
}

/// The most recent node events, newest last.
pub fn recent_events(store: &dyn Store, n: usize) -> Vec<Value> {
    let mut all: Vec<Value> = Vec::new();
    let _ = store.scan(Table::NodeEvents, b"", None, &mut |_, value| {
        if let Ok(event) = serde_json::from_slice::<Value>(value) {
            all.push(event);
        }
        true
    });
    let skip = all.len().saturating_sub(n);
    all.split_off(skip)
}

/// Links as the journal last saw them, all `down` (for a node that is not running).
pub fn links_from_journal(store: &dyn Store) -> Value {
    let mut last: BTreeMap<(String, String), Value> = BTreeMap::new();
    let _ = store.scan(Table::NodeEvents, b"", None, &mut |_, value| {
        if let Ok(event) = serde_json::from_slice::<Value>(value)
            && matches!(event["event"].as_str(), Some("link_up" | "link_down"))
        {
            let key = (
                event["direction"].as_str().unwrap_or_default().to_owned(),
                event["peer"].as_str().unwrap_or_default().to_owned(),
            );
            last.insert(key, event);
        }
        true
    });
    Value::Array(
        last.into_values()
            .map(|e| {
                json!({
                    "peer": e["peer"],
                    "direction": e["direction"],
                    "state": "down",
                    "since": e["at"],
                    "reason": if e["event"] == "link_down" { e["reason"].clone() } else { json!("the node is not running") },
                })
            })
            .collect(),
    )
}

/// The recent node events for vitality.
pub fn recent_json(store: &dyn Store) -> Value {
    Value::Array(recent_events(store, RECENT_EVENTS_SHOWN))
}
