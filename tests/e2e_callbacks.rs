//! Callbacks for external workers on a live embedded host (`docs/callbacks.md`): the notify
//! POST reaches a local receiver with a token that completes the node; a notify that fails is
//! retried and never duplicates the interrupt; heartbeats keep a node alive past its
//! `heartbeatMs`; a missed heartbeat is retried (a new notify) and then takes the failure
//! route; `{failure}` fails the node; a token used after the interrupt's timeout is refused
//! with `410 interrupt_expired`; a crash of the real binary after the interrupt's commit
//! still notifies the worker after the restart; discovery says what a worker's token lasts.

mod common;

use std::time::Duration;

use common::{serve_args, start, types, Client, KEY};
use serde_json::{json, Value};
use trellis_testkit::callback::{external_job_workflow as workflow, CallbackReceiver};
use trellis_testkit::http_server::Reply;

const WITHIN: Duration = Duration::from_secs(10);

async fn register(client: &Client, definition: Value) {
    let (status, body) = client.request("POST", "/v1/workflows", Some(definition)).await;
    assert!(status == 201 || status == 200, "{status} {body}");
}

async fn resolve(client: &Client, token: &str, value: Value) -> (u16, Value) {
    client.request("POST", &format!("/v1/interrupts/{token}"), Some(json!({"resumeValue": value}))).await
}

#[tokio::test]
async fn a_notified_worker_heartbeats_past_heartbeat_ms_and_completes_the_node_with_its_token() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    // The first notify fails: it is retried, and the interrupt is not duplicated.
    let receiver = CallbackReceiver::start(vec![Reply::status(503), Reply::status(200)]).await;
    register(&client, workflow("cb-complete", json!({"timeouts": {"heartbeatMs": 600}}), 60_000)).await;
    let run_id = client.create(json!({"workflowId": "cb-complete", "callbackUrl": receiver.url()})).await;
    let tasks = receiver.wait_for(2, WITHIN).await;
    assert_eq!(tasks[0]["interruptId"], tasks[1]["interruptId"], "the retry names the same occurrence");
    assert_eq!(receiver.requests()[1].header("idempotency-key"), tasks[0]["interruptId"].as_str());
    let task = &tasks[1];
    assert_eq!((task["type"].as_str(), task["nodeId"].as_str()), (Some("trellis.callback.task"), Some("wait")));
    assert_eq!(task["interrupt"]["data"]["eventType"], "job.done");
    assert_eq!(task["heartbeatMs"], 600);
    let token = task["token"].as_str().unwrap();

    // Heartbeats every 200 ms for three times heartbeatMs keep the node alive.
    for _ in 0..9 {
        let (status, answer) = resolve(&client, token, json!({"heartbeat": true, "details": {"pct": 10}})).await;
        assert_eq!((status, answer["outcome"].as_str()), (200, Some("heartbeat-recorded")), "{answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(client.snapshot(&run_id).await["status"], "waiting-external");
    let (status, answer) = resolve(&client, token, json!({"eventPayload": {"job": "j-1", "rows": 3}})).await;
    assert_eq!(status, 200, "{answer}");
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let events = client.events(&run_id).await;
    assert_eq!(types(&events).iter().filter(|t| *t == "interrupt.requested").count(), 1);
    assert!(!types(&events).contains(&"node.retried".to_owned()));
    let debug = client.debug_events(&run_id).await;
    assert!(debug.iter().filter(|e| e["type"] == "trellis.interrupt.heartbeat").count() >= 9);
    assert_eq!(receiver.requests().len(), 2, "no notify after the interrupt resolved");
    host.stop().await;
}

#[tokio::test]
async fn a_missed_heartbeat_is_retried_with_a_new_notify_then_takes_the_failure_route() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let receiver = CallbackReceiver::start(Vec::new()).await;
    let settings = json!({"notifyUrl": receiver.url(), "timeouts": {"heartbeatMs": 300},
        "retry": {"maxAttempts": 2, "initialIntervalMs": 0}});
    register(&client, workflow("cb-missed", settings, 60_000)).await;
    let run_id = client.create(json!({"workflowId": "cb-missed"})).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "completed", "the failure route completes the run: {snapshot}");
    let tasks = receiver.tasks();
    assert_eq!(tasks.len(), 2, "one notify per attempt: {tasks:?}");
    assert_eq!((tasks[0]["attempt"].as_u64(), tasks[1]["attempt"].as_u64()), (Some(0), Some(1)));
    assert_ne!(tasks[0]["token"], tasks[1]["token"]);
    let events = client.debug_events(&run_id).await;
    let retried: Vec<&Value> = events.iter().filter(|e| e["type"] == "node.retried").collect();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0]["payload"]["lastError"]["code"], "heartbeat_timeout");
    let failed = events.iter().find(|e| e["type"] == "node.failed").expect("node.failed");
    assert_eq!(failed["payload"]["error"]["code"], "heartbeat_timeout");
    assert!(events.iter().any(|e| e["type"] == "node.completed" && e["nodeId"] == "handler"));
    // The first attempt's token is gone with its occurrence.
    let (status, answer) = resolve(&client, tasks[0]["token"].as_str().unwrap(), json!({"heartbeat": true})).await;
    assert!(status >= 400, "{answer}");
    host.stop().await;
}

