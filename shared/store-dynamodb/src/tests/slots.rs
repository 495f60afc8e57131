//! Fan-out slot records as items of their own (`store/slots.rs`): the checkpoint does not
//! grow with the children, every read path gets them all back, and a commit that would not
//! fit in one transaction is refused before sending.

use serde_json::json;
use trellis_core::ports::RunStore;
use trellis_core::run::{Changes, FanOutProgress, NodeState, NodeStatus};
use trellis_core::testing::{chain_workflow, pending_run};
use trellis_core::{RunState, StoreError};

use super::require_emulator;
use crate::codec::{s, Item};
use crate::{client_from_env, create_table, DynamoStore};

fn slot(k: u32) -> NodeState {
    serde_json::from_value(json!({"status": "waiting-child", "activation": 1, "childStatus": "pending",
                                  "childRunId": format!("run-{k:032}"), "childWorkflowId": "kid"}))
    .expect("a slot record")
}

fn progress() -> FanOutProgress {
    FanOutProgress {
        total: 200,
        width: 64,
        started: 200,
        running: 200,
        completed: 0,
        failed: 0,
        cancelled: 0,
        decision: None,
    }
}

fn touched<'a>(keys: impl IntoIterator<Item = &'a str>) -> Changes {
    Changes { nodes: keys.into_iter().map(str::to_owned).collect(), ..Changes::default() }
}

fn slot_keys(run: &RunState) -> Vec<&String> {
    run.nodes.keys().filter(|key| key.starts_with("b#")).collect()
}

/// Commits `run` at the next version through `store`, with `changes`.
async fn commit(store: &DynamoStore, run: &mut RunState, changes: &Changes) -> Result<(), StoreError> {
    let expected = run.version;
    run.version += 1;
    store.commit_changes(run, expected, changes, &[], &[]).await
}

/// A run whose node `b` fans out with `children` live slots, committed 50 slots at a time.
async fn fanning(store: &DynamoStore, run_id: &str, children: u32) -> RunState {
    let mut run = pending_run(&chain_workflow(), run_id, "t");
    run.version = 1;
    store.create_run(&run, &[], &[], None).await.expect("created");
    let mut node: NodeState = serde_json::from_value(json!({"status": "waiting-child", "activation": 1})).unwrap();
    node.fan_out = Some(progress());
    run.nodes.insert("b".into(), node);
    for batch in (0..children).collect::<Vec<_>>().chunks(50) {
        let keys: Vec<String> = batch.iter().map(|k| format!("b#{k}")).collect();
        for (k, key) in batch.iter().zip(&keys) {
            run.nodes.insert(key.clone(), slot(*k));
        }
        let changes = touched(keys.iter().map(String::as_str).chain(["b"]));
        commit(store, &mut run, &changes).await.expect("a batch of slots committed");
    }
    run
}

async fn item(client: &aws_sdk_dynamodb::Client, table: &str, run_id: &str, sk: &str) -> Option<Item> {
    let got = client.get_item().table_name(table).key("pk", s(format!("RUN#{run_id}"))).key("sk", s(sk));
    got.consistent_read(true).send().await.expect("get").item().cloned()
}

async fn slot_items(client: &aws_sdk_dynamodb::Client, table: &str, run_id: &str) -> usize {
    let query = client
        .query()
        .table_name(table)
        .key_condition_expression("pk = :pk AND begins_with(sk, :slot)")
        .expression_attribute_values(":pk", s(format!("RUN#{run_id}")))
        .expression_attribute_values(":slot", s("SLOT#"))
        .consistent_read(true);
    query.send().await.expect("query").items().len()
}

