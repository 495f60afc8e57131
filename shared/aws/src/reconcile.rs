//! The reconciler: a scheduled sweep that sends commit pages' effects left unsent where no
//! redelivery repairs them — an API commit followed by a crash (the API writes an outbox entry
//! before each commit with effects), or a send that failed (the sink enlists the page). The
//! dispatcher's and completion function's own crashes are repaired by redelivery. Sending
//! twice is harmless.
//!
//! A sweep reads the outbox entries written since the last sweep (a watermark, less a margin),
//! one query per time bucket and shard: its cost follows recent commits, not the table's
//! size. [`reconcile_full`] scans the whole table instead (pages written by a build without
//! outbox entries); the scheduled event runs it when its `detail` has `"fullScan": true`.

use trellis_core::ports::EffectSink;
use trellis_core::StoreError;

use crate::AwsApp;

/// Entries younger than this are left to the writer that is still sending them.
pub const GRACE_MS: u64 = 30_000;
/// How far back a sweep reads when no sweep ran before.
pub const FIRST_LOOKBACK_MS: u64 = 3_600_000;
/// How far back a sweep reads at most (a longer outage needs [`reconcile_full`]).
pub const MAX_LOOKBACK_MS: u64 = 86_400_000;
/// How far before the watermark a sweep starts again (entries that landed late).
pub const MARGIN_MS: u64 = 60_000;

/// Sends the effects of every unsent page enlisted in the outbox between the last sweep and
/// `grace_ms` ago; returns how many effects were sent.
pub async fn reconcile(app: &AwsApp, grace_ms: u64) -> Result<usize, StoreError> {
    let now = app.services.clock.now();
    let to = now.saturating_sub(grace_ms);
    let from = match app.store.reconciled_until().await? {
        Some(until) => until.saturating_sub(MARGIN_MS),
        None => now.saturating_sub(FIRST_LOOKBACK_MS),
    };
    let from = from.max(now.saturating_sub(MAX_LOOKBACK_MS)).min(to);
    let mut sent = 0;
    for (run_id, version) in app.store.outbox_between(from, to).await? {
        if let Some(page) = app.store.unsent_page(&run_id, version).await? {
            app.effects.send_committed_except(&run_id, version, &page.effects, &page.settled).await?;
            sent += page.outstanding().len();
        }
    }
    app.store.set_reconciled_until(to).await?;
    Ok(sent)
}

/// Sends the effects of every unsent page older than `grace_ms`, found by scanning the whole
/// table; returns how many were sent.
pub async fn reconcile_full(app: &AwsApp, grace_ms: u64) -> Result<usize, StoreError> {
    let now = app.services.clock.now();
    let mut sent = 0;
    for page in app.store.unsent_outbox(now.saturating_sub(grace_ms)).await? {
        app.effects.send_committed_except(&page.run_id, page.version, &page.effects, &page.settled).await?;
        sent += page.outstanding().len();
    }
    Ok(sent)
}
