//! The conformance test seams, served only when the host runs with
//! `OPENWOP_TEST_SEAM_ENABLED` and only to a key with the `test:seams` scope (never granted by
//! `*`). Elsewhere these paths are unknown routes (`404`).
//!
//! - `POST /v1/host/sample/test/capability-toggle` `{name, value: bool|null}` or `{reset: true}`
//!   → `200 {overlay}`: switches `agents.dispatchMapping`, `subWorkflow.inputMapping` or
//!   `dispatch.perItemInput` off (or on) for discovery, registration and new runs; kept in the
//!   store, so every process agrees. `{name: <any other>, value: null}` clears nothing: `200`;
//! - `POST /v1/host/sample/dispatch/per-item` `{nextWorkerIds, nextWorkerInputs?, inputMapping?,
//!   replay?}` → `200 {children: [{index, workflowId, childRunId, inputs}], decision, replayed?}`
//!   (seams §25, RFC 0126): the decision through the engine's dispatch, in memory; a refused
//!   decision is `400 validation_error` with `details.children: []`;
//! - `POST /v1/host/sample/dispatch/fanout` `{nextWorkerIds, config?, fail?, order?}` → `200
//!   {joinOutcome, children, mergeOrder, completedCount, failedCount, cancelledCount, events}`
//!   (RFC 0118): a parallel dispatch with `config` as the dispatch node's config, through the
//!   engine, in memory ([`trellis_core::service::FanOutRequest`]; `fail` and `order` are
//!   Trellis extensions); a refused config is `400 validation_error` naming the rule;
//! - `POST /v1/host/sample/test/idempotency/concurrent-claim` `{executors: 2..=16}` →
//!   `200 {logicalInvocationId, mintedIds, attempted, delivered}` (RFC 0150 §B): the executors
//!   race the store's atomic claim on one id; exactly one wins; the claim is released;
//! - `POST /v1/host/sample/workflows` `{workflowId, nodes: [{nodeId, typeId, config}], …}` →
//!   `201` (registration in the caller's tenant, test-harness spelling accepted);
//! - `POST /v1/host/sample/test/runs/{runId}/variables` `{variables: {…}}` → `200` with the
//!   run's variables (a `variable.changed` event each).
//! - `POST /v1/host/sample/test/emit-provider-usage`: see [`super::seams_usage`];
//! - `POST /v1/host/sample/test/llm-cache-key` `{provider, model, messages, …}` → `200
//!   {cacheKey, recipe}`: the §6.4 request identity (`openwop-semantic-request-v2`);
//! - `GET /v1/host/sample/replay/effect-count` → `200 {count}`: effects performed by
//!   `core.conformance.side-effect` in this process.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use trellis_core::capabilities::Toggle;
use trellis_core::service::{logical_invocation_id, FanOutRequest, PerItemRequest};

use super::json_body;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::AppState;

/// The seam's gate: enabled on this host, and the key names the test scope (every seam
/// module's).
pub(super) fn gate(caller: &Caller, state: &AppState) -> Result<(), ApiError> {
    if !state.services.test_seams {
        return Err(ApiError::not_found("route"));
    }
    caller.require(Scope::TestSeams)
}

/// The seam's gate, then the body as a JSON object.
fn gated_object(caller: &Caller, state: &AppState, body: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    gate(caller, state)?;
    match json_body(body)? {
        Some(Value::Object(fields)) => Ok(fields),
        _ => Err(ApiError::validation("the body must be a JSON object")),
    }
}

/// `POST /v1/host/sample/test/capability-toggle`.
pub(crate) async fn capability_toggle(
    caller: Caller,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let fields = gated_object(&caller, &state, &body)?;
    let reset = fields.get("reset") == Some(&Value::Bool(true));
    let name = fields.get("name").and_then(Value::as_str);
    if !reset && name.is_none() {
        return Err(ApiError::validation("the body is `{name, value}` or `{reset: true}`"));
    }
    // Clearing a switch that cannot exist is a no-op (the suite probes the seam this way).
    if let (Some(name), Some(Value::Null)) = (name, fields.get("value")) {
        if !reset && Toggle::parse(name).is_none() {
            return Ok(Json(json!({ "overlay": state.services.capability_overlay().await? })));
        }
    }
    let value = match fields.get("value") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(on)) => Some(*on),
        Some(_) => return Err(ApiError::validation("`value` is true, false or null")),
    };
    let overlay = state.services.toggle_capability(name, value, reset).await?;
    Ok(Json(json!({ "overlay": overlay })))
}

