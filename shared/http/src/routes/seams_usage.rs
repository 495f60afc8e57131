//! `POST /v1/host/sample/test/emit-provider-usage` (RFC 0026 §B), a test seam like the others
//! in [`super::seams`]: only with `OPENWOP_TEST_SEAM_ENABLED` and a `test:seams` key.
//!
//! Body `{runId, payload, correlationId?, nodeId?}`: `payload` is the closed `providerUsage`
//! shape; `correlationId` an event id of the run, which becomes the event's `causationId`.
//! `200 {runId, eventId, sequence}` — exactly one `provider.usage` appended to the caller's
//! live run and rolled into its cost; `400 validation_error` for a payload outside the schema
//! (a fractional token count, an extra field such as `credentialRef`); `400
//! provider_usage_credential_leak` when any string looks like a secret reference
//! (`secret:…`), checked before the run is read; `404` for another tenant's or an unknown
//! run; `409 run_state_conflict` for a run that has ended.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::json_body;
use super::seams::gate;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::AppState;

/// `POST /v1/host/sample/test/emit-provider-usage`.
pub(crate) async fn emit_provider_usage(
    caller: Caller,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    gate(&caller, &state)?;
    let body = json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let (run_id, sequence) = state.services.emit_provider_usage(caller.tenant(), &body).await?;
    Ok(Json(json!({ "runId": run_id, "eventId": format!("{run_id}:{sequence}"), "sequence": sequence })))
}
