//! The engine: a pure function from `(workflow, state, input, now)` to a new state, the
//! events to append and the effects that must follow. No I/O, no clock it is not given, no
//! randomness. The store commits state, events and effects atomically; the worker turns
//! effects into tasks and feeds tasks back in as inputs.
//!
//! [`transitions`] holds the run lifecycle table; [`progress`] the node execution and
//! graph propagation it calls; `pause` how a `drain-current-node` pause drains.

mod activity;
mod agent;
mod agent_loop;
mod budget;
mod control;
mod fanout;
mod journal;
mod loopback;
mod orchestration;
mod pause;
mod progress;
pub mod supervisor_model;
pub mod transitions;

use serde::{Deserialize, Serialize};

use crate::event::RunEvent;
use crate::interrupt::{Refusal, Resolution};
use crate::run::{DrainPolicy, NodeStatus, RunState, RunStatus};
use crate::timefmt::Millis;

pub use activity::{activity_call, ACTIVITY_HEARTBEAT};
pub use agent_loop::{tool_inputs as agent_tool_inputs, MAX_RESULT_CHARS as AGENT_MAX_RESULT_CHARS};
pub use fanout::{
    is_fan_out_record, DECISION_SUPERSEDED, DEFAULT_MAX_CHILD_RUNS, DISPATCH_FAN_OUT, DISPATCH_JOIN, JOIN_DECIDED,
    LOOP_FINISHED, LOOP_ITEM_FINISHED, LOOP_ITEM_STARTED, LOOP_STARTED, MAX_CHILDREN, MAX_CHILD_RUNS_CEILING,
    MAX_JOIN_BYTES, MAX_WIDTH,
};
pub use orchestration::{
    child_inputs, ASK_USER_QUESTION, ASK_USER_VARIABLE, CONFIDENCE_ESCALATED, CONFIDENCE_FLOOR,
    DEFAULT_ESCALATION_THRESHOLD, DISPATCH_TYPE_ID, MAX_FAN_OUT,
};
pub use progress::{cancels_its_child, child_run_id, counterpart_child_id, PARENT_CANCELLED};
pub use transitions::apply;

/// The engine version stamped on `run.started` and snapshots.
pub const ENGINE_VERSION: &str = "trellis-1";

/// Something that happened to a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The run was accepted: emit `run.started` and schedule the entry node.
    Start,
    /// A step task for a node is due.
    Step {
        /// The node.
        node_id: String,
        /// The activation the task was issued for.
        activation: u32,
    },
    /// A parked node's timer fired.
    Wake {
        /// The node.
        node_id: String,
        /// The activation the timer was set for.
        activation: u32,
    },
    /// The run's duration budget ran out.
    Deadline,
    /// A child run started by a node ended.
    ChildFinished {
        /// The parent's node.
        node_id: String,
        /// The child run.
        child_run_id: String,
        /// Its terminal status.
        status: RunStatus,
        /// Its variables at the end.
        variables: serde_json::Map<String, serde_json::Value>,
        /// Why it could not run or failed, when it did not complete.
        error: Option<crate::run::RunError>,
    },
    /// A task could not be processed on its last allowed delivery (serverless queues).
    DeliveryExhausted {
        /// The task's id.
        task_id: String,
    },
    /// The run's store refused a commit as too large, even with every value over 4 KiB
    /// stored apart (see `crate::blob`): the run fails with `payload_too_large`.
    Unstorable {
        /// What the store said.
        reason: String,
    },
    /// An operator asked to cancel.
    Cancel {
        /// Free-text reason.
        reason: Option<String>,
    },
    /// A child run started by a node changed status without ending (it suspended on an
    /// interrupt, or resumed): the parent mirrors a waiting child.
    ChildStatus {
        /// The parent's node.
        node_id: String,
        /// The child run.
        child_run_id: String,
        /// Its status now.
        status: RunStatus,
    },
    /// Someone resolves (or votes on) an interrupt.
    Resolve(Resolution),
    /// An operator asked to pause.
    Pause {
        /// Free-text reason.
        reason: Option<String>,
        /// What may still finish.
        drain_policy: DrainPolicy,
    },
    /// An operator asked to resume a paused run.
    Resume {
        /// Free-text reason.
        reason: Option<String>,
    },
    /// Run variables set from outside the run (the test seam).
    SetVariables {
        /// Name → value.
        variables: serde_json::Map<String, serde_json::Value>,
    },
    /// One provider invocation's usage reported from outside the run (the test seam
    /// `emit-provider-usage`): one `provider.usage`, rolled into the run's cost.
    RecordUsage {
        /// The node it is attributed to.
        node_id: Option<String>,
        /// The event's payload (the closed `providerUsage` shape, already checked).
        payload: serde_json::Value,
        /// Its figures.
        usage: crate::ai::usage::ProviderUsage,
        /// The sequence of the event that caused it (an event of this run).
        causation: Option<u64>,
    },
    /// An activity attempt ended (its executor returned, or the worker's bound ran out).
    ActivityFinished {
        /// The node.
        node_id: String,
        /// Its activation.
        activation: u32,
        /// The attempt (zero-based).
        attempt: u32,
        /// Outputs, or why it failed.
        result: crate::activity::ActivityResult,
    },
    /// An executing attempt reported progress (a heartbeat or a streamed chunk).
    ActivityProgress {
        /// The node.
        node_id: String,
        /// Its activation.
        activation: u32,
        /// The attempt (zero-based).
        attempt: u32,
        /// What it reported.
        progress: crate::activity::Progress,
    },
    /// An activity's backoff timer fired: start the next attempt.
    RetryDue {
        /// The node.
        node_id: String,
        /// Its activation.
        activation: u32,
        /// The attempt to start.
        attempt: u32,
    },
}

