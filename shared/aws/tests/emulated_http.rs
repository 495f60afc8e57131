//! `core.http.request` end to end on the emulated AWS stack (the attempt runs inside the
//! dispatcher's invocation, the backoff between attempts is a delayed SQS message) and on
//! the embedded host: a success, a retry then success, and exhausted retries taking the
//! `any_failed` failure route. Each scenario calls a fresh loopback `TestServer` per
//! backend, and both backends must give the same log (event types and node ids, in the
//! `debug` stream mode so `node.retried` is included) and the same terminal state. Without
//! the emulators the suite is ignored (see `trellis_testkit::external`).

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{embedded_host, require_emulators, stack, EmbeddedClient, Stack};
use trellis_testkit::http_server::{Reply, SeenRequest, TestServer};

/// A bound on one run, well past what three attempts and two SQS delays take.
const RUN_DEADLINE: Duration = Duration::from_secs(30);
const WORKFLOW: &str = "emulated-http-fetch";
const PATH: &str = "/item";

/// GET the run input `url` (three attempts, 50 ms apart before jitter); `record` after a
/// success, `fallback` when every attempt failed.
fn workflow() -> Value {
    json!({"id": WORKFLOW, "name": "Fetch with a fallback", "version": "1",
        "variables": [{"name": "url", "type": "string", "required": true}],
        "nodes": [
            {"id": "fetch", "typeId": "core.http.request",
             "inputs": {"url": {"type": "variable", "variableName": "url"}},
             "config": {"url": "{{inputs.url}}", "method": "GET", "timeoutMs": 5000},
             "settings": {"retry": {"maxAttempts": 3, "initialIntervalMs": 50}}},
            {"id": "record", "typeId": "core.noop"},
            {"id": "fallback", "typeId": "core.noop"}],
        "edges": [
            {"id": "fetch-record", "sourceNodeId": "fetch", "targetNodeId": "record"},
            {"id": "fetch-fallback", "sourceNodeId": "fetch", "targetNodeId": "fallback", "triggerRule": "any_failed"}]})
}

/// One backend's run of a scenario.
struct Ran {
    /// `type nodeId` (or `type` alone) per event, in order.
    log: Vec<String>,
    snapshot: Value,
    requests: Vec<SeenRequest>,
}

impl Ran {
    /// The distinct `Idempotency-Key`s the server saw (a missing header counts as one).
    fn idempotency_keys(&self) -> Vec<Option<String>> {
        let mut keys: Vec<Option<String>> =
            self.requests.iter().map(|request| request.header("idempotency-key").map(str::to_owned)).collect();
        keys.dedup();
        keys
    }
}

/// The start of a log whose `fetch` took three attempts (two `node.retried` between them).
const THREE_ATTEMPTS: [&str; 6] = [
    "run.started",
    "node.started fetch",
    "node.retried fetch",
    "node.started fetch",
    "node.retried fetch",
    "node.started fetch",
];

/// The expected log: `parts` in order.
fn log(parts: &[&[&str]]) -> Vec<String> {
    parts.iter().flat_map(|part| part.iter().map(|entry| (*entry).to_owned())).collect()
}

fn named(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|event| match event["nodeId"].as_str() {
            Some(node) => format!("{} {node}", event["type"].as_str().unwrap_or("?")),
            None => event["type"].as_str().unwrap_or("?").to_owned(),
        })
        .collect()
}

async fn on_aws(aws: &mut Stack, replies: &[Reply]) -> Ran {
    let server = TestServer::start().await;
    server.route(PATH, replies.to_vec());
    let run_id = aws.create(json!({"workflowId": WORKFLOW, "inputs": {"url": server.url(PATH)}})).await;
    let snapshot = aws.pump_until_terminal(&run_id, RUN_DEADLINE, false).await;
    let events = aws.debug_events(&run_id).await;
    support::assert_log_well_formed(&events);
    Ran { log: named(&events), snapshot, requests: server.requests_to(PATH) }
}

