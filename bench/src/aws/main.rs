//! `trellis-bench-aws`: the cost of one sequential `core.noop` step on the serverless path,
//! measured on the emulated stack (`AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`):
//! DynamoDB request units computed from serialized item sizes by AWS's rules, SQS requests
//! and dispatcher invocations; plus the function binaries' sizes and the dispatcher's
//! process start-up time to its first Runtime API call. Prints figures; asserts nothing.
//! With `--cold-starts N` it only times N cold starts of each function binary found in
//! `--functions` (size and median start-up; `scripts/bench-lambda.sh`). With `--fan-out N`
//! it only measures parallel fan-out (a forEach and a parallel dispatch of N noop children;
//! see [`fanout`]). With `--patterns` it only measures the runs of the six agent-workflow
//! patterns' checks (see [`patterns`]). With `--webhooks` it only measures what webhook
//! subscriptions cost a step (see [`webhooks`]); with `--events`, what run events on a bus
//! and queue-triggered runs cost (see [`events`]); with `--payloads`, what a large value
//! costs (see [`payloads`]).
//!
//! Run it through the emulator wrapper:
//! `unshare -n bash scripts/emulators.sh run -- ./target/release/trellis-bench-aws`

mod cold;
mod fanout;
// The embedded benchmark reads timestamps from JSON (`parse_rfc3339_ms`); this one does not.
mod events;
#[allow(dead_code)]
#[path = "../fanout_shapes.rs"]
mod fanout_shapes;
mod patterns;
mod payloads;
mod reconciler;
mod startup;
mod webhooks;

use std::time::Duration;

use aws_lambda_events::event::sqs::SqsMessage;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use clap::Parser;
use serde_json::json;
use trellis_aws::app::sdk_config;
use trellis_aws::dispatch::handle_message;
use trellis_aws::{AwsApp, Settings};
use trellis_core::interrupt::{Resolution, Resolver};
use trellis_core::limits::HostLimits;
use trellis_core::ports::GLOBAL_NAMESPACE;
use trellis_core::run::Principal;

