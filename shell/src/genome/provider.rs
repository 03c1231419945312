//! The provider contract of the `call` leaf: what a provider is ([`Provider`]), what a
//! call may use ([`CallContext`]), how it fails ([`Failure`]), and the [`Registry`] a
//! node fills at boot. The built-in providers (`http`, `file`, `kv`, `palm`) live in
//! `crate::providers`, built on this; the runner reaches them only through it.

use super::Genome;
use super::kernel::KernelMsg;
use palm_actors::path::ClaimedEffect;
use ractor::ActorRef;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

/// A failed call: why, and what the provider saw (saved like a success's value).
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// One line: what went wrong.
    pub reason: String,
    /// What the provider saw, if anything (an HTTP answer with the wrong status, say).
    pub value: Value,
}

impl Failure {
    /// A failure with nothing to show.
    pub fn new(reason: impl Into<String>) -> Failure {
        Failure {
            reason: reason.into(),
            value: Value::Null,
        }
    }
}

/// What a call may use.
pub struct CallContext<'a> {
    /// The node.
    pub genome: &'a Arc<Genome>,
    /// Its kernel (the `kv` provider goes through it).
    pub kernel: &'a ActorRef<KernelMsg>,
    /// The effect being run (its key is the call's idempotency key).
    pub effect: &'a ClaimedEffect,
}

/// A boxed future a provider returns.
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, Failure>> + Send + 'a>>;

/// One provider.
pub trait Provider: Send + Sync {
    /// Its name in flows (`call: {provider: NAME}`).
    fn name(&self) -> &str;
    /// What it does and which arguments it takes, for `palm providers`.
    fn describe(&self) -> Value;
    /// Runs one call.
    fn call<'a>(&'a self, ctx: CallContext<'a>, args: Value) -> CallFuture<'a>;
}

/// Provider settings from `palm.yaml` (`providers:`).
#[derive(Clone, Debug, Default)]
pub struct ProviderSettings {
    /// The `file` provider's root [default: DIR/files].
    pub file_root: Option<PathBuf>,
    /// PEM certificates the `http` provider trusts besides Mozilla's roots.
    pub http_ca: Option<PathBuf>,
    /// Providers declared in `palm.yaml`: a program or an HTTP endpoint each.
    pub declared: Vec<DeclaredProvider>,
    /// Agent CLIs declared under `agents:` in `palm.yaml`.
    pub agents: Vec<DeclaredAgent>,
    /// Worktree setup per repo (`repos: {PATH: {worktree: ...}}` in `palm.yaml`).
    pub repos: BTreeMap<PathBuf, palm_agents::provision::Provision>,
}

/// An agent CLI declared under `agents:` (`palm_agents::custom` has its contract).
#[derive(Clone, Debug)]
pub struct DeclaredAgent {
    /// Its name, as an `agent` leaf's `provider`.
    pub name: String,
    /// The program and its arguments (`{prompt_file}`, `{output_file}`, `{worktree}` and
    /// `{mode}` are replaced).
    pub command: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Its default timeout (ms).
    pub timeout_ms: Option<u64>,
}

/// A provider declared in `palm.yaml` (`providers: {NAME: {command | url, ...}}`).
#[derive(Clone, Debug)]
pub struct DeclaredProvider {
    /// Its name in flows.
    pub name: String,
    /// One line for `palm providers`.
    pub description: Option<String>,
    /// A JSON Schema the call's arguments must satisfy (checked before anything runs).
    pub schema: Option<Value>,
    /// The longest one call may take (ms).
    pub timeout_ms: Option<u64>,
    /// What a call does.
    pub target: DeclaredTarget,
}

/// What a declared provider's call does.
#[derive(Clone, Debug)]
pub enum DeclaredTarget {
    /// Runs a program (no shell): the arguments as JSON on stdin, the result as JSON on
    /// stdout, exit 0 for success.
    Command {
        /// The program and its arguments.
        argv: Vec<String>,
        /// Extra environment.
        env: BTreeMap<String, String>,
        /// Working directory [default: the node's].
        cwd: Option<PathBuf>,
    },
    /// POSTs the arguments as JSON to a URL; a 2xx JSON answer is the result.
    Endpoint {
        /// `http://` or `https://`.
        url: String,
        /// Extra request headers.
        headers: BTreeMap<String, String>,
    },
}

/// The providers a node offers, by name.
#[derive(Default)]
pub struct Registry {
    providers: BTreeMap<String, Arc<dyn Provider>>,
}

impl Registry {
    /// Adds (or replaces) a provider.
    pub fn register(&mut self, provider: Arc<dyn Provider>) {
        self.providers.insert(provider.name().to_owned(), provider);
    }

    /// The provider of that name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Provider>> {
        self.providers.get(name).cloned()
    }

    /// Every provider, for `palm providers`.
    pub fn to_json(&self) -> Value {
        let providers: Vec<Value> = self.providers.values().map(|p| p.describe()).collect();
        json!({ "providers": providers })
    }

    /// Names, for error messages.
    pub fn names(&self) -> Vec<&str> {
        self.providers.keys().map(String::as_str).collect()
    }
}
