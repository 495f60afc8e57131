//! Items to and from the core model, and DynamoDB's item size rule.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use trellis_core::engine::Effect;
use trellis_core::interrupt::Vote;
use trellis_core::limits::IDEMPOTENCY_RETENTION_MS;
use trellis_core::ports::{IdempotencyRecord, StoredWorkflow};
use trellis_core::{RunEvent, RunState, StoreError};

use crate::delta::Delta;
use crate::keys::{
    idempotency_pk, marker_sk, outbox_pk, outbox_sk, page_sk, run_pk, tenant_gsi_pk, tenant_gsi_sk, vote_sk,
    workflow_directory_pk, workflow_pk, workflow_sk, HOST_PK, IDEMPOTENCY_SK, OUTBOX_RETENTION_MS, PK, SK, STATE_SK,
    WORKFLOW_ENTRY_PREFIX,
};

/// The newest item format this build reads and writes (`format`, on pages, run items, votes,
/// markers, slots and outbox entries): 4 for a page whose state holds a parallel fan-out
/// (its counters, and per-child slot records an older build would misread as nodes; a
/// checkpoint leaves the slot records to their own items, `store/slots.rs`) and for those
/// slot items; 3 for another delta page (the state is the newest checkpoint and the deltas
/// after it, [`crate::delta`]); 2 for every other item since votes are items of their own
/// and a run's state keeps a tally. Items without the attribute are format 1 (their states
/// may carry votes, which still count).
///
/// A newer format is refused as `Unavailable` — retryable, never `Corrupt` and never a failed
/// run: during a deployment old and new instances overlap, and the message or request comes
/// back to an instance that reads it. The number moves only for a change an older reader
/// would misread; an attribute older readers safely ignore (a page's `next`, see
/// [`page_item`]) keeps it.
pub(crate) const FORMAT: u64 = PUBLISH_FORMAT;

/// The format of a delta page without a fan-out.
pub(crate) const DELTA_FORMAT: u64 = 3;

/// The format of a page whose state holds a parallel fan-out.
pub(crate) const FAN_OUT_FORMAT: u64 = 4;

/// The format of a page whose effects include a webhook delivery (an older build would not
/// parse the effect).
pub(crate) const WEBHOOK_FORMAT: u64 = 5;

/// The format of a page whose effects include a publish to the event bus (an older build
/// would not parse the effect).
pub(crate) const PUBLISH_FORMAT: u64 = 6;

/// The format of every item but a delta page: an older (format-2) instance still reads them.
pub(crate) const BASE_FORMAT: u64 = 2;

pub(crate) fn check_format(item: &Item) -> Result<(), StoreError> {
    let format = item.get("format").map_or(Ok(1), |_| get_n(item, "format"))?;
    if format > FORMAT {
        return Err(StoreError::Unavailable(format!(
            "item format {format}; this build reads format {FORMAT} and older (a newer instance wrote it)"
        )));
    }
    Ok(())
}

/// Whether the effects of a commit need no "sent" marker: a single `Step` (the run's next
/// step). The marker is proven by what follows: once that step is handled, the node is no
/// longer scheduled at that activation in the run's newest state. Pages with several effects
/// or another kind (timers, notices, children, activity attempts) keep the marker.
pub fn proven_by_successor(effects: &[Effect]) -> bool {
    matches!(effects, [Effect::Step { .. }])
}

/// What shows, in the data, that one effect of a page without a "sent" marker was sent or
/// carried out (the proof of each effect; `store/outbox.rs` checks them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proof<'a> {
    /// The run's next step: once handled, its node is no longer scheduled at that activation
    /// in the run's newest state (the successor page).
    Successor {
        /// The step's node.
        node_id: &'a str,
        /// Its activation.
        activation: u32,
    },
    /// A child's start: the child run exists and its creation page was sent — or the
    /// parent's node no longer waits for it (a start sent again would do nothing).
    ChildCreated {
        /// The parent's node.
        node_id: &'a str,
        /// The child's deterministic id.
        child_run_id: &'a str,
    },
    /// A notice to the parent: the parent no longer waits for this child at that node (it
    /// applied the child's end, or moved on) and the parent's own pages were sent.
    ParentMovedOn {
        /// The parent run.
        parent_run_id: &'a str,
        /// The parent's node.
        parent_node_id: &'a str,
    },
    /// Nothing in the data: only the marker tells.
    Marker,
}

