//! [`ApiError`]: one error type with stable codes, rendered as the canonical OpenWOP
//! envelope `{error, message, details?}` and nothing else.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use trellis_core::ServiceError;

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine code (the envelope's `error`).
    pub code: &'static str,
    /// Human text; never echoes caller input or internals.
    pub message: String,
    /// Optional details object.
    pub details: Option<Value>,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), details: None }
    }

    /// Adds details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `400 validation_error`.
    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "validation_error", message)
    }

    /// `401 unauthenticated`.
    pub fn unauthenticated() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", "a valid bearer API key is required")
    }

    /// `404 not_found`.
    pub fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", format!("{what} not found"))
    }

    /// The envelope body.
    pub fn body(&self) -> Value {
        let mut body = json!({ "error": self.code, "message": self.message });
        if let Some(details) = &self.details {
            body["details"] = details.clone();
        }
        body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> Self {
        let code = error.code();
        let message = error.to_string();
        match error {
            ServiceError::Validation { details, .. } => {
                Self::new(StatusCode::BAD_REQUEST, code, message).with_details(details)
            }
            ServiceError::NotFound { .. } => Self::new(StatusCode::NOT_FOUND, code, message),
            ServiceError::Forbidden { details, .. } => {
                Self::new(StatusCode::FORBIDDEN, code, message).with_details(details)
            }
            ServiceError::CapabilityRequired { details, .. } => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message).with_details(details)
            }
            ServiceError::Conflict { details, .. } => {
                Self::new(StatusCode::CONFLICT, code, message).with_details(details)
            }
            ServiceError::Rejected { status, details, .. } => {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
                Self::new(status, code, message).with_details(details)
            }
            ServiceError::Refused(refusal) => {
                let status = StatusCode::from_u16(refusal.http_status()).unwrap_or(StatusCode::CONFLICT);
                let error = Self::new(status, code, message);
                match refusal.details() {
                    Some(details) => error.with_details(details),
                    None => error,
                }
            }
            ServiceError::IdempotencyKeyMismatch => Self::new(StatusCode::CONFLICT, code, message),
            ServiceError::Unavailable => Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
                .with_details(json!({ "retriable": true, "retryAfter": 1 })),
            ServiceError::Internal => Self::new(StatusCode::INTERNAL_SERVER_ERROR, code, message),
        }
    }
}

/// Rewrites any non-2xx response that is not already a JSON envelope (axum's own
/// rejections: 404 fallback, 405, 413 body limit, …) into the canonical envelope.
pub async fn envelope_layer(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    if is_json {
        return response;
    }
    let (code, message) = match status {
        StatusCode::BAD_REQUEST => ("validation_error", "the request is malformed"),
        StatusCode::NOT_FOUND => ("not_found", "no such route"),
        StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "this route does not accept that method"),
        StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "the request body exceeds limits.maxRequestBodyBytes"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ("unsupported_media_type", "the request body must be JSON"),
        StatusCode::UNPROCESSABLE_ENTITY => ("validation_error", "the request could not be processed"),
        status if status.is_server_error() => ("internal_error", "internal error"),
        _ => ("error", "the request failed"),
    };
    let (mut parts, _) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let body = json!({ "error": code, "message": message });
    Response::from_parts(parts, axum::body::Body::from(body.to_string()))
}
