//! A run's durable state. The store keeps it as one document next to the event log; the
//! engine is the only code that changes it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::interrupt::InterruptRecord;
use crate::orchestrator::OrchestratorState;
use crate::timefmt::Millis;

/// The OpenWOP run status enum, complete (RFC 0094 §B added `cancelling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Accepted, not yet started.
    Pending,
    /// Executing.
    Running,
    /// Paused by an operator.
    Paused,
    /// Waiting on an approval.
    WaitingApproval,
    /// Waiting on a clarification.
    WaitingInput,
    /// Waiting on an external event.
    WaitingExternal,
    /// Finished successfully.
    Completed,
    /// Finished with an error.
    Failed,
    /// A cancel was accepted while a step was in flight; `cancelled` follows.
    Cancelling,
    /// Cancelled.
    Cancelled,
}

impl RunStatus {
    /// `completed`, `failed` or `cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::WaitingApproval => "waiting-approval",
            Self::WaitingInput => "waiting-input",
            Self::WaitingExternal => "waiting-external",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelling => "cancelling",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Where a node is in its life within one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeStatus {
    /// Not reached yet.
    Idle,
    /// A step task for it has been issued and not yet executed.
    Scheduled,
    /// Started and parked on a timer (`core.delay`).
    Waiting,
    /// Started a child run and waits for it to end (`core.subWorkflow`).
    WaitingChild,
    /// Suspended on an interrupt (approval, clarification, external event, …).
    Suspended,
    /// An activity attempt is executing outside the engine.
    Executing,
    /// An activity attempt failed and the next one waits for its backoff timer.
    Retrying,
    /// Done.
    Completed,
    /// Failed.
    Failed,
    /// Not taken: every incoming edge resolved and none was taken.
    Skipped,
    /// Cancelled while scheduled or waiting.
    Cancelled,
}

/// Per-node state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeState {
    /// Status.
    pub status: NodeStatus,
    /// How many times the node has been activated (steps issued); part of task ids.
    pub activation: u32,
    /// When a waiting node's timer is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<Millis>,
    /// When the node started (for `durationMs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Millis>,
    /// Outputs of the last completion.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub outputs: Map<String, Value>,
    /// The child run this node started, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run_id: Option<String>,
    /// The child's workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_workflow_id: Option<String>,
    /// The child's last known status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_status: Option<RunStatus>,
    /// A `core.dispatch` node working through a `next-worker` decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<DispatchProgress>,
    /// An activity node's current attempt (zero-based) and the request its attempts send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<ActivityProgress>,
    /// A node fanning out to child runs in parallel (`core.dispatch` with `fanOutPolicy:
    /// parallel`, `vendor.trellis.forEach`): its counters. Each child has a record of its own
    /// (a *slot*, keyed [`slot_key`]) while the fan-out runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<FanOutProgress>,
    /// A slot's place in its fan-out's merge order (the order its children ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<u32>,
    /// Why a slot's child did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// How many times a back-edge re-entered this node in the run (kept across the reset
    /// each re-entry makes; bounded by `settings.maxLoopbackIterations`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loopbacks: u32,
}

/// The separator of a fan-out slot's key: `<nodeId>#<index>` (node ids may not contain it).
pub const SLOT_SEPARATOR: char = '#';

/// The key of slot `index` of `node_id`'s fan-out (also the `parentNodeId` its child run
/// records).
pub fn slot_key(node_id: &str, index: u32) -> String {
    format!("{node_id}{SLOT_SEPARATOR}{index}")
}

/// The node and index of a slot key; `None` for a node id.
pub fn parse_slot_key(key: &str) -> Option<(&str, u32)> {
    let (node_id, index) = key.rsplit_once(SLOT_SEPARATOR)?;
    Some((node_id, index.parse().ok()?))
}

/// The counters of a parallel fan-out; the children themselves are slot records, created
/// as slots free (so one commit starts at most `width` children) and removed at the join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FanOutProgress {
    /// How many children the fan-out has.
    pub total: u32,
    /// At most this many run at once.
    pub width: u32,
    /// Children started so far (the next to start is this index).
    pub started: u32,
    /// Children running now.
    pub running: u32,
    /// Children that completed.
    pub completed: u32,
    /// Children that failed.
    pub failed: u32,
    /// Children that were cancelled.
    pub cancelled: u32,
    /// The `runOrchestrator.decided` a dispatch fan-out acts on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<u64>,
}

