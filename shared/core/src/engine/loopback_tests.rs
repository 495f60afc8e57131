//! Transition-table tests for bounded back-edges (`settings.maxLoopbackIterations`,
//! `workflow.loopback-limit`) and the `core.parallel` / `core.merge` pass-through kinds.

use serde_json::{json, Map, Value};

use super::loopback::{LOOPBACK_LIMIT_EXCEEDED, LOOPBACK_REGION_ACTIVE};
use super::tests::{pending, types, workflow};
use super::*;
use crate::error::DefinitionError;
use crate::event::{types as event_types, RunEvent};
use crate::model::Workflow;
use crate::run::{NodeStatus, RunState, RunStatus};

fn compile(nodes: Value, edges: Value, settings: Value) -> Result<Workflow, DefinitionError> {
    Workflow::compile(json!({"id": "w", "name": "w", "nodes": nodes, "edges": edges, "settings": settings}))
}

/// `draft → review → publish` (when `approved`), and `review → draft` (when not): a review loop.
fn review_loop(settings: Value, extra_edges: &[Value], extra_nodes: &[Value]) -> Workflow {
    let mut nodes = vec![
        json!({"id": "draft", "typeId": "core.noop"}),
        json!({"id": "review", "typeId": "core.noop"}),
        json!({"id": "publish", "typeId": "core.identity", "inputs": {"published": true}}),
    ];
    nodes.extend_from_slice(extra_nodes);
    let mut edges = vec![
        json!({"id": "draft-review", "sourceNodeId": "draft", "targetNodeId": "review"}),
        json!({"id": "approved", "sourceNodeId": "review", "targetNodeId": "publish",
               "condition": {"type": "equals", "left": "approved", "right": true}}),
        json!({"id": "rework", "sourceNodeId": "review", "targetNodeId": "draft",
               "condition": {"type": "notEquals", "left": "approved", "right": true}}),
    ];
    edges.extend_from_slice(extra_edges);
    compile(json!(nodes), json!(edges), settings).unwrap()
}

/// Feeds every step back until none is left; before `review`'s activation `approve_at` runs,
/// the run variable `approved` is set to `true` (the test seam). Returns every event.
fn drive_approving(workflow: &Workflow, state: &mut RunState, approve_at: Option<u32>) -> Vec<RunEvent> {
    let mut log = Vec::new();
    let mut queue = vec![Input::Start];
    while let Some(input) = queue.pop() {
        if matches!(&input, Input::Step { node_id, activation } if node_id == "review" && Some(*activation) == approve_at)
        {
            let variables = Map::from_iter([("approved".to_owned(), json!(true))]);
            log.extend(apply(workflow, state, Input::SetVariables { variables }, 0).events);
        }
        let outcome = apply(workflow, state, input, 0);
        log.extend(outcome.events);
        for effect in outcome.effects.into_iter().rev() {
            if matches!(effect, Effect::Step { .. }) {
                queue.push(effect.input().expect("step effects have inputs"));
            }
        }
    }
    log
}

/// Applies `input`, then feeds back every step it leads to; returns every event.
fn settle(workflow: &Workflow, state: &mut RunState, input: Input) -> Vec<RunEvent> {
    let mut log = Vec::new();
    let mut queue = vec![input];
    while let Some(input) = queue.pop() {
        let outcome = apply(workflow, state, input, 0);
        log.extend(outcome.events);
        queue.extend(
            outcome.effects.iter().rev().filter(|e| matches!(e, Effect::Step { .. })).filter_map(Effect::input),
        );
    }
    log
}

fn named(log: &[RunEvent]) -> Vec<String> {
    types(&log.iter().map(|e| (e.event_type.clone(), e.node_id.clone())).collect::<Vec<_>>())
}

fn count(log: &[RunEvent], name: &str) -> usize {
    named(log).iter().filter(|entry| *entry == name).count()
}

