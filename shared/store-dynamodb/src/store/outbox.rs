//! The outbox side of [`DynamoStore`]: which committed pages may still have effects to send
//! ("sent" markers, and for a page without one the proof of each effect in the data), and
//! the outbox entries of recent commits the reconciler reads instead of scanning the table.
//!
//! A page without a marker is checked effect by effect ([`codec::proof`]): a step is proven
//! once its node left that activation in the run's newest state; a child start once the
//! parent no longer waits for the child, or the child exists and its creation page was sent;
//! a notice to the parent once the parent no longer waits for this child and has no unsent
//! page itself. The checks of another run's pages (the child's creation page, the parent's
//! pages) count child starts and notices as proven only when moot, so a check reads a
//! bounded number of items and never loops (a child's page names its parent, the parent's
//! page the child). They run on the repair paths only (redelivery, the reconciler).

use std::future::Future;
use std::pin::Pin;

use trellis_core::engine::Effect;
use trellis_core::ports::RunStore;
use trellis_core::run::NodeStatus;
use trellis_core::{RunState, StoreError};

use super::{DynamoStore, Paging};
use crate::codec::{self, get_n, get_s, n, s, Page, Proof};
use crate::errors::unavailable;
use crate::keys::{self, MARKER_PREFIX, PAGE_PREFIX, PK, SK};

/// A committed page whose effects may not have been sent.
#[derive(Debug, Clone, PartialEq)]
pub struct UnsentPage {
    /// The run.
    pub run_id: String,
    /// The page's version.
    pub version: u64,
    /// Its effects, all of them.
    pub effects: Vec<Effect>,
    /// Those of [`UnsentPage::effects`] the data shows sent or carried out (or moot): only
    /// the others need sending again (see [`UnsentPage::outstanding`]).
    pub settled: Vec<Effect>,
    /// When it was written (ms).
    pub written_at: u64,
    /// The page's items' `expires_at`.
    pub expires_at: u64,
    /// Whether it is a single next step written without a marker (see
    /// [`crate::proven_by_successor`]) whose node is still scheduled in the run's newest
    /// state: that is what a step still in its queue looks like too, so a caller leaves it to
    /// its writer for a while. (A page of `effects` without a marker is its writer's crash,
    /// or a writer still sending, which re-sending does not harm.)
    pub unproven: bool,
}

impl UnsentPage {
    /// The effects to send again: those not [`UnsentPage::settled`].
    pub fn outstanding(&self) -> Vec<Effect> {
        self.effects.iter().filter(|effect| !self.settled.contains(effect)).cloned().collect()
    }
}

/// What the data says about one effect of a page without a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evidence {
    /// Sent or carried out, or moot: sending it again would do nothing.
    Proven,
    /// A step whose node is still scheduled at its activation: on its queue, or lost.
    Pending,
    /// No proof: it may never have been sent.
    Missing,
}

/// How far a check follows a proof into other runs (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Depth {
    /// A page the caller asked about: a child start looks at the child's creation page, a
    /// notice at the parent's pages.
    Deep,
    /// A page a deep check looks at: child starts and notices count only when moot.
    Shallow,
}

/// The boxed future of a check that reads another run's pages (the checks recurse once).
type Check<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Whether `parent` still waits for child `child_run_id` at `node_id`: the run goes on and
/// the node waits for that child (what a child start and a child's notice are checked
/// against, as their handlers do).
fn waits_for(parent: &RunState, node_id: &str, child_run_id: &str) -> bool {
    !parent.status.is_terminal()
        && parent.nodes.get(node_id).is_some_and(|node| {
            node.status == NodeStatus::WaitingChild && node.child_run_id.as_deref() == Some(child_run_id)
        })
}

/// The evidence for a step of `node_id` at `activation` in the run's `newest` state: pending
/// while the node is still scheduled at that activation; once the step is handled the node
/// moves on (the proof that it was sent), and a newer activation, an ended or a vanished run
/// make it moot.
fn step_evidence(newest: Option<&RunState>, node_id: &str, activation: u32) -> Evidence {
    let scheduled = newest.is_some_and(|newest| {
        !newest.status.is_terminal()
            && newest
                .nodes
                .get(node_id)
                .is_some_and(|node| node.status == NodeStatus::Scheduled && node.activation == activation)
    });
    if scheduled {
        Evidence::Pending
    } else {
        Evidence::Proven
    }
}

