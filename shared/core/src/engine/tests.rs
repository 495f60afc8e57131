//! Transition-table tests: inputs in, events and effects out, no I/O.

use serde_json::{json, Value};

use super::*;
use crate::model::Workflow;
use crate::run::{RunState, RunStatus};

pub(super) fn workflow(nodes: Value, edges: Value) -> Workflow {
    Workflow::compile(json!({"id": "w", "name": "w", "nodes": nodes, "edges": edges})).unwrap()
}

fn chain(ids: &[&str]) -> Workflow {
    let nodes: Vec<_> = ids.iter().map(|id| json!({"id": id, "typeId": "core.noop"})).collect();
    let edges: Vec<_> = ids
        .windows(2)
        .map(|w| json!({"id": format!("{}-{}", w[0], w[1]), "sourceNodeId": w[0], "targetNodeId": w[1]}))
        .collect();
    workflow(json!(nodes), json!(edges))
}

pub(super) fn pending(workflow: &Workflow, variables: Value) -> RunState {
    let mut run = crate::testing::pending_run(workflow, "run-1", "t");
    run.variables = variables.as_object().unwrap().clone();
    run.inputs = run.variables.clone();
    run
}

/// Feeds every step effect back until none is left (timers are not fired); returns all
/// events as `(type, nodeId)`.
pub(super) fn drive(workflow: &Workflow, state: &mut RunState, now: Millis) -> Vec<(String, Option<String>)> {
    let mut log = Vec::new();
    let mut queue = vec![Input::Start];
    while let Some(input) = queue.pop() {
        let outcome = apply(workflow, state, input, now);
        log.extend(outcome.events.iter().map(|e| (e.event_type.clone(), e.node_id.clone())));
        for effect in outcome.effects.into_iter().rev() {
            if matches!(effect, Effect::Step { .. }) {
                queue.push(effect.input().expect("step effects have inputs"));
            }
        }
    }
    log
}

pub(super) fn types(log: &[(String, Option<String>)]) -> Vec<String> {
    log.iter()
        .map(|(t, n)| match n {
            Some(n) => format!("{t}:{n}"),
            None => t.clone(),
        })
        .collect()
}

#[test]
fn start_emits_run_started_and_schedules_entry_and_deadline() {
    let wf = chain(&["a"]);
    let mut state = pending(&wf, json!({}));
    let outcome = apply(&wf, &mut state, Input::Start, 5_000);
    assert_eq!(outcome.verdict, Verdict::Applied);
    assert_eq!(outcome.events.len(), 1);
    assert_eq!(outcome.events[0].event_type, "run.started");
    assert_eq!(outcome.events[0].sequence, 0);
    assert_eq!(outcome.events[0].payload["workflowId"], "w");
    assert_eq!(
        outcome.effects,
        vec![Effect::Step { node_id: "a".into(), activation: 1, due_at: 5_000 }, Effect::Deadline { due_at: 65_000 }]
    );
    assert_eq!(state.status, RunStatus::Running);
}

#[test]
fn chain_runs_nodes_in_order_and_completes_with_contiguous_sequences() {
    let wf = chain(&["a", "b", "c"]);
    let mut state = pending(&wf, json!({}));
    let log = drive(&wf, &mut state, 2_000);
    assert_eq!(
        types(&log),
        [
            "run.started",
            "node.started:a",
            "node.completed:a",
            "node.started:b",
            "node.completed:b",
            "node.started:c",
            "node.completed:c",
            "run.completed"
        ]
    );
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.next_sequence, 8);
}

#[test]
fn failing_node_fails_the_run_with_its_error() {
    let wf = workflow(
        json!([{"id": "f", "typeId": "core.fail", "config": {"code": "boom", "message": "it broke"}}]),
        json!([]),
    );
    let mut state = pending(&wf, json!({}));
    let log = drive(&wf, &mut state, 0);
    assert_eq!(types(&log), ["run.started", "node.started:f", "node.failed:f", "run.failed"]);
    assert_eq!(state.status, RunStatus::Failed);
    let error = state.error.unwrap();
    assert_eq!((error.code.as_str(), error.message.as_str()), ("boom", "it broke"));
}

#[test]
fn delay_parks_until_its_timer_then_completes() {
    let wf = workflow(
        json!([{"id": "d", "typeId": "core.delay", "inputs": {"delayMs": {"type": "variable", "variableName": "delayMs"}}}]),
        json!([]),
    );
    let mut state = pending(&wf, json!({"delayMs": 250}));
    apply(&wf, &mut state, Input::Start, 1_000);
    let parked = apply(&wf, &mut state, Input::Step { node_id: "d".into(), activation: 1 }, 1_000);
    assert_eq!(parked.effects, vec![Effect::Wake { node_id: "d".into(), activation: 1, due_at: 1_250 }]);
    assert_eq!(state.status, RunStatus::Running);
    let early = apply(&wf, &mut state, Input::Wake { node_id: "d".into(), activation: 1 }, 1_100);
    assert_eq!(early.verdict, Verdict::Later);
    let woke = apply(&wf, &mut state, Input::Wake { node_id: "d".into(), activation: 1 }, 1_250);
    let kinds: Vec<_> = woke.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(kinds, ["node.completed", "run.completed"]);
}

