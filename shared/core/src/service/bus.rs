//! Run events on the host's event bus (see [`crate::bus`]): the effect a commit adds for its
//! events in the published lifecycle set, and the publish its task makes.

use crate::bus::EventBus;
use crate::engine::Effect;
use crate::error::ServiceError;
use crate::event::RunEvent;
use crate::run::RunState;

use super::Services;

/// Entries per `PutEvents` request (EventBridge's limit).
const ENTRIES_PER_REQUEST: usize = 10;

impl Services {
    /// The same services publishing the lifecycle set of `bus` (AWS: an EventBridge bus).
    pub fn with_event_bus(mut self, bus: EventBus) -> Self {
        self.event_bus = Some(std::sync::Arc::new(bus));
        self
    }

    /// The same services taking `queue` trigger subscriptions (a host whose queues and rules
    /// deliver to [`Services::ingest_queue`]).
    pub fn with_queue_triggers(mut self) -> Self {
        self.queue_triggers = true;
        self
    }

    /// The effects a commit of `run` appending `events` sends beside the engine's own: its
    /// webhook deliveries and its publish to the bus (the outbox: they commit with the events).
    pub(super) async fn integration_effects(
        &self,
        run: &RunState,
        events: &[RunEvent],
    ) -> Result<Vec<Effect>, ServiceError> {
        // A replay fork's events are history re-told: nothing outside the host hears them again.
        if run.replay.as_ref().is_some_and(|link| !link.delivers_events()) {
            return Ok(Vec::new());
        }
        let mut effects = self.webhook_effects(run, events).await?;
        effects.extend(self.bus_effect(events));
        Ok(effects)
    }

    /// One publish of the commit's events in the lifecycle set, if it has any.
    fn bus_effect(&self, events: &[RunEvent]) -> Option<Effect> {
        let bus = self.event_bus.as_deref()?;
        let sequences: Vec<u64> =
            events.iter().filter(|event| bus.events.contains(&event.event_type)).map(|event| event.sequence).collect();
        (!sequences.is_empty()).then(|| Effect::PublishEvents { sequences, due_at: self.clock.now() })
    }

    /// Publishes events `sequences` of `run_id` to the bus (again, when the task is
    /// redelivered: consumers dedupe on the CloudEvents `id`). `Err` (retryable) when the bus
    /// refused any; a run or event that is gone publishes nothing.
    pub async fn publish_run_events(&self, run_id: &str, sequences: &[u64]) -> Result<usize, ServiceError> {
        let Some(bus) = self.event_bus.clone() else {
            tracing::warn!(run_id, "no event bus is configured; the publish is dropped");
            return Ok(0);
        };
        let (Some(first), Some(last)) = (sequences.iter().min(), sequences.iter().max()) else { return Ok(0) };
        let Some(run) = self.store.load_run_summary(run_id).await? else { return Ok(0) };
        let span = usize::try_from(last - first + 1).unwrap_or(usize::MAX);
        let events = self.store.events_after(run_id, first.checked_sub(1), span).await?;
        let entries: Vec<_> = events
            .iter()
            .filter(|event| sequences.contains(&event.sequence))
            .map(|event| bus.entry(&run, event))
            .collect();
        for chunk in entries.chunks(ENTRIES_PER_REQUEST) {
            bus.publisher.publish(chunk).await.map_err(|error| {
                tracing::warn!(run_id, %error, "publishing run events failed; the task is retried");
                ServiceError::Unavailable
            })?;
        }
        Ok(entries.len())
    }
}
