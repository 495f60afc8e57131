//! `GET /v1/runs` (a host extension; v1 has no run list): the caller's runs, newest first,
//! filtered by `workflowId` and `status`, paged with an opaque cursor. The cursor is signed
//! (HMAC-SHA256 with the host's secret) and bound to the caller's tenant and filter; a
//! cursor that was altered, or replayed with another filter or by another tenant, is refused
//! (the cursor mechanism lives in [`super::cursor`]).

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use trellis_core::ports::{RunFilter, RunPosition};
use trellis_core::RunStatus;

use super::cursor;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::links::BasePath;
use crate::render::{snapshot_for, Wire};
use crate::AppState;

/// The listing name a run-list cursor is bound to.
const LISTING: &str = "runs";

/// Where a run-list page ends, under which filter.
#[derive(Serialize, Deserialize, PartialEq)]
struct Position {
    filter: RunFilter,
    after: RunPosition,
}

fn decode(key: &[u8], text: &str, tenant: &str, filter: &RunFilter) -> Result<RunPosition, ApiError> {
    let position: Position = cursor::decode(key, LISTING, tenant, text)?;
    if position.filter != *filter {
        return Err(ApiError::validation("the cursor is invalid for this listing")
            .with_details(json!({ "parameter": "cursor" })));
    }
    Ok(position.after)
}

fn parse_status(raw: &str) -> Result<RunStatus, ApiError> {
    serde_json::from_value(json!(raw))
        .map_err(|_| ApiError::validation("status is not a run status").with_details(json!({ "parameter": "status" })))
}

/// `GET /v1/runs?workflowId=&status=&limit=&cursor=`.
pub(crate) async fn list(
    caller: Caller,
    state: State<AppState>,
    base: BasePath,
    query: Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    list_for(Wire::V1, caller, state, base, query).await
}

/// The listing, rendered for `wire` (`GET /runs` on v2).
pub(crate) async fn list_for(
    wire: Wire,
    caller: Caller,
    State(state): State<AppState>,
    base: BasePath,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    let filter = RunFilter {
        workflow_id: query.get("workflowId").cloned(),
        status: query.get("status").map(|raw| parse_status(raw)).transpose()?,
    };
    let limit = cursor::page_limit(&query)?;
    let after =
        query.get("cursor").map(|text| decode(&state.cursor_key[..], text, caller.tenant(), &filter)).transpose()?;
    let mut runs = state.services.list_runs(caller.tenant(), &filter, after.as_ref(), limit + 1).await?;
    let more = runs.len() > limit;
    runs.truncate(limit);
    let next = runs.last().filter(|_| more).map(|run| {
        let after = RunPosition { created_at: run.created_at, run_id: run.run_id.clone() };
        cursor::encode(&state.cursor_key[..], LISTING, caller.tenant(), Position { filter: filter.clone(), after })
    });
    let mut body = json!({ "runs": runs.iter().map(|run| snapshot_for(wire, &base, run)).collect::<Vec<_>>() });
    if let Some(next) = next {
        body["nextCursor"] = json!(next);
    }
    Ok(Json(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_cursors_are_bound_to_their_filter() {
        let filter = RunFilter::default();
        let after = RunPosition { created_at: 5, run_id: "run-1".into() };
        let text = cursor::encode(b"secret", LISTING, "a", Position { filter: filter.clone(), after: after.clone() });
        assert_eq!(decode(b"secret", &text, "a", &filter).unwrap(), after);
        assert!(decode(b"secret", &text, "b", &filter).is_err());
        let narrowed = RunFilter { workflow_id: Some("w".into()), ..RunFilter::default() };
        assert!(decode(b"secret", &text, "a", &narrowed).is_err());
    }
}
