//! `core.http.request` end to end on an embedded host, through the public HTTP API only: run
//! status and variables in the snapshot, the debug event list (`node.retried` is debug-only)
//! and what a loopback [`TestServer`] recorded. Covered: outputs and templating, status
//! checks, attempt timeouts, retry with backoff (one `Idempotency-Key`, `Trellis-Attempt`
//! counting up), the `any_failed` failure route, non-retryable errors, redirects refused, the
//! response cap, the SSRF guard on loopback, the shipped `fetch-with-fallback` example,
//! concurrent attempts and their bound, discovery and registration checks. Nothing leaves 127.0.0.1; nothing asserts on timing.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{assert_log_well_formed, serve_args, start, types, Client, KEY};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use trellis::args::ServeArgs;
use trellis::host::EmbeddedHost;
use trellis_testkit::http_server::{Reply, TestServer};

/// Generous: a run here makes a few local calls with short backoffs.
const DEADLINE: Duration = Duration::from_secs(15);

/// A host, a client for it and a scriptable server its workflows call.
struct Fixture {
    host: EmbeddedHost,
    client: Client,
    server: TestServer,
}

impl Fixture {
    async fn start() -> Self {
        Self::with(serve_args(None)).await
    }

    async fn with(args: ServeArgs) -> Self {
        let host = start(args).await;
        let client = Client::new(format!("http://{}", host.addr), KEY);
        Self { host, client, server: TestServer::start().await }
    }

    /// Registers `workflow` (201 expected).
    async fn register(&self, workflow: Value) {
        let (status, body) = self.client.request("POST", "/v1/workflows", Some(workflow)).await;
        assert_eq!(status, 201, "{body}");
    }

    /// Starts `workflow_id` with the server's port (and `extra`) as inputs; waits for the end.
    async fn run(&self, workflow_id: &str, extra: Value) -> (String, Value) {
        let mut inputs = json!({ "port": self.server.port() });
        if let Value::Object(extra) = extra {
            inputs.as_object_mut().unwrap().extend(extra);
        }
        let run_id = self.client.create(json!({ "workflowId": workflow_id, "inputs": inputs })).await;
        let snapshot = self.client.wait_terminal(&run_id, DEADLINE).await;
        (run_id, snapshot)
    }

    /// `GET /v1/runs/{id}/events?streamMode=debug` as a JSON list, checked well formed.
    async fn debug_events(&self, run_id: &str) -> Vec<Value> {
        let events = self.client.debug_events(run_id).await;
        assert_log_well_formed(&events);
        events
    }
}

/// A workflow of one `core.http.request` node `fetch` calling `path` on the server whose port
/// is the run input `port`, with `config` fields added and `settings` as given.
fn one_call(id: &str, path: &str, config: Value, settings: Value) -> Value {
    let mut full = json!({ "url": format!("http://127.0.0.1:{{{{variables.port}}}}{path}") });
    full.as_object_mut().unwrap().extend(config.as_object().cloned().unwrap_or_default());
    json!({
        "id": id,
        "name": id,
        "variables": [{ "name": "port", "type": "number", "required": true }],
        "nodes": [{ "id": "fetch", "typeId": "core.http.request", "config": full, "settings": settings }],
        "edges": []
    })
}

/// `one_call` plus `record` (after success) and `fallback` (an `any_failed` route).
fn with_fallback(id: &str, path: &str, config: Value, settings: Value) -> Value {
    let mut workflow = one_call(id, path, config, settings);
    let nodes = workflow["nodes"].as_array_mut().unwrap();
    nodes.push(json!({ "id": "record", "typeId": "core.noop" }));
    nodes.push(json!({ "id": "fallback", "typeId": "core.noop" }));
    workflow["edges"] = json!([
        { "id": "fetch-record", "sourceNodeId": "fetch", "targetNodeId": "record" },
        { "id": "fetch-fallback", "sourceNodeId": "fetch", "targetNodeId": "fallback", "triggerRule": "any_failed" }
    ]);
    workflow
}

