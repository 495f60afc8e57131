//! The fake model's connections: the accept loop, each request recorded and answered by
//! its plan (404, 401, 400 or a reply), whole bodies and SSE streams with scripted drops.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use http_body_util::BodyExt;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::{lock, wire, Api, Content, ModelReply, ModelRequest, State, Usage};

pub(super) async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    crate::http_server::serve(listener, move |request| handle(request, Arc::clone(&state))).await;
}

/// The error that makes hyper close a connection (a scripted drop).
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by the fake model's script")
    }
}

impl std::error::Error for Dropped {}

/// A response body: all at once, or chunks from a channel (an `Err` drops the connection).
#[derive(Debug)]
enum ReplyBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Result<Bytes, Dropped>>),
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = Dropped;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Dropped>>> {
        match self.get_mut() {
            Self::Full(bytes) => Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes)))),
            Self::Stream(chunks) => chunks.poll_recv(cx).map(|chunk| chunk.map(|chunk| chunk.map(Frame::data))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Self::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |bytes| bytes.len() as u64)),
            Self::Stream(_) => SizeHint::default(),
        }
    }
}

/// What a request is answered with, decided under the lock.
enum Plan {
    Error { api: Api, status: u16, message: String, retry_after: Option<u64> },
    NotFound(String),
    Reply { api: Api, reply: ModelReply, id: u64 },
}

async fn handle(request: Request<Incoming>, state: Arc<Mutex<State>>) -> Result<Response<ReplyBody>, Dropped> {
    let received = Instant::now();
    let received_at = SystemTime::now();
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    let bytes = request.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
    let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
    let api = match (method.as_str(), path.as_str()) {
        ("POST", "/v1/chat/completions") => Some(Api::OpenAi),
        ("POST", "/v1/messages") => Some(Api::Anthropic),
        _ => None,
    };
    let seen =
        ModelRequest { api, method, path, headers, body: parsed.clone().unwrap_or(Value::Null), received_at, received };
    let (plan, latency) = {
        let mut state = lock(&state);
        let plan = plan(&mut state, &seen, parsed.is_some());
        state.requests.push(seen.clone());
        (plan, state.latency)
    };
    let wait = latency + if let Plan::Reply { reply, .. } = &plan { reply.delay } else { Duration::ZERO };
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    match plan {
        Plan::NotFound(message) => Ok(json_response(404, &wire::openai_error(404, &message), None)),
        Plan::Error { api, status, message, retry_after } => {
            Ok(json_response(status, &wire::error_body(api, status, &message), retry_after))
        }
        Plan::Reply { api, reply, id } => answer(api, reply, id, &seen),
    }
}

/// Decides the answer: 404, 401, 400, or the next scripted (or default) reply.
fn plan(state: &mut State, seen: &ModelRequest, is_json: bool) -> Plan {
    let Some(api) = seen.api else {
        return Plan::NotFound(format!("Unknown request URL: {} {} (fake model)", seen.method, seen.path));
    };
    if let Some(key) = &state.key {
        let given = match api {
            Api::OpenAi => seen.bearer(),
            Api::Anthropic => seen.header("x-api-key"),
        };
        if given != Some(key.as_str()) {
            let message = match given {
                None => "No API key provided (fake model)",
                Some(_) => "Incorrect API key provided (fake model)",
            };
            return Plan::Error { api, status: 401, message: message.to_owned(), retry_after: None };
        }
    }
    if let Some(message) = wire::invalid(api, seen, is_json) {
        return Plan::Error { api, status: 400, message, retry_after: None };
    }
    let reply = routed(state, seen).or_else(|| state.queue.pop_front()).unwrap_or_else(ModelReply::echo);
    state.served += 1;
    Plan::Reply { api, reply, id: state.served }
}

/// The next reply of the first route whose `when` the request's text contains.
fn routed(state: &mut State, seen: &ModelRequest) -> Option<ModelReply> {
    if state.routes.iter().all(|route| route.replies.is_empty()) {
        if let Some(replay) = &state.replay {
            state.routes = replay.clone();
        }
    }
    if state.routes.is_empty() {
        return None;
    }
    let text = wire::all_text(&seen.body);
    let route = state.routes.iter_mut().find(|route| !route.replies.is_empty() && text.contains(&route.when))?;
    route.replies.pop_front()
}

fn json_response(status: u16, body: &Value, retry_after: Option<u64>) -> Response<ReplyBody> {
    let mut response = Response::new(ReplyBody::Full(Some(Bytes::from(body.to_string()))));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    if let Some(seconds) = retry_after {
        headers.insert(hyper::header::RETRY_AFTER, hyper::header::HeaderValue::from(seconds));
    }
    response
}