#[test]
fn a_review_loop_runs_three_times_then_exits() {
    let wf = review_loop(json!({}), &[], &[]);
    let mut state = pending(&wf, json!({"approved": false}));
    let log = drive_approving(&wf, &mut state, Some(3));
    let round = ["node.started:draft", "node.completed:draft", "node.started:review", "node.completed:review"];
    let mut expected = vec!["run.started"];
    for _ in 0..2 {
        // A looping round resolves nothing downstream: no `node.skipped` for what runs later.
        expected.extend(round);
    }
    expected.extend(&round[..2]);
    expected.push("variable.changed");
    expected.extend(&round[2..]);
    expected.extend(["node.started:publish", "node.completed:publish", "run.completed"]);
    assert_eq!(named(&log), expected, "one run.completed, at the end: the loop held the run open");
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.outputs, Map::from_iter([("published".to_owned(), json!(true))]));
    assert_eq!(state.nodes["draft"].loopbacks, 2, "two re-entries of draft");
    assert_eq!(state.nodes["draft"].activation, 3);
    assert_eq!(state.nodes["review"].loopbacks, 0);
}

#[test]
fn the_loopback_counter_is_persisted_with_the_node() {
    let wf = review_loop(json!({}), &[], &[]);
    let mut state = pending(&wf, json!({"approved": false}));
    drive_approving(&wf, &mut state, Some(2));
    let draft = serde_json::to_value(&state.nodes["draft"]).unwrap();
    assert_eq!(draft["loopbacks"], 1);
    let read: crate::run::NodeState = serde_json::from_value(draft).unwrap();
    assert_eq!(read.loopbacks, 1);
    let review = serde_json::to_value(&state.nodes["review"]).unwrap();
    assert!(review.get("loopbacks").is_none(), "a node never re-entered stores no counter: {review}");
}

/// Drives a loop that is never approved and checks the breach at `limit`.
fn assert_breach(wf: &Workflow, limit: u32) {
    let mut state = pending(wf, json!({"approved": false}));
    let log = drive_approving(wf, &mut state, None);
    assert_eq!(count(&log, "node.started:draft") as u32, limit + 1, "the first run and `limit` re-entries");
    let tail: Vec<String> = named(&log).into_iter().rev().take(5).rev().collect();
    assert_eq!(
        tail,
        // The breach is decided before the completion is recorded: the source has one
        // terminal event, `node.failed`, and nothing downstream was resolved.
        [
            "node.completed:draft",
            "node.started:review",
            "workflow.loopback-limit:draft",
            "node.failed:review",
            "run.failed"
        ]
    );
    let breach = log.iter().find(|e| e.event_type == event_types::WORKFLOW_LOOPBACK_LIMIT).unwrap();
    assert_eq!(breach.payload, json!({"nodeId": "draft", "iterations": limit + 1, "limit": limit}));
    assert_eq!(state.status, RunStatus::Failed);
    let error = state.error.clone().unwrap();
    assert_eq!(error.code, LOOPBACK_LIMIT_EXCEEDED);
    assert!(error.message.contains("`draft`") && error.message.contains(&format!("limit of {limit}")), "{error:?}");
    let failed = log.iter().find(|e| e.event_type == "run.failed").unwrap();
    assert_eq!(failed.payload["failedNodeId"], "review");
    assert_eq!(failed.payload["error"]["code"], "loopback_limit_exceeded");
    assert_eq!(state.nodes["review"].status, NodeStatus::Failed);
    assert_eq!(state.nodes["draft"].loopbacks, limit, "the refused re-entry is not counted");
}

#[test]
fn the_default_limit_of_five_fails_the_source_on_the_sixth_re_entry() {
    assert_breach(&review_loop(json!({}), &[], &[]), 5);
}

#[test]
fn a_configured_limit_of_two_fails_the_source_on_the_third_re_entry() {
    assert_breach(&review_loop(json!({"maxLoopbackIterations": 2}), &[], &[]), 2);
}

