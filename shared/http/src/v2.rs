//! The OpenWOP v2 run surface on unversioned paths, projected per request from the same
//! stored model the v1 routes serve.
//!
//! Version negotiation (`OpenWOP-Version` request header):
//!
//! | path family        | header absent | `2` / `2.x` | `1` / `1.x` | any other major |
//! |--------------------|---------------|-------------|-------------|-----------------|
//! | `/v1/...`          | v1            | v1 (the path decides) | v1 | v1 (the path decides) |
//! | unversioned (`/runs`, `/interrupts/…`, `/workflows/…`, `/openapi.json`) | v2 | v2 | `406` | `406` |
//! | `/.well-known/openwop` | v1 document | v2 projection | v1 document | `406` |
//!
//! `406 protocol_version_unsupported` carries `details.protocolVersions`. Responses on the
//! v2 family echo `OpenWOP-Version: 2.0`.
//!
//! What v2 changes on the wire: run ids are tenant-bound (`tenant/opaque`), projected into
//! path segments as `tenant~2Fopaque` (`%2F` accepted too); snapshots carry
//! `owner.subject{issuer, subjectId, tenant, lane, kind}`, `eventLogSchemaVersion` 3 and an
//! integer `engineVersion`; poll answers `{runId, events, lastSequence, status, isTerminal}`
//! after `afterSequence`; cancelling a finished run is `409 run_terminal`; `:fork`,
//! `:redrive` and `:diff` take and answer projected ids. Not served on v2: bulk cancel,
//! registration, the test seams, the debug bundle. `OpenWOP-Dedup` is refused (`400`), never ignored.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::{json, Value};
use trellis_core::timefmt::rfc3339;
use trellis_core::RunState;

use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::event_json::{page_response, EventDocs, V2Page};
use crate::idempotency::KeyedRequest;
use crate::links::BasePath;
use crate::render::{project_id, wire_run_id, Wire};
use crate::routes::{events, interrupts, list, stream};
use crate::AppState;

/// The protocol versions this host speaks.
pub const PROTOCOL_VERSIONS: [&str; 2] = ["1.0", "2.0"];
/// The version a client should prefer.
pub const PREFERRED_VERSION: &str = "2.0";
/// The version header.
pub const VERSION_HEADER: &str = "openwop-version";

/// The major an `OpenWOP-Version` header asks for, if the header is present and parses.
pub(crate) fn requested_major(headers: &HeaderMap) -> Option<Result<u32, ()>> {
    let raw = headers.get(VERSION_HEADER)?.to_str().map_err(|_| ()).map(str::trim);
    Some(raw.and_then(|raw| raw.split('.').next().unwrap_or("").parse::<u32>().map_err(|_| ())))
}

/// `406 protocol_version_unsupported`.
pub(crate) fn unsupported_version() -> ApiError {
    ApiError::new(StatusCode::NOT_ACCEPTABLE, "protocol_version_unsupported", "this host speaks OpenWOP 1 and 2")
        .with_details(json!({ "protocolVersions": PROTOCOL_VERSIONS, "preferredVersion": PREFERRED_VERSION }))
}

/// The v2 family's negotiation: any major but 2 is refused; the answer echoes the version.
async fn negotiate(request: Request, next: Next) -> Response {
    if let Some(major) = requested_major(request.headers()) {
        if major != Ok(2) {
            return unsupported_version().into_response();
        }
    }
    let mut response = next.run(request).await;
    response.headers_mut().insert(VERSION_HEADER, HeaderValue::from_static("2.0"));
    response
}

/// The v2 routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(openapi))
        .route("/runs", post(create).get(list_runs))
        .route("/runs/{run_id}", get(snapshot).post(custom_method))
        .route("/runs/{run_id}/cancel", post(cancel))
        .route("/runs/{run_id}/events", get(events_stream))
        .route("/runs/{run_id}/events/poll", get(poll))
        .route("/runs/{run_id}/blobs/{reference}", get(blob))
        .route("/runs/{run_id}/interrupts/{node_id}", post(resolve))
        .route("/interrupts/{token}", get(inspect).post(resolve_by_token))
        .route("/workflows/{workflow_id}", get(crate::routes::workflows::get_workflow))
        .layer(axum::middleware::from_fn(negotiate))
}

