//! Deleting runs (host extensions; see `trellis_core::retention`):
//! `DELETE /v1/runs/{runId}[?force=true]` and `POST /v1/runs:prune`, scope `runs:delete`.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde_json::{json, Value};
use trellis_core::service::PruneRequest;

use super::json_body;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::AppState;

/// `DELETE /v1/runs/{runId}`: `200 {runId, deleted: [ids], bytes}`; `409 run_state_conflict`
/// for a run that has not ended (unless `force=true`) or a child of a live parent.
pub(crate) async fn delete(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsDelete)?;
    let force = match query.get("force").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(
                ApiError::validation("force must be true or false").with_details(json!({ "parameter": "force" }))
            )
        }
    };
    Ok(Json(state.services.delete_run(caller.tenant(), &run_id, force).await?))
}

/// `POST /v1/runs:prune` with `{olderThanDays?, status?, workflowId?, keep?, dryRun?}`.
pub(crate) async fn prune(caller: Caller, State(state): State<AppState>, body: Bytes) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsDelete)?;
    let body = json_body(&body)?.unwrap_or(Value::Null);
    let request = PruneRequest::parse(&body)?;
    Ok(Json(state.services.prune_runs(caller.tenant(), &request).await?))
}