#[tokio::test]
async fn a_workers_failure_fails_the_node_and_a_late_token_is_refused_as_expired() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let receiver = CallbackReceiver::start(Vec::new()).await;
    let plain = json!({"id": "cb-fail", "name": "cb-fail", "nodes": [
        {"id": "wait", "typeId": "core.interrupt", "config": {"kind": "external-event",
            "data": {"eventType": "job.done", "correlation": {}}, "timeoutMs": 60_000}}], "edges": []});
    register(&client, plain).await;
    let run_id = client.create(json!({"workflowId": "cb-fail", "callbackUrl": receiver.url()})).await;
    let task = receiver.wait_for(1, WITHIN).await.remove(0);
    let failure = json!({"failure": {"code": "job_failed", "message": "the batch job crashed"}});
    let (status, answer) = resolve(&client, task["token"].as_str().unwrap(), failure).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("failed")), "{answer}");
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!((snapshot["status"].as_str(), snapshot["error"]["code"].as_str()), (Some("failed"), Some("job_failed")));

    register(&client, workflow("cb-timeout", json!({}), 300)).await;
    let run_id = client.create(json!({"workflowId": "cb-timeout", "callbackUrl": receiver.url()})).await;
    let task = receiver.wait_for(2, WITHIN).await.remove(1);
    assert!(task["tokenExpiresAt"].is_string(), "the token lasts until the interrupt's timeout: {task}");
    client.wait_terminal(&run_id, WITHIN).await;
    let (status, answer) =
        resolve(&client, task["token"].as_str().unwrap(), json!({"eventPayload": {"job": "j-1"}})).await;
    assert_eq!((status, answer["error"].as_str()), (410, Some("interrupt_expired")), "{answer}");
    host.stop().await;
}

/// Milliseconds since the epoch of an RFC 3339 UTC instant as the host writes them
/// (`2026-12-01T21:00:00.000Z`).
fn epoch_ms(text: &str) -> i64 {
    let (date, time) = text.trim_end_matches('Z').split_once('T').unwrap_or_else(|| panic!("{text}"));
    let ymd: Vec<i64> = date.split('-').map(|n| n.parse().unwrap()).collect();
    let hms: Vec<f64> = time.split(':').map(|n| n.parse().unwrap()).collect();
    // Days from the civil date (Howard Hinnant's algorithm).
    let (month, day) = (ymd[1], ymd[2]);
    let year = ymd[0] - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    days * 86_400_000 + ((hms[0] * 3600.0 + hms[1] * 60.0 + hms[2]) * 1000.0).round() as i64
}

