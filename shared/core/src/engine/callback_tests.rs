//! Transition-table tests for external-event callbacks: the notify effect committed with the
//! interrupt, heartbeats, a missed heartbeat retried then routed, a worker's failure, and a
//! token used after the interrupt's timeout.

use serde_json::{json, Value};

use super::tests::{pending, workflow};
use super::*;
use crate::interrupt::{Resolution, Resolver};
use crate::model::Workflow;
use crate::run::{NodeStatus, RunStatus};

/// `wait` (an external-event interrupt with `settings`), then `ok`; with `route`, a failure
/// route `wait → handler`.
fn callback_workflow(settings: Value, timeout_ms: Option<u64>, route: bool) -> Workflow {
    let mut wait = json!({"id": "wait", "typeId": "core.interrupt", "settings": settings, "config": {
        "kind": "external-event", "data": {"eventType": "job.done", "correlation": {"job": "j-1"}}}});
    if let Some(timeout) = timeout_ms {
        wait["config"]["timeoutMs"] = json!(timeout);
    }
    let mut nodes = vec![wait, json!({"id": "ok", "typeId": "core.noop"})];
    let mut edges = vec![json!({"id": "e1", "sourceNodeId": "wait", "targetNodeId": "ok"})];
    if route {
        nodes.push(json!({"id": "handler", "typeId": "core.noop"}));
        edges.push(json!({"id": "e2", "sourceNodeId": "wait", "targetNodeId": "handler", "triggerRule": "any_failed"}));
    }
    workflow(json!(nodes), json!(edges))
}

/// Starts the run (with `callback_url`) and runs it to its suspension at `now`; the effects of
/// the suspending step.
fn started(wf: &Workflow, state: &mut RunState, callback_url: Option<&str>, now: Millis) -> Vec<Effect> {
    state.callback_url = callback_url.map(str::to_owned);
    let start = apply(wf, state, Input::Start, now);
    let step = start.effects.iter().find_map(|effect| matches!(effect, Effect::Step { .. }).then(|| effect.input()));
    apply(wf, state, step.flatten().expect("a step"), now).effects
}

fn token(state: &RunState, value: Value) -> Input {
    let record = state.pending_interrupt().expect("pending");
    Input::Resolve(Resolution {
        node_id: record.node_id.clone(),
        interrupt_id: Some(record.id.clone()),
        value,
        resolver: Resolver::Token,
        prior_vote: None,
    })
}

/// Applies `value` from the pending occurrence's token holder at `now`.
fn send(wf: &Workflow, state: &mut RunState, value: Value, now: Millis) -> Outcome {
    let input = token(state, value);
    apply(wf, state, input, now)
}

fn types(outcome: &Outcome) -> Vec<&str> {
    outcome.events.iter().map(|event| event.event_type.as_str()).collect()
}

fn notifies(effects: &[Effect]) -> Vec<&Effect> {
    effects.iter().filter(|effect| matches!(effect, Effect::NotifyWorker { .. })).collect()
}

#[test]
fn the_notify_is_committed_with_the_interrupt_when_a_worker_is_named() {
    let wf = callback_workflow(json!({}), None, false);
    let mut state = pending(&wf, json!({}));
    let effects = started(&wf, &mut state, Some("http://127.0.0.1:9/hook"), 10);
    let record = state.pending_interrupt().unwrap().clone();
    assert_eq!(
        notifies(&effects),
        [&Effect::NotifyWorker { node_id: "wait".into(), interrupt_id: record.id, due_at: 10 }]
    );
    assert_eq!(state.status, RunStatus::WaitingExternal);

    let mut silent = pending(&wf, json!({}));
    assert!(notifies(&started(&wf, &mut silent, None, 10)).is_empty(), "no worker named, no notify");

    let per_node = callback_workflow(json!({"notifyUrl": "http://127.0.0.1:9/node"}), None, false);
    let mut state = pending(&per_node, json!({}));
    assert_eq!(notifies(&started(&per_node, &mut state, None, 10)).len(), 1);
}