/// `POST /v1/host/sample/workflows`.
pub(crate) async fn register_workflow(
    caller: Caller,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    gate(&caller, &state)?;
    let document = json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON request body is required"))?;
    let document = trellis_core::model::chain_in_array_order(document);
    let (workflow, _) = state.services.register_workflow_as(&caller.principal, document).await?;
    let body = json!({ "workflowId": workflow.id(), "version": workflow.definition.version, "contentHash": workflow.content_hash });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `POST /v1/host/sample/test/runs/{runId}/variables`.
pub(crate) async fn set_variables(
    caller: Caller,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let mut fields = gated_object(&caller, &state, &body)?;
    let Some(Value::Object(variables)) = fields.remove("variables") else {
        return Err(ApiError::validation("the body is `{variables: {name: value, …}}`"));
    };
    let run = state.services.set_run_variables(caller.tenant(), &run_id, variables).await?;
    Ok(Json(json!({ "runId": run.run_id, "variables": run.variables })))
}

/// `GET /v1/host/sample/replay/effect-count`: how many effects `core.conformance.side-effect`
/// performed in this process (a replay resolves the node from its source: the count stays).
pub(crate) async fn effect_count(caller: Caller, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    gate(&caller, &state)?;
    let count = trellis_core::activity::effects::performed();
    Ok(Json(json!({ "count": count, "nodeType": "core.conformance.side-effect", "scope": "process" })))
}

/// `POST /v1/host/sample/test/llm-cache-key`: the replay-stable identity (§6.4, recipe
/// `openwop-semantic-request-v2`) of the request in the body — what a model node's call is
/// keyed by in the result cache (`trellis_core::cache`).
pub(crate) async fn llm_cache_key(
    caller: Caller,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let fields = gated_object(&caller, &state, &body)?;
    for (field, ok) in [
        ("provider", fields.get("provider").is_some_and(Value::is_string)),
        ("model", fields.get("model").is_some_and(Value::is_string)),
        ("messages", fields.get("messages").is_some_and(Value::is_array)),
    ] {
        if !ok {
            let rule = if field == "messages" { "an array" } else { "a string" };
            return Err(ApiError::validation(format!("`{field}` is required and must be {rule}"))
                .with_details(json!({ "field": field })));
        }
    }
    let identity = trellis_core::ai::identity::key_of(&fields);
    Ok(Json(json!({ "cacheKey": identity, "recipe": trellis_core::ai::identity::RECIPE })))
}

/// Fields the per-item seam accepts.
const PER_ITEM_FIELDS: [&str; 4] = ["nextWorkerIds", "nextWorkerInputs", "inputMapping", "replay"];

/// `POST /v1/host/sample/dispatch/per-item`.
pub(crate) async fn per_item_dispatch(
    caller: Caller,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let mut fields = gated_object(&caller, &state, &body)?;
    if let Some(unknown) = fields.keys().find(|key| !PER_ITEM_FIELDS.contains(&key.as_str())) {
        return Err(ApiError::validation(format!("`{unknown}` is not a field of this seam"))
            .with_details(json!({ "field": unknown, "allowed": PER_ITEM_FIELDS })));
    }
    let input_mapping = match fields.remove("inputMapping") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(mapping)) => mapping,
        Some(_) => {
            return Err(ApiError::validation("`inputMapping` must be an object")
                .with_details(json!({ "field": "inputMapping" })))
        }
    };
    let replay = match fields.remove("replay") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(replay)) => replay,
        Some(_) => {
            return Err(ApiError::validation("`replay` must be a boolean").with_details(json!({ "field": "replay" })))
        }
    };
    let mut decision = json!({ "kind": "next-worker" });
    for (key, value) in fields {
        decision[key] = value;
    }
    let request = PerItemRequest { decision, input_mapping, replay };
    Ok(Json(state.services.per_item_dispatch(&caller.principal, request).await?))
}

