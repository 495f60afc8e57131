//! The ports: what the engine's use cases need from the outside world.
//!
//! - [`WorkflowStore`], [`RunStore`] and [`HostSettings`] (together [`Store`]): implemented by
//!   `trellis-store-sqlite` (embedded) and `trellis-store-dynamodb` (AWS); both pass the shared
//!   contract suite in `trellis_core::testing` (feature `test-util`);
//! - [`EffectSink`]: where committed effects go — the SQLite task table ([`LocalQueue`], also
//!   the embedded outbox) or SQS (`trellis-aws`);
//! - [`Clock`], [`IdGenerator`] and [`Notifier`]: time, run ids and commit wake-ups, injected
//!   so the use cases stay deterministic under test.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::engine::Effect;
use crate::error::StoreError;
use crate::event::RunEvent;
use crate::interrupt::Vote;
use crate::run::{Changes, RunState, RunStatus};
use crate::timefmt::Millis;

/// The read-only namespace holding bundled definitions (examples, conformance fixtures); a
/// tenant's own definitions are looked up first.
pub const GLOBAL_NAMESPACE: &str = "_global";

/// A stored workflow definition version.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredWorkflow {
    /// `GLOBAL_NAMESPACE` or a tenant.
    pub namespace: String,
    /// The workflow id.
    pub workflow_id: String,
    /// The author's version label.
    pub version: String,
    /// The definition's content hash (its identity; stored documents never change).
    pub content_hash: String,
    /// The document, verbatim.
    pub document: Value,
}

/// Workflow definitions, immutable per content hash.
#[async_trait]
pub trait WorkflowStore: Send + Sync {
    /// Stores a definition version; storing the same content again is a no-op that makes it
    /// the latest again.
    async fn put_workflow(&self, workflow: &StoredWorkflow, now: Millis) -> Result<(), StoreError>;
    /// The most recently stored version of `workflow_id` in `namespace`.
    async fn latest_workflow(&self, namespace: &str, workflow_id: &str) -> Result<Option<StoredWorkflow>, StoreError>;
    /// The content hash of the most recently stored version of `workflow_id` in `namespace`
    /// (what a run of it is pinned to; a store can answer without reading the document).
    async fn latest_workflow_hash(&self, namespace: &str, workflow_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.latest_workflow(namespace, workflow_id).await?.map(|stored| stored.content_hash))
    }
    /// One exact version.
    async fn workflow_version(
        &self,
        namespace: &str,
        workflow_id: &str,
        content_hash: &str,
    ) -> Result<Option<StoredWorkflow>, StoreError>;
    /// The latest stored document of `workflow_id` whose version label is `version`.
    async fn workflow_by_label(
        &self,
        namespace: &str,
        workflow_id: &str,
        version: &str,
    ) -> Result<Option<StoredWorkflow>, StoreError>;
    /// Ids of every workflow in `namespace`, sorted (a keyed read, never a table scan).
    async fn workflow_ids(&self, namespace: &str) -> Result<Vec<String>, StoreError>;
}

/// A finished response kept for an `Idempotency-Key`, for
/// [`crate::limits::IDEMPOTENCY_RETENTION_SECONDS`] after `created_at`: past that a store
/// treats it as absent (the key can be used afresh) and deletes it in time.
#[derive(Debug, Clone, PartialEq)]
pub struct IdempotencyRecord {
    /// Tenant of the credential that sent the request.
    pub tenant: String,
    /// The routed operation, e.g. `POST /v1/runs`.
    pub endpoint: String,
    /// The caller's key.
    pub key: String,
    /// Digest of the request body.
    pub request_digest: String,
    /// Response status.
    pub status: u16,
    /// Response body.
    pub body: Value,
    /// When it was recorded.
    pub created_at: Millis,
}

/// What [`RunStore::claim_idempotency`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum IdempotencyClaim {
    /// No finished record: the caller now holds a pending claim (until its lease ends) and
    /// must complete or abandon it.
    Claimed,
    /// The request was already answered: this is the recorded answer.
    Completed(IdempotencyRecord),
    /// Another request with this key is being processed.
    InFlight {
        /// Digest of the request that holds the claim.
        request_digest: String,
    },
}

