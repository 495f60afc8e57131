//! [`DynamoStore`]: the store ports over the single table.

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use aws_sdk_dynamodb::Client;
use serde_json::Value;
use trellis_core::engine::Effect;
use trellis_core::interrupt::{counted_vote, Vote};
use trellis_core::limits::IDEMPOTENCY_RETENTION_MS;
use trellis_core::ports::{
    CreateResult, HostSettings, IdempotencyClaim, IdempotencyRecord, RunFilter, RunPosition, RunStore, StoredWorkflow,
    WorkflowStore,
};
use trellis_core::run::Changes;
use trellis_core::timefmt::Millis;
use trellis_core::{RunEvent, RunState, StoreError};

use crate::codec::{self, check_limits, get_n, get_s, n, s, Item};
use crate::errors::{unavailable, unless_condition_failed};
use crate::keys::{self, PK, RUNS_BY_TENANT, SK};
use crate::meter::Meter;

mod blobs;
mod host_records;
mod hot;
mod outbox;
mod reads;
mod removal;
pub(crate) mod slots;
mod transact;
pub use outbox::UnsentPage;
use transact::TransactOutcome;

/// Items per request of a prefix query.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Paging {
    /// The same number each request.
    Fixed(i32),
    /// This many first, then four times as many as the request before (at most 1,000).
    Growing(i32),
}

/// The DynamoDB store.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    meter: std::sync::Arc<Meter>,
    retention_ms: u64,
    outbox_entries: bool,
    delta_pages: bool,
    hot: std::sync::Arc<hot::HotRuns>,
    blobs: Option<blobs::BlobBucket>,
}

