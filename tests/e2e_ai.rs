//! `core.ai.callPrompt` on the embedded host, end to end, against the testkit's fake model
//! provider on 127.0.0.1 (both wire formats): a structured answer lands in the variables;
//! an answer that stays invalid after the one repair turn fails with
//! `response_schema_invalid`; a 429 is retried under `settings.retry`; streamed tokens
//! arrive as batched `output.chunk` events in order; every provider invocation's
//! `provider.usage` precedes `node.completed`; the provider key (a canary held in the
//! secrets file) appears in no event, snapshot, debug bundle or log line; the
//! `stream-text` mock answers a test:seams run with no provider at all; a bad providers
//! file stops the host naming the field; so does a `bedrock` entry (AWS backend only), and a
//! node naming Bedrock is refused at registration.

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{logs, serve_args, start, Client, Reference, KEY};
use serde_json::{json, Value};
use trellis::host::{EmbeddedHost, HostOptions};
use trellis_testkit::fake_model::{FakeModel, ModelReply};

const CANARY: &str = "sk-test-CANARY-e2e-ai-5f4e3d2c1b0a";
const WITHIN: Duration = Duration::from_secs(20);

fn write_file(dir: &Path, name: &str, document: &Value) -> PathBuf {
    let path = dir.join(name);
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(document.to_string().as_bytes()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    path
}

/// A host whose providers `oa` (OpenAI) and `an` (Anthropic) point at `model`, with the key
/// in its secrets file.
async fn host_with(model: &FakeModel, dir: &Path) -> (EmbeddedHost, Client) {
    let mut args = serve_args(None);
    args.secrets_file = Some(write_file(dir, "secrets.json", &json!({"secrets": {"model-key": CANARY}})));
    args.ai.providers_file = Some(write_file(
        dir,
        "providers.json",
        &json!([
            {"id": "oa", "kind": "openai", "baseUrl": model.openai_base_url(), "credentialsRef": "model-key",
             "models": [{"id": "gpt-test", "inputUsdPerMTok": 1.0, "outputUsdPerMTok": 4.0}], "default": true},
            {"id": "an", "kind": "anthropic", "baseUrl": model.anthropic_base_url(), "credentialsRef": "model-key",
             "models": ["claude-test"]}
        ]),
    ));
    // Loopback is not allowed for workflows' URLs here: the providers reach it as pinned
    // operator destinations.
    args.http_allow_private_nets = String::new();
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    (host, client)
}

fn workflow(id: &str, node: Value) -> Value {
    json!({"id": id, "name": id, "nodes": [node], "edges": []})
}

async fn register(client: &Client, definition: Value) {
    let (status, body) = client.request("POST", "/v1/workflows", Some(definition)).await;
    assert_eq!(status, 201, "{body}");
}

async fn run(client: &Client, workflow_id: &str, extra: Value) -> (String, Value, Vec<Value>) {
    let mut body = json!({"workflowId": workflow_id, "inputs": {"city": "Oslo"}});
    if let Some(extra) = extra.as_object() {
        for (key, value) in extra {
            body[key] = value.clone();
        }
    }
    let run_id = client.create(body).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    let events = client.debug_events(&run_id).await;
    (run_id, snapshot, events)
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|event| event["type"] == kind).collect()
}

fn position(events: &[Value], kind: &str) -> Option<usize> {
    events.iter().position(|event| event["type"] == kind)
}

fn schema() -> Value {
    json!({"type": "object", "additionalProperties": false,
           "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
           "required": ["city", "population"]})
}

async fn assert_clean(client: &Client, run_id: &str, events: &[Value]) {
    assert!(!Value::Array(events.to_vec()).to_string().contains("CANARY"), "the events carry the key");
    assert!(!client.snapshot(run_id).await.to_string().contains("CANARY"), "the snapshot carries the key");
    let (status, bundle) = client.request("GET", &format!("/v1/runs/{run_id}/debug-bundle"), None).await;
    assert_eq!(status, 200, "{bundle}");
    assert!(!bundle.to_string().contains("CANARY"), "the debug bundle carries the key");
}