#[test]
fn a_limit_breach_takes_the_sources_failure_route() {
    let handler = json!({"id": "escalate", "typeId": "core.noop"});
    let route =
        json!({"id": "stuck", "sourceNodeId": "review", "targetNodeId": "escalate", "triggerRule": "any_failed"});
    let wf = review_loop(json!({"maxLoopbackIterations": 1}), &[route], &[handler]);
    let mut state = pending(&wf, json!({"approved": false}));
    let log = drive_approving(&wf, &mut state, None);
    let tail: Vec<String> = named(&log).into_iter().rev().take(6).rev().collect();
    assert_eq!(
        tail,
        [
            "workflow.loopback-limit:draft",
            "node.failed:review",
            "node.skipped:publish",
            "node.started:escalate",
            "node.completed:escalate",
            "run.completed"
        ],
        "the breach fails the source instead of completing it, so its failure route runs"
    );
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.variables["review"]["error"]["code"], "loopback_limit_exceeded");
}

#[test]
fn a_clarification_asked_again_on_each_round_ends_the_loop_when_answered_yes() {
    let wf = compile(
        json!([
            {"id": "draft", "typeId": "core.noop"},
            {"id": "review", "typeId": "core.clarificationGate", "config": {"questions": [
                {"id": "approved", "question": "Approve the draft?", "schema": {"type": "boolean"}}
            ]}},
            {"id": "publish", "typeId": "core.noop"}
        ]),
        json!([
            {"id": "draft-review", "sourceNodeId": "draft", "targetNodeId": "review"},
            {"id": "approved", "sourceNodeId": "review", "targetNodeId": "publish",
             "condition": {"type": "equals", "left": "output.answers.approved", "right": true}},
            {"id": "rework", "sourceNodeId": "review", "targetNodeId": "draft",
             "condition": {"type": "notEquals", "left": "output.answers.approved", "right": true}}
        ]),
        json!({"maxLoopbackIterations": 3}),
    )
    .unwrap();
    let mut state = pending(&wf, json!({}));
    let answer = |approved: bool| {
        Input::Resolve(crate::interrupt::Resolution {
            node_id: "review".into(),
            interrupt_id: None,
            value: json!({"answers": {"approved": approved}}),
            resolver: crate::interrupt::Resolver::Principal("ana".into()),
            prior_vote: None,
        })
    };
    let mut log = settle(&wf, &mut state, Input::Start);
    for approved in [false, false, true] {
        assert_eq!(state.status, RunStatus::WaitingInput, "{:?}", named(&log));
        log = settle(&wf, &mut state, answer(approved));
    }
    assert_eq!(named(&log).last().map(String::as_str), Some("run.completed"), "{:?}", named(&log));
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.nodes["draft"].loopbacks, 2);
    assert_eq!(state.nodes["publish"].status, NodeStatus::Completed);
}

#[test]
fn a_bad_max_loopback_iterations_is_refused_at_registration() {
    let nodes = json!([{"id": "a", "typeId": "core.noop"}]);
    for bad in [json!(0), json!(-1), json!(1.5), json!("5"), json!(10_001)] {
        let error = compile(nodes.clone(), json!([]), json!({"maxLoopbackIterations": bad})).unwrap_err();
        let named_field = match &error {
            DefinitionError::Invalid { path, .. } => path == "/settings/maxLoopbackIterations",
            DefinitionError::Schema { violations } => violations.iter().any(|v| v.to_string().contains("maxLoopback")),
            _ => false,
        };
        assert!(named_field, "{bad}: {error:?}");
    }
    assert!(compile(nodes, json!([]), json!({"maxLoopbackIterations": 10_000})).is_ok());
}

