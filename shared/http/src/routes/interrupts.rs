//! Interrupt resolution: the run-scoped surface (`POST /v1/runs/{runId}/interrupts/{nodeId}`,
//! bearer with `approvals:respond`), its legacy alias (`POST /v1/runs/{runId}/approvals/{nodeId}`
//! with the resume value as the whole body), and the signed-token surface
//! (`GET`/`POST /v1/interrupts/{token}`, no bearer: the token is the authorisation).
//!
//! Tokens are minted whenever a snapshot shows a pending interrupt (see [`interrupt_view`]):
//! valid 30 minutes and never past the interrupt's own timeout, bound to one occurrence; an
//! external-event token (a worker's, `docs/callbacks.md`) until the interrupt's own timeout.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use trellis_core::interrupt::callback::mint;
use trellis_core::interrupt::token::{TokenClaims, TokenError, TokenSigner};
use trellis_core::interrupt::{InterruptKind, InterruptRecord, InterruptState, Refusal, Resolution, Resolver};
use trellis_core::timefmt::{rfc3339, Millis};
use trellis_core::{RunState, ServiceError};

use super::json_body;
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::links::BasePath;
use crate::render::{wire_run_id, Wire};
use crate::AppState;

/// The signer of interrupt tokens: a key derived from the host secret.
pub(crate) fn signer(state: &AppState) -> TokenSigner {
    TokenSigner::new(&state.cursor_key[..])
}

/// The snapshot's `interrupt` object for the run's pending interrupt, with a fresh token (the
/// one home of the view: `GET /v1/interrupts` lists the same objects). `callbackUrl` is the
/// v1 token route under `base`.
pub(crate) fn interrupt_view(signer: &TokenSigner, run: &RunState, now: Millis, base: &BasePath) -> Option<Value> {
    if run.status.is_terminal() {
        return None;
    }
    let record = run.pending_interrupt()?;
    let (token, expires_at) = mint(signer, &run.run_id, record, now);
    let mut view = json!({
        "kind": record.kind.as_str(),
        "nodeId": record.node_id,
        "interruptId": record.id,
        "key": record.key,
        "payload": record.payload(),
        "requestedAt": rfc3339(record.requested_at),
        "interruptToken": token,
        "callbackUrl": base.link(&format!("/v1/interrupts/{token}")),
    });
    // An external-event token with no interrupt timeout lasts as long as the interrupt.
    if expires_at != Millis::MAX {
        view["tokenExpiresAt"] = json!(rfc3339(expires_at));
    }
    if let Some(deadline) = record.deadline() {
        view["expiresAt"] = json!(rfc3339(deadline));
    }
    if record.has_votes() {
        view["votes"] = tally(record);
    }
    Some(view)
}

/// The counts only: votes are stored apart from the run (by voter), so a view costs the same
/// however many were cast.
fn tally(record: &InterruptRecord) -> Value {
    let (accepts, rejects) = record.tally();
    json!({
        "accept": accepts,
        "reject": rejects,
        "required": record.data["requiredApprovals"].as_u64().unwrap_or(1),
    })
}

/// The body `{resumeValue}` of the resolve surfaces.
pub(crate) fn resume_value(body: &[u8]) -> Result<Value, ApiError> {
    let body = json_body(body)?.ok_or_else(|| ApiError::validation("a JSON body `{resumeValue}` is required"))?;
    let Value::Object(mut fields) = body else { return Err(ApiError::validation("the body must be a JSON object")) };
    if fields.keys().any(|key| key != "resumeValue") {
        return Err(ApiError::validation("the body accepts only `resumeValue`")
            .with_details(json!({ "allowed": ["resumeValue"] })));
    }
    fields.remove("resumeValue").ok_or_else(|| ApiError::validation("`resumeValue` is required"))
}

/// The answer of a successful resolution (or vote).
fn resolved_body(wire: Wire, run: &RunState, record: &InterruptRecord) -> Value {
    let outcome = match &record.state {
        InterruptState::Resolved { outcome, .. } => outcome.clone(),
        // A worker's heartbeat (docs/callbacks.md) leaves its interrupt pending.
        InterruptState::Pending if record.kind == InterruptKind::ExternalEvent => "heartbeat-recorded".to_owned(),
        _ => "vote-recorded".to_owned(),
    };
    let mut interrupt = json!({ "kind": record.kind.as_str(), "nodeId": record.node_id, "interruptId": record.id });
    if record.has_votes() {
        interrupt["votes"] = tally(record);
    }
    json!({
        "runId": wire_run_id(wire, &run.tenant, &run.run_id),
        "nodeId": record.node_id,
        "interruptId": record.id,
        "status": run.status.as_str(),
        "outcome": outcome,
        "interrupt": interrupt,
    })
}

