//! `GET /.well-known/openwop` and `GET /v1/openapi.json`. Discovery advertises only what this
//! host implements and enforces.

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use trellis_core::capabilities::{Overlay, Toggle};
use trellis_core::interrupt::{InterruptKind, APPROVAL_ACTIONS, PROFILES, TOKEN_LIFETIME_MS};
use trellis_core::limits::HostLimits;

use crate::AppState;

/// The OpenAPI 3.1 document of the routes served (`schemas/openapi.json`).
pub const OPENAPI: &str = include_str!("../../../schemas/openapi.json");

/// The envelope kinds listed: the four universal kinds of RFC 0094 §F.
const UNIVERSAL_ENVELOPES: [&str; 4] = ["clarification.request", "schema.request", "schema.response", "error"];

/// The discovery document, built once at start.
#[derive(Debug, Clone)]
pub struct Discovery {
    document: Value,
}

impl Discovery {
    /// Builds the document for `limits` and the runnable, advertised fixture ids.
    pub fn new(limits: &HostLimits, fixtures: &[String]) -> Self {
        let mut document = json!({
            "protocolVersion": "1.0",
            "protocolVersions": ["1.0"],
            "implementation": { "name": "trellis", "version": env!("CARGO_PKG_VERSION"), "vendor": "trellis" },
            "engineVersion": 1,
            "eventLogSchemaVersion": 2,
            // Listing `clarification.request` claims the `openwop-interrupts` profile, and a
            // host that lists any envelope kind must list the four universal ones (RFC 0094
            // §F). Trellis runs no LLM nodes, so no node ever produces the other three.
            "supportedEnvelopes": UNIVERSAL_ENVELOPES,
            "schemaVersions": { "clarification.request": 1, "schema.request": 1, "schema.response": 1, "error": 1 },
            "supportedTransports": ["rest"],
            "limits": {
                "clarificationRounds": 0,
                "schemaRounds": 0,
                "envelopesPerTurn": 0,
                "maxNodeExecutions": limits.max_node_executions,
                "maxRunDurationMs": limits.max_run_duration_ms,
                "maxRequestBodyBytes": limits.max_request_body_bytes,
            },
            "configurable": {
                "recursionLimit": { "type": "integer", "minimum": 1, "maximum": limits.max_node_executions },
                                "runTimeoutMs": { "type": "number", "exclusiveMinimum": 0, "maximum": limits.max_run_duration_ms },
                "escalationThreshold": { "type": "number", "minimum": 0, "maximum": 1, "default": 0.7 },
                "confidenceEscalationFloor": { "type": "number", "minimum": 0.5, "maximum": 1, "default": 0.5 },
            },
        });
        document["debugBundle"] = json!({ "supported": true });
        document["interrupts"] = json!({
            "supportedKinds": InterruptKind::supported(),
            "approvalActions": APPROVAL_ACTIONS,
            "profiles": PROFILES,
            "resolution": ["run-scoped", "signed-token"],
            "tokenTtlSeconds": TOKEN_LIFETIME_MS / 1000,
        });
        document["runs"] = json!({
            "pauseResume": { "supported": true, "drainPolicies": ["immediate", "drain-current-node"] },
        });
        document["subWorkflow"] = json!({ "inputMapping": true });
        // Supervisor-driven dispatch (RFC 0006/0007/0022/0126) and its decision paths:
        // `agents.orchestrator` obliges the CP-1 low-confidence path, which is served.
        // `agents.supported` (agent identity and `agent.*` events) is not.
        document["agents"] = json!({ "orchestrator": true, "dispatch": true, "dispatchMapping": true });
        document["orchestrator"] = json!({ "supported": true, "fanOutSupported": false });
        document["dispatch"] = json!({
            "supported": true,
            "models": ["child-run"],
            "fanOutSupported": false,
            "fanOutPolicies": ["sequential", "reject"],
            "onChildFailureModes": ["fail-fast"],
            "maxFanOut": trellis_core::engine::MAX_FAN_OUT,
            "perItemInput": true,
        });
        document["idempotency"] =
            json!({ "supported": true, "layer1RetentionSeconds": 86_400, "crossRegion": "single-region" });
        if !fixtures.is_empty() {
            document["fixtures"] = json!(fixtures);
        }
        Self { document }
    }

    /// The document.
    pub fn document(&self) -> &Value {
        &self.document
    }

    /// The document with the switched-off capabilities of `overlay` set to `false`.
    pub fn with_overlay(&self, overlay: &Overlay) -> Value {
        let mut document = self.document.clone();
        for toggle in Toggle::ALL.into_iter().filter(|toggle| !overlay.enabled(*toggle)) {
            let (block, field) = toggle.name().split_once('.').expect("toggle names are block.field");
            document[block][field] = json!(false);
        }
        document
    }
}

/// `GET /.well-known/openwop`. With the test seams enabled, the capability overlay is
/// applied and the answer is not cached.
pub(crate) async fn well_known(State(state): State<AppState>) -> Response {
    if state.services.test_seams {
        let overlay = match state.services.capability_overlay().await {
            Ok(overlay) => overlay,
            Err(error) => return crate::error::ApiError::from(error).into_response(),
        };
        let mut response = Json(state.discovery.with_overlay(&overlay)).into_response();
        response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return response;
    }
    let mut response = Json(state.discovery.document().clone()).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
    response
}

/// `GET /v1/openapi.json`.
pub(crate) async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}
