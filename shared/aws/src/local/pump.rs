//! The SQS event-source mappings of `infra/template.yaml`, played against the queues: a
//! long poll (batches of up to ten), the batch handed to the dispatcher's handler
//! ([`handle_batch`] for the step queue, [`handle_fifo_batch`] for the FIFO completion queue),
//! the messages not named in `batchItemFailures` deleted, the failed ones left to come back
//! after the visibility timeout (or reach the dead-letter queue after `maxReceiveCount`).
//!
//! As on Lambda, a handler that panics fails its whole batch (nothing is deleted) and the
//! mapping goes on with the next one. A stop lets the receive in progress end (a short long
//! poll) and makes the messages it brought visible again at once, unhandled, so a restart
//! gets them without waiting for the visibility timeout.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName,
};
use tokio::sync::watch;
use tracing::{error, warn};

use crate::dispatch::{handle_batch, handle_fifo_batch};
use crate::AwsApp;

/// The event source's batch size (`BatchSize: 10`, SQS's most per receive).
pub const BATCH_SIZE: i32 = 10;
/// How long one receive waits for a message (SQS's longest long poll is 20 s): short, as a
/// stop waits for the receive in progress to end.
pub const WAIT_SECONDS: i32 = 2;
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

/// Makes `messages` visible again at once (visibility timeout 0), so they are received again
/// without waiting; returns how many were released.
pub async fn release(sqs: &aws_sdk_sqs::Client, queue_url: &str, messages: &[Message]) -> Result<usize, PumpError> {
    let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = messages
        .iter()
        .enumerate()
        .filter_map(|(index, message)| {
            let receipt = message.receipt_handle()?;
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(index.to_string())
                .receipt_handle(receipt)
                .visibility_timeout(0)
                .build()
                .ok()
        })
        .collect();
    if entries.is_empty() {
        return Ok(0);
    }
    let count = entries.len();
    let error =
        |message: String| PumpError { action: "ChangeMessageVisibilityBatch", queue: queue_url.to_owned(), message };
    let changed = sqs
        .change_message_visibility_batch()
        .queue_url(queue_url)
        .set_entries(Some(entries))
        .send()
        .await
        .map_err(|e| error(format!("{e:?}")))?;
    Ok(count - changed.failed().len())
}

/// The queue a mapping reads, as the mapping uses it (SQS, or a fake in the unit tests).
pub(crate) trait Queue: Sync {
    /// Receives a batch, waiting up to `wait_seconds` for its first message.
    fn receive(&self, wait_seconds: i32) -> impl Future<Output = Result<Vec<Message>, PumpError>> + Send;
    /// Deletes the messages of `messages` not in `failed`.
    fn settle(
        &self,
        messages: &[Message],
        failed: &HashSet<String>,
    ) -> impl Future<Output = Result<usize, PumpError>> + Send;
    /// Makes `messages` visible again at once.
    fn release(&self, messages: &[Message]) -> impl Future<Output = Result<usize, PumpError>> + Send;
    /// The queue's name in logs.
    fn name(&self) -> &str;
}

/// A queue of an SQS endpoint.
struct SqsQueue {
    sqs: aws_sdk_sqs::Client,
    url: String,
}

impl Queue for SqsQueue {
    async fn receive(&self, wait_seconds: i32) -> Result<Vec<Message>, PumpError> {
        receive(&self.sqs, &self.url, BATCH_SIZE, wait_seconds).await
    }

    async fn settle(&self, messages: &[Message], failed: &HashSet<String>) -> Result<usize, PumpError> {
        settle(&self.sqs, &self.url, messages, failed).await
    }

    async fn release(&self, messages: &[Message]) -> Result<usize, PumpError> {
        release(&self.sqs, &self.url, messages).await
    }

    fn name(&self) -> &str {
        &self.url
    }
}

/// What one receive-handle-delete round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Round {
    /// The receive brought nothing.
    #[default]
    Idle,
    /// The batch was handled; the messages not reported failed were deleted.
    Handled {
        /// Messages received (and handed over).
        received: usize,
        /// Messages the handler reported failed (left on the queue).
        failed: usize,
    },
    /// The handler panicked: the whole batch failed, nothing was deleted.
    Panicked {
        /// Messages received (and left on the queue).
        received: usize,
    },
    /// A stop came during the receive: the batch was made visible again, unhandled.
    Released {
        /// Messages received (and released).
        received: usize,
    },
}

