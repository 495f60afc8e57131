//! The router through `oneshot`: no listener, an in-memory store, a fake clock. Covers the
//! bad-input classes (each answered with the canonical envelope and nothing persisted), auth
//! before existence, tenant isolation and the happy paths of every route.

mod support;

use axum::body::Body;
use axum::http::StatusCode;
use serde_json::{json, Value};
use support::{assert_envelope, Harness, Setup};
use trellis_core::interrupt::token::{TokenClaims, TokenSigner};

async fn harness() -> Harness {
    harness_with(false).await
}

/// `chain`, `gated`, `typed` and `conversational`, the `conformance-noop` extension, seams
/// as asked.
async fn harness_with(test_seams: bool) -> Harness {
    let workflows = &["chain", "gated", "typed", "conversational"];
    Setup { workflows, test_seams, extensions: &["conformance-noop"], ..Setup::default() }.build().await
}

#[tokio::test]
async fn create_then_read_a_run() {
    let h = harness().await;
    let (status, created) = h.post_as("/v1/runs", "alice-key", json!({"workflowId": "chain"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["status"], "running");
    let run_id = created["runId"].as_str().unwrap();
    assert_eq!(created["statusUrl"], format!("/v1/runs/{run_id}"));
    let (status, snapshot) = h.call_as("GET", &format!("/v1/runs/{run_id}"), Some("alice-key"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((snapshot["workflowId"].as_str(), snapshot["status"].as_str()), (Some("chain"), Some("running")));
    let (_, poll) =
        h.call_as("GET", &format!("/v1/runs/{run_id}/events/poll?timeout=0"), Some("alice-key"), None).await;
    assert_eq!(poll["events"][0]["type"], "run.started");
    assert_eq!(poll["events"][0]["sequence"], 0);
    assert_eq!(poll["lastEventSeq"], 0);
    assert_eq!(poll["isTerminal"], false);
}

#[tokio::test]
async fn every_bad_create_is_an_envelope_and_persists_nothing() {
    let h = harness().await;
    let before = h.run_counts();
    let big = json!({"workflowId": "chain", "inputs": {"blob": "x".repeat(300_000)}});
    let cases: Vec<(&str, Body, StatusCode, &str)> = vec![
        ("malformed JSON", Body::from("{\"workflowId\": "), StatusCode::BAD_REQUEST, "validation_error"),
        ("empty body", Body::empty(), StatusCode::BAD_REQUEST, "validation_error"),
        (
            "wrong types",
            Body::from(json!({"workflowId": 7, "inputs": []}).to_string()),
            StatusCode::BAD_REQUEST,
            "validation_error",
        ),
        (
            "unknown field",
            Body::from(json!({"workflowId": "chain", "extra": 1}).to_string()),
            StatusCode::BAD_REQUEST,
            "validation_error",
        ),
        ("body over the limit", Body::from(big.to_string()), StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        (
            "unknown workflow",
            Body::from(json!({"workflowId": "ghost"}).to_string()),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "not runnable",
            Body::from(json!({"workflowId": "conversational"}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "capability_required",
        ),
        (
            "input of the wrong type",
            Body::from(json!({"workflowId": "typed", "inputs": {"count": "three"}}).to_string()),
            StatusCode::BAD_REQUEST,
            "validation_error",
        ),
        (
            "required input missing",
            Body::from(json!({"workflowId": "typed"}).to_string()),
            StatusCode::BAD_REQUEST,
            "validation_error",
        ),
        (
            "recursionLimit above the host ceiling",
            Body::from(json!({"workflowId": "chain", "configurable": {"recursionLimit": 100000}}).to_string()),
            StatusCode::BAD_REQUEST,
            "validation_error",
        ),
        (
            "another tenant",
            Body::from(json!({"workflowId": "chain", "tenantId": "tenant-b"}).to_string()),
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
    ];
    for (name, body, status, code) in cases {
        let (got, envelope) = h.call_as("POST", "/v1/runs", Some("alice-key"), Some(body)).await;
        assert_eq!(got, status, "{name}: {envelope}");
        assert_envelope(&envelope, code);
    }
    assert_eq!(h.run_counts(), before, "a refused request persists nothing");
}

#[tokio::test]
async fn not_runnable_details_name_the_capability_type_and_node() {
    let h = harness().await;
    let (_, envelope) = h.post_as("/v1/runs", "alice-key", json!({"workflowId": "conversational"})).await;
    assert_eq!(
        envelope["details"],
        json!({"requiredCapability": "conversationPrimitive", "offendingTypeId": "core.conversationGate", "nodeId": "talk"})
    );
}

#[tokio::test]
async fn auth_comes_before_existence() {
    let h = harness().await;
    for (method, uri) in [
        ("GET", "/v1/runs/nope"),
        ("POST", "/v1/runs/nope/cancel"),
        ("GET", "/v1/runs/nope/events/poll"),
        ("GET", "/v1/workflows/nope"),
        ("POST", "/v1/runs"),
        ("GET", "/v1/no-such-route"),
    ] {
        for key in [None, Some("wrong-key")] {
            let (status, envelope) = h.call_as(method, uri, key, None).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri} {key:?}");
            assert_envelope(&envelope, "unauthenticated");
        }
    }
    let (status, envelope) = h.call_as("GET", "/v1/runs/nope", Some("alice-key"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_envelope(&envelope, "not_found");
}

#[tokio::test]
async fn scopes_are_enforced_per_route() {
    let h = harness().await;
    let (status, envelope) = h.post_as("/v1/runs", "reader-key", json!({"workflowId": "chain"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_envelope(&envelope, "forbidden");
    assert_eq!(envelope["details"]["scopeRequired"], "runs:create");
}

#[tokio::test]
async fn another_tenant_cannot_see_or_cancel_a_run() {
    let h = harness().await;
    let (_, created) = h.post_as("/v1/runs", "alice-key", json!({"workflowId": "chain"})).await;
    let run_id = created["runId"].as_str().unwrap();
    for (method, uri) in [
        ("GET", format!("/v1/runs/{run_id}")),
        ("GET", format!("/v1/runs/{run_id}/events/poll")),
        ("POST", format!("/v1/runs/{run_id}/cancel")),
        ("POST", format!("/v1/runs/{run_id}:cancel")),
    ] {
        let (status, envelope) = h.call_as(method, &uri, Some("bob-key"), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {uri}");
        assert_envelope(&envelope, "not_found");
    }
    let (_, snapshot) = h.call_as("GET", &format!("/v1/runs/{run_id}"), Some("alice-key"), None).await;
    assert_eq!(snapshot["status"], "running", "bob's cancel changed nothing");
}

#[tokio::test]
async fn bad_cursors_and_timeouts_are_validation_errors() {
    let h = harness().await;
    let (_, created) = h.post_as("/v1/runs", "alice-key", json!({"workflowId": "chain"})).await;
    let run_id = created["runId"].as_str().unwrap();
    for query in ["lastSequence=abc", "lastSequence=-2", "since=1.5", "timeout=-1", "timeout=61"] {
        let (status, envelope) =
            h.call_as("GET", &format!("/v1/runs/{run_id}/events/poll?{query}"), Some("alice-key"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert_envelope(&envelope, "validation_error");
    }
    let (status, past_end) = h
        .call_as("GET", &format!("/v1/runs/{run_id}/events/poll?lastSequence=99999&timeout=0"), Some("alice-key"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(past_end["events"], json!([]));
    assert_eq!(past_end["lastEventSeq"], 99999);
}

#[tokio::test]
async fn framework_rejections_use_the_envelope() {
    let h = harness().await;
    let (status, envelope) = h.call_as("DELETE", "/v1/runs", Some("alice-key"), None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_envelope(&envelope, "method_not_allowed");
    let (status, envelope) = h.call_as("GET", "/nowhere", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_envelope(&envelope, "not_found");
    let (status, envelope) = h.call_as("POST", "/v1/runs/x:explode", Some("alice-key"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_envelope(&envelope, "not_found");
}

#[tokio::test]
async fn cancel_body_is_closed_and_cancel_is_repeatable() {
    let h = harness().await;
    let (_, created) = h.post_as("/v1/runs", "alice-key", json!({"workflowId": "chain"})).await;
    let run_id = created["runId"].as_str().unwrap();
    let (status, envelope) = h.post_as(&format!("/v1/runs/{run_id}/cancel"), "alice-key", json!({"why": "typo"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&envelope, "validation_error");
    // The entry step has not run (no worker here): a step is in flight, so the run is cancelling.
    let (status, body) = h.post_as(&format!("/v1/runs/{run_id}/cancel"), "alice-key", json!({"reason": "done"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"runId": run_id, "status": "cancelling"}));
    let (_, again) = h.call_as("POST", &format!("/v1/runs/{run_id}:cancel"), Some("alice-key"), None).await;
    assert_eq!(again["status"], "cancelling");
}

#[tokio::test]
async fn idempotent_create_replays_and_refuses_a_different_body() {
    let h = harness().await;
    let send = |body: Value| h.send("POST", "/v1/runs", Some("alice-key"), &[("idempotency-key", "key-1")], Some(body));
    let first = send(json!({"workflowId": "chain", "inputs": {"n": 1}})).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.headers["openwop-idempotent-replay"], "false");
    let first: Value = serde_json::from_str(&first.text).unwrap();
    let replay = send(json!({"inputs": {"n": 1}, "workflowId": "chain"})).await;
    assert_eq!(replay.headers["openwop-idempotent-replay"], "true");
    let replay: Value = serde_json::from_str(&replay.text).unwrap();
    assert_eq!(replay, first);
    let mismatch = send(json!({"workflowId": "chain", "inputs": {"n": 2}})).await;
    assert_eq!(mismatch.status, StatusCode::CONFLICT);
    let mismatch: Value = serde_json::from_str(&mismatch.text).unwrap();
    assert_envelope(&mismatch, "idempotency_key_mismatch");
    assert!(mismatch.get("runId").is_none());
    let runs = h.run_counts().into_iter().find(|(t, _)| *t == "runs").unwrap().1;
    assert_eq!(runs, 1);
}

#[tokio::test]
async fn discovery_and_openapi_need_no_key() {
    let h = harness().await;
    let (status, discovery) = h.call_as("GET", "/.well-known/openwop", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(discovery["protocolVersion"], "1.0");
    assert_eq!(discovery["limits"]["maxRequestBodyBytes"], 262_144);
    assert_eq!(discovery["fixtures"], json!(["conformance-noop"]));
    let (status, openapi) = h.call_as("GET", "/v1/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(openapi["openapi"].as_str().unwrap().starts_with("3.1"));
    let (status, workflow) = h.call_as("GET", "/v1/workflows/chain", Some("alice-key"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(workflow["nodes"][1]["id"], "b");
}

fn token(secret: &[u8; 32], run_id: &str, interrupt_id: &str, expires_at: u64) -> String {
    let claims = TokenClaims {
        run_id: run_id.into(),
        node_id: "gate".into(),
        interrupt_id: interrupt_id.into(),
        expires_at,
        intent: "resolve".into(),
    };
    TokenSigner::new(secret).sign(&claims)
}

/// `(name, uri, key, body, status, code)`.
type RefusalCase = (&'static str, String, Option<&'static str>, Value, StatusCode, &'static str);

#[tokio::test]
async fn every_interrupt_refusal_is_its_envelope_and_changes_nothing() {
    let h = harness().await;
    let run_id = h.suspended("gated", "gate").await;
    let (_, snapshot) = h.call_as("GET", &format!("/v1/runs/{run_id}"), Some("alice-key"), None).await;
    assert_eq!(snapshot["status"], "waiting-approval");
    let interrupt_id = snapshot["interrupt"]["interruptId"].as_str().unwrap().to_owned();
    let good = snapshot["interrupt"]["interruptToken"].as_str().unwrap().to_owned();
    let now = support::NOW;
    let before = h.run_counts();
    let resolve = json!({"resumeValue": {"action": "accept"}});
    let scoped = format!("/v1/runs/{run_id}/interrupts/gate");
    let cases: Vec<RefusalCase> = vec![
        (
            "malformed token",
            "/v1/interrupts/not%20a%20token".into(),
            None,
            resolve.clone(),
            StatusCode::BAD_REQUEST,
            "validation_error",
        ),
        (
            "unknown token",
            "/v1/interrupts/tok_0123456789abcdef".into(),
            None,
            resolve.clone(),
            StatusCode::NOT_FOUND,
            "interrupt_not_found",
        ),
        (
            "token signed with another key",
            format!("/v1/interrupts/{}", token(&[8; 32], &run_id, &interrupt_id, now + 60_000)),
            None,
            resolve.clone(),
            StatusCode::NOT_FOUND,
            "interrupt_not_found",
        ),
        (
            "token of an unknown run",
            format!("/v1/interrupts/{}", token(&[7; 32], "run-ghost", &interrupt_id, now + 60_000)),
            None,
            resolve.clone(),
            StatusCode::NOT_FOUND,
            "interrupt_not_found",
        ),
        (
            "expired token",
            format!("/v1/interrupts/{}", token(&[7; 32], &run_id, &interrupt_id, now - 1)),
            None,
            resolve.clone(),
            StatusCode::GONE,
            "interrupt_expired",
        ),
        ("no scope", scoped.clone(), Some("reader-key"), resolve.clone(), StatusCode::FORBIDDEN, "forbidden"),
        ("no key", scoped.clone(), None, resolve.clone(), StatusCode::UNAUTHORIZED, "unauthenticated"),
        ("another tenant", scoped.clone(), Some("bob-key"), resolve.clone(), StatusCode::NOT_FOUND, "not_found"),
        (
            "unknown node",
            format!("/v1/runs/{run_id}/interrupts/nowhere"),
            Some("alice-key"),
            resolve.clone(),
            StatusCode::NOT_FOUND,
            "interrupt_not_found",
        ),
        (
            "action outside the gate",
            scoped.clone(),
            Some("alice-key"),
            json!({"resumeValue": {"action": "maybe"}}),
            StatusCode::BAD_REQUEST,
            "validation_error",
        ),
        (
            "no resumeValue",
            scoped.clone(),
            Some("alice-key"),
            json!({"action": "accept"}),
            StatusCode::BAD_REQUEST,
            "validation_error",
        ),
        (
            "token body without resumeValue",
            format!("/v1/interrupts/{good}"),
            None,
            json!({}),
            StatusCode::BAD_REQUEST,
            "validation_error",
        ),
    ];
    for (name, uri, key, body, status, code) in cases {
        let (got, answer) = h.call_as("POST", &uri, key, Some(Body::from(body.to_string()))).await;
        assert_eq!(got, status, "{name}: {answer}");
        assert_envelope(&answer, code);
    }
    for (uri, status) in
        [("/v1/interrupts/%25%25", StatusCode::BAD_REQUEST), ("/v1/interrupts/tok_abc", StatusCode::NOT_FOUND)]
    {
        assert_eq!(h.call_as("GET", uri, None, None).await.0, status, "GET {uri}");
    }
    assert_eq!(h.run_counts(), before, "no refusal persisted anything");
    let (_, snapshot) = h.call_as("GET", &format!("/v1/runs/{run_id}"), Some("alice-key"), None).await;
    assert_eq!(snapshot["status"], "waiting-approval");

    let (status, inspected) = h.call_as("GET", &format!("/v1/interrupts/{good}"), None, None).await;
    assert_eq!((status, inspected["kind"].as_str()), (StatusCode::OK, Some("approval")));
    let (status, answer) =
        h.call_as("POST", &format!("/v1/interrupts/{good}"), None, Some(Body::from(resolve.to_string()))).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("accept")), "{answer}");
    let (status, answer) =
        h.call_as("POST", &format!("/v1/interrupts/{good}"), None, Some(Body::from(resolve.to_string()))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_envelope(&answer, "interrupt_already_resolved");
}

#[tokio::test]
async fn pause_and_resume_refusals_name_the_run_status() {
    let h = harness().await;
    let run_id = h.suspended("gated", "gate").await;
    let (status, answer) = h.post_as(&format!("/v1/runs/{run_id}:pause"), "alice-key", json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_envelope(&answer, "run_state_conflict");
    assert_eq!(answer["details"]["runStatus"], "waiting-approval");
    let (status, answer) = h.post_as(&format!("/v1/runs/{run_id}:resume"), "alice-key", json!({})).await;
    assert_eq!((status, answer["details"]["runStatus"].as_str()), (StatusCode::CONFLICT, Some("waiting-approval")));
    let (status, answer) = h.post_as(&format!("/v1/runs/{run_id}:pause"), "reader-key", json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_envelope(&answer, "forbidden");
    let (status, answer) = h.post_as(&format!("/v1/runs/{run_id}:pause"), "alice-key", json!({"drainPolicy": 3})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&answer, "validation_error");
    let (status, _) = h.post_as("/v1/runs/run-ghost:pause", "alice-key", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn test_seams_are_absent_unless_enabled_and_need_the_named_scope() {
    let toggle = json!({"name": "agents.dispatchMapping", "value": false});
    let off = harness().await;
    let (status, answer) = off.post_as("/v1/host/sample/test/capability-toggle", "tester-key", toggle.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_envelope(&answer, "not_found");

    let on = harness_with(true).await;
    let (status, answer) = on.post_as("/v1/host/sample/test/capability-toggle", "alice-key", toggle.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "`*` does not grant test:seams");
    assert_envelope(&answer, "forbidden");
    let (status, answer) = on.post_as("/v1/host/sample/test/capability-toggle", "tester-key", toggle).await;
    assert_eq!((status, &answer["overlay"]), (StatusCode::OK, &json!({"agents.dispatchMapping": false})));
    let (_, discovery) = on.call_as("GET", "/.well-known/openwop", None, None).await;
    assert_eq!(discovery["agents"]["dispatchMapping"], false);
    let (status, answer) =
        on.post_as("/v1/host/sample/test/capability-toggle", "tester-key", json!({"name": "multiAgent"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&answer, "validation_error");
    let (status, _) =
        on.post_as("/v1/host/sample/test/runs/run-ghost/variables", "tester-key", json!({"variables": {}})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
