//! Pure-engine tests of the fan-out review fixes (issue 19): pause holds a fan-out's window
//! and `:resume` refills it (immediate and drain), a fan-out failed by anything but its join
//! leaves no live slot, a child that could not be created fails the join whatever the policy,
//! a too-large join applies nothing, a parallel round forgets a sequential one's child, and
//! join losers are cancelled as `join-decided`. Helpers are [`super::fanout_tests`]'.

use serde_json::{json, Value};

use super::fanout_tests::{
    cancels, child_of, dispatch_workflow, dispatched, end, event, loop_workflow, looped, ok, parallel, slots_left,
    starts, step, workers,
};
use super::*;
use crate::model::Workflow;
use crate::run::{NodeStatus, ParentLink, RunError, RunState, RunStatus};

fn pause(drain_policy: DrainPolicy) -> Input {
    Input::Pause { reason: Some("ops".into()), drain_policy }
}

fn types(outcome: &Outcome) -> Vec<&str> {
    outcome.events.iter().map(|event| event.event_type.as_str()).collect()
}

fn running(state: &RunState, node: &str) -> u32 {
    state.nodes[node].fan_out.as_ref().map_or(0, |progress| progress.running)
}

/// Ends the child of slot `key` as `status` with `error` (a refusal from the service).
fn end_with(wf: &Workflow, state: &mut RunState, key: &str, status: RunStatus, error: RunError) -> Outcome {
    let input = Input::ChildFinished {
        node_id: key.into(),
        child_run_id: child_of(state, key),
        status,
        variables: Default::default(),
        error: Some(error),
    };
    apply(wf, state, input, 10)
}

#[test]
fn an_immediate_pause_starts_no_child_and_resume_refills_the_window() {
    let wf = loop_workflow(json!({"items": [0, 1, 2, 3, 4, 5], "workflowId": "child", "maxConcurrency": 2}));
    let (mut state, first) = looped(&wf, json!({}));
    assert_eq!(starts(&first).len(), 2);
    let paused = apply(&wf, &mut state, pause(DrainPolicy::Immediate), 5);
    assert_eq!(types(&paused), ["run.paused"]);
    // Both running children end while paused: no other starts.
    let one = end(&wf, &mut state, "loop#0", RunStatus::Completed, ok());
    let two = end(&wf, &mut state, "loop#1", RunStatus::Completed, ok());
    assert!(starts(&one).is_empty() && starts(&two).is_empty(), "no child starts while paused");
    assert_eq!(state.status, RunStatus::Paused);
    assert_eq!((running(&state, "loop"), state.nodes["loop"].fan_out.as_ref().unwrap().started), (0, 2));
    assert!(!state.nodes.contains_key("loop#2"));
    let resumed = apply(&wf, &mut state, Input::Resume { reason: None }, 20);
    let keys: Vec<String> = starts(&resumed).into_iter().map(|(key, _)| key).collect();
    assert_eq!(keys, ["loop#2", "loop#3"], "the window fills again");
    assert_eq!(state.status, RunStatus::Running);
    for k in 2..6 {
        end(&wf, &mut state, &format!("loop#{k}"), RunStatus::Completed, ok());
    }
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.nodes["loop"].outputs["completedCount"], 6);
}

