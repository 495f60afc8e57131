//! `vendor.trellis.agent`'s executor: one step of the agent loop per attempt (the loop and
//! its state are the engine's, see `trellis_core::engine` and `docs/agents.md`).
//!
//! - `step.kind: "model"`: one model turn through `core.ai.callPrompt`'s machinery (the
//!   host's providers, policy, BYOK key resolution, usage reported as `provider.usage`, the
//!   error codes of [`super::provider`]) with the node's tools and the transcript
//!   (`request.messages`). Tool turns are never streamed. A final answer (no tool calls)
//!   with a `responseSchema` is validated like callPrompt's (one repair turn, then
//!   `response_schema_invalid`). Outputs: `{text, data?, toolCalls[{id, name, arguments}],
//!   reasoning?, finishReason, model, provider, usage}`.
//! - `step.kind: "http"`: one HTTP tool call through `core.http.request` itself (the same
//!   renderer, SSRF-guarded client, checks and codes); the call's arguments are the
//!   templates' `inputs`. The attempt always succeeds with the tool's outcome — `{status:
//!   "ok", result: {status, body}}` or `{status: "error", error: {code, message, details?}}`
//!   — so a failing tool is reported to the model, not retried by the engine.
//!
//! Registration checks (beyond [`trellis_core::nodes::agent::AgentConfig::parse`]): the
//! model settings as callPrompt checks them, each tool's `inputSchema` in the Tier-1 subset,
//! each `http` config by the `core.http.request` checker (`config.auth` is refused: the
//! node's `credentialsRef` is the model's key).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, ActivityCall, ActivityError, ActivityResult, NoProgress, ProgressSink};
use trellis_core::ai::mock::MockProvider;
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::agent::{AgentConfig, ToolTransport, TYPE_ID};
use trellis_core::nodes::NodeContext;
use trellis_core::run::RunError;

use super::identity::SemanticRequest;
use super::provider::{Invocation, Turn};
use super::{bad_request, mock, node, outputs, schema, CallPromptActivity, Prepared};
use crate::http::{self, HttpRequestActivity};

/// The prompt a node without `prompt` is prepared with; replaced by the inputs as JSON.
const INPUTS_PROMPT: &str = "(the node's inputs)";

/// The `core.http.request` code of a destination the SSRF guard refuses.
const EGRESS_REFUSED_CODE: &str = "http_url_rejected";
/// What the model is told of such a refusal (no resolved address, no reason).
const EGRESS_REFUSED_MESSAGE: &str = "destination refused by the host's egress policy";

/// The `vendor.trellis.agent` executor.
#[derive(Debug, Clone)]
pub struct AgentActivity {
    prompt: Arc<CallPromptActivity>,
    http: Arc<HttpRequestActivity>,
}

impl AgentActivity {
    /// An executor making model turns as `prompt` does and HTTP tool calls as `http` does.
    pub fn new(prompt: CallPromptActivity, http: HttpRequestActivity) -> Self {
        Self { prompt: Arc::new(prompt), http: Arc::new(http) }
    }
}

/// The node's model settings as a `core.ai.callPrompt` config.
fn prompt_config(config: &Map<String, Value>) -> Map<String, Value> {
    let mut prompt = Map::new();
    if let Some((provider, model)) = config.get("route").and_then(Value::as_str).and_then(|r| r.split_once('/')) {
        prompt.insert("provider".into(), json!(provider));
        prompt.insert("model".into(), json!(model));
    }
    for (from, to) in [
        ("provider", "provider"),
        ("model", "model"),
        ("instructions", "systemPrompt"),
        ("prompt", "prompt"),
        ("responseSchema", "responseSchema"),
        ("temperature", "temperature"),
        ("maxTokens", "maxTokens"),
        ("timeoutMs", "timeoutMs"),
    ] {
        if let Some(value) = config.get(from).filter(|value| !value.is_null()) {
            prompt.insert(to.into(), value.clone());
        }
    }
    prompt.entry("prompt").or_insert_with(|| json!(INPUTS_PROMPT));
    prompt
}

/// A callPrompt check message in the agent's field names.
fn renamed(message: String) -> String {
    message.replace("config.systemPrompt", "config.instructions")
}

fn error_object(error: &ActivityError) -> Value {
    let mut object = json!({ "code": error.code, "message": error.message });
    if let Some(details) = &error.details {
        object["details"] = details.clone();
    }
    object
}

