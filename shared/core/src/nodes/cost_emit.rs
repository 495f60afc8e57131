//! `conformance.cost.emit` (fixture `openwop-smoke-cost-emit`): records the allow-listed
//! `openwop.cost.*` attributes of `config.attrs` (`observability.md`, "Cost attribution
//! attributes") into the run's cost rollup — the snapshot's `metrics.openwopCost` — and drops
//! every other key and every non-primitive value, so a non-allow-listed key or a credential
//! planted under one (`openwop.cost.leaked_token`) is never stored in the run or emitted.
//! Outputs `{}`; no `provider.usage` (the node is no provider invocation).
//!
//! Conformance-only, with the mock agent's gate ([`super::refused_mock`]).

use serde_json::{Map, Value};

use super::{NodeContext, NodeKind, NodeOutcome};
use crate::ai::usage::CostAttributes;
use crate::interrupt::request::ConfigIssue;

/// The kind's `typeId`.
pub const TYPE_ID: &str = "conformance.cost.emit";

/// The attribute names the sanitizer keeps (`openwop.cost.tokens.total` and
/// `openwop.cost.estimated` are allowed too but the rollup derives or ignores them).
pub const ALLOWED: [&str; 7] = [
    "openwop.cost.tokens.input",
    "openwop.cost.tokens.output",
    "openwop.cost.tokens.total",
    "openwop.cost.usd",
    "openwop.cost.currency",
    "openwop.cost.estimated",
    "openwop.cost.provider",
];

/// `conformance.cost.emit`.
pub(super) struct CostEmit;

impl NodeKind for CostEmit {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        if let Some(key) = config.keys().find(|key| *key != "attrs") {
            return Err(ConfigIssue::Invalid(format!("config.{key} is not a field of {TYPE_ID} (allowed: attrs)")));
        }
        if !config.get("attrs").is_some_and(Value::is_object) {
            return Err(ConfigIssue::Invalid("config.attrs is required and must be an object".to_owned()));
        }
        Ok(())
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        if !context.mocks_allowed {
            return NodeOutcome::Failed(super::refused_mock(TYPE_ID));
        }
        let empty = Map::new();
        let attrs = context.config.get("attrs").and_then(Value::as_object).unwrap_or(&empty);
        NodeOutcome::RecordCost(sanitize(attrs))
    }
}

/// The allow-listed attributes of `attrs` with valid values: tokens non-negative integers,
/// `usd` a non-negative number, `provider` a non-empty string, `currency` three letters
/// (upper-cased). Everything else is dropped.
pub fn sanitize(attrs: &Map<String, Value>) -> CostAttributes {
    let get = |key: &str| attrs.get(key).filter(|_| ALLOWED.contains(&key));
    CostAttributes {
        input_tokens: get("openwop.cost.tokens.input").and_then(Value::as_u64),
        output_tokens: get("openwop.cost.tokens.output").and_then(Value::as_u64),
        usd: get("openwop.cost.usd").and_then(Value::as_f64).filter(|usd| usd.is_finite() && *usd >= 0.0),
        provider: get("openwop.cost.provider").and_then(Value::as_str).filter(|p| !p.is_empty()).map(str::to_owned),
        currency: get("openwop.cost.currency")
            .and_then(Value::as_str)
            .filter(|c| c.len() == 3 && c.chars().all(|c| c.is_ascii_alphabetic()))
            .map(str::to_ascii_uppercase),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_allow_listed_attributes_survive() {
        let attrs = json!({
            "openwop.cost.tokens.input": 100,
            "openwop.cost.tokens.output": 50,
            "openwop.cost.usd": 0.00123,
            "openwop.cost.currency": "usd",
            "openwop.cost.provider": "anthropic",
            "openwop.cost.evil": "must-be-dropped",
            "openwop.cost.leaked_token": "sk-ant-CANARY"
        });
        let sanitized = sanitize(attrs.as_object().unwrap());
        assert_eq!(
            sanitized,
            CostAttributes {
                input_tokens: Some(100),
                output_tokens: Some(50),
                usd: Some(0.00123),
                provider: Some("anthropic".into()),
                currency: Some("USD".into()),
            }
        );
        assert!(!format!("{sanitized:?}").contains("CANARY"));
    }

    #[test]
    fn invalid_values_are_dropped() {
        let attrs = json!({ "openwop.cost.tokens.input": -1, "openwop.cost.usd": "1", "openwop.cost.currency": "dollars",
                            "openwop.cost.provider": { "nested": true } });
        assert_eq!(sanitize(attrs.as_object().unwrap()), CostAttributes::default());
    }
}