#[tokio::test]
async fn discovery_says_a_workers_token_lasts_until_the_interrupts_timeout() {
    assert_eq!(epoch_ms("1970-01-02T00:00:01.500Z"), 86_401_500, "the test's own parser");
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let discovery = client.discovery().await;
    let interrupts = &discovery["interrupts"];
    assert_eq!(interrupts["externalEventTokenTtl"], "interrupt-timeout", "{interrupts}");
    let other_kinds_ms = interrupts["tokenTtlSeconds"].as_i64().unwrap() * 1000;

    // Two hours of timeout: the worker's token outlives the other kinds' lifetime, to the end.
    let timeout_ms: i64 = 2 * 3600 * 1000;
    assert!(timeout_ms > other_kinds_ms);
    let receiver = CallbackReceiver::start(Vec::new()).await;
    register(&client, workflow("cb-ttl", json!({}), timeout_ms as u64)).await;
    let run_id = client.create(json!({"workflowId": "cb-ttl", "callbackUrl": receiver.url()})).await;
    let task = receiver.wait_for(1, WITHIN).await.remove(0);
    let lifetime = epoch_ms(task["tokenExpiresAt"].as_str().unwrap()) - epoch_ms(task["requestedAt"].as_str().unwrap());
    assert!(lifetime > other_kinds_ms && lifetime <= timeout_ms, "{lifetime} ms: {task}");
    assert_eq!(client.snapshot(&run_id).await["status"], "waiting-external");
    host.stop().await;
}

#[tokio::test]
async fn a_callback_url_must_be_absolute_http() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    register(&client, workflow("cb-url", json!({}), 60_000)).await;
    let (status, answer) =
        client.request("POST", "/v1/runs", Some(json!({"workflowId": "cb-url", "callbackUrl": "/relative"}))).await;
    assert_eq!((status, answer["details"]["field"].as_str()), (400, Some("callbackUrl")), "{answer}");
    host.stop().await;
}

/// The real binary aborted at `point` (the step that suspends on the interrupt commits, then
/// the process dies) and restarted on the same data directory: the notify committed with the
/// interrupt is still sent, once per delivery, and the interrupt is requested once.
async fn crash_then_notify(point: &str) {
    use trellis_testkit::host::spawn;
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_trellis"));
    let dir = tempfile::tempdir().unwrap();
    let receiver = CallbackReceiver::start(Vec::new()).await;
    let body = json!({"workflowId": "cb-crash", "callbackUrl": receiver.url()});
    let create = |base: String| {
        let body = body.clone();
        async move {
            let response = reqwest::Client::new()
                .post(format!("{base}/v1/runs"))
                .bearer_auth(KEY)
                .header("idempotency-key", "crash-run")
                .json(&body)
                .send()
                .await
                .ok()?;
            let created: Value = response.json().await.ok()?;
            created["runId"].as_str().map(str::to_owned)
        }
    };
    let mut crashing = spawn(binary, dir.path(), KEY, Some(point)).await;
    register(&Client::new(&crashing.base, KEY), workflow("cb-crash", json!({}), 60_000)).await;
    let _ = create(crashing.base.clone()).await;
    let exited = tokio::time::timeout(WITHIN, crashing.child.wait()).await.expect("the crash point was reached");
    exited.expect("the crashed host is reaped");
    assert!(receiver.tasks().is_empty(), "{point}: the host died with the notify committed, not sent");

    let mut recovered = spawn(binary, dir.path(), KEY, None).await;
    let run_id = create(recovered.base.clone()).await.expect("the accepted run survived");
    let task = receiver.wait_for(1, WITHIN).await.remove(0);
    let client = Client::new(&recovered.base, KEY);
    let (status, answer) =
        resolve(&client, task["token"].as_str().unwrap(), json!({"eventPayload": {"job": "j-1"}})).await;
    assert_eq!(status, 200, "{point}: {answer}");
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "completed", "{point}: {snapshot}");
    let events = client.events(&run_id).await;
    assert_eq!(types(&events).iter().filter(|t| *t == "interrupt.requested").count(), 1, "{point}");
    assert!(receiver.tasks().iter().all(|seen| seen["interruptId"] == task["interruptId"]), "{point}");
    recovered.child.kill().await.unwrap();
}