/// The evidence for a page's effects: `None` when all are proven, else the proven ones and
/// whether every other one is merely pending.
fn verdict(effects: &[Effect], evidence: &[Evidence]) -> Option<(Vec<Effect>, bool)> {
    if evidence.iter().all(|evidence| *evidence == Evidence::Proven) {
        return None;
    }
    let settled = effects
        .iter()
        .zip(evidence)
        .filter(|(_, evidence)| **evidence == Evidence::Proven)
        .map(|(effect, _)| effect.clone())
        .collect();
    Some((settled, evidence.iter().all(|evidence| *evidence != Evidence::Missing)))
}

/// A page's effects, wherever they ride (`next` or `effects`).
fn page_effects(page: &Page) -> Vec<Effect> {
    page.next.iter().chain(&page.effects).cloned().collect()
}

impl DynamoStore {
    /// Versions of `run_id` whose effects were sent.
    async fn sent_versions(&self, run_id: &str) -> Result<std::collections::BTreeSet<u64>, StoreError> {
        let mut sent = std::collections::BTreeSet::new();
        self.query_prefix(keys::run_pk(run_id), MARKER_PREFIX, true, Paging::Fixed(100), |item| {
            codec::check_format(item)?;
            if let Ok(version) = get_s(item, SK)?.trim_start_matches(MARKER_PREFIX).parse::<u64>() {
                sent.insert(version);
            }
            Ok(false)
        })
        .await?;
        Ok(sent)
    }

    /// Committed pages of `run_id` whose effects may not have been sent, oldest first: pages
    /// without a marker one of whose effects the data does not prove sent (a step whose node
    /// is still scheduled in the newest state is `unproven`).
    pub async fn unsent_pages(&self, run_id: &str) -> Result<Vec<UnsentPage>, StoreError> {
        self.unsent_pages_at(run_id, Depth::Deep).await
    }

    fn unsent_pages_at<'a>(&'a self, run_id: &'a str, depth: Depth) -> Check<'a, Vec<UnsentPage>> {
        Box::pin(async move {
            let sent = self.sent_versions(run_id).await?;
            let pages = self.pages_newest_first(run_id, 16, |_| false).await?;
            let newest = match codec::fold_newest_first(&pages)? {
                Some(mut newest) => {
                    // A child start of a slot is checked against the slot's record.
                    self.load_slots(&mut newest).await?;
                    Some(newest)
                }
                // No checkpoint among them (should not happen: they are all of the run's pages).
                None if pages.is_empty() => return Ok(Vec::new()),
                None => self.load_run(run_id).await?,
            };
            let mut unsent = Vec::new();
            for page in pages.into_iter().rev().filter(|page| !sent.contains(&page.version)) {
                let effects = page_effects(&page);
                if effects.is_empty() {
                    continue;
                }
                if let Some(page) = self.unsent(page, effects, newest.as_ref(), depth).await? {
                    unsent.push(page);
                }
            }
            Ok(unsent)
        })
    }

    /// `page` (without a marker) as unsent unless the data proves each of its `effects`
    /// sent, `newest` being its run's newest state.
    async fn unsent(
        &self,
        page: Page,
        effects: Vec<Effect>,
        newest: Option<&RunState>,
        depth: Depth,
    ) -> Result<Option<UnsentPage>, StoreError> {
        let mut evidence = Vec::with_capacity(effects.len());
        for effect in &effects {
            evidence.push(self.evidence(&page.run_id, effect, newest, depth).await?);
        }
        let Some((settled, pending)) = verdict(&effects, &evidence) else { return Ok(None) };
        let unproven = pending && page.next.is_some();
        Ok(Some(UnsentPage {
            run_id: page.run_id,
            version: page.version,
            effects,
            settled,
            written_at: page.written_at,
            expires_at: page.expires_at.unwrap_or(0),
            unproven,
        }))
    }

