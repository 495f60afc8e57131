//! The agent loop's rows (`vendor.trellis.agent`): a model turn asking for a tool, the HTTP
//! tool's step, its return into the transcript, the next turn and the final answer; a
//! workflow tool as a child run; `maxTurns`; the tool-call budget; an unknown tool; the
//! low-confidence suspension; a model turn's retry counted per step. Inputs in, events and
//! effects out, no I/O (every transition runs the journal's debug check).

use std::collections::VecDeque;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::tests::pending;
use super::*;
use crate::activity::{Activity, ActivityCall, ActivityResult, ProgressSink};
use crate::event::RunEvent;
use crate::interrupt::request::ConfigIssue;
use crate::interrupt::{Resolution, Resolver};
use crate::model::{Bounds, Workflow};
use crate::nodes::agent::{AgentConfig, TYPE_ID};
use crate::nodes::{NodeContext, NodeRegistry};
use crate::run::{RunError, RunState, RunStatus};
use crate::testing::activity::{success, transient};

/// The agent's executor stand-in: its prepared request is a first model turn.
#[derive(Debug)]
struct StubAgent;

#[async_trait]
impl Activity for StubAgent {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        AgentConfig::parse(config).map(drop).map_err(ConfigIssue::Invalid)
    }

    fn idempotent(&self, _config: &Map<String, Value>) -> bool {
        true
    }

    fn model_call(&self) -> bool {
        true
    }

    fn attempt_timeout_ms(&self, _config: &Map<String, Value>) -> u64 {
        5_000
    }

    fn prepare(&self, _context: &NodeContext<'_>) -> Result<Value, RunError> {
        Ok(json!({ "provider": "fake", "model": "m", "messages": [{ "role": "user", "content": "hi" }],
                   "step": { "kind": "model", "turn": 1 } }))
    }

    async fn execute(&self, _call: &ActivityCall, _progress: &dyn ProgressSink) -> ActivityResult {
        Ok(Map::new())
    }
}

fn tools() -> Value {
    json!([
        { "name": "lookup", "description": "d", "inputSchema": { "type": "object" },
          "http": { "url": "http://127.0.0.1:9/lookup" } },
        { "name": "escalate", "description": "d", "inputSchema": { "type": "object" }, "workflowId": "child" },
    ])
}

fn agent_workflow(config: Value) -> Workflow {
    agent_workflow_with(config, json!({}))
}

fn agent_workflow_with(config: Value, settings: Value) -> Workflow {
    let mut config = config;
    config["instructions"] = json!("Be brief.");
    config["tools"] = tools();
    let node = json!({ "id": "agent", "typeId": TYPE_ID, "config": config, "settings": settings });
    let document = json!({ "id": "w", "name": "w", "nodes": [node], "edges": [] });
    let registry = NodeRegistry::new().register(std::sync::Arc::new(StubAgent));
    Workflow::compile_with(document, &registry, Bounds { max_attempt_ms: 60_000, ..Bounds::default() }).unwrap()
}

fn turn(text: &str, calls: Value) -> ActivityResult {
    success(json!({ "text": text, "toolCalls": calls, "finishReason": "stop", "model": "m", "provider": "fake" }))
}

fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({ "id": id, "name": name, "arguments": arguments })
}

/// What the driver answers: an attempt's result, or a child run's end.
enum Answer {
    Step(ActivityResult),
    Child(RunStatus, Value),
}

