//! `trellis-bench-aws --webhooks`: what webhook subscriptions cost a sequential step on the
//! serverless path. The same `--nodes`-node `core.noop` chain, `--runs` runs each, three
//! times: with no subscription of the runs' tenant, with one to `run.completed`, and with one
//! to every event (`*`); deliveries go to a loopback receiver in this process. Per scenario:
//! WRU, RRU and SQS requests per step (deliveries' messages, records and reads included) and
//! per delivery above the baseline. The dispatcher's app reads the subscription set at most
//! once per `TRELLIS_WEBHOOK_SET_TTL_MS` (10 s): after registering, the bench waits that long so
//! every delivery is enqueued, as on AWS.

use std::time::Duration;

use serde_json::json;
use trellis_core::run::Principal;
use trellis_testkit::http_server::{Reply, TestServer};

use crate::Apps;

/// Runs the three scenarios (see the module docs).
pub(crate) async fn figures(apps: &Apps<'_>, sqs: &aws_sdk_sqs::Client, queue_url: &str, runs: usize, nodes: usize) {
    let receiver = TestServer::start().await;
    let chain = crate::chain("bench-webhook-chain", nodes);
    apps.app.services.register_workflow("bench", chain).await.expect("workflow");
    let principal =
        Principal { tenant: "bench".into(), subject: "bench".into(), key_class: "api-key".into(), test_scope: false };
    let respond = |_: &trellis_core::RunState| (201, json!({}));
    println!(
        "trellis-bench-aws --webhooks: {runs} runs of a {nodes}-node core.noop chain per scenario, emulated stack"
    );
    println!(
        "{:<22} {:>9} {:>9} {:>12} {:>12} {:>16} {:>16} {:>16}",
        "subscriptions",
        "WRU/step",
        "RRU/step",
        "SQS req/step",
        "deliveries",
        "WRU/delivery",
        "RRU/delivery",
        "SQS/delivery"
    );
    let mut baseline: Option<(f64, f64, f64)> = None;
    for (name, events, per_run) in [
        ("none", None, 0),
        ("1: run.completed", Some("run.completed"), 1),
        ("1: every event (*)", Some("*"), 2 + 2 * nodes),
    ] {
        let path = format!("/hook/{per_run}");
        receiver.route(&path, vec![Reply::status(200)]);
        let mut webhook_id = None;
        if let Some(events) = events {
            let body = json!({"url": receiver.url(&path), "events": [events]});
            let id = format!("wh-bench-{per_run}");
            let registered = apps.api.services.register_webhook(&principal, &body, id, "whsec_bench".into()).await;
            webhook_id = Some(registered.expect("registration").webhook_id);
            // The dispatcher's cached set is at most this old: wait it out, as a deployment would.
            tokio::time::sleep(Duration::from_millis(10_500)).await;
        }
        let before = apps.totals();
        for _ in 0..runs {
            apps.api
                .services
                .create_run(&principal, &json!({"workflowId": "bench-webhook-chain"}), None, &respond)
                .await
                .expect("create");
        }
        let deliveries = runs * per_run;
        let expected = (runs * nodes + deliveries) as u64;
        let (_, receives, deletes) = crate::pump(apps.app, sqs, queue_url, expected).await;
        let after = apps.totals();
        let steps = (runs * nodes) as f64;
        let wru = (after.0.write_units - before.0.write_units) as f64;
        let rru = (after.0.read_units - before.0.read_units) as f64;
        let sqs_requests = ((after.1 - before.1) + receives + deletes) as f64;
        if events.is_none() {
            baseline = Some((wru, rru, sqs_requests));
        }
        let per_delivery = |total: f64, base: f64| {
            if deliveries == 0 {
                "-".to_owned()
            } else {
                format!("{:.2}", (total - base) / deliveries as f64)
            }
        };
        let (base_w, base_r, base_s) = baseline.unwrap_or((wru, rru, sqs_requests));
        println!(
            "{:<22} {:>9.2} {:>9.2} {:>12.2} {:>12} {:>16} {:>16} {:>16}",
            name,
            wru / steps,
            rru / steps,
            sqs_requests / steps,
            format!("{}/{deliveries}", receiver.requests_to(&path).len()),
            per_delivery(wru, base_w),
            per_delivery(rru, base_r),
            per_delivery(sqs_requests, base_s),
        );
        if let Some(id) = webhook_id {
            apps.api.services.delete_webhook("bench", None, &id).await.expect("delete");
            tokio::time::sleep(Duration::from_millis(10_500)).await;
        }
    }
    println!("per step: every request of the scenario (deliveries included) / sequential steps; per delivery: above the no-subscription scenario");
}
