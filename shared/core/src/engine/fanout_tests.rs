//! Pure-engine tests of parallel fan-out (issue 19): `core.dispatch` with `fanOutPolicy:
//! parallel` (window, join modes, child-failure policies, caps, cancel, redelivery, events)
//! and `vendor.trellis.forEach` (items, child inputs, results, failure policies). Children are
//! driven by feeding `Input::ChildFinished` for the `StartChild` effects the engine emitted.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use super::tests::pending;
use super::*;
use crate::model::Workflow;
use crate::run::{NodeStatus, RunState, RunStatus};

/// A supervisor deciding `next-worker` with `workers`, then a dispatch with `dispatch`.
pub(super) fn dispatch_workflow(workers: &[String], dispatch: Value, settings: Value) -> Workflow {
    let plan = json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": workers}]});
    Workflow::compile(json!({"id": "fan-out", "name": "fan-out", "settings": settings,
        "nodes": [{"id": "sup", "typeId": "core.orchestrator.supervisor", "config": plan},
                  {"id": "dispatch", "typeId": "core.dispatch", "config": dispatch}],
        "edges": [{"id": "e1", "sourceNodeId": "sup", "targetNodeId": "dispatch"}]}))
    .unwrap()
}

pub(super) fn workers(count: usize) -> Vec<String> {
    (0..count).map(|k| format!("w{k}")).collect()
}

pub(super) fn parallel(extra: Value) -> Value {
    let mut config = json!({"fanOutPolicy": "parallel"});
    for (key, value) in extra.as_object().cloned().unwrap_or_default() {
        config[key] = value;
    }
    config
}

pub(super) fn step(wf: &Workflow, state: &mut RunState, node: &str, now: u64) -> Outcome {
    let activation = state.nodes[node].activation;
    apply(wf, state, Input::Step { node_id: node.into(), activation }, now)
}

/// A started run whose supervisor decided; returns the state, the decided event's sequence
/// and the dispatch step's outcome.
pub(super) fn dispatched(wf: &Workflow) -> (RunState, u64, Outcome) {
    let mut state = pending(wf, json!({}));
    state.mocks_allowed = true;
    apply(wf, &mut state, Input::Start, 0);
    let decided = step(wf, &mut state, "sup", 1);
    let sequence = decided.events.iter().find(|e| e.event_type == "runOrchestrator.decided").unwrap().sequence;
    let outcome = step(wf, &mut state, "dispatch", 2);
    (state, sequence, outcome)
}

/// The `(slot key, child run id)` of every StartChild in `outcome`.
pub(super) fn starts(outcome: &Outcome) -> Vec<(String, String)> {
    outcome
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::StartChild { node_id, child_run_id, .. } => Some((node_id.clone(), child_run_id.clone())),
            _ => None,
        })
        .collect()
}

pub(super) fn cancels(outcome: &Outcome) -> BTreeSet<String> {
    outcome
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::CancelChild { child_run_id, .. } => Some(child_run_id.clone()),
            _ => None,
        })
        .collect()
}

pub(super) fn child_of(state: &RunState, key: &str) -> String {
    state.nodes[key].child_run_id.clone().unwrap()
}

/// Ends the child of slot `key` with `status` and `variables`.
pub(super) fn end(wf: &Workflow, state: &mut RunState, key: &str, status: RunStatus, variables: Value) -> Outcome {
    let input = Input::ChildFinished {
        node_id: key.into(),
        child_run_id: child_of(state, key),
        status,
        variables: variables.as_object().cloned().unwrap_or_default(),
        error: None,
    };
    apply(wf, state, input, 10)
}

pub(super) fn event<'a>(outcome: &'a Outcome, event_type: &str) -> Option<&'a crate::event::RunEvent> {
    outcome.events.iter().find(|e| e.event_type == event_type)
}

pub(super) fn slots_left(state: &RunState) -> Vec<String> {
    state.nodes.keys().filter(|key| key.contains('#')).cloned().collect()
}

pub(super) fn ok() -> Value {
    json!({})
}

