//! `GET /v1/runs/{runId}/blobs/{ref}` (and `/runs/{runId}/blobs/{ref}` on v2): the value a
//! run's document or event shows as `{"$trellisBlob": {ref, size, sha256}}` (see
//! [`trellis_core::blob`]), as `application/json`, with its SHA-256 as the `ETag`. Scope
//! `runs:read`; another tenant's run, or a reference the run does not hold, is `404`.

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::AppState;

/// The blob `reference` of `caller`'s run `run_id` (an internal id).
pub(crate) async fn blob(
    caller: &Caller,
    state: &AppState,
    run_id: &str,
    reference: &str,
) -> Result<Response, ApiError> {
    caller.require(Scope::RunsRead)?;
    let bytes = state.services.blob_value(caller.tenant(), run_id, reference).await?;
    let mut response = (StatusCode::OK, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{reference}\"")) {
        headers.insert(header::ETAG, etag);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=31536000, immutable"));
    Ok(response)
}

/// `GET /v1/runs/{runId}/blobs/{ref}`.
pub(crate) async fn get(
    caller: Caller,
    State(state): State<AppState>,
    Path((run_id, reference)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    blob(&caller, &state, &run_id, &reference).await
}
