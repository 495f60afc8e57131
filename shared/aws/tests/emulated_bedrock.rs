//! The `bedrock` provider kind on the emulated AWS stack: `core.ai.callPrompt` through the
//! Converse client (`aws-sdk-bedrockruntime`, SigV4 with the stack's dummy credentials) against
//! the testkit's fake Bedrock runtime on 127.0.0.1 (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`). A run
//! completes with the text, `provider.usage` carries the token counts and the cost from the
//! model's prices; a throttled call is retried under the node's policy; an invalid structured
//! answer gets one repair turn (sent as alternating Converse messages); a streamed node calls
//! ConverseStream (the fake's binary event stream) and gets batched chunks in order, and a
//! stream broken by an exception event is retried; a `ValidationException` fails the node without a retry; discovery
//! advertises the provider, never as BYOK; an agent's tool turns (the Converse client called
//! directly) round-trip `toolUse`/`toolResult` blocks, and a `vendor.trellis.agent` run on the
//! stack calls its HTTP tool between two Converse turns. Without the emulators the suite is
//! ignored.

mod support;

use serde_json::{json, Value};
use support::{require_emulators, stack_with, AwsDriver};
use trellis_activities::ai::provider::{Invocation, Turn};
use trellis_activities::ai::{parse_providers_for, Backend, ProviderConfig};
use trellis_testkit::fake_bedrock::{BedrockReply, FakeBedrock};
use trellis_testkit::fake_model::{ModelReply, ToolCallReply};
use trellis_testkit::http_server::{Reply, TestServer};
use trellis_testkit::script::Runner;

const MODEL: &str = "anthropic.claude-3-haiku-20240307-v1:0";

fn providers() -> Value {
    json!([{"id": "br", "kind": "bedrock", "default": true,
            "models": [{"id": MODEL, "inputUsdPerMTok": 3.0, "outputUsdPerMTok": 15.0}]}])
}

fn workflow(id: &str, config: Value) -> Value {
    let retry = json!({"retry": {"maxAttempts": 3, "initialIntervalMs": 10, "backoffCoefficient": 1.0}});
    json!({"id": id, "name": id, "version": "1", "edges": [],
           "nodes": [{"id": "ask", "typeId": "core.ai.callPrompt", "config": config, "settings": retry}]})
}

fn workflows() -> Vec<Value> {
    let schema = json!({
        "type": "object", "additionalProperties": false, "required": ["answer", "confidence"],
        "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    });
    vec![
        workflow(
            "br-plain",
            json!({"systemPrompt": "Be brief.", "prompt": "Say hi to {{variables.who}}", "maxTokens": 64}),
        ),
        workflow("br-structured", json!({"prompt": "Answer {{variables.q}}", "responseSchema": schema})),
        workflow("br-streamed", json!({"provider": "br", "prompt": "tell", "stream": true})),
    ]
}

fn of_type<'a>(events: &'a [Value], event_type: &str) -> Vec<&'a Value> {
    events.iter().filter(|event| event["type"] == event_type).collect()
}

async fn debug_log(stack: &mut support::Stack, run_id: &str) -> Vec<Value> {
    let path = format!("/v1/runs/{run_id}/events/poll?timeout=0&streamMode=debug");
    let (status, page) = stack.api("GET", &path, None).await;
    assert_eq!(status, 200, "{page}");
    page["events"].as_array().cloned().unwrap_or_default()
}

