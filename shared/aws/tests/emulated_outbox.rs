//! The outbox on the emulated stack: which commit pages keep a "sent" marker, and who sends
//! what a crash between a commit and its send left behind — the reconciler for the API's
//! commits (outbox entries), redelivery for the dispatcher's.
//!
//! A process that "dies" after a commit is a sink that sends some (or none) of the page's
//! effects and then fails without marking or enlisting anything, as a dead process would.

use serde_json::{json, Value};
use trellis_aws::app::sdk_config;
use trellis_aws::dispatch::{handle_message, MessageOutcome};
use trellis_aws::reconcile::{reconcile, reconcile_full};
use trellis_aws::AwsApp;
use trellis_core::interrupt::{Resolution, Resolver};
use trellis_core::run::Principal;
use trellis_core::service::{CreateOutcome, Services};

mod support;

use support::dying::dying_services;
use support::*;

/// An API function's app on the stack's table and queues.
fn api_app(stack: &Stack, config: &aws_config::SdkConfig) -> AwsApp {
    AwsApp::new_api(stack.app.settings.clone(), config)
}

fn principal() -> Principal {
    Principal { tenant: "default".into(), subject: "e2e".into(), key_class: "api-key".into(), test_scope: false }
}

async fn create(services: &Services, workflow_id: &str) -> String {
    let respond = |_: &trellis_core::RunState| (201, json!({}));
    match services.create_run(&principal(), &json!({"workflowId": workflow_id}), None, &respond).await {
        Ok(CreateOutcome::Created(run)) => run.run_id,
        other => panic!("unexpected {other:?}"),
    }
}

async fn register(stack: &Stack, workflows: &[Value]) {
    for workflow in workflows {
        stack.app.services.register_workflow("default", workflow.clone()).await.expect("workflow");
    }
}

fn chain() -> Value {
    json!({"id": "outbox-chain", "name": "chain", "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}],
           "edges": [{"id": "e", "sourceNodeId": "a", "targetNodeId": "b"}]})
}

fn fork() -> Value {
    json!({"id": "outbox-fork", "name": "fork",
           "nodes": [{"id": "s", "typeId": "core.noop"}, {"id": "l", "typeId": "core.noop"}, {"id": "r", "typeId": "core.noop"}],
           "edges": [{"id": "1", "sourceNodeId": "s", "targetNodeId": "l"}, {"id": "2", "sourceNodeId": "s", "targetNodeId": "r"}]})
}

fn gated() -> Value {
    json!({"id": "outbox-gate", "name": "gate",
           "nodes": [{"id": "gate", "typeId": "core.approvalGate"}, {"id": "after", "typeId": "core.noop"}],
           "edges": [{"id": "e", "sourceNodeId": "gate", "targetNodeId": "after"}]})
}

/// The task ids of the step messages visible now, each once (a task sent twice is one task:
/// handlers are idempotent by task id, and re-sending a half-sent page duplicates the sent
/// part). They are taken off the queue and put back
/// as new messages, so their receive counts do not move toward the dead-letter queue.
async fn visible_tasks(stack: &Stack) -> Vec<String> {
    let mut bodies = Vec::new();
    while let Some(message) = stack.receive(&stack.queue_url).await {
        bodies.push(message.body().unwrap_or("").to_owned());
        let receipt = message.receipt_handle().unwrap();
        stack.sqs.delete_message().queue_url(&stack.queue_url).receipt_handle(receipt).send().await.unwrap();
    }
    let mut tasks = Vec::new();
    for body in bodies {
        stack.sqs.send_message().queue_url(&stack.queue_url).message_body(&body).send().await.unwrap();
        let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        tasks.push(parsed["taskId"].as_str().unwrap_or("?").to_owned());
    }
    tasks.sort();
    tasks.dedup();
    tasks
}

