//! One delivery of one event to one subscription: its body, its retry policy and its record.
//!
//! - **Body**: the `RunEventDoc` fields at the top level (`type`, `runId`, `eventId`,
//!   `sequence`, `timestamp`, `payload`, `nodeId?`, `causationId?`) **plus** `event` (the same
//!   document nested, as `webhooks.md` shows it), `workspaceId`/`tenantId`, `workflowId`,
//!   `webhookId` and `deliveryId` — both readings of the spec hold. The signature covers the
//!   exact bytes sent.
//! - **Attempts**: at most [`DeliveryPolicy::max_attempts`]; a retryable failure waits
//!   `initial · 2^(n−1)` (capped at `max_backoff_ms`, with jitter in its upper half) before the
//!   next; a failure that is not retryable (a 4xx other than 408/425/429, a 3xx, a refused
//!   address) or the last attempt's failure dead-letters the delivery. The record is written
//!   after each attempt, so attempts are counted across crashes and redeliveries (a crash
//!   during a POST repeats that attempt: at least once).
//! - **Record**: kind [`super::DELIVERY_KIND`], scope the webhook id, key `<runId>:<sequence>`,
//!   kept [`DeliveryPolicy::retention_ms`].

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::WebhookSubscription;
use crate::event::RunEvent;
use crate::run::RunState;
use crate::timefmt::{rfc3339, Millis};

/// How deliveries are attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryPolicy {
    /// Attempts per delivery, the first included (≥ 1).
    pub max_attempts: u32,
    /// The wait before the second attempt.
    pub initial_backoff_ms: u64,
    /// The longest wait between attempts.
    pub max_backoff_ms: u64,
    /// One attempt's budget.
    pub timeout_ms: u64,
    /// Consecutive dead-lettered deliveries after which the subscription is marked failed
    /// (0: never).
    pub fail_after: u32,
    /// How long delivery records are kept.
    pub retention_ms: u64,
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            initial_backoff_ms: 1_000,
            max_backoff_ms: 300_000,
            timeout_ms: 10_000,
            fail_after: 20,
            retention_ms: 7 * 86_400_000,
        }
    }
}

impl DeliveryPolicy {
    /// The wait after failed attempt `attempt` (1-based), `random` drawing the jitter.
    pub fn backoff_ms(&self, attempt: u32, random: u64) -> u64 {
        let doubled = self.initial_backoff_ms.saturating_mul(1u64 << attempt.saturating_sub(1).min(32));
        let ceiling = doubled.min(self.max_backoff_ms).max(1);
        let half = ceiling / 2;
        half + random % (ceiling - half + 1)
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryState {
    /// An attempt failed and another one is scheduled.
    Retrying,
    /// The receiver answered 2xx.
    Delivered,
    /// No attempt is left (or the failure is not retryable): kept for the operator.
    DeadLettered,
}

/// The stored record of one delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryRecord {
    /// `<webhookId>:<runId>:<sequence>`: the id receivers deduplicate on.
    pub delivery_id: String,
    /// The subscription.
    pub webhook_id: String,
    /// The run.
    pub run_id: String,
    /// The event's sequence.
    pub sequence: u64,
    /// The event's type.
    pub event_type: String,
    /// Attempts made.
    pub attempts: u32,
    /// Where it stands.
    pub state: DeliveryState,
    /// The last failure's code (`callback_status`, `http_timeout`, `http_blocked`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_code: Option<String>,
    /// The last failure's text (never a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the last attempt ended.
    pub updated_at: Millis,
}

impl DeliveryRecord {
    /// The record key of a delivery within its webhook's scope.
    pub fn key(run_id: &str, sequence: u64) -> String {
        format!("{run_id}:{sequence:020}")
    }

    /// The delivery id of `webhook_id`'s delivery of event `sequence` of `run_id`.
    pub fn id(webhook_id: &str, run_id: &str, sequence: u64) -> String {
        format!("{webhook_id}:{run_id}:{sequence}")
    }

    /// Reads a stored record's value.
    pub fn from_value(value: &Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(value.clone())
    }