/// One round of a mapping: receive a batch; unless `shutdown` turned true meanwhile (then
/// release it), hand it to `handler` in a task of its own (a panic fails the whole batch)
/// and delete what it did not report failed.
pub(crate) async fn pump_round<Q, H, F>(
    queue: &Q,
    handler: &H,
    shutdown: &watch::Receiver<bool>,
) -> Result<Round, PumpError>
where
    Q: Queue,
    H: Fn(SqsEvent) -> F + Sync,
    F: Future<Output = SqsBatchResponse> + Send + 'static,
{
    let messages = queue.receive(WAIT_SECONDS).await?;
    let received = messages.len();
    if received == 0 {
        return Ok(Round::Idle);
    }
    let stopping = *shutdown.borrow();
    if stopping {
        queue.release(&messages).await?;
        return Ok(Round::Released { received });
    }
    let failed = match tokio::spawn(handler(sqs_event(&messages))).await {
        Ok(response) => failed_ids(&response),
        Err(error) => {
            error!(queue = queue.name(), %error, received, "the handler failed the whole batch; nothing deleted");
            return Ok(Round::Panicked { received });
        }
    };
    queue.settle(&messages, &failed).await?;
    Ok(Round::Handled { received, failed: failed.len() })
}

/// Plays a mapping of `queue` with `handler` until `shutdown` turns true (see the module
/// documentation); after a failed SQS call it pauses before the next round.
pub(crate) async fn run_rounds<Q, H, F>(queue: &Q, handler: H, mut shutdown: watch::Receiver<bool>)
where
    Q: Queue,
    H: Fn(SqsEvent) -> F + Sync,
    F: Future<Output = SqsBatchResponse> + Send + 'static,
{
    loop {
        let stopping = *shutdown.borrow();
        if stopping {
            break;
        }
        if let Err(error) = pump_round(queue, &handler, &shutdown).await {
            warn!(%error, "retrying");
            tokio::select! {
                () = tokio::time::sleep(RETRY_PAUSE) => {}
                _ = shutdown.changed() => break,
            }
        }
    }
}

/// Plays the mapping of `queue_url` until `shutdown` turns true: the receive in progress
/// ends (at most [`WAIT_SECONDS`]) and what it brought is released; a batch in the handler is
/// finished first.
pub async fn run_mapping(
    app: Arc<AwsApp>,
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    kind: QueueKind,
    shutdown: watch::Receiver<bool>,
) {
    let queue = SqsQueue { sqs, url: queue_url };
    let handler = move |event: SqsEvent| {
        let app = app.clone();
        async move { deliver(&app, kind, event).await }
    };
    run_rounds(&queue, handler, shutdown).await;
}

