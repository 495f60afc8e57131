//! The conformance test seams, served only when the host runs with
//! `OPENWOP_TEST_SEAM_ENABLED` and only to a key with the `test:seams` scope (never granted by
//! `*`). Elsewhere these paths are unknown routes (`404`).
//!
//! - `POST /v1/host/sample/test/capability-toggle` `{name, value: bool|null}` or `{reset: true}`
//!   → `200 {overlay}`: switches `agents.dispatchMapping`, `subWorkflow.inputMapping` or
//!   `dispatch.perItemInput` off (or on) for discovery, registration and new runs; kept in the
//!   store, so every process agrees;
//! - `POST /v1/host/sample/workflows` `{workflowId, nodes: [{nodeId, typeId, config}], …}` →
//!   `201` (registration in the caller's tenant, test-harness spelling accepted);
//! - `POST /v1/host/sample/test/runs/{runId}/variables` `{variables: {…}}` → `200` with the
//!   run's variables (a `variable.changed` event each).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::json_body;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::AppState;

/// The seam's gate: enabled on this host, and the key names the test scope.
fn gate(caller: &Caller, state: &AppState) -> Result<(), ApiError> {
    if !state.services.test_seams {
        return Err(ApiError::not_found("route"));
    }
    caller.require(Scope::TestSeams)
}

fn object_body(body: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    match json_body(body)? {
        Some(Value::Object(fields)) => Ok(fields),
        _ => Err(ApiError::validation("the body must be a JSON object")),
    }
}

/// `POST /v1/host/sample/test/capability-toggle`.
pub(crate) async fn capability_toggle(
    caller: Caller,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    gate(&caller, &state)?;
    let fields = object_body(&body)?;
    let reset = fields.get("reset") == Some(&Value::Bool(true));
    let name = fields.get("name").and_then(Value::as_str);
    if !reset && name.is_none() {
        return Err(ApiError::validation("the body is `{name, value}` or `{reset: true}`"));
    }
    let value = match fields.get("value") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(on)) => Some(*on),
        Some(_) => return Err(ApiError::validation("`value` is true, false or null")),
    };
    let overlay = state.services.toggle_capability(name, value, reset).await?;
    Ok(Json(json!({ "overlay": overlay })))
}

/// `POST /v1/host/sample/workflows`.
pub(crate) async fn register_workflow(
    caller: Caller,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    gate(&caller, &state)?;
    let document = json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let document = trellis_core::model::chain_in_array_order(document);
    let (workflow, _) = state.services.register_workflow(caller.tenant(), document).await?;
    let body = json!({ "workflowId": workflow.id(), "version": workflow.definition.version, "contentHash": workflow.content_hash });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `POST /v1/host/sample/test/runs/{runId}/variables`.
pub(crate) async fn set_variables(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    gate(&caller, &state)?;
    let mut fields = object_body(&body)?;
    let Some(Value::Object(variables)) = fields.remove("variables") else {
        return Err(ApiError::validation("the body is `{variables: {name: value, …}}`"));
    };
    let run = state.services.set_run_variables(caller.tenant(), &run_id, variables).await?;
    Ok(Json(json!({ "runId": run.run_id, "variables": run.variables })))
}
