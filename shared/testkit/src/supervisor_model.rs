//! The model-backed supervisor scenarios both backends play (the embedded host in
//! `tests/e2e_supervisor_model.rs`, the emulated AWS stack in
//! `shared/aws/tests/emulated_supervisor_model.rs`): the workflows, the fake model's scripted
//! answers and each run's expected outcome — written once here, event type sequence
//! included, so both hosts are held to the same log.
//!
//! The supervisor `sm-supervisor` names the route `fake/fake-model` ([`providers`]) and two
//! workers, `sm-research` and `sm-write` (one `core.noop` each: a worker's outputs are its
//! variables, i.e. the inputs the supervisor gave it). [`GATHERING`] is the same loop behind a
//! `vendor.trellis.agent` node `gather` whose one tool, `lookup`, is the workflow `sm-research`
//! (a child run: no HTTP server needed on either host).

use serde_json::{json, Value};

use crate::fake_model::{FakeModel, ModelReply, ToolCallReply};

/// The supervisor workflow.
pub const SUPERVISOR: &str = "sm-supervisor";
/// The supervisor workflow whose loop starts after the agent node `gather`.
pub const GATHERING: &str = "sm-gather-supervisor";
/// The worker workflows.
pub const WORKERS: [&str; 2] = ["sm-research", "sm-write"];

/// The providers document: one OpenAI-compatible provider `fake` (model `fake-model`) served
/// by `fake`, priced so runs carry a cost.
pub fn providers(fake: &FakeModel) -> Value {
    json!([{"id": "fake", "kind": "openai", "baseUrl": fake.openai_base_url(), "default": true,
            "models": [{"id": "fake-model", "inputUsdPerMTok": 1.0, "outputUsdPerMTok": 2.0}]}])
}

fn worker(id: &str, variable: &str, description: &str) -> Value {
    json!({"id": id, "name": id, "version": "1", "description": description,
           "variables": [{"name": variable, "type": "string", "defaultValue": ""}],
           "nodes": [{"id": "work", "typeId": "core.noop"}], "edges": []})
}

/// The supervisor node (`id` `supervisor`), model-backed, over the two workers.
fn supervisor_node() -> Value {
    json!({"id": "supervisor", "typeId": "core.orchestrator.supervisor", "config": {
        "route": "fake/fake-model",
        "goal": "Answer the question: {{variables.question}}",
        "instructions": "Research first, then write.",
        "workers": [
            {"id": "sm-research", "description": "finds facts on a topic", "inputSchema": {"topic": "string"}},
            {"id": "sm-write", "description": "writes the answer from facts", "inputSchema": {"facts": "string"}}
        ],
        "successCriteria": [{"key": "answered", "description": "the question has a written answer"}]
    }})
}

/// The supervisor workflow, the gathering one ([`GATHERING`]) and the two workers.
pub fn workflows() -> Vec<Value> {
    let question = json!([{"name": "question", "type": "string", "defaultValue": "why is the sky blue?"}]);
    let lookup = json!({"name": "lookup", "description": "Finds facts on a topic.",
                        "inputSchema": {"type": "object", "additionalProperties": false,
                                        "properties": {"topic": {"type": "string"}}, "required": ["topic"]},
                        "workflowId": "sm-research"});
    let gathering = json!({
        "id": GATHERING, "name": GATHERING, "version": "1", "variables": question,
        "nodes": [
            {"id": "gather", "typeId": "vendor.trellis.agent", "config": {
                "route": "fake/fake-model", "instructions": "Gather facts for: {{variables.question}}",
                "tools": [lookup], "maxTurns": 4}},
            supervisor_node(),
            {"id": "dispatch", "typeId": "core.dispatch", "config": {"fanOutPolicy": "sequential"}}
        ],
        "edges": [{"id": "e0", "sourceNodeId": "gather", "targetNodeId": "supervisor"},
                  {"id": "e1", "sourceNodeId": "supervisor", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "supervisor"}]
    });
    let supervisor = json!({
        "id": SUPERVISOR, "name": SUPERVISOR, "version": "1",
        "variables": question,
        "nodes": [
            supervisor_node(),
            {"id": "dispatch", "typeId": "core.dispatch", "config": {"fanOutPolicy": "sequential"}}
        ],
        "edges": [{"id": "e1", "sourceNodeId": "supervisor", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "supervisor"}]
    });
    vec![
        supervisor,
        worker("sm-research", "topic", "Finds facts on a topic."),
        worker("sm-write", "facts", "Writes an answer from facts."),
        gathering,
    ]
}

/// A `next-worker` answer for `worker` with `inputs` (one object) and `confidence`.
pub fn dispatch(worker: &str, inputs: Value, confidence: f64) -> Value {
    json!({"decision": {"kind": "next-worker", "nextWorkerIds": [worker],
                        "nextWorkerInputs": [inputs.to_string()], "confidence": confidence}})
}

/// A `terminate` answer judging `answered` as `met`.
pub fn terminate(reason: &str, met: bool) -> Value {
    json!({"decision": {"kind": "terminate", "reason": reason, "confidence": 0.95,
                        "successCriteria": [{"key": "answered", "met": met}]}})
}

