//! A webhook subscription: what `POST /v1/webhooks` stores and how its request is checked.
//!
//! The request follows `webhooks.md` with the reference hosts' spellings accepted too:
//! `{url, events | eventTypes, tenantId?, tags?, description?}`. `events` (or its alias) is a
//! non-empty list of event types — an exact type this host emits, a family `<prefix>.*` or
//! `*`. `tenantId` defaults to the caller's; naming another tenant is `403
//! tenant_membership_required`. The secret is made by the host and returned once.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::ServiceError;
use crate::timefmt::Millis;

/// At most this many event patterns per subscription.
pub const MAX_EVENTS: usize = 64;
/// At most this many tags per subscription.
pub const MAX_TAGS: usize = 16;
/// The longest URL accepted.
pub const MAX_URL_LENGTH: usize = 2048;

/// Whether deliveries are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubscriptionState {
    /// Matching events are delivered.
    Active,
    /// Too many consecutive deliveries were dead-lettered ([`super::DeliveryPolicy::fail_after`]):
    /// nothing more is delivered; register again to resume.
    Failed,
}

/// A stored subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSubscription {
    /// `wh-<uuid>`.
    pub webhook_id: String,
    /// The tenant whose runs it sees.
    pub tenant_id: String,
    /// Where deliveries go.
    pub url: String,
    /// Event type patterns.
    pub events: Vec<String>,
    /// The signing secret (never shown after creation, never logged).
    pub secret: String,
    /// Free labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When it was registered.
    pub created_at: Millis,
    /// Active or failed.
    pub state: SubscriptionState,
    /// Deliveries dead-lettered in a row (a delivered one resets it).
    #[serde(default)]
    pub consecutive_dead_letters: u32,
}

impl WebhookSubscription {
    /// Reads a stored record's value.
    pub fn from_value(value: &Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(value.clone())
    }

    /// The record value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a subscription serializes")
    }

    /// Whether it wants an event of `event_type`.
    pub fn wants(&self, event_type: &str) -> bool {
        self.events.iter().any(|pattern| super::matches(pattern, event_type))
    }

    /// What the API shows of it (everything but the secret).
    pub fn view(&self) -> Value {
        let mut view = json!({
            "webhookId": self.webhook_id,
            "subscriptionId": self.webhook_id,
            "tenantId": self.tenant_id,
            "url": self.url,
            "events": self.events,
            "secretFingerprint": super::sign::fingerprint(&self.secret),
            "createdAt": crate::timefmt::rfc3339(self.created_at),
            "state": self.state,
        });
        if !self.tags.is_empty() {
            view["tags"] = json!(self.tags);
        }
        if let Some(description) = &self.description {
            view["description"] = json!(description);
        }
        view
    }
}

/// A checked registration request (the destination check needs I/O and comes after).
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRequest {
    /// The URL, as given.
    pub url: String,
    /// Event type patterns, deduplicated in order.
    pub events: Vec<String>,
    /// The tenant named, if any.
    pub tenant_id: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
    /// Description.
    pub description: Option<String>,
}

const FIELDS: [&str; 6] = ["url", "events", "eventTypes", "tenantId", "tags", "description"];

fn invalid(field: &str, rule: &str, message: impl Into<String>) -> ServiceError {
    ServiceError::validation(message, json!({ "field": field, "rule": rule }))
}

/// A `400 webhook_url_rejected` naming the reason.
pub fn url_rejected(reason: impl Into<String>) -> ServiceError {
    let reason = reason.into();
    ServiceError::Rejected {
        status: 400,
        code: "webhook_url_rejected",
        message: format!("the webhook url is not allowed: {reason}"),
        details: json!({ "field": "url", "reason": reason }),
    }
}

fn strings(field: &str, value: &Value, max: usize) -> Result<Vec<String>, ServiceError> {
    let items =
        value.as_array().ok_or_else(|| invalid(field, "type", format!("{field} must be an array of strings")))?;
    if items.len() > max {
        return Err(invalid(field, "maxItems", format!("{field} may hold at most {max} entries")));
    }
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let text = item.as_str().filter(|text| !text.is_empty() && text.len() <= 200).ok_or_else(|| {
            invalid(field, "type", format!("{field} must hold non-empty strings of at most 200 characters"))
        })?;
        if !out.iter().any(|seen| seen == text) {
            out.push(text.to_owned());
        }
    }
    Ok(out)
}

/// Whether `pattern` names events this host can deliver: `*`, `<family>.*`, an event type of
/// [`crate::event::types::ALL`], or a host (`trellis.`) or dispatch (`core.`) type.
fn known_pattern(pattern: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    if let Some(prefix) = pattern.strip_suffix(".*") {
        return !prefix.is_empty() && prefix.split('.').all(|part| !part.is_empty() && !part.contains('*'));
    }
    !pattern.contains('*')
        && (crate::event::types::ALL.contains(&pattern)
            || pattern.starts_with("trellis.")
            || pattern.starts_with("core."))
}

