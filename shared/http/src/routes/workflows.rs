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

/// `POST /v1/workflows` (a host extension): registers a definition version for the caller's
/// tenant. `201` for a new version, `200` when the same document is registered again,
/// `409 version_conflict` for other content under an existing version, `422
/// capability_required` when this host cannot run it, `400 validation_error` for a
/// definition that breaks the schema or the graph rules.
pub(crate) async fn register(
    caller: Caller,
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    caller.require(Scope::WorkflowsWrite)?;
    let document = super::json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let (workflow, created) = state.services.register_workflow(caller.tenant(), document).await?;
    let status = if created { axum::http::StatusCode::CREATED } else { axum::http::StatusCode::OK };
    let body = serde_json::json!({
        "workflowId": workflow.id(),
        "version": workflow.definition.version,
        "contentHash": workflow.content_hash,
    });
    Ok((status, Json(body)).into_response())
}
