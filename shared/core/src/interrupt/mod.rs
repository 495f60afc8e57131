//! Human-in-the-loop interrupts: what a suspended node waits for, how a resume value is
//! judged, and the signed tokens that resolve an interrupt without a bearer key.
//!
//! - [`request`] builds the `InterruptPayload` (`suspend-request.schema.json`) a node asks
//!   for from its config (`core.approvalGate`, `core.clarificationGate`, `core.interrupt`);
//! - [`resolve`] judges a resume value against a pending interrupt: schema, allowed actions,
//!   correlation, approver list and quorum votes;
//! - [`token`] signs and verifies interrupt tokens (HMAC-SHA256, expiring);
//! - [`callback`] notifies the external worker of an `external-event` interrupt (the run's
//!   `callbackUrl` or the node's `settings.notifyUrl`) and reads its heartbeats and failures.
//!
//! Every occurrence of a suspension is one [`InterruptRecord`] in the run's state, kept after
//! it closes, so a late or stale resolution gets a precise answer (already resolved, gone,
//! cancelled, expired) instead of touching a newer occurrence.

pub mod callback;
pub mod request;
pub mod resolve;
pub mod token;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::run::RunStatus;
use crate::timefmt::Millis;

/// The eight kinds of RFC 0094 §E.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InterruptKind {
    /// An approval gate.
    #[serde(rename = "approval")]
    Approval,
    /// Questions for a person.
    #[serde(rename = "clarification")]
    Clarification,
    /// An external system's callback.
    #[serde(rename = "external-event")]
    ExternalEvent,
    /// Host- or workflow-defined.
    #[serde(rename = "custom")]
    Custom,
    /// Opens a conversation (needs `conversationPrimitive`).
    #[serde(rename = "conversation.start")]
    ConversationStart,
    /// One conversation turn (needs `conversationPrimitive`).
    #[serde(rename = "conversation.exchange")]
    ConversationExchange,
    /// Closes a conversation (needs `conversationPrimitive`).
    #[serde(rename = "conversation.close")]
    ConversationClose,
    /// An agent below its confidence threshold asks for ratification.
    #[serde(rename = "low-confidence")]
    LowConfidence,
}

impl InterruptKind {
    /// Every kind, in the order of the schema's enum.
    pub const ALL: [InterruptKind; 8] = [
        Self::Approval,
        Self::Clarification,
        Self::ExternalEvent,
        Self::Custom,
        Self::ConversationStart,
        Self::ConversationExchange,
        Self::ConversationClose,
        Self::LowConfidence,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::Clarification => "clarification",
            Self::ExternalEvent => "external-event",
            Self::Custom => "custom",
            Self::ConversationStart => "conversation.start",
            Self::ConversationExchange => "conversation.exchange",
            Self::ConversationClose => "conversation.close",
            Self::LowConfidence => "low-confidence",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// The run status while an interrupt of this kind is pending.
    pub fn waiting_status(self) -> RunStatus {
        match self {
            Self::Clarification => RunStatus::WaitingInput,
            Self::ExternalEvent => RunStatus::WaitingExternal,
            _ => RunStatus::WaitingApproval,
        }
    }

    /// The capability a host must advertise to run this kind, when this host does not.
    pub fn unadvertised_capability(self) -> Option<&'static str> {
        match self {
            Self::ConversationStart | Self::ConversationExchange | Self::ConversationClose => {
                Some("conversationPrimitive")
            }
            _ => None,
        }
    }

    /// The kinds this host runs (discovery's `interrupts.supportedKinds`).
    pub fn supported() -> Vec<&'static str> {
        Self::ALL.into_iter().filter(|kind| kind.unadvertised_capability().is_none()).map(Self::as_str).collect()
    }
}

/// The approval actions this host enforces (`ask`, the Q&A side channel, is not served).
pub const APPROVAL_ACTIONS: [&str; 4] = ["accept", "reject", "refine", "edit-accept"];

/// The interrupt profiles this host implements.
pub const PROFILES: [&str; 4] = [
    "openwop-interrupt-quorum",
    "openwop-interrupt-auth-required",
    "openwop-interrupt-external-event",
    "openwop-interrupt-cascade-cancel",
];

/// The profile under which only a bearer key with `approvals:respond` may resolve.
pub const AUTH_REQUIRED_PROFILE: &str = "openwop-interrupt-auth-required";

/// One vote on an approval interrupt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Vote {
    /// Who the vote counts for: the body's `voter`, else the authenticated principal.
    pub voter: String,
    /// The authenticated principal that cast it.
    pub decided_by: String,
    /// `accept`, `edit-accept` or `reject`.
    pub action: String,
    /// When.
    pub at: Millis,
}

/// The counted votes of an approval occurrence. Kept in the run's state instead of the votes
/// themselves, so the state stays the same size however many votes are cast; each vote is
/// stored once, by `(run, occurrence, voter)`, next to the run (see
/// [`crate::ports::RunStore::vote`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VoteTally {
    /// Votes that count toward the quorum (`accept`, `edit-accept`).
    pub accepts: u32,
    /// Rejections.
    pub rejects: u32,
}

