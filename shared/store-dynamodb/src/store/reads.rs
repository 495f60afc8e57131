//! Reading a run's state: from this instance's cached copy and the pages written after it
//! (one small query), or from the newest checkpoint page and the deltas after it — and,
//! when that state fans out, its slot items (`super::slots`), read after the pages.

use trellis_core::{RunState, StoreError};

use super::{now_ms, DynamoStore, Paging};
use crate::codec::{self, s, Body, Page};
use crate::delta::{header_of, CheckpointPolicy, Header};
use crate::errors::unavailable;
use crate::keys::{self, PAGE_PREFIX};

/// Pages in the first request when reading back to a checkpoint (enough for a small state);
/// each further request asks for four times as many, so a large state's hundreds of deltas
/// take a few requests, not dozens.
const COLD_PAGE_BATCH: i32 = 16;

/// Pages a cached copy is caught up by at most; further behind, reading back to a
/// checkpoint costs less.
const CATCH_UP_PAGES: i32 = 4;

/// How a read uses the instance's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadMode {
    /// The caller takes the state to apply an input (`RunStore::take_run`).
    Take,
    /// The caller gets a copy; the cache keeps the run.
    Copy,
    /// A listing: uses a cached copy but caches nothing new (a page of runs would evict the
    /// runs being stepped).
    Listing,
}

impl DynamoStore {
    /// Pages of `run_id`, newest first, until (and including) the first for which `enough`
    /// holds, or all of them; the first request asks for `page_size` pages, each further one
    /// for four times as many as the one before.
    pub(super) async fn pages_newest_first(
        &self,
        run_id: &str,
        page_size: i32,
        enough: impl Fn(&Page) -> bool,
    ) -> Result<Vec<Page>, StoreError> {
        let mut pages = Vec::new();
        self.query_prefix(keys::run_pk(run_id), PAGE_PREFIX, false, Paging::Growing(page_size), |item| {
            let page = codec::decode_page(item)?;
            let done = enough(&page);
            pages.push(page);
            Ok(done)
        })
        .await?;
        Ok(pages)
    }

    /// Pages of `run_id` after version `version`, oldest first, at most [`CATCH_UP_PAGES`];
    /// `None` when there are more.
    async fn pages_after(&self, run_id: &str, version: u64) -> Result<Option<Vec<Page>>, StoreError> {
        let response = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :lo AND :hi")
            .expression_attribute_values(":pk", s(keys::run_pk(run_id)))
            .expression_attribute_values(":lo", s(keys::page_sk(version.saturating_add(1))))
            .expression_attribute_values(":hi", s(keys::page_sk(u64::MAX)))
            .consistent_read(true)
            .limit(CATCH_UP_PAGES)
            .send()
            .await
            .map_err(unavailable)?;
        self.meter.read(response.items());
        if response.last_evaluated_key().is_some() {
            return Ok(None);
        }
        response.items().iter().map(codec::decode_page).collect::<Result<Vec<_>, _>>().map(Some)
    }

    /// The run's current state (handed over from the cache for [`ReadMode::Take`]); the
    /// cache then knows its version.
    pub(super) async fn read_run(&self, run_id: &str, mode: ReadMode) -> Result<Option<RunState>, StoreError> {
        if let Some((state, (policy, header))) = self.hot.state(run_id, mode == ReadMode::Take) {
            let cached_version = state.version;
            match self.catch_up(run_id, state, policy).await {
                Ok(Some(Some((state, policy)))) => {
                    // Nothing newer: the cached header is still the basis (no re-serializing).
                    let known = (state.version == cached_version).then_some(header);
                    return self.remember(state, policy, known, mode).map(Some);
                }
                Ok(Some(None)) => return Ok(None),
                // Far behind, a gap or a page that does not apply: read from a checkpoint.
                Ok(None) | Err(StoreError::Corrupt(_)) => self.hot.forget(run_id),
                Err(other) => return Err(other),
            }
        }
        let pages = self.pages_newest_first(run_id, COLD_PAGE_BATCH, Page::is_checkpoint).await?;
        let Some(newest) = pages.first() else { return Ok(None) };
        if newest.expires_at.is_some_and(|at| at <= now_ms() / 1000) {
            return Ok(None);
        }
        let mut state = codec::fold_newest_first(&pages)?.ok_or_else(|| {
            StoreError::Corrupt(format!("run {run_id} has no checkpoint page before its delta pages"))
        })?;
        self.load_slots(&mut state).await?;
        let mut policy = CheckpointPolicy::default();
        for page in pages.iter().rev() {
            policy = if page.is_checkpoint() {
                CheckpointPolicy::checkpoint(page.bytes)
            } else {
                policy.after_delta(page.bytes)
            };
        }
        self.remember(state, policy, None, mode).map(Some)
    }

    /// `state` (at its version when cached) moved on by the pages written after it (`None`
    /// inside when the run expired); `None` when it is too far behind. Across a checkpoint
    /// the fan-out records come from their items (a checkpoint does not carry them, nor
    /// which of them its commit touched).
    async fn catch_up(
        &self,
        run_id: &str,
        mut state: RunState,
        mut policy: CheckpointPolicy,
    ) -> Result<Option<Option<(RunState, CheckpointPolicy)>>, StoreError> {
        let Some(newer) = self.pages_after(run_id, state.version).await? else { return Ok(None) };
        let expires_at = newer.last().and_then(|page| page.expires_at).unwrap_or_else(|| self.expires_at(&state));
        if expires_at <= now_ms() / 1000 {
            return Ok(Some(None));
        }
        let mut checkpointed = false;
        for page in newer {
            match page.body()? {
                Body::Full(full) => {
                    state = *full;
                    policy = CheckpointPolicy::checkpoint(page.bytes);
                    checkpointed = true;
                }
                Body::Delta(delta) => {
                    delta.apply(&mut state)?;
                    policy = policy.after_delta(page.bytes);
                }
            }
        }
        if checkpointed {
            self.load_slots(&mut state).await?;
        }
        Ok(Some(Some((state, policy))))
    }

    /// Caches `state` (or, when the caller takes it, what the cache needs to take it back;
    /// nothing new for a listing), with `header` when it is known to be the state's.
    fn remember(
        &self,
        state: RunState,
        policy: CheckpointPolicy,
        header: Option<std::sync::Arc<Header>>,
        mode: ReadMode,
    ) -> Result<RunState, StoreError> {
        if mode != ReadMode::Listing {
            let header = match header {
                Some(header) => header,
                None => std::sync::Arc::new(header_of(&state)?),
            };
            let kept = (mode == ReadMode::Copy).then(|| state.clone());
            self.hot.put(&state.run_id, state.version, kept, (policy, header));
        }
        Ok(state)
    }
}
