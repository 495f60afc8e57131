//! Typed errors with stable machine codes. The HTTP layer renders [`ServiceError`] as the
//! canonical OpenWOP envelope `{error, message, details?}`; the codes here are the `error`
//! strings and never change meaning.

use serde_json::{json, Value};

/// Why a workflow definition was refused at load or registration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DefinitionError {
    /// The document does not match `schemas/workflow-definition.schema.json`.
    #[error("the workflow definition does not match the schema {}", first_violation(.violations))]
    Schema {
        /// One entry per schema violation: `{path, message}`.
        violations: Vec<Value>,
    },
    /// Two nodes share an id.
    #[error("node id `{node_id}` is used more than once")]
    DuplicateNode {
        /// The repeated id.
        node_id: String,
    },
    /// An edge names a node that does not exist.
    #[error("edge `{edge_id}` refers to unknown node `{node_id}`")]
    DanglingEdge {
        /// The offending edge.
        edge_id: String,
        /// The node id it names.
        node_id: String,
    },
    /// A cycle not closed by a loop edge (into a `core.orchestrator.supervisor` node) or a
    /// back-edge (an edge with a condition to an earlier node).
    #[error(
        "the graph has a cycle through nodes {nodes:?}; only edges into a core.orchestrator.supervisor node, or an edge \
         with a condition back to an earlier node, may loop"
    )]
    Cycle {
        /// Nodes on (or behind) the cycle.
        nodes: Vec<String>,
    },
    /// A node's config is refused by its kind (e.g. an approval gate with an unknown action).
    #[error("node `{node_id}` has an invalid config: {message}")]
    NodeConfig {
        /// The node.
        node_id: String,
        /// JSON pointer to the node's config, e.g. `/nodes/2/config`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A part of the definition that could never run: an invalid regex, a schema that does not
    /// compile or refers outside itself, a duplicate id, a duration out of range, …
    #[error("{message} (at {path})")]
    Invalid {
        /// JSON pointer to the offending part, e.g. `/nodes/3/config/delayMs`.
        path: String,
        /// The rule: `unique`, `regex`, `schema`, `remote_ref`, `required`, `quorum`, `duration`.
        rule: &'static str,
        /// What is wrong, naming the rule.
        message: String,
    },
    /// A node the entry node cannot reach.
    #[error("node `{node_id}` cannot be reached from the entry node `{entry}`")]
    Unreachable {
        /// The unreachable node.
        node_id: String,
        /// The entry node.
        entry: String,
    },
}

impl DefinitionError {
    /// Structured details for the error envelope.
    pub fn details(&self) -> Value {
        match self {
            Self::Schema { violations } => {
                let path = violations.first().map_or(Value::Null, |first| first["path"].clone());
                json!({ "reason": "schema", "path": path, "violations": violations })
            }
            Self::DuplicateNode { node_id } => json!({ "reason": "duplicate_node", "nodeId": node_id }),
            Self::DanglingEdge { edge_id, node_id } => {
                json!({ "reason": "dangling_edge", "edgeId": edge_id, "nodeId": node_id })
            }
            Self::Cycle { nodes } => json!({ "reason": "cycle", "nodes": nodes }),
            Self::NodeConfig { node_id, path, message } => {
                json!({ "reason": "invalid_node_config", "nodeId": node_id, "path": path, "problem": message })
            }
            Self::Invalid { path, rule, message } => {
                json!({ "reason": "invalid_definition", "path": path, "rule": rule, "problem": message })
            }
            Self::Unreachable { node_id, entry } => {
                json!({ "reason": "unreachable_node", "nodeId": node_id, "entryNodeId": entry })
            }
        }
    }
}

/// The first (most specific) schema violation, described.
fn first_violation(violations: &[Value]) -> String {
    violations.first().map(crate::schema::describe).unwrap_or_default()
}

