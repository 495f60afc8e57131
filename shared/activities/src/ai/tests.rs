//! Unit tests of `core.ai.callPrompt`: provider documents, policies, node config checks,
//! prepared requests and mock execution.

use std::sync::Mutex;

use super::*;
use serde_json::json;
use trellis_core::ai::chunk::ChunkBatch;

#[derive(Default)]
struct Recorder(Mutex<Vec<Progress>>);

#[async_trait]
impl ProgressSink for Recorder {
    async fn report(&self, progress: Progress) -> bool {
        self.0.lock().unwrap().push(progress);
        true
    }
}

fn providers(document: Value) -> Providers {
    parse_providers(&document.to_string()).expect("providers parse")
}

#[test]
fn provider_documents_parse_and_errors_name_the_field_and_rule() {
    let parsed = providers(json!([
        {"id": "openai", "kind": "openai", "baseUrl": "https://api.example.com/v1/", "credentialsRef": "openai-key",
         "models": ["m1", {"id": "m2", "inputUsdPerMTok": 1.0, "outputUsdPerMTok": 2.0}]},
        {"id": "claude", "kind": "anthropic", "baseUrl": "http://127.0.0.1:9", "models": ["c1"], "default": true,
         "policy": {"mode": "restricted", "allowedModels": ["c*"]}}
    ]));
    assert_eq!(parsed.list().len(), 2);
    assert_eq!(parsed.get("openai").unwrap().base_url, "https://api.example.com/v1");
    assert_eq!(parsed.default_provider().unwrap().id, "claude");
    assert!(parsed.has_prices());
    assert_eq!(parsed.get("openai").unwrap().model("m2").unwrap().cost(1_000_000, 500_000), Some(2.0));

    let cases = [
        (json!({}), "providers", "array"),
        (
            json!([{"id": "a", "kind": "gemini", "baseUrl": "http://x", "models": ["m"]}]),
            "providers[0].kind",
            "\"openai\" or \"anthropic\"",
        ),
        (json!([{"id": "a", "kind": "openai", "baseUrl": "ftp://x", "models": ["m"]}]), "providers[0].baseUrl", "http"),
        (
            json!([{"id": "a", "kind": "openai", "baseUrl": "http://u:p@x", "models": ["m"]}]),
            "providers[0].baseUrl",
            "userinfo",
        ),
        (
            json!([{"id": "a", "kind": "openai", "baseUrl": "http://x", "models": []}]),
            "providers[0].models",
            "non-empty",
        ),
        (
            json!([{"id": "a", "kind": "openai", "baseUrl": "http://x", "models": ["m"], "policy": {"mode": "sometimes"}}]),
            "providers[0].policy.mode",
            "one of",
        ),
        (
            json!([{"id": "a", "kind": "openai", "baseUrl": "http://x", "models": ["m"], "apiKey": "sk"}]),
            "providers[0].apiKey",
            "not a provider field",
        ),
        (
            json!([{"id": "a", "kind": "openai", "baseUrl": "http://x", "models": ["m"]},
                {"id": "a", "kind": "anthropic", "baseUrl": "http://y", "models": ["m"]}]),
            "providers[1].id",
            "twice",
        ),
        (
            json!([{"id": "a", "kind": "openai", "baseUrl": "http://x", "models": ["m"], "default": true},
                {"id": "b", "kind": "openai", "baseUrl": "http://y", "models": ["m"], "default": true}]),
            "providers[1].default",
            "only one",
        ),
        (
            json!([{"id": "a", "kind": "openai", "baseUrl": "http://x", "models": [{"id": "m", "inputUsdPerMTok": -1}]}]),
            "providers[0].models[0].inputUsdPerMTok",
            "non-negative",
        ),
    ];
    for (document, field, rule) in cases {
        let error = parse_providers(&document.to_string()).unwrap_err();
        assert_eq!(error.field, field, "{document}");
        assert!(error.rule.contains(rule), "{error} should say {rule}");
    }
}

