//! The reconciler's cost with many retained finished runs: copies of one finished chain run
//! are written straight to the table, then one sweep of the scheduled reconciler (outbox
//! entries of recent commits) is measured against what the whole-table scan it replaces
//! reads (computed from the items written). Prints figures; asserts nothing.

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use trellis_core::ports::{RunFilter, RunStore};

use crate::Apps;

type Item = std::collections::HashMap<String, AttributeValue>;

/// Copies a finished run `retained` times, then prints the RRU of reconciler sweeps.
pub(crate) async fn figures(apps: &Apps<'_>, retained: usize) {
    let config = trellis_aws::app::sdk_config().await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    let table = apps.app.settings.table_name.clone();
    let filter =
        RunFilter { workflow_id: Some("bench-chain".into()), status: Some(trellis_core::RunStatus::Completed) };
    let finished = apps.app.store.list_runs("bench", &filter, None, 1).await.expect("list");
    let run_id = finished.first().expect("a finished chain run").run_id.clone();
    let items = partition(&client, &table, &format!("RUN#{run_id}")).await;
    let mut writes = Vec::new();
    for copy in 0..retained {
        for item in &items {
            let mut item = item.clone();
            item.insert("pk".into(), AttributeValue::S(format!("RUN#{run_id}-r{copy}")));
            writes.push(
                WriteRequest::builder()
                    .put_request(PutRequest::builder().set_item(Some(item)).build().unwrap())
                    .build(),
            );
        }
    }
    let written = writes.len();
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in writes.chunks(25 * 40).map(<[WriteRequest]>::to_vec) {
        let (client, table) = (client.clone(), table.clone());
        tasks.spawn(async move {
            for batch in chunk.chunks(25) {
                let mut pending = std::collections::HashMap::from([(table.clone(), batch.to_vec())]);
                while !pending.values().all(Vec::is_empty) {
                    let out = client.batch_write_item().set_request_items(Some(pending)).send().await.expect("seed");
                    pending = out.unprocessed_items().cloned().unwrap_or_default();
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    println!(
        "reconciler with {retained} retained finished runs ({written} items copied from {run_id}, {} each):",
        items.len()
    );

    let before = apps.totals().0;
    let sent = trellis_aws::reconcile::reconcile(apps.app, 0).await.expect("sweep");
    let first = apps.totals().0;
    let again = trellis_aws::reconcile::reconcile(apps.app, 0).await.expect("sweep");
    let steady = apps.totals().0;
    println!(
        "  first sweep (no watermark: the last hour's outbox entries): {} RRU in {} reads, {} WRU, {sent} effects sent",
        first.read_units - before.read_units,
        first.read_requests - before.read_requests,
        first.write_units - before.write_units,
    );
    println!(
        "  next sweep (from its watermark): {} RRU in {} reads, {} WRU, {again} effects sent",
        steady.read_units - first.read_units,
        steady.read_requests - first.read_requests,
        steady.write_units - first.write_units,
    );
    // The scan it replaces reads every item (billed before its filter). DynamoDB Local runs
    // out of heap scanning this table, so its cost is computed from the items written: the
    // copies alone (the rest of the table only adds to it).
    let per_run: usize = items.iter().map(trellis_store_dynamodb::item_size).sum();
    let units = (retained * per_run).div_ceil(4096);
    println!(
        "  whole-table scan the sweep replaces: >= {units} RRU ({per_run} bytes per run, strongly consistent), plus one marker query (>= 1 RRU) for each of {retained} runs with effect pages = >= {} RRU",
        units + retained
    );
}

/// Every item of partition `pk`.
async fn partition(client: &aws_sdk_dynamodb::Client, table: &str, pk: &str) -> Vec<Item> {
    let out = client
        .query()
        .table_name(table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("query");
    out.items().to_vec()
}
