//! Webhooks and inbound triggers end to end on an embedded host, through the public HTTP API
//! and a loopback receiver (`trellis_testkit::webhooks`, the scenarios the emulated AWS stack
//! plays too): signed deliveries checked by an independent implementation (Python's `hmac`,
//! `tests/webhooks/verify_signatures.py`), retries with one delivery id, dead letters,
//! a receiver outage, registration refusals (the SSRF gates; the scripted-resolver cases are
//! in `shared/activities/tests/webhook.rs`), tenant isolation, signed inbound deliveries
//! starting one run per delivery id, the `trellis webhooks|triggers|schedules` commands, a
//! crash between a commit and its send (the real binary,
//! aborted at `after-commit`), discovery, and the AWS-only integration refused. Nothing leaves 127.0.0.1.

mod common;

use std::time::Duration;

use common::{serve_args, start, start_with, write_keys_file, Client, KEY};
use serde_json::{json, Value};
use trellis::args::ServeArgs;
use trellis::host::{EmbeddedHost, HostOptions};
use trellis_testkit::http_server::{Reply, TestServer};
use trellis_testkit::webhooks::{self, WebhookReceiver};
use trellis_testkit::HttpDriver;

/// Attempts per delivery in these tests (fast backoff: 100 ms doubling).
const ATTEMPTS: u32 = 3;

fn args() -> ServeArgs {
    let mut args = serve_args(None);
    args.integration.webhook_max_attempts = ATTEMPTS;
    args.integration.webhook_backoff_ms = 100;
    args.integration.webhook_timeout_ms = 2_000;
    args
}

