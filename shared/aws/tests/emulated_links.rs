//! Links behind API Gateway on the emulated AWS stack: a request through the default
//! execute-api URL (`requestContext.path` `/v/v1/runs`, stage `v`) is answered with
//! `statusUrl`, `eventsUrl`, `Location` and the interrupt `callbackUrl` under `/v/`; the same
//! request through a custom domain mapped at its root (the stage only in the context) keeps
//! `/v1/...`, and one through a custom domain's base path mapping (`requestContext.path`
//! `/trellis/v1/runs`) gets `/trellis/v1/...`. The interrupt listing (`GET /v1/interrupts`)
//! answers the same views. Without the emulators the suite is ignored.

mod support;

use std::time::{Duration, Instant};

use axum::body::Body;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use support::{require_emulators, stack, Stack, KEY};
use tower::ServiceExt;
use trellis_aws::local::event::{proxy_event, IncomingRequest};

async fn call(
    aws: &Stack,
    stage: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Option<String>, Value) {
    let (status, headers, bytes) = aws.request_at(stage, method, path, body, true, None).await;
    let location = headers.get("location").map(|value| value.to_str().unwrap().to_owned());
    (status, location, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Pumps the queues until `run_id` waits for its approval.
async fn pump_until_waiting(aws: &mut Stack, run_id: &str) {
    let started = Instant::now();
    while aws.snapshot(run_id).await["status"] != "waiting-approval" {
        assert!(started.elapsed() < Duration::from_secs(30), "run {run_id} never waited");
        if aws.pump_once(false).await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn links_keep_the_stage_of_the_default_url_and_not_of_a_custom_domain() {
    require_emulators();
    let mut aws = stack().await;
    let gated = json!({"id": "links-gated", "name": "Gated", "nodes": [{"id": "gate", "typeId": "core.approvalGate"}]});
    let (status, body) = aws.api("POST", "/v1/workflows", Some(gated)).await;
    assert_eq!(status, 201, "{body}");
    for (stage, prefix) in [(Some("v"), "/v"), (None, "")] {
        let (status, location, created) =
            call(&aws, stage, "POST", "/v1/runs", Some(json!({"workflowId": "links-gated"}))).await;
        assert_eq!(status, 201, "{created}");
        let run_id = created["runId"].as_str().unwrap().to_owned();
        assert_eq!(created["statusUrl"], format!("{prefix}/v1/runs/{run_id}"), "{created}");
        assert_eq!(created["eventsUrl"], format!("{prefix}/v1/runs/{run_id}/events"), "{created}");
        assert_eq!(location.as_deref(), Some(format!("{prefix}/v1/runs/{run_id}").as_str()));
        pump_until_waiting(&mut aws, &run_id).await;
        let (status, _, snapshot) = call(&aws, stage, "GET", &format!("/v1/runs/{run_id}"), None).await;
        assert_eq!(status, 200, "{snapshot}");
        assert_eq!(snapshot["eventsUrl"], format!("{prefix}/v1/runs/{run_id}/events"));
        let token = snapshot["interrupt"]["interruptToken"].as_str().unwrap();
        assert_eq!(snapshot["interrupt"]["callbackUrl"], format!("{prefix}/v1/interrupts/{token}"));
        let (status, _, listed) =
            call(&aws, stage, "GET", &format!("/v1/interrupts?status=pending&runId={run_id}"), None).await;
        assert_eq!(status, 200, "{listed}");
        let item = &listed["interrupts"][0];
        assert_eq!(
            (item["runId"].as_str(), item["runStatus"].as_str()),
            (Some(run_id.as_str()), Some("waiting-approval"))
        );
        let token = item["interruptToken"].as_str().unwrap();
        assert_eq!(item["callbackUrl"], format!("{prefix}/v1/interrupts/{token}"));
        // The callback URL answers, under the stage as the client calls it (the router sees
        // the path without the stage).
        let (status, _, inspected) = call(&aws, stage, "GET", &format!("/v1/interrupts/{token}"), None).await;
        assert_eq!((status, inspected["nodeId"].as_str()), (200, Some("gate")), "{inspected}");
    }
}

/// `method path` through a custom domain whose base path mapping puts the API under
/// `base` (API Gateway's event: `path` as the router sees it, `requestContext.path` as the
/// client called it).
async fn call_mapped(
    aws: &Stack,
    base: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Option<String>, Value) {
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("host", "api.example.com".parse().unwrap());
    headers.insert("authorization", format!("Bearer {KEY}").parse().unwrap());
    let body = body.map(|body| body.to_string()).unwrap_or_default();
    let incoming = IncomingRequest {
        method,
        path,
        query: "",
        headers: &headers,
        body: body.as_bytes(),
        stage: "v",
        stage_in_path: false,
        source_ip: "127.0.0.1",
    };
    let mut event = proxy_event(&incoming);
    event["requestContext"]["path"] = json!(format!("{base}{path}"));
    let request = lambda_http::request::from_str(&event.to_string()).expect("API Gateway event parses");
    let (parts, body) = request.into_parts();
    let response = aws.router.clone().oneshot(axum::http::Request::from_parts(parts, Body::from(body.to_vec()))).await;
    let response = response.unwrap();
    let status = response.status().as_u16();
    let location = response.headers().get("location").map(|value| value.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, location, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn links_keep_a_custom_domains_base_path_mapping() {
    require_emulators();
    let aws = stack().await;
    let workflow = json!({"id": "links-mapped", "name": "Mapped", "nodes": [{"id": "a", "typeId": "core.noop"}]});
    let (status, body) = aws.api("POST", "/v1/workflows", Some(workflow)).await;
    assert_eq!(status, 201, "{body}");
    let (status, location, created) =
        call_mapped(&aws, "/trellis", "POST", "/v1/runs", Some(json!({"workflowId": "links-mapped"}))).await;
    assert_eq!(status, 201, "{created}");
    let run_id = created["runId"].as_str().unwrap().to_owned();
    assert_eq!(created["statusUrl"], format!("/trellis/v1/runs/{run_id}"), "{created}");
    assert_eq!(created["eventsUrl"], format!("/trellis/v1/runs/{run_id}/events"), "{created}");
    assert_eq!(location.as_deref(), Some(format!("/trellis/v1/runs/{run_id}").as_str()));
    let (status, _, snapshot) = call_mapped(&aws, "/trellis", "GET", &format!("/v1/runs/{run_id}"), None).await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(snapshot["eventsUrl"], format!("/trellis/v1/runs/{run_id}/events"), "{snapshot}");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn validate_is_a_dry_run_on_the_aws_stack() {
    require_emulators();
    let aws = stack().await;
    let candidate = json!({"id": "links-dry", "name": "Dry", "nodes": [{"id": "a", "typeId": "core.noop"}]});
    let (status, body) = aws.api("POST", "/v1/workflows:validate", Some(candidate)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["valid"].as_bool(), body["workflowId"].as_str(), body["nodes"].as_u64()),
        (Some(true), Some("links-dry"), Some(1))
    );
    let (status, body) = aws.api("GET", "/v1/workflows/links-dry", None).await;
    assert_eq!(status, 404, "nothing stored: {body}");
}