#[async_trait]
impl Activity for AgentActivity {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        let parsed = AgentConfig::parse(config).map_err(ConfigIssue::Invalid)?;
        let model = node::parse(&prompt_config(config)).map_err(|message| ConfigIssue::Invalid(renamed(message)))?;
        if self.prompt.names_unserved_bedrock(&model) {
            return Err(ConfigIssue::Capability(super::BEDROCK_CAPABILITY));
        }
        for (index, tool) in parsed.tools.iter().enumerate() {
            let at = format!("config.tools[{index}]");
            schema::check_tier1(&tool.input_schema).map_err(|rule| {
                ConfigIssue::Invalid(format!("{at}.{}", rule.replacen("responseSchema", "inputSchema", 1)))
            })?;
            if let ToolTransport::Http(http) = &tool.transport {
                http::config::parse(http)
                    .map_err(|message| ConfigIssue::Invalid(message.replacen("config.", &format!("{at}.http."), 1)))?;
                if http.get("auth").is_some_and(|auth| !auth.is_null()) {
                    return Err(ConfigIssue::Invalid(format!(
                        "{at}.http.auth is not supported: the node's credentialsRef is its model key"
                    )));
                }
            }
        }
        Ok(())
    }

    /// A model turn has no side effect at the provider; an HTTP tool step never fails the
    /// attempt (its errors go to the model) and a failed one (a lost worker, a heartbeat
    /// timeout) is never retried by the engine, so the node's retries are model retries.
    fn idempotent(&self, _config: &Map<String, Value>) -> bool {
        true
    }

    fn model_call(&self) -> bool {
        true
    }

    fn attempt_timeout_ms(&self, config: &Map<String, Value>) -> u64 {
        node::parse(&prompt_config(config)).map_or(node::DEFAULT_TIMEOUT_MS, |parsed| parsed.timeout_ms)
    }

    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError> {
        let parsed =
            AgentConfig::parse(context.config).map_err(|message| RunError::new("validation_error", message))?;
        let config = prompt_config(context.config);
        let prompt_context = NodeContext {
            node_id: context.node_id,
            config: &config,
            inputs: context.inputs.clone(),
            variables: context.variables,
            now: context.now,
            configurable: context.configurable,
            mocks_allowed: context.mocks_allowed,
        };
        let mut request = node::prepare(self.prompt.providers(), &prompt_context).map_err(|mut error| {
            error.message = renamed(error.message);
            error
        })?;
        if config.get("prompt") == Some(&json!(INPUTS_PROMPT)) {
            let inputs = Value::Object(context.inputs.clone()).to_string();
            if let Some(last) = request["messages"].as_array_mut().and_then(|messages| messages.last_mut()) {
                last["content"] = json!(inputs);
            }
            let key = SemanticRequest {
                provider: request["provider"].as_str().unwrap_or_default(),
                model: request["model"].as_str().unwrap_or_default(),
                messages: request["messages"].as_array().map_or(&[], Vec::as_slice),
                temperature: request.pointer("/params/temperature").and_then(Value::as_f64),
                max_output_tokens: request.pointer("/params/maxTokens").and_then(Value::as_u64),
                response_format: request.get("responseSchema"),
            }
            .key();
            request["requestKey"] = json!(key);
        }
        request["stream"] = json!(false);
        request["tools"] = Value::Array(parsed.tools.iter().map(|tool| tool.definition()).collect());
        request["step"] = json!({ "kind": "model", "turn": 1 });
        Ok(request)
    }

    async fn execute(&self, call: &ActivityCall, progress: &dyn ProgressSink) -> ActivityResult {
        match call.request.pointer("/step/kind").and_then(Value::as_str) {
            Some("http") => Ok(self.http_tool(call).await),
            _ => self.model_turn(call, progress).await,
        }
    }
}

