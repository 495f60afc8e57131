//! The SQS event-source mappings of `infra/template.yaml`, played against the queues: a
//! long poll (batches of up to ten), the batch handed to the dispatcher's handler
//! ([`handle_batch`] for the step queue, [`handle_fifo_batch`] for the FIFO completion queue),
//! the messages not named in `batchItemFailures` deleted, the failed ones left to come back
//! after the visibility timeout (or reach the dead-letter queue after `maxReceiveCount`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use tokio::sync::watch;
use tracing::warn;

use crate::dispatch::{handle_batch, handle_fifo_batch};
use crate::AwsApp;

/// The event source's batch size (`BatchSize: 10`, SQS's most per receive).
pub const BATCH_SIZE: i32 = 10;
/// How long one receive waits for a message (SQS's longest long poll is 20 s).
pub const WAIT_SECONDS: i32 = 10;
/// The pause after a failed receive before the next one.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Which queue a mapping reads, and so which handler gets its batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// The step queue (the dispatcher's `handle_batch`).
    Steps,
    /// The FIFO completion queue (`handle_fifo_batch`).
    Completions,
}

/// An SQS call that failed.
#[derive(Debug, thiserror::Error)]
#[error("SQS {action} on {queue} failed: {message}")]
pub struct PumpError {
    /// The call.
    pub action: &'static str,
    /// The queue URL.
    pub queue: String,
    /// The SDK's error.
    pub message: String,
}

/// Receives up to `max` messages from `queue_url`, waiting up to `wait_seconds` for the
/// first, with the system attributes the handlers read (receive count, message group).
pub async fn receive(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    max: i32,
    wait_seconds: i32,
) -> Result<Vec<Message>, PumpError> {
    let received = sqs
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(max)
        .wait_time_seconds(wait_seconds)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .map_err(|error| PumpError {
            action: "ReceiveMessage",
            queue: queue_url.to_owned(),
            message: format!("{error:?}"),
        })?;
    Ok(received.messages.unwrap_or_default())
}

/// `message` as a record of the event Lambda hands the function.
pub fn sqs_message(message: &Message) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = message.message_id().map(str::to_owned);
    record.receipt_handle = message.receipt_handle().map(str::to_owned);
    record.body = message.body().map(str::to_owned);
    record.md5_of_body = message.md5_of_body().map(str::to_owned);
    record.event_source = Some("aws:sqs".to_owned());
    if let Some(attributes) = message.attributes() {
        for (name, value) in attributes {
            record.attributes.insert(name.as_str().to_owned(), value.clone());
        }
    }
    record
}

/// The batch event of `messages`.
pub fn sqs_event(messages: &[Message]) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages.iter().map(sqs_message).collect();
    event
}

/// Hands `event` to the handler of `kind`.
pub async fn deliver(app: &AwsApp, kind: QueueKind, event: SqsEvent) -> SqsBatchResponse {
    match kind {
        QueueKind::Steps => handle_batch(app, event).await,
        QueueKind::Completions => handle_fifo_batch(app, event).await,
    }
}

/// The message ids a response reports failed.
pub fn failed_ids(response: &SqsBatchResponse) -> HashSet<String> {
    response.batch_item_failures.iter().map(|failure| failure.item_identifier.clone()).collect()
}

/// Deletes the messages of `messages` not in `failed` (the failed ones come back after the
/// visibility timeout); returns how many were deleted.
pub async fn settle(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    messages: &[Message],
    failed: &HashSet<String>,
) -> Result<usize, PumpError> {
    let entries: Vec<DeleteMessageBatchRequestEntry> = messages
        .iter()
        .enumerate()
        .filter(|(_, message)| !message.message_id().is_some_and(|id| failed.contains(id)))
        .filter_map(|(index, message)| {
            let receipt = message.receipt_handle()?;
            DeleteMessageBatchRequestEntry::builder().id(index.to_string()).receipt_handle(receipt).build().ok()
        })
        .collect();
    if entries.is_empty() {
        return Ok(0);
    }
    let count = entries.len();
    let error = |message: String| PumpError { action: "DeleteMessageBatch", queue: queue_url.to_owned(), message };
    let deleted = sqs
        .delete_message_batch()
        .queue_url(queue_url)
        .set_entries(Some(entries))
        .send()
        .await
        .map_err(|e| error(format!("{e:?}")))?;
    if let Some(failure) = deleted.failed().first() {
        // Not deleted: the message comes back and is handled again (the handlers are
        // idempotent by task id), as when a function's deletion fails on AWS.
        warn!(queue = queue_url, id = failure.id(), code = failure.code(), "a handled message was not deleted");
    }
    Ok(count - deleted.failed().len())
}

/// What one receive-handle-delete round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    /// Messages received (and handed over).
    pub received: usize,
    /// Messages the handler reported failed (left on the queue).
    pub failed: usize,
}

/// One round of the mapping: receive a batch, hand it over, delete what succeeded.
pub async fn pump_round(
    app: &AwsApp,
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    kind: QueueKind,
    wait_seconds: i32,
) -> Result<Round, PumpError> {
    let messages = receive(sqs, queue_url, BATCH_SIZE, wait_seconds).await?;
    if messages.is_empty() {
        return Ok(Round::default());
    }
    let failed = failed_ids(&deliver(app, kind, sqs_event(&messages)).await);
    settle(sqs, queue_url, &messages, &failed).await?;
    Ok(Round { received: messages.len(), failed: failed.len() })
}

/// Plays the mapping of `queue_url` until `shutdown` turns true: a receive in progress is
/// abandoned then (its messages, if any, come back after the visibility timeout); a batch in
/// the handler is finished first.
pub async fn run_mapping(
    app: Arc<AwsApp>,
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    kind: QueueKind,
    mut shutdown: watch::Receiver<bool>,
) {
    while !*shutdown.borrow() {
        let messages = tokio::select! {
            received = receive(&sqs, &queue_url, BATCH_SIZE, WAIT_SECONDS) => received,
            _ = shutdown.changed() => break,
        };
        let messages = match messages {
            Ok(messages) if messages.is_empty() => continue,
            Ok(messages) => messages,
            Err(error) => {
                warn!(%error, "receive failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(RETRY_PAUSE) => continue,
                    _ = shutdown.changed() => break,
                }
            }
        };
        let failed = failed_ids(&deliver(&app, kind, sqs_event(&messages)).await);
        if let Err(error) = settle(&sqs, &queue_url, &messages, &failed).await {
            warn!(%error, "handled messages not deleted; they will be handled again");
        }
    }
}
