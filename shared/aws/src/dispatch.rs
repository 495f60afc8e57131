//! The dispatcher: one SQS batch of step messages, one step per message, partial batch
//! failures reported back so only failed messages are redelivered.
//!
//! - An unparseable message is reported failed every time, so it reaches the DLQ.
//! - On its last allowed delivery (`maxReceiveCount`), a step is not tried again: its run
//!   fails with `step_delivery_exhausted` rather than losing the step to the DLQ.
//! - A step that is not due yet is sent again with a delay and acknowledged.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use tracing::{info, warn};
use trellis_core::engine::{Input, Verdict};
use trellis_core::ports::EffectSink;
use trellis_core::ServiceError;
use trellis_worker::{process_task, TaskResult};

use crate::message::StepMessage;
use crate::AwsApp;

/// How one message ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageOutcome {
    /// Processed (or deferred by re-sending): delete it.
    Done(TaskResult),
    /// The run was failed with `step_delivery_exhausted`: delete it.
    Exhausted,
    /// Not processed: leave it for redelivery (or the DLQ).
    Failed(String),
}

fn receive_count(message: &SqsMessage) -> u32 {
    message.attributes.get("ApproximateReceiveCount").and_then(|count| count.parse().ok()).unwrap_or(1)
}

/// Handles one message.
pub async fn handle_message(app: &AwsApp, message: &SqsMessage) -> MessageOutcome {
    let body = message.body.as_deref().unwrap_or("");
    let step = match StepMessage::decode(body) {
        Ok(step) => step,
        Err(error) => {
            warn!(message_id = ?message.message_id, %error, "unparseable step message; leaving it for the DLQ");
            return MessageOutcome::Failed(error.to_string());
        }
    };
    let deliveries = receive_count(message);
    if deliveries >= app.settings.max_receive_count {
        return match fail_exhausted(app, &step).await {
            Ok(()) => MessageOutcome::Exhausted,
            Err(error) => MessageOutcome::Failed(error.to_string()),
        };
    }
    let task = step.task(deliveries);
    match process_task(&app.services, &task, None).await {
        Ok(TaskResult::Deferred(visible_at)) => {
            let effect = step.effect.clone().due(visible_at);
            match app.effects.send(&step.run_id, &[effect]).await {
                Ok(()) => MessageOutcome::Done(TaskResult::Deferred(visible_at)),
                Err(error) => MessageOutcome::Failed(error.to_string()),
            }
        }
        Ok(result) => MessageOutcome::Done(result),
        Err(error) => MessageOutcome::Failed(error.to_string()),
    }
}

async fn fail_exhausted(app: &AwsApp, step: &StepMessage) -> Result<(), ServiceError> {
    for _ in 0..8 {
        let input = Input::DeliveryExhausted { task_id: step.task_id.clone() };
        let Some(decision) = app.services.decide(&step.run_id, input).await? else { return Ok(()) };
        if decision.outcome.verdict != Verdict::Applied {
            return Ok(());
        }
        match app.services.commit(&decision).await {
            Ok(()) => {
                info!(run_id = %step.run_id, task = %step.task_id, "step delivery exhausted; run failed");
                return Ok(());
            }
            Err(trellis_core::StoreError::Conflict) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Err(ServiceError::Unavailable)
}

/// Handles a batch from the step queue; the response names the messages to redeliver.
pub async fn handle_batch(app: &AwsApp, event: SqsEvent) -> SqsBatchResponse {
    handle_records(app, event, false).await
}

/// Handles a batch from the FIFO completion queue: after a failed message, the rest of the
/// batch is reported failed too, so one parent's notices keep their order.
pub async fn handle_fifo_batch(app: &AwsApp, event: SqsEvent) -> SqsBatchResponse {
    handle_records(app, event, true).await
}

async fn handle_records(app: &AwsApp, event: SqsEvent, fifo: bool) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    let mut blocked = false;
    for message in &event.records {
        let failed = if blocked {
            true
        } else if let MessageOutcome::Failed(reason) = handle_message(app, message).await {
            warn!(message_id = ?message.message_id, %reason, "queue message failed");
            true
        } else {
            false
        };
        if failed {
            blocked |= fifo;
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = message.message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
    }
    response
}

/// Why a dispatcher invocation failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    /// The payload is neither an SQS batch nor a scheduled event.
    #[error("the dispatcher was invoked with an unknown event")]
    UnknownEvent,
    /// The reconciler could not finish its sweep (it runs again on its schedule).
    #[error("reconciling the outbox failed: {0}")]
    Reconcile(trellis_core::StoreError),
}

/// The dispatcher function's entry: an SQS batch (`Records`) is run step by step; a
/// scheduled event (`detail-type: Scheduled Event`) runs the outbox reconciler.
pub async fn handle_trigger(app: &AwsApp, payload: serde_json::Value) -> Result<serde_json::Value, TriggerError> {
    if payload.get("Records").is_some() {
        let event: SqsEvent = serde_json::from_value(payload).map_err(|_| TriggerError::UnknownEvent)?;
        let response = handle_batch(app, event).await;
        return Ok(serde_json::to_value(response).expect("batch response serializes"));
    }
    if payload.get("detail-type").and_then(|kind| kind.as_str()) == Some("Scheduled Event") {
        let sent =
            crate::reconcile::reconcile(app, crate::reconcile::GRACE_MS).await.map_err(TriggerError::Reconcile)?;
        return Ok(serde_json::json!({ "reconciled": sent }));
    }
    Err(TriggerError::UnknownEvent)
}
