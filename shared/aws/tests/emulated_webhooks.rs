//! Webhooks, inbound triggers and schedules on the emulated AWS stack: the scenarios the
//! embedded host plays (`trellis_testkit::webhooks`) through the API function's router with
//! the step queue pumped — deliveries signed and verified by Python's `hmac`, retries with
//! one delivery id, dead letters, a delivery message handled twice posting once; a signed
//! inbound webhook starting one run per delivery id —
//! and the scheduler tick the template's one-minute rule sends, invoked through the
//! dispatcher's handler. Without the emulators the suite is ignored.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{require_emulators, stack, AwsDriver, Stack};
use trellis_testkit::webhooks::{self, WebhookReceiver};
use trellis_testkit::Driver;

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn deliveries_are_signed_and_verify_in_an_independent_implementation() {
    require_emulators();
    let mut stack = stack().await;
    let receiver = WebhookReceiver::start().await;
    let (secret, deliveries) = webhooks::outbound_delivery(&mut AwsDriver(&mut stack), &receiver).await;
    assert_eq!(webhooks::verify_in_python(&secret, &deliveries).trim(), "verified 2");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn failed_deliveries_retry_with_one_delivery_id_then_dead_letter() {
    require_emulators();
    let mut stack = stack().await;
    let receiver = WebhookReceiver::start().await;
    // The stack's policy (support::stack): 3 attempts, 100 ms backoff.
    webhooks::outbound_retries_and_dead_letters(&mut AwsDriver(&mut stack), &receiver, 3).await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_signed_inbound_webhook_starts_one_run_per_delivery_id() {
    require_emulators();
    let mut stack = stack().await;
    webhooks::inbound_trigger(&mut AwsDriver(&mut stack)).await;
}

/// A definition firing every `seconds` seconds (test seams only).
fn ticking(id: &str, seconds: u32) -> Value {
    json!({
        "id": id, "name": id, "version": "1",
        "triggers": [{"id": "tick", "type": "schedule", "config": {"expression": format!("rate({seconds} seconds)"), "inputs": {"n": 1}}}],
        "nodes": [{"id": "done", "typeId": "core.noop", "name": "done"}],
        "edges": [],
    })
}

async fn tick(stack: &Stack) -> Value {
    let event = json!({ "trellis": trellis_aws::dispatch::SCHEDULER_TICK });
    trellis_aws::dispatch::handle_trigger(&stack.app, event).await.expect("the scheduler tick runs")
}

/// The `scheduledAt` of every run of `workflow_id`, sorted.
async fn occurrences(stack: &mut Stack, workflow_id: &str) -> Vec<String> {
    let (_, runs) = stack.request("GET", &format!("/v1/runs?workflowId={workflow_id}&limit=100"), None, true).await;
    let mut out = Vec::new();
    for run in runs["runs"].as_array().cloned().unwrap_or_default() {
        let run_id = run["runId"].as_str().unwrap();
        let (_, events) =
            stack.request("GET", &format!("/v1/runs/{run_id}/events/poll?lastSequence=-1"), None, true).await;
        let trigger = &events["events"][0]["payload"]["trigger"];
        assert_eq!(trigger["source"], "schedule", "{events}");
        out.push(trigger["scheduledAt"].as_str().unwrap().to_owned());
    }
    out.sort();
    out
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn the_scheduler_tick_starts_each_occurrence_once_and_a_paused_schedule_skips() {
    require_emulators();
    let mut stack = stack().await;
    let (status, body) = stack.request("POST", "/v1/workflows", Some(ticking("aws-ticking", 1)), true).await;
    assert_eq!(status, 201, "{body}");
    // Ticks late and racing: each occurrence is started once whoever ticks.
    tokio::time::sleep(Duration::from_millis(3_300)).await;
    let (first, second) = tokio::join!(tick(&stack), tick(&stack));
    let started = first["started"].as_u64().unwrap() + second["started"].as_u64().unwrap();
    assert!(started >= 3, "three occurrences were due: {first} {second}");
    let seen = occurrences(&mut stack, "aws-ticking").await;
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(seen, unique, "an occurrence started twice");
    assert!(seen.len() >= 3, "{seen:?}");
    let again = tick(&stack).await;
    let after = occurrences(&mut stack, "aws-ticking").await;
    assert_eq!(after.len(), seen.len() + again["started"].as_u64().unwrap() as usize);

    let (status, paused) = stack.request("POST", "/v1/schedules/aws-ticking/tick:pause", None, true).await;
    assert_eq!((status, paused["state"].clone()), (200, json!("paused")), "{paused}");
    let before = occurrences(&mut stack, "aws-ticking").await.len();
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let skipped = tick(&stack).await;
    assert_eq!(skipped["started"], json!(0), "{skipped}");
    assert_eq!(occurrences(&mut stack, "aws-ticking").await.len(), before);
    let (status, resumed) = stack.request("POST", "/v1/schedules/aws-ticking/tick:resume", None, true).await;
    assert_eq!((status, resumed["state"].clone()), (200, json!("active")));
    let (_, listed) = stack.request("GET", "/v1/schedules", None, true).await;
    assert_eq!(listed["schedules"][0]["scheduleId"], "aws-ticking/tick", "{listed}");
    let mut driver = AwsDriver(&mut stack);
    driver.tick().await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_delivery_message_handled_twice_posts_once() {
    require_emulators();
    let mut stack = stack().await;
    let receiver = WebhookReceiver::start().await;
    let url = receiver.path("/hooks/twice", vec![trellis_testkit::http_server::Reply::status(200)]);
    let webhook_id =
        webhooks::register(&mut AwsDriver(&mut stack), &url, &["*"]).await["webhookId"].as_str().unwrap().to_owned();
    let run_id = stack.create(json!({"workflowId": "conformance-multi-node"})).await;
    // Every message — steps and deliveries — is handed to the dispatcher a second time.
    stack.pump_until_terminal(&run_id, Duration::from_secs(10), true).await;
    let (_, events) = stack.request("GET", &format!("/v1/runs/{run_id}/events/poll?lastSequence=-1"), None, true).await;
    let count = events["events"].as_array().unwrap().len();
    let start = std::time::Instant::now();
    while receiver.deliveries("/hooks/twice").len() < count {
        assert!(start.elapsed() < Duration::from_secs(10), "deliveries missing");
        stack.pump_once(true).await;
    }
    for _ in 0..20 {
        stack.pump_once(true).await;
    }
    let mut ids: Vec<String> = receiver
        .deliveries("/hooks/twice")
        .iter()
        .map(|delivery| delivery.header("x-openwop-delivery-id").unwrap().to_owned())
        .collect();
    let received = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!((received, ids.len()), (count, count), "a redelivered delivery posted again");
    let records = webhooks::delivery_records(&mut AwsDriver(&mut stack), &webhook_id, Some("delivered")).await;
    assert_eq!(records.len(), count);
}
