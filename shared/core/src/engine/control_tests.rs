//! Transition-table tests for interrupts, pause/resume and a parent mirroring its child.

use serde_json::{json, Value};

use super::tests::{drive, pending, types, workflow};
use super::*;
use crate::interrupt::{InterruptState, Refusal, Resolution, Resolver};
use crate::model::Workflow;
use crate::run::{NodeStatus, RunStatus};

fn gate(config: Value) -> Workflow {
    workflow(
        json!([{"id": "gate", "typeId": "core.approvalGate", "config": config}, {"id": "after", "typeId": "core.noop"}]),
        json!([{"id": "e", "sourceNodeId": "gate", "targetNodeId": "after"}]),
    )
}

fn resolve(node: &str, value: Value) -> Input {
    Input::Resolve(Resolution {
        node_id: node.into(),
        interrupt_id: None,
        value,
        resolver: Resolver::Principal("alice".into()),
        prior_vote: None,
    })
}

fn by_token(node: &str, interrupt_id: &str, value: Value) -> Input {
    Input::Resolve(Resolution {
        node_id: node.into(),
        interrupt_id: Some(interrupt_id.into()),
        value,
        resolver: Resolver::Token,
        prior_vote: None,
    })
}

fn refusal(outcome: &Outcome) -> &'static str {
    match &outcome.verdict {
        Verdict::Refused(refusal) => refusal.code(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn event_types(outcome: &Outcome) -> Vec<&str> {
    outcome.events.iter().map(|event| event.event_type.as_str()).collect()
}

#[test]
fn an_approval_suspends_with_the_documented_events_and_resumes_on_accept() {
    let wf = gate(json!({"title": "Ship?", "actions": ["accept", "reject"]}));
    let mut state = pending(&wf, json!({}));
    let log = drive(&wf, &mut state, 0);
    assert_eq!(
        types(&log),
        [
            "run.started",
            "node.started:gate",
            "node.suspended:gate",
            "interrupt.requested:gate",
            "approval.requested:gate"
        ]
    );
    assert_eq!(state.status, RunStatus::WaitingApproval);
    assert_eq!(state.current_node(), Some("gate"));
    let record = state.pending_interrupt().unwrap().clone();
    assert_eq!(record.key, "run-1:gate:1");
    let payload = record.payload();
    let mut keys: Vec<&String> = payload.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["data", "key", "kind", "resumeSchema"]);

    let bad = apply(&wf, &mut state, resolve("gate", json!({"action": "maybe"})), 5);
    assert_eq!(refusal(&bad), "validation_error");
    assert_eq!(state.status, RunStatus::WaitingApproval);

    let accepted = apply(&wf, &mut state, resolve("gate", json!({"action": "accept"})), 10);
    assert_eq!(event_types(&accepted), ["approval.received", "interrupt.resolved", "node.resumed", "node.completed"]);
    assert_eq!(accepted.events[0].payload["decidedBy"], "alice");
    assert_eq!(state.status, RunStatus::Running);
    let again = apply(&wf, &mut state, resolve("gate", json!({"action": "accept"})), 11);
    assert_eq!(refusal(&again), "interrupt_already_resolved");
}

#[test]
fn a_rejection_fails_the_run() {
    let wf = gate(json!({}));
    let mut state = pending(&wf, json!({}));
    drive(&wf, &mut state, 0);
    let rejected = apply(&wf, &mut state, resolve("gate", json!({"action": "reject"})), 1);
    assert_eq!(
        event_types(&rejected),
        ["approval.received", "interrupt.resolved", "node.resumed", "node.failed", "run.failed"]
    );
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.error.as_ref().unwrap().code, "interrupt_rejected");
}

#[test]
fn refine_opens_a_new_occurrence_and_the_old_token_is_gone() {
    let wf = gate(json!({"actions": ["accept", "refine"]}));
    let mut state = pending(&wf, json!({}));
    drive(&wf, &mut state, 0);
    let first = state.pending_interrupt().unwrap().id.clone();
    let refined =
        apply(&wf, &mut state, resolve("gate", json!({"action": "refine", "refineFeedback": {"scope": "whole"}})), 1);
    assert_eq!(
        event_types(&refined),
        [
            "approval.received",
            "interrupt.resolved",
            "node.resumed",
            "node.suspended",
            "interrupt.requested",
            "approval.requested"
        ]
    );
    let second = state.pending_interrupt().unwrap().clone();
    assert_ne!(second.id, first);
    assert_eq!(second.key, "run-1:gate:2");
    assert_eq!(state.status, RunStatus::WaitingApproval);
    let stale = apply(&wf, &mut state, by_token("gate", &first, json!({"action": "accept"})), 2);
    assert_eq!(refusal(&stale), "interrupt_gone");
    let current = apply(&wf, &mut state, by_token("gate", &second.id, json!({"action": "accept"})), 3);
    assert_eq!(current.verdict, Verdict::Applied);
    assert_eq!(state.nodes["gate"].status, NodeStatus::Completed);
}

