//! `GET /v1/workflows/{workflowId}`: the stored definition, verbatim. `GET /v1/workflows`
//! (a host extension): the definitions the caller's tenant can start, by id, paged like
//! `GET /v1/runs`. `POST /v1/workflows`: registration; `POST /v1/workflows:validate`: its dry run.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use serde_json::{json, Value};

use super::cursor;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::AppState;

/// The listing name a workflow-list cursor is bound to.
const LISTING: &str = "workflows";

/// `GET /v1/workflows?limit=&cursor=`: `{workflows: [{workflowId, version, name, namespace:
/// "tenant"|"global", runnable, requiredCapability?}], nextCursor?}`, by id. The caller's own
/// registrations and the global namespace (bundled fixtures, `OPENWOP_FIXTURES_DIR`,
/// `--workflows`); an id in both is the caller's own, as `GET /v1/workflows/{id}` resolves it.
pub(crate) async fn list(
    caller: Caller,
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::ManifestRead)?;
    let limit = cursor::page_limit(&query)?;
    let after: Option<String> = query
        .get("cursor")
        .map(|text| cursor::decode(&state.cursor_key[..], LISTING, caller.tenant(), text))
        .transpose()?;
    let mut listed = state.services.list_workflows(caller.tenant(), after.as_deref(), limit + 1).await?;
    let more = listed.len() > limit;
    listed.truncate(limit);
    let workflows: Vec<Value> = listed
        .iter()
        .map(|entry| {
            let workflow = &entry.workflow;
            let mut item = json!({
                "workflowId": workflow.id(),
                "version": workflow.definition.version,
                "name": workflow.definition.name,
                "namespace": if entry.global { "global" } else { "tenant" },
                "runnable": workflow.gap.is_none(),
            });
            if let Some(gap) = &workflow.gap {
                item["requiredCapability"] = json!(gap.required_capability);
            }
            item
        })
        .collect();
    let mut body = json!({ "workflows": workflows });
    if let Some(last) = listed.last().filter(|_| more) {
        body["nextCursor"] = json!(cursor::encode(&state.cursor_key[..], LISTING, caller.tenant(), last.workflow.id()));
    }
    Ok(Json(body))
}

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
/// definition that breaks the schema or the graph rules (a conformance-only node kind, such
/// as `core.conformance.mock-agent`, is refused with `details.rule: typeId_refused` unless the
/// key holds `test:seams` on a host with its seams on).
pub(crate) async fn register(
    caller: Caller,
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    caller.require(Scope::WorkflowsWrite)?;
    let document = super::json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let (workflow, created) = state.services.register_workflow_as(&caller.principal, document).await?;
    let status = if created { axum::http::StatusCode::CREATED } else { axum::http::StatusCode::OK };
    let body = serde_json::json!({
        "workflowId": workflow.id(),
        "version": workflow.definition.version,
        "contentHash": workflow.content_hash,
    });
    Ok((status, Json(body)).into_response())
}

/// `POST /v1/workflows:validate` (a host extension): a dry run of registration. The body is a
/// definition exactly as `POST /v1/workflows` takes it; a definition registration would
/// accept answers `200 {valid: true, workflowId, version, nodes}` and nothing is stored; any
/// other answers the very error registration would (`400 validation_error`, `409
/// version_conflict`, `422 capability_required`, with their details). Same scope as
/// registration; never kept by the idempotency layer.
pub(crate) async fn validate(
    caller: Caller,
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::WorkflowsWrite)?;
    let document = super::json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let workflow = state.services.validate_workflow_as(&caller.principal, document).await?;
    Ok(Json(json!({
        "valid": true,
        "workflowId": workflow.id(),
        "version": workflow.definition.version,
        "nodes": workflow.definition.nodes.len(),
    })))
}