/// `(type, attempt)` of every `node.*` event of `node`, in order.
fn node_trace(events: &[Value], node: &str) -> Vec<(String, Option<u64>)> {
    events
        .iter()
        .filter(|event| event["type"].as_str().is_some_and(|t| t.starts_with("node.")))
        .filter(|event| event["payload"]["nodeId"] == node)
        .map(|event| (event["type"].as_str().unwrap().to_owned(), event["payload"]["attempt"].as_u64()))
        .collect()
}

fn trace(items: &[(&str, Option<u64>)]) -> Vec<(String, Option<u64>)> {
    items.iter().map(|(kind, attempt)| ((*kind).to_owned(), *attempt)).collect()
}

fn completed_nodes(events: &[Value]) -> BTreeSet<String> {
    events
        .iter()
        .filter(|event| event["type"] == "node.completed")
        .filter_map(|event| event["payload"]["nodeId"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_successful_call_records_status_headers_and_body() {
    let fixture = Fixture::start().await;
    fixture.server.route(
        "/items",
        vec![Reply::json(200, &json!({ "ok": true, "n": 1 }))
            .header("x-request-id", "req-7")
            .header("set-cookie", "s=1")],
    );
    let config = json!({
        "method": "POST",
        "headers": { "x-token": "t-{{variables.name}}" },
        "body": { "name": "{{variables.name}}", "count": "{{variables.count}}" }
    });
    let mut workflow = one_call("http-success", "/items?q={{variables.q}}", config, json!({}));
    workflow["variables"].as_array_mut().unwrap().extend([
        json!({ "name": "name", "type": "string" }),
        json!({ "name": "count", "type": "number" }),
        json!({ "name": "q", "type": "string" }),
    ]);
    fixture.register(workflow).await;
    let (run_id, snapshot) = fixture.run("http-success", json!({ "name": "widget", "count": 3, "q": "a b/c" })).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");

    let outputs = &snapshot["variables"]["fetch"];
    assert_eq!(outputs["status"], 200, "{outputs}");
    assert_eq!(outputs["body"], json!({ "ok": true, "n": 1 }));
    assert_eq!(outputs["bodyTruncated"], false);
    assert_eq!(outputs["headers"]["content-type"], "application/json");
    assert_eq!(outputs["headers"]["x-request-id"], "req-7");
    assert!(outputs["headers"].get("set-cookie").is_none(), "set-cookie is never an output: {outputs}");
    assert!(outputs["durationMs"].is_u64(), "{outputs}");

    let events = fixture.debug_events(&run_id).await;
    assert_eq!(node_trace(&events, "fetch"), trace(&[("node.started", Some(0)), ("node.completed", None)]));
    let completed = events.iter().find(|event| event["type"] == "node.completed").unwrap();
    for field in ["status", "headers", "body", "bodyTruncated"] {
        assert_eq!(completed["payload"]["outputs"][field], outputs[field], "{field}: {completed}");
    }

    let seen = fixture.server.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let request = &seen[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.target, "/items?q=a%20b%2Fc", "a value in the URL is percent-encoded");
    assert_eq!(request.json(), json!({ "name": "widget", "count": 3 }), "a lone placeholder keeps its type");
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("x-token"), Some("t-widget"));
    assert_eq!(request.header("trellis-attempt"), Some("0"));
    let key = request.header("idempotency-key").unwrap_or_default();
    assert!(key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()), "idempotency key {key:?}");
    fixture.host.stop().await;
}

#[tokio::test]
async fn an_unexpected_status_fails_unless_it_is_expected() {
    let fixture = Fixture::start().await;
    fixture.server.route("/missing", vec![Reply::text(404, "not here")]);
    fixture.register(one_call("http-default-expect", "/missing", json!({}), json!({}))).await;
    fixture.register(one_call("http-expect-404", "/missing", json!({ "expectStatus": [404] }), json!({}))).await;

    let (_, failed) = fixture.run("http-default-expect", json!({})).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "http_unexpected_status", "{failed}");
    assert_eq!(failed["error"]["details"]["actual"], 404, "{failed}");
    assert_eq!(failed["error"]["details"]["expected"], "200-299", "{failed}");

    let (_, completed) = fixture.run("http-expect-404", json!({})).await;
    assert_eq!(completed["status"], "completed", "{completed}");
    assert_eq!(completed["variables"]["fetch"]["status"], 404);
    assert_eq!(completed["variables"]["fetch"]["body"], "not here");
    assert_eq!(fixture.server.requests_to("/missing").len(), 2, "one request per run, no retry");
    fixture.host.stop().await;
}

