//! The Anthropic Messages wire format (`POST {baseUrl}/v1/messages`, `x-api-key`,
//! `anthropic-version: 2023-06-01`): system messages go to `system`, `max_tokens` is
//! required (default [`DEFAULT_MAX_TOKENS`]), streamed answers are `message_start` (model,
//! input tokens), `content_block_delta` (`text_delta`), `message_delta` (stop reason,
//! output tokens), `message_stop`, or `error`.
//!
//! Tool calling: the turn's tools go as `tools: [{name, description, input_schema}]`; an
//! assistant message with `toolCalls` as content blocks `[{type: "text"}?, {type:
//! "tool_use", id, name, input}…]`; consecutive tool results as one user message of
//! `tool_result` blocks `{tool_use_id, content}`; the answer's `tool_use` blocks (and
//! `thinking` blocks, as reasoning) are read back. A streamed answer carries text only.

use serde_json::{json, Value};

use super::provider::{Answer, StreamState, ToolCall, Turn};

/// The non-system messages in this wire format: tool calls as `tool_use` blocks, runs of
/// tool results merged into one user message.
fn messages(turn: &Turn<'_>) -> Vec<Value> {
    let mut messages: Vec<Value> = Vec::new();
    for message in turn.messages {
        match message.get("role").and_then(Value::as_str) {
            Some("system") => {}
            Some("assistant") if message.get("toolCalls").is_some() => {
                let mut blocks = Vec::new();
                if let Some(text) = message.get("content").and_then(Value::as_str).filter(|text| !text.is_empty()) {
                    blocks.push(json!({ "type": "text", "text": text }));
                }
                for call in message["toolCalls"].as_array().into_iter().flatten() {
                    let input = if call["arguments"].is_object() { call["arguments"].clone() } else { json!({}) };
                    blocks.push(json!({ "type": "tool_use", "id": call["id"], "name": call["name"], "input": input }));
                }
                messages.push(json!({ "role": "assistant", "content": blocks }));
            }
            Some("tool") => {
                let block = json!({
                    "type": "tool_result",
                    "tool_use_id": message["toolCallId"],
                    "content": message.get("content").and_then(Value::as_str).unwrap_or_default(),
                });
                let merged = messages.last_mut().filter(|last| {
                    last["role"] == "user"
                        && last["content"]
                            .as_array()
                            .is_some_and(|blocks| blocks.iter().all(|block| block["type"] == "tool_result"))
                });
                match merged.and_then(|last| last["content"].as_array_mut()) {
                    Some(blocks) => blocks.push(block),
                    None => messages.push(json!({ "role": "user", "content": [block] })),
                }
            }
            _ => messages.push(message.clone()),
        }
    }
    messages
}

/// The API version sent.
pub const VERSION: &str = "2023-06-01";
/// `max_tokens` when the node sets none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The request body.
pub fn body(turn: &Turn<'_>, stream: bool) -> Value {
    let system: Vec<&str> = turn
        .messages
        .iter()
        .filter(|message| message.get("role").and_then(Value::as_str) == Some("system"))
        .map(|message| message.get("content").and_then(Value::as_str).unwrap_or_default())
        .collect();
    let mut body = json!({
        "model": turn.model,
        "messages": messages(turn),
        "max_tokens": turn.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
    });
    if !turn.tools.is_empty() {
        let tools: Vec<Value> = turn
            .tools
            .iter()
            .map(|tool| json!({ "name": tool["name"], "description": tool["description"], "input_schema": tool["inputSchema"] }))
            .collect();
        body["tools"] = json!(tools);
    }
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if let Some(temperature) = turn.temperature {
        // Anthropic's range is 0..1.
        body["temperature"] = json!(temperature.min(1.0));
    }
    if stream {
        body["stream"] = json!(true);
    }
    body
}

/// The stop reason in the chunk vocabulary.
fn finish(reason: &str) -> String {
    match reason {
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
    .to_owned()
}

/// A whole (non-streamed) answer.
pub fn parse(body: &Value) -> Result<Answer, String> {
    let content = body.get("content").and_then(Value::as_array).ok_or("the answer has no content")?;
    let text: String = content
        .iter()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect();
    let of_type = |kind: &'static str| {
        content.iter().filter(move |block| block.get("type").and_then(Value::as_str) == Some(kind))
    };
    let tool_calls = of_type("tool_use")
        .map(|block| ToolCall {
            id: block.get("id").and_then(Value::as_str).unwrap_or_default().to_owned(),
            name: block.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
            arguments: block.get("input").cloned().unwrap_or_else(|| json!({})),
        })
        .collect();
    let thinking: Vec<&str> =
        of_type("thinking").filter_map(|block| block.get("thinking").and_then(Value::as_str)).collect();
    Ok(Answer {
        text,
        finish_reason: finish(body.get("stop_reason").and_then(Value::as_str).unwrap_or("end_turn")),
        model: body.get("model").and_then(Value::as_str).map(str::to_owned),
        input_tokens: body.pointer("/usage/input_tokens").and_then(Value::as_u64),
        output_tokens: body.pointer("/usage/output_tokens").and_then(Value::as_u64),
        tool_calls,
        reasoning: (!thinking.is_empty()).then(|| thinking.join("\n")),
    })
}

