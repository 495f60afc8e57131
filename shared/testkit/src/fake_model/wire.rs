//! The providers' wire formats as the fake model writes them: OpenAI chat-completion bodies,
//! chunks and errors; Anthropic message bodies, stream events and errors; and the request
//! checks the real APIs make before answering.

use std::time::{SystemTime, UNIX_EPOCH};

use hyper::body::Bytes;
use serde_json::{json, Value};

use super::{Api, FinishReason, ModelRequest, ToolCallReply, Usage};

/// One server-sent event, encoded, and where it sits in the stream.
#[derive(Debug)]
pub(super) struct Event {
    /// `data: …\n\n` (with `event: …` for Anthropic).
    pub(super) bytes: Bytes,
    /// It carries one answer token.
    pub(super) token: bool,
    /// It comes after the tokens (finish, usage, stop events).
    pub(super) tail: bool,
}

/// The parts of an answer both shapes need.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) api: Api,
    /// The request's serial number (ids are made from it).
    pub(super) id: u64,
    pub(super) model: String,
    pub(super) finish: FinishReason,
    /// The tool calls asked for (whole answers only).
    pub(super) tool_calls: Vec<ToolCallReply>,
    /// Reasoning text (whole answers only).
    pub(super) reasoning: Option<String>,
}

impl Answer {
    fn openai_id(&self) -> String {
        format!("chatcmpl-fake{:016}", self.id)
    }

    fn anthropic_id(&self) -> String {
        format!("msg_fake{:016}", self.id)
    }

    /// The whole answer (a request that does not stream).
    pub(super) fn full(&self, text: &str, usage: Usage) -> Value {
        let mut full = self.plain(text, usage);
        match self.api {
            Api::OpenAi => {
                let message = &mut full["choices"][0]["message"];
                if let Some(reasoning) = &self.reasoning {
                    message["reasoning_content"] = json!(reasoning);
                }
                if !self.tool_calls.is_empty() {
                    let calls: Vec<Value> = self
                        .tool_calls
                        .iter()
                        .enumerate()
                        .map(|(index, call)| {
                            json!({
                                "id": format!("call_fake{}_{index}", self.id),
                                "type": "function",
                                "function": { "name": call.name, "arguments": call.arguments.to_string() },
                            })
                        })
                        .collect();
                    message["tool_calls"] = json!(calls);
                    if text.is_empty() {
                        message["content"] = Value::Null;
                    }
                }
            }
            Api::Anthropic => {
                let mut blocks = Vec::new();
                if let Some(reasoning) = &self.reasoning {
                    blocks.push(json!({ "type": "thinking", "thinking": reasoning, "signature": "fake" }));
                }
                if !text.is_empty() || self.tool_calls.is_empty() {
                    blocks.push(json!({ "type": "text", "text": text }));
                }
                for (index, call) in self.tool_calls.iter().enumerate() {
                    blocks.push(json!({
                        "type": "tool_use", "id": format!("toolu_fake{}_{index}", self.id),
                        "name": call.name, "input": call.arguments,
                    }));
                }
                full["content"] = json!(blocks);
            }
        }
        full
    }

    fn plain(&self, text: &str, usage: Usage) -> Value {
        match self.api {
            Api::OpenAi => json!({
                "id": self.openai_id(),
                "object": "chat.completion",
                "created": unix_seconds(),
                "model": self.model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": null},
                    "logprobs": null,
                    "finish_reason": self.finish.openai(),
                }],
                "usage": openai_usage(usage),
            }),
            Api::Anthropic => json!({
                "id": self.anthropic_id(),
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": self.finish.anthropic(),
                "stop_sequence": null,
                "usage": {"input_tokens": usage.input, "output_tokens": usage.output},
            }),
        }
    }

    /// The streamed answer's events, in order. OpenAI: a role chunk, one chunk per token, a
    /// chunk with `finish_reason`, the usage chunk (`choices: []`, only with
    /// `include_usage`, which also puts `usage: null` on every other chunk), `[DONE]`.
    /// Anthropic: `message_start`, `content_block_start`, `ping`, one `content_block_delta`
    /// per token, `content_block_stop`, `message_delta`, `message_stop`.
    pub(super) fn stream(&self, tokens: &[String], usage: Usage, include_usage: bool) -> Vec<Event> {
        let mut events = Vec::with_capacity(tokens.len() + 5);
        match self.api {
            Api::OpenAi => {
                let created = unix_seconds();
                let chunk = |choices: Value, usage_value: Option<Value>| {
                    let mut chunk = json!({
                        "id": self.openai_id(),
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": self.model,
                        "choices": choices,
                    });
                    if include_usage {
                        chunk["usage"] = usage_value.unwrap_or(Value::Null);
                    }
                    openai_event(&chunk)
                };
                let choice = |delta: Value, finish: Value| json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]);
                events.push(head(chunk(choice(json!({"role": "assistant", "content": ""}), Value::Null), None)));
                for token in tokens {
                    events.push(token_event(chunk(choice(json!({"content": token}), Value::Null), None)));
                }
                events.push(tail(chunk(choice(json!({}), json!(self.finish.openai())), None)));
                if include_usage {
                    events.push(tail(chunk(json!([]), Some(openai_usage(usage)))));
                }
                events.push(tail(Bytes::from_static(b"data: [DONE]\n\n")));
            }
            Api::Anthropic => {
                let message = json!({
                    "id": self.anthropic_id(),
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": {"input_tokens": usage.input, "output_tokens": 0},
                });
                events.push(head(anthropic_event(
                    "message_start",
                    &json!({"type": "message_start", "message": message}),
                )));
                let block =
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}});
                events.push(head(anthropic_event("content_block_start", &block)));
                events.push(head(anthropic_event("ping", &json!({"type": "ping"}))));
                for token in tokens {
                    let delta = json!({
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": token},
                    });
                    events.push(token_event(anthropic_event("content_block_delta", &delta)));
                }
                let stop = json!({"type": "content_block_stop", "index": 0});
                events.push(tail(anthropic_event("content_block_stop", &stop)));
                let delta = json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": self.finish.anthropic(), "stop_sequence": null},
                    "usage": {"output_tokens": usage.output},
                });
                events.push(tail(anthropic_event("message_delta", &delta)));
                events.push(tail(anthropic_event("message_stop", &json!({"type": "message_stop"}))));
            }
        }
        events
    }
}