/// What [`RunStore::create_run`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateResult {
    /// The run, its events, tasks and idempotency record were written.
    Created,
    /// Nothing was written: a record for the same idempotency key already exists.
    Existing(IdempotencyRecord),
}

/// An event as a store holds it, its payload left as JSON text: what an event page or an SSE
/// frame needs, written out without parsing the payload into a [`Value`] and back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// Position in the run's log.
    pub sequence: u64,
    /// The event type.
    pub event_type: String,
    /// The node the event is about, if any.
    pub node_id: Option<String>,
    /// The payload as `serde_json` writes the [`RunEvent::payload`] value: compact, object
    /// keys sorted. It is copied into a document as is, so a store returns exactly those bytes.
    pub payload_json: String,
    /// When the event was recorded.
    pub timestamp: Millis,
    /// The sequence of the event that caused this one, if any.
    pub causation: Option<u64>,
}

impl StoredEvent {
    /// `event` with its payload written as JSON text.
    pub fn of(event: RunEvent) -> Self {
        let payload_json = serde_json::to_string(&event.payload).unwrap_or_else(|_| "null".to_owned());
        let RunEvent { sequence, event_type, node_id, timestamp, causation, .. } = event;
        Self { sequence, event_type, node_id, payload_json, timestamp, causation }
    }
}

/// Runs and their event logs.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Writes a new run with its first events, its first tasks and (when given) the
    /// idempotency record, in one atomic commit.
    async fn create_run(
        &self,
        run: &RunState,
        events: &[RunEvent],
        effects: &[Effect],
        idempotency: Option<&IdempotencyRecord>,
    ) -> Result<CreateResult, StoreError>;
    /// The run's current state.
    async fn load_run(&self, run_id: &str) -> Result<Option<RunState>, StoreError>;
    /// Replaces the run's state if its stored version is `expected_version`, appends
    /// `events`, records the votes they cast ([`crate::interrupt::counted_vote`]; a voter's
    /// later vote replaces the earlier) and enqueues `effects`, atomically.
    /// [`StoreError::Conflict`] when the stored version moved;
    /// [`StoreError::VersionSkip`] when `run.version` is not `expected_version + 1`.
    async fn commit(
        &self,
        run: &RunState,
        expected_version: u64,
        events: &[RunEvent],
        effects: &[Effect],
    ) -> Result<(), StoreError>;
    /// The run as a snapshot, a listing or an event page needs it: a store may leave out the
    /// records of nodes that are not active ([`crate::run::NodeState::is_active`]; a finished
    /// run has none). The default is [`RunStore::load_run`].
    async fn load_run_summary(&self, run_id: &str) -> Result<Option<RunState>, StoreError> {
        self.load_run(run_id).await
    }
    /// [`RunStore::commit`], told which nodes, edges and variables changed: a store that keeps
    /// them as separate records writes those and the header only (`changes.all` writes every
    /// record). The default writes the whole state.
    async fn commit_changes(
        &self,
        run: &RunState,
        expected_version: u64,
        changes: &Changes,
        events: &[RunEvent],
        effects: &[Effect],
    ) -> Result<(), StoreError> {
        let _ = changes;
        self.commit(run, expected_version, events, effects).await
    }
    /// The run's current state, to apply an input to: [`RunStore::load_run`], except that a
    /// store keeping hot runs in memory hands over its copy without copying it (the caller
    /// offers it back with [`RunStore::retain_run`]).
    async fn take_run(&self, run_id: &str) -> Result<Option<RunState>, StoreError> {
        self.load_run(run_id).await
    }
    /// Offers `run`, as committed (or as read and left unchanged), back to a store that keeps
    /// hot runs in memory; it keeps it only while it is the stored version. By default it is
    /// dropped.
    fn retain_run(&self, run: RunState) {
        drop(run);
    }
    /// Events with `sequence > after` (all when `None`), in order, at most `limit`.
    async fn events_after(&self, run_id: &str, after: Option<u64>, limit: usize) -> Result<Vec<RunEvent>, StoreError>;
    /// [`RunStore::events_after`] with each payload as JSON text ([`StoredEvent`]): a store
    /// that keeps payloads as that text hands it over unparsed. The default writes the
    /// payloads [`RunStore::events_after`] read.
    async fn events_after_json(
        &self,
        run_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        Ok(self.events_after(run_id, after, limit).await?.into_iter().map(StoredEvent::of).collect())
    }
    /// The vote `voter` cast on interrupt occurrence `interrupt_id` of `run_id`, if any: one
    /// keyed read, however many votes the occurrence has.
    async fn vote(&self, run_id: &str, interrupt_id: &str, voter: &str) -> Result<Option<Vote>, StoreError>;
    /// Atomically claims `(tenant, endpoint, key)` for a request with `request_digest`: creates
    /// a pending record leased until `lease_until`, or takes over one whose lease ended at
    /// `now` or a finished one older than the retention at `now`; otherwise reports the
    /// finished record or the claim in flight.
    async fn claim_idempotency(
        &self,
        tenant: &str,
        endpoint: &str,
        key: &str,
        request_digest: &str,
        now: Millis,
        lease_until: Millis,
    ) -> Result<IdempotencyClaim, StoreError>;
    /// Stores the final answer of a claimed key (pending → completed).
    async fn complete_idempotency(&self, record: &IdempotencyRecord) -> Result<(), StoreError>;
    /// Drops a pending claim whose answer must not be kept (validation, auth, retryable).
    async fn abandon_idempotency(&self, tenant: &str, endpoint: &str, key: &str) -> Result<(), StoreError>;
    /// Effects of `run_id` committed and not yet acknowledged as sent (embedded: its task rows;
    /// on AWS: the effects of its commit pages without a "sent" marker). What a crash between a
    /// commit and its send leaves behind.
    async fn pending_effects(&self, run_id: &str) -> Result<Vec<Effect>, StoreError>;
    /// The tenant's runs, newest first, after `after` (exclusive), at most `limit`.
    async fn list_runs(
        &self,
        tenant: &str,
        filter: &RunFilter,
        after: Option<&RunPosition>,
        limit: usize,
    ) -> Result<Vec<RunState>, StoreError>;
    /// Deletes run `run_id` and everything kept for it — its log, its node, variable and
    /// slot records, its votes, its queued tasks, its blobs — and answers how many bytes it stored
    /// ([`RunStore::run_bytes`]; `0` for a run that is gone: deleting twice is harmless). Its
    /// child runs are separate runs, deleted by their own calls.
    async fn delete_run(&self, run_id: &str) -> Result<u64, StoreError>;
    /// How many bytes run `run_id` stores (its documents and log as stored), as
    /// [`RunStore::delete_run`] counts them; `0` for a run that is gone.
    async fn run_bytes(&self, run_id: &str) -> Result<u64, StoreError>;
    /// Gives the space of deleted runs back to the file system (SQLite: an incremental vacuum
    /// and a WAL checkpoint); nothing where the database does it (DynamoDB).
    async fn reclaim_space(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Filters of a run listing.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunFilter {
    /// Only runs of this workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    /// Only runs with this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
}

/// A position in a run listing (newest first): the last run returned.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPosition {
    /// Its creation time.
    pub created_at: Millis,
    /// Its id (tie-breaker).
    pub run_id: String,
}

