//! The fake model provider driven over loopback with reqwest, in both shapes: whole and
//! streamed answers (SSE parsed, tokens in order, usage and finish reason), the default echo,
//! errors and rate limits in each provider's error shape, the key check, request
//! validation, scripted drops, concurrency and the request record.

use std::time::Duration;

use serde_json::{json, Value};
use trellis_testkit::fake_model::{Api, FakeModel, FinishReason, ModelReply};

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().expect("client")
}

/// Status, `Retry-After`, `content-type` and the body text of a response.
struct Answer {
    status: u16,
    retry_after: Option<String>,
    content_type: String,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).expect("a JSON body")
    }
}

async fn read(response: reqwest::Response) -> Answer {
    let header = |name: &str| response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let (status, retry_after, content_type) =
        (response.status().as_u16(), header("retry-after"), header("content-type").unwrap_or_default());
    Answer { status, retry_after, content_type, text: response.text().await.expect("body") }
}

async fn openai(model: &FakeModel, key: Option<&str>, body: Value) -> Answer {
    let mut request = client().post(format!("{}/chat/completions", model.openai_base_url())).json(&body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    read(request.send().await.expect("sent")).await
}

async fn anthropic(model: &FakeModel, key: Option<&str>, body: Value) -> Answer {
    let mut request = client()
        .post(format!("{}/v1/messages", model.anthropic_base_url()))
        .header("anthropic-version", "2023-06-01")
        .json(&body);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    read(request.send().await.expect("sent")).await
}

fn openai_body(user: &str) -> Value {
    json!({"model": "gpt-test", "messages": [{"role": "user", "content": user}]})
}

fn anthropic_body(user: &str) -> Value {
    json!({"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": user}]})
}

/// The events of an SSE body: `(event name or "", parsed data or the raw data string)`.
fn sse(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = value.to_owned();
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data = value.to_owned();
                }
            }
            (name, serde_json::from_str(&data).unwrap_or(Value::String(data)))
        })
        .collect()
}

#[tokio::test]
async fn openai_whole_answer_has_the_scripted_text_finish_reason_and_usage() {
    let model = FakeModel::start().await;
    model.push(ModelReply::text("Hello there").finish(FinishReason::Length).usage(7, 3));
    let answer = openai(&model, None, openai_body("hi")).await;
    assert_eq!(answer.status, 200);
    assert!(answer.content_type.starts_with("application/json"));
    let body = answer.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-test");
    assert!(body["id"].as_str().is_some_and(|id| id.starts_with("chatcmpl-")));
    assert_eq!(body["choices"][0]["index"], 0);
    assert_eq!(body["choices"][0]["message"], json!({"role": "assistant", "content": "Hello there", "refusal": null}));
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"], json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}));
    assert_eq!(model.pending(), 0);
}

#[tokio::test]
async fn anthropic_whole_answer_maps_the_finish_reason() {
    let model = FakeModel::start().await;
    model.script(vec![ModelReply::text("Short.").finish(FinishReason::Length), ModelReply::text("Done.")]);
    let body = anthropic(&model, None, anthropic_body("hi")).await.json();
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["content"], json!([{"type": "text", "text": "Short."}]));
    assert_eq!(body["stop_reason"], "max_tokens");
    assert_eq!(body["usage"], json!({"input_tokens": 1, "output_tokens": 1}));
    let body = anthropic(&model, None, anthropic_body("again")).await.json();
    assert_eq!((body["content"][0]["text"].clone(), body["stop_reason"].clone()), (json!("Done."), json!("end_turn")));
}

#[tokio::test]
async fn the_default_reply_echoes_the_last_user_message_and_counts_words() {
    let model = FakeModel::start().await;
    let body = json!({"model": "gpt-test", "messages": [
        {"role": "system", "content": "You are terse"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": [{"type": "text", "text": "second one please"}]},
    ]});
    let body = openai(&model, None, body).await.json();
    assert_eq!(body["choices"][0]["message"]["content"], "echo: second one please");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"], json!({"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}));

    let mut request = anthropic_body("hello model");
    request["system"] = json!("be brief");
    let body = anthropic(&model, None, request).await.json();
    assert_eq!(body["content"][0]["text"], "echo: hello model");
    assert_eq!(body["usage"], json!({"input_tokens": 4, "output_tokens": 3}));
}

