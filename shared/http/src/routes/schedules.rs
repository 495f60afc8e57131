//! Schedules (declared in definitions' `triggers[]`, see `trellis_core::schedule`):
//! `GET /v1/schedules` (the caller's tenant's), `GET /v1/schedules/{workflowId}/{triggerId}`,
//! and `POST /v1/schedules/{workflowId}/{triggerId}:pause` / `…:resume` (`integrations:write`).
//! A paused schedule skips its occurrences; resumed, it goes on from the next one after now.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::AppState;

/// `GET /v1/schedules`.
pub(crate) async fn list(caller: Caller, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    let schedules = state.services.list_schedules(caller.tenant()).await?;
    Ok(Json(json!({ "schedules": schedules.iter().map(|s| s.view()).collect::<Vec<_>>() })))
}

/// `GET /v1/schedules/{workflowId}/{triggerId}`.
pub(crate) async fn get(
    caller: Caller,
    State(state): State<AppState>,
    Path((workflow_id, trigger_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    let (_, schedule) = state.services.get_schedule(caller.tenant(), &format!("{workflow_id}/{trigger_id}")).await?;
    Ok(Json(schedule.view()))
}

/// `POST /v1/schedules/{workflowId}/{triggerId}:pause` and `…:resume`.
pub(crate) async fn custom_method(
    caller: Caller,
    State(state): State<AppState>,
    Path((workflow_id, raw)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::IntegrationsWrite)?;
    let (trigger_id, paused) = match raw.rsplit_once(':') {
        Some((id, "pause")) => (id, true),
        Some((id, "resume")) => (id, false),
        _ => return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")),
    };
    let id = format!("{workflow_id}/{trigger_id}");
    Ok(Json(state.services.set_schedule_paused(caller.tenant(), &id, paused).await?.view()))
}
