//! The one test harness of the router-level tests: a router over an in-memory SQLite store
//! with a fixed clock, driven through `oneshot` (no listener). [`harness`] is the default;
//! [`Setup`] picks the variants a test file needs (test seams on, which global workflows,
//! discovery extensions, stream settings, a notifier that sleeps). The harness keeps its
//! store and services, so tests can count rows or drive a run by hand. Requests go through
//! [`Harness::send`] (raw answer: status, headers, text, for SSE) or the JSON helpers built
//! on it ([`Harness::call`], [`Harness::call_as`], [`Harness::post`], [`Harness::post_as`]).

#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode};
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

/// Nothing is ever committed while a test reads a stream: waiting just sleeps the timeout.
struct Sleeper;
#[async_trait::async_trait]
impl Notifier for Sleeper {
    fn committed(&self, _run_id: &str) {}
    fn generation(&self) -> u64 {
        0
    }
    async fn wait(&self, _seen: u64, timeout: Duration) {
        tokio::time::sleep(timeout).await;
    }
}

/// The key with every scope, bound to `tenant-a`.
pub const KEY: &str = "alice-key";

/// The key ring of every harness: `alice-key` (`*`, tenant-a), `bob-key` (`*`, tenant-b),
/// `reader-key` (`runs:read`, tenant-a), `tester-key` (`test:seams` and `runs:read`,
/// tenant-a), `manifest-key` (`manifest:read`, tenant-a).
fn keys() -> KeyRing {
    let key = |label: &str, tenant: &str, scopes: &[&str]| ApiKey {
        label: label.into(),
        hash: ApiKey::hash_of(&format!("{label}-key")),
        tenant: tenant.into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
    };
    KeyRing::new(vec![
        key("alice", "tenant-a", &["*"]),
        key("bob", "tenant-b", &["*"]),
        key("reader", "tenant-a", &["runs:read"]),
        key("tester", "tenant-a", &["test:seams", "runs:read"]),
        key("manifest", "tenant-a", &["manifest:read"]),
    ])
}

/// A global workflow by id: `chain` (two noops, version `1`), `gated` (an approval gate),
/// `asking` (a clarification with typed questions), `typed` (a required number variable),
/// `conversational` (a conversation gate: not runnable here).
pub fn workflow(id: &str) -> Value {
    match id {
        "chain" => json!({"id": "chain", "name": "Chain", "version": "1",
               "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}],
               "edges": [{"id": "ab", "sourceNodeId": "a", "targetNodeId": "b"}]}),
        "gated" => json!({"id": "gated", "name": "Gated", "nodes": [{"id": "gate", "typeId": "core.approvalGate"}]}),
        "asking" => {
            json!({"id": "asking", "name": "Asking", "nodes": [{"id": "ask", "typeId": "core.clarificationGate",
               "config": {"questions": [
                   {"id": "colour", "question": "Colour?", "schema": {"type": "string", "maxLength": 10}},
                   {"id": "count", "question": "How many?", "schema": {"type": "integer", "minimum": 0}}]}}]})
        }
        "typed" => json!({"id": "typed", "name": "Typed", "nodes": [{"id": "a", "typeId": "core.noop"}],
               "variables": [{"name": "count", "type": "number", "required": true}]}),
        "conversational" => json!({"id": "conversational", "name": "Conversational",
               "nodes": [{"id": "talk", "typeId": "core.conversationGate"}]}),
        other => panic!("no test workflow {other}"),
    }
}

/// How a harness is built; [`Setup::default`] is what [`harness`] builds.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The global workflows registered, by [`workflow`] id.
    pub workflows: &'static [&'static str],
    /// Whether the `/v1/host/sample/test/*` seams are served.
    pub test_seams: bool,
    /// Extensions discovery advertises.
    pub extensions: &'static [&'static str],
    /// SSE settings.
    pub streams: StreamSettings,
    /// Whether waiting for a commit sleeps the timeout (for live streams) or returns at once.
    pub sleeping_notifier: bool,
}

impl Default for Setup {
    /// `chain`, `gated`, `asking`, `typed`; no seams, no extensions, default streams, waits
    /// return at once.
    fn default() -> Self {
        Self {
            workflows: &["chain", "gated", "asking", "typed"],
            test_seams: false,
            extensions: &[],
            streams: StreamSettings::default(),
            sleeping_notifier: false,
        }
    }
}

