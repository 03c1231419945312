//! The built-in providers of the `call` leaf — `http`, `file`, `kv` and `palm`; `agent`,
//! `verify`, `gate` and `best_of` behind the agent and verification nodes, `conflicts`
//! and `merge_lane` behind a team's lanes — the
//! providers a node declares in `palm.yaml` ([`declared`]), and [`builtin`], the registry
//! a node starts with. The contract they implement is
//! `crate::genome::provider` (re-exported here): extension is by registration, never by
//! editing the core.
//!
//! Every call is an effect like a `run`: claimed by a seat under a lease, with an
//! idempotency key, run at least once, completed once. A provider answers `Ok(value)`
//! (the call succeeds; `save` stores the value) or `Err(Failure)` (the call fails with a
//! reason; a value, if any, is still saved so the flow can look at it).

pub mod agent;
pub mod best_of;
pub mod declared;
pub mod file;
pub mod gate;
pub mod http;
pub mod kv;
pub mod lanes;
pub mod palm;
pub mod verify;

pub use crate::genome::provider::{
    CallContext, CallFuture, Failure, Provider, ProviderSettings, Registry,
};
use serde_json::Value;
use std::sync::Arc;

/// The registry of a node on `data`: the built-in providers, then those declared in
/// `palm.yaml` (whose names the configuration reader keeps apart from the built-ins').
pub fn builtin(data: &std::path::Path, settings: &ProviderSettings) -> Registry {
    let mut registry = Registry::default();
    let http = Arc::new(http::Http::new(settings.http_ca.clone()));
    registry.register(http.clone());
    registry.register(Arc::new(file::Files::new(
        settings
            .file_root
            .clone()
            .unwrap_or_else(|| data.join("files")),
    )));
    registry.register(Arc::new(kv::Kv));
    registry.register(Arc::new(palm::Palm));
    let agents = Arc::new(agent::Agents::new(data, &settings.agents, &settings.repos));
    registry.register(agents.clone());
    registry.register(Arc::new(gate::Gate::new(agents, data)));
    registry.register(Arc::new(verify::Verify::new(data)));
    registry.register(Arc::new(best_of::BestOf::new(data)));
    registry.register(Arc::new(lanes::Conflicts));
    registry.register(Arc::new(lanes::MergeLane::new(data)));
    for spec in &settings.declared {
        match declared::Declared::new(spec.clone(), data, http.clone()) {
            Ok(provider) => registry.register(Arc::new(provider)),
            Err(err) => tracing::warn!(%err, "declared provider left out"),
        }
    }
    registry
}

/// At most `max` bytes of `text`, cut on a character boundary.
pub(crate) fn cut(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A string argument, or a failure naming it.
pub fn string_arg<'a>(args: &'a Value, name: &str, provider: &str) -> Result<&'a str, Failure> {
    match args.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(other) => Err(Failure::new(format!(
            "{provider}: argument `{name}` must be a non-empty string, found {other}"
        ))),
        None => Err(Failure::new(format!(
            "{provider}: missing argument `{name}`"
        ))),
    }
}
