//! The dispatcher: one SQS batch of step messages, one step per message, partial batch
//! failures reported back so only failed messages are redelivered.
//!
//! - A batch's messages are handled concurrently by run ([`crate::batch::run_grouped`]):
//!   different runs at the same time, one run's messages one after another in batch order. A
//!   slow step (an activity's call) holds up only its own run, so a batch of slow steps takes
//!   about as long as its slowest run, not the sum; the function timeout
//!   (`TRELLIS_DISPATCHER_TIMEOUT_MS`) bounds one attempt ([`crate::Settings::max_attempt_ms`]).
//! - An unparseable message is reported failed every time, so it reaches the DLQ.
//! - On its last allowed delivery (`maxReceiveCount`), a step is not tried again: its run
//!   fails with `step_delivery_exhausted` rather than losing the step to the DLQ.
//! - A step that is not due yet is sent again with a delay and acknowledged.
//! - A step whose commit could not be sent, nor its page enlisted for the reconciler, is
//!   reported failed although it was applied ([`crate::effects::watch_unrepaired`]): its
//!   redelivery re-sends the run's unsent pages — unless the redelivery would be the last
//!   allowed one, which fails the run.

use std::future::Future;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use tracing::{info, warn};
use trellis_core::engine::{Effect, Input, Verdict};
use trellis_core::ports::EffectSink;
use trellis_core::service::NoHooks;
use trellis_core::ServiceError;
use trellis_worker::{process_task, TaskResult};

use crate::batch::{run_grouped, AfterFailure};
use crate::effects::watch_unrepaired;
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
        if let Effect::DeliverWebhook { .. } = step.effect {
            // A delivery never fails its run: its attempts are counted in its own record.
            warn!(run_id = %step.run_id, task = %step.task_id, "a webhook delivery task reached its last receive; dropping it");
            return MessageOutcome::Done(TaskResult::Ignored);
        }
        if let Effect::PublishEvents { .. } = step.effect {
            // A publish never fails its run either; left failed, it reaches the step DLQ,
            // where an operator redrives it (nothing is lost).
            warn!(run_id = %step.run_id, task = %step.task_id, "a publish to the event bus reached its last receive; leaving it for the DLQ");
            return MessageOutcome::Failed("publishing run events kept failing".into());
        }
        return match fail_exhausted(app, &step).await {
            Ok(()) => MessageOutcome::Exhausted,
            Err(error) => MessageOutcome::Failed(error.to_string()),
        };
    }
    let task = step.task(deliveries);
    let (processed, unrepaired) = watch_unrepaired(process_task(&app.services, &task, &app.task_context)).await;
    if unrepaired && processed.is_ok() {
        // A commit's send failed and the page could not be enlisted: redelivered, the task
        // finds itself superseded and re-sends the run's unsent pages. Not into the last
        // delivery, though, which fails the run (the reconciler's full sweep remains).
        if deliveries + 1 < app.settings.max_receive_count {
            return MessageOutcome::Failed("a committed send failed and could not be enlisted".into());
        }
        warn!(run_id = %step.run_id, task = %step.task_id, "a committed send failed unenlisted, and a redelivery would be the last allowed one; acknowledging");
    }
    match processed {
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
    let input = Input::DeliveryExhausted { task_id: step.task_id.clone() };
    let decision = app.services.advance(None, &step.run_id, input, &NoHooks).await?;
    if decision.is_some_and(|decision| decision.outcome.verdict == Verdict::Applied) {
        info!(run_id = %step.run_id, task = %step.task_id, "step delivery exhausted; run failed");
    }
    Ok(())
}

/// Handles a batch from the step queue; the response names the messages to redeliver.
/// Messages of different runs are handled concurrently, one run's in batch order; each
/// message fails or succeeds on its own (an unparseable one is a group of its own).
pub async fn handle_batch(app: &AwsApp, event: SqsEvent) -> SqsBatchResponse {
    respond(&event.records, false, |message| handle_message(app, message)).await
}

/// Handles a batch from the FIFO completion queue: message groups (`MessageGroupId`, one per
/// parent run) are handled concurrently; after a failed message, the rest of its group is
/// reported failed too, so one parent's notices keep their order. If a message carries no
/// group id, the whole batch is treated as one group.
pub async fn handle_fifo_batch(app: &AwsApp, event: SqsEvent) -> SqsBatchResponse {
    respond(&event.records, true, |message| handle_message(app, message)).await
}

/// The run a step message belongs to; `None` (a group of its own) when it does not parse,
/// and for an activity attempt: attempts of one run run side by side (their commits retry on
/// a lost race like any other), so two slow calls of one run never add up past the
/// function's timeout.
fn run_of(message: &SqsMessage) -> Option<String> {
    let step = StepMessage::decode(message.body.as_deref().unwrap_or("")).ok()?;
    (!step.effect.is_outbound_io()).then_some(step.run_id)
}

fn message_group(message: &SqsMessage) -> Option<&str> {
    message.attributes.get("MessageGroupId").map(String::as_str)
}

