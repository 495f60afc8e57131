//! Operator pause requests and how `drain-current-node` drains. `immediate` pauses at once
//! (`run.paused`; steps and timers are held until `:resume`). `drain-current-node` with a node
//! executing — parked on a timer or waiting for its child run — leaves the run `running` with
//! a pending pause: no new node starts (steps are held), and once no node executes any more the
//! run pauses, so the node's terminal event precedes `run.paused` in the log. A drained node
//! that was the last one holds the run's completion until `:resume`. A fan-out (parallel
//! dispatch, forEach) starts no child under either pause: its running children drain, and
//! `:resume` fills its window again. `:resume` withdraws a
//! pending pause (no event: nothing was paused); cancel and the run's end drop it.

use super::progress::Transition;
use super::{Effect, Verdict};
use crate::interrupt::Refusal;
use crate::run::{DrainPolicy, NodeStatus, PauseState, RunStatus};

impl Transition<'_> {
    /// `:pause` of a running run.
    pub(super) fn request_pause(&mut self, reason: Option<String>, drain_policy: DrainPolicy) -> Verdict {
        if drain_policy == DrainPolicy::DrainCurrentNode {
            if self.state.pending_pause.is_some() {
                return Verdict::Ignored("a drain-current-node pause is already pending");
            }
            if self.has_executing_node() {
                self.state.pending_pause = Some(PauseState { drain_policy, reason, paused_at: self.now });
                return Verdict::Applied;
            }
        }
        self.state.pending_pause = None;
        self.pause(reason, drain_policy)
    }

    /// `:resume`: resumes a paused run (and completes it when a drained last node left nothing
    /// to run), or withdraws a pending pause.
    pub(super) fn request_resume(&mut self, reason: Option<String>) -> Verdict {
        if self.state.status == RunStatus::Paused {
            let verdict = self.resume(reason);
            if !self.state.nodes.values().any(|node| node.is_active()) {
                self.complete_run();
            }
            return verdict;
        }
        if self.state.pending_pause.take().is_none() {
            return Verdict::Refused(Refusal::RunState(self.state.status));
        }
        // The steps held while the pause was pending are issued again now, and the fan-outs
        // that stopped filling fill again.
        let now = self.now;
        for (node_id, node) in &self.state.nodes {
            if node.status == NodeStatus::Scheduled {
                self.effects.push(Effect::Step { node_id: node_id.clone(), activation: node.activation, due_at: now });
            }
        }
        self.refill_fan_outs();
        Verdict::Applied
    }

    /// Whether a `drain-current-node` pause waits for executing nodes (new steps are held).
    pub(super) fn pause_pending(&self) -> bool {
        self.state.pending_pause.is_some()
    }

    /// A node started and not finished: parked on a timer, waiting for its child run, or an
    /// activity executing or waiting to retry. A fan-out with no child running does not count
    /// (its slots do while their children run): a drain pause stops it at its window.
    fn has_executing_node(&self) -> bool {
        self.state.nodes.values().any(|node| {
            let executing = matches!(
                node.status,
                NodeStatus::Waiting | NodeStatus::WaitingChild | NodeStatus::Executing | NodeStatus::Retrying
            );
            executing && node.fan_out.as_ref().is_none_or(|progress| progress.running != 0)
        })
    }

    /// After every applied input: a pending pause takes effect once the run is running with no
    /// node executing; an ended or cancelling run drops it.
    pub(super) fn settle_pause(&mut self) {
        let Some(pending) = self.state.pending_pause.take() else { return };
        let status = self.state.status;
        if status.is_terminal() || status == RunStatus::Cancelling {
            return;
        }
        if status != RunStatus::Running || self.has_executing_node() {
            self.state.pending_pause = Some(pending);
            return;
        }
        self.pause(pending.reason, pending.drain_policy);
    }
}