    /// The evidence for `effect` of a page of `run_id`, whose newest state is `newest`.
    async fn evidence(
        &self,
        run_id: &str,
        effect: &Effect,
        newest: Option<&RunState>,
        depth: Depth,
    ) -> Result<Evidence, StoreError> {
        Ok(match codec::proof(effect) {
            Proof::Marker => Evidence::Missing,
            Proof::Successor { node_id, activation } => step_evidence(newest, node_id, activation),
            Proof::ChildCreated { node_id, child_run_id } => {
                if !newest.is_some_and(|parent| waits_for(parent, node_id, child_run_id)) {
                    // A start sent again would find the parent not waiting and do nothing.
                    Evidence::Proven
                } else if depth == Depth::Shallow || !self.creation_sent(child_run_id).await? {
                    Evidence::Missing
                } else {
                    Evidence::Proven
                }
            }
            Proof::ParentMovedOn { parent_run_id, parent_node_id } => {
                let Some(parent) = self.load_run(parent_run_id).await? else { return Ok(Evidence::Proven) };
                if waits_for(&parent, parent_node_id, run_id) {
                    Evidence::Missing
                } else if depth == Depth::Shallow
                    || self.unsent_pages_at(parent_run_id, Depth::Shallow).await?.is_empty()
                {
                    Evidence::Proven
                } else {
                    // The parent's commit that applied the notice may be what is unsent: the
                    // notice sent again finds the parent moved on, which re-sends its pages.
                    Evidence::Missing
                }
            }
        })
    }

    /// Whether run `run_id` exists and its creation page (its first) was sent: it has its
    /// marker, or the data proves each of its effects sent (shallowly).
    fn creation_sent<'a>(&'a self, run_id: &'a str) -> Check<'a, bool> {
        Box::pin(async move {
            let mut first = None;
            self.query_prefix(keys::run_pk(run_id), PAGE_PREFIX, true, Paging::Fixed(1), |item| {
                first = Some(codec::decode_page(item)?);
                Ok(true)
            })
            .await?;
            let Some(page) = first else { return Ok(false) };
            if let Some(marker) = self.get(codec::marker_key(run_id, page.version)).await? {
                codec::check_format(&marker)?;
                return Ok(true);
            }
            let effects = page_effects(&page);
            if effects.is_empty() {
                return Ok(true);
            }
            let newest = self.load_run(run_id).await?;
            Ok(self.unsent(page, effects, newest.as_ref(), Depth::Shallow).await?.is_none())
        })
    }

    /// Page `version` of `run_id` if its effects may not have been sent (as in
    /// [`DynamoStore::unsent_pages`]): a marker read, then the page, then what its effects'
    /// proofs need (the run's newest state, the child's or the parent's pages).
    pub async fn unsent_page(&self, run_id: &str, version: u64) -> Result<Option<UnsentPage>, StoreError> {
        let marker = self.get(codec::marker_key(run_id, version)).await?;
        if let Some(marker) = marker {
            codec::check_format(&marker)?;
            return Ok(None);
        }
        let Some(item) = self.get(codec::page_key(run_id, version)).await? else { return Ok(None) };
        let page = codec::decode_page(&item)?;
        let effects = page_effects(&page);
        if effects.is_empty() {
            return Ok(None);
        }
        let needs_newest = effects
            .iter()
            .any(|effect| matches!(codec::proof(effect), Proof::Successor { .. } | Proof::ChildCreated { .. }));
        let newest = if needs_newest { self.load_run(run_id).await? } else { None };
        self.unsent(page, effects, newest.as_ref(), Depth::Deep).await
    }

    /// Records that the effects of `run_id`'s page `version` were sent, `carried_out` ones by
    /// the committing call itself: writes its marker, unless the data proves them sent
    /// without one (a single next step; child starts and notices the call carried out, see
    /// `codec::needs_marker`). `now` is the time of the send (ms).
    pub async fn record_sent(
        &self,
        run_id: &str,
        version: u64,
        effects: &[Effect],
        carried_out: &[Effect],
        now: u64,
    ) -> Result<(), StoreError> {
        if !codec::needs_marker(effects, carried_out) {
            return Ok(());
        }
        self.mark_sent(run_id, version, self.marker_expiry(now)).await
    }

