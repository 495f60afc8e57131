//! `core.noop`: completes at once with no outputs.

use serde_json::Map;

use super::{NodeContext, NodeKind, NodeOutcome};

/// The `core.noop` kind.
pub(super) struct Noop;

impl NodeKind for Noop {
    fn type_id(&self) -> &'static str {
        "core.noop"
    }

    fn execute(&self, _context: &NodeContext<'_>) -> NodeOutcome {
        NodeOutcome::Completed(Map::new())
    }
}
