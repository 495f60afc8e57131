//! Reading a run's state: from this instance's cached copy and the pages written after it
//! (one small query), or from the newest checkpoint page and the deltas after it.

use trellis_core::{RunState, StoreError};

use super::{now_ms, DynamoStore};
use crate::codec::{self, s, Body, Page};
use crate::delta::{header_of, CheckpointPolicy};
use crate::keys::{self, PAGE_PREFIX};

/// Pages per request when reading back to a checkpoint: with checkpoints at least as large
/// as the deltas since them, this usually reaches one in a single request.
const COLD_PAGE_BATCH: i32 = 16;

impl DynamoStore {
    /// Pages of `run_id`, newest first, until (and including) the first for which `enough`
    /// holds, or all of them.
    pub(super) async fn pages_newest_first(
        &self,
        run_id: &str,
        page_size: i32,
        enough: impl Fn(&Page) -> bool,
    ) -> Result<Vec<Page>, StoreError> {
        let mut pages = Vec::new();
        self.query_prefix(keys::run_pk(run_id), PAGE_PREFIX, false, page_size, |item| {
            let page = codec::decode_page(item)?;
            let done = enough(&page);
            pages.push(page);
            Ok(done)
        })
        .await?;
        Ok(pages)
    }

    /// Pages of `run_id` after version `version`, oldest first.
    async fn pages_after(&self, run_id: &str, version: u64) -> Result<Vec<Page>, StoreError> {
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :lo AND :hi")
            .expression_attribute_values(":pk", s(keys::run_pk(run_id)))
            .expression_attribute_values(":lo", s(keys::page_sk(version + 1)))
            .expression_attribute_values(":hi", s(keys::page_sk(u64::MAX)))
            .consistent_read(true);
        let mut pages = Vec::new();
        self.visit_query(query, |item| {
            pages.push(codec::decode_page(item)?);
            Ok(false)
        })
        .await?;
        Ok(pages)
    }

    /// The run's current state (handed over from the cache when `take`, see
    /// [`trellis_core::ports::RunStore::take_run`]); the cache then knows its version.
    pub(super) async fn read_run(&self, run_id: &str, take: bool) -> Result<Option<RunState>, StoreError> {
        if let Some((state, policy)) = self.hot.state(run_id, take) {
            match self.catch_up(run_id, state, policy).await {
                Ok(Some((state, policy))) => return self.remember(state, policy, take).map(Some),
                Ok(None) => return Ok(None),
                // A gap or a page that does not apply: read from a checkpoint instead.
                Err(StoreError::Corrupt(_)) => self.hot.forget(run_id),
                Err(other) => return Err(other),
            }
        }
        let pages = self.pages_newest_first(run_id, COLD_PAGE_BATCH, Page::is_checkpoint).await?;
        let Some(newest) = pages.first() else { return Ok(None) };
        if newest.expires_at.is_some_and(|at| at <= now_ms() / 1000) {
            return Ok(None);
        }
        let state = codec::fold_newest_first(&pages)?.ok_or_else(|| {
            StoreError::Corrupt(format!("run {run_id} has no checkpoint page before its delta pages"))
        })?;
        let mut policy = CheckpointPolicy::default();
        for page in pages.iter().rev() {
            policy = if page.is_checkpoint() {
                CheckpointPolicy::checkpoint(page.bytes)
            } else {
                policy.after_delta(page.bytes)
            };
        }
        self.remember(state, policy, take).map(Some)
    }

    /// `state` (at its version when cached) moved on by the pages written after it.
    async fn catch_up(
        &self,
        run_id: &str,
        mut state: RunState,
        mut policy: CheckpointPolicy,
    ) -> Result<Option<(RunState, CheckpointPolicy)>, StoreError> {
        let newer = self.pages_after(run_id, state.version).await?;
        let expires_at = newer.last().and_then(|page| page.expires_at).unwrap_or_else(|| self.expires_at(&state));
        if expires_at <= now_ms() / 1000 {
            return Ok(None);
        }
        for page in newer {
            match page.body()? {
                Body::Full(full) => {
                    state = *full;
                    policy = CheckpointPolicy::checkpoint(page.bytes);
                }
                Body::Delta(delta) => {
                    delta.apply(&mut state)?;
                    policy = policy.after_delta(page.bytes);
                }
            }
        }
        Ok(Some((state, policy)))
    }

    /// Caches `state` (or, when the caller takes it, what the cache needs to take it back).
    fn remember(&self, state: RunState, policy: CheckpointPolicy, take: bool) -> Result<RunState, StoreError> {
        let header = std::sync::Arc::new(header_of(&state)?);
        let kept = (!take).then(|| state.clone());
        self.hot.put(&state.run_id, state.version, kept, (policy, header));
        Ok(state)
    }
}
