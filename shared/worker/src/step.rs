//! One task, start to finish: decide, commit, send — through the one commit loop,
//! [`Services::advance`], with the named crash points as its hooks. An `Execute` task runs
//! an activity attempt first ([`crate::activity`]). Acknowledging the delivery is the
//! caller's (the local queue, or the SQS event-source mapping).

use std::sync::Arc;

use tracing::{debug, warn};
use trellis_core::activity::ActivityError;
use trellis_core::engine::{outstanding_effects, Effect, Input, Verdict, PARENT_CANCELLED};
use trellis_core::ports::{LocalQueue, Task};
use trellis_core::service::{CommitHooks, Decision, Services};
use trellis_core::timefmt::Millis;
use trellis_core::RunStatus;
use trellis_core::ServiceError;

use crate::activity;
use crate::crash::{maybe_crash, CrashPoint, SimulatedCrash};

/// How a task ended, and so what to do with its delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskResult {
    /// Applied: acknowledge.
    Applied,
    /// Nothing to do (late, duplicate, or the run is gone): acknowledge.
    Ignored,
    /// Redelivered after its node moved on; outstanding effects re-sent: acknowledge.
    Repaired,
    /// Not due yet: deliver it again at this time.
    Deferred(Millis),
}

/// When a deferred step (paused run) is looked at again.
const DEFER_MS: u64 = 1_000;

/// What a task's processing may use beyond the services.
#[derive(Clone, Default)]
pub struct TaskContext {
    /// Test hook: abort at this point (see [`CrashPoint`]).
    pub crash: Option<CrashPoint>,
    /// Test hook for hosts that cannot abort: fail the task once at this point.
    pub simulated: Option<Arc<SimulatedCrash>>,
    /// The local queue the task was claimed from: an activity attempt extends its lease to
    /// cover the attempt's budget. `None` on a serverless queue (the visibility timeout
    /// covers the function's).
    pub lease: Option<Arc<dyn LocalQueue>>,
}

/// The named crash points as commit hooks.
pub(crate) struct CrashHooks(pub(crate) Option<CrashPoint>);

impl CommitHooks for CrashHooks {
    fn before_commit(&self) {
        maybe_crash(self.0, CrashPoint::BeforeCommit);
    }
    fn after_commit(&self) {
        maybe_crash(self.0, CrashPoint::AfterCommit);
    }
    fn after_effects(&self) {
        maybe_crash(self.0, CrashPoint::AfterEffects);
    }
}

/// Processes one task (at least once): decide, commit, send the effects.
pub async fn process_task(services: &Services, task: &Task, context: &TaskContext) -> Result<TaskResult, ServiceError> {
    let (target, input) = match &task.effect {
        Effect::StartChild { node_id, child_run_id, workflow_id, .. } => {
            let started = services.start_child(&task.run_id, node_id, child_run_id, workflow_id).await?;
            debug!(run_id = %task.run_id, child = %child_run_id, ?started, "child start");
            return Ok(TaskResult::Applied);
        }
        Effect::CancelChild { child_run_id, reason, .. } => {
            // A join's loser says why (`join-decided`); a cascade says `parent-cancelled`.
            let reason = reason.clone().unwrap_or_else(|| PARENT_CANCELLED.to_owned());
            (child_run_id.clone(), Input::Cancel { reason: Some(reason) })
        }
        Effect::NotifyParent { parent_run_id, parent_node_id, .. } => {
            match services.child_outcome(&task.run_id, parent_node_id).await? {
                Some(input) => (parent_run_id.clone(), input),
                None => return Ok(TaskResult::Ignored),
            }
        }
        Effect::Execute { node_id, activation, attempt, .. } => {
            let attempt = activity::Attempt { node_id, activation: *activation, attempt: *attempt };
            match activity::execute(services, task, attempt, context).await? {
                Some(input) => (task.run_id.clone(), input),
                None => {
                    // Superseded or finished: a redelivery after the outcome's commit, whose
                    // send may have failed — the run's outstanding effects are re-sent.
                    if let Some(run) = services.store.load_run(&task.run_id).await? {
                        let outstanding = outstanding_effects(&run);
                        if let Err(error) = services.effects.resend_outstanding(&task.run_id, &outstanding).await {
                            warn!(run_id = %task.run_id, %error, "re-sending outstanding effects failed");
                        }
                    }
                    return Ok(TaskResult::Repaired);
                }
            }
        }
        Effect::NotifyWorker { node_id, interrupt_id, .. } => {
            return crate::callback::notify(services, task, node_id, interrupt_id, context).await;
        }
        Effect::DeliverWebhook { webhook_id, sequence, .. } => {
            return crate::webhook::deliver(services, task, webhook_id, *sequence, context).await;
        }
        Effect::PublishEvents { sequences, .. } => {
            // A refused publish leaves the task for redelivery (at least once: the CloudEvents
            // ids are stable, consumers dedupe).
            services.publish_run_events(&task.run_id, sequences).await?;
            return Ok(TaskResult::Applied);
        }
        other => (task.run_id.clone(), other.input().expect("own-run effects have an input")),
    };
    let hooks = CrashHooks(context.crash);
    let decision = match input {
        Input::ActivityFinished { .. } => commit_outcome(services, &target, input, &hooks).await?,
        input => services.advance(None, &target, input, &hooks).await?,
    };
    let Some(decision) = decision else {
        warn!(run_id = %task.run_id, task = %task.id, "task for an unknown run; dropping it");
        return Ok(TaskResult::Ignored);
    };
    let result = settle(services, task, &target, &decision).await;
    services.store.retain_run(decision.run);
    result
}