/// A unit of work taken from the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// Deterministic id (see [`Effect::task_id`]).
    pub id: String,
    /// The run it belongs to.
    pub run_id: String,
    /// What to do.
    pub effect: Effect,
    /// Deliveries so far, this one included.
    pub deliveries: u32,
}

/// The effects of a commit that the committing call did not carry out itself (what
/// [`EffectSink::send_committed_except`] still sends).
pub fn not_carried_out(effects: &[Effect], carried_out: &[Effect]) -> Vec<Effect> {
    effects.iter().filter(|effect| !carried_out.contains(effect)).cloned().collect()
}

/// Sends the effects of a commit to where they are executed. Embedded, that is the local task
/// table (the commit already wrote them there; sending again is a no-op); on AWS, the step
/// queue (the commit wrote them to the outbox; sending also clears them from it). Sending the
/// same effect twice is harmless: tasks have deterministic ids and handlers check state first.
#[async_trait]
pub trait EffectSink: Send + Sync {
    /// Sends `effects` of `run_id`.
    async fn send(&self, run_id: &str, effects: &[Effect]) -> Result<(), StoreError>;

    /// Sends the effects committed at `version` of `run_id`, and records that they were sent
    /// where the backend needs it (AWS: a marker next to the commit page).
    async fn send_committed(&self, run_id: &str, version: u64, effects: &[Effect]) -> Result<(), StoreError> {
        let _ = version;
        self.send(run_id, effects).await
    }

