//! One task, start to finish: decide, commit, send. Acknowledging the delivery is the
//! caller's (the local queue, or the SQS event-source mapping).

use tracing::{debug, warn};
use trellis_core::engine::{outstanding_effects, Effect, Input, Verdict, PARENT_CANCELLED};
use trellis_core::ports::Task;
use trellis_core::service::Services;
use trellis_core::timefmt::Millis;
use trellis_core::RunStatus;
use trellis_core::{ServiceError, StoreError};

use crate::crash::{maybe_crash, CrashPoint};

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

/// How many times to re-decide after losing a version race before leaving the task for
/// redelivery.
const MAX_RACES: usize = 16;
/// When a deferred step (paused run) is looked at again.
const DEFER_MS: u64 = 1_000;

/// Processes one task (at least once): decide, commit, send the effects.
pub async fn process_task(
    services: &Services,
    task: &Task,
    crash: Option<CrashPoint>,
) -> Result<TaskResult, ServiceError> {
    let (target, input) = match &task.effect {
        Effect::StartChild { node_id, child_run_id, workflow_id, .. } => {
            let started = services.start_child(&task.run_id, node_id, child_run_id, workflow_id).await?;
            debug!(run_id = %task.run_id, child = %child_run_id, ?started, "child start");
            return Ok(TaskResult::Applied);
        }
        Effect::CancelChild { child_run_id, .. } => {
            (child_run_id.clone(), Input::Cancel { reason: Some(PARENT_CANCELLED.to_owned()) })
        }
        Effect::NotifyParent { parent_run_id, parent_node_id, .. } => {
            match services.child_outcome(&task.run_id, parent_node_id).await? {
                Some(input) => (parent_run_id.clone(), input),
                None => return Ok(TaskResult::Ignored),
            }
        }
        other => (task.run_id.clone(), other.input().expect("own-run effects have an input")),
    };
    for _ in 0..MAX_RACES {
        let Some(decision) = services.decide(&target, input.clone()).await? else {
            warn!(run_id = %task.run_id, task = %task.id, "task for an unknown run; dropping it");
            return Ok(TaskResult::Ignored);
        };
        match decision.outcome.verdict {
            Verdict::Applied => {
                maybe_crash(crash, CrashPoint::BeforeCommit);
                let outcome = &decision.outcome;
                let committed = services
                    .store
                    .commit(&decision.run, decision.expected_version, &outcome.events, &outcome.effects)
                    .await;
                match committed {
                    Ok(()) => decision.log_transition(),
                    Err(StoreError::Conflict) => continue,
                    Err(error) => return Err(error.into()),
                }
                maybe_crash(crash, CrashPoint::AfterCommit);
                services.send_effects(&target, decision.run.version, &outcome.effects).await;
                maybe_crash(crash, CrashPoint::AfterEffects);
                debug!(run_id = %task.run_id, task = %task.id, events = outcome.events.len(), "task applied");
                return Ok(TaskResult::Applied);
            }
            Verdict::Stale => {
                services.effects.resend_outstanding(&target, &outstanding_effects(&decision.run)).await?;
                services.notifier.committed(&target);
                return Ok(TaskResult::Repaired);
            }
            Verdict::Ignored(reason) => {
                debug!(run_id = %task.run_id, task = %task.id, reason, "task ignored");
                return Ok(TaskResult::Ignored);
            }
            Verdict::Refused(refusal) => {
                // Tasks carry no operator requests; a refusal here means nothing to do.
                warn!(run_id = %task.run_id, task = %task.id, %refusal, "task refused");
                return Ok(TaskResult::Ignored);
            }
            Verdict::Later => {
                let now = services.clock.now();
                let run = &decision.run;
                // A paused run is looked at again every DEFER_MS (its resume re-issues the
                // held steps anyway); a timer that is not due yet comes back when it is.
                let retry_at = match &task.effect {
                    _ if run.status == RunStatus::Paused => None,
                    Effect::Wake { node_id, .. } => run.nodes.get(node_id).and_then(|node| node.wake_at),
                    Effect::Deadline { .. } => run.started_at.map(|at| at.saturating_add(run.limits.run_duration_ms)),
                    _ => None,
                };
                let retry_at = retry_at.filter(|at| *at > now).unwrap_or(now + DEFER_MS);
                return Ok(TaskResult::Deferred(retry_at));
            }
        }
    }
    Err(ServiceError::Unavailable)
}