/// Plays the mapping of a trigger queue (`queue_arn` at `queue_url`) until `shutdown` turns
/// true: each batch's records name the queue as their source, as Lambda's do, and go to
/// [`crate::triggers::handle_queue_batch`].
pub async fn run_trigger_mapping(
    app: Arc<AwsApp>,
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    queue_arn: String,
    shutdown: watch::Receiver<bool>,
) {
    let queue = SqsQueue { sqs, url: queue_url };
    let handler = move |mut event: SqsEvent| {
        let (app, arn) = (app.clone(), queue_arn.clone());
        async move {
            for record in &mut event.records {
                record.event_source_arn = Some(arn.clone());
            }
            crate::triggers::handle_queue_batch(&app, event).await
        }
    };
    run_rounds(&queue, handler, shutdown).await;
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;

    /// A queue handing out `batches` of message bodies, recording what was deleted and
    /// released; once empty, it turns `stop` on (or at `stop_at`, a batch's index).
    struct FakeQueue {
        batches: Mutex<VecDeque<Vec<&'static str>>>,
        stop: watch::Sender<bool>,
        stop_at: Option<usize>,
        served: Mutex<usize>,
        deleted: Mutex<Vec<String>>,
        released: Mutex<Vec<String>>,
    }

    impl FakeQueue {
        fn new(batches: &[&[&'static str]], stop_at: Option<usize>) -> (Self, watch::Receiver<bool>) {
            let (stop, stopped) = watch::channel(false);
            let batches = batches.iter().map(|batch| batch.to_vec()).collect();
            let queue = Self {
                batches: Mutex::new(batches),
                stop,
                stop_at,
                served: Mutex::new(0),
                deleted: Mutex::default(),
                released: Mutex::default(),
            };
            (queue, stopped)
        }
    }

    fn message(body: &str) -> Message {
        Message::builder().message_id(body).receipt_handle(format!("receipt-{body}")).body(body).build()
    }

    fn ids(messages: &[Message]) -> impl Iterator<Item = String> + '_ {
        messages.iter().filter_map(|message| message.message_id().map(str::to_owned))
    }

    impl Queue for FakeQueue {
        async fn receive(&self, _wait_seconds: i32) -> Result<Vec<Message>, PumpError> {
            let index = {
                let mut served = self.served.lock().unwrap();
                *served += 1;
                *served - 1
            };
            let batch = self.batches.lock().unwrap().pop_front();
            if batch.is_none() || self.stop_at == Some(index) {
                self.stop.send_replace(true);
            }
            Ok(batch.unwrap_or_default().into_iter().map(message).collect())
        }

        async fn settle(&self, messages: &[Message], failed: &HashSet<String>) -> Result<usize, PumpError> {
            let deleted: Vec<String> = ids(messages).filter(|id| !failed.contains(id)).collect();
            let count = deleted.len();
            self.deleted.lock().unwrap().extend(deleted);
            Ok(count)
        }

        async fn release(&self, messages: &[Message]) -> Result<usize, PumpError> {
            self.released.lock().unwrap().extend(ids(messages));
            Ok(messages.len())
        }

        fn name(&self) -> &str {
            "fake"
        }
    }

    /// A handler that panics on a batch holding `boom` and reports `bad` failed.
    async fn handler(event: SqsEvent) -> SqsBatchResponse {
        if event.records.iter().any(|record| record.body.as_deref() == Some("boom")) {
            panic!("the handler panics on boom");
        }
        let mut response = SqsBatchResponse::default();
        for record in event.records.iter().filter(|record| record.body.as_deref() == Some("bad")) {
            let mut failure = aws_lambda_events::event::sqs::BatchItemFailure::default();
            failure.item_identifier = record.message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
        response
    }

    #[tokio::test]
    async fn a_panicking_handler_fails_its_batch_and_the_mapping_goes_on() {
        let (queue, stopped) = FakeQueue::new(&[&["boom", "a"], &["b", "bad"]], None);
        run_rounds(&queue, handler, stopped).await;
        // The panicking batch stays on the queue (both messages come back after the visibility
        // timeout); the next batch is handled and its successes deleted.
        assert_eq!(*queue.deleted.lock().unwrap(), ["b"]);
        assert!(queue.released.lock().unwrap().is_empty());
        assert!(queue.batches.lock().unwrap().is_empty(), "every batch was received");
    }

    #[tokio::test]
    async fn a_round_reports_a_panic_without_deleting() {
        let (queue, stopped) = FakeQueue::new(&[&["boom"], &["a", "bad"]], None);
        assert_eq!(pump_round(&queue, &handler, &stopped).await.unwrap(), Round::Panicked { received: 1 });
        assert_eq!(pump_round(&queue, &handler, &stopped).await.unwrap(), Round::Handled { received: 2, failed: 1 });
        assert_eq!(pump_round(&queue, &handler, &stopped).await.unwrap(), Round::Idle);
        assert_eq!(*queue.deleted.lock().unwrap(), ["a"]);
    }

    #[tokio::test]
    async fn a_stop_during_the_receive_releases_its_batch_unhandled() {
        let (queue, stopped) = FakeQueue::new(&[&["a"], &["boom", "b"], &["c"]], Some(1));
        run_rounds(&queue, handler, stopped).await;
        // The first batch is handled; the stop comes while the second is received: it is made
        // visible again, not handed over (no panic), and the third is never received.
        assert_eq!(*queue.deleted.lock().unwrap(), ["a"]);
        assert_eq!(*queue.released.lock().unwrap(), ["boom", "b"]);
        assert_eq!(queue.batches.lock().unwrap().len(), 1);
    }
}
