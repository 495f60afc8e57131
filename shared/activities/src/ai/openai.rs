//! The OpenAI-compatible chat-completions wire format (`POST {baseUrl}/chat/completions`,
//! `Authorization: Bearer <key>`): the request body, a whole answer and the streamed
//! `chat.completion.chunk` events (`data: [DONE]` ends the stream; with
//! `stream_options.include_usage` the last chunk carries `usage`).
//!
//! Tool calling: the turn's tools go as `tools: [{type: "function", function: {name,
//! description, parameters}}]`; an assistant message with `toolCalls` as `tool_calls: [{id,
//! type: "function", function: {name, arguments: "<JSON text>"}}]`; a tool result as `{role:
//! "tool", tool_call_id, content}`; the answer's `message.tool_calls` are read back (their
//! `arguments` parsed). A streamed answer carries text only (tool turns are not streamed).

use serde_json::{json, Value};

use super::provider::{Answer, StreamState, ToolCall, Turn};

/// The `arguments` text sent back: an unparsable answer's raw text as it came, else the JSON.
fn arguments_text(arguments: &Value) -> String {
    arguments.as_str().map_or_else(|| arguments.to_string(), str::to_owned)
}

/// A message of the turn in this wire format (plain `{role, content}` messages unchanged).
fn message(message: &Value) -> Value {
    let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
    let content = message.get("content").cloned().unwrap_or(Value::Null);
    match (role, message.get("toolCalls").and_then(Value::as_array)) {
        ("assistant", Some(calls)) => {
            let calls: Vec<Value> = calls
                .iter()
                .map(|call| {
                    json!({
                        "id": call["id"],
                        "type": "function",
                        "function": { "name": call["name"], "arguments": arguments_text(&call["arguments"]) },
                    })
                })
                .collect();
            let content = if content.as_str().is_some_and(|text| !text.is_empty()) { content } else { Value::Null };
            json!({ "role": "assistant", "content": content, "tool_calls": calls })
        }
        ("tool", _) => json!({ "role": "tool", "tool_call_id": message["toolCallId"], "content": content }),
        _ => message.clone(),
    }
}

/// The request body.
pub fn body(turn: &Turn<'_>, stream: bool) -> Value {
    let messages: Vec<Value> = turn.messages.iter().map(message).collect();
    let mut body = json!({ "model": turn.model, "messages": messages });
    if !turn.tools.is_empty() {
        let tools: Vec<Value> = turn
            .tools
            .iter()
            .map(|tool| {
                json!({ "type": "function", "function": {
                    "name": tool["name"], "description": tool["description"], "parameters": tool["inputSchema"],
                } })
            })
            .collect();
        body["tools"] = json!(tools);
    }
    if let Some(temperature) = turn.temperature {
        body["temperature"] = json!(temperature);
    }
    if let Some(max) = turn.max_tokens {
        body["max_tokens"] = json!(max);
    }
    if let Some(schema) = turn.schema {
        body["response_format"] =
            json!({ "type": "json_schema", "json_schema": { "name": "response", "schema": schema, "strict": true } });
    }
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({ "include_usage": true });
    }
    body
}

/// The finish reason in the chunk vocabulary (`stop`, `length`, `tool_calls`, `content_filter`).
fn finish(reason: &str) -> String {
    match reason {
        "length" | "tool_calls" | "content_filter" => reason.to_owned(),
        "function_call" => "tool_calls".to_owned(),
        _ => "stop".to_owned(),
    }
}

fn usage(answer: &mut Answer, usage: &Value) {
    if let Some(input) = usage.get("prompt_tokens").and_then(Value::as_u64) {
        answer.input_tokens = Some(input);
    }
    if let Some(output) = usage.get("completion_tokens").and_then(Value::as_u64) {
        answer.output_tokens = Some(output);
    }
}

