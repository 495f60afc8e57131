//! `GET /v1/runs/{runId}/events`: the request's gates (stream mode, `bufferMs`,
//! `Last-Event-ID`, in the protocol's order) and content negotiation: Server-Sent Events
//! ([`super::sse`]) or, with `Accept: application/json`, the event list.
//!
//! Modes served: `updates` (default), `debug` (`updates,debug` is their union, i.e. `debug`),
//! `values` (alone; combined with another mode it is refused) and `messages` (alone or with
//! `updates`/`debug`): a model call's streamed tokens, each `output.chunk` batch projected as
//! one `event: ai.message.chunk` frame per part (see `trellis_core::ai::chunk`). Anything
//! else is `400 unsupported_stream_mode` (`details.supported` lists each mode served).
//! `bufferMs` is an integer 0..=5000; above 0 `updates`/`debug` frames are batched.
//! `Last-Event-ID` is an integer of -1 or more (`400 validation_error` naming the header
//! otherwise); one past every possible sequence resumes after everything.
//!
//! The JSON list is paged like the poll route: at most `limit` events (1..=10000, default
//! 10000) after `lastSequence` (or `Last-Event-ID`); `lastEventSeq` is the next cursor and
//! `isComplete` is true only for a terminal run with nothing left after the page.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::stream;
use serde_json::json;

use trellis_core::event::types::OUTPUT_CHUNK;

use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::event_json::{page_response, run_events, EventDocs, V1Page, V2Page};
use crate::links::BasePath;
use crate::render::{wire_run_id, Wire};
use crate::AppState;

use super::sse;

/// The stream modes this host serves (discovery's `streaming.modes`).
pub(crate) const SERVED_MODES: [&str; 4] = ["values", "updates", "debug", "messages"];
/// The largest `bufferMs`.
pub(crate) const MAX_BUFFER_MS: u64 = 5000;

/// Which run events a stream frames as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Base {
    /// None: `messages` alone.
    Nothing,
    Updates,
    Debug,
    /// The `updates` events and `node.started`, each answered with a run snapshot.
    Values,
}

/// Which events a stream carries: a base tier, and with `messages` every `output.chunk`
/// batch of a model call projected as `ai.message.chunk` frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Filter {
    pub(crate) base: Base,
    pub(crate) messages: bool,
}

impl Filter {
    pub(crate) const UPDATES: Self = Self { base: Base::Updates, messages: false };

    /// Whether `event_type` is framed as a run event.
    pub(crate) fn admits(self, event_type: &str) -> bool {
        match self.base {
            Base::Nothing => false,
            Base::Debug => !(self.messages && event_type == OUTPUT_CHUNK),
            Base::Values => event_type == "node.started" || updates_admit(event_type),
            Base::Updates => updates_admit(event_type),
        }
    }

    /// Whether `event_type` is projected as `ai.message.chunk` frames.
    pub(crate) fn projects(self, event_type: &str) -> bool {
        self.messages && event_type == OUTPUT_CHUNK
    }
}

fn updates_admit(event_type: &str) -> bool {
    let excluded = matches!(
        event_type,
        "node.started"
            | "node.retried"
            | "variable.changed"
            | "version.pinned"
            | "log.appended"
            | OUTPUT_CHUNK
            | "ai.message.chunk"
    ) || event_type.starts_with("lease.")
        || event_type.starts_with("trellis.");
    !excluded
}

fn parse_modes(query: &HashMap<String, String>) -> Result<Filter, ApiError> {
    let Some(raw) = query.get("streamMode") else { return Ok(Filter::UPDATES) };
    let modes: Vec<&str> = raw.split(',').map(str::trim).filter(|mode| !mode.is_empty()).collect();
    let unsupported = || {
        ApiError::new(StatusCode::BAD_REQUEST, "unsupported_stream_mode", "this stream mode is not served")
            .with_details(json!({ "supported": SERVED_MODES }))
    };
    if modes.is_empty() {
        return Err(unsupported());
    }
    if modes.contains(&"values") && modes.len() > 1 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "unsupported_stream_mode",
            "`values` cannot be combined with another stream mode",
        )
        .with_details(json!({ "supported": SERVED_MODES })));
    }
    if modes.iter().any(|mode| !SERVED_MODES.contains(mode)) {
        return Err(unsupported());
    }
    let base = if modes == ["values"] {
        Base::Values
    } else if modes.contains(&"debug") {
        Base::Debug
    } else if modes.contains(&"updates") {
        Base::Updates
    } else {
        Base::Nothing
    };
    Ok(Filter { base, messages: modes.contains(&"messages") })
}

