//! One provider invocation over the outbound client: the request for the provider's kind,
//! the key in its header (marked sensitive), the response read whole or as a stream of
//! events batched into `output.chunk` reports, and failures mapped to stable codes:
//!
//! | what | code | retryable |
//! |---|---|---|
//! | 429 | `provider_quota_exhausted` (`details.retryAfterMs` from `Retry-After`) | yes |
//! | 5xx, 408, network, timeout, an unreadable answer | `provider_unavailable` | yes |
//! | 401, 403 | `provider_auth_failed` (never the key, never the body) | no |
//! | 400 and other 4xx | `provider_request_rejected` (a short key-free excerpt) | no |
//! | 3xx (redirects are not followed) | `provider_unavailable` | no |
//!
//! A `bedrock` provider is not called over this client: [`invoke`] hands its invocation to
//! the provider's [`ModelBackend`] (the AWS backend's Converse client), whose errors map onto
//! the same codes ([`status_error`]).

use std::time::Instant;

use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::Method;
use serde_json::{json, Value};
use trellis_core::activity::{ActivityError, Progress, ProgressSink};
use trellis_core::secrets::Secret;

use super::config::{ProviderConfig, ProviderKind};
use super::stream::{Batcher, SseParser};
use super::{anthropic, openai};
use crate::http::client::{HttpError, StreamingResponse};
use crate::http::{HttpClient, OutboundRequest};

/// The most of a provider's answer read (a whole answer; a stream is read as it comes).
pub const MAX_ANSWER_BYTES: usize = 8 << 20;
/// The longest excerpt of a provider's error message kept in an error.
const EXCERPT_CHARS: usize = 200;

/// What one turn asks.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    /// The model.
    pub model: &'a str,
    /// `[{role, content}]`, system messages included.
    pub messages: &'a [Value],
    /// The temperature.
    pub temperature: Option<f64>,
    /// The output budget.
    pub max_tokens: Option<u64>,
    /// The structured-output schema.
    pub schema: Option<&'a Value>,
    /// The tools the model may call, `[{name, description, inputSchema}]` (empty: none). A
    /// message may then be `{role: "assistant", content, toolCalls: [{id, name, arguments}]}`
    /// or `{role: "tool", toolCallId, name, content}`; each wire format spells them its way.
    pub tools: &'a [Value],
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's id of the call (echoed back with its result).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments (the provider's JSON; `{}` when it sent none or an unparsable string).
    pub arguments: Value,
}

impl ToolCall {
    /// `{id, name, arguments}`.
    pub fn to_value(&self) -> Value {
        json!({ "id": self.id, "name": self.name, "arguments": self.arguments })
    }
}

/// What the provider answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The text.
    pub text: String,
    /// `stop`, `length`, `tool_calls` or `content_filter`.
    pub finish_reason: String,
    /// The model the provider says answered.
    pub model: Option<String>,
    /// Prompt tokens, when reported.
    pub input_tokens: Option<u64>,
    /// Completion tokens, when reported.
    pub output_tokens: Option<u64>,
    /// The tool calls the model asked for (finish reason `tool_calls`), in order.
    pub tool_calls: Vec<ToolCall>,
    /// Reasoning text the model gave besides its answer (Anthropic `thinking` blocks, an
    /// OpenAI-compatible `reasoning_content`), when it gave any.
    pub reasoning: Option<String>,
}

impl Answer {
    /// Whether the provider reported any usage.
    pub fn has_usage(&self) -> bool {
        self.input_tokens.is_some() || self.output_tokens.is_some()
    }
}

/// A streamed answer being assembled.
#[derive(Debug, Default)]
pub struct StreamState {
    /// What the stream said so far (text excluded).
    pub answer: Answer,
    /// The text the last event added.
    pub delta: String,
}

/// One invocation's request.
#[derive(Debug)]
pub struct Invocation<'a> {
    /// The provider.
    pub provider: &'a ProviderConfig,
    /// Its key for this attempt (the node's own or the host's).
    pub key: Option<&'a Secret>,
    /// The turn.
    pub turn: Turn<'a>,
    /// Whether to stream (tokens reported as `output.chunk` batches).
    pub stream: bool,
    /// The attempt-free `Idempotency-Key`.
    pub idempotency_key: &'a str,
    /// The replay-stable request identity (`X-Trellis-Request-Key`).
    pub request_key: &'a str,
    /// The attempt's 0-based number (`Trellis-Attempt`).
    pub attempt: u32,
    /// When the attempt's budget ends.
    pub deadline: Instant,
}

