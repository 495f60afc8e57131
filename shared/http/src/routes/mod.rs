//! Route handlers, one module per resource, and the helpers they share.

pub(crate) mod blobs;
pub(crate) mod cursor;
pub(crate) mod debug;
pub(crate) mod events;
pub(crate) mod interrupts;
pub(crate) mod interrupts_list;
pub(crate) mod list;
pub(crate) mod replay;
pub(crate) mod retention;
pub(crate) mod runs;
pub(crate) mod schedules;
pub(crate) mod seams;
pub(crate) mod seams_usage;
pub(crate) mod sse;
pub(crate) mod stream;
pub(crate) mod triggers;
pub(crate) mod webhooks;
pub(crate) mod workflows;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::auth::authenticate;
use crate::error::ApiError;
use crate::AppState;

/// Unknown routes: `401` under `/v1/` without a valid key (auth before existence), else
/// `404 not_found`.
pub(crate) async fn fallback(State(state): State<AppState>, request: axum::extract::Request) -> Response {
    let (parts, _) = request.into_parts();
    if parts.uri.path().starts_with("/v1/") {
        if let Err(error) = authenticate(&parts, &state.keys) {
            return error.into_response();
        }
    }
    if let Some(error) = raw_run_id_hint(parts.uri.path()) {
        return error.into_response();
    }
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route").into_response()
}

/// The sub-resources of a run: a second segment naming one is not the tail of a raw id.
const RUN_SUB_RESOURCES: [&str; 5] = ["events", "cancel", "debug-bundle", "interrupts", "approvals"];

/// `404 not_found` with a hint when a path holds a v2 run id (`tenant/opaque`) unencoded, as
/// in `/runs/default/run-1/events`: the id must be one segment, its slash encoded as `~2F`
/// (`/runs/default~2Frun-1/events`); `/v1/...` paths take the v1 id (`run-1`). The raw form
/// is not accepted: `/runs/{a}/{b}` would collide with the sub-resource routes of run `a`.
fn raw_run_id_hint(path: &str) -> Option<ApiError> {
    let (v1, rest) = match path.strip_prefix("/v1/runs/") {
        Some(rest) => (true, rest),
        None => (false, path.strip_prefix("/runs/")?),
    };
    let mut segments = rest.splitn(3, '/');
    let (tenant, opaque) = (segments.next()?, segments.next()?);
    let tail = segments.next().map(|tail| format!("/{tail}")).unwrap_or_default();
    let encoded = |segment: &str| segment.contains("~2F") || segment.contains("~2f");
    if tenant.is_empty() || opaque.is_empty() || encoded(tenant) || RUN_SUB_RESOURCES.contains(&opaque) {
        return None;
    }
    let v2_path = format!("/runs/{tenant}~2F{opaque}{tail}");
    let (message, hint) = if v1 {
        (
            "no such route: a run id is one path segment; /v1 paths take the v1 run id, and a v2 id              (`tenant/opaque`) is addressed on the v2 surface with its slash encoded as ~2F",
            format!("on /v1 use /v1/runs/{opaque}{tail}; on v2 use {v2_path}"),
        )
    } else {
        (
            "no such route: a v2 run id (`tenant/opaque`) is one path segment, its slash encoded as ~2F",
            format!("use {v2_path}"),
        )
    };
    Some(ApiError::new(StatusCode::NOT_FOUND, "not_found", message).with_details(serde_json::json!({ "hint": hint })))
}

/// Parses a JSON request body whatever its declared media type (clients such as `curl -d`
/// label JSON as a form). An empty body is `None`; malformed JSON is `400 validation_error`.
pub(crate) fn json_body(body: &[u8]) -> Result<Option<Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(body).map(Some).map_err(|_| ApiError::validation("the request body is not valid JSON"))
}
