//! `GET /v1/workflows/{workflowId}`: the stored definition, verbatim.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::Value;

use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::AppState;

/// The latest definition visible to the caller's tenant.
pub(crate) async fn get_workflow(
    caller: Caller,
    State(state): State<AppState>,
    Path(workflow_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::ManifestRead)?;
    let (_, workflow) = state.services.find_workflow(caller.tenant(), &workflow_id).await?;
    Ok(Json(workflow.document.clone()))
}
