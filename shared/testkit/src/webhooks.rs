//! Webhook and trigger scenarios, played against any backend ([`SignedDriver`]: a [`Driver`]
//! that can also send a raw, signed request without an API key): outbound deliveries to a
//! local receiver ([`WebhookReceiver`]), their retries and dead letters, and inbound signed
//! webhooks starting one run per delivery id. The embedded host (`tests/e2e_webhooks.rs`) and
//! the emulated AWS stack (`emulated_webhooks.rs`) run the same functions.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{json, Value};
use trellis_core::webhook::sign;

use crate::http_server::{Reply, SeenRequest, TestServer};
use crate::Driver;

/// A backend that also takes raw requests (the trigger ingest route is signed, not keyed).
#[async_trait]
pub trait SignedDriver: Driver {
    /// POSTs `body` to `path` with `headers` and no API key; status and JSON body.
    async fn post_raw(&mut self, path: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, Value);
}

/// A local webhook receiver: a [`TestServer`] whose routes answer as scripted, recording
/// every delivery with its headers and exact body bytes.
pub struct WebhookReceiver {
    /// The server.
    pub server: TestServer,
}

impl WebhookReceiver {
    /// A receiver answering `200` on every path it is told about ([`WebhookReceiver::path`]).
    pub async fn start() -> Self {
        Self { server: TestServer::start().await }
    }

    /// Scripts `path` with `replies` and returns its URL.
    pub fn path(&self, path: &str, replies: Vec<Reply>) -> String {
        self.server.route(path, replies);
        self.server.url(path)
    }

    /// The deliveries `path` got.
    pub fn deliveries(&self, path: &str) -> Vec<SeenRequest> {
        self.server.requests_to(path)
    }
}

/// A delivery's signed parts, for an independent check of the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedDelivery {
    /// `X-openwop-Timestamp`.
    pub timestamp: String,
    /// `X-openwop-Signature`.
    pub signature: String,
    /// The exact body bytes.
    pub body: Vec<u8>,
}

impl SignedDelivery {
    /// The signed parts of `request`.
    pub fn of(request: &SeenRequest) -> Self {
        Self {
            timestamp: request.header("x-openwop-timestamp").unwrap_or_default().to_owned(),
            signature: request.header("x-openwop-signature").unwrap_or_default().to_owned(),
            body: request.body.clone(),
        }
    }
}

/// Verifies `deliveries` signed with `secret` with Python's `hmac`
/// (`tests/webhooks/verify_signatures.py`, a second implementation of the scheme); its output
/// (`verified N`). Panics when a signature does not hold or Python 3 is missing.
pub fn verify_in_python(secret: &str, deliveries: &[SignedDelivery]) -> String {
    use base64::Engine as _;
    use std::io::Write;
    let input: Vec<Value> = deliveries
        .iter()
        .map(|delivery| {
            json!({
                "secret": secret,
                "timestamp": delivery.timestamp,
                "signature": delivery.signature,
                "body_b64": base64::engine::general_purpose::STANDARD.encode(&delivery.body),
            })
        })
        .collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/webhooks/verify_signatures.py");
    let mut child = std::process::Command::new("python3")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs (the test command needs Python 3)");
    child.stdin.take().expect("stdin").write_all(Value::Array(input).to_string().as_bytes()).expect("write");
    let output = child.wait_with_output().expect("python3 ends");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "python refused a signature: {}{stdout}", String::from_utf8_lossy(&output.stderr));
    stdout
}

/// Lets `driver` make progress until `done` or `within` passes; panics naming `what`.
pub async fn wait_for(driver: &mut dyn Driver, what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "timed out waiting for {what}");
        driver.tick().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Registers a webhook for `events` at `url`; the `201` body (with the secret).
pub async fn register(driver: &mut dyn Driver, url: &str, events: &[&str]) -> Value {
    let (status, body) = driver.call("POST", "/v1/webhooks", Some(json!({"url": url, "events": events})), true).await;
    assert_eq!(status, 201, "{body}");
    body
}

async fn start_run(driver: &mut dyn Driver, workflow_id: &str) -> String {
    let (status, body) = driver.call("POST", "/v1/runs", Some(json!({"workflowId": workflow_id})), true).await;
    assert_eq!(status, 201, "{body}");
    body["runId"].as_str().expect("runId").to_owned()
}

/// The delivery records of `webhook_id` (`state` filter optional).
pub async fn delivery_records(driver: &mut dyn Driver, webhook_id: &str, state: Option<&str>) -> Vec<Value> {
    let query = state.map(|state| format!("?state={state}")).unwrap_or_default();
    let (status, body) = driver.call("GET", &format!("/v1/webhooks/{webhook_id}/deliveries{query}"), None, true).await;
    assert_eq!(status, 200, "{body}");
    body["deliveries"].as_array().cloned().unwrap_or_default()
}

