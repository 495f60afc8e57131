//! `GET /v1/runs` (a host extension; v1 has no run list): the caller's runs, newest first,
//! filtered by `workflowId` and `status`, paged with an opaque cursor. The cursor is signed
//! (HMAC-SHA256 with the host's secret) and bound to the caller's tenant and filter; a
//! cursor that was altered, or replayed with another filter or by another tenant, is refused.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::Sha256;
use trellis_core::ports::{RunFilter, RunPosition};
use trellis_core::RunStatus;

use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::render::{snapshot_for, Wire};
use crate::AppState;

/// Page size when `limit` is absent, and the largest allowed.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

#[derive(Serialize, Deserialize, PartialEq)]
struct Cursor {
    tenant: String,
    filter: RunFilter,
    after: RunPosition,
}

fn mac(key: &[u8], payload: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(payload);
    mac
}

fn encode(key: &[u8], cursor: &Cursor) -> String {
    let payload = serde_json::to_vec(cursor).expect("cursor serializes");
    let tag = mac(key, &payload).finalize().into_bytes();
    format!("{}.{}", hex::encode(&payload), hex::encode(tag))
}

fn invalid_cursor() -> ApiError {
    ApiError::validation("the cursor is invalid for this listing").with_details(json!({ "parameter": "cursor" }))
}

fn decode(key: &[u8], text: &str, tenant: &str, filter: &RunFilter) -> Result<RunPosition, ApiError> {
    let (payload, tag) = text.split_once('.').ok_or_else(invalid_cursor)?;
    let payload = hex::decode(payload).map_err(|_| invalid_cursor())?;
    let tag = hex::decode(tag).map_err(|_| invalid_cursor())?;
    mac(key, &payload).verify_slice(&tag).map_err(|_| invalid_cursor())?;
    let cursor: Cursor = serde_json::from_slice(&payload).map_err(|_| invalid_cursor())?;
    if cursor.tenant != tenant || cursor.filter != *filter {
        return Err(invalid_cursor());
    }
    Ok(cursor.after)
}

fn parse_status(raw: &str) -> Result<RunStatus, ApiError> {
    serde_json::from_value(json!(raw))
        .map_err(|_| ApiError::validation("status is not a run status").with_details(json!({ "parameter": "status" })))
}

/// `GET /v1/runs?workflowId=&status=&limit=&cursor=`.
pub(crate) async fn list(
    caller: Caller,
    state: State<AppState>,
    query: Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    list_for(Wire::V1, caller, state, query).await
}

/// The listing, rendered for `wire` (`GET /runs` on v2).
pub(crate) async fn list_for(
    wire: Wire,
    caller: Caller,
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    let filter = RunFilter {
        workflow_id: query.get("workflowId").cloned(),
        status: query.get("status").map(|raw| parse_status(raw)).transpose()?,
    };
    let limit = match query.get("limit").map(|raw| raw.parse::<usize>()) {
        None => DEFAULT_LIMIT,
        Some(Ok(limit)) if (1..=MAX_LIMIT).contains(&limit) => limit,
        Some(_) => {
            return Err(ApiError::validation(format!("limit must be from 1 to {MAX_LIMIT}"))
                .with_details(json!({ "parameter": "limit" })))
        }
    };
    let after =
        query.get("cursor").map(|text| decode(&state.cursor_key[..], text, caller.tenant(), &filter)).transpose()?;
    let mut runs = state.services.list_runs(caller.tenant(), &filter, after.as_ref(), limit + 1).await?;
    let more = runs.len() > limit;
    runs.truncate(limit);
    let next = runs.last().filter(|_| more).map(|run| {
        let after = RunPosition { created_at: run.created_at, run_id: run.run_id.clone() };
        encode(&state.cursor_key[..], &Cursor { tenant: caller.tenant().to_owned(), filter: filter.clone(), after })
    });
    let mut body = json!({ "runs": runs.iter().map(|run| snapshot_for(wire, run)).collect::<Vec<_>>() });
    if let Some(next) = next {
        body["nextCursor"] = json!(next);
    }
    Ok(Json(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_bound_to_key_tenant_and_filter() {
        let filter = RunFilter::default();
        let cursor = Cursor {
            tenant: "a".into(),
            filter: filter.clone(),
            after: RunPosition { created_at: 5, run_id: "run-1".into() },
        };
        let text = encode(b"secret", &cursor);
        assert_eq!(decode(b"secret", &text, "a", &filter).unwrap(), cursor.after);
        assert!(decode(b"other", &text, "a", &filter).is_err());
        assert!(decode(b"secret", &text, "b", &filter).is_err());
        let narrowed = RunFilter { workflow_id: Some("w".into()), ..RunFilter::default() };
        assert!(decode(b"secret", &text, "a", &narrowed).is_err());
        let mut tampered = text;
        tampered.replace_range(0..2, "00");
        assert!(decode(b"secret", &tampered, "a", &filter).is_err());
    }
}
