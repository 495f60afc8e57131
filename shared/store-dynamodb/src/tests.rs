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
    store_contract(Arc::new(DynamoStore::new(client, table))).await;
}
