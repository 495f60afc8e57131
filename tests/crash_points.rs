//! Crash recovery of the real binary. A child `trellis serve` is aborted at each named
//! crash point of the worker (before commit, after commit before effects, after effects
//! before acknowledgement, after an activity returned before its outcome is committed) or
//! killed with SIGKILL mid-delay and after accepting runs; a restart on the same data
//! directory must complete every run with contiguous sequences and no duplicate event.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{assert_log_well_formed, types, Client};
use serde_json::{json, Value};
use trellis_testkit::host::{ServeProcess, DELAY_EVENTS, MULTI_NODE_EVENTS};
use trellis_testkit::http_server::{Reply, TestServer};

const KEY: &str = "crash-key";
const SPEC_DEADLINE: Duration = Duration::from_secs(5);

async fn spawn(data_dir: &Path, crash_at: Option<&str>) -> ServeProcess {
    trellis_testkit::host::spawn(Path::new(env!("CARGO_BIN_EXE_trellis")), data_dir, KEY, crash_at).await
}

async fn wait_exit(host: &mut ServeProcess, within: Duration) {
    let exited = tokio::time::timeout(within, host.child.wait()).await.expect("the crash point was never reached");
    exited.expect("the crashed host is reaped");
}

/// Kills `host` (SIGKILL) and reaps it.
async fn kill(mut host: ServeProcess) {
    host.child.kill().await.unwrap();
}

/// Creates a run with an idempotency key; the process may die before answering, so the
/// answer is optional.
async fn create_keyed(base: &str, idempotency_key: &str, body: &Value) -> Option<String> {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/runs"))
        .bearer_auth(KEY)
        .header("idempotency-key", idempotency_key)
        .json(body)
        .send()
        .await
        .ok()?;
    let created: Value = response.json().await.ok()?;
    created["runId"].as_str().map(str::to_owned)
}

async fn crash_and_recover(point: &str) {
    let dir = tempfile::tempdir().unwrap();
    let body = json!({"workflowId": "conformance-multi-node"});
    let mut crashing = spawn(dir.path(), Some(point)).await;
    let answered = create_keyed(&crashing.base, "crash-run", &body).await;
    wait_exit(&mut crashing, SPEC_DEADLINE).await;

    let recovered = spawn(dir.path(), None).await;
    let replayed = create_keyed(&recovered.base, "crash-run", &body).await.expect("the accepted run survived");
    if let Some(answered) = answered {
        assert_eq!(answered, replayed);
    }
    let client = Client::new(&recovered.base, KEY);
    let snapshot = client.wait_terminal(&replayed, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed", "{point}");
    let events = client.events(&replayed).await;
    assert_log_well_formed(&events);
    assert_eq!(types(&events), MULTI_NODE_EVENTS, "{point}");
    kill(recovered).await;
}

#[tokio::test]
async fn crash_before_commit_recovers() {
    crash_and_recover("before-commit").await;
}

#[tokio::test]
async fn crash_after_commit_before_effects_recovers() {
    crash_and_recover("after-commit").await;
}

#[tokio::test]
async fn crash_after_effects_before_ack_recovers() {
    crash_and_recover("after-effects").await;
}

#[tokio::test]
async fn kill_mid_delay_resumes_the_timer() {
    let dir = tempfile::tempdir().unwrap();
    let first = spawn(dir.path(), None).await;
    let client = Client::new(&first.base, KEY);
    let run_id = client.create(json!({"workflowId": "conformance-delay", "inputs": {"delayMs": 1500}})).await;
    let started = Instant::now();
    while !types(&client.events(&run_id).await).iter().any(|t| t == "node.started") {
        assert!(started.elapsed() < SPEC_DEADLINE);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    kill(first).await;

    let second = spawn(dir.path(), None).await;
    let client = Client::new(&second.base, KEY);
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed");
    let events = client.events(&run_id).await;
    assert_log_well_formed(&events);
    assert_eq!(types(&events), DELAY_EVENTS);
    kill(second).await;
}

#[tokio::test]
async fn kill_after_accepting_runs_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let first = spawn(dir.path(), None).await;
    let client = Client::new(&first.base, KEY);
    let mut accepted = Vec::new();
    for _ in 0..25 {
        accepted.push(client.create(json!({"workflowId": "conformance-multi-node"})).await);
    }
    kill(first).await;

    let second = spawn(dir.path(), None).await;
    let client = Client::new(&second.base, KEY);
    for run_id in &accepted {
        let snapshot = client.wait_terminal(run_id, SPEC_DEADLINE).await;
        assert_eq!(snapshot["status"], "completed", "{run_id}");
        let events = client.events(run_id).await;
        assert_log_well_formed(&events);
        assert_eq!(events.len(), 8, "{run_id}: {:?}", types(&events));
    }
    kill(second).await;
}

/// The host dies after a `core.http.request` attempt returned and before its outcome was
/// committed: after the restart the attempt's lease runs out (its budget + grace + margin,
/// about 7 s with `timeoutMs: 1000`), it runs again with the same `Idempotency-Key` and
/// attempt number, and the run completes with one `node.started` / `node.completed`.
#[tokio::test]
async fn crash_after_an_activity_returned_reruns_it_with_the_same_key() {
    let server = TestServer::start().await;
    server.route("/charge", vec![Reply::json(200, &json!({"charged": true}))]);
    let dir = tempfile::tempdir().unwrap();
    let mut crashing = spawn(dir.path(), Some("after-activity")).await;
    let workflow = json!({"id": "crash-http", "name": "crash-http",
        "variables": [{"name": "port", "type": "number", "required": true}],
        "nodes": [{"id": "charge", "typeId": "core.http.request",
                   "config": {"url": "http://127.0.0.1:{{variables.port}}/charge", "method": "POST",
                              "body": {"amount": 5}, "timeoutMs": 1000}}],
        "edges": []});
    let client = Client::new(&crashing.base, KEY);
    let (status, body) = client.request("POST", "/v1/workflows", Some(workflow)).await;
    assert_eq!(status, 201, "{body}");
    let body = json!({"workflowId": "crash-http", "inputs": {"port": server.port()}});
    let answered = create_keyed(&crashing.base, "crash-http-run", &body).await;
    wait_exit(&mut crashing, SPEC_DEADLINE).await;
    assert_eq!(server.requests_to("/charge").len(), 1, "the first host called once, then died");

    let recovered = spawn(dir.path(), None).await;
    let replayed = create_keyed(&recovered.base, "crash-http-run", &body).await.expect("the accepted run survived");
    if let Some(answered) = answered {
        assert_eq!(answered, replayed);
    }
    let client = Client::new(&recovered.base, KEY);
    // The redelivery waits for the attempt's lease (about 7 s); the bound is generous.
    let snapshot = client.wait_terminal(&replayed, Duration::from_secs(30)).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(snapshot["variables"]["charge"]["body"], json!({"charged": true}), "{snapshot}");
    let events = client.events(&replayed).await;
    assert_log_well_formed(&events);
    assert_eq!(types(&events), DELAY_EVENTS, "one node.started and one node.completed");

    let seen = server.requests_to("/charge");
    assert_eq!(seen.len(), 2, "the attempt ran again after the crash: {seen:?}");
    let keys: Vec<_> = seen.iter().map(|request| request.header("idempotency-key")).collect();
    assert!(keys[0].is_some() && keys[0] == keys[1], "the same Idempotency-Key both times: {keys:?}");
    let attempts: Vec<_> = seen.iter().map(|request| request.header("trellis-attempt")).collect();
    assert_eq!(attempts, [Some("0"), Some("0")], "the same attempt, executed twice");
    kill(recovered).await;
}
