//! Carrying out a commit's child starts, and a finished child's notice to its parent, in the
//! call that made the commit instead of leaving them to tasks of their own — on a host whose
//! sink would otherwise send each as a queue message handled by another function invocation
//! (AWS). See [`Services::with_inline_children`].
//!
//! Crash safety is the queue path's: the effects stay in the commit's outbox page until the
//! sink records the page sent, which happens only after they were carried out (or sent, when
//! carrying one out failed). A call that dies in between leaves the page unsent, and the
//! redelivered task or the reconciler sends the effect as a task — whose handler is
//! idempotent (the child's id is deterministic and its creation conditional; the parent
//! ignores a notice it already applied).
//!
//! Only a terminal child's notice is applied here: the child's state no longer changes, so
//! notices applied out of order (the FIFO completion queue keeps one parent's notices in
//! order) cannot leave the parent mirroring an older status. A notice applied in passing does
//! not pass on the parent's own notice to its parent (that one goes to the queue), so one
//! call commits at most the run's own step, its parent's notice and the children those start.

use std::future::Future;
use std::pin::Pin;

use tracing::{debug, warn};

use super::children::notice_input;
use super::{NoHooks, Services};
use crate::engine::{Effect, Verdict};
use crate::run::RunState;

/// The boxed future of [`Services::carry_out`].
pub(super) type CarryingOut<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Which effects of a commit [`Services::carry_out`] may carry out itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Inline {
    /// Child starts and a finished child's notice to its parent.
    All,
    /// Child starts only (a commit made while applying a notice).
    ChildStarts,
}

impl Services {
    /// The same services carrying out a commit's child starts (the child run is created in
    /// the call that committed its parent's step) and a finished child's notice to its parent
    /// (the parent is advanced in the call that committed the child's end) right away. For a
    /// host whose sink sends effects as queue messages, each handled by its own function
    /// invocation (AWS); the effects are still part of the commit, and sent as tasks when
    /// carrying them out fails. The embedded host leaves this off: its commit already wrote
    /// them as tasks, which its worker runs in-process.
    pub fn with_inline_children(mut self, enabled: bool) -> Self {
        self.inline_children = enabled;
        self
    }

    /// Sends the effects `run` was just committed with, after carrying out the ones this host
    /// carries out itself ([`Services::with_inline_children`], `inline` says which).
    ///
    /// Boxed: the calls recurse (a notice commits the parent, whose commit starts the next
    /// child, whose refusal commits the parent again).
    pub(super) fn carry_out<'a>(&'a self, run: &'a RunState, effects: &'a [Effect], inline: Inline) -> CarryingOut<'a> {
        Box::pin(self.carry_out_now(run, effects, inline))
    }

    async fn carry_out_now(&self, run: &RunState, effects: &[Effect], inline: Inline) {
        if !self.inline_children {
            return self.send_effects(&run.run_id, run.version, effects).await;
        }
        let now = self.clock.now();
        if effects.iter().any(|effect| matches!(effect, Effect::StartChild { due_at, .. } if *due_at <= now)) {
            // The commit's state, kept warm for the creation check each new child makes of its
            // parent (`cancel_if_unexpected`): without it that read of the parent is cold.
            self.store.retain_run(run.clone());
        }
        let mut carried_out = Vec::new();
        for effect in effects {
            let done = match effect {
                Effect::StartChild { node_id, child_run_id, workflow_id, due_at, .. } if *due_at <= now => {
                    match self.create_child(run, node_id, child_run_id, workflow_id).await {
                        Ok(started) => {
                            debug!(run_id = %run.run_id, child = %child_run_id, ?started, "child started in the parent's call");
                            true
                        }
                        Err(error) => {
                            warn!(run_id = %run.run_id, child = %child_run_id, %error, "starting the child right away failed; its task will");
                            false
                        }
                    }
                }
                Effect::NotifyParent { parent_run_id, parent_node_id, .. }
                    if inline == Inline::All && run.status.is_terminal() =>
                {
                    let input = notice_input(run.clone(), parent_node_id);
                    match self.advance_inline(None, parent_run_id, input, &NoHooks, Inline::ChildStarts).await {
                        Ok(decision) => decision.is_none_or(|decision| {
                            matches!(decision.outcome.verdict, Verdict::Applied | Verdict::Stale | Verdict::Ignored(_))
                        }),
                        Err(error) => {
                            warn!(run_id = %run.run_id, parent = %parent_run_id, %error, "notifying the parent right away failed; the notice's task will");
                            false
                        }
                    }
                }
                _ => false,
            };
            if done {
                carried_out.push(effect.clone());
            }
        }
        self.send_effects_except(&run.run_id, run.version, effects, &carried_out).await;
    }
}
