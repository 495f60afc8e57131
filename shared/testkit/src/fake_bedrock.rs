//! A fake Amazon Bedrock runtime on 127.0.0.1 speaking the Converse API, for the `bedrock`
//! provider kind: `POST /model/{modelId}/converse` answers
//! `{output: {message: {role: "assistant", content: [{text}]}}, stopReason, usage:
//! {inputTokens, outputTokens, totalTokens}, metrics}`, and `POST /model/{modelId}/converse-stream`
//! answers the same as an `application/vnd.amazon.eventstream` body (binary event-stream
//! frames with their CRCs: `messageStart`, one `contentBlockDelta` per token — the reply's
//! [`ModelReply::tokens`], or its words —, `contentBlockStop`, `messageStop`, `metadata`).
//! Point the AWS SDK at it with
//! `AWS_ENDPOINT_URL_BEDROCK_RUNTIME=`[`FakeBedrock::endpoint_url`]. Nothing leaves loopback.
//!
//! Replies are the fake model provider's [`ModelReply`]s (text, usage, finish reason, delay,
//! tool calls as `toolUse` blocks with ids `tooluse_fake<serial>_<i>`, reasoning as a
//! `reasoningContent` block;
//! [`ModelReply::error`] becomes the Converse exception of its status, e.g. 429 →
//! `ThrottlingException`), or a named exception ([`BedrockReply::exception`],
//! [`BedrockReply::throttled`]), or a stream broken by an exception event
//! ([`BedrockReply::stream_exception`]), queued one per request ([`FakeBedrock::script`]). With the
//! queue empty a request gets `echo: <last user text>`, usage counted in words. An exception
//! is sent as the service sends it: its status, `x-amzn-ErrorType: <Type>:<namespace>` and a
//! `{"message"}` body.
//!
//! Each request is recorded ([`FakeBedrock::requests`]) and, before any scripted reply is
//! consumed, checked as the service would: another path gets a 404
//! `UnknownOperationException`; a request without a SigV4 `Authorization`
//! (`AWS4-HMAC-SHA256 Credential=…`), or carrying an API key (`x-api-key`, a bearer token), a
//! 403 `UnrecognizedClientException`; a body without a non-empty `messages` array, or whose
//! roles do not alternate starting with `user`, or whose `toolResult` names no `toolUse` of the
//! message before, a 400 `ValidationException`. A scripted disconnect closes the connection.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::fake_model::{Content, FinishReason, ModelReply, ToolCallReply, Usage};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One scripted reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BedrockReply {
    /// An answer (or an error by status) as the fake model provider scripts it.
    Model(ModelReply),
    /// A ConverseStream answer that streams `after` tokens of `text`, then an exception event
    /// (`:message-type: exception`, `:exception-type: <error_type>`); a Converse call gets
    /// the exception as an HTTP error instead (status 500).
    StreamException {
        /// The text whose first tokens stream.
        text: String,
        /// How many tokens stream before the exception.
        after: usize,
        /// The event's exception type, e.g. `modelStreamErrorException`.
        error_type: String,
        /// Its `message`.
        message: String,
    },
    /// A Converse exception.
    Exception {
        /// The HTTP status.
        status: u16,
        /// The exception's name (`ThrottlingException`, `ModelNotReadyException`, …).
        error_type: String,
        /// Its `message`.
        message: String,
    },
}

impl BedrockReply {
    /// The exception `error_type` with `status` and `message`.
    pub fn exception(status: u16, error_type: &str, message: &str) -> Self {
        Self::Exception { status, error_type: error_type.to_owned(), message: message.to_owned() }
    }

    /// A stream of `text` broken after `after` tokens by `error_type` (an event name:
    /// `modelStreamErrorException`, `throttlingException`, …).
    pub fn stream_exception(text: &str, after: usize, error_type: &str, message: &str) -> Self {
        Self::StreamException {
            text: text.to_owned(),
            after,
            error_type: error_type.to_owned(),
            message: message.to_owned(),
        }
    }

    /// A 429 `ThrottlingException`.
    pub fn throttled() -> Self {
        Self::exception(429, "ThrottlingException", "Too many requests, please wait before trying again.")
    }
}

impl From<ModelReply> for BedrockReply {
    fn from(reply: ModelReply) -> Self {
        Self::Model(reply)
    }
}

