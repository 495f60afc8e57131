//! The reconciler's schedule (`rate(5 minutes)` in `infra/template.yaml`) as a timer: every
//! period, the outbox sweep [`crate::reconcile::reconcile`] the scheduled event runs.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::reconcile::{reconcile, GRACE_MS};
use crate::AwsApp;

/// The schedule's period.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(300);

/// Sweeps the outbox every `every` (the first sweep one period after the start, as a new
/// schedule's) until `shutdown` turns true.
pub async fn run_reconciler(app: Arc<AwsApp>, every: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        match reconcile(&app, GRACE_MS).await {
            Ok(0) => {}
            Ok(sent) => info!(sent, "reconciler sent effects left unsent"),
            Err(error) => warn!(%error, "reconciler sweep failed; it runs again on its schedule"),
        }
    }
}
