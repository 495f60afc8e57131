//! Transition-table tests for operator pause under `drain-current-node`: the pause is
//! pending until the executing node reaches a terminal event, and `node.completed` precedes
//! `run.paused` in the log.

use serde_json::json;

use super::tests::{pending, types, workflow};
use super::*;
use crate::model::Workflow;
use crate::run::RunStatus;

fn event_types(outcome: &Outcome) -> Vec<&str> {
    outcome.events.iter().map(|event| event.event_type.as_str()).collect()
}

fn pause(drain_policy: DrainPolicy) -> Input {
    Input::Pause { reason: Some("ops".into()), drain_policy }
}

fn delay_then_noop() -> Workflow {
    workflow(
        json!([{"id": "d", "typeId": "core.delay", "config": {"durationMs": 100}}, {"id": "n", "typeId": "core.noop"}]),
        json!([{"id": "e", "sourceNodeId": "d", "targetNodeId": "n"}]),
    )
}

#[test]
fn drain_current_node_pauses_only_after_the_executing_node_completes() {
    let wf = delay_then_noop();
    let mut state = pending(&wf, json!({}));
    let mut log = apply(&wf, &mut state, Input::Start, 0).events;
    log.extend(apply(&wf, &mut state, Input::Step { node_id: "d".into(), activation: 1 }, 0).events);
    let requested = apply(&wf, &mut state, pause(DrainPolicy::DrainCurrentNode), 10);
    assert_eq!(requested.verdict, Verdict::Applied);
    assert!(requested.events.is_empty(), "no run.paused while the node runs: {:?}", event_types(&requested));
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.pending_pause.as_ref().map(|p| p.drain_policy), Some(DrainPolicy::DrainCurrentNode));
    // A second drain request while one is pending changes nothing.
    assert!(matches!(apply(&wf, &mut state, pause(DrainPolicy::DrainCurrentNode), 11).verdict, Verdict::Ignored(_)));
    let drained = apply(&wf, &mut state, Input::Wake { node_id: "d".into(), activation: 1 }, 100);
    assert_eq!(event_types(&drained), ["node.completed", "run.paused"]);
    assert_eq!(drained.events[1].payload, json!({"drainPolicy": "drain-current-node", "reason": "ops"}));
    log.extend(drained.events);
    assert_eq!(state.status, RunStatus::Paused);
    assert!(state.pending_pause.is_none());
    assert_eq!(state.pause.as_ref().map(|p| p.paused_at), Some(100));
    // The next node was scheduled but does not start until resume.
    assert_eq!(apply(&wf, &mut state, Input::Step { node_id: "n".into(), activation: 1 }, 101).verdict, Verdict::Later);
    let resumed = apply(&wf, &mut state, Input::Resume { reason: None }, 200);
    assert_eq!(event_types(&resumed), ["run.resumed"]);
    assert_eq!(resumed.effects, vec![Effect::Step { node_id: "n".into(), activation: 1, due_at: 200 }]);
    log.extend(resumed.events);
    log.extend(apply(&wf, &mut state, Input::Step { node_id: "n".into(), activation: 1 }, 201).events);
    let log: Vec<(String, Option<String>)> = log.into_iter().map(|e| (e.event_type, e.node_id)).collect();
    assert_eq!(
        types(&log),
        [
            "run.started",
            "node.started:d",
            "node.completed:d",
            "run.paused",
            "run.resumed",
            "node.started:n",
            "node.completed:n",
            "run.completed"
        ]
    );
}

#[test]
fn a_drained_last_node_holds_the_run_completion_until_resume() {
    let wf = workflow(json!([{"id": "d", "typeId": "core.delay", "config": {"durationMs": 100}}]), json!([]));
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    apply(&wf, &mut state, Input::Step { node_id: "d".into(), activation: 1 }, 0);
    apply(&wf, &mut state, pause(DrainPolicy::DrainCurrentNode), 10);
    let drained = apply(&wf, &mut state, Input::Wake { node_id: "d".into(), activation: 1 }, 100);
    assert_eq!(event_types(&drained), ["node.completed", "run.paused"]);
    assert_eq!(state.status, RunStatus::Paused);
    let resumed = apply(&wf, &mut state, Input::Resume { reason: None }, 200);
    assert_eq!(event_types(&resumed), ["run.resumed", "run.completed"]);
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn a_pending_pause_yields_to_resume_cancel_and_an_immediate_pause() {
    let wf = delay_then_noop();
    let started = |state: &mut crate::run::RunState| {
        apply(&wf, state, Input::Start, 0);
        apply(&wf, state, Input::Step { node_id: "d".into(), activation: 1 }, 0);
        apply(&wf, state, pause(DrainPolicy::DrainCurrentNode), 10);
    };
    // Resume withdraws the pending pause: no run.paused, nothing to resume from.
    let mut state = pending(&wf, json!({}));
    started(&mut state);
    let withdrawn = apply(&wf, &mut state, Input::Resume { reason: None }, 20);
    assert_eq!((withdrawn.verdict.clone(), event_types(&withdrawn).len()), (Verdict::Applied, 0));
    assert!(state.pending_pause.is_none());
    let woke = apply(&wf, &mut state, Input::Wake { node_id: "d".into(), activation: 1 }, 100);
    assert_eq!(event_types(&woke), ["node.completed"]);
    assert_eq!(state.status, RunStatus::Running);

    // An immediate pause while a drain is pending pauses now.
    let mut state = pending(&wf, json!({}));
    started(&mut state);
    let now = apply(&wf, &mut state, pause(DrainPolicy::Immediate), 20);
    assert_eq!(event_types(&now), ["run.paused"]);
    assert_eq!(now.events[0].payload["drainPolicy"], "immediate");
    assert_eq!((state.status, state.pending_pause.is_none()), (RunStatus::Paused, true));

    // Cancel ends the run; the pending pause goes with it.
    let mut state = pending(&wf, json!({}));
    started(&mut state);
    let cancelled = apply(&wf, &mut state, Input::Cancel { reason: None }, 20);
    assert_eq!(event_types(&cancelled), ["node.cancelled", "run.cancelled"]);
    assert_eq!((state.status, state.pending_pause.is_none()), (RunStatus::Cancelled, true));

    // With nothing executing (the next step only queued), drain-current-node pauses at once.
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    let at_once = apply(&wf, &mut state, pause(DrainPolicy::DrainCurrentNode), 1);
    assert_eq!(event_types(&at_once), ["run.paused"]);
    assert_eq!(state.status, RunStatus::Paused);
}
