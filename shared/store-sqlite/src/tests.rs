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