    /// [`EffectSink::send_committed`] for a commit some of whose effects, `carried_out`, the
    /// host already carried out itself (a child run created, a parent notified, in the call
    /// that committed them): only the others are sent, and the commit is recorded as sent as
    /// a whole. The default sends the others through [`EffectSink::send_committed`].
    async fn send_committed_except(
        &self,
        run_id: &str,
        version: u64,
        effects: &[Effect],
        carried_out: &[Effect],
    ) -> Result<(), StoreError> {
        self.send_committed(run_id, version, &not_carried_out(effects, carried_out)).await
    }

    /// Repairs a crash between a commit and its send: makes sure the run's `outstanding`
    /// effects (derived from its state) are on their way. A sink that can tell which were
    /// already sent (an outbox) sends only the others.
    async fn resend_outstanding(&self, run_id: &str, outstanding: &[Effect]) -> Result<(), StoreError> {
        self.send(run_id, outstanding).await
    }
}

/// The embedded task queue: the task table, which is also the outbox.
#[async_trait]
pub trait LocalQueue: EffectSink {
    /// Leases up to `max` tasks due at `now` for `lease_ms`.
    async fn claim_due(&self, now: Millis, lease_ms: u64, max: usize) -> Result<Vec<Task>, StoreError>;
    /// Removes a finished task.
    async fn ack(&self, task_id: &str) -> Result<(), StoreError>;
    /// Removes finished tasks, in one write where the queue can.
    async fn ack_many(&self, task_ids: &[String]) -> Result<(), StoreError> {
        for task_id in task_ids {
            self.ack(task_id).await?;
        }
        Ok(())
    }
    /// Returns a task to the queue, visible again at `visible_at`.
    async fn release(&self, task_id: &str, visible_at: Millis) -> Result<(), StoreError>;
    /// When the earliest queued task becomes visible.
    async fn next_visible_at(&self) -> Result<Option<Millis>, StoreError>;
}

/// Small host-wide settings shared by every process (the capability overlay of the test
/// seam): JSON values by key.
#[async_trait]
pub trait HostSettings: Send + Sync {
    /// The value under `key`, if set.
    async fn setting(&self, key: &str) -> Result<Option<Value>, StoreError>;
    /// Sets `key` to `value` (replacing it).
    async fn put_setting(&self, key: &str, value: &Value) -> Result<(), StoreError>;
}

/// A host record: the host's own bookkeeping beside runs — webhook and trigger
/// subscriptions, delivery records, schedules, per-subscription logs. Records of one
/// `(kind, scope)` list in `key` order; each write bumps `version`, so a writer can make its
/// write conditional on what it read ([`Expect`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// What it is (`webhook`, `delivery`, `schedule`, …): one family of records.
    pub kind: String,
    /// The listing it belongs to (a tenant, a subscription, or `all`).
    pub scope: String,
    /// Its key within `(kind, scope)`; listings sort by it (byte order).
    pub key: String,
    /// 1 when created, one more with each write.
    pub version: u64,
    /// The document.
    pub value: Value,
    /// When it lapses: reads ignore it from then on (stores may delete it later).
    pub expires_at: Option<Millis>,
}

/// The condition of a record write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Whatever is stored (an upsert).
    Any,
    /// Only when no live record has the key (an expired one counts as absent).
    Absent,
    /// Only when the stored record has this version.
    Version(u64),
}