#[test]
fn an_unconditional_back_edge_is_refused_at_registration() {
    let nodes = json!([{"id": "draft", "typeId": "core.noop"}, {"id": "review", "typeId": "core.noop"}]);
    let edges = json!([
        {"id": "forward", "sourceNodeId": "draft", "targetNodeId": "review"},
        {"id": "back", "sourceNodeId": "review", "targetNodeId": "draft"},
    ]);
    let error = compile(nodes, edges, json!({})).unwrap_err();
    assert!(matches!(error, DefinitionError::Cycle { ref nodes } if nodes == &["draft", "review"]), "{error:?}");
}

#[test]
fn a_cycle_not_closed_by_a_conditional_edge_is_refused_at_registration() {
    let nodes = json!([
        {"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}, {"id": "c", "typeId": "core.noop"}
    ]);
    let edges = json!([
        {"id": "a-b", "sourceNodeId": "a", "targetNodeId": "b"},
        {"id": "b-c", "sourceNodeId": "b", "targetNodeId": "c", "condition": {"type": "truthy", "left": "go"}},
        {"id": "c-b", "sourceNodeId": "c", "targetNodeId": "b"},
    ]);
    let error = compile(nodes, edges, json!({})).unwrap_err();
    assert!(matches!(error, DefinitionError::Cycle { ref nodes } if nodes == &["b", "c"]), "{error:?}");
}

#[test]
fn parallel_branches_join_at_a_merge() {
    let wf = workflow(
        json!([
            {"id": "fork", "typeId": "core.parallel", "inputs": {"ticket": "T-1"}},
            {"id": "left", "typeId": "core.identity", "inputs": {"l": "L"}},
            {"id": "right", "typeId": "core.identity", "inputs": {"r": "R"}},
            {"id": "join", "typeId": "core.merge", "inputs": {
                "left": {"type": "connection", "nodeId": "left", "outputKey": "l"},
                "right": {"type": "connection", "nodeId": "right", "outputKey": "r"},
                "ticket": {"type": "connection", "nodeId": "fork", "outputKey": "ticket"}
            }}
        ]),
        json!([
            {"id": "fork-left", "sourceNodeId": "fork", "targetNodeId": "left"},
            {"id": "fork-right", "sourceNodeId": "fork", "targetNodeId": "right"},
            {"id": "left-join", "sourceNodeId": "left", "targetNodeId": "join"},
            {"id": "right-join", "sourceNodeId": "right", "targetNodeId": "join"}
        ]),
    );
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 0);
    let forked = apply(&wf, &mut state, Input::Step { node_id: "fork".into(), activation: 1 }, 0);
    let scheduled: Vec<_> = forked
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Step { node_id, .. } => Some(node_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(scheduled, ["left", "right"], "both branches are scheduled by the one completion");
    let left = apply(&wf, &mut state, Input::Step { node_id: "left".into(), activation: 1 }, 0);
    assert!(left.effects.is_empty(), "the merge waits for the other branch: {:?}", left.effects);
    let right = apply(&wf, &mut state, Input::Step { node_id: "right".into(), activation: 1 }, 0);
    assert_eq!(right.effects, vec![Effect::Step { node_id: "join".into(), activation: 1, due_at: 0 }]);
    let joined = apply(&wf, &mut state, Input::Step { node_id: "join".into(), activation: 1 }, 0);
    let kinds: Vec<_> = joined.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(kinds, ["node.started", "node.completed", "run.completed"]);
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.outputs, json!({"left": "L", "right": "R", "ticket": "T-1"}).as_object().unwrap().clone());
}

/// Feeds every step back until none is left; before each step, `before(node, activation)` may
/// name run variables to set (the test seam). Returns every event.
fn drive_with(
    workflow: &Workflow,
    state: &mut RunState,
    mut before: impl FnMut(&str, u32) -> Option<Value>,
) -> Vec<RunEvent> {
    let mut log = Vec::new();
    let mut queue = vec![Input::Start];
    while let Some(input) = queue.pop() {
        if let Input::Step { node_id, activation } = &input {
            if let Some(Value::Object(variables)) = before(node_id, *activation) {
                log.extend(apply(workflow, state, Input::SetVariables { variables }, 0).events);
            }
        }
        let outcome = apply(workflow, state, input, 0);
        log.extend(outcome.events);
        queue.extend(
            outcome.effects.iter().rev().filter(|e| matches!(e, Effect::Step { .. })).filter_map(Effect::input),
        );
    }
    log
}

