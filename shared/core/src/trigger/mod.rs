//! The trigger bridge (`trigger-bridge.md`, RFC 0053/0083/0099): inbound events that start
//! runs. This host takes signed **webhooks** (a subscription per sender, registered at
//! `POST /v1/trigger-subscriptions`) and **schedules** (declared in a definition's
//! `triggers[]`, see [`crate::schedule`]).
//!
//! An inbound delivery is verified ([`crate::webhook::sign`]), turned into a [`TriggerEvent`]
//! (`contentTrust: "untrusted"`, a curated header allowlist — never `Authorization` or
//! `Cookie`), mapped to run inputs by the subscription's `inputMapping` (input name → JSON
//! pointer into the `TriggerEvent`), and starts at most one run per delivery id: the dedup key
//! is an idempotency record (the one mechanism `POST /v1/runs` uses; kept
//! [`crate::limits::IDEMPOTENCY_RETENTION_MS`], 24 h), so a redelivery starts nothing and
//! answers the prior run. The run's `run.started` carries `causationId` = the delivery id and
//! `trigger {source, subscriptionId, deliveryId, dedupKey}`; the raw `TriggerEvent` is kept in
//! the delivery's record beside the run, never in its events.
//!
//! Every delivery appends `trigger.delivery.attempted {subscriptionId, dedupKey, attempt,
//! outcome, runId}` (exactly these five) to the subscription's own log, and state changes
//! append `trigger.subscription.state.changed {subscriptionId, source, fromState, toState,
//! reason}` (`GET /v1/trigger-subscriptions/{id}/events`).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::ServiceError;
use crate::timefmt::Millis;

/// The record kind of subscriptions (scope [`crate::webhook::ALL`], key the subscription id).
pub const SUBSCRIPTION_KIND: &str = "trigger-subscription";
/// The record kind of deliveries (scope the subscription id, key the dedup key).
pub const DELIVERY_KIND: &str = "trigger-delivery";
/// The record kind of a subscription's log (scope the subscription id, key time-ordered).
pub const LOG_KIND: &str = "trigger-log";
/// The idempotency endpoint of a subscription's run starts.
pub fn idempotency_endpoint(subscription_id: &str) -> String {
    format!("trigger:{subscription_id}")
}
/// How long deliveries and log entries are kept.
pub const RETENTION_MS: u64 = 7 * 86_400_000;
/// The largest inbound body accepted.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// The inbound headers a `TriggerEvent` keeps (lower case); everything else — credentials
/// above all — is dropped.
pub const KEPT_HEADERS: &[&str] = &[
    "content-type",
    "user-agent",
    "x-github-event",
    "x-github-delivery",
    "x-openwop-event-type",
    "openwop-event-type",
    "x-openwop-delivery-id",
    "openwop-delivery-id",
    "x-request-id",
];

/// The `trigger.delivery.attempted` event type.
pub const DELIVERY_ATTEMPTED: &str = "trigger.delivery.attempted";
/// The `trigger.subscription.state.changed` event type.
pub const STATE_CHANGED: &str = "trigger.subscription.state.changed";

/// A subscription's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TriggerState {
    /// Deliveries start runs.
    Active,
    /// Deliveries are refused with `409 subscription_paused` (the sender retries later).
    Paused,
}

impl TriggerState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Paused => "paused",
        }
    }
}

/// A stored trigger subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerSubscription {
    /// `ts-<hex>`.
    pub subscription_id: String,
    /// The tenant its runs belong to.
    pub tenant_id: String,
    /// `webhook`.
    pub source: String,
    /// The workflow it starts.
    pub workflow_id: String,
    /// Run input name → JSON pointer into the `TriggerEvent`.
    #[serde(default)]
    pub input_mapping: Map<String, Value>,
    /// The verification secret (shown once).
    pub secret: String,
    /// Free label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When it was registered.
    pub created_at: Millis,
    /// Active or paused.
    pub state: TriggerState,
    /// A `queue` subscription's binding: which queue or bus events start its runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueBinding>,
}