/// Runs from `start`, answering each `Execute` and `StartChild` from `script` in order (and
/// firing retry timers); returns the log and the requests the attempts were given.
fn drive(wf: &Workflow, state: &mut RunState, start: Input, script: Vec<Answer>) -> (Vec<RunEvent>, Vec<Value>) {
    let mut script = VecDeque::from(script);
    let (mut log, mut requests) = (Vec::new(), Vec::new());
    let mut queue = VecDeque::from([(start, 1_000)]);
    while let Some((input, now)) = queue.pop_front() {
        let outcome = apply(wf, state, input, now);
        log.extend(outcome.events);
        for effect in outcome.effects {
            match effect {
                Effect::Step { .. } => queue.push_back((effect.input().unwrap(), now + 5)),
                Effect::Retry { .. } => queue.push_back((effect.input().unwrap(), effect.due_at())),
                Effect::Execute { node_id, activation, attempt, .. } => {
                    let call = activity_call(wf, state, &node_id, activation, attempt, now).expect("a current attempt");
                    requests.push(call.request);
                    let Some(Answer::Step(result)) = script.pop_front() else { panic!("no step answer left") };
                    queue.push_back((Input::ActivityFinished { node_id, activation, attempt, result }, now + 10));
                }
                Effect::StartChild { node_id, child_run_id, .. } => {
                    let Some(Answer::Child(status, variables)) = script.pop_front() else { panic!("no child answer") };
                    let variables = variables.as_object().cloned().unwrap_or_default();
                    let input = Input::ChildFinished { node_id, child_run_id, status, variables, error: None };
                    queue.push_back((input, now + 10));
                }
                _ => {}
            }
        }
    }
    (log, requests)
}

fn run(wf: &Workflow, state: &mut RunState, script: Vec<Answer>) -> (Vec<RunEvent>, Vec<Value>) {
    let (mut log, requests) = drive(wf, state, Input::Start, script);
    log.retain(|event| !event.event_type.starts_with("budget."));
    (log, requests)
}

fn names(log: &[RunEvent]) -> Vec<&str> {
    log.iter().map(|event| event.event_type.as_str()).collect()
}

fn event<'a>(log: &'a [RunEvent], event_type: &str) -> &'a RunEvent {
    log.iter().find(|event| event.event_type == event_type).unwrap_or_else(|| panic!("no {event_type}"))
}

#[test]
fn a_turn_calls_an_http_tool_whose_result_goes_into_the_next_turn_then_the_answer_completes_the_node() {
    let wf = agent_workflow(json!({ "agentId": "core.triage" }));
    let mut state = pending(&wf, json!({}));
    let tool_result = json!({ "status": "ok", "result": { "status": 200, "body": { "hits": 3 } }, "durationMs": 4 });
    let script = vec![
        Answer::Step(turn("", json!([call("p-1", "lookup", json!({ "q": "x" }))]))),
        Answer::Step(success(tool_result)),
        Answer::Step(turn("three hits", json!([]))),
    ];
    let (log, requests) = run(&wf, &mut state, script);
    assert_eq!(
        names(&log),
        [
            "run.started",
            "node.started",
            "agent.toolCalled",
            "agent.toolReturned",
            "agent.decided",
            "node.completed",
            "run.completed"
        ]
    );
    let called = event(&log, "agent.toolCalled");
    let returned = event(&log, "agent.toolReturned");
    assert_eq!(called.payload["callId"], returned.payload["callId"]);
    assert!(called.payload["callId"].as_str().unwrap().starts_with("call-"), "host-minted, not the provider's id");
    assert_eq!(returned.causation, Some(called.sequence), "the return is caused by the call");
    assert_eq!(
        (called.payload["transport"].as_str(), called.payload["inputs"].clone()),
        (Some("http"), json!({"q": "x"}))
    );
    assert_eq!(returned.payload["outcome"], json!({ "status": 200, "body": { "hits": 3 } }));
    assert_eq!(event(&log, "agent.decided").payload, json!({ "agentId": "core.triage", "decision": "three hits" }));
    // Steps: model turn 1, the HTTP call, model turn 2 carrying the call and its result.
    let kinds: Vec<&str> = requests.iter().map(|r| r["step"]["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["model", "http", "model"]);
    assert_eq!(requests[1]["step"]["arguments"], json!({ "q": "x" }));
    let transcript = requests[2]["messages"].as_array().unwrap();
    assert_eq!(transcript[1]["toolCalls"][0]["id"], "p-1");
    assert_eq!((transcript[2]["role"].as_str(), transcript[2]["toolCallId"].as_str()), (Some("tool"), Some("p-1")));
    let outputs = &event(&log, "node.completed").payload["outputs"];
    assert_eq!(
        (outputs["text"].clone(), outputs["turns"].clone(), outputs["toolCalls"].clone()),
        (json!("three hits"), json!(2), json!(1))
    );
    assert_eq!(state.variables["agent"]["turns"], 2);
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn a_workflow_tool_waits_for_its_child_and_returns_its_variables() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    let script = vec![
        Answer::Step(turn("", json!([call("p-1", "escalate", json!({ "ticket": 7 }))]))),
        Answer::Child(RunStatus::Completed, json!({ "ticket": 7, "owner": "ops" })),
        Answer::Step(turn("escalated", json!([]))),
    ];
    let (log, requests) = run(&wf, &mut state, script);
    let called = event(&log, "agent.toolCalled");
    assert_eq!(
        (called.payload["transport"].as_str(), called.payload["toolTransport"].as_str()),
        (Some("native"), Some("workflow"))
    );
    assert!(names(&log).contains(&"node.dispatched"));
    let returned = event(&log, "agent.toolReturned");
    assert_eq!(returned.payload["outcome"], json!({ "ticket": 7, "owner": "ops" }));
    assert_eq!(returned.causation, Some(called.sequence));
    assert_eq!(requests.len(), 2, "two model turns, the tool was a child run");
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.nodes["agent"].outputs["toolCalls"], 1);
}

#[test]
fn the_child_of_a_workflow_tool_gets_the_call_arguments_as_inputs() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "agent".into(), activation: 1 }, 1_000);
    let result = turn("", json!([call("p-1", "escalate", json!({ "ticket": 7 }))]));
    let outcome = apply(
        &wf,
        &mut state,
        Input::ActivityFinished { node_id: "agent".into(), activation: 1, attempt: 0, result },
        1_010,
    );
    assert!(outcome
        .effects
        .iter()
        .any(|effect| matches!(effect, Effect::StartChild { workflow_id, .. } if workflow_id == "child")));
    assert_eq!(agent_loop::tool_inputs(&state, "agent"), json!({ "ticket": 7 }).as_object().cloned().unwrap());
    assert_eq!(outstanding_effects(&state).len(), 2, "the child's start is re-issued from state (and the deadline)");
}

