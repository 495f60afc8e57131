//! The suspending kinds: `core.approvalGate`, `core.clarificationGate` and `core.interrupt`.
//! Each builds its interrupt from config ([`crate::interrupt::request`]) and suspends; the
//! engine records the occurrence, emits its events and resumes the node when it resolves.

use serde_json::{Map, Value};

use super::{NodeContext, NodeKind, NodeOutcome};
use crate::interrupt::request::{self, ConfigIssue, InterruptRequest};
use crate::run::RunError;

/// `core.approvalGate`.
pub(super) struct ApprovalGate;
/// `core.clarificationGate`.
pub(super) struct ClarificationGate;
/// `core.interrupt`.
pub(super) struct Interrupt;

fn suspend(built: Result<InterruptRequest, ConfigIssue>) -> NodeOutcome {
    match built {
        Ok(request) => NodeOutcome::Suspend(request),
        Err(ConfigIssue::Invalid(message)) => NodeOutcome::Failed(RunError::new("validation_error", message)),
        Err(ConfigIssue::Capability(capability)) => NodeOutcome::Failed(RunError::new(
            "capability_required",
            format!("this interrupt kind needs `{capability}`, which this host does not advertise"),
        )),
    }
}

fn checked(built: Result<InterruptRequest, ConfigIssue>) -> Result<(), ConfigIssue> {
    built.map(|_| ())
}

impl NodeKind for ApprovalGate {
    fn type_id(&self) -> &'static str {
        "core.approvalGate"
    }

    fn check(&self, node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        checked(request::approval_gate(node_id, config))
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        suspend(request::approval_gate(context.node_id, context.config))
    }
}

impl NodeKind for ClarificationGate {
    fn type_id(&self) -> &'static str {
        "core.clarificationGate"
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        checked(request::clarification_gate(config))
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        suspend(request::clarification_gate(context.config))
    }
}

impl NodeKind for Interrupt {
    fn type_id(&self) -> &'static str {
        "core.interrupt"
    }

    fn check(&self, node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        let built = request::interrupt_node(node_id, config)?;
        match &built.resume_schema {
            Some(schema) if !crate::schema::compiles(schema) => {
                Err(ConfigIssue::Invalid("`resumeSchema` is not a valid JSON Schema".into()))
            }
            _ => Ok(()),
        }
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        suspend(request::interrupt_node(context.node_id, context.config))
    }
}