/// Measure the serverless step path.
#[derive(Debug, Parser)]
#[command(name = "trellis-bench-aws")]
struct Args {
    /// Runs of the chain.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Nodes per chain.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// Finished runs to retain (copies of a finished chain run) before measuring one
    /// reconciler sweep (bounded by recent commits) against a whole-table scan; 0 skips it.
    #[arg(long, default_value_t = 0)]
    retained: usize,
    /// The dispatcher binary whose start-up is timed (a host build).
    #[arg(long, default_value = "target/release/trellis-dispatcher")]
    dispatcher: std::path::PathBuf,
    /// Only time this many cold starts of each function binary (API, dispatcher, completion)
    /// and print their sizes and median start-ups; 0 runs the step benchmark instead.
    #[arg(long, default_value_t = 0)]
    cold_starts: usize,
    /// The directory holding the function binaries `--cold-starts` times (a host build).
    #[arg(long, default_value = "target/release")]
    functions: std::path::PathBuf,
    /// Only measure parallel fan-out: a forEach and a parallel dispatch of this many one-node
    /// noop children (maxConcurrency 50, at most 1,000: `dispatch.maxChildren`), wall time,
    /// peak concurrency and the cost per child; 0 runs the step benchmark instead.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000))]
    fan_out: u64,
    /// Only measure what webhook subscriptions cost a step (none, one to `run.completed`, one
    /// to every event), deliveries to a loopback receiver in this process.
    #[arg(long)]
    webhooks: bool,
    /// Only measure what run events on an EventBridge bus (started+completed) and runs started
    /// by SQS trigger messages cost, against plain runs (moto's EventBridge).
    #[arg(long)]
    events: bool,
    /// Only measure what a large value costs: runs of a GET whose body is 1 KiB to 5 MiB
    /// (S3 on the emulator for values over 256 KiB).
    #[arg(long)]
    payloads: bool,
    /// Only measure the six agent-workflow patterns of `examples/workflows/patterns/`: the cost
    /// of every run their checks create, against the fake model.
    #[arg(long)]
    patterns: bool,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let config = sdk_config().await;
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let table = format!("trellis-bench-{suffix}");
    trellis_store_dynamodb::create_table(&aws_sdk_dynamodb::Client::new(&config), &table).await.expect("table");
    if args.cold_starts > 0 {
        cold_start_figures(&args, &table).await;
        return;
    }
    let sqs = aws_sdk_sqs::Client::new(&config);
    let queues = trellis_aws::provision::create_queues(&sqs, &format!("bench-{suffix}"), 5, 30).await.expect("queues");
    let queue_url = queues.step.clone();
    let completion_url = queues.completion.clone();
    // The runs' blobs (values over 256 KiB): a bucket of the emulator.
    let bucket = format!("trellis-bench-{suffix}");
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&config).force_path_style(true).build());
    s3.create_bucket().bucket(&bucket).send().await.expect("bucket");
    let settings = Settings {
        table_name: table,
        step_queue_url: queues.step,
        completion_queue_url: queues.completion,
        max_receive_count: 5,
        dispatcher_timeout_ms: trellis_aws::settings::DEFAULT_DISPATCHER_TIMEOUT_MS,
        // The webhook figures deliver to a loopback receiver in this process.
        http: trellis_activities::http::HttpSettings {
            allow: trellis_activities::http::AllowList::parse("127.0.0.1/32").expect("allow list"),
            ..Default::default()
        },
        limits: HostLimits::default(),
        retention_days: 30,
        delta_pages: true,
        secrets: Default::default(),
        test_seams: false,
        callback_secret: None,
        ai_providers: String::new(),
        public_url: None,
        webhook_policy: Default::default(),
        webhook_set_ttl_ms: 10_000,
        events: Default::default(),
        blobs: trellis_aws::settings::BlobSettings { bucket: Some(bucket), path_style: true },
    };
    // Runs are created and approvals resolved by the API function (its commits write outbox
    // entries), steps handled by the dispatcher, as deployed.
    let api = AwsApp::new_api(settings.clone(), &config);
    let app = AwsApp::new(settings.clone(), &config);
    let apps = Apps { app: &app, api: &api };
    if args.patterns {
        patterns::figures(&settings, &config, &sqs).await;
        return;
    }
    if args.events {
        events::figures(&apps, &config, &sqs, &queue_url, args.runs, args.nodes).await;
        return;
    }
    if args.webhooks {
        webhooks::figures(&apps, &sqs, &queue_url, args.runs, args.nodes).await;
        return;
    }
    if args.payloads {
        payloads::figures(&apps, &sqs, [&queue_url, &completion_url], args.runs).await;
        return;
    }
    if args.fan_out > 0 {
        fanout::figures(&apps, &sqs, [&queue_url, &completion_url], args.fan_out as usize).await;
        return;
    }

    let chain = chain("bench-chain", args.nodes);
    app.services.register_workflow("bench", chain).await.expect("workflow");
    let principal =
        Principal { tenant: "bench".into(), subject: "bench".into(), key_class: "api-key".into(), test_scope: false };
    let respond = |_: &trellis_core::RunState| (201, json!({}));

    let before_create = apps.totals();
    for _ in 0..args.runs {
        api.services
            .create_run(&principal, &json!({"workflowId": "bench-chain"}), None, &respond)
            .await
            .expect("create");
    }
    let after_create = apps.totals();

    let expected = (args.runs * args.nodes) as u64;
    let (invocations, receives, deletes) = pump(&app, &sqs, &queue_url, expected).await;
    let done = apps.totals();
    let steps = expected as f64;
    let create_runs = args.runs as f64;
    println!("trellis-bench-aws: {} runs of a {}-node core.noop chain on the emulated stack", args.runs, args.nodes);
    println!(
        "run creation (API): {:.2} WRU, {:.2} RRU, {:.2} SQS sends per run (run.started, state, first step, deadline timer)",
        (after_create.0.write_units - before_create.0.write_units) as f64 / create_runs,
        (after_create.0.read_units - before_create.0.read_units) as f64 / create_runs,
        (after_create.1 - before_create.1) as f64 / create_runs,
    );
    println!(
        "per sequential step: {:.2} WRU, {:.2} RRU (from serialized item sizes), {:.2} SQS requests ({:.2} send, {:.2} receive, {:.2} delete at batch size 1), {:.2} dispatcher invocations",
        (done.0.write_units - after_create.0.write_units) as f64 / steps,
        (done.0.read_units - after_create.0.read_units) as f64 / steps,
        ((done.1 - after_create.1) + receives + deletes) as f64 / steps,
        (done.1 - after_create.1) as f64 / steps,
        receives as f64 / steps,
        deletes as f64 / steps,
        invocations as f64 / steps,
    );
    cold::figures(&api, &settings, &sqs, &principal, args.runs, args.nodes).await;
    approval_figures(&apps, &sqs, &queue_url, &principal, args.runs).await;
    dispatch_figures(&apps, &sqs, [&queue_url, &completion_url], args.runs).await;
    if args.retained > 0 {
        reconciler::figures(&apps, args.retained).await;
    }
    for function in ["trellis-api", "trellis-dispatcher", "trellis-completion"] {
        let path = format!("target/lambda/{function}/bootstrap");
        match std::fs::metadata(&path) {
            Ok(meta) => println!("{function} release bootstrap: {:.2} MiB ({path})", meta.len() as f64 / 1_048_576.0),
            Err(_) => println!("{function}: no {path} (run `cargo lambda build --release --arm64`)"),
        }
    }
    let dispatcher = startup::Function { name: "trellis-dispatcher", table: "bench" };
    match startup::time_to_first_poll(&args.dispatcher, dispatcher).await {
        Ok(elapsed) => println!(
            "dispatcher process start-up to its first Runtime API call: {:.1} ms ({})",
            elapsed.as_secs_f64() * 1000.0,
            args.dispatcher.display()
        ),
        Err(error) => println!("dispatcher start-up not measured: {error}"),
    }
}

