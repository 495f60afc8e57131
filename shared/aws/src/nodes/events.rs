//! `vendor.trellis.aws.eventsPut`: puts one event on an EventBridge bus.
//!
//! ```json
//! {"id": "announce", "typeId": "vendor.trellis.aws.eventsPut",
//!  "config": {"eventBusName": "orders", "source": "com.example.orders",
//!             "detailType": "OrderScored", "detail": {"order": "{{variables.order}}"}}}
//! ```
//!
//! - `source`, `detailType` and `detail` (required; `detail` must render to a JSON object);
//!   `eventBusName` (a name or ARN; default the account's `default` bus), `resources` (an
//!   array of ARNs), `timeoutMs`.
//! - Outputs: `eventId`.
//! - A refused entry (`FailedEntryCount`) fails the attempt with its error code: throttling
//!   and internal failures are retryable. A put is not idempotent: retried only under an
//!   explicit `settings.retry`.

use async_trait::async_trait;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, ActivityCall, ActivityError, ActivityResult, ProgressSink};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::NodeContext;
use trellis_core::run::RunError;

use super::{bounded, classify, field, Field, Shape};

/// The node's `typeId`.
pub const TYPE_ID: &str = "vendor.trellis.aws.eventsPut";

/// EventBridge's largest entry.
pub const MAX_ENTRY_BYTES: usize = 256 * 1024;

const FIELDS: [Field; 6] = [
    field("eventBusName", false, Shape::Text),
    field("source", true, Shape::Text),
    field("detailType", true, Shape::Text),
    field("detail", true, Shape::Json),
    field("resources", false, Shape::Json),
    field("timeoutMs", false, Shape::Number(1, 900_000)),
];

/// The executor.
#[derive(Debug, Clone)]
pub struct EventsPut {
    client: aws_sdk_eventbridge::Client,
}

impl EventsPut {
    /// An executor over `client`.
    pub fn new(client: aws_sdk_eventbridge::Client) -> Self {
        Self { client }
    }
}

fn refuse(message: String, path: &str) -> RunError {
    let mut error = RunError::new("validation_error", message);
    error.details = Some(json!({ "path": path }));
    error
}

/// The failure of an entry EventBridge refused with `code`.
pub fn entry_refused(code: &str, message: &str) -> ActivityError {
    let (stable, retryable) = super::stable_code(code, 0);
    ActivityError::new(stable, format!("EventBridge refused the entry: {code}: {message}"), retryable)
        .with_details(json!({ "service": "EventBridge", "awsCode": code }))
}

#[async_trait]
impl Activity for EventsPut {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        super::check(TYPE_ID, config, &FIELDS)?;
        match config.get("detail") {
            Some(Value::Object(_)) => {}
            Some(Value::String(text)) if trellis_core::activity::template::is_single_placeholder(text) => {}
            _ => return Err(ConfigIssue::Invalid("config.detail must be a JSON object (or one placeholder)".into())),
        }
        if config.get("resources").is_some_and(|resources| !resources.is_array()) {
            return Err(ConfigIssue::Invalid("config.resources must be an array of ARNs".into()));
        }
        Ok(())
    }

    fn attempt_timeout_ms(&self, config: &Map<String, Value>) -> u64 {
        super::timeout_ms(config)
    }

    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError> {
        let request = super::render(context, &FIELDS)?;
        if !request["detail"].is_object() {
            return Err(refuse("config.detail must render to a JSON object".into(), "/config/detail"));
        }
        let size = request["detail"].to_string().len();
        if size > MAX_ENTRY_BYTES {
            return Err(refuse(
                format!("the event's detail is {size} bytes; an EventBridge entry holds at most {MAX_ENTRY_BYTES}"),
                "/config/detail",
            ));
        }
        Ok(Value::Object(request))
    }

    async fn execute(&self, call: &ActivityCall, _progress: &dyn ProgressSink) -> ActivityResult {
        let text = |name: &str| super::text(&call.request, name).map(str::to_owned);
        let resources = call.request.get("resources").and_then(Value::as_array).map(|items| {
            items.iter().map(|item| item.as_str().map_or_else(|| item.to_string(), str::to_owned)).collect()
        });
        let entry = PutEventsRequestEntry::builder()
            .set_event_bus_name(call.request.get("eventBusName").and_then(Value::as_str).map(str::to_owned))
            .source(text("source")?)
            .detail_type(text("detailType")?)
            .detail(call.request["detail"].to_string())
            .set_resources(resources)
            .build();
        let put = self.client.put_events().entries(entry);
        let answer =
            bounded(call.timeout_ms, async move { put.send().await.map_err(|error| classify("EventBridge", &error)) })
                .await?;
        let first = answer.entries().first();
        if answer.failed_entry_count() > 0 || first.is_some_and(|entry| entry.error_code().is_some()) {
            let code = first.and_then(|entry| entry.error_code()).unwrap_or("Unknown");
            let message = first.and_then(|entry| entry.error_message()).unwrap_or("");
            return Err(entry_refused(code, message));
        }
        let mut outputs = Map::new();
        outputs.insert("eventId".into(), json!(first.and_then(|entry| entry.event_id())));
        Ok(outputs)
    }
}
