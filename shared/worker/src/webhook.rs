//! `DeliverWebhook` tasks: one delivery attempt of one event to one subscription
//! ([`Services::deliver_webhook`]). A failed attempt comes back after its backoff as the same
//! task, deferred; the attempt count lives in the delivery's record, so it holds across
//! crashes and redeliveries. A delivery never touches its run: whatever happens here — a
//! receiver down, the store unavailable — the run goes on, and this task is deferred rather
//! than failed (a failed task would count towards its run's delivery exhaustion).

use tracing::warn;
use trellis_core::ports::Task;
use trellis_core::service::{DeliveryOutcome, Services};
use trellis_core::ServiceError;

use crate::step::{TaskContext, TaskResult};

/// How long a delivery whose attempt could not be made or recorded waits before it is tried
/// again.
const UNAVAILABLE_RETRY_MS: u64 = 5_000;

/// Makes the delivery attempt of `task`.
pub(crate) async fn deliver(
    services: &Services,
    task: &Task,
    webhook_id: &str,
    sequence: u64,
    context: &TaskContext,
) -> Result<TaskResult, ServiceError> {
    if let (Some(queue), Some(webhooks)) = (&context.lease, &services.webhooks) {
        let until = services.clock.now() + webhooks.policy.timeout_ms + crate::activity::LEASE_MARGIN_MS;
        if let Err(error) = queue.release(&task.id, until).await {
            warn!(task = %task.id, %error, "extending a delivery's lease failed; it may be redelivered early");
        }
    }
    match services.deliver_webhook(&task.run_id, webhook_id, sequence).await {
        Ok(DeliveryOutcome::Delivered | DeliveryOutcome::DeadLettered) => Ok(TaskResult::Applied),
        Ok(DeliveryOutcome::Skipped) => Ok(TaskResult::Ignored),
        Ok(DeliveryOutcome::Retry(at)) => Ok(TaskResult::Deferred(at)),
        Err(error) => {
            warn!(run_id = %task.run_id, webhook_id, sequence, %error, "a webhook delivery could not be made; trying again later");
            Ok(TaskResult::Deferred(services.clock.now() + UNAVAILABLE_RETRY_MS))
        }
    }
}
