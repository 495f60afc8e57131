//! [`DynamoStore`]: the store ports over the single table.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use trellis_core::engine::Effect;
use trellis_core::ports::{
    CreateResult, IdempotencyClaim, IdempotencyRecord, RunFilter, RunPosition, RunStore, StoredWorkflow, WorkflowStore,
};
use trellis_core::timefmt::Millis;
use trellis_core::{RunEvent, RunState, StoreError};

use crate::codec::{self, check_limits, get_n, get_s, n, s, Item};
use crate::errors::{is_size_limit, unavailable};
use crate::keys::{self, EVENTS_END, PK, RUNS_BY_TENANT, SK};
use crate::meter::Meter;

/// How often a commit is retried after `TransactionConflict` or an ambiguous failure.
const COMMIT_ATTEMPTS: u32 = 6;

/// The DynamoDB store.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    meter: std::sync::Arc<Meter>,
    retention_ms: u64,
}

/// How long a run's items are kept after its creation unless configured otherwise.
pub const DEFAULT_RETENTION_DAYS: u64 = 30;

/// How a transaction ended, in the terms the store needs.
enum TransactOutcome {
    Done,
    /// `ConditionalCheckFailed` on the item at this index.
    ConditionFailed(usize),
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn jitter(attempt: u32) -> Duration {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let base = 20u64 << attempt.min(6);
    Duration::from_millis(base + u64::from(nanos) % base)
}

impl DynamoStore {
    /// A store on `table` through `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            meter: std::sync::Arc::default(),
            retention_ms: DEFAULT_RETENTION_DAYS * 86_400_000,
        }
    }

    /// Keeps each run's items for `days` after the run's creation: every item of a run carries
    /// the same `expires_at` (the table's TTL attribute), so they expire together, and a read
    /// treats an expired run as gone even before DynamoDB deletes it.
    pub fn with_retention_days(mut self, days: u64) -> Self {
        self.retention_ms = days * 86_400_000;
        self
    }

    fn expires_at(&self, run: &RunState) -> u64 {
        run.created_at.saturating_add(self.retention_ms) / 1000
    }

    /// The request units this store has used so far (see [`Meter`]).
    pub fn usage(&self) -> crate::Usage {
        self.meter.usage()
    }

    fn put(&self, item: Item, condition: Option<&str>) -> TransactWriteItem {
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

    /// Runs a transaction, retrying `TransactionConflict` and transport failures with the
    /// same token (DynamoDB answers a repeated token idempotently for ten minutes).
    async fn transact(
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
                    let written: Vec<&Item> =
                        items.iter().filter_map(|item| item.put().map(|put| put.item())).collect();
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

    /// Outbox entries written before `written_before` (ms) and not yet sent: what a crash
    /// between commit and send left behind. Returns `(run id, effect)` pairs.
    pub async fn unsent_outbox(&self, written_before: u64) -> Result<Vec<(String, Effect)>, StoreError> {
        let mut found = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(sk, :out) AND written_at < :before")
                .expression_attribute_values(":out", s("OUT#"))
                .expression_attribute_values(":before", n(written_before))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(unavailable)?;
            for item in page.items() {
                found.push(codec::decode_outbox(item)?);
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(found);
            }
        }
    }

    /// The outbox entries of `run_id` not sent yet.
    pub async fn outbox_of(&self, run_id: &str) -> Result<Vec<Effect>, StoreError> {
        let page = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :out)")
            .expression_attribute_values(":pk", s(keys::run_pk(run_id)))
            .expression_attribute_values(":out", s("OUT#"))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        self.meter.read(page.items());
        page.items().iter().map(|item| codec::decode_outbox(item).map(|(_, effect)| effect)).collect()
    }

    /// Removes sent outbox entries of `run_id`.
    pub async fn delete_outbox(&self, run_id: &str, effects: &[Effect]) -> Result<(), StoreError> {
        for effect in effects {
            let mut key = Item::new();
            key.insert(PK.into(), s(keys::run_pk(run_id)));
            key.insert(SK.into(), s(keys::outbox_sk(&effect.task_id(run_id))));
            self.client.delete_item().table_name(&self.table).set_key(Some(key)).send().await.map_err(unavailable)?;
            self.meter.write(codec::item_size(&codec::outbox_item(run_id, effect, 0)?));
        }
        Ok(())
    }

    /// The writes of one run commit: `head` (the state item, and the idempotency record of a
    /// create), then every event (never overwriting one) and every outbox entry, checked
    /// against DynamoDB's transaction limits.
    fn run_writes(
        &self,
        run: &RunState,
        head: Vec<(Item, Option<&str>)>,
        events: &[RunEvent],
        effects: &[Effect],
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let mut items = head;
        for event in events {
            items.push((codec::event_item(&run.run_id, event)?, Some("attribute_not_exists(pk)")));
        }
        let written_at = now_ms();
        for effect in effects {
            items.push((codec::outbox_item(&run.run_id, effect, written_at)?, None));
        }
        let expires_at = self.expires_at(run);
        for (item, _) in items
            .iter_mut()
            .filter(|(item, _)| item.get(PK).is_some_and(|pk| pk.as_s().is_ok_and(|pk| pk.starts_with("RUN#"))))
        {
            item.insert("expires_at".into(), n(expires_at));
        }
        check_limits(&items.iter().map(|(item, _)| item).collect::<Vec<_>>())?;
        Ok(items.into_iter().map(|(item, condition)| self.put(item, condition)).collect())
    }

    async fn get(&self, key: Item) -> Result<Option<Item>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        let item = output.item().cloned();
        self.meter.read(item.as_slice());
        Ok(item)
    }

    async fn workflow_items(&self, namespace: &str, workflow_id: &str) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(keys::workflow_pk(namespace, workflow_id)))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(unavailable)?;
            items.extend(page.items().iter().cloned());
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(items);
            }
        }
    }

    async fn newest_workflow(
        &self,
        namespace: &str,
        workflow_id: &str,
        matches: impl Fn(&Item) -> bool,
    ) -> Result<Option<StoredWorkflow>, StoreError> {
        let items = self.workflow_items(namespace, workflow_id).await?;
        let mut best: Option<(u64, &Item)> = None;
        for item in items.iter().filter(|item| matches(item)) {
            let seq = get_n(item, "seq")?;
            if best.is_none_or(|(top, _)| seq > top) {
                best = Some((seq, item));
            }
        }
        best.map(|(_, item)| codec::decode_workflow(item)).transpose()
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

#[async_trait]
impl WorkflowStore for DynamoStore {
    async fn put_workflow(&self, workflow: &StoredWorkflow, now: Millis) -> Result<(), StoreError> {
        let existing = self.workflow_items(&workflow.namespace, &workflow.workflow_id).await?;
        let newest = existing.iter().filter_map(|item| get_n(item, "seq").ok()).max().unwrap_or(0);
        let item = codec::workflow_item(workflow, now.max(newest + 1))?;
        check_limits(&[&item])?;
        self.client.put_item().table_name(&self.table).set_item(Some(item)).send().await.map_err(unavailable)?;
        Ok(())
    }

    async fn latest_workflow(&self, namespace: &str, workflow_id: &str) -> Result<Option<StoredWorkflow>, StoreError> {
        self.newest_workflow(namespace, workflow_id, |_| true).await
    }

    async fn workflow_version(
        &self,
        namespace: &str,
        workflow_id: &str,
        content_hash: &str,
    ) -> Result<Option<StoredWorkflow>, StoreError> {
        let mut key = Item::new();
        key.insert(PK.into(), s(keys::workflow_pk(namespace, workflow_id)));
        key.insert(SK.into(), s(keys::workflow_sk(content_hash)));
        self.get(key).await?.map(|item| codec::decode_workflow(&item)).transpose()
    }

    async fn workflow_by_label(
        &self,
        namespace: &str,
        workflow_id: &str,
        version: &str,
    ) -> Result<Option<StoredWorkflow>, StoreError> {
        self.newest_workflow(namespace, workflow_id, |item| get_s(item, "version").is_ok_and(|v| v == version)).await
    }

    async fn workflow_ids(&self, namespace: &str) -> Result<Vec<String>, StoreError> {
        let mut ids = std::collections::BTreeSet::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(pk, :prefix)")
                .expression_attribute_values(":prefix", s(keys::workflow_prefix(namespace)))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(unavailable)?;
            for item in page.items() {
                ids.insert(get_s(item, "workflow_id")?.to_owned());
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(ids.into_iter().collect());
            }
        }
    }
}

