//! Runs: create (`POST /v1/runs`), read (`GET /v1/runs/{runId}`) and cancel
//! (`POST /v1/runs/{runId}/cancel`, also spelled `POST /v1/runs/{runId}:cancel`).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use trellis_core::service::{CreateOutcome, IdempotencyKey};
use trellis_core::timefmt::rfc3339;
use trellis_core::RunState;

use super::json_body;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::render::{events_url, snapshot as render_snapshot, status_url};
use crate::AppState;

/// The response header that marks a replayed idempotent response.
const REPLAY_HEADER: &str = "openwop-idempotent-replay";
/// Longest accepted `Idempotency-Key`.
const MAX_KEY_LENGTH: usize = 255;

/// `POST /v1/runs`.
pub(crate) async fn create(
    caller: Caller,
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsCreate)?;
    let body = json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let idempotency = idempotency_key(&headers, &body)?;
    let keyed = idempotency.is_some();
    let respond = |run: &RunState| (StatusCode::CREATED.as_u16(), created_body(run));
    let outcome = state.services.create_run(&caller.principal, &body, idempotency, &respond).await?;
    let (status, body, replay) = match outcome {
        CreateOutcome::Created(run) => (StatusCode::CREATED, created_body(&run), false),
        CreateOutcome::Replayed(record) => {
            (StatusCode::from_u16(record.status).unwrap_or(StatusCode::CREATED), record.body, true)
        }
    };
    let mut response = (status, Json(body.clone())).into_response();
    if let Some(location) =
        body.get("statusUrl").and_then(Value::as_str).and_then(|url| HeaderValue::from_str(url).ok())
    {
        response.headers_mut().insert(header::LOCATION, location);
    }
    if keyed {
        let flag = if replay { "true" } else { "false" };
        response.headers_mut().insert(REPLAY_HEADER, HeaderValue::from_static(flag));
    }
    Ok(response)
}

fn created_body(run: &RunState) -> Value {
    json!({
        "runId": run.run_id,
        "status": run.status.as_str(),
        "workflowId": run.workflow.id,
        "startedAt": rfc3339(run.started_at.unwrap_or(run.created_at)),
        "eventsUrl": events_url(&run.run_id),
        "statusUrl": status_url(&run.run_id),
    })
}

/// Reads and checks `Idempotency-Key`; the digest is over the canonical JSON of the body.
fn idempotency_key(headers: &HeaderMap, body: &Value) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(raw) = headers.get("idempotency-key") else { return Ok(None) };
    let key = raw.to_str().ok().map(str::trim).unwrap_or("");
    let url_safe = key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.~:".contains(&b));
    if key.is_empty() || key.len() > MAX_KEY_LENGTH || !url_safe {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "idempotency_key_invalid",
            "Idempotency-Key must be 1 to 255 URL-safe characters",
        ));
    }
    let canonical = serde_json::to_string(body).unwrap_or_default();
    let request_digest = format!("sha256:{}", hex::encode(Sha256::digest(canonical.as_bytes())));
    Ok(Some(IdempotencyKey { key: key.to_owned(), request_digest }))
}

/// `GET /v1/runs/{runId}`.
pub(crate) async fn snapshot(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    let run = state.services.get_run(caller.tenant(), &run_id).await?;
    Ok(Json(render_snapshot(&run)))
}

/// `POST /v1/runs/{runId}:<verb>`: the colon custom methods. Only `cancel` is served.
pub(crate) async fn custom_method(
    caller: Caller,
    state: State<AppState>,
    Path(raw): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    match raw.rsplit_once(':') {
        Some((run_id, "cancel")) => cancel(caller, state, Path(run_id.to_owned()), body).await,
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")),
    }
}

/// `POST /v1/runs/{runId}/cancel` with an optional body `{reason?}`.
pub(crate) async fn cancel(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsCancel)?;
    let reason = match json_body(&body)? {
        None => None,
        Some(Value::Object(fields)) => {
            if fields.keys().any(|key| key.as_str() != "reason") {
                return Err(ApiError::validation("the cancel body accepts only `reason`")
                    .with_details(json!({ "allowed": ["reason"] })));
            }
            match fields.get("reason") {
                None | Some(Value::Null) => None,
                Some(Value::String(reason)) => Some(reason.clone()),
                Some(_) => return Err(ApiError::validation("`reason` must be a string")),
            }
        }
        Some(_) => return Err(ApiError::validation("the cancel body must be a JSON object")),
    };
    let (run, already_terminal) = state.services.cancel_run(caller.tenant(), &run_id, reason).await?;
    let mut body = json!({ "runId": run.run_id, "status": run.status.as_str() });
    if already_terminal {
        body["alreadyTerminal"] = json!(true);
    }
    Ok((StatusCode::OK, Json(body)).into_response())
}
