//! The `emit-provider-usage` test seam's use case (RFC 0026 §B): one `provider.usage` on a
//! live run, in one commit, rolled into the run's cost.
//!
//! Body `{runId, payload, correlationId?, nodeId?}` (closed). `payload` must match the closed
//! `providerUsage` shape (`{provider, model, inputTokens, outputTokens, totalTokens?,
//! costEstimateUsd?, currency?, cacheHit?, cacheReadTokens?, cacheWriteTokens?, nodeId?,
//! traceId?}`: integer token counts, no other field — a `credentialRef` is a
//! `validation_error`); then any string of the body that looks like a secret reference
//! (`secret:` anywhere) is `400 provider_usage_credential_leak`, before the run is read. The
//! event's `causationId` is `correlationId`, which must be an event id of the run
//! (`<runId>:<sequence>`); its `nodeId` is the body's `nodeId`, else the payload's.

use std::sync::OnceLock;

use serde_json::{json, Value};

use super::Services;
use crate::ai::usage::ProviderUsage;
use crate::engine::Input;
use crate::error::ServiceError;

/// The closed `providerUsage` payload schema (`run-event-payloads.schema.json`).
fn payload_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let tokens = json!({ "type": "integer", "minimum": 0 });
        json!({
            "type": "object",
            "required": ["provider", "model", "inputTokens", "outputTokens"],
            "additionalProperties": false,
            "properties": {
                "provider": { "type": "string", "minLength": 1 },
                "model": { "type": "string", "minLength": 1 },
                "inputTokens": tokens,
                "outputTokens": tokens,
                "totalTokens": tokens,
                "costEstimateUsd": { "type": "number", "minimum": 0 },
                "currency": { "type": "string", "pattern": "^[A-Z]{3}$" },
                "cacheHit": { "type": "boolean" },
                "cacheReadTokens": tokens,
                "cacheWriteTokens": tokens,
                "nodeId": { "type": "string", "minLength": 1 },
                "traceId": { "type": "string", "minLength": 1 },
            },
        })
    })
}

/// The fields of the seam's body.
const FIELDS: [&str; 4] = ["runId", "payload", "correlationId", "nodeId"];

/// A checked seam request.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRequest {
    /// The run.
    pub run_id: String,
    /// The node it is attributed to.
    pub node_id: Option<String>,
    /// The payload, as given (checked).
    pub payload: Value,
    /// Its figures.
    pub usage: ProviderUsage,
    /// `correlationId`.
    pub correlation_id: Option<String>,
}

/// Whether any string in `value` (keys included) looks like a secret reference.
fn leaks(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains("secret:"),
        Value::Array(items) => items.iter().any(leaks),
        Value::Object(fields) => fields.iter().any(|(key, value)| key.contains("secret:") || leaks(value)),
        _ => false,
    }
}

fn invalid(message: impl Into<String>, details: Value) -> ServiceError {
    ServiceError::validation(message, details)
}

impl UsageRequest {
    /// Checks the seam's body: its fields, the payload's schema, then the leak rule.
    pub fn parse(body: &Value) -> Result<Self, ServiceError> {
        let Some(fields) = body.as_object() else {
            return Err(invalid("the body must be a JSON object", json!({})));
        };
        if let Some(unknown) = fields.keys().find(|key| !FIELDS.contains(&key.as_str())) {
            return Err(invalid(
                format!("`{unknown}` is not a field of this seam"),
                json!({ "field": unknown, "allowed": FIELDS }),
            ));
        }
        let text = |name: &str| -> Result<Option<String>, ServiceError> {
            match fields.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) if !text.is_empty() => Ok(Some(text.clone())),
                Some(_) => Err(invalid(format!("`{name}` must be a non-empty string"), json!({ "field": name }))),
            }
        };
        let run_id = text("runId")?.ok_or_else(|| invalid("`runId` is required", json!({ "field": "runId" })))?;
        let payload = fields.get("payload").cloned().unwrap_or(Value::Null);
        if let Err(violations) = crate::schema::check_against(payload_schema(), &payload) {
            return Err(invalid(
                "`payload` is not a valid provider.usage payload",
                json!({ "field": "payload", "violations": violations }),
            ));
        }
        let (node_id, correlation_id) = (text("nodeId")?, text("correlationId")?);
        if leaks(&Value::Object(fields.clone())) {
            return Err(ServiceError::Rejected {
                status: 400,
                code: "provider_usage_credential_leak",
                message: "a provider.usage record never carries a credential reference or anything shaped like one"
                    .to_owned(),
                details: json!({}),
            });
        }
        let usage: ProviderUsage = serde_json::from_value(payload.clone())
            .map_err(|_| invalid("`payload` is not a valid provider.usage payload", json!({ "field": "payload" })))?;
        let node_id = node_id.or_else(|| payload.get("nodeId").and_then(Value::as_str).map(str::to_owned));
        Ok(Self { run_id, node_id, payload, usage, correlation_id })
    }
}

