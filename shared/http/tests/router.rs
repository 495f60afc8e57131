//! The router through `oneshot`: no listener, an in-memory store, a fake clock. Covers the
//! bad-input classes (each answered with the canonical envelope and nothing persisted), auth
//! before existence, tenant isolation and the happy paths of every route.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use trellis_core::interrupt::token::{TokenClaims, TokenSigner};
use trellis_core::limits::HostLimits;
use trellis_core::ports::{Clock, IdGenerator, Notifier, GLOBAL_NAMESPACE};
use trellis_core::service::{Ports, Services};
use trellis_http::{router, ApiKey, AppState, Discovery, KeyRing, StreamSettings};
use trellis_store_sqlite::SqliteStore;

struct FixedClock;
impl Clock for FixedClock {
    fn now(&self) -> u64 {
        1_767_225_600_000
    }
}

#[derive(Default)]
struct CountingIds(AtomicU64);
impl IdGenerator for CountingIds {
    fn run_id(&self) -> String {
        format!("run-{}", self.0.fetch_add(1, Ordering::SeqCst))
    }
}

struct NoWait;
#[async_trait::async_trait]
impl Notifier for NoWait {
    fn committed(&self, _run_id: &str) {}
    fn generation(&self) -> u64 {
        0
    }
    async fn wait(&self, _seen: u64, _timeout: Duration) {}
}

struct Harness {
    app: Router,
    store: Arc<SqliteStore>,
    services: Arc<Services>,
}

fn key(label: &str, secret: &str, tenant: &str, scopes: &[&str]) -> ApiKey {
    ApiKey {
        label: label.into(),
        hash: ApiKey::hash_of(secret),
        tenant: tenant.into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
    }
}

async fn harness() -> Harness {
    harness_with(false).await
}

async fn harness_with(test_seams: bool) -> Harness {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let ports = Ports {
        store: store.clone(),
        effects: store.clone(),
        clock: Arc::new(FixedClock),
        ids: Arc::new(CountingIds::default()),
        notifier: Arc::new(NoWait),
    };
    let services = Arc::new(Services::new(ports, HostLimits::default()).with_test_seams(test_seams));
    let definitions = [
        json!({"id": "chain", "name": "Chain", "version": "1",
               "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}],
               "edges": [{"id": "ab", "sourceNodeId": "a", "targetNodeId": "b"}]}),
        json!({"id": "gated", "name": "Gated", "nodes": [{"id": "gate", "typeId": "core.approvalGate"}]}),
        json!({"id": "typed", "name": "Typed", "nodes": [{"id": "a", "typeId": "core.noop"}],
               "variables": [{"name": "count", "type": "number", "required": true}]}),
        json!({"id": "conversational", "name": "Conversational",
               "nodes": [{"id": "talk", "typeId": "core.conversationGate"}]}),
    ];
    for definition in definitions {
        services.put_workflow(GLOBAL_NAMESPACE, definition).await.unwrap();
    }
    let keys = KeyRing::new(vec![
        key("alice", "alice-key", "tenant-a", &["*"]),
        key("bob", "bob-key", "tenant-b", &["*"]),
        key("reader", "reader-key", "tenant-a", &["runs:read"]),
        key("tester", "tester-key", "tenant-a", &["test:seams", "runs:read"]),
    ]);
    let discovery = Discovery::new(&HostLimits::default(), &["conformance-noop".to_owned()]);
    let state = AppState {
        services: services.clone(),
        keys: Arc::new(keys),
        discovery: Arc::new(discovery),
        cursor_key: Arc::new([7; 32]),
        streams: StreamSettings::default(),
    };
    Harness { app: router(state), store, services }
}

impl Harness {
    async fn call(&self, method: &str, uri: &str, key: Option<&str>, body: Option<Body>) -> (StatusCode, Value) {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let request = request.body(body.unwrap_or_else(Body::empty)).unwrap();
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, value)
    }

    async fn post(&self, uri: &str, key: &str, body: Value) -> (StatusCode, Value) {
        self.call("POST", uri, Some(key), Some(Body::from(body.to_string()))).await
    }

    fn counts(&self) -> Vec<(&'static str, u64)> {
        self.store.table_counts().unwrap().into_iter().filter(|(table, _)| *table != "workflows").collect()
    }
}