#[test]
fn a_taken_back_edge_wins_over_an_unconditional_forward_edge() {
    let wf = compile(
        json!([
            {"id": "draft", "typeId": "core.noop"},
            {"id": "review", "typeId": "core.noop"},
            {"id": "publish", "typeId": "core.identity", "inputs": {"published": true}}
        ]),
        json!([
            {"id": "draft-review", "sourceNodeId": "draft", "targetNodeId": "review"},
            {"id": "publish", "sourceNodeId": "review", "targetNodeId": "publish"},
            {"id": "rework", "sourceNodeId": "review", "targetNodeId": "draft",
             "condition": {"type": "notEquals", "left": "approved", "right": true}}
        ]),
        json!({}),
    )
    .unwrap();
    let mut state = pending(&wf, json!({"approved": false}));
    let log = drive_approving(&wf, &mut state, Some(3));
    let round = ["node.started:draft", "node.completed:draft", "node.started:review", "node.completed:review"];
    let mut expected = vec!["run.started"];
    for _ in 0..2 {
        // A looping round resolves nothing downstream: no `node.skipped` for what runs later.
        expected.extend(round);
    }
    expected.extend(&round[..2]);
    expected.push("variable.changed");
    expected.extend(&round[2..]);
    expected.extend(["node.started:publish", "node.completed:publish", "run.completed"]);
    assert_eq!(named(&log), expected, "publish is not taken while the loop goes on, and runs once at the end");
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.outputs, Map::from_iter([("published".to_owned(), json!(true))]));
    assert_eq!(state.nodes["draft"].loopbacks, 2);
}

#[test]
fn an_inner_loop_starts_afresh_on_each_outer_round() {
    // outer: a → b → c → d, d → a while `outer`; inner: c → b while `inner`.
    let wf = compile(
        json!([
            {"id": "a", "typeId": "core.noop"},
            {"id": "b", "typeId": "core.noop"},
            {"id": "c", "typeId": "core.noop"},
            {"id": "d", "typeId": "core.noop"},
            {"id": "done", "typeId": "core.identity", "inputs": {"done": true}}
        ]),
        json!([
            {"id": "a-b", "sourceNodeId": "a", "targetNodeId": "b"},
            {"id": "b-c", "sourceNodeId": "b", "targetNodeId": "c"},
            {"id": "c-d", "sourceNodeId": "c", "targetNodeId": "d",
             "condition": {"type": "notEquals", "left": "inner", "right": true}},
            {"id": "inner", "sourceNodeId": "c", "targetNodeId": "b",
             "condition": {"type": "equals", "left": "inner", "right": true}},
            {"id": "d-done", "sourceNodeId": "d", "targetNodeId": "done",
             "condition": {"type": "notEquals", "left": "outer", "right": true}},
            {"id": "outer", "sourceNodeId": "d", "targetNodeId": "a",
             "condition": {"type": "equals", "left": "outer", "right": true}}
        ]),
        json!({}),
    )
    .unwrap();
    let mut state = pending(&wf, json!({}));
    // Each outer round runs `c` three times (two inner re-entries of `b`); three outer rounds:
    // six re-entries of `b` in the run, more than the default limit of five.
    let log = drive_with(&wf, &mut state, |node, activation| match node {
        "c" => Some(json!({"inner": activation % 3 != 0})),
        "d" => Some(json!({"outer": activation < 3})),
        _ => None,
    });
    assert_eq!(state.status, RunStatus::Completed, "{:?}", named(&log));
    assert_eq!(count(&log, "node.started:a"), 3);
    assert_eq!(count(&log, "node.started:b"), 9);
    assert_eq!(count(&log, "node.started:c"), 9);
    assert_eq!(count(&log, "node.started:d"), 3);
    assert_eq!(count(&log, "node.started:done"), 1);
    assert_eq!(count(&log, "workflow.loopback-limit:b"), 0);
    assert_eq!(state.nodes["a"].loopbacks, 2, "the outer loop counts per run");
    assert_eq!(state.nodes["b"].loopbacks, 2, "the inner loop counts per outer round");
    assert_eq!(state.outputs, Map::from_iter([("done".to_owned(), json!(true))]));
}