/// The proof of `effect` (see [`Proof`]).
pub(crate) fn proof(effect: &Effect) -> Proof<'_> {
    match effect {
        Effect::Step { node_id, activation, .. } => Proof::Successor { node_id, activation: *activation },
        Effect::StartChild { node_id, child_run_id, .. } => Proof::ChildCreated { node_id, child_run_id },
        Effect::NotifyParent { parent_run_id, parent_node_id, .. } => {
            Proof::ParentMovedOn { parent_run_id, parent_node_id }
        }
        _ => Proof::Marker,
    }
}

/// Whether a page whose `effects` were sent, `carried_out` ones by the committing call
/// itself, needs its "sent" marker. Not for a single next step ([`proven_by_successor`], in
/// `next`), and not when every effect was carried out and its proof is already in the data:
/// a child the call created ([`Proof::ChildCreated`]), a parent it notified
/// ([`Proof::ParentMovedOn`]). Everything else keeps the marker — steps among other effects
/// too: they ride in `effects`, which an older reader re-sends whenever the marker is
/// missing, and a re-sent step that finds its node moved on re-sends the run's unsent pages
/// again (a loop between older readers). A re-sent child start or notice ends instead: the
/// start finds the parent no longer waiting (or the child existing), the notice a parent that
/// no longer waits, and neither re-sends the page it came from.
pub(crate) fn needs_marker(effects: &[Effect], carried_out: &[Effect]) -> bool {
    if proven_by_successor(effects) {
        return false;
    }
    effects.is_empty()
        || !effects.iter().all(|effect| {
            carried_out.contains(effect)
                && matches!(proof(effect), Proof::ChildCreated { .. } | Proof::ParentMovedOn { .. })
        })
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
    item.insert("format".into(), n(BASE_FORMAT));
    item
}

