//! `trellis-aws-local` end to end against the DynamoDB and SQS emulators: the built binary
//! serves a run with an approval gate under the stage (its SSE stream read live while it
//! waits and after the approval), refuses a path outside the stage as API Gateway does, stops
//! cleanly on SIGTERM, and a restart on the same name finds the run (resources reused); an
//! external worker's notify carries links under the stack's own address and stage (the
//! default `TRELLIS_PUBLIC_URL`), and its `resolveUrl` completes the node.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use trellis_testkit::callback::{external_job_workflow, CallbackReceiver};
use trellis_testkit::external::{require_emulators, Service};

const KEY: &str = "aws-local-test-key";
/// Guards against a hang (a binary that never prints its address, a stream that never
/// brings an event); never an assertion on how fast anything is.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// A running `trellis-aws-local`.
struct Local {
    child: Child,
    base: String,
}

impl Local {
    fn start(dir: &Path, name: &str) -> Self {
        Self::start_with(dir, name, &[])
    }

    /// [`Local::start`] with `extra` options.
    fn start_with(dir: &Path, name: &str, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_trellis-aws-local"))
            .current_dir(dir)
            .args(["--bind", "127.0.0.1:0", "--name", name, "--workflows", "workflows"])
            .args(extra)
            .env("TRELLIS_API_KEY", KEY)
            .env_remove("TRELLIS_PUBLIC_URL")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the binary starts");
        let url = trellis_testkit::process::announced_url(&mut child, "trellis-aws-local listening on ", HANG_GUARD);
        let Some(base) = url.strip_suffix("/v").map(str::to_owned) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the stage URL ends in /v: {url}");
        };
        Self { child, base }
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
        assert!(sent.success());
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the binary did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `stream` until its text so far contains `needle`.
async fn read_until(stream: &mut reqwest::Response, seen: &mut String, needle: &str) {
    while !seen.contains(needle) {
        let chunk = tokio::time::timeout(HANG_GUARD, stream.chunk())
            .await
            .unwrap_or_else(|_| panic!("no `{needle}` on the stream: {seen}"))
            .expect("the stream reads");
        let chunk = chunk.unwrap_or_else(|| panic!("the stream ended before `{needle}`: {seen}"));
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_gated_run_streams_live_is_approved_and_survives_a_restart() {
    require_emulators(&[Service::DynamoDb, Service::Sqs]);
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("workflows")).unwrap();
    let gated = json!({"id": "local-gate", "name": "gate",
        "nodes": [{"id": "gate", "typeId": "core.approvalGate"}, {"id": "after", "typeId": "core.noop"}],
        "edges": [{"id": "e", "sourceNodeId": "gate", "targetNodeId": "after"}]});
    std::fs::write(dir.path().join("workflows/gate.json"), gated.to_string()).unwrap();
    let name = format!("trellis-local-test-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let http = reqwest::Client::new();

    let local = Local::start(dir.path(), &name);
    let base = local.base.clone();
    let created = http
        .post(format!("{base}/v/v1/runs"))
        .bearer_auth(KEY)
        .json(&json!({"workflowId": "local-gate"}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    let run_id = created["runId"].as_str().expect("a run id").to_owned();
    assert_eq!(created["statusUrl"], format!("/v/v1/runs/{run_id}"), "links keep the stage: {created}");

    let mut stream = http
        .get(format!("{base}/v/v1/runs/{run_id}/events"))
        .bearer_auth(KEY)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), 200);
    assert!(stream.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, "interrupt.requested").await;
    assert!(!seen.contains("run.completed"), "the run waits at its gate: {seen}");

    let approved = http
        .post(format!("{base}/v/v1/runs/{run_id}/interrupts/gate"))
        .bearer_auth(KEY)
        .json(&json!({"resumeValue": {"action": "accept"}}))
        .send()
        .await
        .expect("approve");
    assert!(approved.status().is_success(), "{:?}", approved.text().await);
    // The same stream, still open, brings what the dispatcher did after the approval.
    read_until(&mut stream, &mut seen, "run.completed").await;
    drop(stream);

    let outside = http.get(format!("{base}/v1/runs")).bearer_auth(KEY).send().await.expect("outside");
    assert_eq!(outside.status(), 403);
    let outside: Value = outside.json().await.unwrap();
    assert_eq!(outside["error"], "forbidden", "{outside}");
    assert!(outside["message"].as_str().unwrap().contains("/v/"), "{outside}");
    assert!(local.stop().success(), "SIGTERM stops it cleanly");

    let again = Local::start(dir.path(), &name);
    let snapshot =
        http.get(format!("{}/v/v1/runs/{run_id}", again.base)).bearer_auth(KEY).send().await.expect("snapshot");
    assert_eq!(snapshot.status(), 200);
    let snapshot: Value = snapshot.json().await.unwrap();
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert!(again.stop().success());
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_notify_links_under_the_stacks_address_and_its_resolve_url_completes_the_node() {
    require_emulators(&[Service::DynamoDb, Service::Sqs]);
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("workflows")).unwrap();
    let workflow = external_job_workflow("local-callback", json!({}), 120_000);
    std::fs::write(dir.path().join("workflows/callback.json"), workflow.to_string()).unwrap();
    let name = format!("trellis-local-test-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let receiver = CallbackReceiver::start(Vec::new()).await;
    let http = reqwest::Client::new();

    // The receiver listens on loopback, a private destination the notify may reach here.
    let local = Local::start_with(dir.path(), &name, &["--http-allow-private-nets", "127.0.0.1/32"]);
    let base = local.base.clone();
    let created = http
        .post(format!("{base}/v/v1/runs"))
        .bearer_auth(KEY)
        .json(&json!({"workflowId": "local-callback", "callbackUrl": receiver.url()}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let run_id = created.json::<Value>().await.unwrap()["runId"].as_str().expect("a run id").to_owned();

    let task = receiver.wait_for(1, HANG_GUARD).await.remove(0);
    let token = task["token"].as_str().expect("a token");
    assert_eq!(task["resolvePath"], format!("/v/v1/interrupts/{token}"), "{task}");
    assert_eq!(task["resolveUrl"], format!("{base}/v/v1/interrupts/{token}"), "{task}");
    // The token is the authorisation: no bearer key.
    let resolved = http
        .post(task["resolveUrl"].as_str().unwrap())
        .json(&json!({"resumeValue": {"eventPayload": {"job": "j-1"}}}))
        .send()
        .await
        .expect("resolve");
    assert_eq!(resolved.status(), 200, "{:?}", resolved.text().await);

    let deadline = Instant::now() + HANG_GUARD;
    let snapshot = loop {
        let snapshot: Value = http
            .get(format!("{base}/v/v1/runs/{run_id}"))
            .bearer_auth(KEY)
            .send()
            .await
            .expect("snapshot")
            .json()
            .await
            .unwrap();
        if matches!(snapshot["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
            break snapshot;
        }
        assert!(Instant::now() < deadline, "the run did not end: {snapshot}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert!(local.stop().success());
}
