//! `vendor.trellis.aws.lambdaInvoke`: invokes a Lambda function, request/response.
//!
//! ```json
//! {"id": "score", "typeId": "vendor.trellis.aws.lambdaInvoke",
//!  "config": {"functionName": "arn:aws:lambda:eu-west-1:123456789012:function:score",
//!             "payload": {"order": "{{variables.order}}"}, "qualifier": "live", "timeoutMs": 20000}}
//! ```
//!
//! - `functionName` (required): a name, a partial or a full ARN (templates allowed);
//!   `payload` (any JSON, templates allowed; default the node's inputs); `qualifier` (a
//!   version or alias); `timeoutMs` (the attempt's budget, default 30 s, at most 15 minutes).
//! - The function receives the payload, and in its client context `custom {idempotencyKey,
//!   attempt, runId, nodeId}`: the key is the same on every attempt of one logical call.
//! - Outputs: `result` (the function's answer, JSON when it parses, else text),
//!   `statusCode`, `executedVersion`. An answer larger than [`MAX_RESULT_BYTES`] fails the
//!   node (`aws_result_too_large`; the same cut as `core.http.request`'s default, and an
//!   answer over 256 KiB is stored in the blob bucket).
//! - The function ran and failed (`X-Amz-Function-Error`): `aws_function_error`, never
//!   retryable, with `details {functionError, errorType, errorMessage}`. Throttling
//!   (`TooManyRequestsException`) is `aws_throttled`, retryable; see [`super::classify`].
//!   Without `settings.retry` an invoke is not retried (it is not idempotent).

use async_trait::async_trait;
use aws_sdk_lambda::primitives::Blob;
use base64::Engine as _;
use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, ActivityCall, ActivityError, ActivityResult, ProgressSink};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::NodeContext;
use trellis_core::run::RunError;

use super::{bounded, classify, field, Field, Shape};

/// The node's `typeId`.
pub const TYPE_ID: &str = "vendor.trellis.aws.lambdaInvoke";

/// The largest function answer a node keeps (the same cut as `core.http.request`'s default
/// on AWS; Lambda answers at most 6 MB).
pub const MAX_RESULT_BYTES: usize = crate::settings::DEFAULT_HTTP_MAX_RESPONSE_BYTES;

const FIELDS: [Field; 4] = [
    field("functionName", true, Shape::Text),
    field("payload", false, Shape::Json),
    field("qualifier", false, Shape::Text),
    field("timeoutMs", false, Shape::Number(1, 900_000)),
];

/// The executor.
#[derive(Debug, Clone)]
pub struct LambdaInvoke {
    client: aws_sdk_lambda::Client,
}

impl LambdaInvoke {
    /// An executor over `client`.
    pub fn new(client: aws_sdk_lambda::Client) -> Self {
        Self { client }
    }
}

/// The function's answer as the node's outputs, or its failure.
pub fn outcome(
    status: i32,
    function_error: Option<&str>,
    payload: &[u8],
    executed_version: Option<&str>,
) -> ActivityResult {
    let result = serde_json::from_slice::<Value>(payload)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(payload).into_owned()));
    if let Some(kind) = function_error {
        let field = |name: &str| result.get(name).cloned().unwrap_or(Value::Null);
        let message = result.get("errorMessage").and_then(Value::as_str).unwrap_or("the function failed");
        return Err(ActivityError::new(
            "aws_function_error",
            format!("the function failed ({kind}): {message}"),
            false,
        )
        .with_details(json!({
            "functionError": kind,
            "errorType": field("errorType"),
            "errorMessage": field("errorMessage"),
        })));
    }
    if payload.len() > MAX_RESULT_BYTES {
        return Err(ActivityError::new(
            "aws_result_too_large",
            format!("the function answered {} bytes; a node keeps at most {MAX_RESULT_BYTES}", payload.len()),
            false,
        )
        .with_details(json!({ "bytes": payload.len(), "limit": MAX_RESULT_BYTES })));
    }
    let mut outputs = Map::new();
    outputs.insert("result".into(), result);
    outputs.insert("statusCode".into(), json!(status));
    if let Some(version) = executed_version {
        outputs.insert("executedVersion".into(), json!(version));
    }
    Ok(outputs)
}

