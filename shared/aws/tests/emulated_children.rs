//! Child runs on the emulated stack: the child is created in the invocation that committed
//! its parent's step (no start-child message) and its end advances the parent in its own
//! invocation (no completion-queue notice); a child the parent's deadline covers sends no
//! deadline timer and is still cancelled when that deadline passes; and a crash anywhere
//! between the parent's commit and the child's first step, or between the child's end and
//! the parent's notice, is repaired by redelivery with exactly one child.
//!
//! A process that "dies" after a commit is a sink that sends nothing and fails without
//! marking or enlisting anything, as a dead process would.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use trellis_aws::app::{node_registry, sdk_config};
use trellis_aws::dispatch::{handle_message, MessageOutcome};
use trellis_aws::message::StepMessage;
use trellis_aws::AwsApp;
use trellis_core::engine::Effect;
use trellis_core::ports::{EffectSink, IdGenerator, RunStore};
use trellis_core::service::{Ports, Services};
use trellis_core::{RunState, StoreError};
use trellis_worker::{process_task, SystemClock, TaskContext, TaskResult};

mod support;

use support::*;

/// Sends nothing and fails: the process died right after the commit.
struct Dead;

#[async_trait]
impl EffectSink for Dead {
    async fn send(&self, _run_id: &str, _effects: &[Effect]) -> Result<(), StoreError> {
        Err(StoreError::Unavailable("the process died".into()))
    }
}

struct Ids;

impl IdGenerator for Ids {
    fn run_id(&self) -> String {
        format!("run-{}", uuid::Uuid::new_v4())
    }
}

/// The use cases of `app`'s store whose process dies after each commit; with
/// `inline_children`, after creating the children its commits start, too.
fn dying(app: &AwsApp, inline_children: bool) -> Services {
    let ports = Ports {
        store: app.store.clone(),
        effects: Arc::new(Dead),
        clock: Arc::new(SystemClock),
        ids: Arc::new(Ids),
        notifier: Arc::new(trellis_aws::notifier::PollingNotifier),
    };
    Services::new(ports, app.settings.limits)
        .with_nodes(node_registry(&app.settings))
        .with_inline_children(inline_children)
}

fn workflows() -> [Value; 2] {
    [
        json!({"id": "kid", "name": "kid", "nodes": [{"id": "work", "typeId": "core.noop"}]}),
        json!({"id": "kid-parent", "name": "kid parent",
            "nodes": [{"id": "call", "typeId": "core.subWorkflow", "config": {"workflowId": "kid"}},
                      {"id": "after", "typeId": "core.noop"}],
            "edges": [{"id": "e", "sourceNodeId": "call", "targetNodeId": "after"}]}),
    ]
}

fn slow_kid() -> Value {
    json!({"id": "slow-kid", "name": "slow kid", "nodes": [{"id": "wait", "typeId": "core.delay", "config": {"delayMs": 60000}}]})
}

fn slow_parent() -> Value {
    json!({"id": "slow-parent", "name": "slow parent",
        "nodes": [{"id": "call", "typeId": "core.subWorkflow", "config": {"workflowId": "slow-kid"}}]})
}

async fn prepared() -> Stack {
    require_emulators();
    let stack = stack().await;
    for definition in workflows().into_iter().chain([slow_kid(), slow_parent()]) {
        assert_eq!(stack.api("POST", "/v1/workflows", Some(definition)).await.0, 201);
    }
    stack
}

async fn run(stack: &Stack, run_id: &str) -> RunState {
    stack.app.store.load_run(run_id).await.expect("read").expect("the run exists")
}

fn child_of(parent: &RunState) -> String {
    parent.nodes["call"].child_run_id.clone().expect("the node waits for a child")
}

