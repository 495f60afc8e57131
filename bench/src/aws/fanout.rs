//! `trellis-bench-aws --fan-out N`: a `vendor.trellis.forEach` over N one-node `core.noop`
//! children and a parallel `core.dispatch` of N such workers (`maxConcurrency` 50, the
//! shapes of `fanout_shapes.rs`), each run created through the API function and driven to its
//! end by the dispatcher handler in this process (the event-source mapping played at batch
//! size 1, one message at a time, the step queue and the FIFO completion queue in turn).
//! Reports the wall time, the peak concurrency (from the parent's log and from the children's
//! start/end times) and, per child, DynamoDB request units (from serialized item sizes), SQS
//! requests and dispatcher invocations, with a breakdown by message kind. Prints figures;
//! asserts nothing.

use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::SqsEvent;
use serde_json::json;
use trellis_core::ports::GLOBAL_NAMESPACE;
use trellis_core::run::Principal;

use crate::fanout_shapes::{self, Case};
use crate::{first_delivery, message_kind, Apps, Breakdown};

/// What the pump did.
#[derive(Default)]
struct Pumped {
    invocations: u64,
    receives: u64,
    deletes: u64,
    /// Messages the handler reported as failed (left on the queue, as the mapping would).
    failed: u64,
}

/// Plays both queues, one message at a time, until they are empty and `run_id` is terminal
/// (or `patience` ran out); every handling's usage goes into `breakdown`.
async fn drive(
    apps: &Apps<'_>,
    sqs: &aws_sdk_sqs::Client,
    queues: [&str; 2],
    run_id: &str,
    breakdown: &mut Breakdown,
    patience: Duration,
) -> Pumped {
    let app = apps.app;
    let mut pumped = Pumped::default();
    let started = Instant::now();
    loop {
        let mut idle = true;
        for (queue, fifo) in [(queues[0], false), (queues[1], true)] {
            let received =
                sqs.receive_message().queue_url(queue).max_number_of_messages(1).send().await.expect("receive");
            let Some(message) = received.messages().first() else { continue };
            pumped.receives += 1;
            idle = false;
            let mut event = SqsEvent::default();
            event.records = vec![first_delivery(message)];
            let kind = message_kind(message.body().unwrap_or_default());
            let before = apps.totals();
            let response = if fifo {
                trellis_aws::dispatch::handle_fifo_batch(app, event).await
            } else {
                trellis_aws::dispatch::handle_batch(app, event).await
            };
            breakdown.add(kind, before, apps.totals());
            pumped.invocations += 1;
            if !response.batch_item_failures.is_empty() {
                pumped.failed += 1;
                continue;
            }
            let receipt = message.receipt_handle().unwrap_or_default();
            sqs.delete_message().queue_url(queue).receipt_handle(receipt).send().await.expect("delete");
            pumped.deletes += 1;
        }
        if idle {
            let terminal = app.services.get_run("bench", run_id).await.is_ok_and(|run| run.status.is_terminal());
            if terminal || started.elapsed() > patience {
                return pumped;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One run of `case`, created through the API and driven to its end; prints its figures.
async fn one_case(apps: &Apps<'_>, sqs: &aws_sdk_sqs::Client, queues: [&str; 2], case: Case, children: usize) {
    // Scripted supervisor plans are honoured for a test-scope principal.
    let principal =
        Principal { tenant: "bench".into(), subject: "bench".into(), key_class: "api-key".into(), test_scope: true };
    let respond = |_: &trellis_core::RunState| (201, json!({}));
    let mut breakdown = Breakdown::default();
    let before = apps.totals();
    let started = Instant::now();
    let created = apps.api.services.create_run(&principal, &json!({"workflowId": case.workflow}), None, &respond).await;
    let run_id = match created {
        Ok(trellis_core::service::CreateOutcome::Created(run)) => run.run_id,
        other => {
            println!("{}: not measured: the run was not created: {other:?}", case.name);
            return;
        }
    };
    breakdown.add("parent run created (API)".into(), before, apps.totals());
    let patience = Duration::from_secs(60 + children as u64);
    let pumped = drive(apps, sqs, queues, &run_id, &mut breakdown, patience).await;
    let wall = started.elapsed();
    let after = apps.totals();
    let (status, events) = match apps.app.services.events("bench", &run_id, None, 100_000).await {
        Ok((run, events)) => (run.status.as_str().to_owned(), events),
        Err(error) => {
            println!("{}: not measured: its events were not read: {error}", case.name);
            return;
        }
    };
    let log = fanout_shapes::log_figures(
        case.node,
        events.iter().map(|e| (e.event_type.as_str(), e.node_id.as_deref(), &e.payload)),
    );
    let mut intervals = Vec::with_capacity(log.children.len());
    for child in &log.children {
        if let Ok(run) = apps.app.services.get_run("bench", child).await {
            if let (Some(start), Some(end)) = (run.started_at.or(Some(run.created_at)), run.ended_at) {
                intervals.push((start, end));
            }
        }
    }
    let per = log.children.len().max(1) as f64;
    let sends = after.1 - before.1;
    let sqs_requests = sends + pumped.receives + pumped.deletes;
    let peak = |value: Option<usize>| value.map_or_else(|| "n/a".to_owned(), |value| value.to_string());
    println!(
        "{}: {} children ({}), maxConcurrency {}, run {status}: wall {:.1} s, peak concurrency {} from the parent's log, \
         {} from the children's start/end times; {} parent events",
        case.name,
        log.children.len(),
        case.child,
        fanout_shapes::WIDTH,
        wall.as_secs_f64(),
        peak(log.peak),
        peak((!intervals.is_empty()).then(|| fanout_shapes::peak_overlap(&intervals))),
        log.events,
    );
    println!(
        "  per child, everything included: {:.2} WRU, {:.2} RRU, {:.2} SQS requests ({:.2} send, {:.2} receive, {:.2} \
         delete; receives counted per message), {:.2} dispatcher invocations; {} handlings failed (left on the queue)",
        (after.0.write_units - before.0.write_units) as f64 / per,
        (after.0.read_units - before.0.read_units) as f64 / per,
        sqs_requests as f64 / per,
        sends as f64 / per,
        pumped.receives as f64 / per,
        pumped.deletes as f64 / per,
        pumped.invocations as f64 / per,
        pumped.failed,
    );
    println!(
        "  totals: {} WRU, {} RRU, {} DynamoDB write requests, {} read requests, {sqs_requests} SQS requests, {} invocations",
        after.0.write_units - before.0.write_units,
        after.0.read_units - before.0.read_units,
        after.0.write_requests - before.0.write_requests,
        after.0.read_requests - before.0.read_requests,
        pumped.invocations,
    );
    for (kind, count, wru, rru, sends) in &breakdown.rows {
        println!(
            "  {kind}: {:.2} per child, {:.2} WRU, {:.2} RRU, {:.2} SQS sends",
            *count as f64 / per,
            *wru as f64 / per,
            *rru as f64 / per,
            *sends as f64 / per
        );
    }
}

/// Registers the fan-out workflows (the host's own, so the scripted plan is honoured) and
/// measures each noop case with `children` children.
pub(crate) async fn figures(apps: &Apps<'_>, sqs: &aws_sdk_sqs::Client, queues: [&str; 2], children: usize) {
    for definition in fanout_shapes::workflows(children) {
        apps.app.services.put_workflow(GLOBAL_NAMESPACE, definition).await.expect("fan-out workflow");
    }
    println!(
        "trellis-bench-aws --fan-out {children}: emulated stack, one message handled at a time (batch size 1), \
         maxConcurrency {}",
        fanout_shapes::WIDTH
    );
    // Timers need real delays on SQS: the 20 ms delay child is measured on the embedded host only.
    for case in fanout_shapes::CASES.into_iter().filter(|case| case.workflow != fanout_shapes::LOOP_DELAY) {
        one_case(apps, sqs, queues, case, children).await;
    }
}