#[test]
fn an_inner_loop_still_meets_its_limit_within_one_outer_round() {
    let wf = compile(
        json!([
            {"id": "a", "typeId": "core.noop"},
            {"id": "b", "typeId": "core.noop"},
            {"id": "c", "typeId": "core.noop"}
        ]),
        json!([
            {"id": "a-b", "sourceNodeId": "a", "targetNodeId": "b"},
            {"id": "b-c", "sourceNodeId": "b", "targetNodeId": "c"},
            {"id": "inner", "sourceNodeId": "c", "targetNodeId": "b", "condition": {"type": "truthy", "left": "inner"}},
            {"id": "outer", "sourceNodeId": "c", "targetNodeId": "a", "condition": {"type": "truthy", "left": "outer"}}
        ]),
        json!({"maxLoopbackIterations": 2}),
    )
    .unwrap();
    let mut state = pending(&wf, json!({"inner": true}));
    let log = drive_with(&wf, &mut state, |_, _| None);
    assert_eq!(count(&log, "node.started:b"), 3, "the first run and two re-entries");
    assert_eq!(count(&log, "workflow.loopback-limit:b"), 1);
    assert_eq!(state.error.as_ref().map(|e| e.code.as_str()), Some(LOOPBACK_LIMIT_EXCEEDED));
}

#[test]
fn a_loop_whose_every_node_has_an_incoming_edge_runs_in_either_listing_order() {
    let draft = json!({"id": "draft", "typeId": "core.noop"});
    let review = json!({"id": "review", "typeId": "core.noop"});
    let edges = json!([
        {"id": "draft-review", "sourceNodeId": "draft", "targetNodeId": "review"},
        {"id": "rework", "sourceNodeId": "review", "targetNodeId": "draft",
         "condition": {"type": "notEquals", "left": "approved", "right": true}}
    ]);
    let mut logs = Vec::new();
    for nodes in [json!([draft, review]), json!([review, draft])] {
        let wf = compile(nodes.clone(), edges.clone(), json!({})).unwrap_or_else(|e| panic!("{nodes}: {e:?}"));
        let mut state = pending(&wf, json!({"approved": false}));
        let log = drive_approving(&wf, &mut state, Some(2));
        assert_eq!(state.status, RunStatus::Completed, "{nodes}: {:?}", named(&log));
        assert_eq!(state.nodes["draft"].loopbacks, 1, "{nodes}");
        logs.push(named(&log));
    }
    assert_eq!(logs[0], logs[1], "the listing order changes nothing");
    assert_eq!(logs[0].first().map(String::as_str), Some("run.started"));
    assert_eq!(logs[0][1], "node.started:draft", "draft is the entry");
}

