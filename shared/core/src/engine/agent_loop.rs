//! The rows of `vendor.trellis.agent` ([`crate::nodes::agent`]): a bounded tool loop whose
//! state lives in the engine — in the node's activity request (`request.loop`), committed
//! with every step — and never in one long activity. Each step is one activity attempt of the
//! node (attempt numbers keep counting across steps, so every step has its own `Execute`
//! task) or one child run:
//!
//! 1. a model turn (`step.kind: "model"`, the activity calls the provider with the tool
//!    definitions and the transcript, `request.messages`); its usage goes through the usual
//!    `provider.usage` / budget rows, its failures through the node's retry policy (counted
//!    per step). `agent.reasoned` when the answer carries reasoning text (cut to discovery's
//!    `agents.reasoning.tokenLimit` words);
//! 2. per tool call of the answer, in order: `agent.toolCalled` (host-minted `callId`,
//!    `transport` `http` or — for a workflow tool — `native` with `toolTransport:
//!    "workflow"`), counted by `budget.maxToolCalls`; then an HTTP tool is an activity
//!    attempt (`step.kind: "http"`) and a workflow tool a child run the node waits for
//!    (`WaitingChild`, durable across restarts); its result (or error) is
//!    `agent.toolReturned` (caused by the call's event) and a `tool` message of the
//!    transcript (cut to [`MAX_RESULT_CHARS`]; the event's copy to [`MAX_OUTCOME_BYTES`], then
//!    `truncated: true`; the whole transcript kept under [`MAX_TRANSCRIPT_BYTES`] by eliding
//!    the oldest results). A tool the config does not name returns the error `unknown_tool`,
//!    arguments that are not an object or that its `inputSchema` refuses `invalid_arguments`
//!    (the call is not made), and calls past [`MAX_CALLS_PER_ANSWER`] of one answer
//!    `tool_call_limit`. A failed HTTP step (a lost worker, a heartbeat timeout) is the
//!    tool's error, never retried. Under `onExhaustion: interrupt` a call that would exceed
//!    `maxToolCalls` waits on the budget gate before it is made;
//! 3. the next model turn — until an answer has no tool calls: `agent.decided {agentId,
//!    decision, confidence?}` (the decision is the structured `data` when the node has a
//!    `responseSchema`, else the text; the confidence is `data.confidence`), the CP-1
//!    low-confidence suspension below the run's `escalationThreshold`, then `node.completed`
//!    with `{text, data?, turns, toolCalls, finishReason, model, provider}`.
//!
//! Other endings: an answer that still asks for tools after `maxTurns` turns fails the node
//! with `agent_max_turns` (`details: {maxTurns, turns, toolCalls}`, a failure route can take
//! it); a budget exhaustion ends it as every budget does (`cap.breached` + `run.failed
//! {budget_exhausted}`, or the approval gate under `onExhaustion: interrupt`). An immediate
//! pause holds the next step — a workflow tool's child run too — as a due retry timer (issued
//! on `:resume`). A saved state that does not read fails the node (`agent_state_invalid`).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::progress::Transition;
use super::{Effect, Verdict};
use crate::event::types;
use crate::nodes::agent::{self, AgentConfig, ToolTransport};
use crate::nodes::mock_agent::REASONING_TOKEN_LIMIT;
use crate::run::{NodeStatus, RunError, RunState, RunStatus};

/// The loop's state, kept at `request.loop`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct LoopState {
    /// Model turns answered.
    turns: u32,
    /// Tool calls made.
    tool_calls: u32,
    /// The first attempt number of the current step (its retries count from it).
    step_attempt: u32,
    /// The current answer's tool calls not made yet, `[{id, name, arguments}]`.
    pending: Vec<Value>,
    /// The tool call in flight.
    current: Option<CurrentCall>,
    /// The final outputs, while a low-confidence decision waits.
    outputs: Option<Map<String, Value>>,
    /// The next pending call waits on the tool-call budget gate (`onExhaustion: interrupt`):
    /// it is issued when the gate is accepted.
    gated: bool,
}

