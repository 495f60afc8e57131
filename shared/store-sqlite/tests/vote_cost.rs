//! A vote on an approval gate costs the same store work however many votes were cast before
//! it: the rows read and written, and the bytes of state they carry, are the same at vote 10
//! and at vote 10,000 (votes are stored by voter; the run's state keeps a tally). The latency
//! figures are `trellis-bench votes`.

use std::sync::Arc;

use trellis_core::engine::{self, Input};
use trellis_core::model::Workflow;
use trellis_core::ports::{RunStore, WorkflowStore};
use trellis_core::service::Services;
use trellis_core::testing::votes::{self, GATE_RUN_ID};
use trellis_store_sqlite::{RowUsage, SqliteStore};

/// The store work of one vote by a new voter.
async fn vote(services: &Services, store: &SqliteStore, voter: usize) -> RowUsage {
    let before = store.usage();
    services.resolve_interrupt(Some("t"), GATE_RUN_ID, votes::vote(voter)).await.expect("vote recorded");
    store.usage().since(&before)
}

#[tokio::test]
async fn a_vote_reads_and_writes_the_same_rows_at_vote_10_and_at_vote_10000() {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    let stored = votes::gate_workflow();
    let workflow = Workflow::compile(stored.document.clone()).unwrap();
    store.put_workflow(&stored, 0).await.unwrap();
    let mut run = trellis_core::testing::pending_run(&workflow, GATE_RUN_ID, "t");
    let mut events = engine::apply(&workflow, &mut run, Input::Start, 1).events;
    events.extend(engine::apply(&workflow, &mut run, Input::Step { node_id: "gate".into(), activation: 1 }, 2).events);
    run.version = 1;
    store.create_run(&run, &events, &[], None).await.unwrap();
    let services = votes::services(store.clone());

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
    let run = store.load_run(GATE_RUN_ID).await.unwrap().unwrap();
    assert_eq!(run.interrupts[0].tally(), (10_000, 0));
    println!("per vote at 10: {at_10:?}; at 10,000: {at_10000:?}");
}
