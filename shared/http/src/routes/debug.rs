//! `GET /v1/runs/{runId}/debug-bundle`: a portable diagnostic export of one run — its
//! snapshot with inputs, variables and outputs omitted, its events without payloads, and counts.
//! Served with `Cache-Control: no-store`.

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use trellis_core::timefmt::rfc3339;
use trellis_core::ServiceError;

use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::render::snapshot;
use crate::AppState;

/// Most events a bundle carries; a longer log is truncated (and says so).
const MAX_EVENTS: usize = 10_000;

/// The bundle.
pub(crate) async fn bundle(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsRead)?;
    // The whole run (its node count is reported), read before its events.
    let run = state.services.get_run(caller.tenant(), &run_id).await?;
    let mut events =
        state.services.store.events_after(&run_id, None, MAX_EVENTS + 1).await.map_err(ServiceError::from)?;
    let truncated = events.len() > MAX_EVENTS;
    events.truncate(MAX_EVENTS);
    let mut run_doc = snapshot(&run);
    run_doc["inputs"] = json!({});
    run_doc["variables"] = json!({});
    // Run outputs and a pending interrupt's data carry payloads too.
    if let Some(fields) = run_doc.as_object_mut() {
        fields.remove("outputs");
        fields.remove("interrupt");
    }
    if let Some(error) = run_doc.get_mut("error").and_then(Value::as_object_mut) {
        error.remove("details");
    }
    let node_count = run.nodes.keys().filter(|key| !trellis_core::engine::is_fan_out_record(key)).count();
    let event_docs: Vec<Value> = events
        .iter()
        .map(|event| {
            let mut doc =
                json!({ "sequence": event.sequence, "type": event.event_type, "timestamp": rfc3339(event.timestamp) });
            if let Some(node_id) = &event.node_id {
                doc["nodeId"] = json!(node_id);
            }
            doc
        })
        .collect();
    let mut body = json!({
        "bundleVersion": "1.0",
        "generatedAt": rfc3339(state.services.clock.now()),
        "host": { "name": "trellis", "version": env!("CARGO_PKG_VERSION"), "vendor": "trellis" },
        "run": run_doc,
        "events": event_docs,
        "spans": [],
        "metrics": { "nodeCount": node_count, "eventCount": event_docs.len(), "nodeExecutions": run.node_executions },
        "redactionApplied": true,
        "redactionMode": "omit",
    });
    if truncated {
        body["truncated"] = json!(true);
        body["truncatedReason"] = json!("events_truncated_to_size_cap");
        body["truncatedOriginalCount"] = json!(run.next_sequence);
    }
    let mut response = Json(body).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
