//! `vendor.trellis.aws.sqsSend`: sends one message to an SQS queue.
//!
//! ```json
//! {"id": "enqueue", "typeId": "vendor.trellis.aws.sqsSend",
//!  "config": {"queueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo",
//!             "body": {"order": "{{variables.order}}"}, "messageGroupId": "{{inputs.customer}}"}}
//! ```
//!
//! - `queueUrl` and `body` (required; a JSON body is sent as JSON text, a string as it is);
//!   `messageGroupId` (FIFO queues: required there), `deduplicationId` (FIFO; default the
//!   call's idempotency key, the same on every attempt, so a retried send within SQS's
//!   five-minute window is not delivered twice), `delaySeconds` (0–900), `attributes` (an object
//!   of string values, sent as `String` message attributes), `timeoutMs`.
//! - Every message also carries the attributes `trellis-idempotency-key` and
//!   `trellis-attempt`.
//! - Outputs: `messageId`, and `sequenceNumber` on a FIFO queue.
//! - A send to a FIFO queue is idempotent and retried under `WorkflowSettings.maxRetries`;
//!   to a standard queue only under an explicit `settings.retry`.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_sqs::types::MessageAttributeValue;
use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, ActivityCall, ActivityResult, ProgressSink};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::NodeContext;
use trellis_core::run::RunError;

use super::{body_text, bounded, classify, field, Field, Shape};

/// The node's `typeId`.
pub const TYPE_ID: &str = "vendor.trellis.aws.sqsSend";

/// SQS's largest message.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

const FIELDS: [Field; 7] = [
    field("queueUrl", true, Shape::Text),
    field("body", true, Shape::Json),
    field("messageGroupId", false, Shape::Text),
    field("deduplicationId", false, Shape::Text),
    field("delaySeconds", false, Shape::Number(0, 900)),
    field("attributes", false, Shape::Json),
    field("timeoutMs", false, Shape::Number(1, 900_000)),
];

/// The executor.
#[derive(Debug, Clone)]
pub struct SqsSend {
    client: aws_sdk_sqs::Client,
}

impl SqsSend {
    /// An executor over `client`.
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        Self { client }
    }
}

fn fifo(queue_url: &str) -> bool {
    queue_url.ends_with(".fifo")
}

fn string_attribute(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder().data_type("String").string_value(value).build().expect("type and value are set")
}

#[async_trait]
impl Activity for SqsSend {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        super::check(TYPE_ID, config, &FIELDS)?;
        if config.get("attributes").is_some_and(|attributes| !attributes.is_object()) {
            return Err(ConfigIssue::Invalid("config.attributes must be an object of string values".into()));
        }
        let queue = config.get("queueUrl").and_then(Value::as_str).unwrap_or_default();
        if fifo(queue) && !config.contains_key("messageGroupId") {
            return Err(ConfigIssue::Invalid("config.messageGroupId is required for a FIFO queue (.fifo)".into()));
        }
        Ok(())
    }

    fn idempotent(&self, config: &Map<String, Value>) -> bool {
        config.get("queueUrl").and_then(Value::as_str).is_some_and(fifo)
    }

    fn attempt_timeout_ms(&self, config: &Map<String, Value>) -> u64 {
        super::timeout_ms(config)
    }

    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError> {
        let request = super::render(context, &FIELDS)?;
        let body = body_text(&request["body"]);
        if body.len() > MAX_MESSAGE_BYTES {
            let mut error = RunError::new(
                "validation_error",
                format!("the message body is {} bytes; SQS takes at most {MAX_MESSAGE_BYTES}", body.len()),
            );
            error.details = Some(json!({ "path": "/config/body" }));
            return Err(error);
        }
        Ok(Value::Object(request))
    }

    async fn execute(&self, call: &ActivityCall, _progress: &dyn ProgressSink) -> ActivityResult {
        let queue_url = super::text(&call.request, "queueUrl")?;
        let optional = |name: &str| call.request.get(name).and_then(Value::as_str).map(str::to_owned);
        let mut attributes: HashMap<String, MessageAttributeValue> = HashMap::new();
        if let Some(given) = call.request.get("attributes").and_then(Value::as_object) {
            for (name, value) in given {
                attributes.insert(name.clone(), string_attribute(&body_text(value)));
            }
        }
        attributes.insert("trellis-idempotency-key".into(), string_attribute(&call.idempotency_key));
        attributes.insert("trellis-attempt".into(), string_attribute(&call.attempt.to_string()));
        let deduplication =
            optional("deduplicationId").or_else(|| fifo(queue_url).then(|| call.idempotency_key.clone()));
        let delay = call.request.get("delaySeconds").and_then(Value::as_u64).map(|seconds| seconds as i32);
        let send = self
            .client
            .send_message()
            .queue_url(queue_url)
            .message_body(body_text(&call.request["body"]))
            .set_message_group_id(optional("messageGroupId"))
            .set_message_deduplication_id(deduplication)
            .set_delay_seconds(delay)
            .set_message_attributes(Some(attributes));
        let sent =
            bounded(call.timeout_ms, async move { send.send().await.map_err(|error| classify("SQS", &error)) }).await?;
        let mut outputs = Map::new();
        outputs.insert("messageId".into(), json!(sent.message_id()));
        if let Some(sequence) = sent.sequence_number() {
            outputs.insert("sequenceNumber".into(), json!(sequence));
        }
        Ok(outputs)
    }
}
