//! Fan-out slot records as items of their own, outside the checkpoint.
//!
//! The engine keeps one node record per child of a parallel fan-out (`<nodeId>#<k>`, and
//! `<nodeId>#items` for a loop's item snapshot: `trellis_core::engine::is_fan_out_record`),
//! alive until the join. A checkpoint page carrying them would grow with the number of
//! children (towards DynamoDB's 400 KB item limit), so each is an item of its own —
//! `RUN#<runId>` / `SLOT#<recordKey>`, attribute `doc` (the record) and `owner_activation`
//! (the activation of the fanning node it belongs to) — and no item grows with the number
//! of children:
//!
//! - **Writes.** Every commit writes the items of the fan-out records it touched, in the
//!   transaction of its page: a put for a record the state has, a delete for one the commit
//!   removed. The page keeps its `attribute_not_exists` condition, so a commit that loses its
//!   race writes no slot either. A commit that tracks nothing (`changes.all`: creation,
//!   migrations) writes every record, and deletes the items of records its state no longer
//!   has. The join removes every slot at once — more than a transaction holds (100 items)
//!   once a fan-out has ~90 children — so the deletes of records whose node no longer fans
//!   out (*cleanup*) ride in the transaction only when everything fits; otherwise they follow
//!   the commit, best effort (TTL removes what is left with the run).
//! - **Pages.** A checkpoint carries the state without the fan-out records; a delta
//!   carries the records it touched, as it does every node (so a cached state caught up by
//!   the deltas after it stays exact without reading the items).
//! - **Reads.** A state rebuilt from a checkpoint (a cold read, a cached copy caught up
//!   across a checkpoint, the outbox's newest state) takes the fan-out records of each node
//!   that fans out from that node's items — one strongly consistent query per fanning node,
//!   none without one — keeping those written at the node's current activation (a leftover
//!   of an earlier fan-out of the same node, after a loop back, does not count). The pages
//!   are read first and the items after: a commit landing in between leaves items newer
//!   than the header, which only makes this reader's next commit lose its race (the page of
//!   that version exists), never the reverse.

use std::borrow::Cow;
use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::{DeleteRequest, WriteRequest};
use trellis_core::engine::is_fan_out_record;
use trellis_core::run::{Changes, NodeState};
use trellis_core::{RunState, StoreError};

use super::{DynamoStore, Paging};
use crate::codec::{self, get_n, get_s, n, s, Item, FAN_OUT_FORMAT};
use crate::keys::{self, PK, SK, SLOT_PREFIX};

/// Deletes per `BatchWriteItem` (DynamoDB's limit).
const BATCH_DELETES: usize = 25;

/// One slot item written with a commit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SlotWrite {
    /// The record as the commit left it.
    Put(Item),
    /// The key of a record the commit removed; `cleanup` when its node no longer fans out at
    /// that activation (reads ignore the item already, so it may follow the commit).
    Delete {
        /// The item's key.
        key: Item,
        /// Whether reads already ignore it.
        cleanup: bool,
    },
}

impl SlotWrite {
    /// The item written, or the key deleted (what the transaction limits count).
    pub(crate) fn item(&self) -> &Item {
        match self {
            Self::Put(item) | Self::Delete { key: item, .. } => item,
        }
    }

    fn is_cleanup(&self) -> bool {
        matches!(self, Self::Delete { cleanup: true, .. })
    }
}

/// The slot writes of a commit split into those its transaction carries and the cleanup
/// deletes that follow it: all in the transaction when `others` items (page, run item,
/// votes, …) and every write fit in `capacity`, else the cleanup deletes after it.
pub(crate) fn split_cleanup(writes: Vec<SlotWrite>, others: usize, capacity: usize) -> (Vec<SlotWrite>, Vec<Item>) {
    if others + writes.len() <= capacity {
        return (writes, Vec::new());
    }
    let (cleanup, kept): (Vec<_>, Vec<_>) = writes.into_iter().partition(SlotWrite::is_cleanup);
    (kept, cleanup.into_iter().map(|write| write.item().clone()).collect())
}

/// The node a fan-out record belongs to.
fn owner(record_key: &str) -> &str {
    record_key.rsplit_once(trellis_core::run::SLOT_SEPARATOR).map_or(record_key, |(node_id, _)| node_id)
}