impl FanOutProgress {
    /// Children that ended, however.
    pub fn ended(&self) -> u32 {
        self.completed + self.failed + self.cancelled
    }
}

/// Where an activity node is in its attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityProgress {
    /// The current attempt (zero-based, `node.started.attempt`).
    pub attempt: u32,
    /// What `Activity::prepare` rendered when the node started.
    pub request: Value,
    /// The last heartbeat's details, for the next attempt to read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<Value>,
}

/// Where a dispatch node is in the decision it acts on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DispatchProgress {
    /// Sequence of the `runOrchestrator.decided` it acts on.
    pub decision: u64,
    /// The worker being run (index into `nextWorkerIds`).
    pub index: usize,
    /// How many workers the decision names.
    pub total: usize,
}

/// A child run started by one of the run's nodes (the snapshot's `childRuns`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildRun {
    /// The child run.
    pub run_id: String,
    /// The node that started it.
    pub node_id: String,
    /// Its workflow.
    pub workflow_id: String,
    /// Its last known status.
    pub status: RunStatus,
}

impl NodeState {
    /// Scheduled, parked on a timer, waiting for a child, or suspended on an interrupt.
    pub fn is_active(&self) -> bool {
        matches!(
            self.status,
            NodeStatus::Scheduled
                | NodeStatus::Waiting
                | NodeStatus::WaitingChild
                | NodeStatus::Suspended
                | NodeStatus::Executing
                | NodeStatus::Retrying
        )
    }
}

/// The parent of a child run (`core.subWorkflow`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentLink {
    /// The parent run.
    pub run_id: String,
    /// The parent's node that started this run.
    pub node_id: String,
    /// How deep this run is nested: 1 for a child of a top-level run.
    #[serde(default = "first_level")]
    pub depth: u32,
    /// The parent's deadline covers this run's: when the parent's run-duration limit runs
    /// out (no later than this run's own) the parent cancels this run, so this run sends no
    /// deadline timer of its own (see [`RunState::deadline_timer`]). Set at creation; a run
    /// created without it (older builds) keeps its own timer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deadline_covered: bool,
}

fn first_level() -> u32 {
    1
}

/// What `:pause` asked to drain before the run stands still.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrainPolicy {
    /// Nothing progresses until `:resume`, not even a timer that fires meanwhile.
    Immediate,
    /// The nodes already executing (a delay's timer, a child run) reach a terminal event
    /// first; nothing new starts, and the run pauses after them.
    DrainCurrentNode,
}

impl DrainPolicy {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Immediate => "immediate",
            Self::DrainCurrentNode => "drain-current-node",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Immediate, Self::DrainCurrentNode].into_iter().find(|policy| policy.as_str() == text)
    }
}

/// An operator pause in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseState {
    /// What may still finish.
    pub drain_policy: DrainPolicy,
    /// The operator's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When.
    pub paused_at: Millis,
}

/// Resolution of one edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EdgeStatus {
    /// Its source has not finished.
    Unresolved,
    /// Its source completed and the condition held.
    Taken,
    /// Its source was skipped, or the condition did not hold.
    NotTaken,
    /// Its source failed (a failure route may take it, see the edge `triggerRule`).
    Failed,
}

/// `{code, message, details?}` as carried by `run.failed`, `node.failed` and the snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunError {
    /// Stable code.
    pub code: String,
    /// Human text.
    pub message: String,
    /// Extra data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl RunError {
    /// A new error without details.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self { code: code.to_owned(), message: message.into(), details: None }
    }
}

/// Who created the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Principal {
    /// Tenant the credential is bound to.
    pub tenant: String,
    /// The credential's subject (API key label).
    pub subject: String,
    /// How the caller authenticated (`api-key`).
    pub key_class: String,
    /// The credential carries the test scope (scripted supervisor plans are honoured for
    /// its runs; the test seams accept it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub test_scope: bool,
}

/// The workflow version a run is pinned to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRef {
    /// Workflow id.
    pub id: String,
    /// Author version label.
    pub version: String,
    /// Content hash of the definition the run executes.
    pub content_hash: String,
    /// Namespace it was found in (the tenant's, or the global bundled one).
    pub namespace: String,
}

/// Limits in force for one run, fixed at creation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunLimits {
    /// Node executions allowed (`min(recursionLimit, maxNodeExecutions)`).
    pub max_node_executions: u32,
    /// Wall-clock budget from `run.started` (`min(runTimeoutMs, maxRunDurationMs)`).
    pub run_duration_ms: u64,
}