/// A Converse request the fake received.
#[derive(Debug, Clone, PartialEq)]
pub struct ConverseRequest {
    /// The method.
    pub method: String,
    /// The path, as sent (the model id percent-encoded).
    pub path: String,
    /// The model id of the path, decoded (`None` for a path that is not a Converse call).
    pub model_id: Option<String>,
    /// Whether it is a `ConverseStream` call.
    pub stream: bool,
    /// Headers, names lower-case, in order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` if it is not JSON).
    pub body: Value,
}

impl ConverseRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(seen, _)| seen.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    /// Whether it carries a SigV4 `Authorization` header.
    pub fn signed(&self) -> bool {
        self.header("authorization")
            .is_some_and(|value| value.starts_with("AWS4-HMAC-SHA256 ") && value.contains("Credential="))
    }

    /// The `messages` array (empty if absent).
    pub fn messages(&self) -> &[Value] {
        self.body.get("messages").and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// The `system` blocks' text, joined with newlines.
    pub fn system_text(&self) -> String {
        self.body.get("system").map(blocks_text).unwrap_or_default()
    }

    /// The text of the last `user` message (its text blocks joined with newlines).
    pub fn last_user_text(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
            .map(|message| message.get("content").map(blocks_text).unwrap_or_default())
    }
}

/// The `text` of each content block, joined with newlines.
fn blocks_text(blocks: &Value) -> String {
    blocks
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<BedrockReply>,
    requests: Vec<ConverseRequest>,
    served: u64,
}

/// The fake; stops (with every open connection) when dropped.
#[derive(Debug)]
pub struct FakeBedrock {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: tokio::task::JoinHandle<()>,
}

impl FakeBedrock {
    /// Starts one on `127.0.0.1:0` (an ephemeral port).
    pub async fn start() -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        let accept =
            tokio::spawn(crate::http_server::serve(listener, move |request| handle(request, Arc::clone(&shared))));
        Self { addr, state, accept }
    }

    /// `http://127.0.0.1:PORT`: the value of `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replaces the reply queue with `replies`, consumed one per Converse request.
    pub fn script<I, R>(&self, replies: I)
    where
        I: IntoIterator<Item = R>,
        R: Into<BedrockReply>,
    {
        lock(&self.state).queue = replies.into_iter().map(Into::into).collect();
    }

    /// Appends one reply to the queue.
    pub fn push(&self, reply: impl Into<BedrockReply>) {
        lock(&self.state).queue.push_back(reply.into());
    }

    /// How many scripted replies are still queued.
    pub fn pending(&self) -> usize {
        lock(&self.state).queue.len()
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<ConverseRequest> {
        lock(&self.state).requests.clone()
    }

    /// Forgets the requests received so far.
    pub fn clear_requests(&self) {
        lock(&self.state).requests.clear();
    }
}