async fn host(args: ServeArgs) -> (EmbeddedHost, HttpDriver) {
    let host = start(args).await;
    let driver = HttpDriver::new(format!("http://{}", host.addr), KEY);
    (host, driver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_signed_and_verify_in_an_independent_implementation() {
    let (_host, mut driver) = host(args()).await;
    let receiver = WebhookReceiver::start().await;
    let (secret, deliveries) = webhooks::outbound_delivery(&mut driver, &receiver).await;
    assert_eq!(webhooks::verify_in_python(&secret, &deliveries).trim(), "verified 2");
    // The check is a check: a changed body does not verify.
    let mut tampered = deliveries[0].clone();
    tampered.body.push(b' ');
    let refused = std::panic::catch_unwind(|| webhooks::verify_in_python(&secret, &[tampered]));
    assert!(refused.is_err(), "a tampered body verified");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_deliveries_retry_with_one_delivery_id_then_dead_letter() {
    let (_host, mut driver) = host(args()).await;
    let receiver = WebhookReceiver::start().await;
    webhooks::outbound_retries_and_dead_letters(&mut driver, &receiver, ATTEMPTS as usize).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_back_from_an_outage_gets_the_delivery() {
    let mut args = args();
    args.integration.webhook_max_attempts = 8;
    args.integration.webhook_backoff_ms = 200;
    let (_host, mut driver) = host(args).await;
    // A port nobody listens on: connections are refused until the receiver comes back on it.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/hooks/outage");
    let webhook_id =
        webhooks::register(&mut driver, &url, &["run.completed"]).await["webhookId"].as_str().unwrap().to_owned();
    let (_, created) =
        driver_call(&mut driver, "POST", "/v1/runs", Some(json!({"workflowId": "conformance-noop"}))).await;
    let run_id = created["runId"].as_str().unwrap().to_owned();
    let start = std::time::Instant::now();
    loop {
        let retrying = webhooks::delivery_records(&mut driver, &webhook_id, Some("retrying")).await;
        if let Some(record) = retrying.first() {
            assert_eq!(record["runId"], json!(run_id));
            assert!(record["lastErrorCode"].as_str().unwrap().starts_with("http_"), "{record}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "no failed attempt was recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let server = TestServer::start_on(port).await;
    server.route("/hooks/outage", vec![Reply::status(200)]);
    let start = std::time::Instant::now();
    let delivered = loop {
        let delivered = webhooks::delivery_records(&mut driver, &webhook_id, Some("delivered")).await;
        if let Some(record) = delivered.first() {
            break record.clone();
        }
        assert!(start.elapsed() < Duration::from_secs(20), "the delivery never arrived after the outage");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(delivered["attempts"].as_u64().unwrap() >= 2, "{delivered}");
    let seen = server.requests_to("/hooks/outage");
    assert_eq!(seen.len(), 1, "delivered once the receiver is back");
    assert_eq!(seen[0].json()["runId"], json!(run_id));
}

async fn driver_call(driver: &mut HttpDriver, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    use trellis_testkit::Driver;
    driver.call(method, path, body, true).await
}

#[tokio::test]
async fn registration_refuses_private_and_malformed_destinations_and_persists_nothing() {
    // No allow-list: loopback is private like any other private address.
    let mut strict = serve_args(None);
    strict.http_allow_private_nets = String::new();
    let host = start(strict).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let refused = |url: &str| json!({"url": url, "events": ["run.completed"]});
    // Names other than localhost (metadata names, public names over http, rebinding, names
    // that do not resolve) are checked through the scripted resolver in
    // shared/activities/tests/webhook.rs: nothing here asks a real DNS server.
    for url in [
        "http://127.0.0.1:65535/",
        "https://127.0.0.1/",
        "https://10.0.0.1/hook",
        "https://192.168.1.10/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hook",
        "https://[fd00::1]/hook",
        "https://localhost/hook",
        "http://127.0.0.2:8080/",
        "ftp://hooks.example/",
        "not a url",
    ] {
        let (status, body) = client.request("POST", "/v1/webhooks", Some(refused(url))).await;
        assert_eq!((status, body["error"].clone()), (400, json!("webhook_url_rejected")), "{url}: {body}");
        assert!(body["details"]["reason"].is_string(), "{body}");
    }
    let (status, body) = client.request("POST", "/v1/webhooks", Some(json!({"eventTypes": ["run.completed"]}))).await;
    assert_eq!(
        (status, body["error"].clone(), body["details"]["field"].clone()),
        (400, json!("validation_error"), json!("url"))
    );
    let (status, body) =
        client.request("POST", "/v1/webhooks", Some(json!({"url": "https://hooks.example/", "events": []}))).await;
    assert_eq!((status, body["details"]["field"].clone()), (400, json!("events")));
    let (status, body) = client
        .request("POST", "/v1/webhooks", Some(json!({"url": "https://hooks.example/", "events": ["run.finished"]})))
        .await;
    assert_eq!((status, body["details"]["rule"].clone()), (400, json!("enum")), "{body}");
    let (_, listed) = client.request("GET", "/v1/webhooks", None).await;
    assert_eq!(listed["webhooks"], json!([]), "a refusal persists nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_tenant_isolated() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = args();
    args.keys_file = Some(write_keys_file(dir.path(), &[("key-a", "a", &["*"]), ("key-b", "b", &["*"])]));
    let host = start_with(args, HostOptions::default()).await;
    let base = format!("http://{}", host.addr);
    let (a, b) = (Client::new(&base, "key-a"), Client::new(&base, "key-b"));
    let receiver = WebhookReceiver::start().await;
    let url_a = receiver.path("/a", vec![Reply::status(200)]);
    let url_b = receiver.path("/b", vec![Reply::status(200)]);
    let (status, hook_a) = a.request("POST", "/v1/webhooks", Some(json!({"url": url_a, "events": ["*"]}))).await;
    assert_eq!(status, 201, "{hook_a}");
    let (status, _) = b.request("POST", "/v1/webhooks", Some(json!({"url": url_b, "events": ["*"]}))).await;
    assert_eq!(status, 201);
    let id_a = hook_a["webhookId"].as_str().unwrap();

    let run = a.create(json!({"workflowId": "conformance-noop"})).await;
    a.wait_terminal(&run, Duration::from_secs(10)).await;
    let start = std::time::Instant::now();
    while receiver.deliveries("/a").len() < 4 {
        assert!(start.elapsed() < Duration::from_secs(10), "tenant a's deliveries did not arrive");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(receiver.deliveries("/b").is_empty(), "tenant b saw tenant a's run");
    assert!(receiver.deliveries("/a").iter().all(|delivery| delivery.json()["runId"] == json!(run)));

    let (status, body) = b.request("GET", &format!("/v1/webhooks/{id_a}"), None).await;
    assert_eq!((status, body["error"].clone()), (404, json!("subscription_not_found")));
    let (status, _) = b.request("DELETE", &format!("/v1/webhooks/{id_a}"), None).await;
    assert_eq!(status, 404);
    let (status, body) = b.request("GET", &format!("/v1/webhooks/{id_a}/deliveries"), None).await;
    assert_eq!(status, 404, "{body}");
    let (_, listed) = b.request("GET", "/v1/webhooks", None).await;
    assert_eq!(listed["webhooks"].as_array().unwrap().len(), 1);
    let (status, body) =
        a.request("POST", "/v1/webhooks", Some(json!({"url": url_a, "events": ["*"], "tenantId": "b"}))).await;
    assert_eq!((status, body["error"].clone()), (403, json!("tenant_membership_required")));
    let (status, body) = a.request("DELETE", &format!("/v1/webhooks/{id_a}?tenantId=b"), None).await;
    assert_eq!((status, body["error"].clone()), (403, json!("tenant_membership_required")));
    let (status, body) = a.request("DELETE", "/v1/webhooks/wh-does-not-exist", None).await;
    assert_eq!((status, body["error"].clone()), (404, json!("subscription_not_found")));
    let (status, _) = a.request("DELETE", &format!("/v1/webhooks/{id_a}"), None).await;
    assert_eq!(status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_inbound_webhook_starts_one_run_per_delivery_id() {
    let (_host, mut driver) = host(args()).await;
    webhooks::inbound_trigger(&mut driver).await;
}

#[tokio::test]
async fn discovery_advertises_durable_signed_webhooks_and_the_trigger_bridge() {
    let host = start(args()).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let discovery = client.discovery().await;
    assert_eq!(discovery["webhooks"]["durable"], json!(true));
    assert_eq!(discovery["webhooks"]["signatureAlgorithms"], json!(["v1"]));
    assert_eq!(discovery["triggerBridge"]["sources"], json!(["webhook"]));
    assert_eq!(discovery["triggerBridge"]["ingestion"]["verification"], json!(["webhook-signature"]));
    assert_eq!(discovery["triggerBridge"]["ingestion"]["registrationEndpoint"], json!(true));
    assert!(discovery.get("deadLetter").is_none(), "the run-level dead-letter sink is not built");
    assert_eq!(discovery["scheduling"], json!({"supported": true, "cron": true, "delayed": true, "calendar": false}));
    assert!(discovery.get("runEventBus").is_none() && discovery.get("awsServiceNodes").is_none(), "AWS only");
}

/// What only the AWS backend does is refused here with `422 capability_required`, naming the
/// field, and registers nothing: the service nodes, queue triggers, a worker notified on a queue.
#[tokio::test]
async fn aws_only_integration_is_refused_with_capability_required() {
    let host = start(args()).await;
    let mut driver = HttpDriver::new(format!("http://{}", host.addr), KEY);
    let invoke = json!({"id": "aws-invoke", "name": "aws-invoke", "nodes": [
        {"id": "call", "typeId": "vendor.trellis.aws.lambdaInvoke", "config": {"functionName": "f"}}], "edges": []});
    let (status, body) = driver_call(&mut driver, "POST", "/v1/workflows", Some(invoke)).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("capability_required")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("core.http.request"), "{body}");
    let queue = "arn:aws:sqs:us-east-1:123456789012:workers";
    let notify = trellis_testkit::callback::external_job_workflow("aws-notify", json!({"notifyUrl": queue}), 60_000);
    let (status, body) = driver_call(&mut driver, "POST", "/v1/workflows", Some(notify)).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("capability_required")), "{body}");
    let chain = json!({"id": "plain", "name": "plain", "nodes": [{"id": "a", "typeId": "core.noop"}], "edges": []});
    assert_eq!(driver_call(&mut driver, "POST", "/v1/workflows", Some(chain)).await.0, 201);
    let trigger = json!({"source": "queue", "workflowId": "plain", "queue": {"sqsQueueArn": queue}});
    let (status, body) = driver_call(&mut driver, "POST", "/v1/trigger-subscriptions", Some(trigger)).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("capability_required")), "{body}");
    let run = json!({"workflowId": "plain", "callbackUrl": queue});
    let (status, body) = driver_call(&mut driver, "POST", "/v1/runs", Some(run)).await;
    assert_eq!((status, body["details"]["field"].as_str()), (422, Some("callbackUrl")), "{body}");
    // The CLI's queue options build the same registration: refused the same way.
    let args = ["triggers", "create", "plain", "--event-source", "com.example.shop", "--detail-type", "OrderPlaced"];
    let output = common::trellis_cli(&format!("http://{}", host.addr), KEY, &args).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("capability_required"), "{stderr}");
    let (_, listed) = driver_call(&mut driver, "GET", "/v1/trigger-subscriptions", None).await;
    assert_eq!(listed["subscriptions"].as_array().map(Vec::len), Some(0), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_commit_and_send_loses_no_delivery() {
    use std::path::Path;
    const CRASH_KEY: &str = "crash-key";
    let dir = tempfile::tempdir().unwrap();
    let trellis = Path::new(env!("CARGO_BIN_EXE_trellis"));
    let receiver = WebhookReceiver::start().await;
    let url = receiver.path("/hooks/all", vec![Reply::status(200)]);
    // The host aborts right after the first step's commit, before anything is sent.
    let mut crashing = trellis_testkit::host::spawn(trellis, dir.path(), CRASH_KEY, Some("after-commit")).await;
    let client = Client::new(&crashing.base, CRASH_KEY);
    let (status, body) = client.request("POST", "/v1/webhooks", Some(json!({"url": url, "events": ["*"]}))).await;
    assert_eq!(status, 201, "{body}");
    let (status, created) =
        client.request("POST", "/v1/runs", Some(json!({"workflowId": "conformance-multi-node"}))).await;
    assert_eq!(status, 201, "{created}");
    let run_id = created["runId"].as_str().unwrap().to_owned();
    tokio::time::timeout(Duration::from_secs(10), crashing.child.wait())
        .await
        .expect("the crash point was reached")
        .unwrap();

    let recovered = trellis_testkit::host::spawn(trellis, dir.path(), CRASH_KEY, None).await;
    let client = Client::new(&recovered.base, CRASH_KEY);
    let snapshot = client.wait_terminal(&run_id, Duration::from_secs(15)).await;
    assert_eq!(snapshot["status"], "completed");
    let events = client.events(&run_id).await;
    let start = std::time::Instant::now();
    loop {
        let mut sequences: Vec<u64> = receiver
            .deliveries("/hooks/all")
            .iter()
            .filter_map(|delivery| delivery.json()["sequence"].as_u64())
            .collect();
        sequences.sort_unstable();
        sequences.dedup();
        if sequences.len() == events.len() {
            assert_eq!(sequences, (0..events.len() as u64).collect::<Vec<_>>());
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "deliveries lost: {sequences:?} of {} events", events.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // At least once: a delivery may come twice, always with its one delivery id.
    for delivery in receiver.deliveries("/hooks/all") {
        let body = delivery.json();
        assert_eq!(delivery.header("x-openwop-delivery-id"), body["deliveryId"].as_str());
        assert_eq!(body["runId"], json!(run_id));
    }
}

/// Runs the `trellis` client against `base` with `KEY`; its stdout (exit 0 expected).
async fn cli(base: &str, args: &[&str]) -> String {
    let output = common::trellis_cli(base, KEY, args).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "trellis {args:?}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_webhooks_triggers_and_schedules() {
    let (host, mut driver) = host(args()).await;
    let base = format!("http://{}", host.addr);
    let receiver = WebhookReceiver::start().await;
    let url = receiver.path("/hooks/cli", vec![Reply::status(200)]);

    let created: Value = serde_json::from_str(
        &cli(&base, &["-o", "json", "webhooks", "create", &url, "--event", "run.completed"]).await,
    )
    .unwrap();
    let webhook_id = created["webhookId"].as_str().unwrap().to_owned();
    assert!(created["secret"].as_str().unwrap().starts_with("whsec_"));
    let listed = cli(&base, &["webhooks", "list"]).await;
    assert!(listed.contains(&webhook_id) && listed.contains("run.completed") && !listed.contains("whsec_"), "{listed}");
    let (_, run) = driver_call(&mut driver, "POST", "/v1/runs", Some(json!({"workflowId": "conformance-noop"}))).await;
    let run_id = run["runId"].as_str().unwrap().to_owned();
    let start = std::time::Instant::now();
    while !cli(&base, &["webhooks", "deliveries", &webhook_id, "--state", "delivered"]).await.contains(&run_id) {
        assert!(start.elapsed() < Duration::from_secs(10), "the delivery never showed as delivered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cli(&base, &["webhooks", "delete", &webhook_id]).await.contains("deleted"));

    let (status, body) = driver_call(&mut driver, "POST", "/v1/workflows", Some(webhooks::echo_workflow())).await;
    assert_eq!(status, 201, "{body}");
    let trigger: Value = serde_json::from_str(
        &cli(&base, &["-o", "json", "triggers", "create", "trigger-echo", "--map", "orderId=/webhook/body/id"]).await,
    )
    .unwrap();
    let trigger_id = trigger["subscriptionId"].as_str().unwrap().to_owned();
    assert_eq!(trigger["inputMapping"]["orderId"], "/webhook/body/id");
    assert!(cli(&base, &["triggers", "pause", &trigger_id]).await.contains("paused"));
    assert!(cli(&base, &["triggers", "resume", &trigger_id]).await.contains("active"));
    let log = cli(&base, &["triggers", "events", &trigger_id]).await;
    assert!(log.contains("active -> paused") && log.contains("paused -> active"), "{log}");
    assert!(cli(&base, &["triggers", "list"]).await.contains(&trigger_id));
    assert!(cli(&base, &["triggers", "delete", &trigger_id]).await.contains("deleted"));

    let hourly = json!({"id": "hourly", "name": "hourly", "version": "1",
        "triggers": [{"id": "every-hour", "type": "schedule", "config": {"expression": "cron(0 * * * ? *)", "timezone": "Europe/Berlin"}}],
        "nodes": [{"id": "n", "typeId": "core.noop"}]});
    let (status, body) = driver_call(&mut driver, "POST", "/v1/workflows", Some(hourly)).await;
    assert_eq!(status, 201, "{body}");
    let schedules = cli(&base, &["schedules", "list"]).await;
    assert!(schedules.contains("hourly/every-hour") && schedules.contains("cron(0 * * * ? *)"), "{schedules}");
    assert!(cli(&base, &["schedules", "pause", "hourly/every-hour"]).await.contains("paused"));
    assert!(cli(&base, &["schedules", "resume", "hourly/every-hour"]).await.contains("active"));
}