#[tokio::test]
async fn an_attempt_that_outlasts_its_timeout_fails_with_http_timeout() {
    let fixture = Fixture::start().await;
    fixture.server.route("/slow", vec![Reply::status(200).delay(Duration::from_secs(5))]);
    let settings = json!({ "retry": { "maxAttempts": 1 } });
    fixture.register(one_call("http-timeout", "/slow", json!({ "timeoutMs": 300 }), settings)).await;
    let (run_id, snapshot) = fixture.run("http-timeout", json!({})).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "http_timeout", "{snapshot}");
    assert_eq!(snapshot["error"]["details"]["timeoutMs"], 300, "{snapshot}");
    let events = fixture.debug_events(&run_id).await;
    assert_eq!(node_trace(&events, "fetch"), trace(&[("node.started", Some(0)), ("node.failed", None)]));
    assert_eq!(fixture.server.requests_to("/slow").len(), 1);
    fixture.host.stop().await;
}

#[tokio::test]
async fn a_retried_call_backs_off_and_keeps_its_idempotency_key() {
    let fixture = Fixture::start().await;
    fixture.server.route(
        "/flaky",
        vec![Reply::status(503), Reply::status(503), Reply::json(200, &json!({ "third": "time lucky" }))],
    );
    let settings = json!({ "retry": { "maxAttempts": 3, "initialIntervalMs": 50 } });
    fixture.register(one_call("http-retry", "/flaky", json!({}), settings)).await;
    let (run_id, snapshot) = fixture.run("http-retry", json!({})).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(snapshot["variables"]["fetch"]["body"], json!({ "third": "time lucky" }));

    let events = fixture.debug_events(&run_id).await;
    assert_eq!(
        node_trace(&events, "fetch"),
        trace(&[
            ("node.started", Some(0)),
            ("node.retried", Some(1)),
            ("node.started", Some(1)),
            ("node.retried", Some(2)),
            ("node.started", Some(2)),
            ("node.completed", None),
        ])
    );
    for retried in events.iter().filter(|event| event["type"] == "node.retried") {
        assert_eq!(retried["payload"]["lastError"]["code"], "http_unexpected_status", "{retried}");
        assert_eq!(retried["payload"]["lastError"]["details"]["actual"], 503, "{retried}");
        assert!(retried["payload"]["delayMs"].as_u64().is_some_and(|ms| ms <= 100), "{retried}");
    }

    let seen = fixture.server.requests_to("/flaky");
    let keys: BTreeSet<_> = seen.iter().map(|request| request.header("idempotency-key")).collect();
    assert_eq!(keys.len(), 1, "one logical call, one key: {keys:?}");
    assert!(keys.iter().all(Option::is_some));
    let attempts: Vec<_> = seen.iter().map(|request| request.header("trellis-attempt")).collect();
    assert_eq!(attempts, [Some("0"), Some("1"), Some("2")]);
    fixture.host.stop().await;
}

#[tokio::test]
async fn exhausted_retries_take_the_failure_route() {
    let fixture = Fixture::start().await;
    fixture.server.route("/down", vec![Reply::status(503)]);
    let settings = json!({ "retry": { "maxAttempts": 3, "initialIntervalMs": 20 } });
    fixture.register(with_fallback("http-exhausted", "/down", json!({}), settings)).await;
    let (run_id, snapshot) = fixture.run("http-exhausted", json!({})).await;
    assert_eq!(snapshot["status"], "completed", "a handled failure completes the run: {snapshot}");
    let error = &snapshot["variables"]["fetch"]["error"];
    assert_eq!(error["code"], "http_unexpected_status", "{snapshot}");
    assert_eq!(error["retryable"], true, "{snapshot}");

    let events = fixture.debug_events(&run_id).await;
    let failed = events.iter().find(|event| event["type"] == "node.failed").expect("node.failed");
    assert_eq!(failed["payload"]["nodeId"], "fetch");
    assert_eq!(failed["payload"]["attempts"], 3, "{failed}");
    assert_eq!(completed_nodes(&events), BTreeSet::from(["fallback".to_owned()]), "{:?}", types(&events));
    assert_eq!(fixture.server.requests_to("/down").len(), 3);
    fixture.host.stop().await;
}

