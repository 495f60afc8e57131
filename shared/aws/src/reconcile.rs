//! The reconciler: a scheduled sweep that sends commit pages' effects left unsent by a crash between
//! a commit and its send (the API has no redelivery; the dispatcher's redelivery also covers
//! its own crashes). Sending twice is harmless.

use trellis_core::ports::EffectSink;
use trellis_core::StoreError;

use crate::AwsApp;

/// Entries younger than this are left to the writer that is still sending them.
pub const GRACE_MS: u64 = 30_000;

/// Sends the effects of every unsent page older than `grace_ms`; returns how many were sent.
pub async fn reconcile(app: &AwsApp, grace_ms: u64) -> Result<usize, StoreError> {
    let now = app.services.clock.now();
    let unsent = app.store.unsent_outbox(now.saturating_sub(grace_ms)).await?;
    let mut sent = 0;
    for (run_id, version, effects, _) in unsent {
        app.effects.send_committed(&run_id, version, &effects).await?;
        sent += effects.len();
    }
    Ok(sent)
}
