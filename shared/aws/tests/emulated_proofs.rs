//! The proofs that stand in for "sent" markers, on the emulated stack: a child start and a
//! child's notice carried out in the committing invocation leave no marker, and neither the
//! reconciler nor redelivery sends them again; a crash before the child start or after the
//! parent applied the notice is still repaired exactly once. And a send that failed with
//! nothing enlisted for the reconciler is reported as a batch item failure, so its
//! redelivery re-sends the page (unless that would be the last allowed delivery).
//!
//! A process that "dies" after a commit is a sink that sends nothing and fails without
//! marking or enlisting anything, as a dead process would.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use trellis_aws::app::sdk_config;
use trellis_aws::dispatch::{handle_batch, handle_message, MessageOutcome};
use trellis_aws::effects::SqsEffects;
use trellis_aws::reconcile::{reconcile, reconcile_full};
use trellis_aws::AwsApp;
use trellis_core::engine::Effect;
use trellis_core::ports::{EffectSink, RunStore};
use trellis_core::StoreError;
use trellis_store_dynamodb::DynamoStore;
use trellis_worker::{process_task, SystemClock, TaskContext, TaskResult};

mod support;

use support::children::*;
use support::*;

/// The stack's sink, except that its first committed send goes to a queue and a table that
/// do not exist: the send fails and so does enlisting the page for the reconciler.
struct FailsOnce {
    broken: SqsEffects,
    inner: Arc<SqsEffects>,
    failed: AtomicBool,
}

#[async_trait]
impl EffectSink for FailsOnce {
    async fn send(&self, run_id: &str, effects: &[Effect]) -> Result<(), StoreError> {
        self.inner.send(run_id, effects).await
    }

    async fn send_committed(&self, run_id: &str, version: u64, effects: &[Effect]) -> Result<(), StoreError> {
        self.send_committed_except(run_id, version, effects, &[]).await
    }

    async fn send_committed_except(
        &self,
        run_id: &str,
        version: u64,
        effects: &[Effect],
        carried_out: &[Effect],
    ) -> Result<(), StoreError> {
        if self.failed.swap(true, Ordering::SeqCst) {
            self.inner.send_committed_except(run_id, version, effects, carried_out).await
        } else {
            self.broken.send_committed_except(run_id, version, effects, carried_out).await
        }
    }

    async fn resend_outstanding(&self, run_id: &str, outstanding: &[Effect]) -> Result<(), StoreError> {
        self.inner.resend_outstanding(run_id, outstanding).await
    }
}

/// A dispatcher app on the stack whose first committed send fails unenlisted.
async fn failing_once(stack: &Stack) -> AwsApp {
    let config = sdk_config().await;
    let broken = SqsEffects::new(
        aws_sdk_sqs::Client::new(&config),
        format!("{}-missing", stack.queue_url),
        format!("{}-missing", stack.completion_url),
        Arc::new(DynamoStore::new(aws_sdk_dynamodb::Client::new(&config), "trellis-e2e-missing-table")),
        Arc::new(SystemClock),
    );
    let sink = FailsOnce { broken, inner: stack.app.effects.clone(), failed: AtomicBool::new(false) };
    AwsApp {
        services: Arc::new(services(&stack.app, Arc::new(sink), true)),
        store: stack.app.store.clone(),
        effects: stack.app.effects.clone(),
        settings: stack.app.settings.clone(),
        task_context: TaskContext::default(),
    }
}

