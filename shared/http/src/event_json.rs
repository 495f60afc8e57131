//! Event documents and event pages serialized straight from the stored events.
//!
//! Every event page (the poll routes, the JSON form of the event list) and every SSE frame
//! renders each of its events. Building a `serde_json::Value` per event (a map of owned keys
//! and values, a deep copy of the payload), then a second copy of the list for `json!`, then
//! serializing and dropping both was most of a page's cost; here the document is written
//! from `&RunEvent` in one pass. The output is byte for byte what the `Value` form gave:
//! keys in the order a `serde_json::Map` (sorted) writes them.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use trellis_core::engine::ENGINE_VERSION;
use trellis_core::timefmt::rfc3339;
use trellis_core::{RunEvent, ServiceError};

use crate::error::ApiError;
use crate::render::{wire_run_id, Wire, ENGINE_VERSION_NUMBER};

/// Bytes reserved per event when a page is serialized (a typical node event is ~250).
const EVENT_BYTES_HINT: usize = 320;

/// `{run_id}:{sequence}`, the form of `eventId` and `causationId`, written without an
/// intermediate string.
struct EventRef<'a>(&'a str, u64);

impl Serialize for EventRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{}:{}", self.0, self.1))
    }
}

/// The `RunEventDoc` of one event on one wire. `run_id` is the id as that wire shows it
/// ([`wire_run_id`]): the event id and causation id are derived from it and the sequence,
/// so they are stable across re-reads.
pub(crate) struct EventDoc<'a> {
    wire: Wire,
    run_id: &'a str,
    event: &'a RunEvent,
}

impl<'a> EventDoc<'a> {
    /// The document of `event` in the log of the run the wire calls `run_id`.
    pub(crate) fn new(wire: Wire, run_id: &'a str, event: &'a RunEvent) -> Self {
        Self { wire, run_id, event }
    }
}

impl Serialize for EventDoc<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let event = self.event;
        let fields = 8 + usize::from(event.node_id.is_some()) + usize::from(event.causation.is_some());
        let mut map = serializer.serialize_map(Some(fields))?;
        if let Some(cause) = event.causation {
            map.serialize_entry("causationId", &EventRef(self.run_id, cause))?;
        }
        match self.wire {
            Wire::V1 => map.serialize_entry("engineVersion", ENGINE_VERSION)?,
            Wire::V2 => map.serialize_entry("engineVersion", &ENGINE_VERSION_NUMBER)?,
        }
        map.serialize_entry("eventId", &EventRef(self.run_id, event.sequence))?;
        if let Some(node_id) = &event.node_id {
            map.serialize_entry("nodeId", node_id)?;
        }
        map.serialize_entry("payload", &event.payload)?;
        map.serialize_entry("runId", self.run_id)?;
        map.serialize_entry("schemaVersion", &1u64)?;
        map.serialize_entry("sequence", &event.sequence)?;
        map.serialize_entry("timestamp", &rfc3339(event.timestamp))?;
        map.serialize_entry("type", &event.event_type)?;
        map.end()
    }
}

/// A list of event documents of one run.
pub(crate) struct EventDocs<'a> {
    wire: Wire,
    run_id: &'a str,
    events: Vec<&'a RunEvent>,
}

impl<'a> EventDocs<'a> {
    /// The documents of `events` of the run the wire calls `run_id`.
    pub(crate) fn new(wire: Wire, run_id: &'a str, events: impl IntoIterator<Item = &'a RunEvent>) -> Self {
        Self { wire, run_id, events: events.into_iter().collect() }
    }

    /// Bytes the list will about take.
    fn size_hint(&self) -> usize {
        self.events.len() * EVENT_BYTES_HINT
    }
}

impl Serialize for EventDocs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.events.len()))?;
        for event in &self.events {
            seq.serialize_element(&EventDoc::new(self.wire, self.run_id, event))?;
        }
        seq.end()
    }
}

/// One page of a run's events as the v1 poll (and the v1 JSON event list) answers it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct V1Page<'a> {
    /// The page's events.
    pub(crate) events: EventDocs<'a>,
    /// Terminal and nothing left after this page.
    pub(crate) is_complete: bool,
    /// The run is terminal.
    pub(crate) is_terminal: bool,
    /// The cursor to continue from.
    pub(crate) last_event_seq: i64,
    /// The run.
    pub(crate) run_id: &'a str,
    /// The run's status.
    pub(crate) run_status: &'a str,
}

/// One page of a run's events as the v2 poll (and the v2 JSON event list) answers it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct V2Page<'a> {
    /// The page's events.
    pub(crate) events: EventDocs<'a>,
    /// The run is terminal.
    pub(crate) is_terminal: bool,
    /// The cursor to continue from.
    pub(crate) last_sequence: i64,
    /// The run, tenant-bound.
    pub(crate) run_id: &'a str,
    /// The run's status.
    pub(crate) status: &'a str,
}