/// What a `queue` subscription listens to (AWS only): an SQS queue's messages, or the
/// EventBridge events of one source (and detail type) that a rule delivers to the dispatcher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", untagged)]
pub enum QueueBinding {
    /// `{sqsQueueArn}`.
    #[serde(rename_all = "camelCase")]
    Sqs {
        /// The queue's ARN (`arn:aws:sqs:<region>:<account>:<name>`).
        sqs_queue_arn: String,
    },
    /// `{eventSource, detailType?}` (no detail type: every event of the source).
    #[serde(rename_all = "camelCase")]
    EventBridge {
        /// The events' `source`.
        event_source: String,
        /// The events' `detail-type`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail_type: Option<String>,
    },
}

/// The record kind of queue bindings (scope [`crate::webhook::ALL`], key
/// [`QueueBinding::key`]): the subscription a queue's or a source's events belong to.
pub const BINDING_KIND: &str = "trigger-binding";

impl QueueBinding {
    /// The binding's record key.
    pub fn key(&self) -> String {
        match self {
            Self::Sqs { sqs_queue_arn } => sqs_key(sqs_queue_arn),
            Self::EventBridge { event_source, detail_type } => {
                events_key(event_source, detail_type.as_deref().unwrap_or("*"))
            }
        }
    }

    /// The backend (`sqs`, `eventbridge`).
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Sqs { .. } => "sqs",
            Self::EventBridge { .. } => "eventbridge",
        }
    }
}

/// The binding key of an SQS queue.
pub fn sqs_key(queue_arn: &str) -> String {
    format!("sqs|{queue_arn}")
}

/// The binding key of EventBridge events of `source` and `detail_type` (`*`: any).
pub fn events_key(source: &str, detail_type: &str) -> String {
    format!("events|{source}|{detail_type}")
}

impl TriggerSubscription {
    /// Reads a stored value.
    pub fn from_value(value: &Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(value.clone())
    }

    /// The stored value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a subscription serializes")
    }

    /// The ingest path (below the API's base).
    pub fn ingest_path(&self) -> String {
        format!("/v1/triggers/{}", self.subscription_id)
    }

    /// What the API shows (never the secret).
    pub fn view(&self) -> Value {
        let mut view = json!({
            "subscriptionId": self.subscription_id,
            "tenantId": self.tenant_id,
            "source": self.source,
            "workflowId": self.workflow_id,
            "inputMapping": self.input_mapping,
            "state": self.state,
            "ingestPath": self.ingest_path(),
            "secretFingerprint": crate::webhook::sign::fingerprint(&self.secret),
            "createdAt": crate::timefmt::rfc3339(self.created_at),
        });
        if let Some(name) = &self.name {
            view["name"] = json!(name);
        }
        if let Some(queue) = &self.queue {
            // Queue events are authenticated by IAM (the event-source mapping or the rule), not
            // by a shared secret, and arrive through no ingest URL.
            view["queue"] = json!(queue);
            view["backend"] = json!(queue.backend());
            if let Some(object) = view.as_object_mut() {
                object.remove("ingestPath");
                object.remove("secretFingerprint");
            }
        }
        view
    }
}

/// A checked registration request.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerRequest {
    /// The workflow.
    pub workflow_id: String,
    /// The mapping.
    pub input_mapping: Map<String, Value>,
    /// The tenant named, if any.
    pub tenant_id: Option<String>,
    /// A label.
    pub name: Option<String>,
    /// A `queue` subscription's binding.
    pub queue: Option<QueueBinding>,
}

fn invalid(field: &str, rule: &str, message: impl Into<String>) -> ServiceError {
    ServiceError::validation(message, json!({ "field": field, "rule": rule }))
}

const FIELDS: [&str; 6] = ["source", "workflowId", "inputMapping", "tenantId", "name", "queue"];