#[test]
fn a_notify_url_that_is_not_absolute_http_is_refused_at_registration() {
    let document = json!({"id": "w", "name": "w", "nodes": [{"id": "wait", "typeId": "core.interrupt",
        "settings": {"notifyUrl": "/relative"},
        "config": {"kind": "external-event", "data": {"eventType": "x", "correlation": {}}}}], "edges": []});
    let error = Workflow::compile(document).unwrap_err().to_string();
    assert!(error.contains("notifyUrl"), "{error}");
}

#[test]
fn heartbeats_keep_the_node_alive_past_heartbeat_ms_and_the_event_completes_it() {
    let wf = callback_workflow(json!({"timeouts": {"heartbeatMs": 100}}), None, false);
    let mut state = pending(&wf, json!({}));
    let effects = started(&wf, &mut state, Some("http://127.0.0.1:9/hook"), 0);
    assert!(effects.contains(&Effect::Wake { node_id: "wait".into(), activation: 1, due_at: 100 }));
    for now in [80, 160, 240] {
        let beat = send(&wf, &mut state, json!({"heartbeat": true, "details": {"at": now}}), now);
        assert_eq!(types(&beat), ["trellis.interrupt.heartbeat"]);
        assert_eq!(state.nodes["wait"].wake_at, Some(now + 100));
        // The timer set before the heartbeat is early now: it waits.
        let wake = apply(&wf, &mut state, Input::Wake { node_id: "wait".into(), activation: 1 }, now + 20);
        assert_eq!(wake.verdict, Verdict::Later);
    }
    assert_eq!(state.status, RunStatus::WaitingExternal, "alive at 260, past heartbeatMs three times over");
    let done = send(&wf, &mut state, json!({"eventPayload": {"job": "j-1", "rows": 3}}), 300);
    assert_eq!(types(&done)[..3], ["interrupt.resolved", "node.resumed", "node.completed"]);
}

#[test]
fn a_missed_heartbeat_is_retried_as_a_new_occurrence_then_takes_the_failure_route() {
    let settings = json!({"timeouts": {"heartbeatMs": 100},
        "retry": {"maxAttempts": 2, "initialIntervalMs": 50, "jitter": "none"}});
    let wf = callback_workflow(settings, None, true);
    let mut state = pending(&wf, json!({}));
    started(&wf, &mut state, Some("http://127.0.0.1:9/hook"), 0);
    let first = state.pending_interrupt().unwrap().id.clone();
    let missed = apply(&wf, &mut state, Input::Wake { node_id: "wait".into(), activation: 1 }, 100);
    assert_eq!(types(&missed), ["interrupt.resolved", "node.retried"]);
    assert_eq!(missed.events[0].payload["reason"], "heartbeat-timeout");
    assert_eq!(missed.events[1].payload["lastError"]["code"], "heartbeat_timeout");
    assert_eq!(missed.effects, [Effect::Retry { node_id: "wait".into(), activation: 1, attempt: 1, due_at: 150 }]);
    assert_eq!(state.nodes["wait"].status, NodeStatus::Retrying);

    let retried = apply(&wf, &mut state, Input::RetryDue { node_id: "wait".into(), activation: 1, attempt: 1 }, 150);
    assert_eq!(types(&retried), ["node.started", "node.suspended", "interrupt.requested"]);
    assert_eq!(retried.events[0].payload["attempt"], 1);
    let second = state.pending_interrupt().unwrap().clone();
    assert_ne!(second.id, first, "a new occurrence with a new token");
    assert_eq!(second.attempt, 1);
    assert_eq!(notifies(&retried.effects).len(), 1, "the worker is notified again");

    // The first occurrence's token no longer resolves anything.
    let stale = Input::Resolve(Resolution {
        node_id: "wait".into(),
        interrupt_id: Some(first),
        value: json!({"heartbeat": true}),
        resolver: Resolver::Token,
        prior_vote: None,
    });
    assert!(matches!(apply(&wf, &mut state, stale, 160).verdict, Verdict::Refused(_)));

    let missed = apply(&wf, &mut state, Input::Wake { node_id: "wait".into(), activation: 1 }, 250);
    assert_eq!(types(&missed)[..2], ["interrupt.resolved", "node.failed"]);
    assert_eq!(missed.events[1].payload["attempts"], 2);
    assert_eq!(state.variables["wait"]["error"]["code"], "heartbeat_timeout");
    assert_eq!(state.nodes["handler"].status, NodeStatus::Scheduled, "the failure route is taken");
    assert_eq!(state.status, RunStatus::Running);
}

