//! `GET /v1/runs/{runId}/events`: Server-Sent Events. The backlog after `Last-Event-ID`,
//! then live events as they are committed (woken by the commit notifier, not by polling the
//! store on a timer), a `:keepalive` comment on quiet streams, and the server closes the
//! stream right after the terminal event.
//!
//! Modes served: `updates` (default) and `debug`. `values` and `messages` are refused with
//! `unsupported_stream_mode`. `bufferMs` (0..=5000) is validated and accepted; frames are
//! always sent unbuffered, which the protocol allows.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream;
use serde_json::{json, Value};
use trellis_core::event::types;
use trellis_core::RunEvent;

use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::render::{event_doc_for, wire_run_id, Wire};
use crate::AppState;

/// The stream modes this host serves.
pub(crate) const SERVED_MODES: [&str; 2] = ["updates", "debug"];
/// Events read from the store per round.
const PAGE: usize = 500;

/// Which events a stream carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    Updates,
    Debug,
}

impl Filter {
    fn admits(self, event_type: &str) -> bool {
        match self {
            Self::Debug => true,
            Self::Updates => {
                let excluded = matches!(
                    event_type,
                    "node.started"
                        | "node.retried"
                        | "variable.changed"
                        | "version.pinned"
                        | "log.appended"
                        | "output.chunk"
                        | "ai.message.chunk"
                ) || event_type.starts_with("lease.")
                    || event_type.starts_with("trellis.");
                !excluded
            }
        }
    }
}

fn parse_modes(query: &HashMap<String, String>) -> Result<Filter, ApiError> {
    let Some(raw) = query.get("streamMode") else { return Ok(Filter::Updates) };
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
    Ok(if modes.contains(&"debug") { Filter::Debug } else { Filter::Updates })
}

fn check_buffer(query: &HashMap<String, String>) -> Result<(), ApiError> {
    match query.get("bufferMs").map(|raw| raw.trim().parse::<u32>()) {
        None | Some(Ok(0..=5000)) => Ok(()),
        Some(_) => Err(ApiError::validation("bufferMs must be an integer from 0 to 5000")
            .with_details(json!({ "parameter": "bufferMs", "minimum": 0, "maximum": 5000 }))),
    }
}

fn wants_json(headers: &HeaderMap) -> bool {
    let accept = headers.get(header::ACCEPT).and_then(|value| value.to_str().ok()).unwrap_or("");
    accept.contains("application/json") && !accept.contains("text/event-stream")
}

fn frame(wire: Wire, tenant: &str, run_id: &str, event: &RunEvent) -> Bytes {
    let data = event_doc_for(wire, tenant, run_id, event).to_string();
    Bytes::from(format!("id: {}\nevent: {}\ndata: {data}\n\n", event.sequence, event.event_type))
}

/// The stream's state between frames.
struct Stream {
    state: AppState,
    wire: Wire,
    tenant: String,
    run_id: String,
    filter: Filter,
    cursor: Option<u64>,
    keepalive: Duration,
    ends_at: Option<Instant>,
    done: bool,
}

impl Stream {
    /// The next chunk of bytes: frames for new events, a keep-alive, or `None` to close.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done || self.ends_at.is_some_and(|end| Instant::now() >= end) {
            return None;
        }
        let notifier = self.state.services.notifier.clone();
        let quiet_since = Instant::now();
        loop {
            let seen = notifier.generation();
            let read = self.state.services.events(&self.tenant, &self.run_id, self.cursor, PAGE).await;
            let Ok((run, events)) = read else { return None };
            if let Some(last) = events.last() {
                self.cursor = Some(last.sequence);
                let mut chunk = Vec::new();
                for event in &events {
                    if self.filter.admits(&event.event_type) {
                        chunk.extend_from_slice(&frame(self.wire, &self.tenant, &self.run_id, event));
                    }
                    if types::is_terminal(&event.event_type) {
                        self.done = true;
                    }
                }
                if !chunk.is_empty() || self.done {
                    return Some(Bytes::from(chunk));
                }
                continue;
            }
            if run.status.is_terminal() {
                // Resumed past the terminal event: nothing more will come.
                return None;
            }
            let elapsed = quiet_since.elapsed();
            if elapsed >= self.keepalive {
                return Some(Bytes::from_static(b":keepalive\n\n"));
            }
            let mut wait = self.keepalive - elapsed;
            if let Some(end) = self.ends_at {
                wait = wait.min(end.saturating_duration_since(Instant::now()));
                if wait.is_zero() {
                    return None;
                }
            }
            notifier.wait(seen, wait).await;
        }
    }
}

