//! The one commit loop every input to a run goes through — tasks, operator requests,
//! activity outcomes and progress, delivery exhaustion: read the run, decide, commit against
//! the version read, send the effects (carrying out child starts and a finished child's
//! notice first where the host does, see `inline`). A lost version race re-reads and re-decides after a
//! jittered backoff (full jitter, doubling from [`BACKOFF_BASE_MS`] up to [`BACKOFF_CAP_MS`]),
//! at most [`MAX_CONFLICT_RETRIES`] times; then the caller gets `unavailable` (retryable).
//! Crash points are hooks ([`CommitHooks`]) so the crash-recovery tests can abort between
//! the steps.

use super::inline::Inline;
use super::{Decision, Services};
use crate::engine::{Input, Verdict};
use crate::error::{ServiceError, StoreError};
use crate::run::Changes;

/// How many times the loop re-reads and re-decides after losing a version race.
pub const MAX_CONFLICT_RETRIES: usize = 16;
/// The first backoff ceiling after a lost race.
pub const BACKOFF_BASE_MS: u64 = 2;
/// The largest backoff ceiling.
pub const BACKOFF_CAP_MS: u64 = 200;

/// Points around a commit a caller may act at (the worker's named crash points).
pub trait CommitHooks: Send + Sync {
    /// Decided and applied, not committed yet.
    fn before_commit(&self) {}
    /// Committed, effects not sent.
    fn after_commit(&self) {}
    /// Effects sent.
    fn after_effects(&self) {}
}

/// No hooks.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl CommitHooks for NoHooks {}

/// The backoff ceiling before re-deciding after the `race`-th lost race (zero-based).
pub fn backoff_ceiling_ms(race: usize) -> u64 {
    let doubled = BACKOFF_BASE_MS.saturating_mul(1u64 << race.min(16));
    doubled.min(BACKOFF_CAP_MS)
}

impl Services {
    /// Applies `input` to `run_id` until it is committed or not applicable. With `tenant`,
    /// another tenant's run reads as absent. Returns `None` when the run does not exist;
    /// otherwise the decision: applied (committed, effects sent, waiters notified) or not
    /// (ignored, stale, later, refused — nothing written).
    pub async fn advance(
        &self,
        tenant: Option<&str>,
        run_id: &str,
        input: Input,
        hooks: &dyn CommitHooks,
    ) -> Result<Option<Decision>, ServiceError> {
        self.advance_inline(tenant, run_id, input, hooks, Inline::All).await
    }

    /// [`Services::advance`], carrying out the committed effects `inline` names where the
    /// host does ([`Services::with_inline_children`]).
    pub(super) async fn advance_inline(
        &self,
        tenant: Option<&str>,
        run_id: &str,
        input: Input,
        hooks: &dyn CommitHooks,
        inline: Inline,
    ) -> Result<Option<Decision>, ServiceError> {
        let mut input = input;
        // A commit the store refused as too large is decided again with every value over
        // `TIGHT_INLINE_BYTES` stored apart; an activity result still too large then fails
        // its node (`payload_too_large`), never retried.
        let mut tight = false;
        let mut race = 0;
        while race < MAX_CONFLICT_RETRIES {
            let Some(mut decision) = self.decide(run_id, input.clone()).await? else { return Ok(None) };
            if tenant.is_some_and(|tenant| decision.run.tenant != tenant) {
                return Ok(None);
            }
            if decision.outcome.verdict != Verdict::Applied {
                return Ok(Some(decision));
            }
            // Large values go apart before anything compares or delivers the events.
            let limit = tight.then_some(TIGHT_INLINE_BYTES);
            let changes = (!tight).then_some(&decision.outcome.changes);
            let committed = match self.spill(&mut decision.run, changes, &mut decision.outcome.events, limit).await {
                Ok(spilled) => {
                    // A fork records where it departs from its source, before its events are delivered.
                    self.mark_divergence(&mut decision.run, &mut decision.outcome.events).await?;
                    // The webhook deliveries and the bus publish its events call for commit with them (the outbox).
                    let deliveries = self.integration_effects(&decision.run, &decision.outcome.events).await?;
                    decision.outcome.effects.extend(deliveries);
                    hooks.before_commit();
                    let outcome = &decision.outcome;
                    let (expected, changes) = (decision.expected_version, &outcome.changes);
                    let changes = if tight { &Changes::all() } else { changes };
                    let written =
                        self.store.commit_changes(&decision.run, expected, changes, &outcome.events, &outcome.effects);
                    written.await.map(|()| spilled)
                }
                Err(error) => Err(error),
            };
            match committed {
                Ok(spilled) => Self::unspill(&mut decision.run, spilled),
                Err(StoreError::Conflict) => {
                    let ceiling = backoff_ceiling_ms(race);
                    self.clock.sleep(self.ids.random() % (ceiling + 1)).await;
                    race += 1;
                    continue;
                }
                Err(StoreError::LimitExceeded(why)) if !tight => {
                    tracing::warn!(run_id, %why, "the store refused the commit as too large; storing more values apart");
                    tight = true;
                    continue;
                }
                Err(StoreError::LimitExceeded(why)) => match too_large(input, &why) {
                    Some(failed) => {
                        tracing::warn!(run_id, %why, "the commit does not fit the run's store; failing the node or the run");
                        input = failed;
                        continue;
                    }
                    None => {
                        return Err(ServiceError::Rejected {
                            status: 413,
                            code: crate::blob::PAYLOAD_TOO_LARGE,
                            message: format!("the run's state does not fit its store: {why}"),
                            details: serde_json::json!({ "runId": run_id }),
                        })
                    }
                },
                Err(error) => return Err(error.into()),
            }
            decision.log_transition();
            hooks.after_commit();
            self.carry_out(&decision.run, &decision.outcome.effects, inline).await;
            hooks.after_effects();
            if decision.run.replay.is_some() && decision.run.pending_interrupt().is_some() {
                // A fork answers its interrupts as its source was answered.
                if let Err(error) = self.replay_resolution(&decision.run).await {
                    tracing::warn!(run_id, %error, "answering a fork's interrupt from its source failed; it waits");
                }
            }
            return Ok(Some(decision));
        }
        tracing::warn!(run_id, "lost the version race {MAX_CONFLICT_RETRIES} times; leaving the input for a retry");
        Err(ServiceError::Unavailable)
    }
}

/// The inline limit of a commit decided again after its store refused it as too large.
pub(super) const TIGHT_INLINE_BYTES: usize = 4 * 1024;

/// What to apply instead of `input` when the store could not hold its commit: an activity's
/// successful result becomes the node's failure `payload_too_large`, another input the run's
/// ([`Input::Unstorable`]); `None` when that failure did not fit either.
fn too_large(input: Input, why: &str) -> Option<Input> {
    match input {
        Input::ActivityFinished { node_id, activation, attempt, result: Ok(_) } => {
            let error = crate::activity::ActivityError::new(
                crate::blob::PAYLOAD_TOO_LARGE,
                format!("the node's result does not fit the run's store: {why}"),
                false,
            );
            Some(Input::ActivityFinished { node_id, activation, attempt, result: Err(error) })
        }
        Input::Unstorable { .. } => None,
        _ => Some(Input::Unstorable { reason: why.to_owned() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let ceilings: Vec<u64> = (0..10).map(backoff_ceiling_ms).collect();
        assert_eq!(ceilings, vec![2, 4, 8, 16, 32, 64, 128, 200, 200, 200]);
        assert_eq!(backoff_ceiling_ms(usize::MAX), BACKOFF_CAP_MS);
    }
}
