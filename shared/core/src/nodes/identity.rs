//! `core.identity`: echoes its resolved inputs as outputs (`inputs.payload` → `payload`).

use super::{NodeContext, NodeKind, NodeOutcome};

/// The `core.identity` kind.
pub(super) struct Identity;

impl NodeKind for Identity {
    fn type_id(&self) -> &'static str {
        "core.identity"
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        NodeOutcome::Completed(context.inputs.clone())
    }
}