/// How long a run's items are kept after its creation unless configured otherwise.
pub const DEFAULT_RETENTION_DAYS: u64 = 30;

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl DynamoStore {
    /// A store on `table` through `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            meter: std::sync::Arc::default(),
            retention_ms: DEFAULT_RETENTION_DAYS * 86_400_000,
            outbox_entries: false,
            delta_pages: true,
            hot: std::sync::Arc::default(),
            blobs: None,
        }
    }

    /// Keeps runs' blobs (values over 256 KiB, see `trellis_core::blob`) in S3 `bucket`.
    pub fn with_blob_bucket(mut self, client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        self.blobs = Some(blobs::BlobBucket { client, bucket: bucket.into() });
        self
    }

    /// Writes an outbox entry before every commit that carries effects, for a writer whose
    /// commits no redelivery repairs (the API function): the reconciler reads recent entries
    /// instead of scanning the table. Writers whose tasks are redelivered (dispatcher,
    /// completion) do without; their sink enlists a page only when its send fails.
    pub fn with_outbox_entries(mut self) -> Self {
        self.outbox_entries = true;
        self
    }

    /// Writes every commit as a checkpoint (format 2) when `enabled` is false, while still
    /// reading delta pages: the first phase of a rollout that must stay reversible (an
    /// instance of a build before delta pages refuses a run whose newest page is a delta),
    /// and the phase to go back through before rolling back to such a build.
    pub fn with_delta_pages(mut self, enabled: bool) -> Self {
        self.delta_pages = enabled;
        self
    }

    /// Keeps the items of a run without a retention of its own `days` past the latest it can
    /// end: every item of a run carries the same `expires_at` (the table's TTL attribute), so
    /// they expire together, and a read treats an expired run as gone even before DynamoDB
    /// deletes it.
    pub fn with_retention_days(mut self, days: u64) -> Self {
        self.retention_ms = days * 86_400_000;
        self
    }

    /// The TTL of every item of `run`: its creation plus its duration limit (the latest it can
    /// end) plus its retention (this store's for a run without one), in epoch seconds.
    fn expires_at(&self, run: &RunState) -> u64 {
        let retention = run.retention_ms.unwrap_or(self.retention_ms);
        run.created_at.saturating_add(run.limits.run_duration_ms).saturating_add(retention) / 1000
    }

    /// The request units this store has used so far (see [`Meter`]).
    pub fn usage(&self) -> crate::Usage {
        self.meter.usage()
    }

    /// Visits the items of partition `pk` whose sort key starts with `prefix` (newest first
    /// when `!forward`), `paging` per request, until `visit` returns `true` or none are left.
    async fn query_prefix(
        &self,
        pk: String,
        prefix: &str,
        forward: bool,
        paging: Paging,
        visit: impl FnMut(&Item) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let (page_size, growing) = match paging {
            Paging::Fixed(size) => (size, false),
            Paging::Growing(size) => (size, true),
        };
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", s(&pk))
            .expression_attribute_values(":prefix", s(prefix))
            .scan_index_forward(forward)
            .consistent_read(true)
            .limit(page_size);
        self.paged_query(query, growing, visit).await
    }

    /// Runs `query` page by page (metered), visiting each item until `visit` returns `true`
    /// or no page is left.
    async fn visit_query(
        &self,
        query: QueryFluentBuilder,
        visit: impl FnMut(&Item) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.paged_query(query, false, visit).await
    }

    /// [`DynamoStore::visit_query`]; when `growing`, each request after the first asks for four
    /// times as many items as the one before (at most 1,000).
    async fn paged_query(
        &self,
        mut query: QueryFluentBuilder,
        growing: bool,
        mut visit: impl FnMut(&Item) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let mut start = None;
        loop {
            let page = query.clone().set_exclusive_start_key(start).send().await.map_err(unavailable)?;
            self.meter.read(page.items());
            for item in page.items() {
                if visit(item)? {
                    return Ok(());
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(());
            }
            if growing {
                let next = query.get_limit().map(|limit| limit.saturating_mul(4).min(1000));
                query = query.set_limit(next);
            }
        }
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
        self.query_prefix(keys::workflow_pk(namespace, workflow_id), "H#", true, Paging::Fixed(100), |item| {
            items.push(item.clone());
            Ok(false)
        })
        .await?;
        Ok(items)
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

#[async_trait]
impl HostSettings for DynamoStore {
    async fn setting(&self, key: &str) -> Result<Option<Value>, StoreError> {
        let mut item_key = Item::new();
        item_key.insert(PK.into(), s(keys::HOST_PK.to_owned()));
        item_key.insert(SK.into(), s(keys::setting_sk(key)));
        let Some(item) = self.get(item_key).await? else { return Ok(None) };
        let text = get_s(&item, "value")?;
        serde_json::from_str(text).map(Some).map_err(|error| StoreError::Corrupt(error.to_string()))
    }

    async fn put_setting(&self, key: &str, value: &Value) -> Result<(), StoreError> {
        let mut item = Item::new();
        item.insert(PK.into(), s(keys::HOST_PK.to_owned()));
        item.insert(SK.into(), s(keys::setting_sk(key)));
        item.insert("value".into(), s(value.to_string()));
        let size = codec::item_size(&item);
        self.client.put_item().table_name(&self.table).set_item(Some(item)).send().await.map_err(unavailable)?;
        self.meter.write(size);
        Ok(())
    }
}

#[async_trait]
impl WorkflowStore for DynamoStore {
    async fn put_workflow(&self, workflow: &StoredWorkflow, now: Millis) -> Result<(), StoreError> {
        let existing = self.workflow_items(&workflow.namespace, &workflow.workflow_id).await?;
        let newest = existing.iter().filter_map(|item| get_n(item, "seq").ok()).max().unwrap_or(0);
        let item = codec::workflow_item(workflow, now.max(newest + 1))?;
        check_limits(&[&item])?;
        self.client.put_item().table_name(&self.table).set_item(Some(item)).send().await.map_err(unavailable)?;
        // The namespace's directory entry, so listing ids is a query, not a table scan.
        let entry = codec::workflow_directory_item(&workflow.namespace, &workflow.workflow_id);
        let size = codec::item_size(&entry);
        self.client.put_item().table_name(&self.table).set_item(Some(entry)).send().await.map_err(unavailable)?;
        self.meter.write(size);
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
        // The directory partition of the namespace: its entries sort by id.
        let mut ids = Vec::new();
        self.query_prefix(
            keys::workflow_directory_pk(namespace),
            keys::WORKFLOW_ENTRY_PREFIX,
            true,
            Paging::Fixed(100),
            |item| {
                ids.push(get_s(item, "workflow_id")?.to_owned());
                Ok(false)
            },
        )
        .await?;
        Ok(ids)
    }
}

#[async_trait]
impl RunStore for DynamoStore {
    async fn delete_run(&self, run_id: &str) -> Result<u64, StoreError> {
        // The blobs first: a delete cut short leaves the run listed, to be deleted again.
        let blobs = self.remove_blobs(run_id).await?;
        Ok(self.remove_run(run_id).await? + blobs)
    }

    async fn run_bytes(&self, run_id: &str) -> Result<u64, StoreError> {
        self.stored_bytes(run_id).await
    }

    async fn create_run(
        &self,
        run: &RunState,
        events: &[RunEvent],
        effects: &[Effect],
        idempotency: Option<&IdempotencyRecord>,
    ) -> Result<CreateResult, StoreError> {
        let mut extra = vec![(codec::run_item(run, self.expires_at(run)), Some("attribute_not_exists(pk)"))];
        let mut values = Vec::new();
        if let Some(record) = idempotency {
            // The caller's pending claim, or a finished record past the retention (absent,
            // even before TTL deletes it), is replaced; a live finished record wins.
            extra.push((
                codec::completed_item(record)?,
                Some(
                    "attribute_not_exists(pk) OR (#st = :pending AND digest = :digest) \
                     OR (#st = :completed AND created_at <= :cutoff)",
                ),
            ));
            values.push((":pending", s("pending")));
            values.push((":digest", s(&record.request_digest)));
            values.push((":completed", s("completed")));
            values.push((":cutoff", n(record.created_at.saturating_sub(IDEMPOTENCY_RETENTION_MS))));
        }
        let written_at = now_ms();
        let (page, basis) = self.page_for(run, None, &Changes::all(), events, effects, written_at)?;
        let slots = slots::slot_writes(run, &Changes::all(), self.expires_at(run))?;
        match self.write_page(run, page, !effects.is_empty(), written_at, extra, values, slots).await? {
            TransactOutcome::Done => {
                self.hot.put(&run.run_id, run.version, None, basis);
                Ok(CreateResult::Created)
            }
            // Index 2 is the idempotency record (page, run item, record).
            TransactOutcome::ConditionFailed(2) if idempotency.is_some() => {
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
        self.read_run(run_id, reads::ReadMode::Copy).await
    }

    async fn take_run(&self, run_id: &str) -> Result<Option<RunState>, StoreError> {
        self.read_run(run_id, reads::ReadMode::Take).await
    }

    fn retain_run(&self, run: RunState) {
        self.hot.retain(run);
    }

    async fn commit(
        &self,
        run: &RunState,
        expected_version: u64,
        events: &[RunEvent],
        effects: &[Effect],
    ) -> Result<(), StoreError> {
        self.commit_changes(run, expected_version, &Changes::all(), events, effects).await
    }

    async fn commit_changes(
        &self,
        run: &RunState,
        expected_version: u64,
        changes: &Changes,
        events: &[RunEvent],
        effects: &[Effect],
    ) -> Result<(), StoreError> {
        if run.version != expected_version.saturating_add(1) {
            return Err(StoreError::VersionSkip { expected: expected_version, found: run.version });
        }
        // A commit that changes the status (to waiting, paused, terminal — or back to
        // running) also rewrites the run item (the listing index); one whose events cast
        // votes writes each vote's item; one that touches fan-out records writes their items
        // (`slots`); plain progress writes the page alone.
        let mut extra = if run.status_version == run.version {
            vec![(codec::run_item(run, self.expires_at(run)), None)]
        } else {
            Vec::new()
        };
        for (interrupt_id, vote) in events.iter().filter_map(counted_vote) {
            extra.push((codec::vote_item(&run.run_id, &interrupt_id, &vote, self.expires_at(run)), None));
        }
        // The fan-out records it touched are items of their own, written with the page.
        let mut slots = slots::slot_writes(run, changes, self.expires_at(run))?;
        if changes.all {
            slots.extend(self.stale_slots(run).await?);
        }
        let written_at = now_ms();
        let (page, basis) = self.page_for(run, Some(expected_version), changes, events, effects, written_at)?;
        match self.write_page(run, page, !effects.is_empty(), written_at, extra, Vec::new(), slots).await {
            Ok(TransactOutcome::Done) => {
                self.hot.put(&run.run_id, run.version, None, basis);
                Ok(())
            }
            Ok(TransactOutcome::ConditionFailed(_)) => {
                self.hot.forget(&run.run_id);
                Err(StoreError::Conflict)
            }
            // Refused before sending: the basis still holds (a failed attempt is recorded on it).
            Err(error @ StoreError::LimitExceeded(_)) => Err(error),
            Err(error) => {
                // Whether it landed is unknown: the next read finds out.
                self.hot.forget(&run.run_id);
                Err(error)
            }
        }
    }

    async fn events_after(&self, run_id: &str, after: Option<u64>, limit: usize) -> Result<Vec<RunEvent>, StoreError> {
        let pages = self
            .pages_newest_first(run_id, 4, |page| after.is_some_and(|after| page.first_sequence() <= after + 1))
            .await?;
        let events = pages
            .into_iter()
            .rev()
            .flat_map(|page| page.events)
            .filter(|event| after.is_none_or(|after| event.sequence > after))
            .take(limit)
            .collect();
        Ok(events)
    }

    async fn vote(&self, run_id: &str, interrupt_id: &str, voter: &str) -> Result<Option<Vote>, StoreError> {
        self.get(codec::vote_key(run_id, interrupt_id, voter)).await?.map(|item| codec::decode_vote(&item)).transpose()
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
            // A lapsed claim, or a finished record past the retention (absent, even before TTL
            // deletes it), is taken over.
            .condition_expression(
                "attribute_not_exists(pk) OR (#st = :pending AND lease_until <= :now) \
                 OR (#st = :completed AND created_at <= :cutoff)",
            )
            .expression_attribute_names("#st", "state")
            .expression_attribute_values(":pending", s("pending"))
            .expression_attribute_values(":completed", s("completed"))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":cutoff", n(now.saturating_sub(IDEMPOTENCY_RETENTION_MS)))
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
        unless_condition_failed(put)
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
        unless_condition_failed(deleted)
    }

    async fn pending_effects(&self, run_id: &str) -> Result<Vec<Effect>, StoreError> {
        Ok(self.unsent_pages(run_id).await?.into_iter().flat_map(|page| page.effects).collect())
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
                codec::check_format(item)?;
                let expired = get_n(item, "expires_at").is_ok_and(|at| at <= now_s);
                if runs.len() < limit && !expired {
                    let run_id = get_s(item, "pk")?.trim_start_matches("RUN#");
                    if let Some(run) = self.read_run(run_id, reads::ReadMode::Listing).await? {
                        runs.push(run);
                    }
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