/// Work that must follow a commit. Each effect becomes one task with a deterministic id,
/// so issuing it twice is harmless.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Effect {
    /// Execute `node_id` (activation `activation`) at `due_at`.
    #[serde(rename_all = "camelCase")]
    Step {
        /// The node.
        node_id: String,
        /// Its activation.
        activation: u32,
        /// When.
        due_at: Millis,
    },
    /// Wake the parked `node_id` at `due_at`.
    #[serde(rename_all = "camelCase")]
    Wake {
        /// The node.
        node_id: String,
        /// Its activation.
        activation: u32,
        /// When.
        due_at: Millis,
    },
    /// Execute attempt `attempt` of the activity node `node_id` (outside the engine).
    #[serde(rename_all = "camelCase")]
    Execute {
        /// The node.
        node_id: String,
        /// Its activation.
        activation: u32,
        /// The attempt (zero-based).
        attempt: u32,
        /// When.
        due_at: Millis,
    },
    /// Start attempt `attempt` of `node_id` after its backoff, at `due_at`.
    #[serde(rename_all = "camelCase")]
    Retry {
        /// The node.
        node_id: String,
        /// Its activation.
        activation: u32,
        /// The attempt to start.
        attempt: u32,
        /// When.
        due_at: Millis,
    },
    /// Enforce the run-duration limit at `due_at`.
    #[serde(rename_all = "camelCase")]
    Deadline {
        /// When.
        due_at: Millis,
    },
    /// Create the child run `child_run_id` of `workflow_id` for `node_id`, if the node still
    /// waits for it.
    #[serde(rename_all = "camelCase")]
    StartChild {
        /// The parent's node.
        node_id: String,
        /// Its activation.
        activation: u32,
        /// The child's deterministic id.
        child_run_id: String,
        /// The child's workflow.
        workflow_id: String,
        /// When.
        due_at: Millis,
    },
    /// Cancel the child run: the parent was cancelled (`reason` unset: the child's
    /// `run.cancelled` says `parent-cancelled`), or a fan-out's join no longer needs it
    /// (`join-decided`).
    #[serde(rename_all = "camelCase")]
    CancelChild {
        /// The child run.
        child_run_id: String,
        /// The reason the child is cancelled with, when not [`PARENT_CANCELLED`] (tasks written
        /// before it existed have none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// When.
        due_at: Millis,
    },
    /// Notify the external worker of the pending external-event occurrence `interrupt_id` at
    /// `node_id` (a POST with its signed token; see [`crate::interrupt::callback`]). Nothing
    /// when the occurrence is no longer pending.
    #[serde(rename_all = "camelCase")]
    NotifyWorker {
        /// The suspended node.
        node_id: String,
        /// The occurrence.
        interrupt_id: String,
        /// When.
        due_at: Millis,
    },
    /// POST event `sequence` of this run to webhook subscription `webhook_id` (see
    /// [`crate::webhook`]): added by the commit loop, not the engine, for each subscription
    /// that wants an event the commit appends.
    #[serde(rename_all = "camelCase")]
    DeliverWebhook {
        /// The subscription.
        webhook_id: String,
        /// The event.
        sequence: u64,
        /// When.
        due_at: Millis,
    },
    /// Publish events `sequences` of this run to the host's event bus (see [`crate::bus`]):
    /// added by the commit loop, not the engine, for the events of a commit in the
    /// published lifecycle set.
    #[serde(rename_all = "camelCase")]
    PublishEvents {
        /// The events (one commit's, in order).
        sequences: Vec<u64>,
        /// When.
        due_at: Millis,
    },
    /// Tell the parent that this child run ended, suspended or resumed (the parent reads
    /// the child's state when the notice arrives).
    #[serde(rename_all = "camelCase")]
    NotifyParent {
        /// The parent run.
        parent_run_id: String,
        /// The parent's node.
        parent_node_id: String,
        /// The child's version before the commit that issued the notice (one notice per
        /// commit, so FIFO deduplication never swallows a later one).
        #[serde(default)]
        at_version: u64,
        /// When.
        due_at: Millis,
    },
}

