//! Wire behaviour the official scenarios probe, through the router with `oneshot`: the
//! capability-toggle probe (`{name: <any>, value: null}` is a no-op), the per-item dispatch seam
//! (`POST /v1/host/sample/dispatch/per-item`), the concurrent-claim seam
//! (`POST /v1/host/sample/test/idempotency/concurrent-claim`) and the refusal of `callbackUrl`
//! on run creation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
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
}

fn key(label: &str, secret: &str, tenant: &str, scopes: &[&str]) -> ApiKey {
    ApiKey {
        label: label.into(),
        hash: ApiKey::hash_of(secret),
        tenant: tenant.into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
    }
}

async fn harness(test_seams: bool) -> Harness {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let ports = Ports {
        store: store.clone(),
        effects: store.clone(),
        clock: Arc::new(FixedClock),
        ids: Arc::new(CountingIds::default()),
        notifier: Arc::new(NoWait),
    };
    let services = Arc::new(Services::new(ports, HostLimits::default()).with_test_seams(test_seams));
    let chain = json!({"id": "chain", "name": "Chain", "nodes": [{"id": "a", "typeId": "core.noop"}]});
    services.put_workflow(GLOBAL_NAMESPACE, chain).await.unwrap();
    let keys = KeyRing::new(vec![
        key("alice", "alice-key", "tenant-a", &["*"]),
        key("tester", "tester-key", "tenant-a", &["test:seams", "runs:read"]),
    ]);
    let state = AppState {
        services,
        keys: Arc::new(keys),
        discovery: Arc::new(Discovery::new(&HostLimits::default(), &["conformance-noop".to_owned()])),
        cursor_key: Arc::new([7; 32]),
        streams: StreamSettings::default(),
    };
    Harness { app: router(state), store }
}

