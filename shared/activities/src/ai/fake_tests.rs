//! `core.ai.callPrompt` against the testkit's fake model provider on 127.0.0.1: both wire
//! formats, streaming in batches, structured output with its one repair turn, error codes,
//! policies and keys.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, Progress};
use trellis_core::ai::chunk::ChunkBatch;
use trellis_core::secrets::{Secret, SecretError, SecretRequest, SecretResolver};
use trellis_testkit::fake_model::{FakeModel, FinishReason, ModelReply};

use super::{call, config, context, Recorder};
use crate::ai::{parse_providers, CallPromptActivity};
use crate::http::HttpClient;

const KEY: &str = "sk-test-CANARY-unit-0123456789";

#[derive(Debug)]
struct OneSecret;

#[async_trait]
impl SecretResolver for OneSecret {
    async fn resolve(&self, request: SecretRequest<'_>) -> Result<Secret, SecretError> {
        match request.reference {
            "model-key" | "byok-key" => Ok(Secret::new(KEY)),
            other => Err(SecretError::NotFound { reference: other.to_owned() }),
        }
    }
    fn backend(&self) -> &'static str {
        "test"
    }
}

fn node(model: &FakeModel, policy: Value) -> CallPromptActivity {
    let document = json!([
        {"id": "oa", "kind": "openai", "baseUrl": model.openai_base_url(), "credentialsRef": "model-key",
         "models": [{"id": "gpt-test", "inputUsdPerMTok": 1.0, "outputUsdPerMTok": 1.0}], "policy": policy},
        {"id": "an", "kind": "anthropic", "baseUrl": model.anthropic_base_url(), "credentialsRef": "model-key",
         "models": ["claude-test"]}
    ]);
    let providers = parse_providers(&document.to_string()).unwrap();
    // The default client refuses loopback for workflows' URLs; a provider's baseUrl is pinned.
    CallPromptActivity::new(HttpClient::system(Default::default()), providers, Some(Arc::new(OneSecret)), false)
}

async fn run(
    node: &CallPromptActivity,
    node_config: Value,
    credentials_ref: Option<&str>,
) -> (Result<Map<String, Value>, trellis_core::activity::ActivityError>, Vec<Progress>) {
    let variables = Map::new();
    let node_config = config(node_config);
    let request = node.prepare(&context(&node_config, &variables, None, false)).expect("prepare");
    let mut call = call(request);
    call.credentials_ref = credentials_ref.map(str::to_owned);
    let recorder = Recorder::default();
    let result = node.execute(&call, &recorder).await;
    let reports = recorder.0.lock().unwrap().clone();
    (result, reports)
}

/// The chunk batches among `reports`, in order.
fn batches(reports: &[Progress]) -> Vec<ChunkBatch> {
    reports
        .iter()
        .filter_map(|report| match report {
            Progress::Chunk { data } => ChunkBatch::from_value(data),
            _ => None,
        })
        .collect()
}

fn usages(reports: &[Progress]) -> usize {
    reports.iter().filter(|report| matches!(report, Progress::Usage(_))).count()
}

#[tokio::test]
async fn an_openai_call_sends_the_key_and_identity_and_reports_priced_usage() {
    let model = FakeModel::start().await;
    model.require_key(KEY);
    model.push(ModelReply::text("Hi there").usage(10, 2));
    let node = node(&model, Value::Null);
    let (result, reports) = run(&node, json!({"provider": "oa", "prompt": "hello", "temperature": 0.1}), None).await;
    let outputs = result.unwrap();
    assert_eq!(outputs["text"], "Hi there");
    assert_eq!(outputs["usage"], json!({"inputTokens": 10, "outputTokens": 2, "totalTokens": 12}));
    assert_eq!(outputs["provider"], "oa");
    let request = model.last_request().unwrap();
    assert_eq!(request.bearer(), Some(KEY));
    assert_eq!(request.header("idempotency-key"), Some("idem-1"));
    assert_eq!(request.header("x-trellis-request-key").map(str::len), Some(64));
    assert_eq!(request.body["temperature"], 0.1);
    let [Progress::Usage(usage)] = &reports[..] else { panic!("{reports:?}") };
    assert_eq!((usage.input_tokens, usage.output_tokens), (10, 2));
    assert!((usage.cost_estimate_usd.unwrap() - 12e-6).abs() < 1e-12);
}

#[tokio::test]
async fn streams_arrive_in_order_in_fewer_batches_than_tokens_for_both_kinds() {
    for (provider, model_id) in [("oa", "gpt-test"), ("an", "claude-test")] {
        let model = FakeModel::start().await;
        let tokens: Vec<String> = (0..40).map(|i| format!("t{i} ")).collect();
        model.push(ModelReply::tokens(tokens.clone()).usage(3, 40));
        let node = node(&model, Value::Null);
        let (result, reports) =
            run(&node, json!({"provider": provider, "model": model_id, "prompt": "go", "stream": true}), None).await;
        let outputs = result.unwrap();
        assert_eq!(outputs["text"], tokens.concat());
        let batches = batches(&reports);
        assert!(!batches.is_empty() && batches.len() < tokens.len(), "{provider}: {} batches", batches.len());
        let streamed: String = batches.iter().flat_map(|batch| batch.parts.iter().cloned()).collect();
        assert_eq!(streamed, tokens.concat());
        let last = batches.last().unwrap();
        assert!(last.is_last);
        let meta = last.meta.clone().unwrap();
        assert_eq!(
            (meta["finishReason"].as_str(), meta["usage"]["completionTokens"].as_u64()),
            (Some("stop"), Some(40))
        );
        assert_eq!(meta["provider"], provider);
        assert!(matches!(reports.last(), Some(Progress::Usage(usage)) if usage.output_tokens == 40), "{provider}");
        assert!(model.last_request().unwrap().stream());
    }
}