impl Effect {
    /// When the task is due.
    pub fn due_at(&self) -> Millis {
        match self {
            Self::Step { due_at, .. }
            | Self::Wake { due_at, .. }
            | Self::Execute { due_at, .. }
            | Self::Retry { due_at, .. }
            | Self::Deadline { due_at }
            | Self::StartChild { due_at, .. }
            | Self::CancelChild { due_at, .. }
            | Self::NotifyWorker { due_at, .. }
            | Self::DeliverWebhook { due_at, .. }
            | Self::PublishEvents { due_at, .. }
            | Self::NotifyParent { due_at, .. } => *due_at,
        }
    }

    /// The same effect, due at `at`.
    pub fn due(mut self, at: Millis) -> Self {
        match &mut self {
            Self::Step { due_at, .. }
            | Self::Wake { due_at, .. }
            | Self::Execute { due_at, .. }
            | Self::Retry { due_at, .. }
            | Self::Deadline { due_at }
            | Self::StartChild { due_at, .. }
            | Self::CancelChild { due_at, .. }
            | Self::NotifyWorker { due_at, .. }
            | Self::DeliverWebhook { due_at, .. }
            | Self::PublishEvents { due_at, .. }
            | Self::NotifyParent { due_at, .. } => *due_at = at,
        }
        self
    }

    /// Whether this effect is a notice to a parent run (the serverless completion queue
    /// carries these; everything else goes to the step queue).
    pub fn is_parent_notice(&self) -> bool {
        matches!(self, Self::NotifyParent { .. })
    }

    /// A deterministic task id for this effect of `run_id`.
    pub fn task_id(&self, run_id: &str) -> String {
        match self {
            Self::Step { node_id, activation, .. } => format!("{run_id}/step/{node_id}/{activation}"),
            Self::Wake { node_id, activation, .. } => format!("{run_id}/wake/{node_id}/{activation}"),
            Self::Execute { node_id, activation, attempt, .. } => {
                format!("{run_id}/execute/{node_id}/{activation}/{attempt}")
            }
            Self::Retry { node_id, activation, attempt, .. } => {
                format!("{run_id}/retry/{node_id}/{activation}/{attempt}")
            }
            Self::Deadline { .. } => format!("{run_id}/deadline"),
            Self::StartChild { node_id, activation, .. } => format!("{run_id}/start-child/{node_id}/{activation}"),
            Self::CancelChild { child_run_id, .. } => format!("{run_id}/cancel-child/{child_run_id}"),
            Self::NotifyParent { at_version, .. } => format!("{run_id}/notify-parent/{at_version}"),
            Self::DeliverWebhook { webhook_id, sequence, .. } => format!("{run_id}/webhook/{webhook_id}/{sequence}"),
            Self::NotifyWorker { interrupt_id, .. } => format!("{run_id}/notify-worker/{interrupt_id}"),
            Self::PublishEvents { sequences, .. } => {
                format!("{run_id}/publish/{}", sequences.first().copied().unwrap_or_default())
            }
        }
    }

    /// The input this effect feeds back into its own run when its task runs; `None` for the
    /// effects that act on another run (child creation, cancel and notices), for `Execute`,
    /// whose input is the executor's outcome, and for `NotifyWorker`, `DeliverWebhook` and
    /// `PublishEvents`, which only send.
    pub fn input(&self) -> Option<Input> {
        match self {
            Self::Step { node_id, activation, .. } => {
                Some(Input::Step { node_id: node_id.clone(), activation: *activation })
            }
            Self::Wake { node_id, activation, .. } => {
                Some(Input::Wake { node_id: node_id.clone(), activation: *activation })
            }
            Self::Retry { node_id, activation, attempt, .. } => {
                Some(Input::RetryDue { node_id: node_id.clone(), activation: *activation, attempt: *attempt })
            }
            Self::Deadline { .. } => Some(Input::Deadline),
            Self::Execute { .. }
            | Self::StartChild { .. }
            | Self::CancelChild { .. }
            | Self::NotifyParent { .. }
            | Self::NotifyWorker { .. }
            | Self::DeliverWebhook { .. }
            | Self::PublishEvents { .. } => None,
        }
    }

