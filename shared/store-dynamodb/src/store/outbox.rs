//! The outbox side of [`DynamoStore`]: which committed pages may still have effects to send
//! ("sent" markers, marker-less next steps proven by the newest state), and the outbox
//! entries of recent commits the reconciler reads instead of scanning the table.

use trellis_core::engine::Effect;
use trellis_core::ports::RunStore;
use trellis_core::{RunState, StoreError};

use super::DynamoStore;
use crate::codec::{self, get_n, get_s, n, s, Page};
use crate::errors::unavailable;
use crate::keys::{self, MARKER_PREFIX, PAGE_PREFIX, PK, SK};

/// A committed page whose effects may not have been sent.
#[derive(Debug, Clone, PartialEq)]
pub struct UnsentPage {
    /// The run.
    pub run_id: String,
    /// The page's version.
    pub version: u64,
    /// Its effects.
    pub effects: Vec<Effect>,
    /// When it was written (ms).
    pub written_at: u64,
    /// The page's items' `expires_at`.
    pub expires_at: u64,
    /// Whether it is a single next step written without a marker (see
    /// [`crate::proven_by_successor`]): its node is still scheduled in the run's newest
    /// state, which is what a step still in its queue looks like too, so a caller leaves it
    /// to its writer for a while.
    pub unproven: bool,
}

/// `page` as unsent (its marker is known to be missing) unless it has no effects, or it is a
/// marker-less next step that `newest` shows handled.
fn unsent(page: Page, newest: Option<&RunState>) -> Option<UnsentPage> {
    let (effects, unproven) = match page.next {
        Some(next) => (newest.is_some_and(|newest| still_outstanding(newest, &next)).then(|| vec![next])?, true),
        None if page.effects.is_empty() => return None,
        None => (page.effects, false),
    };
    Some(UnsentPage {
        run_id: page.run_id,
        version: page.version,
        effects,
        written_at: page.written_at,
        expires_at: page.expires_at.unwrap_or(0),
        unproven,
    })
}

/// Whether `next` (a marker-less page's single step) is still outstanding in `newest`: its
/// node is still scheduled at that activation. Once the step is handled the node moves on
/// (the proof that it was sent); a newer activation or an ended run makes it moot.
fn still_outstanding(newest: &RunState, next: &Effect) -> bool {
    let Effect::Step { node_id, activation, .. } = next else { return true };
    !newest.status.is_terminal()
        && newest.nodes.get(node_id).is_some_and(|node| {
            node.status == trellis_core::run::NodeStatus::Scheduled && node.activation == *activation
        })
}

impl DynamoStore {
    /// Versions of `run_id` whose effects were sent.
    async fn sent_versions(&self, run_id: &str) -> Result<std::collections::BTreeSet<u64>, StoreError> {
        let mut sent = std::collections::BTreeSet::new();
        self.query_prefix(keys::run_pk(run_id), MARKER_PREFIX, true, 100, |item| {
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
    /// with effects and no marker, and a marker-less next step whose node is still scheduled
    /// in the newest state (`unproven`).
    pub async fn unsent_pages(&self, run_id: &str) -> Result<Vec<UnsentPage>, StoreError> {
        let sent = self.sent_versions(run_id).await?;
        let pages = self.pages_newest_first(run_id, 16, |_| false).await?;
        let Some(newest) = codec::fold_newest_first(&pages)? else { return Ok(Vec::new()) };
        let mut unsent: Vec<UnsentPage> = pages
            .into_iter()
            .filter(|page| !sent.contains(&page.version))
            .filter_map(|page| unsent(page, Some(&newest)))
            .collect();
        unsent.reverse();
        Ok(unsent)
    }

    /// Page `version` of `run_id` if its effects may not have been sent (as in
    /// [`DynamoStore::unsent_pages`]): a marker read, then the page, then — for a marker-less
    /// next step — the newest page.
    pub async fn unsent_page(&self, run_id: &str, version: u64) -> Result<Option<UnsentPage>, StoreError> {
        let marker = self.get(codec::marker_key(run_id, version)).await?;
        if let Some(marker) = marker {
            codec::check_format(&marker)?;
            return Ok(None);
        }
        let Some(item) = self.get(codec::page_key(run_id, version)).await? else { return Ok(None) };
        let page = codec::decode_page(&item)?;
        if page.next.is_none() {
            return Ok(unsent(page, None));
        }
        let newest = self.load_run(run_id).await?;
        match newest {
            Some(newest) => Ok(unsent(page, Some(&newest))),
            None => Ok(None),
        }
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