impl Harness {
    async fn post(&self, uri: &str, key: &str, body: Value) -> (StatusCode, Value) {
        let request = Request::builder()
            .method("POST")
            .uri(uri)
            .header("authorization", format!("Bearer {key}"))
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    fn counts(&self) -> Vec<(&'static str, u64)> {
        self.store.table_counts().unwrap().into_iter().filter(|(table, _)| *table != "workflows").collect()
    }
}

/// The canonical envelope with `code`.
fn assert_envelope(body: &Value, code: &str) {
    let object = body.as_object().unwrap_or_else(|| panic!("not an object: {body}"));
    assert_eq!(object.get("error").and_then(Value::as_str), Some(code), "{body}");
    assert!(object.get("message").and_then(Value::as_str).is_some_and(|m| !m.is_empty()), "{body}");
    assert!(object.keys().all(|k| k == "error" || k == "message" || k == "details"), "{body}");
}

const TOGGLE: &str = "/v1/host/sample/test/capability-toggle";
const PER_ITEM: &str = "/v1/host/sample/dispatch/per-item";
const CLAIM: &str = "/v1/host/sample/test/idempotency/concurrent-claim";

#[tokio::test]
async fn the_toggle_probe_clears_an_absent_entry_as_a_no_op() {
    let h = harness(true).await;
    let (status, answer) = h.post(TOGGLE, "tester-key", json!({"name": "__probe__", "value": null})).await;
    assert_eq!((status, &answer["overlay"]), (StatusCode::OK, &json!({})), "{answer}");
    // Switching an unknown name on or off is still refused, as is a body without `value`.
    let (status, answer) = h.post(TOGGLE, "tester-key", json!({"name": "__probe__", "value": true})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&answer, "validation_error");
    let (status, _) = h.post(TOGGLE, "tester-key", json!({"name": "__probe__"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // A set switch survives the probe.
    h.post(TOGGLE, "tester-key", json!({"name": "dispatch.perItemInput", "value": false})).await;
    let (status, answer) = h.post(TOGGLE, "tester-key", json!({"name": "__probe__", "value": null})).await;
    assert_eq!((status, &answer["overlay"]), (StatusCode::OK, &json!({"dispatch.perItemInput": false})));
}

fn contact_ids(answer: &Value) -> Vec<Value> {
    answer["children"].as_array().unwrap().iter().map(|child| child["inputs"]["contactId"].clone()).collect()
}

#[tokio::test]
async fn the_per_item_seam_projects_each_item_into_its_child() {
    let h = harness(true).await;
    let before = h.counts();
    let items = json!([{"contactId": "c-1"}, {"contactId": "c-2"}]);
    let ids = json!(["conformance.child", "conformance.child"]);
    let (status, answer) =
        h.post(PER_ITEM, "tester-key", json!({"nextWorkerIds": ids, "nextWorkerInputs": items})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(contact_ids(&answer), [json!("c-1"), json!("c-2")]);
    assert_eq!(answer["children"][1]["workflowId"], "conformance.child");

    let mapped = json!({"nextWorkerIds": ids, "nextWorkerInputs": items,
                        "inputMapping": {"contactId": "from-mapping", "region": "us"}});
    let (status, answer) = h.post(PER_ITEM, "tester-key", mapped).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(contact_ids(&answer), [json!("c-1"), json!("c-2")], "the per-item value wins");
    assert!(answer["children"].as_array().unwrap().iter().all(|c| c["inputs"]["region"] == "us"), "{answer}");

    let replay = json!({"nextWorkerIds": ids, "nextWorkerInputs": items, "replay": true});
    let (status, answer) = h.post(PER_ITEM, "tester-key", replay).await;
    assert_eq!((status, &answer["replayed"]), (StatusCode::OK, &json!(true)), "{answer}");
    assert_eq!(contact_ids(&answer), [json!("c-1"), json!("c-2")]);

    let mismatch = json!({"nextWorkerIds": ids, "nextWorkerInputs": [{"contactId": "c-1"}]});
    let (status, answer) = h.post(PER_ITEM, "tester-key", mismatch.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_envelope(&answer, "validation_error");
    assert_eq!(answer["details"]["children"], json!([]), "{answer}");

    h.post(TOGGLE, "tester-key", json!({"name": "dispatch.perItemInput", "value": false})).await;
    let (status, answer) =
        h.post(PER_ITEM, "tester-key", json!({"nextWorkerIds": ids, "nextWorkerInputs": items})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "fail-closed while switched off: {answer}");
    assert_envelope(&answer, "validation_error");
    assert_eq!(h.counts(), before, "the seam persists no run, event or task");

    let (status, answer) = h.post(PER_ITEM, "tester-key", json!({"nextWorkerIds": "x"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&answer, "validation_error");
}

#[tokio::test]
async fn the_concurrent_claim_seam_lets_exactly_one_executor_through() {
    let h = harness(true).await;
    let before = h.counts();
    for executors in [2, 5] {
        let (status, answer) = h.post(CLAIM, "tester-key", json!({"executors": executors})).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["attempted"], executors);
        assert_eq!(answer["delivered"], 1, "{answer}");
        let minted = answer["mintedIds"].as_array().unwrap();
        assert_eq!(minted.len(), executors);
        assert!(minted.iter().all(|id| *id == answer["logicalInvocationId"]), "{answer}");
    }
    let (_, first) = h.post(CLAIM, "tester-key", json!({"executors": 2})).await;
    let (_, second) = h.post(CLAIM, "tester-key", json!({"executors": 2})).await;
    assert_ne!(first["logicalInvocationId"], second["logicalInvocationId"], "each probe is its own effect");
    assert_eq!(h.counts(), before, "the claims are released afterwards");
    for bad in [json!({"executors": 1}), json!({"executors": 1000}), json!({"executors": "2"})] {
        let (status, answer) = h.post(CLAIM, "tester-key", bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_envelope(&answer, "validation_error");
    }
}

#[tokio::test]
async fn the_new_seams_are_gated_like_the_others() {
    let off = harness(false).await;
    let on = harness(true).await;
    for (path, body) in [(PER_ITEM, json!({"nextWorkerIds": ["a"]})), (CLAIM, json!({"executors": 2}))] {
        let (status, answer) = off.post(path, "tester-key", body.clone()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_envelope(&answer, "not_found");
        let (status, answer) = on.post(path, "alice-key", body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: `*` does not grant test:seams");
        assert_envelope(&answer, "forbidden");
    }
}

#[tokio::test]
async fn a_callback_url_is_refused_by_name_not_as_missing_interrupts() {
    let h = harness(false).await;
    let before = h.counts();
    let body = json!({"workflowId": "chain", "callbackUrl": "https://example.invalid/hook"});
    let (status, answer) = h.post("/v1/runs", "alice-key", body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_envelope(&answer, "capability_required");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains("callbackUrl is not supported by this host yet"), "{message}");
    assert!(!message.contains("interrupts, which"), "interrupts are supported: {message}");
    assert_eq!(answer["details"]["field"], "callbackUrl", "{answer}");
    assert_eq!(h.counts(), before);
}
