//! A router over an in-memory SQLite store with a fixed clock, driven through `oneshot`
//! (no listener), shared by the registration and property tests.

#![allow(dead_code, unreachable_pub)]

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

/// The clock every harness runs at: 2026-01-01T00:00:00.000Z.
pub const NOW: u64 = 1_767_225_600_000;

struct FixedClock;
impl Clock for FixedClock {
    fn now(&self) -> u64 {
        NOW
    }
}

#[derive(Default)]
struct CountingIds(AtomicU64);
impl IdGenerator for CountingIds {
    fn run_id(&self) -> String {
        format!("run-{}", self.0.fetch_add(1, Ordering::SeqCst))
    }
}

/// Nothing is committed behind a request's back: waiting returns at once.
struct NoWait;
#[async_trait::async_trait]
impl Notifier for NoWait {
    fn committed(&self, _run_id: &str) {}
    fn generation(&self) -> u64 {
        0
    }
    async fn wait(&self, _seen: u64, _timeout: Duration) {}
}

/// The key with every scope, bound to `tenant-a`.
pub const KEY: &str = "alice-key";

/// An app, its store and its services.
pub struct Harness {
    /// The router.
    pub app: Router,
    /// Its store (for row counts).
    pub store: Arc<SqliteStore>,
    /// Its services.
    pub services: Arc<Services>,
}

/// A harness with the default host limits and a few global workflows: `chain` (two noops),
/// `gated` (an approval gate), `asking` (a clarification with typed questions), `typed` (a
/// required number variable).
pub async fn harness() -> Harness {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let ports = Ports {
        store: store.clone(),
        effects: store.clone(),
        clock: Arc::new(FixedClock),
        ids: Arc::new(CountingIds::default()),
        notifier: Arc::new(NoWait),
    };
    let services = Arc::new(Services::new(ports, HostLimits::default()));
    let definitions = [
        json!({"id": "chain", "name": "Chain", "version": "1",
               "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}],
               "edges": [{"id": "ab", "sourceNodeId": "a", "targetNodeId": "b"}]}),
        json!({"id": "gated", "name": "Gated", "nodes": [{"id": "gate", "typeId": "core.approvalGate"}]}),
        json!({"id": "asking", "name": "Asking", "nodes": [{"id": "ask", "typeId": "core.clarificationGate",
               "config": {"questions": [
                   {"id": "colour", "question": "Colour?", "schema": {"type": "string", "maxLength": 10}},
                   {"id": "count", "question": "How many?", "schema": {"type": "integer", "minimum": 0}}]}}]}),
        json!({"id": "typed", "name": "Typed", "nodes": [{"id": "a", "typeId": "core.noop"}],
               "variables": [{"name": "count", "type": "number", "required": true}]}),
    ];
    for definition in definitions {
        services.put_workflow(GLOBAL_NAMESPACE, definition).await.unwrap();
    }
    let keys = KeyRing::new(vec![ApiKey {
        label: "alice".into(),
        hash: ApiKey::hash_of(KEY),
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
    Harness { app: router(state), store, services }
}

impl Harness {
    /// One request with the all-scopes key; the body is JSON when it parses, else `Null`.
    pub async fn call(&self, method: &str, uri: &str, body: Option<Body>) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {KEY}"))
            .header("content-type", "application/json")
            .body(body.unwrap_or_else(Body::empty))
            .unwrap();
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// `POST` of a JSON body.
    pub async fn post(&self, uri: &str, body: &Value) -> (StatusCode, Value) {
        self.call("POST", uri, Some(Body::from(body.to_string()))).await
    }

    /// Rows per table (workflows and runs included).
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        self.store.table_counts().unwrap()
    }
}

/// The canonical envelope: a JSON object with string `error` and non-empty `message`, and
/// optionally object `details`, nothing else.
pub fn is_envelope(body: &Value) -> bool {
    let Some(object) = body.as_object() else { return false };
    object.get("error").is_some_and(Value::is_string)
        && object.get("message").and_then(Value::as_str).is_some_and(|m| !m.is_empty())
        && object.keys().all(|k| k == "error" || k == "message" || k == "details")
        && object.get("details").is_none_or(Value::is_object)
}