/// One streamed event (see [`super::openai::on_event`]).
pub fn on_event(event: Option<&str>, data: &str, state: &mut StreamState) -> Result<bool, String> {
    let value: Value = serde_json::from_str(data).map_err(|_| "a streamed event is not JSON".to_owned())?;
    let kind = event.or_else(|| value.get("type").and_then(Value::as_str)).unwrap_or_default();
    match kind {
        "message_start" => {
            if let Some(model) = value.pointer("/message/model").and_then(Value::as_str) {
                state.answer.model = Some(model.to_owned());
            }
            if let Some(input) = value.pointer("/message/usage/input_tokens").and_then(Value::as_u64) {
                state.answer.input_tokens = Some(input);
            }
            if let Some(output) = value.pointer("/message/usage/output_tokens").and_then(Value::as_u64) {
                state.answer.output_tokens = Some(output);
            }
        }
        "content_block_delta" => {
            if let Some(text) = value.pointer("/delta/text").and_then(Value::as_str) {
                state.delta.push_str(text);
            }
        }
        "message_delta" => {
            if let Some(reason) = value.pointer("/delta/stop_reason").and_then(Value::as_str) {
                state.answer.finish_reason = finish(reason);
            }
            if let Some(output) = value.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                state.answer.output_tokens = Some(output);
            }
            if let Some(input) = value.pointer("/usage/input_tokens").and_then(Value::as_u64) {
                state.answer.input_tokens = Some(input);
            }
        }
        "message_stop" => return Ok(true),
        "error" => {
            return Err(value
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("the stream reported an error")
                .to_owned())
        }
        _ => {}
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_tool_use_and_merged_tool_results_go_in_the_messages_shape() {
        let tools = [json!({ "name": "lookup", "description": "Looks up.", "inputSchema": { "type": "object" } })];
        let calls = json!([{ "id": "t1", "name": "lookup", "arguments": { "q": 1 } },
                           { "id": "t2", "name": "lookup", "arguments": { "q": 2 } }]);
        let messages = [
            json!({ "role": "system", "content": "Be brief." }),
            json!({ "role": "user", "content": "hi" }),
            json!({ "role": "assistant", "content": "Let me look.", "toolCalls": calls }),
            json!({ "role": "tool", "toolCallId": "t1", "name": "lookup", "content": "1" }),
            json!({ "role": "tool", "toolCallId": "t2", "name": "lookup", "content": "2" }),
        ];
        let turn =
            Turn { model: "m", messages: &messages, temperature: None, max_tokens: None, schema: None, tools: &tools };
        let body = body(&turn, false);
        assert_eq!(body["system"], "Be brief.");
        assert_eq!(
            body["tools"][0],
            json!({ "name": "lookup", "description": "Looks up.", "input_schema": { "type": "object" } })
        );
        let sent = body["messages"].as_array().unwrap();
        assert_eq!(sent.len(), 3, "user, assistant, one user message of both results: {body}");
        assert_eq!(sent[1]["content"][0], json!({ "type": "text", "text": "Let me look." }));
        assert_eq!(
            sent[1]["content"][2],
            json!({ "type": "tool_use", "id": "t2", "name": "lookup", "input": { "q": 2 } })
        );
        assert_eq!(sent[2]["role"], "user");
        assert_eq!(sent[2]["content"][1], json!({ "type": "tool_result", "tool_use_id": "t2", "content": "2" }));
    }

    #[test]
    fn tool_use_and_thinking_blocks_are_read_back() {
        let answer = parse(
            &json!({ "model": "m", "stop_reason": "tool_use", "usage": { "input_tokens": 3, "output_tokens": 2 },
            "content": [{ "type": "thinking", "thinking": "Look it up." }, { "type": "text", "text": "Checking." },
                        { "type": "tool_use", "id": "t1", "name": "lookup", "input": { "q": 1 } }] }),
        )
        .unwrap();
        assert_eq!((answer.finish_reason.as_str(), answer.text.as_str()), ("tool_calls", "Checking."));
        assert_eq!(answer.reasoning.as_deref(), Some("Look it up."));
        assert_eq!(
            answer.tool_calls,
            vec![ToolCall { id: "t1".into(), name: "lookup".into(), arguments: json!({ "q": 1 }) }]
        );
    }
}
