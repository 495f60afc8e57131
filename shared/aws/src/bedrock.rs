//! Amazon Bedrock's Converse API behind `core.ai.callPrompt`'s [`ModelBackend`] hook: the
//! `bedrock` provider kind, served on the AWS backend only (the embedded binary carries no AWS
//! SDK). Everything around the call — policy, budgets, usage (`provider.usage`) and cost,
//! structured output and its repair turn, chunk batches, identity, retries — is the shared
//! `callPrompt` attempt's; this module only speaks Converse:
//!
//! - the request: system messages → `system` text blocks (with a `responseSchema`, one more
//!   block asking for only a JSON value that matches it), user/assistant messages →
//!   `messages` (consecutive messages of one role merged: Converse wants them alternating),
//!   `maxTokens` / `temperature` (capped at 1) → `inferenceConfig`; `X-Trellis-Request-Key`,
//!   `Idempotency-Key` and `Trellis-Attempt` ride along as headers (signed with the rest);
//! - auth: SigV4 with the host's credentials (the function's IAM role); no key, ever;
//! - the endpoint: the SDK's for the provider's `region` (default: the host's);
//!   `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` overrides it (how the tests reach the testkit's fake);
//! - the answer: text blocks joined, `stopReason` → `finishReason`, `usage` → token counts;
//!   a streaming node without tools calls `ConverseStream` instead, its text deltas batched
//!   into `output.chunk` reports like an HTTP stream's (with tools: Converse, one final
//!   batch);
//! - errors ([`service_error`]): the same stable codes and retry classes as the HTTP kinds
//!   (`ThrottlingException` → `provider_quota_exhausted`, retryable, `retryAfterMs` at
//!   least [`THROTTLE_RETRY_AFTER_MS`]; `ModelNotReadyException`, `ServiceUnavailable`,
//!   `InternalServer`, `ModelTimeout`, network failures, timeouts → `provider_unavailable`,
//!   retryable; `AccessDenied` and other credential refusals → `provider_auth_failed`;
//!   `Validation`, `ResourceNotFound`, `ModelError` → `provider_request_rejected`;
//!   `ServiceQuotaExceeded` → `provider_quota_exhausted`, not retryable). The SDK's own
//!   retries are off: the engine's retry policy owns them.
//!
//! Tool calling (the agent node's turns): the turn's tools go as `toolConfig.tools`
//! (`toolSpec {name, description, inputSchema.json}`); an assistant message's `toolCalls` as
//! `toolUse` blocks, a `tool` message as a user `toolResult` block (consecutive results in one
//! message); the answer's `toolUse` blocks come back as tool calls (finish `tool_calls`) and
//! its `reasoningContent` as reasoning.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_bedrockruntime::config::http::HttpResponse;
use aws_sdk_bedrockruntime::error::BuildError;
use aws_sdk_bedrockruntime::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_bedrockruntime::operation::converse::ConverseOutput;
use aws_sdk_bedrockruntime::types::error::ConverseStreamOutputError;
use aws_sdk_bedrockruntime::types::{
    ContentBlock, ContentBlockDelta, ConversationRole, ConverseOutput as Output, ConverseStreamOutput as StreamEvent,
    InferenceConfiguration, Message, ReasoningContentBlock, StopReason, SystemContentBlock, Tool, ToolConfiguration,
    ToolInputSchema, ToolResultBlock, ToolResultContentBlock, ToolSpecification, ToolUseBlock,
};
use aws_sdk_bedrockruntime::Client;
use aws_smithy_types::{Document, Number};
use serde_json::{json, Value};
use trellis_activities::ai::provider::{status_error, Answer, DeltaSink, Failure, Invocation, ToolCall, Turn};
use trellis_activities::ai::{ModelBackend, ProviderKind, Providers};
use trellis_core::activity::ActivityError;

/// The least `retryAfterMs` of a throttled call (Converse sends no `Retry-After`).
pub const THROTTLE_RETRY_AFTER_MS: u64 = 1_000;

/// The Converse client of every `bedrock` provider: one SDK client per region named.
#[derive(Debug, Clone)]
pub struct BedrockBackend {
    default: Client,
    regional: HashMap<String, Client>,
}