/// The activation of the node `record_key` belongs to if that node fans out.
fn fanning_activation(run: &RunState, record_key: &str) -> Option<u32> {
    run.nodes.get(owner(record_key)).filter(|node| node.fan_out.is_some()).map(|node| node.activation)
}

/// `run` without its fan-out records: what a checkpoint page carries (borrowed when it has
/// none).
pub(crate) fn without_slots(run: &RunState) -> Cow<'_, RunState> {
    if !run.nodes.keys().any(|key| is_fan_out_record(key)) {
        return Cow::Borrowed(run);
    }
    let mut state = run.header();
    state.nodes =
        run.nodes.iter().filter(|(key, _)| !is_fan_out_record(key)).map(|(k, v)| (k.clone(), v.clone())).collect();
    state.edges = run.edges.clone();
    state.variables = run.variables.clone();
    Cow::Owned(state)
}

/// The key of the item of `run_id`'s fan-out record `record_key`.
fn slot_key(run_id: &str, record_key: &str) -> Item {
    Item::from([(PK.to_owned(), s(keys::run_pk(run_id))), (SK.to_owned(), s(keys::slot_sk(record_key)))])
}

/// The item of `run`'s fan-out record `record_key`; it expires with its run.
pub(crate) fn slot_item(
    run: &RunState,
    record_key: &str,
    node: &NodeState,
    expires_at: u64,
) -> Result<Item, StoreError> {
    let mut item = slot_key(&run.run_id, record_key);
    let doc = serde_json::to_string(node).map_err(|error| StoreError::Corrupt(error.to_string()))?;
    let activation = run.nodes.get(owner(record_key)).map_or(0, |node| node.activation);
    item.insert("doc".into(), s(doc));
    item.insert("owner_activation".into(), n(u64::from(activation)));
    item.insert("expires_at".into(), n(expires_at));
    item.insert("format".into(), n(FAN_OUT_FORMAT));
    Ok(item)
}

/// A slot item as its record key, the activation of its node when written, and its record.
pub(crate) fn decode_slot(item: &Item) -> Result<(String, u64, NodeState), StoreError> {
    codec::check_format(item)?;
    let sk = get_s(item, SK)?;
    let key = sk.strip_prefix(SLOT_PREFIX).filter(|key| is_fan_out_record(key)).ok_or_else(|| {
        StoreError::Corrupt(format!("slot item `{sk}` does not name a fan-out record (`SLOT#<nodeId>#<k>`)"))
    })?;
    let node = serde_json::from_str(get_s(item, "doc")?)
        .map_err(|error| StoreError::Corrupt(format!("slot item `{sk}`: {error}")))?;
    Ok((key.to_owned(), get_n(item, "owner_activation")?, node))
}

/// The delete of `run`'s item of `record_key`, a record its state no longer has.
fn delete(run: &RunState, record_key: &str) -> SlotWrite {
    SlotWrite::Delete { key: slot_key(&run.run_id, record_key), cleanup: fanning_activation(run, record_key).is_none() }
}

/// The slot writes of a commit of `run` that changed `changes`: a put for each touched
/// fan-out record the state has, a delete for each it no longer has; every record when
/// `changes.all` (the deletes of records gone are [`DynamoStore::stale_slots`]).
pub(crate) fn slot_writes(run: &RunState, changes: &Changes, expires_at: u64) -> Result<Vec<SlotWrite>, StoreError> {
    let put = |key: &str, node: &NodeState| slot_item(run, key, node, expires_at).map(SlotWrite::Put);
    if changes.all {
        return run.nodes.iter().filter(|(key, _)| is_fan_out_record(key)).map(|(key, node)| put(key, node)).collect();
    }
    changes
        .nodes
        .iter()
        .filter(|key| is_fan_out_record(key))
        .map(|key| match run.nodes.get(key) {
            Some(node) => put(key, node),
            None => Ok(delete(run, key)),
        })
        .collect()
}

impl DynamoStore {
    /// Visits each of `run_id`'s slot items whose key starts with `prefix` (after `SLOT#`).
    async fn visit_slots(
        &self,
        run_id: &str,
        prefix: &str,
        mut visit: impl FnMut(&Item) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let prefix = keys::slot_sk(prefix);
        self.query_prefix(keys::run_pk(run_id), &prefix, true, Paging::Fixed(1000), |item| {
            visit(item)?;
            Ok(false)
        })
        .await
    }

