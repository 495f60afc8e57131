//! `core.fail`: fails with `config.code` / `config.message`, by default
//! `conformance_test_failure` / "Intentional conformance failure".

use super::{NodeContext, NodeKind, NodeOutcome};
use crate::run::RunError;

/// The `core.fail` kind.
pub(super) struct Fail;

impl NodeKind for Fail {
    fn type_id(&self) -> &'static str {
        "core.fail"
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        let text = |key: &str| context.config.get(key).and_then(|v| v.as_str()).filter(|s| !s.is_empty());
        NodeOutcome::Failed(RunError::new(
            text("code").unwrap_or("conformance_test_failure"),
            text("message").unwrap_or("Intentional conformance failure"),
        ))
    }
}