/// The batch window `bufferMs` asks for (`None`: absent or `0`, unbuffered).
fn check_buffer(query: &HashMap<String, String>) -> Result<Option<Duration>, ApiError> {
    match query.get("bufferMs").map(|raw| raw.trim().parse::<u64>()) {
        None | Some(Ok(0)) => Ok(None),
        Some(Ok(ms @ 1..=MAX_BUFFER_MS)) => Ok(Some(Duration::from_millis(ms))),
        Some(_) => Err(ApiError::validation("bufferMs must be an integer from 0 to 5000")
            .with_details(json!({ "parameter": "bufferMs", "minimum": 0, "maximum": MAX_BUFFER_MS }))),
    }
}

/// The resume point of `Last-Event-ID` (absent: from the start).
fn resume_point(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get("last-event-id") else { return Ok(None) };
    value.to_str().ok().and_then(super::events::parse_sequence).ok_or_else(|| {
        ApiError::validation("Last-Event-ID must be an integer of -1 or more (an event's sequence)")
            .with_details(json!({ "header": "Last-Event-ID" }))
    })
}

/// Events per page of the JSON list at most (and by default).
pub(crate) const MAX_LIST_PAGE: usize = 10_000;

/// The JSON list's page size: `limit`, an integer 1..=10000 (default 10000).
fn list_limit(query: &HashMap<String, String>) -> Result<usize, ApiError> {
    match query.get("limit").map(|raw| raw.trim().parse::<usize>()) {
        None => Ok(MAX_LIST_PAGE),
        Some(Ok(limit @ 1..=MAX_LIST_PAGE)) => Ok(limit),
        Some(_) => Err(ApiError::validation("limit must be an integer from 1 to 10000")
            .with_details(json!({ "parameter": "limit", "minimum": 1, "maximum": MAX_LIST_PAGE }))),
    }
}

fn wants_json(headers: &HeaderMap) -> bool {
    let accept = headers.get(header::ACCEPT).and_then(|value| value.to_str().ok()).unwrap_or("");
    accept.contains("application/json") && !accept.contains("text/event-stream")
}

/// `GET /v1/runs/{runId}/events`.
pub(crate) async fn events(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    base: BasePath,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsRead)?;
    open(Wire::V1, state, base, caller.tenant(), &run_id, &query, &headers).await
}

