//! The shared store contract against Amazon DynamoDB Local. Needs
//! `AWS_ENDPOINT_URL_DYNAMODB` (or `AWS_ENDPOINT_URL`) pointing at an emulator — the README's
//! test command starts one; under plain `cargo test` these tests are ignored.

use std::sync::Arc;

use trellis_core::testing::store_contract;
use trellis_testkit::external::Service;

use crate::{client_from_env, create_table, DynamoStore};

fn require_emulator() {
    trellis_testkit::external::require_emulators(&[Service::DynamoDb]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs DynamoDB Local: run `bash scripts/test.sh`"]
async fn dynamodb_store_meets_the_contract() {
    require_emulator();
    let client = client_from_env().await;
    let table = format!("trellis-contract-{}", uuid::Uuid::new_v4());
    create_table(&client, &table).await.expect("table created");
    // The contract's runs are dated at the epoch; keep them for a century so TTL leaves
    // them readable (expiry has its own test below).
    store_contract(Arc::new(DynamoStore::new(client, table).with_retention_days(36_500))).await;
}

#[tokio::test]
#[ignore = "needs DynamoDB Local: run `bash scripts/test.sh`"]
async fn an_expired_run_reads_as_gone() {
    require_emulator();
    let client = client_from_env().await;
    let table = format!("trellis-ttl-{}", uuid::Uuid::new_v4());
    create_table(&client, &table).await.expect("table created");
    let store = DynamoStore::new(client, table).with_retention_days(0);
    let workflow = trellis_core::testing::chain_workflow();
    let mut run = trellis_core::testing::pending_run(&workflow, "run-expired", "t");
    run.created_at = 1_000;
    use trellis_core::ports::RunStore;
    store.create_run(&run, &[], &[], None).await.unwrap();
    assert_eq!(store.load_run("run-expired").await.unwrap(), None);
    let listed = store.list_runs("t", &Default::default(), None, 10).await.unwrap();
    assert!(listed.is_empty());
}