async fn on_embedded(client: &EmbeddedClient, replies: &[Reply]) -> Ran {
    let server = TestServer::start().await;
    server.route(PATH, replies.to_vec());
    let run_id = client.create(json!({"workflowId": WORKFLOW, "inputs": {"url": server.url(PATH)}})).await;
    let started = Instant::now();
    let snapshot = loop {
        let snapshot = client.get(&format!("/v1/runs/{run_id}")).await;
        if matches!(snapshot["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
            break snapshot;
        }
        assert!(started.elapsed() < RUN_DEADLINE, "run {run_id} not terminal within {RUN_DEADLINE:?}: {snapshot}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    Ran { log: named(&client.debug_events(&run_id).await), snapshot, requests: server.requests_to(PATH) }
}

/// Runs the scenario on both backends and checks they agree; returns (AWS, embedded).
async fn on_both(replies: &[Reply]) -> (Ran, Ran) {
    let mut aws = stack().await;
    let (status, registered) = aws.api("POST", "/v1/workflows", Some(workflow())).await;
    assert_eq!(status, 201, "{registered}");
    let on_aws = on_aws(&mut aws, replies).await;
    let (host, client) = embedded_host(false, &[workflow()]).await;
    let on_embedded = on_embedded(&client, replies).await;
    host.stop().await;
    assert_eq!(on_aws.log, on_embedded.log, "AWS and embedded logs differ");
    assert_eq!(on_aws.snapshot["status"], on_embedded.snapshot["status"]);
    assert_eq!(on_aws.requests.len(), on_embedded.requests.len(), "attempts differ");
    (on_aws, on_embedded)
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_get_that_succeeds_records_the_answer_on_both_backends() {
    require_emulators();
    let (aws, _) = on_both(&[Reply::json(200, &json!({"item": 7}))]).await;
    assert_eq!(aws.snapshot["status"], "completed", "{}", aws.snapshot);
    assert_eq!(aws.requests.len(), 1);
    assert_eq!(aws.requests[0].method, "GET");
    let tail = ["node.completed fetch", "node.skipped fallback", "node.started record", "node.completed record"];
    assert_eq!(aws.log, log(&[&["run.started", "node.started fetch"], &tail, &["run.completed"]]));
    assert_eq!(aws.snapshot["variables"]["fetch"]["status"], 200, "{}", aws.snapshot);
    assert_eq!(aws.snapshot["variables"]["fetch"]["body"], json!({"item": 7}), "{}", aws.snapshot);
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn two_503s_are_retried_with_one_idempotency_key_then_the_200_completes() {
    require_emulators();
    let replies = [Reply::status(503), Reply::status(503), Reply::json(200, &json!({"ok": true}))];
    let (aws, embedded) = on_both(&replies).await;
    assert_eq!(aws.snapshot["status"], "completed", "{}", aws.snapshot);
    assert_eq!(aws.requests.len(), 3, "three attempts reached the server");
    let tail = ["node.completed fetch", "node.skipped fallback", "node.started record", "node.completed record"];
    assert_eq!(aws.log, log(&[&THREE_ATTEMPTS, &tail, &["run.completed"]]));
    for ran in [&aws, &embedded] {
        let keys = ran.idempotency_keys();
        assert!(matches!(keys.as_slice(), [Some(key)] if !key.is_empty()), "one key for every attempt: {keys:?}");
    }
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn exhausted_retries_take_the_failure_route_and_the_run_completes() {
    require_emulators();
    let (aws, embedded) = on_both(&[Reply::status(503)]).await;
    assert_eq!(aws.snapshot["status"], "completed", "{}", aws.snapshot);
    assert_eq!(aws.requests.len(), 3, "maxAttempts attempts, no more");
    let tail = ["node.failed fetch", "node.skipped record", "node.started fallback", "node.completed fallback"];
    assert_eq!(aws.log, log(&[&THREE_ATTEMPTS, &tail, &["run.completed"]]));
    for ran in [&aws, &embedded] {
        assert_eq!(ran.snapshot["variables"]["fetch"]["error"]["code"], "http_unexpected_status", "{}", ran.snapshot);
    }
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_crash_after_the_call_reruns_it_with_the_same_key_and_duplicates_no_event() {
    require_emulators();
    let mut aws = stack().await;
    let (status, registered) = aws.api("POST", "/v1/workflows", Some(workflow())).await;
    assert_eq!(status, 201, "{registered}");
    // The dispatcher invocation that ran the call dies before committing its outcome: the
    // message is not deleted and comes back.
    let crash = std::sync::Arc::new(trellis_worker::SimulatedCrash::at(trellis_worker::CrashPoint::AfterActivity));
    aws.app.task_context.simulated = Some(crash.clone());
    let ran = on_aws(&mut aws, &[Reply::json(200, &json!({"item": 7}))]).await;
    assert!(crash.fired(), "the crash point was reached");
    assert_eq!(ran.snapshot["status"], "completed", "{}", ran.snapshot);
    assert_eq!(ran.requests.len(), 2, "the call ran again after the crash");
    let keys = ran.idempotency_keys();
    assert!(matches!(keys.as_slice(), [Some(key)] if !key.is_empty()), "the same key both times: {keys:?}");
    let attempts: Vec<Option<&str>> = ran.requests.iter().map(|request| request.header("trellis-attempt")).collect();
    assert_eq!(attempts, vec![Some("0"), Some("0")], "one attempt, executed twice");
    let tail = ["node.completed fetch", "node.skipped fallback", "node.started record", "node.completed record"];
    assert_eq!(ran.log, log(&[&["run.started", "node.started fetch"], &tail, &["run.completed"]]), "no event twice");
}