impl BedrockBackend {
    /// Clients from `config` (credentials, endpoint overrides), one more per `region` a
    /// `bedrock` provider of `providers` names; the SDK's retries off.
    pub fn new(config: &aws_config::SdkConfig, providers: &Providers) -> Self {
        let client = |region: Option<&str>| {
            let mut builder = aws_sdk_bedrockruntime::config::Builder::from(config)
                .retry_config(aws_sdk_bedrockruntime::config::retry::RetryConfig::disabled());
            if let Some(region) = region {
                builder = builder.region(aws_sdk_bedrockruntime::config::Region::new(region.to_owned()));
            }
            Client::from_conf(builder.build())
        };
        let regional = providers
            .list()
            .iter()
            .filter(|provider| provider.kind == ProviderKind::Bedrock)
            .filter_map(|provider| provider.region.clone())
            .map(|region| (region.clone(), client(Some(&region))))
            .collect();
        Self { default: client(None), regional }
    }

    fn client(&self, region: Option<&str>) -> &Client {
        region.and_then(|region| self.regional.get(region)).unwrap_or(&self.default)
    }
}

/// `providers` with the Converse client attached to its `bedrock` providers (none: as given).
pub fn with_backend(mut providers: Providers, config: &aws_config::SdkConfig) -> Providers {
    if providers.has_kind(ProviderKind::Bedrock) {
        let backend = Arc::new(BedrockBackend::new(config, &providers));
        providers.attach_backend(ProviderKind::Bedrock, backend);
    }
    providers
}

/// One content block of a Converse message, before the SDK's builders.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// `{text}`.
    Text(String),
    /// `{toolUse: {toolUseId, name, input}}`: a tool call the model made earlier.
    ToolUse {
        /// The call's id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        input: Value,
    },
    /// `{toolResult: {toolUseId, content: [{text}]}}`: what a tool returned.
    ToolResult {
        /// The call's id.
        id: String,
        /// The result, as text.
        content: String,
    },
}

/// A Converse request's parts, before the SDK's builders.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The `system` text blocks.
    pub system: Vec<String>,
    /// `(role, blocks)`, alternating roles.
    pub messages: Vec<(ConversationRole, Vec<Block>)>,
    /// `toolConfig.tools` as the turn gives them (`{name, description, inputSchema}`).
    pub tools: Vec<Value>,
    /// `inferenceConfig.maxTokens`.
    pub max_tokens: Option<i32>,
    /// `inferenceConfig.temperature`.
    pub temperature: Option<f32>,
}

/// The Converse request of `turn` (see the module docs).
pub fn request(turn: &Turn<'_>) -> Request {
    request_of(turn.messages, turn.tools, turn.schema, turn.max_tokens, turn.temperature)
}

/// A turn's message as `(role, blocks)`; `None` for a system message.
fn blocks_of(message: &Value) -> Option<(ConversationRole, Vec<Block>)> {
    let content = message.get("content").and_then(Value::as_str).unwrap_or_default().to_owned();
    let text = |id: &str| message.get(id).and_then(Value::as_str).unwrap_or_default().to_owned();
    match message.get("role").and_then(Value::as_str) {
        Some("system") => None,
        Some("assistant") => {
            let calls = message.get("toolCalls").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            let mut blocks = Vec::new();
            // Converse refuses a blank text block.
            if !content.is_empty() || calls.is_empty() {
                blocks.push(Block::Text(content));
            }
            for call in calls {
                let text = |key: &str| call.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
                let input = call.get("arguments").filter(|arguments| arguments.is_object()).cloned();
                blocks.push(Block::ToolUse { id: text("id"), name: text("name"), input: input.unwrap_or(json!({})) });
            }
            Some((ConversationRole::Assistant, blocks))
        }
        Some("tool") => Some((ConversationRole::User, vec![Block::ToolResult { id: text("toolCallId"), content }])),
        _ => Some((ConversationRole::User, vec![Block::Text(content)])),
    }
}