#[test]
fn a_turn_still_asking_for_tools_after_max_turns_fails_the_node_with_agent_max_turns() {
    let wf = agent_workflow(json!({ "maxTurns": 2 }));
    let mut state = pending(&wf, json!({}));
    let asks = || turn("", json!([call("p", "lookup", json!({}))]));
    let ok = || success(json!({ "status": "ok", "result": {} }));
    let script = vec![Answer::Step(asks()), Answer::Step(ok()), Answer::Step(asks())];
    let (log, requests) = run(&wf, &mut state, script);
    assert_eq!(requests.len(), 3, "the second turn's tool call is not made");
    let failed = event(&log, "node.failed");
    assert_eq!(failed.payload["error"]["code"], "agent_max_turns");
    assert_eq!(failed.payload["error"]["details"], json!({ "maxTurns": 2, "turns": 2, "toolCalls": 1 }));
    assert_eq!(state.status, RunStatus::Failed);
}

#[test]
fn the_tool_call_budget_breach_fails_the_run_with_cap_breached() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    state.configurable = Some(json!({ "budget": { "maxToolCalls": 1 } }));
    let two = json!([call("a", "lookup", json!({})), call("b", "lookup", json!({}))]);
    let script = vec![Answer::Step(turn("", two)), Answer::Step(success(json!({ "status": "ok", "result": {} })))];
    let (log, requests) = drive(&wf, &mut state, Input::Start, script);
    assert_eq!(requests.len(), 2, "the first call goes out, the second breaches the budget and does not");
    assert_eq!(log.iter().filter(|event| event.event_type == "agent.toolCalled").count(), 2);
    assert_eq!(event(&log, "cap.breached").payload["kind"], "budget-tool-calls");
    assert_eq!(event(&log, "run.failed").payload["error"]["code"], "budget_exhausted");
    assert_eq!(state.status, RunStatus::Failed);
}

