//! The dispatcher's schedules of `infra/template.yaml` as timers: the reconciler's
//! (`rate(5 minutes)`: the outbox sweep [`crate::reconcile::reconcile`]) and the scheduler
//! tick's (`rate(1 minute)`: due workflow schedules, `Services::tick_schedules`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::reconcile::{reconcile, GRACE_MS};
use crate::AwsApp;

/// The reconciler schedule's period.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(300);

/// The scheduler tick's period (`rate(1 minute)` in `infra/template.yaml`).
pub const SCHEDULER_EVERY: Duration = Duration::from_secs(60);

/// Runs `each` every `every` (the first time one period after the start, as a new schedule's)
/// until `shutdown` turns true.
async fn every<F, Fut>(every: Duration, mut shutdown: watch::Receiver<bool>, mut each: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
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
        each().await;
    }
}

/// Sweeps the outbox every `period` until `shutdown` turns true.
pub async fn run_reconciler(app: Arc<AwsApp>, period: Duration, shutdown: watch::Receiver<bool>) {
    every(period, shutdown, || async {
        match reconcile(&app, GRACE_MS).await {
            Ok(0) => {}
            Ok(sent) => info!(sent, "reconciler sent effects left unsent"),
            Err(error) => warn!(%error, "reconciler sweep failed; it runs again on its schedule"),
        }
    })
    .await;
}

/// Sends the scheduler tick the template's one-minute rule sends to the dispatcher, through the
/// same handler, every `period` until `shutdown` turns true.
pub async fn run_scheduler(app: Arc<AwsApp>, period: Duration, shutdown: watch::Receiver<bool>) {
    let event = serde_json::json!({ "trellis": crate::dispatch::SCHEDULER_TICK });
    every(period, shutdown, || async {
        if let Err(error) = crate::dispatch::handle_trigger(&app, event.clone()).await {
            warn!(%error, "scheduler tick failed; it runs again on its schedule");
        }
    })
    .await;
}
