//! `core.delay`: parks the node for a duration, then completes with no outputs.
//!
//! The duration is the first of: input `delayMs`, `config.delayMs`, `config.durationMs`,
//! `config.ms`, run variable `delayMs`, run variable `delaySeconds` × 1000; else 100 ms.
//! A value that is present but not a non-negative number fails the node with
//! `invalid_node_input`.

use serde_json::Value;

use super::{as_millis, NodeContext, NodeKind, NodeOutcome};
use crate::run::RunError;

/// The `core.delay` kind.
pub(super) struct Delay;

/// Used when no source gives a duration.
const DEFAULT_DELAY_MS: u64 = 100;

impl NodeKind for Delay {
    fn type_id(&self) -> &'static str {
        "core.delay"
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        let seconds = context.variables.get("delaySeconds").map(|v| match v.as_f64() {
            Some(s) if s.is_finite() && s >= 0.0 => Value::from(s * 1000.0),
            _ => v.clone(),
        });
        let source = context
            .inputs
            .get("delayMs")
            .or_else(|| context.config.get("delayMs"))
            .or_else(|| context.config.get("durationMs"))
            .or_else(|| context.config.get("ms"))
            .or_else(|| context.variables.get("delayMs"))
            .cloned()
            .or(seconds);
        match source {
            None => NodeOutcome::SleepUntil(context.now + DEFAULT_DELAY_MS),
            Some(value) => match as_millis(&value) {
                Some(ms) => NodeOutcome::SleepUntil(context.now.saturating_add(ms)),
                None => NodeOutcome::Failed(RunError::new(
                    "invalid_node_input",
                    "core.delay needs a non-negative number of milliseconds",
                )),
            },
        }
    }
}
