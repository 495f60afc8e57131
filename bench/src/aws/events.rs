//! `trellis-bench-aws --events`: what run events on an EventBridge bus and queue-triggered runs
//! cost on the serverless path. `--runs` runs of the `--nodes`-node `core.noop` chain twice:
//! without a bus, then publishing `started,completed` (two events per run) to a moto bus; and
//! `--runs` runs started by SQS trigger messages (the dispatcher's entry, as the event-source
//! mapping hands them over) against the same runs created through the API. Per published event
//! and per triggered run: WRU, RRU, SQS requests, `PutEvents` requests and dispatcher
//! messages (invocations at batch size 1) above the baseline.

use serde_json::json;
use trellis_aws::bus::EventBridgePublisher;
use trellis_aws::AwsApp;
use trellis_core::bus::{EventBus, LifecycleSet};
use trellis_core::run::Principal;

use crate::Apps;

fn principal() -> Principal {
    Principal { tenant: "bench".into(), subject: "bench".into(), key_class: "api-key".into(), test_scope: false }
}

/// A copy of `app` publishing `started,completed` through `publisher`.
fn publishing(app: &AwsApp, config: &aws_config::SdkConfig, publisher: &EventBridgePublisher) -> AwsApp {
    let app = AwsApp::new(app.settings.clone(), config);
    let bus = EventBus {
        publisher: std::sync::Arc::new(publisher.clone()),
        events: LifecycleSet::parse("started,completed").expect("set"),
        public_url: None,
        host_id: "bench".into(),
    };
    let services = std::sync::Arc::try_unwrap(app.services).ok().expect("fresh services").with_event_bus(bus);
    AwsApp { services: std::sync::Arc::new(services), ..app }
}

/// Runs both comparisons (see the module docs).
pub(crate) async fn figures(
    apps: &Apps<'_>,
    config: &aws_config::SdkConfig,
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    runs: usize,
    nodes: usize,
) {
    let chain = crate::chain("bench-events-chain", nodes);
    apps.app.services.register_workflow("bench", chain).await.expect("workflow");
    let events = aws_sdk_eventbridge::Client::new(config);
    let bus_name = format!("bench-runs-{}", uuid::Uuid::new_v4().simple());
    events.create_event_bus().name(&bus_name).send().await.expect("bus");
    let publisher = EventBridgePublisher::new(events, bus_name);
    let api = publishing(apps.api, config, &publisher);
    let app = publishing(apps.app, config, &publisher);
    let publishing_apps = Apps { app: &app, api: &api };
    let respond = |_: &trellis_core::RunState| (201, json!({}));
    println!("trellis-bench-aws --events: {runs} runs of a {nodes}-node core.noop chain per scenario, emulated stack");
    println!("{:<34} {:>9} {:>9} {:>9} {:>10} {:>10}", "scenario", "WRU", "RRU", "SQS req", "PutEvents", "messages");
    let mut rows = Vec::new();
    for (name, apps, per_run) in
        [("runs, no bus", apps, 0u64), ("runs, started+completed published", &publishing_apps, 2)]
    {
        let before = (apps.totals(), publisher.requests());
        for _ in 0..runs {
            apps.api
                .services
                .create_run(&principal(), &json!({"workflowId": "bench-events-chain"}), None, &respond)
                .await
                .expect("create");
        }
        // One publish message per commit holding lifecycle events: the create, the last step.
        let expected = (runs * nodes) as u64 + per_run * runs as u64;
        let (messages, receives, deletes) = crate::pump(apps.app, sqs, queue_url, expected).await;
        let after = (apps.totals(), publisher.requests());
        let row = (
            (after.0 .0.write_units - before.0 .0.write_units) as f64,
            (after.0 .0.read_units - before.0 .0.read_units) as f64,
            ((after.0 .1 - before.0 .1) + receives + deletes) as f64,
            (after.1 - before.1) as f64,
            messages as f64,
        );
        println!("{:<34} {:>9} {:>9} {:>9} {:>10} {:>10}", name, row.0, row.1, row.2, row.3, row.4);
        rows.push(row);
    }
    let published = (2 * runs) as f64;
    let per = |index: usize| match index {
        0 => (rows[1].0 - rows[0].0) / published,
        1 => (rows[1].1 - rows[0].1) / published,
        2 => (rows[1].2 - rows[0].2) / published,
        3 => (rows[1].3 - rows[0].3) / published,
        _ => (rows[1].4 - rows[0].4) / published,
    };
    println!(
        "per published event: {:.2} WRU, {:.2} RRU, {:.2} SQS requests, {:.2} PutEvents, {:.2} dispatcher messages",
        per(0),
        per(1),
        per(2),
        per(3),
        per(4)
    );

    // Triggered runs: the same runs started by SQS messages through the dispatcher's entry.
    let arn = "arn:aws:sqs:us-east-1:123456789012:bench-trigger";
    let body = json!({"source": "queue", "workflowId": "bench-events-chain", "queue": {"sqsQueueArn": arn}});
    apps.api.services.register_trigger(&principal(), &body, "ts-bench".into(), String::new()).await.expect("trigger");
    let before = apps.totals();
    for index in 0..runs {
        let mut record = aws_lambda_events::event::sqs::SqsMessage::default();
        record.message_id = Some(format!("bench-{index}"));
        record.event_source_arn = Some(arn.to_owned());
        record.body = Some(json!({"n": index}).to_string());
        let event = json!({"Records": [serde_json::to_value(&record).expect("record")]});
        trellis_aws::dispatch::handle_trigger(apps.app, event).await.expect("taken");
    }
    let (_, receives, deletes) = crate::pump(apps.app, sqs, queue_url, (runs * nodes) as u64).await;
    let after = apps.totals();
    let wru = (after.0.write_units - before.0.write_units) as f64;
    let rru = (after.0.read_units - before.0.read_units) as f64;
    let sqs_requests = ((after.1 - before.1) + receives + deletes) as f64;
    let (base_w, base_r, base_s) = (rows[0].0, rows[0].1, rows[0].2);
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "runs started by SQS messages",
        wru,
        rru,
        sqs_requests,
        0,
        runs * nodes
    );
    println!(
        "per triggered run above an API-created one: {:.2} WRU, {:.2} RRU, {:.2} SQS requests (+1 trigger message received and deleted by the mapping, +1 dispatcher invocation per batch)",
        (wru - base_w) / runs as f64,
        (rru - base_r) / runs as f64,
        (sqs_requests - base_s) / runs as f64
    );
}