/// Everything the engine needs to continue a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunState {
    /// Opaque run id.
    pub run_id: String,
    /// Owning tenant.
    pub tenant: String,
    /// Creator.
    pub principal: Principal,
    /// Pinned workflow.
    pub workflow: WorkflowRef,
    /// Lifecycle status.
    pub status: RunStatus,
    /// Optimistic-concurrency version, +1 per commit.
    pub version: u64,
    /// The version whose commit set the current status (stores that index runs by status
    /// rewrite their index entry only when it equals `version`).
    #[serde(default)]
    pub status_version: u64,
    /// Sequence the next event gets.
    pub next_sequence: u64,
    /// Caller inputs folded over variable defaults, as seeded.
    pub inputs: Map<String, Value>,
    /// The variable bag: seeded inputs plus node outputs.
    pub variables: Map<String, Value>,
    /// Per-node state by node id.
    pub nodes: BTreeMap<String, NodeState>,
    /// Per-edge resolution, in definition order.
    pub edges: Vec<EdgeStatus>,
    /// `node.started` count so far.
    pub node_executions: u32,
    /// Limits in force.
    pub limits: RunLimits,
    /// When the run was accepted.
    pub created_at: Millis,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Millis>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Millis>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// The reason given with an accepted cancel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<String>,
    /// Caller-supplied `configurable`, echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configurable: Option<Value>,
    /// Caller-supplied tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Caller-supplied metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Caller-supplied scope id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope_id: Option<String>,
    /// Where an external-event interrupt of this run notifies its worker (create's
    /// `callbackUrl`; see `docs/callbacks.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// The parent, when this is a child run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// Every interrupt occurrence of the run, pending and closed, in request order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interrupts: Vec<InterruptRecord>,
    /// The operator pause in force, while `paused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseState>,
    /// A `drain-current-node` pause asked for while a node was executing: the run stays
    /// `running` until no node executes any more, then pauses (`run.paused` after the node's
    /// terminal event). Withdrawn by `:resume`, dropped when the run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_pause: Option<PauseState>,
    /// The supervisor's identity and decisions, once one has decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestrator: Option<OrchestratorState>,
    /// Every child run the run's nodes started one at a time, in order (the children of a
    /// parallel fan-out are its slot records, counted in `children_started`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_runs: Vec<ChildRun>,
    /// How many child runs the run's nodes started, of every kind (`settings.maxChildRuns`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub children_started: u32,
    /// Capabilities switched off (by the test seam) when the run was created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled_capabilities: Vec<String>,
    /// The outputs of a completed run (as on `run.completed`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub outputs: Map<String, Value>,
    /// Scripted supervisor plans are honoured: a workflow of the global namespace, or a run
    /// created by a test-scope key on a host with its test seams on (children inherit it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mocks_allowed: bool,
    /// What the run's model calls cost so far (and, with a budget, what it allows).
    #[serde(default, skip_serializing_if = "crate::ai::AiState::is_empty")]
    pub ai: crate::ai::AiState,
    /// The source this run was forked from (`:fork`, `:redrive`; children of a fork too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::replay::ReplayLink>,
    /// How long the run is kept after it ends (`settings.retention`, or the host's default;
    /// `None`: kept until deleted). Fixed at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<u64>,
    /// The run a rerun takes its cacheable results from (`:rerun` with `useCache`; its
    /// children too, see [`crate::cache`]). Fixed at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::cache::CacheLink>,
    /// The run's blobs (its values stored apart, see [`crate::blob`]): size by reference.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub blobs: crate::blob::BlobIndex,
}

/// What one commit changed in a run's state besides its header (every field but `nodes`,
/// `edges` and `variables`, which a commit always rewrites): the engine records each node,
/// edge and variable it touches, so a store that keeps them as separate records writes only
/// those — a step's cost does not grow with the workflow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Everything changed (a new run, or a caller that did not track): write it all.
    pub all: bool,
    /// Node ids whose state was touched.
    pub nodes: BTreeSet<String>,
    /// Edge indices whose resolution was touched.
    pub edges: BTreeSet<usize>,
    /// Variable names set or removed.
    pub variables: BTreeSet<String>,
}

impl Changes {
    /// Everything.
    pub fn all() -> Self {
        Self { all: true, ..Self::default() }
    }