/// Fields the fan-out seam accepts.
const FAN_OUT_FIELDS: [&str; 4] = ["nextWorkerIds", "config", "fail", "order"];

/// A list of worker indexes (`fail`, `order`).
fn indexes(value: Option<Value>, field: &str) -> Result<Vec<u32>, ApiError> {
    let refused = || {
        ApiError::validation(format!("`{field}` must be an array of worker indexes (integers ≥ 0)"))
            .with_details(json!({ "field": field }))
    };
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => {
            items.iter().map(|item| item.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(refused)).collect()
        }
        Some(_) => Err(refused()),
    }
}

/// `POST /v1/host/sample/dispatch/fanout`.
pub(crate) async fn fan_out_dispatch(
    caller: Caller,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let mut fields = gated_object(&caller, &state, &body)?;
    if let Some(unknown) = fields.keys().find(|key| !FAN_OUT_FIELDS.contains(&key.as_str())) {
        return Err(ApiError::validation(format!("`{unknown}` is not a field of this seam"))
            .with_details(json!({ "field": unknown, "allowed": FAN_OUT_FIELDS })));
    }
    let next_worker_ids = match fields.remove("nextWorkerIds") {
        Some(Value::Array(ids)) => ids
            .into_iter()
            .map(|id| match id {
                Value::String(id) if !id.is_empty() => Ok(id),
                _ => Err(()),
            })
            .collect::<Result<Vec<_>, _>>()
            .ok(),
        _ => None,
    }
    .ok_or_else(|| {
        ApiError::validation("`nextWorkerIds` must be an array of workflow ids (non-empty strings)")
            .with_details(json!({ "field": "nextWorkerIds" }))
    })?;
    let config = match fields.remove("config") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(config)) => config,
        Some(_) => {
            return Err(ApiError::validation("`config` must be an object (the dispatch node's config)")
                .with_details(json!({ "field": "config" })))
        }
    };
    let fail = indexes(fields.remove("fail"), "fail")?;
    let order = indexes(fields.remove("order"), "order")?;
    let request = FanOutRequest { next_worker_ids, config, fail, order };
    Ok(Json(state.services.fan_out_dispatch(&caller.principal, request).await?))
}

/// Most executors one concurrent-claim probe races.
const MAX_EXECUTORS: u64 = 16;

/// `POST /v1/host/sample/test/idempotency/concurrent-claim`.
pub(crate) async fn concurrent_claim(
    caller: Caller,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let fields = gated_object(&caller, &state, &body)?;
    let executors = match fields.get("executors") {
        None => 2,
        Some(value) => value.as_u64().filter(|n| (2..=MAX_EXECUTORS).contains(n)).ok_or_else(|| {
            ApiError::validation(format!("`executors` must be an integer from 2 to {MAX_EXECUTORS}"))
                .with_details(json!({ "field": "executors", "minimum": 2, "maximum": MAX_EXECUTORS }))
        })?,
    } as usize;
    let tenant = caller.tenant().to_owned();
    let identity = state.services.new_invocation_identity(&tenant);
    // Every executor starts at the barrier, mints the id from the shared identity and claims.
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(executors));
    let mut tasks = Vec::with_capacity(executors);
    for _ in 0..executors {
        let (services, barrier, tenant, identity) =
            (state.services.clone(), barrier.clone(), tenant.clone(), identity.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let minted = logical_invocation_id(&identity);
            let won = services.claim_invocation(&tenant, &minted).await;
            (minted, won)
        }));
    }
    let mut minted_ids = Vec::with_capacity(executors);
    let mut delivered = 0;
    let mut failure = None;
    for task in tasks {
        let (minted, won) = task.await.map_err(|_| ApiError::from(trellis_core::ServiceError::Internal))?;
        match won {
            Ok(true) => delivered += 1,
            Ok(false) => {}
            Err(error) => failure = Some(error),
        }
        minted_ids.push(minted);
    }
    let id = logical_invocation_id(&identity);
    state.services.release_invocation(&tenant, &id).await?;
    if let Some(error) = failure {
        return Err(error.into());
    }
    Ok(Json(json!({
        "logicalInvocationId": id,
        "mintedIds": minted_ids,
        "attempted": executors,
        "delivered": delivered,
    })))
}