#[test]
fn the_openai_shorthand_holds_its_key_as_a_secret_that_never_prints() {
    let mut providers = Providers::none();
    providers
        .add_openai_shorthand(
            "http://127.0.0.1:1/v1",
            Some(Secret::new("sk-test-CANARY-shorthand")),
            vec!["gpt-x".into()],
        )
        .unwrap();
    let printed = format!("{providers:?}");
    assert!(!printed.contains("CANARY"), "{printed}");
    assert_eq!(providers.default_provider().unwrap().id, "openai");
}

#[test]
fn policies_decide_before_dispatch() {
    use config::{glob_matches, Policy};
    let policy =
        |mode, allowed: &[&str]| Policy { mode, allowed_models: allowed.iter().map(|s| (*s).to_owned()).collect() };
    assert_eq!(policy(PolicyMode::Disabled, &[]).decide("m", true), Err(Denial::ProviderDisabled));
    assert_eq!(policy(PolicyMode::Optional, &[]).decide("m", false), Ok(()));
    assert_eq!(policy(PolicyMode::Required, &[]).decide("m", false), Err(Denial::ByokRequired));
    assert_eq!(policy(PolicyMode::Required, &[]).decide("m", true), Ok(()));
    assert_eq!(policy(PolicyMode::Restricted, &[]).decide("m", true), Err(Denial::ModelNotAllowed));
    assert_eq!(policy(PolicyMode::Restricted, &["gpt-4o*"]).decide("gpt-4o-mini", false), Ok(()));
    assert_eq!(policy(PolicyMode::Restricted, &["gpt-4o*"]).decide("gpt-5", false), Err(Denial::ModelNotAllowed));
    assert!(glob_matches("a?c*", "abcdef") && glob_matches("*", "") && !glob_matches("a*b", "acbx"));
    assert!(glob_matches("*-mini", "gpt-4o-mini") && !glob_matches("gpt", "gpt-4"));
}

fn activity(providers: Providers) -> CallPromptActivity {
    CallPromptActivity::new(HttpClient::system(Default::default()), providers, None, true)
}

fn config(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

#[test]
fn node_configs_are_checked_at_registration_naming_the_field() {
    let node = activity(Providers::none());
    assert!(node
        .check("n", &config(json!({"prompt": "hi {{inputs.name}}", "temperature": 0.5, "maxTokens": 10})))
        .is_ok());
    assert!(node
        .check("n", &config(json!({"promptId": "conformance.stream-text-noop", "expectsStreaming": true})))
        .is_ok());
    let cases = [
        (json!({}), "prompt, messages or promptId"),
        (json!({"prompt": "x", "temperature": 3}), "config.temperature"),
        (json!({"prompt": "x", "maxTokens": 0}), "config.maxTokens"),
        (json!({"messages": [{"role": "tool", "content": "x"}]}), "config.messages[0].role"),
        (json!({"messages": [{"role": "user"}]}), "config.messages[0].content"),
        (json!({"prompt": "{{nope.x}}"}), "config.prompt"),
        (json!({"prompt": "x", "stream": "yes"}), "config.stream"),
        (
            json!({"prompt": "x", "responseSchema": {"type": "object", "properties": {"a": {"type": "string"}}}}),
            "config.responseSchema.additionalProperties",
        ),
    ];
    for (value, expected) in cases {
        match node.check("n", &config(value.clone())) {
            Err(ConfigIssue::Invalid(message)) => {
                assert!(message.contains(expected), "{message} should name {expected}")
            }
            other => panic!("{value}: {other:?}"),
        }
    }
}

fn context<'a>(
    node_config: &'a Map<String, Value>,
    variables: &'a Map<String, Value>,
    configurable: Option<&'a Value>,
    mocks_allowed: bool,
) -> NodeContext<'a> {
    NodeContext {
        node_id: "ask",
        config: node_config,
        inputs: config(json!({"name": "Ada"})),
        variables,
        now: Default::default(),
        configurable,
        mocks_allowed,
    }
}

fn local() -> Providers {
    providers(json!([{"id": "local", "kind": "openai", "baseUrl": "http://127.0.0.1:9/v1", "models": ["m1", "m2"]}]))
}

