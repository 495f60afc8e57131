//! The shared store contract against Amazon DynamoDB Local. Runs when
//! `AWS_ENDPOINT_URL_DYNAMODB` (or `AWS_ENDPOINT_URL`) points at an emulator — the README's
//! test command starts one — and otherwise says it is skipped.

use std::io::Write as _;
use std::sync::Arc;

use trellis_core::testing::store_contract;

use crate::{client_from_env, create_table, DynamoStore};

fn emulator_configured() -> bool {
    std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_some() || std::env::var_os("AWS_ENDPOINT_URL").is_some()
}

#[tokio::test]
async fn dynamodb_store_meets_the_contract() {
    if !emulator_configured() {
        // Written past the test harness's output capture, so the skip is visible.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED dynamodb_store_meets_the_contract: no AWS_ENDPOINT_URL_DYNAMODB (run scripts/test.sh)"
        );
        return;
    }
    let client = client_from_env().await;
    let table = format!("trellis-contract-{}", uuid::Uuid::new_v4());
    create_table(&client, &table).await.expect("table created");
    // The contract's runs are dated at the epoch; keep them for a century so TTL leaves
    // them readable (expiry has its own test below).
    store_contract(Arc::new(DynamoStore::new(client, table).with_retention_days(36_500))).await;
}

#[tokio::test]
async fn an_expired_run_reads_as_gone() {
    if !emulator_configured() {
        return;
    }
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
