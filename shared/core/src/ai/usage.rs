//! `provider.usage` (RFC 0026): one event per provider invocation, before the node's
//! `node.completed`, and the run's cost rollup it feeds.
//!
//! The payload schema is closed: `{provider, model, inputTokens, outputTokens, totalTokens?,
//! costEstimateUsd?, currency?, cacheHit?, cacheReadTokens?, cacheWriteTokens?, nodeId?,
//! traceId?}` — never a credential reference, a hash of one, a latency or anything else.
//! [`ProviderUsage::payload`] writes exactly that.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The currency cost figures are in (ISO 4217).
pub const CURRENCY: &str = "USD";

/// What one provider invocation consumed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderUsage {
    /// The provider id (host configuration's `id`, or `mock`).
    pub provider: String,
    /// The model that answered.
    pub model: String,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// The estimated cost in [`CURRENCY`], when the host knows the model's price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_estimate_usd: Option<f64>,
    /// Whether the provider answered from its prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_hit: Option<bool>,
    /// Tokens read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Tokens written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
}

impl ProviderUsage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// The `provider.usage` payload for a call of `node_id` (closed schema).
    pub fn payload(&self, node_id: &str) -> Value {
        let mut payload = Map::new();
        payload.insert("provider".into(), json!(self.provider));
        payload.insert("model".into(), json!(self.model));
        payload.insert("inputTokens".into(), json!(self.input_tokens));
        payload.insert("outputTokens".into(), json!(self.output_tokens));
        payload.insert("totalTokens".into(), json!(self.total_tokens()));
        if let Some(cost) = self.cost_estimate_usd {
            payload.insert("costEstimateUsd".into(), json!(cost));
            payload.insert("currency".into(), json!(CURRENCY));
        }
        if let Some(hit) = self.cache_hit {
            payload.insert("cacheHit".into(), json!(hit));
        }
        if let Some(tokens) = self.cache_read_tokens {
            payload.insert("cacheReadTokens".into(), json!(tokens));
        }
        if let Some(tokens) = self.cache_write_tokens {
            payload.insert("cacheWriteTokens".into(), json!(tokens));
        }
        payload.insert("nodeId".into(), json!(node_id));
        Value::Object(payload)
    }
}

/// The run's cost so far (the snapshot's `metrics.openwopCost`): sums over every
/// `provider.usage` it recorded, the last call's provider and model, and the time spent in
/// provider calls when the executor measured it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CostRollup {
    /// Summed cost estimates in USD.
    pub usd: f64,
    /// Summed prompt tokens.
    pub input_tokens: u64,
    /// Summed completion tokens.
    pub output_tokens: u64,
    /// The last call's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The last call's provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Provider invocations recorded.
    pub calls: u64,
    /// The currency of `usd` (ISO 4217, upper-case), when one was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

/// Cost figures recorded without a provider invocation: the allow-listed `openwop.cost.*`
/// attributes (`observability.md`, "Cost attribution attributes") a node reports, already
/// sanitized — every other key dropped, currency upper-case.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CostAttributes {
    /// `openwop.cost.tokens.input`.
    pub input_tokens: Option<u64>,
    /// `openwop.cost.tokens.output`.
    pub output_tokens: Option<u64>,
    /// `openwop.cost.usd`.
    pub usd: Option<f64>,
    /// `openwop.cost.provider`.
    pub provider: Option<String>,
    /// `openwop.cost.currency`, upper-case.
    pub currency: Option<String>,
}

impl CostRollup {
    /// Adds one invocation.
    pub fn add(&mut self, usage: &ProviderUsage) {
        self.usd += usage.cost_estimate_usd.unwrap_or(0.0).max(0.0);
        self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        self.model = Some(usage.model.clone());
        self.provider = Some(usage.provider.clone());
        self.calls = self.calls.saturating_add(1);
        if usage.cost_estimate_usd.is_some() {
            self.currency = Some(CURRENCY.to_owned());
        }
    }

    /// Adds figures a node reported without a provider invocation (no call is counted); a
    /// provider or currency it names is the latest.
    pub fn add_attributes(&mut self, attributes: &CostAttributes) {
        self.usd += attributes.usd.unwrap_or(0.0).max(0.0);
        self.input_tokens = self.input_tokens.saturating_add(attributes.input_tokens.unwrap_or(0));
        self.output_tokens = self.output_tokens.saturating_add(attributes.output_tokens.unwrap_or(0));
        if let Some(provider) = &attributes.provider {
            self.provider = Some(provider.clone());
        }
        if let Some(currency) = &attributes.currency {
            self.currency = Some(currency.clone());
        }
    }

    /// `metrics.openwopCost`: `{usd, tokens{input, output}, model?, provider?}`.
    pub fn metrics(&self) -> Value {
        let mut cost = json!({
            "usd": self.usd,
            "tokens": { "input": self.input_tokens, "output": self.output_tokens },
        });
        if let Some(model) = &self.model {
            cost["model"] = json!(model);
        }
        if let Some(provider) = &self.provider {
            cost["provider"] = json!(provider);
        }
        cost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(cost: Option<f64>) -> ProviderUsage {
        ProviderUsage {
            provider: "openai".into(),
            model: "gpt-x".into(),
            input_tokens: 10,
            output_tokens: 4,
            cost_estimate_usd: cost,
            cache_hit: None,
            cache_read_tokens: None,
            cache_write_tokens: None,
        }
    }

    #[test]
    fn the_payload_is_the_closed_shape_and_names_the_currency_only_with_a_cost() {
        let payload = usage(None).payload("ask");
        let mut keys: Vec<&str> = payload.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["inputTokens", "model", "nodeId", "outputTokens", "provider", "totalTokens"]);
        assert_eq!(payload["totalTokens"], 14);
        let priced = usage(Some(0.002)).payload("ask");
        assert_eq!((priced["costEstimateUsd"].as_f64(), priced["currency"].as_str()), (Some(0.002), Some("USD")));
    }

    #[test]
    fn the_rollup_sums_tokens_and_cost_and_keeps_the_last_model() {
        let mut rollup = CostRollup::default();
        rollup.add(&usage(Some(0.5)));
        let mut second = usage(None);
        second.model = "gpt-y".into();
        rollup.add(&second);
        assert_eq!(
            rollup.metrics(),
            json!({"usd": 0.5, "tokens": {"input": 20, "output": 8}, "model": "gpt-y", "provider": "openai"})
        );
    }
}
