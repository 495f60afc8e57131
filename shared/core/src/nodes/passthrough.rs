//! `core.parallel` and `core.merge`: pass-through kinds that complete at once with their
//! resolved inputs as outputs (like `core.identity`). They exist for the shape of a graph:
//! every taken edge out of a `core.parallel` schedules its target, so its branches run side by
//! side; a `core.merge` runs once its incoming edges satisfy their `triggerRule` (the default
//! `all_success` waits for every branch).

use super::{NodeContext, NodeKind, NodeOutcome};

/// The `core.parallel` type id.
pub const PARALLEL_TYPE_ID: &str = "core.parallel";
/// The `core.merge` type id.
pub const MERGE_TYPE_ID: &str = "core.merge";

/// The `core.parallel` kind: a fork.
pub(super) struct Parallel;

impl NodeKind for Parallel {
    fn type_id(&self) -> &'static str {
        PARALLEL_TYPE_ID
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        NodeOutcome::Completed(context.inputs.clone())
    }
}

/// The `core.merge` kind: a join.
pub(super) struct Merge;

impl NodeKind for Merge {
    fn type_id(&self) -> &'static str {
        MERGE_TYPE_ID
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        NodeOutcome::Completed(context.inputs.clone())
    }
}