/// Opens the event stream of `run_id` (internal id) for `wire`; `values` snapshots carry
/// links under `base`.
pub(crate) async fn open(
    wire: Wire,
    state: AppState,
    base: BasePath,
    tenant: &str,
    run_id: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let run = state.services.get_run(tenant, run_id).await?;
    let filter = parse_modes(query)?;
    let buffer = check_buffer(query)?;
    let resume_after = resume_point(headers)?;
    if wants_json(headers) {
        // One page, as the poll route: `lastEventSeq` is the cursor to continue from
        // (`lastSequence` or `Last-Event-ID`), and `isComplete` holds only when the run is
        // terminal and nothing is left after this page.
        let after = match query.get("lastSequence") {
            Some(raw) => super::events::query_sequence(Some(raw), "lastSequence")?,
            None => resume_after,
        };
        let limit = list_limit(query)?;
        let (run, events) = run_events(&state, tenant, run_id, after, limit).await?;
        let terminal = run.status.is_terminal();
        let drained = events.len() < limit
            || events.last().is_some_and(|event| trellis_core::event::types::is_terminal(&event.event_type));
        let last = events.last().map(|e| e.sequence as i64).unwrap_or(after.map_or(-1, |s| s as i64));
        let id = wire_run_id(wire, tenant, &run.run_id);
        // The JSON list carries a model call's `output.chunk` events as they are stored.
        let admitted =
            events.iter().filter(|event| filter.admits(&event.event_type) || filter.projects(&event.event_type));
        let docs = EventDocs::new(wire, &id, admitted);
        let mut response = match wire {
            Wire::V1 => {
                let page = V1Page {
                    events: docs,
                    is_complete: terminal && drained,
                    is_terminal: terminal,
                    last_event_seq: last,
                    run_id: &id,
                    run_status: run.status.as_str(),
                };
                page_response(&page, &page.events)?
            }
            Wire::V2 => {
                let page = V2Page {
                    events: docs,
                    is_terminal: terminal,
                    last_sequence: last,
                    run_id: &id,
                    status: run.status.as_str(),
                };
                page_response(&page, &page.events)?
            }
        };
        response.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
        return Ok(response);
    }
    let settings = state.streams;
    let stream = sse::Stream {
        state,
        wire,
        base,
        tenant: tenant.to_owned(),
        run_id: run.run_id,
        filter,
        cursor: resume_after,
        buffer,
        keepalive: settings.keepalive,
        ends_at: settings.max_duration.map(|max| Instant::now() + max),
        baseline: headers.contains_key("last-event-id"),
        held: Vec::new(),
        held_last: 0,
        flush_at: None,
        done: false,
        closed: false,
    };
    let body = stream::unfold(stream, |mut stream| async move {
        stream.next_chunk().await.map(|chunk| (Ok::<_, std::convert::Infallible>(chunk), stream))
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn modes_are_validated() {
        let mode = |raw: &str| parse_modes(&query(&[("streamMode", raw)])).unwrap();
        assert_eq!(parse_modes(&query(&[])).unwrap(), Filter::UPDATES);
        assert_eq!(mode("updates,debug"), Filter { base: Base::Debug, messages: false });
        assert_eq!(mode("values"), Filter { base: Base::Values, messages: false });
        assert_eq!(mode("messages"), Filter { base: Base::Nothing, messages: true });
        assert_eq!(mode("updates,messages"), Filter { base: Base::Updates, messages: true });
        for bad in ["values,updates", "debug,values", "values,messages", "bogus", ""] {
            let error = parse_modes(&query(&[("streamMode", bad)])).unwrap_err();
            assert_eq!(error.code, "unsupported_stream_mode", "{bad}");
            assert_eq!(error.details.unwrap()["supported"], json!(["values", "updates", "debug", "messages"]));
        }
    }

    #[test]
    fn messages_projects_chunks_and_frames_nothing_else() {
        let messages = Filter { base: Base::Nothing, messages: true };
        assert!(messages.projects("output.chunk") && !messages.admits("output.chunk"));
        assert!(!messages.admits("node.completed") && !messages.admits("run.completed"));
        let debug = Filter { base: Base::Debug, messages: true };
        assert!(debug.projects("output.chunk") && !debug.admits("output.chunk") && debug.admits("node.started"));
        assert!(!Filter::UPDATES.projects("output.chunk") && !Filter::UPDATES.admits("output.chunk"));
    }

    #[test]
    fn buffer_is_bounded() {
        assert_eq!(check_buffer(&query(&[("bufferMs", "0")])).unwrap(), None);
        assert_eq!(check_buffer(&query(&[("bufferMs", "5000")])).unwrap(), Some(Duration::from_secs(5)));
        for bad in ["5001", "-1", "1.5", "x"] {
            assert_eq!(check_buffer(&query(&[("bufferMs", bad)])).unwrap_err().code, "validation_error", "{bad}");
        }
    }

    #[test]
    fn updates_leave_out_node_started_and_vendor_events() {
        let debug = Filter { base: Base::Debug, messages: false };
        let values = Filter { base: Base::Values, messages: false };
        assert!(Filter::UPDATES.admits("node.completed"));
        assert!(Filter::UPDATES.admits("run.completed"));
        assert!(!Filter::UPDATES.admits("node.started"));
        assert!(!Filter::UPDATES.admits("trellis.worker.retry"));
        assert!(debug.admits("node.started"));
        assert!(values.admits("node.started"));
        assert!(values.admits("run.completed"));
        assert!(!values.admits("trellis.worker.retry"));
    }
}
