//! Inbound webhook triggers (see `trellis_core::trigger`):
//!
//! - `POST /v1/trigger-subscriptions {source: "webhook", workflowId, inputMapping?, name?,
//!   tenantId?}` → `201 {subscriptionId, ingestUrl, secret, secretFingerprint, …}` (the secret
//!   shown this once); `GET` the list and one; `DELETE` one; `POST …/{id}:pause` and
//!   `…:resume`; `GET …/{id}/events` (its `trigger.*` log) and `…/{id}/deliveries` (each
//!   delivery's record with its `TriggerEvent` and run). Writing needs `integrations:write`,
//!   reading `runs:read`.
//! - `POST /v1/triggers/{subscriptionId}`: the ingest URL. No API key — the body's HMAC
//!   signature (`X-openwop-Signature` / `OpenWOP-Signature`, `sha256=<hex>` over
//!   `"{timestamp}.{body}"`) is the credential. `202 {runId, deliveryId, dedupKey, duplicate:
//!   false}` for a new run, `200 {…, duplicate: true}` for a redelivery, `401
//!   signature_invalid`, `409 subscription_paused`, `404 subscription_not_found`, or the
//!   run start's own refusal.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use trellis_core::service::TriggerListing;
use trellis_core::trigger::{Inbound, TriggerSubscription};
use trellis_core::webhook::sign;

use super::cursor;
use super::webhooks::random_bytes;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::{AppState, BasePath};

fn view(state: &AppState, base: &BasePath, subscription: &TriggerSubscription) -> Value {
    let mut view = subscription.view();
    if subscription.queue.is_some() {
        // Its events arrive through a queue or a rule, not an ingest URL.
        return view;
    }
    let path = base.link(&subscription.ingest_path());
    let public = state.services.callbacks.as_ref().and_then(|callbacks| callbacks.public_url.as_ref());
    view["ingestUrl"] = json!(public.map_or(path, |public| public.url_of(&subscription.ingest_path())));
    view
}

/// `POST /v1/trigger-subscriptions`.
pub(crate) async fn register(
    caller: Caller,
    base: BasePath,
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    caller.require(Scope::IntegrationsWrite)?;
    let body = super::json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let id = format!("ts-{}", hex::encode(random_bytes::<12>()?));
    let secret = sign::new_secret(random_bytes::<32>()?);
    let subscription = state.services.register_trigger(&caller.principal, &body, id, secret).await?;
    let mut view = view(&state, &base, &subscription);
    if subscription.queue.is_none() {
        // Shown once; a queue subscription has none (IAM authenticates its events).
        view["secret"] = json!(subscription.secret);
    }
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// `GET /v1/trigger-subscriptions`.
pub(crate) async fn list(
    caller: Caller,
    base: BasePath,
    State(state): State<AppState>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    let subscriptions = state.services.list_triggers(caller.tenant()).await?;
    let views: Vec<Value> = subscriptions.iter().map(|s| view(&state, &base, s)).collect();
    Ok(Json(json!({ "subscriptions": views })))
}

/// `GET /v1/trigger-subscriptions/{id}`.
pub(crate) async fn get(
    caller: Caller,
    base: BasePath,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    let subscription = state.services.get_trigger(caller.tenant(), &id).await?;
    Ok(Json(view(&state, &base, &subscription)))
}

/// `POST /v1/trigger-subscriptions/{id}:pause` and `…:resume`.
pub(crate) async fn custom_method(
    caller: Caller,
    base: BasePath,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::IntegrationsWrite)?;
    let (id, active) = match raw.rsplit_once(':') {
        Some((id, "pause")) => (id, false),
        Some((id, "resume")) => (id, true),
        _ => return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")),
    };
    let subscription = state.services.set_trigger_active(caller.tenant(), id, active).await?;
    Ok(Json(view(&state, &base, &subscription)))
}

/// `DELETE /v1/trigger-subscriptions/{id}?tenantId=`.
pub(crate) async fn delete(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<StatusCode, ApiError> {
    caller.require(Scope::IntegrationsWrite)?;
    state.services.delete_trigger(caller.tenant(), query.get("tenantId").map(String::as_str), &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn page(
    caller: &Caller,
    state: &AppState,
    id: &str,
    query: &HashMap<String, String>,
    listing: TriggerListing,
) -> Result<Json<Value>, ApiError> {
    let what = match listing {
        TriggerListing::Log => "events",
        TriggerListing::Deliveries => "deliveries",
    };
    caller.require(Scope::RunsRead)?;
    let limit = cursor::page_limit(query)?;
    let cursor_listing = format!("trigger-{what}:{id}");
    let after: Option<String> = query
        .get("cursor")
        .map(|text| cursor::decode(&state.cursor_key[..], &cursor_listing, caller.tenant(), text))
        .transpose()?;
    let (items, next) = state.services.trigger_listing(caller.tenant(), id, listing, after.as_deref(), limit).await?;
    let mut body = json!({ what: items });
    if let Some(next) = next {
        body["nextCursor"] = json!(cursor::encode(&state.cursor_key[..], &cursor_listing, caller.tenant(), next));
    }
    Ok(Json(body))
}

/// `GET /v1/trigger-subscriptions/{id}/events`: the subscription's log, oldest first.
pub(crate) async fn events(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    page(&caller, &state, &id, &query, TriggerListing::Log).await
}

/// `GET /v1/trigger-subscriptions/{id}/deliveries`.
pub(crate) async fn deliveries(
    caller: Caller,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    page(&caller, &state, &id, &query, TriggerListing::Deliveries).await
}

/// `POST /v1/triggers/{subscriptionId}`: one signed inbound delivery.
pub(crate) async fn ingest(
    State(state): State<AppState>,
    Path(id): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let headers = headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str().to_ascii_lowercase(), value.to_str().ok()?.to_owned())))
        .collect();
    let inbound = Inbound { method: method.to_string(), headers, body: body.to_vec() };
    let ingested = state.services.ingest_trigger(&id, &inbound).await?;
    let status = if ingested.duplicate { StatusCode::OK } else { StatusCode::ACCEPTED };
    let body = json!({
        "runId": ingested.run_id,
        "deliveryId": ingested.delivery_id,
        "dedupKey": ingested.dedup_key,
        "duplicate": ingested.duplicate,
    });
    Ok((status, Json(body)).into_response())
}