#[async_trait]
impl RunStore for DynamoStore {
    async fn create_run(
        &self,
        run: &RunState,
        events: &[RunEvent],
        effects: &[Effect],
        idempotency: Option<&IdempotencyRecord>,
    ) -> Result<CreateResult, StoreError> {
        let mut head = vec![(codec::state_item(run)?, Some("attribute_not_exists(pk)"))];
        if let Some(record) = idempotency {
            head.push((
                codec::completed_item(record)?,
                Some("attribute_not_exists(pk) OR (#st = :pending AND digest = :digest)"),
            ));
        }
        let writes = self.run_writes(run, head, events, effects)?;
        let mut values = vec![(":pending", s("pending"))];
        if let Some(record) = idempotency {
            values.push((":digest", s(&record.request_digest)));
        }
        let token = keys::commit_token(&run.run_id, 0);
        match self.transact(writes, values, token).await? {
            TransactOutcome::Done => Ok(CreateResult::Created),
            TransactOutcome::ConditionFailed(1) if idempotency.is_some() => {
                let record = idempotency.expect("checked above");
                let key = codec::idempotency_key(&record.tenant, &record.endpoint, &record.key);
                let existing = self.get(key).await?.ok_or(StoreError::Conflict)?;
                if get_s(&existing, "state")? == "completed" {
                    Ok(CreateResult::Existing(codec::decode_record(&existing)?))
                } else {
                    Err(StoreError::Conflict)
                }
            }
            TransactOutcome::ConditionFailed(_) => Err(StoreError::Conflict),
        }
    }