#[test]
fn a_drain_pause_lets_the_running_children_end_then_pauses_and_resume_refills() {
    let wf = dispatch_workflow(&workers(5), parallel(json!({"maxConcurrency": 2})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let requested = apply(&wf, &mut state, pause(DrainPolicy::DrainCurrentNode), 5);
    assert!(requested.events.is_empty(), "pending while children run: {:?}", types(&requested));
    assert!(state.pending_pause.is_some());
    let one = end(&wf, &mut state, "dispatch#0", RunStatus::Completed, ok());
    assert!(starts(&one).is_empty(), "a pending drain pause stops the filling");
    assert!(event(&one, "run.paused").is_none(), "dispatch#1 still runs");
    let two = end(&wf, &mut state, "dispatch#1", RunStatus::Completed, ok());
    assert!(starts(&two).is_empty());
    assert_eq!(types(&two), ["run.paused"], "the fan-out with no child running does not hold the pause");
    assert_eq!(state.status, RunStatus::Paused);
    assert_eq!(state.nodes["dispatch"].status, NodeStatus::WaitingChild);
    let resumed = apply(&wf, &mut state, Input::Resume { reason: None }, 20);
    let keys: Vec<String> = starts(&resumed).into_iter().map(|(key, _)| key).collect();
    assert_eq!(keys, ["dispatch#2", "dispatch#3"]);

    // Withdrawn before it took effect: the window fills again too.
    let (mut state, _, _) = dispatched(&wf);
    apply(&wf, &mut state, pause(DrainPolicy::DrainCurrentNode), 5);
    end(&wf, &mut state, "dispatch#0", RunStatus::Completed, ok());
    assert_eq!(running(&state, "dispatch"), 1);
    let withdrawn = apply(&wf, &mut state, Input::Resume { reason: None }, 6);
    assert!(event(&withdrawn, "run.resumed").is_none(), "nothing was paused");
    assert_eq!(starts(&withdrawn).len(), 1);
    assert_eq!(running(&state, "dispatch"), 2);
}

#[test]
fn a_superseded_decision_fails_the_node_once_through_its_failure_route_and_leaves_no_live_slot() {
    let plan = json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": workers(4)}]});
    let wf = Workflow::compile(json!({"id": "fan-out", "name": "fan-out",
        "nodes": [{"id": "sup", "typeId": "core.orchestrator.supervisor", "config": plan},
                  {"id": "dispatch", "typeId": "core.dispatch", "config": parallel(json!({"maxConcurrency": 2}))},
                  {"id": "handler", "typeId": "core.noop"}],
        "edges": [{"id": "e1", "sourceNodeId": "sup", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "handler", "triggerRule": "any_failed"}]}))
    .unwrap();
    let (mut state, _, first) = dispatched(&wf);
    let mut log = first.events;
    let live = child_of(&state, "dispatch#1");
    // A later decision replaces the one the fan-out acts on.
    state.orchestrator.as_mut().unwrap().latest.as_mut().unwrap().sequence += 100;
    let ended = end(&wf, &mut state, "dispatch#0", RunStatus::Completed, ok());
    log.extend(ended.events.clone());
    let failed = event(&ended, "node.failed").unwrap();
    assert_eq!(failed.payload["error"]["code"], DECISION_SUPERSEDED);
    assert!(starts(&ended).is_empty(), "no child of the old decision starts");
    assert_eq!(cancels(&ended), [live.clone()].into(), "the running child is cancelled");
    assert!(slots_left(&state).is_empty(), "{:?}", slots_left(&state));
    assert!(state.nodes["dispatch"].fan_out.is_none());
    assert_eq!(state.nodes["handler"].status, NodeStatus::Scheduled, "the failure route goes on");
    // The cancelled child reports back: nothing happens to the node any more.
    let late = Input::ChildFinished {
        node_id: "dispatch#1".into(),
        child_run_id: live,
        status: RunStatus::Cancelled,
        variables: Default::default(),
        error: None,
    };
    let late = apply(&wf, &mut state, late, 11);
    assert_ne!(late.verdict, Verdict::Applied);
    log.extend(late.events);
    log.extend(step(&wf, &mut state, "handler", 12).events);
    assert_eq!(state.status, RunStatus::Completed);
    let terminal: Vec<&str> = log
        .iter()
        .filter(|e| e.node_id.as_deref() == Some("dispatch"))
        .map(|e| e.event_type.as_str())
        .filter(|t| matches!(*t, "node.completed" | "node.failed" | "node.cancelled"))
        .collect();
    assert_eq!(terminal, ["node.failed"], "exactly one terminal event");
    assert!(event(&ended, DISPATCH_JOIN).is_none());
}

#[test]
fn a_child_that_could_not_be_created_fails_a_collect_join_and_an_isolating_loop() {
    let config = parallel(json!({"joinPolicy": {"onChildFailure": "collect"}}));
    let wf = dispatch_workflow(&workers(3), config, json!({}));
    let (mut state, _, _) = dispatched(&wf);
    end(&wf, &mut state, "dispatch#0", RunStatus::Completed, ok());
    let refusal = RunError::new("unknown_child_workflow", "no workflow `w1` is loaded");
    let refused = end_with(&wf, &mut state, "dispatch#1", RunStatus::Failed, refusal);
    assert_eq!(event(&refused, DISPATCH_JOIN).unwrap().payload["joinOutcome"], "failed");
    assert_eq!(cancels(&refused).len(), 1, "dispatch#2 is a loser");
    let error = state.error.clone().unwrap();
    assert_eq!(error.code, "fan_out_join_failed");
    assert_eq!(error.details.as_ref().unwrap()["cause"]["code"], "unknown_child_workflow");
    assert_eq!(state.nodes["dispatch"].status, NodeStatus::Failed);

    let wf = loop_workflow(json!({"items": [1, 2, 3], "workflowId": "child"}));
    let (mut state, _) = looped(&wf, json!({}));
    let refusal = RunError::new("subworkflow_depth_exceeded", "child runs nest at most 8 deep");
    end_with(&wf, &mut state, "loop#1", RunStatus::Failed, refusal);
    let error = state.error.clone().unwrap();
    assert_eq!(error.code, "item_failed");
    assert_eq!(error.details.as_ref().unwrap()["cause"]["code"], "subworkflow_depth_exceeded");
    assert_eq!(error.details.as_ref().unwrap()["index"], 1);
    assert_eq!(state.status, RunStatus::Failed);
}

#[test]
fn a_dispatch_join_too_large_to_write_applies_no_mapping_and_no_history() {
    let config = parallel(json!({"outputMapping": {"result": "out"}, "joinPolicy": {"onChildFailure": "collect"}}));
    let wf = dispatch_workflow(&workers(2), config, json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let history = state.orchestrator.as_ref().unwrap().history.len();
    end(&wf, &mut state, "dispatch#0", RunStatus::Completed, json!({"out": "kept?"}));
    let huge = RunError::new("child_failed", "x".repeat(MAX_JOIN_BYTES));
    end_with(&wf, &mut state, "dispatch#1", RunStatus::Failed, huge);
    assert_eq!(state.error.as_ref().unwrap().code, "fan_out_result_too_large");
    assert_eq!(state.variables.get("result"), None, "no mapping applied by a join that failed");
    assert_eq!(state.orchestrator.as_ref().unwrap().history.len(), history);
}

#[test]
fn a_fan_out_forgets_a_sequential_rounds_child() {
    let wf = dispatch_workflow(&workers(2), parallel(json!({})), json!({}));
    let mut state = super::tests::pending(&wf, json!({}));
    state.mocks_allowed = true;
    apply(&wf, &mut state, Input::Start, 0);
    step(&wf, &mut state, "sup", 1);
    // What a sequential round before this one would have left on the node.
    let node = state.nodes.get_mut("dispatch").unwrap();
    node.child_run_id = Some("run-old".into());
    node.child_workflow_id = Some("w-old".into());
    node.child_status = Some(RunStatus::Completed);
    step(&wf, &mut state, "dispatch", 2);
    let node = &state.nodes["dispatch"];
    assert_eq!(
        (node.child_run_id.as_deref(), node.child_workflow_id.as_deref(), node.child_status),
        (None, None, None)
    );
    let repair = outstanding_effects(&state);
    assert!(
        !repair.iter().any(|e| matches!(e, Effect::StartChild { child_run_id, .. } if child_run_id == "run-old")),
        "{repair:?}"
    );
    let cancelled = apply(&wf, &mut state, Input::Cancel { reason: None }, 3);
    assert!(!cancels(&cancelled).contains("run-old"));
    assert_eq!(cancels(&cancelled).len(), 2);
}

#[test]
fn join_losers_are_cancelled_as_join_decided_and_other_cancels_keep_the_parent_reason() {
    let config = parallel(json!({"joinPolicy": {"mode": "first"}}));
    let wf = dispatch_workflow(&workers(3), config, json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let joined = end(&wf, &mut state, "dispatch#0", RunStatus::Completed, ok());
    let reasons: Vec<Option<String>> = joined
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelChild { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, [Some(JOIN_DECIDED.to_owned()), Some(JOIN_DECIDED.to_owned())]);

    // An operator cancel mid-fan-out: a cascade (no reason), and the slots show cancelled.
    let wf = dispatch_workflow(&workers(3), parallel(json!({})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let cancelled = apply(&wf, &mut state, Input::Cancel { reason: Some("stop".into()) }, 5);
    assert!(cancelled.effects.iter().all(|e| !matches!(e, Effect::CancelChild { reason: Some(_), .. })));
    assert_eq!(cancels(&cancelled).len(), 3);
    assert_eq!(state.nodes["dispatch#1"].child_status, Some(RunStatus::Cancelled));

    // The loser itself: `run.cancelled` says join-decided, with no parent cascade.
    let child_wf =
        super::tests::workflow(json!([{"id": "d", "typeId": "core.delay", "config": {"durationMs": 100}}]), json!([]));
    let mut child = super::tests::pending(&child_wf, json!({}));
    child.parent =
        Some(ParentLink { run_id: "p".into(), node_id: "dispatch#1".into(), depth: 1, deadline_covered: false });
    apply(&child_wf, &mut child, Input::Start, 0);
    apply(&child_wf, &mut child, Input::Step { node_id: "d".into(), activation: 1 }, 1);
    let out = apply(&child_wf, &mut child, Input::Cancel { reason: Some(JOIN_DECIDED.into()) }, 5);
    let payload = &event(&out, "run.cancelled").unwrap().payload;
    assert_eq!(payload["reason"], JOIN_DECIDED);
    assert!(payload.get("parentRunId").is_none(), "{payload}");
}

#[test]
fn a_cancel_child_task_written_without_a_reason_still_parses() {
    let old: Effect = serde_json::from_value(json!({"kind": "cancelChild", "childRunId": "kid", "dueAt": 5})).unwrap();
    assert_eq!(old, Effect::CancelChild { child_run_id: "kid".into(), reason: None, due_at: 5 });
    let encoded = serde_json::to_value(&old).unwrap();
    assert!(encoded.get("reason").is_none(), "{encoded}");
    let loser = Effect::CancelChild { child_run_id: "kid".into(), reason: Some(JOIN_DECIDED.into()), due_at: 5 };
    let encoded: Value = serde_json::to_value(&loser).unwrap();
    assert_eq!(encoded["reason"], JOIN_DECIDED);
}

#[test]
fn the_window_is_the_runs_two_wide_loops_share_it_and_both_finish() {
    // Two loops on parallel branches, 60 items each, each asking for 60 at once: together they
    // never run more than the ceiling (64), so a cancel or a resume never touches more live slots
    // than one DynamoDB transaction holds; the second loop gets the places the first frees.
    let items: Vec<u32> = (0..60).collect();
    let config = json!({"items": items, "workflowId": "child", "maxConcurrency": 60});
    let wf = Workflow::compile(json!({"id": "two", "name": "two",
        "nodes": [{"id": "start", "typeId": "core.noop"},
                  {"id": "a", "typeId": "vendor.trellis.forEach", "config": config},
                  {"id": "b", "typeId": "vendor.trellis.forEach", "config": config}],
        "edges": [{"id": "e1", "sourceNodeId": "start", "targetNodeId": "a"},
                  {"id": "e2", "sourceNodeId": "start", "targetNodeId": "b"}]}))
    .unwrap();
    let mut state = super::tests::pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    step(&wf, &mut state, "start", 1);
    step(&wf, &mut state, "a", 2);
    step(&wf, &mut state, "b", 3);
    let total = |state: &RunState| running(state, "a") + running(state, "b");
    assert_eq!((running(&state, "a"), running(&state, "b")), (60, 4));
    let mut peak = total(&state);
    while !state.status.is_terminal() {
        let key = state
            .nodes
            .iter()
            .find(|(key, node)| crate::run::parse_slot_key(key).is_some() && node.status == NodeStatus::WaitingChild)
            .map(|(key, _)| key.clone())
            .expect("a running child while the run runs");
        end(&wf, &mut state, &key, RunStatus::Completed, ok());
        peak = peak.max(total(&state));
    }
    assert_eq!(peak, 64);
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.variables["results"].as_array().map(Vec::len), Some(60));
    assert!(slots_left(&state).is_empty());
}

#[test]
fn a_run_ended_in_the_same_transition_is_not_completed_again() {
    // A fan-out whose join fails without a failure route fails the run; nothing after it may
    // add a `run.completed` (one terminal event).
    let wf =
        dispatch_workflow(&workers(2), parallel(json!({"joinPolicy": {"onChildFailure": "fail-fast"}})), json!({}));
    let (mut state, _, _) = dispatched(&wf);
    let failed = end(&wf, &mut state, "dispatch#0", RunStatus::Failed, ok());
    let terminal: Vec<&str> =
        types(&failed).into_iter().filter(|t| matches!(*t, "run.completed" | "run.failed" | "run.cancelled")).collect();
    assert_eq!(terminal, ["run.failed"]);
    assert_eq!(state.status, RunStatus::Failed);
}