#[test]
fn a_quorum_keeps_waiting_until_the_third_distinct_vote() {
    let wf = gate(json!({"requiredApprovals": 3, "rejectionPolicy": "majority"}));
    let mut state = pending(&wf, json!({}));
    drive(&wf, &mut state, 0);
    for voter in ["approver-1", "approver-2"] {
        let vote = apply(&wf, &mut state, resolve("gate", json!({"action": "accept", "voter": voter})), 1);
        assert_eq!(event_types(&vote), ["approval.received"]);
        assert_eq!(state.status, RunStatus::WaitingApproval);
    }
    assert_eq!(state.pending_interrupt().unwrap().tally(), (2, 0));
    let third = apply(&wf, &mut state, resolve("gate", json!({"action": "accept", "voter": "approver-3"})), 2);
    assert_eq!(third.events[1].payload["resolvedBy"], "quorum:3-of-3");
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.nodes["after"].status, NodeStatus::Scheduled);
}

#[test]
fn cancel_while_waiting_closes_the_interrupt_and_later_resolutions_are_refused() {
    let wf = gate(json!({}));
    let mut state = pending(&wf, json!({}));
    drive(&wf, &mut state, 0);
    let id = state.pending_interrupt().unwrap().id.clone();
    let cancelled = apply(&wf, &mut state, Input::Cancel { reason: None }, 1);
    assert_eq!(event_types(&cancelled), ["node.cancelled", "run.cancelled"]);
    assert_eq!(state.interrupts[0].state, InterruptState::Cancelled { cascade: false });
    assert_eq!(
        refusal(&apply(&wf, &mut state, resolve("gate", json!({"action": "accept"})), 2)),
        "interrupt_cancelled"
    );
    assert_eq!(
        refusal(&apply(&wf, &mut state, by_token("gate", &id, json!({"action": "accept"})), 2)),
        "interrupt_gone"
    );

    let mut cascaded = pending(&wf, json!({}));
    drive(&wf, &mut cascaded, 0);
    apply(&wf, &mut cascaded, Input::Cancel { reason: Some(PARENT_CANCELLED.into()) }, 1);
    assert_eq!(refusal(&apply(&wf, &mut cascaded, resolve("gate", json!({"action": "accept"})), 2)), "interrupt_gone");
    assert_eq!(refusal(&apply(&wf, &mut cascaded, resolve("nowhere", json!({})), 2)), "interrupt_not_found");
}

#[test]
fn a_timeout_auto_rejects_and_a_refined_occurrence_keeps_its_own_deadline() {
    let wf = gate(json!({"timeoutMs": 1_000, "actions": ["accept", "refine"]}));
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    let suspended = apply(&wf, &mut state, Input::Step { node_id: "gate".into(), activation: 1 }, 0);
    assert!(suspended.effects.contains(&Effect::Wake { node_id: "gate".into(), activation: 1, due_at: 1_000 }));
    apply(&wf, &mut state, resolve("gate", json!({"action": "refine", "refineFeedback": {}})), 500);
    let early = apply(&wf, &mut state, Input::Wake { node_id: "gate".into(), activation: 1 }, 1_000);
    assert_eq!(early.verdict, Verdict::Later);
    let late = apply(&wf, &mut state, Input::Wake { node_id: "gate".into(), activation: 1 }, 1_500);
    assert_eq!(event_types(&late), ["approval.received", "interrupt.resolved", "node.failed", "run.failed"]);
    assert_eq!(state.error.as_ref().unwrap().code, "interrupt_timeout");
    assert_eq!(
        refusal(&apply(&wf, &mut state, resolve("gate", json!({"action": "accept"})), 1_600)),
        "interrupt_expired"
    );
}