    async fn load_run(&self, run_id: &str) -> Result<Option<RunState>, StoreError> {
        let item = self.get(codec::state_key(run_id)).await?;
        let live = item.filter(|item| get_n(item, "expires_at").map_or(true, |at| at > now_ms() / 1000));
        live.map(|item| codec::decode_state(&item)).transpose()
    }

    async fn commit(
        &self,
        run: &RunState,
        expected_version: u64,
        events: &[RunEvent],
        effects: &[Effect],
    ) -> Result<(), StoreError> {
        let head = vec![(codec::state_item(run)?, Some("version = :expected"))];
        let writes = self.run_writes(run, head, events, effects)?;
        let token = keys::commit_token(&run.run_id, expected_version);
        match self.transact(writes, vec![(":expected", n(expected_version))], token).await? {
            TransactOutcome::Done => Ok(()),
            TransactOutcome::ConditionFailed(_) => Err(StoreError::Conflict),
        }
    }

    async fn events_after(&self, run_id: &str, after: Option<u64>, limit: usize) -> Result<Vec<RunEvent>, StoreError> {
        let from = keys::event_sk(after.map_or(0, |sequence| sequence + 1));
        let mut events = Vec::new();
        let mut start = None;
        while events.len() < limit {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
                .expression_attribute_values(":pk", s(keys::run_pk(run_id)))
                .expression_attribute_values(":from", s(&from))
                .expression_attribute_values(":to", s(EVENTS_END))
                .consistent_read(true)
                .limit(i32::try_from(limit - events.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(unavailable)?;
            self.meter.read(page.items());
            for item in page.items() {
                events.push(codec::decode_event(item)?);
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        Ok(events)
    }

    async fn find_idempotency(
        &self,
        tenant: &str,
        endpoint: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        match self.get(codec::idempotency_key(tenant, endpoint, key)).await? {
            Some(item) if get_s(&item, "state")? == "completed" => Ok(Some(codec::decode_record(&item)?)),
            _ => Ok(None),
        }
    }

    async fn claim_idempotency(
        &self,
        tenant: &str,
        endpoint: &str,
        key: &str,
        request_digest: &str,
        now: Millis,
        lease_until: Millis,
    ) -> Result<IdempotencyClaim, StoreError> {
        let item = codec::pending_item(tenant, endpoint, key, request_digest, now, lease_until);
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk) OR (#st = :pending AND lease_until <= :now)")
            .expression_attribute_names("#st", "state")
            .expression_attribute_values(":pending", s("pending"))
            .expression_attribute_values(":now", n(now))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match put {
            Ok(_) => Ok(IdempotencyClaim::Claimed),
            Err(error) => {
                let old = match error.as_service_error() {
                    Some(service) if service.is_conditional_check_failed_exception() => match service {
                        aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(e) => {
                            e.item().cloned()
                        }
                        _ => None,
                    },
                    _ => return Err(unavailable(error)),
                };
                let old = match old {
                    Some(old) => old,
                    None => {
                        self.get(codec::idempotency_key(tenant, endpoint, key)).await?.ok_or(StoreError::Conflict)?
                    }
                };
                if get_s(&old, "state")? == "completed" {
                    Ok(IdempotencyClaim::Completed(codec::decode_record(&old)?))
                } else {
                    Ok(IdempotencyClaim::InFlight { request_digest: get_s(&old, "digest")?.to_owned() })
                }
            }
        }
    }

    async fn complete_idempotency(&self, record: &IdempotencyRecord) -> Result<(), StoreError> {
        let item = codec::completed_item(record)?;
        check_limits(&[&item])?;
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("#st = :pending")
            .expression_attribute_names("#st", "state")
            .expression_attribute_values(":pending", s("pending"))
            .send()
            .await;
        match put {
            Ok(_) => Ok(()),
            Err(error) if error.as_service_error().is_some_and(|e| e.is_conditional_check_failed_exception()) => Ok(()),
            Err(error) => Err(unavailable(error)),
        }
    }

    async fn abandon_idempotency(&self, tenant: &str, endpoint: &str, key: &str) -> Result<(), StoreError> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(codec::idempotency_key(tenant, endpoint, key)))
            .condition_expression("#st = :pending")
            .expression_attribute_names("#st", "state")
            .expression_attribute_values(":pending", s("pending"))
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(()),
            Err(error) if error.as_service_error().is_some_and(|e| e.is_conditional_check_failed_exception()) => Ok(()),
            Err(error) => Err(unavailable(error)),
        }
    }

    async fn pending_effects(&self, run_id: &str) -> Result<Vec<Effect>, StoreError> {
        self.outbox_of(run_id).await
    }

    async fn list_runs(
        &self,
        tenant: &str,
        filter: &RunFilter,
        after: Option<&RunPosition>,
        limit: usize,
    ) -> Result<Vec<RunState>, StoreError> {
        let mut runs = Vec::new();
        let mut start = None;
        let mut key_condition = "gsi1pk = :tenant".to_owned();
        if after.is_some() {
            key_condition.push_str(" AND gsi1sk < :after");
        }
        let mut filters = Vec::new();
        if filter.workflow_id.is_some() {
            filters.push("workflow_id = :workflow");
        }
        if filter.status.is_some() {
            filters.push("#status = :status");
        }
        while runs.len() < limit {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(RUNS_BY_TENANT)
                .key_condition_expression(&key_condition)
                .expression_attribute_values(":tenant", s(keys::tenant_gsi_pk(tenant)))
                .scan_index_forward(false)
                .set_exclusive_start_key(start);
            if let Some(position) = after {
                query = query.expression_attribute_values(
                    ":after",
                    s(keys::tenant_gsi_sk(position.created_at, &position.run_id)),
                );
            }
            if !filters.is_empty() {
                query = query.filter_expression(filters.join(" AND "));
            }
            if let Some(workflow) = &filter.workflow_id {
                query = query.expression_attribute_values(":workflow", s(workflow));
            }
            if let Some(status) = filter.status {
                query = query
                    .expression_attribute_names("#status", "status")
                    .expression_attribute_values(":status", s(status.as_str()));
            }
            let page = query.send().await.map_err(unavailable)?;
            let now_s = now_ms() / 1000;
            for item in page.items() {
                let expired = get_n(item, "expires_at").is_ok_and(|at| at <= now_s);
                if runs.len() < limit && !expired {
                    runs.push(codec::decode_state(item)?);
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        Ok(runs)
    }
}