#[test]
fn prepare_renders_the_request_with_its_identity_and_the_run_overrides() {
    let node = activity(local());
    assert!(node.model_call());
    let variables = config(json!({"topic": "tea"}));
    let node_config = config(
        json!({"systemPrompt": "Be brief about {{variables.topic}}.", "prompt": "Hi {{inputs.name}}", "temperature": 0.2}),
    );
    let request = node.prepare(&context(&node_config, &variables, None, false)).unwrap();
    assert_eq!((request["provider"].as_str(), request["model"].as_str()), (Some("local"), Some("m1")));
    assert_eq!(
        request["messages"],
        json!([{"role": "system", "content": "Be brief about tea."}, {"role": "user", "content": "Hi Ada"}])
    );
    let key = request["requestKey"].as_str().unwrap().to_owned();
    assert_eq!(node.prepare(&context(&node_config, &variables, None, false)).unwrap()["requestKey"], key.as_str());

    let overrides = json!({"model": "m2", "temperature": 1.5, "maxTokens": 7});
    let request = node.prepare(&context(&node_config, &variables, Some(&overrides), false)).unwrap();
    assert_eq!(request["model"], "m2");
    assert_eq!(request["params"], json!({"temperature": 1.5, "maxTokens": 7}));
    assert_ne!(request["requestKey"], key.as_str());
    assert!(!request.to_string().contains("credential"));

    let unknown_model = json!({"model": "m9"});
    let error = node.prepare(&context(&node_config, &variables, Some(&unknown_model), false)).unwrap_err();
    assert_eq!(error.code, "model_not_supported");
    let other = config(json!({"provider": "nope", "prompt": "x"}));
    assert_eq!(node.prepare(&context(&other, &variables, None, false)).unwrap_err().code, "provider_not_supported");
    let none = activity(Providers::none());
    assert_eq!(
        none.prepare(&context(&node_config, &variables, None, false)).unwrap_err().code,
        "provider_not_supported"
    );
    let missing = config(json!({"prompt": "{{variables.absent}}"}));
    assert_eq!(node.prepare(&context(&missing, &variables, None, false)).unwrap_err().code, "validation_error");
}

#[test]
fn a_prompt_id_alone_needs_a_mock_and_a_mock_needs_permission() {
    let node = activity(Providers::none());
    let variables = Map::new();
    let node_config = config(json!({"promptId": "conformance.stream-text-noop", "expectsStreaming": true}));
    let error = node.prepare(&context(&node_config, &variables, None, false)).unwrap_err();
    assert_eq!(
        (error.code.as_str(), error.details.clone().unwrap()["promptId"].as_str()),
        ("prompt_not_found", Some("conformance.stream-text-noop"))
    );
    let mock = json!({"mockProvider": {"id": "stream-text", "config": {"tokens": ["Hello", " ", "world", "!"]}}});
    assert_eq!(
        node.prepare(&context(&node_config, &variables, Some(&mock), false)).unwrap_err().code,
        "mock_provider_forbidden"
    );
    let request = node.prepare(&context(&node_config, &variables, Some(&mock), true)).unwrap();
    assert_eq!((request["provider"].as_str(), request["model"].as_str()), (Some("mock"), Some("mock-stream-text-v1")));
    assert_eq!(request["stream"], true);
}

fn call(request: Value) -> ActivityCall {
    ActivityCall {
        run_id: "r1".into(),
        node_id: "ask".into(),
        type_id: TYPE_ID.into(),
        activation: 0,
        attempt: 0,
        idempotency_key: "idem-1".into(),
        request,
        timeout_ms: 10_000,
        tenant: "default".into(),
        credentials_ref: None,
    }
}

