//! `core.ai.callPrompt`'s node config, its registration checks, and the request `prepare`
//! renders.
//!
//! Config: `provider?` (a configured id; default: the `default` provider or the only one),
//! `model?` (default: the provider's first model), `systemPrompt?`, `messages?` (`[{role:
//! system|user|assistant, content}]`), `prompt?` (one user message after them),
//! `temperature?` (0..=2), `maxTokens?` (≥ 1), `responseSchema?` (Tier-1 subset),
//! `promptId?`, `stream?` / `expectsStreaming?`, `timeoutMs?` (1..=600000, default 120000).
//! The run's `configurable.model`, `.temperature` and `.maxTokens` override the node's.
//! Unknown fields are ignored. Prompts and message contents render `{{inputs.x}}` /
//! `{{variables.x}}`.
//!
//! The prepared request: `{provider, model, messages, params{temperature?, maxTokens?},
//! responseSchema?, stream, requestKey, mock?}` — never a key (keys are resolved inside
//! each attempt).

use serde_json::{json, Map, Value};
use trellis_core::activity::template::{self, Encoding, Scope};
use trellis_core::ai::mock::MockProvider;
use trellis_core::nodes::NodeContext;
use trellis_core::run::RunError;

use super::config::Providers;
use super::identity::SemanticRequest;
use super::schema;

/// The default per-attempt timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// The largest per-attempt timeout.
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// Message roles.
pub const ROLES: [&str; 3] = ["system", "user", "assistant"];

/// A parsed node config.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// `provider`.
    pub provider: Option<String>,
    /// `model`.
    pub model: Option<String>,
    /// `systemPrompt`.
    pub system_prompt: Option<String>,
    /// `messages` as `(role, content)`.
    pub messages: Vec<(String, String)>,
    /// `prompt`.
    pub prompt: Option<String>,
    /// `temperature`.
    pub temperature: Option<f64>,
    /// `maxTokens`.
    pub max_tokens: Option<u64>,
    /// `responseSchema`.
    pub response_schema: Option<Value>,
    /// `promptId`.
    pub prompt_id: Option<String>,
    /// `stream` / `expectsStreaming`.
    pub stream: bool,
    /// `timeoutMs`.
    pub timeout_ms: u64,
}

fn optional_string(config: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if !text.is_empty() => Ok(Some(text.clone())),
        Some(_) => Err(format!("config.{key} must be a non-empty string")),
    }
}

fn check_template(text: &str, field: &str) -> Result<(), String> {
    template::check_string(text).map_err(|error| format!("config.{field}: {}", error.message))
}

/// A `temperature` value: a number from 0 to 2.
pub fn temperature(value: &Value, field: &str) -> Result<f64, String> {
    value.as_f64().filter(|t| (0.0..=2.0).contains(t)).ok_or_else(|| format!("{field} must be a number from 0 to 2"))
}

/// A `maxTokens` value: an integer ≥ 1.
pub fn max_tokens(value: &Value, field: &str) -> Result<u64, String> {
    value.as_u64().filter(|n| *n >= 1).ok_or_else(|| format!("{field} must be an integer of at least 1"))
}

/// Parses and checks a node's config (the registration check); the message names the
/// field and the rule.
pub fn parse(config: &Map<String, Value>) -> Result<NodeConfig, String> {
    let provider = optional_string(config, "provider")?;
    let model = optional_string(config, "model")?;
    let system_prompt = optional_string(config, "systemPrompt")?;
    if let Some(text) = &system_prompt {
        check_template(text, "systemPrompt")?;
    }
    let prompt = optional_string(config, "prompt")?;
    if let Some(text) = &prompt {
        check_template(text, "prompt")?;
    }
    let mut messages = Vec::new();
    match config.get("messages") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                let field = format!("messages[{index}]");
                let object =
                    item.as_object().ok_or_else(|| format!("config.{field} must be an object {{role, content}}"))?;
                let role = object
                    .get("role")
                    .and_then(Value::as_str)
                    .filter(|role| ROLES.contains(role))
                    .ok_or_else(|| format!("config.{field}.role must be one of {ROLES:?}"))?;
                let content = object
                    .get("content")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("config.{field}.content must be a string"))?;
                check_template(content, &format!("{field}.content"))?;
                messages.push((role.to_owned(), content.to_owned()));
            }
        }
        Some(_) => return Err("config.messages must be an array of {role, content}".to_owned()),
    }
    let temperature =
        config.get("temperature").filter(|v| !v.is_null()).map(|v| temperature(v, "config.temperature")).transpose()?;
    let max_tokens =
        config.get("maxTokens").filter(|v| !v.is_null()).map(|v| max_tokens(v, "config.maxTokens")).transpose()?;
    let response_schema = match config.get("responseSchema") {
        None | Some(Value::Null) => None,
        Some(schema) => {
            schema::check_tier1(schema).map_err(|rule| format!("config.{rule}"))?;
            Some(schema.clone())
        }
    };
    let prompt_id = optional_string(config, "promptId")?;
    let mut stream = false;
    for key in ["stream", "expectsStreaming"] {
        match config.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Bool(flag)) => stream |= *flag,
            Some(_) => return Err(format!("config.{key} must be a boolean")),
        }
    }
    let timeout_ms = crate::http::config::timeout_ms(config, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)?;
    if prompt.is_none() && messages.is_empty() && prompt_id.is_none() {
        return Err("config needs prompt, messages or promptId".to_owned());
    }
    Ok(NodeConfig {
        provider,
        model,
        system_prompt,
        messages,
        prompt,
        temperature,
        max_tokens,
        response_schema,
        prompt_id,
        stream,
        timeout_ms,
    })
}

