//! Crash recovery of the real binary. A child `trellis serve` is aborted at each named
//! crash point of the worker (before commit, after commit before effects, after effects
//! before acknowledgement) or killed with SIGKILL mid-delay and after accepting runs; a
//! restart on the same data directory must complete every run with contiguous sequences and
//! no duplicate event.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{assert_log_well_formed, types, Client};
use serde_json::{json, Value};
use trellis_testkit::host::{ServeProcess, DELAY_EVENTS, MULTI_NODE_EVENTS};

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
