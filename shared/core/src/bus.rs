//! Run events on an event bus (on AWS: an EventBridge bus; `docs/aws-events.md`): a configured
//! lifecycle set of a run's events leaves the host as CloudEvents (`cloudevents-mapping.md`).
//!
//! - **Which**: [`LifecycleSet`] — `started`, `completed`, `failed`, `cancelled`
//!   (`run.*`), `waiting` (`node.suspended`: the run waits for a human or a worker) and
//!   `node-failed` (`node.failed`); the template parameter `LifecycleEvents`.
//! - **How**: the commit that appends such events also commits one
//!   [`crate::engine::Effect::PublishEvents`] naming their sequences (the outbox), so a crash
//!   between commit and publish loses none: the effect is re-sent like any other. Delivery is
//!   therefore **at least once**; each entry's CloudEvents `id` is the event's stable
//!   `eventId` (`<runId>:<sequence>`), which consumers dedupe on.
//! - **What**: [`cloud_event`] — `specversion 1.0`, `id`, `source` (the host's public URL, or
//!   `urn:openwop:host:<hostId>:run:<runId>`), `type` `dev.openwop.event.<type>`, `time`,
//!   `subject` (node id, else run id), `data` (the whole event, as the events route renders
//!   it) and the extensions `openwoprunid`, `openwopseq`, `openwopcausationid`,
//!   `openwoptenantid`.
//! - **Too large**: an EventBridge entry holds at most 256 KB. An event whose CloudEvent is
//!   larger ([`MAX_DETAIL_BYTES`]) is published without `data`: it carries `dataref` (the
//!   CloudEvents claim-check extension: the events route that reads it) and
//!   `openwopdataomitted: true` instead, so the consumer still learns that it happened and
//!   fetches the body with a key.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use crate::event::RunEvent;
use crate::run::RunState;
use crate::timefmt::rfc3339;

/// The largest CloudEvent (serialized) published whole: EventBridge's 256 KB entry limit
/// less room for the entry's source, detail type and time.
pub const MAX_DETAIL_BYTES: usize = 256 * 1024 - 1024;

/// The names of the lifecycle set, each with the event type it publishes.
pub const LIFECYCLE: [(&str, &str); 6] = [
    ("started", "run.started"),
    ("completed", "run.completed"),
    ("failed", "run.failed"),
    ("cancelled", "run.cancelled"),
    ("waiting", "node.suspended"),
    ("node-failed", "node.failed"),
];

/// The event types a host publishes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LifecycleSet {
    types: BTreeSet<&'static str>,
}

impl LifecycleSet {
    /// The whole set.
    pub fn all() -> Self {
        Self { types: LIFECYCLE.iter().map(|(_, event_type)| *event_type).collect() }
    }

    /// Reads a comma-separated list of [`LIFECYCLE`] names (`started,completed,node-failed`);
    /// `all` is the whole set, an empty list none. `Err` names the unknown entry.
    pub fn parse(list: &str) -> Result<Self, String> {
        if list.trim() == "all" {
            return Ok(Self::all());
        }
        let mut types = BTreeSet::new();
        for name in list.split(',').map(str::trim).filter(|name| !name.is_empty()) {
            let Some((_, event_type)) = LIFECYCLE.iter().find(|(known, _)| *known == name) else {
                let known: Vec<&str> = LIFECYCLE.iter().map(|(known, _)| *known).collect();
                return Err(format!("unknown lifecycle event `{name}` (known: {}, or all)", known.join(", ")));
            };
            types.insert(*event_type);
        }
        Ok(Self { types })
    }

    /// Whether events of `event_type` are published.
    pub fn contains(&self, event_type: &str) -> bool {
        self.types.contains(event_type)
    }

    /// The published event types.
    pub fn event_types(&self) -> Vec<&'static str> {
        self.types.iter().copied().collect()
    }
}

/// One entry for the bus.
#[derive(Debug, Clone, PartialEq)]
pub struct BusEntry {
    /// The CloudEvents `id` (`<runId>:<sequence>`).
    pub id: String,
    /// The CloudEvents `type` (the entry's detail type).
    pub detail_type: String,
    /// When the event happened (milliseconds).
    pub time: crate::timefmt::Millis,
    /// The CloudEvent, serialized.
    pub detail: String,
}

