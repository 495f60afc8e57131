//! `trellis-aws-local` end to end against the DynamoDB and SQS emulators: the built binary
//! serves a run with an approval gate under the stage (its SSE stream read live while it
//! waits and after the approval), refuses a path outside the stage as API Gateway does, stops
//! cleanly on SIGTERM, and a restart on the same name finds the run (resources reused).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
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
        let mut child = Command::new(env!("CARGO_BIN_EXE_trellis-aws-local"))
            .current_dir(dir)
            .args(["--bind", "127.0.0.1:0", "--name", name, "--workflows", "workflows"])
            .env("TRELLIS_API_KEY", KEY)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the binary starts");
        let stdout = child.stdout.take().expect("stdout");
        let (lines, received) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let base = loop {
            let Ok(line) = received.recv_timeout(HANG_GUARD) else { break None };
            if let Some(address) = line.strip_prefix("trellis-aws-local listening on ") {
                break address.strip_suffix("/v").map(str::to_owned);
            }
        };
        let Some(base) = base else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the binary did not print `trellis-aws-local listening on http://ADDR/v`");
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