/// The smallest value `schema` accepts, for the schemas structured output allows: the first
/// `enum` value or `anyOf` branch, every property of an object, `""`, `0`, `false`, `[]`.
fn smallest_instance(schema: &serde_json::Value) -> serde_json::Value {
    use serde_json::{json, Value};
    if let Some(first) = schema.get("enum").and_then(Value::as_array).and_then(|values| values.first()) {
        return first.clone();
    }
    if let Some(first) = schema.get("anyOf").and_then(Value::as_array).and_then(|branches| branches.first()) {
        return smallest_instance(first);
    }
    let kind = match schema.get("type") {
        Some(Value::Array(kinds)) => kinds.first().and_then(Value::as_str).unwrap_or("null"),
        Some(Value::String(kind)) => kind.as_str(),
        _ => "null",
    };
    match kind {
        "object" => {
            let properties = schema.get("properties").and_then(Value::as_object);
            Value::Object(
                properties.into_iter().flatten().map(|(name, sub)| (name.clone(), smallest_instance(sub))).collect(),
            )
        }
        "array" => json!([]),
        "string" => json!("echo"),
        "number" | "integer" => json!(0),
        "boolean" => json!(false),
        _ => Value::Null,
    }
}

/// Answers with `reply` (already delayed) in `api`'s shape.
fn answer(api: Api, reply: ModelReply, id: u64, seen: &ModelRequest) -> Result<Response<ReplyBody>, Dropped> {
    let (text, tokens) = match reply.content {
        Content::Disconnect => return Err(Dropped),
        Content::Error { status, message, retry_after } => {
            return Ok(json_response(status, &wire::error_body(api, status, &message), retry_after))
        }
        Content::Echo => match seen.body.pointer("/response_format/json_schema/schema") {
            // A structured request (OpenAI's `response_format`) gets the smallest answer its
            // schema accepts, so examples with a `responseSchema` run against the fake.
            Some(schema) => (smallest_instance(schema).to_string(), None),
            None => (format!("echo: {}", seen.last_user_text().unwrap_or_default()), None),
        },
        Content::Text { text, tokens } => (text, tokens),
    };
    let usage = reply.usage.unwrap_or_else(|| Usage { input: wire::input_words(&seen.body), output: words(&text) });
    let answer = wire::Answer {
        api,
        id,
        model: seen.model().unwrap_or("fake-model").to_owned(),
        finish: reply.finish,
        tool_calls: reply.tool_calls,
        reasoning: reply.reasoning,
    };
    if !seen.stream() {
        if reply.drop_after.is_some() {
            return Err(Dropped);
        }
        return Ok(json_response(200, &answer.full(&text, usage), None));
    }
    let tokens = tokens.unwrap_or_else(|| split_words(&text));
    let events = answer.stream(&tokens, usage, wire::include_usage(&seen.body));
    let (sender, receiver) = mpsc::channel(16);
    tokio::spawn(send_stream(sender, events, reply.token_delay, reply.drop_after));
    let mut response = Response::new(ReplyBody::Stream(receiver));
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// Sends the stream's events; `token_delay` before each token after the first, and a drop
/// (an error frame, which closes the connection) after `drop_after` tokens.
async fn send_stream(
    sender: mpsc::Sender<Result<Bytes, Dropped>>,
    events: Vec<wire::Event>,
    token_delay: Duration,
    drop_after: Option<usize>,
) {
    let mut sent_tokens = 0;
    for event in events {
        if event.token {
            if drop_after == Some(sent_tokens) {
                return drop_stream(sender).await;
            }
            if sent_tokens > 0 && !token_delay.is_zero() {
                tokio::time::sleep(token_delay).await;
            }
            sent_tokens += 1;
        } else if event.tail && drop_after.is_some() {
            return drop_stream(sender).await;
        }
        if sender.send(Ok(event.bytes)).await.is_err() {
            return; // the client hung up
        }
    }
}

/// Drops the connection once the events already sent have reached the wire: hyper writes
/// body frames to a buffer and flushes it when the body has nothing ready, but an error frame
/// closes the connection without flushing, so the error waits until the channel is drained
/// and hyper has had a moment with nothing to send.
async fn drop_stream(sender: mpsc::Sender<Result<Bytes, Dropped>>) {
    while sender.capacity() < sender.max_capacity() && !sender.is_closed() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = sender.send(Err(Dropped)).await;
}

/// Whitespace-separated words in `text`.
fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

/// `text` as word tokens: each after the first keeps its leading whitespace, so they
/// concatenate to `text` (an empty text is no tokens).
fn split_words(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    for ch in text.chars() {
        if ch.is_whitespace() && in_word && !current.is_empty() {
            tokens.push(std::mem::take(&mut current));
            in_word = false;
        } else if !ch.is_whitespace() {
            in_word = true;
        }
        current.push(ch);
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_tokens_concatenate_to_the_text() {
        assert_eq!(split_words("echo: hello  big world"), ["echo:", " hello", "  big", " world"]);
    }

    #[test]
    fn a_structured_echo_is_the_smallest_instance_of_its_schema() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "category": {"type": "string", "enum": ["billing", "bug"]}, "urgent": {"type": "boolean"},
            "score": {"type": "number"}, "tags": {"type": "array"}, "note": {"anyOf": [{"type": "null"}, {"type": "string"}]}}});
        assert_eq!(
            smallest_instance(&schema),
            serde_json::json!({"category": "billing", "urgent": false, "score": 0, "tags": [], "note": null})
        );
        assert_eq!(split_words(" lead trail "), [" lead", " trail", " "]);
        assert!(split_words("").is_empty());
        let text = "a\nb c";
        assert_eq!(split_words(text).concat(), text);
    }
}
