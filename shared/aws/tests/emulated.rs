//! End to end on the emulated AWS stack (DynamoDB Local + moto's SQS, started by the
//! README's test command). The harness plays API Gateway and the SQS event-source mapping
//! (batch size 1): API requests are API Gateway proxy events handed to the router the `api`
//! function serves; step messages are received from SQS, handed to the dispatcher's batch
//! handler one at a time, and deleted unless the handler reported them failed.
//!
//! The same scenarios run on the embedded host, and their event-type sequences and terminal
//! states must be identical. Without the emulators the suite is ignored (see
//! `trellis_testkit::external`).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use trellis_aws::app::sdk_config;
use trellis_aws::dispatch::{handle_batch, handle_message, MessageOutcome};
use trellis_aws::reconcile::reconcile;
use trellis_aws::settings::ApiSettings;
use trellis_aws::AwsApp;
use trellis_http::ApiKey;

mod support;

use support::*;

/// A scenario: a workflow, its inputs, and whether (and when) to cancel.
#[derive(Clone, Copy)]
enum Cancel {
    Never,
    RightAway,
    WhenParked,
}

struct Scenario {
    name: &'static str,
    workflow: &'static str,
    inputs: Value,
    cancel: Cancel,
    nodes_run: usize,
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "linear chain",
            workflow: "conformance-multi-node",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 3,
        },
        Scenario {
            name: "fan-out/join",
            workflow: "fan-out-join",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 5,
        },
        Scenario {
            name: "delay",
            workflow: "conformance-delay",
            inputs: json!({"delayMs": 300}),
            cancel: Cancel::Never,
            nodes_run: 1,
        },
        Scenario {
            name: "failing node",
            workflow: "conformance-failure",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 1,
        },
        Scenario {
            name: "cancel mid-run",
            workflow: "conformance-cancellable",
            inputs: json!({"delayMs": 60000}),
            cancel: Cancel::RightAway,
            nodes_run: 0,
        },
        Scenario {
            name: "cancel while parked",
            workflow: "conformance-cancellable",
            inputs: json!({"delayMs": 60000}),
            cancel: Cancel::WhenParked,
            nodes_run: 1,
        },
        Scenario {
            name: "parent with a completing child",
            workflow: "conformance-subworkflow-parent",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 3,
        },
        Scenario {
            name: "failing child, fail-parent",
            workflow: "strict-parent",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 1,
        },
        Scenario {
            name: "failing child, absorb",
            workflow: "lenient-parent",
            inputs: json!({}),
            cancel: Cancel::Never,
            nodes_run: 2,
        },
        Scenario {
            name: "cancel of a parent with a running child",
            workflow: "waiting-parent",
            inputs: json!({}),
            cancel: Cancel::WhenParked,
            nodes_run: 1,
        },
    ]
}

/// The workflows the scenarios use beyond the bundled fixtures.
fn extra_workflows() -> Vec<Value> {
    let parent = |id: &str, child: &str, on_failure: &str| {
        json!({"id": id, "name": id, "version": "1",
            "nodes": [{"id": "call", "typeId": "core.subWorkflow", "config": {"workflowId": child, "onChildFailure": on_failure}},
                      {"id": "after", "typeId": "core.noop"}],
            "edges": [{"id": "e", "sourceNodeId": "call", "targetNodeId": "after"}]})
    };
    vec![
        fan_out_join(),
        parent("strict-parent", "conformance-failure", "fail-parent"),
        parent("lenient-parent", "conformance-failure", "absorb"),
        parent("waiting-parent", "conformance-cancellable", "fail-parent"),
    ]
}

fn fan_out_join() -> Value {
    json!({"id": "fan-out-join", "name": "Fan-out/join", "version": "1",
        "nodes": [{"id": "s", "typeId": "core.noop"}, {"id": "l", "typeId": "core.noop"}, {"id": "r", "typeId": "core.noop"},
                  {"id": "m", "typeId": "core.noop"}, {"id": "j", "typeId": "core.noop"}],
        "edges": [{"id": "1", "sourceNodeId": "s", "targetNodeId": "l"}, {"id": "2", "sourceNodeId": "s", "targetNodeId": "r"},
                  {"id": "3", "sourceNodeId": "s", "targetNodeId": "m"}, {"id": "4", "sourceNodeId": "l", "targetNodeId": "j"},
                  {"id": "5", "sourceNodeId": "r", "targetNodeId": "j"}, {"id": "6", "sourceNodeId": "m", "targetNodeId": "j"}]})
}