/// Why a publish failed; always worth another try (the effect is re-sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("publishing run events failed: {0}")]
pub struct PublishError(pub String);

/// Where run events go (the AWS composition: EventBridge `PutEvents`).
#[async_trait]
pub trait EventPublisher: Send + Sync {
    /// Publishes `entries` (at most ten) in one request; `Err` when any was not accepted.
    async fn publish(&self, entries: &[BusEntry]) -> Result<(), PublishError>;
}

/// What a host needs to publish run events.
#[derive(Clone)]
pub struct EventBus {
    /// The bus.
    pub publisher: Arc<dyn EventPublisher>,
    /// What is published.
    pub events: LifecycleSet,
    /// The CloudEvents `source` base: the host's public URL, else none (a URN per run).
    pub public_url: Option<String>,
    /// The host id in the URN `source` (`urn:openwop:host:<hostId>:run:<runId>`).
    pub host_id: String,
}

impl EventBus {
    /// The entry of `event` of `run`.
    pub fn entry(&self, run: &RunState, event: &RunEvent) -> BusEntry {
        let source = match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("urn:openwop:host:{}:run:{}", self.host_id, run.run_id),
        };
        let dataref = match &self.public_url {
            Some(url) => format!("{}{}", url.trim_end_matches('/'), event_path(&run.run_id, event.sequence)),
            None => event_path(&run.run_id, event.sequence),
        };
        let document = fit(cloud_event(run, event, &source), &dataref);
        BusEntry {
            id: event_id(&run.run_id, event.sequence),
            detail_type: cloud_type(&event.event_type),
            time: event.timestamp,
            detail: serde_json::to_string(&document).expect("a CloudEvent serializes"),
        }
    }
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("EventBus").field("events", &self.events).finish_non_exhaustive()
    }
}

/// The stable id of event `sequence` of `run_id` (the events route's `eventId`).
pub fn event_id(run_id: &str, sequence: u64) -> String {
    format!("{run_id}:{sequence}")
}

/// The CloudEvents `type` of an event type.
pub fn cloud_type(event_type: &str) -> String {
    format!("dev.openwop.event.{event_type}")
}

/// The events route that reads from event `sequence` of `run_id` on.
pub fn event_path(run_id: &str, sequence: u64) -> String {
    let before = sequence.checked_sub(1).map_or(-1, |before| before as i64);
    format!("/v1/runs/{run_id}/events/poll?lastSequence={before}")
}

/// The CloudEvent of `event` of `run` from `source` (`cloudevents-mapping.md`).
pub fn cloud_event(run: &RunState, event: &RunEvent, source: &str) -> Value {
    let data = crate::webhook::delivery::event_doc(run, event);
    let mut document = Map::new();
    document.insert("specversion".into(), json!("1.0"));
    document.insert("id".into(), json!(event_id(&run.run_id, event.sequence)));
    document.insert("source".into(), json!(source));
    document.insert("type".into(), json!(cloud_type(&event.event_type)));
    document.insert("time".into(), json!(rfc3339(event.timestamp)));
    document.insert("datacontenttype".into(), json!("application/json"));
    document.insert("subject".into(), json!(event.node_id.as_deref().unwrap_or(&run.run_id)));
    document.insert("openwoprunid".into(), json!(run.run_id));
    document.insert("openwopseq".into(), json!(event.sequence));
    if let Some(cause) = data.get("causationId") {
        document.insert("openwopcausationid".into(), cause.clone());
    }
    document.insert("openwoptenantid".into(), json!(run.tenant));
    document.insert("openwopworkflowid".into(), json!(run.workflow.id));
    document.insert("data".into(), Value::Object(data));
    Value::Object(document)
}