#[async_trait]
impl Activity for LambdaInvoke {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        super::check(TYPE_ID, config, &FIELDS)
    }

    fn attempt_timeout_ms(&self, config: &Map<String, Value>) -> u64 {
        super::timeout_ms(config)
    }

    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError> {
        let mut request = super::render(context, &FIELDS)?;
        if !request.contains_key("payload") {
            request.insert("payload".into(), Value::Object(context.inputs.clone()));
        }
        Ok(Value::Object(request))
    }

    fn capabilities(&self) -> Vec<(&'static str, Value)> {
        // One block for the three service nodes (a Trellis extension at the root).
        vec![("awsServiceNodes", super::capability())]
    }

    async fn execute(&self, call: &ActivityCall, _progress: &dyn ProgressSink) -> ActivityResult {
        let function = super::text(&call.request, "functionName")?;
        let payload = serde_json::to_vec(call.request.get("payload").unwrap_or(&Value::Null))
            .map_err(|error| ActivityError::new("validation_error", error.to_string(), false))?;
        let context = json!({ "custom": {
            "idempotencyKey": call.idempotency_key,
            "attempt": call.attempt.to_string(),
            "runId": call.run_id,
            "nodeId": call.node_id,
        }});
        let context = base64::engine::general_purpose::STANDARD.encode(context.to_string());
        let qualifier = call.request.get("qualifier").and_then(Value::as_str).map(str::to_owned);
        let invoke = self
            .client
            .invoke()
            .function_name(function)
            .set_qualifier(qualifier)
            .client_context(context)
            .payload(Blob::new(payload));
        let answer =
            bounded(call.timeout_ms, async move { invoke.send().await.map_err(|error| classify("Lambda", &error)) })
                .await?;
        let payload = answer.payload().map_or(&[][..], Blob::as_ref);
        outcome(answer.status_code(), answer.function_error(), payload, answer.executed_version())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_error_is_not_retryable_and_names_the_error() {
        let failed =
            outcome(200, Some("Unhandled"), br#"{"errorType":"ValueError","errorMessage":"bad"}"#, None).unwrap_err();
        assert_eq!(failed.code, "aws_function_error");
        assert!(!failed.retryable);
        let details = failed.details.unwrap();
        assert_eq!(details["errorType"], "ValueError");
        assert_eq!(details["functionError"], "Unhandled");
        let ok = outcome(200, None, br#"{"score": 7}"#, Some("$LATEST")).unwrap();
        assert_eq!(ok["result"]["score"], 7);
        assert_eq!(ok["executedVersion"], "$LATEST");
        assert_eq!(outcome(200, None, b"plain", None).unwrap()["result"], "plain");
        let big = vec![b'1'; MAX_RESULT_BYTES + 1];
        assert_eq!(outcome(200, None, &big, None).unwrap_err().code, "aws_result_too_large");
    }

    #[test]
    fn registration_names_the_field_and_the_rule() {
        let invoke = LambdaInvoke::new(aws_sdk_lambda::Client::from_conf(
            aws_sdk_lambda::Config::builder().behavior_version_latest().build(),
        ));
        let issue = |config: Value| match invoke.check("n", config.as_object().unwrap()) {
            Err(ConfigIssue::Invalid(message)) => message,
            other => panic!("{other:?}"),
        };
        assert!(issue(json!({})).contains("config.functionName is required"));
        assert!(issue(json!({"functionName": "f", "nope": 1})).contains("config.nope"));
        assert!(issue(json!({"functionName": "f", "timeoutMs": 0})).contains("config.timeoutMs"));
        assert!(issue(json!({"functionName": "{{inputs.x"})).contains("config.functionName"));
        assert!(invoke
            .check("n", json!({"functionName": "f", "payload": {"a": "{{variables.a}}"}}).as_object().unwrap())
            .is_ok());
    }
}
