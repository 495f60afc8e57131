//! Sending a commit's effects to SQS, then marking its page sent in DynamoDB — except where
//! the data proves the page sent: a single next step (handling it is its proof, see
//! [`trellis_store_dynamodb::proven_by_successor`]), which saves a write per step, and child
//! starts and notices the committing call carried out itself (the child exists, the parent
//! applied the child's end; [`DynamoStore::record_sent`]). A send
//! that fails enlists the page in the outbox the reconciler reads. Notices to
//! a parent run go to the FIFO completion queue (grouped by parent, deduplicated by task id);
//! everything else goes to the standard step queue. A timer more than 15 minutes out is sent
//! with the longest delay SQS allows; the dispatcher finds it early, defers it, and sends it
//! again (chained delays). Child starts and a finished child's notice are carried out by the
//! committing call itself ([`trellis_core::service::Services::with_inline_children`]); the
//! queues carry them only when that failed, or when a redelivery or the reconciler re-sends
//! a page.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use trellis_core::engine::Effect;
use trellis_core::ports::{Clock, EffectSink};
use trellis_core::StoreError;
use trellis_store_dynamodb::DynamoStore;

use crate::message::StepMessage;

tokio::task_local! {
    /// Set while one queue message is handled ([`watch_unrepaired`]): raised when a send of
    /// that message's commits failed and the page could not be enlisted for the reconciler.
    static UNREPAIRED: std::sync::atomic::AtomicBool;
}

/// Runs `work` (the handling of one queue message) and tells whether a send it made failed
/// with nothing enlisted to repair it: the committed page then waits for the reconciler's
/// whole-table sweep unless the message is redelivered, whose handling re-sends the run's
/// unsent pages (a superseded task, see `trellis_worker::process_task`). Commits of other
/// runs made while handling it (a child created, a parent notified) count too: their
/// repair goes through the same redelivery.
pub async fn watch_unrepaired<F: std::future::Future>(work: F) -> (F::Output, bool) {
    UNREPAIRED
        .scope(std::sync::atomic::AtomicBool::new(false), async move {
            let output = work.await;
            (output, UNREPAIRED.with(|flag| flag.load(std::sync::atomic::Ordering::Relaxed)))
        })
        .await
}

/// Records, for the message being handled (if any), that a failed send is not enlisted.
fn raise_unrepaired() {
    let _outside_a_message = UNREPAIRED.try_with(|flag| flag.store(true, std::sync::atomic::Ordering::Relaxed));
}

/// The longest `DelaySeconds` SQS accepts.
pub const MAX_DELAY_SECONDS: u64 = 900;
/// Entries per `SendMessageBatch`.
const BATCH: usize = 10;

/// The AWS effect sink.
pub struct SqsEffects {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    completion_queue_url: String,
    store: Arc<DynamoStore>,
    clock: Arc<dyn Clock>,
    requests: std::sync::atomic::AtomicU64,
    unproven_grace_ms: u64,
}

/// How long a marker-less next step is left to the writer that committed it before a
/// redelivered task re-sends it, unless configured: the dispatcher's default timeout. A
/// redelivery comes after the queue's visibility timeout (six times the function's), so the
/// writer is gone by then; an immediate duplicate delivery re-sends nothing.
pub const DEFAULT_UNPROVEN_GRACE_MS: u64 = 60_000;

impl SqsEffects {
    /// A sink sending to the step and completion queues and marking pages sent in `store`.
    pub fn new(
        sqs: aws_sdk_sqs::Client,
        queue_url: String,
        completion_queue_url: String,
        store: Arc<DynamoStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            sqs,
            queue_url,
            completion_queue_url,
            store,
            clock,
            requests: std::sync::atomic::AtomicU64::new(0),
            unproven_grace_ms: DEFAULT_UNPROVEN_GRACE_MS,
        }
    }

    /// Leaves a marker-less next step to its writer for `ms` (see [`DEFAULT_UNPROVEN_GRACE_MS`]).
    pub fn with_unproven_grace_ms(mut self, ms: u64) -> Self {
        self.unproven_grace_ms = ms;
        self
    }

    async fn send_batch(&self, queue_url: &str, entries: Vec<SendMessageBatchRequestEntry>) -> Result<(), StoreError> {
        self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sent = self
            .sqs
            .send_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|error| StoreError::Unavailable(format!("SQS send failed: {error:?}")))?;
        if sent.failed().is_empty() {
            Ok(())
        } else {
            Err(StoreError::Unavailable(format!("SQS refused {} messages", sent.failed().len())))
        }
    }

    /// SQS requests sent so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The delay an effect is sent with: until it is due, at most 15 minutes.
    pub fn delay_seconds(&self, effect: &Effect) -> i32 {
        let wait_ms = effect.due_at().saturating_sub(self.clock.now());
        wait_ms.div_ceil(1000).min(MAX_DELAY_SECONDS) as i32
    }
}

