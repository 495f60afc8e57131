//! Event documents and event pages written straight from the stored events.
//!
//! Every event page (the poll routes, the JSON form of the event list) and every SSE frame
//! renders each of its events. The events are read as [`StoredEvent`]s
//! ([`RunStore::events_after_json`](trellis_core::ports::RunStore::events_after_json)): the
//! payload stays the JSON text the store holds and is copied into the document, never
//! parsed into a `Value` and written back out (the SQLite store hands over its column as is;
//! the default writes the payload it read). The rest of a document is written here in one
//! pass. The output is byte for byte what the `Value` form gave: keys in the order a
//! `serde_json::Map` (sorted) writes them, compact, strings escaped by `serde_json`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use trellis_core::engine::ENGINE_VERSION;
use trellis_core::ports::StoredEvent;
use trellis_core::timefmt::{rfc3339, Rendered};
use trellis_core::{RunState, ServiceError};

use crate::error::ApiError;
use crate::render::{Wire, ENGINE_VERSION_NUMBER};
use crate::AppState;

/// Bytes reserved per event when a page is serialized (a typical node event is ~250).
const EVENT_BYTES_HINT: usize = 320;

/// The run (as a snapshot reads it) and its events after `after`, at most `limit`, payloads
/// unparsed. The state is read before the events, so a terminal status is never shown
/// without its terminal event.
pub(crate) async fn run_events(
    state: &AppState,
    tenant: &str,
    run_id: &str,
    after: Option<u64>,
    limit: usize,
) -> Result<(RunState, Vec<StoredEvent>), ServiceError> {
    let run = state.services.get_run_summary(tenant, run_id).await?;
    let events = state.services.store.events_after_json(run_id, after, limit).await?;
    Ok((run, events))
}

/// Appends `"key":` preceded by a comma unless first (keys are fixed ASCII names).
fn key(out: &mut Vec<u8>, first: bool, key: &str) {
    if !first {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
}

/// Appends `"key":value` (`value` written by `serde_json`), preceded by a comma unless first.
fn entry(out: &mut Vec<u8>, first: bool, name: &str, value: &impl Serialize) -> serde_json::Result<()> {
    key(out, first, name);
    serde_json::to_writer(&mut *out, value)
}

/// Whether `text` is written inside quotes as is: `serde_json` escapes only control
/// characters, `"` and `\\` (non-ASCII text and DEL are written raw), so for text without
/// them the copy is byte for byte what it writes.
fn needs_no_escape(text: &str) -> bool {
    text.bytes().all(|byte| byte >= 0x20 && byte != b'"' && byte != b'\\')
}

/// Appends `text` as a JSON string (copied when nothing in it needs an escape — the ids,
/// types and timestamps of nearly every event — else written by `serde_json`).
fn string(out: &mut Vec<u8>, text: &str) -> serde_json::Result<()> {
    quoted(out, text, needs_no_escape(text))
}

/// [`string`] for a `text` already checked: `plain` is [`needs_no_escape`]'s answer.
fn quoted(out: &mut Vec<u8>, text: &str, plain: bool) -> serde_json::Result<()> {
    if plain {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(&mut *out, text)
    }
}

/// Appends `value` in decimal.
fn decimal(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `"{run_id}:{sequence}"`, the form of `eventId` and `causationId`; `plain` says
/// `run_id` needs no escape (checked once per document).
fn event_ref(out: &mut Vec<u8>, run_id: &str, plain: bool, sequence: u64) -> serde_json::Result<()> {
    if plain {
        out.push(b'"');
        out.extend_from_slice(run_id.as_bytes());
        out.push(b':');
        decimal(out, sequence);
        out.push(b'"');
        Ok(())
    } else {
        quoted(out, &format!("{run_id}:{sequence}"), false)
    }
}

/// Appends the `RunEventDoc` of `event` on `wire`. `run_id` is the id as that wire shows it
/// ([`crate::render::wire_run_id`]): the event id and causation id are derived from it and
/// the sequence, so they are stable across re-reads.
pub(crate) fn write_doc(out: &mut Vec<u8>, wire: Wire, run_id: &str, event: &StoredEvent) -> serde_json::Result<()> {
    out.push(b'{');
    let plain = needs_no_escape(run_id);
    if let Some(cause) = event.causation {
        key(out, true, "causationId");
        event_ref(out, run_id, plain, cause)?;
    }
    let first = event.causation.is_none();
    match wire {
        Wire::V1 => entry(out, first, "engineVersion", &ENGINE_VERSION)?,
        Wire::V2 => entry(out, first, "engineVersion", &ENGINE_VERSION_NUMBER)?,
    }
    key(out, false, "eventId");
    event_ref(out, run_id, plain, event.sequence)?;
    if let Some(node_id) = &event.node_id {
        key(out, false, "nodeId");
        string(out, node_id)?;
    }
    out.extend_from_slice(b",\"payload\":");
    out.extend_from_slice(event.payload_json.as_bytes());
    key(out, false, "runId");
    quoted(out, run_id, plain)?;
    out.extend_from_slice(b",\"schemaVersion\":1,\"sequence\":");
    decimal(out, event.sequence);
    key(out, false, "timestamp");
    match Rendered::of(event.timestamp) {
        Some(text) => string(out, text.as_str())?,
        None => string(out, &rfc3339(event.timestamp))?,
    }
    key(out, false, "type");
    string(out, &event.event_type)?;
    out.push(b'}');
    Ok(())
}

/// The `RunEventDoc` of `event` on `wire` (see [`write_doc`]).
pub(crate) fn event_doc(wire: Wire, run_id: &str, event: &StoredEvent) -> Vec<u8> {
    let mut out = Vec::with_capacity(event.payload_json.len() + EVENT_BYTES_HINT);
    match write_doc(&mut out, wire, run_id, event) {
        Ok(()) => out,
        Err(_) => Vec::new(),
    }
}

/// A list of event documents of one run.
pub(crate) struct EventDocs<'a> {
    wire: Wire,
    run_id: &'a str,
    events: Vec<&'a StoredEvent>,
}

impl<'a> EventDocs<'a> {
    /// The documents of `events` of the run the wire calls `run_id`.
    pub(crate) fn new(wire: Wire, run_id: &'a str, events: impl IntoIterator<Item = &'a StoredEvent>) -> Self {
        Self { wire, run_id, events: events.into_iter().collect() }
    }

    /// Bytes the list will about take.
    fn size_hint(&self) -> usize {
        self.events.iter().map(|event| event.payload_json.len() + EVENT_BYTES_HINT).sum()
    }

    /// Appends the list as a JSON array.
    fn write(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'[');
        for (index, event) in self.events.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            write_doc(out, self.wire, self.run_id, event)?;
        }
        out.push(b']');
        Ok(())
    }
}