fn request_of(
    turn_messages: &[Value],
    tools: &[Value],
    schema: Option<&Value>,
    max_tokens: Option<u64>,
    temperature: Option<f64>,
) -> Request {
    let mut system = Vec::new();
    let mut messages: Vec<(ConversationRole, Vec<Block>)> = Vec::new();
    for message in turn_messages {
        let Some((role, mut blocks)) = blocks_of(message) else {
            system.push(message.get("content").and_then(Value::as_str).unwrap_or_default().to_owned());
            continue;
        };
        // Consecutive messages of one role (tool results, a repair prompt) become one.
        match messages.last_mut() {
            Some((last, merged)) if *last == role => merged.append(&mut blocks),
            _ => messages.push((role, blocks)),
        }
    }
    if let Some(schema) = schema {
        system.push(format!(
            "Answer with only a JSON value that matches this JSON schema, no prose and no code fence: {schema}"
        ));
    }
    Request {
        system,
        messages,
        tools: tools.to_vec(),
        max_tokens: max_tokens.map(|max| i32::try_from(max).unwrap_or(i32::MAX)),
        temperature: temperature.map(|temperature| temperature.min(1.0) as f32),
    }
}

/// A JSON value as a Smithy document (tool inputs and schemas).
pub fn to_document(value: &Value) -> Document {
    match value {
        Value::Null => Document::Null,
        Value::Bool(flag) => Document::Bool(*flag),
        Value::Number(number) => Document::Number(match (number.as_u64(), number.as_i64()) {
            (Some(positive), _) => Number::PosInt(positive),
            (None, Some(negative)) => Number::NegInt(negative),
            _ => Number::Float(number.as_f64().unwrap_or_default()),
        }),
        Value::String(text) => Document::String(text.clone()),
        Value::Array(items) => Document::Array(items.iter().map(to_document).collect()),
        Value::Object(object) => {
            Document::Object(object.iter().map(|(key, value)| (key.clone(), to_document(value))).collect())
        }
    }
}

/// A Smithy document as JSON (the arguments of the model's tool calls).
pub fn to_json(document: &Document) -> Value {
    match document {
        Document::Null => Value::Null,
        Document::Bool(flag) => json!(flag),
        Document::Number(Number::PosInt(positive)) => json!(positive),
        Document::Number(Number::NegInt(negative)) => json!(negative),
        Document::Number(Number::Float(float)) => json!(float),
        Document::String(text) => json!(text),
        Document::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        Document::Object(object) => {
            Value::Object(object.iter().map(|(key, value)| (key.clone(), to_json(value))).collect())
        }
    }
}

/// `stopReason` in the chunk vocabulary (`stop`, `length`, `tool_calls`, `content_filter`).
pub fn finish(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::MaxTokens | StopReason::ModelContextWindowExceeded => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFiltered | StopReason::GuardrailIntervened => "content_filter",
        _ => "stop",
    }
}

fn answer(output: &ConverseOutput) -> Answer {
    let tokens = |count: i32| u64::try_from(count).ok();
    let mut answer = Answer {
        finish_reason: finish(output.stop_reason()).to_owned(),
        input_tokens: output.usage().and_then(|usage| tokens(usage.input_tokens())),
        output_tokens: output.usage().and_then(|usage| tokens(usage.output_tokens())),
        ..Answer::default()
    };
    let blocks = match output.output() {
        Some(Output::Message(message)) => message.content(),
        _ => &[],
    };
    for block in blocks {
        match block {
            ContentBlock::Text(text) => answer.text.push_str(text),
            ContentBlock::ToolUse(call) => answer.tool_calls.push(ToolCall {
                id: call.tool_use_id().to_owned(),
                name: call.name().to_owned(),
                arguments: Some(to_json(call.input())).filter(Value::is_object).unwrap_or_else(|| json!({})),
            }),
            ContentBlock::ReasoningContent(ReasoningContentBlock::ReasoningText(reasoning)) => {
                answer.reasoning.get_or_insert_with(String::new).push_str(reasoning.text());
            }
            _ => {}
        }
    }
    answer
}

/// The SDK's message of `(role, blocks)`.
fn sdk_message(role: ConversationRole, blocks: Vec<Block>) -> Result<Message, BuildError> {
    let mut message = Message::builder().role(role);
    for block in blocks {
        message = message.content(match block {
            Block::Text(text) => ContentBlock::Text(text),
            Block::ToolUse { id, name, input } => ContentBlock::ToolUse(
                ToolUseBlock::builder().tool_use_id(id).name(name).input(to_document(&input)).build()?,
            ),
            Block::ToolResult { id, content } => ContentBlock::ToolResult(
                ToolResultBlock::builder().tool_use_id(id).content(ToolResultContentBlock::Text(content)).build()?,
            ),
        });
    }
    message.build()
}

