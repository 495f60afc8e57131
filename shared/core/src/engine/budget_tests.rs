//! Run budgets in the engine: `budget.reserved` at the start, consumption from usage,
//! retries and tool calls with its once-per-dimension events, the fail path (`cap.breached`
//! then `run.failed{budget_exhausted}`), the interrupt path (the next model-call attempt
//! suspends; an allowance reserves again and lets it go out; a rejection fails), and the model
//! policy refusing a call before any `Execute`. Every transition runs the journal's debug
//! check.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::tests::pending;
use super::*;
use crate::activity::{Activity, ActivityCall, ActivityResult, Progress, ProgressSink};
use crate::ai::usage::ProviderUsage;
use crate::interrupt::request::ConfigIssue;
use crate::interrupt::{Resolution, Resolver};
use crate::model::{Bounds, Workflow};
use crate::nodes::{NodeContext, NodeRegistry};
use crate::run::{NodeStatus, RunError, RunState, RunStatus};
use crate::testing::activity::{success, transient, ScriptedActivity, SCRIPTED_TYPE_ID};

/// A model call for these tests: its request names `provider: mock` and `config.model`.
#[derive(Debug)]
struct ModelCall;

const MODEL_TYPE_ID: &str = "test.model";

#[async_trait]
impl Activity for ModelCall {
    fn type_id(&self) -> &'static str {
        MODEL_TYPE_ID
    }

    fn check(&self, _node_id: &str, _config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        Ok(())
    }

    fn model_call(&self) -> bool {
        true
    }

    fn attempt_timeout_ms(&self, _config: &Map<String, Value>) -> u64 {
        5_000
    }

    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError> {
        Ok(json!({ "provider": "mock", "model": context.config.get("model").cloned().unwrap_or(json!("gpt-test")) }))
    }

    async fn execute(&self, _call: &ActivityCall, _progress: &dyn ProgressSink) -> ActivityResult {
        Ok(Map::new())
    }
}

fn compile(nodes: Value, edges: Value) -> Workflow {
    let registry = NodeRegistry::new().register(Arc::new(ModelCall)).register(ScriptedActivity::new(vec![]));
    let document = json!({"id": "w", "name": "w", "nodes": nodes, "edges": edges});
    Workflow::compile_with(document, &registry, Bounds { max_attempt_ms: 60_000, ..Bounds::default() }).unwrap()
}

fn model_node(id: &str, model: &str, settings: Value) -> Value {
    json!({"id": id, "typeId": MODEL_TYPE_ID, "config": {"model": model}, "settings": settings})
}

fn edge(from: &str, to: &str) -> Value {
    json!({"id": format!("{from}-{to}"), "sourceNodeId": from, "targetNodeId": to})
}

fn budgeted(workflow: &Workflow, budget: Value) -> RunState {
    let mut state = pending(workflow, json!({}));
    state.configurable = Some(json!({ "budget": budget }));
    state
}

fn usage(node: &str, attempt: u32, tokens: u64, cost: Option<f64>) -> Input {
    Input::ActivityProgress {
        node_id: node.into(),
        activation: 1,
        attempt,
        progress: Progress::Usage(ProviderUsage {
            provider: "mock".into(),
            model: "gpt-test".into(),
            input_tokens: tokens,
            output_tokens: 0,
            cost_estimate_usd: cost,
            cache_hit: None,
            cache_read_tokens: None,
            cache_write_tokens: None,
        }),
    }
}

fn step(node: &str) -> Input {
    Input::Step { node_id: node.into(), activation: 1 }
}

fn finished(node: &str, attempt: u32, result: ActivityResult) -> Input {
    Input::ActivityFinished { node_id: node.into(), activation: 1, attempt, result }
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

fn names(events: &[RunEvent]) -> Vec<&str> {
    events.iter().map(|event| event.event_type.as_str()).collect()
}

fn event<'a>(events: &'a [RunEvent], event_type: &str) -> &'a RunEvent {
    events.iter().find(|event| event.event_type == event_type).unwrap_or_else(|| panic!("no {event_type}"))
}

fn executes(outcome: &Outcome) -> bool {
    outcome.effects.iter().any(|effect| matches!(effect, Effect::Execute { .. }))
}