#[tokio::test]
async fn anthropic_gets_its_headers_and_system_prompt() {
    let model = FakeModel::start().await;
    model.require_key(KEY);
    model.push(ModelReply::text("ok").finish(FinishReason::Length));
    let node = node(&model, Value::Null);
    let (result, _) = run(&node, json!({"provider": "an", "systemPrompt": "sys", "prompt": "hi"}), None).await;
    assert_eq!(result.unwrap()["finishReason"], "length");
    let request = model.last_request().unwrap();
    assert_eq!(request.header("x-api-key"), Some(KEY));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.body["system"], "sys");
    assert_eq!(request.messages().len(), 1);
}

fn strict_schema() -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": {"city": {"type": "string"}}, "required": ["city"]})
}

#[tokio::test]
async fn structured_output_is_validated_and_repaired_once() {
    let model = FakeModel::start().await;
    model.script(vec![ModelReply::text("```json\n{\"city\": \"Oslo\"}\n```")]);
    let node = node(&model, Value::Null);
    let (result, reports) =
        run(&node, json!({"provider": "oa", "prompt": "where", "responseSchema": strict_schema()}), None).await;
    assert_eq!(result.unwrap()["data"], json!({"city": "Oslo"}));
    assert_eq!(usages(&reports), 1);

    model.script(vec![ModelReply::json(&json!({"town": 1})), ModelReply::json(&json!({"city": "Rome"}))]);
    let (result, reports) =
        run(&node, json!({"provider": "oa", "prompt": "where", "responseSchema": strict_schema()}), None).await;
    assert_eq!(result.unwrap()["data"], json!({"city": "Rome"}));
    assert_eq!(usages(&reports), 2, "the repair turn reports its usage too");
    let repair = model.last_request().unwrap();
    assert_eq!(repair.messages().len(), 3);
    assert!(repair.last_user_text().unwrap().contains("does not match"));

    model.script(vec![ModelReply::malformed_json(), ModelReply::json(&json!({"town": 1}))]);
    let (result, reports) =
        run(&node, json!({"provider": "oa", "prompt": "where", "responseSchema": strict_schema()}), None).await;
    let error = result.unwrap_err();
    assert_eq!((error.code.as_str(), error.retryable), ("response_schema_invalid", false));
    assert!(error.details.unwrap()["violations"].as_array().is_some_and(|v| !v.is_empty()));
    assert_eq!(usages(&reports), 2);
}

#[tokio::test]
async fn provider_failures_have_stable_codes_and_never_the_key() {
    let model = FakeModel::start().await;
    let node = node(&model, Value::Null);
    let cases = [
        (ModelReply::rate_limited(2), "provider_quota_exhausted", true),
        (ModelReply::error(503, "down"), "provider_unavailable", true),
        (ModelReply::error(400, format!("bad request, key {KEY}")), "provider_request_rejected", false),
        (ModelReply::disconnect(), "provider_unavailable", true),
    ];
    for (reply, code, retryable) in cases {
        model.push(reply);
        let (result, _) = run(&node, json!({"provider": "oa", "prompt": "x"}), None).await;
        let error = result.unwrap_err();
        assert_eq!((error.code.as_str(), error.retryable), (code, retryable), "{error:?}");
        assert!(!format!("{error:?}").contains("CANARY"), "{error:?}");
        if code == "provider_quota_exhausted" {
            assert_eq!(error.details.unwrap()["retryAfterMs"], 2000);
        }
    }
    model.require_key("another-key");
    let (result, _) = run(&node, json!({"provider": "oa", "prompt": "x"}), None).await;
    let error = result.unwrap_err();
    assert_eq!((error.code.as_str(), error.retryable), ("provider_auth_failed", false));
    assert!(!format!("{error:?}").contains("CANARY"));
}

