//! Run events on the stack's EventBridge bus ([`trellis_core::bus`]): `PutEvents` with the
//! entry's CloudEvent as `Detail`, `Source` [`SOURCE`] and the CloudEvents type as
//! `DetailType`, so a rule matches `{"source": ["trellis"], "detail-type":
//! ["dev.openwop.event.run.completed"]}` and reads the CloudEvent at `$.detail`.

use async_trait::async_trait;
use aws_sdk_eventbridge::primitives::DateTime;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use trellis_core::bus::{BusEntry, EventPublisher, PublishError};

/// The `Source` of every run event.
pub const SOURCE: &str = "trellis";

/// Publishes to one bus.
#[derive(Debug, Clone)]
pub struct EventBridgePublisher {
    client: aws_sdk_eventbridge::Client,
    bus_name: String,
    requests: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl EventBridgePublisher {
    /// A publisher to `bus_name` (a name or ARN).
    pub fn new(client: aws_sdk_eventbridge::Client, bus_name: String) -> Self {
        Self { client, bus_name, requests: Default::default() }
    }

    /// `PutEvents` requests made so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait]
impl EventPublisher for EventBridgePublisher {
    async fn publish(&self, entries: &[BusEntry]) -> Result<(), PublishError> {
        let entries = entries
            .iter()
            .map(|entry| {
                PutEventsRequestEntry::builder()
                    .event_bus_name(&self.bus_name)
                    .source(SOURCE)
                    .detail_type(&entry.detail_type)
                    .detail(&entry.detail)
                    .time(DateTime::from_millis(i64::try_from(entry.time).unwrap_or(i64::MAX)))
                    .build()
            })
            .collect();
        self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let answer = self
            .client
            .put_events()
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|error| PublishError(format!("PutEvents failed: {error:?}")))?;
        if answer.failed_entry_count() > 0 {
            let codes: Vec<&str> = answer.entries().iter().filter_map(|entry| entry.error_code()).collect();
            return Err(PublishError(format!(
                "{} entries refused ({})",
                answer.failed_entry_count(),
                codes.join(", ")
            )));
        }
        Ok(())
    }
}
