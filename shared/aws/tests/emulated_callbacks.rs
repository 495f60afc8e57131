//! Callbacks for external workers on the emulated AWS stack (`docs/callbacks.md`): the
//! dispatcher's notify POST reaches a local receiver with a token the API's token surface
//! accepts; a notify that fails is retried and never duplicates the interrupt; heartbeats
//! keep a node alive past its `heartbeatMs` (the early timer is deferred on the queue); a
//! missed heartbeat is retried with a new notify, then takes the failure route; `{failure}`
//! fails the node; a token used after the interrupt's timeout is refused with
//! `410 interrupt_expired`. Without the emulators the suite is ignored.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{require_emulators, stack, Stack};
use trellis_testkit::callback::{external_job_workflow as workflow, CallbackReceiver};
use trellis_testkit::http_server::Reply;

const RUN_DEADLINE: Duration = Duration::from_secs(40);

async fn register(aws: &Stack, definition: Value) {
    let (status, body) = aws.api("POST", "/v1/workflows", Some(definition)).await;
    assert_eq!(status, 201, "{body}");
}

/// `POST /v1/interrupts/{token}` without a bearer key: the token is the authorisation.
async fn resolve(aws: &Stack, token: &str, value: Value) -> (u16, Value) {
    aws.request("POST", &format!("/v1/interrupts/{token}"), Some(json!({"resumeValue": value})), false).await
}

/// Pumps the queues until the receiver saw `count` notifies.
async fn pump_until_notified(aws: &mut Stack, receiver: &CallbackReceiver, count: usize) -> Vec<Value> {
    let started = Instant::now();
    while receiver.tasks().len() < count {
        assert!(started.elapsed() < RUN_DEADLINE, "{count} notifies expected, got {}", receiver.tasks().len());
        if aws.pump_once(false).await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    receiver.tasks()
}

/// Pumps the queues for `time`.
async fn pump_for(aws: &mut Stack, time: Duration) {
    let until = Instant::now() + time;
    while Instant::now() < until {
        if aws.pump_once(false).await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_notified_worker_heartbeats_past_heartbeat_ms_and_completes_the_node_with_its_token() {
    require_emulators();
    let mut aws = stack().await;
    let receiver = CallbackReceiver::start(vec![Reply::status(503), Reply::status(200)]).await;
    register(&aws, workflow("cb-complete", json!({"timeouts": {"heartbeatMs": 2000}}), 120_000)).await;
    let run_id = aws.create(json!({"workflowId": "cb-complete", "callbackUrl": receiver.url()})).await;
    let tasks = pump_until_notified(&mut aws, &receiver, 2).await;
    assert_eq!(tasks[0]["interruptId"], tasks[1]["interruptId"], "the retried notify names the same occurrence");
    let token = tasks[1]["token"].as_str().unwrap().to_owned();
    // Heartbeats every 500 ms for twice heartbeatMs, while the queues are pumped.
    for _ in 0..8 {
        let (status, answer) = resolve(&aws, &token, json!({"heartbeat": true, "details": {"pct": 5}})).await;
        assert_eq!((status, answer["outcome"].as_str()), (200, Some("heartbeat-recorded")), "{answer}");
        pump_for(&mut aws, Duration::from_millis(500)).await;
    }
    assert_eq!(aws.snapshot(&run_id).await["status"], "waiting-external");
    let (status, answer) = resolve(&aws, &token, json!({"eventPayload": {"job": "j-1"}})).await;
    assert_eq!(status, 200, "{answer}");
    let snapshot = aws.pump_until_terminal(&run_id, RUN_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let events = aws.debug_events(&run_id).await;
    assert_eq!(events.iter().filter(|e| e["type"] == "interrupt.requested").count(), 1);
    assert!(!events.iter().any(|e| e["type"] == "node.retried"));
    assert_eq!(receiver.tasks().len(), 2, "no notify after the interrupt resolved");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_missed_heartbeat_is_retried_with_a_new_notify_then_takes_the_failure_route() {
    require_emulators();
    let mut aws = stack().await;
    let receiver = CallbackReceiver::start(Vec::new()).await;
    let settings = json!({"notifyUrl": receiver.url(), "timeouts": {"heartbeatMs": 1000},
        "retry": {"maxAttempts": 2, "initialIntervalMs": 0}});
    register(&aws, workflow("cb-missed", settings, 120_000)).await;
    let run_id = aws.create(json!({"workflowId": "cb-missed"})).await;
    let snapshot = aws.pump_until_terminal(&run_id, RUN_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed", "the failure route completes the run: {snapshot}");
    let tasks = receiver.tasks();
    assert_eq!(tasks.len(), 2, "one notify per attempt");
    assert_eq!((tasks[0]["attempt"].as_u64(), tasks[1]["attempt"].as_u64()), (Some(0), Some(1)));
    let events = aws.debug_events(&run_id).await;
    let retried: Vec<&Value> = events.iter().filter(|e| e["type"] == "node.retried").collect();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0]["payload"]["lastError"]["code"], "heartbeat_timeout");
    assert!(events.iter().any(|e| e["type"] == "node.completed" && e["nodeId"] == "handler"));
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_workers_failure_fails_the_node_and_a_late_token_is_refused_as_expired() {
    require_emulators();
    let mut aws = stack().await;
    let receiver = CallbackReceiver::start(Vec::new()).await;
    let plain = json!({"id": "cb-fail", "name": "cb-fail", "nodes": [
        {"id": "wait", "typeId": "core.interrupt", "config": {"kind": "external-event",
            "data": {"eventType": "job.done", "correlation": {}}, "timeoutMs": 120_000}}], "edges": []});
    register(&aws, plain).await;
    let run_id = aws.create(json!({"workflowId": "cb-fail", "callbackUrl": receiver.url()})).await;
    let task = pump_until_notified(&mut aws, &receiver, 1).await.remove(0);
    let failure = json!({"failure": {"code": "job_failed", "message": "the batch job crashed"}});
    let (status, answer) = resolve(&aws, task["token"].as_str().unwrap(), failure).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("failed")), "{answer}");
    let snapshot = aws.pump_until_terminal(&run_id, RUN_DEADLINE, false).await;
    assert_eq!((snapshot["status"].as_str(), snapshot["error"]["code"].as_str()), (Some("failed"), Some("job_failed")));

    register(&aws, workflow("cb-timeout", json!({}), 1000)).await;
    let run_id = aws.create(json!({"workflowId": "cb-timeout", "callbackUrl": receiver.url()})).await;
    let task = pump_until_notified(&mut aws, &receiver, 2).await.remove(1);
    aws.pump_until_terminal(&run_id, RUN_DEADLINE, false).await;
    let (status, answer) =
        resolve(&aws, task["token"].as_str().unwrap(), json!({"eventPayload": {"job": "j-1"}})).await;
    assert_eq!((status, answer["error"].as_str()), (410, Some("interrupt_expired")), "{answer}");
}