#[test]
fn an_unknown_tool_returns_an_error_to_the_model_and_the_loop_goes_on() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    let script =
        vec![Answer::Step(turn("", json!([call("p", "nope", json!({}))]))), Answer::Step(turn("sorry", json!([])))];
    let (log, requests) = run(&wf, &mut state, script);
    assert_eq!(event(&log, "agent.toolReturned").payload["error"]["code"], "unknown_tool");
    assert!(requests[1]["messages"][2]["content"].as_str().unwrap().contains("unknown_tool"));
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn reasoning_is_reasoned_and_a_low_confidence_decision_suspends_until_accepted() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    let answer = success(json!({ "text": "{}", "data": { "label": "refund", "confidence": 0.4 },
                                  "toolCalls": [], "reasoning": "It mentions money." }));
    let (log, _) = run(&wf, &mut state, vec![Answer::Step(answer)]);
    assert_eq!(event(&log, "agent.reasoned").payload["reasoning"], "It mentions money.");
    let long = success(json!({ "text": "ok", "toolCalls": [], "reasoning": "word ".repeat(600) }));
    let mut other = pending(&wf, json!({}));
    let (long_log, _) = run(&wf, &mut other, vec![Answer::Step(long)]);
    let kept = event(&long_log, "agent.reasoned").payload["reasoning"].as_str().unwrap().split_whitespace().count();
    assert_eq!(kept, 512, "cut to discovery's tokenLimit");
    assert_eq!(event(&log, "agent.decided").payload["confidence"], 0.4);
    assert_eq!(event(&log, "node.suspended").payload["reason"], "low-confidence");
    assert_eq!(state.status, RunStatus::WaitingApproval);
    let resolution = Resolution {
        node_id: "agent".into(),
        interrupt_id: None,
        value: json!({ "action": "accept" }),
        resolver: Resolver::Principal("ops".into()),
        prior_vote: None,
    };
    let outcome = apply(&wf, &mut state, Input::Resolve(resolution), 2_000);
    let completed = event(&outcome.events, "node.completed");
    assert_eq!(completed.payload["outputs"]["data"], json!({ "label": "refund", "confidence": 0.4 }));
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn a_failed_model_turn_is_retried_within_its_own_step_then_the_loop_goes_on() {
    let retry = json!({ "retry": { "maxAttempts": 2, "initialIntervalMs": 10, "jitter": "none" } });
    let wf = agent_workflow_with(json!({}), retry);
    let mut state = pending(&wf, json!({}));
    let script = vec![
        Answer::Step(turn("", json!([call("p", "lookup", json!({}))]))),
        Answer::Step(success(json!({ "status": "ok", "result": {} }))),
        Answer::Step(transient("provider_unavailable")),
        Answer::Step(turn("done", json!([]))),
    ];
    let (log, requests) = run(&wf, &mut state, script);
    let retried = event(&log, "node.retried");
    assert_eq!(retried.payload["attempt"], 3, "attempt numbers keep counting across steps");
    assert_eq!(requests[3]["step"]["kind"], "model");
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn an_immediate_pause_holds_the_next_step_until_resume() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "agent".into(), activation: 1 }, 1_000);
    let pause = Input::Pause { reason: None, drain_policy: crate::run::DrainPolicy::Immediate };
    assert_eq!(apply(&wf, &mut state, pause, 1_005).verdict, Verdict::Applied);
    let result = turn("", json!([call("p", "lookup", json!({}))]));
    let finished = Input::ActivityFinished { node_id: "agent".into(), activation: 1, attempt: 0, result };
    let outcome = apply(&wf, &mut state, finished, 1_010);
    assert!(!outcome.effects.iter().any(|effect| matches!(effect, Effect::Execute { .. })), "{:?}", outcome.effects);
    assert!(outcome.effects.iter().any(|effect| matches!(effect, Effect::Retry { attempt: 1, .. })));
    let held = Input::RetryDue { node_id: "agent".into(), activation: 1, attempt: 1 };
    assert_ne!(apply(&wf, &mut state, held.clone(), 1_020).verdict, Verdict::Applied, "held while paused");
    let resumed = apply(&wf, &mut state, Input::Resume { reason: None }, 1_030);
    assert!(resumed.effects.iter().any(|effect| matches!(effect, Effect::Retry { attempt: 1, .. })));
    let outcome = apply(&wf, &mut state, held, 1_040);
    assert!(outcome.effects.iter().any(|effect| matches!(effect, Effect::Execute { attempt: 1, .. })));
    let call = activity_call(&wf, &state, "agent", 1, 1, 1_040).expect("the held step goes out");
    assert_eq!(call.request["step"]["kind"], "http");
}