fn workflows() -> [Value; 5] {
    [
        json!({"id": "kid-mid", "name": "kid mid",
            "nodes": [{"id": "call", "typeId": "core.subWorkflow", "config": {"workflowId": "kid"}}]}),
        json!({"id": "kid-top", "name": "kid top",
            "nodes": [{"id": "call", "typeId": "core.subWorkflow", "config": {"workflowId": "kid-mid"}},
                      {"id": "after", "typeId": "core.noop"}],
            "edges": [{"id": "e", "sourceNodeId": "call", "targetNodeId": "after"}]}),
        json!({"id": "kid", "name": "kid", "nodes": [{"id": "work", "typeId": "core.noop"}]}),
        json!({"id": "kid-parent", "name": "kid parent",
            "nodes": [{"id": "call", "typeId": "core.subWorkflow", "config": {"workflowId": "kid"}},
                      {"id": "after", "typeId": "core.noop"}],
            "edges": [{"id": "e", "sourceNodeId": "call", "targetNodeId": "after"}]}),
        json!({"id": "proof-chain", "name": "chain", "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}],
            "edges": [{"id": "e", "sourceNodeId": "a", "targetNodeId": "b"}]}),
    ]
}

/// A stack with the workflows registered; redelivered tasks re-send a marker-less next step
/// after 1 ms (a redelivery comes after the visibility timeout, when its writer is surely
/// gone: here at once).
async fn prepared() -> Stack {
    require_emulators();
    let mut stack = stack().await;
    let mut settings = stack.app.settings.clone();
    settings.dispatcher_timeout_ms = 1;
    stack.app = AwsApp::new(settings, &sdk_config().await);
    for definition in workflows() {
        assert_eq!(stack.api("POST", "/v1/workflows", Some(definition)).await.0, 201);
    }
    stack
}

