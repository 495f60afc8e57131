//! Route handlers, one module per resource, and the helpers they share.

pub(crate) mod debug;
pub(crate) mod events;
pub(crate) mod interrupts;
pub(crate) mod list;
pub(crate) mod runs;
pub(crate) mod seams;
pub(crate) mod stream;
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
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route").into_response()
}

/// Parses a JSON request body whatever its declared media type (clients such as `curl -d`
/// label JSON as a form). An empty body is `None`; malformed JSON is `400 validation_error`.
pub(crate) fn json_body(body: &[u8]) -> Result<Option<Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(body).map(Some).map_err(|_| ApiError::validation("the request body is not valid JSON"))
}
