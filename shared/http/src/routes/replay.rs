//! Forks: `POST /v1/runs/{runId}:fork` (replay §6.1: `{mode, fromSeq?, runOptionsOverlay?}`
//! → `201 {runId, sourceRunId, fromSeq, mode, status, eventsUrl}`) and `:redrive` (a branch
//! fork at a failed run's failed node), on v1 and v2; see [`trellis_core::replay`]. Reruns:
//! `POST /v1/runs/{runId}:rerun` (`{inputs?, useCache?}` → `201 {runId, sourceRunId,
//! useCache, status, eventsUrl}`); see [`trellis_core::cache`].

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use trellis_core::service::{ForkRequest, RerunRequest};
use trellis_core::RunState;

use super::json_body;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::links::BasePath;
use crate::render::{project_id, status_url, wire_run_id, Wire};
use crate::AppState;

/// `:fork` of `run_id` (internal id) with `body`, answered for `wire`.
pub(crate) async fn fork(
    wire: Wire,
    caller: &Caller,
    state: &AppState,
    base: &BasePath,
    run_id: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let body = derived_request(caller, body)?;
    let request = ForkRequest::parse(&body)?;
    let run = state.services.fork_run(&caller.principal, run_id, request).await?;
    Ok(created(wire, base, &run))
}

/// `:redrive` of the failed run `run_id` (internal id), answered for `wire`.
pub(crate) async fn redrive(
    wire: Wire,
    caller: &Caller,
    state: &AppState,
    base: &BasePath,
    run_id: &str,
) -> Result<Response, ApiError> {
    derived_request(caller, b"")?;
    let run = state.services.redrive_run(&caller.principal, run_id).await?;
    Ok(created(wire, base, &run))
}

/// `:rerun` of `run_id` (internal id) with `body`, answered for `wire`.
pub(crate) async fn rerun(
    wire: Wire,
    caller: &Caller,
    state: &AppState,
    base: &BasePath,
    run_id: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let body = derived_request(caller, body)?;
    let request = RerunRequest::parse(&body)?;
    let use_cache = request.use_cache;
    let run = state.services.rerun_run(&caller.principal, run_id, request).await?;
    let mut body = fork_body(wire, &run);
    body["sourceRunId"] = json!(wire_run_id(wire, &run.tenant, run_id));
    body["useCache"] = json!(use_cache);
    for field in ["fromSeq", "mode"] {
        body.as_object_mut().map(|body| body.remove(field));
    }
    Ok(created_with(base, body))
}

/// What a fork, redrive or rerun needs: both scopes (it reads one run and creates another),
/// and its body as JSON (none reads as `{}`).
fn derived_request(caller: &Caller, body: &[u8]) -> Result<Value, ApiError> {
    caller.require(Scope::RunsCreate)?;
    caller.require(Scope::RunsRead)?;
    Ok(json_body(body)?.unwrap_or_else(|| json!({})))
}

/// `201` with the fork's body and its status URL as `Location`.
fn created(wire: Wire, base: &BasePath, run: &RunState) -> Response {
    created_with(base, fork_body(wire, run))
}

/// `201` with `body` and its status URL as `Location`.
fn created_with(base: &BasePath, mut body: Value) -> Response {
    base.prefix_fields(&mut body);
    let location = body["statusUrl"].as_str().and_then(|url| HeaderValue::from_str(url).ok());
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    if let Some(location) = location {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

fn fork_body(wire: Wire, run: &RunState) -> Value {
    let link = run.replay.as_ref();
    let id = wire_run_id(wire, &run.tenant, &run.run_id);
    let source = link.and_then(|link| link.source_run_id.as_deref()).unwrap_or_default();
    let (events_url, status) = match wire {
        Wire::V1 => (crate::render::events_url(&id), status_url(&id)),
        Wire::V2 => (format!("/runs/{}/events", project_id(&id)), format!("/runs/{}", project_id(&id))),
    };
    json!({
        "runId": id,
        "sourceRunId": wire_run_id(wire, &run.tenant, source),
        "fromSeq": link.map(|link| link.from_seq),
        "mode": link.map(|link| link.mode.as_str()),
        "status": run.status.as_str(),
        "workflowId": run.workflow.id,
        "eventsUrl": events_url,
        "statusUrl": status,
    })
}