async fn wait_for_records(driver: &mut dyn Driver, webhook_id: &str, state: &str, count: usize) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let records = delivery_records(driver, webhook_id, Some(state)).await;
        if records.len() >= count {
            return records;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {count} {state} deliveries: {records:?}"
        );
        driver.tick().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A run's `run.started` and `run.completed` reach a subscribed receiver signed, in both
/// header families, with the body's top-level `type`/`runId` and the nested `event`; each
/// delivery is recorded delivered after one attempt. Returns the secret and the deliveries'
/// signed parts, for the caller's independent check.
pub async fn outbound_delivery(driver: &mut dyn Driver, receiver: &WebhookReceiver) -> (String, Vec<SignedDelivery>) {
    let url = receiver.path("/hooks/ok", vec![Reply::status(204)]);
    let registered = register(driver, &url, &["run.started", "run.completed"]).await;
    let (webhook_id, secret) =
        (registered["webhookId"].as_str().unwrap().to_owned(), registered["secret"].as_str().unwrap().to_owned());
    assert_eq!(registered["secretFingerprint"], json!(sign::fingerprint(&secret)));
    let (_, listed) = driver.call("GET", &format!("/v1/webhooks/{webhook_id}"), None, true).await;
    assert!(listed.get("secret").is_none(), "a read shows the secret: {listed}");
    let run_id = start_run(driver, "conformance-noop").await;
    wait_for(driver, "two deliveries", Duration::from_secs(20), || receiver.deliveries("/hooks/ok").len() >= 2).await;
    let deliveries = receiver.deliveries("/hooks/ok");
    let mut types = Vec::new();
    for delivery in &deliveries {
        let body = delivery.json();
        assert_eq!(body["runId"], json!(run_id));
        assert_eq!(body["event"]["runId"], json!(run_id));
        assert_eq!(body["type"], body["event"]["type"]);
        assert_eq!(body["eventId"], json!(format!("{run_id}:{}", body["sequence"])));
        assert_eq!(body["webhookId"], json!(webhook_id));
        assert_eq!(body["deliveryId"], json!(format!("{webhook_id}:{run_id}:{}", body["sequence"])));
        for (x, openwop) in [
            ("x-openwop-webhook-id", "openwop-webhook-id"),
            ("x-openwop-event-type", "openwop-event-type"),
            ("x-openwop-timestamp", "openwop-timestamp"),
            ("x-openwop-signature", "openwop-signature"),
            ("x-openwop-delivery-id", "openwop-delivery-id"),
        ] {
            assert!(delivery.header(x).is_some(), "{x} missing");
            assert_eq!(delivery.header(x), delivery.header(openwop), "{x} and {openwop} differ");
        }
        assert_eq!(delivery.header("x-openwop-webhook-id"), Some(webhook_id.as_str()));
        assert_eq!(delivery.header("x-openwop-signature-algorithm"), Some("v1"));
        assert_eq!(delivery.header("x-openwop-event-type"), body["type"].as_str());
        assert!(delivery.header("x-openwop-signature").unwrap().starts_with("sha256="));
        assert!(delivery.header("user-agent").unwrap().starts_with("openwop-webhook-dispatcher/"));
        types.push(body["type"].as_str().unwrap().to_owned());
    }
    types.sort();
    assert_eq!(types, vec!["run.completed", "run.started"], "exactly the subscribed types, once each");
    let records = wait_for_records(driver, &webhook_id, "delivered", 2).await;
    assert!(records.iter().all(|record| record["attempts"] == json!(1)), "{records:?}");
    (secret, deliveries.iter().map(SignedDelivery::of).collect())
}

