//! Deleting a run's items (`DELETE /v1/runs/{id}`, prune; see `trellis_core::retention`):
//! every item of its partition — pages, markers, votes, slots, the run item — in batches of
//! 25, the run item last so a delete cut short leaves the run listed and deletable again.
//! Expiry needs no sweeper here: every item carries the run's TTL (`expires_at`).

use aws_sdk_dynamodb::types::{DeleteRequest, WriteRequest};
use trellis_core::StoreError;

use super::DynamoStore;
use crate::codec::{get_s, item_size, s, Item};
use crate::errors::unavailable;
use crate::keys::{self, PK, SK};

/// Deletes per `BatchWriteItem` (DynamoDB's limit).
const PER_BATCH: usize = 25;
/// Rounds a batch's unprocessed items are sent again before the delete gives up (retryably).
const ROUNDS: u32 = 8;

impl DynamoStore {
    /// The key and size of every item in `run_id`'s partition.
    async fn run_items(&self, run_id: &str) -> Result<Vec<(Item, usize)>, StoreError> {
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(keys::run_pk(run_id)))
            .consistent_read(true);
        let mut found = Vec::new();
        self.visit_query(query, |item| {
            let mut key = Item::new();
            key.insert(PK.into(), s(get_s(item, PK)?));
            key.insert(SK.into(), s(get_s(item, SK)?));
            found.push((key, item_size(item)));
            Ok(false)
        })
        .await?;
        Ok(found)
    }

    /// What `run_id` stores, in bytes (the sizes of its items and of its blobs).
    pub(super) async fn stored_bytes(&self, run_id: &str) -> Result<u64, StoreError> {
        let items: u64 = self.run_items(run_id).await?.iter().map(|(_, size)| *size as u64).sum();
        Ok(items + self.blob_bytes(run_id).await?)
    }

    /// Deletes every item of `run_id`; the bytes they held.
    pub(super) async fn remove_run(&self, run_id: &str) -> Result<u64, StoreError> {
        let mut items = self.run_items(run_id).await?;
        let bytes = items.iter().map(|(_, size)| *size as u64).sum();
        // The run item last: a delete cut short leaves the run listed, to be deleted again.
        items.sort_by_key(|(key, _)| get_s(key, SK).is_ok_and(|sk| sk == keys::STATE_SK));
        for chunk in items.chunks(PER_BATCH) {
            self.delete_batch(chunk.iter().map(|(key, _)| key.clone()).collect()).await?;
        }
        self.hot.forget(run_id);
        Ok(bytes)
    }

    /// Deletes `keys` (at most [`PER_BATCH`]), sending unprocessed ones again.
    async fn delete_batch(&self, mut keys: Vec<Item>) -> Result<(), StoreError> {
        for round in 0..ROUNDS {
            if keys.is_empty() {
                return Ok(());
            }
            let requests = keys
                .iter()
                .map(|key| {
                    let delete = DeleteRequest::builder()
                        .set_key(Some(key.clone()))
                        .build()
                        .map_err(|error| StoreError::Corrupt(error.to_string()))?;
                    Ok(WriteRequest::builder().delete_request(delete).build())
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            let answer = self
                .client
                .batch_write_item()
                .request_items(&self.table, requests)
                .send()
                .await
                .map_err(unavailable)?;
            let unprocessed: Vec<Item> = answer
                .unprocessed_items()
                .and_then(|items| items.get(&self.table))
                .map(|requests| {
                    requests.iter().filter_map(|request| request.delete_request().map(|d| d.key().clone())).collect()
                })
                .unwrap_or_default();
            let done: Vec<&Item> = keys.iter().filter(|key| !unprocessed.contains(key)).collect();
            self.meter.batch(&done);
            keys = unprocessed;
            if !keys.is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(20 << round.min(5))).await;
            }
        }
        Err(StoreError::Unavailable("DynamoDB left part of a run's delete unprocessed; try again".to_owned()))
    }
}
