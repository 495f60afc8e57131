//! The activity model: node kinds with side effects.
//!
//! A *pure* node kind is decided inside the engine (see [`crate::nodes`]). An *activity*
//! (an HTTP call, a model call, a cloud API) is executed outside it:
//!
//! ```text
//! engine ──Effect::Execute{node, activation, attempt}──▶ worker ──▶ Activity::execute (I/O)
//!    ▲                                                                   │
//!    └────────── Input::ActivityFinished{attempt, outcome} ◀─────────────┘  (one commit)
//! ```
//!
//! When an activity node becomes ready the engine calls [`Activity::prepare`] (pure: it
//! renders the node's config against inputs and variables into the request every attempt
//! sends), commits `node.started{attempt}` and an `Execute` effect. The worker calls
//! [`Activity::execute`], bounded by the attempt's timeout, and feeds the outcome back as an
//! input; the engine turns it into `node.completed`, `node.retried` (a durable timer, then
//! the next attempt) or `node.failed` (or a failure route, see the edge `triggerRule`).
//! Executors never write the store. An attempt may execute twice (a crash after the call,
//! before the commit): the remote side sees the same [`ActivityCall::idempotency_key`] on
//! every attempt of one logical call and the attempt number apart.
//!
//! - [`policy`]: `settings.retry` / `settings.timeouts` (parsing, checks, backoff);
//! - [`template`]: the `{{inputs.x}}` / `{{variables.x}}` syntax work nodes render with.

pub mod policy;
pub mod template;

/// Effects performed in this process by the conformance side-effect node
/// (`core.conformance.side-effect`), read by the test seam `GET
/// /v1/host/sample/replay/effect-count`: a replay that resolves the node from its source
/// leaves it as it was.
pub mod effects {
    use std::sync::atomic::{AtomicU64, Ordering};

    static PERFORMED: AtomicU64 = AtomicU64::new(0);

    /// Counts one effect; returns the count with it.
    pub fn perform() -> u64 {
        PERFORMED.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// How many effects this process performed.
    pub fn performed() -> u64 {
        PERFORMED.load(Ordering::SeqCst)
    }
}

use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::interrupt::request::ConfigIssue;
use crate::nodes::NodeContext;
use crate::run::RunError;

/// One attempt of an activity node, as the executor receives it. Its `Debug` leaves out the
/// request (it may hold rendered credentials, e.g. an `Authorization` header).
#[derive(Clone, PartialEq)]
pub struct ActivityCall {
    /// The run.
    pub run_id: String,
    /// The node.
    pub node_id: String,
    /// The node's `typeId`.
    pub type_id: String,
    /// The node's activation (a loop re-activates a node: a new logical call).
    pub activation: u32,
    /// Zero-based attempt number (`node.started.attempt`).
    pub attempt: u32,
    /// The same for every attempt of one logical call: a hash of (run, node, activation).
    pub idempotency_key: String,
    /// What [`Activity::prepare`] rendered when the node started.
    pub request: Value,
    /// This attempt's time budget in milliseconds (the smaller of the node's own timeout,
    /// `settings.timeouts.attemptMs` and what is left of `totalMs`).
    pub timeout_ms: u64,
    /// The run's tenant (a secret resolver may restrict a secret to some tenants).
    pub tenant: String,
    /// The node's `credentialsRef`, if it has one: a reference, never a value; the executor
    /// resolves it through its [`crate::secrets::SecretResolver`] for this attempt only.
    pub credentials_ref: Option<String>,
}

impl fmt::Debug for ActivityCall {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("ActivityCall")
            .field("run_id", &self.run_id)
            .field("node_id", &self.node_id)
            .field("type_id", &self.type_id)
            .field("activation", &self.activation)
            .field("attempt", &self.attempt)
            .field("timeout_ms", &self.timeout_ms)
            .field("tenant", &self.tenant)
            .field("credentials_ref", &self.credentials_ref)
            .finish_non_exhaustive()
    }
}

/// Why an attempt failed: a stable code, a message, details and whether another attempt
/// could succeed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityError {
    /// Stable code, e.g. `http_timeout`.
    pub code: String,
    /// Human text. Never carries a secret.
    pub message: String,
    /// Extra data (e.g. `{url}`, `{actual, expected}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Whether retrying may help.
    pub retryable: bool,
}

impl ActivityError {
    /// A new error without details.
    pub fn new(code: &str, message: impl Into<String>, retryable: bool) -> Self {
        Self { code: code.to_owned(), message: message.into(), details: None, retryable }
    }

    /// The same error with `details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The attempt stopped because the run no longer wants it ([`ProgressSink::report`]
    /// answered `false`): nothing reads this outcome, as the attempt is no longer current.
    pub fn abandoned() -> Self {
        Self::new("attempt_abandoned", "the run no longer wants this attempt (superseded, ended or cancelled)", false)
    }

    /// The error as `node.failed` / `run.failed` carry it.
    pub fn to_run_error(&self) -> RunError {
        RunError { code: self.code.clone(), message: self.message.clone(), details: self.details.clone() }
    }
}

