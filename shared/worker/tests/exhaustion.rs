//! A task that keeps failing is not retried forever: on its last allowed delivery its run
//! fails with `step_delivery_exhausted`, as on the serverless dispatcher.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use trellis_core::engine::Effect;
use trellis_core::interrupt::Vote;
use trellis_core::limits::HostLimits;
use trellis_core::ports::{
    CreateResult, Expect, HostSettings, IdGenerator, IdempotencyClaim, IdempotencyRecord, Record, RecordStore,
    RunFilter, RunPosition, RunStore, StoredWorkflow, WorkflowStore, GLOBAL_NAMESPACE,
};
use trellis_core::run::Principal;
use trellis_core::service::{CreateOutcome, Ports, Services};
use trellis_core::timefmt::Millis;
use trellis_core::{RunEvent, RunState, RunStatus, StoreError};
use trellis_store_sqlite::SqliteStore;
use trellis_worker::{run_loop, LocalNotifier, SystemClock, WorkerOptions};

/// The SQLite store, except that every commit that starts a node fails.
struct FailingSteps(Arc<SqliteStore>);

#[async_trait]
impl WorkflowStore for FailingSteps {
    async fn put_workflow(&self, workflow: &StoredWorkflow, now: Millis) -> Result<(), StoreError> {
        self.0.put_workflow(workflow, now).await
    }
    async fn latest_workflow(&self, namespace: &str, id: &str) -> Result<Option<StoredWorkflow>, StoreError> {
        self.0.latest_workflow(namespace, id).await
    }
    async fn workflow_version(&self, ns: &str, id: &str, hash: &str) -> Result<Option<StoredWorkflow>, StoreError> {
        self.0.workflow_version(ns, id, hash).await
    }
    async fn workflow_by_label(&self, ns: &str, id: &str, v: &str) -> Result<Option<StoredWorkflow>, StoreError> {
        self.0.workflow_by_label(ns, id, v).await
    }
    async fn workflow_ids(&self, namespace: &str) -> Result<Vec<String>, StoreError> {
        self.0.workflow_ids(namespace).await
    }
}

#[async_trait]
impl trellis_core::ports::BlobStore for FailingSteps {
    async fn put_blobs(&self, run: &RunState, blobs: &[trellis_core::blob::Blob]) -> Result<(), StoreError> {
        self.0.put_blobs(run, blobs).await
    }
    async fn blob(&self, run_id: &str, reference: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.blob(run_id, reference).await
    }
}

#[async_trait]
impl HostSettings for FailingSteps {
    async fn setting(&self, key: &str) -> Result<Option<serde_json::Value>, StoreError> {
        self.0.setting(key).await
    }
    async fn put_setting(&self, key: &str, value: &serde_json::Value) -> Result<(), StoreError> {
        self.0.put_setting(key, value).await
    }
}