/// What a page carries of the state after its commit.
pub(crate) enum PageBody<'a> {
    /// The whole state: a checkpoint (attribute `doc`).
    Full(&'a RunState),
    /// What the commit changed (attribute `delta`, format 3).
    Delta(&'a Delta),
}

/// One commit: the state after it (whole, or what changed), its events and its effects. The
/// page of version `v` is the commit point of that version; writing it only if it does not
/// exist is the run's optimistic concurrency.
///
/// Effects that need a "sent" marker are in `effects`; a single next step (see
/// [`proven_by_successor`]) is in `next` instead, so a format-2 reader without this rule sees
/// no effects there and never re-sends it (its marker is never written).
pub(crate) fn page_item(
    run: &RunState,
    body: PageBody<'_>,
    events: &[RunEvent],
    effects: &[Effect],
    written_at: u64,
    expires_at: u64,
) -> Result<Item, StoreError> {
    let mut item = keyed(run_pk(&run.run_id), page_sk(run.version));
    item.insert("version".into(), n(run.version));
    let format = match body {
        PageBody::Full(state) => {
            item.insert("doc".into(), s(json(state)?));
            BASE_FORMAT
        }
        PageBody::Delta(delta) => {
            item.insert("delta".into(), s(json(delta)?));
            DELTA_FORMAT
        }
    };
    let fans_out =
        run.nodes.iter().any(|(key, node)| node.fan_out.is_some() || trellis_core::engine::is_fan_out_record(key));
    let format = if fans_out { FAN_OUT_FORMAT } else { format };
    let delivers = effects.iter().any(|effect| matches!(effect, Effect::DeliverWebhook { .. }));
    let format = if delivers { WEBHOOK_FORMAT } else { format };
    let publishes = effects.iter().any(|effect| matches!(effect, Effect::PublishEvents { .. }));
    let format = if publishes { PUBLISH_FORMAT } else { format };
    item.insert("next_sequence".into(), n(run.next_sequence));
    item.insert("events".into(), s(json(&events)?));
    if proven_by_successor(effects) {
        item.insert("next".into(), s(json(&effects[0])?));
    } else if !effects.is_empty() {
        item.insert("effects".into(), s(json(&effects)?));
    }
    item.insert("written_at".into(), n(written_at));
    item.insert("expires_at".into(), n(expires_at));
    item.insert("format".into(), n(format));
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
    item.insert("format".into(), n(BASE_FORMAT));
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

/// A decoded page; its state is parsed only when asked for ([`Page::body`]).
pub(crate) struct Page {
    pub(crate) run_id: String,
    pub(crate) version: u64,
    /// The item's size by DynamoDB's rule.
    pub(crate) bytes: usize,
    /// The run's next event sequence after the commit.
    pub(crate) next_sequence: u64,
    /// The page's state document: `doc` (whole) or `delta`, as text.
    body: StoredBody,
    pub(crate) events: Vec<RunEvent>,
    /// Effects that are sent once the page's marker exists.
    pub(crate) effects: Vec<Effect>,
    /// The single next step, sent without a marker (see [`proven_by_successor`]).
    pub(crate) next: Option<Effect>,
    pub(crate) written_at: u64,
    pub(crate) expires_at: Option<u64>,
}

enum StoredBody {
    Full(String),
    Delta(String),
}

/// A page's state, parsed.
pub(crate) enum Body {
    /// A checkpoint.
    Full(Box<RunState>),
    /// A delta on the previous version.
    Delta(Delta),
}

impl Page {
    /// The sequence of the page's first event (the next sequence when it has none).
    pub(crate) fn first_sequence(&self) -> u64 {
        self.next_sequence - self.events.len() as u64
    }

    /// Whether the page carries the whole state.
    pub(crate) fn is_checkpoint(&self) -> bool {
        matches!(self.body, StoredBody::Full(_))
    }

    /// The page's state document, parsed.
    pub(crate) fn body(&self) -> Result<Body, StoreError> {
        match &self.body {
            StoredBody::Full(text) => parse(text).map(|state| Body::Full(Box::new(state))),
            StoredBody::Delta(text) => parse(text).map(Body::Delta),
        }
    }
}

/// The state at the newest of `pages` (given newest first, consecutive versions), rebuilt
/// from the newest checkpoint among them and the deltas after it; `None` when they hold no
/// checkpoint.
pub(crate) fn fold_newest_first(pages: &[Page]) -> Result<Option<RunState>, StoreError> {
    let Some(at) = pages.iter().position(Page::is_checkpoint) else { return Ok(None) };
    let Body::Full(state) = pages[at].body()? else { unreachable!("a checkpoint page") };
    let mut state = *state;
    for page in pages[..at].iter().rev() {
        match page.body()? {
            Body::Full(full) => state = *full,
            Body::Delta(delta) => delta.apply(&mut state)?,
        }
    }
    Ok(Some(state))
}

pub(crate) fn decode_page(item: &Item) -> Result<Page, StoreError> {
    check_format(item)?;
    let body = match (item.get("doc"), item.get("delta")) {
        (Some(_), _) => StoredBody::Full(get_s(item, "doc")?.to_owned()),
        (None, Some(_)) => StoredBody::Delta(get_s(item, "delta")?.to_owned()),
        (None, None) => return Err(corrupt("doc")),
    };
    let next_sequence = match item.get("next_sequence") {
        Some(_) => get_n(item, "next_sequence")?,
        // Pages written before the attribute: the state has it.
        None => match &body {
            StoredBody::Full(text) => parse::<RunState>(text)?.next_sequence,
            StoredBody::Delta(_) => return Err(corrupt("next_sequence")),
        },
    };
    let effects = match item.get("effects").and_then(|value| value.as_s().ok()) {
        Some(text) => parse(text)?,
        None => Vec::new(),
    };
    let next = match item.get("next").and_then(|value| value.as_s().ok()) {
        Some(text) => Some(parse(text)?),
        None => None,
    };
    Ok(Page {
        run_id: get_s(item, PK)?.trim_start_matches("RUN#").to_owned(),
        version: get_n(item, "version")?,
        bytes: item_size(item),
        next_sequence,
        body,
        events: parse(get_s(item, "events")?)?,
        effects,
        next,
        written_at: get_n(item, "written_at").unwrap_or(0),
        expires_at: get_n(item, "expires_at").ok(),
    })
}

/// The key of page `version` of `run_id`.
pub(crate) fn page_key(run_id: &str, version: u64) -> Item {
    keyed(run_pk(run_id), page_sk(version))
}

/// The key of the "sent" marker of page `version` of `run_id`.
pub(crate) fn marker_key(run_id: &str, version: u64) -> Item {
    keyed(run_pk(run_id), marker_sk(version))
}

/// The key of a host-wide item.
pub(crate) fn host_key(sk: &str) -> Item {
    keyed(HOST_PK.to_owned(), sk.to_owned())
}

pub(crate) fn marker_item(run_id: &str, version: u64, expires_at: u64) -> Item {
    let mut item = keyed(run_pk(run_id), marker_sk(version));
    item.insert("expires_at".into(), n(expires_at));
    item.insert("format".into(), n(BASE_FORMAT));
    item
}

/// An outbox entry: page `version` of `run_id` may have unsent effects that no redelivery
/// repairs (written by the API before its commit, or by a sink whose send failed).
pub(crate) fn outbox_item(run_id: &str, version: u64, written_at: u64) -> Item {
    let mut item = keyed(outbox_pk(written_at, run_id), outbox_sk(written_at, run_id, version));
    item.insert("run_id".into(), s(run_id));
    item.insert("version".into(), n(version));
    item.insert("written_at".into(), n(written_at));
    item.insert("expires_at".into(), n(written_at.saturating_add(OUTBOX_RETENTION_MS) / 1000));
    item.insert("format".into(), n(BASE_FORMAT));
    item
}

/// A decoded outbox entry: `(run id, version)`.
pub(crate) fn decode_outbox(item: &Item) -> Result<(String, u64), StoreError> {
    check_format(item)?;
    Ok((get_s(item, "run_id")?.to_owned(), get_n(item, "version")?))
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
pub fn item_size(item: &Item) -> usize {
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

#[cfg(test)]
mod tests {
    use trellis_core::testing::{chain_workflow, pending_run};

    use super::*;

    fn step(node: &str) -> Effect {
        Effect::Step { node_id: node.into(), activation: 1, due_at: 5 }
    }

    fn page(effects: &[Effect]) -> Item {
        let run = pending_run(&chain_workflow(), "run-f", "t");
        page_item(&run, PageBody::Full(&run), &[], effects, 7, 9).expect("page item")
    }

    #[test]
    fn an_item_without_a_format_reads_as_the_old_format() {
        let mut item = page(&[step("a"), step("b")]);
        item.remove("format");
        // A page of the first formats has neither `format` nor `next_sequence`.
        item.remove("next_sequence");
        let decoded = decode_page(&item).expect("a page without `format` still reads");
        assert!(decoded.is_checkpoint());
        assert_eq!(decoded.first_sequence(), 0);
        assert_eq!(decoded.effects, [step("a"), step("b")]);
        assert_eq!((decoded.next, decoded.written_at), (None, 7));
        let vote = Vote { voter: "v".into(), action: "accept".into(), decided_by: "p".into(), at: 3 };
        let mut vote_item = vote_item("run-f", "i", &vote, 9);
        vote_item.remove("format");
        assert_eq!(decode_vote(&vote_item).expect("old vote reads"), vote);
        let mut run = run_item(&pending_run(&chain_workflow(), "run-f", "t"), 9);
        run.remove("format");
        assert_eq!(check_format(&run), Ok(()));
    }

    #[test]
    fn a_newer_format_is_retryable_never_corrupt() {
        let run = pending_run(&chain_workflow(), "run-f", "t");
        let vote = Vote { voter: "v".into(), action: "accept".into(), decided_by: "p".into(), at: 3 };
        let items = [
            page(&[step("a")]),
            run_item(&run, 9),
            vote_item("run-f", "i", &vote, 9),
            marker_item("run-f", 1, 9),
            outbox_item("run-f", 1, 7),
        ];
        for mut item in items {
            assert_eq!(check_format(&item), Ok(()), "this build reads what it writes");
            item.insert("format".into(), n(FORMAT + 1));
            let refused = check_format(&item);
            assert!(
                matches!(refused, Err(StoreError::Unavailable(ref why)) if why.contains(&format!("format {}", FORMAT + 1))),
                "{refused:?}"
            );
            let service: trellis_core::ServiceError = refused.unwrap_err().into();
            assert_eq!(service, trellis_core::ServiceError::Unavailable, "a retryable service error");
        }
        let mut newer = page(&[step("a")]);
        newer.insert("format".into(), n(FORMAT + 1));
        assert!(matches!(decode_page(&newer), Err(StoreError::Unavailable(_))));
        let mut malformed = page(&[step("a")]);
        malformed.insert("format".into(), s("two"));
        assert!(matches!(decode_page(&malformed), Err(StoreError::Corrupt(_))), "a malformed attribute is corrupt");
    }

    fn start_child(child: &str) -> Effect {
        Effect::StartChild {
            node_id: "call".into(),
            activation: 1,
            child_run_id: child.into(),
            workflow_id: "kid".into(),
            due_at: 5,
        }
    }

    fn notice() -> Effect {
        Effect::NotifyParent { parent_run_id: "parent".into(), parent_node_id: "call".into(), at_version: 3, due_at: 5 }
    }

    #[test]
    fn each_effect_names_its_proof() {
        assert_eq!(proof(&step("a")), Proof::Successor { node_id: "a", activation: 1 });
        assert_eq!(proof(&start_child("kid-1")), Proof::ChildCreated { node_id: "call", child_run_id: "kid-1" });
        assert_eq!(proof(&notice()), Proof::ParentMovedOn { parent_run_id: "parent", parent_node_id: "call" });
        let others = [
            Effect::Wake { node_id: "a".into(), activation: 1, due_at: 5 },
            Effect::CancelChild { child_run_id: "kid-1".into(), reason: None, due_at: 5 },
            Effect::Execute { node_id: "a".into(), activation: 1, attempt: 0, due_at: 5 },
        ];
        for effect in others {
            assert_eq!(proof(&effect), Proof::Marker, "{effect:?}");
        }
    }

    #[test]
    fn only_a_next_step_and_carried_out_child_effects_go_without_a_marker() {
        // The single next step: its successor proves it, whatever was carried out.
        assert!(!needs_marker(&[step("a")], &[]));
        // Child starts and notices the committing call carried out: the data proves them.
        assert!(!needs_marker(&[start_child("kid-1")], &[start_child("kid-1")]));
        assert!(!needs_marker(&[notice()], &[notice()]));
        let both = [start_child("kid-1"), start_child("kid-2")];
        assert!(!needs_marker(&both, &both), "every effect carried out: each has its proof");
        // Sent to a queue instead (carrying it out failed): the marker records it.
        assert!(needs_marker(&[start_child("kid-1")], &[]));
        assert!(needs_marker(&[notice()], &[]));
        assert!(needs_marker(&both, &[start_child("kid-1")]), "one of two carried out");
        // A step among other effects rides in `effects`, which older readers re-send.
        assert!(needs_marker(&[start_child("kid-1"), step("a")], &[start_child("kid-1")]));
        assert!(needs_marker(&[step("a"), step("b")], &[]));
        let wake = Effect::Wake { node_id: "a".into(), activation: 1, due_at: 5 };
        let wakes = [wake];
        assert!(needs_marker(&wakes, &wakes), "a timer has no proof in the data");
        assert!(needs_marker(&[], &[]), "unchanged for an empty page");
    }

    #[test]
    fn a_single_next_step_rides_in_next_and_everything_else_in_effects() {
        let single = page(&[step("a")]);
        assert!(single.contains_key("next") && !single.contains_key("effects"));
        assert_eq!(decode_page(&single).unwrap().next, Some(step("a")));
        let wake = Effect::Wake { node_id: "a".into(), activation: 1, due_at: 5 };
        for effects in [vec![step("a"), step("b")], vec![wake]] {
            let item = page(&effects);
            assert!(item.contains_key("effects") && !item.contains_key("next"), "{effects:?}");
            assert_eq!(decode_page(&item).unwrap().effects, effects);
        }
        assert!(!page(&[]).contains_key("effects") && !page(&[]).contains_key("next"));
    }
}
