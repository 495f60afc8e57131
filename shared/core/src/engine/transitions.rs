//! The run lifecycle as an explicit transition table: one `match` on `(status, input)` with
//! no catch-all arm — every input kind has its own rows, and a status wildcard appears only
//! where the table below says *any* or *any other* (resolve, pause, resume, set variables,
//! delivery exhausted). Late and duplicate inputs are rows too. `waiting-*` below means
//! `waiting-approval`, `waiting-input` and `waiting-external`.
//!
//! | status                         | input            | result                                            |
//! |--------------------------------|------------------|---------------------------------------------------|
//! | pending                        | start            | running; `run.started` (+ `budget.reserved`); entry node scheduled |
//! | pending                        | cancel           | cancelled; `run.cancelled`                         |
//! | pending                        | step/wake/deadline | ignored (nothing was issued yet)                 |
//! | running, waiting-*             | step             | execute the node, or stale if it moved on (other branches run while one node waits); later while a drain pause is pending |
//! | running, waiting-*             | wake             | complete the parked node, time out a suspended one, or stale |
//! | paused                         | step             | later (resume re-issues it)                        |
//! | paused                         | wake             | `drain-current-node`: as running; `immediate`: later |
//! | running, paused, waiting-*     | child finished   | node completes (output mapping) or fails, or stale |
//! | running, paused, waiting-*     | child status     | the node records it; the run mirrors a waiting child |
//! | pending                        | child finished/status | ignored                                       |
//! | cancelling                     | child finished   | cancelled                                          |
//! | cancelling                     | child status     | ignored                                            |
//! | running, paused, waiting-*     | deadline         | `cap.breached` run-duration; failed `run_timeout`   |
//! | running, paused, waiting-*     | cancel           | step in flight → cancelling; otherwise cancelled now (child cancelled too, interrupts closed) |
//! | running, paused, waiting-*     | start            | ignored (duplicate)                                |
//! | cancelling                     | step/wake/deadline | cancelled; `node.cancelled`…, `run.cancelled`    |
//! | cancelling                     | cancel/start     | ignored                                            |
//! | any but terminal               | delivery exhausted | failed `step_delivery_exhausted`                 |
//! | any                            | resolve          | judged against the interrupt occurrence: vote recorded, resumed, or refused with why |
//! | running                        | pause            | paused; `run.paused` — for `drain-current-node` with a node executing (timer, child): pending, `run.paused` once none executes |
//! | any other                      | pause            | refused (`run_state_conflict`, a suspension is never overridden) |
//! | paused                         | resume           | running or waiting-*; `run.resumed`; steps and timers re-issued (completed when nothing is left to run) |
//! | running, waiting-* (pause pending) | resume       | the pending pause is withdrawn; held steps re-issued; no event |
//! | running, paused, waiting-*     | set variables    | the variables change; `variable.changed` each (test seam) |
//! | any other                      | set variables    | refused (`run_state_conflict`)                     |
//! | running, paused, waiting-*     | record usage     | `provider.usage`, rolled into the run's cost (test seam); a causation that is no event of the run: refused |
//! | any other                      | record usage     | refused (`run_state_conflict`)                     |
//! | any other                      | resume           | refused (`run_state_conflict`)                     |
//! | running, paused, waiting-*     | activity finished | current attempt: node completes, retries (`node.retried`, backoff timer) or fails (a failure route, or the run fails); a superseded attempt's result: ignored |
//! | running, paused, waiting-*     | activity progress | current attempt: heartbeat kept / `output.chunk`; superseded: ignored |
//! | running, waiting-*             | retry due        | the next attempt starts (`node.started{attempt}`), or stale |
//! | paused                         | retry due        | `drain-current-node`: as running; `immediate`: later |
//! | pending                        | activity finished/progress, retry due | ignored                       |
//! | cancelling                     | activity finished, retry due | cancelled                              |
//! | cancelling                     | activity progress | ignored                                           |
//! | completed, failed, cancelled   | anything else    | ignored (terminal)                                 |

