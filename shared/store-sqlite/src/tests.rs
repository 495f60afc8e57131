//! The shared store and queue contracts, against an in-memory database and a file in WAL mode.

use std::sync::Arc;

use trellis_core::testing::{queue_contract, store_contract};

use crate::SqliteStore;

#[tokio::test]
async fn in_memory_store_meets_the_contracts() {
    store_contract(Arc::new(SqliteStore::open_in_memory().unwrap())).await;
    queue_contract(Arc::new(SqliteStore::open_in_memory().unwrap())).await;
}

#[tokio::test]
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
    drop(store);
    let reopened = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = reopened.query_row("PRAGMA user_version", [], |row| row.get(0)).unwrap();
    assert_eq!(version, 2);
}
