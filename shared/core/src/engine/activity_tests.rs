//! Activity rows and trigger rules: attempts, retries, timeouts, superseded results and
//! failure routes — inputs in, events and effects out, no I/O.

use serde_json::{json, Value};

use super::tests::{pending, types};
use super::*;
use crate::activity::{ActivityError, ActivityResult};
use crate::model::{Bounds, Workflow};
use crate::run::{NodeStatus, RunState, RunStatus};
use crate::testing::activity::{permanent, success, transient, ScriptedActivity, SCRIPTED_TYPE_ID};
use crate::DefinitionError;

fn compile(nodes: Value, edges: Value, settings: Value) -> Result<Workflow, DefinitionError> {
    let registry = ScriptedActivity::new(vec![]).registry();
    let document = json!({"id": "w", "name": "w", "nodes": nodes, "edges": edges, "settings": settings});
    Workflow::compile_with(document, &registry, Bounds { max_attempt_ms: 60_000, ..Bounds::default() })
}

fn call_node(id: &str, settings: Value) -> Value {
    json!({"id": id, "typeId": SCRIPTED_TYPE_ID, "settings": settings})
}

fn edge(from: &str, to: &str, rule: Option<&str>) -> Value {
    let mut edge = json!({"id": format!("{from}-{to}"), "sourceNodeId": from, "targetNodeId": to});
    if let Some(rule) = rule {
        edge["triggerRule"] = json!(rule);
    }
    edge
}

/// Runs the workflow, answering the attempts of each activity node from `answers` (by node
/// id, in order) and firing retry timers when due; returns the event log.
fn run(
    workflow: &Workflow,
    state: &mut RunState,
    answers: &mut std::collections::HashMap<&str, Vec<ActivityResult>>,
) -> Vec<RunEvent> {
    let mut log = Vec::new();
    let mut queue = std::collections::VecDeque::from([(Input::Start, 1_000)]);
    while let Some((input, now)) = queue.pop_front() {
        let outcome = apply(workflow, state, input, now);
        log.extend(outcome.events);
        for effect in outcome.effects {
            match effect {
                Effect::Step { .. } => queue.push_back((effect.input().unwrap(), now)),
                Effect::Retry { .. } => queue.push_back((effect.input().unwrap(), effect.due_at())),
                Effect::Execute { node_id, activation, attempt, .. } => {
                    let script = answers.get_mut(node_id.as_str()).expect("an answer for every activity");
                    let result = if script.len() > 1 { script.remove(0) } else { script[0].clone() };
                    queue.push_back((Input::ActivityFinished { node_id, activation, attempt, result }, now + 10));
                }
                _ => {}
            }
        }
    }
    log
}

fn answers(
    pairs: Vec<(&'static str, Vec<ActivityResult>)>,
) -> std::collections::HashMap<&'static str, Vec<ActivityResult>> {
    pairs.into_iter().collect()
}

fn named(log: &[RunEvent]) -> Vec<String> {
    types(&log.iter().map(|e| (e.event_type.clone(), e.node_id.clone())).collect::<Vec<_>>())
}