/// A page's JSON answer (`200`, `application/json`), serialized once into a buffer sized
/// for its events.
pub(crate) fn page_response(page: &impl Serialize, events: &EventDocs<'_>) -> Result<Response, ApiError> {
    let mut body = Vec::with_capacity(events.size_hint() + 256);
    serde_json::to_writer(&mut body, page).map_err(|_| ApiError::from(ServiceError::Internal))?;
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

/// The event document of `event` as a `Value` (for callers that hold or edit documents).
pub(crate) fn event_value(wire: Wire, tenant: &str, run_id: &str, event: &RunEvent) -> serde_json::Value {
    let id = wire_run_id(wire, tenant, run_id);
    serde_json::to_value(EventDoc::new(wire, &id, event)).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// The `Value` the documents were built as before (the reference for the byte check).
    fn reference(wire: Wire, tenant: &str, run_id: &str, event: &RunEvent) -> Value {
        let run_id = wire_run_id(wire, tenant, run_id);
        let mut doc = serde_json::Map::new();
        doc.insert("eventId".into(), Value::String(format!("{run_id}:{}", event.sequence)));
        doc.insert("runId".into(), Value::String(run_id.clone()));
        doc.insert("type".into(), Value::String(event.event_type.clone()));
        doc.insert("payload".into(), event.payload.clone());
        doc.insert("timestamp".into(), Value::String(rfc3339(event.timestamp)));
        doc.insert("sequence".into(), Value::from(event.sequence));
        doc.insert("schemaVersion".into(), Value::from(1));
        doc.insert("engineVersion".into(), Value::String(ENGINE_VERSION.to_owned()));
        if let Some(node_id) = &event.node_id {
            doc.insert("nodeId".into(), Value::String(node_id.clone()));
        }
        if let Some(cause) = event.causation {
            doc.insert("causationId".into(), Value::String(format!("{run_id}:{cause}")));
        }
        if wire == Wire::V2 {
            doc.insert("engineVersion".into(), json!(1));
        }
        Value::Object(doc)
    }

    fn events() -> Vec<RunEvent> {
        vec![
            RunEvent {
                sequence: 0,
                event_type: "run.started".into(),
                node_id: None,
                payload: json!({"inputs": {"a": [1, 2.5, null, true]}, "tags": [], "workflowId": "w"}),
                timestamp: 1_764_600_000_123,
                causation: None,
            },
            RunEvent {
                sequence: 41,
                event_type: "node.completed".into(),
                node_id: Some("n\"0\n".into()),
                payload: json!({"outputs": {"text": "é \u{1F600} \\ \"quoted\"", "n": -3, "big": u64::MAX}}),
                timestamp: 0,
                causation: Some(40),
            },
            RunEvent {
                sequence: u64::from(u32::MAX) + 7,
                event_type: "trellis.vendor".into(),
                node_id: Some("n1".into()),
                payload: Value::Null,
                timestamp: 253_402_300_799_999,
                causation: Some(0),
            },
        ]
    }

    #[test]
    fn documents_are_the_bytes_the_value_form_gave() {
        for wire in [Wire::V1, Wire::V2] {
            for event in &events() {
                let id = wire_run_id(wire, "acme", "r-1");
                let fast = serde_json::to_string(&EventDoc::new(wire, &id, event)).unwrap();
                let old = reference(wire, "acme", "r-1", event).to_string();
                assert_eq!(fast, old, "{wire:?} {}", event.event_type);
                assert_eq!(event_value(wire, "acme", "r-1", event), reference(wire, "acme", "r-1", event));
            }
        }
    }

    #[test]
    fn pages_are_the_bytes_the_value_form_gave() {
        let events = events();
        let page = V1Page {
            events: EventDocs::new(Wire::V1, "r-1", &events),
            is_complete: false,
            is_terminal: true,
            last_event_seq: 41,
            run_id: "r-1",
            run_status: "completed",
        };
        let docs: Vec<Value> = events.iter().map(|e| reference(Wire::V1, "acme", "r-1", e)).collect();
        let old = json!({
            "runId": "r-1", "events": docs, "lastEventSeq": 41, "runStatus": "completed",
            "isTerminal": true, "isComplete": false,
        });
        assert_eq!(serde_json::to_string(&page).unwrap(), old.to_string());

        let page = V2Page {
            events: EventDocs::new(Wire::V2, "acme/r-1", events.iter().skip(1)),
            is_terminal: false,
            last_sequence: -1,
            run_id: "acme/r-1",
            status: "running",
        };
        let docs: Vec<Value> = events.iter().skip(1).map(|e| reference(Wire::V2, "acme", "r-1", e)).collect();
        let old = json!({
            "runId": "acme/r-1", "events": docs, "lastSequence": -1, "status": "running", "isTerminal": false,
        });
        assert_eq!(serde_json::to_string(&page).unwrap(), old.to_string());
    }

    #[test]
    fn an_empty_page_is_an_empty_list() {
        let page = V1Page {
            events: EventDocs::new(Wire::V1, "r", []),
            is_complete: true,
            is_terminal: true,
            last_event_seq: -1,
            run_id: "r",
            run_status: "failed",
        };
        let text = serde_json::to_string(&page).unwrap();
        assert_eq!(
            text,
            r#"{"events":[],"isComplete":true,"isTerminal":true,"lastEventSeq":-1,"runId":"r","runStatus":"failed"}"#
        );
    }
}