impl Services {
    /// Appends one `provider.usage` to `tenant`'s live run (the `emit-provider-usage` seam;
    /// the caller checks the seam's gate). Returns the run id and the event's sequence.
    pub async fn emit_provider_usage(&self, tenant: &str, body: &Value) -> Result<(String, u64), ServiceError> {
        let request = UsageRequest::parse(body)?;
        let causation = match &request.correlation_id {
            None => None,
            Some(id) => {
                let sequence = id
                    .strip_prefix(request.run_id.as_str())
                    .and_then(|rest| rest.strip_prefix(':'))
                    .and_then(|sequence| sequence.parse::<u64>().ok());
                let Some(sequence) = sequence else {
                    return Err(invalid(
                        "`correlationId` must be an event id of the run (`<runId>:<sequence>`)",
                        json!({ "field": "correlationId" }),
                    ));
                };
                Some(sequence)
            }
        };
        let mut payload = request.payload;
        if let (Some(node_id), Some(fields)) = (&request.node_id, payload.as_object_mut()) {
            fields.entry("nodeId").or_insert_with(|| json!(node_id));
        }
        let input = Input::RecordUsage { node_id: request.node_id, payload, usage: request.usage, causation };
        let decision = self.operate(Some(tenant), &request.run_id, input).await?;
        let sequence = decision
            .outcome
            .events
            .iter()
            .find(|event| event.event_type == crate::event::types::PROVIDER_USAGE)
            .map(|event| event.sequence)
            .ok_or(ServiceError::Internal)?;
        Ok((request.run_id, sequence))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> Result<UsageRequest, ServiceError> {
        UsageRequest::parse(&body)
    }

    fn body(payload: Value) -> Value {
        json!({ "runId": "run-1", "payload": payload, "correlationId": "run-1:0", "nodeId": "node-1" })
    }

    fn ok_payload() -> Value {
        json!({ "provider": "anthropic", "model": "claude", "inputTokens": 200, "outputTokens": 80,
                "totalTokens": 280, "nodeId": "node-1" })
    }

    fn code(error: &ServiceError) -> &str {
        error.code()
    }

    #[test]
    fn a_valid_record_parses() {
        let request = parse(body(ok_payload())).unwrap();
        assert_eq!((request.usage.input_tokens, request.usage.output_tokens), (200, 80));
        assert_eq!(request.node_id.as_deref(), Some("node-1"));
    }

    #[test]
    fn schema_refusals_are_validation_errors() {
        let mut extra = ok_payload();
        extra["credentialRef"] = json!("tenant:byok-anthropic:v1");
        let mut fractional = ok_payload();
        fractional["inputTokens"] = json!(100.5);
        let mut missing = ok_payload();
        missing.as_object_mut().unwrap().remove("outputTokens");
        let mut lower = ok_payload();
        lower["currency"] = json!("usd");
        for payload in [extra, fractional, missing, lower] {
            let error = parse(body(payload.clone())).unwrap_err();
            assert_eq!(code(&error), "validation_error", "{payload}");
        }
        let error = parse(json!({ "runId": "r", "payload": ok_payload(), "latencyMs": 3 })).unwrap_err();
        assert_eq!(code(&error), "validation_error");
    }

    #[test]
    fn secret_shaped_content_is_a_credential_leak() {
        let mut payload = ok_payload();
        payload["nodeId"] = json!("secret:tenant:byok-anthropic:v1");
        let error = parse(json!({ "runId": "r-pu-leak", "payload": payload })).unwrap_err();
        assert_eq!(code(&error), "provider_usage_credential_leak");
        let error =
            parse(json!({ "runId": "r", "payload": ok_payload(), "nodeId": "secret:tenant:x:v1" })).unwrap_err();
        assert_eq!(code(&error), "provider_usage_credential_leak");
    }
}
