//! The shared store contract, against an in-memory database and a file in WAL mode.

use std::sync::Arc;

use trellis_core::ports::Backend;
use trellis_core::testing::store_contract;

use crate::SqliteStore;

#[tokio::test]
async fn in_memory_store_meets_the_contract() {
    store_contract(|| Arc::new(SqliteStore::open_in_memory().unwrap()) as Arc<dyn Backend>).await;
}

#[tokio::test]
async fn file_store_meets_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let counter = std::sync::atomic::AtomicUsize::new(0);
    store_contract(|| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Arc::new(SqliteStore::open(&dir.path().join(format!("db-{n}.sqlite"))).unwrap()) as Arc<dyn Backend>
    })
    .await;
}

#[test]
fn a_second_process_cannot_open_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trellis.db");
    let _owner = SqliteStore::open(&path).unwrap();
    assert!(SqliteStore::open(&path).is_err());
}
