//! Items to and from the core model, and DynamoDB's item size rule.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use trellis_core::engine::Effect;
use trellis_core::interrupt::Vote;
use trellis_core::limits::IDEMPOTENCY_RETENTION_MS;
use trellis_core::ports::{IdempotencyRecord, StoredWorkflow};
use trellis_core::{RunEvent, RunState, StoreError};

use crate::keys::{
    idempotency_pk, marker_sk, page_sk, run_pk, tenant_gsi_pk, tenant_gsi_sk, vote_sk, workflow_directory_pk,
    workflow_pk, workflow_sk, IDEMPOTENCY_SK, PK, SK, STATE_SK, WORKFLOW_ENTRY_PREFIX,
};

/// The item format this build writes (`format`): 2 since votes are items of their own and a
/// run's state keeps a tally. Items without the attribute are format 1 (their states may
/// carry votes, which still count); a newer format is refused rather than misread.
pub(crate) const FORMAT: u64 = 2;

fn check_format(item: &Item) -> Result<(), StoreError> {
    let format = get_n(item, "format").unwrap_or(1);
    if format > FORMAT {
        return Err(StoreError::Corrupt(format!("item format {format}; this build reads format {FORMAT} and older")));
    }
    Ok(())
}

/// The TTL attribute of an idempotency record: its creation plus the retention, in epoch
/// seconds (DynamoDB deletes it some time after; lookups ignore it from then on).
fn idempotency_expiry(created_at: u64) -> AttributeValue {
    n(created_at.saturating_add(IDEMPOTENCY_RETENTION_MS) / 1000)
}

/// A DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

pub(crate) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

pub(crate) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("item attribute `{what}` is missing or malformed"))
}

pub(crate) fn get_s<'a>(item: &'a Item, name: &str) -> Result<&'a str, StoreError> {
    item.get(name).and_then(|value| value.as_s().ok()).map(String::as_str).ok_or_else(|| corrupt(name))
}

pub(crate) fn get_n(item: &Item, name: &str) -> Result<u64, StoreError> {
    item.get(name).and_then(|value| value.as_n().ok()).and_then(|text| text.parse().ok()).ok_or_else(|| corrupt(name))
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::Corrupt(error.to_string()))
}

fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|error| StoreError::Corrupt(error.to_string()))
}

fn keyed(pk: String, sk: String) -> Item {
    HashMap::from([(PK.to_owned(), s(pk)), (SK.to_owned(), s(sk))])
}

/// The key of the state item of `run_id`.
pub(crate) fn state_key(run_id: &str) -> Item {
    keyed(run_pk(run_id), STATE_SK.to_owned())
}

/// The run item: what the listing index needs, rewritten on status transitions only.
pub(crate) fn run_item(run: &RunState, expires_at: u64) -> Item {
    let mut item = state_key(&run.run_id);
    item.insert("version".into(), n(run.version));
    item.insert("status".into(), s(run.status.as_str()));
    item.insert("tenant".into(), s(&run.tenant));
    item.insert("workflow_id".into(), s(&run.workflow.id));
    item.insert("created_at".into(), n(run.created_at));
    item.insert("gsi1pk".into(), s(tenant_gsi_pk(&run.tenant)));
    item.insert("gsi1sk".into(), s(tenant_gsi_sk(run.created_at, &run.run_id)));
    item.insert("expires_at".into(), n(expires_at));
    item
}

/// One commit: the state after it, its events and its effects. The page of version `v` is
/// the commit point of that version; writing it only if it does not exist is the run's
/// optimistic concurrency.
pub(crate) fn page_item(
    run: &RunState,
    events: &[RunEvent],
    effects: &[Effect],
    written_at: u64,
    expires_at: u64,
) -> Result<Item, StoreError> {
    let mut item = keyed(run_pk(&run.run_id), page_sk(run.version));
    item.insert("version".into(), n(run.version));
    item.insert("doc".into(), s(json(run)?));
    item.insert("events".into(), s(json(&events)?));
    if !effects.is_empty() {
        item.insert("effects".into(), s(json(&effects)?));
    }
    item.insert("written_at".into(), n(written_at));
    item.insert("expires_at".into(), n(expires_at));
    item.insert("format".into(), n(FORMAT));
    Ok(item)
}

