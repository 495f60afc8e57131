//! The run lifecycle as an explicit transition table: one `match` on `(status, input)` with
//! no catch-all arm. Late and duplicate inputs are rows too.
//!
//! | status                         | input            | result                                            |
//! |--------------------------------|------------------|---------------------------------------------------|
//! | pending                        | start            | running; `run.started`; entry node scheduled       |
//! | pending                        | cancel           | cancelled; `run.cancelled`                         |
//! | pending                        | step/wake/deadline | ignored (nothing was issued yet)                 |
//! | running                        | step             | execute the node, or stale if it moved on          |
//! | running                        | wake             | complete the parked node, or stale                 |
//! | running, paused, waiting-*     | child finished   | node completes (output mapping) or fails, or stale |
//! | pending                        | child finished   | ignored                                            |
//! | cancelling                     | child finished   | cancelled                                          |
//! | running, paused, waiting-*     | deadline         | `cap.breached` run-duration; failed `run_timeout`   |
//! | running, paused, waiting-*     | cancel           | step in flight → cancelling; parked (timer, child) → cancelled, child cancelled too |
//! | paused, waiting-*              | step/wake        | later (keep the task until the run resumes)        |
//! | running, paused, waiting-*     | start            | ignored (duplicate)                                |
//! | cancelling                     | step/wake/deadline | cancelled; `node.cancelled`…, `run.cancelled`    |
//! | cancelling                     | cancel/start     | ignored                                            |
//! | pending, running, paused, waiting-*, cancelling | delivery exhausted | failed `step_delivery_exhausted` |
//! | completed, failed, cancelled   | anything         | ignored (terminal)                                 |

use super::progress::Transition;
use super::{Input, Outcome, Verdict};
use crate::model::Workflow;
use crate::run::{RunState, RunStatus};
use crate::timefmt::Millis;

/// Applies `input` to `state` at `now`. On [`Verdict::Applied`] the state was changed in
/// place (its `version` is left to the store); otherwise it is untouched.
pub fn apply(workflow: &Workflow, state: &mut RunState, input: Input, now: Millis) -> Outcome {
    use RunStatus::{
        Cancelled, Cancelling, Completed, Failed, Paused, Pending, Running, WaitingApproval, WaitingExternal,
        WaitingInput,
    };
    let mut tx = Transition::new(workflow, state, now);
    let verdict = match (tx.status(), input) {
        (Pending, Input::Start) => tx.start(),
        (Pending, Input::Cancel { reason }) => tx.cancel_now(reason),
        (Pending, Input::Step { .. } | Input::Wake { .. } | Input::Deadline) => Verdict::Ignored("run has not started"),
        (Running, Input::Step { node_id, activation }) => tx.step(&node_id, activation),
        (Running, Input::Wake { node_id, activation }) => tx.wake(&node_id, activation),
        (Running | Paused | WaitingApproval | WaitingInput | WaitingExternal, Input::Deadline) => tx.deadline(),
        (Running | Paused | WaitingApproval | WaitingInput | WaitingExternal, Input::Cancel { reason }) => {
            if tx.has_step_in_flight() {
                tx.begin_cancel(reason)
            } else {
                tx.cancel_now(reason)
            }
        }
        (
            Running | Paused | WaitingApproval | WaitingInput | WaitingExternal,
            Input::ChildFinished { node_id, child_run_id, status, variables, error },
        ) => tx.child_finished(&node_id, &child_run_id, status, &variables, error),
        (Pending, Input::ChildFinished { .. }) => Verdict::Ignored("run has not started"),
        (Cancelling, Input::ChildFinished { .. }) => tx.finish_cancel(),
        (Paused | WaitingApproval | WaitingInput | WaitingExternal, Input::Step { .. } | Input::Wake { .. }) => {
            Verdict::Later
        }
        (Running | Paused | WaitingApproval | WaitingInput | WaitingExternal, Input::Start) => {
            Verdict::Ignored("run already started")
        }
        (Cancelling, Input::Step { .. } | Input::Wake { .. } | Input::Deadline) => tx.finish_cancel(),
        (Cancelling, Input::Cancel { .. } | Input::Start) => Verdict::Ignored("cancel already accepted"),
        (
            Pending | Running | Paused | WaitingApproval | WaitingInput | WaitingExternal | Cancelling,
            Input::DeliveryExhausted { task_id },
        ) => tx.delivery_exhausted(&task_id),
        (Completed | Failed | Cancelled, _) => Verdict::Ignored("run is terminal"),
    };
    tx.finish(verdict)
}
