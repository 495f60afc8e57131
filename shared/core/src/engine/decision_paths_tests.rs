//! Transition-table tests for the supervisor's decision paths: CP-1 low confidence, the
//! RFC 0039 floor, ask-user, terminate with success criteria, iteration caps.

use serde_json::{json, Value};

use super::tests::pending;
use super::*;
use crate::interrupt::{Resolution, Resolver};
use crate::model::Workflow;
use crate::run::{RunState, RunStatus};

fn looped(supervisor: Value, dispatch: Value) -> Workflow {
    Workflow::compile(json!({"id": "conformance-paths", "name": "paths",
        "nodes": [{"id": "sup", "typeId": "core.orchestrator.supervisor", "config": supervisor},
                  {"id": "dispatch", "typeId": "core.dispatch", "config": dispatch}],
        "edges": [{"id": "e1", "sourceNodeId": "sup", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "sup"}]}))
    .unwrap()
}

fn started(wf: &Workflow) -> RunState {
    let mut state = pending(wf, json!({}));
    apply(wf, &mut state, Input::Start, 0);
    state
}

fn step(wf: &Workflow, state: &mut RunState, node: &str) -> Outcome {
    let activation = state.nodes[node].activation;
    apply(wf, state, Input::Step { node_id: node.into(), activation }, 1)
}

fn resolve(wf: &Workflow, state: &mut RunState, node: &str, value: Value) -> Outcome {
    let resolution = Resolution {
        node_id: node.into(),
        interrupt_id: None,
        value,
        resolver: Resolver::Principal("ops".into()),
        prior_vote: None,
    };
    apply(wf, state, Input::Resolve(resolution), 2)
}

fn kinds(outcome: &Outcome) -> Vec<&str> {
    outcome.events.iter().map(|e| e.event_type.as_str()).collect()
}

fn decided(state_events: &[&Outcome]) -> usize {
    state_events.iter().flat_map(|o| o.events.iter()).filter(|e| e.event_type == "runOrchestrator.decided").count()
}

#[test]
fn low_confidence_holds_the_decision_until_ratified_then_records_exactly_one() {
    let wf = looped(
        json!({"mockConfidence": 0.5, "mockPendingDecision": {"kind": "next-worker", "nextWorkerIds": ["w"]}}),
        json!({}),
    );
    let mut state = started(&wf);
    let held = step(&wf, &mut state, "sup");
    assert_eq!(kinds(&held), ["node.started", "node.suspended", "interrupt.requested"]);
    assert_eq!(held.events[1].payload["reason"], "low-confidence");
    assert_eq!(
        (held.events[1].payload["threshold"].as_f64(), held.events[1].payload["observed"].as_f64()),
        (Some(0.7), Some(0.5))
    );
    assert_eq!(held.events[2].payload["data"]["decision"]["kind"], "next-worker");
    assert_eq!(state.status, RunStatus::WaitingApproval);
    let bad = resolve(&wf, &mut state, "sup", json!({"kind": "escalate"}));
    assert!(matches!(bad.verdict, Verdict::Refused(_)));
    let ratified = resolve(&wf, &mut state, "sup", json!({"action": "accept"}));
    assert_eq!(kinds(&ratified), ["interrupt.resolved", "node.resumed", "runOrchestrator.decided", "node.completed"]);
    assert_eq!(decided(&[&held, &ratified]), 1);
    assert_eq!(state.status, RunStatus::Running);
    let dispatched = step(&wf, &mut state, "dispatch");
    assert!(dispatched
        .effects
        .iter()
        .any(|e| matches!(e, Effect::StartChild { workflow_id, .. } if workflow_id == "w")));
}