/// Runs the scenario on the emulated stack; returns event types and terminal status.
async fn run_on_aws(stack: &mut Stack, scenario: &Scenario, twice: bool) -> (Vec<String>, String) {
    let run_id = stack.create(json!({"workflowId": scenario.workflow, "inputs": scenario.inputs})).await;
    match scenario.cancel {
        Cancel::Never => {}
        Cancel::RightAway => {
            let (status, body) = stack.api("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
            assert_eq!((status, body["status"].as_str()), (200, Some("cancelling")), "a step is in flight");
        }
        Cancel::WhenParked => {
            let started = Instant::now();
            while !types(&stack.events(&run_id).await).contains(&"node.started".to_owned()) {
                assert!(started.elapsed() < SPEC_DEADLINE);
                let message = stack.receive(&stack.queue_url.clone()).await;
                if let Some(message) = message {
                    stack.count(message.body().unwrap_or(""));
                    let outcome = handle_message(&stack.app, &Stack::as_event(&message)).await;
                    assert!(matches!(outcome, MessageOutcome::Done(_)), "{outcome:?}");
                    let handle = message.receipt_handle().unwrap();
                    stack.sqs.delete_message().queue_url(&stack.queue_url).receipt_handle(handle).send().await.unwrap();
                }
            }
            let (status, body) = stack.api("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
            assert_eq!(
                (status, body["status"].as_str()),
                (200, Some("cancelled")),
                "a parked run is cancelled in the request"
            );
        }
    }
    let snapshot = stack.pump_until_terminal(&run_id, SPEC_DEADLINE, twice).await;
    let events = stack.events(&run_id).await;
    assert_log_well_formed(&events);
    assert_eq!(
        stack.step_invocations(&run_id),
        scenario.nodes_run.max(usize::from(matches!(scenario.cancel, Cancel::RightAway))),
        "{}: one dispatcher invocation per node",
        scenario.name
    );
    (types(&events), snapshot["status"].as_str().unwrap().to_owned())
}

/// Runs the scenario on a fresh embedded host. For a cancel while the first step is in
/// flight, the host's worker is held until the cancel is accepted.
async fn run_embedded(scenario: &Scenario) -> (Vec<String>, String) {
    let hold = matches!(scenario.cancel, Cancel::RightAway);
    let (mut host, client) = embedded_host(hold, &extra_workflows()).await;
    let result = drive_embedded(&mut host, &client, scenario).await;
    host.stop().await;
    result
}

async fn drive_embedded(
    host: &mut trellis::host::EmbeddedHost,
    client: &EmbeddedClient,
    scenario: &Scenario,
) -> (Vec<String>, String) {
    let run_id = client.create(json!({"workflowId": scenario.workflow, "inputs": scenario.inputs})).await;
    match scenario.cancel {
        Cancel::Never => {}
        Cancel::RightAway => {
            let accepted = client.post(&format!("/v1/runs/{run_id}/cancel")).await;
            assert_eq!(accepted["status"], "cancelling", "a step is in flight");
            host.start_worker();
        }
        Cancel::WhenParked => {
            let started = Instant::now();
            while !types(&client.events(&run_id).await).contains(&"node.started".to_owned()) {
                assert!(started.elapsed() < SPEC_DEADLINE);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            client.post(&format!("/v1/runs/{run_id}/cancel")).await;
        }
    }
    let started = Instant::now();
    loop {
        let snapshot = client.get(&format!("/v1/runs/{run_id}")).await;
        if let Some(status @ ("completed" | "failed" | "cancelled")) = snapshot["status"].as_str() {
            return (types(&client.events(&run_id).await), status.to_owned());
        }
        assert!(started.elapsed() < SPEC_DEADLINE);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn scenarios_match_the_embedded_host_and_each_node_is_one_invocation() {
    require_emulators();
    let mut aws = stack().await;
    for definition in extra_workflows() {
        assert_eq!(aws.api("POST", "/v1/workflows", Some(definition)).await.0, 201);
    }
    for scenario in scenarios() {
        let on_aws = run_on_aws(&mut aws, &scenario, false).await;
        let on_embedded = run_embedded(&scenario).await;
        assert_eq!(on_aws, on_embedded, "{}: AWS and embedded differ", scenario.name);
    }
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn every_message_delivered_twice_gives_the_same_log() {
    require_emulators();
    let mut aws = stack().await;
    for definition in extra_workflows() {
        assert_eq!(aws.api("POST", "/v1/workflows", Some(definition)).await.0, 201);
    }
    for scenario in scenarios().into_iter().filter(|s| matches!(s.cancel, Cancel::Never)) {
        let once = run_on_aws(&mut aws, &scenario, false).await;
        let twice = run_on_aws(&mut aws, &scenario, true).await;
        assert_eq!(once, twice, "{}: duplicate delivery changed the log", scenario.name);
    }
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_crash_between_commit_and_send_is_repaired_by_the_reconciler() {
    require_emulators();
    let mut aws = stack().await;
    // An API instance whose sends fail: its create commits (run, run.started, outbox) and
    // the send is lost, as if the function died right after the commit.
    let config = sdk_config().await;
    let mut broken = aws.app.settings.clone();
    broken.step_queue_url = format!("{}-missing", aws.queue_url);
    let crashed = AwsApp::new(broken, &config);
    let keys = json!([{"label": "e2e", "sha256": hex(&ApiKey::hash_of(KEY)), "tenant": "default", "scopes": ["*"]}]);
    let api = ApiSettings { api_keys: keys.to_string(), cursor_secret: "s".repeat(32), stream_max_seconds: 30 };
    let crashed_router = trellis_http::router(crashed.api_state(&api).await.unwrap());
    let healthy_router = std::mem::replace(&mut aws.router, crashed_router);
    let run_id = aws.create(json!({"workflowId": "conformance-multi-node"})).await;
    aws.router = healthy_router;
    assert!(aws.receive(&aws.queue_url.clone()).await.is_none(), "the send was lost");

    let sent = reconcile(&aws.app, 0).await.expect("reconcile");
    assert!(sent >= 1, "the reconciler found the unsent entry");
    let snapshot = aws.pump_until_terminal(&run_id, SPEC_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed");
    let events = aws.events(&run_id).await;
    assert_log_well_formed(&events);
    assert_eq!(events.len(), 8, "nothing duplicated: {:?}", types(&events));
    assert_eq!(reconcile(&aws.app, 0).await.unwrap(), 0, "nothing left unsent");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_step_on_its_last_delivery_fails_the_run() {
    require_emulators();
    let aws = stack().await;
    let run_id = aws.create(json!({"workflowId": "conformance-multi-node"})).await;
    // Receive without deleting until the message is on its last allowed delivery.
    let mut message = None;
    let started = Instant::now();
    while message.as_ref().is_none_or(|m: &aws_sdk_sqs::types::Message| {
        Stack::as_event(m).attributes.get("ApproximateReceiveCount").map(String::as_str) != Some("3")
    }) {
        assert!(started.elapsed() < Duration::from_secs(15), "the message never reached its last delivery");
        if let Some(received) = aws.receive(&aws.queue_url.clone()).await {
            aws.sqs
                .change_message_visibility()
                .queue_url(&aws.queue_url)
                .receipt_handle(received.receipt_handle().unwrap())
                .visibility_timeout(0)
                .send()
                .await
                .unwrap();
            message = Some(received);
        }
    }
    let outcome = handle_message(&aws.app, &Stack::as_event(&message.unwrap())).await;
    assert_eq!(outcome, MessageOutcome::Exhausted);
    let snapshot = aws.snapshot(&run_id).await;
    assert_eq!(snapshot["status"], "failed");
    assert_eq!(snapshot["error"]["code"], "step_delivery_exhausted");
    assert_eq!(types(&aws.events(&run_id).await).last().unwrap(), "run.failed");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn an_unparseable_message_ends_in_the_dead_letter_queue() {
    require_emulators();
    let aws = stack().await;
    aws.sqs.send_message().queue_url(&aws.queue_url).message_body("{\"not\": \"a step\"}").send().await.unwrap();
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < Duration::from_secs(15), "the message never reached the DLQ");
        if let Some(message) = aws.receive(&aws.queue_url.clone()).await {
            let event = Stack::single(&message);
            let response = handle_batch(&aws.app, event).await;
            assert_eq!(response.batch_item_failures.len(), 1, "reported failed, not deleted");
            aws.sqs
                .change_message_visibility()
                .queue_url(&aws.queue_url)
                .receipt_handle(message.receipt_handle().unwrap())
                .visibility_timeout(0)
                .send()
                .await
                .unwrap();
        }
        if let Some(dead) = aws.receive(&aws.dlq_url.clone()).await {
            assert_eq!(dead.body(), Some("{\"not\": \"a step\"}"));
            return;
        }
    }
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn the_dispatcher_entry_routes_batches_schedules_and_refuses_the_rest() {
    require_emulators();
    let aws = stack().await;
    let scheduled = json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}});
    let answer = trellis_aws::dispatch::handle_trigger(&aws.app, scheduled).await.expect("reconciler runs");
    assert_eq!(answer, json!({"reconciled": 0}));
    let empty_batch = trellis_aws::dispatch::handle_trigger(&aws.app, json!({"Records": []})).await.unwrap();
    assert_eq!(empty_batch, json!({"batchItemFailures": []}));
    assert!(trellis_aws::dispatch::handle_trigger(&aws.app, json!({"hello": 1})).await.is_err());
}

/// The diff of two runs (`GET /v1/runs/{runId}:diff?against=`) answers the same on the
/// emulated stack and on the embedded host.
#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn the_diff_of_two_runs_is_the_same_on_both_backends() {
    require_emulators();
    let mut aws = stack().await;
    trellis_testkit::replay::diff_scenario(&mut AwsDriver(&mut aws)).await;
    let (host, client) = embedded_host(false, &[]).await;
    trellis_testkit::replay::diff_scenario(&mut trellis_testkit::HttpDriver::new(&client.base, KEY)).await;
    host.stop().await;
}

/// Forks (replay §6.1, RFC 0140) on the emulated stack: every status row, replay and branch
/// forks with the source's log shape, a branch's divergence at `run.started`, and a replay of
/// a cancelled run failing its unreached side effect closed.
#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn forks_hold_every_row_and_fail_unreached_effects_closed() {
    require_emulators();
    let mut aws = stack().await;
    trellis_testkit::replay::fork_rows(&mut AwsDriver(&mut aws)).await;
    trellis_testkit::replay::unreached_effect_fails_closed(&mut AwsDriver(&mut aws)).await;
    trellis_testkit::replay::interrupts_short_circuit(&mut AwsDriver(&mut aws)).await;
}

/// Retention, delete and prune on the emulated stack: a run past its retention is gone from
/// reads, lists and diffs and its fork is `410 history_expired`; delete with and without
/// force, a parent with its child; a prune preview equals what the prune deletes.
#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn retention_delete_and_prune_hold_on_dynamodb() {
    require_emulators();
    let mut aws = stack().await;
    trellis_testkit::replay::retention_scenario(&mut AwsDriver(&mut aws)).await;
}

/// Reruns (`:rerun`, `trellis_core::cache`) on the emulated stack, against the testkit's fake
/// model and HTTP server: the scenario the embedded host plays (`tests/e2e_replay.rs`).
#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_rerun_takes_unchanged_results_from_the_cache_on_dynamodb() {
    require_emulators();
    let model = trellis_testkit::fake_model::FakeModel::start().await;
    let providers = json!([{"id": "fake", "kind": "openai", "baseUrl": model.openai_base_url(), "models": ["fake-model"], "default": true}]);
    let mut aws = stack_with(Default::default(), providers.to_string()).await;
    let server = trellis_testkit::http_server::TestServer::start().await;
    trellis_testkit::rerun::serve(&server);
    assert_eq!(aws.api("POST", "/v1/workflows", Some(trellis_testkit::rerun::workflow(&server))).await.0, 201);
    trellis_testkit::rerun::scenario(&mut AwsDriver(&mut aws), &model, &server).await;
}

/// A 5 MB child output on the emulated stack: stored in S3 (moto), shown as a reference in
/// snapshots and events, served by the blob route, carried whole into the next request —
/// the scenario the embedded host plays — and deleted from the bucket by a prune.
#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_five_megabyte_child_output_round_trips_through_s3_and_pruning_removes_it() {
    use trellis_core::ports::BlobStore;
    require_emulators();
    let mut aws = stack().await;
    let server = trellis_testkit::http_server::TestServer::start().await;
    let document = trellis_testkit::payloads::serve(&server);
    for definition in trellis_testkit::payloads::workflows(&server) {
        assert_eq!(aws.api("POST", "/v1/workflows", Some(definition)).await.0, 201);
    }
    let before = aws.app.store.usage();
    let played = trellis_testkit::payloads::scenario(&mut AwsDriver(&mut aws), &server, &document).await;
    let used = aws.app.store.usage();
    eprintln!(
        "a 5 MB child output, parent and child: {} WRU in {} writes, {} S3 PUTs ({} bytes), {} S3 GETs",
        used.write_units - before.write_units,
        used.write_requests - before.write_requests,
        used.blob_puts - before.blob_puts,
        used.blob_bytes - before.blob_bytes,
        used.blob_gets - before.blob_gets,
    );
    assert_eq!(used.blob_puts - before.blob_puts, 2, "one object per run, each written once");
    for run_id in [&played.parent, &played.child] {
        assert!(aws.app.store.blob(run_id, &played.reference).await.unwrap().is_some(), "in the bucket");
    }
    let (status, report) = aws
        .api("POST", "/v1/runs:prune", Some(json!({"workflowId": trellis_testkit::payloads::PARENT, "keep": 0})))
        .await;
    assert_eq!(status, 200, "{report}");
    for run_id in [&played.parent, &played.child] {
        assert_eq!(aws.app.store.blob(run_id, &played.reference).await.unwrap(), None, "deleted with its run");
    }
}

/// A value under the inline limit that would make a commit page pass DynamoDB's 400 KB item
/// limit (a 200 KiB body lands in the variable, the node's outputs and `node.completed`) is
/// committed again with its values over 4 KiB in S3; without a blob bucket the same body fails
/// its node with `payload_too_large` at once — never a redelivery.
#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_page_too_large_for_dynamodb_spills_more_or_fails_its_node_clearly() {
    require_emulators();
    let server = trellis_testkit::http_server::TestServer::start().await;
    server
        .route("/mid", vec![trellis_testkit::http_server::Reply::json(200, &json!({"data": "m".repeat(200 * 1024)}))]);
    let workflow = json!({"id": "mid-body", "name": "mid-body", "version": "1",
        "nodes": [{"id": "fetch", "typeId": "core.http.request", "config": {"url": server.url("/mid")}}], "edges": []});

    let mut aws = stack().await;
    assert_eq!(aws.api("POST", "/v1/workflows", Some(workflow.clone())).await.0, 201);
    let (status, created) = aws.api("POST", "/v1/runs", Some(json!({"workflowId": "mid-body"}))).await;
    assert_eq!(status, 201, "{created}");
    let run_id = created["runId"].as_str().unwrap().to_owned();
    let snapshot = trellis_testkit::script::Runner::new(&mut AwsDriver(&mut aws)).await_terminal(&run_id).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(
        snapshot["variables"]["fetch"]["body"]["data"].as_str().map(str::len),
        Some(200 * 1024),
        "inline in the snapshot"
    );
    let events = trellis_testkit::script::Runner::new(&mut AwsDriver(&mut aws)).events(&run_id).await;
    let completed = events.iter().find(|event| event["type"] == "node.completed").expect("node.completed");
    let reference =
        completed["payload"]["outputs"]["body"]["data"]["$trellisBlob"]["ref"].as_str().expect("in S3").to_owned();
    let (status, value) = aws.api("GET", &format!("/v1/runs/{run_id}/blobs/{reference}"), None).await;
    assert_eq!((status, value.as_str().map(str::len)), (200, Some(200 * 1024)));

    let mut bare = stack_tweaked(Default::default(), String::new(), |settings| {
        settings.blobs.bucket = None;
        settings.limits.blob_storage = false;
    })
    .await;
    assert_eq!(bare.api("POST", "/v1/workflows", Some(workflow)).await.0, 201);
    let (_, discovery) = bare.api("GET", "/.well-known/openwop", None).await;
    assert_eq!(discovery["runs"]["payloads"]["blobs"], false, "advertised");
    let (status, created) = bare.api("POST", "/v1/runs", Some(json!({"workflowId": "mid-body"}))).await;
    assert_eq!(status, 201, "{created}");
    let run_id = created["runId"].as_str().unwrap().to_owned();
    let snapshot = trellis_testkit::script::Runner::new(&mut AwsDriver(&mut bare)).await_terminal(&run_id).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot:.600}");
    let events = trellis_testkit::script::Runner::new(&mut AwsDriver(&mut bare)).events(&run_id).await;
    let failed = events.iter().find(|event| event["type"] == "node.failed").expect("node.failed");
    assert_eq!(failed["payload"]["error"]["code"], "payload_too_large", "{failed:.600}");
    assert_eq!(failed["payload"]["attempts"], 1, "not retried");
}