#[tokio::test]
#[ignore = "needs DynamoDB Local: run `bash scripts/test.sh`"]
async fn slot_records_live_outside_the_checkpoint_and_every_read_gets_them_back() {
    require_emulator();
    let client = client_from_env().await;
    let table = format!("trellis-slots-{}", uuid::Uuid::new_v4());
    create_table(&client, &table).await.expect("table created");
    let store = || DynamoStore::new(client.clone(), table.clone()).with_retention_days(36_500);
    // Every page a checkpoint: one with 200 live slots is no bigger than one with 2.
    let checkpoints = store().with_delta_pages(false);
    let few = fanning(&checkpoints, "run-few", 2).await;
    let mut many = fanning(&checkpoints, "run-all", 200).await;
    let page = |run: &RunState| crate::keys::page_sk(run.version);
    let few_page = item(&client, &table, "run-few", &page(&few)).await.expect("page");
    let many_page = item(&client, &table, "run-all", &page(&many)).await.expect("page");
    assert!(few_page.contains_key("doc") && many_page.contains_key("doc"), "checkpoints");
    let (few_bytes, many_bytes) = (crate::item_size(&few_page), crate::item_size(&many_page));
    assert!(many_bytes <= few_bytes, "checkpoint with 200 slots {many_bytes} B, with 2 slots {few_bytes} B");
    assert_eq!(slot_items(&client, &table, "run-all").await, 200);
    // A cold read gets every slot back.
    let cold = store().load_run("run-all").await.unwrap().expect("exists");
    assert_eq!(slot_keys(&cold).len(), 200);
    assert_eq!(cold, many);

    // A child's end: a delta page and the slot's item, in one transaction.
    let writer = store();
    let mut run = writer.take_run("run-all").await.unwrap().expect("exists");
    assert_eq!(run, many);
    let ended = run.nodes.get_mut("b#7").expect("slot 7");
    (ended.status, ended.child_status, ended.merge) =
        (NodeStatus::Completed, Some(trellis_core::RunStatus::Completed), Some(0));
    ended.outputs.insert("answer".into(), json!(42));
    let counters = run.nodes.get_mut("b").and_then(|node| node.fan_out.as_mut()).expect("fans out");
    (counters.running, counters.completed) = (199, 1);
    let before = writer.usage();
    commit(&writer, &mut run, &touched(["b", "b#7"])).await.expect("committed");
    let cost = writer.usage().write_units - before.write_units;
    let newest = item(&client, &table, "run-all", &page(&run)).await.expect("page");
    assert!(newest.contains_key("delta"), "a delta page");
    eprintln!("a child's end costs {cost} WRU (delta page {} B and slot item)", crate::item_size(&newest));
    assert_eq!(cost, 4, "a two-item transaction of items under 1 KB");
    writer.retain_run(run);

    // A removed slot is gone, in its item and on a cold read.
    let mut run = writer.take_run("run-all").await.unwrap().expect("exists");
    run.nodes.remove("b#9");
    commit(&writer, &mut run, &touched(["b#9"])).await.expect("committed");
    assert_eq!(item(&client, &table, "run-all", "SLOT#b#9").await, None);
    let cold = store().load_run("run-all").await.unwrap().expect("exists");
    assert_eq!((slot_keys(&cold).len(), &cold), (199, &run));
    writer.retain_run(run.clone());
    many = run.clone();

    // A copy cached before a checkpoint another instance wrote catches up to the slots.
    let stale = store();
    assert_eq!(stale.load_run("run-all").await.unwrap().as_ref(), Some(&many));
    let mut run = checkpoints.take_run("run-all").await.unwrap().expect("exists");
    run.nodes.remove("b#10");
    run.nodes.get_mut("b#11").expect("slot 11").child_status = Some(trellis_core::RunStatus::Running);
    commit(&checkpoints, &mut run, &touched(["b#10", "b#11"])).await.expect("committed");
    assert!(item(&client, &table, "run-all", &page(&run)).await.expect("page").contains_key("doc"));
    assert_eq!(stale.load_run("run-all").await.unwrap().as_ref(), Some(&run));
    // So does the writer's, through the same checkpoint.
    assert_eq!(writer.load_run("run-all").await.unwrap().as_ref(), Some(&run));

    // The join: 198 deletes, more than a transaction holds, follow the commit.
    let mut joined = writer.take_run("run-all").await.unwrap().expect("exists");
    let keys: Vec<String> = slot_keys(&joined).into_iter().cloned().collect();
    joined.nodes.retain(|key, _| !key.starts_with("b#"));
    let node = joined.nodes.get_mut("b").expect("node b");
    (node.status, node.fan_out) = (NodeStatus::Completed, None);
    commit(&writer, &mut joined, &touched(keys.iter().map(String::as_str).chain(["b"]))).await.expect("joined");
    assert_eq!(slot_items(&client, &table, "run-all").await, 0, "the join's deletes landed");
    assert_eq!(store().load_run("run-all").await.unwrap().as_ref(), Some(&joined));

    // The node fans out again (a loop back): an item left over from the first fan-out does
    // not count.
    let leftover = crate::store::slots::slot_item(&many, "b#5", &slot(5), 4_000_000_000).expect("item");
    client.put_item().table_name(&table).set_item(Some(leftover)).send().await.expect("put");
    let mut again = writer.take_run("run-all").await.unwrap().expect("exists");
    let node = again.nodes.get_mut("b").expect("node b");
    (node.status, node.activation, node.fan_out) = (NodeStatus::WaitingChild, 2, Some(progress()));
    again.nodes.insert("b#0".into(), slot(0));
    commit(&writer, &mut again, &touched(["b", "b#0"])).await.expect("fans out again");
    let cold = store().load_run("run-all").await.unwrap().expect("exists");
    assert_eq!(slot_keys(&cold), ["b#0"], "the leftover of activation 1 is not read");
    assert_eq!(cold, again);
}

#[tokio::test]
async fn a_commit_with_more_slot_writes_than_a_transaction_holds_is_refused_before_sending() {
    // No endpoint: the refusal comes before any request.
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .endpoint_url("http://127.0.0.1:9")
        .build();
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(config), "unused");
    let mut run = pending_run(&chain_workflow(), "run-wide", "t");
    run.version = 1;
    let mut node: NodeState = serde_json::from_value(json!({"status": "waiting-child", "activation": 1})).unwrap();
    node.fan_out = Some(progress());
    run.nodes.insert("b".into(), node);
    let keys: Vec<String> = (0..100).map(|k| format!("b#{k}")).collect();
    for (k, key) in keys.iter().enumerate() {
        run.nodes.insert(key.clone(), slot(k as u32));
    }
    let refused = commit(&store, &mut run, &touched(keys.iter().map(String::as_str))).await;
    assert!(matches!(refused, Err(StoreError::LimitExceeded(ref why)) if why.contains("101 items")), "{refused:?}");
    assert_eq!(store.usage().write_requests, 0, "nothing sent");
}
