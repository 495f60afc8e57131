//! A vote on an approval gate costs the same store work however many votes were cast before
//! it: the rows read and written, and the bytes of state they carry, are the same at vote 10
//! and at vote 10,000 (votes are stored by voter; the run's state keeps a tally). The latency
//! figures are `trellis-bench votes`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use trellis_core::engine::{self, Input};
use trellis_core::interrupt::{Resolution, Resolver};
use trellis_core::limits::HostLimits;
use trellis_core::model::{content_hash, Workflow};
use trellis_core::ports::{Clock, IdGenerator, Notifier, RunStore, StoredWorkflow, WorkflowStore, GLOBAL_NAMESPACE};
use trellis_core::service::{Ports, Services};
use trellis_core::timefmt::Millis;
use trellis_store_sqlite::{RowUsage, SqliteStore};

struct Ticking(AtomicU64);
impl Clock for Ticking {
    fn now(&self) -> Millis {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

struct NoIds;
impl IdGenerator for NoIds {
    fn run_id(&self) -> String {
        unreachable!("the test creates its run directly")
    }
}

struct Quiet;
#[async_trait]
impl Notifier for Quiet {
    fn committed(&self, _run_id: &str) {}
    fn generation(&self) -> u64 {
        0
    }
    async fn wait(&self, _seen: u64, timeout: Duration) {
        tokio::time::sleep(timeout).await;
    }
}

/// The store work of one vote by a new voter.
async fn vote(services: &Services, store: &SqliteStore, voter: usize) -> RowUsage {
    let before = store.usage();
    let resolution = Resolution {
        node_id: "gate".into(),
        interrupt_id: None,
        value: json!({"action": "accept", "voter": format!("voter-{voter:05}")}),
        resolver: Resolver::Principal("bench".into()),
        prior_vote: None,
    };
    services.resolve_interrupt(Some("t"), "run-votes", resolution).await.expect("vote recorded");
    store.usage().since(&before)
}

#[tokio::test]
async fn a_vote_reads_and_writes_the_same_rows_at_vote_10_and_at_vote_10000() {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let document = json!({
        "id": "many-votes", "name": "Many votes",
        "nodes": [{"id": "gate", "typeId": "core.approvalGate", "config": {"requiredApprovals": 1_000_000}}]
    });
    let workflow = Workflow::compile(document.clone()).unwrap();
    let stored = StoredWorkflow {
        namespace: GLOBAL_NAMESPACE.into(),
        workflow_id: "many-votes".into(),
        version: "1".into(),
        content_hash: content_hash(&document),
        document,
    };
    store.put_workflow(&stored, 0).await.unwrap();
    let mut run = trellis_core::testing::pending_run(&workflow, "run-votes", "t");
    let mut events = engine::apply(&workflow, &mut run, Input::Start, 1).events;
    events.extend(engine::apply(&workflow, &mut run, Input::Step { node_id: "gate".into(), activation: 1 }, 2).events);
    run.version = 1;
    store.create_run(&run, &events, &[], None).await.unwrap();
    let ports = Ports {
        store: store.clone(),
        effects: store.clone(),
        clock: Arc::new(Ticking(AtomicU64::new(10))),
        ids: Arc::new(NoIds),
        notifier: Arc::new(Quiet),
    };
    let services = Services::new(ports, HostLimits::default());

    let mut at_10 = RowUsage::default();
    let mut at_10000 = RowUsage::default();
    for voter in 1..=10_000 {
        let usage = vote(&services, &store, voter).await;
        match voter {
            10 => at_10 = usage,
            10_000 => at_10000 = usage,
            _ => {}
        }
    }
    assert_eq!(
        (at_10.rows_read, at_10.rows_written),
        (at_10000.rows_read, at_10000.rows_written),
        "rows per vote at 10 vs 10,000: {at_10:?} vs {at_10000:?}"
    );
    // The same documents; only the numbers in them (tally, sequence, voter id) grow a few digits.
    assert!(
        at_10000.bytes_read <= at_10.bytes_read + 32 && at_10000.bytes_written <= at_10.bytes_written + 32,
        "bytes per vote at 10 vs 10,000: {at_10:?} vs {at_10000:?}"
    );
    let run = store.load_run("run-votes").await.unwrap().unwrap();
    assert_eq!(run.interrupts[0].tally(), (10_000, 0));
    println!("per vote at 10: {at_10:?}; at 10,000: {at_10000:?}");
}