pub(crate) async fn resolve_scoped(
    wire: Wire,
    caller: &Caller,
    state: &AppState,
    run_id: &str,
    node_id: String,
    value: Value,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::ApprovalsRespond)?;
    let resolution = Resolution {
        node_id,
        interrupt_id: None,
        value,
        resolver: Resolver::Principal(caller.principal.subject.clone()),
        prior_vote: None,
    };
    let (run, record) = state.services.resolve_interrupt(Some(caller.tenant()), run_id, resolution).await?;
    Ok(Json(resolved_body(wire, &run, &record)))
}

/// `POST /v1/runs/{runId}/interrupts/{nodeId}` with `{resumeValue}`.
pub(crate) async fn resolve(
    caller: Caller,
    State(state): State<AppState>,
    Path((run_id, node_id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::ApprovalsRespond)?;
    let value = resume_value(&body)?;
    resolve_scoped(Wire::V1, &caller, &state, &run_id, node_id, value).await
}

/// `POST /v1/runs/{runId}/approvals/{nodeId}` with the approval resume value as the body
/// (`{action, feedback?, …}`). A run cancelled meanwhile answers `409 run_state_conflict`
/// here (the legacy surface predates `interrupt_cancelled`).
pub(crate) async fn legacy_approval(
    caller: Caller,
    State(state): State<AppState>,
    Path((run_id, node_id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::ApprovalsRespond)?;
    let value = json_body(&body)?.ok_or_else(|| ApiError::validation("a JSON body `{action}` is required"))?;
    match resolve_scoped(Wire::V1, &caller, &state, &run_id, node_id, value).await {
        Err(error) if error.code == "interrupt_cancelled" => {
            Err(ApiError::from(ServiceError::Refused(Refusal::RunState(trellis_core::RunStatus::Cancelled))))
        }
        other => other,
    }
}

/// Verifies a token and checks its expiry.
fn verified(state: &AppState, token: &str) -> Result<TokenClaims, ApiError> {
    let claims = signer(state).verify(token).map_err(|error| match error {
        TokenError::Malformed => ApiError::validation("the interrupt token is malformed"),
        TokenError::Unknown => ApiError::from(ServiceError::Refused(Refusal::NotFound)),
    })?;
    if claims.expires_at <= state.services.clock.now() {
        return Err(ServiceError::Refused(Refusal::Expired).into());
    }
    Ok(claims)
}

/// `GET /v1/interrupts/{token}`: the pending interrupt, without resolving it.
pub(crate) async fn inspect(state: State<AppState>, token: Path<String>) -> Result<Json<Value>, ApiError> {
    inspect_for(Wire::V1, state, token).await
}

/// Token inspection rendered for `wire`.
pub(crate) async fn inspect_for(
    wire: Wire,
    State(state): State<AppState>,
    Path(token): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let claims = verified(&state, &token)?;
    let run = state.services.run_for_token(&claims.run_id).await.map_err(|error| match error {
        ServiceError::NotFound { .. } => refused(Refusal::NotFound),
        other => other.into(),
    })?;
    let record = run
        .interrupts
        .iter()
        .find(|record| record.id == claims.interrupt_id && record.node_id == claims.node_id)
        .ok_or_else(|| refused(Refusal::NotFound))?;
    if !record.is_pending() || run.status.is_terminal() {
        // Ask the engine why, without changing anything: the same answers as a resolve.
        let probe = Resolution {
            node_id: record.node_id.clone(),
            interrupt_id: Some(record.id.clone()),
            value: Value::Null,
            resolver: Resolver::Token,
            prior_vote: None,
        };
        let refusal = state.services.probe_resolution(&run, probe).await?;
        return Err(refused(refusal));
    }
    let mut body = record.payload();
    body["runId"] = json!(wire_run_id(wire, &run.tenant, &run.run_id));
    body["nodeId"] = json!(record.node_id);
    body["interruptId"] = json!(record.id);
    body["status"] = json!("pending");
    body["requestedAt"] = json!(rfc3339(record.requested_at));
    body["expiresAt"] = json!(rfc3339(claims.expires_at));
    if record.has_votes() {
        body["votes"] = tally(record);
    }
    Ok(Json(body))
}

fn refused(refusal: Refusal) -> ApiError {
    ServiceError::Refused(refusal).into()
}

/// `POST /v1/interrupts/{token}` with `{resumeValue}`.
pub(crate) async fn resolve_by_token(
    state: State<AppState>,
    token: Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    resolve_by_token_for(Wire::V1, state, token, body).await
}

/// Resolution by token, answered for `wire`.
pub(crate) async fn resolve_by_token_for(
    wire: Wire,
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let claims = verified(&state, &token)?;
    let value = resume_value(&body)?;
    let resolution = Resolution {
        node_id: claims.node_id.clone(),
        interrupt_id: Some(claims.interrupt_id.clone()),
        value,
        resolver: Resolver::Token,
        prior_vote: None,
    };
    let (run, record) =
        state.services.resolve_interrupt(None, &claims.run_id, resolution).await.map_err(|error| match error {
            ServiceError::NotFound { .. } => refused(Refusal::NotFound),
            other => other.into(),
        })?;
    Ok((StatusCode::OK, Json(resolved_body(wire, &run, &record))))
}