#[async_trait]
impl RecordStore for FailingSteps {
    async fn record(&self, kind: &str, scope: &str, key: &str, now: Millis) -> Result<Option<Record>, StoreError> {
        self.0.record(kind, scope, key, now).await
    }
    async fn put_record(
        &self,
        kind: &str,
        scope: &str,
        key: &str,
        value: &serde_json::Value,
        expires_at: Option<Millis>,
        expect: Expect,
        now: Millis,
    ) -> Result<u64, StoreError> {
        self.0.put_record(kind, scope, key, value, expires_at, expect, now).await
    }
    async fn delete_record(
        &self,
        kind: &str,
        scope: &str,
        key: &str,
        expect: Expect,
        now: Millis,
    ) -> Result<bool, StoreError> {
        self.0.delete_record(kind, scope, key, expect, now).await
    }
    async fn records(
        &self,
        kind: &str,
        scope: &str,
        after: Option<&str>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<Record>, StoreError> {
        self.0.records(kind, scope, after, limit, now).await
    }
}

#[async_trait]
impl RunStore for FailingSteps {
    async fn create_run(
        &self,
        run: &RunState,
        events: &[RunEvent],
        effects: &[Effect],
        idempotency: Option<&IdempotencyRecord>,
    ) -> Result<CreateResult, StoreError> {
        self.0.create_run(run, events, effects, idempotency).await
    }
    async fn load_run(&self, run_id: &str) -> Result<Option<RunState>, StoreError> {
        self.0.load_run(run_id).await
    }
    async fn commit(&self, run: &RunState, v: u64, events: &[RunEvent], effects: &[Effect]) -> Result<(), StoreError> {
        if events.iter().any(|event| event.event_type == "node.started") {
            return Err(StoreError::Unavailable("injected failure".into()));
        }
        self.0.commit(run, v, events, effects).await
    }
    async fn events_after(&self, run_id: &str, after: Option<u64>, limit: usize) -> Result<Vec<RunEvent>, StoreError> {
        self.0.events_after(run_id, after, limit).await
    }
    async fn vote(&self, run_id: &str, interrupt_id: &str, voter: &str) -> Result<Option<Vote>, StoreError> {
        self.0.vote(run_id, interrupt_id, voter).await
    }
    async fn claim_idempotency(
        &self,
        t: &str,
        e: &str,
        k: &str,
        d: &str,
        now: Millis,
        until: Millis,
    ) -> Result<IdempotencyClaim, StoreError> {
        self.0.claim_idempotency(t, e, k, d, now, until).await
    }
    async fn complete_idempotency(&self, record: &IdempotencyRecord) -> Result<(), StoreError> {
        self.0.complete_idempotency(record).await
    }
    async fn abandon_idempotency(&self, t: &str, e: &str, k: &str) -> Result<(), StoreError> {
        self.0.abandon_idempotency(t, e, k).await
    }
    async fn pending_effects(&self, run_id: &str) -> Result<Vec<Effect>, StoreError> {
        self.0.pending_effects(run_id).await
    }
    async fn list_runs(
        &self,
        tenant: &str,
        filter: &RunFilter,
        after: Option<&RunPosition>,
        limit: usize,
    ) -> Result<Vec<RunState>, StoreError> {
        self.0.list_runs(tenant, filter, after, limit).await
    }
    async fn delete_run(&self, run_id: &str) -> Result<u64, StoreError> {
        self.0.delete_run(run_id).await
    }
    async fn run_bytes(&self, run_id: &str) -> Result<u64, StoreError> {
        self.0.run_bytes(run_id).await
    }
}

struct FixedIds;
impl IdGenerator for FixedIds {
    fn run_id(&self) -> String {
        "run-poison".to_owned()
    }
}

#[tokio::test]
async fn a_task_failing_on_its_last_delivery_fails_its_run() {
    let sqlite = Arc::new(SqliteStore::open_in_memory().unwrap());
    let notifier = Arc::new(LocalNotifier::default());
    let ports = Ports {
        store: Arc::new(FailingSteps(sqlite.clone())),
        effects: sqlite.clone(),
        clock: Arc::new(SystemClock),
        ids: Arc::new(FixedIds),
        notifier: notifier.clone(),
    };
    let services = Arc::new(Services::new(ports, HostLimits::default()));
    services
        .put_workflow(
            GLOBAL_NAMESPACE,
            json!({"id": "one", "name": "one", "nodes": [{"id": "a", "typeId": "core.noop"}]}),
        )
        .await
        .unwrap();
    let principal =
        Principal { tenant: "t".into(), subject: "s".into(), key_class: "api-key".into(), test_scope: false };
    let respond = |_: &RunState| (201, json!({}));
    let created = services.create_run(&principal, &json!({"workflowId": "one"}), None, &respond).await.unwrap();
    assert!(matches!(created, CreateOutcome::Created(_)));

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let options = WorkerOptions { max_deliveries: 2, idle_poll: Duration::from_millis(50), ..WorkerOptions::default() };
    let worker = tokio::spawn(run_loop(services.clone(), sqlite.clone(), notifier, options, stopped));
    let started = Instant::now();
    let run = loop {
        let run = services.get_run("t", "run-poison").await.unwrap();
        if run.status.is_terminal() {
            break run;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the run never failed: {:?}", run.status);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.send(true).unwrap();
    worker.await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.unwrap().code, "step_delivery_exhausted");
    assert!(
        sqlite.pending_effects("run-poison").await.unwrap().iter().all(|e| !matches!(e, Effect::Step { .. })),
        "the poison task is gone"
    );
}
