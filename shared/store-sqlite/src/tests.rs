//! The shared store and queue contracts, against an in-memory database and a file in WAL mode.

use std::sync::Arc;

use trellis_core::testing::{queue_contract, store_contract};

use crate::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_memory_store_meets_the_contracts() {
    store_contract(Arc::new(SqliteStore::open_in_memory().unwrap())).await;
    queue_contract(Arc::new(SqliteStore::open_in_memory().unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_meets_the_contracts() {
    let dir = tempfile::tempdir().unwrap();
    store_contract(Arc::new(SqliteStore::open(&dir.path().join("store.db")).unwrap())).await;
    queue_contract(Arc::new(SqliteStore::open(&dir.path().join("queue.db")).unwrap())).await;
}

#[test]
fn a_second_process_cannot_open_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trellis.db");
    let _owner = SqliteStore::open(&path).unwrap();
    assert!(SqliteStore::open(&path).is_err());
}

#[tokio::test]
async fn a_layout_1_database_is_migrated_and_keeps_its_events() {
    use trellis_core::ports::RunStore;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let old = rusqlite::Connection::open(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE events (run_id TEXT NOT NULL, sequence INTEGER NOT NULL, type TEXT NOT NULL, node_id TEXT,
                 payload TEXT NOT NULL, timestamp INTEGER NOT NULL, PRIMARY KEY (run_id, sequence)) WITHOUT ROWID;
             INSERT INTO events VALUES ('run-old', 0, 'run.started', NULL, '{}', 1);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let events = store.events_after("run-old", None, 10).await.unwrap();
    assert_eq!((events.len(), events[0].causation), (1, None));
    let raw = store.events_after_json("run-old", None, 10).await.unwrap();
    let parsed: Vec<_> = events.into_iter().map(trellis_core::ports::StoredEvent::of).collect();
    assert_eq!(raw, parsed);
    drop(store);
    let reopened = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = reopened.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
    assert_eq!(version, crate::schema::SCHEMA_VERSION);
}

#[tokio::test]
async fn a_claim_left_by_a_killed_process_is_released_at_open() {
    use trellis_core::ports::{IdempotencyClaim, RunStore};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trellis.db");
    let (now, lease_until) = (1_000, 31_000);
    {
        let killed = SqliteStore::open(&path).unwrap();
        let claim = killed.claim_idempotency("t", "POST /v1/runs", "k", "d", now, lease_until).await;
        assert_eq!(claim.unwrap(), IdempotencyClaim::Claimed);
        // Dropped without completing or abandoning: what a kill -9 leaves behind.
    }
    let restarted = SqliteStore::open(&path).unwrap();
    let claim = restarted.claim_idempotency("t", "POST /v1/runs", "k", "d", now + 1, lease_until + 1).await;
    assert_eq!(claim.unwrap(), IdempotencyClaim::Claimed, "the key proceeds at once, within the lease");
}

#[tokio::test]
async fn finished_idempotency_records_past_the_retention_are_deleted_at_open() {
    use trellis_core::limits::IDEMPOTENCY_RETENTION_MS;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trellis.db");
    drop(SqliteStore::open(&path).unwrap());
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        let fresh = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        let old = fresh - IDEMPOTENCY_RETENTION_MS as i64 - 1;
        for (key, at) in [("old", old), ("fresh", fresh)] {
            raw.execute(
                "INSERT INTO idempotency (tenant, endpoint, key, request_digest, state, status, body, created_at)
                 VALUES ('t', 'POST /v1/runs', ?1, 'd', 'completed', 201, '{}', ?2)",
                rusqlite::params![key, at],
            )
            .unwrap();
        }
    }
    let store = SqliteStore::open(&path).unwrap();
    let counts = store.table_counts().unwrap();
    assert!(counts.contains(&("idempotency", 1)), "{counts:?}");
}

/// A database written by the previous layout (2): votes lived in the run's state. It opens
/// at layout 3, its votes still count, and a repeat vote of one of its voters replaces it.
#[tokio::test]
async fn a_layout_2_database_keeps_the_votes_in_its_states() {
    use serde_json::json;
    use trellis_core::engine::{self, Input};
    use trellis_core::interrupt::{Resolution, Resolver, Vote};
    use trellis_core::ports::RunStore;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let workflow = trellis_core::model::Workflow::compile(json!({
        "id": "legacy-quorum", "name": "Legacy quorum",
        "nodes": [{"id": "gate", "typeId": "core.approvalGate", "config": {"requiredApprovals": 3}}]
    }))
    .unwrap();
    let mut run = trellis_core::testing::pending_run(&workflow, "run-legacy", "t");
    engine::apply(&workflow, &mut run, Input::Start, 1);
    engine::apply(&workflow, &mut run, Input::Step { node_id: "gate".into(), activation: 1 }, 2);
    // The layout-2 shape: the votes in the occurrence, no tally.
    let votes =
        ["a", "b"].map(|voter| Vote { voter: voter.into(), decided_by: "k".into(), action: "accept".into(), at: 3 });
    run.interrupts[0].votes = votes.to_vec();
    run.version = 4;
    {
        drop(SqliteStore::open(&path).unwrap());
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute_batch("DROP TABLE votes; DROP INDEX idempotency_by_age; PRAGMA user_version = 2;").unwrap();
        raw.execute(
            "INSERT INTO runs (run_id, tenant, workflow_id, status, version, created_at, state)
             VALUES ('run-legacy', 't', 'legacy-quorum', 'waiting-approval', 4, 1, ?1)",
            [serde_json::to_string(&run).unwrap()],
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let mut loaded = store.load_run("run-legacy").await.unwrap().unwrap();
    assert_eq!(loaded.interrupts[0].tally(), (2, 0), "the layout-2 votes count");
    let interrupt_id = loaded.interrupts[0].id.clone();
    assert_eq!(store.vote("run-legacy", &interrupt_id, "a").await.unwrap(), None, "not in the votes table");
    // `a` votes again: it replaces its layout-2 vote, so the quorum of 3 is not reached.
    let again = Input::Resolve(Resolution {
        node_id: "gate".into(),
        interrupt_id: None,
        value: json!({"action": "accept", "voter": "a"}),
        resolver: Resolver::Principal("k".into()),
        prior_vote: None,
    });
    let outcome = engine::apply(&workflow, &mut loaded, again, 5);
    assert_eq!(loaded.interrupts[0].tally(), (2, 0));
    loaded.version = 5;
    store.commit(&loaded, 4, &outcome.events, &outcome.effects).await.unwrap();
    assert_eq!(store.vote("run-legacy", &interrupt_id, "a").await.unwrap().unwrap().at, 5);
    let reopened = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY);
    drop(store);
    let version: i64 = reopened.unwrap().query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
    assert_eq!(version, crate::schema::SCHEMA_VERSION);
}

#[tokio::test]
async fn claims_and_acknowledgements_skip_their_fsync_but_leave_every_later_commit_fully_synchronous() {
    use trellis_core::engine::Effect;
    use trellis_core::ports::{LocalQueue, RunStore};
    use trellis_core::testing::{chain_workflow, pending_run};

    let synchronous =
        |store: &SqliteStore| -> i64 { store.lock().query_row("PRAGMA synchronous", [], |row| row.get(0)).unwrap() };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trellis.db");
    let step = Effect::Step { node_id: "a".into(), activation: 1, due_at: 0 };
    {
        let store = SqliteStore::open(&path).unwrap();
        store.create_run(&pending_run(&chain_workflow(), "run-1", "t"), &[], &[step], None).await.unwrap();
        let tasks = store.claim_due(10, 30_000, 10).await.unwrap();
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].deliveries, 1);
        assert_eq!(synchronous(&store), 2, "FULL again after the claim");
        // Dropped with the task leased: what a killed process leaves behind.
    }
    let store = SqliteStore::open(&path).unwrap();
    let tasks = store.claim_due(20, 30_000, 10).await.unwrap();
    assert_eq!(tasks.len(), 1, "the lease is released at open");
    assert_eq!(tasks[0].deliveries, 2, "the first delivery was counted (a crash loop still runs out of deliveries)");
    store.ack(&tasks[0].id).await.unwrap();
    assert_eq!(synchronous(&store), 2, "FULL again after the acknowledgement");
    assert!(store.claim_due(30, 30_000, 10).await.unwrap().is_empty());
}

/// A database of the previous layout (5, before host records): its run, events and tasks
/// read back as written after the open adds the `records` table at layout 6, and host
/// records work at once.
#[tokio::test]
async fn a_layout_5_database_gains_the_host_records_and_keeps_its_runs() {
    use serde_json::json;
    use trellis_core::engine::{self, Effect, Input};
    use trellis_core::ports::{Expect, RecordStore, RunStore};
    use trellis_core::testing::{chain_workflow, pending_run};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let workflow = chain_workflow();
    let (run, events, effects) = {
        let store = SqliteStore::open(&path).unwrap();
        let mut run = pending_run(&workflow, "run-5", "t");
        store.create_run(&run, &[], &[], None).await.unwrap();
        let outcome = engine::apply(&workflow, &mut run, Input::Start, 2);
        run.version = 1;
        store.commit(&run, 0, &outcome.events, &outcome.effects).await.unwrap();
        (run, outcome.events, outcome.effects)
    };
    {
        // What layout 5 wrote: everything but the host records.
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute_batch(
            "DROP INDEX records_by_expiry; DROP TABLE records; DROP INDEX run_blobs_by_run; DROP TABLE run_blobs;
             PRAGMA user_version = 5;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.load_run("run-5").await.unwrap().unwrap(), run);
    assert_eq!(store.events_after("run-5", None, 100).await.unwrap(), events);
    let pending = store.pending_effects("run-5").await.unwrap();
    assert_eq!(pending.len(), effects.len(), "{pending:?}");
    assert!(pending.iter().all(|effect| effects.contains(effect)), "{pending:?}");
    assert!(pending.iter().any(|effect| matches!(effect, Effect::Step { .. })), "{pending:?}");
    assert_eq!(store.put_record("k", "s", "a", &json!({"x": 1}), None, Expect::Absent, 5).await, Ok(1));
    assert_eq!(store.record("k", "s", "a", 5).await.unwrap().map(|record| record.version), Some(1));
    drop(store);
    let reopened = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = reopened.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
    assert_eq!(version, crate::schema::SCHEMA_VERSION);
    assert_eq!(version, 8);
    let mode: i64 = reopened.query_row("PRAGMA auto_vacuum", [], |row| row.get(0)).unwrap();
    assert_eq!(mode, 2, "the migration vacuumed the file into incremental auto-vacuum");
    let column: i64 = reopened
        .query_row("SELECT COUNT(*) FROM pragma_table_info('runs') WHERE name = 'retains_until'", [], |row| row.get(0))
        .unwrap();
    assert_eq!(column, 1, "layout 7 records until when each run is kept");
    let blobs: i64 = reopened
        .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'run_blobs'", [], |row| row.get(0))
        .unwrap();
    assert_eq!(blobs, 1, "layout 8 keeps the runs' blobs");
}

/// Deleting most runs of a file and reclaiming the space makes the file smaller (layout 7:
/// incremental auto-vacuum, then a checkpoint that truncates the write-ahead log).
#[tokio::test]
async fn the_file_shrinks_after_most_runs_are_deleted() {
    use trellis_core::engine::{self, Input};
    use trellis_core::ports::RunStore;
    use trellis_core::testing::{chain_workflow, pending_run};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shrink.db");
    let store = SqliteStore::open(&path).unwrap();
    let workflow = chain_workflow();
    for index in 0..300 {
        let mut run = pending_run(&workflow, &format!("run-{index:03}"), "t");
        run.inputs.insert("padding".into(), serde_json::json!("x".repeat(2_000)));
        run.variables = run.inputs.clone();
        let outcome = engine::apply(&workflow, &mut run, Input::Start, 2);
        run.version = 1;
        store.create_run(&run, &outcome.events, &outcome.effects, None).await.unwrap();
    }
    store.reclaim_space().await.unwrap();
    let before = std::fs::metadata(&path).unwrap().len();
    let mut freed = 0;
    for index in 0..280 {
        freed += store.delete_run(&format!("run-{index:03}")).await.unwrap();
    }
    store.reclaim_space().await.unwrap();
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(freed > 280 * 2_000, "the deleted runs held their inputs: {freed}");
    assert!(after * 2 < before, "the file went from {before} to {after} bytes");
    assert!(store.load_run("run-299").await.unwrap().is_some(), "the kept runs stay");
    assert_eq!(store.auto_vacuum_mode().unwrap(), 2);
}
