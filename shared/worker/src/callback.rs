//! `NotifyWorker` tasks: the POST that tells an external worker about its pending
//! external-event interrupt (see [`trellis_core::interrupt::callback`]). The effect was
//! committed with the interrupt, so a crash before or during the POST redelivers the task.
//! The POST is tried [`Callbacks::attempts`] times with a doubling backoff while the
//! occurrence stays pending, then given up with a warning: the interrupt itself is never
//! touched here (its timeout or `heartbeatMs` decides), so a failed or repeated notify cannot
//! duplicate it. The body carries the token: nothing of it is logged. A `replay` fork
//! notifies nobody (its side effects are the source's, see [`trellis_core::replay`]).

use tracing::{debug, warn};
use trellis_core::interrupt::callback::{prepare, Callbacks, NOTIFY_TIMEOUT_MS};
use trellis_core::ports::Task;
use trellis_core::service::Services;
use trellis_core::ServiceError;

use crate::step::{TaskContext, TaskResult};

/// Sends the notify POST of occurrence `interrupt_id` at `node_id`, if it is still pending.
pub(crate) async fn notify(
    services: &Services,
    task: &Task,
    node_id: &str,
    interrupt_id: &str,
    context: &TaskContext,
) -> Result<TaskResult, ServiceError> {
    let Some(callbacks) = services.callbacks.clone() else {
        warn!(run_id = %task.run_id, node = node_id, "no callback sender is configured; the worker is not notified");
        return Ok(TaskResult::Ignored);
    };
    let Callbacks { signer, sender, attempts, backoff_ms, public_url } = callbacks.as_ref();
    let mut delay = *backoff_ms;
    for attempt in 1..=(*attempts).max(1) {
        let Some(run) = services.store.load_run(&task.run_id).await? else { return Ok(TaskResult::Ignored) };
        if run.replay.as_ref().is_some_and(|link| !link.delivers_events()) {
            debug!(run_id = %task.run_id, node = node_id, "a replay fork performs nothing: no worker is notified");
            return Ok(TaskResult::Ignored);
        }
        let workflow = services.pinned_workflow(&run).await?;
        let now = services.clock.now();
        let Some(notify) = prepare(signer, public_url.as_ref(), &workflow, &run, node_id, interrupt_id, now) else {
            debug!(run_id = %task.run_id, node = node_id, "the interrupt is no longer pending; not notifying");
            return Ok(TaskResult::Ignored);
        };
        if let Some(queue) = &context.lease {
            let until = now + NOTIFY_TIMEOUT_MS + delay + crate::activity::LEASE_MARGIN_MS;
            if let Err(error) = queue.release(&task.id, until).await {
                warn!(task = %task.id, %error, "extending the notify's lease failed; it may be redelivered early");
            }
        }
        match sender.post(&notify.url, &notify.headers, notify.body, NOTIFY_TIMEOUT_MS).await {
            Ok(()) => {
                debug!(run_id = %task.run_id, node = node_id, attempt, "worker notified");
                return Ok(TaskResult::Applied);
            }
            Err(error) if error.retryable && attempt < *attempts => {
                warn!(run_id = %task.run_id, node = node_id, attempt, code = %error.code, delay_ms = delay,
                    "notifying the worker failed; trying again");
                services.clock.sleep(delay).await;
                delay = delay.saturating_mul(2);
            }
            Err(error) => {
                warn!(run_id = %task.run_id, node = node_id, attempt, code = %error.code, message = %error.message,
                    "notifying the worker failed; giving up (the interrupt stays pending until its timeout)");
                return Ok(TaskResult::Ignored);
            }
        }
    }
    Ok(TaskResult::Ignored)
}
