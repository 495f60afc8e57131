//! Outbound webhook subscriptions (`webhooks.md`; see `trellis_core::webhook`):
//!
//! - `POST /v1/webhooks {url, events | eventTypes, tenantId?, tags?, description?}` →
//!   `201 {webhookId, secret, secretFingerprint, …}`: the secret is shown this once;
//! - `GET /v1/webhooks`, `GET /v1/webhooks/{id}`: the caller's tenant's subscriptions, never
//!   their secrets;
//! - `DELETE /v1/webhooks/{id}?tenantId=` → `204` (`404 subscription_not_found`, `403
//!   tenant_membership_required` for a foreign `tenantId`);
//! - `GET /v1/webhooks/{id}/deliveries?state=&limit=&cursor=`: delivery records (attempts,
//!   state `retrying | delivered | dead-lettered`, the last error), by run and sequence.
//!
//! Writing needs `integrations:write`; reading `runs:read`.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use trellis_core::webhook::{sign, DeliveryState};

use super::cursor;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::AppState;

/// Random bytes from the operating system.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], ApiError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|_| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "no randomness is available")
    })?;
    Ok(bytes)
}

/// `POST /v1/webhooks`.
pub(crate) async fn register(
    caller: Caller,
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    caller.require(Scope::IntegrationsWrite)?;
    let body = super::json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let webhook_id = format!("wh-{}", hex::encode(random_bytes::<12>()?));
    let secret = sign::new_secret(random_bytes::<32>()?);
    let subscription = state.services.register_webhook(&caller.principal, &body, webhook_id, secret).await?;
    let mut view = subscription.view();
    view["secret"] = json!(subscription.secret);
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// `GET /v1/webhooks`.
pub(crate) async fn list(caller: Caller, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    let subscriptions = state.services.list_webhooks(caller.tenant()).await?;
    Ok(Json(json!({ "webhooks": subscriptions.iter().map(|s| s.view()).collect::<Vec<_>>() })))
}

/// `GET /v1/webhooks/{id}`.
pub(crate) async fn get(
    caller: Caller,
    State(state): State<AppState>,
    Path(webhook_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    Ok(Json(state.services.get_webhook(caller.tenant(), &webhook_id).await?.view()))
}

/// `DELETE /v1/webhooks/{id}?tenantId=`.
pub(crate) async fn delete(
    caller: Caller,
    State(state): State<AppState>,
    Path(webhook_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<StatusCode, ApiError> {
    caller.require(Scope::IntegrationsWrite)?;
    let named = query.get("tenantId").map(String::as_str);
    state.services.delete_webhook(caller.tenant(), named, &webhook_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/webhooks/{id}/deliveries`.
pub(crate) async fn deliveries(
    caller: Caller,
    State(state): State<AppState>,
    Path(webhook_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    let limit = cursor::page_limit(&query)?;
    let filter = match query.get("state").map(String::as_str) {
        None => None,
        Some("retrying") => Some(DeliveryState::Retrying),
        Some("delivered") => Some(DeliveryState::Delivered),
        Some("dead-lettered") => Some(DeliveryState::DeadLettered),
        Some(_) => {
            return Err(ApiError::validation("state must be retrying, delivered or dead-lettered")
                .with_details(json!({ "parameter": "state" })))
        }
    };
    let listing = format!("webhook-deliveries:{webhook_id}");
    let after: Option<String> = query
        .get("cursor")
        .map(|text| cursor::decode(&state.cursor_key[..], &listing, caller.tenant(), text))
        .transpose()?;
    let (records, next) =
        state.services.webhook_deliveries(caller.tenant(), &webhook_id, filter, after.as_deref(), limit).await?;
    let mut body = json!({ "deliveries": records.iter().map(|record| record.view()).collect::<Vec<_>>() });
    if let Some(next) = next {
        body["nextCursor"] = json!(cursor::encode(&state.cursor_key[..], &listing, caller.tenant(), next));
    }
    Ok(Json(body))
}