impl AgentActivity {
    async fn model_turn(&self, call: &ActivityCall, progress: &dyn ProgressSink) -> ActivityResult {
        let prepared = Prepared::read(&call.request)?;
        let tools = call.request.get("tools").and_then(Value::as_array).cloned().unwrap_or_default();
        let turn = call.request.pointer("/step/turn").and_then(Value::as_u64).unwrap_or(1);
        let deadline = Instant::now() + Duration::from_millis(call.timeout_ms);
        if let Some(raw) = &prepared.mock {
            // The mock providers answer text only: the turn is final.
            let mock = MockProvider::parse(raw).map_err(|_| bad_request("the run's mock provider does not parse"))?;
            let answer = mock::answer(&mock, false, progress).await?;
            let data = prepared.schema.as_ref().and_then(|schema| schema::read_answer(schema, &answer.text).ok());
            return Ok(turn_outputs(&answer, mock::PROVIDER, &prepared.model, data));
        }
        let (provider, model_entry) = self.prompt.route(&prepared, call)?;
        let key = self.prompt.key(call, provider).await?;
        // Each turn is its own logical call at the provider.
        let idempotency_key = format!("{}-t{turn}", call.idempotency_key);
        // §6.4: each turn's identity is over the messages and tools it actually sends.
        let request_key = SemanticRequest {
            provider: &prepared.provider,
            model: &prepared.model,
            messages: &prepared.messages,
            temperature: prepared.temperature,
            max_output_tokens: prepared.max_tokens,
            response_format: prepared.schema.as_ref(),
        }
        .key_with_tools(&tools);
        let invocation = Invocation {
            provider,
            key: key.as_deref(),
            turn: Turn {
                model: &prepared.model,
                messages: &prepared.messages,
                temperature: prepared.temperature,
                max_tokens: prepared.max_tokens,
                schema: prepared.schema.as_ref(),
                tools: &tools,
            },
            stream: false,
            idempotency_key: &idempotency_key,
            request_key: &request_key,
            attempt: call.attempt,
            deadline,
        };
        let answer = self.prompt.invoke(&invocation, model_entry, progress).await?;
        let Some(schema) = prepared.schema.as_ref().filter(|_| answer.tool_calls.is_empty()) else {
            return Ok(turn_outputs(&answer, &provider.id, &prepared.model, None));
        };
        let violations = match schema::read_answer(schema, &answer.text) {
            Ok(data) => return Ok(turn_outputs(&answer, &provider.id, &prepared.model, Some(data))),
            Err(violations) => violations,
        };
        let repaired = self.prompt.repair_turn(&invocation, model_entry, &answer.text, &violations, progress).await?;
        match schema::read_answer(schema, &repaired.text) {
            Ok(data) => Ok(turn_outputs(&repaired, &provider.id, &prepared.model, Some(data))),
            Err(violations) => Err(super::schema_invalid(violations)),
        }
    }

    /// One HTTP tool call; its failure is the outcome, not the attempt's.
    async fn http_tool(&self, call: &ActivityCall) -> Map<String, Value> {
        let step = &call.request["step"];
        let started = Instant::now();
        let empty = Map::new();
        let config = step.get("http").and_then(Value::as_object).unwrap_or(&empty);
        let inputs = step.get("arguments").and_then(Value::as_object).cloned().unwrap_or_default();
        let context = NodeContext {
            node_id: &call.node_id,
            config,
            inputs,
            variables: &empty,
            now: 0,
            configurable: None,
            mocks_allowed: false,
        };
        let outcome = match self.http.prepare(&context) {
            Err(error) => {
                let mut object = json!({ "code": error.code, "message": error.message });
                if let Some(details) = error.details {
                    object["details"] = details;
                }
                Err(object)
            }
            Ok(request) => {
                let call_id = step.get("callId").and_then(Value::as_str).unwrap_or_default();
                let tool_call = ActivityCall {
                    request,
                    timeout_ms: self.http.attempt_timeout_ms(config).min(call.timeout_ms),
                    idempotency_key: format!("{}-{call_id}", call.idempotency_key),
                    credentials_ref: None,
                    attempt: 0,
                    ..call.clone()
                };
                match self.http.execute(&tool_call, &NoProgress).await {
                    Ok(outputs) => Ok(json!({ "status": outputs.get("status"), "body": outputs.get("body") })),
                    // The model is never told the address the guard resolved.
                    Err(error) if error.code == EGRESS_REFUSED_CODE => {
                        Err(json!({ "code": error.code, "message": EGRESS_REFUSED_MESSAGE }))
                    }
                    Err(error) => Err(error_object(&error)),
                }
            }
        };
        let mut outputs = Map::new();
        match outcome {
            Ok(result) => {
                outputs.insert("status".into(), json!("ok"));
                outputs.insert("result".into(), result);
            }
            Err(error) => {
                outputs.insert("status".into(), json!("error"));
                outputs.insert("error".into(), error);
            }
        }
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        outputs.insert("durationMs".into(), json!(duration_ms));
        outputs
    }
}

/// A model turn's outputs: callPrompt's, with the tool calls and the reasoning.
fn turn_outputs(
    answer: &super::provider::Answer,
    provider: &str,
    model: &str,
    data: Option<Value>,
) -> Map<String, Value> {
    let mut turn = outputs(answer, provider, model, data);
    turn.insert("toolCalls".into(), Value::Array(answer.tool_calls.iter().map(|call| call.to_value()).collect()));
    if let Some(reasoning) = &answer.reasoning {
        turn.insert("reasoning".into(), json!(reasoning));
    }
    turn
}

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;