#[test]
fn an_activity_starts_with_attempt_zero_and_an_execute_effect_then_completes_into_its_variable() {
    let wf = compile(json!([call_node("call", json!({}))]), json!([]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    let outcome = apply(&wf, &mut state, Input::Step { node_id: "call".into(), activation: 1 }, 1_000);
    assert_eq!(outcome.events[0].event_type, "node.started");
    assert_eq!(outcome.events[0].payload["attempt"], 0, "node.started.attempt is zero-based");
    assert_eq!(
        outcome.effects,
        vec![Effect::Execute { node_id: "call".into(), activation: 1, attempt: 0, due_at: 1_000 }]
    );
    assert_eq!(state.nodes["call"].status, NodeStatus::Executing);
    let result = success(json!({"status": 200}));
    let finished = Input::ActivityFinished { node_id: "call".into(), activation: 1, attempt: 0, result };
    let outcome = apply(&wf, &mut state, finished.clone(), 1_050);
    assert_eq!(outcome.verdict, Verdict::Applied);
    assert_eq!(outcome.events[0].payload["outputs"], json!({"status": 200}));
    assert_eq!(state.variables["call"], json!({"status": 200}), "variables[nodeId] = node.completed.outputs");
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(apply(&wf, &mut state, finished, 1_060).verdict, Verdict::Ignored("run is terminal"));
}

#[test]
fn a_retryable_failure_retries_with_backoff_and_attempt_numbering_of_section_4_2() {
    let retry = json!({"retry": {"maxAttempts": 3, "initialIntervalMs": 100, "jitter": "none"}});
    let wf = compile(json!([call_node("call", retry)]), json!([]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    let mut script = answers(vec![(
        "call",
        vec![transient("http_timeout"), transient("http_timeout"), success(json!({"ok": true}))],
    )]);
    let log = run(&wf, &mut state, &mut script);
    assert_eq!(
        named(&log),
        [
            "run.started",
            "node.started:call",
            "node.retried:call",
            "node.started:call",
            "node.retried:call",
            "node.started:call",
            "node.completed:call",
            "run.completed"
        ]
    );
    let attempts: Vec<(String, Value)> = log
        .iter()
        .filter(|e| e.event_type.starts_with("node."))
        .map(|e| (e.event_type.clone(), e.payload["attempt"].clone()))
        .collect();
    assert_eq!(
        attempts[..5].iter().map(|(_, a)| a.clone()).collect::<Vec<_>>(),
        vec![json!(0), json!(1), json!(1), json!(2), json!(2)]
    );
    let retried: Vec<&RunEvent> = log.iter().filter(|e| e.event_type == "node.retried").collect();
    assert_eq!(retried[0].payload["delayMs"], 100);
    assert_eq!(retried[1].payload["delayMs"], 200, "the delay doubles");
    assert_eq!(retried[0].payload["lastError"]["code"], "http_timeout");
    assert_eq!(retried[0].payload["lastError"]["retryable"], true);
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn exhausted_retries_fail_the_node_with_the_count_of_attempts() {
    let retry = json!({"retry": {"maxAttempts": 2, "initialIntervalMs": 0}});
    let wf = compile(json!([call_node("call", retry)]), json!([]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    let log = run(&wf, &mut state, &mut answers(vec![("call", vec![transient("http_network_error")])]));
    let failed = log.iter().find(|e| e.event_type == "node.failed").unwrap();
    assert_eq!(failed.payload["attempts"], 2);
    assert_eq!(failed.payload["error"]["code"], "http_network_error");
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.error.as_ref().unwrap().code, "http_network_error");
}

#[test]
fn non_retryable_errors_and_listed_codes_are_not_retried() {
    let retry = json!({"retry": {"maxAttempts": 5, "nonRetryableErrorCodes": ["http_unexpected_status"]}});
    let wf = compile(json!([call_node("call", retry)]), json!([]), json!({})).unwrap();
    for result in [permanent("validation_error"), transient("http_unexpected_status")] {
        let mut state = pending(&wf, json!({}));
        let log = run(&wf, &mut state, &mut answers(vec![("call", vec![result])]));
        assert!(!named(&log).contains(&"node.retried:call".to_owned()), "{:?}", named(&log));
        assert_eq!(log.iter().find(|e| e.event_type == "node.failed").unwrap().payload["attempts"], 1);
    }
}

#[test]
fn without_an_explicit_policy_only_idempotent_calls_retry_under_max_retries() {
    let plain = compile(json!([call_node("call", json!({}))]), json!([]), json!({"maxRetries": 2})).unwrap();
    let mut state = pending(&plain, json!({}));
    let log = run(&plain, &mut state, &mut answers(vec![("call", vec![transient("http_timeout")])]));
    assert_eq!(
        log.iter().filter(|e| e.event_type == "node.started").count(),
        1,
        "a non-idempotent call is not retried"
    );
    let marked =
        compile(json!([call_node("call", json!({"idempotent": true}))]), json!([]), json!({"maxRetries": 2})).unwrap();
    let mut state = pending(&marked, json!({}));
    let log = run(&marked, &mut state, &mut answers(vec![("call", vec![transient("http_timeout")])]));
    assert_eq!(log.iter().filter(|e| e.event_type == "node.started").count(), 3, "maxRetries 2 = 3 attempts");
    let by_kind = compile(
        json!([{"id": "call", "typeId": SCRIPTED_TYPE_ID, "config": {"idempotent": true}}]),
        json!([]),
        json!({"maxRetries": 1}),
    )
    .unwrap();
    let mut state = pending(&by_kind, json!({}));
    let log = run(&by_kind, &mut state, &mut answers(vec![("call", vec![transient("http_timeout")])]));
    assert_eq!(
        log.iter().filter(|e| e.event_type == "node.started").count(),
        2,
        "the kind says the call is idempotent"
    );
}

#[test]
fn a_result_for_a_superseded_attempt_is_ignored() {
    let retry = json!({"retry": {"maxAttempts": 3, "initialIntervalMs": 100}});
    let wf = compile(json!([call_node("call", retry)]), json!([]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "call".into(), activation: 1 }, 1_000);
    let first = Input::ActivityFinished {
        node_id: "call".into(),
        activation: 1,
        attempt: 0,
        result: transient("http_timeout"),
    };
    assert_eq!(apply(&wf, &mut state, first.clone(), 1_010).verdict, Verdict::Applied);
    assert_eq!(state.nodes["call"].status, NodeStatus::Retrying);
    // The same attempt's result again (a redelivered Execute task) and a stale success.
    assert_eq!(apply(&wf, &mut state, first, 1_020).verdict, Verdict::Ignored("result of a superseded attempt"));
    let stale =
        Input::ActivityFinished { node_id: "call".into(), activation: 1, attempt: 0, result: success(json!({})) };
    assert_eq!(apply(&wf, &mut state, stale, 1_030).verdict, Verdict::Ignored("result of a superseded attempt"));
    // The retry timer is not due yet; then it is.
    let due = state.nodes["call"].wake_at.unwrap();
    let retry = Input::RetryDue { node_id: "call".into(), activation: 1, attempt: 1 };
    if due > 1_010 {
        assert_eq!(apply(&wf, &mut state, retry.clone(), 1_010).verdict, Verdict::Later);
    }
    let outcome = apply(&wf, &mut state, retry.clone(), due);
    assert_eq!(
        outcome.effects,
        vec![Effect::Execute { node_id: "call".into(), activation: 1, attempt: 1, due_at: due }]
    );
    assert_eq!(apply(&wf, &mut state, retry, due).verdict, Verdict::Stale, "a second firing finds it executing");
    assert_eq!(
        outstanding_effects(&state)[0],
        Effect::Execute { node_id: "call".into(), activation: 1, attempt: 1, due_at: 1_000 },
        "an executing attempt is an outstanding effect"
    );
}

#[test]
fn total_timeout_ends_the_retries_with_node_timeout() {
    let settings = json!({"retry": {"maxAttempts": 10, "initialIntervalMs": 1000, "jitter": "none"}, "timeouts": {"totalMs": 2500}});
    let wf = compile(json!([call_node("call", settings)]), json!([]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    let log = run(&wf, &mut state, &mut answers(vec![("call", vec![transient("http_timeout")])]));
    let failed = log.iter().find(|e| e.event_type == "node.failed").unwrap();
    assert_eq!(failed.payload["error"]["code"], "node_timeout");
    assert_eq!(failed.payload["error"]["details"]["lastError"]["code"], "http_timeout");
    assert_eq!(failed.payload["attempts"], 2, "attempt 0, a 1 s delay, attempt 1; a 2 s delay would pass 2.5 s");
}

#[test]
fn an_activity_call_carries_the_attempt_budget_and_a_key_shared_by_every_attempt() {
    let settings = json!({"retry": {"maxAttempts": 2, "initialIntervalMs": 0}, "timeouts": {"attemptMs": 800}});
    let wf = compile(json!([call_node("call", settings)]), json!([]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "call".into(), activation: 1 }, 1_000);
    let first = activity_call(&wf, &state, "call", 1, 0, 1_000).unwrap();
    assert_eq!(first.timeout_ms, 800, "attemptMs is smaller than the kind's 5000");
    assert!(activity_call(&wf, &state, "call", 1, 1, 1_000).is_none(), "attempt 1 is not current");
    let failed = Input::ActivityFinished { node_id: "call".into(), activation: 1, attempt: 0, result: transient("x") };
    apply(&wf, &mut state, failed, 1_100);
    apply(&wf, &mut state, Input::RetryDue { node_id: "call".into(), activation: 1, attempt: 1 }, 1_100);
    let second = activity_call(&wf, &state, "call", 1, 1, 1_100).unwrap();
    assert_eq!(first.idempotency_key, second.idempotency_key, "the key excludes the attempt");
    assert_eq!((first.attempt, second.attempt), (0, 1));
    assert_eq!(first.request, second.request, "every attempt sends the request rendered at start");
}

#[test]
fn a_failure_route_takes_over_and_the_run_completes() {
    let nodes = json!([call_node("call", json!({})), {"id": "ok", "typeId": "core.noop"}, {"id": "handler", "typeId": "core.noop"}]);
    let edges = json!([edge("call", "ok", None), edge("call", "handler", Some("any_failed"))]);
    let wf = compile(nodes, edges, json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    let log = run(&wf, &mut state, &mut answers(vec![("call", vec![permanent("http_unexpected_status")])]));
    assert_eq!(
        named(&log),
        [
            "run.started",
            "node.started:call",
            "node.failed:call",
            "node.skipped:ok",
            "node.started:handler",
            "node.completed:handler",
            "run.completed"
        ]
    );
    assert_eq!(
        state.variables["call"]["error"],
        json!({"code": "http_unexpected_status", "message": "scripted http_unexpected_status", "retryable": false})
    );
    // On success the failure route is skipped.
    let mut state = pending(&wf, json!({}));
    let log = run(&wf, &mut state, &mut answers(vec![("call", vec![success(json!({}))])]));
    assert!(named(&log).contains(&"node.skipped:handler".to_owned()), "{:?}", named(&log));
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn trigger_rules_decide_joins_after_failures() {
    // a fails (routed), b succeeds; j joins both under each rule.
    let cases = [("all_complete", true), ("none_failed", false), ("any_success", true)];
    for (rule, runs) in cases {
        let nodes = json!([
            {"id": "s", "typeId": "core.noop"}, call_node("a", json!({})), {"id": "b", "typeId": "core.noop"},
            {"id": "j", "typeId": "core.noop"}, {"id": "h", "typeId": "core.noop"}
        ]);
        let edges = json!([
            edge("s", "a", None),
            edge("s", "b", None),
            edge("a", "j", Some(rule)),
            edge("b", "j", Some(rule)),
            edge("a", "h", Some("any_failed"))
        ]);
        let wf = compile(nodes, edges, json!({})).unwrap();
        let mut state = pending(&wf, json!({}));
        let log = run(&wf, &mut state, &mut answers(vec![("a", vec![permanent("boom")])]));
        let ran = named(&log).contains(&"node.completed:j".to_owned());
        assert_eq!(ran, runs, "{rule}: {:?}", named(&log));
        assert_eq!(state.status, RunStatus::Completed, "{rule}: the failure was routed to h");
    }
}

#[test]
fn an_unrouted_failure_still_fails_the_run_and_all_success_skips_after_a_routed_one() {
    let nodes = json!([call_node("a", json!({})), {"id": "next", "typeId": "core.noop"}]);
    let wf = compile(nodes, json!([edge("a", "next", Some("none_failed"))]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    run(&wf, &mut state, &mut answers(vec![("a", vec![permanent("boom")])]));
    assert_eq!(state.status, RunStatus::Failed, "none_failed does not handle a failure");
}

#[test]
fn registration_checks_trigger_rules_and_settings() {
    let nodes = json!([{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}, {"id": "c", "typeId": "core.noop"}]);
    let mixed = compile(
        nodes,
        json!([edge("a", "c", Some("any_failed")), edge("b", "c", None), edge("a", "b", None)]),
        json!({}),
    );
    match mixed {
        Err(DefinitionError::Invalid { path, rule, message }) => {
            assert_eq!((path.as_str(), rule), ("/edges/1/triggerRule", "triggerRule"));
            assert!(message.contains("node `c`"), "{message}");
        }
        other => panic!("mixed rules must be refused: {other:?}"),
    }
    let bad = compile(json!([call_node("a", json!({"retry": {"maxAttempts": 0}}))]), json!([]), json!({}));
    match bad {
        Err(DefinitionError::Invalid { path, rule, .. }) => {
            assert_eq!((path.as_str(), rule), ("/nodes/0/settings/retry/maxAttempts", "settings"));
        }
        other => panic!("{other:?}"),
    }
    let long = compile(json!([call_node("a", json!({"timeouts": {"attemptMs": 70_000}}))]), json!([]), json!({}));
    let Err(DefinitionError::Invalid { path, rule, .. }) = long else { panic!("attemptMs past the bound") };
    assert_eq!((path.as_str(), rule), ("/nodes/0/settings/timeouts/attemptMs", "attempt_timeout"));
    let config = compile(
        json!([{"id": "a", "typeId": SCRIPTED_TYPE_ID, "config": {"timeoutMs": 90_000}}]),
        json!([]),
        json!({}),
    );
    let Err(DefinitionError::Invalid { path, .. }) = config else { panic!("config.timeoutMs past the bound") };
    assert_eq!(path, "/nodes/0/config/timeoutMs");
    // A node that asks for nothing gets its kind's default cut to the host's bound (the
    // scripted kind's default is 5 s; this host allows 2 s), never a refusal.
    let registry = ScriptedActivity::new(vec![]).registry();
    let document = json!({"id": "w", "name": "w", "nodes": [call_node("a", json!({}))]});
    let tight = Workflow::compile_with(document, &registry, Bounds { max_attempt_ms: 2_000, ..Bounds::default() })
        .expect("a default timeout adapts to the host");
    assert_eq!(tight.activities[0].as_ref().map(|node| node.attempt_ms), Some(2_000));
    let unknown = Workflow::compile(json!({"id": "w", "name": "w", "nodes": [call_node("a", json!({}))]})).unwrap();
    assert!(unknown.gap.is_some(), "a host without the activity registered cannot run it");
}

#[test]
fn cancel_while_executing_cancels_now_and_the_late_result_is_ignored() {
    let wf = compile(json!([call_node("call", json!({}))]), json!([]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "call".into(), activation: 1 }, 1_000);
    let outcome = apply(&wf, &mut state, Input::Cancel { reason: None }, 1_010);
    assert_eq!(named(&outcome.events), ["node.cancelled:call", "run.cancelled"]);
    let late =
        Input::ActivityFinished { node_id: "call".into(), activation: 1, attempt: 0, result: success(json!({})) };
    assert_eq!(apply(&wf, &mut state, late, 1_020).verdict, Verdict::Ignored("run is terminal"));
}

#[test]
fn a_request_that_cannot_be_prepared_fails_the_node_without_an_attempt() {
    let wf =
        compile(json!([{"id": "a", "typeId": SCRIPTED_TYPE_ID, "config": {"refuse": true}}]), json!([]), json!({}))
            .unwrap();
    let mut state = pending(&wf, json!({}));
    let log = run(&wf, &mut state, &mut answers(vec![]));
    assert_eq!(named(&log), ["run.started", "node.started:a", "node.failed:a", "run.failed"]);
    assert_eq!(state.error.as_ref().unwrap().code, "validation_error");
}

#[test]
fn heartbeats_and_chunks_of_the_current_attempt_are_recorded_and_others_ignored() {
    let wf = compile(json!([call_node("call", json!({}))]), json!([]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "call".into(), activation: 1 }, 1_000);
    let beat = |attempt| Input::ActivityProgress {
        node_id: "call".into(),
        activation: 1,
        attempt,
        progress: crate::activity::Progress::Heartbeat { details: json!({"done": 3}) },
    };
    let outcome = apply(&wf, &mut state, beat(0), 1_010);
    assert_eq!(outcome.events[0].event_type, ACTIVITY_HEARTBEAT);
    assert_eq!(state.nodes["call"].activity.as_ref().unwrap().heartbeat, Some(json!({"done": 3})));
    assert_eq!(apply(&wf, &mut state, beat(1), 1_020).verdict, Verdict::Ignored("progress of a superseded attempt"));
    let chunk = Input::ActivityProgress {
        node_id: "call".into(),
        activation: 1,
        attempt: 0,
        progress: crate::activity::Progress::Chunk { data: json!("hel") },
    };
    let outcome = apply(&wf, &mut state, chunk, 1_030);
    assert_eq!(outcome.events[0].event_type, "output.chunk");
}

#[test]
fn usage_of_the_current_attempt_becomes_provider_usage_and_rolls_into_the_run_cost() {
    let wf = compile(json!([call_node("call", json!({}))]), json!([]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "call".into(), activation: 1 }, 1_000);
    let usage = |attempt, cost| Input::ActivityProgress {
        node_id: "call".into(),
        activation: 1,
        attempt,
        progress: crate::activity::Progress::Usage(crate::ai::usage::ProviderUsage {
            provider: "openai".into(),
            model: "gpt-test".into(),
            input_tokens: 12,
            output_tokens: 3,
            cost_estimate_usd: cost,
            cache_hit: None,
            cache_read_tokens: None,
            cache_write_tokens: None,
        }),
    };
    let outcome = apply(&wf, &mut state, usage(0, Some(0.25)), 1_010);
    assert_eq!(outcome.events[0].event_type, "provider.usage");
    assert_eq!(outcome.events[0].payload["totalTokens"], 15);
    assert_eq!(outcome.events[0].node_id.as_deref(), Some("call"));
    apply(&wf, &mut state, usage(0, None), 1_020);
    let cost = state.ai.cost.as_ref().expect("recorded");
    assert_eq!((cost.input_tokens, cost.output_tokens, cost.usd, cost.calls), (24, 6, 0.25, 2));
    // A superseded attempt's report changes nothing.
    assert_eq!(
        apply(&wf, &mut state, usage(1, None), 1_030).verdict,
        Verdict::Ignored("progress of a superseded attempt")
    );
    assert_eq!(state.ai.cost.as_ref().map(|cost| cost.calls), Some(2));
}

#[test]
fn no_call_goes_out_for_a_run_being_cancelled() {
    let nodes =
        json!([{"id": "s", "typeId": "core.noop"}, call_node("a", json!({})), {"id": "b", "typeId": "core.noop"}]);
    let wf = compile(nodes, json!([edge("s", "a", None), edge("s", "b", None)]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "s".into(), activation: 1 }, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "a".into(), activation: 1 }, 1_000);
    assert!(activity_call(&wf, &state, "a", 1, 0, 1_000).is_some(), "executing in a running run");
    // `b`'s step is in flight, so the cancel is accepted as cancelling.
    apply(&wf, &mut state, Input::Cancel { reason: None }, 1_010);
    assert_eq!(state.status, RunStatus::Cancelling);
    assert!(activity_call(&wf, &state, "a", 1, 0, 1_020).is_none(), "no call after a cancel was accepted");
}

#[test]
fn a_retry_waits_at_least_as_long_as_the_remote_side_asked() {
    let settings = json!({"retry": {"maxAttempts": 2, "initialIntervalMs": 10, "maxIntervalMs": 5_000}});
    let wf = compile(json!([call_node("call", settings)]), json!([]), json!({})).unwrap();
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "call".into(), activation: 1 }, 1_000);
    let limited =
        ActivityError::new("provider_quota_exhausted", "429", true).with_details(json!({"retryAfterMs": 1_500}));
    let failed = Input::ActivityFinished { node_id: "call".into(), activation: 1, attempt: 0, result: Err(limited) };
    let outcome = apply(&wf, &mut state, failed, 1_100);
    let retried = outcome.events.iter().find(|event| event.event_type == "node.retried").expect("retried");
    assert_eq!(retried.payload["delayMs"], 1_500, "the provider's Retry-After, not the policy's 10 ms");
    assert_eq!(state.nodes["call"].wake_at, Some(2_600));
}