    /// The record value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a delivery serializes")
    }

    /// What the API shows: the record, `updatedAt` as RFC 3339.
    pub fn view(&self) -> Value {
        let mut value = self.to_value();
        value["updatedAt"] = json!(rfc3339(self.updated_at));
        value
    }
}

/// The `RunEventDoc` of `event` of `run` (as the v1 event routes render it).
pub fn event_doc(run: &RunState, event: &RunEvent) -> Map<String, Value> {
    let mut doc = Map::new();
    doc.insert("eventId".into(), json!(format!("{}:{}", run.run_id, event.sequence)));
    doc.insert("runId".into(), json!(run.run_id));
    doc.insert("type".into(), json!(event.event_type));
    doc.insert("sequence".into(), json!(event.sequence));
    doc.insert("timestamp".into(), json!(rfc3339(event.timestamp)));
    doc.insert("schemaVersion".into(), json!(1));
    doc.insert("payload".into(), event.payload.clone());
    if let Some(node_id) = &event.node_id {
        doc.insert("nodeId".into(), json!(node_id));
    }
    if let Some(cause) = event.causation {
        doc.insert("causationId".into(), json!(format!("{}:{cause}", run.run_id)));
    }
    doc
}

/// The body of `subscription`'s delivery of `event` (see the module docs).
pub fn body(subscription: &WebhookSubscription, run: &RunState, event: &RunEvent) -> Vec<u8> {
    let doc = event_doc(run, event);
    let mut body = doc.clone();
    body.insert("event".into(), Value::Object(doc));
    body.insert("workspaceId".into(), json!(run.tenant));
    body.insert("tenantId".into(), json!(run.tenant));
    body.insert("workflowId".into(), json!(run.workflow.id));
    body.insert("webhookId".into(), json!(subscription.webhook_id));
    body.insert("deliveryId".into(), json!(DeliveryRecord::id(&subscription.webhook_id, &run.run_id, event.sequence)));
    serde_json::to_vec(&Value::Object(body)).expect("a body serializes")
}

/// The headers of a delivery signed at `timestamp_secs` (both families, same values).
pub fn headers(
    subscription: &WebhookSubscription,
    event_type: &str,
    delivery_id: &str,
    timestamp_secs: u64,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    use super::sign::{headers as h, signature, ALGORITHM};
    let signature = signature(&subscription.secret, timestamp_secs, body);
    let mut out = vec![
        ("content-type", "application/json".to_owned()),
        ("user-agent", format!("openwop-webhook-dispatcher/{}", env!("CARGO_PKG_VERSION"))),
        ("idempotency-key", delivery_id.to_owned()),
    ];
    for (names, value) in [
        (h::WEBHOOK_ID, subscription.webhook_id.clone()),
        (h::EVENT_TYPE, event_type.to_owned()),
        (h::TIMESTAMP, timestamp_secs.to_string()),
        (h::SIGNATURE, signature),
        (h::ALGORITHM, ALGORITHM.to_owned()),
        (h::DELIVERY_ID, delivery_id.to_owned()),
    ] {
        for name in names {
            out.push((name, value.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_its_jitter_up_to_the_cap() {
        let policy = DeliveryPolicy { initial_backoff_ms: 1_000, max_backoff_ms: 10_000, ..DeliveryPolicy::default() };
        for (attempt, ceiling) in [(1, 1_000), (2, 2_000), (3, 4_000), (4, 8_000), (5, 10_000), (40, 10_000)] {
            for random in [0, 7, u64::MAX] {
                let wait = policy.backoff_ms(attempt, random);
                assert!(wait >= ceiling / 2 && wait <= ceiling, "attempt {attempt}: {wait}");
            }
        }
    }

    #[test]
    fn keys_sort_by_sequence_within_a_run() {
        assert!(DeliveryRecord::key("r", 9) < DeliveryRecord::key("r", 10));
        assert_eq!(DeliveryRecord::id("wh-1", "run-1", 3), "wh-1:run-1:3");
    }
}