#[tokio::test]
async fn a_crash_after_the_interrupt_commits_still_notifies_the_worker() {
    crash_then_notify("after-commit").await;
}

#[tokio::test]
async fn a_crash_after_the_effects_before_the_acknowledgement_still_notifies_once_per_delivery() {
    crash_then_notify("after-effects").await;
}

#[tokio::test]
async fn with_a_public_url_the_task_links_keep_its_path_and_carry_the_absolute_url() {
    use clap::Parser;
    let mut args = serve_args(None);
    args.public_url =
        Some(trellis_core::interrupt::callback::PublicUrl::parse("test", "https://trellis.example/api/").unwrap());
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let receiver = CallbackReceiver::start(Vec::new()).await;
    register(&client, workflow("cb-public", json!({}), 60_000)).await;
    let run_id = client.create(json!({"workflowId": "cb-public", "callbackUrl": receiver.url()})).await;
    let task = receiver.wait_for(1, WITHIN).await.remove(0);
    let token = task["token"].as_str().unwrap();
    assert_eq!(task["resolvePath"], format!("/api/v1/interrupts/{token}"));
    assert_eq!(task["resolveUrl"], format!("https://trellis.example/api/v1/interrupts/{token}"));
    let (status, answer) = resolve(&client, token, json!({"eventPayload": {"job": "j-1"}})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(client.wait_terminal(&run_id, WITHIN).await["status"], "completed");
    host.stop().await;

    // The setting is checked at start, the error naming it.
    for bad in ["https://trellis.example/api?x=1", "https://trellis.example/api#top", "/api", "ftp://trellis.example"] {
        let error = trellis::args::ServeArgs::try_parse_from(["serve", "--memory", "--public-url", bad]).unwrap_err();
        assert!(error.to_string().contains("--public-url"), "{bad}: {error}");
    }
    let parsed =
        trellis::args::ServeArgs::try_parse_from(["serve", "--public-url", "https://trellis.example/v"]).unwrap();
    assert!(parsed.public_url.is_some());
}

#[tokio::test]
async fn a_replay_fork_is_answered_from_the_log_and_notifies_no_worker_and_a_branch_does() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let receiver = CallbackReceiver::start(vec![Reply::status(200)]).await;
    let settings = json!({"notifyUrl": receiver.url()});
    register(&client, workflow("cb-fork", settings, 60_000)).await;
    let run_id = client.create(json!({"workflowId": "cb-fork"})).await;
    let tasks = receiver.wait_for(1, WITHIN).await;
    let (status, answer) =
        resolve(&client, tasks[0]["token"].as_str().unwrap(), json!({"eventPayload": {"job": "j-1"}})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(client.wait_terminal(&run_id, WITHIN).await["status"], "completed");

    // A replay reaches the external-event node again and is answered with the event the
    // source got, but tells nobody: notifying the worker is a side effect of the source.
    let (status, replay) =
        client.request("POST", &format!("/v1/runs/{run_id}:fork"), Some(json!({"mode": "replay"}))).await;
    assert_eq!(status, 201, "{replay}");
    let replay_id = replay["runId"].as_str().unwrap().to_owned();
    assert_eq!(client.wait_terminal(&replay_id, WITHIN).await["status"], "completed");
    let (status, branch) =
        client.request("POST", &format!("/v1/runs/{run_id}:fork"), Some(json!({"mode": "branch", "fromSeq": 0}))).await;
    assert_eq!(status, 201, "{branch}");
    let notified = receiver.wait_for(2, WITHIN).await;
    assert_eq!(notified[1]["runId"], branch["runId"], "the branch notifies; the replay did not: {notified:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.requests().len(), 2);
    host.stop().await;
}
