//! `core.delay` (and its conformance alias `core.conformance.hold`): parks the node for a
//! duration, then completes with no outputs.
//!
//! The duration is the first of: input `delayMs`, `config.delayMs`, `config.durationMs`,
//! `config.ms`, run variable `delayMs`, run variable `delaySeconds` × 1000 (rounded to the
//! millisecond); else 100 ms. A duration is an integer from 0 to [`MAX_RUN_DURATION_MS`]; a
//! value outside that (or not a number) fails the node with `validation_error` naming the
//! input it came from, `details.input`. Literals are checked at registration already
//! ([`crate::model::checks`]); this catches values fed at run time.

use serde_json::{json, Value};

use super::{duration_ms, NodeContext, NodeKind, NodeOutcome};
use crate::limits::MAX_RUN_DURATION_MS;
use crate::run::RunError;

/// The `core.delay` kind.
pub(super) struct Delay;

/// `core.conformance.hold`: the conformance suite's pure wait (its replay fixtures use it
/// where a registry might classify `core.delay` as side-effecting); a `core.delay` by another
/// name.
pub(super) struct Hold;

impl NodeKind for Hold {
    fn type_id(&self) -> &'static str {
        "core.conformance.hold"
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        Delay.execute(context)
    }
}

/// Used when no source gives a duration.
const DEFAULT_DELAY_MS: u64 = 100;

impl NodeKind for Delay {
    fn type_id(&self) -> &'static str {
        "core.delay"
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        let sources = [
            ("input `delayMs`", context.inputs.get("delayMs")),
            ("config `delayMs`", context.config.get("delayMs")),
            ("config `durationMs`", context.config.get("durationMs")),
            ("config `ms`", context.config.get("ms")),
            ("variable `delayMs`", context.variables.get("delayMs")),
        ];
        let found = sources.into_iter().find_map(|(name, value)| Some((name, value?.clone())));
        let found = found.or_else(|| {
            let seconds = context.variables.get("delaySeconds")?;
            let ms = match seconds.as_f64() {
                Some(s) if s.is_finite() && s >= 0.0 => Value::from((s * 1000.0).round()),
                _ => seconds.clone(),
            };
            Some(("variable `delaySeconds`", ms))
        });
        let Some((name, value)) = found else {
            return NodeOutcome::SleepUntil(context.now + DEFAULT_DELAY_MS);
        };
        match duration_ms(&value, MAX_RUN_DURATION_MS) {
            Some(ms) => NodeOutcome::SleepUntil(context.now.saturating_add(ms)),
            None => {
                let mut error = RunError::new(
                    "validation_error",
                    format!(
                        "core.delay {name} must be an integer number of milliseconds from 0 to {MAX_RUN_DURATION_MS}"
                    ),
                );
                error.details = Some(json!({ "input": name, "maximum": MAX_RUN_DURATION_MS }));
                NodeOutcome::Failed(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::limits::MAX_RUN_DURATION_MS;

    fn run(inputs: Value, config: Value, variables: Value) -> NodeOutcome {
        let object = |value: Value| value.as_object().cloned().unwrap_or_default();
        let (config, variables) = (object(config), object(variables));
        Delay.execute(&NodeContext {
            node_id: "wait",
            config: &config,
            inputs: object(inputs),
            variables: &variables,
            now: 1_000,
            configurable: None,
            mocks_allowed: false,
        })
    }

    fn failure(outcome: NodeOutcome) -> RunError {
        match outcome {
            NodeOutcome::Failed(error) => error,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn a_fed_duration_out_of_range_fails_the_node_naming_the_input() {
        for (inputs, variables, named) in [
            (json!({ "delayMs": 1e19 }), json!({}), "delayMs"),
            (json!({ "delayMs": MAX_RUN_DURATION_MS + 1 }), json!({}), "delayMs"),
            (json!({ "delayMs": -5 }), json!({}), "delayMs"),
            (json!({ "delayMs": "soon" }), json!({}), "delayMs"),
            (json!({}), json!({ "delayMs": u64::MAX }), "delayMs"),
            (json!({}), json!({ "delaySeconds": 1e17 }), "delaySeconds"),
        ] {
            let error = failure(run(inputs.clone(), json!({}), variables.clone()));
            assert_eq!(error.code, "validation_error", "{inputs} {variables}");
            assert!(error.message.contains(&format!("`{named}`")), "{inputs} {variables}: {}", error.message);
        }
    }

    #[test]
    fn durations_in_range_sleep_without_overflow() {
        assert_eq!(run(json!({ "delayMs": 250 }), json!({}), json!({})), NodeOutcome::SleepUntil(1_250));
        assert_eq!(
            run(json!({ "delayMs": MAX_RUN_DURATION_MS }), json!({}), json!({})),
            NodeOutcome::SleepUntil(1_000 + MAX_RUN_DURATION_MS)
        );
        assert_eq!(run(json!({}), json!({}), json!({ "delaySeconds": 1.5 })), NodeOutcome::SleepUntil(2_500));
        assert_eq!(run(json!({}), json!({}), json!({})), NodeOutcome::SleepUntil(1_100));
    }
}