    /// Makes the fan-out records of each node of `state` (rebuilt from a checkpoint and the
    /// deltas after it) that fans out exactly that node's slot items of its activation.
    pub(super) async fn load_slots(&self, state: &mut RunState) -> Result<(), StoreError> {
        let fanning: BTreeMap<String, u32> = state
            .nodes
            .iter()
            .filter(|(_, node)| node.fan_out.is_some())
            .map(|(id, node)| (id.clone(), node.activation))
            .collect();
        for (node_id, activation) in fanning {
            let mut slots = Vec::new();
            let prefix = format!("{node_id}{}", trellis_core::run::SLOT_SEPARATOR);
            self.visit_slots(&state.run_id, &prefix, |item| {
                let (key, written_at, record) = decode_slot(item)?;
                if written_at == u64::from(activation) {
                    slots.push((key, record));
                }
                Ok(())
            })
            .await?;
            state.nodes.retain(|key, _| !(is_fan_out_record(key) && owner(key) == node_id));
            state.nodes.extend(slots);
        }
        Ok(())
    }

    /// Deletes of the slot items of `run` whose records its state no longer has: what a
    /// commit that tracks nothing (`changes.all`) cannot tell from its changes.
    pub(super) async fn stale_slots(&self, run: &RunState) -> Result<Vec<SlotWrite>, StoreError> {
        let mut stale = Vec::new();
        self.visit_slots(&run.run_id, "", |item| {
            let key = get_s(item, SK)?.strip_prefix(SLOT_PREFIX).unwrap_or_default();
            if !run.nodes.contains_key(key) {
                stale.push(delete(run, key));
            }
            Ok(())
        })
        .await?;
        Ok(stale)
    }