#[tokio::test]
async fn model_calls_end_to_end_with_both_providers_and_no_key_anywhere() {
    let logs = logs();
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.require_key(CANARY);
    let (host, client) = host_with(&model, dir.path()).await;

    let discovery = client.discovery().await;
    assert_eq!(discovery["aiProviders"]["supported"], json!(["oa", "an"]), "{discovery}");
    assert_eq!(discovery["providerUsage"], json!({"supported": true, "costEstimates": true, "currency": "USD"}));
    assert!(discovery.get("testing").is_none(), "no mock providers without the test seams");

    // A structured answer, validated: `data` in the node's variables.
    register(
        &client,
        workflow(
            "structured",
            json!({"id": "ask", "typeId": "core.ai.callPrompt",
            "config": {"prompt": "Facts about {{variables.city}} as JSON", "responseSchema": schema()}}),
        ),
    )
    .await;
    model.push(ModelReply::json(&json!({"city": "Oslo", "population": 700000})).usage(12, 9));
    let (run_id, snapshot, events) = run(&client, "structured", json!({})).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(snapshot["variables"]["ask"]["data"], json!({"city": "Oslo", "population": 700000}), "{snapshot}");
    assert_eq!(snapshot["variables"]["ask"]["usage"]["totalTokens"], 21);
    let usage = of_type(&events, "provider.usage");
    assert_eq!(usage.len(), 1, "{events:?}");
    assert_eq!(usage[0]["payload"]["inputTokens"], 12);
    assert!(usage[0]["payload"]["costEstimateUsd"].as_f64().is_some_and(|cost| cost > 0.0));
    assert!(position(&events, "provider.usage") < position(&events, "node.completed"));
    assert_eq!(model.last_request().unwrap().last_user_text().as_deref(), Some("Facts about Oslo as JSON"));
    assert_clean(&client, &run_id, &events).await;

    // Still invalid after the one repair turn: response_schema_invalid, two usages.
    model.script(vec![ModelReply::json(&json!({"town": "Oslo"})), ModelReply::text("still not it")]);
    let before = model.request_count();
    let (run_id, snapshot, events) = run(&client, "structured", json!({})).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "response_schema_invalid", "{snapshot}");
    assert_eq!(model.request_count() - before, 2, "one call and one repair turn");
    assert_eq!(of_type(&events, "provider.usage").len(), 2);
    assert!(!snapshot.to_string().contains("still not it"), "the answer is not echoed");
    assert_clean(&client, &run_id, &events).await;

    // A 429 is retried under settings.retry, then answers.
    register(
        &client,
        workflow(
            "retried",
            json!({"id": "ask", "typeId": "core.ai.callPrompt",
            "settings": {"retry": {"maxAttempts": 3, "initialIntervalMs": 10, "maxIntervalMs": 20}},
            "config": {"provider": "an", "prompt": "hi"}}),
        ),
    )
    .await;
    model.script(vec![ModelReply::rate_limited(0), ModelReply::text("after the limit").usage(2, 3)]);
    let (run_id, snapshot, events) = run(&client, "retried", json!({})).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(snapshot["variables"]["ask"]["text"], "after the limit");
    assert_eq!(of_type(&events, "node.retried").len(), 1, "{events:?}");
    assert_eq!(of_type(&events, "provider.usage").len(), 1, "the 429 reported no usage");
    assert_eq!(model.last_request().unwrap().header("x-api-key"), Some(CANARY));
    assert_clean(&client, &run_id, &events).await;

    // Streams of both kinds: batched output.chunk events, in order, usage before completion.
    let tokens: Vec<String> = (0..60).map(|index| format!("w{index} ")).collect();
    for (provider, model_id) in [("oa", "gpt-test"), ("an", "claude-test")] {
        let id = format!("stream-{provider}");
        register(
            &client,
            workflow(
                &id,
                json!({"id": "ask", "typeId": "core.ai.callPrompt",
                "config": {"provider": provider, "model": model_id, "prompt": "stream", "stream": true}}),
            ),
        )
        .await;
        model.push(ModelReply::tokens(tokens.clone()).usage(4, 60));
        let (run_id, snapshot, events) = run(&client, &id, json!({})).await;
        assert_eq!(snapshot["status"], "completed", "{provider}: {snapshot}");
        assert_eq!(snapshot["variables"]["ask"]["text"], tokens.concat());
        let chunks = of_type(&events, "output.chunk");
        assert!(!chunks.is_empty() && chunks.len() < tokens.len(), "{provider}: {} chunk events", chunks.len());
        let streamed: String = chunks
            .iter()
            .flat_map(|event| event["payload"]["chunk"]["parts"].as_array().cloned().unwrap_or_default())
            .map(|part| part.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(streamed, tokens.concat(), "{provider}: in order");
        let last = &chunks.last().unwrap()["payload"]["chunk"];
        assert_eq!(last["isLast"], true);
        assert_eq!(last["meta"]["usage"]["completionTokens"], 60);
        assert_eq!(last["meta"]["provider"], provider);
        assert_eq!(of_type(&events, "provider.usage").len(), 1);
        assert!(position(&events, "provider.usage") < position(&events, "node.completed"), "{provider}");
        assert_clean(&client, &run_id, &events).await;
    }

    // A provider that is not configured: provider_not_supported, nothing sent.
    register(
        &client,
        workflow(
            "unknown",
            json!({"id": "ask", "typeId": "core.ai.callPrompt",
            "config": {"provider": "nope", "prompt": "hi"}}),
        ),
    )
    .await;
    let before = model.request_count();
    let (_, snapshot, _) = run(&client, "unknown", json!({})).await;
    assert_eq!(snapshot["error"]["code"], "provider_not_supported", "{snapshot}");
    assert_eq!(model.request_count(), before);

    host.stop().await;
    let captured = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(captured.contains("model provider configured"), "the capture works");
    assert!(captured.contains("core.ai.callPrompt answered"), "debug lines of the calls are captured");
    assert!(!captured.contains("CANARY"), "the logs carry the key");
}