/// The tool call in flight.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CurrentCall {
    call_id: String,
    tool: String,
    provider_call_id: String,
    arguments: Value,
    /// The sequence of its `agent.toolCalled`.
    called: u64,
    started_at: u64,
}

/// The inputs of the child run a workflow tool starts: the call's arguments (when they are
/// an object).
pub fn tool_inputs(run: &RunState, node_id: &str) -> Map<String, Value> {
    run.nodes
        .get(node_id)
        .and_then(|node| node.activity.as_ref())
        .and_then(|progress| progress.request.pointer("/loop/current/arguments"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

impl Transition<'_> {
    /// Whether `node_id` is a `vendor.trellis.agent` activity node.
    pub(super) fn is_agent(&self, node_id: &str) -> bool {
        self.workflow.node(node_id).is_some_and(|node| node.type_id == agent::TYPE_ID)
            && self.workflow.activity(node_id).is_some()
    }

    /// The first attempt number of the agent's current step (0 for any other node): the
    /// retry policy counts a step's attempts from it.
    pub(super) fn step_base(&self, node_id: &str) -> u32 {
        if !self.is_agent(node_id) {
            return 0;
        }
        self.request(node_id).and_then(|request| read_loop(&request).ok()).map_or(0, |state| state.step_attempt)
    }

    /// The loop state in `request`; a state that does not read fails the node (a corrupt
    /// state must never restart the counts of turns and tool calls).
    fn loop_state(&mut self, node_id: &str, request: &Value) -> Option<LoopState> {
        match read_loop(request) {
            Ok(state) => Some(state),
            Err(message) => {
                self.fail_node(
                    node_id,
                    RunError::new(STATE_INVALID_CODE, format!("the agent's saved loop state does not read: {message}")),
                );
                None
            }
        }
    }

    fn request(&self, node_id: &str) -> Option<Value> {
        self.state.nodes.get(node_id).and_then(|node| node.activity.as_ref()).map(|progress| progress.request.clone())
    }

    fn store(&mut self, node_id: &str, mut request: Value, state: &LoopState) {
        request["loop"] = serde_json::to_value(state).unwrap_or(Value::Null);
        if let Some(progress) = self.node_mut(node_id).activity.as_mut() {
            progress.request = request;
        }
    }

    fn agent_config(&mut self, node_id: &str) -> Option<(AgentConfig, String)> {
        let definition = self.workflow.node(node_id)?;
        match AgentConfig::parse(&definition.config) {
            Ok(config) => {
                let agent_id = config.resolve_agent_id(definition.agent.as_ref(), node_id);
                Some((config, agent_id))
            }
            Err(message) => {
                self.fail_node(node_id, RunError::new("validation_error", message));
                None
            }
        }
    }

    /// A step of the agent `node_id` succeeded with `outputs`.
    pub(super) fn agent_step_done(&mut self, node_id: &str, outputs: Map<String, Value>) -> Verdict {
        let Some(request) = self.request(node_id) else { return Verdict::Stale };
        let Some((config, agent_id)) = self.agent_config(node_id) else { return Verdict::Applied };
        if request.pointer("/step/kind").and_then(Value::as_str) == Some("http") {
            let outcome = match outputs.get("status").and_then(Value::as_str) {
                Some("ok") => Ok(outputs.get("result").cloned().unwrap_or(Value::Null)),
                _ => Err(outputs.get("error").cloned().unwrap_or_else(|| {
                    json!({ "code": "tool_failed", "message": "the tool step reported neither a result nor an error" })
                })),
            };
            self.tool_returned(node_id, &config, &agent_id, outcome);
        } else {
            self.turn_done(node_id, &config, &agent_id, request, &outputs);
        }
        Verdict::Applied
    }

    /// A step of the agent `node_id` failed with `error`. An HTTP tool step is never retried
    /// (a retry would send its request again) and never fails the node: the error is the
    /// tool's result for the model. `None` for a model turn (the node's retry policy applies).
    pub(super) fn agent_step_failed(
        &mut self,
        node_id: &str,
        error: &crate::activity::ActivityError,
    ) -> Option<Verdict> {
        let request = self.request(node_id)?;
        if request.pointer("/step/kind").and_then(Value::as_str) != Some("http") {
            return None;
        }
        let Some((config, agent_id)) = self.agent_config(node_id) else { return Some(Verdict::Applied) };
        let mut object = json!({ "code": error.code, "message": error.message });
        if let Some(details) = &error.details {
            object["details"] = details.clone();
        }
        self.tool_returned(node_id, &config, &agent_id, Err(object));
        Some(Verdict::Applied)
    }

    fn turn_done(
        &mut self,
        node_id: &str,
        config: &AgentConfig,
        agent_id: &str,
        mut request: Value,
        outputs: &Map<String, Value>,
    ) {
        let Some(mut state) = self.loop_state(node_id, &request) else { return };
        state.turns += 1;
        let verbosity = self.state.configurable.as_ref().and_then(|c| c.get("reasoningVerbosity"));
        let reasoning = outputs.get("reasoning").and_then(Value::as_str).filter(|text| !text.is_empty());
        if let Some(reasoning) = reasoning.filter(|_| verbosity.and_then(Value::as_str) != Some("off")) {
            // Discovery's `agents.reasoning`: summaries of at most `tokenLimit` tokens, counted
            // as whitespace-separated words (a token is never longer than one).
            let words: Vec<&str> = reasoning.split_whitespace().collect();
            let reasoning = match words.get(..REASONING_TOKEN_LIMIT).filter(|_| words.len() > REASONING_TOKEN_LIMIT) {
                Some(kept) => kept.join(" "),
                None => reasoning.to_owned(),
            };
            let payload = json!({ "agentId": agent_id, "reasoning": reasoning, "verbosity": "summary" });
            self.emit(types::AGENT_REASONED, Some(node_id), payload);
        }
        let text = outputs.get("text").cloned().unwrap_or_else(|| json!(""));
        let calls = outputs.get("toolCalls").and_then(Value::as_array).cloned().unwrap_or_default();
        if calls.is_empty() {
            return self.decided(node_id, agent_id, request, state, outputs);
        }
        if state.turns >= config.max_turns {
            let mut error = RunError::new(
                agent::MAX_TURNS_CODE,
                format!("the agent still asked for tools after its maxTurns of {} model turns", config.max_turns),
            );
            error.details =
                Some(json!({ "maxTurns": config.max_turns, "turns": state.turns, "toolCalls": state.tool_calls }));
            return self.fail_node(node_id, error);
        }
        let mut calls = calls;
        let refused = calls.split_off(calls.len().min(MAX_CALLS_PER_ANSWER));
        if let Some(messages) = request.get_mut("messages").and_then(Value::as_array_mut) {
            let mut all = calls.clone();
            all.extend(refused.iter().cloned());
            messages.push(json!({ "role": "assistant", "content": text, "toolCalls": all }));
            // The calls over the per-answer limit are not made: the model is told so.
            for call in &refused {
                let error = json!({ "code": CALL_LIMIT_CODE, "message": format!(
                    "refused: one answer may ask for at most {MAX_CALLS_PER_ANSWER} tool calls; ask again in the next turn"
                ) });
                messages.push(json!({
                    "role": "tool", "toolCallId": call.get("id").cloned().unwrap_or_else(|| json!("")),
                    "name": call.get("name").cloned().unwrap_or_else(|| json!("")),
                    "content": json!({ "error": error }).to_string(),
                }));
            }
            compact(messages);
        }
        state.pending = calls;
        self.store(node_id, request, &state);
        self.next_step(node_id, config, agent_id);
    }

    /// The final answer: `agent.decided`, the CP-1 check, then completion.
    fn decided(
        &mut self,
        node_id: &str,
        agent_id: &str,
        request: Value,
        mut state: LoopState,
        answer: &Map<String, Value>,
    ) {
        let data = answer.get("data").cloned();
        let mut outputs = Map::new();
        outputs.insert("text".into(), answer.get("text").cloned().unwrap_or_else(|| json!("")));
        if let Some(data) = &data {
            outputs.insert("data".into(), data.clone());
        }
        outputs.insert("turns".into(), json!(state.turns));
        outputs.insert("toolCalls".into(), json!(state.tool_calls));
        for key in ["finishReason", "model", "provider"] {
            if let Some(value) = answer.get(key) {
                outputs.insert(key.into(), value.clone());
            }
        }
        let decision = data.clone().unwrap_or_else(|| outputs["text"].clone());
        let confidence = data
            .as_ref()
            .and_then(|data| data.get("confidence"))
            .and_then(Value::as_f64)
            .filter(|c| (0.0..=1.0).contains(c));
        let mut payload = json!({ "agentId": agent_id, "decision": decision });
        if let Some(confidence) = confidence {
            payload["confidence"] = json!(confidence);
        }
        self.emit(types::AGENT_DECIDED, Some(node_id), payload);
        if let Some(interrupt) = self.low_confidence(agent_id, confidence, &decision) {
            state.outputs = Some(outputs);
            self.store(node_id, request, &state);
            return self.suspend(node_id, interrupt);
        }
        self.agent_complete(node_id, outputs);
    }

    fn agent_complete(&mut self, node_id: &str, outputs: Map<String, Value>) {
        self.node_mut(node_id).activity = None;
        self.set_variable(node_id, Value::Object(outputs.clone()));
        self.complete_node(node_id, outputs, false);
    }

    /// A low-confidence decision of the agent was accepted: the node completes with the
    /// outputs it held.
    pub(super) fn agent_accepted(&mut self, node_id: &str) {
        let outputs =
            self.request(node_id).and_then(|request| read_loop(&request).ok()).and_then(|state| state.outputs);
        let outputs = outputs.unwrap_or_default();
        self.agent_complete(node_id, outputs);
    }

    /// The next step: the next pending tool call, else the next model turn.
    fn next_step(&mut self, node_id: &str, config: &AgentConfig, agent_id: &str) {
        let Some(mut request) = self.request(node_id) else { return };
        let Some(mut state) = self.loop_state(node_id, &request) else { return };
        if state.pending.is_empty() {
            state.current = None;
            request["step"] = json!({ "kind": "model", "turn": state.turns + 1 });
            return self.execute_step(node_id, request, state, true);
        }
        // `budget.maxToolCalls` under `onExhaustion: interrupt`: a call over the limit waits
        // on the gate before it is made (it is issued from the gate's acceptance).
        if self.budget_tool_call_gated(node_id) {
            state.gated = true;
            return self.store(node_id, request, &state);
        }
        let call = state.pending.remove(0);
        let index = state.tool_calls;
        state.tool_calls += 1;
        let call_id = self.call_id(node_id, index as usize);
        // The events' `toolName` is never empty, whatever the model sent.
        let name =
            call.get("name").and_then(Value::as_str).filter(|name| !name.is_empty()).unwrap_or("unnamed").to_owned();
        let arguments = call.get("arguments").cloned().unwrap_or_else(|| json!({}));
        let tool = config.tool(&name).cloned();
        let (transport, kind) = tool
            .as_ref()
            .map_or(("native", "unknown"), |tool| (tool.transport.event_transport(), tool.transport.name()));
        let called = self.state.next_sequence;
        let payload = json!({
            "agentId": agent_id, "toolName": name, "toolId": name, "callId": call_id,
            "inputs": arguments, "arguments": arguments, "transport": transport, "toolTransport": kind,
        });
        self.emit(types::AGENT_TOOL_CALLED, Some(node_id), payload);
        state.current = Some(CurrentCall {
            call_id: call_id.clone(),
            tool: name.clone(),
            provider_call_id: call.get("id").and_then(Value::as_str).unwrap_or_default().to_owned(),
            arguments: arguments.clone(),
            called,
            started_at: self.now,
        });
        self.store(node_id, request.clone(), &state);
        // `budget.maxToolCalls`: an exhaustion under `onExhaustion: fail` failed the run.
        if !self.budget_tool_called(node_id) {
            return;
        }
        if tool.is_some() && !arguments.is_object() {
            // E.g. OpenAI arguments text that did not parse: never called with `{}`.
            let error = json!({
                "code": "invalid_arguments",
                "message": format!("the arguments of tool `{name}` are not a JSON object"),
            });
            return self.tool_returned(node_id, config, agent_id, Err(error));
        }
        if let Some(Err(violations)) =
            tool.as_ref().map(|tool| crate::schema::check_against(&tool.input_schema, &arguments))
        {
            let error = json!({
                "code": "invalid_arguments",
                "message": format!("the arguments do not match the inputSchema of tool `{name}`"),
                "details": { "violations": violations.into_iter().take(10).collect::<Vec<_>>() },
            });
            return self.tool_returned(node_id, config, agent_id, Err(error));
        }
        match tool.map(|tool| tool.transport) {
            None => {
                let error = json!({ "code": "unknown_tool", "message": format!("the agent has no tool `{name}`") });
                self.tool_returned(node_id, config, agent_id, Err(error));
            }
            Some(ToolTransport::Http(http)) => {
                request["step"] =
                    json!({ "kind": "http", "callId": call_id, "tool": name, "http": http, "arguments": arguments });
                self.execute_step(node_id, request, state, false);
            }
            Some(ToolTransport::Workflow(workflow_id)) => {
                if self.state.status == RunStatus::Paused && !self.drains_current_node() {
                    // An immediate pause holds the child's start as it holds any step.
                    request["step"] = json!({ "kind": "workflow", "callId": call_id, "tool": name });
                    return self.hold_step(node_id, request, &state);
                }
                self.spawn_child(node_id, workflow_id, Some(index as usize));
            }
        }
    }

    /// Holds the step in `request` as a due retry timer of the node's current attempt
    /// (`:resume` fires it; [`Self::agent_held_due`] then starts it).
    fn hold_step(&mut self, node_id: &str, request: Value, state: &LoopState) {
        self.store(node_id, request, state);
        let due_at = self.now;
        let node = self.node_mut(node_id);
        let attempt = node.activity.as_ref().map_or(0, |progress| progress.attempt);
        node.status = NodeStatus::Retrying;
        node.wake_at = Some(due_at);
        let activation = node.activation;
        self.effects.push(Effect::Retry { node_id: node_id.to_owned(), activation, attempt, due_at });
    }

    /// A held step's timer fired: a held workflow tool starts its child run (`true`); any
    /// other step is the caller's (`false`).
    pub(super) fn agent_held_due(&mut self, node_id: &str) -> bool {
        let Some(request) = self.request(node_id) else { return false };
        if request.pointer("/step/kind").and_then(Value::as_str) != Some("workflow") {
            return false;
        }
        let Some(state) = self.loop_state(node_id, &request) else { return true };
        let Some((config, _)) = self.agent_config(node_id) else { return true };
        let tool = state.current.as_ref().and_then(|current| config.tool(&current.tool)).map(|tool| &tool.transport);
        let Some(ToolTransport::Workflow(workflow_id)) = tool.cloned() else { return false };
        self.node_mut(node_id).wake_at = None;
        let index = state.tool_calls.saturating_sub(1) as usize;
        self.spawn_child(node_id, workflow_id, Some(index));
        true
    }

    /// The tool-call budget gate was accepted: the held call is made now (`true`), or this
    /// is not an agent held on it (`false`).
    pub(super) fn agent_gate_resumed(&mut self, node_id: &str) -> bool {
        if !self.is_agent(node_id) {
            return false;
        }
        let Some(request) = self.request(node_id) else { return false };
        let Some(mut state) = self.loop_state(node_id, &request) else { return true };
        if !state.gated {
            return false;
        }
        state.gated = false;
        self.store(node_id, request, &state);
        let Some((config, agent_id)) = self.agent_config(node_id) else { return true };
        let node = self.node_mut(node_id);
        node.status = NodeStatus::Executing;
        node.wake_at = None;
        self.next_step(node_id, &config, &agent_id);
        true
    }

    /// Issues the step in `request` as the node's next attempt.
    fn execute_step(&mut self, node_id: &str, request: Value, mut state: LoopState, model_turn: bool) {
        let (activation, attempt) = {
            let node = self.node_mut(node_id);
            let attempt = node.activity.as_ref().map_or(0, |progress| progress.attempt + 1);
            if let Some(progress) = node.activity.as_mut() {
                progress.attempt = attempt;
            }
            node.status = NodeStatus::Executing;
            (node.activation, attempt)
        };
        state.step_attempt = attempt;
        self.store(node_id, request, &state);
        // A model turn is gated by the budget like any model call's first attempt.
        if model_turn && !self.budget_admits(node_id, 0) {
            return;
        }
        let due_at = self.now;
        if self.state.status == RunStatus::Paused && !self.drains_current_node() {
            // An immediate pause holds the loop: the step waits as a due retry timer does, and
            // `:resume` issues it.
            let node = self.node_mut(node_id);
            node.status = NodeStatus::Retrying;
            node.wake_at = Some(due_at);
            self.effects.push(Effect::Retry { node_id: node_id.to_owned(), activation, attempt, due_at });
            return;
        }
        self.effects.push(Effect::Execute { node_id: node_id.to_owned(), activation, attempt, due_at });
    }

    /// The tool call in flight returned `outcome` (a result, or an error object).
    fn tool_returned(&mut self, node_id: &str, config: &AgentConfig, agent_id: &str, outcome: Result<Value, Value>) {
        let Some(mut request) = self.request(node_id) else { return };
        let Some(mut state) = self.loop_state(node_id, &request) else { return };
        let Some(current) = state.current.take() else { return };
        let mut payload = json!({
            "agentId": agent_id, "toolName": current.tool, "toolId": current.tool, "callId": current.call_id,
            "durationMs": self.now.saturating_sub(current.started_at),
        });
        let content = match &outcome {
            Ok(result) => {
                let text = result.to_string();
                // The event keeps at most MAX_OUTCOME_BYTES of the result (then as a string).
                let shown = if text.len() > MAX_OUTCOME_BYTES {
                    payload["truncated"] = json!(true);
                    json!(cut_bytes(&text, MAX_OUTCOME_BYTES))
                } else {
                    result.clone()
                };
                payload["outcome"] = shown.clone();
                payload["result"] = shown;
                payload["status"] = json!("ok");
                text
            }
            Err(error) => {
                let text = json!({ "error": error }).to_string();
                payload["error"] = if text.len() > MAX_OUTCOME_BYTES {
                    payload["truncated"] = json!(true);
                    let message = error.get("message").and_then(Value::as_str).unwrap_or_default();
                    json!({ "code": error.get("code").cloned().unwrap_or_else(|| json!("tool_failed")),
                            "message": cut_bytes(message, MAX_OUTCOME_BYTES / 2) })
                } else {
                    error.clone()
                };
                payload["status"] = json!("error");
                text
            }
        };
        self.emit_caused(types::AGENT_TOOL_RETURNED, Some(node_id), payload, current.called);
        let content = cut(content, MAX_RESULT_CHARS);
        if let Some(messages) = request.get_mut("messages").and_then(Value::as_array_mut) {
            messages.push(json!({
                "role": "tool", "toolCallId": current.provider_call_id, "name": current.tool, "content": content,
            }));
            compact(messages);
        }
        self.store(node_id, request, &state);
        self.next_step(node_id, config, agent_id);
    }

    /// The child run of the agent's workflow tool ended.
    pub(super) fn agent_child_finished(
        &mut self,
        node_id: &str,
        child_run_id: &str,
        status: RunStatus,
        variables: &Map<String, Value>,
        error: Option<RunError>,
    ) -> Verdict {
        let Some((config, agent_id)) = self.agent_config(node_id) else { return Verdict::Applied };
        let node = self.node_mut(node_id);
        node.status = NodeStatus::Executing;
        node.child_status = Some(status);
        let outcome = if status == RunStatus::Completed {
            Ok(Value::Object(variables.clone()))
        } else {
            let error = error
                .unwrap_or_else(|| RunError::new("child_failed", format!("the child run ended {}", status.as_str())));
            Err(json!({
                "code": error.code, "message": error.message,
                "details": { "childRunId": child_run_id, "childStatus": status.as_str() },
            }))
        };
        self.tool_returned(node_id, &config, &agent_id, outcome);
        Verdict::Applied
    }
}

/// The most characters of one tool result the transcript keeps (the run's state holds the
/// transcript, and every later turn sends it).
pub const MAX_RESULT_CHARS: usize = 32 * 1024;

/// The most bytes the transcript (`request.messages`, sent with every turn and kept in the
/// run's state) may take: past it the oldest tool results, then the oldest assistant texts
/// and call arguments, are elided (the instructions and the first prompt are kept).
pub(super) const MAX_TRANSCRIPT_BYTES: usize = 128 * 1024;
/// The most bytes of a tool's result or error an `agent.toolReturned` carries (past it the
/// event has `truncated: true` and the cut JSON text).
pub(super) const MAX_OUTCOME_BYTES: usize = 16 * 1024;
/// The most tool calls of one answer that are made; the model is told the rest were refused.
pub(super) const MAX_CALLS_PER_ANSWER: usize = 16;
/// The tool error of a call over [`MAX_CALLS_PER_ANSWER`].
pub(super) const CALL_LIMIT_CODE: &str = "tool_call_limit";
/// The node error of a loop state that does not read.
pub(super) const STATE_INVALID_CODE: &str = "agent_state_invalid";
/// What replaces an elided tool result.
const ELIDED_RESULT: &str = "[elided by the host: this earlier tool result was removed to keep the transcript small]";
/// What replaces an elided assistant text.
const ELIDED_TEXT: &str = "[elided by the host to keep the transcript small]";

fn size(messages: &[Value]) -> usize {
    messages.iter().map(|message| message.to_string().len() + 1).sum()
}

/// Elides the oldest tool results, then the oldest assistant texts and call arguments,
/// until `messages` fit in [`MAX_TRANSCRIPT_BYTES`]; system and user messages are kept.
fn compact(messages: &mut [Value]) {
    let mut total = size(messages);
    for pass in 0..2 {
        for message in messages.iter_mut() {
            if total <= MAX_TRANSCRIPT_BYTES {
                return;
            }
            let before = message.to_string().len();
            match (pass, message.get("role").and_then(Value::as_str)) {
                (0, Some("tool")) if message["content"] != ELIDED_RESULT => message["content"] = json!(ELIDED_RESULT),
                (1, Some("assistant")) => {
                    if message["content"].as_str().is_some_and(|text| text.len() > ELIDED_TEXT.len()) {
                        message["content"] = json!(ELIDED_TEXT);
                    }
                    for call in message["toolCalls"].as_array_mut().into_iter().flatten() {
                        call["arguments"] = json!({ "elided": true });
                    }
                }
                _ => continue,
            }
            total = total - before + message.to_string().len();
        }
    }
}

/// `text` cut to at most `max` bytes (on a character boundary).
fn cut_bytes(text: &str, max: usize) -> String {
    let mut at = max.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text[..at].to_owned()
}

/// `text` cut to `max` characters, marked when cut.
fn cut(text: String, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}… [cut: the tool result is longer than {max} characters]", &text[..at]),
        None => text,
    }
}

/// The loop state at `request.loop` (the default before the first step stored one).
fn read_loop(request: &Value) -> Result<LoopState, String> {
    match request.get("loop") {
        None | Some(Value::Null) => Ok(LoopState::default()),
        Some(state) => serde_json::from_value(state.clone()).map_err(|error| error.to_string()),
    }
}