    /// Deletes the items at `keys` after the commit that removed their records, best effort:
    /// reads ignore them already, and what is left expires with the run.
    pub(super) async fn clean_up_slots(&self, keys: Vec<Item>) {
        for chunk in keys.chunks(BATCH_DELETES) {
            let requests = chunk.iter().filter_map(|key| {
                let delete = DeleteRequest::builder().set_key(Some(key.clone())).build().ok()?;
                Some(WriteRequest::builder().delete_request(delete).build())
            });
            let sent = self.client.batch_write_item().request_items(&self.table, requests.collect()).send().await;
            if let Ok(answer) = sent {
                let unprocessed =
                    answer.unprocessed_items().and_then(|items| items.get(&self.table)).map_or(0, Vec::len);
                let done: Vec<&Item> = chunk.iter().skip(unprocessed).collect();
                self.meter.batch(&done);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trellis_core::testing::{chain_workflow, pending_run};

    use super::*;

    fn record(status: &str) -> NodeState {
        serde_json::from_value(json!({"status": status, "activation": 2, "childRunId": "run-kid"})).expect("a record")
    }

    /// A run whose node `a` fans out (at activation 2), with slots `a#0`, `a#1` and the item
    /// snapshot `a#items`.
    fn fanning_run() -> RunState {
        let mut run = pending_run(&chain_workflow(), "run-s", "t");
        let mut node = record("waiting-child");
        node.fan_out = Some(
            serde_json::from_value(json!({"total": 2, "width": 2, "started": 2, "running": 2,
                                          "completed": 0, "failed": 0, "cancelled": 0}))
            .expect("progress"),
        );
        run.nodes.insert("a".into(), node);
        run.nodes.insert("b".into(), record("completed"));
        for key in ["a#0", "a#1", "a#items"] {
            run.nodes.insert(key.into(), record("waiting-child"));
        }
        run
    }

    fn touched(keys: &[&str]) -> Changes {
        Changes { nodes: keys.iter().map(|key| (*key).to_owned()).collect(), ..Changes::default() }
    }

    #[test]
    fn a_checkpoint_state_keeps_every_record_but_the_fan_out_ones() {
        let run = fanning_run();
        let stripped = without_slots(&run);
        assert!(matches!(stripped, Cow::Owned(_)));
        assert_eq!(stripped.nodes.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert!(stripped.nodes["a"].fan_out.is_some(), "the fan-out node itself stays");
        assert_eq!((&stripped.edges, &stripped.variables, stripped.version), (&run.edges, &run.variables, run.version));
        let plain = pending_run(&chain_workflow(), "run-p", "t");
        assert!(matches!(without_slots(&plain), Cow::Borrowed(_)));
    }

    #[test]
    fn a_commit_puts_the_touched_records_it_has_and_deletes_the_ones_it_removed() {
        let mut run = fanning_run();
        run.nodes.remove("a#1");
        let writes = slot_writes(&run, &touched(&["a", "a#0", "a#1", "b"]), 99).expect("writes");
        assert_eq!(writes.len(), 2, "only fan-out records: {writes:?}");
        let SlotWrite::Put(put) = &writes[0] else { panic!("a put first: {writes:?}") };
        assert_eq!(decode_slot(put).expect("decodes"), ("a#0".to_owned(), 2, record("waiting-child")));
        assert_eq!(codec::get_n(put, "expires_at"), Ok(99));
        assert_eq!(codec::get_n(put, "format"), Ok(FAN_OUT_FORMAT));
        let SlotWrite::Delete { key, cleanup } = &writes[1] else { panic!("then a delete: {writes:?}") };
        assert_eq!(get_s(key, SK), Ok("SLOT#a#1"));
        assert_eq!(key.len(), 2, "a key only");
        assert!(!cleanup, "node a still fans out: the delete must land with the commit");
        // Tracking nothing, a commit writes every record.
        let all = slot_writes(&run, &Changes::all(), 99).expect("writes");
        let keys: Vec<_> = all.iter().map(|write| get_s(write.item(), SK).unwrap().to_owned()).collect();
        assert_eq!(keys, ["SLOT#a#0", "SLOT#a#items"]);
        assert!(slot_writes(&pending_run(&chain_workflow(), "run-p", "t"), &Changes::all(), 1).unwrap().is_empty());
    }

    #[test]
    fn the_deletes_of_a_join_follow_the_commit_only_when_the_transaction_cannot_hold_them() {
        let mut run = fanning_run();
        for k in 2..150 {
            run.nodes.insert(format!("a#{k}"), record("completed"));
        }
        // The join: every slot goes, the node no longer fans out.
        let keys: Vec<String> = run.nodes.keys().filter(|key| is_fan_out_record(key)).cloned().collect();
        run.nodes.retain(|key, _| !is_fan_out_record(key));
        run.nodes.get_mut("a").expect("node a").fan_out = None;
        let mut changes = touched(&["a"]);
        changes.nodes.extend(keys);
        let writes = slot_writes(&run, &changes, 99).expect("writes");
        assert_eq!(writes.len(), 151);
        assert!(writes.iter().all(SlotWrite::is_cleanup));
        let (kept, after) = split_cleanup(writes.clone(), 2, 100);
        assert!(kept.is_empty() && after.len() == 151, "too many for one transaction: all after it");
        let few = writes[..10].to_vec();
        let (kept, after) = split_cleanup(few.clone(), 2, 100);
        assert_eq!((kept, after.len()), (few, 0), "they fit: all in the transaction");
        // Puts and deletes of a node still fanning out always stay in the transaction.
        let mut live = fanning_run();
        live.nodes.remove("a#1");
        let writes = slot_writes(&live, &touched(&["a#0", "a#1"]), 99).expect("writes");
        let (kept, after) = split_cleanup(writes.clone(), 99, 100);
        assert_eq!((kept, after.len()), (writes, 0));
    }

    #[test]
    fn a_slot_item_that_names_no_fan_out_record_is_corrupt() {
        let run = fanning_run();
        let mut item = slot_item(&run, "a#0", &record("completed"), 9).expect("item");
        item.insert(SK.into(), s("SLOT#a"));
        assert!(matches!(decode_slot(&item), Err(StoreError::Corrupt(why)) if why.contains("SLOT#a")));
        let mut newer = slot_item(&run, "a#0", &record("completed"), 9).expect("item");
        newer.insert("format".into(), n(crate::codec::FORMAT + 1));
        assert!(matches!(decode_slot(&newer), Err(StoreError::Unavailable(_))));
    }
}
