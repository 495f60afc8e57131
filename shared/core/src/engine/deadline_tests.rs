//! Run-duration limits of child runs: a child whose parent's deadline covers it sends no
//! deadline timer of its own (neither at its start nor when its outstanding effects are
//! re-issued), and the parent's deadline cancels the child it waits for — unless the parent's
//! node does not propagate cancellation, which is exactly when a child is not covered.

use serde_json::json;

use super::tests::{pending, workflow};
use super::*;
use crate::model::Workflow;
use crate::run::ParentLink;

fn parent_workflow(propagate: bool) -> Workflow {
    workflow(
        json!([{"id": "call", "typeId": "core.subWorkflow",
                "config": {"workflowId": "child", "propagateCancellation": propagate}},
               {"id": "after", "typeId": "core.noop"}]),
        json!([{"id": "e", "sourceNodeId": "call", "targetNodeId": "after"}]),
    )
}

fn is_timer(effect: &Effect) -> bool {
    matches!(effect, Effect::Deadline { .. })
}

#[test]
fn a_covered_child_sends_no_deadline_timer_and_an_uncovered_one_does() {
    let child_wf = workflow(json!([{"id": "x", "typeId": "core.delay", "config": {"delayMs": 60000}}]), json!([]));
    for covered in [true, false] {
        let mut child = pending(&child_wf, json!({}));
        child.parent =
            Some(ParentLink { run_id: "p".into(), node_id: "call".into(), depth: 1, deadline_covered: covered });
        let started = apply(&child_wf, &mut child, Input::Start, 100);
        assert_eq!(started.effects.iter().filter(|e| is_timer(e)).count(), usize::from(!covered), "covered: {covered}");
        assert_eq!(child.deadline(), Some(100 + child.limits.run_duration_ms), "the limit itself is unchanged");
        assert_eq!(child.deadline_timer(), (!covered).then(|| 100 + child.limits.run_duration_ms));
        apply(&child_wf, &mut child, Input::Step { node_id: "x".into(), activation: 1 }, 100);
        let outstanding = outstanding_effects(&child);
        assert!(outstanding.iter().any(|e| matches!(e, Effect::Wake { .. })), "{outstanding:?}");
        assert_eq!(outstanding.iter().any(is_timer), !covered, "re-issued effects follow the same rule");
    }
    let top = pending(&child_wf, json!({}));
    assert_eq!(top.deadline_timer(), None, "not started yet");
}

#[test]
fn the_parents_deadline_cancels_the_child_it_waits_for_unless_it_does_not_propagate() {
    for propagate in [true, false] {
        let wf = parent_workflow(propagate);
        assert_eq!(cancels_its_child(&wf, "call"), propagate);
        let mut state = pending(&wf, json!({}));
        state.limits.run_duration_ms = 1_000;
        apply(&wf, &mut state, Input::Start, 0);
        let spawned = apply(&wf, &mut state, Input::Step { node_id: "call".into(), activation: 1 }, 10);
        let Some(Effect::StartChild { child_run_id, .. }) = spawned.effects.first() else {
            panic!("{:?}", spawned.effects)
        };
        let child_run_id = child_run_id.clone();
        assert_eq!(apply(&wf, &mut state, Input::Deadline, 999).verdict, Verdict::Later);
        let breach = apply(&wf, &mut state, Input::Deadline, 1_000);
        assert_eq!(state.status, RunStatus::Failed);
        assert_eq!(state.error.as_ref().map(|e| e.code.as_str()), Some("run_timeout"));
        let cancel = Effect::CancelChild { child_run_id, reason: None, due_at: 1_000 };
        assert_eq!(breach.effects.contains(&cancel), propagate, "propagate: {propagate}: {:?}", breach.effects);
    }
}

#[test]
fn a_dispatch_node_always_cancels_its_worker() {
    let wf = workflow(
        json!([{"id": "supervisor", "typeId": "core.orchestrator.supervisor"}, {"id": "dispatch", "typeId": "core.dispatch"}]),
        json!([{"id": "e1", "sourceNodeId": "supervisor", "targetNodeId": "dispatch"},
               {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "supervisor"}]),
    );
    assert!(cancels_its_child(&wf, "dispatch"));
}