#[test]
fn the_start_reserves_the_effective_budget_and_a_run_without_one_reserves_nothing() {
    let wf = compile(json!([model_node("a", "gpt-4o", json!({}))]), json!([]));
    let mut state = budgeted(&wf, json!({"maxTokens": 100, "maxRetries": 0, "modelAllow": ["gpt-*"]}));
    let outcome = apply(&wf, &mut state, Input::Start, 1_000);
    assert_eq!(names(&outcome.events), ["run.started", "budget.reserved"]);
    assert_eq!(
        outcome.events[1].payload,
        json!({"effectiveBudget": {"maxTokens": 100, "maxRetries": 0}, "scope": "run"}),
        "content-free: ceilings and scope only, no model lists, no pricing"
    );
    assert_eq!(state.ai.budget.as_ref().map(|budget| budget.reservations), Some(1));
    let mut plain = pending(&wf, json!({}));
    assert_eq!(names(&apply(&wf, &mut plain, Input::Start, 1_000).events), ["run.started"]);
    assert!(plain.ai.is_empty());
}

#[test]
fn usage_is_consumed_the_threshold_and_exhaustion_come_once_and_exhaustion_fails_the_run() {
    let wf = compile(json!([model_node("a", "gpt-4o", json!({}))]), json!([]));
    let mut state = budgeted(&wf, json!({"maxTokens": 100, "maxCostUsd": 10}));
    apply(&wf, &mut state, Input::Start, 1_000);
    assert!(executes(&apply(&wf, &mut state, step("a"), 1_000)));
    let first = apply(&wf, &mut state, usage("a", 0, 50, Some(0.01)), 1_010);
    assert_eq!(names(&first.events), ["provider.usage", "budget.consumed", "budget.consumed"]);
    assert_eq!(first.events[1].payload, json!({"dimension": "tokens", "consumed": 50, "limit": 100, "remaining": 50}));
    assert_eq!(first.events[2].payload["dimension"], "cost");
    let second = apply(&wf, &mut state, usage("a", 0, 35, None), 1_020);
    assert_eq!(
        names(&second.events),
        ["provider.usage", "budget.consumed", "budget.threshold.crossed", "budget.consumed"]
    );
    assert_eq!(second.events[2].payload, json!({"dimension": "tokens", "consumed": 85, "limit": 100, "percent": 80.0}));
    let third = apply(&wf, &mut state, usage("a", 0, 25, None), 1_030);
    assert_eq!(
        names(&third.events),
        [
            "provider.usage",
            "budget.consumed",
            "budget.exhausted",
            "budget.consumed",
            "cap.breached",
            "node.cancelled",
            "run.failed"
        ],
        "the threshold is not crossed twice; the exhaustion fails the run in the same commit"
    );
    assert_eq!(
        event(&third.events, "budget.exhausted").payload,
        json!({"dimension": "tokens", "consumed": 110, "limit": 100})
    );
    assert_eq!(
        event(&third.events, "cap.breached").payload,
        json!({"kind": "budget-tokens", "limit": 100, "observed": 110, "nodeId": "a"})
    );
    let failed = event(&third.events, "run.failed");
    assert_eq!(failed.payload["error"]["code"], "budget_exhausted");
    assert_eq!(failed.payload["error"]["details"], json!({"dimension": "tokens", "consumed": 110, "limit": 100}));
    assert_eq!(state.status, RunStatus::Failed);
    // The in-flight attempt's late result is ignored: the run is terminal.
    let late = apply(&wf, &mut state, finished("a", 0, success(json!({"text": "hi"}))), 1_040);
    assert_eq!(late.verdict, Verdict::Ignored("run is terminal"));
    for event in third.events.iter().filter(|event| event.event_type.starts_with("budget.")) {
        let payload = event.payload.to_string();
        assert!(!payload.contains("gpt") && !payload.contains("price"), "content-free: {payload}");
    }
}