#[tokio::test]
async fn policies_deny_before_anything_is_sent() {
    let model = FakeModel::start().await;
    let cases = [
        (json!({"mode": "disabled"}), Some("byok-key"), "provider_disabled"),
        (json!({"mode": "required"}), None, "byok_required"),
        (json!({"mode": "required"}), Some("missing-key"), "byok_required_but_unresolved"),
        (json!({"mode": "restricted", "allowedModels": []}), None, "model_not_allowed"),
        (json!({"mode": "restricted", "allowedModels": ["claude-*"]}), None, "model_not_allowed"),
    ];
    for (policy, byok, reason) in cases {
        let node = node(&model, policy.clone());
        let (result, reports) = run(&node, json!({"provider": "oa", "prompt": "x"}), byok).await;
        let error = result.unwrap_err();
        assert_eq!(error.code, "provider_policy_denied", "{policy}");
        assert_eq!(error.details.as_ref().unwrap()["reason"], reason);
        assert!(!error.message.contains("allowedModels"));
        assert!(reports.is_empty());
    }
    assert_eq!(model.request_count(), 0);
    let node = node(&model, json!({"mode": "required"}));
    let (result, _) = run(&node, json!({"provider": "oa", "prompt": "x"}), Some("byok-key")).await;
    assert!(result.is_ok());
    assert_eq!(model.last_request().unwrap().bearer(), Some(KEY));
}

#[tokio::test]
async fn a_slow_stream_is_flushed_in_several_ordered_batches_never_one_per_token() {
    let model = FakeModel::start().await;
    let tokens: Vec<String> = (0..20).map(|index| format!("s{index} ")).collect();
    // At least 19 × 40 ms between the first and the last token: the 250 ms flush fires.
    model.push(ModelReply::tokens(tokens.clone()).token_delay(std::time::Duration::from_millis(40)));
    let node = node(&model, Value::Null);
    let (result, reports) = run(&node, json!({"provider": "oa", "prompt": "go", "stream": true}), None).await;
    assert_eq!(result.unwrap()["text"], tokens.concat());
    let batches = batches(&reports);
    assert!(batches.len() >= 2 && batches.len() < tokens.len(), "{} batches", batches.len());
    assert!(batches[..batches.len() - 1].iter().all(|batch| !batch.is_last && batch.meta.is_none()));
    assert!(batches.last().unwrap().is_last);
    let streamed: String = batches.iter().flat_map(|batch| batch.parts.iter().cloned()).collect();
    assert_eq!(streamed, tokens.concat());
}

#[tokio::test]
async fn a_stream_cut_midway_is_retryable_and_names_no_key() {
    let model = FakeModel::start().await;
    model.push(ModelReply::tokens(["a", "b", "c", "d"]).drop_after(2));
    let node = node(&model, Value::Null);
    let (result, reports) = run(&node, json!({"provider": "an", "prompt": "go", "stream": true}), None).await;
    let error = result.unwrap_err();
    assert_eq!((error.code.as_str(), error.retryable), ("provider_unavailable", true), "{error:?}");
    assert!(!format!("{error:?}").contains("CANARY"));
    // Anthropic reports the input tokens at message_start: that usage is still reported.
    assert!(usages(&reports) <= 1);
    assert!(reports.iter().all(|report| match report {
        Progress::Chunk { data } => !ChunkBatch::from_value(data).unwrap().is_last,
        _ => true,
    }));
}

#[tokio::test]
async fn a_provider_base_url_is_pinned_past_the_allow_list_but_never_redirected() {
    let model = FakeModel::start().await;
    // A workflow's URL to the same loopback address is refused by the same client.
    let client = HttpClient::system(Default::default());
    let request = crate::http::OutboundRequest {
        method: hyper::Method::POST,
        url: format!("{}/chat/completions", model.openai_base_url()),
        headers: Vec::new(),
        body: Default::default(),
        timeout: std::time::Duration::from_secs(5),
    };
    assert_eq!(client.send(request).await.unwrap_err().code(), "http_url_rejected");
    assert_eq!(model.request_count(), 0);

    model.push(ModelReply::error(307, "moved"));
    let node = node(&model, Value::Null);
    let (result, _) = run(&node, json!({"provider": "oa", "prompt": "x"}), None).await;
    let error = result.unwrap_err();
    assert_eq!((error.code.as_str(), error.retryable), ("provider_unavailable", false), "{error:?}");
    assert_eq!(model.request_count(), 1, "the redirect is not followed");
}

/// A sink whose run stops wanting the attempt once usage is reported (its budget is spent).
#[derive(Default)]
struct SpentAfterUsage(std::sync::Mutex<Vec<Progress>>);

#[async_trait]
impl trellis_core::activity::ProgressSink for SpentAfterUsage {
    async fn report(&self, progress: Progress) -> bool {
        let usage = matches!(progress, Progress::Usage(_));
        self.0.lock().unwrap().push(progress);
        !usage
    }
}

#[tokio::test]
async fn no_repair_turn_goes_out_once_the_run_no_longer_wants_the_attempt() {
    let model = FakeModel::start().await;
    model.script(vec![ModelReply::json(&json!({"town": 1})), ModelReply::json(&json!({"city": "Rome"}))]);
    let node = node(&model, Value::Null);
    let variables = Map::new();
    let node_config = config(json!({"provider": "oa", "prompt": "where", "responseSchema": strict_schema()}));
    let request = node.prepare(&context(&node_config, &variables, None, false)).expect("prepare");
    let sink = SpentAfterUsage::default();
    let error = node.execute(&call(request), &sink).await.unwrap_err();
    assert_eq!(error.code, "attempt_abandoned");
    assert_eq!(model.request_count(), 1, "the repair turn was never sent");
    assert_eq!(model.pending(), 1);
}