#[test]
fn a_worker_failure_fails_the_node_with_its_code() {
    let wf = callback_workflow(json!({}), None, false);
    let mut state = pending(&wf, json!({}));
    started(&wf, &mut state, Some("http://127.0.0.1:9/hook"), 0);
    let failure = json!({"failure": {"code": "job_failed", "message": "the batch job crashed"}});
    let failed = send(&wf, &mut state, failure, 10);
    assert_eq!(types(&failed)[..2], ["interrupt.resolved", "node.failed"]);
    assert_eq!(failed.events[0].payload["outcome"], "failed");
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.error.as_ref().unwrap().code, "job_failed");

    let mut state = pending(&wf, json!({}));
    started(&wf, &mut state, None, 0);
    let malformed = send(&wf, &mut state, json!({"failure": {"code": "x"}}), 10);
    assert!(matches!(malformed.verdict, Verdict::Refused(ref refusal) if refusal.code() == "validation_error"));
}

#[test]
fn a_worker_failure_is_retried_under_the_retry_policy() {
    let wf = callback_workflow(json!({"retry": {"maxAttempts": 3, "initialIntervalMs": 0}}), None, false);
    let mut state = pending(&wf, json!({}));
    started(&wf, &mut state, Some("http://127.0.0.1:9/hook"), 0);
    let failure = json!({"failure": {"code": "flaky", "message": "try again"}});
    let failed = send(&wf, &mut state, failure, 10);
    assert_eq!(types(&failed), ["interrupt.resolved", "node.retried"]);
    let fatal = json!({"failure": {"code": "bad_input", "message": "never", "retryable": false}});
    apply(&wf, &mut state, Input::RetryDue { node_id: "wait".into(), activation: 1, attempt: 1 }, 10);
    let failed = send(&wf, &mut state, fatal, 20);
    assert_eq!(types(&failed)[..2], ["interrupt.resolved", "node.failed"]);
    assert_eq!(state.error.as_ref().unwrap().code, "bad_input");
}

#[test]
fn a_token_used_after_the_interrupts_timeout_is_refused_as_expired() {
    let wf = callback_workflow(json!({}), Some(1_000), false);
    let mut state = pending(&wf, json!({}));
    started(&wf, &mut state, Some("http://127.0.0.1:9/hook"), 0);
    let record = state.pending_interrupt().unwrap().clone();
    assert_eq!(crate::interrupt::token_expiry(&record, 500), 1_000, "valid until the interrupt's own timeout");
    let late = send(&wf, &mut state, json!({"eventPayload": {"job": "j-1"}}), 1_000);
    assert!(matches!(late.verdict, Verdict::Refused(crate::interrupt::Refusal::Expired)));
    let timed_out = apply(&wf, &mut state, Input::Wake { node_id: "wait".into(), activation: 1 }, 1_000);
    assert_eq!(types(&timed_out)[..2], ["interrupt.resolved", "node.failed"]);
    let after = Input::Resolve(Resolution {
        node_id: "wait".into(),
        interrupt_id: Some(record.id),
        value: json!({"heartbeat": true}),
        resolver: Resolver::Token,
        prior_vote: None,
    });
    let refused = apply(&wf, &mut state, after, 1_500);
    assert!(matches!(refused.verdict, Verdict::Refused(ref refusal) if refusal.code() == "interrupt_expired"));
}
