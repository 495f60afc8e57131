//! Crash recovery of the real binary. A child `trellis serve` is aborted at each named
//! crash point of the worker (before commit, after commit before effects, after effects
//! before acknowledgement) or killed with SIGKILL mid-delay and after accepting runs; a
//! restart on the same data directory must complete every run with contiguous sequences and
//! no duplicate event.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_log_well_formed, types, Client};
use serde_json::{json, Value};

const KEY: &str = "crash-key";
const SPEC_DEADLINE: Duration = Duration::from_secs(5);

struct Host {
    child: Child,
    base: String,
}

fn spawn(data_dir: &Path, crash_at: Option<&str>) -> Host {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env("TRELLIS_API_KEY", KEY)
        .env("RUST_LOG", "warn")
        .env_remove("OPENWOP_FIXTURES_DIR")
        .env_remove("TRELLIS_TEST_CRASH_AT")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(point) = crash_at {
        command.env("TRELLIS_TEST_CRASH_AT", point);
    }
    let mut child = command.spawn().expect("trellis starts");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("trellis prints its address");
    let base = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(base.starts_with("http://"), "unexpected first line {line:?}");
    Host { child, base }
}

fn wait_exit(child: &mut Child, within: Duration) {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < within, "the crash point was never reached");
        std::thread::sleep(Duration::from_millis(10));
    }
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
    let mut crashing = spawn(dir.path(), Some(point));
    let answered = create_keyed(&crashing.base, "crash-run", &body).await;
    wait_exit(&mut crashing.child, SPEC_DEADLINE);

    let mut recovered = spawn(dir.path(), None);
    let replayed = create_keyed(&recovered.base, "crash-run", &body).await.expect("the accepted run survived");
    if let Some(answered) = answered {
        assert_eq!(answered, replayed);
    }
    let client = Client::new(&recovered.base, KEY);
    let snapshot = client.wait_terminal(&replayed, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed", "{point}");
    let events = client.events(&replayed).await;
    assert_log_well_formed(&events);
    assert_eq!(
        types(&events),
        [
            "run.started",
            "node.started",
            "node.completed",
            "node.started",
            "node.completed",
            "node.started",
            "node.completed",
            "run.completed"
        ],
        "{point}"
    );
    recovered.child.kill().unwrap();
    recovered.child.wait().unwrap();
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
    let mut first = spawn(dir.path(), None);
    let client = Client::new(&first.base, KEY);
    let run_id = client.create(json!({"workflowId": "conformance-delay", "inputs": {"delayMs": 1500}})).await;
    let started = Instant::now();
    while !types(&client.events(&run_id).await).iter().any(|t| t == "node.started") {
        assert!(started.elapsed() < SPEC_DEADLINE);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let mut second = spawn(dir.path(), None);
    let client = Client::new(&second.base, KEY);
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed");
    let events = client.events(&run_id).await;
    assert_log_well_formed(&events);
    assert_eq!(types(&events), ["run.started", "node.started", "node.completed", "run.completed"]);
    second.child.kill().unwrap();
    second.child.wait().unwrap();
}

#[tokio::test]
async fn kill_after_accepting_runs_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = spawn(dir.path(), None);
    let client = Client::new(&first.base, KEY);
    let mut accepted = Vec::new();
    for _ in 0..25 {
        accepted.push(client.create(json!({"workflowId": "conformance-multi-node"})).await);
    }
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let mut second = spawn(dir.path(), None);
    let client = Client::new(&second.base, KEY);
    for run_id in &accepted {
        let snapshot = client.wait_terminal(run_id, SPEC_DEADLINE).await;
        assert_eq!(snapshot["status"], "completed", "{run_id}");
        let events = client.events(run_id).await;
        assert_log_well_formed(&events);
        assert_eq!(events.len(), 8, "{run_id}: {:?}", types(&events));
    }
    second.child.kill().unwrap();
    second.child.wait().unwrap();
}