#[tokio::test]
async fn a_non_retryable_status_is_not_retried() {
    let fixture = Fixture::start().await;
    fixture.server.route("/bad", vec![Reply::json(400, &json!({ "error": "bad input" }))]);
    let settings = json!({ "retry": { "maxAttempts": 3, "initialIntervalMs": 20 } });
    fixture.register(one_call("http-400", "/bad", json!({}), settings)).await;
    let (run_id, snapshot) = fixture.run("http-400", json!({})).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "http_unexpected_status");
    assert_eq!(snapshot["error"]["details"]["actual"], 400);
    let events = fixture.debug_events(&run_id).await;
    assert_eq!(node_trace(&events, "fetch"), trace(&[("node.started", Some(0)), ("node.failed", None)]));
    assert_eq!(fixture.server.requests_to("/bad").len(), 1, "a 400 is not retried");
    fixture.host.stop().await;
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let fixture = Fixture::start().await;
    fixture.server.route("/moved", vec![Reply::status(302).header("location", &fixture.server.url("/target"))]);
    fixture.server.route("/target", vec![Reply::status(200)]);
    fixture.register(one_call("http-redirect", "/moved", json!({}), json!({}))).await;
    let (_, snapshot) = fixture.run("http-redirect", json!({})).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "http_unexpected_status", "{snapshot}");
    assert_eq!(snapshot["error"]["details"]["actual"], 302, "{snapshot}");
    assert_eq!(snapshot["error"]["details"]["response"]["headers"]["location"], fixture.server.url("/target"));
    assert_eq!(fixture.server.requests_to("/moved").len(), 1);
    assert!(fixture.server.requests_to("/target").is_empty(), "the Location was never requested");
    fixture.host.stop().await;
}

#[tokio::test]
async fn a_body_past_the_cap_is_truncated() {
    let mut args = serve_args(None);
    args.http_max_response_bytes = 64;
    let fixture = Fixture::with(args).await;
    fixture.server.route("/big", vec![Reply::text(200, &"a".repeat(1000))]);
    fixture.register(one_call("http-cap", "/big", json!({}), json!({}))).await;
    let (_, snapshot) = fixture.run("http-cap", json!({})).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let outputs = &snapshot["variables"]["fetch"];
    assert_eq!(outputs["bodyTruncated"], true, "{outputs}");
    assert_eq!(outputs["body"], "a".repeat(64), "{outputs}");
    let (_, discovery) = fixture.client.request("GET", "/.well-known/openwop", None).await;
    assert_eq!(discovery["httpClient"]["maxResponseBodyBytes"], 64, "discovery names the cap");
    fixture.host.stop().await;
}

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/workflows")
}

#[tokio::test]
async fn the_shipped_fetch_with_fallback_example_records_or_falls_back() {
    let mut args = serve_args(None);
    args.workflows = vec![examples_dir()];
    let fixture = Fixture::with(args).await;
    fixture.server.route("/up", vec![Reply::json(200, &json!({ "items": [1, 2] }))]);
    fixture.server.route("/down", vec![Reply::status(503)]);

    let up = fixture
        .client
        .create(json!({ "workflowId": "fetch-with-fallback", "inputs": { "url": fixture.server.url("/up") } }))
        .await;
    let snapshot = fixture.client.wait_terminal(&up, DEADLINE).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(snapshot["variables"]["fetch"]["body"], json!({ "items": [1, 2] }), "{snapshot}");
    let events = fixture.debug_events(&up).await;
    assert_eq!(completed_nodes(&events), BTreeSet::from(["fetch".to_owned(), "record".to_owned()]));
    assert_eq!(fixture.server.requests_to("/up").len(), 1);
    assert_eq!(fixture.server.requests_to("/up")[0].header("accept"), Some("application/json"));

    let down = fixture
        .client
        .create(json!({ "workflowId": "fetch-with-fallback", "inputs": { "url": fixture.server.url("/down") } }))
        .await;
    let snapshot = fixture.client.wait_terminal(&down, DEADLINE).await;
    assert_eq!(snapshot["status"], "completed", "the failure route handles it: {snapshot}");
    assert_eq!(snapshot["variables"]["fetch"]["error"]["code"], "http_unexpected_status", "{snapshot}");
    let events = fixture.debug_events(&down).await;
    assert_eq!(completed_nodes(&events), BTreeSet::from(["fallback".to_owned()]), "{:?}", types(&events));
    let attempts: Vec<_> =
        fixture.server.requests_to("/down").iter().map(|r| r.header("trellis-attempt").map(str::to_owned)).collect();
    assert_eq!(attempts, [Some("0".to_owned()), Some("1".to_owned()), Some("2".to_owned())]);
    fixture.host.stop().await;
}