/// The canonical envelope: exactly `error`, `message` and optionally `details` (an object).
fn assert_envelope(body: &Value, code: &str) {
    let object = body.as_object().unwrap_or_else(|| panic!("not an object: {body}"));
    assert_eq!(object.get("error").and_then(Value::as_str), Some(code), "{body}");
    assert!(object.get("message").and_then(Value::as_str).is_some_and(|m| !m.is_empty()), "{body}");
    assert!(object.keys().all(|k| k == "error" || k == "message" || k == "details"), "{body}");
    if let Some(details) = object.get("details") {
        assert!(details.is_object(), "{body}");
    }
}

#[tokio::test]
async fn create_then_read_a_run() {
    let h = harness().await;
    let (status, created) = h.post("/v1/runs", "alice-key", json!({"workflowId": "chain"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["status"], "running");
    let run_id = created["runId"].as_str().unwrap();
    assert_eq!(created["statusUrl"], format!("/v1/runs/{run_id}"));
    let (status, snapshot) = h.call("GET", &format!("/v1/runs/{run_id}"), Some("alice-key"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((snapshot["workflowId"].as_str(), snapshot["status"].as_str()), (Some("chain"), Some("running")));
    let (_, poll) = h.call("GET", &format!("/v1/runs/{run_id}/events/poll?timeout=0"), Some("alice-key"), None).await;
    assert_eq!(poll["events"][0]["type"], "run.started");
    assert_eq!(poll["events"][0]["sequence"], 0);
    assert_eq!(poll["lastEventSeq"], 0);
    assert_eq!(poll["isTerminal"], false);
}

#[tokio::test]
async fn every_bad_create_is_an_envelope_and_persists_nothing() {
    let h = harness().await;
    let before = h.counts();
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
        let (got, envelope) = h.call("POST", "/v1/runs", Some("alice-key"), Some(body)).await;
        assert_eq!(got, status, "{name}: {envelope}");
        assert_envelope(&envelope, code);
    }
    assert_eq!(h.counts(), before, "a refused request persists nothing");
}

#[tokio::test]
async fn not_runnable_details_name_the_capability_type_and_node() {
    let h = harness().await;
    let (_, envelope) = h.post("/v1/runs", "alice-key", json!({"workflowId": "conversational"})).await;
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
            let (status, envelope) = h.call(method, uri, key, None).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri} {key:?}");
            assert_envelope(&envelope, "unauthenticated");
        }
    }
    let (status, envelope) = h.call("GET", "/v1/runs/nope", Some("alice-key"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_envelope(&envelope, "not_found");
}

#[tokio::test]
async fn scopes_are_enforced_per_route() {
    let h = harness().await;
    let (status, envelope) = h.post("/v1/runs", "reader-key", json!({"workflowId": "chain"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_envelope(&envelope, "forbidden");
    assert_eq!(envelope["details"]["scopeRequired"], "runs:create");
}

#[tokio::test]
async fn another_tenant_cannot_see_or_cancel_a_run() {
    let h = harness().await;
    let (_, created) = h.post("/v1/runs", "alice-key", json!({"workflowId": "chain"})).await;
    let run_id = created["runId"].as_str().unwrap();
    for (method, uri) in [
        ("GET", format!("/v1/runs/{run_id}")),
        ("GET", format!("/v1/runs/{run_id}/events/poll")),
        ("POST", format!("/v1/runs/{run_id}/cancel")),
        ("POST", format!("/v1/runs/{run_id}:cancel")),
    ] {
        let (status, envelope) = h.call(method, &uri, Some("bob-key"), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {uri}");
        assert_envelope(&envelope, "not_found");
    }
    let (_, snapshot) = h.call("GET", &format!("/v1/runs/{run_id}"), Some("alice-key"), None).await;
    assert_eq!(snapshot["status"], "running", "bob's cancel changed nothing");
}

#[tokio::test]
async fn bad_cursors_and_timeouts_are_validation_errors() {
    let h = harness().await;
    let (_, created) = h.post("/v1/runs", "alice-key", json!({"workflowId": "chain"})).await;
    let run_id = created["runId"].as_str().unwrap();
    for query in ["lastSequence=abc", "lastSequence=-2", "since=1.5", "timeout=-1", "timeout=61"] {
        let (status, envelope) =
            h.call("GET", &format!("/v1/runs/{run_id}/events/poll?{query}"), Some("alice-key"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert_envelope(&envelope, "validation_error");
    }
    let (status, past_end) = h
        .call("GET", &format!("/v1/runs/{run_id}/events/poll?lastSequence=99999&timeout=0"), Some("alice-key"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(past_end["events"], json!([]));
    assert_eq!(past_end["lastEventSeq"], 99999);
}

#[tokio::test]
async fn framework_rejections_use_the_envelope() {
    let h = harness().await;
    let (status, envelope) = h.call("DELETE", "/v1/runs", Some("alice-key"), None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_envelope(&envelope, "method_not_allowed");
    let (status, envelope) = h.call("GET", "/nowhere", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_envelope(&envelope, "not_found");
    let (status, envelope) = h.call("POST", "/v1/runs/x:explode", Some("alice-key"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_envelope(&envelope, "not_found");
}

#[tokio::test]
async fn cancel_body_is_closed_and_cancel_is_repeatable() {
    let h = harness().await;
    let (_, created) = h.post("/v1/runs", "alice-key", json!({"workflowId": "chain"})).await;
    let run_id = created["runId"].as_str().unwrap();
    let (status, envelope) = h.post(&format!("/v1/runs/{run_id}/cancel"), "alice-key", json!({"why": "typo"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&envelope, "validation_error");
    // The entry step has not run (no worker here): a step is in flight, so the run is cancelling.
    let (status, body) = h.post(&format!("/v1/runs/{run_id}/cancel"), "alice-key", json!({"reason": "done"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"runId": run_id, "status": "cancelling"}));
    let (_, again) = h.call("POST", &format!("/v1/runs/{run_id}:cancel"), Some("alice-key"), None).await;
    assert_eq!(again["status"], "cancelling");
}

#[tokio::test]
async fn idempotent_create_replays_and_refuses_a_different_body() {
    let h = harness().await;
    let send = |body: Value| {
        let request = Request::post("/v1/runs")
            .header("authorization", "Bearer alice-key")
            .header("idempotency-key", "key-1")
            .body(Body::from(body.to_string()))
            .unwrap();
        h.app.clone().oneshot(request)
    };
    let first = send(json!({"workflowId": "chain", "inputs": {"n": 1}})).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(first.headers()["openwop-idempotent-replay"], "false");
    let first: Value = serde_json::from_slice(&first.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let replay = send(json!({"inputs": {"n": 1}, "workflowId": "chain"})).await.unwrap();
    assert_eq!(replay.headers()["openwop-idempotent-replay"], "true");
    let replay: Value = serde_json::from_slice(&replay.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(replay, first);
    let mismatch = send(json!({"workflowId": "chain", "inputs": {"n": 2}})).await.unwrap();
    assert_eq!(mismatch.status(), StatusCode::CONFLICT);
    let mismatch: Value = serde_json::from_slice(&mismatch.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_envelope(&mismatch, "idempotency_key_mismatch");
    assert!(mismatch.get("runId").is_none());
    let runs = h.counts().into_iter().find(|(t, _)| *t == "runs").unwrap().1;
    assert_eq!(runs, 1);
}

#[tokio::test]
async fn discovery_and_openapi_need_no_key() {
    let h = harness().await;
    let (status, discovery) = h.call("GET", "/.well-known/openwop", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(discovery["protocolVersion"], "1.0");
    assert_eq!(discovery["limits"]["maxRequestBodyBytes"], 262_144);
    assert_eq!(discovery["fixtures"], json!(["conformance-noop"]));
    let (status, openapi) = h.call("GET", "/v1/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(openapi["openapi"].as_str().unwrap().starts_with("3.1"));
    let (status, workflow) = h.call("GET", "/v1/workflows/chain", Some("alice-key"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(workflow["nodes"][1]["id"], "b");
}

/// A run of `gated` whose gate has executed (no worker runs here: the step is applied by hand).
async fn suspended_run(h: &Harness) -> String {
    let (_, created) = h.post("/v1/runs", "alice-key", json!({"workflowId": "gated"})).await;
    let run_id = created["runId"].as_str().unwrap().to_owned();
    let step = trellis_core::engine::Input::Step { node_id: "gate".into(), activation: 1 };
    h.services.apply_until_committed(&run_id, step).await.unwrap();
    run_id
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
    let run_id = suspended_run(&h).await;
    let (_, snapshot) = h.call("GET", &format!("/v1/runs/{run_id}"), Some("alice-key"), None).await;
    assert_eq!(snapshot["status"], "waiting-approval");
    let interrupt_id = snapshot["interrupt"]["interruptId"].as_str().unwrap().to_owned();
    let good = snapshot["interrupt"]["interruptToken"].as_str().unwrap().to_owned();
    let now = FixedClock.now();
    let before = h.counts();
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
        let (got, answer) = h.call("POST", &uri, key, Some(Body::from(body.to_string()))).await;
        assert_eq!(got, status, "{name}: {answer}");
        assert_envelope(&answer, code);
    }
    for (uri, status) in
        [("/v1/interrupts/%25%25", StatusCode::BAD_REQUEST), ("/v1/interrupts/tok_abc", StatusCode::NOT_FOUND)]
    {
        assert_eq!(h.call("GET", uri, None, None).await.0, status, "GET {uri}");
    }
    assert_eq!(h.counts(), before, "no refusal persisted anything");
    let (_, snapshot) = h.call("GET", &format!("/v1/runs/{run_id}"), Some("alice-key"), None).await;
    assert_eq!(snapshot["status"], "waiting-approval");

    let (status, inspected) = h.call("GET", &format!("/v1/interrupts/{good}"), None, None).await;
    assert_eq!((status, inspected["kind"].as_str()), (StatusCode::OK, Some("approval")));
    let (status, answer) =
        h.call("POST", &format!("/v1/interrupts/{good}"), None, Some(Body::from(resolve.to_string()))).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("accept")), "{answer}");
    let (status, answer) =
        h.call("POST", &format!("/v1/interrupts/{good}"), None, Some(Body::from(resolve.to_string()))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_envelope(&answer, "interrupt_already_resolved");
}

#[tokio::test]
async fn pause_and_resume_refusals_name_the_run_status() {
    let h = harness().await;
    let run_id = suspended_run(&h).await;
    let (status, answer) = h.post(&format!("/v1/runs/{run_id}:pause"), "alice-key", json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_envelope(&answer, "run_state_conflict");
    assert_eq!(answer["details"]["runStatus"], "waiting-approval");
    let (status, answer) = h.post(&format!("/v1/runs/{run_id}:resume"), "alice-key", json!({})).await;
    assert_eq!((status, answer["details"]["runStatus"].as_str()), (StatusCode::CONFLICT, Some("waiting-approval")));
    let (status, answer) = h.post(&format!("/v1/runs/{run_id}:pause"), "reader-key", json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_envelope(&answer, "forbidden");
    let (status, answer) = h.post(&format!("/v1/runs/{run_id}:pause"), "alice-key", json!({"drainPolicy": 3})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&answer, "validation_error");
    let (status, _) = h.post("/v1/runs/run-ghost:pause", "alice-key", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn test_seams_are_absent_unless_enabled_and_need_the_named_scope() {
    let toggle = json!({"name": "agents.dispatchMapping", "value": false});
    let off = harness().await;
    let (status, answer) = off.post("/v1/host/sample/test/capability-toggle", "tester-key", toggle.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_envelope(&answer, "not_found");

    let on = harness_with(true).await;
    let (status, answer) = on.post("/v1/host/sample/test/capability-toggle", "alice-key", toggle.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "`*` does not grant test:seams");
    assert_envelope(&answer, "forbidden");
    let (status, answer) = on.post("/v1/host/sample/test/capability-toggle", "tester-key", toggle).await;
    assert_eq!((status, &answer["overlay"]), (StatusCode::OK, &json!({"agents.dispatchMapping": false})));
    let (_, discovery) = on.call("GET", "/.well-known/openwop", None, None).await;
    assert_eq!(discovery["agents"]["dispatchMapping"], false);
    let (status, answer) =
        on.post("/v1/host/sample/test/capability-toggle", "tester-key", json!({"name": "multiAgent"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&answer, "validation_error");
    let (status, _) =
        on.post("/v1/host/sample/test/runs/run-ghost/variables", "tester-key", json!({"variables": {}})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
