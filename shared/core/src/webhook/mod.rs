//! Outbound webhooks (`webhooks.md`, RFC 0083 durable delivery): a tenant registers a URL and
//! the event types it wants; every matching event of the tenant's runs is POSTed there,
//! signed ([`sign`]), at least once.
//!
//! - **Durable**: the commit that appends an event also enqueues one
//!   [`crate::engine::Effect::DeliverWebhook`] per matching subscription — the same outbox as
//!   every other effect (the SQLite task table; the DynamoDB page and SQS), so a crash never
//!   loses a delivery. The delivery task POSTs, retries with backoff ([`DeliveryPolicy`]) and
//!   after the last attempt dead-letters the delivery ([`delivery`]); each delivery has a record
//!   receivers and operators can read, and a stable `deliveryId` (`<webhookId>:<runId>:<seq>`)
//!   receivers deduplicate on.
//! - **No read per step**: the subscriptions are held in a cached set ([`SubscriptionSet`]),
//!   reloaded when this process changed them and otherwise at most once per its TTL.
//! - **SSRF**: registration refuses by the literal URL and, when the name resolves, by each
//!   address; every delivery resolves, checks and pins again and follows no redirect
//!   ([`WebhookTransport`]). Only `https` unless the destination is in the operator's
//!   allow-listed private nets.
//! - **Tenant isolation**: a subscription sees only its own tenant's runs.

pub mod delivery;
pub mod sign;
pub mod subscription;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

pub use delivery::{DeliveryPolicy, DeliveryRecord, DeliveryState};
pub use subscription::{SubscriptionState, WebhookRequest, WebhookSubscription};

use crate::error::StoreError;
use crate::interrupt::callback::CallbackSender;
use crate::ports::RecordStore;
use crate::timefmt::Millis;

/// The record kind of subscriptions (scope [`ALL`], key the webhook id).
pub const SUBSCRIPTION_KIND: &str = "webhook";
/// The record kind of deliveries (scope the webhook id, key `<runId>:<sequence>`).
pub const DELIVERY_KIND: &str = "webhook-delivery";
/// The scope holding every subscription (so one listing fills the cache).
pub const ALL: &str = "all";

/// The outbound side: the destination check at registration, and (as a [`CallbackSender`])
/// the delivery POST — resolve, check every address, pin, no redirects; `Ok` on 2xx, a 408,
/// 425, 429 or 5xx answer, a timeout or a network error retryable — through the host's
/// SSRF-guarded client.
#[async_trait]
pub trait WebhookTransport: CallbackSender {
    /// Checks `url` at registration: `https` (or an allow-listed private destination), no
    /// credentials, the literal host (IP literals, `localhost`, metadata names), and — when the
    /// name resolves — each address. `Err` carries the reason.
    async fn check_destination(&self, url: &str) -> Result<(), String>;
}

/// What a host needs to deliver webhooks.
pub struct Webhooks {
    /// The destination check and the POST.
    pub transport: Arc<dyn WebhookTransport>,
    /// Attempts, backoff, timeouts.
    pub policy: DeliveryPolicy,
    /// The cached subscriptions.
    pub set: SubscriptionSet,
}

impl Webhooks {
    /// Webhooks over `transport` with `policy`, the set reloaded at most every `ttl_ms`.
    pub fn new(transport: Arc<dyn WebhookTransport>, policy: DeliveryPolicy, ttl_ms: u64) -> Self {
        Self { transport, policy, set: SubscriptionSet::new(ttl_ms) }
    }
}

/// The active subscriptions, cached: the commit path asks it for matches without a store
/// read. It reloads after [`SubscriptionSet::invalidate`] (this process registered or
/// deleted one) or when its copy is older than the TTL (another process may have).
pub struct SubscriptionSet {
    ttl_ms: u64,
    cached: Mutex<Option<Cached>>,
}

struct Cached {
    loaded_at: Millis,
    subscriptions: Arc<Vec<WebhookSubscription>>,
}

impl SubscriptionSet {
    /// An empty set, reloaded at most every `ttl_ms`.
    pub fn new(ttl_ms: u64) -> Self {
        Self { ttl_ms, cached: Mutex::new(None) }
    }

    /// Forgets the cached copy (the next match reloads it).
    pub fn invalidate(&self) {
        *self.cached.lock().expect("set lock") = None;
    }

    /// The active subscriptions as of at most the TTL ago.
    pub async fn current(
        &self,
        store: &dyn RecordStore,
        now: Millis,
    ) -> Result<Arc<Vec<WebhookSubscription>>, StoreError> {
        if let Some(cached) = self.cached.lock().expect("set lock").as_ref() {
            if now < cached.loaded_at.saturating_add(self.ttl_ms) {
                return Ok(cached.subscriptions.clone());
            }
        }
        let subscriptions: Vec<WebhookSubscription> = crate::ports::all_records(store, SUBSCRIPTION_KIND, ALL, now)
            .await?
            .iter()
            .filter_map(|record| WebhookSubscription::from_value(&record.value).ok())
            .filter(|subscription| subscription.state == SubscriptionState::Active)
            .collect();
        let subscriptions = Arc::new(subscriptions);
        *self.cached.lock().expect("set lock") = Some(Cached { loaded_at: now, subscriptions: subscriptions.clone() });
        Ok(subscriptions)
    }
}

/// Whether the pattern `pattern` (`*`, `<prefix>.*` or an exact type) matches `event_type`.
pub fn matches(pattern: &str, event_type: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some("") => true,
        Some(prefix) => event_type.starts_with(prefix),
        None => pattern == event_type,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_exact_types_families_and_everything() {
        assert!(matches("run.completed", "run.completed"));
        assert!(!matches("run.completed", "run.completed.x"));
        assert!(matches("run.*", "run.failed"));
        assert!(!matches("run.*", "node.failed"));
        assert!(!matches("run.*", "runs.x"));
        assert!(matches("*", "node.started"));
    }
}
