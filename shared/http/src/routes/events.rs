//! `GET /v1/runs/{runId}/events/poll`: events after a cursor, with a bounded long-poll.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::Json;
use serde_json::{json, Value};
use trellis_core::event::types;
use trellis_core::{RunEvent, RunState};

use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::render::event_doc;
use crate::AppState;

/// The longest a poll waits for a new event, whatever `timeout` asks for.
pub(crate) const MAX_LONG_POLL: Duration = Duration::from_secs(25);
/// Events returned per poll at most.
const PAGE: usize = 1000;

fn cursor(query: &HashMap<String, String>) -> Result<Option<u64>, ApiError> {
    let Some(raw) = query.get("lastSequence").or_else(|| query.get("since")) else { return Ok(None) };
    match raw.trim().parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(value) if value >= 0 => Ok(Some(value as u64)),
        _ => Err(ApiError::validation("lastSequence must be an integer of -1 or more")
            .with_details(json!({ "parameter": "lastSequence" }))),
    }
}

pub(crate) fn wait_budget(query: &HashMap<String, String>) -> Result<Duration, ApiError> {
    match query.get("timeout") {
        None => Ok(MAX_LONG_POLL),
        Some(raw) => match raw.trim().parse::<u64>() {
            Ok(seconds) if seconds <= 60 => Ok(Duration::from_secs(seconds).min(MAX_LONG_POLL)),
            _ => Err(ApiError::validation("timeout must be a whole number of seconds from 0 to 60")
                .with_details(json!({ "parameter": "timeout" }))),
        },
    }
}

/// The events after `after`. With none yet on a live run, waits (without polling the store)
/// for the next commit, up to `budget`.
pub(crate) async fn collect(
    state: &AppState,
    tenant: &str,
    run_id: &str,
    after: Option<u64>,
    budget: Duration,
) -> Result<(RunState, Vec<RunEvent>), ApiError> {
    let deadline = Instant::now() + budget;
    let services = &state.services;
    loop {
        let seen = services.notifier.generation();
        let (run, events) = services.events(tenant, run_id, after, PAGE).await?;
        let now = Instant::now();
        if !events.is_empty() || run.status.is_terminal() || now >= deadline {
            return Ok((run, events));
        }
        services.notifier.wait(seen, deadline - now).await;
    }
}

/// Returns the events after the cursor (v1 shape).
pub(crate) async fn poll(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    let after = cursor(&query)?;
    let (run, events) = collect(&state, caller.tenant(), &run_id, after, wait_budget(&query)?).await?;
    let terminal = run.status.is_terminal();
    let last = events.last().map(|event| event.sequence as i64).unwrap_or(after.map_or(-1, |s| s as i64));
    let drained = events.last().is_none_or(|event| types::is_terminal(&event.event_type));
    let docs: Vec<Value> = events.iter().map(|event| event_doc(&run.run_id, event)).collect();
    Ok(Json(json!({
        "runId": run.run_id,
        "events": docs,
        "lastEventSeq": last,
        "runStatus": run.status.as_str(),
        "isTerminal": terminal,
        "isComplete": terminal && drained,
    })))
}
