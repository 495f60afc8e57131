//! `GET /v1/runs/{runId}/events/poll`: events after a cursor, with a bounded long-poll.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde_json::json;
use trellis_core::event::types;
use trellis_core::ports::StoredEvent;
use trellis_core::RunState;

use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::event_json::{page_response, run_events, EventDocs, V1Page};
use crate::render::Wire;
use crate::AppState;

/// The longest a poll waits for a new event, whatever `timeout` asks for.
pub(crate) const MAX_LONG_POLL: Duration = Duration::from_secs(25);
/// Events returned per poll at most.
const PAGE: usize = 1000;

/// The highest sequence a run can have (the stores keep sequences as signed 64-bit integers).
const LAST_POSSIBLE_SEQUENCE: u64 = i64::MAX as u64;

/// A sequence cursor from the wire (`lastSequence`, `afterSequence`, `Last-Event-ID`): `-1`
/// is the start (`None`), any integer of 0 or more means "after that sequence". An integer
/// past the last possible sequence is past the end — nothing is after it — never a
/// wrap-around to the start. Anything else (not an integer, below -1) is refused.
pub(crate) fn parse_sequence(raw: &str) -> Option<Option<u64>> {
    let raw = raw.trim();
    if raw == "-1" {
        return Some(None);
    }
    let digits = raw.strip_prefix('+').unwrap_or(raw);
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let value = digits.parse::<u64>().unwrap_or(LAST_POSSIBLE_SEQUENCE);
    Some(Some(value.min(LAST_POSSIBLE_SEQUENCE)))
}

/// A query cursor named `parameter`, absent meaning the start.
pub(crate) fn query_sequence(raw: Option<&String>, parameter: &str) -> Result<Option<u64>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    parse_sequence(raw).ok_or_else(|| {
        ApiError::validation(format!("{parameter} must be an integer of -1 or more"))
            .with_details(json!({ "parameter": parameter }))
    })
}

fn cursor(query: &HashMap<String, String>) -> Result<Option<u64>, ApiError> {
    query_sequence(query.get("lastSequence").or_else(|| query.get("since")), "lastSequence")
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
/// for the next commit to this run, up to `budget`.
pub(crate) async fn collect(
    state: &AppState,
    tenant: &str,
    run_id: &str,
    after: Option<u64>,
    budget: Duration,
) -> Result<(RunState, Vec<StoredEvent>), ApiError> {
    let deadline = Instant::now() + budget;
    let services = &state.services;
    loop {
        let seen = services.notifier.run_generation(run_id);
        let (run, events) = run_events(state, tenant, run_id, after, PAGE).await?;
        let now = Instant::now();
        if !events.is_empty() || run.status.is_terminal() || now >= deadline {
            return Ok((run, events));
        }
        services.notifier.wait_run(run_id, seen, deadline - now).await;
    }
}

/// Returns the events after the cursor (v1 shape).
pub(crate) async fn poll(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsRead)?;
    let after = cursor(&query)?;
    let (run, events) = collect(&state, caller.tenant(), &run_id, after, wait_budget(&query)?).await?;
    let terminal = run.status.is_terminal();
    let last = events.last().map(|event| event.sequence as i64).unwrap_or(after.map_or(-1, |s| s as i64));
    let drained = events.last().is_none_or(|event| types::is_terminal(&event.event_type));
    let page = V1Page {
        events: EventDocs::new(Wire::V1, &run.run_id, &events),
        is_complete: terminal && drained,
        is_terminal: terminal,
        last_event_seq: last,
        run_id: &run.run_id,
        run_status: run.status.as_str(),
    };
    page_response(&page, &page.events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_past_the_range_are_past_the_end() {
        assert_eq!(parse_sequence("-1"), Some(None));
        assert_eq!(parse_sequence("7"), Some(Some(7)));
        assert_eq!(parse_sequence("9223372036854775808"), Some(Some(LAST_POSSIBLE_SEQUENCE)));
        assert_eq!(parse_sequence("99999999999999999999999"), Some(Some(LAST_POSSIBLE_SEQUENCE)));
        for bad in ["", "-2", "1.5", "abc", "0x1", "- 1"] {
            assert_eq!(parse_sequence(bad), None, "{bad}");
        }
    }
}