/// `toolConfig` of the turn's tools (`None` without tools).
fn tool_config(tools: &[Value]) -> Result<Option<ToolConfiguration>, BuildError> {
    if tools.is_empty() {
        return Ok(None);
    }
    let mut config = ToolConfiguration::builder();
    for tool in tools {
        let text = |key: &str| tool.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let schema = tool.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"}));
        let mut spec =
            ToolSpecification::builder().name(text("name")).input_schema(ToolInputSchema::Json(to_document(&schema)));
        if !text("description").is_empty() {
            spec = spec.description(text("description"));
        }
        config = config.tools(Tool::ToolSpec(spec.build()?));
    }
    config.build().map(Some)
}

/// The error of a Converse exception `error_type` (HTTP `status`, the service's `message`):
/// the HTTP kinds' codes (see the module docs); `details.errorType` names the exception.
pub fn service_error(provider: &str, status: u16, error_type: Option<&str>, message: Option<&str>) -> ActivityError {
    let body = json!({ "message": message.unwrap_or_default() }).to_string();
    let as_status = |status: u16| status_error(provider, status, &[], body.as_bytes(), None);
    let mut error = match error_type.unwrap_or_default() {
        "ThrottlingException" => as_status(429),
        "ServiceQuotaExceededException" => ActivityError::new(
            "provider_quota_exhausted",
            format!("provider `{provider}`: the account's Bedrock quota is exceeded"),
            false,
        )
        .with_details(json!({ "provider": provider, "status": status })),
        // The model is loading, or its stream broke: not a quota, worth another attempt.
        "ModelNotReadyException" | "ServiceUnavailableException" | "ModelStreamErrorException" => as_status(503),
        "InternalServerException" => as_status(500),
        "ModelTimeoutException" => as_status(408),
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "ExpiredTokenException"
        | "MissingAuthenticationTokenException" => as_status(403),
        "ValidationException" | "ResourceNotFoundException" | "ModelErrorException" if status < 400 => as_status(400),
        _ => as_status(status),
    };
    if let Some(details) = error.details.as_mut().and_then(Value::as_object_mut) {
        if let Some(error_type) = error_type {
            details.insert("errorType".into(), json!(error_type));
        }
        if error.code == "provider_quota_exhausted" && error.retryable {
            let asked = details.get("retryAfterMs").and_then(Value::as_u64).unwrap_or(0);
            details.insert("retryAfterMs".into(), json!(asked.max(THROTTLE_RETRY_AFTER_MS)));
        }
    }
    error
}

fn unavailable(provider: &str, message: String) -> ActivityError {
    ActivityError::new("provider_unavailable", message, true).with_details(json!({ "provider": provider }))
}

fn sdk_error<E: ProvideErrorMetadata>(provider: &str, error: &SdkError<E, HttpResponse>) -> ActivityError {
    match error {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            service_error(provider, status, context.err().code(), context.err().message())
        }
        SdkError::ConstructionFailure(_) => ActivityError::new(
            "provider_request_rejected",
            format!("cannot build the request to provider `{provider}`"),
            false,
        )
        .with_details(json!({ "provider": provider })),
        SdkError::TimeoutError(_) => unavailable(provider, format!("provider `{provider}` did not answer in time")),
        SdkError::ResponseError(_) => unavailable(provider, format!("provider `{provider}`'s answer is unreadable")),
        _ => unavailable(provider, format!("calling provider `{provider}` failed: {}", error_kind(error))),
    }
}

/// A short, key-free name of a transport failure.
fn error_kind<E, R>(error: &SdkError<E, R>) -> &'static str {
    match error {
        SdkError::DispatchFailure(failure) if failure.is_timeout() => "connection timeout",
        SdkError::DispatchFailure(failure) if failure.is_io() => "connection failed",
        SdkError::DispatchFailure(_) => "dispatch failure",
        _ => "unexpected failure",
    }
}