/// Decodes `~XX` and `%XX` escapes of a projected id (axum has already decoded `%XX`).
fn decode_id(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = (bytes[index] == b'~' || bytes[index] == b'%')
            .then(|| segment.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                index += 3;
            }
            None => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The internal run id of a v2 path segment, when it is bound to the caller's tenant; any
/// other id reads as not found.
fn internal_id(caller: &Caller, segment: &str) -> Result<String, ApiError> {
    let id = decode_id(segment);
    match id.split_once('/') {
        Some((tenant, opaque)) if tenant == caller.tenant() && !opaque.is_empty() => Ok(opaque.to_owned()),
        _ => Err(ApiError::not_found("run")),
    }
}

fn created_body(run: &RunState) -> Value {
    let id = wire_run_id(Wire::V2, &run.tenant, &run.run_id);
    json!({
        "runId": id,
        "status": run.status.as_str(),
        "workflowId": run.workflow.id,
        "startedAt": rfc3339(run.started_at.unwrap_or(run.created_at)),
        "eventsUrl": format!("/runs/{}/events", project_id(&id)),
        "statusUrl": format!("/runs/{}", project_id(&id)),
    })
}

/// `POST /runs`.
async fn create(
    caller: Caller,
    State(state): State<AppState>,
    base: BasePath,
    keyed: Option<Extension<KeyedRequest>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsCreate)?;
    if headers.contains_key("openwop-dedup") {
        return Err(ApiError::validation("OpenWOP-Dedup is not supported by this host; send the request without it")
            .with_details(json!({ "header": "OpenWOP-Dedup" })));
    }
    crate::routes::runs::create_with(&caller, &state, &base, keyed, &body, created_body).await
}

/// `GET /runs`.
async fn list_runs(
    caller: Caller,
    state: State<AppState>,
    base: BasePath,
    query: Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    list::list_for(Wire::V2, caller, state, base, query).await
}

/// `GET /runs/{runId}`.
async fn snapshot(
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
        let (a, b) = (internal_id(&caller, a)?, internal_id(&caller, b)?);
        let mut diff = state.services.diff_runs(caller.tenant(), &a, &b).await?;
        diff["a"] = json!(wire_run_id(Wire::V2, caller.tenant(), &a));
        diff["b"] = json!(wire_run_id(Wire::V2, caller.tenant(), &b));
        return Ok(Json(diff));
    }
    let run = state.services.get_run_summary(caller.tenant(), &internal_id(&caller, &run_id)?).await?;
    Ok(Json(crate::routes::runs::run_document(Wire::V2, &state, &base, &run)))
}

/// `POST /runs/{runId}:pause`, `:resume`, `:fork`, `:redrive` and `:rerun`.
async fn custom_method(
    caller: Caller,
    State(state): State<AppState>,
    base: BasePath,
    Path(raw): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some((segment, verb)) = raw.rsplit_once(':') else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route"));
    };
    match verb {
        "fork" => {
            let run_id = internal_id(&caller, segment)?;
            crate::routes::replay::fork(Wire::V2, &caller, &state, &base, &run_id, &body).await
        }
        "redrive" => {
            let run_id = internal_id(&caller, segment)?;
            crate::routes::replay::redrive(Wire::V2, &caller, &state, &base, &run_id).await
        }
        "rerun" => {
            let run_id = internal_id(&caller, segment)?;
            crate::routes::replay::rerun(Wire::V2, &caller, &state, &base, &run_id, &body).await
        }
        "pause" | "resume" => {
            caller.require(Scope::RunsCancel)?;
            let run_id = internal_id(&caller, segment)?;
            crate::routes::runs::operator(verb, Wire::V2, &caller, &state, &run_id, &body).await
        }
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")),
    }
}

