//! Child runs on the embedded store: the child is created in the call that committed its
//! parent's step where the host carries child starts out itself (the serverless host does;
//! the embedded host's commit already wrote the task), and a child the parent's deadline
//! covers has no deadline timer of its own and is still cancelled when that deadline passes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use trellis_core::engine::Effect;
use trellis_core::limits::HostLimits;
use trellis_core::ports::{IdGenerator, RunStore, Task, GLOBAL_NAMESPACE};
use trellis_core::run::Principal;
use trellis_core::service::{CreateOutcome, Ports, Services};
use trellis_core::{RunState, RunStatus};
use trellis_store_sqlite::SqliteStore;
use trellis_worker::{process_task, run_loop, LocalNotifier, SystemClock, TaskContext, TaskResult, WorkerOptions};

struct Ids;

impl IdGenerator for Ids {
    fn run_id(&self) -> String {
        format!("run-{:016x}", rand_u64())
    }
}

fn rand_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

struct Host {
    sqlite: Arc<SqliteStore>,
    notifier: Arc<LocalNotifier>,
    services: Arc<Services>,
}

async fn host(inline_children: bool) -> Host {
    let sqlite = Arc::new(SqliteStore::open_in_memory().unwrap());
    let notifier = Arc::new(LocalNotifier::default());
    let ports = Ports {
        store: sqlite.clone(),
        effects: sqlite.clone(),
        clock: Arc::new(SystemClock),
        ids: Arc::new(Ids),
        notifier: notifier.clone(),
    };
    let services = Arc::new(Services::new(ports, HostLimits::default()).with_inline_children(inline_children));
    let child = json!({"id": "child", "name": "child", "nodes": [{"id": "x", "typeId": "core.delay", "config": {"delayMs": 60000}}]});
    services.put_workflow(GLOBAL_NAMESPACE, child).await.unwrap();
    for (id, propagate) in [("parent", true), ("detached-parent", false)] {
        let parent = json!({"id": id, "name": id,
            "nodes": [{"id": "call", "typeId": "core.subWorkflow", "config": {"workflowId": "child", "propagateCancellation": propagate}},
                      {"id": "after", "typeId": "core.noop"}],
            "edges": [{"id": "e", "sourceNodeId": "call", "targetNodeId": "after"}]});
        services.put_workflow(GLOBAL_NAMESPACE, parent).await.unwrap();
    }
    Host { sqlite, notifier, services }
}

async fn create(services: &Services, workflow_id: &str, configurable: Option<Value>) -> RunState {
    let principal =
        Principal { tenant: "t".into(), subject: "s".into(), key_class: "api-key".into(), test_scope: false };
    let respond = |_: &RunState| (201, json!({}));
    let mut body = json!({"workflowId": workflow_id});
    if let Some(configurable) = configurable {
        body["configurable"] = configurable;
    }
    match services.create_run(&principal, &body, None, &respond).await.unwrap() {
        CreateOutcome::Created(run) => *run,
        other => panic!("unexpected {other:?}"),
    }
}

/// Runs the parent's first step (`call`) as its task; returns the child's id.
async fn step_call(host: &Host, parent: &RunState) -> String {
    let effect = Effect::Step { node_id: "call".into(), activation: 1, due_at: 0 };
    let task = Task { id: effect.task_id(&parent.run_id), run_id: parent.run_id.clone(), effect, deliveries: 1 };
    let result = process_task(&host.services, &task, &TaskContext::default()).await.unwrap();
    assert_eq!(result, TaskResult::Applied);
    let parent = host.sqlite.load_run(&parent.run_id).await.unwrap().unwrap();
    parent.nodes["call"].child_run_id.clone().expect("the node waits for a child")
}

fn timers(effects: &[Effect]) -> usize {
    effects.iter().filter(|effect| matches!(effect, Effect::Deadline { .. })).count()
}