/// One page of a run's events as the v1 poll (and the v1 JSON event list) answers it.
/// Serialized, it is the page's other fields; [`page_json`] writes `events` before them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct V1Page<'a> {
    /// The page's events.
    #[serde(skip)]
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
/// Serialized, it is the page's other fields; [`page_json`] writes `events` before them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct V2Page<'a> {
    /// The page's events.
    #[serde(skip)]
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

/// The page document: `{"events":[…]` and then the other fields `page` serializes to. Every
/// other field's name sorts after `events`, so this is the sorted order a `Map` writes.
pub(crate) fn page_json(page: &impl Serialize, events: &EventDocs<'_>) -> serde_json::Result<Vec<u8>> {
    let rest = serde_json::to_vec(page)?;
    let mut body = Vec::with_capacity(events.size_hint() + rest.len() + 16);
    body.extend_from_slice(b"{\"events\":");
    events.write(&mut body)?;
    match rest.strip_prefix(b"{") {
        Some(b"}") | None => body.push(b'}'),
        Some(fields) => {
            body.push(b',');
            body.extend_from_slice(fields);
        }
    }
    Ok(body)
}

/// A page's JSON answer (`200`, `application/json`), serialized once into a buffer sized
/// for its events.
pub(crate) fn page_response(page: &impl Serialize, events: &EventDocs<'_>) -> Result<Response, ApiError> {
    let body = page_json(page, events).map_err(|_| ApiError::from(ServiceError::Internal))?;
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use trellis_core::RunEvent;

    use super::*;
    use crate::render::wire_run_id;

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

    fn page_text(page: &impl Serialize, events: &EventDocs<'_>) -> String {
        String::from_utf8(page_json(page, events).unwrap()).unwrap()
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
        // Run ids copied as is and ones that need escapes (a quote, a control character; DEL
        // and non-ASCII text are written raw by serde_json too).
        for run_id in ["r-1", "r\"x\u{1}", "r\u{7f}\u{e9}\\"] {
            for wire in [Wire::V1, Wire::V2] {
                for event in &events() {
                    let id = wire_run_id(wire, "acme", run_id);
                    let fast = String::from_utf8(event_doc(wire, &id, &StoredEvent::of(event.clone()))).unwrap();
                    let old = reference(wire, "acme", run_id, event).to_string();
                    assert_eq!(fast, old, "{wire:?} {run_id:?} {}", event.event_type);
                }
            }
        }
    }

    #[test]
    fn pages_are_the_bytes_the_value_form_gave() {
        let events = events();
        let stored: Vec<StoredEvent> = events.iter().cloned().map(StoredEvent::of).collect();
        let page = V1Page {
            events: EventDocs::new(Wire::V1, "r-1", &stored),
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
        assert_eq!(page_text(&page, &page.events), old.to_string());

        let page = V2Page {
            events: EventDocs::new(Wire::V2, "acme/r-1", stored.iter().skip(1)),
            is_terminal: false,
            last_sequence: -1,
            run_id: "acme/r-1",
            status: "running",
        };
        let docs: Vec<Value> = events.iter().skip(1).map(|e| reference(Wire::V2, "acme", "r-1", e)).collect();
        let old = json!({
            "runId": "acme/r-1", "events": docs, "lastSequence": -1, "status": "running", "isTerminal": false,
        });
        assert_eq!(page_text(&page, &page.events), old.to_string());
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
        let text = page_text(&page, &page.events);
        assert_eq!(
            text,
            r#"{"events":[],"isComplete":true,"isTerminal":true,"lastEventSeq":-1,"runId":"r","runStatus":"failed"}"#
        );
    }

    /// Events whose payloads exercise the writer: escapes, control characters, unicode keys
    /// and values, integers at the ends of their ranges, floats, nesting, keys inserted out
    /// of order.
    fn varied_events() -> Vec<RunEvent> {
        let mut nested = serde_json::Map::new();
        for key in ["zeta", "Alpha", "\u{e9}t\u{e9}", "a\"b", "", "10", "9", "\u{1F600}"] {
            nested.insert(key.into(), json!({"z": [key, {"y": null, "b": [[], {}]}], "a": key.len()}));
        }
        let payloads = [
            json!({"text": "line\nbreak\ttab \u{0001}\u{001f}\u{007f} / \\ \"q\" \u{2028}\u{2029} \u{10FFFF}"}),
            json!({"big": u64::MAX, "min": i64::MIN, "max": i64::MAX, "zero": 0, "neg": -1}),
            json!({"floats": [0.1, -0.0, 1.5e-7, 1e300, -2.5e-308, 123_456_789.125, f64::MAX, f64::MIN_POSITIVE]}),
            Value::Object(nested),
            json!([1, "two", [3, [4, [5, {"six": {"seven": {"eight": true}}}]]]]),
            json!("a bare string \u{e9}"),
            json!(-17),
            Value::Null,
            json!({}),
        ];
        payloads
            .into_iter()
            .enumerate()
            .map(|(index, payload)| RunEvent {
                sequence: index as u64,
                event_type: if index == 0 { "run.started".into() } else { format!("node.t\u{e9}st{index}") },
                node_id: (index % 2 == 1).then(|| format!("n\"{index}\u{1F600}")),
                payload,
                timestamp: 1_764_600_000_000 + index as u64 * 999,
                causation: (index % 3 != 0).then(|| index as u64 - 1),
            })
            .collect()
    }

    #[tokio::test]
    async fn the_sqlite_store_hands_over_the_bytes_the_parsed_path_writes() {
        use trellis_core::ports::RunStore;
        use trellis_core::testing::{chain_workflow, pending_run};

        let store = trellis_store_sqlite::SqliteStore::open_in_memory().unwrap();
        let run = pending_run(&chain_workflow(), "r-1", "acme");
        let written = varied_events();
        store.create_run(&run, &written, &[], None).await.unwrap();

        for (after, limit) in [(None, 100), (Some(2), 3), (Some(7), 100)] {
            let parsed = store.events_after("r-1", after, limit).await.unwrap();
            let raw = store.events_after_json("r-1", after, limit).await.unwrap();
            assert!(!raw.is_empty());
            let rendered: Vec<StoredEvent> = parsed.iter().cloned().map(StoredEvent::of).collect();
            assert_eq!(raw, rendered, "after {after:?}");

            for wire in [Wire::V1, Wire::V2] {
                let id = wire_run_id(wire, "acme", "r-1");
                for (raw, parsed) in raw.iter().zip(&parsed) {
                    let doc = String::from_utf8(event_doc(wire, &id, raw)).unwrap();
                    assert_eq!(doc, reference(wire, "acme", "r-1", parsed).to_string(), "{wire:?} {}", raw.sequence);
                }
            }
            let docs: Vec<Value> = parsed.iter().map(|e| reference(Wire::V1, "acme", "r-1", e)).collect();
            let page = V1Page {
                events: EventDocs::new(Wire::V1, "r-1", &raw),
                is_complete: false,
                is_terminal: false,
                last_event_seq: 8,
                run_id: "r-1",
                run_status: "running",
            };
            let old = json!({
                "runId": "r-1", "events": docs, "lastEventSeq": 8, "runStatus": "running",
                "isTerminal": false, "isComplete": false,
            });
            assert_eq!(page_text(&page, &page.events), old.to_string());
            let docs: Vec<Value> = parsed.iter().map(|e| reference(Wire::V2, "acme", "r-1", e)).collect();
            let page = V2Page {
                events: EventDocs::new(Wire::V2, "acme/r-1", &raw),
                is_terminal: true,
                last_sequence: 8,
                run_id: "acme/r-1",
                status: "completed",
            };
            let old = json!({
                "runId": "acme/r-1", "events": docs, "lastSequence": 8, "status": "completed", "isTerminal": true,
            });
            assert_eq!(page_text(&page, &page.events), old.to_string());
        }
    }
}