impl Drop for FakeBedrock {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// `%XX` sequences decoded (the SDK encodes the model id's `:` and `/`).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = bytes.get(index + 1..index + 3).and_then(|pair| std::str::from_utf8(pair).ok());
        match (bytes[index], hex.and_then(|pair| u8::from_str_radix(pair, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                index += 3;
            }
            (byte, _) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The model id of a Converse (`false`) or ConverseStream (`true`) call's path.
fn model_id(method: &str, path: &str) -> Option<(String, bool)> {
    let rest = path.strip_prefix("/model/")?;
    let (id, stream) = match rest.strip_suffix("/converse-stream") {
        Some(id) => (id, true),
        None => (rest.strip_suffix("/converse")?, false),
    };
    (method == "POST" && !id.is_empty()).then(|| (percent_decode(id), stream))
}

/// CRC-32 (IEEE), as event-stream frames carry it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// One event-stream frame: prelude (total and headers lengths, their CRC), string headers,
/// the payload, the frame's CRC.
fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut encoded = Vec::new();
    for (name, value) in headers {
        encoded.push(name.len() as u8);
        encoded.extend_from_slice(name.as_bytes());
        encoded.push(7); // string
        encoded.extend_from_slice(&(value.len() as u16).to_be_bytes());
        encoded.extend_from_slice(value.as_bytes());
    }
    let total = (12 + encoded.len() + payload.len() + 4) as u32;
    let mut frame = Vec::with_capacity(total as usize);
    frame.extend_from_slice(&total.to_be_bytes());
    frame.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    let prelude_crc = crc32(&frame);
    frame.extend_from_slice(&prelude_crc.to_be_bytes());
    frame.extend_from_slice(&encoded);
    frame.extend_from_slice(payload);
    let crc = crc32(&frame);
    frame.extend_from_slice(&crc.to_be_bytes());
    frame
}

fn event(event_type: &str, payload: &Value) -> Vec<u8> {
    let headers = [(":message-type", "event"), (":event-type", event_type), (":content-type", "application/json")];
    frame(&headers, payload.to_string().as_bytes())
}

/// `text` as tokens: words, each after the first with its leading whitespace.
fn split_words(text: &str) -> Vec<String> {
    let mut tokens: Vec<String> = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if c.is_whitespace() && !current.trim().is_empty() {
            tokens.push(std::mem::take(&mut current));
        }
        current.push(c);
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

fn event_stream_response(body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/vnd.amazon.eventstream"),
    );
    response
}

fn broken_stream(tokens: &[String], error_type: &str, message: &str) -> Response<Full<Bytes>> {
    let mut body = event("messageStart", &json!({ "role": "assistant" }));
    for token in tokens {
        body.extend(event("contentBlockDelta", &json!({ "contentBlockIndex": 0, "delta": { "text": token } })));
    }
    let headers =
        [(":message-type", "exception"), (":exception-type", error_type), (":content-type", "application/json")];
    body.extend(frame(&headers, json!({ "message": message }).to_string().as_bytes()));
    event_stream_response(body)
}

fn stream_answer(tokens: &[String], finish: &FinishReason, usage: Usage) -> Response<Full<Bytes>> {
    let mut body = event("messageStart", &json!({ "role": "assistant" }));
    for token in tokens {
        body.extend(event("contentBlockDelta", &json!({ "contentBlockIndex": 0, "delta": { "text": token } })));
    }
    body.extend(event("contentBlockStop", &json!({ "contentBlockIndex": 0 })));
    body.extend(event("messageStop", &json!({ "stopReason": stop_reason(finish) })));
    let usage =
        json!({ "inputTokens": usage.input, "outputTokens": usage.output, "totalTokens": usage.input + usage.output });
    body.extend(event("metadata", &json!({ "usage": usage, "metrics": { "latencyMs": 1 } })));
    event_stream_response(body)
}

/// The exception name Converse sends for `status`.
fn exception_of(status: u16) -> &'static str {
    match status {
        400 => "ValidationException",
        401 | 403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 | 529 => "ServiceUnavailableException",
        _ => "InternalServerException",
    }
}

/// `stopReason` of a finish reason.
fn stop_reason(finish: &FinishReason) -> &str {
    match finish {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ContentFilter => "content_filtered",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::Other(other) => other,
    }
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

/// Why the service would refuse `seen` before running the model, if it would.
fn refusal(seen: &ConverseRequest) -> Option<BedrockReply> {
    if seen.model_id.is_none() {
        let message = format!("{} {} is not a Converse call (fake bedrock)", seen.method, seen.path);
        return Some(BedrockReply::exception(404, "UnknownOperationException", &message));
    }
    let keyed = seen.header("x-api-key").is_some()
        || seen.header("authorization").is_some_and(|value| value.starts_with("Bearer "));
    if keyed || !seen.signed() {
        let message = "The request must be signed with SigV4 and carry no API key (fake bedrock)";
        return Some(BedrockReply::exception(403, "UnrecognizedClientException", message));
    }
    let messages = seen.messages();
    if messages.is_empty() {
        return Some(BedrockReply::exception(400, "ValidationException", "messages must be a non-empty array"));
    }
    let alternating = messages.iter().enumerate().all(|(index, message)| {
        let expected = if index % 2 == 0 { "user" } else { "assistant" };
        message.get("role").and_then(Value::as_str) == Some(expected)
    });
    if !alternating {
        let message = "A conversation must start with a user message and alternate user and assistant roles";
        return Some(BedrockReply::exception(400, "ValidationException", message));
    }
    let block_ids = |message: &Value, kind: &str| -> Vec<String> {
        let blocks = message.get("content").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        blocks
            .iter()
            .filter_map(|block| block.pointer(&format!("/{kind}/toolUseId"))?.as_str().map(str::to_owned))
            .collect()
    };
    for (index, message) in messages.iter().enumerate() {
        let used = if index == 0 { Vec::new() } else { block_ids(&messages[index - 1], "toolUse") };
        if block_ids(message, "toolResult").iter().any(|id| !used.contains(id)) {
            let message = "A toolResult block names no toolUse block of the previous message (fake bedrock)";
            return Some(BedrockReply::exception(400, "ValidationException", message));
        }
    }
    None
}

fn exception(status: u16, error_type: &str, message: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(json!({ "message": message }).to_string())));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    let error_type = format!("{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/");
    if let Ok(value) = hyper::header::HeaderValue::from_str(&error_type) {
        headers.insert("x-amzn-errortype", value);
    }
    response
}