/// A chain of `nodes` `core.noop` nodes.
pub(crate) fn chain(id: &str, nodes: usize) -> serde_json::Value {
    let list: Vec<_> = (0..nodes).map(|i| json!({"id": format!("n{i}"), "typeId": "core.noop"})).collect();
    let edges: Vec<_> = (1..nodes)
        .map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{}", i - 1), "targetNodeId": format!("n{i}")}))
        .collect();
    json!({"id": id, "name": id, "nodes": list, "edges": edges})
}

/// Sizes and cold starts of the three function binaries in `--functions`, against `table`
/// (the API stores its bundled fixtures there at cold start, on the emulated DynamoDB).
async fn cold_start_figures(args: &Args, table: &str) {
    println!("trellis-bench-aws: {} cold starts per function, spawn to first Runtime API call", args.cold_starts);
    for name in ["trellis-api", "trellis-dispatcher", "trellis-completion"] {
        let binary = args.functions.join(name);
        match startup::cold_starts(&binary, startup::Function { name, table }, args.cold_starts).await {
            Ok(starts) => println!(
                "{name}: {:.2} MiB ({} bytes), cold start median {:.1} ms (min {:.1}, max {:.1}) ({})",
                starts.bytes as f64 / 1_048_576.0,
                starts.bytes,
                starts.median.as_secs_f64() * 1000.0,
                starts.min.as_secs_f64() * 1000.0,
                starts.max.as_secs_f64() * 1000.0,
                binary.display()
            ),
            Err(error) => println!("{name}: not measured: {error}"),
        }
    }
}