#[test]
fn wait_all_collect_lists_children_in_index_order_and_maps_outputs_in_merge_order() {
    let wf = dispatch_workflow(&workers(3), parallel(json!({"outputMapping": {"result": "out"}})), json!({}));
    let (mut state, decided, first) = dispatched(&wf);
    let fan_out = event(&first, DISPATCH_FAN_OUT).unwrap();
    assert_eq!(
        fan_out.payload,
        json!({"fanOutPolicy": "parallel", "childCount": 3, "maxConcurrency": 3, "joinMode": "wait-all"})
    );
    let started = starts(&first);
    let keys: Vec<&str> = started.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["dispatch#0", "dispatch#1", "dispatch#2"]);
    let dispatched_events: Vec<_> = first.events.iter().filter(|e| e.event_type == "node.dispatched").collect();
    assert_eq!(dispatched_events.len(), 3, "one node.dispatched per child");
    assert!(first.events.iter().all(|e| e.causation == Some(decided)), "{:?}", first.events);
    assert_eq!(state.nodes["dispatch"].status, NodeStatus::WaitingChild);

    let ids: Vec<String> = started.iter().map(|(_, id)| id.clone()).collect();
    end(&wf, &mut state, "dispatch#2", RunStatus::Completed, json!({"out": "c2"}));
    end(&wf, &mut state, "dispatch#0", RunStatus::Completed, json!({"out": "c0"}));
    assert_eq!(state.variables.get("result"), None, "mapped at the join, not before");
    let last = end(&wf, &mut state, "dispatch#1", RunStatus::Completed, json!({"out": "c1"}));
    let join = event(&last, DISPATCH_JOIN).unwrap();
    let merge_order = json!([ids[2], ids[0], ids[1]]);
    assert_eq!(
        join.payload,
        json!({"joinOutcome": "satisfied", "completedCount": 3, "failedCount": 0, "cancelledCount": 0,
               "mergeOrder": merge_order})
    );
    assert_eq!(join.causation, Some(decided));
    let outputs = &state.nodes["dispatch"].outputs;
    assert_eq!(outputs["decision"], "next-worker");
    assert_eq!(outputs["joinOutcome"], "satisfied");
    assert!(outputs.get("mergeOrder").is_none(), "the merge order is the join event's");
    let children: Vec<Value> = (0..3)
        .map(|k| json!({"workflowId": format!("w{k}"), "childRunId": ids[k], "childStatus": "completed"}))
        .collect();
    assert_eq!(outputs["children"], json!(children));
    assert_eq!(state.variables["result"], "c1", "on a collision the last finisher wins");
    assert_eq!(state.nodes["dispatch"].status, NodeStatus::Completed);
    assert_eq!(state.status, RunStatus::Completed);
    assert!(slots_left(&state).is_empty(), "slot records are removed at the join: {:?}", slots_left(&state));
}

