//! Transition-table tests for the supervisor ⇄ dispatch loop.

use serde_json::{json, Value};

use super::tests::{pending, workflow};
use super::*;
use crate::model::Workflow;
use crate::run::{NodeStatus, RunState, RunStatus};

fn looped(supervisor: Value, dispatch: Value, variables: Value) -> Workflow {
    Workflow::compile(json!({"id": "conformance-loop", "name": "loop",
        "nodes": [{"id": "sup", "typeId": "core.orchestrator.supervisor", "config": supervisor},
                  {"id": "dispatch", "typeId": "core.dispatch", "config": dispatch}],
        "edges": [{"id": "e1", "sourceNodeId": "sup", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "sup"}],
        "variables": variables}))
    .unwrap()
}

fn started(wf: &Workflow, variables: Value) -> RunState {
    let mut state = pending(wf, variables);
    state.mocks_allowed = true;
    apply(wf, &mut state, Input::Start, 0);
    state
}

fn step(wf: &Workflow, state: &mut RunState, node: &str) -> Outcome {
    let activation = state.nodes[node].activation;
    apply(wf, state, Input::Step { node_id: node.into(), activation }, 1)
}

fn finish(wf: &Workflow, state: &mut RunState, status: RunStatus, variables: Value) -> Outcome {
    let child_run_id = state.nodes["dispatch"].child_run_id.clone().unwrap();
    let input = Input::ChildFinished {
        node_id: "dispatch".into(),
        child_run_id,
        status,
        variables: variables.as_object().cloned().unwrap_or_default(),
        error: None,
    };
    apply(wf, state, input, 2)
}

fn decided_kinds(outcomes: &[&Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .flat_map(|o| o.events.iter())
        .filter(|e| e.event_type == "runOrchestrator.decided")
        .map(|e| e.payload["decision"]["kind"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_default_plan_dispatches_one_worker_then_terminates_and_dispatch_events_point_at_their_decision() {
    let wf = looped(json!({}), json!({"fanOutPolicy": "sequential"}), json!([]));
    let mut state = started(&wf, json!({}));
    let first = step(&wf, &mut state, "sup");
    let decided = first.events.iter().find(|e| e.event_type == "runOrchestrator.decided").unwrap();
    assert_eq!(
        decided.payload,
        json!({"agentId": "trellis.supervisor",
        "decision": {"kind": "next-worker", "nextWorkerIds": ["conformance-noop"]}})
    );
    let dispatched = step(&wf, &mut state, "dispatch");
    assert!(dispatched.events.iter().all(|e| e.causation == Some(decided.sequence)), "{:?}", dispatched.events);
    assert!(dispatched
        .effects
        .iter()
        .any(|e| matches!(e, Effect::StartChild { workflow_id, .. } if workflow_id == "conformance-noop")));
    let harvested = finish(&wf, &mut state, RunStatus::Completed, json!({}));
    assert_eq!(state.nodes["sup"].status, NodeStatus::Scheduled, "the loop edge starts the next tick");
    let second = step(&wf, &mut state, "sup");
    let last = step(&wf, &mut state, "dispatch");
    assert_eq!(decided_kinds(&[&first, &harvested, &second, &last]), ["next-worker", "terminate"]);
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.child_runs.len(), 1);
    assert_eq!(state.child_runs[0].status, RunStatus::Completed);
}

#[test]
fn sequential_workers_see_each_others_output_mapping_and_per_worker_mappings_win() {
    let plan = json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["a", "b"]}]});
    let dispatch = json!({"inputMapping": {"input": "defaultX"},
        "perWorkerOutputMappings": {"a": {"sharedVar": "output"}},
        "perWorkerInputMappings": {"b": {"input": "sharedVar"}}});
    let wf = looped(plan, dispatch, json!([]));
    let mut state = started(&wf, json!({"defaultX": "x", "sharedVar": ""}));
    step(&wf, &mut state, "sup");
    step(&wf, &mut state, "dispatch");
    assert_eq!(child_inputs(&wf, &state, "dispatch"), json!({"input": "x"}).as_object().cloned().unwrap());
    let first_child = state.nodes["dispatch"].child_run_id.clone();
    let next = finish(&wf, &mut state, RunStatus::Completed, json!({"output": "hello"}));
    assert!(next.effects.iter().any(|e| matches!(e, Effect::StartChild { workflow_id, .. } if workflow_id == "b")));
    assert_ne!(state.nodes["dispatch"].child_run_id, first_child, "each worker is its own child run");
    assert_eq!(state.variables["sharedVar"], "hello");
    assert_eq!(child_inputs(&wf, &state, "dispatch"), json!({"input": "hello"}).as_object().cloned().unwrap());
    // A redelivered notice for the first child changes nothing.
    let again = apply(
        &wf,
        &mut state,
        Input::ChildFinished {
            node_id: "dispatch".into(),
            child_run_id: first_child.unwrap(),
            status: RunStatus::Completed,
            variables: json!({"output": "twice"}).as_object().cloned().unwrap(),
            error: None,
        },
        3,
    );
    assert_eq!(again.verdict, Verdict::Stale);
    assert_eq!(state.variables["sharedVar"], "hello");
}

