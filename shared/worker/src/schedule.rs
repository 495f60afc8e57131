//! The embedded host's periodic loops: [`every`] keeps time for any of them, and
//! [`schedule_loop`] asks [`Services::tick_schedules`] every tick to start the occurrences
//! that are due (the serverless host runs the same tick from a one-minute EventBridge rule).
//! Exactly-once lives in the tick itself, so a restart or a second ticker never doubles an
//! occurrence; the loop only keeps time.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, warn};
use trellis_core::service::Services;

/// Runs `tick` every `interval_ms` (a late tick is delayed, never doubled) until `stop` turns
/// true.
pub async fn every<F, Fut>(interval_ms: u64, mut stop: watch::Receiver<bool>, mut tick: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut interval = tokio::time::interval(Duration::from_millis(interval_ms.max(1)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
        tick().await;
    }
}

/// Ticks the schedules every `tick_ms` until `stop` turns true.
pub async fn schedule_loop(services: Arc<Services>, tick_ms: u64, stop: watch::Receiver<bool>) {
    every(tick_ms, stop, || async {
        match services.tick_schedules().await {
            Ok(report) if report.started + report.skipped > 0 => {
                debug!(started = report.started, skipped = report.skipped, "schedules ticked");
            }
            Ok(_) => {}
            Err(error) => warn!(%error, "a scheduler tick failed; the next one goes on"),
        }
    })
    .await;
}