    /// Records that the effects of `run_id`'s page `version` were sent (one small item).
    pub async fn mark_sent(&self, run_id: &str, version: u64, expires_at: u64) -> Result<(), StoreError> {
        let item = codec::marker_item(run_id, version, expires_at);
        let size = codec::item_size(&item);
        self.client.put_item().table_name(&self.table).set_item(Some(item)).send().await.map_err(unavailable)?;
        self.meter.write(size);
        Ok(())
    }

    /// Every page written before `written_before` (ms) whose effects may not have been sent,
    /// found by scanning the whole table: the fallback for pages no outbox entry names
    /// (written by a build without entries). Its cost follows the table's size; the
    /// scheduled reconciler reads [`DynamoStore::outbox_between`] instead.
    pub async fn unsent_outbox(&self, written_before: u64) -> Result<Vec<UnsentPage>, StoreError> {
        let mut candidates = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression(
                    "begins_with(sk, :page) AND (attribute_exists(effects) OR attribute_exists(#next)) \
                     AND written_at < :before",
                )
                .projection_expression("pk, sk")
                .expression_attribute_names("#next", "next")
                .expression_attribute_values(":page", s(PAGE_PREFIX))
                .expression_attribute_values(":before", n(written_before))
                .consistent_read(true)
                .return_consumed_capacity(aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(unavailable)?;
            // A scan is billed for every item it reads, before the filter.
            self.meter.consumed(page.consumed_capacity().and_then(|c| c.capacity_units()).unwrap_or(1.0));
            for item in page.items() {
                candidates.push((get_s(item, PK)?.trim_start_matches("RUN#").to_owned(), ()));
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        let runs: std::collections::BTreeSet<String> = candidates.into_iter().map(|(run_id, _)| run_id).collect();
        let mut unsent = Vec::new();
        for run_id in runs {
            let pages = self.unsent_pages(&run_id).await?;
            unsent.extend(pages.into_iter().filter(|page| page.written_at < written_before));
        }
        Ok(unsent)
    }

    /// Records that `run_id`'s page `version` may have unsent effects (its send failed), so
    /// the reconciler's next sweep looks at it.
    pub async fn enlist_outbox(&self, run_id: &str, version: u64, now: u64) -> Result<(), StoreError> {
        let item = codec::outbox_item(run_id, version, now);
        let size = codec::item_size(&item);
        self.client.put_item().table_name(&self.table).set_item(Some(item)).send().await.map_err(unavailable)?;
        self.meter.write(size);
        Ok(())
    }

    /// The outbox entries written in `[from, to]` (ms), as `(run id, version)`: one query per
    /// time bucket and shard, so the cost follows recent commits, not the table's size.
    pub async fn outbox_between(&self, from: u64, to: u64) -> Result<Vec<(String, u64)>, StoreError> {
        let mut entries = Vec::new();
        if from > to {
            return Ok(entries);
        }
        for bucket in from / keys::OUTBOX_BUCKET_MS..=to / keys::OUTBOX_BUCKET_MS {
            for shard in 0..keys::OUTBOX_SHARDS {
                let query = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .key_condition_expression("pk = :pk AND sk BETWEEN :lo AND :hi")
                    .expression_attribute_values(":pk", s(keys::outbox_partition(bucket, shard)))
                    .expression_attribute_values(":lo", s(format!("{from:020}")))
                    .expression_attribute_values(":hi", s(format!("{to:020}~")))
                    .consistent_read(true);
                self.visit_query(query, |item| {
                    entries.push(codec::decode_outbox(item)?);
                    Ok(false)
                })
                .await?;
            }
        }
        entries.sort();
        entries.dedup();
        Ok(entries)
    }

    /// The reconciler's watermark (ms): outbox entries written before it were looked at.
    pub async fn reconciled_until(&self) -> Result<Option<u64>, StoreError> {
        let key = codec::host_key(keys::RECONCILED_SK);
        Ok(self.get(key).await?.and_then(|item| get_n(&item, "until").ok()))
    }

    /// Moves the reconciler's watermark to `until` (ms).
    pub async fn set_reconciled_until(&self, until: u64) -> Result<(), StoreError> {
        let mut item = codec::host_key(keys::RECONCILED_SK);
        item.insert("until".into(), n(until));
        let size = codec::item_size(&item);
        self.client.put_item().table_name(&self.table).set_item(Some(item)).send().await.map_err(unavailable)?;
        self.meter.write(size);
        Ok(())
    }

    /// The `expires_at` of a "sent" marker written at `now` (ms).
    pub fn marker_expiry(&self, now: u64) -> u64 {
        now.saturating_add(self.retention_ms) / 1000
    }
}

#[cfg(test)]
mod tests {
    use trellis_core::engine::Effect;
    use trellis_core::run::{NodeStatus, RunStatus};
    use trellis_core::testing::{chain_workflow, pending_run};
    use trellis_core::RunState;

    use super::{step_evidence, verdict, waits_for, Evidence};

    /// A running run whose node `a` is `status` at activation 2.
    fn run_with(status: NodeStatus) -> RunState {
        let mut run = pending_run(&chain_workflow(), "run-o", "t");
        run.status = RunStatus::Running;
        let node = serde_json::json!({"status": status, "activation": 2});
        run.nodes.insert("a".into(), serde_json::from_value(node).expect("a node state"));
        run
    }

    #[test]
    fn a_step_is_pending_while_its_node_is_scheduled_at_its_activation() {
        let scheduled = run_with(NodeStatus::Scheduled);
        assert_eq!(step_evidence(Some(&scheduled), "a", 2), Evidence::Pending);
        assert_eq!(step_evidence(Some(&scheduled), "a", 1), Evidence::Proven, "a newer activation");
        assert_eq!(step_evidence(Some(&run_with(NodeStatus::Completed)), "a", 2), Evidence::Proven, "handled");
        let mut ended = scheduled;
        ended.status = RunStatus::Cancelled;
        assert_eq!(step_evidence(Some(&ended), "a", 2), Evidence::Proven, "moot");
        assert_eq!(step_evidence(None, "a", 2), Evidence::Proven, "the run is gone");
    }

    #[test]
    fn a_parent_waits_for_a_child_only_while_running_with_the_node_on_that_child() {
        let mut parent = run_with(NodeStatus::WaitingChild);
        parent.nodes.get_mut("a").expect("node").child_run_id = Some("kid-1".into());
        assert!(waits_for(&parent, "a", "kid-1"));
        assert!(!waits_for(&parent, "a", "kid-2"), "the node waits for another worker");
        assert!(!waits_for(&parent, "b", "kid-1"));
        parent.status = RunStatus::Cancelling;
        assert!(waits_for(&parent, "a", "kid-1"), "a cancelling parent still needs the child's end");
        parent.status = RunStatus::Failed;
        assert!(!waits_for(&parent, "a", "kid-1"), "ended");
        let mut moved_on = run_with(NodeStatus::Completed);
        moved_on.nodes.get_mut("a").expect("node").child_run_id = Some("kid-1".into());
        assert!(!waits_for(&moved_on, "a", "kid-1"), "the child's end was applied");
    }

    #[test]
    fn a_page_is_unsent_while_one_effect_lacks_its_proof_and_unproven_while_only_steps_are_pending() {
        let step = Effect::Step { node_id: "a".into(), activation: 2, due_at: 0 };
        let wake = Effect::Wake { node_id: "b".into(), activation: 1, due_at: 0 };
        let effects = [step.clone(), wake.clone()];
        assert_eq!(verdict(&effects, &[Evidence::Proven, Evidence::Proven]), None, "every effect proven");
        assert_eq!(verdict(&effects, &[Evidence::Proven, Evidence::Missing]), Some((vec![step], false)));
        assert_eq!(verdict(&effects, &[Evidence::Pending, Evidence::Proven]), Some((vec![wake], true)));
        assert_eq!(verdict(&effects, &[Evidence::Pending, Evidence::Missing]), Some((vec![], false)));
    }
}
