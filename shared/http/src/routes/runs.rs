//! Runs: create (`POST /v1/runs`), read (`GET /v1/runs/{runId}`), cancel
//! (`POST /v1/runs/{runId}/cancel`, also spelled `POST /v1/runs/{runId}:cancel`), bulk
//! cancel, operator pause and resume (`:pause`, `:resume`), and the diff of two runs
//! (`GET /v1/runs/{runId}:diff?against=`); `:fork` and `:redrive` are in [`super::replay`].

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use serde_json::{json, Value};
use trellis_core::run::DrainPolicy;
use trellis_core::service::CreateOutcome;
use trellis_core::timefmt::rfc3339;
use trellis_core::RunState;

use super::interrupts::{interrupt_view, signer};
use super::json_body;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::idempotency::{replay_response, AnswerKept, KeyedRequest, REPLAY_HEADER};
use crate::links::BasePath;
use crate::render::{events_url, status_url, wire_run_id, Wire};
use crate::AppState;

/// `POST /v1/runs`. With an `Idempotency-Key`, the answer is recorded in the same commit
/// as the run (the middleware claimed the key).
pub(crate) async fn create(
    caller: Caller,
    State(state): State<AppState>,
    base: BasePath,
    keyed: Option<Extension<KeyedRequest>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    create_with(&caller, &state, &base, keyed, &body, created_body).await
}