#[tokio::test]
async fn the_child_is_created_in_the_call_that_committed_its_parents_step_where_the_host_does_so() {
    for inline in [true, false] {
        let host = host(inline).await;
        let parent = create(&host.services, "parent", None).await;
        let child_id = step_call(&host, &parent).await;
        let child = host.sqlite.load_run(&child_id).await.unwrap();
        assert_eq!(child.is_some(), inline, "inline: {inline}");
        let start_child = host.sqlite.pending_effects(&parent.run_id).await.unwrap();
        assert!(
            start_child.iter().any(|effect| matches!(effect, Effect::StartChild { .. })),
            "the commit still holds the child's start (the fallback): {start_child:?}"
        );
        // The start-child task (the only path without inline starts, the fallback with them)
        // creates the child exactly once.
        let effect = start_child.into_iter().find(|effect| matches!(effect, Effect::StartChild { .. })).unwrap();
        let task = Task { id: effect.task_id(&parent.run_id), run_id: parent.run_id.clone(), effect, deliveries: 1 };
        process_task(&host.services, &task, &TaskContext::default()).await.unwrap();
        process_task(&host.services, &task, &TaskContext::default()).await.unwrap();
        let child = host.sqlite.load_run(&child_id).await.unwrap().expect("the child exists");
        assert_eq!(child.status, RunStatus::Running);
        assert_eq!(child.version, 1, "created once, its first step not run yet");
    }
}

#[tokio::test]
async fn a_child_the_parents_deadline_covers_has_no_timer_of_its_own_and_a_detached_one_does() {
    let host = host(true).await;
    for (workflow, covered) in [("parent", true), ("detached-parent", false)] {
        let parent = create(&host.services, workflow, None).await;
        assert_eq!(timers(&host.sqlite.pending_effects(&parent.run_id).await.unwrap()), 1, "the parent's own timer");
        let child_id = step_call(&host, &parent).await;
        let child = host.sqlite.load_run(&child_id).await.unwrap().unwrap();
        assert_eq!(child.parent.as_ref().map(|link| link.deadline_covered), Some(covered), "{workflow}");
        let pending = host.sqlite.pending_effects(&child_id).await.unwrap();
        assert_eq!(timers(&pending), usize::from(!covered), "{workflow}: {pending:?}");
        assert_eq!(child.limits, parent.limits, "the child's limit is the parent's, and starts later");
        assert!(child.deadline() >= parent.deadline());
    }
}

#[tokio::test]
async fn a_covered_child_is_cancelled_when_the_parents_deadline_passes() {
    let host = host(false).await;
    let parent = create(&host.services, "parent", Some(json!({"runTimeoutMs": 300}))).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let options = WorkerOptions { idle_poll: Duration::from_millis(20), ..WorkerOptions::default() };
    let worker =
        tokio::spawn(run_loop(host.services.clone(), host.sqlite.clone(), host.notifier.clone(), options, stopped));
    let started = Instant::now();
    let (parent, child) = loop {
        let parent = host.services.get_run("t", &parent.run_id).await.unwrap();
        let child_id = parent.nodes.get("call").and_then(|node| node.child_run_id.clone());
        let child = match &child_id {
            Some(id) => host.sqlite.load_run(id).await.unwrap(),
            None => None,
        };
        if let Some(child) = child.filter(|child| child.status.is_terminal() && parent.status.is_terminal()) {
            break (parent, child);
        }
        assert!(started.elapsed() < Duration::from_secs(10), "not ended: {:?}", parent.status);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.send(true).unwrap();
    worker.await.unwrap();
    assert!(child.parent.as_ref().is_some_and(|link| link.deadline_covered), "the child had no timer of its own");
    assert_eq!(parent.status, RunStatus::Failed);
    assert_eq!(parent.error.map(|error| error.code), Some("run_timeout".to_owned()));
    assert_eq!(child.status, RunStatus::Cancelled, "the parent's deadline ended the child");
    assert_eq!(child.cancel_reason.as_deref(), Some(trellis_core::engine::PARENT_CANCELLED));
}