/// Checks a `POST /v1/trigger-subscriptions` body: `source` (`webhook`, and `queue` where
/// `queues` is set — the AWS host; `schedule` is declared in a definition, `email` and `form`
/// are not built here) and `workflowId` required, `inputMapping` an object of JSON pointers
/// (`""` or starting with `/`), `queue` (required with `queue`) `{sqsQueueArn}` or
/// `{eventSource, detailType?}`.
pub fn parse_request(body: &Value, queues: bool) -> Result<TriggerRequest, ServiceError> {
    let object = body.as_object().ok_or_else(|| invalid("", "type", "the request body must be a JSON object"))?;
    if let Some(unknown) = object.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(invalid(
            unknown,
            "additionalProperties",
            format!("unknown field `{unknown}`; allowed: {}", FIELDS.join(", ")),
        ));
    }
    let queue = match object.get("source").and_then(Value::as_str) {
        Some("webhook") => None,
        Some("queue") if queues => Some(parse_binding(object.get("queue"))?),
        Some("schedule") => {
            return Err(invalid(
                "source",
                "enum",
                "schedules are not registered here: declare them in the definition's triggers[] (type schedule)",
            ))
        }
        Some(other @ ("email" | "form" | "queue" | "stream" | "change")) => {
            let sources = if queues { "webhook, queue, schedule" } else { "webhook, schedule" };
            return Err(ServiceError::CapabilityRequired {
                message: format!("this host takes no `{other}` triggers (sources: {sources})"),
                details: json!({ "requiredCapability": "triggerBridge.sources", "field": "source" }),
            });
        }
        Some(_) => return Err(invalid("source", "enum", "source must be webhook or queue")),
        None => return Err(invalid("source", "required", "source is required (webhook or queue)")),
    };
    if queue.is_none() && object.get("queue").is_some_and(|queue| !queue.is_null()) {
        return Err(invalid("queue", "dependentRequired", "queue is only for source `queue`"));
    }
    let workflow_id = match object.get("workflowId") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        None | Some(Value::Null) => return Err(invalid("workflowId", "required", "workflowId is required")),
        Some(_) => return Err(invalid("workflowId", "type", "workflowId must be a non-empty string")),
    };
    let input_mapping = match object.get("inputMapping") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(mapping)) => {
            for (name, pointer) in mapping {
                let ok = pointer.as_str().is_some_and(|text| text.is_empty() || text.starts_with('/'));
                if !ok {
                    return Err(invalid(
                        &format!("inputMapping.{name}"),
                        "format",
                        format!("inputMapping.{name} must be a JSON pointer into the TriggerEvent, e.g. \"/webhook/body/id\""),
                    ));
                }
            }
            mapping.clone()
        }
        Some(_) => return Err(invalid("inputMapping", "type", "inputMapping must be an object of JSON pointers")),
    };
    let tenant_id = match object.get("tenantId") {
        None | Some(Value::Null) => None,
        Some(Value::String(tenant)) if !tenant.is_empty() => Some(tenant.clone()),
        Some(_) => return Err(invalid("tenantId", "type", "tenantId must be a non-empty string")),
    };
    let name = match object.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if name.len() <= 200 => Some(name.clone()),
        Some(_) => return Err(invalid("name", "type", "name must be a string of at most 200 characters")),
    };
    Ok(TriggerRequest { workflow_id, input_mapping, tenant_id, name, queue })
}

/// Reads a `queue` binding: `{sqsQueueArn}` or `{eventSource, detailType?}`.
fn parse_binding(value: Option<&Value>) -> Result<QueueBinding, ServiceError> {
    let Some(object) = value.and_then(Value::as_object) else {
        return Err(invalid(
            "queue",
            "required",
            "source `queue` needs `queue`: {\"sqsQueueArn\": \"arn:aws:sqs:…\"} or {\"eventSource\": \"…\", \"detailType\": \"…\"}",
        ));
    };
    let text = |name: &str| -> Result<Option<String>, ServiceError> {
        match object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) if !text.is_empty() && text.len() <= 256 && !text.contains('|') => {
                Ok(Some(text.clone()))
            }
            Some(_) => Err(invalid(
                &format!("queue.{name}"),
                "type",
                format!("queue.{name} must be a non-empty string of at most 256 characters without `|`"),
            )),
        }
    };
    if let Some(unknown) =
        object.keys().find(|key| !["sqsQueueArn", "eventSource", "detailType"].contains(&key.as_str()))
    {
        return Err(invalid(
            &format!("queue.{unknown}"),
            "additionalProperties",
            format!("unknown field `queue.{unknown}`; allowed: sqsQueueArn, or eventSource and detailType"),
        ));
    }
    match (text("sqsQueueArn")?, text("eventSource")?, text("detailType")?) {
        (Some(arn), None, None) => {
            let parts: Vec<&str> = arn.split(':').collect();
            if parts.len() != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[5].is_empty() {
                return Err(invalid(
                    "queue.sqsQueueArn",
                    "format",
                    "queue.sqsQueueArn must be an SQS queue ARN (arn:aws:sqs:<region>:<account>:<name>)",
                ));
            }
            Ok(QueueBinding::Sqs { sqs_queue_arn: arn })
        }
        (None, Some(event_source), detail_type) => Ok(QueueBinding::EventBridge { event_source, detail_type }),
        _ => {
            Err(invalid("queue", "oneOf", "queue takes either sqsQueueArn, or eventSource (and optionally detailType)"))
        }
    }
}