fn head(bytes: Bytes) -> Event {
    Event { bytes, token: false, tail: false }
}

fn token_event(bytes: Bytes) -> Event {
    Event { bytes, token: true, tail: false }
}

fn tail(bytes: Bytes) -> Event {
    Event { bytes, token: false, tail: true }
}

fn openai_event(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

fn anthropic_event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn openai_usage(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.input,
        "completion_tokens": usage.output,
        "total_tokens": usage.input + usage.output,
    })
}

fn unix_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

/// An error body in `api`'s shape.
pub(super) fn error_body(api: Api, status: u16, message: &str) -> Value {
    match api {
        Api::OpenAi => openai_error(status, message),
        Api::Anthropic => anthropic_error(status, message),
    }
}

/// `{"error": {"message", "type", "param": null, "code"}}`, type and code from the status.
pub(super) fn openai_error(status: u16, message: &str) -> Value {
    let (kind, code) = match status {
        401 => ("invalid_request_error", json!("invalid_api_key")),
        404 => ("invalid_request_error", json!("not_found")),
        429 => ("requests", json!("rate_limit_exceeded")),
        500.. => ("server_error", Value::Null),
        _ => ("invalid_request_error", Value::Null),
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

/// `{"type": "error", "error": {"type", "message"}}`, the type from the status.
pub(super) fn anthropic_error(status: u16, message: &str) -> Value {
    let kind = match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500.. => "api_error",
        _ => "invalid_request_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// Why the real API would reject the request with a 400, if it would.
pub(super) fn invalid(api: Api, seen: &ModelRequest, is_json: bool) -> Option<String> {
    let body = &seen.body;
    let missing = |field: &str| match api {
        Api::OpenAi => format!("Missing required parameter: '{field}'. (fake model)"),
        Api::Anthropic => format!("{field}: Field required (fake model)"),
    };
    if !is_json || !body.is_object() {
        return Some("We could not parse the JSON body of your request. (fake model)".to_owned());
    }
    if !body.get("model").is_some_and(Value::is_string) {
        return Some(missing("model"));
    }
    if !body.get("messages").is_some_and(Value::is_array) {
        return Some(missing("messages"));
    }
    if api == Api::Anthropic {
        if !body.get("max_tokens").is_some_and(Value::is_u64) {
            return Some(missing("max_tokens"));
        }
        if seen.header("anthropic-version").is_none() {
            return Some("anthropic-version: header is required (fake model)".to_owned());
        }
    }
    None
}

/// Whether an OpenAI request asked for the usage chunk (`stream_options.include_usage`).
pub(super) fn include_usage(body: &Value) -> bool {
    body.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false)
}

/// A message `content` (or Anthropic `system`) as text: a string, or the `text` of each
/// part joined with newlines.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

fn messages(body: &Value) -> &[Value] {
    body.get("messages").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The text of the last message whose role is `user`.
pub(super) fn last_user_text(body: &Value) -> Option<String> {
    messages(body)
        .iter()
        .rev()
        .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        .map(|message| message.get("content").map(text_of).unwrap_or_default())
}

/// Whitespace-separated words over every message and the Anthropic `system` prompt.
pub(super) fn input_words(body: &Value) -> u64 {
    let system = body.get("system").map(text_of).unwrap_or_default();
    let messages: usize = messages(body)
        .iter()
        .map(|message| message.get("content").map(text_of).unwrap_or_default().split_whitespace().count())
        .sum();
    (system.split_whitespace().count() + messages) as u64
}

/// The text a route matches against: the Anthropic `system` prompt and every `system` and
/// `user` message (not the model's own answers or tool results), joined by newlines.
pub(super) fn all_text(body: &Value) -> String {
    let mut text = body.get("system").map(text_of).unwrap_or_default();
    for message in messages(body) {
        if matches!(message.get("role").and_then(Value::as_str), Some("system" | "user")) {
            text.push('\n');
            text.push_str(&message.get("content").map(text_of).unwrap_or_default());
        }
    }
    text
}