#[test]
fn under_interrupt_the_next_model_call_suspends_and_an_allowance_lets_it_go_out() {
    let nodes = json!([model_node("a", "gpt-4o", json!({})), model_node("b", "gpt-4o", json!({}))]);
    let wf = compile(nodes, json!([edge("a", "b")]));
    let mut state = budgeted(&wf, json!({"maxTokens": 100, "onExhaustion": "interrupt"}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, step("a"), 1_000);
    let spent = apply(&wf, &mut state, usage("a", 0, 100, None), 1_010);
    assert_eq!(
        names(&spent.events),
        ["provider.usage", "budget.consumed", "budget.threshold.crossed", "budget.exhausted"],
        "no failure under interrupt"
    );
    // The running attempt finishes; `b`'s attempt is held on an approval.
    apply(&wf, &mut state, finished("a", 0, success(json!({}))), 1_020);
    let held = apply(&wf, &mut state, step("b"), 1_030);
    assert_eq!(names(&held.events), ["node.started", "node.suspended", "interrupt.requested", "approval.requested"]);
    assert!(!executes(&held), "no call goes out while the budget is exhausted");
    assert_eq!(state.status, RunStatus::WaitingApproval);
    let requested = event(&held.events, "interrupt.requested");
    assert_eq!(requested.payload["kind"], "approval");
    assert_eq!(
        requested.payload["data"]["artifactData"],
        json!({"dimension": "tokens", "consumed": 100, "limit": 100})
    );
    // An allowance that does not fit the resume schema is refused; the interrupt stays.
    let wrong =
        apply(&wf, &mut state, resolve("b", json!({"action": "accept", "data": {"budget": {"maxTokens": 0}}})), 1_040);
    assert!(matches!(wrong.verdict, Verdict::Refused(_)));
    let accepted =
        apply(&wf, &mut state, resolve("b", json!({"action": "accept", "data": {"budget": {"maxTokens": 50}}})), 1_050);
    assert_eq!(names(&accepted.events), ["approval.received", "interrupt.resolved", "node.resumed", "budget.reserved"]);
    assert_eq!(
        event(&accepted.events, "budget.reserved").payload,
        json!({"effectiveBudget": {"maxTokens": 150}, "scope": "run"})
    );
    assert_eq!(
        accepted.effects,
        vec![Effect::Execute { node_id: "b".into(), activation: 1, attempt: 0, due_at: 1_050 }]
    );
    assert_eq!((state.status, state.nodes["b"].status), (RunStatus::Running, NodeStatus::Executing));
    assert!(activity_call(&wf, &state, "b", 1, 0, 1_050).is_some());
    let raised = apply(&wf, &mut state, usage("b", 0, 20, None), 1_060);
    assert_eq!(names(&raised.events), ["provider.usage", "budget.consumed", "budget.threshold.crossed"]);
    apply(&wf, &mut state, finished("b", 0, success(json!({}))), 1_070);
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn rejecting_the_exhaustion_interrupt_fails_the_run_with_budget_exhausted() {
    let wf = compile(json!([model_node("a", "gpt-4o", json!({}))]), json!([]));
    let mut state = budgeted(&wf, json!({"maxCostUsd": 0, "onExhaustion": "interrupt"}));
    apply(&wf, &mut state, Input::Start, 1_000);
    let held = apply(&wf, &mut state, step("a"), 1_000);
    assert_eq!(
        names(&held.events),
        ["node.started", "budget.exhausted", "node.suspended", "interrupt.requested", "approval.requested"],
        "a zero cost limit leaves nothing for the first call"
    );
    let rejected = apply(&wf, &mut state, resolve("a", json!({"action": "reject"})), 1_010);
    assert_eq!(
        names(&rejected.events),
        ["approval.received", "interrupt.resolved", "node.resumed", "cap.breached", "node.cancelled", "run.failed"]
    );
    assert_eq!(event(&rejected.events, "cap.breached").payload["kind"], "budget-cost");
    assert_eq!(event(&rejected.events, "run.failed").payload["error"]["code"], "budget_exhausted");
    assert!(!executes(&rejected));
    assert_eq!(state.status, RunStatus::Failed);
}

#[test]
fn under_fail_a_dimension_spent_before_the_call_fails_the_run_without_an_attempt() {
    let wf = compile(json!([model_node("a", "gpt-4o", json!({}))]), json!([]));
    let mut state = budgeted(&wf, json!({"maxCostUsd": 0}));
    apply(&wf, &mut state, Input::Start, 1_000);
    let outcome = apply(&wf, &mut state, step("a"), 1_000);
    assert_eq!(
        names(&outcome.events),
        ["node.started", "budget.exhausted", "cap.breached", "node.cancelled", "run.failed"]
    );
    assert_eq!(
        event(&outcome.events, "cap.breached").payload,
        json!({"kind": "budget-cost", "limit": 0.0, "observed": 0.0, "nodeId": "a"})
    );
    assert!(!executes(&outcome));
}

#[test]
fn the_model_policy_refuses_a_call_before_any_execute_and_deny_wins() {
    let cases = [
        (json!({"modelDeny": ["gpt-*"]}), "gpt-4o", false),
        (json!({"modelAllow": ["claude-*"]}), "gpt-4o", false),
        (json!({"modelAllow": ["gpt-*"], "modelDeny": ["gpt-4o"]}), "gpt-4o", false),
        (json!({"modelAllow": ["gpt-*"], "modelDeny": ["gpt-4o-mini"]}), "gpt-4o", true),
    ];
    for (budget, model, allowed) in cases {
        let wf = compile(json!([model_node("a", model, json!({}))]), json!([]));
        let mut state = budgeted(&wf, budget.clone());
        apply(&wf, &mut state, Input::Start, 1_000);
        let outcome = apply(&wf, &mut state, step("a"), 1_000);
        assert_eq!(executes(&outcome), allowed, "{budget}");
        if allowed {
            continue;
        }
        assert_eq!(names(&outcome.events), ["node.started", "node.failed", "run.failed"], "{budget}");
        let error = &event(&outcome.events, "node.failed").payload["error"];
        assert_eq!(error["code"], "budget_model_denied");
        assert_eq!(error["details"], json!({"model": model}), "the model, no policy echo");
        assert_eq!(event(&outcome.events, "run.failed").payload["error"]["code"], "budget_model_denied");
    }
}

/// Runs to the end, answering each activity's attempts from `script` and firing retry
/// timers when due; returns the event log.
fn run(wf: &Workflow, state: &mut RunState, script: &mut Vec<ActivityResult>) -> Vec<RunEvent> {
    let mut log = Vec::new();
    let mut queue = VecDeque::from([(Input::Start, 1_000)]);
    while let Some((input, now)) = queue.pop_front() {
        let outcome = apply(wf, state, input, now);
        log.extend(outcome.events);
        for effect in outcome.effects {
            match effect {
                Effect::Step { .. } => queue.push_back((effect.input().unwrap(), now)),
                Effect::Retry { .. } => queue.push_back((effect.input().unwrap(), effect.due_at())),
                Effect::Execute { node_id, activation, attempt, .. } => {
                    let result = if script.len() > 1 { script.remove(0) } else { script[0].clone() };
                    queue.push_back((Input::ActivityFinished { node_id, activation, attempt, result }, now + 10));
                }
                _ => {}
            }
        }
    }
    log
}

#[test]
fn retries_are_counted_from_node_retried_and_the_one_past_the_limit_fails_the_run() {
    let retry = json!({"retry": {"maxAttempts": 5, "initialIntervalMs": 10, "jitter": "none"}});
    let node = json!({"id": "call", "typeId": SCRIPTED_TYPE_ID, "settings": retry});
    let wf = compile(json!([node]), json!([]));
    let mut state = budgeted(&wf, json!({"maxRetries": 1}));
    let log = run(&wf, &mut state, &mut vec![transient("http_timeout")]);
    let budget: Vec<&str> = log
        .iter()
        .map(|event| event.event_type.as_str())
        .filter(|t| t.starts_with("budget.") || *t == "node.retried" || *t == "cap.breached" || *t == "run.failed")
        .collect();
    assert_eq!(
        budget,
        [
            "budget.reserved",
            "node.retried",
            "budget.consumed",
            "budget.threshold.crossed",
            "node.retried",
            "budget.consumed",
            "budget.exhausted",
            "cap.breached",
            "run.failed"
        ],
        "maxRetries: 1 allows one retry; the second exhausts it"
    );
    assert_eq!(
        event(&log, "cap.breached").payload,
        json!({"kind": "budget-retries", "limit": 1, "observed": 2, "nodeId": "call"})
    );
    let starts = log.iter().filter(|event| event.event_type == "node.started").count();
    assert_eq!(starts, 2, "the refused retry never started");
    assert_eq!(state.status, RunStatus::Failed);
}

#[test]
fn under_interrupt_an_exhausted_retry_waits_for_an_allowance_then_starts() {
    let retry = json!({"retry": {"maxAttempts": 3, "initialIntervalMs": 10, "jitter": "none"}});
    let wf = compile(json!([model_node("a", "gpt-4o", retry)]), json!([]));
    let mut state = budgeted(&wf, json!({"maxRetries": 0, "onExhaustion": "interrupt"}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, step("a"), 1_000);
    let failed = apply(&wf, &mut state, finished("a", 0, transient("provider_unavailable")), 1_010);
    assert_eq!(
        names(&failed.events),
        ["node.retried", "budget.consumed", "budget.threshold.crossed", "budget.exhausted"]
    );
    let due = Input::RetryDue { node_id: "a".into(), activation: 1, attempt: 1 };
    let held = apply(&wf, &mut state, due, 1_020);
    assert_eq!(names(&held.events), ["node.suspended", "interrupt.requested", "approval.requested"]);
    assert!(!executes(&held));
    let accepted =
        apply(&wf, &mut state, resolve("a", json!({"action": "accept", "data": {"budget": {"maxRetries": 1}}})), 1_030);
    assert_eq!(
        names(&accepted.events),
        ["approval.received", "interrupt.resolved", "node.resumed", "budget.reserved", "node.started"]
    );
    assert_eq!(event(&accepted.events, "node.started").payload["attempt"], 1);
    assert_eq!(
        accepted.effects,
        vec![Effect::Execute { node_id: "a".into(), activation: 1, attempt: 1, due_at: 1_030 }]
    );
    apply(&wf, &mut state, finished("a", 1, success(json!({}))), 1_040);
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn an_accept_without_enough_allowance_suspends_again() {
    let wf = compile(json!([model_node("a", "gpt-4o", json!({}))]), json!([]));
    let mut state = budgeted(&wf, json!({"maxCostUsd": 0, "onExhaustion": "interrupt"}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, step("a"), 1_000);
    let again = apply(&wf, &mut state, resolve("a", json!({"action": "accept"})), 1_010);
    assert_eq!(
        names(&again.events),
        [
            "approval.received",
            "interrupt.resolved",
            "node.resumed",
            "budget.reserved",
            "node.suspended",
            "interrupt.requested",
            "approval.requested"
        ],
        "a raise of nothing leaves the dimension spent (already reported exhausted): a new occurrence"
    );
    assert!(!executes(&again));
    assert_eq!(state.status, RunStatus::WaitingApproval);
    assert_eq!(state.interrupts.len(), 2);
}

#[test]
fn tool_calls_are_consumed_through_the_hook_and_the_one_past_the_limit_fails_the_run() {
    let wf = compile(json!([model_node("a", "gpt-4o", json!({}))]), json!([]));
    let mut state = budgeted(&wf, json!({"maxToolCalls": 1}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, step("a"), 1_000);
    let call = |state: &mut RunState| {
        let mut tx = super::progress::Transition::new(&wf, state, 1_010);
        let goes_on = tx.budget_tool_called("a");
        (goes_on, tx.finish(Verdict::Applied))
    };
    let (goes_on, first) = call(&mut state);
    assert!(goes_on);
    assert_eq!(names(&first.events), ["budget.consumed", "budget.threshold.crossed"]);
    let (goes_on, second) = call(&mut state);
    assert!(!goes_on, "the caller stops");
    assert_eq!(
        names(&second.events),
        ["budget.consumed", "budget.exhausted", "cap.breached", "node.cancelled", "run.failed"]
    );
    assert_eq!(event(&second.events, "cap.breached").payload["kind"], "budget-tool-calls");
    assert_eq!(state.status, RunStatus::Failed);
}