#[test]
fn pause_holds_steps_and_resume_reissues_them() {
    let wf = workflow(
        json!([{"id": "d", "typeId": "core.delay", "config": {"durationMs": 100}}, {"id": "n", "typeId": "core.noop"}]),
        json!([{"id": "e", "sourceNodeId": "d", "targetNodeId": "n"}]),
    );
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    apply(&wf, &mut state, Input::Step { node_id: "d".into(), activation: 1 }, 0);
    let paused = apply(&wf, &mut state, Input::Pause { reason: None, drain_policy: DrainPolicy::Immediate }, 10);
    assert_eq!(event_types(&paused), ["run.paused"]);
    assert_eq!(paused.events[0].payload["drainPolicy"], "immediate");
    let again = apply(&wf, &mut state, Input::Pause { reason: None, drain_policy: DrainPolicy::Immediate }, 11);
    assert_eq!(again.verdict, Verdict::Refused(Refusal::RunState(RunStatus::Paused)));
    // `immediate` holds even the timer that fires meanwhile; resume issues it again.
    assert_eq!(apply(&wf, &mut state, Input::Wake { node_id: "d".into(), activation: 1 }, 100).verdict, Verdict::Later);
    let resumed = apply(&wf, &mut state, Input::Resume { reason: None }, 200);
    assert_eq!(event_types(&resumed), ["run.resumed"]);
    assert_eq!(resumed.effects, vec![Effect::Wake { node_id: "d".into(), activation: 1, due_at: 200 }]);
    assert_eq!(state.status, RunStatus::Running);
    let drained = apply(&wf, &mut state, Input::Wake { node_id: "d".into(), activation: 1 }, 200);
    assert_eq!(event_types(&drained), ["node.completed"]);
    assert_eq!(drained.effects, vec![Effect::Step { node_id: "n".into(), activation: 1, due_at: 200 }]);
    let not_paused = apply(&wf, &mut state, Input::Resume { reason: None }, 201);
    assert_eq!(not_paused.verdict, Verdict::Refused(Refusal::RunState(RunStatus::Running)));
}

#[test]
fn pause_never_overrides_a_suspension() {
    let wf = gate(json!({}));
    let mut state = pending(&wf, json!({}));
    drive(&wf, &mut state, 0);
    let refused = apply(&wf, &mut state, Input::Pause { reason: None, drain_policy: DrainPolicy::Immediate }, 1);
    assert_eq!(refused.verdict, Verdict::Refused(Refusal::RunState(RunStatus::WaitingApproval)));
    assert_eq!(apply(&wf, &mut state, resolve("gate", json!({"action": "accept"})), 2).verdict, Verdict::Applied);
}

#[test]
fn a_parent_mirrors_a_waiting_child_and_a_child_notices_its_parent() {
    let parent =
        workflow(json!([{"id": "call", "typeId": "core.subWorkflow", "config": {"workflowId": "child"}}]), json!([]));
    let mut state = pending(&parent, json!({}));
    drive(&parent, &mut state, 0);
    let child_run_id = state.nodes["call"].child_run_id.clone().unwrap();
    let status = |status| Input::ChildStatus { node_id: "call".into(), child_run_id: child_run_id.clone(), status };
    assert_eq!(apply(&parent, &mut state, status(RunStatus::WaitingApproval), 1).verdict, Verdict::Applied);
    assert_eq!(state.status, RunStatus::WaitingApproval);
    assert_eq!(state.current_node(), Some("call"));
    assert!(matches!(apply(&parent, &mut state, status(RunStatus::WaitingApproval), 2).verdict, Verdict::Ignored(_)));
    apply(&parent, &mut state, status(RunStatus::Running), 3);
    assert_eq!(state.status, RunStatus::Running);

    let child = gate(json!({}));
    let mut child_state = pending(&child, json!({}));
    child_state.parent =
        Some(crate::run::ParentLink { run_id: "p".into(), node_id: "call".into(), depth: 1, deadline_covered: false });
    apply(&child, &mut child_state, Input::Start, 0);
    let suspended = apply(&child, &mut child_state, Input::Step { node_id: "gate".into(), activation: 1 }, 0);
    assert!(suspended.effects.iter().any(Effect::is_parent_notice), "{:?}", suspended.effects);
    assert_eq!(child_state.nodes["gate"].status, NodeStatus::Suspended);
}