#[test]
fn cancel_of_a_parked_run_cancels_at_once_and_late_timer_is_ignored() {
    let wf = workflow(json!([{"id": "d", "typeId": "core.delay", "config": {"delayMs": 30000}}]), json!([]));
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    apply(&wf, &mut state, Input::Step { node_id: "d".into(), activation: 1 }, 0);
    let cancel = apply(&wf, &mut state, Input::Cancel { reason: Some("stop".into()) }, 10);
    let kinds: Vec<_> = cancel.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(kinds, ["node.cancelled", "run.cancelled"]);
    assert_eq!(cancel.events[1].payload["reason"], "stop");
    assert_eq!(state.status, RunStatus::Cancelled);
    let late = apply(&wf, &mut state, Input::Wake { node_id: "d".into(), activation: 1 }, 30_000);
    assert_eq!(late.verdict, Verdict::Ignored("run is terminal"));
    assert!(late.events.is_empty());
}

#[test]
fn cancel_with_a_step_in_flight_goes_through_cancelling() {
    let wf = chain(&["a", "b"]);
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    let accepted = apply(&wf, &mut state, Input::Cancel { reason: None }, 1);
    assert_eq!(accepted.verdict, Verdict::Applied);
    assert!(accepted.events.is_empty());
    assert_eq!(state.status, RunStatus::Cancelling);
    let again = apply(&wf, &mut state, Input::Cancel { reason: None }, 2);
    assert_eq!(again.verdict, Verdict::Ignored("cancel already accepted"));
    let finished = apply(&wf, &mut state, Input::Step { node_id: "a".into(), activation: 1 }, 3);
    let kinds: Vec<_> = finished.events.iter().map(|e| (e.event_type.as_str(), e.node_id.as_deref())).collect();
    assert_eq!(kinds, [("node.cancelled", Some("a")), ("run.cancelled", None)]);
    assert_eq!(state.status, RunStatus::Cancelled);
}

#[test]
fn redelivered_step_of_an_advanced_node_is_stale() {
    let wf = chain(&["a", "b"]);
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    apply(&wf, &mut state, Input::Step { node_id: "a".into(), activation: 1 }, 0);
    let again = apply(&wf, &mut state, Input::Step { node_id: "a".into(), activation: 1 }, 0);
    assert_eq!(again.verdict, Verdict::Stale);
    assert_eq!(
        outstanding_effects(&state),
        vec![Effect::Step { node_id: "b".into(), activation: 1, due_at: 0 }, Effect::Deadline { due_at: 60_000 }]
    );
}

#[test]
fn node_execution_limit_breach_fails_with_recursion_limit_exceeded() {
    let wf = chain(&["n1", "n2", "n3", "n4"]);
    let mut state = pending(&wf, json!({}));
    state.limits.max_node_executions = 3;
    let log = drive(&wf, &mut state, 0);
    let tail: Vec<_> = types(&log).into_iter().rev().take(3).collect();
    assert_eq!(tail, ["run.failed", "node.cancelled:n4", "cap.breached:n4"]);
    assert_eq!(state.error.as_ref().unwrap().code, "recursion_limit_exceeded");
    assert_eq!(state.node_executions, 3);
}

#[test]
fn deadline_breach_fails_with_run_timeout_and_observed_above_limit() {
    let wf = workflow(json!([{"id": "d", "typeId": "core.delay", "config": {"delayMs": 30000}}]), json!([]));
    let mut state = pending(&wf, json!({}));
    state.limits.run_duration_ms = 1_000;
    apply(&wf, &mut state, Input::Start, 0);
    apply(&wf, &mut state, Input::Step { node_id: "d".into(), activation: 1 }, 0);
    assert_eq!(apply(&wf, &mut state, Input::Deadline, 999).verdict, Verdict::Later);
    let breach = apply(&wf, &mut state, Input::Deadline, 1_000);
    assert_eq!(breach.events[0].event_type, "cap.breached");
    assert_eq!(breach.events[0].payload, json!({"kind": "run-duration", "limit": 1000, "observed": 1001}));
    assert_eq!(breach.events.last().unwrap().event_type, "run.failed");
    assert_eq!(state.error.unwrap().code, "run_timeout");
}