#[tokio::test]
async fn openai_stream_sends_tokens_in_order_then_finish_usage_and_done() {
    let model = FakeModel::start().await;
    model.push(ModelReply::tokens(["Hel", "lo", " world"]).usage(5, 3));
    let mut body = openai_body("hi");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let answer = openai(&model, None, body).await;
    assert_eq!(answer.status, 200);
    assert!(answer.content_type.starts_with("text/event-stream"));
    let events = sse(&answer.text);
    assert_eq!(events.last().map(|(_, data)| data.clone()), Some(json!("[DONE]")));
    let chunks: Vec<&Value> = events.iter().map(|(_, data)| data).filter(|data| data.is_object()).collect();
    assert!(chunks.iter().all(|chunk| chunk["object"] == "chat.completion.chunk" && chunk["model"] == "gpt-test"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let tokens: Vec<&str> = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .filter(|token| !token.is_empty())
        .collect();
    assert_eq!(tokens, ["Hel", "lo", " world"]);
    let finishes: Vec<&Value> =
        chunks.iter().map(|chunk| &chunk["choices"][0]["finish_reason"]).filter(|finish| !finish.is_null()).collect();
    assert_eq!(finishes, [&json!("stop")]);
    let last = chunks.last().expect("a usage chunk");
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"], json!({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}));
    assert!(chunks[..chunks.len() - 1].iter().all(|chunk| chunk["usage"].is_null()));
}

#[tokio::test]
async fn openai_stream_without_include_usage_has_no_usage_chunk_and_words_as_tokens() {
    let model = FakeModel::start().await;
    let mut body = openai_body("one two");
    body["stream"] = json!(true);
    let events = sse(&openai(&model, None, body).await.text);
    let chunks: Vec<&Value> = events.iter().map(|(_, data)| data).filter(|data| data.is_object()).collect();
    assert!(chunks.iter().all(|chunk| chunk.get("usage").is_none() && chunk["choices"].as_array().unwrap().len() == 1));
    let tokens: Vec<&str> =
        chunks.iter().filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(tokens, ["", "echo:", " one", " two"]);
}

#[tokio::test]
async fn anthropic_stream_sends_the_real_event_sequence() {
    let model = FakeModel::start().await;
    model.push(ModelReply::text("Hello big world").finish(FinishReason::Length));
    let mut body = anthropic_body("say hello");
    body["stream"] = json!(true);
    let answer = anthropic(&model, None, body).await;
    assert!(answer.content_type.starts_with("text/event-stream"));
    let events = sse(&answer.text);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert!(events.iter().all(|(name, data)| data["type"] == name.as_str()));
    let start = &events[0].1["message"];
    assert_eq!((start["role"].clone(), start["model"].clone()), (json!("assistant"), json!("claude-test")));
    assert_eq!(start["usage"]["input_tokens"], 2);
    assert_eq!(events[1].1["content_block"], json!({"type": "text", "text": ""}));
    let deltas: Vec<&Value> = events.iter().filter(|(name, _)| name == "content_block_delta").map(|(_, d)| d).collect();
    assert!(deltas.iter().all(|delta| delta["index"] == 0 && delta["delta"]["type"] == "text_delta"));
    let tokens: Vec<&str> = deltas.iter().filter_map(|delta| delta["delta"]["text"].as_str()).collect();
    assert_eq!(tokens, ["Hello", " big", " world"]);
    let message_delta = &events[7].1;
    assert_eq!(message_delta["delta"]["stop_reason"], "max_tokens");
    assert_eq!(message_delta["usage"]["output_tokens"], 3);
}

#[tokio::test]
async fn rate_limits_carry_retry_after_and_errors_use_each_providers_shape() {
    let model = FakeModel::start().await;
    model.script(vec![ModelReply::rate_limited(7), ModelReply::error(500, "boom")]);
    let limited = openai(&model, None, openai_body("hi")).await;
    assert_eq!((limited.status, limited.retry_after.as_deref()), (429, Some("7")));
    assert_eq!(limited.json()["error"]["type"], "requests");
    assert_eq!(limited.json()["error"]["code"], "rate_limit_exceeded");
    let failed = openai(&model, None, openai_body("hi")).await;
    assert_eq!(failed.status, 500);
    assert_eq!(failed.json()["error"]["message"], "boom");
    assert_eq!(failed.json()["error"]["type"], "server_error");
    assert_eq!(openai(&model, None, openai_body("hi")).await.status, 200, "the queue is spent: the echo again");

    model.script(vec![ModelReply::rate_limited(3), ModelReply::error(529, "busy")]);
    let limited = anthropic(&model, None, anthropic_body("hi")).await;
    assert_eq!((limited.status, limited.retry_after.as_deref()), (429, Some("3")));
    assert_eq!(limited.json()["type"], "error");
    assert_eq!(limited.json()["error"]["type"], "rate_limit_error");
    let mut streaming = anthropic_body("hi");
    streaming["stream"] = json!(true);
    let busy = anthropic(&model, None, streaming).await;
    assert_eq!(busy.status, 529, "an error is a JSON answer even when the request streams");
    assert_eq!(busy.json(), json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}));
}

