//! `conformance.requiresMissing`: a conformance node kind that declares the runtime requirement
//! `conformance.never-provided`, which no host provides. Its workflow registers and its run is
//! created (`201`); the engine refuses to execute the node, and the run fails there with
//! `capability_not_provided` (`details.capability`). Any other unknown `typeId` stays a
//! creation-time gap (`422 capability_required`).

use super::{NodeContext, NodeKind, NodeOutcome};
use crate::run::RunError;

/// The runtime capabilities this host provides to nodes (`requires` of a kind is checked
/// against it before the node executes).
pub const PROVIDED_RUNTIME_CAPABILITIES: &[&str] = &[];

/// The `conformance.requiresMissing` kind.
pub(super) struct RequiresMissing;

impl NodeKind for RequiresMissing {
    fn type_id(&self) -> &'static str {
        "conformance.requiresMissing"
    }

    fn requires(&self) -> &'static [&'static str] {
        &["conformance.never-provided"]
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        // Never reached: the engine checks `requires` first. Fail closed all the same.
        NodeOutcome::Failed(not_provided(context.node_id, "conformance.never-provided"))
    }
}

/// The first runtime capability `kind` requires that this host does not provide.
pub fn missing_requirement(kind: &dyn NodeKind) -> Option<&'static str> {
    kind.requires().iter().copied().find(|capability| !PROVIDED_RUNTIME_CAPABILITIES.contains(capability))
}

/// The `capability_not_provided` failure of `node_id`, naming `capability`.
pub fn not_provided(node_id: &str, capability: &str) -> RunError {
    let mut error = RunError::new(
        "capability_not_provided",
        format!("node `{node_id}` requires the runtime capability `{capability}`, which this host does not provide"),
    );
    error.details = Some(serde_json::json!({ "capability": capability, "nodeId": node_id }));
    error
}