/// The versions of `run_id` that have a "sent" marker.
async fn markers(stack: &Stack, run_id: &str) -> Vec<u64> {
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let value = aws_sdk_dynamodb::types::AttributeValue::S;
    let found = client
        .query()
        .table_name(&stack.app.settings.table_name)
        .key_condition_expression("pk = :pk AND begins_with(sk, :marker)")
        .expression_attribute_values(":pk", value(format!("RUN#{run_id}")))
        .expression_attribute_values(":marker", value("S#".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("query markers");
    found.items().iter().filter_map(|item| item.get("sk")?.as_s().ok()?.trim_start_matches("S#").parse().ok()).collect()
}

/// The version of `run_id`'s page whose effects hold `matches`.
async fn page_with(stack: &Stack, run_id: &str, matches: impl Fn(&Effect) -> bool) -> u64 {
    let run = run(stack, run_id).await;
    for version in 1..=run.version {
        let item = stack
            .app
            .store
            .unsent_page(run_id, version)
            .await
            .expect("read page")
            .map(|page| page.effects.iter().any(&matches));
        if item == Some(true) {
            return version;
        }
    }
    panic!("no unsent page of {run_id} holds the effect");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_child_start_and_notice_carried_out_inline_leave_no_marker_and_nothing_to_resend() {
    let mut stack = prepared().await;
    let parent_id = stack.create(json!({"workflowId": "kid-parent"})).await;
    completes(&mut stack, &parent_id, 2).await;
    let child_id = child_of(&run(&stack, &parent_id).await);
    assert_eq!(kinds(&stack, "startChild") + kinds(&stack, "notifyParent"), 0, "both carried out inline");
    // The parent's creation (first step and deadline timer) keeps its marker; its child
    // start, the child's first step and its notice have none.
    assert_eq!(markers(&stack, &parent_id).await, [1]);
    assert_eq!(markers(&stack, &child_id).await, Vec::<u64>::new());
    assert_eq!(stack.app.store.unsent_pages(&parent_id).await.unwrap(), []);
    assert_eq!(stack.app.store.unsent_pages(&child_id).await.unwrap(), []);

    // Enlisted for the reconciler (as a failed send or an API commit would be), the pages
    // are still proven by the data: nothing is sent.
    let now = stack.app.services.clock.now();
    let parent = run(&stack, &parent_id).await;
    for version in 1..=parent.version {
        stack.app.store.enlist_outbox(&parent_id, version, now).await.unwrap();
    }
    for version in 1..=run(&stack, &child_id).await.version {
        stack.app.store.enlist_outbox(&child_id, version, now).await.unwrap();
    }
    assert_eq!(reconcile(&stack.app, 0).await.unwrap(), 0);
    assert_eq!(reconcile_full(&stack.app, 0).await.unwrap(), 0);
    assert!(stack.pump_once(false).await, "no message on either queue");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_crash_before_the_inline_child_start_is_repaired_once_by_the_reconciler() {
    let mut stack = prepared().await;
    let parent_id = stack.create(json!({"workflowId": "kid-parent"})).await;
    let (_, call) = next_step(&stack).await;
    // The parent's step commits its child start; the invocation dies before the child exists.
    process_task(&dying(&stack.app, false), &call, &TaskContext::default()).await.unwrap();
    let child_id = child_of(&run(&stack, &parent_id).await);
    assert!(stack.app.store.load_run(&child_id).await.unwrap().is_none(), "no child yet");
    let version = page_with(&stack, &parent_id, |effect| matches!(effect, Effect::StartChild { .. })).await;
    assert!(!markers(&stack, &parent_id).await.contains(&version));

    // Enlisted (the step's message is gone, say, and its send had failed), the page is
    // found by the reconciler: the start goes through the queue, once.
    let now = stack.app.services.clock.now();
    stack.app.store.enlist_outbox(&parent_id, version, now).await.unwrap();
    assert_eq!(reconcile(&stack.app, 0).await.unwrap(), 1, "the child start, sent");
    assert_eq!(reconcile(&stack.app, 0).await.unwrap(), 0, "marked once sent through the queue");
    completes(&mut stack, &parent_id, 2).await;
    assert_eq!(kinds(&stack, "startChild"), 1);
    one_child(&stack, &parent_id).await;
    assert_eq!(reconcile_full(&stack.app, 0).await.unwrap(), 0, "nothing left unsent anywhere");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_crash_after_the_parent_applied_the_inline_notice_is_repaired_once_by_redelivery() {
    let mut stack = prepared().await;
    let parent_id = stack.create(json!({"workflowId": "kid-parent"})).await;
    let (_, call) = next_step(&stack).await;
    process_task(&stack.app.services, &call, &TaskContext::default()).await.unwrap();
    let child_id = child_of(&run(&stack, &parent_id).await);
    let (message, work) = next_step(&stack).await;
    assert_eq!(work.run_id, child_id);
    // The child's step commits its end and the parent's notice is applied in the same
    // invocation (the parent's `call` completes, `after` is scheduled); the invocation dies
    // before the parent's next step is sent. The child's page needs no marker by then: the
    // parent no longer waits for it — but the parent's own page is unsent.
    process_task(&dying(&stack.app, true), &work, &TaskContext::default()).await.unwrap();
    assert!(run(&stack, &child_id).await.status.is_terminal());
    let parent = run(&stack, &parent_id).await;
    assert_eq!(parent.nodes["after"].status, trellis_core::run::NodeStatus::Scheduled, "the notice was applied");
    assert!(stack.receive(&stack.queue_url.clone()).await.is_none(), "the parent's next step was not sent");
    let pending = stack.app.store.unsent_pages(&child_id).await.unwrap();
    assert!(
        matches!(pending.as_slice(), [page] if matches!(page.outstanding().as_slice(), [Effect::NotifyParent { .. }])),
        "the notice counts as unsent while its parent has an unsent page: {pending:?}"
    );

    // The redelivered step finds the child ended and sends the notice again; the parent,
    // no longer waiting, re-sends its unsent page: `after` runs once.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let outcome = handle_message(&stack.app, &delivery(&message, 2)).await;
    assert!(matches!(outcome, MessageOutcome::Done(TaskResult::Repaired)), "{outcome:?}");
    completes(&mut stack, &parent_id, 2).await;
    assert_eq!(kinds(&stack, "notifyParent"), 1, "through the completion queue, as the fallback");
    one_child(&stack, &parent_id).await;
    assert_eq!(stack.app.store.unsent_pages(&child_id).await.unwrap(), []);
    assert_eq!(reconcile_full(&stack.app, 0).await.unwrap(), 0, "nothing left unsent anywhere");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_send_that_fails_unenlisted_is_redelivered_and_its_effect_arrives() {
    let mut stack = prepared().await;
    let run_id = stack.create(json!({"workflowId": "proof-chain"})).await;
    let (message, _) = next_step(&stack).await;
    // `a` commits; sending `b` fails and so does enlisting the page: the message is reported
    // failed although `a` was applied.
    let flaky = failing_once(&stack).await;
    let mut event = Stack::single(&message);
    event.records = vec![delivery(&message, 1)];
    let response = handle_batch(&flaky, event).await;
    let failed: Vec<String> = response.batch_item_failures.into_iter().map(|failure| failure.item_identifier).collect();
    assert_eq!(failed, [message.message_id().unwrap().to_owned()], "reported as a batch item failure");
    assert_eq!(run(&stack, &run_id).await.nodes["a"].status, trellis_core::run::NodeStatus::Completed);
    assert!(stack.receive(&stack.queue_url.clone()).await.is_none(), "b was not sent");

    // Redelivered, the step finds itself superseded and re-sends the unsent page.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let outcome = handle_message(&stack.app, &delivery(&message, 2)).await;
    assert!(matches!(outcome, MessageOutcome::Done(TaskResult::Repaired)), "{outcome:?}");
    completes(&mut stack, &run_id, 2).await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_send_that_fails_unenlisted_is_acknowledged_when_a_redelivery_would_be_the_last() {
    let mut stack = prepared().await;
    let run_id = stack.create(json!({"workflowId": "proof-chain"})).await;
    let (message, _) = next_step(&stack).await;
    // The next delivery would be the last allowed one, which fails the run: acknowledged,
    // the page is left to the reconciler's whole-table sweep.
    let flaky = failing_once(&stack).await;
    let outcome = handle_message(&flaky, &delivery(&message, MAX_RECEIVES - 1)).await;
    assert!(matches!(outcome, MessageOutcome::Done(TaskResult::Applied)), "{outcome:?}");
    assert!(stack.receive(&stack.queue_url.clone()).await.is_none(), "b was not sent");
    assert_eq!(reconcile_full(&stack.app, 0).await.unwrap(), 1, "the sweep sends b");
    completes(&mut stack, &run_id, 2).await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_notice_to_a_parent_that_ended_unsent_re_sends_the_parents_pages() {
    let mut stack = prepared().await;
    let top_id = stack.create(json!({"workflowId": "kid-top"})).await;
    // top's step creates mid; mid's step creates the leaf.
    for _ in 0..2 {
        let (_, call) = next_step(&stack).await;
        process_task(&stack.app.services, &call, &TaskContext::default()).await.unwrap();
    }
    let mid_id = child_of(&run(&stack, &top_id).await);
    let leaf_id = child_of(&run(&stack, &mid_id).await);
    let (message, work) = next_step(&stack).await;
    assert_eq!(work.run_id, leaf_id);
    // The leaf ends and mid, applying its notice in passing, ends too; the invocation dies
    // before mid's own notice to top is sent.
    process_task(&dying(&stack.app, true), &work, &TaskContext::default()).await.unwrap();
    assert!(run(&stack, &mid_id).await.status.is_terminal());
    assert_eq!(run(&stack, &top_id).await.nodes["call"].status, trellis_core::run::NodeStatus::WaitingChild);

    // The leaf's redelivered step sends its notice again (mid has an unsent page); mid, ended,
    // ignores the notice but re-sends its unsent page — on the notice's first delivery.
    let outcome = handle_message(&stack.app, &delivery(&message, 2)).await;
    assert!(matches!(outcome, MessageOutcome::Done(TaskResult::Repaired)), "{outcome:?}");
    completes(&mut stack, &top_id, 2).await;
    assert_eq!(kinds(&stack, "notifyParent"), 2, "the leaf's notice, then mid's");
    one_child(&stack, &top_id).await;
    assert_eq!(reconcile_full(&stack.app, 0).await.unwrap(), 0, "nothing left unsent anywhere");
}
