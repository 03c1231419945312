//! palm-actors: the genome's cores — definitions, the Behavior Tree engine, durable jobs
//! and effects (the job path), the place book, OTP supervision decisions — and the
//! `Store` trait with its implementations.
//!
//! Everything here is deterministic: every input carries an explicit `now`, randomness
//! comes in as a seed, and nothing touches the clock, threads, sockets or processes. The
//! one fenced exception is `store/`, where the store implementations do file I/O. The
//! node (`palm`) hosts these cores on tokio and ractor; the simulator hosts them in
//! virtual time.
pub mod bt;
pub mod definition;
pub mod host;
pub mod interest;
pub mod job;
pub mod json;
pub mod jsonschema;
pub mod path;
pub mod place;
pub mod random;
pub mod store;
pub mod supervisor;
pub mod template;