    /// Adds `other`'s changes (consecutive steps committed together).
    pub fn merge(&mut self, other: Changes) {
        self.all |= other.all;
        self.nodes.extend(other.nodes);
        self.edges.extend(other.edges);
        self.variables.extend(other.variables);
    }
}

impl RunState {
    /// A copy of everything but the per-node, per-edge and variable records (left empty):
    /// what the engine keeps to undo a transition it does not apply, and the header a store
    /// that keeps those records apart writes.
    pub fn header(&self) -> RunState {
        RunState {
            run_id: self.run_id.clone(),
            tenant: self.tenant.clone(),
            principal: self.principal.clone(),
            workflow: self.workflow.clone(),
            status: self.status,
            version: self.version,
            status_version: self.status_version,
            next_sequence: self.next_sequence,
            inputs: self.inputs.clone(),
            variables: Map::new(),
            nodes: BTreeMap::new(),
            edges: Vec::new(),
            node_executions: self.node_executions,
            limits: self.limits.clone(),
            created_at: self.created_at,
            started_at: self.started_at,
            ended_at: self.ended_at,
            error: self.error.clone(),
            cancel_reason: self.cancel_reason.clone(),
            configurable: self.configurable.clone(),
            tags: self.tags.clone(),
            metadata: self.metadata.clone(),
            scope_id: self.scope_id.clone(),
            callback_url: self.callback_url.clone(),
            parent: self.parent.clone(),
            interrupts: self.interrupts.clone(),
            pause: self.pause.clone(),
            pending_pause: self.pending_pause.clone(),
            orchestrator: self.orchestrator.clone(),
            child_runs: self.child_runs.clone(),
            children_started: self.children_started,
            disabled_capabilities: self.disabled_capabilities.clone(),
            outputs: self.outputs.clone(),
            mocks_allowed: self.mocks_allowed,
            ai: self.ai.clone(),
            replay: self.replay.clone(),
            retention_ms: self.retention_ms,
            cache: self.cache.clone(),
            blobs: self.blobs.clone(),
        }
    }

    /// When the run's retention ran out, if it has by `now`: it ended and was kept its
    /// `retention_ms` since. Such a run reads as gone and is removed by the next sweep.
    /// A child run never expires on its own: it goes with its parent.
    pub fn expired_at(&self, now: Millis) -> Option<Millis> {
        let until = self.retains_until()?;
        (until <= now).then_some(until)
    }

    /// Until when the run is kept: its end plus its retention (a top-level run that ended
    /// and has one).
    pub fn retains_until(&self) -> Option<Millis> {
        if self.parent.is_some() {
            return None;
        }
        self.ended_at?.checked_add(self.retention_ms?)
    }

    /// The node the run waits at (the snapshot's `currentNodeId`): the one holding a pending
    /// interrupt first, else one waiting for a child, parked on a timer, or scheduled.
    pub fn current_node(&self) -> Option<&str> {
        if let Some(record) = self.pending_interrupt() {
            return Some(record.node_id.as_str());
        }
        self.nodes
            .iter()
            .find(|(_, node)| {
                matches!(
                    node.status,
                    NodeStatus::Waiting
                        | NodeStatus::WaitingChild
                        | NodeStatus::Scheduled
                        | NodeStatus::Executing
                        | NodeStatus::Retrying
                )
            })
            .map(|(id, _)| id.as_str())
    }

    /// The first pending interrupt, if any.
    pub fn pending_interrupt(&self) -> Option<&InterruptRecord> {
        self.interrupts.iter().find(|record| record.is_pending())
    }

    /// When the run's duration limit runs out: its start plus `limits.run_duration_ms`
    /// (`None` before it started).
    pub fn deadline(&self) -> Option<Millis> {
        self.started_at.map(|started| started.saturating_add(self.limits.run_duration_ms))
    }

    /// When the run's own deadline timer is due: its [`RunState::deadline`], unless its
    /// parent's deadline covers it ([`ParentLink::deadline_covered`]) and it has no timer.
    pub fn deadline_timer(&self) -> Option<Millis> {
        if self.parent.as_ref().is_some_and(|parent| parent.deadline_covered) {
            return None;
        }
        self.deadline()
    }
}

/// Whether a counter is zero (serde's `skip_serializing_if`).
pub(crate) fn is_zero(value: &u32) -> bool {
    *value == 0
}