#[test]
fn per_item_inputs_overlay_the_mapping_and_a_mismatch_dispatches_nothing() {
    let items = json!([{"contactId": "c1", "region": "eu"}, {"contactId": "c2"}]);
    let plan =
        json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["w", "w"], "nextWorkerInputs": items}]});
    let wf = looped(plan, json!({"inputMapping": {"contactId": "fallback", "region": "region"}}), json!([]));
    let mut state = started(&wf, json!({"fallback": "c0", "region": "us"}));
    step(&wf, &mut state, "sup");
    step(&wf, &mut state, "dispatch");
    assert_eq!(
        child_inputs(&wf, &state, "dispatch"),
        json!({"contactId": "c1", "region": "eu"}).as_object().cloned().unwrap()
    );
    finish(&wf, &mut state, RunStatus::Completed, json!({}));
    assert_eq!(
        child_inputs(&wf, &state, "dispatch"),
        json!({"contactId": "c2", "region": "us"}).as_object().cloned().unwrap()
    );

    let mismatch =
        json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["w", "w"], "nextWorkerInputs": [{}]}]});
    let wf = looped(mismatch, json!({}), json!([]));
    let mut state = started(&wf, json!({}));
    step(&wf, &mut state, "sup");
    let failed = step(&wf, &mut state, "dispatch");
    assert!(failed.effects.iter().all(|e| !matches!(e, Effect::StartChild { .. })), "no child");
    assert_eq!((state.status, state.error.as_ref().unwrap().code.as_str()), (RunStatus::Failed, "validation_error"));

    let wf = looped(
        json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["w"], "nextWorkerInputs": [{"a": 1}]}]}),
        json!({}),
        json!([]),
    );
    let mut state = started(&wf, json!({}));
    state.disabled_capabilities = vec!["dispatch.perItemInput".into()];
    step(&wf, &mut state, "sup");
    let refused = step(&wf, &mut state, "dispatch");
    assert!(refused.effects.iter().all(|e| !matches!(e, Effect::StartChild { .. })), "no child");
    assert_eq!(state.error.as_ref().unwrap().code, "validation_error");
}

#[test]
fn a_failed_worker_is_not_harvested_and_fails_the_dispatch() {
    let plan = json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["fails"]}]});
    let wf = looped(plan, json!({"outputMapping": {"parentResult": "childOutcome"}}), json!([]));
    let mut state = started(&wf, json!({"parentResult": ""}));
    step(&wf, &mut state, "sup");
    step(&wf, &mut state, "dispatch");
    finish(&wf, &mut state, RunStatus::Failed, json!({"childOutcome": "this-should-not-be-harvested"}));
    assert_eq!(state.variables["parentResult"], "");
    assert_eq!((state.status, state.error.as_ref().unwrap().code.as_str()), (RunStatus::Failed, "child_failed"));
}