/// Plays `script` on the stack; returns its debug log and snapshot.
async fn play(stack: &mut support::Stack, script: Value) -> (Vec<Value>, Value) {
    let finished = Runner::new(&mut AwsDriver(stack)).run(&script).await;
    let log = debug_log(stack, &finished.run_id).await;
    let snapshot = stack.snapshot(&finished.run_id).await;
    (log, snapshot)
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn call_prompt_runs_on_bedrock_through_converse() {
    require_emulators();
    let fake = FakeBedrock::start().await;
    // The only test of this binary: nothing else reads the variable.
    std::env::set_var("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.endpoint_url());
    let mut stack = stack_with(Default::default(), providers().to_string()).await;
    for definition in workflows() {
        let (status, body) = stack.api("POST", "/v1/workflows", Some(definition)).await;
        assert_eq!(status, 201, "{body}");
    }

    // Discovery: the provider is routable, and not BYOK (IAM auth).
    let (_, discovery) = stack.request("GET", "/.well-known/openwop", None, false).await;
    let ai = &discovery["aiProviders"];
    assert_eq!((ai["supported"].clone(), ai["byok"].clone()), (json!(["br"]), json!([])), "{discovery}");

    // A plain call: the text, the usage, the cost; a signed Converse request, no key.
    fake.script([ModelReply::text("Hello, Ada").usage(12, 3)]);
    let script = json!({"id": "plain", "workflowId": "br-plain", "request": {"inputs": {"who": "Ada"}},
                        "expect": {"status": "completed"}});
    let (log, snapshot) = play(&mut stack, script).await;
    let outputs = &snapshot["variables"]["ask"];
    assert_eq!(outputs["text"], "Hello, Ada", "{snapshot}");
    assert_eq!((outputs["provider"].clone(), outputs["model"].clone()), (json!("br"), json!(MODEL)));
    assert_eq!(outputs["usage"], json!({"inputTokens": 12, "outputTokens": 3, "totalTokens": 15}));
    let usage = of_type(&log, "provider.usage");
    assert_eq!(usage.len(), 1, "{log:?}");
    let payload = &usage[0]["payload"];
    assert_eq!((payload["provider"].clone(), payload["model"].clone()), (json!("br"), json!(MODEL)));
    assert_eq!((payload["inputTokens"].clone(), payload["outputTokens"].clone()), (json!(12), json!(3)));
    let cost = payload["costEstimateUsd"].as_f64().expect("a cost estimate");
    assert!((cost - (12.0 * 3.0 + 3.0 * 15.0) / 1e6).abs() < 1e-12, "{payload}");
    assert_eq!(snapshot["metrics"]["openwopCost"]["provider"], "br", "{snapshot}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.model_id.as_deref(), Some(MODEL));
    assert!(request.signed(), "{:?}", request.headers);
    assert!(request.header("x-api-key").is_none());
    assert!(request.header("x-trellis-request-key").is_some_and(|key| !key.is_empty()));
    assert_eq!(request.last_user_text().as_deref(), Some("Say hi to Ada"));
    assert_eq!(request.system_text(), "Be brief.");
    assert_eq!(request.body["inferenceConfig"]["maxTokens"], 64);

    // A throttled call is retried (`provider_quota_exhausted`, retryable), then answers.
    fake.clear_requests();
    fake.script([BedrockReply::throttled(), ModelReply::text("fine").into()]);
    let script = json!({"id": "throttled", "workflowId": "br-plain", "request": {"inputs": {"who": "Bo"}},
                        "expect": {"status": "completed"}});
    let (log, snapshot) = play(&mut stack, script).await;
    assert_eq!(snapshot["variables"]["ask"]["text"], "fine", "{snapshot}");
    let retried = of_type(&log, "node.retried");
    assert_eq!(retried.len(), 1, "{log:?}");
    let last_error = &retried[0]["payload"]["lastError"];
    assert_eq!(last_error["code"], "provider_quota_exhausted", "{last_error}");
    assert_eq!(fake.requests().len(), 2, "the SDK's own retries are off");

    // An invalid structured answer is repaired once, in alternating Converse messages.
    fake.clear_requests();
    let answer = json!({"answer": "because", "confidence": 0.9});
    fake.script([ModelReply::text("not json"), ModelReply::json(&answer)]);
    let script = json!({"id": "structured", "workflowId": "br-structured", "request": {"inputs": {"q": "why"}},
                        "expect": {"status": "completed"}});
    let (log, snapshot) = play(&mut stack, script).await;
    assert_eq!(snapshot["variables"]["ask"]["data"], answer, "{snapshot}");
    assert_eq!(of_type(&log, "provider.usage").len(), 2, "the repair turn is a second invocation");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].system_text().contains("\"confidence\""), "the schema is asked for");
    let roles: Vec<&Value> = requests[1].messages().iter().map(|message| &message["role"]).collect();
    assert_eq!(roles, [&json!("user"), &json!("assistant"), &json!("user")]);

    // A streamed node calls ConverseStream: its deltas arrive as batched chunks, in order,
    // the last closing with the usage.
    fake.clear_requests();
    let tokens: Vec<String> = (0..40).map(|index| format!("t{index} ")).collect();
    fake.script([ModelReply::tokens(tokens.clone()).usage(5, 40)]);
    let script = json!({"id": "streamed", "workflowId": "br-streamed", "expect": {"status": "completed"}});
    let (log, snapshot) = play(&mut stack, script).await;
    assert!(fake.requests()[0].stream, "ConverseStream was called");
    let chunks = of_type(&log, "output.chunk");
    assert!(!chunks.is_empty() && chunks.len() < tokens.len(), "batched: {} for {}", chunks.len(), tokens.len());
    let parts: Vec<String> = chunks
        .iter()
        .flat_map(|event| event["payload"]["chunk"]["parts"].as_array().cloned().unwrap_or_default())
        .map(|part| part.as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(parts.concat(), tokens.concat(), "every token, in order");
    let last = &chunks.last().unwrap()["payload"]["chunk"];
    assert_eq!(last["isLast"], true, "{last}");
    assert_eq!(snapshot["variables"]["ask"]["text"], tokens.concat());
    assert_eq!(snapshot["variables"]["ask"]["usage"]["outputTokens"], 40, "{snapshot}");
    assert_eq!(of_type(&log, "provider.usage")[0]["payload"]["inputTokens"], 5);

    // A stream broken by a modelStreamErrorException event is retried (`provider_unavailable`).
    fake.clear_requests();
    fake.script([
        BedrockReply::stream_exception("half an answer", 2, "modelStreamErrorException", "The stream broke"),
        ModelReply::text("whole answer").into(),
    ]);
    let script = json!({"id": "broken-stream", "workflowId": "br-streamed", "expect": {"status": "completed"}});
    let (log, snapshot) = play(&mut stack, script).await;
    let retried = of_type(&log, "node.retried");
    assert_eq!(retried.len(), 1, "{log:?}");
    assert_eq!(retried[0]["payload"]["lastError"]["code"], "provider_unavailable", "{}", retried[0]);
    assert_eq!(snapshot["variables"]["ask"]["text"], "whole answer");
    assert_eq!(fake.requests().len(), 2);

    // A ValidationException is not retried.
    fake.clear_requests();
    fake.script([BedrockReply::exception(400, "ValidationException", "maxTokens is too large")]);
    let script = json!({"id": "rejected", "workflowId": "br-plain", "request": {"inputs": {"who": "Cy"}},
                        "expect": {"status": "failed"}});
    let (log, _) = play(&mut stack, script).await;
    let failed = of_type(&log, "node.failed");
    assert_eq!(failed[0]["payload"]["error"]["code"], "provider_request_rejected", "{log:?}");
    assert!(of_type(&log, "node.retried").is_empty());
    assert_eq!(fake.requests().len(), 1);

    tool_turns_round_trip(&fake).await;

    // An agent on the stack: its model turns go through Converse, its HTTP tool to 127.0.0.1.
    let orders = TestServer::start().await;
    orders.route("/orders/42", vec![Reply::json(200, &json!({"status": "shipped"}))]);
    let tools = json!([{"name": "order_status", "description": "The status of an order.",
        "inputSchema": {"type": "object", "additionalProperties": false,
                        "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]},
        "http": {"method": "GET", "url": orders.url("/orders/{{inputs.orderId}}"), "timeoutMs": 5000}}]);
    let agent = json!({"id": "br-agent", "name": "br-agent", "version": "1", "edges": [],
        "nodes": [{"id": "agent", "typeId": "vendor.trellis.agent",
                   "config": {"route": format!("br/{MODEL}"), "instructions": "Answer about orders.",
                              "prompt": "Where is order 42?", "tools": tools, "maxTurns": 3}}]});
    let (status, body) = stack.api("POST", "/v1/workflows", Some(agent)).await;
    assert_eq!(status, 201, "{body}");
    fake.clear_requests();
    fake.script([
        ModelReply::tool_calls([ToolCallReply::new("order_status", json!({"orderId": "42"}))]),
        ModelReply::text("Order 42 has shipped."),
    ]);
    let script = json!({"id": "agent", "workflowId": "br-agent", "expect": {"status": "completed"}});
    let (log, snapshot) = play(&mut stack, script).await;
    assert_eq!(snapshot["variables"]["agent"]["text"], "Order 42 has shipped.", "{snapshot}");
    assert_eq!(of_type(&log, "agent.toolCalled").len(), 1, "{log:?}");
    assert_eq!(of_type(&log, "agent.toolReturned").len(), 1, "{log:?}");
    assert_eq!(of_type(&log, "provider.usage").len(), 2, "one per model turn");
    assert_eq!(orders.requests().len(), 1);
    let turns = fake.requests();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0].body["toolConfig"]["tools"][0]["toolSpec"]["name"], "order_status");
    let sent = turns[1].messages();
    let result = sent.last().and_then(|message| message["content"][0].get("toolResult")).expect("a toolResult");
    assert!(result["content"][0]["text"].as_str().is_some_and(|text| text.contains("shipped")), "{result}");
}

fn turn<'a>(messages: &'a [Value], tools: &'a [Value]) -> Turn<'a> {
    Turn { model: MODEL, messages, temperature: None, max_tokens: None, schema: None, tools }
}

fn invocation<'a>(provider: &'a ProviderConfig, turn: Turn<'a>) -> Invocation<'a> {
    Invocation {
        provider,
        key: None,
        turn,
        stream: false,
        idempotency_key: "idem",
        request_key: "req",
        attempt: 0,
        deadline: std::time::Instant::now() + std::time::Duration::from_secs(10),
    }
}

/// An agent's turns through the provider's Converse client: tools as `toolConfig`, the
/// model's `toolUse` blocks read back as tool calls, the next turn's `toolResult` naming them.
async fn tool_turns_round_trip(fake: &FakeBedrock) {
    let document = parse_providers_for(&providers().to_string(), Backend::Aws).unwrap();
    let providers = trellis_aws::bedrock::with_backend(document, &trellis_aws::app::sdk_config().await);
    let provider = providers.get("br").unwrap();
    let backend = provider.backend.clone().expect("the Converse client is attached");
    let tools = [json!({"name": "weather", "description": "The weather of a city",
                        "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}})];
    fake.clear_requests();
    fake.script([
        ModelReply::tool_calls([ToolCallReply::new("weather", json!({"city": "Oslo"}))]).reasoning("Need the weather."),
        ModelReply::text("Cold in Oslo."),
    ]);
    let first = [json!({"role": "user", "content": "Weather in Oslo?"})];
    let answer = backend.converse(&invocation(provider, turn(&first, &tools))).await.expect("a tool call");
    assert_eq!(answer.finish_reason, "tool_calls");
    assert_eq!(answer.reasoning.as_deref(), Some("Need the weather."));
    assert_eq!(answer.tool_calls.len(), 1, "{answer:?}");
    let call = &answer.tool_calls[0];
    assert_eq!((call.name.as_str(), call.arguments.clone()), ("weather", json!({"city": "Oslo"})));
    assert_eq!(fake.requests()[0].body["toolConfig"]["tools"][0]["toolSpec"]["name"], "weather");

    let second = [
        first[0].clone(),
        json!({"role": "assistant", "content": "", "toolCalls": [call.to_value()]}),
        json!({"role": "tool", "toolCallId": call.id, "name": "weather", "content": "-3 C"}),
    ];
    let answer = backend.converse(&invocation(provider, turn(&second, &tools))).await.expect("the final answer");
    assert_eq!((answer.text.as_str(), answer.finish_reason.as_str()), ("Cold in Oslo.", "stop"));
    let sent = &fake.requests()[1].body["messages"];
    assert_eq!(sent[1]["content"][0]["toolUse"]["toolUseId"], json!(call.id), "{sent}");
    assert_eq!(sent[2]["content"][0]["toolResult"]["toolUseId"], json!(call.id), "{sent}");
}
