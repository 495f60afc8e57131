//! Entries of a run's append-only event log. Stored without a rendered run id; the HTTP
//! layer renders the OpenWOP `RunEventDoc` (`eventId, runId, type, payload, timestamp,
//! sequence, nodeId?`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::timefmt::Millis;

/// Event types this host emits. Protocol-owned names only; host-specific events would use
/// the vendor prefix `trellis.<family>.<name>` (see [`vendor_type`]).
pub mod types {
    /// First event of every run, written by the create commit.
    pub const RUN_STARTED: &str = "run.started";
    /// Terminal: success.
    pub const RUN_COMPLETED: &str = "run.completed";
    /// Terminal: failure.
    pub const RUN_FAILED: &str = "run.failed";
    /// Terminal: cancelled.
    pub const RUN_CANCELLED: &str = "run.cancelled";
    /// A node began executing.
    pub const NODE_STARTED: &str = "node.started";
    /// A node finished.
    pub const NODE_COMPLETED: &str = "node.completed";
    /// A node failed.
    pub const NODE_FAILED: &str = "node.failed";
    /// A node was not taken.
    pub const NODE_SKIPPED: &str = "node.skipped";
    /// An activity attempt failed and another one follows after `delayMs` (debug mode).
    pub const NODE_RETRIED: &str = "node.retried";
    /// A piece of streamed output of an executing node.
    pub const OUTPUT_CHUNK: &str = "output.chunk";
    /// One provider invocation's token and cost figures (RFC 0026), before the node's
    /// `node.completed`.
    pub const PROVIDER_USAGE: &str = "provider.usage";
    /// A node started a child run.
    pub const NODE_DISPATCHED: &str = "node.dispatched";
    /// A scheduled or waiting node was cancelled.
    pub const NODE_CANCELLED: &str = "node.cancelled";
    /// A limit was breached.
    pub const CAP_BREACHED: &str = "cap.breached";
    /// A node suspended on an interrupt.
    pub const NODE_SUSPENDED: &str = "node.suspended";
    /// A suspended node got its resume value.
    pub const NODE_RESUMED: &str = "node.resumed";
    /// An interrupt was requested (payload: the `InterruptPayload`).
    pub const INTERRUPT_REQUESTED: &str = "interrupt.requested";
    /// An interrupt was resolved (or timed out).
    pub const INTERRUPT_RESOLVED: &str = "interrupt.resolved";
    /// Legacy companion of an approval interrupt.
    pub const APPROVAL_REQUESTED: &str = "approval.requested";
    /// One approval decision (a vote, the closing decision, or a timeout).
    pub const APPROVAL_RECEIVED: &str = "approval.received";
    /// Legacy companion of a clarification interrupt.
    pub const CLARIFICATION_REQUESTED: &str = "clarification.requested";
    /// The answers of a clarification.
    pub const CLARIFICATION_RESOLVED: &str = "clarification.resolved";
    /// An operator paused the run.
    pub const RUN_PAUSED: &str = "run.paused";
    /// An operator resumed the run.
    pub const RUN_RESUMED: &str = "run.resumed";
    /// A supervisor's decision, recorded before anything acts on it.
    pub const RUN_ORCHESTRATOR_DECIDED: &str = "runOrchestrator.decided";
    /// A run variable was set from outside the run (the test seam).
    pub const VARIABLE_CHANGED: &str = "variable.changed";
    /// A chunk of an agent's reasoning while the block is open (RFC 0024).
    pub const AGENT_REASONING_DELTA: &str = "agent.reasoning.delta";
    /// An agent's reasoning (the closing, authoritative text).
    pub const AGENT_REASONED: &str = "agent.reasoned";
    /// An agent invoked a tool.
    pub const AGENT_TOOL_CALLED: &str = "agent.toolCalled";
    /// A tool an agent invoked returned (caused by its `agent.toolCalled`).
    pub const AGENT_TOOL_RETURNED: &str = "agent.toolReturned";
    /// Control passed from one agent to another.
    pub const AGENT_HANDOFF: &str = "agent.handoff";
    /// An agent's typed decision, with its confidence.
    pub const AGENT_DECIDED: &str = "agent.decided";
    /// A back-edge would re-enter its target more than `settings.maxLoopbackIterations`
    /// times: `{nodeId, iterations, limit}`; the edge's source fails.
    pub const WORKFLOW_LOOPBACK_LIMIT: &str = "workflow.loopback-limit";

    /// Every event type above (what a webhook subscription may name exactly).
    pub const ALL: &[&str] = &[
        RUN_STARTED,
        RUN_COMPLETED,
        RUN_FAILED,
        RUN_CANCELLED,
        NODE_STARTED,
        NODE_COMPLETED,
        NODE_FAILED,
        NODE_SKIPPED,
        NODE_RETRIED,
        OUTPUT_CHUNK,
        PROVIDER_USAGE,
        NODE_DISPATCHED,
        NODE_CANCELLED,
        CAP_BREACHED,
        NODE_SUSPENDED,
        NODE_RESUMED,
        INTERRUPT_REQUESTED,
        INTERRUPT_RESOLVED,
        APPROVAL_REQUESTED,
        APPROVAL_RECEIVED,
        CLARIFICATION_REQUESTED,
        CLARIFICATION_RESOLVED,
        RUN_PAUSED,
        RUN_RESUMED,
        RUN_ORCHESTRATOR_DECIDED,
        VARIABLE_CHANGED,
        AGENT_REASONING_DELTA,
        AGENT_REASONED,
        AGENT_TOOL_CALLED,
        AGENT_TOOL_RETURNED,
        AGENT_HANDOFF,
        AGENT_DECIDED,
        WORKFLOW_LOOPBACK_LIMIT,
    ];

    /// Whether `event_type` ends a run.
    pub fn is_terminal(event_type: &str) -> bool {
        matches!(event_type, RUN_COMPLETED | RUN_FAILED | RUN_CANCELLED)
    }
}

/// Builds a vendor event type under Trellis's prefix: `trellis.<family>.<name>`.
pub fn vendor_type(family: &str, name: &str) -> String {
    format!("trellis.{family}.{name}")
}

/// One stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEvent {
    /// 0, 1, 2, … per run, contiguous.
    pub sequence: u64,
    /// Dotted event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Node for node-scoped events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Type-specific payload (always present).
    pub payload: Value,
    /// When it happened.
    pub timestamp: Millis,
    /// The sequence of the event that caused it (rendered as `causationId`): a dispatch
    /// node's events point at the `runOrchestrator.decided` they act on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation: Option<u64>,
}