/// A whole (non-streamed) answer.
pub fn parse(body: &Value) -> Result<Answer, String> {
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or("the answer has no choices")?;
    let mut answer = Answer {
        text: choice.pointer("/message/content").and_then(Value::as_str).unwrap_or_default().to_owned(),
        finish_reason: finish(choice.get("finish_reason").and_then(Value::as_str).unwrap_or("stop")),
        model: body.get("model").and_then(Value::as_str).map(str::to_owned),
        ..Answer::default()
    };
    if let Some(reported) = body.get("usage") {
        usage(&mut answer, reported);
    }
    answer.reasoning = choice
        .pointer("/message/reasoning_content")
        .and_then(Value::as_str)
        .filter(|text| !text.trim().is_empty())
        .map(str::to_owned);
    for call in choice.pointer("/message/tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let name = call.pointer("/function/name").and_then(Value::as_str).ok_or("a tool call has no function name")?;
        let arguments = match call.pointer("/function/arguments") {
            // Text that does not parse stays the raw string: the engine answers the model
            // `invalid_arguments` (the arguments are not an object) instead of calling with `{}`.
            Some(Value::String(text)) => serde_json::from_str(text).unwrap_or_else(|_| json!(text)),
            Some(value @ Value::Object(_)) => value.clone(),
            _ => json!({}),
        };
        let id = call.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
        answer.tool_calls.push(ToolCall { id, name: name.to_owned(), arguments });
    }
    if !answer.tool_calls.is_empty() {
        answer.finish_reason = "tool_calls".to_owned();
    }
    Ok(answer)
}

/// One streamed event: its text delta (if any) goes to `state.delta`; `Ok(true)` once the
/// stream is done.
pub fn on_event(data: &str, state: &mut StreamState) -> Result<bool, String> {
    if data.trim() == "[DONE]" {
        return Ok(true);
    }
    let chunk: Value = serde_json::from_str(data).map_err(|_| "a streamed chunk is not JSON".to_owned())?;
    if let Some(error) = chunk.get("error") {
        return Err(error.get("message").and_then(Value::as_str).unwrap_or("the stream reported an error").to_owned());
    }
    if let Some(model) = chunk.get("model").and_then(Value::as_str) {
        state.answer.model = Some(model.to_owned());
    }
    if let Some(reported) = chunk.get("usage").filter(|usage| usage.is_object()) {
        usage(&mut state.answer, reported);
    }
    if let Some(choice) = chunk.get("choices").and_then(Value::as_array).and_then(|choices| choices.first()) {
        if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
            state.delta.push_str(text);
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            state.answer.finish_reason = finish(reason);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_tool_calls_and_tool_results_go_in_the_chat_completions_shape() {
        let tools = [json!({ "name": "lookup", "description": "Looks up.", "inputSchema": { "type": "object" } })];
        let messages = [
            json!({ "role": "user", "content": "hi" }),
            json!({ "role": "assistant", "content": "", "toolCalls": [{ "id": "c1", "name": "lookup", "arguments": { "q": 1 } }] }),
            json!({ "role": "tool", "toolCallId": "c1", "name": "lookup", "content": "{\"hits\":3}" }),
        ];
        let turn =
            Turn { model: "m", messages: &messages, temperature: None, max_tokens: None, schema: None, tools: &tools };
        let body = body(&turn, false);
        assert_eq!(
            body["tools"][0],
            json!({ "type": "function", "function": { "name": "lookup", "description": "Looks up.", "parameters": { "type": "object" } } })
        );
        assert_eq!(body["messages"][0], messages[0]);
        let call = &body["messages"][1];
        assert_eq!(
            (call["content"].clone(), call["tool_calls"][0]["function"]["arguments"].clone()),
            (Value::Null, json!("{\"q\":1}"))
        );
        assert_eq!(body["messages"][2], json!({ "role": "tool", "tool_call_id": "c1", "content": "{\"hits\":3}" }));
        let plain = Turn { tools: &[], ..turn };
        assert!(super::body(&plain, false).get("tools").is_none(), "no tools: no `tools`");
    }

    #[test]
    fn an_answer_with_tool_calls_and_reasoning_is_read_back() {
        let answer = parse(&json!({ "model": "m", "choices": [{ "finish_reason": "tool_calls", "message": {
            "content": null, "reasoning_content": "Look it up first.",
            "tool_calls": [{ "id": "c1", "type": "function", "function": { "name": "lookup", "arguments": "{\"q\":1}" } },
                           { "id": "c2", "type": "function", "function": { "name": "other", "arguments": "not json" } }] } }] }))
        .unwrap();
        assert_eq!(answer.finish_reason, "tool_calls");
        assert_eq!(answer.reasoning.as_deref(), Some("Look it up first."));
        assert_eq!(
            answer.tool_calls[0],
            ToolCall { id: "c1".into(), name: "lookup".into(), arguments: json!({ "q": 1 }) }
        );
        assert_eq!(answer.tool_calls[1].arguments, json!("not json"), "unparsable arguments stay the raw text");
        assert_eq!(arguments_text(&answer.tool_calls[1].arguments), "not json", "and go back as they came");
        assert!(parse(&json!({ "choices": [{ "message": { "content": "hi" } }] })).unwrap().tool_calls.is_empty());
    }
}
