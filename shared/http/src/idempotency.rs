//! The `Idempotency-Key` middleware, in front of every mutating route.
//!
//! The key is claimed before the handler runs (so concurrent duplicates are never both
//! processed), and the handler's final answer is kept and replayed with
//! `openwop-Idempotent-Replay: true`. A dry run (`POST /v1/workflows:validate`) is not a write:
//! it passes through unclaimed. Validation and auth refusals (400, 401, 403) and
//! retryable answers (408, 429, 5xx) are not kept: the claim is dropped. Run creation keeps
//! its answer itself, in the same commit as the run ([`AnswerKept`]).

use std::time::{Duration, Instant};

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use trellis_core::service::{Begin, IdempotencyKey};

use crate::auth::authenticate;
use crate::error::ApiError;
use crate::AppState;

/// The response header that marks replays.
pub const REPLAY_HEADER: &str = "openwop-idempotent-replay";
/// Longest accepted key.
const MAX_KEY_LENGTH: usize = 255;
/// How long a duplicate waits for the first request to finish before `409 idempotency_in_flight`.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(2);

/// Request extension: the claimed key of this request.
#[derive(Debug, Clone)]
pub struct KeyedRequest(pub IdempotencyKey);

/// Response extension: the handler already stored the answer (atomically with its effect).
#[derive(Debug, Clone, Copy)]
pub struct AnswerKept;

fn keep(status: StatusCode) -> bool {
    status.is_success()
        || (status.is_client_error()
            && !matches!(status.as_u16(), 400 | 401 | 403 | 408 | 429)
            && status != StatusCode::PAYLOAD_TOO_LARGE)
}

/// Builds the response of a recorded answer.
pub fn replay_response(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let location = body.get("statusUrl").and_then(Value::as_str).and_then(|url| HeaderValue::from_str(url).ok());
    let mut response = (status, Json(body)).into_response();
    if let Some(location) = location {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response.headers_mut().insert(REPLAY_HEADER, HeaderValue::from_static("true"));
    response
}

fn digest(body: &[u8]) -> String {
    let canonical = serde_json::from_slice::<Value>(body).ok().and_then(|value| serde_json::to_vec(&value).ok());
    let bytes = canonical.as_deref().unwrap_or(body);
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Requests that change nothing although they are `POST`s: never claimed nor kept.
fn read_only(request: &Request) -> bool {
    request.uri().path() == "/v1/workflows:validate"
}

/// The middleware.
pub async fn layer(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if !matches!(*request.method(), Method::POST | Method::PUT | Method::PATCH | Method::DELETE) || read_only(&request)
    {
        return next.run(request).await;
    }
    let Some(raw_key) = request.headers().get("idempotency-key").cloned() else { return next.run(request).await };
    let (parts, body) = request.into_parts();
    let Ok(caller) = authenticate(&parts, &state.keys) else {
        return next.run(Request::from_parts(parts, body)).await;
    };
    let key = raw_key.to_str().map(str::trim).unwrap_or("");
    let url_safe = key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.~:".contains(&b));
    if key.is_empty() || key.len() > MAX_KEY_LENGTH || !url_safe {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "idempotency_key_invalid",
            "Idempotency-Key must be 1 to 255 URL-safe characters",
        )
        .into_response();
    }
    let Ok(bytes) = to_bytes(body, state.services.limits.max_request_body_bytes).await else {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the request body exceeds limits.maxRequestBodyBytes",
        )
        .into_response();
    };
    let keyed = IdempotencyKey {
        endpoint: format!("{} {}", parts.method, parts.uri.path()),
        key: key.to_owned(),
        request_digest: digest(&bytes),
    };
    let tenant = caller.tenant().to_owned();
    let started = Instant::now();
    loop {
        match state.services.begin_keyed(&tenant, &keyed).await {
            Ok(Begin::Proceed) => break,
            Ok(Begin::Replay(record)) => return replay_response(record.status, record.body),
            Ok(Begin::InFlight) if started.elapsed() < IN_FLIGHT_WAIT => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Ok(Begin::InFlight) => {
                let mut response = ApiError::new(
                    StatusCode::CONFLICT,
                    "idempotency_in_flight",
                    "a request with this Idempotency-Key is still being processed",
                )
                .with_details(json!({ "retryAfter": 1 }))
                .into_response();
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return response;
            }
            Err(error) => return ApiError::from(error).into_response(),
        }
    }
    let mut request = Request::from_parts(parts, Body::from(bytes));
    request.extensions_mut().insert(KeyedRequest(keyed.clone()));
    let response = next.run(request).await;
    if response.extensions().get::<AnswerKept>().is_some() {
        return response;
    }
    let status = response.status();
    if !keep(status) {
        state.services.drop_claim(&tenant, &keyed).await;
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = to_bytes(body, usize::MAX).await.unwrap_or_default();
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    state.services.keep_answer(&tenant, &keyed, status.as_u16(), value).await;
    parts.headers.insert(REPLAY_HEADER, HeaderValue::from_static("false"));
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_final_answers_only() {
        for kept in [200, 201, 202, 404, 409, 422] {
            assert!(keep(StatusCode::from_u16(kept).unwrap()), "{kept}");
        }
        for dropped in [400, 401, 403, 408, 413, 429, 500, 503] {
            assert!(!keep(StatusCode::from_u16(dropped).unwrap()), "{dropped}");
        }
    }

    #[test]
    fn digest_ignores_key_order_and_whitespace() {
        assert_eq!(digest(br#"{"a":1,"b":[2]}"#), digest(br#"{ "b": [2], "a": 1 }"#));
        assert_ne!(digest(br#"{"a":1}"#), digest(br#"{"a":2}"#));
    }
}
