//! What the child-run suites (`emulated_children`, `emulated_proofs`) share: use cases whose
//! process "dies" after each commit, reads of a run and of the step queue, and the checks of
//! a finished parent.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsMessage;
use trellis_aws::app::node_registry;
use trellis_aws::message::StepMessage;
use trellis_aws::AwsApp;
use trellis_core::engine::Effect;
use trellis_core::ports::{EffectSink, IdGenerator, RunStore, Task};
use trellis_core::service::{Ports, Services};
use trellis_core::{RunState, StoreError};
use trellis_worker::SystemClock;

use super::{assert_log_well_formed, types, Stack, SPEC_DEADLINE};

/// Sends nothing and fails: the process died right after the commit.
pub struct Dead;

#[async_trait]
impl EffectSink for Dead {
    async fn send(&self, _run_id: &str, _effects: &[Effect]) -> Result<(), StoreError> {
        Err(StoreError::Unavailable("the process died".into()))
    }
}

/// Fresh run ids.
pub struct Ids;

impl IdGenerator for Ids {
    fn run_id(&self) -> String {
        format!("run-{}", uuid::Uuid::new_v4())
    }
}

/// The use cases of `app`'s store sending through `effects`.
pub fn services(app: &AwsApp, effects: Arc<dyn EffectSink>, inline_children: bool) -> Services {
    let ports = Ports {
        store: app.store.clone(),
        effects,
        clock: Arc::new(SystemClock),
        ids: Arc::new(Ids),
        notifier: Arc::new(trellis_aws::notifier::PollingNotifier),
    };
    Services::new(ports, app.settings.limits)
        .with_nodes(node_registry(&app.settings))
        .with_inline_children(inline_children)
}

/// The use cases of `app`'s store whose process dies after each commit: with
/// `inline_children`, after carrying out the child starts and notices its commits make,
/// else before.
pub fn dying(app: &AwsApp, inline_children: bool) -> Services {
    services(app, Arc::new(Dead), inline_children)
}

/// The run as stored.
pub async fn run(stack: &Stack, run_id: &str) -> RunState {
    stack.app.store.load_run(run_id).await.expect("read").expect("the run exists")
}

/// The child the parent's `call` node waits for.
pub fn child_of(parent: &RunState) -> String {
    parent.nodes["call"].child_run_id.clone().expect("the node waits for a child")
}

/// The next message on the step queue (taken off it) and its task.
pub async fn next_step(stack: &Stack) -> (aws_sdk_sqs::types::Message, Task) {
    for _ in 0..100 {
        if let Some(message) = stack.receive(&stack.queue_url).await {
            let receipt = message.receipt_handle().unwrap();
            stack.sqs.delete_message().queue_url(&stack.queue_url).receipt_handle(receipt).send().await.unwrap();
            let task = StepMessage::decode(message.body().unwrap()).unwrap().task(1);
            return (message, task);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no step message arrived");
}

/// `message` as the event-source mapping hands it over on delivery `count`.
pub fn delivery(message: &aws_sdk_sqs::types::Message, count: u32) -> SqsMessage {
    let mut event = Stack::as_event(message);
    event.attributes.insert("ApproximateReceiveCount".into(), count.to_string());
    event
}

/// How many invocations of `kind` the stack made.
pub fn kinds(stack: &Stack, kind: &str) -> usize {
    stack.invocations.iter().filter(|((_, k), _)| k == kind).map(|(_, count)| count).sum()
}

/// Drives `run_id` to its end; checks it completed with every node once.
pub async fn completes(stack: &mut Stack, run_id: &str, nodes: usize) {
    let snapshot = stack.pump_until_terminal(run_id, SPEC_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let events = stack.events(run_id).await;
    assert_log_well_formed(&events);
    let completed = types(&events).iter().filter(|t| *t == "node.completed").count();
    assert_eq!(completed, nodes, "{:?}", types(&events));
}

/// The parent has one child, started once.
pub async fn one_child(stack: &Stack, parent_id: &str) {
    let parent = run(stack, parent_id).await;
    assert_eq!(parent.child_runs.len(), 1, "{:?}", parent.child_runs);
    let events = stack.events(&parent.child_runs[0].run_id).await;
    assert_eq!(types(&events).iter().filter(|t| *t == "run.started").count(), 1, "{:?}", types(&events));
}