#[tokio::test]
async fn a_required_key_turns_away_requests_without_it_and_keeps_the_queue() {
    let model = FakeModel::start().await;
    model.require_key("sk-test-123");
    model.push(ModelReply::text("for the keyed caller"));
    let missing = openai(&model, None, openai_body("hi")).await;
    assert_eq!(missing.status, 401);
    assert_eq!(missing.json()["error"]["code"], "invalid_api_key");
    assert_eq!(openai(&model, Some("sk-wrong"), openai_body("hi")).await.status, 401);
    let wrong = anthropic(&model, Some("sk-wrong"), anthropic_body("hi")).await;
    assert_eq!((wrong.status, wrong.json()["error"]["type"].clone()), (401, json!("authentication_error")));
    assert_eq!(model.pending(), 1, "a 401 consumes no scripted reply");
    let ok = openai(&model, Some("sk-test-123"), openai_body("hi")).await;
    assert_eq!(ok.json()["choices"][0]["message"]["content"], "for the keyed caller");
    assert_eq!(anthropic(&model, Some("sk-test-123"), anthropic_body("hi")).await.status, 200);
}

#[tokio::test]
async fn requests_the_real_apis_reject_get_a_400_or_404() {
    let model = FakeModel::start().await;
    let no_max_tokens = json!({"model": "claude-test", "messages": []});
    let answer = anthropic(&model, None, no_max_tokens).await;
    assert_eq!((answer.status, answer.json()["error"]["type"].clone()), (400, json!("invalid_request_error")));
    let no_version = client()
        .post(format!("{}/v1/messages", model.base_url()))
        .json(&anthropic_body("hi"))
        .send()
        .await
        .expect("sent");
    assert_eq!(no_version.status().as_u16(), 400);
    let not_json = client()
        .post(format!("{}/chat/completions", model.openai_base_url()))
        .body("{not json")
        .send()
        .await
        .expect("sent");
    assert_eq!(not_json.status().as_u16(), 400);
    let unknown = read(client().post(format!("{}/v1/completions", model.base_url())).send().await.expect("sent")).await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.json()["error"]["message"].is_string());
    assert_eq!(model.request_count(), 4, "rejected requests are recorded too");
}

#[tokio::test]
async fn malformed_and_mismatched_json_answers_are_just_text() {
    let model = FakeModel::start().await;
    model.script(vec![ModelReply::malformed_json(), ModelReply::json(&json!({"wrong": 1}))]);
    let first = openai(&model, None, openai_body("give json")).await.json();
    let text = first["choices"][0]["message"]["content"].as_str().expect("text").to_owned();
    assert!(serde_json::from_str::<Value>(&text).is_err());
    let second = anthropic(&model, None, anthropic_body("give json")).await.json();
    let text = second["content"][0]["text"].as_str().expect("text");
    assert_eq!(serde_json::from_str::<Value>(text).expect("JSON"), json!({"wrong": 1}));
}