/// The next message on the step queue (taken off it) and its task.
async fn next_step(stack: &Stack) -> (aws_sdk_sqs::types::Message, trellis_core::ports::Task) {
    for _ in 0..100 {
        if let Some(message) = stack.receive(&stack.queue_url).await {
            stack
                .sqs
                .delete_message()
                .queue_url(&stack.queue_url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
            let task = StepMessage::decode(message.body().unwrap()).unwrap().task(1);
            return (message, task);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no step message arrived");
}

/// `message` as the event-source mapping hands it over on its second delivery.
fn redelivered(message: &aws_sdk_sqs::types::Message) -> aws_lambda_events::event::sqs::SqsMessage {
    let mut event = Stack::as_event(message);
    event.attributes.insert("ApproximateReceiveCount".into(), "2".into());
    event
}

/// Drives `run_id` to its end; checks it completed with every node once.
async fn completes(stack: &mut Stack, run_id: &str, nodes: usize) {
    let snapshot = stack.pump_until_terminal(run_id, SPEC_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let events = stack.events(run_id).await;
    assert_log_well_formed(&events);
    let completed = types(&events).iter().filter(|t| *t == "node.completed").count();
    assert_eq!(completed, nodes, "{:?}", types(&events));
}

/// The parent has one child, created once.
async fn one_child(stack: &Stack, parent_id: &str) {
    let parent = run(stack, parent_id).await;
    assert_eq!(parent.child_runs.len(), 1, "{:?}", parent.child_runs);
    let events = stack.events(&parent.child_runs[0].run_id).await;
    assert_eq!(types(&events).iter().filter(|t| *t == "run.started").count(), 1, "{:?}", types(&events));
}

fn kinds(stack: &Stack, kind: &str) -> usize {
    stack.invocations.iter().filter(|((_, k), _)| k == kind).map(|(_, count)| count).sum()
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn the_child_is_created_in_its_parents_invocation_and_its_end_advances_the_parent_in_its_own() {
    let mut stack = prepared().await;
    let parent_id = stack.create(json!({"workflowId": "kid-parent"})).await;
    let (_, call) = next_step(&stack).await;
    let outcome = process_task(&stack.app.services, &call, &TaskContext::default()).await.unwrap();
    assert_eq!(outcome, TaskResult::Applied);
    let child_id = child_of(&run(&stack, &parent_id).await);
    let child = run(&stack, &child_id).await;
    assert_eq!(child.version, 1, "created by the invocation of the parent's step");
    assert!(child.parent.as_ref().is_some_and(|link| link.deadline_covered));
    let pages = stack.app.store.unsent_pages(&child_id).await.unwrap();
    let effects: Vec<&Effect> = pages.iter().flat_map(|page| &page.effects).collect();
    assert!(matches!(effects.as_slice(), [Effect::Step { .. }]), "its first step, no deadline timer: {effects:?}");

    completes(&mut stack, &parent_id, 2).await;
    assert_eq!(kinds(&stack, "startChild"), 0, "no start-child message");
    assert_eq!(kinds(&stack, "notifyParent"), 0, "no completion-queue notice");
    assert_eq!(kinds(&stack, "step"), 2, "the child's step and the parent's next: one invocation each");
    assert_eq!(run(&stack, &child_id).await.status, trellis_core::RunStatus::Completed);
    one_child(&stack, &parent_id).await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_crash_between_the_parents_commit_and_the_childs_creation_yields_exactly_one_child() {
    let mut stack = prepared().await;
    let parent_id = stack.create(json!({"workflowId": "kid-parent"})).await;
    let (message, call) = next_step(&stack).await;
    // The parent's step commits; the invocation dies before the child exists.
    process_task(&dying(&stack.app, false), &call, &TaskContext::default()).await.unwrap();
    let child_id = child_of(&run(&stack, &parent_id).await);
    assert!(stack.app.store.load_run(&child_id).await.unwrap().is_none(), "no child yet");

    // The redelivered step finds its node moved on and re-sends the unsent page: the child
    // is started through the queue (every message delivered twice, for good measure).
    let outcome = handle_message(&stack.app, &redelivered(&message)).await;
    assert!(matches!(outcome, MessageOutcome::Done(TaskResult::Repaired)), "{outcome:?}");
    let snapshot = stack.pump_until_terminal(&parent_id, SPEC_DEADLINE, true).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(kinds(&stack, "startChild"), 1, "the queue path, as the fallback");
    one_child(&stack, &parent_id).await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_crash_after_the_childs_creation_before_its_first_step_is_sent_is_repaired() {
    let mut stack = prepared().await;
    // Redelivery comes after the visibility timeout, when the creator is surely gone: here
    // at once, so the dispatcher's grace for a writer still sending is 1 ms.
    let mut settings = stack.app.settings.clone();
    settings.dispatcher_timeout_ms = 1;
    stack.app = AwsApp::new(settings, &sdk_config().await);
    let parent_id = stack.create(json!({"workflowId": "kid-parent"})).await;
    let (message, call) = next_step(&stack).await;
    // The parent's step commits and creates the child; the invocation dies before the
    // child's first step is sent and before the parent's page is marked.
    process_task(&dying(&stack.app, true), &call, &TaskContext::default()).await.unwrap();
    let child_id = child_of(&run(&stack, &parent_id).await);
    assert_eq!(run(&stack, &child_id).await.version, 1, "the child exists");
    assert!(stack.receive(&stack.queue_url.clone()).await.is_none(), "its first step was not sent");

    tokio::time::sleep(Duration::from_millis(5)).await;
    let outcome = handle_message(&stack.app, &redelivered(&message)).await;
    assert!(matches!(outcome, MessageOutcome::Done(TaskResult::Repaired)), "{outcome:?}");
    completes(&mut stack, &parent_id, 2).await;
    one_child(&stack, &parent_id).await;
    assert_eq!(run(&stack, &child_id).await.status, trellis_core::RunStatus::Completed);
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_crash_between_the_childs_end_and_its_parents_notice_is_repaired_by_redelivery() {
    let mut stack = prepared().await;
    let parent_id = stack.create(json!({"workflowId": "kid-parent"})).await;
    let (_, call) = next_step(&stack).await;
    process_task(&stack.app.services, &call, &TaskContext::default()).await.unwrap();
    let child_id = child_of(&run(&stack, &parent_id).await);
    let (message, work) = next_step(&stack).await;
    assert_eq!(work.run_id, child_id);
    // The child's step commits its end; the invocation dies before the parent hears of it.
    process_task(&dying(&stack.app, false), &work, &TaskContext::default()).await.unwrap();
    assert!(run(&stack, &child_id).await.status.is_terminal());
    assert!(!run(&stack, &parent_id).await.status.is_terminal());

    // The redelivered step finds the child ended and re-sends its unsent page: the notice.
    let outcome = handle_message(&stack.app, &redelivered(&message)).await;
    assert!(matches!(outcome, MessageOutcome::Done(TaskResult::Repaired)), "{outcome:?}");
    completes(&mut stack, &parent_id, 2).await;
    assert_eq!(kinds(&stack, "notifyParent"), 1, "through the completion queue, as the fallback");
    one_child(&stack, &parent_id).await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_child_without_a_deadline_timer_is_cancelled_when_its_parents_deadline_passes() {
    let mut stack = prepared().await;
    let body = json!({"workflowId": "slow-parent", "configurable": {"runTimeoutMs": 1500}});
    let parent_id = stack.create(body).await;
    let parent = stack.pump_until_terminal(&parent_id, Duration::from_secs(20), false).await;
    assert_eq!(parent["status"], "failed", "{parent}");
    assert_eq!(parent["error"]["code"], "run_timeout", "{parent}");
    let child_id = child_of(&run(&stack, &parent_id).await);
    let child = stack.pump_until_terminal(&child_id, SPEC_DEADLINE, false).await;
    assert_eq!(child["status"], "cancelled", "{child}");
    let child = run(&stack, &child_id).await;
    assert!(child.parent.as_ref().is_some_and(|link| link.deadline_covered), "it had no timer of its own");
    assert_eq!(child.cancel_reason.as_deref(), Some(trellis_core::engine::PARENT_CANCELLED));
    assert_eq!(kinds(&stack, "deadline"), 1, "one deadline timer handled: the parent's");
}