/// `GET /v1/runs/{runId}/events`.
pub(crate) async fn events(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsRead)?;
    open(Wire::V1, state, caller.tenant(), &run_id, &query, &headers).await
}

/// Opens the event stream of `run_id` (internal id) for `wire`.
pub(crate) async fn open(
    wire: Wire,
    state: AppState,
    tenant: &str,
    run_id: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let run = state.services.get_run(tenant, run_id).await?;
    let filter = parse_modes(query)?;
    check_buffer(query)?;
    let resume_after = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if wants_json(headers) {
        let (run, events) = state.services.events(tenant, run_id, resume_after, 10_000).await?;
        let docs: Vec<Value> = events
            .iter()
            .filter(|event| filter.admits(&event.event_type))
            .map(|event| event_doc_for(wire, tenant, &run.run_id, event))
            .collect();
        let terminal = run.status.is_terminal();
        let last = events.last().map(|e| e.sequence as i64).unwrap_or(resume_after.map_or(-1, |s| s as i64));
        let body = match wire {
            Wire::V1 => json!({
                "runId": run.run_id,
                "events": docs,
                "lastEventSeq": last,
                "runStatus": run.status.as_str(),
                "isTerminal": terminal,
                "isComplete": terminal,
            }),
            Wire::V2 => json!({
                "runId": wire_run_id(wire, tenant, &run.run_id),
                "events": docs,
                "lastSequence": last,
                "status": run.status.as_str(),
                "isTerminal": terminal,
            }),
        };
        let mut response = Json(body).into_response();
        response.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
        return Ok(response);
    }
    let settings = state.streams;
    let stream = Stream {
        state,
        wire,
        tenant: tenant.to_owned(),
        run_id: run.run_id,
        filter,
        cursor: resume_after,
        keepalive: settings.keepalive,
        ends_at: settings.max_duration.map(|max| Instant::now() + max),
        done: false,
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
        assert_eq!(parse_modes(&query(&[])).unwrap(), Filter::Updates);
        assert_eq!(parse_modes(&query(&[("streamMode", "updates,debug")])).unwrap(), Filter::Debug);
        for bad in ["values", "values,updates", "messages", "bogus", ""] {
            let error = parse_modes(&query(&[("streamMode", bad)])).unwrap_err();
            assert_eq!(error.code, "unsupported_stream_mode", "{bad}");
            assert_eq!(error.details.unwrap()["supported"], json!(["updates", "debug"]));
        }
    }

    #[test]
    fn buffer_is_bounded() {
        assert!(check_buffer(&query(&[("bufferMs", "0")])).is_ok());
        assert!(check_buffer(&query(&[("bufferMs", "5000")])).is_ok());
        for bad in ["5001", "-1", "1.5", "x"] {
            assert_eq!(check_buffer(&query(&[("bufferMs", bad)])).unwrap_err().code, "validation_error", "{bad}");
        }
    }

    #[test]
    fn updates_leave_out_node_started_and_vendor_events() {
        assert!(Filter::Updates.admits("node.completed"));
        assert!(Filter::Updates.admits("run.completed"));
        assert!(!Filter::Updates.admits("node.started"));
        assert!(!Filter::Updates.admits("trellis.worker.retry"));
        assert!(Filter::Debug.admits("node.started"));
    }
}