/// A failed invocation: the error, and what the provider reported before failing (its
/// usage is still reported).
#[derive(Debug)]
pub struct Failure {
    /// The attempt's error.
    pub error: ActivityError,
    /// What was read before the failure.
    pub partial: Option<Answer>,
}

impl From<ActivityError> for Failure {
    fn from(error: ActivityError) -> Self {
        Self { error, partial: None }
    }
}

fn unavailable(provider: &str, message: impl Into<String>, retryable: bool) -> ActivityError {
    ActivityError::new("provider_unavailable", message, retryable).with_details(json!({ "provider": provider }))
}

fn from_http(provider: &str, error: &HttpError) -> ActivityError {
    match error {
        HttpError::Timeout { timeout_ms, .. } => {
            unavailable(provider, format!("provider `{provider}` did not answer within {timeout_ms} ms"), true)
        }
        HttpError::Network { .. } => {
            unavailable(provider, format!("calling provider `{provider}` failed: {error}"), true)
        }
        HttpError::Rejected { .. } | HttpError::Invalid(_) => ActivityError::new(
            "provider_request_rejected",
            format!("the request to provider `{provider}` was refused: {error}"),
            false,
        )
        .with_details(json!({ "provider": provider })),
    }
}

/// The key never appears in what an error keeps of a provider's words.
fn excerpt(body: &[u8], key: Option<&Secret>) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|value| value.pointer("/error/message").or_else(|| value.get("message")))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(1024)]).into_owned());
    let mut text: String = message.chars().filter(|c| !c.is_control()).take(EXCERPT_CHARS).collect();
    if let Some(key) = key.and_then(Secret::expose_str).filter(|key| key.len() >= 4) {
        text = text.replace(key, "[redacted]");
        // A key cut by the excerpt's end leaves a prefix: drop from any 8-char prefix on.
        let prefix = &key[..key.len().min(8)];
        if let Some(at) = text.find(prefix) {
            text.truncate(at);
        }
    }
    text
}

/// `Retry-After` as milliseconds (delta-seconds; an HTTP date is ignored).
fn retry_after_ms(headers: &[(String, String)]) -> Option<u64> {
    headers
        .iter()
        .find(|(name, _)| name == "retry-after")
        .and_then(|(_, value)| value.trim().parse::<f64>().ok())
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
        .map(|seconds| (seconds * 1000.0) as u64)
}

/// The error of a provider's non-2xx answer (the table in the module docs); `body` is the
/// provider's error document (its `message` or `error.message` becomes a key-free excerpt).
pub fn status_error(
    provider: &str,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    key: Option<&Secret>,
) -> ActivityError {
    match status {
        429 => {
            let mut details = json!({ "provider": provider, "status": status });
            if let Some(ms) = retry_after_ms(headers) {
                details["retryAfterMs"] = json!(ms);
            }
            ActivityError::new(
                "provider_quota_exhausted",
                format!("provider `{provider}` is rate limiting (429)"),
                true,
            )
            .with_details(details)
        }
        401 | 403 => ActivityError::new(
            "provider_auth_failed",
            format!("provider `{provider}` refused the credentials ({status})"),
            false,
        )
        .with_details(json!({ "provider": provider, "status": status })),
        408 | 500..=599 => {
            ActivityError::new("provider_unavailable", format!("provider `{provider}` answered {status}"), true)
                .with_details(json!({ "provider": provider, "status": status }))
        }
        300..=399 => unavailable(
            provider,
            format!("provider `{provider}` answered a redirect ({status}); redirects are not followed"),
            false,
        ),
        _ => ActivityError::new(
            "provider_request_rejected",
            format!("provider `{provider}` rejected the request ({status}): {}", excerpt(body, key)),
            false,
        )
        .with_details(json!({ "provider": provider, "status": status })),
    }
}

