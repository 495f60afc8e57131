//! Writing a commit: its page alone (one conditional `PutItem`), or in one
//! `TransactWriteItems` with the run item, votes, an idempotency record and the fan-out
//! slot items it touched ([`super::slots`]).

use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use trellis_core::engine::Effect;
use trellis_core::run::Changes;
use trellis_core::{RunEvent, RunState, StoreError};

use super::slots::{split_cleanup, without_slots, SlotWrite};
use super::{hot, DynamoStore};
use crate::codec::{self, check_limits, Item, PageBody};
use crate::delta::{header_of, CheckpointPolicy, Delta};
use crate::errors::{is_size_limit, unavailable};
use crate::keys;

/// How often a commit is retried after `TransactionConflict` or an ambiguous failure.
const COMMIT_ATTEMPTS: u32 = 6;

/// How a transaction ended, in the terms the store needs.
pub(super) enum TransactOutcome {
    Done,
    /// `ConditionalCheckFailed` on the item at this index.
    ConditionFailed(usize),
}

pub(super) fn jitter(attempt: u32) -> Duration {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let base = 20u64 << attempt.min(6);
    Duration::from_millis(base + u64::from(nanos) % base)
}

impl DynamoStore {
    pub(super) fn put(&self, item: Item, condition: Option<&str>) -> TransactWriteItem {
        let mut put = Put::builder().table_name(&self.table).set_item(Some(item));
        if let Some(condition) = condition {
            put = put.condition_expression(condition);
        }
        if condition.is_some_and(|c| c.contains("#st")) {
            put = put.expression_attribute_names("#st", "state");
        }
        if condition.is_some_and(|c| c.contains(":v")) {
            put = put.return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::None);
        }
        TransactWriteItem::builder().put(put.build().expect("put has table and item")).build()
    }

    /// An unconditional delete of the item at `key`.
    fn delete(&self, key: Item) -> TransactWriteItem {
        let delete = Delete::builder().table_name(&self.table).set_key(Some(key));
        TransactWriteItem::builder().delete(delete.build().expect("delete has table and key")).build()
    }

    /// Runs a transaction, retrying `TransactionConflict` and transport failures with the
    /// same token (DynamoDB answers a repeated token idempotently for ten minutes).
    pub(super) async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
        values: Vec<(&str, aws_sdk_dynamodb::types::AttributeValue)>,
        token: String,
    ) -> Result<TransactOutcome, StoreError> {
        let items = attach_values(items, &values);
        let mut last = StoreError::Unavailable("no attempt made".into());
        for attempt in 0..COMMIT_ATTEMPTS {
            let sent = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .client_request_token(&token)
                .send()
                .await;
            match sent {
                Ok(_) => {
                    // A delete is billed by the size of the item it removes; a slot item is a
                    // few hundred bytes, so its key stands in for it (the same started KB).
                    let written: Vec<&Item> = items
                        .iter()
                        .filter_map(|item| item.put().map(|put| put.item()).or_else(|| item.delete().map(|d| d.key())))
                        .collect();
                    self.meter.transaction(&written);
                    return Ok(TransactOutcome::Done);
                }
                Err(SdkError::ServiceError(service)) => {
                    let error = service.into_err();
                    match error {
                        TransactWriteItemsError::TransactionCanceledException(cancelled) => {
                            let reasons = cancelled.cancellation_reasons();
                            if let Some(index) = reasons.iter().position(|r| r.code() == Some("ConditionalCheckFailed"))
                            {
                                return Ok(TransactOutcome::ConditionFailed(index));
                            }
                            if reasons.iter().any(|r| r.code() == Some("ValidationError")) {
                                return Err(StoreError::LimitExceeded(format!("{cancelled:?}")));
                            }
                            last = StoreError::Unavailable(format!("transaction cancelled: {reasons:?}"));
                        }
                        TransactWriteItemsError::TransactionInProgressException(_) => {
                            last = StoreError::Unavailable("transaction in progress".into());
                        }
                        // The same token already committed other items: another writer won
                        // the race for this version.
                        TransactWriteItemsError::IdempotentParameterMismatchException(_) => {
                            return Ok(TransactOutcome::ConditionFailed(0));
                        }
                        other => {
                            let error = SdkError::<TransactWriteItemsError, ()>::service_error(other, ());
                            if is_size_limit(&error) {
                                return Err(StoreError::LimitExceeded(format!("{error:?}")));
                            }
                            return Err(unavailable(error));
                        }
                    }
                }
                Err(other) => last = unavailable(other),
            }
            tokio::time::sleep(jitter(attempt)).await;
        }
        Err(last)
    }

    /// The page of `run`'s commit: a delta when `changes` are tracked, the writer knows the
    /// run's checkpoint policy at `expected_version` and the policy allows it; else a
    /// checkpoint (without the fan-out records, which are items of their own: see
    /// [`super::slots`]). Returns the item and the basis for a delta on it.
    pub(super) fn page_for(
        &self,
        run: &RunState,
        expected_version: Option<u64>,
        changes: &Changes,
        events: &[RunEvent],
        effects: &[Effect],
        written_at: u64,
    ) -> Result<(Item, hot::Basis), StoreError> {
        let expires_at = self.expires_at(run);
        let basis = expected_version
            .filter(|_| self.delta_pages && !changes.all)
            .and_then(|v| self.hot.basis_at(&run.run_id, v));
        if let Some((policy, before)) = basis {
            let (delta, header) = Delta::of(run, changes, &before)?;
            let page = codec::page_item(run, PageBody::Delta(&delta), events, effects, written_at, expires_at)?;
            let bytes = codec::item_size(&page);
            if policy.allows_delta(bytes) {
                return Ok((page, (policy.after_delta(bytes), std::sync::Arc::new(header))));
            }
        }
        let page = codec::page_item(run, PageBody::Full(&without_slots(run)), events, effects, written_at, expires_at)?;
        let bytes = codec::item_size(&page);
        Ok((page, (CheckpointPolicy::checkpoint(bytes), std::sync::Arc::new(header_of(run)?))))
    }

    /// Writes `page` alone (a commit that changes no status and no fan-out record), or in one
    /// transaction with the `extra` items (the run item on creation and status transitions,
    /// votes, an idempotency record) and the `slots` writes, never overwriting an existing
    /// page: a commit that loses the race for its version writes none of them.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn write_page(
        &self,
        run: &RunState,
        page: Item,
        has_effects: bool,
        written_at: u64,
        extra: Vec<(Item, Option<&'static str>)>,
        values: Vec<(&str, aws_sdk_dynamodb::types::AttributeValue)>,
        slots: Vec<SlotWrite>,
    ) -> Result<TransactOutcome, StoreError> {
        let mut items = vec![(page, Some("attribute_not_exists(pk)"))];
        items.extend(extra);
        let (slots, cleanup) = split_cleanup(slots, items.len(), codec::MAX_TRANSACTION_ITEMS);
        let sized: Vec<&Item> = items.iter().map(|(item, _)| item).chain(slots.iter().map(SlotWrite::item)).collect();
        check_limits(&sized)?;
        if self.outbox_entries && has_effects {
            // Before the commit, so a crash right after it leaves the entry; an entry whose
            // page was never written (or lost the race) is skipped by the reconciler.
            self.enlist_outbox(&run.run_id, run.version, written_at).await?;
        }
        let outcome = if items.len() == 1 && slots.is_empty() {
            let (page, _) = items.pop().expect("the page");
            self.put_page(page).await?
        } else {
            // Slots last: the index of a failed condition names the page, the run item or
            // the idempotency record as before.
            let mut writes: Vec<TransactWriteItem> =
                items.into_iter().map(|(item, condition)| self.put(item, condition)).collect();
            writes.extend(slots.into_iter().map(|slot| match slot {
                SlotWrite::Put(item) => self.put(item, None),
                SlotWrite::Delete { key, .. } => self.delete(key),
            }));
            let token = keys::commit_token(&run.run_id, run.version);
            self.transact(writes, values, token).await?
        };
        if matches!(outcome, TransactOutcome::Done) && !cleanup.is_empty() {
            self.clean_up_slots(cleanup).await;
        }
        Ok(outcome)
    }

    /// Writes `page` alone: one conditional `PutItem`.
    async fn put_page(&self, page: Item) -> Result<TransactOutcome, StoreError> {
        let size = codec::item_size(&page);
        let written = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(page.clone()))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match written {
            Ok(_) => {
                self.meter.write(size);
                Ok(TransactOutcome::Done)
            }
            Err(SdkError::ServiceError(service)) if service.err().is_conditional_check_failed_exception() => {
                // The SDK retries a request whose answer it lost; if the first attempt
                // landed, the page there is this very page (same content, same
                // `written_at`): the commit is ours, not a lost race.
                let PutItemError::ConditionalCheckFailedException(failed) = service.into_err() else {
                    unreachable!("checked above")
                };
                if failed.item() == Some(&page) {
                    self.meter.write(size);
                    return Ok(TransactOutcome::Done);
                }
                Ok(TransactOutcome::ConditionFailed(0))
            }
            Err(error) if is_size_limit(&error) => Err(StoreError::LimitExceeded(format!("{error:?}"))),
            Err(error) => Err(unavailable(error)),
        }
    }
}

/// Condition expressions reference `:values`; every put of a transaction gets the ones its
/// expression uses.
fn attach_values(
    items: Vec<TransactWriteItem>,
    values: &[(&str, aws_sdk_dynamodb::types::AttributeValue)],
) -> Vec<TransactWriteItem> {
    items
        .into_iter()
        .map(|item| {
            let Some(put) = item.put() else { return item };
            let condition = put.condition_expression().unwrap_or("");
            let used: Vec<_> = values.iter().filter(|(name, _)| condition.contains(name)).collect();
            if used.is_empty() {
                return item;
            }
            let mut builder = Put::builder()
                .table_name(put.table_name())
                .set_item(Some(put.item().clone()))
                .condition_expression(condition)
                .set_expression_attribute_names(put.expression_attribute_names().cloned());
            for (name, value) in used {
                builder = builder.expression_attribute_values(*name, value.clone());
            }
            TransactWriteItem::builder().put(builder.build().expect("put has table and item")).build()
        })
        .collect()
}