/// The vote an `approval.received` event records, when it counts toward the quorum (not a
/// `refine` or a `timeout`): `(interrupt id, vote)`. Stores index exactly these, so a voter's
/// earlier vote is found by key instead of by reading every vote.
pub fn counted_vote(event: &crate::event::RunEvent) -> Option<(String, Vote)> {
    if event.event_type != crate::event::types::APPROVAL_RECEIVED {
        return None;
    }
    let field = |name: &str| event.payload.get(name).and_then(Value::as_str);
    let action = field("action")?;
    if !counts_as_vote(action) {
        return None;
    }
    let vote = Vote {
        voter: field("voter")?.to_owned(),
        decided_by: field("decidedBy")?.to_owned(),
        action: action.to_owned(),
        at: event.timestamp,
    };
    Some((field("interruptId")?.to_owned(), vote))
}

/// Whether an approval action is a vote on the quorum (`refine` reopens, `timeout` is the
/// host's).
pub fn counts_as_vote(action: &str) -> bool {
    !matches!(action, "refine" | "timeout")
}

/// Where an interrupt occurrence is in its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum InterruptState {
    /// Waiting for a resume value.
    Pending,
    /// Resolved with an outcome (`accept`, `reject`, `refine`, `edit-accept`, `answered`,
    /// `received`, `resumed`).
    #[serde(rename_all = "camelCase")]
    Resolved {
        /// The outcome.
        outcome: String,
        /// When.
        at: Millis,
    },
    /// Auto-rejected when `timeoutMs` ran out.
    TimedOut,
    /// The run was cancelled while it was pending; `cascade` when the cancel came from a
    /// parent run.
    Cancelled {
        /// Cancelled by a parent's cascade.
        cascade: bool,
    },
    /// The run ended otherwise (failed elsewhere, timed out) while it was pending.
    Gone,
}

/// One occurrence of a suspension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptRecord {
    /// Engine-assigned id (deterministic per run, node and occurrence).
    pub id: String,
    /// The suspended node.
    pub node_id: String,
    /// 1 for the node's first suspension, 2 after a refine, …
    pub occurrence: u32,
    /// The kind.
    pub kind: InterruptKind,
    /// `runId:nodeId:occurrence`.
    pub key: String,
    /// The kind's data, as in the payload.
    pub data: Value,
    /// JSON Schema the resume value must satisfy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_schema: Option<Value>,
    /// Auto-reject after this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The interrupt profile the node asked for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// When it was requested.
    pub requested_at: Millis,
    /// Votes of a state written before votes were stored apart (store layout ≤ 2): read as
    /// written, never appended to. New votes are stored by key and counted in `tally`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub votes: Vec<Vote>,
    /// The counted votes (absent until the first vote, and in older states).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tally: Option<VoteTally>,
    /// The node's attempt this occurrence belongs to (zero-based; an external-event node
    /// whose worker failed or missed a heartbeat is retried as a new occurrence).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempt: u32,
    /// `settings.timeouts.heartbeatMs` of an external-event node: the longest silence allowed
    /// between the worker's heartbeats (counted from the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_ms: Option<u64>,
    /// When the worker's last accepted heartbeat arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_at: Option<Millis>,
    /// Its state.
    #[serde(flatten)]
    pub state: InterruptState,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

impl InterruptRecord {
    /// Whether it still waits for a resume value.
    pub fn is_pending(&self) -> bool {
        self.state == InterruptState::Pending
    }

    /// When it times out, if it does.
    pub fn deadline(&self) -> Option<Millis> {
        self.timeout_ms.map(|timeout| self.requested_at.saturating_add(timeout))
    }

    /// When the worker's silence fails the attempt, if the node asks for heartbeats: the last
    /// heartbeat (else the request) plus `heartbeatMs`.
    pub fn heartbeat_due(&self) -> Option<Millis> {
        self.heartbeat_ms.map(|ms| self.heartbeat_at.unwrap_or(self.requested_at).saturating_add(ms))
    }

    /// The node's next timer while this occurrence is pending: the earlier of its deadline
    /// and its heartbeat due time.
    pub fn next_timer(&self) -> Option<Millis> {
        match (self.deadline(), self.heartbeat_due()) {
            (Some(deadline), Some(heartbeat)) => Some(deadline.min(heartbeat)),
            (deadline, heartbeat) => deadline.or(heartbeat),
        }
    }

    /// The `InterruptPayload` exactly as `suspend-request.schema.json` defines it (the
    /// `interrupt.requested` payload; identity travels in the event envelope).
    pub fn payload(&self) -> Value {
        let mut payload = json!({ "kind": self.kind.as_str(), "key": self.key, "data": self.data });
        if let Some(schema) = &self.resume_schema {
            payload["resumeSchema"] = schema.clone();
        }
        if let Some(timeout) = self.timeout_ms {
            payload["timeoutMs"] = json!(timeout);
        }
        payload
    }

