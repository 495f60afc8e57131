//! # trellis-http
//!
//! The OpenWOP v1 and v2 wire surfaces as one axum [`Router`], built by [`router`] from an
//! [`AppState`] of shared services. The embedded host serves it through its own connection
//! layer (`trellis::serve`: read timeouts, a connection limit, envelopes for malformed
//! request heads); the serverless `api` function serves the same router through
//! `lambda_http`.
//!
//! Every non-2xx answer is the canonical envelope `{error, message, details?}` — axum's own
//! rejections (body limit, unknown route, wrong method) included, via [`error::envelope_layer`].
//! Bearer API keys are checked before any existence check.

pub mod auth;
pub mod devkeys;
pub mod discovery;
pub mod error;
mod event_json;
pub mod idempotency;
mod links;
mod render;
mod routes;
pub mod shutdown;
mod ui;
pub mod v2;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use trellis_core::service::Services;

pub use auth::{ApiKey, KeyRing, Scope};
pub use discovery::Discovery;
pub use links::BasePath;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The use cases.
    pub services: Arc<Services>,
    /// The API keys.
    pub keys: Arc<KeyRing>,
    /// The discovery document, built once at start.
    pub discovery: Arc<Discovery>,
    /// The secret that signs list cursors.
    pub cursor_key: Arc<[u8; 32]>,
    /// SSE settings.
    pub streams: StreamSettings,
}

/// How SSE streams behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    /// A `:keepalive` comment is sent after this long without a frame (15 s by default).
    pub keepalive: Duration,
    /// Streams end after this long, so clients resume with `Last-Event-ID` (none embedded;
    /// the serverless API ends them before the function's deadline).
    pub max_duration: Option<Duration>,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self { keepalive: Duration::from_secs(15), max_duration: None }
    }
}

/// Builds the router for the OpenWOP v1 surface.
pub fn router(state: AppState) -> Router {
    let body_limit = state.services.limits.max_request_body_bytes;
    Router::new()
        .route("/.well-known/openwop", get(discovery::well_known))
        .route("/v1/openapi.json", get(discovery::openapi))
        .route("/v1/runs", post(routes::runs::create).get(routes::list::list))
        .route("/v1/runs:bulk-cancel", post(routes::runs::bulk_cancel))
        .route("/v1/runs:prune", post(routes::retention::prune))
        .route(
            "/v1/runs/{run_id}",
            get(routes::runs::snapshot).post(routes::runs::custom_method).delete(routes::retention::delete),
        )
        .route("/v1/runs/{run_id}/cancel", post(routes::runs::cancel))
        .route("/v1/runs/{run_id}/events", get(routes::stream::events))
        .route("/v1/runs/{run_id}/blobs/{reference}", get(routes::blobs::get))
        .route("/v1/runs/{run_id}/events/poll", get(routes::events::poll))
        .route("/v1/runs/{run_id}/debug-bundle", get(routes::debug::bundle))
        .route("/v1/runs/{run_id}/interrupts/{node_id}", post(routes::interrupts::resolve))
        .route("/v1/runs/{run_id}/approvals/{node_id}", post(routes::interrupts::legacy_approval))
        .route("/v1/interrupts", get(routes::interrupts_list::list))
        .route("/v1/interrupts/{token}", get(routes::interrupts::inspect).post(routes::interrupts::resolve_by_token))
        .route("/v1/workflows", post(routes::workflows::register).get(routes::workflows::list))
        .route("/v1/workflows:validate", post(routes::workflows::validate))
        .route("/v1/host/sample/workflows", post(routes::seams::register_workflow))
        .route("/v1/host/sample/test/capability-toggle", post(routes::seams::capability_toggle))
        .route("/v1/host/sample/dispatch/per-item", post(routes::seams::per_item_dispatch))
        .route("/v1/host/sample/dispatch/fanout", post(routes::seams::fan_out_dispatch))
        .route("/v1/host/sample/test/idempotency/concurrent-claim", post(routes::seams::concurrent_claim))
        .route("/v1/host/sample/test/runs/{run_id}/variables", post(routes::seams::set_variables))
        .route("/v1/host/sample/test/emit-provider-usage", post(routes::seams_usage::emit_provider_usage))
        .route("/v1/host/sample/replay/effect-count", get(routes::seams::effect_count))
        .route("/v1/host/sample/test/llm-cache-key", post(routes::seams::llm_cache_key))
        .route("/v1/workflows/{workflow_id}", get(routes::workflows::get_workflow))
        .route("/v1/webhooks", post(routes::webhooks::register).get(routes::webhooks::list))
        .route("/v1/webhooks/{webhook_id}", get(routes::webhooks::get).delete(routes::webhooks::delete))
        .route("/v1/webhooks/{webhook_id}/deliveries", get(routes::webhooks::deliveries))
        .route("/v1/trigger-subscriptions", post(routes::triggers::register).get(routes::triggers::list))
        .route(
            "/v1/trigger-subscriptions/{id}",
            get(routes::triggers::get).post(routes::triggers::custom_method).delete(routes::triggers::delete),
        )
        .route("/v1/trigger-subscriptions/{id}/events", get(routes::triggers::events))
        .route("/v1/trigger-subscriptions/{id}/deliveries", get(routes::triggers::deliveries))
        .route("/v1/triggers/{id}", post(routes::triggers::ingest))
        .route("/v1/schedules", get(routes::schedules::list))
        .route(
            "/v1/schedules/{workflow_id}/{trigger_id}",
            get(routes::schedules::get).post(routes::schedules::custom_method),
        )
        .merge(v2::routes())
        .fallback(routes::fallback)
        .layer(axum::middleware::from_fn_with_state(state.clone(), idempotency::layer))
        .merge(ui::routes())
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::map_response(error::envelope_layer))
        .layer(axum::middleware::from_fn(keep_route_template))
        .with_state(state)
}

/// Copies the matched route template (`/v1/interrupts/{token}`, never the raw path with its
/// ids and tokens) into the response's extensions, for the host's access log. Unmatched
/// requests (the fallback) carry none.
async fn keep_route_template(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let matched = request.extensions().get::<axum::extract::MatchedPath>().cloned();
    let mut response = next.run(request).await;
    if let Some(matched) = matched {
        response.extensions_mut().insert(matched);
    }
    response
}