/// Drives `run_id` to its end and checks that its log is whole and has no event twice.
async fn finish_without_duplicates(stack: &mut Stack, run_id: &str, nodes: usize) {
    let snapshot = stack.pump_until_terminal(run_id, SPEC_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let events = stack.events(run_id).await;
    assert_log_well_formed(&events);
    let types = types(&events);
    assert_eq!(types.iter().filter(|t| *t == "node.completed").count(), nodes, "no node twice: {types:?}");
    assert_eq!(types.iter().filter(|t| *t == "run.completed").count(), 1, "{types:?}");
}

async fn has_marker(app: &AwsApp, run_id: &str, version: u64) -> bool {
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let key = |v: String| aws_sdk_dynamodb::types::AttributeValue::S(v);
    let got = client
        .get_item()
        .table_name(&app.settings.table_name)
        .key("pk", key(format!("RUN#{run_id}")))
        .key("sk", key(format!("S#{version:020}")))
        .consistent_read(true)
        .send()
        .await
        .expect("get marker");
    got.item().is_some()
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn an_api_commit_with_two_effects_sent_halfway_is_completed_by_the_reconciler() {
    require_emulators();
    let mut aws = stack().await;
    register(&aws, &[chain()]).await;
    let config = sdk_config().await;
    let api = api_app(&aws, &config);
    // The create commits run.started with two effects (the first step and the run's deadline
    // timer, 900 s out); the API dies after sending one of them.
    let run_id = create(&dying_services(&api, 1), "outbox-chain").await;
    let pending = api.store.unsent_pages(&run_id).await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].effects.len(), 2, "the page keeps its marker rule: two effects, no marker yet");
    assert!(!pending[0].unproven);

    let sent = reconcile(&aws.app, 0).await.expect("reconcile");
    assert_eq!(sent, 2, "the page's effects are sent again, the missing one with them");
    assert!(has_marker(&aws.app, &run_id, 1).await, "and the page is marked sent");
    assert_eq!(visible_tasks(&aws).await, [format!("{run_id}/step/a/1")], "the step is on the queue (by task id)");
    finish_without_duplicates(&mut aws, &run_id, 2).await;
    assert_eq!(reconcile(&aws.app, 0).await.unwrap(), 0, "nothing left unsent");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_dispatcher_dying_between_two_effects_is_repaired_by_redelivery() {
    require_emulators();
    let mut aws = stack().await;
    register(&aws, &[fork()]).await;
    let run_id = create(&aws.app.services, "outbox-fork").await;
    // The dispatcher commits s's completion with two steps (l and r), sends l and dies: the
    // message of s is not deleted.
    let message = aws.receive(&aws.queue_url.clone()).await.expect("the step of s");
    let task = trellis_aws::message::StepMessage::decode(message.body().unwrap()).unwrap().task(1);
    let dying = dying_services(&aws.app, 1);
    trellis_worker::process_task(&dying, &task, &trellis_worker::TaskContext::default()).await.expect("committed");
    let pending = aws.app.store.unsent_pages(&run_id).await.unwrap();
    assert_eq!(pending.iter().map(|page| page.effects.len()).collect::<Vec<_>>(), [2], "{pending:?}");
    assert_eq!(visible_tasks(&aws).await, [format!("{run_id}/step/l/1")], "only l was sent");
    assert_eq!(reconcile(&aws.app, 0).await.unwrap(), 0, "a dispatcher's crash is not the reconciler's to repair");

    // The redelivered message finds its step applied and re-sends the unmarked page.
    let outcome = handle_message(&aws.app, &Stack::as_event(&message)).await;
    assert!(matches!(outcome, MessageOutcome::Done(trellis_worker::TaskResult::Repaired)), "{outcome:?}");
    aws.sqs
        .delete_message()
        .queue_url(&aws.queue_url)
        .receipt_handle(message.receipt_handle().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(visible_tasks(&aws).await, [format!("{run_id}/step/l/1"), format!("{run_id}/step/r/1")]);
    finish_without_duplicates(&mut aws, &run_id, 3).await;
    assert_eq!(reconcile_full(&aws.app, 0).await.unwrap(), 0, "nothing left unsent anywhere in the table");
}

/// Creates a gated run and drives it to its approval; returns its id.
async fn parked_at_the_gate(stack: &mut Stack, api: &AwsApp) -> String {
    let run_id = create(&api.services, "outbox-gate").await;
    while stack.snapshot(&run_id).await["status"] != "waiting-approval" {
        stack.pump_once(false).await;
    }
    run_id
}

async fn approve(services: &Services, run_id: &str) {
    let resolution = Resolution {
        node_id: "gate".into(),
        interrupt_id: None,
        value: json!({"action": "accept"}),
        resolver: Resolver::Principal("e2e".into()),
        prior_vote: None,
    };
    services.resolve_interrupt(Some("default"), run_id, resolution).await.expect("resolve");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_single_next_step_has_no_marker_and_is_resent_only_without_a_successor() {
    require_emulators();
    let mut aws = stack().await;
    register(&aws, &[gated()]).await;
    let config = sdk_config().await;
    let api = api_app(&aws, &config);

    // Sent, then handled: the page of the approval (its single effect: the next step) gets no
    // marker; its successor proves the send, and the reconciler sends nothing.
    let handled = parked_at_the_gate(&mut aws, &api).await;
    reconcile(&aws.app, 0).await.unwrap();
    approve(&api.services, &handled).await;
    let version = api.store.unsent_pages(&handled).await.unwrap()[0].version;
    finish_without_duplicates(&mut aws, &handled, 2).await;
    assert!(!has_marker(&aws.app, &handled, version).await, "no marker for a single next step");
    assert_eq!(api.store.unsent_pages(&handled).await.unwrap(), [], "the successor is the proof");
    assert_eq!(reconcile(&aws.app, 0).await.unwrap(), 0, "not resent");

    // The API dies right after the approval's commit: no successor, and the reconciler sends
    // the step.
    let lost = parked_at_the_gate(&mut aws, &api).await;
    approve(&dying_services(&api, 0), &lost).await;
    assert_eq!(visible_tasks(&aws).await, Vec::<String>::new(), "the step was lost");
    let pending = api.store.unsent_pages(&lost).await.unwrap();
    assert!(matches!(pending.as_slice(), [page] if page.unproven && page.effects.len() == 1), "{pending:?}");
    assert_eq!(reconcile(&aws.app, 0).await.unwrap(), 1, "resent");
    assert!(!has_marker(&aws.app, &lost, pending[0].version).await, "still no marker: its successor will prove it");
    finish_without_duplicates(&mut aws, &lost, 2).await;
    assert_eq!(reconcile(&aws.app, 0).await.unwrap(), 0);
}