fn outbound(invocation: &Invocation<'_>) -> Result<OutboundRequest, ActivityError> {
    let provider = invocation.provider;
    let bad = |what: &str| {
        ActivityError::new(
            "provider_request_rejected",
            format!("cannot build the request to `{}`: {what}", provider.id),
            false,
        )
    };
    let (url, body) = match provider.kind {
        ProviderKind::OpenAi => {
            (format!("{}/chat/completions", provider.base_url), openai::body(&invocation.turn, invocation.stream))
        }
        ProviderKind::Anthropic => {
            (format!("{}/v1/messages", provider.base_url), anthropic::body(&invocation.turn, invocation.stream))
        }
        ProviderKind::Bedrock => return Err(bad("bedrock is called through its backend, not over HTTP")),
    };
    let mut headers = vec![(CONTENT_TYPE, HeaderValue::from_static("application/json"))];
    if let Some(key) = invocation.key {
        let text = key.expose_str().ok_or_else(|| bad("the key is not text"))?;
        let (name, value) = match provider.kind {
            ProviderKind::OpenAi => (AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {text}"))),
            ProviderKind::Anthropic => (HeaderName::from_static("x-api-key"), HeaderValue::from_str(text)),
            ProviderKind::Bedrock => return Err(bad("bedrock providers take no key")),
        };
        let mut value = value.map_err(|_| bad("the key cannot be sent in a header"))?;
        value.set_sensitive(true);
        headers.push((name, value));
    }
    if provider.kind == ProviderKind::Anthropic {
        headers.push((HeaderName::from_static("anthropic-version"), HeaderValue::from_static(anthropic::VERSION)));
    }
    if invocation.stream {
        headers.push((hyper::header::ACCEPT, HeaderValue::from_static("text/event-stream")));
    }
    let idempotency = HeaderValue::from_str(invocation.idempotency_key).map_err(|_| bad("idempotency key"))?;
    headers.push((HeaderName::from_static("idempotency-key"), idempotency));
    let identity = HeaderValue::from_str(invocation.request_key).map_err(|_| bad("request key"))?;
    headers.push((HeaderName::from_static("x-trellis-request-key"), identity));
    headers.push((HeaderName::from_static("trellis-attempt"), HeaderValue::from(invocation.attempt)));
    let body = serde_json::to_vec(&body).map_err(|_| bad("the body does not serialize"))?;
    Ok(OutboundRequest {
        method: Method::POST,
        url,
        headers,
        body: Bytes::from(body),
        timeout: invocation.deadline.saturating_duration_since(Instant::now()),
    })
}

/// Makes one invocation. With `stream`, the tokens are reported through `progress` in
/// batches; the final batch (`isLast`, `meta`) is reported before this returns.
pub async fn invoke(
    client: &HttpClient,
    invocation: &Invocation<'_>,
    progress: &dyn ProgressSink,
) -> Result<Answer, Failure> {
    let id = invocation.provider.id.as_str();
    if invocation.provider.kind == ProviderKind::Bedrock {
        return invoke_backend(invocation, progress).await;
    }
    let request = outbound(invocation)?;
    let mut response = client.open_operator(request).await.map_err(|error| from_http(id, &error))?;
    if !(200..300).contains(&response.status) {
        let (body, _) = response.read_capped(64 * 1024).await.unwrap_or_default();
        return Err(status_error(id, response.status, &response.headers, &body, invocation.key).into());
    }
    let is_stream = response
        .headers
        .iter()
        .any(|(name, value)| name == "content-type" && value.to_ascii_lowercase().starts_with("text/event-stream"));
    if !invocation.stream || !is_stream {
        let (body, truncated) = response.read_capped(MAX_ANSWER_BYTES).await.map_err(|error| from_http(id, &error))?;
        if truncated {
            return Err(unavailable(
                id,
                format!("provider `{id}`'s answer is larger than {MAX_ANSWER_BYTES} bytes"),
                false,
            )
            .into());
        }
        let value: Value = serde_json::from_slice(&body)
            .map_err(|_| unavailable(id, format!("provider `{id}`'s answer is not valid JSON"), true))?;
        let answer = match invocation.provider.kind {
            ProviderKind::OpenAi => openai::parse(&value),
            ProviderKind::Anthropic => anthropic::parse(&value),
            ProviderKind::Bedrock => Err("bedrock answers through its backend".to_owned()),
        }
        .map_err(|message| unavailable(id, format!("provider `{id}`'s answer is unreadable: {message}"), true))?;
        if invocation.stream {
            // Asked to stream, answered whole: one final batch.
            let mut batcher = Batcher::new();
            batcher.push(&answer.text, Instant::now());
            // Whether the run still wants the attempt is decided by the usage report next.
            progress.report(Progress::Chunk { data: batcher.finish(meta(invocation, &answer)).to_value() }).await;
        }
        return Ok(answer);
    }
    read_stream(&mut response, invocation, progress).await
}

/// A model API whose client lives outside this crate: Amazon Bedrock's Converse, attached to
/// `bedrock` providers by the AWS composition root ([`super::config::Providers::attach_backend`];
/// the embedded binary carries no AWS SDK). Policy, keys, usage, structured output and its
/// repair turn, chunk batches, identity and retries stay the caller's, as for the HTTP kinds.
#[async_trait::async_trait]
pub trait ModelBackend: Send + Sync + std::fmt::Debug {
    /// One whole (non-streamed) turn of `invocation`; failures carry the HTTP kinds' codes
    /// and retry classes.
    async fn converse(&self, invocation: &Invocation<'_>) -> Result<Answer, Failure>;

    /// One streamed turn: each text delta goes to `sink` as it arrives (a `false` from it:
    /// stop reading, fail [`ActivityError::abandoned`]); the answer's text is the deltas'.
    /// Default: [`ModelBackend::converse`], its text as one delta.
    async fn converse_stream(&self, invocation: &Invocation<'_>, sink: &mut dyn DeltaSink) -> Result<Answer, Failure> {
        let answer = self.converse(invocation).await?;
        if !sink.delta(&answer.text).await {
            return Err(ActivityError::abandoned().into());
        }
        Ok(answer)
    }
}

/// Where a streamed backend turn's text deltas go.
#[async_trait::async_trait]
pub trait DeltaSink: Send {
    /// One delta; `false` when the run no longer wants the attempt.
    async fn delta(&mut self, text: &str) -> bool;
}

/// Deltas batched into `output.chunk` reports, as an HTTP stream's are.
struct Batching<'a> {
    batcher: Batcher,
    progress: &'a dyn ProgressSink,
}

#[async_trait::async_trait]
impl DeltaSink for Batching<'_> {
    async fn delta(&mut self, text: &str) -> bool {
        match self.batcher.push(text, Instant::now()) {
            Some(batch) => self.progress.report(Progress::Chunk { data: batch.to_value() }).await,
            None => true,
        }
    }
}

