//! The `emit-provider-usage` seam (`POST /v1/host/sample/test/emit-provider-usage`) and the
//! registration gate of the conformance-only kinds, through the router with `oneshot`.

mod support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use support::{assert_envelope, Harness, Setup, KEY};

const SEAM: &str = "/v1/host/sample/test/emit-provider-usage";

async fn harness(test_seams: bool) -> Harness {
    Setup { workflows: &["gated"], test_seams, ..Setup::default() }.build().await
}

/// A live run (suspended at its approval gate); returns its id.
async fn live_run(h: &Harness) -> String {
    let (status, answer) = h.post("/v1/runs", &json!({ "workflowId": "gated" })).await;
    assert!(status.is_success(), "{answer}");
    answer["runId"].as_str().unwrap().to_owned()
}

fn payload() -> Value {
    json!({ "provider": "anthropic", "model": "claude-3-5-sonnet-20240620", "inputTokens": 200,
            "outputTokens": 80, "totalTokens": 280, "nodeId": "gate" })
}

async fn events(h: &Harness, run_id: &str) -> Vec<Value> {
    let (status, answer) = h.call("GET", &format!("/v1/runs/{run_id}/events/poll?timeout=0"), None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["events"].as_array().unwrap().clone()
}

#[tokio::test]
async fn the_seam_appends_exactly_one_provider_usage_caused_by_the_correlation_id() {
    let h = harness(true).await;
    let run_id = live_run(&h).await;
    let correlation = format!("{run_id}:0");
    let body = json!({ "runId": run_id, "payload": payload(), "correlationId": correlation, "nodeId": "gate" });
    let (status, answer) = h.post_as(SEAM, "tester-key", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let usage: Vec<Value> = events(&h, &run_id).await.into_iter().filter(|e| e["type"] == "provider.usage").collect();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0]["causationId"], json!(correlation));
    assert_eq!(usage[0]["nodeId"], "gate");
    assert_eq!(usage[0]["eventId"], answer["eventId"]);
    assert_eq!(
        (usage[0]["payload"]["inputTokens"].as_u64(), usage[0]["payload"]["outputTokens"].as_u64()),
        (Some(200), Some(80))
    );
    let run = h.services.get_run("tenant-a", &run_id).await.unwrap();
    assert_eq!(run.ai.cost.map(|cost| (cost.input_tokens, cost.output_tokens)), Some((200, 80)));
}

#[tokio::test]
async fn secret_shaped_content_and_schema_breaks_are_refused_and_write_nothing() {
    let h = harness(true).await;
    let run_id = live_run(&h).await;
    let before = events(&h, &run_id).await.len();
    let mut leaking = payload();
    leaking["nodeId"] = json!("secret:tenant:byok-anthropic:v1");
    // The suite's own probe names a run that does not exist: the leak is refused first.
    let (status, answer) = h.post_as(SEAM, "tester-key", json!({ "runId": "r-pu-leak-1", "payload": leaking })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&answer, "provider_usage_credential_leak");
    let mut fractional = payload();
    fractional["inputTokens"] = json!(100.5);
    let mut credential = payload();
    credential["credentialRef"] = json!("tenant:byok-anthropic:v1");
    for broken in [fractional, credential] {
        let (status, answer) = h.post_as(SEAM, "tester-key", json!({ "runId": run_id, "payload": broken })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_envelope(&answer, "validation_error");
    }
    let foreign = json!({ "runId": run_id, "payload": payload(), "correlationId": "other-run:0" });
    let (status, answer) = h.post_as(SEAM, "tester-key", foreign).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let (status, _) = h.post_as(SEAM, "tester-key", json!({ "runId": "run-missing", "payload": payload() })).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(events(&h, &run_id).await.len(), before, "nothing was appended");
}

#[tokio::test]
async fn the_seam_needs_the_seams_and_the_test_scope() {
    let h = harness(false).await;
    let run_id = live_run(&h).await;
    let body = json!({ "runId": run_id, "payload": payload() });
    let (status, _) = h.post_as(SEAM, "tester-key", body.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "seams off: an unknown route");
    let h = harness(true).await;
    let run_id = live_run(&h).await;
    let (status, answer) = h.post_as(SEAM, KEY, json!({ "runId": run_id, "payload": payload() })).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "`*` never grants test:seams: {answer}");
}

fn mock_agent_workflow() -> Value {
    json!({ "id": "tenant-mock-agent", "name": "mock", "nodes": [{ "id": "agent", "typeId": "core.conformance.mock-agent",
            "config": { "mockDecision": { "decision": { "kind": "x" }, "confidence": 0.9 } } }] })
}

#[tokio::test]
async fn a_tenant_registration_of_a_conformance_kind_needs_a_test_caller_on_a_seams_host() {
    for seams in [false, true] {
        let h = harness(seams).await;
        let (status, answer) = h.post("/v1/workflows", &mock_agent_workflow()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_envelope(&answer, "validation_error");
        assert_eq!(answer["details"]["rule"], "typeId_refused", "{answer}");
        let cost = json!({ "id": "tenant-cost", "name": "cost",
                           "nodes": [{ "id": "c", "typeId": "conformance.cost.emit", "config": { "attrs": {} } }] });
        let (status, answer) = h.post("/v1/workflows", &cost).await;
        assert_eq!((status, &answer["details"]["rule"]), (StatusCode::BAD_REQUEST, &json!("typeId_refused")));
    }
    let h = harness(true).await;
    let (status, answer) = h.post_as("/v1/host/sample/workflows", "tester-key", mock_agent_workflow()).await;
    assert_eq!(status, StatusCode::CREATED, "a test:seams caller on a seams host may: {answer}");
    let mut bad = mock_agent_workflow();
    bad["id"] = json!("tenant-mock-agent-bad");
    bad["nodes"][0]["config"] = json!({ "mockToolCalls": [{ "toolId": "t" }] });
    let (status, answer) = h.post_as("/v1/host/sample/workflows", "tester-key", bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(answer.to_string().contains("config.mockToolCalls[0]"), "{answer}");
}