#[test]
fn a_back_edge_into_a_region_with_an_active_node_fails_its_source() {
    // t → slow (a timer, still waiting), t → a → s, s → t while `again`; slow, s → join.
    let wf = compile(
        json!([
            {"id": "t", "typeId": "core.noop"},
            {"id": "slow", "typeId": "core.delay", "config": {"delayMs": 60000}},
            {"id": "a", "typeId": "core.noop"},
            {"id": "s", "typeId": "core.noop"},
            {"id": "join", "typeId": "core.merge"}
        ]),
        json!([
            {"id": "t-slow", "sourceNodeId": "t", "targetNodeId": "slow"},
            {"id": "t-a", "sourceNodeId": "t", "targetNodeId": "a"},
            {"id": "a-s", "sourceNodeId": "a", "targetNodeId": "s"},
            {"id": "again", "sourceNodeId": "s", "targetNodeId": "t", "condition": {"type": "truthy", "left": "again"}},
            {"id": "slow-join", "sourceNodeId": "slow", "targetNodeId": "join"},
            {"id": "s-join", "sourceNodeId": "s", "targetNodeId": "join"}
        ]),
        json!({}),
    )
    .unwrap();
    let mut state = pending(&wf, json!({"again": true}));
    let log = settle(&wf, &mut state, Input::Start);
    assert_eq!(count(&log, "node.started:t"), 1, "t is not re-entered: {:?}", named(&log));
    assert_eq!(count(&log, "node.failed:s"), 1, "{:?}", named(&log));
    assert_eq!(count(&log, "node.completed:s"), 0, "one terminal event for the source");
    assert_eq!(state.nodes["t"].loopbacks, 0, "the refused re-entry is not counted");
    let error = state.error.clone().expect("the run's error");
    assert_eq!(error.code, LOOPBACK_REGION_ACTIVE);
    assert!(error.message.contains("`slow`") && error.message.contains("`t`"), "{error:?}");
    assert_eq!(error.details, Some(json!({"nodeId": "t", "activeNodeId": "slow", "status": "waiting"})));
    assert_eq!(state.status, RunStatus::Failed, "no failure route leaves `s`: {:?}", named(&log));
    let failed = log.iter().find(|e| e.event_type == "run.failed").unwrap();
    assert_eq!(failed.payload["failedNodeId"], "s");
}

#[test]
fn a_join_fed_from_outside_the_loop_runs_once_after_the_loop_exits() {
    // start → research; start → draft → review; review →(not approved) draft (back-edge);
    // review →(approved) merge; research → merge; merge → publish. The merge must wait for the
    // round that exits the loop, though `research` is done long before.
    let wf = compile(
        json!([
            {"id": "start", "typeId": "core.noop"},
            {"id": "research", "typeId": "core.noop"},
            {"id": "draft", "typeId": "core.noop"},
            {"id": "review", "typeId": "core.noop"},
            {"id": "merge", "typeId": "core.merge"},
            {"id": "publish", "typeId": "core.identity", "inputs": {"published": true}}
        ]),
        json!([
            {"id": "a", "sourceNodeId": "start", "targetNodeId": "research"},
            {"id": "b", "sourceNodeId": "start", "targetNodeId": "draft"},
            {"id": "c", "sourceNodeId": "draft", "targetNodeId": "review"},
            {"id": "rework", "sourceNodeId": "review", "targetNodeId": "draft",
             "condition": {"type": "notEquals", "left": "approved", "right": true}},
            {"id": "d", "sourceNodeId": "review", "targetNodeId": "merge",
             "condition": {"type": "equals", "left": "approved", "right": true}},
            {"id": "e", "sourceNodeId": "research", "targetNodeId": "merge"},
            {"id": "f", "sourceNodeId": "merge", "targetNodeId": "publish"}
        ]),
        json!({}),
    )
    .unwrap();
    let mut state = pending(&wf, json!({"approved": false}));
    let log = drive_approving(&wf, &mut state, Some(3));
    assert_eq!(count(&log, "node.started:review"), 3);
    assert_eq!(count(&log, "node.started:merge"), 1, "{:?}", named(&log));
    assert_eq!(count(&log, "node.started:publish"), 1);
    assert_eq!(count(&log, "node.skipped:merge") + count(&log, "node.skipped:publish"), 0);
    let merged = named(&log).iter().position(|entry| entry == "node.started:merge").unwrap();
    let last_review = named(&log).iter().rposition(|entry| entry == "node.completed:review").unwrap();
    assert!(merged > last_review, "the merge runs after the approving round");
    assert_eq!(state.status, RunStatus::Completed);
}