/// The `TriggerEvent` of a queue message or bus event `queue` (the `queue` sub-object:
/// `backend` and what the backend tells).
pub fn queue_event(subscription_id: &str, delivery_id: &str, received_at: Millis, queue: Value) -> Value {
    json!({
        "source": "queue",
        "subscriptionId": subscription_id,
        "deliveryId": delivery_id,
        "receivedAt": crate::timefmt::rfc3339(received_at),
        "verified": true,
        "contentTrust": "untrusted",
        "queue": queue,
    })
}

/// One inbound request, as the ingest route hands it over.
#[derive(Debug, Clone, Default)]
pub struct Inbound {
    /// The HTTP method.
    pub method: String,
    /// Headers, names lower case.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: Vec<u8>,
}

impl Inbound {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }

    /// The first of either header family.
    pub fn either(&self, names: [&str; 2]) -> Option<&str> {
        self.header(names[0]).or_else(|| self.header(names[1]))
    }
}

/// The `TriggerEvent` of an inbound webhook (`trigger-event.schema.json`): `webhook {method,
/// headers (the allowlist), body}` — the body as JSON when it parses, else as text.
pub fn trigger_event(subscription_id: &str, delivery_id: &str, received_at: Millis, inbound: &Inbound) -> Value {
    let mut headers = Map::new();
    for (name, value) in &inbound.headers {
        if KEPT_HEADERS.contains(&name.as_str()) && !headers.contains_key(name) {
            headers.insert(name.clone(), json!(value));
        }
    }
    let body = serde_json::from_slice::<Value>(&inbound.body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&inbound.body).into_owned()));
    json!({
        "source": "webhook",
        "subscriptionId": subscription_id,
        "deliveryId": delivery_id,
        "receivedAt": crate::timefmt::rfc3339(received_at),
        "verified": true,
        "contentTrust": "untrusted",
        "webhook": { "method": inbound.method, "headers": headers, "body": body },
    })
}

/// The run inputs `mapping` takes from `event` (a pointer that finds nothing sets nothing: the
/// workflow's input rules decide whether that is acceptable).
pub fn map_inputs(mapping: &Map<String, Value>, event: &Value) -> Map<String, Value> {
    mapping
        .iter()
        .filter_map(|(name, pointer)| Some((name.clone(), event.pointer(pointer.as_str()?)?.clone())))
        .collect()
}

/// A log entry of a subscription.
pub fn log_entry(event_type: &str, payload: Value, at: Millis) -> Value {
    json!({ "type": event_type, "payload": payload, "timestamp": crate::timefmt::rfc3339(at), "timestampMs": at })
}