#[test]
fn without_an_allowed_source_or_a_decision_the_nodes_fail_clearly() {
    let wf = looped(json!({}), json!({}), json!([]));
    let mut state = pending(&wf, json!({}));
    state.mocks_allowed = false;
    apply(&wf, &mut state, Input::Start, 0);
    step(&wf, &mut state, "sup");
    assert_eq!(state.error.as_ref().unwrap().code, "decision_source_unavailable");

    let alone = workflow(
        json!([{"id": "d", "typeId": "core.dispatch"}, {"id": "s", "typeId": "core.orchestrator.supervisor"}]),
        json!([{"id": "e", "sourceNodeId": "d", "targetNodeId": "s"}]),
    );
    let mut state = pending(&alone, json!({}));
    apply(&alone, &mut state, Input::Start, 0);
    step(&alone, &mut state, "d");
    assert_eq!(state.error.as_ref().unwrap().code, "no_pending_decision");
}

#[test]
fn registration_refuses_parallel_only_fields_a_lonely_dispatch_and_bad_plans() {
    let compile = |nodes: Value| {
        let edges = match nodes.as_array().map(Vec::len) {
            Some(2) => json!([{"id": "e", "sourceNodeId": "s", "targetNodeId": "d"}]),
            _ => json!([]),
        };
        Workflow::compile(json!({"id": "w", "name": "w", "nodes": nodes, "edges": edges}))
    };
    let parallel = compile(json!([{"id": "s", "typeId": "core.orchestrator.supervisor"},
        {"id": "d", "typeId": "core.dispatch", "config": {"fanOutPolicy": "parallel"}}]));
    assert!(parallel.is_ok(), "{parallel:?}");
    let join_without_parallel = compile(json!([{"id": "s", "typeId": "core.orchestrator.supervisor"},
        {"id": "d", "typeId": "core.dispatch", "config": {"joinPolicy": {"mode": "first"}}}]));
    assert!(
        matches!(join_without_parallel, Err(crate::DefinitionError::NodeConfig { ref node_id, .. }) if node_id == "d"),
        "{join_without_parallel:?}"
    );
    let lonely = compile(json!([{"id": "d", "typeId": "core.dispatch"}]));
    assert!(matches!(lonely, Err(crate::DefinitionError::NodeConfig { .. })));
    let bad_plan = compile(json!([{"id": "s", "typeId": "core.orchestrator.supervisor",
        "config": {"mockDispatchPlan": [{"kind": "escalate"}]}}]));
    assert!(matches!(bad_plan, Err(crate::DefinitionError::NodeConfig { .. })));
}

#[test]
fn a_decision_from_another_agent_fails_the_supervisor() {
    let wf = Workflow::compile(json!({"id": "conformance-two-agents", "name": "two agents",
        "nodes": [{"id": "first", "typeId": "core.orchestrator.supervisor",
                   "config": {"agentId": "agent-one", "mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["w"]}]}},
                  {"id": "dispatch", "typeId": "core.dispatch"},
                  {"id": "second", "typeId": "core.orchestrator.supervisor", "config": {"agentId": "agent-two"}}],
        "edges": [{"id": "e1", "sourceNodeId": "first", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "second"}]}))
    .unwrap();
    let mut state = started(&wf, json!({}));
    step(&wf, &mut state, "first");
    assert_eq!(state.orchestrator.as_ref().unwrap().agent_id, "agent-one");
    step(&wf, &mut state, "dispatch");
    finish(&wf, &mut state, RunStatus::Completed, json!({}));
    let refused = step(&wf, &mut state, "second");
    assert!(refused.events.iter().all(|e| e.event_type != "runOrchestrator.decided"), "nothing recorded");
    assert_eq!((state.status, state.error.as_ref().unwrap().code.as_str()), (RunStatus::Failed, "validation_error"));
}