/// The key of `voter`'s vote on occurrence `interrupt_id` of `run_id`.
pub(crate) fn vote_key(run_id: &str, interrupt_id: &str, voter: &str) -> Item {
    keyed(run_pk(run_id), vote_sk(interrupt_id, voter))
}

/// A vote item; it expires with its run.
pub(crate) fn vote_item(run_id: &str, interrupt_id: &str, vote: &Vote, expires_at: u64) -> Item {
    let mut item = vote_key(run_id, interrupt_id, &vote.voter);
    item.insert("voter".into(), s(&vote.voter));
    item.insert("action".into(), s(&vote.action));
    item.insert("decided_by".into(), s(&vote.decided_by));
    item.insert("at".into(), n(vote.at));
    item.insert("expires_at".into(), n(expires_at));
    item.insert("format".into(), n(FORMAT));
    item
}

pub(crate) fn decode_vote(item: &Item) -> Result<Vote, StoreError> {
    check_format(item)?;
    Ok(Vote {
        voter: get_s(item, "voter")?.to_owned(),
        action: get_s(item, "action")?.to_owned(),
        decided_by: get_s(item, "decided_by")?.to_owned(),
        at: get_n(item, "at")?,
    })
}

/// The directory item that lists `workflow_id` under its namespace.
pub(crate) fn workflow_directory_item(namespace: &str, workflow_id: &str) -> Item {
    let mut item = keyed(workflow_directory_pk(namespace), format!("{WORKFLOW_ENTRY_PREFIX}{workflow_id}"));
    item.insert("workflow_id".into(), s(workflow_id));
    item
}

/// A decoded page.
pub(crate) struct Page {
    pub(crate) version: u64,
    pub(crate) state: RunState,
    pub(crate) events: Vec<RunEvent>,
    pub(crate) effects: Vec<Effect>,
    pub(crate) expires_at: Option<u64>,
}

impl Page {
    /// The sequence of the page's first event (the next sequence when it has none).
    pub(crate) fn first_sequence(&self) -> u64 {
        self.state.next_sequence - self.events.len() as u64
    }
}

pub(crate) fn decode_page(item: &Item) -> Result<Page, StoreError> {
    check_format(item)?;
    let effects = match item.get("effects").and_then(|value| value.as_s().ok()) {
        Some(text) => parse(text)?,
        None => Vec::new(),
    };
    Ok(Page {
        version: get_n(item, "version")?,
        state: parse(get_s(item, "doc")?)?,
        events: parse(get_s(item, "events")?)?,
        effects,
        expires_at: get_n(item, "expires_at").ok(),
    })
}

pub(crate) fn marker_item(run_id: &str, version: u64, expires_at: u64) -> Item {
    let mut item = keyed(run_pk(run_id), marker_sk(version));
    item.insert("expires_at".into(), n(expires_at));
    item
}

/// The key of the idempotency record of `(tenant, endpoint, key)`.
pub(crate) fn idempotency_key(tenant: &str, endpoint: &str, key: &str) -> Item {
    keyed(idempotency_pk(tenant, endpoint, key), IDEMPOTENCY_SK.to_owned())
}

pub(crate) fn pending_item(tenant: &str, endpoint: &str, key: &str, digest: &str, now: u64, lease_until: u64) -> Item {
    let mut item = idempotency_key(tenant, endpoint, key);
    item.insert("tenant".into(), s(tenant));
    item.insert("endpoint".into(), s(endpoint));
    item.insert("idem_key".into(), s(key));
    item.insert("digest".into(), s(digest));
    item.insert("state".into(), s("pending"));
    item.insert("lease_until".into(), n(lease_until));
    item.insert("created_at".into(), n(now));
    item.insert("expires_at".into(), idempotency_expiry(now));
    item
}