#[test]
fn arguments_the_input_schema_refuses_return_invalid_arguments_without_a_call() {
    let mut config = json!({});
    config["instructions"] = json!("x");
    let strict = json!({ "type": "object", "additionalProperties": false,
                         "properties": { "q": { "type": "string" } }, "required": ["q"] });
    config["tools"] = json!([{ "name": "lookup", "description": "d", "inputSchema": strict,
                              "http": { "url": "http://127.0.0.1:9/lookup" } }]);
    let node = json!({ "id": "agent", "typeId": TYPE_ID, "config": config });
    let document = json!({ "id": "w", "name": "w", "nodes": [node], "edges": [] });
    let registry = NodeRegistry::new().register(std::sync::Arc::new(StubAgent));
    let wf =
        Workflow::compile_with(document, &registry, Bounds { max_attempt_ms: 60_000, ..Bounds::default() }).unwrap();
    let mut state = pending(&wf, json!({}));
    let script = vec![
        Answer::Step(turn("", json!([call("p", "lookup", json!({ "q": 5 }))]))),
        Answer::Step(turn("gave up", json!([]))),
    ];
    let (log, requests) = run(&wf, &mut state, script);
    let returned = event(&log, "agent.toolReturned");
    assert_eq!(returned.payload["error"]["code"], "invalid_arguments", "{}", returned.payload);
    assert!(requests.iter().all(|request| request["step"]["kind"] == "model"), "no HTTP step went out");
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn a_failed_child_is_the_tools_error_and_a_cancel_cancels_the_child_in_flight() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    let script = vec![
        Answer::Step(turn("", json!([call("p", "escalate", json!({}))]))),
        Answer::Child(RunStatus::Failed, json!({})),
        Answer::Step(turn("could not escalate", json!([]))),
    ];
    let (log, _) = run(&wf, &mut state, script);
    let returned = event(&log, "agent.toolReturned");
    assert_eq!(
        (returned.payload["status"].as_str(), returned.payload["error"]["code"].as_str()),
        (Some("error"), Some("child_failed"))
    );
    assert_eq!(returned.payload["error"]["details"]["childStatus"], "failed");
    assert_eq!(state.status, RunStatus::Completed, "the model answered after the failure");

    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "agent".into(), activation: 1 }, 1_000);
    let result = turn("", json!([call("p", "escalate", json!({}))]));
    apply(
        &wf,
        &mut state,
        Input::ActivityFinished { node_id: "agent".into(), activation: 1, attempt: 0, result },
        1_010,
    );
    let child = state.nodes["agent"].child_run_id.clone().unwrap();
    let outcome = apply(&wf, &mut state, Input::Cancel { reason: None }, 1_020);
    let cancelled =
        |effect: &Effect| matches!(effect, Effect::CancelChild { child_run_id, .. } if *child_run_id == child);
    assert!(outcome.effects.iter().any(cancelled), "{:?}", outcome.effects);
}

#[test]
fn a_long_tool_result_is_cut_in_the_transcript_and_capped_in_the_event() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    let body = "x".repeat(agent_loop::MAX_RESULT_CHARS * 2);
    let script = vec![
        Answer::Step(turn("", json!([call("p", "lookup", json!({}))]))),
        Answer::Step(success(json!({ "status": "ok", "result": { "body": body } }))),
        Answer::Step(turn("done", json!([]))),
    ];
    let (log, requests) = run(&wf, &mut state, script);
    let returned = &event(&log, "agent.toolReturned").payload;
    assert_eq!(returned["truncated"], true, "the event's outcome is capped");
    let shown = returned["outcome"].as_str().unwrap();
    assert!(shown.len() <= agent_loop::MAX_OUTCOME_BYTES && shown.starts_with("{\"body\":\"xxx"), "{}", shown.len());
    let sent = requests[2]["messages"][2]["content"].as_str().unwrap();
    assert!(
        sent.chars().count() < agent_loop::MAX_RESULT_CHARS + 100 && sent.ends_with("characters]"),
        "{}",
        sent.len()
    );
}

fn accept(node_id: &str, value: Value) -> Input {
    Input::Resolve(Resolution {
        node_id: node_id.into(),
        interrupt_id: None,
        value,
        resolver: Resolver::Principal("ops".into()),
        prior_vote: None,
    })
}