impl fmt::Display for ActivityError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}: {}", self.code, self.message)
    }
}

/// The outcome of one attempt: the node's outputs, or why it failed.
pub type ActivityResult = Result<Map<String, Value>, ActivityError>;

/// Something an executor reports while an attempt runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// The attempt is alive; `details` are kept for the next attempt to read.
    Heartbeat {
        /// Free-form progress details.
        details: Value,
    },
    /// A piece of streamed output (committed as `output.chunk`; a model call's tokens go
    /// as a [`crate::ai::chunk::ChunkBatch`]).
    Chunk {
        /// The chunk.
        data: Value,
    },
    /// One provider invocation's usage (committed as `provider.usage`, rolled into the
    /// run's cost and budget). Reported once per invocation, before the attempt returns.
    Usage(crate::ai::usage::ProviderUsage),
    /// The attempt's result is a rerun's cache hit (committed as `trellis.node.replayed`;
    /// see [`crate::cache`]): nothing was called.
    Replayed {
        /// The run whose log held the result.
        source_run_id: String,
        /// The sequence of the source's `node.completed`.
        source_sequence: u64,
        /// The key that matched.
        cache_key: String,
    },
}

/// Where an executor reports [`Progress`]; the worker commits it as an input for the attempt
/// it belongs to (an input for a superseded attempt is ignored).
#[async_trait]
pub trait ProgressSink: Send + Sync {
    /// Reports progress. Never fails the attempt (a report that cannot be committed is
    /// logged). Returns whether the attempt is still wanted: `false` when the report found it
    /// superseded, or the run ended or is being cancelled — e.g. the usage just reported
    /// exhausted the run's budget. An executor stops then (no further call, no more reading
    /// of a stream) and returns [`ActivityError::abandoned`].
    async fn report(&self, progress: Progress) -> bool;
}

/// A sink that drops every report (for executors driven outside a worker, and tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

#[async_trait]
impl ProgressSink for NoProgress {
    async fn report(&self, _progress: Progress) -> bool {
        true
    }
}

/// A node kind with side effects, registered with its executor in a composition root
/// ([`crate::nodes::NodeRegistry::register`]).
#[async_trait]
pub trait Activity: Send + Sync + fmt::Debug {
    /// The `typeId` it implements.
    fn type_id(&self) -> &'static str;

    /// Checks a node's config when its workflow is registered. An [`ConfigIssue::Invalid`]
    /// message names the field and the rule.
    fn check(&self, node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue>;

    /// Whether a node with this config may be retried without an explicit `settings.retry`
    /// (under `WorkflowSettings.maxRetries`): true for idempotent calls only (e.g. GET).
    fn idempotent(&self, config: &Map<String, Value>) -> bool {
        let _ = config;
        false
    }

    /// Whether a rerun may take a node's result from its source's log instead of calling
    /// again (see [`crate::cache`]): true only for calls that change nothing outside —
    /// model calls, read-only HTTP methods. `settings.cacheable` overrides it per node.
    fn cacheable(&self, config: &Map<String, Value>) -> bool {
        let _ = config;
        false
    }

    /// Whether a node with this config needs the node's `credentialsRef` (e.g. an HTTP call
    /// with `config.auth`): registration refuses such a node without one.
    fn needs_credentials(&self, config: &Map<String, Value>) -> bool {
        let _ = config;
        false
    }

    /// Whether this kind calls a model. Its prepared request then names top-level string
    /// fields `provider` and `model`, and the engine checks the run's budget (model policy,
    /// exhausted dimensions) before each attempt; its executor reports every provider
    /// invocation's usage as [`Progress::Usage`].
    fn model_call(&self) -> bool {
        false
    }

    /// The per-attempt timeout the node's own config asks for (e.g. `config.timeoutMs`),
    /// and otherwise the kind's default. `settings.timeouts.attemptMs` may lower it.
    fn attempt_timeout_ms(&self, config: &Map<String, Value>) -> u64;

    /// Renders the request every attempt of this activation sends. Pure (no I/O, no clock):
    /// an error (e.g. an unresolved template name, `validation_error` with `details.path`)
    /// fails the node without an attempt.
    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError>;

    /// Executes one attempt. Must return within `call.timeout_ms` (the worker also bounds it).
    async fn execute(&self, call: &ActivityCall, progress: &dyn ProgressSink) -> ActivityResult;

    /// The capability blocks this kind adds to discovery (e.g. `httpClient`), as
    /// `(block name, value)`.
    fn capabilities(&self) -> Vec<(&'static str, Value)> {
        Vec::new()
    }
}

/// The `Idempotency-Key` the remote side sees for every attempt of one logical call:
/// `sha256(run, node, activation)` in hex (RFC 0150: the attempt is not part of it).
pub fn idempotency_key(run_id: &str, node_id: &str, activation: u32) -> String {
    let mut hash = Sha256::new();
    hash.update(run_id.as_bytes());
    hash.update([0]);
    hash.update(node_id.as_bytes());
    hash.update([0]);
    hash.update(activation.to_be_bytes());
    hex::encode(hash.finalize())
}