/// The dispatcher's and the API's apps on one stack.
pub(crate) struct Apps<'a> {
    /// The dispatcher (and completion) function's.
    pub(crate) app: &'a AwsApp,
    /// The API function's.
    pub(crate) api: &'a AwsApp,
}

impl Apps<'_> {
    /// Both stores' usage and both sinks' SQS requests, summed.
    pub(crate) fn totals(&self) -> (trellis_store_dynamodb::Usage, u64) {
        let usage = self.app.store.usage() + self.api.store.usage();
        (usage, self.app.effects.requests() + self.api.effects.requests())
    }
}

/// A received message as the event-source mapping hands it over, on its first delivery.
pub(crate) fn first_delivery(message: &aws_sdk_sqs::types::Message) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = message.message_id().map(str::to_owned);
    record.body = message.body().map(str::to_owned);
    record.attributes.insert("ApproximateReceiveCount".into(), "1".into());
    record
}

/// Plays the event-source mapping (batch size 1) until `expected` messages were handled;
/// returns `(invocations, receives, deletes)`.
pub(crate) async fn pump(app: &AwsApp, sqs: &aws_sdk_sqs::Client, queue_url: &str, expected: u64) -> (u64, u64, u64) {
    let (mut invocations, mut receives, mut deletes) = (0u64, 0u64, 0u64);
    while invocations < expected {
        let received = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        receives += 1;
        let Some(message) = received.messages().first() else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        handle_message(app, &first_delivery(message)).await;
        invocations += 1;
        sqs.delete_message()
            .queue_url(queue_url)
            .receipt_handle(message.receipt_handle().unwrap())
            .send()
            .await
            .unwrap();
        deletes += 1;
    }
    (invocations, receives, deletes)
}

/// The cost of one approval resolved through the API (the commit that closes the gate and
/// releases the next step), measured on runs of `approval gate → noop` suspended at the gate.
async fn approval_figures(
    apps: &Apps<'_>,
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    principal: &Principal,
    runs: usize,
) {
    let app = apps.app;
    let gated = json!({"id": "bench-gate", "name": "bench gate",
        "nodes": [{"id": "gate", "typeId": "core.approvalGate"}, {"id": "after", "typeId": "core.noop"}],
        "edges": [{"id": "e", "sourceNodeId": "gate", "targetNodeId": "after"}]});
    app.services.register_workflow("bench", gated).await.expect("workflow");
    let respond = |_: &trellis_core::RunState| (201, json!({}));
    let mut run_ids = Vec::new();
    for _ in 0..runs {
        let created =
            apps.api.services.create_run(principal, &json!({"workflowId": "bench-gate"}), None, &respond).await;
        match created.expect("create") {
            trellis_core::service::CreateOutcome::Created(run) => run_ids.push(run.run_id),
            other => panic!("unexpected {other:?}"),
        }
    }
    pump(app, sqs, queue_url, runs as u64).await;
    let before = apps.totals();
    for run_id in &run_ids {
        let resolution = Resolution {
            node_id: "gate".into(),
            interrupt_id: None,
            value: json!({"action": "accept"}),
            resolver: Resolver::Principal("bench".into()),
            prior_vote: None,
        };
        apps.api.services.resolve_interrupt(Some("bench"), run_id, resolution).await.expect("resolve");
    }
    let after = apps.totals();
    let runs = runs as f64;
    println!(
        "per approval resolved through the API (gate closes, next step released): {:.2} WRU, {:.2} RRU, {:.2} SQS sends",
        (after.0.write_units - before.0.write_units) as f64 / runs,
        (after.0.read_units - before.0.read_units) as f64 / runs,
        (after.1 - before.1) as f64 / runs,
    );
}