fn transcript_bytes(request: &Value) -> usize {
    request["messages"].as_array().unwrap().iter().map(|message| message.to_string().len() + 1).sum()
}

#[test]
fn the_transcript_stays_under_its_cap_eliding_the_oldest_tool_results() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    let calls: Vec<Value> = (0..8).map(|i| call(&format!("p-{i}"), "lookup", json!({ "i": i }))).collect();
    let mut script = vec![Answer::Step(turn("", Value::Array(calls)))];
    for i in 0..8 {
        let body = format!("{i}").repeat(30_000);
        script.push(Answer::Step(success(json!({ "status": "ok", "result": { "body": body } }))));
    }
    script.push(Answer::Step(turn("done", json!([]))));
    let (_, requests) = run(&wf, &mut state, script);
    let last = requests.last().unwrap();
    assert!(transcript_bytes(last) <= agent_loop::MAX_TRANSCRIPT_BYTES, "{}", transcript_bytes(last));
    let messages = last["messages"].as_array().unwrap();
    let tools: Vec<&Value> = messages.iter().filter(|message| message["role"] == "tool").collect();
    assert_eq!(tools.len(), 8, "every call keeps its answer");
    assert!(tools[0]["content"].as_str().unwrap().starts_with("[elided by the host"), "the oldest goes first");
    assert!(tools[7]["content"].as_str().unwrap().contains("7777"), "the latest result is kept");
    assert_eq!(messages[0], requests[0]["messages"][0], "the first messages are kept");
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn calls_over_the_per_answer_limit_are_refused_to_the_model() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    let extra = agent_loop::MAX_CALLS_PER_ANSWER + 2;
    let calls: Vec<Value> = (0..extra).map(|i| call(&format!("p-{i}"), "nope", json!({}))).collect();
    let script = vec![Answer::Step(turn("", Value::Array(calls))), Answer::Step(turn("ok", json!([])))];
    let (log, requests) = run(&wf, &mut state, script);
    let called = log.iter().filter(|event| event.event_type == "agent.toolCalled").count();
    assert_eq!(called, agent_loop::MAX_CALLS_PER_ANSWER);
    let messages = requests[1]["messages"].as_array().unwrap();
    let refused: Vec<&Value> = messages
        .iter()
        .filter(|message| message["content"].as_str().is_some_and(|c| c.contains(agent_loop::CALL_LIMIT_CODE)))
        .collect();
    assert_eq!(refused.len(), 2, "the two extra calls are answered as refused");
    assert_eq!(messages.iter().filter(|message| message["role"] == "tool").count(), extra);
    assert_eq!(state.nodes["agent"].outputs["toolCalls"], agent_loop::MAX_CALLS_PER_ANSWER);
}

