//! The JSON event list (`Accept: application/json` on `GET /v1/runs/{runId}/events`) is
//! paged like the poll route: `limit` events after `lastSequence` (or `Last-Event-ID`), and
//! `isComplete` only when the run is terminal and the page leaves nothing behind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use trellis_core::engine::{Effect, Input};
use trellis_core::limits::HostLimits;
use trellis_core::ports::{Clock, IdGenerator, LocalQueue, Notifier, GLOBAL_NAMESPACE};
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

async fn call(app: &axum::Router, method: &str, uri: &str, body: Option<Value>) -> Value {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", "Bearer alice-key")
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |body| Body::from(body.to_string())))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn the_json_event_list_is_paged_and_says_when_it_is_incomplete() {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let ports = Ports {
        store: store.clone(),
        effects: store.clone(),
        clock: Arc::new(FixedClock),
        ids: Arc::new(CountingIds::default()),
        notifier: Arc::new(NoWait),
    };
    let services = Arc::new(Services::new(ports, HostLimits::default()));
    let chain = json!({"id": "chain", "name": "Chain",
        "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}],
        "edges": [{"id": "ab", "sourceNodeId": "a", "targetNodeId": "b"}]});
    services.put_workflow(GLOBAL_NAMESPACE, chain).await.unwrap();
    let keys = KeyRing::new(vec![ApiKey {
        label: "alice".into(),
        hash: ApiKey::hash_of("alice-key"),
        tenant: "tenant-a".into(),
        scopes: vec!["*".into()],
    }]);
    let state = AppState {
        services: services.clone(),
        keys: Arc::new(keys),
        discovery: Arc::new(Discovery::new(&HostLimits::default(), &[])),
        cursor_key: Arc::new([7; 32]),
        streams: StreamSettings::default(),
    };
    let app = router(state);
    let created = call(&app, "POST", "/v1/runs", Some(json!({"workflowId": "chain"}))).await;
    let run_id = created["runId"].as_str().expect("created").to_owned();
    // Run it to the end, as the worker would.
    loop {
        let tasks = store.claim_due(4_102_444_800_000, 1_000, 10).await.unwrap();
        if tasks.is_empty() {
            break;
        }
        for task in tasks {
            if let Effect::Step { node_id, activation, .. } = task.effect {
                let decision = services.decide(&run_id, Input::Step { node_id, activation }).await.unwrap().unwrap();
                services.commit(&decision).await.unwrap();
            }
            store.ack(&task.id).await.unwrap();
        }
    }
    let all = call(&app, "GET", &format!("/v1/runs/{run_id}/events?streamMode=debug"), None).await;
    assert_eq!((all["runStatus"].as_str(), all["isComplete"].as_bool()), (Some("completed"), Some(true)), "{all}");
    let total = all["events"].as_array().unwrap().len();
    assert!(total > 3, "{all}");

    let mut seen = Vec::new();
    let mut cursor = -1;
    loop {
        let uri = format!("/v1/runs/{run_id}/events?streamMode=debug&limit=2&lastSequence={cursor}");
        let page = call(&app, "GET", &uri, None).await;
        let events = page["events"].as_array().unwrap();
        assert!(events.len() <= 2, "{page}");
        seen.extend(events.iter().map(|event| event["sequence"].as_i64().unwrap()));
        cursor = page["lastEventSeq"].as_i64().unwrap();
        if page["isComplete"] == json!(true) {
            break;
        }
        assert!(seen.len() < total, "a page before the end must not say isComplete: {page}");
        assert!(seen.len() <= total, "more pages than events: {page}");
    }
    assert_eq!(seen, (0..total as i64).collect::<Vec<_>>(), "every event once, in order");
    let first = call(&app, "GET", &format!("/v1/runs/{run_id}/events?streamMode=debug&limit=2"), None).await;
    assert_eq!(first["isComplete"], json!(false), "a truncated page of a terminal run is not complete: {first}");
    let refused = call(&app, "GET", &format!("/v1/runs/{run_id}/events?limit=0"), None).await;
    assert_eq!(refused["error"], "validation_error", "{refused}");
}