/// `document` as published: whole when it fits [`MAX_DETAIL_BYTES`], else without `data` and
/// with `dataref` (where to read it) and `openwopdataomitted: true`.
pub fn fit(mut document: Value, dataref: &str) -> Value {
    let size = serde_json::to_vec(&document).map_or(usize::MAX, |bytes| bytes.len());
    if size <= MAX_DETAIL_BYTES {
        return document;
    }
    if let Some(object) = document.as_object_mut() {
        object.remove("data");
        object.insert("dataref".into(), json!(dataref));
        object.insert("openwopdataomitted".into(), json!(true));
        object.insert("openwopdatabytes".into(), json!(size));
    }
    document
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{chain_workflow, pending_run};

    fn run_of(run_id: &str, tenant: &str) -> RunState {
        pending_run(&chain_workflow(), run_id, tenant)
    }

    fn event(sequence: u64, event_type: &str, payload: Value) -> RunEvent {
        RunEvent { sequence, event_type: event_type.into(), node_id: None, payload, timestamp: 1_000, causation: None }
    }

    #[test]
    fn the_lifecycle_set_reads_names_and_refuses_unknown_ones() {
        let set = LifecycleSet::parse("started, completed,node-failed").unwrap();
        assert_eq!(set.event_types(), ["node.failed", "run.completed", "run.started"]);
        assert!(!set.contains("run.failed"));
        assert_eq!(LifecycleSet::parse("all").unwrap(), LifecycleSet::all());
        assert_eq!(LifecycleSet::parse("").unwrap().event_types().len(), 0);
        let refused = LifecycleSet::parse("started,finished").unwrap_err();
        assert!(refused.contains("`finished`") && refused.contains("node-failed"), "{refused}");
    }

    #[test]
    fn a_cloud_event_maps_the_envelope_and_keeps_the_event_as_data() {
        let run = run_of("run-1", "tenant-a");
        let mut node_failed = event(4, "node.failed", json!({"error": {"code": "x"}}));
        node_failed.node_id = Some("call".into());
        node_failed.causation = Some(3);
        let document = cloud_event(&run, &node_failed, "urn:openwop:host:h:run:run-1");
        assert_eq!(document["specversion"], "1.0");
        assert_eq!(document["id"], "run-1:4");
        assert_eq!(document["type"], "dev.openwop.event.node.failed");
        assert_eq!(document["subject"], "call");
        assert_eq!(document["openwopseq"], 4);
        assert_eq!(document["openwopcausationid"], "run-1:3");
        assert_eq!(document["openwoptenantid"], "tenant-a");
        assert_eq!(document["data"]["payload"]["error"]["code"], "x");
        assert_eq!(document["data"]["eventId"], "run-1:4");
        for name in document.as_object().unwrap().keys() {
            assert!(name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()), "CE attribute `{name}`");
        }
        let started = cloud_event(&run, &event(0, "run.started", json!({})), "s");
        assert_eq!(started["subject"], "run-1", "a run event's subject is the run");
    }

    #[test]
    fn an_oversized_event_is_published_with_a_reference_instead_of_its_data() {
        let run = run_of("run-1", "tenant-a");
        let bus = EventBus {
            publisher: Arc::new(Refuse),
            events: LifecycleSet::all(),
            public_url: Some("https://api.example/v/".into()),
            host_id: "h".into(),
        };
        let small = bus.entry(&run, &event(2, "run.completed", json!({"outputs": {"a": 1}})));
        let small: Value = serde_json::from_str(&small.detail).unwrap();
        assert_eq!(small["data"]["payload"]["outputs"]["a"], 1);
        assert_eq!(small["source"], "https://api.example/v");
        let big = "x".repeat(MAX_DETAIL_BYTES);
        let entry = bus.entry(&run, &event(7, "run.completed", json!({"outputs": {"text": big}})));
        assert!(entry.detail.len() < 2_000, "{}", entry.detail.len());
        let document: Value = serde_json::from_str(&entry.detail).unwrap();
        assert!(document.get("data").is_none());
        assert_eq!(document["openwopdataomitted"], true);
        assert_eq!(document["dataref"], "https://api.example/v/v1/runs/run-1/events/poll?lastSequence=6");
        assert_eq!(document["id"], "run-1:7");
    }

    struct Refuse;

    #[async_trait]
    impl EventPublisher for Refuse {
        async fn publish(&self, _entries: &[BusEntry]) -> Result<(), PublishError> {
            Err(PublishError("refused".into()))
        }
    }
}