/// A Converse (or ConverseStream) request, built.
struct Built {
    messages: Vec<Message>,
    system: Option<Vec<SystemContentBlock>>,
    tools: Option<ToolConfiguration>,
    inference: Option<InferenceConfiguration>,
    headers: [(&'static str, String); 3],
}

fn build(invocation: &Invocation<'_>) -> Result<Built, ActivityError> {
    let id = invocation.provider.id.as_str();
    let rejected = |what: &str| {
        ActivityError::new(
            "provider_request_rejected",
            format!("cannot build the request to provider `{id}`: {what}"),
            false,
        )
        .with_details(json!({ "provider": id }))
    };
    let parts = request(&invocation.turn);
    let messages = parts
        .messages
        .into_iter()
        .map(|(role, blocks)| sdk_message(role, blocks))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| rejected("a message does not build"))?;
    let tools = tool_config(&parts.tools).map_err(|_| rejected("a tool definition does not build"))?;
    let system: Vec<SystemContentBlock> = parts.system.into_iter().map(SystemContentBlock::Text).collect();
    let inference = (parts.max_tokens.is_some() || parts.temperature.is_some()).then(|| {
        InferenceConfiguration::builder().set_max_tokens(parts.max_tokens).set_temperature(parts.temperature).build()
    });
    Ok(Built {
        messages,
        system: Some(system).filter(|system| !system.is_empty()),
        tools,
        inference,
        headers: [
            ("x-trellis-request-key", invocation.request_key.to_owned()),
            ("idempotency-key", invocation.idempotency_key.to_owned()),
            ("trellis-attempt", invocation.attempt.to_string()),
        ],
    })
}

/// The same request on `converse()` and `converse_stream()` (two builder types, one shape).
macro_rules! configured {
    ($builder:expr, $built:expr, $model:expr) => {{
        let Built { messages, system, tools, inference, headers } = $built;
        $builder
            .model_id($model)
            .set_messages(Some(messages))
            .set_system(system)
            .set_tool_config(tools)
            .set_inference_config(inference)
            .customize()
            .mutate_request(move |request| {
                for (name, value) in &headers {
                    request.headers_mut().insert(*name, value.clone());
                }
            })
    }};
}

fn timed_out(id: &str) -> ActivityError {
    unavailable(id, format!("provider `{id}` did not answer within the attempt's timeout"))
}

/// An error inside a ConverseStream response (an exception event, or the stream breaking).
/// An exception event is named by its variant (its payload need not carry a type); it has no
/// status of its own, so an unknown one counts as a 5xx.
fn stream_error<R>(provider: &str, error: &SdkError<ConverseStreamOutputError, R>) -> ActivityError {
    let SdkError::ServiceError(context) = error else {
        return unavailable(provider, format!("provider `{provider}`'s stream failed: {}", error_kind(error)));
    };
    let exception = context.err();
    let error_type = match exception {
        ConverseStreamOutputError::ThrottlingException(_) => Some("ThrottlingException"),
        ConverseStreamOutputError::ModelStreamErrorException(_) => Some("ModelStreamErrorException"),
        ConverseStreamOutputError::ValidationException(_) => Some("ValidationException"),
        ConverseStreamOutputError::InternalServerException(_) => Some("InternalServerException"),
        ConverseStreamOutputError::ServiceUnavailableException(_) => Some("ServiceUnavailableException"),
        _ => exception.code(),
    };
    let status = if error_type == Some("ValidationException") { 400 } else { 500 };
    service_error(provider, status, error_type, exception.message())
}

#[async_trait]
impl ModelBackend for BedrockBackend {
    async fn converse(&self, invocation: &Invocation<'_>) -> Result<Answer, Failure> {
        let id = invocation.provider.id.as_str();
        let client = self.client(invocation.provider.region.as_deref());
        let send = configured!(client.converse(), build(invocation)?, invocation.turn.model).send();
        match tokio::time::timeout_at(invocation.deadline.into(), send).await {
            Err(_elapsed) => Err(timed_out(id).into()),
            Ok(Err(error)) => Err(sdk_error(id, &error).into()),
            Ok(Ok(output)) => Ok(answer(&output)),
        }
    }