#[test]
fn condition_routes_and_skips_the_branch_not_taken_then_joins() {
    // check → yes (condition true) / no (condition false) → join
    let wf = workflow(
        json!([
            {"id": "check", "typeId": "core.identity", "inputs": {"approved": {"type": "variable", "variableName": "approved"}}},
            {"id": "yes", "typeId": "core.noop"},
            {"id": "no", "typeId": "core.noop"},
            {"id": "join", "typeId": "core.noop"}
        ]),
        json!([
            {"id": "e1", "sourceNodeId": "check", "targetNodeId": "yes", "condition": {"type": "equals", "left": "output.approved", "right": true}},
            {"id": "e2", "sourceNodeId": "check", "targetNodeId": "no", "condition": {"type": "equals", "left": "output.approved", "right": false}},
            {"id": "e3", "sourceNodeId": "yes", "targetNodeId": "join"},
            {"id": "e4", "sourceNodeId": "no", "targetNodeId": "join"}
        ]),
    );
    let mut state = pending(&wf, json!({"approved": true}));
    let log = drive(&wf, &mut state, 0);
    assert_eq!(
        types(&log),
        [
            "run.started",
            "node.started:check",
            "node.completed:check",
            "node.skipped:no",
            "node.started:yes",
            "node.completed:yes",
            "node.started:join",
            "node.completed:join",
            "run.completed"
        ]
    );
}

#[test]
fn fan_out_join_waits_for_every_live_branch() {
    let wf = workflow(
        json!([{"id": "s", "typeId": "core.noop"}, {"id": "l", "typeId": "core.noop"}, {"id": "r", "typeId": "core.noop"}, {"id": "j", "typeId": "core.noop"}]),
        json!([
            {"id": "1", "sourceNodeId": "s", "targetNodeId": "l"}, {"id": "2", "sourceNodeId": "s", "targetNodeId": "r"},
            {"id": "3", "sourceNodeId": "l", "targetNodeId": "j"}, {"id": "4", "sourceNodeId": "r", "targetNodeId": "j"}
        ]),
    );
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    let fan = apply(&wf, &mut state, Input::Step { node_id: "s".into(), activation: 1 }, 0);
    assert_eq!(fan.effects.len(), 2);
    let left = apply(&wf, &mut state, Input::Step { node_id: "l".into(), activation: 1 }, 0);
    assert!(left.effects.is_empty(), "join must wait for r");
    let right = apply(&wf, &mut state, Input::Step { node_id: "r".into(), activation: 1 }, 0);
    assert_eq!(right.effects, vec![Effect::Step { node_id: "j".into(), activation: 1, due_at: 0 }]);
}

#[test]
fn terminal_runs_ignore_every_input() {
    let wf = chain(&["a"]);
    let mut state = pending(&wf, json!({}));
    drive(&wf, &mut state, 0);
    let before = state.clone();
    for input in [
        Input::Start,
        Input::Cancel { reason: None },
        Input::Deadline,
        Input::Step { node_id: "a".into(), activation: 1 },
    ] {
        let outcome = apply(&wf, &mut state, input, 10);
        assert_eq!(outcome.verdict, Verdict::Ignored("run is terminal"));
    }
    assert_eq!(state, before);
}

#[test]
fn identity_output_lands_in_variables() {
    let wf = workflow(
        json!([{"id": "e", "typeId": "core.identity", "inputs": {"payload": {"type": "variable", "variableName": "payload"}}}]),
        json!([]),
    );
    let mut state = pending(&wf, json!({"payload": {"x": [1, 2]}}));
    drive(&wf, &mut state, 0);
    assert_eq!(state.variables["payload"], json!({"x": [1, 2]}));
}

#[test]
fn exhausted_delivery_fails_the_run_once() {
    let wf = chain(&["a", "b"]);
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    let failed = apply(&wf, &mut state, Input::DeliveryExhausted { task_id: "run-1/step/a/1".into() }, 5);
    let kinds: Vec<_> = failed.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(kinds, ["node.cancelled", "run.failed"]);
    assert_eq!(state.error.as_ref().unwrap().code, "step_delivery_exhausted");
    let again = apply(&wf, &mut state, Input::DeliveryExhausted { task_id: "run-1/step/a/1".into() }, 6);
    assert_eq!(again.verdict, Verdict::Ignored("run is terminal"));
}

fn parent_workflow(on_failure: &str) -> Workflow {
    workflow(
        json!([
            {"id": "call", "typeId": "core.subWorkflow", "config": {
                "workflowId": "child", "onChildFailure": on_failure, "outputMapping": {"result": "childResult"}}},
            {"id": "after", "typeId": "core.noop"}
        ]),
        json!([{"id": "e", "sourceNodeId": "call", "targetNodeId": "after"}]),
    )
}

