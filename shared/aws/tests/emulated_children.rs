//! Child runs on the emulated stack: the child is created in the invocation that committed
//! its parent's step (no start-child message) and its end advances the parent in its own
//! invocation (no completion-queue notice); a child the parent's deadline covers sends no
//! deadline timer and is still cancelled when that deadline passes; and a crash anywhere
//! between the parent's commit and the child's first step, or between the child's end and
//! the parent's notice, is repaired by redelivery with exactly one child.
//!
//! A process that "dies" after a commit is a sink that sends nothing and fails without
//! marking or enlisting anything, as a dead process would.

use std::time::Duration;

use serde_json::{json, Value};
use trellis_aws::app::sdk_config;
use trellis_aws::dispatch::{handle_message, MessageOutcome};
use trellis_aws::AwsApp;
use trellis_core::engine::Effect;
use trellis_core::ports::RunStore;
use trellis_worker::{process_task, TaskContext, TaskResult};

mod support;

use support::children::*;
use support::*;

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
    let outcome = handle_message(&stack.app, &delivery(&message, 2)).await;
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
    let outcome = handle_message(&stack.app, &delivery(&message, 2)).await;
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
    let outcome = handle_message(&stack.app, &delivery(&message, 2)).await;
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