impl Setup {
    /// Builds the harness: store, services (with the host's default limits), workflows, keys,
    /// router.
    pub async fn build(self) -> Harness {
        let store = Arc::new(SqliteStore::open_in_memory().unwrap());
        let notifier: Arc<dyn Notifier> = if self.sleeping_notifier { Arc::new(Sleeper) } else { Arc::new(NoWait) };
        let ports = Ports {
            store: store.clone(),
            effects: store.clone(),
            clock: Arc::new(FixedClock),
            ids: Arc::new(CountingIds::default()),
            notifier,
        };
        // The embedded host's registry: core.http.request, core.ai.callPrompt (with no
        // provider) and vendor.trellis.agent registered; these tests never call out (the client's default policy
        // refuses every private destination anyway).
        let http = trellis_activities::http::HttpClient::system(Default::default());
        let ai = trellis_activities::ai::CallPromptActivity::new(
            http.clone(),
            trellis_activities::ai::Providers::default(),
            None,
            self.test_seams,
        );
        let agent = trellis_activities::ai::agent::AgentActivity::new(
            ai.clone(),
            trellis_activities::http::HttpRequestActivity::new(http.clone()),
        );
        let nodes = trellis_core::nodes::NodeRegistry::new()
            .register(Arc::new(trellis_activities::http::HttpRequestActivity::new(http)))
            .register(Arc::new(ai))
            .register(Arc::new(agent));
        let services =
            Arc::new(Services::new(ports, HostLimits::default()).with_test_seams(self.test_seams).with_nodes(nodes));
        for id in self.workflows {
            services.put_workflow(GLOBAL_NAMESPACE, workflow(id)).await.unwrap();
        }
        let extensions: Vec<String> = self.extensions.iter().map(|e| e.to_string()).collect();
        let state = AppState {
            services: services.clone(),
            keys: Arc::new(keys()),
            discovery: Arc::new(Discovery::new(
                &HostLimits::default(),
                &extensions,
                &services.nodes,
                services.test_seams,
            )),
            cursor_key: Arc::new([7; 32]),
            streams: self.streams,
        };
        Harness { app: router(state), store, services }
    }
}

/// The default harness ([`Setup::default`]).
pub async fn harness() -> Harness {
    Setup::default().build().await
}

/// An app, its store and its services.
pub struct Harness {
    /// The router.
    pub app: Router,
    /// Its store (for row counts, or claiming tasks as a worker would).
    pub store: Arc<SqliteStore>,
    /// Its services.
    pub services: Arc<Services>,
}

/// A raw answer: status, headers and the body as text (an SSE stream is read to its end).
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub text: String,
}

impl Answer {
    /// The body as JSON, `Null` when it does not parse.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

impl Harness {
    /// One request, with `key` as the bearer token when given and `headers` as they are.
    async fn respond(
        &self,
        method: &str,
        uri: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: Body,
    ) -> (StatusCode, HeaderMap, Bytes) {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self.app.clone().oneshot(request.body(body).unwrap()).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        (status, headers, response.into_body().collect().await.unwrap().to_bytes())
    }

    /// One request with any key, extra headers and an optional JSON body; the raw answer.
    pub async fn send(
        &self,
        method: &str,
        uri: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Answer {
        let body = body.map_or_else(Body::empty, |body| Body::from(body.to_string()));
        let (status, headers, bytes) = self.respond(method, uri, key, headers, body).await;
        Answer { status, headers, text: String::from_utf8(bytes.to_vec()).unwrap() }
    }

    /// `GET` with `key` and extra headers; the raw answer.
    pub async fn get(&self, uri: &str, key: &str, headers: &[(&str, &str)]) -> Answer {
        self.send("GET", uri, Some(key), headers, None).await
    }

    /// One request with `key` (none: unauthenticated) and no other header; the body is JSON
    /// when it parses, else `Null`.
    pub async fn call_as(&self, method: &str, uri: &str, key: Option<&str>, body: Option<Body>) -> (StatusCode, Value) {
        let (status, _, bytes) = self.respond(method, uri, key, &[], body.unwrap_or_else(Body::empty)).await;
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// `POST` of a JSON body with `key`, as [`Harness::call_as`].
    pub async fn post_as(&self, uri: &str, key: &str, body: Value) -> (StatusCode, Value) {
        self.call_as("POST", uri, Some(key), Some(Body::from(body.to_string()))).await
    }

    /// One request with the all-scopes key and `content-type: application/json`; the body is
    /// JSON when it parses, else `Null`.
    pub async fn call(&self, method: &str, uri: &str, body: Option<Body>) -> (StatusCode, Value) {
        let headers = [("content-type", "application/json")];
        let (status, _, bytes) = self.respond(method, uri, Some(KEY), &headers, body.unwrap_or_else(Body::empty)).await;
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// `POST` of a JSON body, as [`Harness::call`].
    pub async fn post(&self, uri: &str, body: &Value) -> (StatusCode, Value) {
        self.call("POST", uri, Some(Body::from(body.to_string()))).await
    }

    /// Rows per table (workflows and runs included).
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        self.store.table_counts().unwrap()
    }

    /// Rows per table but `workflows`.
    pub fn run_counts(&self) -> Vec<(&'static str, u64)> {
        self.counts().into_iter().filter(|(table, _)| *table != "workflows").collect()
    }

    /// A run of `workflow` suspended at `node` (no worker runs here: the node's step is
    /// applied by hand).
    pub async fn suspended(&self, workflow: &str, node: &str) -> String {
        let (_, created) = self.post("/v1/runs", &json!({ "workflowId": workflow })).await;
        let run_id = created["runId"].as_str().unwrap().to_owned();
        let step = trellis_core::engine::Input::Step { node_id: node.into(), activation: 1 };
        self.services.apply_until_committed(&run_id, step).await.unwrap();
        run_id
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

/// Asserts the canonical envelope ([`is_envelope`]) with error `code`.
pub fn assert_envelope(body: &Value, code: &str) {
    assert!(is_envelope(body), "not the canonical envelope: {body}");
    assert_eq!(body["error"].as_str(), Some(code), "{body}");
}