#[tokio::test]
async fn a_scripted_drop_cuts_the_stream_after_the_given_tokens() {
    let model = FakeModel::start().await;
    model.script(vec![ModelReply::tokens(["one", " two", " three"]).drop_after(1), ModelReply::disconnect()]);
    let mut body = openai_body("hi");
    body["stream"] = json!(true);
    let mut response = client()
        .post(format!("{}/chat/completions", model.openai_base_url()))
        .json(&body)
        .send()
        .await
        .expect("headers arrive before the drop");
    let mut received = Vec::new();
    let outcome = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => received.extend_from_slice(&chunk),
            Ok(None) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    assert!(outcome.is_err(), "the body ends in an error, not a clean end");
    let text = String::from_utf8(received).expect("utf-8");
    assert!(text.contains(r#""content":"one""#));
    assert!(!text.contains("two") && !text.contains("[DONE]"));
    let gone = client().post(format!("{}/chat/completions", model.openai_base_url())).json(&openai_body("hi")).send();
    assert!(gone.await.is_err(), "a disconnect answers nothing");
}

#[tokio::test]
async fn a_slow_reply_does_not_hold_up_another_request() {
    let model = FakeModel::start().await;
    model.push(ModelReply::text("slow").delay(Duration::from_secs(60)));
    let slow = tokio::spawn(openai_owned(model.openai_base_url()));
    while model.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let fast = openai(&model, None, openai_body("quick")).await;
    assert_eq!(fast.json()["choices"][0]["message"]["content"], "echo: quick");
    assert!(!slow.is_finished(), "the first request is still waiting on its delay");
    slow.abort();
}

async fn openai_owned(base: String) -> u16 {
    let response = client().post(format!("{base}/chat/completions")).json(&openai_body("slow")).send().await;
    response.map_or(0, |response| response.status().as_u16())
}

#[tokio::test]
async fn every_request_is_recorded_with_lower_case_headers_and_its_body() {
    let model = FakeModel::start().await;
    let mut body = openai_body("first");
    body["temperature"] = json!(0.2);
    openai(&model, Some("sk-a"), body).await;
    anthropic(&model, Some("sk-b"), anthropic_body("second")).await;
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(
        (first.api, first.method.as_str(), first.path.as_str()),
        (Some(Api::OpenAi), "POST", "/v1/chat/completions")
    );
    assert_eq!(first.bearer(), Some("sk-a"));
    assert!(first.headers.iter().all(|(name, _)| name == &name.to_lowercase()));
    assert_eq!(first.body["temperature"], 0.2);
    assert_eq!(first.model(), Some("gpt-test"));
    assert!(!first.stream());
    let last = model.last_request().expect("a request");
    assert_eq!((last.api, last.path.as_str()), (Some(Api::Anthropic), "/v1/messages"));
    assert_eq!(last.header("X-Api-Key"), Some("sk-b"));
    assert_eq!(last.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(last.messages().len(), 1);
    assert_eq!(last.last_user_text().as_deref(), Some("second"));
    assert!(first.received <= last.received);
    assert_eq!(model.requests_to(Api::Anthropic), vec![last]);
    model.clear_requests();
    assert_eq!(model.request_count(), 0);
}

#[tokio::test]
async fn fifty_concurrent_requests_under_a_global_latency_are_all_answered() {
    let model = FakeModel::start().await;
    model.set_latency(Duration::from_millis(200));
    let calls: Vec<_> = (0..50).map(|_| tokio::spawn(openai_owned(model.openai_base_url()))).collect();
    for call in calls {
        assert_eq!(call.await.expect("joined"), 200);
    }
    assert_eq!(model.requests_to(Api::OpenAi).len(), 50);
}
