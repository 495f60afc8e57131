//! Runs started by SQS messages and EventBridge events (the trigger bridge's `queue` source,
//! `docs/aws-events.md`): the dispatcher function receives both — an SQS batch from a trigger
//! queue's event-source mapping, or an event an EventBridge rule targets it with — and hands
//! each to [`trellis_core::service::Services::ingest_queue`]: the subscription bound to the
//! queue (or to the event's source and detail type) starts at most one run per message id or
//! event id, with its `inputMapping` over the `TriggerEvent`.
//!
//! What comes back to the source:
//! - started, or started before (a redelivery): done;
//! - refused for good (the run could not be started: a missing input, an unknown workflow):
//!   done too — the delivery is recorded `dead-lettered` with its `TriggerEvent` under the
//!   subscription (`GET /v1/trigger-subscriptions/{id}/deliveries`);
//! - nothing bound, the subscription paused, the store unavailable: failed, so SQS redelivers
//!   the message (and after `maxReceiveCount` moves it to the trigger queue's DLQ), or Lambda
//!   retries the event (then its rule's dead-letter queue).

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use serde_json::{json, Map, Value};
use tracing::warn;
use trellis_core::service::Ingested;
use trellis_core::trigger::{events_key, sqs_key};
use trellis_core::ServiceError;

use crate::AwsApp;

/// Whether an ingest refusal is worth delivering again (the source retries it).
fn retry_later(error: &ServiceError) -> bool {
    match error {
        ServiceError::Unavailable | ServiceError::Internal => true,
        ServiceError::Conflict { code, .. } => *code == "subscription_paused",
        ServiceError::Rejected { code, .. } => *code == "subscription_not_found",
        _ => false,
    }
}

/// The `queue` sub-object of an SQS message's `TriggerEvent`.
pub fn sqs_queue_event(message: &SqsMessage) -> Value {
    let text = message.body.as_deref().unwrap_or("");
    let body = serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_owned()));
    let attributes: Map<String, Value> = message
        .message_attributes
        .iter()
        .filter_map(|(name, value)| Some((name.clone(), json!(value.string_value.as_deref()?))))
        .collect();
    json!({
        "backend": "sqs",
        "queueArn": message.event_source_arn,
        "messageId": message.message_id,
        "body": body,
        "attributes": attributes,
        "sentTimestamp": message.attributes.get("SentTimestamp"),
    })
}

/// Takes one SQS message of a trigger queue; `Err` leaves it for redelivery.
pub async fn ingest_message(app: &AwsApp, message: &SqsMessage) -> Result<Option<Ingested>, ServiceError> {
    let (Some(arn), Some(id)) = (message.event_source_arn.as_deref(), message.message_id.as_deref()) else {
        warn!("a trigger message without a source ARN or an id; leaving it for the DLQ");
        return Err(ServiceError::Internal);
    };
    match app.services.ingest_queue(&[sqs_key(arn)], id, sqs_queue_event(message)).await {
        Ok(ingested) => Ok(Some(ingested)),
        Err(error) if retry_later(&error) => {
            warn!(queue = arn, message_id = id, %error, "a trigger message is left for redelivery");
            Err(error)
        }
        Err(error) => {
            warn!(queue = arn, message_id = id, %error, "a trigger message was dead-lettered (no run)");
            Ok(None)
        }
    }
}

/// Handles a batch from a trigger queue; the response names the messages to redeliver.
pub async fn handle_queue_batch(app: &AwsApp, event: SqsEvent) -> SqsBatchResponse {
    let outcomes =
        futures_util::future::join_all(event.records.iter().map(|message| ingest_message(app, message))).await;
    let mut response = SqsBatchResponse::default();
    for (message, outcome) in event.records.iter().zip(outcomes) {
        if outcome.is_err() {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = message.message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
    }
    response
}

/// Whether `payload` is an EventBridge event for a trigger: one with an id, a source and a
/// detail type, not the scheduler's own (`aws.events`).
pub fn is_bus_event(payload: &Value) -> bool {
    let text = |name: &str| payload.get(name).and_then(Value::as_str);
    text("id").is_some() && text("detail-type").is_some() && text("source").is_some_and(|source| source != "aws.events")
}

/// Takes one EventBridge event; `Err` makes Lambda retry it (then its dead-letter queue).
pub async fn handle_bus_event(app: &AwsApp, payload: &Value) -> Result<Value, ServiceError> {
    let text = |name: &str| payload.get(name).and_then(Value::as_str).unwrap_or_default();
    let (id, source, detail_type) = (text("id"), text("source"), text("detail-type"));
    let queue = json!({
        "backend": "eventbridge",
        "eventId": id,
        "source": source,
        "detailType": detail_type,
        "time": payload.get("time"),
        "account": payload.get("account"),
        "region": payload.get("region"),
        "resources": payload.get("resources"),
        "detail": payload.get("detail"),
    });
    let keys = [events_key(source, detail_type), events_key(source, "*")];
    match app.services.ingest_queue(&keys, id, queue).await {
        Ok(ingested) => Ok(json!({ "runId": ingested.run_id, "duplicate": ingested.duplicate })),
        Err(error) if retry_later(&error) => {
            warn!(event_id = id, source, detail_type, %error, "a trigger event is left for Lambda's retry");
            Err(error)
        }
        Err(error) => {
            warn!(event_id = id, source, detail_type, %error, "a trigger event was dead-lettered (no run)");
            Ok(json!({ "deadLettered": true, "error": error.code() }))
        }
    }
}
