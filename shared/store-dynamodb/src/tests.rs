//! The shared store contract against Amazon DynamoDB Local. Needs
//! `AWS_ENDPOINT_URL_DYNAMODB` (or `AWS_ENDPOINT_URL`) pointing at an emulator — the README's
//! test command starts one; under plain `cargo test` these tests are ignored.

use std::sync::Arc;

use trellis_core::testing::store_contract;
use trellis_testkit::external::Service;

use crate::{client_from_env, create_table, DynamoStore};

mod slots;

fn require_emulator() {
    trellis_testkit::external::require_emulators(&[Service::DynamoDb, Service::S3]);
}

/// A fresh bucket of the emulator for a store's blobs.
async fn bucket() -> (aws_sdk_s3::Client, String) {
    let client = crate::s3_client_from_env().await;
    let bucket = format!("trellis-contract-{}", uuid::Uuid::new_v4().simple());
    client.create_bucket().bucket(&bucket).send().await.expect("bucket created");
    (client, bucket)
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
    let (s3, bucket) = bucket().await;
    let store = DynamoStore::new(client, table).with_retention_days(36_500).with_blob_bucket(s3, bucket);
    store_contract(Arc::new(store)).await;
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

/// A `len`-node `core.noop` chain.
fn long_chain(len: usize) -> trellis_core::model::Workflow {
    let nodes: Vec<_> = (0..len).map(|i| serde_json::json!({"id": format!("n{i}"), "typeId": "core.noop"})).collect();
    let edges: Vec<_> = (1..len)
        .map(|i| serde_json::json!({"id": format!("e{i}"), "sourceNodeId": format!("n{}", i - 1), "targetNodeId": format!("n{i}")}))
        .collect();
    trellis_core::model::Workflow::compile(
        serde_json::json!({"id": "long", "name": "long", "nodes": nodes, "edges": edges}),
    )
    .expect("valid chain")
}

#[tokio::test]
#[ignore = "needs DynamoDB Local: run `bash scripts/test.sh`"]
async fn delta_pages_rebuild_the_same_state_warm_cold_and_across_writers() {
    use trellis_core::engine::{self, Effect, Input};
    use trellis_core::ports::RunStore;
    require_emulator();
    let client = client_from_env().await;
    let table = format!("trellis-delta-{}", uuid::Uuid::new_v4());
    create_table(&client, &table).await.expect("table created");
    let writer = DynamoStore::new(client.clone(), table.clone()).with_retention_days(36_500);
    let other = DynamoStore::new(client.clone(), table.clone()).with_retention_days(36_500);
    let workflow = long_chain(40);
    let mut run = trellis_core::testing::pending_run(&workflow, "run-delta", "t");
    writer.create_run(&run, &[], &[], None).await.expect("created");
    // An instance that read the run once, at its creation, and then not for 40 commits.
    let stale = DynamoStore::new(client.clone(), table.clone()).with_retention_days(36_500);
    assert_eq!(stale.load_run("run-delta").await.unwrap().as_ref(), Some(&run));
    let mut inputs = vec![Input::Start];
    let mut step = 0;
    while let Some(input) = inputs.pop() {
        // Every third step is another instance's: the writer's cached copy must catch up.
        let store = if step % 3 == 2 { &other } else { &writer };
        let mut current = store.take_run("run-delta").await.expect("read").expect("exists");
        assert_eq!(current, run, "step {step}: the state read equals the state committed");
        let expected = current.version;
        let outcome = engine::apply(&workflow, &mut current, input, 10);
        current.version = expected + 1;
        store
            .commit_changes(&current, expected, &outcome.changes, &outcome.events, &outcome.effects)
            .await
            .expect("committed");
        for effect in &outcome.effects {
            if let Effect::Step { node_id, activation, .. } = effect {
                inputs.push(Input::Step { node_id: node_id.clone(), activation: *activation });
            }
        }
        run = current.clone();
        store.retain_run(current);
        step += 1;
    }
    assert!(run.status.is_terminal(), "the chain ran to its end");
    // A cold instance reads it from a checkpoint and the deltas after it.
    let cold = DynamoStore::new(client.clone(), table.clone()).with_retention_days(36_500);
    assert_eq!(cold.load_run("run-delta").await.unwrap().as_ref(), Some(&run));
    // Too far behind to catch up page by page, the stale copy is replaced from a checkpoint,
    // at no more than a cold read's cost.
    let before = stale.usage().read_units;
    assert_eq!(stale.load_run("run-delta").await.unwrap().as_ref(), Some(&run));
    let cold_units = cold.usage().read_units;
    assert!(stale.usage().read_units - before <= cold_units + 1, "{:?} vs {:?}", stale.usage(), cold.usage());
    // Most pages are deltas, and every delta page is small next to a checkpoint.
    let pages = client
        .query()
        .table_name(&table)
        .key_condition_expression("pk = :pk AND begins_with(sk, :v)")
        .expression_attribute_values(":pk", crate::codec::s("RUN#run-delta"))
        .expression_attribute_values(":v", crate::codec::s("V#"))
        .send()
        .await
        .expect("pages");
    let (deltas, checkpoints): (Vec<_>, Vec<_>) = pages.items().iter().partition(|item| item.contains_key("delta"));
    assert_eq!(deltas.len() + checkpoints.len(), step + 1, "one page per commit");
    assert!(deltas.len() > 3 * checkpoints.len(), "{} deltas, {} checkpoints", deltas.len(), checkpoints.len());
    // A delta's size does not grow with the run's progress; a checkpoint's does.
    let delta_sizes: Vec<usize> = deltas.iter().map(|item| crate::item_size(item)).collect();
    let (smallest, largest) = (delta_sizes.iter().min().unwrap(), delta_sizes.iter().max().unwrap());
    assert!(largest - smallest <= 100, "delta pages of {smallest}..{largest} B");
    let largest_checkpoint = checkpoints.iter().map(|item| crate::item_size(item)).max().unwrap();
    assert!(largest_checkpoint > 3 * largest, "checkpoint {largest_checkpoint} B, delta {largest} B");
    assert!(deltas.iter().all(|item| crate::codec::get_n(item, "format") == Ok(crate::codec::DELTA_FORMAT)));
    // With delta pages off, a writer writes checkpoints only (and still reads deltas).
    let cautious = DynamoStore::new(client.clone(), table.clone()).with_retention_days(36_500).with_delta_pages(false);
    let mut again = trellis_core::testing::pending_run(&workflow, "run-cautious", "t");
    cautious.create_run(&again, &[], &[], None).await.expect("created");
    let mut current = cautious.take_run("run-cautious").await.unwrap().unwrap();
    let outcome = engine::apply(&workflow, &mut current, Input::Start, 10);
    current.version = again.version + 1;
    cautious
        .commit_changes(&current, again.version, &outcome.changes, &outcome.events, &outcome.effects)
        .await
        .unwrap();
    again = current;
    let newest = cautious.load_run("run-cautious").await.unwrap().unwrap();
    assert_eq!(newest, again);
    let page = client
        .get_item()
        .table_name(&table)
        .key("pk", crate::codec::s("RUN#run-cautious"))
        .key("sk", crate::codec::s(crate::keys::page_sk(1)))
        .send()
        .await
        .unwrap();
    assert!(page.item().is_some_and(|item| item.contains_key("doc")), "a checkpoint: {page:?}");
    // Events still read in order across delta and checkpoint pages.
    let events = cold.events_after("run-delta", None, 10_000).await.unwrap();
    assert_eq!(events.len() as u64, run.next_sequence);
    assert!(events.iter().enumerate().all(|(i, event)| event.sequence == i as u64));
}
