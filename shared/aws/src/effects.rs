//! Sending a commit's effects to SQS, then marking its page sent in DynamoDB. Notices to
//! a parent run go to the FIFO completion queue (grouped by parent, deduplicated by task id);
//! everything else goes to the standard step queue. A timer more than 15 minutes out is sent
//! with the longest delay SQS allows; the dispatcher finds it early, defers it, and sends it
//! again (chained delays).

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use trellis_core::engine::Effect;
use trellis_core::ports::{Clock, EffectSink};
use trellis_core::StoreError;
use trellis_store_dynamodb::DynamoStore;

use crate::message::StepMessage;

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
}

impl SqsEffects {
    /// A sink sending to the step and completion queues and marking pages sent in `store`.
    pub fn new(
        sqs: aws_sdk_sqs::Client,
        queue_url: String,
        completion_queue_url: String,
        store: Arc<DynamoStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { sqs, queue_url, completion_queue_url, store, clock, requests: std::sync::atomic::AtomicU64::new(0) }
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
        self.send(run_id, effects).await?;
        self.store.mark_sent(run_id, version, self.store.marker_expiry(self.clock.now())).await
    }

    /// Only pages whose effects were never marked sent are sent again; everything else is
    /// already on a queue (or done), so nothing is sent twice.
    async fn resend_outstanding(&self, run_id: &str, _outstanding: &[Effect]) -> Result<(), StoreError> {
        for (version, effects) in self.store.unsent_pages(run_id).await? {
            self.send_committed(run_id, version, &effects).await?;
        }
        Ok(())
    }
}