/// How often an attempt's outcome is committed again after a retryable failure before the
/// task is left for redelivery (which would run the call again).
const OUTCOME_COMMIT_TRIES: u32 = 6;

/// Commits an attempt's outcome. The call has been made, so a failed commit is retried here
/// (with backoff) rather than by redelivering the task, which would repeat the call; an
/// outcome the store refuses for good (e.g. a success whose outputs make the run's state too
/// large for an item) is committed as the attempt's failure instead, so the call is not
/// repeated either.
async fn commit_outcome(
    services: &Services,
    run_id: &str,
    input: Input,
    hooks: &CrashHooks,
) -> Result<Option<Decision>, ServiceError> {
    let mut backoff_ms = 100;
    for _ in 1..OUTCOME_COMMIT_TRIES {
        match services.advance(None, run_id, input.clone(), hooks).await {
            Err(ServiceError::Unavailable) => {
                warn!(run_id, backoff_ms, "committing an attempt's outcome failed; trying again");
                services.clock.sleep(backoff_ms).await;
                backoff_ms *= 2;
            }
            Err(ServiceError::Internal) => {
                let Input::ActivityFinished { node_id, activation, attempt, result: Ok(_) } = input else {
                    return Err(ServiceError::Internal);
                };
                warn!(run_id, node = %node_id, "the attempt's outcome could not be stored; recording it as failed");
                let error = ActivityError::new(
                    "outcome_not_recorded",
                    "the call succeeded but its outcome could not be stored (too large for the run's state?)",
                    false,
                );
                let failed = Input::ActivityFinished { node_id, activation, attempt, result: Err(error) };
                return services.advance(None, run_id, failed, hooks).await;
            }
            other => return other,
        }
    }
    services.advance(None, run_id, input, hooks).await
}

/// Whether a task that finds its target run ended re-sends that run's unsent pages: a
/// redelivery, or a child's notice to its parent.
fn resends_to_ended_run(task: &Task) -> bool {
    task.deliveries > 1 || matches!(task.effect, Effect::NotifyParent { .. })
}

/// What a decision means for the task's delivery.
async fn settle(
    services: &Services,
    task: &Task,
    target: &str,
    decision: &Decision,
) -> Result<TaskResult, ServiceError> {
    match &decision.outcome.verdict {
        Verdict::Applied => {
            debug!(run_id = %task.run_id, task = %task.id, events = decision.outcome.events.len(), "task applied");
            Ok(TaskResult::Applied)
        }
        Verdict::Stale => {
            services.effects.resend_outstanding(target, &outstanding_effects(&decision.run)).await?;
            services.notifier.committed(target);
            Ok(TaskResult::Repaired)
        }
        Verdict::Ignored(reason) if resends_to_ended_run(task) && decision.run.status.is_terminal() => {
            // A redelivery may follow a crash between the run's last commit and its send: that
            // commit's effects (a notice to its parent, a cancel of its children) have no later
            // task of the run to repair them, so its unsent pages are sent again here. A
            // child's notice is such a repair too, even on its first delivery: a notice sent
            // again because the parent may not have sent the commit that applied it (see the
            // store's proofs) finds the parent ended when that commit ended it.
            debug!(run_id = %task.run_id, task = %task.id, reason, "task redelivered to an ended run; re-sending");
            services.effects.resend_outstanding(target, &outstanding_effects(&decision.run)).await?;
            Ok(TaskResult::Repaired)
        }
        Verdict::Ignored(reason) => {
            debug!(run_id = %task.run_id, task = %task.id, reason, "task ignored");
            Ok(TaskResult::Ignored)
        }
        Verdict::Refused(refusal) => {
            // Tasks carry no operator requests; a refusal here means nothing to do.
            warn!(run_id = %task.run_id, task = %task.id, %refusal, "task refused");
            Ok(TaskResult::Ignored)
        }
        Verdict::Later => {
            let now = services.clock.now();
            let run = &decision.run;
            // A paused run is looked at again every DEFER_MS (its resume re-issues the held
            // steps anyway); a timer that is not due yet comes back when it is.
            let retry_at = match &task.effect {
                _ if run.status == RunStatus::Paused => None,
                Effect::Wake { node_id, .. } | Effect::Retry { node_id, .. } => {
                    run.nodes.get(node_id).and_then(|node| node.wake_at)
                }
                Effect::Deadline { .. } => run.started_at.map(|at| at.saturating_add(run.limits.run_duration_ms)),
                _ => None,
            };
            let retry_at = retry_at.filter(|at| *at > now).unwrap_or(now + DEFER_MS);
            Ok(TaskResult::Deferred(retry_at))
        }
    }
}