#[tokio::test]
async fn the_stream_text_mock_answers_a_test_run_without_any_provider() {
    let _logs = logs();
    let mut args = serve_args(None);
    args.test_seams = true;
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let discovery = client.discovery().await;
    assert!(discovery["testing"]["mockProviders"].as_array().unwrap().contains(&json!("stream-text")), "{discovery}");

    register(
        &client,
        workflow(
            "conformance-stream-text",
            json!({"id": "ai", "typeId": "core.ai.callPrompt",
            "config": {"promptId": "conformance.stream-text-noop", "expectsStreaming": true}}),
        ),
    )
    .await;
    let mock = json!({"configurable": {"mockProvider": {"id": "stream-text", "config": {"tokens": ["Hello", " ", "world", "!"]}}}});
    let (_, snapshot, events) = run(&client, "conformance-stream-text", mock).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(snapshot["variables"]["ai"]["text"], "Hello world!");
    let chunks = of_type(&events, "output.chunk");
    let parts: Vec<Value> = chunks
        .iter()
        .flat_map(|event| event["payload"]["chunk"]["parts"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(parts, [json!("Hello"), json!(" "), json!("world"), json!("!")]);
    let last = &chunks.last().unwrap()["payload"]["chunk"];
    assert_eq!((last["isLast"].as_bool(), last["meta"]["finishReason"].as_str()), (Some(true), Some("stop")));
    assert_eq!(last["meta"]["usage"]["completionTokens"], 4);
    assert!(position(&events, "provider.usage") < position(&events, "node.completed"));

    // The messages stream mode: one ai.message.chunk frame per token, the last with meta,
    // then the server closes the stream.
    let run_id = client
        .create(json!({"workflowId": "conformance-stream-text", "inputs": {},
        "configurable": {"mockProvider": {"id": "stream-text", "config": {"tokens": ["Hello", " ", "world", "!"]}}}}))
        .await;
    let stream = reqwest::Client::new()
        .get(format!("{}/v1/runs/{run_id}/events?streamMode=messages", client.base))
        .bearer_auth(KEY)
        .header("accept", "text/event-stream")
        .send();
    let text = tokio::time::timeout(WITHIN, async { stream.await.unwrap().text().await.unwrap() })
        .await
        .expect("the stream closes after the run ends");
    let frames: Vec<Value> = text
        .split("\n\n")
        .filter(|frame| frame.lines().any(|line| line == "event: ai.message.chunk"))
        .filter_map(|frame| frame.lines().find_map(|line| line.strip_prefix("data: ")))
        .map(|data| serde_json::from_str::<Value>(data).unwrap())
        .map(|data| if data.get("payload").is_some() { data["payload"].clone() } else { data })
        .collect();
    assert_eq!(frames.len(), 4, "{text}");
    let chunks: Vec<&str> = frames.iter().map(|frame| frame["chunk"].as_str().unwrap()).collect();
    assert_eq!(chunks, ["Hello", " ", "world", "!"]);
    assert_eq!(frames[3]["isLast"], true);
    assert_eq!(frames[3]["meta"]["finishReason"], "stop");
    assert_eq!(frames[3]["meta"]["usage"]["completionTokens"], 4);

    // Without a mock, the promptId alone does not resolve.
    let (_, snapshot, _) = run(&client, "conformance-stream-text", json!({})).await;
    assert_eq!(snapshot["error"]["code"], "prompt_not_found", "{snapshot}");
    host.stop().await;
}

#[tokio::test]
async fn a_bad_providers_file_stops_the_host_naming_the_field() {
    let _logs = logs();
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(None);
    args.ai.providers_file = Some(write_file(
        dir.path(),
        "providers.json",
        &json!([{"id": "x", "kind": "gemini", "baseUrl": "http://127.0.0.1:1", "models": ["m"]}]),
    ));
    let error = EmbeddedHost::start(&args, HostOptions { api_key: Some(KEY.to_owned()), ..HostOptions::default() })
        .await
        .err()
        .expect("the host refuses to start");
    let message = error.to_string();
    assert!(message.contains("providers[0].kind") && message.contains("anthropic"), "{message}");
}

/// Bedrock is served on the AWS backend only: a `bedrock` providers entry stops the embedded
/// host naming the field and the rule, and a node naming the provider id `bedrock` (or a
/// Bedrock model ARN) is refused at registration with `422 capability_required`.
#[tokio::test]
async fn bedrock_is_refused_on_the_embedded_host() {
    let _logs = logs();
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(None);
    args.ai.providers_file = Some(write_file(
        dir.path(),
        "providers.json",
        &json!([{"id": "bedrock", "kind": "bedrock", "region": "us-east-1", "models": ["amazon.nova-micro-v1:0"]}]),
    ));
    let error = EmbeddedHost::start(&args, HostOptions { api_key: Some(KEY.to_owned()), ..HostOptions::default() })
        .await
        .err()
        .expect("the host refuses to start");
    let message = error.to_string();
    assert!(message.contains("providers[0].kind: bedrock providers need the AWS backend"), "{message}");

    let model = FakeModel::start().await;
    let (host, client) = host_with(&model, dir.path()).await;
    assert_eq!(client.discovery().await["aiProviders"]["supported"], json!(["oa", "an"]));
    let arn = "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-micro-v1:0";
    for config in
        [json!({"provider": "bedrock", "prompt": "hi"}), json!({"provider": "oa", "model": arn, "prompt": "hi"})]
    {
        let node = json!({"id": "ask", "typeId": "core.ai.callPrompt", "config": config});
        let (status, body) = client.request("POST", "/v1/workflows", Some(workflow("on-bedrock", node))).await;
        assert_eq!((status, body["error"].as_str()), (422, Some("capability_required")), "{body}");
        assert_eq!(body["details"]["requiredCapability"], "aiProviders.bedrock", "{body}");
        assert_eq!(body["details"]["nodeId"], "ask", "{body}");
    }
    assert_eq!(model.request_count(), 0);
    host.stop().await;
}

#[tokio::test]
async fn ai_discovery_blocks_and_events_match_the_official_schemas() {
    let _logs = logs();
    let Some(reference) = Reference::load("ai_discovery_blocks_and_events_match_the_official_schemas") else { return };
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let (host, client) = host_with(&model, dir.path()).await;
    let discovery = client.discovery().await;
    let capabilities = |name: &str| format!("capabilities.schema.json#/properties/{name}");
    reference.assert_invalid(&capabilities("aiProviders"), &json!({"supported": "oa"}));
    for block in ["aiProviders", "providerUsage"] {
        reference.assert_valid(&capabilities(block), &discovery[block]);
    }
    register(
        &client,
        workflow(
            "schema-stream",
            json!({"id": "ask", "typeId": "core.ai.callPrompt",
            "config": {"prompt": "stream", "stream": true}}),
        ),
    )
    .await;
    model.push(ModelReply::tokens(["a", "b", "c"]).usage(1, 3));
    let (_, snapshot, events) = run(&client, "schema-stream", json!({})).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    for event in of_type(&events, "provider.usage") {
        reference.assert_valid("run-event-payloads.schema.json#/$defs/providerUsage", &event["payload"]);
    }
    for event in &events {
        reference.assert_valid("run-event.schema.json", event);
    }
    host.stop().await;

    let mut args = serve_args(None);
    args.test_seams = true;
    let host = start(args).await;
    let discovery: Value =
        reqwest::get(format!("http://{}/.well-known/openwop", host.addr)).await.unwrap().json().await.unwrap();
    reference.assert_valid(&capabilities("testing"), &discovery["testing"]);
    host.stop().await;
}

#[tokio::test]
async fn a_required_policy_takes_the_nodes_own_key_and_denies_without_one() {
    let _logs = logs();
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let byok = "sk-test-CANARY-byok-99";
    model.require_key(byok);
    let mut args = serve_args(None);
    args.secrets_file = Some(write_file(dir.path(), "secrets.json", &json!({"secrets": {"my-key": byok}})));
    args.ai.providers_file = Some(write_file(
        dir.path(),
        "providers.json",
        &json!([{"id": "oa", "kind": "openai", "baseUrl": model.openai_base_url(), "models": ["gpt-test"],
                 "policy": {"mode": "required"}}]),
    ));
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    register(
        &client,
        workflow(
            "byok",
            json!({"id": "ask", "typeId": "core.ai.callPrompt", "credentialsRef": "my-key",
            "config": {"prompt": "hi"}}),
        ),
    )
    .await;
    register(
        &client,
        workflow("no-byok", json!({"id": "ask", "typeId": "core.ai.callPrompt", "config": {"prompt": "hi"}})),
    )
    .await;
    let (run_id, snapshot, events) = run(&client, "byok", json!({})).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(model.last_request().unwrap().bearer(), Some(byok));
    assert_clean(&client, &run_id, &events).await;
    let before = model.request_count();
    let (_, snapshot, _) = run(&client, "no-byok", json!({})).await;
    assert_eq!(snapshot["error"]["code"], "provider_policy_denied", "{snapshot}");
    assert_eq!(snapshot["error"]["details"]["reason"], "byok_required", "{snapshot}");
    assert_eq!(model.request_count(), before, "nothing was sent");
    host.stop().await;
}
