//! One task, start to finish.

use tracing::{debug, warn};
use trellis_core::engine::{outstanding_effects, Effect, Verdict};
use trellis_core::ports::Task;
use trellis_core::service::Services;
use trellis_core::{ServiceError, StoreError};

use crate::crash::{maybe_crash, CrashPoint};

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskResult {
    /// Applied and acknowledged.
    Applied,
    /// Nothing to do (late, duplicate, or the run is gone); acknowledged.
    Ignored,
    /// Redelivered after its node moved on; outstanding effects re-issued; acknowledged.
    Repaired,
    /// Not due yet; returned to the queue.
    Deferred,
}

/// How many times to re-decide after losing a version race before leaving the task for
/// redelivery.
const MAX_RACES: usize = 16;
/// When a deferred step (paused run) is looked at again.
const DEFER_MS: u64 = 1_000;

/// Processes one task at least once: decide, commit, send, acknowledge.
pub async fn process_task(
    services: &Services,
    task: &Task,
    crash: Option<CrashPoint>,
) -> Result<TaskResult, ServiceError> {
    let input = task.effect.input();
    for _ in 0..MAX_RACES {
        let Some(decision) = services.decide(&task.run_id, input.clone()).await? else {
            warn!(run_id = %task.run_id, task = %task.id, "task for an unknown run; dropping it");
            services.store.ack(&task.id).await?;
            return Ok(TaskResult::Ignored);
        };
        match decision.outcome.verdict {
            Verdict::Applied => {
                maybe_crash(crash, CrashPoint::BeforeCommit);
                let committed = services
                    .store
                    .commit(
                        &decision.run,
                        decision.expected_version,
                        &decision.outcome.events,
                        &decision.outcome.effects,
                    )
                    .await;
                match committed {
                    Ok(()) => {}
                    Err(StoreError::Conflict) => continue,
                    Err(error) => return Err(error.into()),
                }
                maybe_crash(crash, CrashPoint::AfterCommit);
                // Embedded, the effects are task rows of the commit itself; sending them is
                // waking the local loop (and any event waiters).
                services.notifier.committed(&task.run_id);
                maybe_crash(crash, CrashPoint::AfterEffects);
                services.store.ack(&task.id).await?;
                debug!(run_id = %task.run_id, task = %task.id, events = decision.outcome.events.len(), "task applied");
                return Ok(TaskResult::Applied);
            }
            Verdict::Stale => {
                services.store.enqueue(&task.run_id, &outstanding_effects(&decision.run)).await?;
                services.notifier.committed(&task.run_id);
                services.store.ack(&task.id).await?;
                return Ok(TaskResult::Repaired);
            }
            Verdict::Ignored(reason) => {
                debug!(run_id = %task.run_id, task = %task.id, reason, "task ignored");
                services.store.ack(&task.id).await?;
                return Ok(TaskResult::Ignored);
            }
            Verdict::Later => {
                let now = services.clock.now();
                let run = &decision.run;
                let retry_at = match &task.effect {
                    Effect::Wake { node_id, .. } => run.nodes.get(node_id).and_then(|node| node.wake_at),
                    Effect::Deadline { .. } => run.started_at.map(|at| at.saturating_add(run.limits.run_duration_ms)),
                    Effect::Step { .. } => None,
                };
                services.store.release(&task.id, retry_at.unwrap_or(now + DEFER_MS).max(now)).await?;
                return Ok(TaskResult::Deferred);
            }
        }
    }
    Err(ServiceError::Unavailable)
}