    /// Votes counted as `(accepts, rejects)`: the tally, or (an older state) its votes.
    pub fn tally(&self) -> (usize, usize) {
        if let Some(tally) = self.tally {
            return (tally.accepts as usize, tally.rejects as usize);
        }
        let accepts = self.votes.iter().filter(|vote| vote.action != "reject").count();
        (accepts, self.votes.len() - accepts)
    }

    /// Whether any vote was cast.
    pub fn has_votes(&self) -> bool {
        self.tally() != (0, 0)
    }
}

/// Who is resolving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolver {
    /// A bearer key with `approvals:respond`; the subject is its principal.
    Principal(String),
    /// The holder of a signed interrupt token.
    Token,
}

impl Resolver {
    /// The identity recorded as `decidedBy` / `resolvedBy`.
    pub fn identity(&self) -> &str {
        match self {
            Self::Principal(subject) => subject,
            Self::Token => "interrupt-token",
        }
    }
}

/// A request to resolve an interrupt.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    /// The suspended node.
    pub node_id: String,
    /// The occurrence a token names; `None` on the run-scoped surface (the pending one).
    pub interrupt_id: Option<String>,
    /// The resume value.
    pub value: Value,
    /// Who.
    pub resolver: Resolver,
    /// The voter's earlier vote on this occurrence, as the store holds it. Filled by the
    /// service before the engine judges (callers leave it `None`).
    pub prior_vote: Option<Vote>,
}

/// Why a resolution (or another operator request) was refused. Each variant has a stable
/// code and HTTP status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// No such interrupt at that node (or the token names none).
    #[error("no interrupt is pending at this node")]
    NotFound,
    /// It was resolved already (the losing side of a race, or a replay).
    #[error("the interrupt was already resolved")]
    AlreadyResolved,
    /// It can no longer be resolved: cancelled by a cascade, superseded by a newer occurrence,
    /// or its run ended.
    #[error("the interrupt is gone: {0}")]
    Gone(&'static str),
    /// The run was cancelled while it was pending.
    #[error("the run was cancelled while the interrupt was pending")]
    Cancelled,
    /// It expired (its timeout or its token's expiry passed).
    #[error("the interrupt has expired")]
    Expired,
    /// The resolver may not resolve it.
    #[error("{0}")]
    Forbidden(String),
    /// The resume value is not acceptable; the interrupt stays pending.
    #[error("{message}")]
    Invalid {
        /// Human text.
        message: String,
        /// Machine-readable details.
        details: Value,
    },
    /// The run is in a status that does not allow the request (pause/resume).
    #[error("the run is {}", .0.as_str())]
    RunState(RunStatus),
}

impl Refusal {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "interrupt_not_found",
            Self::AlreadyResolved => "interrupt_already_resolved",
            Self::Gone(_) => "interrupt_gone",
            Self::Cancelled => "interrupt_cancelled",
            Self::Expired => "interrupt_expired",
            Self::Forbidden(_) => "forbidden",
            Self::Invalid { .. } => "validation_error",
            Self::RunState(_) => "run_state_conflict",
        }
    }

    /// The HTTP status.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::NotFound => 404,
            Self::AlreadyResolved | Self::RunState(_) => 409,
            Self::Gone(_) | Self::Expired => 410,
            Self::Cancelled => 422,
            Self::Forbidden(_) => 403,
            Self::Invalid { .. } => 400,
        }
    }

    /// Envelope details.
    pub fn details(&self) -> Option<Value> {
        match self {
            Self::Invalid { details, .. } => Some(details.clone()),
            Self::RunState(status) => Some(json!({ "runStatus": status.as_str() })),
            Self::Gone(reason) => Some(json!({ "reason": reason })),
            _ => None,
        }
    }

    /// Shorthand for an invalid resume value.
    pub fn invalid(message: impl Into<String>, details: Value) -> Self {
        Self::Invalid { message: message.into(), details }
    }
}

/// How long an interrupt token is valid at most (30 minutes), and never past the
/// interrupt's own timeout. External-event tokens are the exception (see [`token_expiry`]).
pub const TOKEN_LIFETIME_MS: u64 = 30 * 60 * 1000;

/// The expiry of a token minted at `now` for `record`. An `external-event` token (a worker's,
/// see [`callback`]) is valid until the interrupt's own timeout — with none, as long as the
/// occurrence is pending ([`Millis::MAX`]; the run's state refuses it once it closes); other
/// kinds' for 30 minutes and never past the timeout.
pub fn token_expiry(record: &InterruptRecord, now: Millis) -> Millis {
    if record.kind == InterruptKind::ExternalEvent {
        return record.deadline().unwrap_or(Millis::MAX);
    }
    let lifetime = now.saturating_add(TOKEN_LIFETIME_MS);
    record.deadline().map_or(lifetime, |deadline| deadline.min(lifetime))
}