/// Runs `handle` over `records` grouped as the queue requires and names the failed ones.
async fn respond<'a, F, Fut>(records: &'a [SqsMessage], fifo: bool, handle: F) -> SqsBatchResponse
where
    F: Fn(&'a SqsMessage) -> Fut,
    Fut: Future<Output = MessageOutcome>,
{
    let whole_batch = fifo && records.iter().any(|message| message_group(message).is_none());
    let key = |message: &SqsMessage| match (fifo, whole_batch) {
        (true, true) => Some(String::new()),
        (true, false) => message_group(message).map(str::to_owned),
        (false, _) => run_of(message),
    };
    let after_failure = if fifo { AfterFailure::FailRest } else { AfterFailure::Continue };
    let handle = &handle;
    let failed = run_grouped(records, key, after_failure, |message| async move {
        match handle(message).await {
            MessageOutcome::Failed(reason) => {
                warn!(message_id = ?message.message_id, %reason, "queue message failed");
                true
            }
            _ => false,
        }
    })
    .await;
    let mut response = SqsBatchResponse::default();
    for (message, _) in records.iter().zip(failed).filter(|(_, failed)| *failed) {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = message.message_id.clone().unwrap_or_default();
        response.batch_item_failures.push(failure);
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
    /// The scheduler tick could not read the schedules (it runs again next minute).
    #[error("the scheduler tick failed: {0}")]
    Scheduler(trellis_core::ServiceError),
    /// A trigger event could not be taken now (Lambda retries it, then dead-letters it).
    #[error("the trigger event was not taken: {0}")]
    Ingest(trellis_core::ServiceError),
}

/// Whether a batch comes from a trigger queue rather than the step queue: its records name
/// a source queue other than the step queue (a batch comes from one event-source mapping).
fn from_trigger_queue(step_queue_url: &str, event: &SqsEvent) -> bool {
    let step_queue = step_queue_url.rsplit('/').next().unwrap_or_default();
    let source = event.records.first().and_then(|record| record.event_source_arn.as_deref());
    source.is_some_and(|arn| arn.rsplit(':').next() != Some(step_queue))
}

/// The `trellis` field of the scheduler tick's event (the template's one-minute rule sends
/// `{"trellis": "scheduler-tick"}`).
pub const SCHEDULER_TICK: &str = "scheduler-tick";

/// The dispatcher function's entry: an SQS batch (`Records`) is run step by step (runs
/// concurrently, see [`handle_batch`]); a scheduled event (`detail-type: Scheduled Event`)
/// runs the outbox reconciler (a whole-table sweep when its `detail` has `"fullScan": true`);
/// the scheduler tick (`{"trellis": "scheduler-tick"}`) starts the due schedule occurrences;
/// a batch from a trigger queue and an EventBridge event a rule delivers start runs
/// ([`crate::triggers`]).
pub async fn handle_trigger(app: &AwsApp, payload: serde_json::Value) -> Result<serde_json::Value, TriggerError> {
    if payload.get("Records").is_some() {
        let event: SqsEvent = serde_json::from_value(payload).map_err(|_| TriggerError::UnknownEvent)?;
        let response = if from_trigger_queue(&app.settings.step_queue_url, &event) {
            crate::triggers::handle_queue_batch(app, event).await
        } else {
            handle_batch(app, event).await
        };
        return Ok(serde_json::to_value(response).expect("batch response serializes"));
    }
    if crate::triggers::is_bus_event(&payload) {
        return crate::triggers::handle_bus_event(app, &payload).await.map_err(TriggerError::Ingest);
    }
    if payload.get("trellis").and_then(|kind| kind.as_str()) == Some(SCHEDULER_TICK) {
        let report = app.services.tick_schedules().await.map_err(TriggerError::Scheduler)?;
        return Ok(serde_json::json!({ "started": report.started, "skipped": report.skipped }));
    }
    if payload.get("detail-type").and_then(|kind| kind.as_str()) == Some("Scheduled Event") {
        let full = payload.pointer("/detail/fullScan").and_then(serde_json::Value::as_bool) == Some(true);
        let grace = crate::reconcile::GRACE_MS;
        let sent = if full {
            crate::reconcile::reconcile_full(app, grace).await
        } else {
            crate::reconcile::reconcile(app, grace).await
        };
        let sent = sent.map_err(TriggerError::Reconcile)?;
        return Ok(serde_json::json!({ "reconciled": sent }));
    }
    Err(TriggerError::UnknownEvent)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::batch::tests::Recorder;

    /// A step message `id` of `run` (a FIFO message of group `group` when given).
    fn message(id: &str, run: &str, group: Option<&str>) -> SqsMessage {
        let effect = Effect::Step { node_id: id.into(), activation: 1, due_at: 0 };
        let mut message = SqsMessage::default();
        message.message_id = Some(id.to_owned());
        message.body = Some(StepMessage::new(run, &effect).encode());
        if let Some(group) = group {
            message.attributes.insert("MessageGroupId".into(), group.to_owned());
        }
        message
    }

    fn garbage(id: &str) -> SqsMessage {
        let mut message = SqsMessage::default();
        message.message_id = Some(id.to_owned());
        message.body = Some("not a step".into());
        message
    }

    /// Handles `records` with a fake handler: every message works 10 ms (the ones in `slow`
    /// 50 ms) and those in `failing` fail. Returns the failed ids and the recorder.
    async fn handle(records: &[SqsMessage], fifo: bool, slow: &[&str], failing: &[&str]) -> (Vec<String>, Recorder) {
        let recorder = Recorder::default();
        let response = respond(records, fifo, |message| {
            let recorder = &recorder;
            async move {
                let id = message.message_id.as_deref().unwrap_or_default();
                let group = if fifo {
                    message_group(message).unwrap_or("batch").to_owned()
                } else {
                    run_of(message).unwrap_or_else(|| id.to_owned())
                };
                recorder.start(&group, id);
                tokio::time::sleep(Duration::from_millis(if slow.contains(&id) { 50 } else { 10 })).await;
                recorder.end(&group, id);
                if failing.contains(&id) {
                    MessageOutcome::Failed("fake".into())
                } else {
                    MessageOutcome::Exhausted
                }
            }
        })
        .await;
        (response.batch_item_failures.into_iter().map(|failure| failure.item_identifier).collect(), recorder)
    }

    #[tokio::test(start_paused = true)]
    async fn step_batches_run_runs_concurrently_and_each_run_in_order() {
        let records = [
            message("a", "run-1", None),
            message("b", "run-2", None),
            message("c", "run-1", None),
            garbage("g"),
            message("d", "run-2", None),
        ];
        let (failed, recorder) = handle(&records, false, &["a"], &["a", "g", "d"]).await;
        assert_eq!(failed, ["a", "g", "d"], "each failed message by its id, in batch order");
        assert_eq!(recorder.started().len(), 5, "a failure does not hold back the rest of its run");
        assert_eq!(recorder.max_in_flight(), 3, "run-1, run-2 and the unparseable message at once");
        assert_eq!(recorder.max_in_flight_of("run-1"), 1);
        assert_eq!(recorder.max_in_flight_of("run-2"), 1);
        assert!(recorder.ended_before_start("a", "c"), "run-1 keeps its order behind the slow step");
        assert!(recorder.ended_before_start("b", "d"));
        assert!(!recorder.ended_before_start("a", "d"), "run-2 does not wait for run-1's slow step");
    }

    #[tokio::test(start_paused = true)]
    async fn fifo_batches_fail_the_rest_of_a_group_and_run_groups_concurrently() {
        let records = [
            message("p1", "child-1", Some("parent-1")),
            message("q1", "child-2", Some("parent-2")),
            message("p2", "child-3", Some("parent-1")),
            message("q2", "child-4", Some("parent-2")),
        ];
        let (failed, recorder) = handle(&records, true, &[], &["p1"]).await;
        assert_eq!(failed, ["p1", "p2"]);
        assert_eq!(recorder.started(), ["p1", "q1", "q2"], "p2 is not handled after p1 failed");
        assert_eq!(recorder.max_in_flight(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn fifo_batches_without_group_ids_are_one_group() {
        let records = [
            message("p1", "child-1", Some("parent-1")),
            message("n1", "child-2", None),
            message("q1", "child-3", Some("parent-2")),
        ];
        let (failed, recorder) = handle(&records, true, &[], &["p1"]).await;
        assert_eq!(failed, ["p1", "n1", "q1"], "nothing after the failure is handled");
        assert_eq!(recorder.started(), ["p1"]);
        assert_eq!(recorder.max_in_flight(), 1);
    }

    #[test]
    fn a_batch_from_another_queue_than_the_step_queue_is_a_trigger_batch() {
        let step_url = "https://sqs.us-east-1.amazonaws.com/123456789012/trellis-StepQueue-abc";
        let batch = |arn: Option<&str>| {
            let mut record = message("m", "run-1", None);
            record.event_source_arn = arn.map(str::to_owned);
            let mut event = SqsEvent::default();
            event.records.push(record);
            event
        };
        assert!(!from_trigger_queue(
            step_url,
            &batch(Some("arn:aws:sqs:us-east-1:123456789012:trellis-StepQueue-abc"))
        ));
        assert!(from_trigger_queue(
            step_url,
            &batch(Some("arn:aws:sqs:us-east-1:123456789012:trellis-TriggerQueue-def"))
        ));
        assert!(!from_trigger_queue(step_url, &batch(None)), "no source named (a local pump): the step queue");
    }

    #[test]
    fn a_runs_steps_share_a_group_and_its_activity_attempts_each_get_their_own() {
        let step = message("s", "run-a", None);
        assert_eq!(run_of(&step).as_deref(), Some("run-a"));
        let mut attempt = SqsMessage::default();
        let effect = Effect::Execute { node_id: "call".into(), activation: 1, attempt: 0, due_at: 0 };
        attempt.body = Some(StepMessage::new("run-a", &effect).encode());
        assert_eq!(run_of(&attempt), None, "two slow calls of one run never queue behind each other");
    }
}