/// A `bedrock` invocation through the provider's backend: streamed (deltas batched into
/// `output.chunk` reports, the final batch with `meta`) when asked and the turn has no tools,
/// else whole — reported as one final batch when a stream was asked for.
async fn invoke_backend(invocation: &Invocation<'_>, progress: &dyn ProgressSink) -> Result<Answer, Failure> {
    let id = invocation.provider.id.as_str();
    let Some(backend) = invocation.provider.backend.as_deref() else {
        return Err(ActivityError::new(
            "provider_not_supported",
            format!("provider `{id}` is of kind bedrock, which needs the AWS backend"),
            false,
        )
        .with_details(json!({ "provider": id }))
        .into());
    };
    if !invocation.stream {
        return backend.converse(invocation).await;
    }
    let mut sink = Batching { batcher: Batcher::new(), progress };
    let answer = if invocation.turn.tools.is_empty() {
        backend.converse_stream(invocation, &mut sink).await?
    } else {
        let answer = backend.converse(invocation).await?;
        sink.batcher.push(&answer.text, Instant::now());
        answer
    };
    progress.report(Progress::Chunk { data: sink.batcher.finish(meta(invocation, &answer)).to_value() }).await;
    Ok(answer)
}

/// The final batch's `meta`.
pub fn meta(invocation: &Invocation<'_>, answer: &Answer) -> Value {
    let input = answer.input_tokens.unwrap_or(0);
    let output = answer.output_tokens.unwrap_or(0);
    json!({
        "finishReason": answer.finish_reason,
        "usage": { "promptTokens": input, "completionTokens": output, "totalTokens": input + output },
        "model": answer.model.as_deref().unwrap_or(invocation.turn.model),
        "provider": invocation.provider.id,
    })
}