/// Creates a run from `body` and answers `201` with `render(run)` (its `statusUrl` as
/// `Location`), or the recorded answer of a replayed `Idempotency-Key`; shared by the v1 and
/// v2 surfaces, whose answers differ only in `render`. Links are prefixed with `base`.
pub(crate) async fn create_with(
    caller: &Caller,
    state: &AppState,
    base: &BasePath,
    keyed: Option<Extension<KeyedRequest>>,
    body: &[u8],
    render: fn(&RunState) -> Value,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsCreate)?;
    let body = json_body(body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let key = keyed.map(|Extension(KeyedRequest(key))| key);
    let keyed = key.is_some();
    let render = |run: &RunState| {
        let mut body = render(run);
        base.prefix_fields(&mut body);
        body
    };
    let respond = |run: &RunState| (StatusCode::CREATED.as_u16(), render(run));
    let outcome = state.services.create_run(&caller.principal, &body, key, &respond).await?;
    let mut response = match outcome {
        CreateOutcome::Created(run) => {
            let body = render(&run);
            let location = body["statusUrl"].as_str().and_then(|url| HeaderValue::from_str(url).ok());
            let mut response = (StatusCode::CREATED, Json(body)).into_response();
            if let Some(location) = location {
                response.headers_mut().insert(header::LOCATION, location);
            }
            if keyed {
                response.headers_mut().insert(REPLAY_HEADER, HeaderValue::from_static("false"));
            }
            response
        }
        CreateOutcome::Replayed(record) => replay_response(record.status, record.body),
    };
    response.extensions_mut().insert(AnswerKept);
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

/// `GET /v1/runs/{runId}`, and `GET /v1/runs/{runId}:diff?against=<runId>` (see
/// [`trellis_core::service::Services::diff_runs`]).
pub(crate) async fn snapshot(
    caller: Caller,
    State(state): State<AppState>,
    base: BasePath,
    Path(run_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    if let Some(a) = run_id.strip_suffix(":diff") {
        let Some(b) = query.get("against").filter(|b| !b.is_empty()) else {
            return Err(ApiError::validation("`against` (the run to compare with) is required")
                .with_details(json!({ "field": "against" })));
        };
        return Ok(Json(state.services.diff_runs(caller.tenant(), a, b).await?));
    }
    let run = state.services.get_run_summary(caller.tenant(), &run_id).await?;
    Ok(Json(run_document(Wire::V1, &state, &base, &run)))
}

/// The document `GET /v1/runs/{runId}` (or `/runs/{runId}` on v2) answers for `run`: the
/// snapshot and, while the run waits on one, its open interrupt (with its signed token; on
/// v2 also the unversioned `callbackUrl`). `values` stream frames carry the same document.
/// Links are prefixed with `base`.
pub(crate) fn run_document(wire: Wire, state: &AppState, base: &BasePath, run: &RunState) -> Value {
    let mut doc = crate::render::snapshot_for(wire, base, run);
    if let Some(mut view) = interrupt_view(&signer(state), run, state.services.clock.now(), base) {
        if wire == Wire::V2 {
            if let Some(token) = view["interruptToken"].as_str().map(str::to_owned) {
                view["callbackUrl"] = json!(base.link(&format!("/interrupts/{token}")));
            }
        }
        doc["interrupt"] = view;
    }
    doc
}

/// `POST /v1/runs/{runId}:<verb>`: the colon custom methods `cancel`, `pause`, `resume`,
/// `fork`, `redrive` and `rerun`.
pub(crate) async fn custom_method(
    caller: Caller,
    state: State<AppState>,
    base: BasePath,
    Path(raw): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    match raw.rsplit_once(':') {
        Some((run_id, "fork")) => super::replay::fork(Wire::V1, &caller, &state, &base, run_id, &body).await,
        Some((run_id, "redrive")) => super::replay::redrive(Wire::V1, &caller, &state, &base, run_id).await,
        Some((run_id, "rerun")) => super::replay::rerun(Wire::V1, &caller, &state, &base, run_id, &body).await,
        Some((run_id, "cancel")) => cancel(caller, state, Path(run_id.to_owned()), body).await,
        Some((run_id, "pause")) => operator("pause", Wire::V1, &caller, &state, run_id, &body).await,
        Some((run_id, "resume")) => operator("resume", Wire::V1, &caller, &state, run_id, &body).await,
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
    let reason = cancel_reason(&body)?;
    let (run, already_terminal) = state.services.cancel_run(caller.tenant(), &run_id, reason).await?;
    let mut body = json!({ "runId": run.run_id, "status": run.status.as_str() });
    if already_terminal {
        body["alreadyTerminal"] = json!(true);
    }
    Ok((StatusCode::OK, Json(body)).into_response())
}

/// The fields of a `:pause` / `:resume` body, each optional.
fn operator_body(body: &[u8], allowed: &[&str]) -> Result<serde_json::Map<String, Value>, ApiError> {
    match json_body(body)? {
        None => Ok(serde_json::Map::new()),
        Some(Value::Object(fields)) => {
            if fields.keys().any(|key| !allowed.contains(&key.as_str())) {
                return Err(ApiError::validation(format!("this body accepts only {allowed:?}"))
                    .with_details(json!({ "allowed": allowed })));
            }
            if fields.get("reason").is_some_and(|reason| !reason.is_string() && !reason.is_null()) {
                return Err(ApiError::validation("`reason` must be a string"));
            }
            Ok(fields)
        }
        Some(_) => Err(ApiError::validation("the body must be a JSON object")),
    }
}

/// `POST /v1/runs/{runId}:pause` with `{reason?, drainPolicy?}` (default `drain-current-node`):
/// `202 {runId, status: "paused", pausedAt, drainPolicy}`, or while a drained node still runs
/// `202 {runId, status: "running", pausePending: true, pauseRequestedAt, drainPolicy}`.
async fn pause(wire: Wire, caller: &Caller, state: &AppState, run_id: &str, body: &[u8]) -> Result<Response, ApiError> {
    caller.require(Scope::RunsCancel)?;
    let fields = operator_body(body, &["reason", "drainPolicy"])?;
    let reason = fields.get("reason").and_then(Value::as_str).map(str::to_owned);
    let drain_policy = match fields.get("drainPolicy") {
        None | Some(Value::Null) => DrainPolicy::DrainCurrentNode,
        Some(value) => value.as_str().and_then(DrainPolicy::parse).ok_or_else(|| {
            ApiError::validation("`drainPolicy` must be `immediate` or `drain-current-node`").with_details(
                json!({ "unsupportedDrainPolicy": value, "supported": ["immediate", "drain-current-node"] }),
            )
        })?,
    };
    let run = state.services.pause_run(caller.tenant(), run_id, reason, drain_policy).await?;
    let mut body = json!({
        "runId": wire_run_id(wire, &run.tenant, &run.run_id),
        "status": run.status.as_str(),
        "drainPolicy": drain_policy.as_str(),
    });
    match (&run.pause, &run.pending_pause) {
        // `drain-current-node` with a node executing: the run pauses once that node reaches a
        // terminal event (`run.paused` then); until then it stays `running`.
        (_, Some(pending)) => {
            body["pausePending"] = json!(true);
            body["pauseRequestedAt"] = json!(rfc3339(pending.paused_at));
        }
        (Some(pause), None) => body["pausedAt"] = json!(rfc3339(pause.paused_at)),
        (None, None) => {}
    }
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// `POST /v1/runs/{runId}:resume` with `{reason?}`.
async fn resume(
    wire: Wire,
    caller: &Caller,
    state: &AppState,
    run_id: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsCancel)?;
    let fields = operator_body(body, &["reason"])?;
    let reason = fields.get("reason").and_then(Value::as_str).map(str::to_owned);
    let run = state.services.resume_run(caller.tenant(), run_id, reason).await?;
    let body = json!({
        "runId": wire_run_id(wire, &run.tenant, &run.run_id),
        "status": run.status.as_str(),
        "resumedAt": rfc3339(state.services.clock.now()),
    });
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// The optional `{reason?}` body of a cancel.
pub(crate) fn cancel_reason(body: &[u8]) -> Result<Option<String>, ApiError> {
    match json_body(body)? {
        None => Ok(None),
        Some(Value::Object(fields)) => {
            if fields.keys().any(|key| key.as_str() != "reason") {
                return Err(ApiError::validation("the cancel body accepts only `reason`")
                    .with_details(json!({ "allowed": ["reason"] })));
            }
            match fields.get("reason") {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(reason)) => Ok(Some(reason.clone())),
                Some(_) => Err(ApiError::validation("`reason` must be a string")),
            }
        }
        Some(_) => Err(ApiError::validation("the cancel body must be a JSON object")),
    }
}

/// `:pause` or `:resume` of `run_id` (internal id), answered for `wire`; shared by the v1
/// and v2 routes.
pub(crate) async fn operator(
    verb: &str,
    wire: Wire,
    caller: &Caller,
    state: &AppState,
    run_id: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    match verb {
        "pause" => pause(wire, caller, state, run_id, body).await,
        _ => resume(wire, caller, state, run_id, body).await,
    }
}

/// Most ids one bulk cancel takes.
const MAX_BULK_IDS: usize = 100;

/// `POST /v1/runs:bulk-cancel` with `{runIds: [1..100], reason?}`: one result per id, in
/// request order; `200` even when every id failed.
pub(crate) async fn bulk_cancel(
    caller: Caller,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsCancel)?;
    let body = json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let Value::Object(fields) = body else { return Err(ApiError::validation("the body must be a JSON object")) };
    if fields.keys().any(|key| key != "runIds" && key != "reason") {
        return Err(ApiError::validation("the bulk-cancel body accepts only `runIds` and `reason`")
            .with_details(json!({ "allowed": ["runIds", "reason"] })));
    }
    let reason = match fields.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(reason)) => Some(reason.clone()),
        Some(_) => return Err(ApiError::validation("`reason` must be a string")),
    };
    let ids: Vec<String> = match fields.get("runIds") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().filter(|id| !id.is_empty()).map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| ApiError::validation("every entry of `runIds` must be a non-empty string"))?,
        _ => return Err(ApiError::validation("`runIds` must be an array of run ids")),
    };
    if ids.is_empty() || ids.len() > MAX_BULK_IDS {
        return Err(ApiError::validation(format!("`runIds` must hold 1 to {MAX_BULK_IDS} ids"))
            .with_details(json!({ "maxRunIds": MAX_BULK_IDS })));
    }
    let mut results = Vec::with_capacity(ids.len());
    for run_id in ids {
        let result = match state.services.cancel_run(caller.tenant(), &run_id, reason.clone()).await {
            Ok((run, _)) => json!({ "runId": run_id, "ok": true, "status": run.status.as_str() }),
            Err(error) => {
                let error = ApiError::from(error);
                json!({ "runId": run_id, "ok": false, "error": { "code": error.code, "message": error.message } })
            }
        };
        results.push(result);
    }
    Ok(Json(json!({ "results": results })))
}