/// Checks a registration body (no I/O): the fields and their rules, each refusal naming its
/// field. An unparseable URL is `400 webhook_url_rejected`.
pub fn parse_request(body: &Value) -> Result<WebhookRequest, ServiceError> {
    let object = body.as_object().ok_or_else(|| invalid("", "type", "the request body must be a JSON object"))?;
    if let Some(unknown) = object.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(invalid(
            unknown,
            "additionalProperties",
            format!("unknown field `{unknown}`; allowed: {}", FIELDS.join(", ")),
        ));
    }
    let url = match object.get("url") {
        None | Some(Value::Null) => return Err(invalid("url", "required", "url is required")),
        Some(Value::String(url)) => url.trim().to_owned(),
        Some(_) => return Err(invalid("url", "type", "url must be a string")),
    };
    if url.len() > MAX_URL_LENGTH {
        return Err(invalid("url", "maxLength", format!("url may be at most {MAX_URL_LENGTH} characters")));
    }
    let parsed = url::Url::parse(&url).map_err(|_| url_rejected("not an absolute URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(url_rejected("the scheme must be https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(url_rejected("the URL names no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(url_rejected("the URL may not carry credentials"));
    }
    let events = match (object.get("events"), object.get("eventTypes")) {
        (Some(events), None) => strings("events", events, MAX_EVENTS)?,
        (None, Some(types)) => strings("eventTypes", types, MAX_EVENTS)?,
        (Some(_), Some(_)) => return Err(invalid("events", "oneOf", "give events or its alias eventTypes, not both")),
        (None, None) => {
            return Err(invalid("events", "required", "events is required: a non-empty list of event types"))
        }
    };
    if events.is_empty() {
        return Err(invalid("events", "minItems", "events must name at least one event type (or \"*\")"));
    }
    if let Some(unknown) = events.iter().find(|pattern| !known_pattern(pattern)) {
        return Err(ServiceError::validation(
            format!("events: `{unknown}` is not an event type this host emits, a family `<prefix>.*`, or `*`"),
            json!({ "field": "events", "rule": "enum", "value": unknown, "allowed": crate::event::types::ALL }),
        ));
    }
    let tenant_id = match object.get("tenantId") {
        None | Some(Value::Null) => None,
        Some(Value::String(tenant)) if !tenant.is_empty() => Some(tenant.clone()),
        Some(_) => return Err(invalid("tenantId", "type", "tenantId must be a non-empty string")),
    };
    let tags = match object.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(tags) => strings("tags", tags, MAX_TAGS)?,
    };
    let description = match object.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.len() <= 500 => Some(text.clone()),
        Some(_) => {
            return Err(invalid("description", "type", "description must be a string of at most 500 characters"))
        }
    };
    Ok(WebhookRequest { url, events, tenant_id, tags, description })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(error: ServiceError) -> (String, String) {
        match error {
            ServiceError::Validation { details, .. } => {
                (details["field"].as_str().unwrap_or("").to_owned(), details["rule"].as_str().unwrap_or("").to_owned())
            }
            ServiceError::Rejected { code, .. } => (code.to_owned(), String::new()),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_request_is_read_with_either_spelling_of_events() {
        let request = parse_request(
            &json!({"url": "https://hooks.example/x", "events": ["run.completed", "run.*", "run.completed"]}),
        )
        .unwrap();
        assert_eq!(request.events, vec!["run.completed", "run.*"]);
        let alias =
            parse_request(&json!({"url": "https://hooks.example/x", "eventTypes": ["*"], "tenantId": "t"})).unwrap();
        assert_eq!((alias.events, alias.tenant_id), (vec!["*".to_owned()], Some("t".to_owned())));
    }

    #[test]
    fn refusals_name_the_field_and_the_rule() {
        let case = |body: Value| field_of(parse_request(&body).unwrap_err());
        assert_eq!(case(json!({"eventTypes": ["run.completed"]})), ("url".into(), "required".into()));
        assert_eq!(case(json!({"url": "not a url", "events": ["*"]})).0, "webhook_url_rejected");
        assert_eq!(case(json!({"url": "ftp://x.example/", "events": ["*"]})).0, "webhook_url_rejected");
        assert_eq!(case(json!({"url": "https://u:p@x.example/", "events": ["*"]})).0, "webhook_url_rejected");
        assert_eq!(case(json!({"url": "https://x.example/"})), ("events".into(), "required".into()));
        assert_eq!(case(json!({"url": "https://x.example/", "events": []})), ("events".into(), "minItems".into()));
        assert_eq!(
            case(json!({"url": "https://x.example/", "events": ["run.complete"]})),
            ("events".into(), "enum".into())
        );
        assert_eq!(
            case(json!({"url": "https://x.example/", "events": ["*"], "secret": "mine"})),
            ("secret".into(), "additionalProperties".into())
        );
        assert_eq!(
            case(json!({"url": "https://x.example/", "events": ["*"], "eventTypes": ["*"]})),
            ("events".into(), "oneOf".into())
        );
        assert_eq!(case(json!({"url": "https://x.example/", "events": [1]})), ("events".into(), "type".into()));
    }

    #[test]
    fn the_view_never_shows_the_secret() {
        let subscription = WebhookSubscription {
            webhook_id: "wh-1".into(),
            tenant_id: "t".into(),
            url: "https://x.example/".into(),
            events: vec!["*".into()],
            secret: "whsec_abc".into(),
            tags: vec![],
            description: None,
            created_at: 0,
            state: SubscriptionState::Active,
            consecutive_dead_letters: 0,
        };
        let view = subscription.view().to_string();
        assert!(!view.contains("whsec_abc"));
        assert!(view.contains(&super::super::sign::fingerprint("whsec_abc")));
        assert_eq!(WebhookSubscription::from_value(&subscription.to_value()).unwrap(), subscription);
    }
}