async fn read_stream(
    response: &mut StreamingResponse,
    invocation: &Invocation<'_>,
    progress: &dyn ProgressSink,
) -> Result<Answer, Failure> {
    let id = invocation.provider.id.as_str();
    let mut parser = SseParser::default();
    let mut state =
        StreamState { answer: Answer { finish_reason: "stop".to_owned(), ..Answer::default() }, delta: String::new() };
    let mut batcher = Batcher::new();
    let mut done = false;
    let mut finished = false;
    let mut read = 0usize;
    let failure = |state: &StreamState, batcher: &Batcher, error: ActivityError| {
        let mut partial = state.answer.clone();
        partial.text = batcher.text().to_owned();
        Failure { error, partial: Some(partial) }
    };
    while !done {
        // A pending batch is flushed when due even if no token comes.
        let next = match batcher.deadline() {
            Some(deadline) => match tokio::time::timeout_at(deadline.into(), response.next_chunk()).await {
                Ok(next) => next,
                Err(_due) => {
                    if let Some(batch) = batcher.poll(Instant::now()) {
                        if !progress.report(Progress::Chunk { data: batch.to_value() }).await {
                            return Err(Failure { error: ActivityError::abandoned(), partial: None });
                        }
                    }
                    continue;
                }
            },
            None => response.next_chunk().await,
        };
        let events = match next {
            Ok(Some(bytes)) => {
                // The same cap as a whole answer: a stream never grows the attempt's memory
                // without bound.
                read = read.saturating_add(bytes.len());
                if read > MAX_ANSWER_BYTES {
                    let error = unavailable(
                        id,
                        format!("provider `{id}`'s stream is larger than {MAX_ANSWER_BYTES} bytes"),
                        false,
                    );
                    return Err(failure(&state, &batcher, error));
                }
                parser.push(&bytes)
            }
            Ok(None) => {
                done = true;
                parser.finish().into_iter().collect()
            }
            Err(error) => return Err(failure(&state, &batcher, from_http(id, &error))),
        };
        for event in events {
            let outcome = match invocation.provider.kind {
                ProviderKind::OpenAi => openai::on_event(&event.data, &mut state),
                ProviderKind::Anthropic => anthropic::on_event(event.event.as_deref(), &event.data, &mut state),
                ProviderKind::Bedrock => Err("bedrock answers through its backend".to_owned()),
            };
            let delta = std::mem::take(&mut state.delta);
            if let Some(batch) = batcher.push(&delta, Instant::now()) {
                // The run ended or moved on (cancelled, budget spent): stop reading.
                if !progress.report(Progress::Chunk { data: batch.to_value() }).await {
                    return Err(Failure { error: ActivityError::abandoned(), partial: None });
                }
            }
            match outcome {
                Ok(true) => {
                    done = true;
                    finished = true;
                }
                Ok(false) => {}
                Err(message) => {
                    let message = excerpt(message.as_bytes(), invocation.key);
                    let error = unavailable(id, format!("provider `{id}`'s stream failed: {message}"), true);
                    return Err(failure(&state, &batcher, error));
                }
            }
        }
    }
    if !finished {
        // The body ended without `[DONE]` / `message_stop`: the answer may be cut.
        let error = unavailable(id, format!("provider `{id}`'s stream ended before the answer finished"), true);
        return Err(failure(&state, &batcher, error));
    }
    let mut answer = state.answer;
    answer.text = batcher.text().to_owned();
    progress.report(Progress::Chunk { data: batcher.finish(meta(invocation, &answer)).to_value() }).await;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_map_to_stable_codes_and_never_echo_the_key() {
        let key = Secret::new("sk-test-CANARY-abcdef123456");
        let headers = vec![("retry-after".to_owned(), "2".to_owned())];
        let quota = status_error("openai", 429, &headers, b"{}", Some(&key));
        assert_eq!((quota.code.as_str(), quota.retryable), ("provider_quota_exhausted", true));
        assert_eq!(quota.details.unwrap()["retryAfterMs"], 2000);
        let auth = status_error(
            "openai",
            401,
            &[],
            b"{\"error\":{\"message\":\"bad key sk-test-CANARY-abcdef123456\"}}",
            Some(&key),
        );
        assert_eq!((auth.code.as_str(), auth.retryable), ("provider_auth_failed", false));
        assert!(!auth.message.contains("CANARY"));
        let rejected = status_error(
            "openai",
            400,
            &[],
            b"{\"error\":{\"message\":\"echo sk-test-CANARY-abcdef123456 back\"}}",
            Some(&key),
        );
        assert_eq!((rejected.code.as_str(), rejected.retryable), ("provider_request_rejected", false));
        assert!(!rejected.message.contains("CANARY"), "{}", rejected.message);
        let cut = excerpt(format!("{}{}", "x".repeat(195), "sk-test-CANARY").as_bytes(), Some(&key));
        assert!(!cut.contains("sk-test-"), "{cut}");
        for status in [500, 502, 529, 408] {
            let error = status_error("anthropic", status, &[], b"", None);
            assert_eq!((error.code.as_str(), error.retryable), ("provider_unavailable", true));
        }
    }
}