/// A receiver answering `503` then `200` gets the same delivery twice (same delivery id, same
/// body), recorded delivered after 2 attempts; one answering `500` always is dead-lettered
/// after `max_attempts` and listed as such; one answering `410` is dead-lettered after one
/// attempt (not retryable). The runs complete whatever the receivers do.
pub async fn outbound_retries_and_dead_letters(
    driver: &mut dyn Driver,
    receiver: &WebhookReceiver,
    max_attempts: usize,
) {
    let flaky = receiver.path("/hooks/flaky", vec![Reply::status(503), Reply::status(200)]);
    let down = receiver.path("/hooks/down", vec![Reply::status(500)]);
    let gone = receiver.path("/hooks/gone", vec![Reply::status(410)]);
    let flaky_id = register(driver, &flaky, &["run.completed"]).await["webhookId"].as_str().unwrap().to_owned();
    let down_id = register(driver, &down, &["run.completed"]).await["webhookId"].as_str().unwrap().to_owned();
    let gone_id = register(driver, &gone, &["run.completed"]).await["webhookId"].as_str().unwrap().to_owned();
    let run_id = start_run(driver, "conformance-noop").await;

    let delivered = wait_for_records(driver, &flaky_id, "delivered", 1).await;
    assert_eq!(delivered[0]["attempts"], json!(2), "{delivered:?}");
    assert_eq!(delivered[0]["runId"], json!(run_id));
    let seen = receiver.deliveries("/hooks/flaky");
    assert_eq!(seen.len(), 2, "one retry, then nothing more");
    assert_eq!(seen[0].header("x-openwop-delivery-id"), seen[1].header("x-openwop-delivery-id"));
    assert_eq!(seen[0].json()["eventId"], seen[1].json()["eventId"]);

    let dead = wait_for_records(driver, &down_id, "dead-lettered", 1).await;
    assert_eq!(dead[0]["attempts"], json!(max_attempts), "{dead:?}");
    assert_eq!(dead[0]["lastErrorCode"], json!("callback_status"));
    assert_eq!(receiver.deliveries("/hooks/down").len(), max_attempts);

    let gone = wait_for_records(driver, &gone_id, "dead-lettered", 1).await;
    assert_eq!(gone[0]["attempts"], json!(1), "a 410 is not retried: {gone:?}");
    assert_eq!(receiver.deliveries("/hooks/gone").len(), 1);

    let (_, snapshot) = driver.call("GET", &format!("/v1/runs/{run_id}"), None, true).await;
    assert_eq!(snapshot["status"], "completed", "deliveries never touch their run");
    for id in [&flaky_id, &down_id, &gone_id] {
        let (status, _) = driver.call("DELETE", &format!("/v1/webhooks/{id}"), None, true).await;
        assert_eq!(status, 204);
    }
}

/// A definition with one input, for the trigger scenario.
pub fn echo_workflow() -> Value {
    json!({
        "id": "trigger-echo",
        "name": "Trigger echo",
        "version": "1",
        "variables": [{"name": "orderId", "type": "number", "required": true}],
        "nodes": [{"id": "done", "typeId": "core.noop", "name": "done"}],
        "edges": [],
    })
}

fn signed_headers(secret: &str, delivery_id: Option<&str>, body: &[u8], now_secs: u64) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("content-type", "application/json".to_owned()),
        ("x-openwop-timestamp", now_secs.to_string()),
        ("x-openwop-signature", sign::signature(secret, now_secs, body)),
        ("authorization", "Bearer must-be-dropped".to_owned()),
    ];
    if let Some(id) = delivery_id {
        headers.push(("x-openwop-delivery-id", id.to_owned()));
    }
    headers
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs()
}