    async fn converse_stream(&self, invocation: &Invocation<'_>, sink: &mut dyn DeltaSink) -> Result<Answer, Failure> {
        let id = invocation.provider.id.as_str();
        let client = self.client(invocation.provider.region.as_deref());
        let send = configured!(client.converse_stream(), build(invocation)?, invocation.turn.model).send();
        let mut output = match tokio::time::timeout_at(invocation.deadline.into(), send).await {
            Err(_elapsed) => return Err(timed_out(id).into()),
            Ok(Err(error)) => return Err(sdk_error(id, &error).into()),
            Ok(Ok(output)) => output,
        };
        let mut answer = Answer { finish_reason: "stop".to_owned(), ..Answer::default() };
        let mut stopped = false;
        let failed = |answer: &Answer, error: ActivityError| Failure { error, partial: Some(answer.clone()) };
        loop {
            let event = match tokio::time::timeout_at(invocation.deadline.into(), output.stream.recv()).await {
                Err(_elapsed) => return Err(failed(&answer, timed_out(id))),
                Ok(Err(error)) => return Err(failed(&answer, stream_error(id, &error))),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(event))) => event,
            };
            match event {
                StreamEvent::ContentBlockDelta(event) => {
                    if let Some(ContentBlockDelta::Text(text)) = event.delta() {
                        answer.text.push_str(text);
                        if !sink.delta(text).await {
                            return Err(ActivityError::abandoned().into());
                        }
                    }
                }
                StreamEvent::MessageStop(event) => {
                    answer.finish_reason = finish(event.stop_reason()).to_owned();
                    stopped = true;
                }
                StreamEvent::Metadata(event) => {
                    if let Some(usage) = event.usage() {
                        answer.input_tokens = u64::try_from(usage.input_tokens()).ok();
                        answer.output_tokens = u64::try_from(usage.output_tokens()).ok();
                    }
                }
                _ => {}
            }
        }
        if !stopped {
            let error = unavailable(id, format!("provider `{id}`'s stream ended before the answer finished"));
            return Err(failed(&answer, error));
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(error: &ActivityError) -> (&str, bool) {
        (error.code.as_str(), error.retryable)
    }

    #[test]
    fn converse_exceptions_map_to_the_http_kinds_codes() {
        let throttled = service_error("br", 429, Some("ThrottlingException"), Some("Too many requests"));
        assert_eq!(code(&throttled), ("provider_quota_exhausted", true));
        let details = throttled.details.unwrap();
        assert_eq!(
            (details["retryAfterMs"].clone(), details["errorType"].clone()),
            (json!(1000), json!("ThrottlingException"))
        );
        let cases = [
            ("ModelNotReadyException", 429, ("provider_unavailable", true)),
            ("ServiceUnavailableException", 503, ("provider_unavailable", true)),
            ("InternalServerException", 500, ("provider_unavailable", true)),
            ("ModelTimeoutException", 408, ("provider_unavailable", true)),
            ("AccessDeniedException", 403, ("provider_auth_failed", false)),
            ("UnrecognizedClientException", 403, ("provider_auth_failed", false)),
            ("ValidationException", 400, ("provider_request_rejected", false)),
            ("ResourceNotFoundException", 404, ("provider_request_rejected", false)),
            ("ModelErrorException", 424, ("provider_request_rejected", false)),
            ("ServiceQuotaExceededException", 400, ("provider_quota_exhausted", false)),
        ];
        for (error_type, status, expected) in cases {
            let error = service_error("br", status, Some(error_type), Some("no"));
            assert_eq!(code(&error), expected, "{error_type}");
        }
        // An exception this table does not know follows its status.
        assert_eq!(
            code(&service_error("br", 502, Some("SomethingNewException"), None)),
            ("provider_unavailable", true)
        );
        let rejected = service_error("br", 400, Some("ValidationException"), Some("maxTokens must be at most 4096"));
        assert!(rejected.message.contains("maxTokens must be at most 4096"), "{}", rejected.message);
    }

    #[test]
    fn a_turn_becomes_alternating_converse_messages_with_a_system_block() {
        let messages = vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "one"}),
            json!({"role": "user", "content": "two"}),
            json!({"role": "assistant", "content": "{}"}),
            json!({"role": "user", "content": "fix it"}),
        ];
        let schema = json!({"type": "object"});
        let parts = request_of(&messages, &[], Some(&schema), Some(64), Some(1.5));
        assert_eq!(parts.system.len(), 2);
        assert_eq!(parts.system[0], "Be brief.");
        assert!(parts.system[1].contains(r#"{"type":"object"}"#), "{}", parts.system[1]);
        let text = |text: &str| Block::Text(text.to_owned());
        assert_eq!(
            parts.messages,
            vec![
                (ConversationRole::User, vec![text("one"), text("two")]),
                (ConversationRole::Assistant, vec![text("{}")]),
                (ConversationRole::User, vec![text("fix it")]),
            ]
        );
        assert_eq!((parts.max_tokens, parts.temperature), (Some(64), Some(1.0)));
    }

    #[test]
    fn tool_calls_and_results_become_tool_use_and_tool_result_blocks() {
        let messages = vec![
            json!({"role": "user", "content": "weather?"}),
            json!({"role": "assistant", "content": "", "toolCalls": [
                {"id": "t1", "name": "weather", "arguments": {"city": "Oslo", "days": 2}},
                {"id": "t2", "name": "clock", "arguments": "not an object"}]}),
            json!({"role": "tool", "toolCallId": "t1", "name": "weather", "content": "{\"c\": -3.5}"}),
            json!({"role": "tool", "toolCallId": "t2", "name": "clock", "content": "12:00"}),
        ];
        let tools = [json!({"name": "weather", "description": "d", "inputSchema": {"type": "object"}})];
        let parts = request_of(&messages, &tools, None, None, None);
        assert_eq!(parts.tools.len(), 1);
        assert_eq!(
            parts.messages,
            vec![
                (ConversationRole::User, vec![Block::Text("weather?".to_owned())]),
                (
                    ConversationRole::Assistant,
                    vec![
                        Block::ToolUse {
                            id: "t1".into(),
                            name: "weather".into(),
                            input: json!({"city": "Oslo", "days": 2})
                        },
                        Block::ToolUse { id: "t2".into(), name: "clock".into(), input: json!({}) },
                    ]
                ),
                (
                    ConversationRole::User,
                    vec![
                        Block::ToolResult { id: "t1".into(), content: "{\"c\": -3.5}".into() },
                        Block::ToolResult { id: "t2".into(), content: "12:00".into() },
                    ]
                ),
            ]
        );
        let value = json!({"a": [1, -2, 2.5, "x", true, null], "b": {}});
        assert_eq!(to_json(&to_document(&value)), value);
        assert!(tool_config(&tools).unwrap().is_some() && tool_config(&[]).unwrap().is_none());
    }

    #[test]
    fn the_functions_settings_accept_bedrock_entries_and_name_a_bad_one() {
        let settings = |providers: &str| {
            let pairs = [
                ("TRELLIS_TABLE_NAME", "t"),
                ("TRELLIS_STEP_QUEUE_URL", "q"),
                ("TRELLIS_COMPLETION_QUEUE_URL", "c"),
                ("TRELLIS_AI_PROVIDERS", providers),
            ];
            crate::Settings::from_lookup(&|name| pairs.iter().find(|(key, _)| *key == name).map(|(_, v)| v.to_string()))
        };
        let good = settings(r#"[{"id": "br", "kind": "bedrock", "region": "eu-central-1", "models": ["m"]}]"#).unwrap();
        let providers = good.providers();
        assert_eq!(providers.get("br").map(|provider| provider.kind), Some(ProviderKind::Bedrock));
        let bad = settings(r#"[{"id": "br", "kind": "bedrock", "baseUrl": "https://x", "models": ["m"]}]"#);
        let message = bad.expect_err("refused at cold start").to_string();
        assert!(message.contains("TRELLIS_AI_PROVIDERS") && message.contains("providers[0].baseUrl"), "{message}");
    }

    #[test]
    fn stop_reasons_map_to_the_chunk_vocabulary() {
        assert_eq!(finish(&StopReason::EndTurn), "stop");
        assert_eq!(finish(&StopReason::MaxTokens), "length");
        assert_eq!(finish(&StopReason::ToolUse), "tool_calls");
        assert_eq!(finish(&StopReason::GuardrailIntervened), "content_filter");
    }
}