/// The cost of one dispatched worker: runs of a supervisor whose plan dispatches three
/// one-node workers (their notices through the FIFO completion queue), driven to the end.
async fn dispatch_figures(apps: &Apps<'_>, sqs: &aws_sdk_sqs::Client, queues: [&str; 2], runs: usize) {
    let app = apps.app;
    let worker =
        json!({"id": "bench-worker", "name": "bench worker", "nodes": [{"id": "work", "typeId": "core.noop"}]});
    let plan = json!([{"kind": "next-worker", "nextWorkerIds": ["bench-worker", "bench-worker", "bench-worker"]}]);
    let supervised = json!({"id": "bench-dispatch", "name": "bench dispatch",
        "nodes": [{"id": "supervisor", "typeId": "core.orchestrator.supervisor", "config": {"mockDispatchPlan": plan}},
                  {"id": "dispatch", "typeId": "core.dispatch"}],
        "edges": [{"id": "e1", "sourceNodeId": "supervisor", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "supervisor"}]});
    // The host's own (global) workflows, as `--workflows` loads them: their scripted plan is
    // honoured; a tenant's registration would not be.
    app.services.put_workflow(GLOBAL_NAMESPACE, worker).await.expect("worker");
    app.services.put_workflow(GLOBAL_NAMESPACE, supervised).await.expect("supervised");
    // Scripted plans are honoured for a test-scope principal.
    let principal =
        Principal { tenant: "bench".into(), subject: "bench".into(), key_class: "api-key".into(), test_scope: true };
    let respond = |_: &trellis_core::RunState| (201, json!({}));
    // What earlier figures left on the queues (the approval runs' released steps) is handled
    // first, uncounted.
    drain(app, sqs, queues).await;
    let delayed_before = delayed_messages(sqs, queues).await;
    let before = apps.totals();
    let mut breakdown = Breakdown::default();
    let mut run_ids = Vec::new();
    for _ in 0..runs {
        let created = apps.totals();
        match apps.api.services.create_run(&principal, &json!({"workflowId": "bench-dispatch"}), None, &respond).await {
            Ok(trellis_core::service::CreateOutcome::Created(run)) => run_ids.push(run.run_id),
            other => panic!("unexpected {other:?}"),
        }
        breakdown.add("supervisor run created (API)".into(), created, apps.totals());
    }
    let (mut invocations, mut receives, mut deletes) = (0u64, 0u64, 0u64);
    loop {
        let mut idle = true;
        for (queue, fifo) in [(queues[0], false), (queues[1], true)] {
            let received =
                sqs.receive_message().queue_url(queue).max_number_of_messages(1).send().await.expect("receive");
            let Some(message) = received.messages().first() else { continue };
            receives += 1;
            idle = false;
            let mut event = aws_lambda_events::event::sqs::SqsEvent::default();
            event.records = vec![first_delivery(message)];
            let kind = message_kind(message.body().unwrap_or_default());
            let before_message = apps.totals();
            let response = if fifo {
                trellis_aws::dispatch::handle_fifo_batch(app, event).await
            } else {
                trellis_aws::dispatch::handle_batch(app, event).await
            };
            assert!(response.batch_item_failures.is_empty(), "benchmark messages must succeed");
            breakdown.add(kind, before_message, apps.totals());
            invocations += 1;
            sqs.delete_message()
                .queue_url(queue)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
            deletes += 1;
        }
        if idle {
            let mut done = true;
            for run_id in &run_ids {
                done &= app.services.get_run("bench", run_id).await.is_ok_and(|run| run.status.is_terminal());
            }
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let after = apps.totals();
    for run_id in &run_ids {
        let run = app.services.get_run("bench", run_id).await.expect("run");
        assert_eq!(run.status, trellis_core::RunStatus::Completed, "benchmark runs must complete");
    }
    let workers = (runs * 3) as f64;
    println!(
        "per dispatched worker (supervisor dispatching 3 one-node workers, everything included): {:.2} WRU, {:.2} RRU, {:.2} SQS requests ({:.2} sends; receives counted per message), {:.2} function invocations",
        (after.0.write_units - before.0.write_units) as f64 / workers,
        (after.0.read_units - before.0.read_units) as f64 / workers,
        ((after.1 - before.1) + receives + deletes) as f64 / workers,
        (after.1 - before.1) as f64 / workers,
        invocations as f64 / workers,
    );
    breakdown.print(workers);
    let delayed = delayed_messages(sqs, queues).await.saturating_sub(delayed_before);
    println!(
        "  timer messages sent and still delayed at the end: {:.2} per worker (each comes back later: a receive, an invocation, a delete)",
        delayed as f64 / workers
    );
}

/// Handles (uncounted) every message visible on `queues` until both are empty.
async fn drain(app: &AwsApp, sqs: &aws_sdk_sqs::Client, queues: [&str; 2]) {
    loop {
        let mut idle = true;
        for queue in queues {
            let received =
                sqs.receive_message().queue_url(queue).max_number_of_messages(1).send().await.expect("receive");
            let Some(message) = received.messages().first() else { continue };
            idle = false;
            handle_message(app, &first_delivery(message)).await;
            let receipt = message.receipt_handle().unwrap_or_default();
            sqs.delete_message().queue_url(queue).receipt_handle(receipt).send().await.expect("delete");
        }
        if idle {
            return;
        }
    }
}

/// Messages sent with a delay that has not run out yet, on both queues.
async fn delayed_messages(sqs: &aws_sdk_sqs::Client, queues: [&str; 2]) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName;
    let mut delayed = 0;
    for queue in queues {
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(queue)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .expect("queue attributes");
        delayed += attributes
            .attributes()
            .and_then(|map| map.get(&QueueAttributeName::ApproximateNumberOfMessagesDelayed))
            .and_then(|count| count.parse::<u64>().ok())
            .unwrap_or(0);
    }
    delayed
}

/// The kind of a step-queue message, for the breakdown (steps by node).
fn message_kind(body: &str) -> String {
    use trellis_core::engine::Effect;
    match trellis_aws::message::StepMessage::decode(body).map(|message| message.effect) {
        Ok(Effect::Step { node_id, .. }) => format!("step of `{node_id}`"),
        Ok(Effect::StartChild { .. }) => "start-child message".into(),
        Ok(Effect::NotifyParent { .. }) => "parent notice (FIFO)".into(),
        Ok(Effect::Deadline { .. }) => "deadline timer".into(),
        Ok(_) => "other message".into(),
        Err(_) => "unparseable message".into(),
    }
}

/// What each kind of handled message (and the API's creations) cost, per dispatched worker.
#[derive(Default)]
struct Breakdown {
    rows: Vec<(String, u64, u64, u64, u64)>,
}

impl Breakdown {
    /// Adds the usage between `before` and `after` to `kind`'s row (one handling).
    fn add(
        &mut self,
        kind: String,
        before: (trellis_store_dynamodb::Usage, u64),
        after: (trellis_store_dynamodb::Usage, u64),
    ) {
        let position = match self.rows.iter().position(|row| row.0 == kind) {
            Some(position) => position,
            None => {
                self.rows.push((kind, 0, 0, 0, 0));
                self.rows.len() - 1
            }
        };
        let row = &mut self.rows[position];
        row.1 += 1;
        row.2 += after.0.write_units - before.0.write_units;
        row.3 += after.0.read_units - before.0.read_units;
        row.4 += after.1 - before.1;
    }

    /// One line per kind: handlings, WRU, RRU and SQS sends per dispatched worker.
    fn print(&self, workers: f64) {
        for (kind, count, wru, rru, sends) in &self.rows {
            println!(
                "  {kind}: {:.2} per worker, {:.2} WRU, {:.2} RRU, {:.2} SQS sends",
                *count as f64 / workers,
                *wru as f64 / workers,
                *rru as f64 / workers,
                *sends as f64 / workers
            );
        }
    }
}