    /// Whether this effect's task does outbound I/O (an activity attempt, a worker's notify, a
    /// webhook delivery, a publish to the bus): such tasks run beside the run's other tasks,
    /// each on its own.
    pub fn is_outbound_io(&self) -> bool {
        matches!(
            self,
            Self::Execute { .. } | Self::NotifyWorker { .. } | Self::DeliverWebhook { .. } | Self::PublishEvents { .. }
        )
    }
}

/// What the engine decided about an input.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The state changed: commit it with the events and effects.
    Applied,
    /// A late or duplicate input with nothing to do (e.g. any input to a terminal run).
    Ignored(&'static str),
    /// A redelivered task whose node already moved on: re-issue the outstanding effects.
    Stale,
    /// Not now (the run is paused or parked): keep the task and try again later.
    Later,
    /// An operator's request that the run's state does not allow (an interrupt that cannot
    /// be resolved, a pause of a run that is not running): nothing changes.
    Refused(Refusal),
}

/// The result of [`apply`].
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// What happened.
    pub verdict: Verdict,
    /// Events to append, with their sequences assigned.
    pub events: Vec<RunEvent>,
    /// Effects to issue.
    pub effects: Vec<Effect>,
    /// The nodes, edges and variables the input touched (empty unless applied).
    pub changes: crate::run::Changes,
}

/// The effects a run still needs, derived from its state alone: a step for every scheduled
/// node, a timer for every parked node, the deadline timer while it is live (unless its
/// parent's deadline covers it, see [`RunState::deadline_timer`]). Re-issuing them is how
/// a redelivered task repairs a crash between commit and send.
pub fn outstanding_effects(state: &RunState) -> Vec<Effect> {
    if state.status.is_terminal() || state.status == RunStatus::Pending {
        return Vec::new();
    }
    let mut effects: Vec<Effect> = state
        .nodes
        .iter()
        .filter_map(|(node_id, node)| match node.status {
            NodeStatus::Scheduled => Some(Effect::Step {
                node_id: node_id.clone(),
                activation: node.activation,
                due_at: state.started_at.unwrap_or(state.created_at),
            }),
            NodeStatus::Waiting | NodeStatus::Suspended if node.wake_at.is_some() => Some(Effect::Wake {
                node_id: node_id.clone(),
                activation: node.activation,
                due_at: node.wake_at.unwrap_or_default(),
            }),
            NodeStatus::Executing => node.activity.as_ref().map(|activity| Effect::Execute {
                node_id: node_id.clone(),
                activation: node.activation,
                attempt: activity.attempt,
                due_at: state.started_at.unwrap_or(state.created_at),
            }),
            NodeStatus::Retrying => node.activity.as_ref().map(|activity| Effect::Retry {
                node_id: node_id.clone(),
                activation: node.activation,
                attempt: activity.attempt,
                due_at: node.wake_at.unwrap_or_default(),
            }),
            NodeStatus::WaitingChild => node.child_run_id.as_ref().and_then(|child_run_id| {
                let workflow_id = node.child_workflow_id.clone()?;
                Some(Effect::StartChild {
                    node_id: node_id.clone(),
                    activation: node.activation,
                    child_run_id: child_run_id.clone(),
                    workflow_id,
                    due_at: state.started_at.unwrap_or(state.created_at),
                })
            }),
            _ => None,
        })
        .collect();
    if let Some(due_at) = state.deadline_timer() {
        effects.push(Effect::Deadline { due_at });
    }
    effects
}

#[cfg(test)]
mod activity_tests;
#[cfg(test)]
mod agent_loop_tests;
#[cfg(test)]
mod agent_tests;
#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod callback_tests;
#[cfg(test)]
mod control_tests;
#[cfg(test)]
mod deadline_tests;
#[cfg(test)]
mod decision_paths_tests;
#[cfg(test)]
mod fanout_review_tests;
#[cfg(test)]
mod fanout_tests;
#[cfg(test)]
mod loopback_tests;
#[cfg(test)]
mod orchestration_tests;
#[cfg(test)]
mod pause_tests;
#[cfg(test)]
mod requires_tests;
#[cfg(test)]
mod tests;