#[test]
fn a_failed_http_tool_step_is_the_tools_error_and_is_never_retried() {
    let retry = json!({ "retry": { "maxAttempts": 3, "initialIntervalMs": 10, "jitter": "none" } });
    let wf = agent_workflow_with(json!({}), retry);
    let mut state = pending(&wf, json!({}));
    let script = vec![
        Answer::Step(turn("", json!([call("p", "lookup", json!({}))]))),
        Answer::Step(transient("heartbeat_timeout")),
        Answer::Step(turn("the tool is down", json!([]))),
    ];
    let (log, requests) = run(&wf, &mut state, script);
    assert!(!names(&log).contains(&"node.retried"), "the POST is not sent again");
    let returned = event(&log, "agent.toolReturned");
    assert_eq!(
        (returned.payload["status"].as_str(), returned.payload["error"]["code"].as_str()),
        (Some("error"), Some("heartbeat_timeout"))
    );
    let kinds: Vec<&str> = requests.iter().map(|r| r["step"]["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["model", "http", "model"]);
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn under_interrupt_a_call_over_max_tool_calls_waits_on_the_gate_before_it_is_made() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    state.configurable = Some(json!({ "budget": { "maxToolCalls": 1, "onExhaustion": "interrupt" } }));
    let two = json!([call("a", "lookup", json!({})), call("b", "lookup", json!({}))]);
    let ok = || Answer::Step(success(json!({ "status": "ok", "result": {} })));
    let (log, requests) = drive(&wf, &mut state, Input::Start, vec![Answer::Step(turn("", two)), ok()]);
    assert_eq!(requests.len(), 2, "only the first call went out");
    assert_eq!(log.iter().filter(|event| event.event_type == "agent.toolCalled").count(), 1);
    assert_eq!(state.status, RunStatus::WaitingApproval);
    let resume = accept("agent", json!({ "action": "accept", "data": { "budget": { "maxToolCalls": 1 } } }));
    let (log, requests) = drive(&wf, &mut state, resume, vec![ok(), Answer::Step(turn("done", json!([])))]);
    assert_eq!(log.iter().filter(|event| event.event_type == "agent.toolCalled").count(), 1);
    assert_eq!(requests[0]["step"]["kind"], "http", "the held call is made from the gate's acceptance");
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.nodes["agent"].outputs["toolCalls"], 2);
}

#[test]
fn an_immediate_pause_holds_a_workflow_tools_child_until_resume() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "agent".into(), activation: 1 }, 1_000);
    let pause = Input::Pause { reason: None, drain_policy: crate::run::DrainPolicy::Immediate };
    apply(&wf, &mut state, pause, 1_005);
    let result = turn("", json!([call("p", "escalate", json!({ "ticket": 7 }))]));
    let finished = Input::ActivityFinished { node_id: "agent".into(), activation: 1, attempt: 0, result };
    let outcome = apply(&wf, &mut state, finished, 1_010);
    assert!(!outcome.effects.iter().any(|effect| matches!(effect, Effect::StartChild { .. })), "{:?}", outcome.effects);
    assert!(state.child_runs.is_empty(), "no child while paused");
    let held = Input::RetryDue { node_id: "agent".into(), activation: 1, attempt: 0 };
    assert_ne!(apply(&wf, &mut state, held.clone(), 1_020).verdict, Verdict::Applied, "held while paused");
    apply(&wf, &mut state, Input::Resume { reason: None }, 1_030);
    let outcome = apply(&wf, &mut state, held, 1_040);
    assert!(outcome
        .effects
        .iter()
        .any(|effect| matches!(effect, Effect::StartChild { workflow_id, .. } if workflow_id == "child")));
    assert_eq!(agent_loop::tool_inputs(&state, "agent"), json!({ "ticket": 7 }).as_object().cloned().unwrap());
}

#[test]
fn a_loop_state_that_does_not_read_fails_the_node_instead_of_resetting_its_counts() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    apply(&wf, &mut state, Input::Start, 1_000);
    apply(&wf, &mut state, Input::Step { node_id: "agent".into(), activation: 1 }, 1_000);
    let progress = state.nodes.get_mut("agent").unwrap().activity.as_mut().unwrap();
    progress.request["loop"] = json!({ "turns": "three" });
    let result = turn("", json!([call("p", "lookup", json!({}))]));
    let finished = Input::ActivityFinished { node_id: "agent".into(), activation: 1, attempt: 0, result };
    let outcome = apply(&wf, &mut state, finished, 1_010);
    assert_eq!(event(&outcome.events, "node.failed").payload["error"]["code"], agent_loop::STATE_INVALID_CODE);
}

#[test]
fn reasoning_verbosity_off_emits_no_reasoned_event() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    state.configurable = Some(json!({ "reasoningVerbosity": "off" }));
    let answer = success(json!({ "text": "ok", "toolCalls": [], "reasoning": "thinking" }));
    let (log, _) = run(&wf, &mut state, vec![Answer::Step(answer)]);
    assert!(!names(&log).contains(&"agent.reasoned"));
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn arguments_that_are_not_an_object_return_invalid_arguments_without_a_call() {
    let wf = agent_workflow(json!({}));
    let mut state = pending(&wf, json!({}));
    let script = vec![
        Answer::Step(turn("", json!([call("p", "lookup", json!("not json"))]))),
        Answer::Step(turn("gave up", json!([]))),
    ];
    let (log, requests) = run(&wf, &mut state, script);
    assert_eq!(event(&log, "agent.toolReturned").payload["error"]["code"], "invalid_arguments");
    assert!(requests.iter().all(|request| request["step"]["kind"] == "model"), "no HTTP step went out");
}