/// `POST /runs/{runId}/cancel`: `409 run_terminal` on a finished run.
async fn cancel(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsCancel)?;
    let internal = internal_id(&caller, &run_id)?;
    let reason = crate::routes::runs::cancel_reason(&body)?;
    let (run, already_terminal) = state.services.cancel_run(caller.tenant(), &internal, reason).await?;
    if already_terminal {
        return Err(ApiError::new(StatusCode::CONFLICT, "run_terminal", "the run has already finished")
            .with_details(json!({ "runStatus": run.status.as_str() })));
    }
    let body = json!({ "runId": wire_run_id(Wire::V2, &run.tenant, &run.run_id), "status": run.status.as_str() });
    Ok((StatusCode::OK, Json(body)).into_response())
}

/// `GET /runs/{runId}/events`: SSE (or the list with `Accept: application/json`).
async fn events_stream(
    caller: Caller,
    State(state): State<AppState>,
    base: BasePath,
    Path(run_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsRead)?;
    let internal = internal_id(&caller, &run_id)?;
    stream::open(Wire::V2, state, base, caller.tenant(), &internal, &query, &headers).await
}

/// `GET /runs/{runId}/events/poll?afterSequence=&timeout=`.
/// `GET /runs/{runId}/blobs/{ref}`: see [`crate::routes::blobs`].
async fn blob(
    caller: Caller,
    State(state): State<AppState>,
    Path((run_id, reference)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let internal = internal_id(&caller, &run_id)?;
    crate::routes::blobs::blob(&caller, &state, &internal, &reference).await
}

async fn poll(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsRead)?;
    let internal = internal_id(&caller, &run_id)?;
    let after = events::query_sequence(query.get("afterSequence"), "afterSequence")?;
    let budget = events::wait_budget(&query)?;
    let (run, events) = events::collect(&state, caller.tenant(), &internal, after, budget).await?;
    let last = match events.last() {
        Some(event) => event.sequence as i64,
        None => (run.next_sequence as i64 - 1).max(after.map_or(-1, |a| a as i64)),
    };
    let id = wire_run_id(Wire::V2, &run.tenant, &run.run_id);
    let page = V2Page {
        events: EventDocs::new(Wire::V2, &id, &events),
        is_terminal: run.status.is_terminal(),
        last_sequence: last,
        run_id: &id,
        status: run.status.as_str(),
    };
    page_response(&page, &page.events)
}

/// `POST /runs/{runId}/interrupts/{nodeId}` with `{resumeValue}`.
async fn resolve(
    caller: Caller,
    State(state): State<AppState>,
    Path((run_id, node_id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::ApprovalsRespond)?;
    let internal = internal_id(&caller, &run_id)?;
    let value = interrupts::resume_value(&body)?;
    interrupts::resolve_scoped(Wire::V2, &caller, &state, &internal, node_id, value).await
}

/// `GET /interrupts/{token}`.
async fn inspect(state: State<AppState>, token: Path<String>) -> Result<Json<Value>, ApiError> {
    interrupts::inspect_for(Wire::V2, state, token).await
}

/// `POST /interrupts/{token}`.
async fn resolve_by_token(
    state: State<AppState>,
    token: Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    interrupts::resolve_by_token_for(Wire::V2, state, token, body).await
}

/// `GET /openapi.json` (`schemas/openapi-v2.json`).
async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_V2).into_response()
}

/// The OpenAPI 3.1 document of the v2 routes served.
pub const OPENAPI_V2: &str = include_str!("../../../schemas/openapi-v2.json");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projected_ids_decode_either_way() {
        assert_eq!(project_id("acme/run-1"), "acme~2Frun-1");
        assert_eq!(decode_id("acme~2Frun-1"), "acme/run-1");
        assert_eq!(decode_id("acme~2frun-1"), "acme/run-1");
        assert_eq!(decode_id("acme%2Frun-1"), "acme/run-1");
        assert_eq!(decode_id("plain"), "plain");
        assert_eq!(decode_id("bad~zz"), "bad~zz");
    }
}
