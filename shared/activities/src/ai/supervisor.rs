//! The model-backed `core.orchestrator.supervisor` (see
//! [`trellis_core::orchestrator::model`]): each tick is one `core.ai.callPrompt`-style call —
//! the same providers, keys, policies, usage, streaming and one repair turn — whose messages
//! are the supervisor's prompt and whose `responseSchema` is the decision's Tier-1 answer
//! schema. The answer is checked beyond the schema too (`Decision::parse`, the worker
//! catalog, every success criterion judged) before the repair turn is spent; still invalid →
//! `response_schema_invalid`. The engine records the valid answer as the tick's decision.
//!
//! Registered with [`trellis_core::nodes::NodeRegistry::with_supervisor_model`]; it adds no
//! discovery block (`agents.orchestrator` is the engine's).

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use trellis_core::activity::template::{self, Encoding, Scope};
use trellis_core::activity::{Activity, ActivityCall, ActivityResult, ProgressSink};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::NodeContext;
use trellis_core::orchestrator::model::{self, ModelConfig, CONTEXT_INPUT};
use trellis_core::run::RunError;

use super::{node, CallPromptActivity};

/// The executor of a model-backed supervisor tick.
#[derive(Debug, Clone)]
pub struct SupervisorModelActivity {
    call: CallPromptActivity,
}

impl SupervisorModelActivity {
    /// A supervisor calling models through `call` (the host's `core.ai.callPrompt` executor:
    /// its providers, HTTP client and secrets).
    pub fn new(call: &CallPromptActivity) -> Self {
        Self { call: call.clone().with_answer_check(check_answer) }
    }
}

/// The decision checks beyond the schema, against the config the request carries.
fn check_answer(request: &Value, answer: &Value) -> Result<(), Vec<Value>> {
    let config = request.get("supervisor").and_then(Value::as_object).map(ModelConfig::parse);
    match config {
        Some(Ok(config)) => model::read_answer(&config, answer).map(drop),
        _ => Err(vec![json!({ "path": "/", "message": "the prepared request has no supervisor config" })]),
    }
}

fn parse(config: &Map<String, Value>) -> Result<ModelConfig, String> {
    let parsed = ModelConfig::parse(config)?;
    template::check_string(&parsed.goal).map_err(|error| format!("`goal`: {}", error.message))?;
    if let Some(instructions) = &parsed.instructions {
        template::check_string(instructions).map_err(|error| format!("`instructions`: {}", error.message))?;
    }
    Ok(parsed)
}

/// The `core.ai.callPrompt` config of one tick: the prompt comes in as the inputs `system`
/// and `user` (never re-read as templates), the answer schema as `responseSchema`.
fn call_config(config: &Map<String, Value>, parsed: &ModelConfig) -> Map<String, Value> {
    let mut call = Map::new();
    if let Some(provider) = &parsed.provider {
        call.insert("provider".into(), json!(provider));
    }
    if let Some(model) = &parsed.model {
        call.insert("model".into(), json!(model));
    }
    call.insert(
        "messages".into(),
        json!([{ "role": "system", "content": "{{inputs.system}}" }, { "role": "user", "content": "{{inputs.user}}" }]),
    );
    call.insert("responseSchema".into(), model::answer_schema(parsed));
    for key in ["temperature", "maxTokens", "stream", "timeoutMs"] {
        if let Some(value) = config.get(key) {
            call.insert(key.into(), value.clone());
        }
    }
    call
}

#[async_trait]
impl Activity for SupervisorModelActivity {
    fn type_id(&self) -> &'static str {
        trellis_core::model::graph::SUPERVISOR_TYPE_ID
    }

    /// The supervisor's own fields (templates in `goal` and `instructions` included), then
    /// `core.ai.callPrompt`'s check of the tick's call: its parameters and the provider this
    /// host serves (a Bedrock route on a host without Bedrock: `aiProviders.bedrock`).
    fn check(&self, node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        let parsed = parse(config).map_err(ConfigIssue::Invalid)?;
        self.call.check(node_id, &call_config(config, &parsed))
    }

    /// A decision call has no side effect at the provider (the engine records its answer).
    fn idempotent(&self, _config: &Map<String, Value>) -> bool {
        true
    }

    /// A decision call is cacheable: a rerun with the same request takes its decision.
    fn cacheable(&self, _config: &Map<String, Value>) -> bool {
        true
    }

    fn model_call(&self) -> bool {
        true
    }

    fn attempt_timeout_ms(&self, config: &Map<String, Value>) -> u64 {
        crate::http::config::timeout_ms(config, node::DEFAULT_TIMEOUT_MS, node::MAX_TIMEOUT_MS)
            .unwrap_or(node::DEFAULT_TIMEOUT_MS)
    }

    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError> {
        let mut parsed = parse(context.config).map_err(|message| RunError::new("validation_error", message))?;
        let scope = Scope::new(&context.inputs, context.variables);
        let render = |text: &str, field: &str| {
            template::render_string(text, &scope, Encoding::Plain)
                .map_err(|error| error.prefixed(&format!("/config/{field}")).to_run_error())
        };
        parsed.goal = render(&parsed.goal, "goal")?;
        parsed.instructions = parsed.instructions.as_deref().map(|text| render(text, "instructions")).transpose()?;
        let orchestration = context.inputs.get(CONTEXT_INPUT).cloned().unwrap_or_else(|| json!({ "tick": 1 }));
        let (system, user) = model::prompt(&parsed, &orchestration);
        let mut inputs = Map::new();
        inputs.insert("system".into(), json!(system));
        inputs.insert("user".into(), json!(user));
        let call = call_config(context.config, &parsed);
        let tick = NodeContext {
            node_id: context.node_id,
            config: &call,
            inputs,
            variables: context.variables,
            now: context.now,
            configurable: context.configurable,
            mocks_allowed: context.mocks_allowed,
        };
        let mut request = node::prepare(self.call.providers(), &tick)?;
        request["supervisor"] = Value::Object(context.config.clone());
        Ok(request)
    }

    async fn execute(&self, call: &ActivityCall, progress: &dyn ProgressSink) -> ActivityResult {
        self.call.execute(call, progress).await
    }
}

#[cfg(test)]
#[path = "supervisor_tests.rs"]
mod tests;