#[tokio::test]
async fn the_stream_text_mock_streams_one_batch_and_reports_usage_after_it() {
    let node = activity(Providers::none());
    let variables = Map::new();
    let node_config = config(json!({"promptId": "conformance.stream-text-noop", "expectsStreaming": true}));
    let mock = json!({"mockProvider": {"id": "stream-text", "config": {"tokens": ["Hello", " ", "world", "!"]}}});
    let request = node.prepare(&context(&node_config, &variables, Some(&mock), true)).unwrap();
    let recorder = Recorder::default();
    let outputs = node.execute(&call(request), &recorder).await.unwrap();
    assert_eq!(outputs["text"], "Hello world!");
    assert_eq!(outputs["usage"]["outputTokens"], 4);
    let reports = recorder.0.lock().unwrap().clone();
    assert_eq!(reports.len(), 2, "{reports:?}");
    let Progress::Chunk { data } = &reports[0] else { panic!("{reports:?}") };
    let batch = ChunkBatch::from_value(data).unwrap();
    assert_eq!((batch.parts.len(), batch.is_last), (4, true));
    let meta = batch.meta.unwrap();
    assert_eq!((meta["finishReason"].as_str(), meta["usage"]["completionTokens"].as_u64()), (Some("stop"), Some(4)));
    let Progress::Usage(usage) = &reports[1] else { panic!("{reports:?}") };
    assert_eq!((usage.provider.as_str(), usage.output_tokens), ("mock", 4));
}

#[tokio::test]
async fn the_error_and_usage_only_mocks() {
    let node = activity(Providers::none());
    let variables = Map::new();
    let node_config = config(json!({"prompt": "x"}));
    let error_mock =
        json!({"mockProvider": {"id": "error", "config": {"code": "provider_unavailable", "retryable": true}}});
    let request = node.prepare(&context(&node_config, &variables, Some(&error_mock), true)).unwrap();
    let error = node.execute(&call(request), &NoProgressSink).await.unwrap_err();
    assert_eq!((error.code.as_str(), error.retryable), ("provider_unavailable", true));
    let usage_mock =
        json!({"mockProvider": {"id": "usage-only", "config": {"usage": {"promptTokens": 3, "completionTokens": 5}}}});
    let request = node.prepare(&context(&node_config, &variables, Some(&usage_mock), true)).unwrap();
    let recorder = Recorder::default();
    let outputs = node.execute(&call(request), &recorder).await.unwrap();
    assert_eq!(outputs["text"], "");
    assert!(
        matches!(&recorder.0.lock().unwrap()[..], [Progress::Usage(usage)] if usage.input_tokens == 3 && usage.output_tokens == 5)
    );
}

use trellis_core::activity::NoProgress as NoProgressSink;

#[test]
fn capabilities_name_the_providers_and_the_mocks_only_with_the_seams() {
    let blocks: Map<String, Value> =
        activity(local()).capabilities().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    assert_eq!(blocks["aiProviders"]["supported"], json!(["local"]));
    assert_eq!(blocks["aiProviders"]["policies"]["errorCode"], "provider_policy_denied");
    assert_eq!(blocks["aiProviders"]["policies"]["scopes"], json!(["host"]), "the one layer policies resolve at");
    assert_eq!(blocks["providerUsage"], json!({"supported": true, "costEstimates": false, "currency": "USD"}));
    assert_eq!(blocks["testing"]["mockProviders"][0], "stream-text");
    let off = CallPromptActivity::new(HttpClient::system(Default::default()), local(), None, false);
    assert!(off.capabilities().iter().all(|(name, _)| *name != "testing"));
}

#[path = "fake_tests.rs"]
mod fake_tests;

#[test]
fn usage_a_provider_does_not_report_is_estimated_at_four_bytes_a_token() {
    let messages = json!([{"role": "system", "content": "abcd"}, {"role": "user", "content": "efghi"}]);
    assert_eq!(estimated_tokens(&messages), 3, "9 bytes");
    assert_eq!(estimated_tokens(&json!([])), 0);
}

#[test]
fn a_model_call_with_mcp_tools_needs_the_mcp_client_this_host_lacks() {
    let node =
        CallPromptActivity::new(crate::http::HttpClient::system(Default::default()), Providers::default(), None, false);
    let config = json!({"mcp": {"tool": "echo", "arguments": {"text": "x"}}});
    let issue = node.check("n", config.as_object().unwrap()).unwrap_err();
    assert_eq!(issue, ConfigIssue::Capability("mcpClient"));
}