fn spawned(wf: &Workflow) -> (RunState, String) {
    let mut state = pending(wf, json!({}));
    apply(wf, &mut state, Input::Start, 0);
    let outcome = apply(wf, &mut state, Input::Step { node_id: "call".into(), activation: 1 }, 1);
    let kinds: Vec<_> = outcome.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(kinds, ["node.started", "node.dispatched"]);
    let Effect::StartChild { child_run_id, workflow_id, .. } = &outcome.effects[0] else {
        panic!("{:?}", outcome.effects)
    };
    assert_eq!(workflow_id, "child");
    assert_eq!(outcome.events[1].payload["childRunId"], json!(child_run_id));
    (state, child_run_id.clone())
}

fn finished(child_run_id: &str, status: RunStatus, variables: Value) -> Input {
    Input::ChildFinished {
        node_id: "call".into(),
        child_run_id: child_run_id.into(),
        status,
        variables: variables.as_object().unwrap().clone(),
        error: None,
    }
}

#[test]
fn a_completed_child_maps_its_outputs_once_and_the_parent_moves_on() {
    let wf = parent_workflow("fail-parent");
    let (mut state, child) = spawned(&wf);
    let (again, _) = spawned(&wf);
    assert_eq!(again.nodes["call"].child_run_id.as_deref(), Some(child.as_str()), "child ids are deterministic");
    let done = apply(&wf, &mut state, finished(&child, RunStatus::Completed, json!({"childResult": "ok"})), 5);
    assert_eq!(done.events[0].event_type, "node.completed");
    assert_eq!(done.events[0].payload["outputs"], json!({"childRunId": child, "childStatus": "completed"}));
    assert_eq!(state.variables["result"], "ok");
    assert!(!state.variables.contains_key("childRunId"), "the node's outputs are not merged into variables");
    assert_eq!(done.effects, vec![Effect::Step { node_id: "after".into(), activation: 1, due_at: 5 }]);
    let late = apply(&wf, &mut state, finished(&child, RunStatus::Completed, json!({"childResult": "again"})), 6);
    assert_eq!(late.verdict, Verdict::Stale, "a duplicate notice changes nothing");
    assert_eq!(state.variables["result"], "ok");
}

#[test]
fn a_failed_child_fails_the_parent_or_is_absorbed() {
    let wf = parent_workflow("fail-parent");
    let (mut state, child) = spawned(&wf);
    let failed = apply(&wf, &mut state, finished(&child, RunStatus::Failed, json!({"childResult": "no"})), 5);
    let kinds: Vec<_> = failed.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(kinds, ["node.failed", "run.failed"]);
    assert_eq!(state.error.as_ref().unwrap().code, "child_failed");
    assert!(!state.variables.contains_key("result"), "no mapping from a failed child");

    let wf = parent_workflow("absorb");
    let (mut state, child) = spawned(&wf);
    let absorbed = apply(&wf, &mut state, finished(&child, RunStatus::Cancelled, json!({})), 5);
    assert_eq!(absorbed.events[0].payload["outputs"]["childStatus"], "cancelled");
    assert_eq!(state.status, RunStatus::Running);
}

#[test]
fn cancelling_a_parent_cancels_its_child_and_a_child_tells_its_parent() {
    let wf = parent_workflow("fail-parent");
    let (mut state, child) = spawned(&wf);
    let cancelled = apply(&wf, &mut state, Input::Cancel { reason: None }, 5);
    assert_eq!(state.status, RunStatus::Cancelled, "waiting on a child is parked");
    assert_eq!(cancelled.effects, vec![Effect::CancelChild { child_run_id: child, reason: None, due_at: 5 }]);

    let child_wf = workflow(json!([{"id": "x", "typeId": "core.delay", "config": {"delayMs": 60000}}]), json!([]));
    let mut child_state = pending(&child_wf, json!({}));
    child_state.parent = Some(crate::run::ParentLink {
        run_id: "run-1".into(),
        node_id: "call".into(),
        depth: 1,
        deadline_covered: false,
    });
    apply(&child_wf, &mut child_state, Input::Start, 0);
    apply(&child_wf, &mut child_state, Input::Step { node_id: "x".into(), activation: 1 }, 0);
    let ended = apply(&child_wf, &mut child_state, Input::Cancel { reason: Some(PARENT_CANCELLED.into()) }, 7);
    assert_eq!(ended.events.last().unwrap().payload["parentRunId"], "run-1");
    assert!(ended
        .effects
        .iter()
        .any(|e| matches!(e, Effect::NotifyParent { parent_node_id, .. } if parent_node_id == "call")));
}