/// Host records ([`Record`]): one port for the integration bookkeeping of both backends
/// (SQLite table `records`; DynamoDB items `REC#<kind>#<scope>` / `<key>`).
#[async_trait]
pub trait RecordStore: Send + Sync {
    /// The live record `(kind, scope, key)` at `now`.
    async fn record(&self, kind: &str, scope: &str, key: &str, now: Millis) -> Result<Option<Record>, StoreError>;
    /// Writes `value` if `expect` holds (else [`StoreError::Conflict`]) and returns the
    /// version written.
    #[allow(clippy::too_many_arguments)]
    async fn put_record(
        &self,
        kind: &str,
        scope: &str,
        key: &str,
        value: &Value,
        expires_at: Option<Millis>,
        expect: Expect,
        now: Millis,
    ) -> Result<u64, StoreError>;
    /// Deletes the record if `expect` holds; whether a live record was deleted
    /// ([`StoreError::Conflict`] when `expect` names a version that is not stored).
    async fn delete_record(
        &self,
        kind: &str,
        scope: &str,
        key: &str,
        expect: Expect,
        now: Millis,
    ) -> Result<bool, StoreError>;
    /// The live records of `(kind, scope)` with a key after `after` (exclusive), in key
    /// order, at most `limit`.
    async fn records(
        &self,
        kind: &str,
        scope: &str,
        after: Option<&str>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<Record>, StoreError>;
}

/// Every live record of `(kind, scope)` at `now`, in key order, read page by page: the one home
/// of a full listing (the sets of subscriptions and schedules are small; their owners cap
/// them).
pub async fn all_records(
    store: &dyn RecordStore,
    kind: &str,
    scope: &str,
    now: Millis,
) -> Result<Vec<Record>, StoreError> {
    const PAGE: usize = 100;
    let mut out: Vec<Record> = Vec::new();
    loop {
        let after = out.last().map(|record| record.key.clone());
        let page = store.records(kind, scope, after.as_deref(), PAGE, now).await?;
        let full = page.len() == PAGE;
        out.extend(page);
        if !full {
            return Ok(out);
        }
    }
}

/// The values a run keeps apart from its documents (see [`crate::blob`]): written before the
/// commit that refers to them, read back when the run is loaded or a caller asks, and
/// deleted with the run ([`RunStore::delete_run`]).
#[async_trait]
pub trait BlobStore: Send + Sync {
    /// Stores `blobs` of `run` (a store that expires data may read the run's retention).
    /// Idempotent: a blob's reference is its content's address, so storing it again changes
    /// nothing.
    async fn put_blobs(&self, run: &RunState, blobs: &[crate::blob::Blob]) -> Result<(), StoreError>;
    /// The bytes of run `run_id`'s blob `reference`; `None` when it holds none such.
    async fn blob(&self, run_id: &str, reference: &str) -> Result<Option<Vec<u8>>, StoreError>;
}

/// Definitions, runs, their blobs, host settings and host records: what every durable store
/// provides (the shared contract suite holds each implementation to it).
pub trait Store: WorkflowStore + RunStore + BlobStore + HostSettings + RecordStore {}

impl<T: WorkflowStore + RunStore + BlobStore + HostSettings + RecordStore> Store for T {}

/// The time.
#[async_trait]
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now(&self) -> Millis;

    /// Waits `ms` milliseconds (the commit loop's backoff after a lost version race). The
    /// default returns at once, for clocks that do not follow the wall (tests).
    async fn sleep(&self, ms: u64) {
        let _ = ms;
    }
}

/// Opaque id generation and the randomness the use cases draw (kept out of the engine,
/// which draws none).
pub trait IdGenerator: Send + Sync {
    /// A new run id.
    fn run_id(&self) -> String;

    /// A random number (for jittered backoff); by default derived from a new run id.
    fn random(&self) -> u64 {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(self.run_id().as_bytes());
        u64::from_be_bytes(digest[..8].try_into().expect("eight bytes"))
    }
}

/// Tells waiters that a run changed.
#[async_trait]
pub trait Notifier: Send + Sync {
    /// Called after every successful commit that appended events or enqueued tasks.
    fn committed(&self, run_id: &str);
    /// A counter that moves on every commit; pass it to [`Notifier::wait`].
    fn generation(&self) -> u64;
    /// Returns once the counter has moved past `seen`, or after `timeout`.
    async fn wait(&self, seen: u64, timeout: Duration);
    /// A counter that moves on every commit to `run_id` (and may move on others'); pass it to
    /// [`Notifier::wait_run`]. Not comparable with [`Notifier::generation`]. By default the
    /// global counter.
    fn run_generation(&self, run_id: &str) -> u64 {
        let _ = run_id;
        self.generation()
    }
    /// Returns once `run_id`'s counter has moved past `seen`, or after `timeout`; a commit to
    /// another run need not wake it. By default [`Notifier::wait`] (any commit wakes it).
    async fn wait_run(&self, run_id: &str, seen: u64, timeout: Duration) {
        let _ = run_id;
        self.wait(seen, timeout).await
    }
}