/// The answer's content blocks: reasoning, text (unless empty beside tool calls), tool uses.
fn content(text: &str, reasoning: Option<&str>, calls: &[ToolCallReply], serial: u64) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(reasoning) = reasoning {
        blocks.push(json!({ "reasoningContent": { "reasoningText": { "text": reasoning } } }));
    }
    if !text.is_empty() || calls.is_empty() {
        blocks.push(json!({ "text": text }));
    }
    for (index, call) in calls.iter().enumerate() {
        let id = format!("tooluse_fake{serial}_{index}");
        blocks.push(json!({ "toolUse": { "toolUseId": id, "name": call.name, "input": call.arguments } }));
    }
    blocks
}

fn converse_answer(blocks: Vec<Value>, finish: &FinishReason, usage: Usage) -> Response<Full<Bytes>> {
    let body = json!({
        "output": { "message": { "role": "assistant", "content": blocks } },
        "stopReason": stop_reason(finish),
        "usage": { "inputTokens": usage.input, "outputTokens": usage.output, "totalTokens": usage.input + usage.output },
        "metrics": { "latencyMs": 1 },
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    response
}

/// A dropped connection (a reply the fake does not speak, or a scripted disconnect).
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("connection dropped (fake bedrock)")
    }
}

impl std::error::Error for Dropped {}

async fn handle(request: Request<Incoming>, state: Arc<Mutex<State>>) -> Result<Response<Full<Bytes>>, Dropped> {
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
    let headers = request
        .headers()
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    let body = request.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let call = model_id(&method, &path);
    let stream = call.as_ref().is_some_and(|(_, stream)| *stream);
    let seen = ConverseRequest { model_id: call.map(|(id, _)| id), stream, method, path, headers, body };
    let (reply, serial) = {
        let mut state = lock(&state);
        state.requests.push(seen.clone());
        match refusal(&seen) {
            Some(refused) => (refused, state.served),
            None => {
                state.served += 1;
                (state.queue.pop_front().unwrap_or_else(|| BedrockReply::Model(ModelReply::echo())), state.served)
            }
        }
    };
    let reply = match reply {
        BedrockReply::Exception { status, error_type, message } => {
            return Ok(exception(status, &error_type, &message));
        }
        BedrockReply::StreamException { text, after, error_type, message } => {
            if !seen.stream {
                return Ok(exception(500, &error_type, &message));
            }
            let tokens: Vec<String> = split_words(&text).into_iter().take(after).collect();
            return Ok(broken_stream(&tokens, &error_type, &message));
        }
        BedrockReply::Model(reply) => reply,
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let input = || {
        let system = words(&seen.system_text());
        system
            + seen
                .messages()
                .iter()
                .map(|message| words(&message.get("content").map(blocks_text).unwrap_or_default()))
                .sum::<u64>()
    };
    let (text, tokens) = match reply.content {
        Content::Echo => (format!("echo: {}", seen.last_user_text().unwrap_or_default()), None),
        Content::Text { text, tokens } => (text, tokens),
        Content::Error { status, message, .. } => return Ok(exception(status, exception_of(status), &message)),
        _ => return Err(Dropped),
    };
    let usage = reply.usage.unwrap_or_else(|| Usage { input: input(), output: words(&text) });
    if seen.stream {
        let tokens = tokens.unwrap_or_else(|| split_words(&text));
        return Ok(stream_answer(&tokens, &reply.finish, usage));
    }
    let blocks = content(&text, reply.reasoning.as_deref(), &reply.tool_calls, serial);
    Ok(converse_answer(blocks, &reply.finish, usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_are_read_from_the_converse_path() {
        let id = model_id("POST", "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse");
        assert_eq!(id, Some(("anthropic.claude-3-haiku-20240307-v1:0".to_owned(), false)));
        assert_eq!(model_id("GET", "/model/m/converse"), None);
        assert_eq!(model_id("POST", "/model/m/converse-stream"), Some(("m".to_owned(), true)));
        assert_eq!(model_id("POST", "/model/m/invoke"), None);
        // The check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(split_words("one two  three").concat(), "one two  three");
        assert_eq!(exception_of(429), "ThrottlingException");
    }
}