use super::progress::Transition;
use super::{Input, Outcome, Verdict};
use crate::interrupt::Refusal;
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
        (_, Input::Resolve(resolution)) => tx.resolve(resolution),
        (Running, Input::Pause { reason, drain_policy }) => tx.request_pause(reason, drain_policy),
        (status, Input::Pause { .. }) => Verdict::Refused(Refusal::RunState(status)),
        (Paused | Running | WaitingApproval | WaitingInput | WaitingExternal, Input::Resume { reason }) => {
            tx.request_resume(reason)
        }
        (status, Input::Resume { .. }) => Verdict::Refused(Refusal::RunState(status)),
        (Running | Paused | WaitingApproval | WaitingInput | WaitingExternal, Input::SetVariables { variables }) => {
            tx.set_variables(variables)
        }
        (status, Input::SetVariables { .. }) => Verdict::Refused(Refusal::RunState(status)),
        (
            Running | Paused | WaitingApproval | WaitingInput | WaitingExternal,
            Input::RecordUsage { node_id, payload, usage, causation },
        ) => tx.record_usage(node_id.as_deref(), payload, &usage, causation),
        (status, Input::RecordUsage { .. }) => Verdict::Refused(Refusal::RunState(status)),
        (Pending, Input::Start) => {
            let verdict = tx.start();
            tx.reserve_budget();
            verdict
        }
        (Pending, Input::Cancel { reason }) => tx.cancel_now(reason),
        (Pending, Input::Step { .. } | Input::Wake { .. } | Input::Deadline) => Verdict::Ignored("run has not started"),
        (Running | WaitingApproval | WaitingInput | WaitingExternal, Input::Step { node_id, activation }) => {
            if tx.pause_pending() {
                Verdict::Later
            } else {
                tx.step(&node_id, activation)
            }
        }
        (Running | WaitingApproval | WaitingInput | WaitingExternal, Input::Wake { node_id, activation }) => {
            tx.wake(&node_id, activation)
        }
        (Paused, Input::Step { .. }) => Verdict::Later,
        (Paused, Input::Wake { node_id, activation }) => {
            if tx.drains_current_node() {
                tx.wake(&node_id, activation)
            } else {
                Verdict::Later
            }
        }
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
        (
            Running | Paused | WaitingApproval | WaitingInput | WaitingExternal,
            Input::ChildStatus { node_id, child_run_id, status },
        ) => tx.child_status(&node_id, &child_run_id, status),
        (Pending, Input::ChildFinished { .. } | Input::ChildStatus { .. }) => Verdict::Ignored("run has not started"),
        (Cancelling, Input::ChildFinished { .. }) => tx.finish_cancel(),
        (Cancelling, Input::ChildStatus { .. }) => Verdict::Ignored("cancel already accepted"),
        (Running | Paused | WaitingApproval | WaitingInput | WaitingExternal, Input::Start) => {
            Verdict::Ignored("run already started")
        }
        (Cancelling, Input::Step { .. } | Input::Wake { .. } | Input::Deadline) => tx.finish_cancel(),
        (Cancelling, Input::Cancel { .. } | Input::Start) => Verdict::Ignored("cancel already accepted"),
        (
            Pending | Running | Paused | WaitingApproval | WaitingInput | WaitingExternal | Cancelling,
            Input::DeliveryExhausted { task_id },
        ) => tx.delivery_exhausted(&task_id),
        (
            Pending | Running | Paused | WaitingApproval | WaitingInput | WaitingExternal | Cancelling,
            Input::Unstorable { reason },
        ) => tx.unstorable(&reason),
        (
            Running | Paused | WaitingApproval | WaitingInput | WaitingExternal,
            Input::ActivityFinished { node_id, activation, attempt, result },
        ) => tx.activity_finished(&node_id, activation, attempt, result),
        (
            Running | Paused | WaitingApproval | WaitingInput | WaitingExternal,
            Input::ActivityProgress { node_id, activation, attempt, progress },
        ) => tx.activity_progress(&node_id, activation, attempt, progress),
        (
            Running | WaitingApproval | WaitingInput | WaitingExternal,
            Input::RetryDue { node_id, activation, attempt },
        ) => tx.retry_due(&node_id, activation, attempt),
        (Paused, Input::RetryDue { node_id, activation, attempt }) => {
            if tx.drains_current_node() {
                tx.retry_due(&node_id, activation, attempt)
            } else {
                Verdict::Later
            }
        }
        (Pending, Input::ActivityFinished { .. } | Input::ActivityProgress { .. } | Input::RetryDue { .. }) => {
            Verdict::Ignored("run has not started")
        }
        (Cancelling, Input::ActivityFinished { .. } | Input::RetryDue { .. }) => tx.finish_cancel(),
        (Cancelling, Input::ActivityProgress { .. }) => Verdict::Ignored("cancel already accepted"),
        (Completed | Failed | Cancelled, _) => Verdict::Ignored("run is terminal"),
    };
    tx.finish(verdict)
}