/// The key of a log entry written at `at`: time-ordered, then in this process's writing order
/// (entries of one millisecond keep their order), `random` keeping two processes' apart.
pub fn log_key(at: Millis, random: u64) -> String {
    static WRITTEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let order = WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{at:013}-{order:012}-{random:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_refusals_name_the_field() {
        let field = |body: Value| match parse_request(&body, false).unwrap_err() {
            ServiceError::Validation { details, .. } => details["field"].as_str().unwrap().to_owned(),
            ServiceError::CapabilityRequired { .. } => "capability".into(),
            other => panic!("{other:?}"),
        };
        assert_eq!(field(json!({"workflowId": "w"})), "source");
        assert_eq!(field(json!({"source": "webhook"})), "workflowId");
        assert_eq!(field(json!({"source": "schedule", "workflowId": "w"})), "source");
        assert_eq!(field(json!({"source": "email", "workflowId": "w"})), "capability");
        assert_eq!(
            field(json!({"source": "webhook", "workflowId": "w", "inputMapping": {"a": "b"}})),
            "inputMapping.a"
        );
        assert_eq!(field(json!({"source": "webhook", "workflowId": "w", "x": 1})), "x");
        let ok = parse_request(
            &json!({"source": "webhook", "workflowId": "w", "inputMapping": {"id": "/webhook/body/id"}}),
            false,
        );
        assert_eq!(ok.unwrap().input_mapping["id"], "/webhook/body/id");
    }

    #[test]
    fn queue_bindings_are_checked_where_queues_are_served() {
        let arn = "arn:aws:sqs:eu-west-1:123456789012:orders";
        let body = json!({"source": "queue", "workflowId": "w", "queue": {"sqsQueueArn": arn}});
        assert!(matches!(parse_request(&body, false), Err(ServiceError::CapabilityRequired { .. })));
        let parsed = parse_request(&body, true).unwrap();
        assert_eq!(parsed.queue.as_ref().unwrap().key(), format!("sqs|{arn}"));
        let events = json!({"source": "queue", "workflowId": "w", "queue": {"eventSource": "com.example"}});
        assert_eq!(parse_request(&events, true).unwrap().queue.unwrap().key(), "events|com.example|*");
        let field = |body: Value| match parse_request(&body, true).unwrap_err() {
            ServiceError::Validation { details, .. } => details["field"].as_str().unwrap().to_owned(),
            other => panic!("{other:?}"),
        };
        assert_eq!(field(json!({"source": "queue", "workflowId": "w"})), "queue");
        assert_eq!(
            field(json!({"source": "queue", "workflowId": "w", "queue": {"sqsQueueArn": "orders"}})),
            "queue.sqsQueueArn"
        );
        assert_eq!(
            field(json!({"source": "queue", "workflowId": "w", "queue": {"sqsQueueArn": arn, "eventSource": "x"}})),
            "queue"
        );
        assert_eq!(field(json!({"source": "webhook", "workflowId": "w", "queue": {"eventSource": "x"}})), "queue");
        let stored = TriggerSubscription {
            subscription_id: "ts-1".into(),
            tenant_id: "t".into(),
            source: "queue".into(),
            workflow_id: "w".into(),
            input_mapping: Map::new(),
            secret: String::new(),
            name: None,
            created_at: 0,
            state: TriggerState::Active,
            queue: parse_request(&events, true).unwrap().queue,
        };
        let again = TriggerSubscription::from_value(&stored.to_value()).unwrap();
        assert_eq!(again, stored, "the binding round-trips");
        assert!(again.view().get("ingestPath").is_none());
        assert_eq!(again.view()["backend"], "eventbridge");
    }

    #[test]
    fn a_trigger_event_keeps_only_curated_headers_and_maps_inputs() {
        let inbound = Inbound {
            method: "POST".into(),
            headers: vec![
                ("authorization".into(), "Bearer secret".into()),
                ("cookie".into(), "a=b".into()),
                ("content-type".into(), "application/json".into()),
            ],
            body: br#"{"order": {"id": 7}}"#.to_vec(),
        };
        let event = trigger_event("ts-1", "d-1", 0, &inbound);
        assert_eq!(event["contentTrust"], "untrusted");
        assert_eq!(event["webhook"]["headers"], json!({"content-type": "application/json"}));
        let mut mapping = Map::new();
        mapping.insert("orderId".into(), json!("/webhook/body/order/id"));
        mapping.insert("missing".into(), json!("/webhook/body/nope"));
        assert_eq!(map_inputs(&mapping, &event), json!({"orderId": 7}).as_object().unwrap().clone());
        let text = trigger_event("ts-1", "d-1", 0, &Inbound { body: b"plain".to_vec(), ..Inbound::default() });
        assert_eq!(text["webhook"]["body"], "plain");
    }
}