/// A loopback server that holds every request until `open_at` have arrived (and then for
/// `hold` more), then answers 200, or 503 if they never all arrive within a safety bound. It
/// records each request's `Idempotency-Key` and the most requests it held at once.
struct GateServer {
    port: u16,
    keys: Arc<Mutex<Vec<String>>>,
    most_in_flight: Arc<AtomicUsize>,
    accept: tokio::task::JoinHandle<()>,
}

impl GateServer {
    async fn start(open_at: usize, hold: Duration) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let keys = Arc::new(Mutex::new(Vec::new()));
        let most_in_flight = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (arrived, _) = tokio::sync::watch::channel(0usize);
        let (seen, most) = (Arc::clone(&keys), Arc::clone(&most_in_flight));
        let accept = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                let (arrived, seen, most, in_flight) =
                    (arrived.clone(), Arc::clone(&seen), Arc::clone(&most), Arc::clone(&in_flight));
                let mut gate = arrived.subscribe();
                connections.spawn(async move {
                    let mut head = Vec::new();
                    let mut buffer = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => head.extend_from_slice(&buffer[..read]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                    let key = text.lines().find_map(|line| line.strip_prefix("idempotency-key:")).unwrap_or("");
                    seen.lock().unwrap().push(key.trim().to_owned());
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    arrived.send_modify(|count| *count += 1);
                    // The safety bound only turns a hang into a failed run; nothing times it.
                    let all_in = tokio::time::timeout(Duration::from_secs(20), gate.wait_for(|n| *n >= open_at))
                        .await
                        .is_ok_and(|waited| waited.is_ok());
                    tokio::time::sleep(hold).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    let reply: &[u8] = if all_in {
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\nconnection: close\r\n\r\n{\"ok\":true}"
                    } else {
                        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    };
                    let _ = stream.write_all(reply).await;
                    let _ = stream.shutdown().await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Self { port, keys, most_in_flight, accept }
    }
}

impl Drop for GateServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Starts `count` runs of `workflow_id` against `gate`; asserts they all complete.
async fn run_all_through(fixture: &Fixture, gate: &GateServer, workflow_id: &str, count: usize) {
    let mut runs = Vec::new();
    for _ in 0..count {
        runs.push(fixture.client.create(json!({ "workflowId": workflow_id, "inputs": { "port": gate.port } })).await);
    }
    for run_id in &runs {
        let snapshot = fixture.client.wait_terminal(run_id, Duration::from_secs(40)).await;
        assert_eq!(snapshot["status"], "completed", "{snapshot}");
    }
    let keys = gate.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), count, "one request per run: {keys:?}");
    assert_eq!(keys.iter().collect::<BTreeSet<_>>().len(), count, "one idempotency key per logical call");
}

#[tokio::test]
async fn twenty_runs_blocked_on_a_slow_server_are_in_flight_together() {
    const RUNS: usize = 20;
    let mut args = serve_args(None);
    args.max_concurrent_activities = trellis_worker::DEFAULT_MAX_CONCURRENT_ACTIVITIES as u32;
    let fixture = Fixture::with(args).await;
    // No request is answered before all twenty arrived: every run completing proves it.
    let gate = GateServer::start(RUNS, Duration::from_secs(1)).await;
    fixture.register(one_call("http-gate", "/wait", json!({ "timeoutMs": 30000 }), json!({}))).await;
    run_all_through(&fixture, &gate, "http-gate", RUNS).await;
    assert_eq!(gate.most_in_flight.load(Ordering::SeqCst), RUNS);
    fixture.host.stop().await;
}

#[tokio::test]
async fn max_concurrent_activities_bounds_the_attempts_in_flight() {
    let mut args = serve_args(None);
    args.max_concurrent_activities = 2;
    let fixture = Fixture::with(args).await;
    let gate = GateServer::start(1, Duration::from_millis(200)).await;
    fixture.register(one_call("http-bounded", "/wait", json!({}), json!({}))).await;
    run_all_through(&fixture, &gate, "http-bounded", 6).await;
    let most = gate.most_in_flight.load(Ordering::SeqCst);
    assert!((1..=2).contains(&most), "at most two attempts at once, saw {most}");
    fixture.host.stop().await;
}

#[tokio::test]
async fn a_host_without_an_allow_list_refuses_loopback() {
    let mut args = serve_args(None);
    args.http_allow_private_nets = String::new();
    let fixture = Fixture::with(args).await;
    fixture.server.route("/local", vec![Reply::status(200)]);
    let settings = json!({ "retry": { "maxAttempts": 3, "initialIntervalMs": 20 } });
    fixture.register(one_call("http-ssrf", "/local", json!({}), settings)).await;
    let (run_id, snapshot) = fixture.run("http-ssrf", json!({})).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "http_url_rejected", "{snapshot}");
    assert_eq!(snapshot["error"]["details"]["reason"], "loopback", "{snapshot}");
    let events = fixture.debug_events(&run_id).await;
    assert_eq!(node_trace(&events, "fetch"), trace(&[("node.started", Some(0)), ("node.failed", None)]));
    assert!(fixture.server.requests().is_empty(), "nothing reached the server");
    fixture.host.stop().await;
}

