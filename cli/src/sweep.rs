//! The embedded host's retention sweeper (see `trellis_core::retention`): every
//! `--sweep-interval-ms` it deletes the runs whose retention ran out (with their child runs,
//! a batch at a time) and gives the freed pages of the SQLite file back. A run past its
//! retention already reads as gone before the sweep reaches it.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::{debug, warn};
use trellis_core::service::Services;
use trellis_store_sqlite::SqliteStore;

/// Runs deleted per pass at most (the next pass goes on).
const PER_PASS: usize = 500;

/// Sweeps every `interval_ms` until `stop` turns true.
pub async fn sweep_loop(
    services: Arc<Services>,
    store: Arc<SqliteStore>,
    interval_ms: u64,
    stop: watch::Receiver<bool>,
) {
    trellis_worker::every(interval_ms.max(10), stop, || async {
        let expired = match store.expired_runs(services.clock.now(), PER_PASS) {
            Ok(expired) => expired,
            Err(error) => {
                warn!(%error, "listing the runs past their retention failed; the next pass tries again");
                return;
            }
        };
        if expired.is_empty() {
            return;
        }
        match services.sweep_expired(&expired).await {
            Ok(deleted) => debug!(deleted, "retention sweep"),
            Err(error) => warn!(%error, "a retention sweep failed; the next pass goes on"),
        }
    })
    .await;
}
