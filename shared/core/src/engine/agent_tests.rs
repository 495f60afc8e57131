//! Transition-table tests for the conformance rows: the mock agent's turn (order, callId
//! pairing and causation, streaming deltas, the low-confidence suspend and its resolution,
//! the run-time gate), the cost emitter (the canary never stored) and the usage seam's row.

use serde_json::{json, Value};

use super::tests::pending;
use super::*;
use crate::ai::usage::ProviderUsage;
use crate::event::RunEvent;
use crate::interrupt::{Resolution, Resolver};
use crate::model::Workflow;
use crate::run::{RunState, RunStatus};

fn single(type_id: &str, config: Value, agent: Option<Value>) -> Workflow {
    let mut node = json!({ "id": "n", "typeId": type_id, "config": config });
    if let Some(agent) = agent {
        node["agent"] = agent;
    }
    Workflow::compile(json!({ "id": "conformance-agent-test", "name": "t", "nodes": [node], "edges": [] })).unwrap()
}

/// Starts a run (mocks allowed unless `mocks` is false, `configurable` as given) and steps
/// its one node; returns the state and every event so far.
fn run(wf: &Workflow, mocks: bool, configurable: Option<Value>) -> (RunState, Vec<RunEvent>) {
    let mut state = pending(wf, json!({}));
    state.mocks_allowed = mocks;
    state.configurable = configurable;
    let mut events = apply(wf, &mut state, Input::Start, 0).events;
    let activation = state.nodes["n"].activation;
    events.extend(apply(wf, &mut state, Input::Step { node_id: "n".into(), activation }, 1).events);
    (state, events)
}