#[test]
fn a_decision_below_the_floor_is_recorded_escalated_and_dispatches_nothing_until_approved() {
    let plan = json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["w"], "confidence": 0.3}]});
    let wf = looped(plan, json!({}));
    let mut state = started(&wf);
    let escalated = step(&wf, &mut state, "sup");
    assert_eq!(
        kinds(&escalated),
        [
            "node.started",
            "runOrchestrator.decided",
            "trellis.workflowChain.confidence-escalated",
            "node.suspended",
            "interrupt.requested",
            "approval.requested"
        ]
    );
    let decision_seq = escalated.events[1].sequence;
    assert_eq!(escalated.events[2].causation, Some(decision_seq));
    assert_eq!(escalated.events[2].payload["escalationKind"], "escalate");
    assert!(escalated.effects.iter().all(|e| !matches!(e, Effect::StartChild { .. } | Effect::Step { .. })));
    assert_eq!(state.status, RunStatus::WaitingApproval);
    let approved = resolve(&wf, &mut state, "sup", json!({"action": "accept"}));
    assert_eq!(decided(&[&approved]), 0, "the decision was recorded before the escalation");
    assert!(approved.effects.iter().any(|e| matches!(e, Effect::Step { node_id, .. } if node_id == "dispatch")));

    let mut rejected = started(&wf);
    step(&wf, &mut rejected, "sup");
    resolve(&wf, &mut rejected, "sup", json!({"action": "reject"}));
    assert_eq!(
        (rejected.status, rejected.error.as_ref().unwrap().code.as_str()),
        (RunStatus::Failed, "interrupt_rejected")
    );
}

#[test]
fn ask_user_waits_for_input_and_the_next_tick_sees_the_answer() {
    let plan = json!({"mockDispatchPlan": [{"kind": "ask-user", "prompt": "Which region?"}]});
    let wf = looped(plan, json!({}));
    let mut state = started(&wf);
    step(&wf, &mut state, "sup");
    let asked = step(&wf, &mut state, "dispatch");
    assert_eq!(kinds(&asked), ["node.started", "node.suspended", "interrupt.requested", "clarification.requested"]);
    assert_eq!(asked.events[3].payload["questions"][0]["question"], "Which region?");
    assert!(asked.events.iter().all(|e| e.causation.is_some()), "dispatch events point at the decision");
    assert_eq!(state.status, RunStatus::WaitingInput);
    resolve(&wf, &mut state, "dispatch", json!({"answers": {"answer": "eu-west"}}));
    assert_eq!(state.variables["userAnswer"], "eu-west");
    let next = step(&wf, &mut state, "sup");
    assert_eq!(next.events[1].event_type, "runOrchestrator.decided");
    assert_eq!(state.orchestrator.as_ref().unwrap().decisions, 2, "the next tick decided");
    step(&wf, &mut state, "dispatch");
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn a_terminate_with_an_unmet_criterion_completes_without_claiming_the_goal() {
    let plan = json!({"mockDispatchPlan": [{"kind": "terminate", "reason": "gave-up",
        "successCriteria": [{"key": "answered", "met": true}, {"key": "verified", "met": false}]}]});
    let wf = looped(plan, json!({}));
    let mut state = started(&wf);
    step(&wf, &mut state, "sup");
    let done = step(&wf, &mut state, "dispatch");
    let completed = done.events.iter().find(|e| e.event_type == "run.completed").unwrap();
    assert_eq!(completed.payload["outputs"]["terminate"]["goalSatisfied"], false);
    assert_eq!(completed.payload["outputs"]["terminate"]["reason"], "gave-up");
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.outputs["terminate"]["successCriteria"][1]["met"], false);
}

#[test]
fn iteration_caps_breach_with_loop_iterations_and_fail_the_run() {
    let plan = json!({"iterationCap": 1, "mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["w"]},
        {"kind": "next-worker", "nextWorkerIds": ["w"]}]});
    let wf = looped(plan, json!({}));
    let mut state = started(&wf);
    step(&wf, &mut state, "sup");
    step(&wf, &mut state, "dispatch");
    let child = state.nodes["dispatch"].child_run_id.clone().unwrap();
    apply(
        &wf,
        &mut state,
        Input::ChildFinished {
            node_id: "dispatch".into(),
            child_run_id: child,
            status: RunStatus::Completed,
            variables: Default::default(),
            error: None,
        },
        2,
    );
    let breached = step(&wf, &mut state, "sup");
    let cap = breached.events.iter().find(|e| e.event_type == "cap.breached").unwrap();
    assert_eq!(cap.payload["kind"], "loop-iterations");
    assert_eq!((cap.payload["limit"].as_u64(), cap.payload["observed"].as_u64()), (Some(1), Some(2)));
    assert_eq!(cap.payload["details"]["intent"], "orchestrator-iterations");
    assert_eq!((state.status, state.error.as_ref().unwrap().code.as_str()), (RunStatus::Failed, "loop_limit_exceeded"));
}