#[tokio::test]
async fn discovery_advertises_the_http_client_and_registration_checks_the_node() {
    let fixture = Fixture::start().await;
    let (status, discovery) = fixture.client.request("GET", "/.well-known/openwop", None).await;
    assert_eq!(status, 200, "{discovery}");
    let client = discovery["httpClient"].as_object().expect("an httpClient block");
    let fields: BTreeSet<&str> = client.keys().map(String::as_str).collect();
    assert_eq!(
        fields,
        BTreeSet::from(["supported", "ssrfGuard", "maxResponseBodyBytes", "requestTimeoutMs", "methods", "safeFetch"]),
        "the closed schema's fields, no more: {client:?}"
    );
    assert_eq!(client["supported"], true);
    assert_eq!(client["ssrfGuard"], true);
    assert_eq!(client["maxResponseBodyBytes"], 1_048_576);
    assert!(client["requestTimeoutMs"].as_u64().is_some_and(|ms| ms > 0));
    assert!(client["methods"].as_array().is_some_and(|methods| methods.contains(&json!("GET"))), "{client:?}");
    assert!(client["safeFetch"].is_object(), "{client:?}");
    let node_types = discovery["nodeTypes"].as_array().expect("nodeTypes");
    assert!(node_types.contains(&json!("core.http.request")), "{node_types:?}");

    let brew = one_call("http-brew", "/pot", json!({ "method": "BREW" }), json!({}));
    let (status, body) = fixture.client.request("POST", "/v1/workflows", Some(brew)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("config.method"), "the field is named: {body}");

    let never = one_call("http-never", "/x", json!({}), json!({ "retry": { "maxAttempts": 0 } }));
    let (status, body) = fixture.client.request("POST", "/v1/workflows", Some(never)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("/settings/retry/maxAttempts"), "the path is named: {body}");

    for id in ["http-brew", "http-never"] {
        let (status, _) = fixture.client.request("GET", &format!("/v1/workflows/{id}"), None).await;
        assert_eq!(status, 404, "{id} was not registered");
    }
    fixture.host.stop().await;
}