#[async_trait]
impl EffectSink for SqsEffects {
    async fn send(&self, run_id: &str, effects: &[Effect]) -> Result<(), StoreError> {
        let (notices, steps): (Vec<&Effect>, Vec<&Effect>) = effects.iter().partition(|e| e.is_parent_notice());
        for chunk in steps.chunks(BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(index, effect)| {
                    SendMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .message_body(StepMessage::new(run_id, effect).encode())
                        .delay_seconds(self.delay_seconds(effect))
                        .build()
                        .expect("entry has id and body")
                })
                .collect();
            self.send_batch(&self.queue_url, entries).await?;
        }
        for chunk in notices.chunks(BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(index, effect)| {
                    let group = match effect {
                        Effect::NotifyParent { parent_run_id, .. } => parent_run_id.clone(),
                        _ => run_id.to_owned(),
                    };
                    SendMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .message_body(StepMessage::new(run_id, effect).encode())
                        .message_group_id(group)
                        .message_deduplication_id(effect.task_id(run_id).replace('/', ":"))
                        .build()
                        .expect("entry has id and body")
                })
                .collect();
            self.send_batch(&self.completion_queue_url, entries).await?;
        }
        Ok(())
    }

    async fn send_committed(&self, run_id: &str, version: u64, effects: &[Effect]) -> Result<(), StoreError> {
        self.send_committed_except(run_id, version, effects, &[]).await
    }

    /// Sends the effects not `carried_out` already (a child the committing call created, a
    /// parent it notified), then marks the page sent — unless the data proves it sent
    /// without a marker ([`DynamoStore::record_sent`]): a page whose effects were all
    /// carried out (the child exists, the parent applied the child's end) needs none.
    async fn send_committed_except(
        &self,
        run_id: &str,
        version: u64,
        effects: &[Effect],
        carried_out: &[Effect],
    ) -> Result<(), StoreError> {
        let others = trellis_core::ports::not_carried_out(effects, carried_out);
        if let Err(error) = self.send(run_id, &others).await {
            // The task may still be acknowledged: the reconciler's next sweep finds the page.
            return match self.store.enlist_outbox(run_id, version, self.clock.now()).await {
                Ok(()) => {
                    tracing::warn!(run_id, version, %error, "sending failed; the page is enlisted for the reconciler");
                    Ok(())
                }
                Err(enlisting) => {
                    tracing::warn!(run_id, version, %enlisting, "a failed send could not be enlisted for the reconciler");
                    raise_unrepaired();
                    Err(error)
                }
            };
        }
        // No marker where the data proves the page sent: a single next step, or child starts
        // and notices this call carried out (the child exists, the parent applied the end).
        self.store.record_sent(run_id, version, effects, carried_out, self.clock.now()).await
    }

    /// Only pages whose effects may not have been sent are sent again, and of those only the
    /// effects the data does not prove sent ([`DynamoStore::unsent_pages`]); a marker-less
    /// next step whose node is still scheduled is left to its writer for a while. Everything
    /// else is already on a queue (or done).
    async fn resend_outstanding(&self, run_id: &str, _outstanding: &[Effect]) -> Result<(), StoreError> {
        let now = self.clock.now();
        for page in self.store.unsent_pages(run_id).await? {
            if page.unproven && now.saturating_sub(page.written_at) < self.unproven_grace_ms {
                continue;
            }
            self.send_committed_except(run_id, page.version, &page.effects, &page.settled).await?;
        }
        Ok(())
    }
}
