//! AWS service nodes and queue triggers on the emulated stack (`docs/aws-nodes.md`,
//! `docs/aws-events.md`): a workflow invokes a Lambda function (the testkit's fake Invoke API,
//! `AWS_ENDPOINT_URL_LAMBDA`), sends an SQS message and puts an EventBridge event (moto);
//! `FunctionError` and throttling are classified as specified; SQS and EventBridge deliveries
//! — recorded Lambda event JSON handed to the dispatcher's entry in-process, as no emulator
//! runs those mappings — start one run per message or event id. Without the emulators the
//! suite is ignored.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{require_emulators, Stack, SPEC_DEADLINE};
use trellis_testkit::fake_lambda::FakeLambda;

async fn register(stack: &Stack, definition: Value) {
    let (status, body) = stack.api("POST", "/v1/workflows", Some(definition)).await;
    assert_eq!(status, 201, "{body}");
}

async fn queue(stack: &Stack, name: &str) -> (String, String) {
    let url = stack.sqs.create_queue().queue_name(name).send().await.expect("queue").queue_url().unwrap().to_owned();
    let arn = trellis_aws::provision::queue_arn(&stack.sqs, &url).await.expect("queue arn");
    (url, arn)
}

async fn one_message(stack: &Stack, url: &str) -> Value {
    for _ in 0..30 {
        let messages = trellis_aws::local::pump::receive(&stack.sqs, url, 1, 0).await.expect("receive");
        if let Some(message) = messages.first() {
            return serde_json::from_str(message.body().unwrap()).unwrap_or_else(|_| json!(message.body()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no message on {url}")
}

/// The fake Invoke API, one per test binary on a runtime of its own (tests run side by side;
/// the SDK reads `AWS_ENDPOINT_URL_LAMBDA` when a stack's configuration loads). Each test
/// scripts functions of its own names.
fn fake_lambda() -> &'static FakeLambda {
    static FAKE: std::sync::OnceLock<&'static FakeLambda> = std::sync::OnceLock::new();
    FAKE.get_or_init(|| {
        let (started, fake) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let lambda: &'static FakeLambda = Box::leak(Box::new(FakeLambda::start().await));
                started.send(lambda).expect("started");
                std::future::pending::<()>().await;
            });
        });
        let fake = fake.recv().expect("the fake started");
        std::env::set_var("AWS_ENDPOINT_URL_LAMBDA", fake.endpoint_url());
        fake
    })
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_workflow_invokes_a_function_sends_a_message_and_puts_an_event() {
    require_emulators();
    trellis_testkit::external::require_emulators(&[trellis_testkit::external::Service::EventBridge]);
    let lambda = fake_lambda();
    let mut stack = support::stack().await;
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let (out_url, _) = queue(&stack, &format!("out-{suffix}")).await;
    let (seen_url, seen_arn) = queue(&stack, &format!("seen-{suffix}")).await;
    let config = trellis_aws::app::sdk_config().await;
    let events = aws_sdk_eventbridge::Client::new(&config);
    let bus = format!("orders-{suffix}");
    events.create_event_bus().name(&bus).send().await.expect("bus");
    events
        .put_rule()
        .name("scored")
        .event_bus_name(&bus)
        .event_pattern(r#"{"source":["com.example.orders"]}"#)
        .send()
        .await
        .expect("rule");
    let target = aws_sdk_eventbridge::types::Target::builder().id("seen").arn(seen_arn).build().unwrap();
    events.put_targets().rule("scored").event_bus_name(&bus).targets(target).send().await.expect("target");
    lambda.answer("score", &json!({"score": 7, "band": "high"}));

    register(&stack, json!({"id": "aws-io", "name": "aws-io", "nodes": [
        {"id": "score", "typeId": "vendor.trellis.aws.lambdaInvoke",
         "config": {"functionName": "score", "payload": {"order": "{{variables.order}}"}}},
        {"id": "enqueue", "typeId": "vendor.trellis.aws.sqsSend",
         "config": {"queueUrl": out_url, "body": {"order": "{{variables.order}}", "score": "{{variables.score.result.score}}"},
                    "attributes": {"kind": "scored"}}},
        {"id": "announce", "typeId": "vendor.trellis.aws.eventsPut",
         "config": {"eventBusName": bus, "source": "com.example.orders", "detailType": "OrderScored",
                    "detail": {"order": "{{variables.order}}", "band": "{{variables.score.result.band}}"}}}
    ], "edges": [
        {"id": "e1", "sourceNodeId": "score", "targetNodeId": "enqueue"},
        {"id": "e2", "sourceNodeId": "enqueue", "targetNodeId": "announce"}
    ], "variables": [{"name": "order", "type": "string", "defaultValue": "o-1"}]}))
    .await;
    let run_id = stack.create(json!({"workflowId": "aws-io"})).await;
    let snapshot = stack.pump_until_terminal(&run_id, SPEC_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");

    let invocations = lambda.invocations("score");
    assert_eq!(invocations.len(), 1);
    assert!(invocations[0].signed(), "SigV4-signed with the function's credentials");
    assert_eq!(invocations[0].payload, json!({"order": "o-1"}), "the payload mapped from variables");
    let custom = &invocations[0].client_context["custom"];
    assert_eq!(custom["runId"], run_id.as_str());
    assert_eq!(custom["idempotencyKey"].as_str().map(str::len), Some(64));
    assert_eq!(snapshot["variables"]["score"]["result"]["score"], 7, "the result lands in the variables");

    let sent = one_message(&stack, &out_url).await;
    assert_eq!(sent, json!({"order": "o-1", "score": 7}));
    assert!(snapshot["variables"]["enqueue"]["messageId"].is_string(), "{}", snapshot["variables"]);
    let event = one_message(&stack, &seen_url).await;
    assert_eq!(event["detail-type"], "OrderScored");
    assert_eq!(event["detail"], json!({"order": "o-1", "band": "high"}));
    assert!(snapshot["variables"]["announce"]["eventId"].is_string());
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_function_error_is_never_retried_and_throttling_is() {
    require_emulators();
    trellis_testkit::external::require_emulators(&[trellis_testkit::external::Service::EventBridge]);
    let lambda = fake_lambda();
    let mut stack = support::stack().await;
    lambda.function_error("broken", "ValueError", "no such order");
    lambda.throttle_then("busy", 1, &json!({"ok": true}));
    let retry = json!({"retry": {"maxAttempts": 3, "initialIntervalMs": 10, "backoffCoefficient": 1.0}});
    for (id, function) in [("aws-broken", "broken"), ("aws-busy", "busy")] {
        register(&stack, json!({"id": id, "name": id, "nodes": [
            {"id": "call", "typeId": "vendor.trellis.aws.lambdaInvoke", "settings": retry, "config": {"functionName": function}}
        ], "edges": []}))
        .await;
    }
    let broken = stack.create(json!({"workflowId": "aws-broken"})).await;
    let snapshot = stack.pump_until_terminal(&broken, SPEC_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "failed");
    assert_eq!(snapshot["error"]["code"], "aws_function_error", "{}", snapshot["error"]);
    assert_eq!(lambda.invocations("broken").len(), 1, "not retried despite settings.retry");
    let failed = stack.events(&broken).await.into_iter().find(|event| event["type"] == "node.failed").unwrap();
    assert_eq!(failed["payload"]["error"]["details"]["errorType"], "ValueError", "{failed}");

    let busy = stack.create(json!({"workflowId": "aws-busy"})).await;
    assert_eq!(stack.pump_until_terminal(&busy, SPEC_DEADLINE, false).await["status"], "completed");
    let retried = stack.events(&busy).await.into_iter().find(|event| event["type"] == "node.retried").expect("a retry");
    assert_eq!(retried["payload"]["lastError"]["code"], "aws_throttled", "{retried}");
    let calls = lambda.invocations("busy");
    assert_eq!(calls.len(), 2, "the throttled attempt, then the next");
    assert_eq!(
        calls[0].client_context["custom"]["idempotencyKey"],
        calls[1].client_context["custom"]["idempotencyKey"]
    );
    assert_eq!(
        (calls[0].client_context["custom"]["attempt"].as_str(), calls[1].client_context["custom"]["attempt"].as_str()),
        (Some("0"), Some("1"))
    );
}

/// An SQS event as Lambda's event-source mapping hands it over (recorded shape), for a
/// message `id` of the queue `arn`.
fn sqs_event(arn: &str, id: &str, body: &Value) -> Value {
    let mut event: Value = serde_json::from_str(include_str!("data/sqs-trigger-event.json")).unwrap();
    let record = &mut event["Records"][0];
    record["messageId"] = json!(id);
    record["eventSourceARN"] = json!(arn);
    record["body"] = json!(body.to_string());
    event
}

/// An EventBridge event as a rule delivers it to a function (recorded shape).
fn bus_event(id: &str, detail: &Value) -> Value {
    let mut event: Value = serde_json::from_str(include_str!("data/eventbridge-trigger-event.json")).unwrap();
    event["id"] = json!(id);
    event["detail"] = detail.clone();
    event
}

async fn runs_of(stack: &Stack, subscription: &str) -> Vec<String> {
    let (status, body) = stack.api("GET", &format!("/v1/trigger-subscriptions/{subscription}/deliveries"), None).await;
    assert_eq!(status, 200, "{body}");
    let mut runs: Vec<String> =
        body["deliveries"].as_array().unwrap().iter().filter_map(|d| d["runId"].as_str().map(str::to_owned)).collect();
    runs.sort();
    runs.dedup();
    runs
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn sqs_and_eventbridge_deliveries_start_one_run_per_id() {
    require_emulators();
    trellis_testkit::external::require_emulators(&[trellis_testkit::external::Service::EventBridge]);
    let mut stack = support::stack().await;
    register(
        &stack,
        json!({"id": "on-order", "name": "on-order", "nodes": [{"id": "a", "typeId": "core.noop"}], "edges": [],
        "variables": [{"name": "orderId", "type": "string", "required": true}]}),
    )
    .await;
    let arn = "arn:aws:sqs:us-east-1:123456789012:orders-in";
    let (status, sqs_sub) = stack
        .api(
            "POST",
            "/v1/trigger-subscriptions",
            Some(json!({"source": "queue", "workflowId": "on-order",
        "queue": {"sqsQueueArn": arn}, "inputMapping": {"orderId": "/queue/body/orderId"}})),
        )
        .await;
    assert_eq!(status, 201, "{sqs_sub}");
    assert!(sqs_sub.get("secret").is_none_or(Value::is_null), "no shared secret for IAM-authenticated sources");
    let (status, taken) = stack
        .api(
            "POST",
            "/v1/trigger-subscriptions",
            Some(json!({"source": "queue", "workflowId": "on-order",
        "queue": {"sqsQueueArn": arn}})),
        )
        .await;
    assert_eq!((status, taken["error"].as_str()), (409, Some("binding_taken")), "{taken}");
    let (status, bus_sub) = stack.api("POST", "/v1/trigger-subscriptions", Some(json!({"source": "queue", "workflowId": "on-order",
        "queue": {"eventSource": "com.example.shop", "detailType": "OrderPlaced"}, "inputMapping": {"orderId": "/queue/detail/orderId"}}))).await;
    assert_eq!(status, 201, "{bus_sub}");
    let sqs_id = sqs_sub["subscriptionId"].as_str().unwrap().to_owned();
    let bus_id = bus_sub["subscriptionId"].as_str().unwrap().to_owned();

    // SQS: one message delivered three times (a redelivery, then a duplicate in one batch).
    let event = sqs_event(arn, "m-1", &json!({"orderId": "o-7"}));
    let answer = trellis_aws::dispatch::handle_trigger(&stack.app, event.clone()).await.expect("batch");
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    trellis_aws::dispatch::handle_trigger(&stack.app, event).await.expect("batch");
    assert_eq!(runs_of(&stack, &sqs_id).await.len(), 1, "a redelivery starts nothing new");
    // A message the workflow refuses (no orderId) is dead-lettered under the subscription, not retried.
    let refused = sqs_event(arn, "m-2", &json!({"other": 1}));
    let answer = trellis_aws::dispatch::handle_trigger(&stack.app, refused).await.expect("batch");
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    // A queue nothing is bound to: left for redelivery (then the trigger DLQ).
    let stray = sqs_event("arn:aws:sqs:us-east-1:123456789012:nobody", "m-3", &json!({}));
    let answer = trellis_aws::dispatch::handle_trigger(&stack.app, stray).await.expect("batch");
    assert_eq!(answer["batchItemFailures"][0]["itemIdentifier"], "m-3", "{answer}");

    // EventBridge: the same event twice starts one run; an unbound source is retried by Lambda.
    let placed = bus_event("ev-1", &json!({"orderId": "o-8"}));
    let first = trellis_aws::dispatch::handle_trigger(&stack.app, placed.clone()).await.expect("taken");
    let again = trellis_aws::dispatch::handle_trigger(&stack.app, placed).await.expect("taken");
    assert_eq!(first["runId"], again["runId"]);
    assert_eq!((first["duplicate"].as_bool(), again["duplicate"].as_bool()), (Some(false), Some(true)));
    let mut other = bus_event("ev-2", &json!({}));
    other["source"] = json!("com.example.unknown");
    assert!(trellis_aws::dispatch::handle_trigger(&stack.app, other).await.is_err(), "Lambda retries it, then its DLQ");

    let sqs_runs = runs_of(&stack, &sqs_id).await;
    let bus_runs = runs_of(&stack, &bus_id).await;
    assert_eq!((sqs_runs.len(), bus_runs.len()), (1, 1));
    for (run_id, order) in [(&sqs_runs[0], "o-7"), (&bus_runs[0], "o-8")] {
        assert_eq!(stack.pump_until_terminal(run_id, SPEC_DEADLINE, false).await["status"], "completed");
        let started = stack.events(run_id).await.into_iter().find(|event| event["type"] == "run.started").unwrap();
        assert_eq!(started["payload"]["inputs"]["orderId"], order, "{started}");
        assert_eq!(started["payload"]["trigger"]["source"], "queue", "{started}");
    }
    let (_, deliveries) = stack.api("GET", &format!("/v1/trigger-subscriptions/{sqs_id}/deliveries"), None).await;
    let outcomes: Vec<&str> =
        deliveries["deliveries"].as_array().unwrap().iter().filter_map(|d| d["outcome"].as_str()).collect();
    assert!(outcomes.contains(&"dead-lettered"), "{deliveries}");

    // Paused: a message is left for redelivery.
    let (status, _) = stack.api("POST", &format!("/v1/trigger-subscriptions/{sqs_id}:pause"), Some(json!({}))).await;
    assert_eq!(status, 200);
    let answer = trellis_aws::dispatch::handle_trigger(&stack.app, sqs_event(arn, "m-4", &json!({"orderId": "o-9"})))
        .await
        .unwrap();
    assert_eq!(answer["batchItemFailures"][0]["itemIdentifier"], "m-4", "{answer}");
}

/// The local stack's mapping of a trigger queue: a message sent to a real (moto) queue reaches
/// the dispatcher's trigger handler with the queue's ARN as its source, and starts one run.
#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_message_on_a_mapped_trigger_queue_starts_a_run() {
    require_emulators();
    let stack = support::stack().await;
    let prefix = format!("local-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let (url, arn) = trellis_aws::provision::create_trigger_queue(&stack.sqs, &prefix, 3, 30).await.expect("queue");
    register(
        &stack,
        json!({"id": "on-message", "name": "on-message", "nodes": [{"id": "a", "typeId": "core.noop"}],
        "edges": [], "variables": [{"name": "n", "type": "number", "required": true}]}),
    )
    .await;
    let body = json!({"source": "queue", "workflowId": "on-message", "queue": {"sqsQueueArn": arn}, "inputMapping": {"n": "/queue/body/n"}});
    let (status, created) = stack.api("POST", "/v1/trigger-subscriptions", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    let subscription = created["subscriptionId"].as_str().unwrap().to_owned();
    stack.sqs.send_message().queue_url(&url).message_body(r#"{"n": 42}"#).send().await.expect("send");

    let config = trellis_aws::app::sdk_config().await;
    let app = std::sync::Arc::new(trellis_aws::AwsApp::new(stack.app.settings.clone(), &config));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mapping =
        tokio::spawn(trellis_aws::local::pump::run_trigger_mapping(app, stack.sqs.clone(), url.clone(), arn, stopped));
    let deadline = std::time::Instant::now() + SPEC_DEADLINE;
    let runs = loop {
        let runs = runs_of(&stack, &subscription).await;
        if !runs.is_empty() || std::time::Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    stop.send(true).unwrap();
    mapping.await.unwrap();
    assert_eq!(runs.len(), 1, "one run for the message");
    let started = stack.events(&runs[0]).await.into_iter().find(|event| event["type"] == "run.started").unwrap();
    assert_eq!(started["payload"]["inputs"]["n"], 42, "{started}");
    let left = trellis_aws::local::pump::receive(&stack.sqs, &url, 10, 0).await.expect("receive");
    assert!(left.is_empty(), "the message was deleted after it started the run");
}