/// One scenario: a script for [`crate::script::Runner`] (its `expect` holds the event type
/// sequence) and the fake model's answers, in order.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The script.
    pub script: Value,
    /// The fake's replies (script them before the run).
    pub replies: Vec<ModelReply>,
}

/// The event types of a supervisor tick whose answer is recorded.
const TICK: [&str; 4] = ["node.started", "provider.usage", "runOrchestrator.decided", "node.completed"];
/// The event types of a dispatch that runs one worker to completion.
const ONE_WORKER: [&str; 3] = ["node.started", "node.dispatched", "node.completed"];

fn sequence(parts: &[&[&str]]) -> Value {
    json!(parts.iter().flat_map(|part| part.iter()).collect::<Vec<_>>())
}

/// The scenarios.
pub fn scenarios() -> Vec<Scenario> {
    let research = dispatch("sm-research", json!({"topic": "Rayleigh scattering"}), 0.9);
    let write = dispatch("sm-write", json!({"facts": "short wavelengths scatter more"}), 0.85);
    let usage = |reply: ModelReply| reply.usage(100, 20);
    let lookup = |topic: &str| ModelReply::tool_calls([ToolCallReply::new("lookup", json!({"topic": topic}))]);
    vec![
        Scenario {
            script: json!({"id": "sm-dispatch", "workflowId": SUPERVISOR, "expect": {
                "status": "completed", "decidedKinds": ["next-worker", "next-worker", "terminate"], "childCount": 2,
                "eventTypes": sequence(&[&["run.started"], &TICK, &ONE_WORKER, &TICK, &ONE_WORKER, &TICK,
                                         &["node.started", "node.completed", "run.completed"]]),
            }}),
            replies: vec![
                usage(ModelReply::json(&research)),
                usage(ModelReply::json(&write)),
                usage(ModelReply::json(&terminate("goal-reached", true))),
            ],
        },
        Scenario {
            script: json!({"id": "sm-low-confidence", "workflowId": SUPERVISOR,
                "steps": [{"await": "waiting-approval", "currentNodeId": "supervisor"},
                          {"resolve": "supervisor", "via": "run", "resumeValue": {"action": "accept"}}],
                "expect": {"status": "completed", "decidedKinds": ["next-worker", "terminate"], "childCount": 1,
                           "eventTypes": sequence(&[
                               &["run.started", "node.started", "provider.usage", "node.suspended",
                                 "interrupt.requested", "interrupt.resolved", "node.resumed",
                                 "runOrchestrator.decided", "node.completed"],
                               &ONE_WORKER, &TICK, &["node.started", "node.completed", "run.completed"]])}}),
            replies: vec![
                usage(ModelReply::json(&dispatch("sm-research", json!({"topic": "sky"}), 0.4))),
                usage(ModelReply::json(&terminate("goal-reached", true))),
            ],
        },
        Scenario {
            script: json!({"id": "sm-invalid", "workflowId": SUPERVISOR, "expect": {
                "status": "failed", "errorCode": "response_schema_invalid", "decidedKinds": [],
                "eventTypes": ["run.started", "node.started", "provider.usage", "provider.usage", "node.failed",
                               "run.failed"],
            }}),
            replies: vec![
                usage(ModelReply::json(&dispatch("sm-nobody", json!({}), 0.9))),
                usage(ModelReply::text("I would rather not decide.")),
            ],
        },
        Scenario {
            script: json!({"id": "sm-give-up", "workflowId": SUPERVISOR, "expect": {
                "status": "completed", "decidedKinds": ["terminate"], "childCount": 0,
                "eventTypes": sequence(&[&["run.started"], &TICK, &["node.started", "node.completed", "run.completed"]]),
            }}),
            replies: vec![usage(ModelReply::json(&terminate("no sources found", false)))],
        },
        Scenario {
            script: json!({"id": "sm-budget", "workflowId": SUPERVISOR,
                "request": {"configurable": {"budget": {"maxTokens": 200}}},
                "expect": {"status": "failed", "errorCode": "budget_exhausted", "decidedKinds": ["next-worker"],
                           "eventTypes": sequence(&[
                               &["run.started", "budget.reserved", "node.started", "provider.usage", "budget.consumed",
                                 "runOrchestrator.decided", "node.completed"],
                               &ONE_WORKER,
                               &["node.started", "provider.usage", "budget.consumed", "budget.threshold.crossed",
                                 "budget.exhausted", "cap.breached", "node.cancelled", "run.failed"]])}}),
            replies: vec![usage(ModelReply::json(&research)), usage(ModelReply::json(&write))],
        },
        Scenario {
            script: json!({"id": "sm-tool-budget", "workflowId": GATHERING,
                "request": {"configurable": {"budget": {"maxToolCalls": 1}}},
                "expect": {"status": "failed", "errorCode": "budget_exhausted", "decidedKinds": [], "childCount": 1,
                           "eventTypes": [
                               "run.started", "budget.reserved", "node.started", "provider.usage",
                               "agent.toolCalled", "budget.consumed", "budget.threshold.crossed", "node.dispatched",
                               "agent.toolReturned", "provider.usage", "agent.toolCalled", "budget.consumed",
                               "budget.exhausted", "cap.breached", "node.cancelled", "run.failed"]}}),
            replies: vec![usage(lookup("Rayleigh scattering")), usage(lookup("ozone"))],
        },
    ]
}