pub(crate) fn completed_item(record: &IdempotencyRecord) -> Result<Item, StoreError> {
    let mut item = idempotency_key(&record.tenant, &record.endpoint, &record.key);
    item.insert("tenant".into(), s(&record.tenant));
    item.insert("endpoint".into(), s(&record.endpoint));
    item.insert("idem_key".into(), s(&record.key));
    item.insert("digest".into(), s(&record.request_digest));
    item.insert("state".into(), s("completed"));
    item.insert("status".into(), n(u64::from(record.status)));
    item.insert("body".into(), s(json(&record.body)?));
    item.insert("created_at".into(), n(record.created_at));
    item.insert("expires_at".into(), idempotency_expiry(record.created_at));
    Ok(item)
}

pub(crate) fn decode_record(item: &Item) -> Result<IdempotencyRecord, StoreError> {
    Ok(IdempotencyRecord {
        tenant: get_s(item, "tenant")?.to_owned(),
        endpoint: get_s(item, "endpoint")?.to_owned(),
        key: get_s(item, "idem_key")?.to_owned(),
        request_digest: get_s(item, "digest")?.to_owned(),
        status: u16::try_from(get_n(item, "status")?).map_err(|_| corrupt("status"))?,
        body: parse(get_s(item, "body")?)?,
        created_at: get_n(item, "created_at")?,
    })
}

pub(crate) fn workflow_item(workflow: &StoredWorkflow, seq: u64) -> Result<Item, StoreError> {
    let mut item = keyed(workflow_pk(&workflow.namespace, &workflow.workflow_id), workflow_sk(&workflow.content_hash));
    item.insert("namespace".into(), s(&workflow.namespace));
    item.insert("workflow_id".into(), s(&workflow.workflow_id));
    item.insert("version".into(), s(&workflow.version));
    item.insert("content_hash".into(), s(&workflow.content_hash));
    item.insert("document".into(), s(json(&workflow.document)?));
    item.insert("seq".into(), n(seq));
    Ok(item)
}

pub(crate) fn decode_workflow(item: &Item) -> Result<StoredWorkflow, StoreError> {
    Ok(StoredWorkflow {
        namespace: get_s(item, "namespace")?.to_owned(),
        workflow_id: get_s(item, "workflow_id")?.to_owned(),
        version: get_s(item, "version")?.to_owned(),
        content_hash: get_s(item, "content_hash")?.to_owned(),
        document: parse(get_s(item, "document")?)?,
    })
}

/// An item's size by DynamoDB's rules: attribute names plus values (strings by UTF-8 length,
/// numbers by about one byte per two digits plus one).
pub(crate) fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, value)| {
            name.len()
                + match value {
                    AttributeValue::S(text) => text.len(),
                    AttributeValue::N(number) => number.len().div_ceil(2) + 1,
                    _ => 1,
                }
        })
        .sum()
}

/// DynamoDB's item size limit.
pub(crate) const MAX_ITEM_BYTES: usize = 400 * 1024;
/// Items per transaction.
pub(crate) const MAX_TRANSACTION_ITEMS: usize = 100;
/// Bytes per transaction.
pub(crate) const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;

/// Refuses a transaction that DynamoDB would reject for its size, with a clear reason.
pub(crate) fn check_limits(items: &[&Item]) -> Result<(), StoreError> {
    if items.len() > MAX_TRANSACTION_ITEMS {
        return Err(StoreError::LimitExceeded(format!(
            "one commit would write {} items; DynamoDB allows {MAX_TRANSACTION_ITEMS} per transaction",
            items.len()
        )));
    }
    let mut total = 0;
    for item in items {
        let size = item_size(item);
        if size > MAX_ITEM_BYTES {
            return Err(StoreError::LimitExceeded(format!(
                "an item of {size} bytes exceeds DynamoDB's {MAX_ITEM_BYTES}-byte item limit"
            )));
        }
        total += size;
    }
    if total > MAX_TRANSACTION_BYTES {
        return Err(StoreError::LimitExceeded(format!(
            "one commit would write {total} bytes; DynamoDB allows {MAX_TRANSACTION_BYTES} per transaction"
        )));
    }
    Ok(())
}