fn run_error(code: &str, message: impl Into<String>, details: Value) -> RunError {
    RunError { code: code.to_owned(), message: message.into(), details: Some(details) }
}

/// Renders the prepared request (see the module docs).
pub fn prepare(providers: &Providers, context: &NodeContext<'_>) -> Result<Value, RunError> {
    let config = parse(context.config).map_err(|message| RunError::new("validation_error", message))?;
    let configurable = context.configurable.and_then(Value::as_object);
    let overridden = |key: &str| configurable.and_then(|c| c.get(key)).filter(|v| !v.is_null());
    let validation = |message: String, field: &str| run_error("validation_error", message, json!({ "field": field }));

    let mock = MockProvider::of_run(context.configurable);
    if mock.is_some() && !context.mocks_allowed {
        return Err(run_error(
            "mock_provider_forbidden",
            "this run may not use a mock provider",
            json!({ "field": "configurable.mockProvider" }),
        ));
    }

    let scope = Scope::new(&context.inputs, context.variables);
    let render = |text: &str, pointer: &str| {
        template::render_string(text, &scope, Encoding::Plain).map_err(|error| error.prefixed(pointer).to_run_error())
    };
    let mut messages = Vec::new();
    if let Some(system) = &config.system_prompt {
        messages.push(json!({ "role": "system", "content": render(system, "/config/systemPrompt")? }));
    }
    for (index, (role, content)) in config.messages.iter().enumerate() {
        let content = render(content, &format!("/config/messages/{index}/content"))?;
        messages.push(json!({ "role": role, "content": content }));
    }
    if let Some(prompt) = &config.prompt {
        messages.push(json!({ "role": "user", "content": render(prompt, "/config/prompt")? }));
    }
    let has_prompt = config.prompt.is_some() || !config.messages.is_empty();
    if !has_prompt && mock.is_none() {
        let id = config.prompt_id.as_deref().unwrap_or_default();
        return Err(run_error(
            "prompt_not_found",
            format!("prompt `{id}` is not in this host's prompt registry (no prompts are registered)"),
            json!({ "promptId": id }),
        ));
    }

    let temperature = match overridden("temperature") {
        Some(value) => Some(
            temperature(value, "configurable.temperature").map_err(|m| validation(m, "configurable.temperature"))?,
        ),
        None => config.temperature,
    };
    let max_tokens = match overridden("maxTokens") {
        Some(value) => {
            Some(max_tokens(value, "configurable.maxTokens").map_err(|m| validation(m, "configurable.maxTokens"))?)
        }
        None => config.max_tokens,
    };
    let run_model = match overridden("model") {
        Some(Value::String(model)) if !model.is_empty() => Some(model.clone()),
        Some(_) => {
            return Err(validation("configurable.model must be a non-empty string".to_owned(), "configurable.model"))
        }
        None => None,
    };

    let (provider, model) = match &mock {
        Some(mock) => {
            let mock_model = match mock {
                MockProvider::StreamText { model, .. } | MockProvider::UsageOnly { model, .. } => model.clone(),
                MockProvider::Error { .. } => "mock-error-v1".to_owned(),
            };
            (super::mock::PROVIDER.to_owned(), mock_model)
        }
        None => {
            let provider = match &config.provider {
                Some(id) => providers.get(id).ok_or_else(|| {
                    run_error(
                        "provider_not_supported",
                        format!("provider `{id}` is not configured on this host"),
                        json!({ "provider": id }),
                    )
                })?,
                None => providers.default_provider().ok_or_else(|| {
                    run_error(
                        "provider_not_supported",
                        "the node names no provider and this host has no default provider",
                        json!({ "provider": null }),
                    )
                })?,
            };
            let model =
                run_model.or_else(|| config.model.clone()).or_else(|| provider.models.first().map(|m| m.id.clone()));
            let model = model.unwrap_or_default();
            if provider.model(&model).is_none() {
                return Err(run_error(
                    "model_not_supported",
                    format!("model `{model}` is not among provider `{}`'s models", provider.id),
                    json!({ "provider": provider.id, "model": model }),
                ));
            }
            (provider.id.clone(), model)
        }
    };

    let request_key = SemanticRequest {
        provider: &provider,
        model: &model,
        messages: &messages,
        temperature,
        max_output_tokens: max_tokens,
        response_format: config.response_schema.as_ref(),
    }
    .key();
    let mut params = Map::new();
    if let Some(temperature) = temperature {
        params.insert("temperature".into(), json!(temperature));
    }
    if let Some(max) = max_tokens {
        params.insert("maxTokens".into(), json!(max));
    }
    let mut request = Map::new();
    request.insert("provider".into(), json!(provider));
    request.insert("model".into(), json!(model));
    request.insert("messages".into(), Value::Array(messages));
    request.insert("params".into(), Value::Object(params));
    if let Some(schema) = &config.response_schema {
        request.insert("responseSchema".into(), schema.clone());
    }
    request.insert("stream".into(), json!(config.stream));
    request.insert("requestKey".into(), json!(request_key));
    if mock.is_some() {
        if let Some(raw) = configurable.and_then(|c| c.get("mockProvider")) {
            request.insert("mock".into(), raw.clone());
        }
    }
    Ok(Value::Object(request))
}