/// A failure of a storage adapter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The run's version moved since it was read (optimistic concurrency); reload and retry.
    #[error("the run was changed by another writer")]
    Conflict,
    /// The backend could not serve the request right now; retrying may succeed.
    #[error("storage is unavailable: {0}")]
    Unavailable(String),
    /// Stored data could not be decoded; this is a bug or corruption, not retryable.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The write breaks a hard limit of the backend (item or transaction size); retrying
    /// cannot succeed.
    #[error("storage limit exceeded: {0}")]
    LimitExceeded(String),
    /// A commit's new state does not carry the next version (`expected + 1`): a caller bug,
    /// refused before anything is written; retrying cannot succeed.
    #[error("a commit from version {expected} must write version {}, not {found}", .expected + 1)]
    VersionSkip {
        /// The version the commit expected to replace.
        expected: u64,
        /// The version the new state carries.
        found: u64,
    },
}

/// The error of a use case, as callers see it. Each variant has a stable code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServiceError {
    /// The request is malformed; `details` says what is wrong.
    #[error("{message}")]
    Validation {
        /// Human text (never echoes caller input verbatim).
        message: String,
        /// Machine-readable details.
        details: Value,
    },
    /// No run or workflow with that id is visible to the caller.
    #[error("{what} not found")]
    NotFound {
        /// `run` or `workflow`.
        what: &'static str,
    },
    /// The caller lacks a scope or tried to act for another tenant.
    #[error("{message}")]
    Forbidden {
        /// Human text.
        message: String,
        /// Machine-readable details.
        details: Value,
    },
    /// The workflow (or request) needs something this host does not implement.
    #[error("{message}")]
    CapabilityRequired {
        /// Human text.
        message: String,
        /// `{requiredCapability, offendingTypeId?, nodeId?}`.
        details: Value,
    },
    /// The request conflicts with the current state (e.g. an immutable version exists).
    #[error("{message}")]
    Conflict {
        /// Stable code, e.g. `version_conflict`.
        code: &'static str,
        /// Human text.
        message: String,
        /// Machine-readable details.
        details: Value,
    },
    /// A request refused with its own stable code and status (e.g. `403
    /// mock_provider_forbidden`, `400 unsupported_mock_provider`).
    #[error("{message}")]
    Rejected {
        /// The HTTP status (4xx).
        status: u16,
        /// Stable code.
        code: &'static str,
        /// Human text.
        message: String,
        /// Machine-readable details.
        details: Value,
    },
    /// An operator request the run's state refuses: an interrupt that cannot be resolved (or
    /// a resume value it does not accept), a pause or resume in the wrong status.
    #[error("{0}")]
    Refused(crate::interrupt::Refusal),
    /// The same idempotency key was used with a different request body.
    #[error("the Idempotency-Key was already used with a different request")]
    IdempotencyKeyMismatch,
    /// A storage failure the caller may retry.
    #[error("storage is unavailable")]
    Unavailable,
    /// A bug or corrupt data.
    #[error("internal error")]
    Internal,
}

impl ServiceError {
    /// The stable machine code (the envelope's `error`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Validation { .. } => "validation_error",
            Self::NotFound { .. } => "not_found",
            Self::Forbidden { .. } => "forbidden",
            Self::CapabilityRequired { .. } => "capability_required",
            Self::Conflict { code, .. } | Self::Rejected { code, .. } => code,
            Self::Refused(refusal) => refusal.code(),
            Self::IdempotencyKeyMismatch => "idempotency_key_mismatch",
            Self::Unavailable => "service_unavailable",
            Self::Internal => "internal_error",
        }
    }

    /// Shorthand for a validation error.
    pub fn validation(message: impl Into<String>, details: Value) -> Self {
        Self::Validation { message: message.into(), details }
    }
}

impl From<StoreError> for ServiceError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Conflict | StoreError::Unavailable(_) => Self::Unavailable,
            StoreError::Corrupt(_) | StoreError::LimitExceeded(_) | StoreError::VersionSkip { .. } => Self::Internal,
        }
    }
}

impl From<DefinitionError> for ServiceError {
    fn from(error: DefinitionError) -> Self {
        Self::Validation { message: error.to_string(), details: error.details() }
    }
}
