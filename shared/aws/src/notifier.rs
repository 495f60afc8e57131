//! The serverless notifier: Lambda instances share no memory, so "waiting for a commit" is
//! re-reading the store after a short pause (long-polls and SSE streams tail DynamoDB).

use std::time::Duration;

use async_trait::async_trait;
use trellis_core::ports::Notifier;

/// Re-read interval of long-polls and streams.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A notifier that only paces re-reads.
#[derive(Debug, Default, Clone, Copy)]
pub struct PollingNotifier;

#[async_trait]
impl Notifier for PollingNotifier {
    fn committed(&self, _run_id: &str) {}

    fn generation(&self) -> u64 {
        0
    }

    async fn wait(&self, _seen: u64, timeout: Duration) {
        tokio::time::sleep(timeout.min(POLL_INTERVAL)).await;
    }
}