#[test]
fn wait_all_collect_with_a_failure_is_partial_and_the_failed_child_is_not_harvested() {
    let wf = dispatch_workflow(&workers(3), parallel(json!({"outputMapping": {"result": "out"}})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    end(&wf, &mut state, "dispatch#0", RunStatus::Completed, json!({"out": "c0"}));
    let failed_id = child_of(&state, "dispatch#1");
    end(&wf, &mut state, "dispatch#2", RunStatus::Completed, json!({"out": "c2"}));
    let last = end(&wf, &mut state, "dispatch#1", RunStatus::Failed, json!({"out": "never"}));
    let join = event(&last, DISPATCH_JOIN).unwrap();
    assert_eq!(join.payload["joinOutcome"], "partial");
    assert_eq!((join.payload["completedCount"].clone(), join.payload["failedCount"].clone()), (json!(2), json!(1)));
    assert_eq!(state.variables["result"], "c2", "the failed child, last to end, is not harvested");
    assert_eq!(state.nodes["dispatch"].status, NodeStatus::Completed);
    let children = state.nodes["dispatch"].outputs["children"].as_array().unwrap().clone();
    assert_eq!(children[1]["childRunId"], json!(failed_id));
    assert_eq!(children[1]["childStatus"], "failed");
    assert_eq!(children[1]["error"]["code"], "child_failed");
    assert!(children[0].get("error").is_none());
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn absorb_is_partial_too() {
    let wf = dispatch_workflow(&workers(2), parallel(json!({"joinPolicy": {"onChildFailure": "absorb"}})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    end(&wf, &mut state, "dispatch#0", RunStatus::Failed, ok());
    let last = end(&wf, &mut state, "dispatch#1", RunStatus::Completed, ok());
    assert_eq!(event(&last, DISPATCH_JOIN).unwrap().payload["joinOutcome"], "partial");
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn fail_fast_cancels_the_running_children_never_starts_the_rest_and_fails_the_run() {
    let config = parallel(json!({"joinPolicy": {"onChildFailure": "fail-fast"}, "maxConcurrency": 2}));
    let wf = dispatch_workflow(&workers(5), config, json!({}));
    let (mut state, decided, first) = dispatched(&wf);
    assert_eq!(starts(&first).len(), 2);
    end(&wf, &mut state, "dispatch#0", RunStatus::Completed, ok());
    let loser = child_of(&state, "dispatch#1");
    let failed = end(&wf, &mut state, "dispatch#2", RunStatus::Failed, ok());
    assert!(starts(&failed).is_empty(), "no child starts after the join failed");
    assert_eq!(cancels(&failed), BTreeSet::from([loser]));
    let join = event(&failed, DISPATCH_JOIN).unwrap();
    assert_eq!(join.payload["joinOutcome"], "failed");
    assert_eq!(join.payload["cancelledCount"], 1);
    assert_eq!(join.causation, Some(decided));
    assert_eq!(state.nodes["dispatch"].status, NodeStatus::Failed);
    let error = state.error.as_ref().unwrap();
    assert_eq!((state.status, error.code.as_str()), (RunStatus::Failed, "fan_out_join_failed"));
    assert_eq!(error.details.as_ref().unwrap()["joinOutcome"], "failed");
    assert_eq!(error.details.as_ref().unwrap()["children"].as_array().unwrap().len(), 3, "three ever started");
    assert!(slots_left(&state).is_empty());
    assert!(!state.nodes.contains_key("dispatch#3") && !state.nodes.contains_key("dispatch#4"));
}

#[test]
fn quorum_is_met_after_n_completions_and_cancels_the_losers() {
    let config = parallel(json!({"joinPolicy": {"mode": "quorum", "quorum": 2}}));
    let wf = dispatch_workflow(&workers(5), config, json!({}));
    let (mut state, _, first) = dispatched(&wf);
    assert_eq!(event(&first, DISPATCH_FAN_OUT).unwrap().payload["joinMode"], "quorum");
    let losers: BTreeSet<String> = [0, 2, 4].iter().map(|k| child_of(&state, &format!("dispatch#{k}"))).collect();
    let once = end(&wf, &mut state, "dispatch#3", RunStatus::Completed, ok());
    assert!(event(&once, DISPATCH_JOIN).is_none(), "one completion is not a quorum of 2");
    let met = end(&wf, &mut state, "dispatch#1", RunStatus::Completed, ok());
    assert_eq!(cancels(&met), losers);
    let join = event(&met, DISPATCH_JOIN).unwrap();
    assert_eq!(join.payload["joinOutcome"], "satisfied", "losers cancelled by the join do not count");
    assert_eq!(join.payload["completedCount"], 2);
    assert_eq!(join.payload["cancelledCount"], 3);
    assert_eq!(join.payload["mergeOrder"].as_array().unwrap().len(), 5);
    assert_eq!(state.status, RunStatus::Completed);
    assert!(slots_left(&state).is_empty());
}

#[test]
fn an_impossible_quorum_fails_and_a_quorum_above_the_workers_is_a_validation_error() {
    let config = parallel(json!({"joinPolicy": {"mode": "quorum", "quorum": 2}}));
    let wf = dispatch_workflow(&workers(5), config, json!({}));
    let (mut state, _, _) = dispatched(&wf);
    for k in 0..3 {
        let open = end(&wf, &mut state, &format!("dispatch#{k}"), RunStatus::Failed, ok());
        assert!(event(&open, DISPATCH_JOIN).is_none(), "two may still complete after {} failures", k + 1);
    }
    let last = end(&wf, &mut state, "dispatch#3", RunStatus::Failed, ok());
    assert_eq!(event(&last, DISPATCH_JOIN).unwrap().payload["joinOutcome"], "failed");
    assert_eq!(cancels(&last).len(), 1);
    assert_eq!(state.error.as_ref().unwrap().code, "fan_out_join_failed");

    let config = parallel(json!({"joinPolicy": {"mode": "quorum", "quorum": 6}}));
    let wf = dispatch_workflow(&workers(5), config, json!({}));
    let (state, _, outcome) = dispatched(&wf);
    assert!(starts(&outcome).is_empty());
    assert_eq!((state.status, state.error.as_ref().unwrap().code.as_str()), (RunStatus::Failed, "validation_error"));
}

#[test]
fn first_is_met_on_the_first_completion_even_after_failures_and_fails_when_all_fail() {
    let wf = dispatch_workflow(&workers(4), parallel(json!({"joinPolicy": {"mode": "first"}})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    end(&wf, &mut state, "dispatch#0", RunStatus::Failed, ok());
    end(&wf, &mut state, "dispatch#1", RunStatus::Cancelled, ok());
    let met = end(&wf, &mut state, "dispatch#2", RunStatus::Completed, ok());
    let join = event(&met, DISPATCH_JOIN).unwrap();
    assert_eq!(join.payload["joinOutcome"], "partial");
    assert_eq!(
        (
            join.payload["completedCount"].clone(),
            join.payload["failedCount"].clone(),
            join.payload["cancelledCount"].clone()
        ),
        (json!(1), json!(1), json!(2))
    );
    assert_eq!(cancels(&met).len(), 1);
    assert_eq!(state.status, RunStatus::Completed);

    let wf = dispatch_workflow(&workers(2), parallel(json!({"joinPolicy": {"mode": "first"}})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let open = end(&wf, &mut state, "dispatch#1", RunStatus::Failed, ok());
    assert!(event(&open, DISPATCH_JOIN).is_none());
    let failed = end(&wf, &mut state, "dispatch#0", RunStatus::Failed, ok());
    assert_eq!(event(&failed, DISPATCH_JOIN).unwrap().payload["joinOutcome"], "failed");
    assert_eq!(state.error.as_ref().unwrap().code, "fan_out_join_failed");
}

#[test]
fn race_is_met_on_the_first_child_to_end_whatever_its_status() {
    let wf = dispatch_workflow(&workers(3), parallel(json!({"joinPolicy": {"mode": "race"}})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let met = end(&wf, &mut state, "dispatch#1", RunStatus::Failed, ok());
    let join = event(&met, DISPATCH_JOIN).unwrap();
    assert_eq!(join.payload["joinOutcome"], "partial");
    assert_eq!(join.payload["cancelledCount"], 2);
    assert_eq!(cancels(&met).len(), 2);
    assert_eq!(state.status, RunStatus::Completed);

    let wf = dispatch_workflow(&workers(3), parallel(json!({"joinPolicy": {"mode": "race"}})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let met = end(&wf, &mut state, "dispatch#2", RunStatus::Completed, ok());
    assert_eq!(event(&met, DISPATCH_JOIN).unwrap().payload["joinOutcome"], "satisfied");
}

#[test]
fn the_window_keeps_at_most_max_concurrency_children_running() {
    let wf = dispatch_workflow(&workers(50), parallel(json!({"maxConcurrency": 5})), json!({}));
    let (mut state, _, first) = dispatched(&wf);
    assert_eq!(event(&first, DISPATCH_FAN_OUT).unwrap().payload["maxConcurrency"], 5);
    let mut outstanding: Vec<String> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut dispatched_events = 0;
    let mut record = |outcome: &Outcome, outstanding: &mut Vec<String>| {
        dispatched_events += outcome.events.iter().filter(|e| e.event_type == "node.dispatched").count();
        let started = starts(outcome);
        assert!(started.len() <= 5, "one commit starts at most 5, not {}", started.len());
        for (key, id) in started {
            assert!(seen.insert(id), "a child id is started once");
            outstanding.push(key);
        }
        assert!(outstanding.len() <= 5, "{} outstanding", outstanding.len());
    };
    record(&first, &mut outstanding);
    assert_eq!(outstanding.len(), 5);
    let mut turn = 0;
    while !outstanding.is_empty() {
        let key = outstanding.remove((turn * 7) % outstanding.len());
        turn += 1;
        let outcome = end(&wf, &mut state, &key, RunStatus::Completed, ok());
        assert_eq!(outcome.verdict, Verdict::Applied);
        if let Some(progress) = state.nodes["dispatch"].fan_out.as_ref() {
            assert!(progress.running <= 5);
        }
        record(&outcome, &mut outstanding);
    }
    assert_eq!(turn, 50);
    assert_eq!(dispatched_events, 50, "one node.dispatched per child");
    assert_eq!(seen.len(), 50, "exactly 50 distinct children");
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.nodes["dispatch"].outputs["children"].as_array().unwrap().len(), 50);
    assert_eq!(state.children_started, 50);
    assert!(slots_left(&state).is_empty());
}

#[test]
fn a_duplicate_notice_for_a_slot_changes_nothing() {
    let wf = dispatch_workflow(&workers(3), parallel(json!({"outputMapping": {"result": "out"}})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let child_run_id = child_of(&state, "dispatch#0");
    let notice = |out: &str| Input::ChildFinished {
        node_id: "dispatch#0".into(),
        child_run_id: child_run_id.clone(),
        status: RunStatus::Completed,
        variables: json!({"out": out}).as_object().cloned().unwrap(),
        error: None,
    };
    assert_eq!(apply(&wf, &mut state, notice("first"), 10).verdict, Verdict::Applied);
    let before = state.nodes["dispatch"].fan_out.clone().unwrap();
    assert_eq!(before.completed, 1);
    let again = apply(&wf, &mut state, notice("twice"), 11);
    assert_ne!(again.verdict, Verdict::Applied);
    assert!(again.events.is_empty());
    assert_eq!(state.nodes["dispatch"].fan_out.as_ref(), Some(&before), "counters unchanged");
    assert_eq!(state.nodes["dispatch#0"].outputs["result"], "first");

    end(&wf, &mut state, "dispatch#1", RunStatus::Completed, json!({"out": "b"}));
    end(&wf, &mut state, "dispatch#2", RunStatus::Completed, json!({"out": "c"}));
    assert_eq!(state.status, RunStatus::Completed);
    let after_join = apply(&wf, &mut state, notice("late"), 12);
    assert_ne!(after_join.verdict, Verdict::Applied);
    assert_eq!(state.variables["result"], "c");
}

#[test]
fn a_redelivered_step_and_outstanding_effects_restart_running_slots_only() {
    let wf = dispatch_workflow(&workers(5), parallel(json!({"maxConcurrency": 3})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    end(&wf, &mut state, "dispatch#1", RunStatus::Completed, ok());
    let redelivered = step(&wf, &mut state, "dispatch", 20);
    assert_ne!(redelivered.verdict, Verdict::Applied);
    assert!(starts(&redelivered).is_empty(), "a redelivered step starts nothing new");
    assert_eq!(state.nodes["dispatch"].fan_out.as_ref().unwrap().started, 4);
    let restarted: BTreeSet<(String, String)> = outstanding_effects(&state)
        .iter()
        .filter_map(|effect| match effect {
            Effect::StartChild { node_id, child_run_id, .. } => Some((node_id.clone(), child_run_id.clone())),
            _ => None,
        })
        .collect();
    let running: BTreeSet<(String, String)> =
        ["dispatch#0", "dispatch#2", "dispatch#3"].iter().map(|key| (key.to_string(), child_of(&state, key))).collect();
    assert_eq!(restarted, running);
}

#[test]
fn cancel_mid_fan_out_cancels_every_running_child_and_starts_no_other() {
    let wf = dispatch_workflow(&workers(6), parallel(json!({"maxConcurrency": 3})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    end(&wf, &mut state, "dispatch#0", RunStatus::Completed, ok());
    let running: BTreeSet<String> = (1..4).map(|k| child_of(&state, &format!("dispatch#{k}"))).collect();
    let cancelled = apply(&wf, &mut state, Input::Cancel { reason: Some("stop".into()) }, 30);
    assert_eq!(cancels(&cancelled), running);
    assert!(starts(&cancelled).is_empty());
    assert_eq!(state.status, RunStatus::Cancelled);
    let slot_events: Vec<_> = cancelled
        .events
        .iter()
        .filter(|e| e.event_type == "node.cancelled" && e.node_id.as_deref().is_some_and(|n| n.contains('#')))
        .collect();
    assert!(slot_events.is_empty(), "no node.cancelled for a slot: {slot_events:?}");
    assert!(event(&cancelled, "run.cancelled").is_some());
    // The cancelled children report back: nothing more starts.
    let late = end(&wf, &mut state, "dispatch#1", RunStatus::Cancelled, ok());
    assert!(starts(&late).is_empty());
    assert_ne!(late.verdict, Verdict::Applied);
    assert!(!state.nodes.contains_key("dispatch#4") && !state.nodes.contains_key("dispatch#5"));
}

#[test]
fn one_worker_parallel_decision_joins_under_its_policy_without_a_fan_out_event() {
    let config = parallel(json!({"joinPolicy": {"onChildFailure": "collect"}}));
    let wf = dispatch_workflow(&workers(1), config, json!({}));
    let (mut state, decided, outcome) = dispatched(&wf);
    assert!(event(&outcome, DISPATCH_FAN_OUT).is_none(), "the closed fanOut schema wants two children");
    assert_eq!(outcome.events.iter().filter(|e| e.event_type == "node.dispatched").count(), 1);
    let started = starts(&outcome);
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].0, "dispatch#0", "a slot, as for many workers");
    assert!(state.nodes["dispatch"].dispatch.is_none() && state.nodes["dispatch"].fan_out.is_some());
    // collect: the failed worker makes the join partial, and the run goes on.
    let last = end(&wf, &mut state, "dispatch#0", RunStatus::Failed, ok());
    let join = event(&last, DISPATCH_JOIN).unwrap();
    assert_eq!((join.payload["joinOutcome"].clone(), join.causation), (json!("partial"), Some(decided)));
    assert_eq!(state.nodes["dispatch"].status, NodeStatus::Completed);
    assert_eq!(state.nodes["dispatch"].outputs["joinOutcome"], "partial");
    assert_eq!(state.status, RunStatus::Completed);

    // A quorum above one worker is refused as for many.
    let config = parallel(json!({"joinPolicy": {"mode": "quorum", "quorum": 2}}));
    let wf = dispatch_workflow(&workers(1), config, json!({}));
    let (state, _, outcome) = dispatched(&wf);
    assert!(starts(&outcome).is_empty());
    assert_eq!((state.status, state.error.as_ref().unwrap().code.as_str()), (RunStatus::Failed, "validation_error"));
}

#[test]
fn an_iteration_cap_below_the_workers_dispatches_nothing() {
    let wf = dispatch_workflow(&workers(5), parallel(json!({"iterationCap": 3})), json!({}));
    let (state, _, outcome) = dispatched(&wf);
    assert!(starts(&outcome).is_empty());
    assert!(event(&outcome, DISPATCH_FAN_OUT).is_none());
    let breach = event(&outcome, "cap.breached").unwrap();
    assert_eq!(breach.payload["kind"], "loop-iterations");
    assert_eq!(breach.payload["details"]["intent"], "dispatch-iterations");
    assert_eq!(state.error.as_ref().unwrap().code, "loop_limit_exceeded");
    assert!(slots_left(&state).is_empty());
}

#[test]
fn settings_limit_child_runs_and_narrow_the_width() {
    let wf = dispatch_workflow(&workers(5), parallel(json!({})), json!({"maxChildRuns": 3}));
    let (state, _, outcome) = dispatched(&wf);
    assert!(starts(&outcome).is_empty());
    let breach = event(&outcome, "cap.breached").unwrap();
    assert_eq!(breach.payload["kind"], "loop-iterations");
    assert_eq!(breach.payload["details"]["intent"], "child-runs");
    assert_eq!((breach.payload["limit"].clone(), breach.payload["observed"].clone()), (json!(3), json!(5)));
    assert_eq!(state.nodes["dispatch"].status, NodeStatus::Failed);
    assert_eq!(
        (state.status, state.error.as_ref().unwrap().code.as_str()),
        (RunStatus::Failed, "child_run_limit_exceeded")
    );
    assert_eq!(state.children_started, 0);

    let wf =
        dispatch_workflow(&workers(5), parallel(json!({"maxConcurrency": 4})), json!({"maxConcurrentChildren": 2}));
    let (state, _, outcome) = dispatched(&wf);
    assert_eq!(starts(&outcome).len(), 2);
    assert_eq!(event(&outcome, DISPATCH_FAN_OUT).unwrap().payload["maxConcurrency"], 2);
    assert_eq!(state.nodes["dispatch"].fan_out.as_ref().unwrap().width, 2);
}

// ---- vendor.trellis.forEach ----

pub(super) fn loop_workflow(config: Value) -> Workflow {
    Workflow::compile(json!({"id": "loop", "name": "loop",
        "nodes": [{"id": "loop", "typeId": "vendor.trellis.forEach", "config": config}], "edges": []}))
    .unwrap()
}

pub(super) fn looped(wf: &Workflow, variables: Value) -> (RunState, Outcome) {
    let mut state = pending(wf, variables);
    apply(wf, &mut state, Input::Start, 0);
    let outcome = step(wf, &mut state, "loop", 1);
    (state, outcome)
}

fn object(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

#[test]
fn for_each_runs_literal_items_with_their_inputs_and_gathers_results_in_item_order() {
    let config = json!({"items": ["a", "b", "c"], "workflowId": "child", "inputMapping": {"tenant": "org"}});
    let wf = loop_workflow(config);
    let (mut state, first) = looped(&wf, json!({"org": "acme"}));
    let started = starts(&first);
    assert_eq!(started.len(), 3);
    assert!(first
        .effects
        .iter()
        .all(|e| !matches!(e, Effect::StartChild { workflow_id, .. } if workflow_id != "child")));
    assert_eq!(child_inputs(&wf, &state, "loop#1"), object(json!({"tenant": "acme", "item": "b", "index": 1})));
    let ids: Vec<String> = started.iter().map(|(_, id)| id.clone()).collect();
    end(&wf, &mut state, "loop#2", RunStatus::Completed, json!({"v": 2}));
    end(&wf, &mut state, "loop#0", RunStatus::Failed, json!({"v": 0}));
    end(&wf, &mut state, "loop#1", RunStatus::Completed, json!({"v": 1}));
    let results = state.variables["results"].as_array().unwrap().clone();
    assert_eq!(results[0]["index"], 0);
    assert_eq!(results[0]["childRunId"], json!(ids[0]));
    assert_eq!(results[0]["status"], "failed");
    assert_eq!(results[0]["error"]["code"], "child_failed");
    assert!(results[0].get("outputs").is_none());
    assert_eq!(results[1], json!({"index": 1, "childRunId": ids[1], "status": "completed", "outputs": {"v": 1}}));
    assert_eq!(results[2], json!({"index": 2, "childRunId": ids[2], "status": "completed", "outputs": {"v": 2}}));
    let outputs = &state.nodes["loop"].outputs;
    assert_eq!(outputs, &object(json!({"itemCount": 3, "completedCount": 2, "failedCount": 1, "cancelledCount": 0})));
    assert_eq!(state.status, RunStatus::Completed, "isolate: a failed item does not fail the node");
    assert!(slots_left(&state).is_empty());
}

#[test]
fn for_each_reads_a_variables_items_once() {
    let config = json!({"items": "xs", "workflowId": "child", "maxConcurrency": 1, "itemVariable": "x",
                        "outputVariables": ["keep"]});
    let wf = loop_workflow(config);
    let (mut state, first) = looped(&wf, json!({"xs": [10, 20]}));
    assert_eq!(starts(&first).len(), 1);
    assert_eq!(child_inputs(&wf, &state, "loop#0"), object(json!({"x": 10, "index": 0})));
    let changed = apply(&wf, &mut state, Input::SetVariables { variables: object(json!({"xs": [99, 98]})) }, 5);
    assert_eq!(changed.verdict, Verdict::Applied);
    let next = end(&wf, &mut state, "loop#0", RunStatus::Completed, json!({"keep": 1, "drop": 2}));
    assert_eq!(starts(&next).len(), 1);
    assert_eq!(child_inputs(&wf, &state, "loop#1"), object(json!({"x": 20, "index": 1})), "the items as they were");
    end(&wf, &mut state, "loop#1", RunStatus::Completed, json!({"keep": 3}));
    let results = state.variables["results"].as_array().unwrap();
    assert_eq!(results[0]["outputs"], json!({"keep": 1}));
    assert_eq!(results[1]["outputs"], json!({"keep": 3}));
    assert_eq!(state.status, RunStatus::Completed);
    assert!(state.nodes.keys().all(|key| !key.contains('#')), "the items record goes too: {:?}", state.nodes.keys());
}

#[test]
fn for_each_fail_fast_fails_the_node_with_the_item() {
    let config =
        json!({"items": [1, 2, 3, 4], "workflowId": "child", "maxConcurrency": 2, "onItemFailure": "fail-fast"});
    let wf = loop_workflow(config);
    let (mut state, _) = looped(&wf, json!({}));
    let other = child_of(&state, "loop#0");
    let failed_id = child_of(&state, "loop#1");
    let failed = end(&wf, &mut state, "loop#1", RunStatus::Failed, ok());
    assert!(starts(&failed).is_empty());
    assert_eq!(cancels(&failed), BTreeSet::from([other]));
    let error = state.error.as_ref().unwrap();
    assert_eq!((state.status, error.code.as_str()), (RunStatus::Failed, "item_failed"));
    let details = error.details.as_ref().unwrap();
    assert_eq!(details["index"], 1);
    assert_eq!(details["childRunId"], json!(failed_id));
    assert_eq!(details["cause"]["code"], "child_failed");
    let results = state.variables["results"].as_array().unwrap();
    assert_eq!(results[0]["status"], "cancelled");
    assert_eq!(results[1]["status"], "failed");
    assert_eq!(results[2], json!({"index": 2, "status": "not-started"}));
    assert!(slots_left(&state).is_empty());
}

#[test]
fn for_each_with_no_items_completes_at_once_and_a_non_array_variable_is_refused() {
    let wf = loop_workflow(json!({"items": [], "workflowId": "child"}));
    let (state, outcome) = looped(&wf, json!({}));
    assert!(starts(&outcome).is_empty());
    assert_eq!(state.variables["results"], json!([]));
    assert_eq!(state.nodes["loop"].outputs["itemCount"], 0);
    assert_eq!(state.status, RunStatus::Completed);

    let wf = loop_workflow(json!({"items": "xs", "workflowId": "child"}));
    let (state, outcome) = looped(&wf, json!({"xs": {"not": "an array"}}));
    assert!(starts(&outcome).is_empty());
    let error = state.error.as_ref().unwrap();
    assert_eq!((state.status, error.code.as_str()), (RunStatus::Failed, "validation_error"));
    assert!(error.message.contains("xs"), "{}", error.message);
}

#[test]
fn two_loops_at_once_stay_within_max_child_runs_together() {
    let item_loop = |id: &str| {
        json!({"id": id, "typeId": "vendor.trellis.forEach",
               "config": {"items": [1, 2, 3], "workflowId": "child", "maxConcurrency": 1, "resultsVariable": id}})
    };
    let wf = Workflow::compile(json!({"id": "two-loops", "name": "two loops", "settings": {"maxChildRuns": 5},
        "nodes": [{"id": "start", "typeId": "core.noop"}, item_loop("a"), item_loop("b")],
        "edges": [{"id": "ea", "sourceNodeId": "start", "targetNodeId": "a"},
                  {"id": "eb", "sourceNodeId": "start", "targetNodeId": "b"}]}))
    .unwrap();
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    step(&wf, &mut state, "start", 1);
    let first = step(&wf, &mut state, "a", 2);
    assert_eq!(starts(&first).len(), 1);
    let second = step(&wf, &mut state, "b", 3);
    assert!(starts(&second).is_empty(), "3 + 3 children would pass maxChildRuns 5");
    let breach = event(&second, "cap.breached").unwrap();
    assert_eq!(breach.payload["details"]["intent"], "child-runs");
    assert_eq!(breach.payload["observed"], 6);
    assert_eq!(state.error.as_ref().unwrap().code, "child_run_limit_exceeded");
}

#[test]
fn a_slots_inputs_are_its_workers_mapping_overlaid_by_its_item() {
    let items = json!([{"region": "eu"}, {}, {"contactId": "c3"}]);
    let plan = json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["a", "b", "a"],
                                            "nextWorkerInputs": items}]});
    let dispatch = parallel(json!({"inputMapping": {"contactId": "fallback"},
                                   "perWorkerInputMappings": {"b": {"contactId": "special"}}}));
    let wf = Workflow::compile(json!({"id": "inputs", "name": "inputs",
        "nodes": [{"id": "sup", "typeId": "core.orchestrator.supervisor", "config": plan},
                  {"id": "dispatch", "typeId": "core.dispatch", "config": dispatch}],
        "edges": [{"id": "e1", "sourceNodeId": "sup", "targetNodeId": "dispatch"}]}))
    .unwrap();
    let mut state = pending(&wf, json!({"fallback": "c0", "special": "c9"}));
    state.mocks_allowed = true;
    apply(&wf, &mut state, Input::Start, 0);
    step(&wf, &mut state, "sup", 1);
    let outcome = step(&wf, &mut state, "dispatch", 2);
    assert_eq!(starts(&outcome).len(), 3);
    assert_eq!(child_inputs(&wf, &state, "dispatch#0"), object(json!({"contactId": "c0", "region": "eu"})));
    assert_eq!(child_inputs(&wf, &state, "dispatch#1"), object(json!({"contactId": "c9"})));
    assert_eq!(child_inputs(&wf, &state, "dispatch#2"), object(json!({"contactId": "c3"})));
    // A later decision names none of these slots' workers: they get nothing from it.
    state.orchestrator.as_mut().unwrap().latest.as_mut().unwrap().sequence += 100;
    assert_eq!(child_inputs(&wf, &state, "dispatch#0"), Map::new());
}

#[test]
fn a_cancelled_child_fails_a_fail_fast_join() {
    let wf =
        dispatch_workflow(&workers(3), parallel(json!({"joinPolicy": {"onChildFailure": "fail-fast"}})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let outcome = end(&wf, &mut state, "dispatch#0", RunStatus::Cancelled, ok());
    let join = event(&outcome, DISPATCH_JOIN).unwrap();
    assert_eq!(join.payload["joinOutcome"], "failed");
    assert_eq!(join.payload["cancelledCount"], 3, "the cancelled child and the two losers");
    assert_eq!(cancels(&outcome).len(), 2);
    assert_eq!(state.error.as_ref().unwrap().code, "fan_out_join_failed");
}

#[test]
fn a_waiting_slot_child_is_mirrored_by_the_run() {
    let wf = dispatch_workflow(&workers(2), parallel(json!({})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let child_run_id = child_of(&state, "dispatch#1");
    let input = Input::ChildStatus { node_id: "dispatch#1".into(), child_run_id, status: RunStatus::WaitingApproval };
    assert_eq!(apply(&wf, &mut state, input, 5).verdict, Verdict::Applied);
    assert_eq!(state.status, RunStatus::WaitingApproval);
    end(&wf, &mut state, "dispatch#1", RunStatus::Completed, ok());
    assert_eq!(state.status, RunStatus::Running);
    end(&wf, &mut state, "dispatch#0", RunStatus::Completed, ok());
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn a_supervisor_loop_fans_out_again_with_new_children_within_the_iteration_cap() {
    let plan = json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["a", "b"]},
                                           {"kind": "next-worker", "nextWorkerIds": ["c", "d"]},
                                           {"kind": "next-worker", "nextWorkerIds": ["e", "f"]}]});
    let wf = Workflow::compile(json!({"id": "loop", "name": "loop",
        "nodes": [{"id": "sup", "typeId": "core.orchestrator.supervisor", "config": plan},
                  {"id": "dispatch", "typeId": "core.dispatch", "config": {"fanOutPolicy": "parallel", "iterationCap": 5}}],
        "edges": [{"id": "e1", "sourceNodeId": "sup", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "sup"}]}))
    .unwrap();
    let (mut state, _, first) = dispatched(&wf);
    let first_ids: BTreeSet<String> = starts(&first).into_iter().map(|(_, id)| id).collect();
    end(&wf, &mut state, "dispatch#0", RunStatus::Completed, ok());
    end(&wf, &mut state, "dispatch#1", RunStatus::Completed, ok());
    assert_eq!(state.nodes["sup"].status, NodeStatus::Scheduled, "the loop edge starts the next tick");
    let decided = step(&wf, &mut state, "sup", 20);
    let sequence = event(&decided, "runOrchestrator.decided").unwrap().sequence;
    let second = step(&wf, &mut state, "dispatch", 21);
    assert!(second.events.iter().all(|e| e.causation == Some(sequence)), "caused by the new decision");
    let second_ids: BTreeSet<String> = starts(&second).into_iter().map(|(_, id)| id).collect();
    assert_eq!(second_ids.len(), 2);
    assert!(first_ids.is_disjoint(&second_ids), "a new activation, new children");
    let workflows: Vec<String> = second
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::StartChild { workflow_id, .. } => Some(workflow_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(workflows, ["c", "d"]);
    end(&wf, &mut state, "dispatch#1", RunStatus::Completed, ok());
    end(&wf, &mut state, "dispatch#0", RunStatus::Completed, ok());
    assert_eq!(state.children_started, 4);
    step(&wf, &mut state, "sup", 30);
    let capped = step(&wf, &mut state, "dispatch", 31);
    assert!(starts(&capped).is_empty(), "4 dispatched + 2 would pass iterationCap 5");
    assert_eq!(event(&capped, "cap.breached").unwrap().payload["details"]["intent"], "dispatch-iterations");
    assert_eq!(state.error.as_ref().unwrap().code, "loop_limit_exceeded");
}

#[test]
fn the_run_running_out_of_time_cancels_the_running_children() {
    let wf = dispatch_workflow(&workers(4), parallel(json!({"maxConcurrency": 2})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let running: BTreeSet<String> = (0..2).map(|k| child_of(&state, &format!("dispatch#{k}"))).collect();
    let timed_out = apply(&wf, &mut state, Input::Deadline, 70_000);
    assert_eq!(cancels(&timed_out), running);
    assert!(starts(&timed_out).is_empty());
    assert_eq!((state.status, state.error.as_ref().unwrap().code.as_str()), (RunStatus::Failed, "run_timeout"));
    assert!(timed_out.events.iter().all(|e| e.node_id.as_deref().is_none_or(|n| !n.contains('#'))));
}

/// The RFC 0118 event defs (the vendored run-event-payloads copy predates them), as data.
fn rfc_0118_def(name: &str) -> Value {
    let document: Value =
        serde_json::from_str(include_str!("../../../../conformance/schemas/rfc0118-dispatch-events.schema.json"))
            .unwrap();
    document["$defs"][name].clone()
}

#[test]
fn fan_out_and_join_payloads_validate_against_the_rfc_0118_schemas() {
    for (join, fail) in [(json!({"mode": "wait-all"}), false), (json!({"mode": "quorum", "quorum": 2}), true)] {
        let wf = dispatch_workflow(&workers(3), parallel(json!({"maxConcurrency": 2, "joinPolicy": join})), json!({}));
        let (mut state, _, outcome) = dispatched(&wf);
        let fan_out = event(&outcome, "core.dispatch.fanOut").expect("fanOut");
        crate::schema::check_against(&rfc_0118_def("dispatchFanOut"), &fan_out.payload)
            .unwrap_or_else(|problems| panic!("{problems:?}"));
        let mut joined = None;
        for k in 0..3 {
            let key = format!("dispatch#{k}");
            if !state.nodes.contains_key(&key) {
                break;
            }
            let status = if fail && k == 0 { RunStatus::Failed } else { RunStatus::Completed };
            let finished = end(&wf, &mut state, &key, status, json!({}));
            if let Some(found) = event(&finished, "core.dispatch.join") {
                joined = Some(found.payload.clone());
                break;
            }
        }
        let joined = joined.expect("a join event");
        crate::schema::check_against(&rfc_0118_def("dispatchJoin"), &joined)
            .unwrap_or_else(|problems| panic!("{problems:?}"));
        // A closed object: a payload with an extra field is refused by the same schema.
        let mut extra = joined.clone();
        extra["surprise"] = json!(1);
        assert!(crate::schema::check_against(&rfc_0118_def("dispatchJoin"), &extra).is_err());
    }
}

#[test]
fn results_past_the_join_bound_fail_the_node_with_a_clear_code_and_outputvariables_narrow_them() {
    let big = "x".repeat(100 * 1024);
    for (config, fails) in [
        (json!({"items": [1, 2, 3], "workflowId": "child"}), true),
        (json!({"items": [1, 2, 3], "workflowId": "child", "outputVariables": ["small"]}), false),
    ] {
        let wf = loop_workflow(config);
        let (mut state, _) = looped(&wf, json!({}));
        for k in 0..3 {
            end(&wf, &mut state, &format!("loop#{k}"), RunStatus::Completed, json!({"blob": big, "small": k}));
        }
        if fails {
            let error = state.error.clone().expect("the run failed");
            assert_eq!(error.code, "fan_out_result_too_large");
            assert_eq!(error.details.as_ref().unwrap()["limit"], json!(MAX_JOIN_BYTES));
            assert!(!state.variables.contains_key("results"), "nothing half-written");
        } else {
            assert_eq!(state.status, RunStatus::Completed);
            assert_eq!(state.variables["results"][2]["outputs"], json!({"small": 2}));
        }
        assert!(slots_left(&state).is_empty());
    }
}