fn kinds(events: &[RunEvent]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

fn resolve(wf: &Workflow, state: &mut RunState, value: Value) -> Outcome {
    let resolution = Resolution {
        node_id: "n".into(),
        interrupt_id: None,
        value,
        resolver: Resolver::Principal("ops".into()),
        prior_vote: None,
    };
    apply(wf, state, Input::Resolve(resolution), 2)
}

fn reasoning_fixture() -> Value {
    json!({
        "mockReasoning": { "summary": "Decomposed query, decided to call a tool, then handed off.", "tokenCount": 24 },
        "mockToolCalls": [
            { "toolId": "openwop.echo:echo", "arguments": { "x": 1 }, "result": { "x": 1 }, "durationMs": 1 },
            { "toolId": "openwop.fail:fail", "error": { "error": "tool_failed", "message": "no" } }
        ],
        "mockHandoff": { "toAgentId": "core.conformance.handoff-target", "reason": "demo-handoff" },
        "mockDecision": { "decision": { "next": "done" }, "confidence": 1 }
    })
}

#[test]
fn a_turn_emits_reasoning_tool_pairs_handoff_and_decision_in_order_then_completes_with_no_outputs() {
    let wf = single(
        "core.conformance.mock-agent",
        reasoning_fixture(),
        Some(json!({ "agentId": "core.conformance.reasoning-agent" })),
    );
    let (state, events) = run(&wf, true, None);
    assert_eq!(
        kinds(&events),
        [
            "run.started",
            "node.started",
            "agent.reasoned",
            "agent.toolCalled",
            "agent.toolReturned",
            "agent.toolCalled",
            "agent.toolReturned",
            "agent.handoff",
            "agent.decided",
            "node.completed",
            "run.completed"
        ]
    );
    assert_eq!(state.status, RunStatus::Completed);
    let reasoned = &events[2].payload;
    assert_eq!(reasoned["agentId"], "core.conformance.reasoning-agent");
    assert_eq!(reasoned["reasoning"], "Decomposed query, decided to call a tool, then handed off.");
    assert_eq!(reasoned["verbosity"], "summary");
    for pair in [(3, 4), (5, 6)] {
        let (called, returned) = (&events[pair.0], &events[pair.1]);
        assert_eq!(called.payload["callId"], returned.payload["callId"]);
        assert!(called.payload["callId"].as_str().is_some_and(|id| id.starts_with("call-")));
        assert_eq!(returned.causation, Some(called.sequence), "toolReturned is caused by its toolCalled");
        assert_eq!(called.payload["transport"], "native");
    }
    assert_ne!(events[3].payload["callId"], events[5].payload["callId"]);
    assert_eq!(events[3].payload["toolName"], "openwop.echo:echo");
    assert_eq!(events[3].payload["inputs"], json!({ "x": 1 }));
    assert_eq!(events[4].payload["outcome"], json!({ "x": 1 }));
    assert_eq!(events[4].payload["status"], "ok");
    assert_eq!(events[4].payload["durationMs"], 1);
    assert_eq!(events[6].payload["error"], json!({ "code": "tool_failed", "message": "no" }));
    assert_eq!(events[6].payload["status"], "error");
    assert_eq!(
        events[7].payload,
        json!({ "fromAgentId": "core.conformance.reasoning-agent", "toAgentId": "core.conformance.handoff-target",
                "reason": "demo-handoff" })
    );
    assert_eq!(events[8].payload["confidence"], 1.0);
    assert_eq!(events[9].payload["outputs"], json!({}));
}

#[test]
fn call_ids_are_deterministic() {
    let wf = single("core.conformance.mock-agent", reasoning_fixture(), None);
    let (_, first) = run(&wf, true, None);
    let (_, second) = run(&wf, true, None);
    assert_eq!(first[3].payload["callId"], second[3].payload["callId"]);
    assert_eq!(first[2].payload["agentId"], "host:mock-agent:n", "no pin: the host-minted id");
}

#[test]
fn stream_chunks_become_deltas_then_the_concatenation() {
    let chunks = ["Let me think. ", "First, the question. ", "Therefore, respond."];
    let wf = single(
        "core.conformance.mock-agent",
        json!({ "agentId": "core.streamer", "mockReasoning": { "summary": "s", "streamChunks": chunks } }),
        Some(json!({ "agentId": "core.pinned" })),
    );
    let (state, events) = run(&wf, true, None);
    let deltas: Vec<&RunEvent> = events.iter().filter(|e| e.event_type == "agent.reasoning.delta").collect();
    assert_eq!(deltas.len(), 3);
    for (index, delta) in deltas.iter().enumerate() {
        assert_eq!(delta.payload["sequence"], index);
        assert_eq!(delta.payload["delta"], chunks[index]);
        assert_eq!(delta.payload["agentId"], "core.streamer", "config.agentId wins over the pin");
    }
    let reasoned = events.iter().position(|e| e.event_type == "agent.reasoned").unwrap();
    assert!(events.iter().rposition(|e| e.event_type == "agent.reasoning.delta").unwrap() < reasoned);
    assert_eq!(events[reasoned].payload["reasoning"], chunks.concat());
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn low_confidence_suspends_waiting_approval_and_accept_completes() {
    let wf = single(
        "core.conformance.mock-agent",
        json!({ "mockDecision": { "decision": { "kind": "stub-low-conf" }, "confidence": 0.5 } }),
        Some(json!({ "agentId": "core.conformance.low-conf-decider" })),
    );
    let (mut state, events) = run(&wf, true, None);
    assert_eq!(
        kinds(&events),
        ["run.started", "node.started", "agent.decided", "node.suspended", "interrupt.requested"]
    );
    let suspended = &events[3].payload;
    assert_eq!(suspended["reason"], "low-confidence");
    assert_eq!(suspended["agentId"], "core.conformance.low-conf-decider");
    assert_eq!((suspended["threshold"].as_f64(), suspended["observed"].as_f64()), (Some(0.7), Some(0.5)));
    assert_eq!(state.status, RunStatus::WaitingApproval);
    assert!(matches!(resolve(&wf, &mut state, json!({ "action": "maybe" })).verdict, Verdict::Refused(_)));
    let resumed = resolve(&wf, &mut state, json!({ "action": "accept" }));
    assert_eq!(kinds(&resumed.events), ["interrupt.resolved", "node.resumed", "node.completed", "run.completed"]);
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn reject_fails_the_node() {
    let wf = single("core.conformance.mock-agent", json!({ "mockConfidence": 0.2 }), None);
    let (mut state, _) = run(&wf, true, None);
    assert_eq!(state.status, RunStatus::WaitingApproval);
    let rejected = resolve(&wf, &mut state, json!({ "action": "reject" }));
    assert!(kinds(&rejected.events).contains(&"node.failed"));
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.error.as_ref().unwrap().code, "interrupt_rejected");
}

#[test]
fn the_threshold_comes_from_configurable() {
    let wf = single("core.conformance.mock-agent", json!({ "mockConfidence": 0.5 }), None);
    let (state, _) = run(&wf, true, Some(json!({ "escalationThreshold": 0.4 })));
    assert_eq!(state.status, RunStatus::Completed, "0.5 is not below 0.4");
    let (state, events) = run(&wf, true, Some(json!({ "escalationThreshold": 0.9 })));
    assert_eq!(state.status, RunStatus::WaitingApproval);
    let suspended = events.iter().find(|e| e.event_type == "node.suspended").unwrap();
    assert_eq!(suspended.payload["threshold"], 0.9);
    let wf = single("core.conformance.mock-agent", json!({ "mockConfidence": 0.7 }), None);
    assert_eq!(run(&wf, true, None).0.status, RunStatus::Completed, "equal to the threshold continues");
}

#[test]
fn a_run_without_mocks_fails_the_conformance_kinds_with_type_id_refused() {
    for type_id in ["core.conformance.mock-agent", "conformance.cost.emit"] {
        let config = if type_id == "conformance.cost.emit" { json!({ "attrs": {} }) } else { reasoning_fixture() };
        let wf = single(type_id, config, None);
        let (state, events) = run(&wf, false, None);
        assert_eq!(state.status, RunStatus::Failed, "{type_id}");
        assert_eq!(state.error.as_ref().unwrap().code, "typeId_refused");
        assert!(!events.iter().any(|e| e.event_type.starts_with("agent.")), "{:?}", kinds(&events));
    }
}

#[test]
fn the_cost_emitter_rolls_up_allow_listed_attributes_and_never_stores_the_canary() {
    let canary = "sk-ant-CANARY-openwop-CONFORMANCE-NEVER-SECRET-cost-attr-leak";
    let wf = single(
        "conformance.cost.emit",
        json!({ "attrs": {
            "openwop.cost.tokens.input": 100, "openwop.cost.tokens.output": 50, "openwop.cost.tokens.total": 150,
            "openwop.cost.usd": 0.00123, "openwop.cost.currency": "usd", "openwop.cost.estimated": true,
            "openwop.cost.provider": "anthropic", "openwop.cost.evil": "must-be-dropped",
            "openwop.cost.leaked_token": canary
        } }),
        None,
    );
    let (state, events) = run(&wf, true, None);
    assert_eq!(kinds(&events), ["run.started", "node.started", "node.completed", "run.completed"]);
    let cost = state.ai.cost.as_ref().unwrap();
    assert_eq!((cost.input_tokens, cost.output_tokens, cost.calls), (100, 50, 0));
    assert_eq!((cost.provider.as_deref(), cost.currency.as_deref()), (Some("anthropic"), Some("USD")));
    assert!((cost.usd - 0.00123).abs() < 1e-12);
    let stored = serde_json::to_string(&(&state, &events)).unwrap();
    assert!(!stored.contains("CANARY") && !stored.contains("must-be-dropped") && !stored.contains("evil"));
}

#[test]
fn recorded_usage_appends_one_provider_usage_caused_by_a_run_event() {
    let wf = single("core.conformance.mock-agent", json!({ "mockConfidence": 0.1 }), None);
    let (mut state, _) = run(&wf, true, None);
    let usage = ProviderUsage {
        provider: "anthropic".into(),
        model: "claude".into(),
        input_tokens: 200,
        output_tokens: 80,
        cost_estimate_usd: None,
        cache_hit: None,
        cache_read_tokens: None,
        cache_write_tokens: None,
    };
    let payload = json!({ "provider": "anthropic", "model": "claude", "inputTokens": 200, "outputTokens": 80 });
    let input = |causation| Input::RecordUsage {
        node_id: Some("n".into()),
        payload: payload.clone(),
        usage: usage.clone(),
        causation,
    };
    let beyond = state.next_sequence;
    assert!(matches!(apply(&wf, &mut state, input(Some(beyond)), 3).verdict, Verdict::Refused(_)));
    let recorded = apply(&wf, &mut state, input(Some(1)), 3);
    assert_eq!(kinds(&recorded.events), ["provider.usage"]);
    assert_eq!(recorded.events[0].causation, Some(1));
    assert_eq!(recorded.events[0].node_id.as_deref(), Some("n"));
    assert_eq!(state.ai.cost.as_ref().map(|c| (c.input_tokens, c.calls)), Some((200, 1)));
    let resolved = resolve(&wf, &mut state, json!({ "action": "accept" }));
    assert_eq!(state.status, RunStatus::Completed, "{:?}", kinds(&resolved.events));
    assert!(matches!(apply(&wf, &mut state, input(None), 4).verdict, Verdict::Refused(_)), "terminal runs refuse");
}