/// A signed inbound webhook starts exactly one run per delivery id: a redelivery answers the
/// prior run and starts nothing; the run's `run.started` says what caused it; a bad signature
/// is refused and dead-lettered with `signature-invalid`; a paused subscription refuses; the
/// subscription's log holds `trigger.delivery.attempted` with exactly its five properties.
pub async fn inbound_trigger(driver: &mut dyn SignedDriver) {
    let (status, body) = driver.call("POST", "/v1/workflows", Some(echo_workflow()), true).await;
    assert!(status == 201 || status == 200, "{body}");
    let request = json!({"source": "webhook", "workflowId": "trigger-echo", "inputMapping": {"orderId": "/webhook/body/order/id"}});
    let (status, registered) = driver.call("POST", "/v1/trigger-subscriptions", Some(request), true).await;
    assert_eq!(status, 201, "{registered}");
    let id = registered["subscriptionId"].as_str().unwrap().to_owned();
    let secret = registered["secret"].as_str().unwrap().to_owned();
    assert!(registered["ingestUrl"].as_str().unwrap().ends_with(&format!("/v1/triggers/{id}")), "{registered}");
    let ingest = format!("/v1/triggers/{id}");

    let body = br#"{"order": {"id": 7}}"#;
    let (status, first) = driver.post_raw(&ingest, &signed_headers(&secret, Some("d-1"), body, now_secs()), body).await;
    assert_eq!(status, 202, "{first}");
    let run_id = first["runId"].as_str().unwrap().to_owned();
    assert_eq!(first["duplicate"], json!(false));
    let (status, again) = driver.post_raw(&ingest, &signed_headers(&secret, Some("d-1"), body, now_secs()), body).await;
    assert_eq!(
        (status, again["runId"].clone(), again["duplicate"].clone()),
        (200, json!(run_id), json!(true)),
        "{again}"
    );

    let other = br#"{"order": {"id": 8}}"#;
    let (status, second) =
        driver.post_raw(&ingest, &signed_headers(&secret, Some("d-2"), other, now_secs()), other).await;
    assert_eq!(status, 202, "{second}");
    assert_ne!(second["runId"], json!(run_id));

    let (status, refused) =
        driver.post_raw(&ingest, &signed_headers("whsec_wrong", Some("d-3"), body, now_secs()), body).await;
    assert_eq!((status, refused["error"].clone()), (401, json!("signature_invalid")), "{refused}");
    let stale = signed_headers(&secret, Some("d-4"), body, now_secs() - 3_600);
    let (status, expired) = driver.post_raw(&ingest, &stale, body).await;
    assert_eq!((status, expired["details"]["reason"].clone()), (401, json!("timestamp_expired")), "{expired}");

    let mut finished = Value::Null;
    let start = Instant::now();
    while finished["status"] != json!("completed") {
        assert!(start.elapsed() < Duration::from_secs(20), "the triggered run did not complete: {finished}");
        driver.tick().await;
        finished = driver.call("GET", &format!("/v1/runs/{run_id}"), None, true).await.1;
    }
    assert_eq!(finished["variables"]["orderId"], json!(7), "{finished}");
    let (_, events) = driver.call("GET", &format!("/v1/runs/{run_id}/events/poll?lastSequence=-1"), None, true).await;
    let started = &events["events"][0];
    assert_eq!(started["type"], "run.started");
    assert_eq!(started["payload"]["causationId"], "d-1", "{started}");
    assert_eq!(started["payload"]["trigger"]["subscriptionId"], json!(id));
    assert!(!events.to_string().contains("must-be-dropped"), "the TriggerEvent stays out of the log");

    let (_, runs) = driver.call("GET", "/v1/runs?workflowId=trigger-echo&limit=100", None, true).await;
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(2), "one run per delivery id: {runs}");

    let (_, deliveries) = driver.call("GET", &format!("/v1/trigger-subscriptions/{id}/deliveries"), None, true).await;
    let deliveries = deliveries["deliveries"].as_array().cloned().unwrap_or_default();
    let d1 = deliveries.iter().find(|d| d["deliveryId"] == "d-1").expect("d-1 recorded");
    assert_eq!((d1["attempts"].clone(), d1["runId"].clone()), (json!(2), json!(run_id)));
    assert_eq!(d1["triggerEvent"]["contentTrust"], "untrusted");
    assert!(d1["triggerEvent"]["webhook"]["headers"].get("authorization").is_none(), "{d1}");
    let d3 = deliveries.iter().find(|d| d["deliveryId"] == "d-3").expect("d-3 recorded");
    assert_eq!((d3["outcome"].clone(), d3["reason"].clone()), (json!("dead-lettered"), json!("signature-invalid")));

    let (status, _) = driver.call("POST", &format!("/v1/trigger-subscriptions/{id}:pause"), None, true).await;
    assert_eq!(status, 200);
    let (status, paused) =
        driver.post_raw(&ingest, &signed_headers(&secret, Some("d-5"), body, now_secs()), body).await;
    assert_eq!((status, paused["error"].clone()), (409, json!("subscription_paused")), "{paused}");
    let (status, _) = driver.call("POST", &format!("/v1/trigger-subscriptions/{id}:resume"), None, true).await;
    assert_eq!(status, 200);

    let (_, log) = driver.call("GET", &format!("/v1/trigger-subscriptions/{id}/events?limit=100"), None, true).await;
    let log = log["events"].as_array().cloned().unwrap_or_default();
    let attempted: Vec<&Value> = log.iter().filter(|entry| entry["type"] == "trigger.delivery.attempted").collect();
    assert_eq!(attempted.len(), 6, "{log:?}");
    for entry in &attempted {
        let keys: Vec<&String> = entry["payload"].as_object().unwrap().keys().collect();
        assert_eq!(keys, vec!["attempt", "dedupKey", "outcome", "runId", "subscriptionId"], "exactly five properties");
    }
    let outcomes: Vec<&str> = attempted.iter().map(|entry| entry["payload"]["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, vec!["delivered", "delivered", "delivered", "dead-lettered", "dead-lettered", "retrying"]);
    let changes: Vec<(&str, &str)> = log
        .iter()
        .filter(|entry| entry["type"] == "trigger.subscription.state.changed")
        .map(|entry| (entry["payload"]["fromState"].as_str().unwrap(), entry["payload"]["toState"].as_str().unwrap()))
        .collect();
    assert_eq!(changes, vec![("active", "paused"), ("paused", "active")]);
    let (status, _) = driver.call("DELETE", &format!("/v1/trigger-subscriptions/{id}"), None, true).await;
    assert_eq!(status, 204);
    let (status, gone) = driver.post_raw(&ingest, &signed_headers(&secret, Some("d-6"), body, now_secs()), body).await;
    assert_eq!((status, gone["error"].clone()), (404, json!("subscription_not_found")));
}
