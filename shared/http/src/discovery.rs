//! `GET /.well-known/openwop` and `GET /v1/openapi.json`. Discovery advertises only what this
//! host implements and enforces.
//!
//! The discovery answer carries a strong `ETag` over its body (RFC 0165 §C.2), so the v1
//! document and the v2 projection have different tags; a matching `If-None-Match` (a list,
//! `*`, weak comparison per RFC 9110 §13.1.2) is answered `304 Not Modified` with no body.
//! `Vary: OpenWOP-Version` names the header that picks the representation.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use trellis_core::capabilities::{Overlay, Toggle};
use trellis_core::interrupt::{InterruptKind, APPROVAL_ACTIONS, PROFILES, TOKEN_LIFETIME_MS};
use trellis_core::limits::HostLimits;
use trellis_core::nodes::NodeRegistry;

use crate::AppState;

/// The OpenAPI 3.1 document of the routes served (`schemas/openapi.json`).
pub const OPENAPI: &str = include_str!("../../../schemas/openapi.json");

/// The families projected as v2 capability records, with their witness class: what a client
/// can observe without help (`witnessable-unaided`) or only through the test seams.
const V2_RECORDS: [(&str, &str); 4] = [
    ("agents", "witnessable-unaided"),
    ("subWorkflow", "seam-gated"),
    ("idempotency", "witnessable-unaided"),
    ("replay", "witnessable-unaided"),
];

/// The envelope kinds listed: the four universal kinds of RFC 0094 §F.
const UNIVERSAL_ENVELOPES: [&str; 4] = ["clarification.request", "schema.request", "schema.response", "error"];

/// The discovery document, built once at start.
#[derive(Debug, Clone)]
pub struct Discovery {
    document: Value,
    /// The v1 and v2 answers without an overlay, serialized and tagged once.
    rendered: [Rendered; 2],
}

/// A serialized discovery body and its entity tag.
#[derive(Debug, Clone)]
struct Rendered {
    body: axum::body::Bytes,
    tag: HeaderValue,
}

impl Rendered {
    fn of(document: &Value) -> Self {
        let body = serde_json::to_vec(document).expect("the discovery document serializes");
        let tag = HeaderValue::from_str(&entity_tag(&body)).expect("a hex tag is a header value");
        Self { body: body.into(), tag }
    }
}

impl Discovery {
    /// Builds the document for `limits`, the runnable, advertised fixture ids and the node
    /// kinds of `nodes` (`nodeTypes`, and each activity's capability blocks, e.g. `httpClient`,
    /// `aiProviders`, `providerUsage`).
    /// `test_seams` adds what only a host with its seams on serves (`conformance.mockAgent`).
    pub fn new(limits: &HostLimits, fixtures: &[String], nodes: &NodeRegistry, test_seams: bool) -> Self {
        let mut document = json!({
                        "protocolVersion": "1.0",
            "protocolVersions": crate::v2::PROTOCOL_VERSIONS,
            "preferredVersion": crate::v2::PREFERRED_VERSION,
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
            // Approval and clarification tokens: 30 minutes, never past the interrupt's
            // timeout. One number cannot say that an external-event token (a worker's) lives
            // until the interrupt's own timeout instead, so a Trellis field says it
            // (docs/callbacks.md, "Token validity").
            "tokenTtlSeconds": TOKEN_LIFETIME_MS / 1000,
            "externalEventTokenTtl": "interrupt-timeout",
        });
        document["runs"] = json!({
            "pauseResume": { "supported": true, "drainPolicies": ["immediate", "drain-current-node"] },
            // Host extensions (docs/retention.md): `DELETE /v1/runs/{id}`, `POST /v1/runs:prune`,
            // and the retention a run gets when neither its request nor its workflow sets one.
            "delete": true,
            "prune": true,
            "defaultRetentionMs": limits.default_retention_ms,
            // `POST /v1/runs/{id}:rerun` (docs/replay.md, "Reruns"): cacheable activities take
            // the source's result under a key namespaced by tenant.
            "rerun": {
                "supported": true,
                "cacheScope": "tenant",
                "keyRecipe": trellis_core::cache::RECIPE,
                "requestIdentity": trellis_core::ai::identity::RECIPE,
                "cacheable": ["model-call", "http-get", "http-head", "settings.cacheable"],
            },
            // Values over the inline limit are stored apart, read at
            // `GET /v1/runs/{id}/blobs/{ref}` (docs/payloads.md).
            "payloads": {
                "inlineMaxBytes": trellis_core::blob::INLINE_LIMIT,
                "maxValueBytes": limits.max_value_bytes,
                "blobs": limits.blob_storage,
                "reference": trellis_core::blob::MARKER,
            },
        });
        // Forks (replay §6): both modes; in a replay every activity — the one seam where a
        // call leaves the host — resolves the source's recorded outcome or fails closed
        // (RFC 0140), and children are forks of the source's children.
        document["replay"] = json!({
            "supported": true,
            "modes": ["replay", "branch"],
            "sideEffectSuppression": "recorded-outcome",
        });
        // How long a run stays forkable after it ends, when the host sets a default (a run's
        // own or its workflow's retention may differ; docs/retention.md).
        if let Some(retention) = limits.default_retention_ms {
            document["replay"]["retention"] = json!({ "windowSeconds": retention / 1000 });
        }
        document["subWorkflow"] = json!({ "inputMapping": true });
        // Supervisor-driven dispatch (RFC 0006/0007/0022/0126) and its decision paths:
        // `agents.orchestrator` obliges the CP-1 low-confidence path, which is served.
        // `agents.supported`: `agent.*` events (the mock agent's, RFC 0023/0024), with
        // reasoning summaries and streamed reasoning deltas.
        document["agents"] = json!({
            "supported": true,
            "orchestrator": true,
            "dispatch": true,
            "dispatchMapping": true,
            "reasoning": {
                "verbosity": "summary",
                "tokenLimit": trellis_core::nodes::mock_agent::REASONING_TOKEN_LIMIT,
                "streaming": true,
            },
        });
        if test_seams {
            // `core.conformance.mock-agent` outside the bundled `conformance-*` workflows:
            // only for `test:seams` callers on a host with its seams on.
            document["conformance"] = json!({ "mockAgent": true });
        }
        // Run budgets (RFC 0084, `configurable.budget`): every dimension enforced, hard, per run.
        document["budget"] = json!({
            "supported": true,
            "dimensions": ["tokens", "cost", "toolCalls", "retries", "model"],
            "enforce": "hard",
            "scopes": ["run"],
        });
        // Parallel fan-out (RFC 0118): every join mode and child-failure policy is served;
        // `maxFanOut` is the width ceiling (children running at once). `maxChildren` (most
        // children of one fan-out) and `perItemInput` are Trellis extensions of the block.
        document["orchestrator"] = json!({ "supported": true, "fanOutSupported": true });
        document["dispatch"] = json!({
            "supported": true,
            "models": ["child-run"],
            "fanOutSupported": true,
            "fanOutPolicies": ["sequential", "reject", "parallel"],
            "joinModes": trellis_core::orchestrator::dispatch::JOIN_MODES,
            "onChildFailureModes": trellis_core::orchestrator::dispatch::ON_CHILD_FAILURE_MODES,
            "maxFanOut": trellis_core::engine::MAX_WIDTH,
            "maxChildren": trellis_core::engine::MAX_CHILDREN,
            "perItemInput": true,
        });
        document["idempotency"] = json!({
            "supported": true,
            "layer1RetentionSeconds": trellis_core::limits::IDEMPOTENCY_RETENTION_SECONDS,
            "crossRegion": "single-region",
        });
        // Stream modes served on `GET /v1/runs/{runId}/events` (`messages`: the tokens model
        // calls stream, as `ai.message.chunk` frames) and the `bufferMs` range that batches
        // `updates`/`debug` frames.
        document["streaming"] = json!({
            "modes": crate::routes::stream::SERVED_MODES,
            "bufferMs": { "minimum": 0, "maximum": crate::routes::stream::MAX_BUFFER_MS },
        });
        if !fixtures.is_empty() {
            document["fixtures"] = json!(fixtures);
        }
        // The node kinds this host runs (a Trellis extension at the root, derived from the
        // same registry workflows are compiled against) and what its activities advertise.
        document["nodeTypes"] = json!(nodes.type_ids());
        for (block, value) in nodes.capabilities() {
            document[block] = value;
        }
        let rendered = [Rendered::of(&document), Rendered::of(&Self::v2(&document))];
        Self { document, rendered }
    }

    /// The same document advertising the integration this host serves: with `webhooks` (a
    /// host that delivers them), `webhooks` (signed, durable), the trigger bridge (webhook
    /// subscriptions) and scheduling. Without, the blocks are absent.
    pub fn with_integration(self, webhooks: Option<&trellis_core::webhook::Webhooks>) -> Self {
        let Some(webhooks) = webhooks else { return self };
        let mut document = self.document;
        let policy = &webhooks.policy;
        document["webhooks"] = json!({
            "supported": true,
            "signatureAlgorithms": [trellis_core::webhook::sign::ALGORITHM],
            "durable": true,
            "maxAttempts": policy.max_attempts,
            "maxSubscriptionsPerTenant": trellis_core::service::MAX_WEBHOOKS_PER_TENANT,
        });
        // Sources: only webhook subscriptions are registerable trigger subscriptions with the
        // `trigger.*` events; schedules are declared in definitions and advertised under
        // `scheduling`. No `deadLetter`: that block is the run-level sink (RFC 0053, not built);
        // dead-lettered deliveries are records of their subscription.
        document["triggerBridge"] = json!({
            "supported": true,
            "subscriptionStates": ["active", "paused"],
            "dedup": true,
            "sources": ["webhook"],
            "ingestion": {
                "externalSources": ["webhook"],
                "maxBodyBytes": trellis_core::trigger::MAX_BODY_BYTES,
                "verification": ["webhook-signature"],
                "registrationEndpoint": true,
            },
        });
        // `at(...)` is the one-shot delayed schedule; there is no future horizon.
        document["scheduling"] = json!({ "supported": true, "cron": true, "delayed": true, "calendar": false });
        let rendered = [Rendered::of(&document), Rendered::of(&Self::v2(&document))];
        Self { document, rendered }
    }

    /// The same document advertising what `services` take and send beyond the API: `queue`
    /// trigger subscriptions (`triggerBridge.sources`) and run events on an event bus
    /// (`runEventBus`, a Trellis extension at the root: the published event types, the
    /// CloudEvents format, what happens to an oversized event).
    pub fn with_services_integration(self, services: &trellis_core::service::Services) -> Self {
        let mut document = self.document;
        if services.queue_triggers {
            if let Some(sources) = document.pointer_mut("/triggerBridge/sources").and_then(Value::as_array_mut) {
                sources.push(json!("queue"));
            }
            // Which queues (a Trellis extension at the root: `triggerBridge` is closed).
            document["queueTriggers"] = json!({ "supported": true, "backends": ["sqs", "eventbridge"] });
        }
        if let Some(bus) = services.event_bus.as_deref() {
            document["runEventBus"] = json!({
                "supported": true,
                "transport": "eventbridge",
                "format": "cloudevents/1.0",
                "eventTypes": bus.events.event_types(),
                "delivery": "at-least-once",
                "maxDetailBytes": trellis_core::bus::MAX_DETAIL_BYTES,
                "oversized": "dataref",
            });
        }
        let rendered = [Rendered::of(&document), Rendered::of(&Self::v2(&document))];
        Self { document, rendered }
    }

    /// The document.
    pub fn document(&self) -> &Value {
        &self.document
    }

    /// The v2 projection: the capability families this host serves become capability
    /// records (`status`, `since`, `witness`), and `protocolVersion` names v2.
    pub fn v2(document: &Value) -> Value {
        let mut document = document.clone();
        document["protocolVersion"] = json!("2.0");
        for (family, witness) in V2_RECORDS {
            if let Some(record) = document.get_mut(family).and_then(Value::as_object_mut) {
                record.insert("status".into(), json!("stable"));
                record.insert("since".into(), json!(env!("CARGO_PKG_VERSION")));
                record.insert("witness".into(), json!(witness));
            }
        }
        if !document.get("runList").is_some_and(Value::is_object) {
            document["runList"] = json!({ "supported": true, "status": "stable", "since": env!("CARGO_PKG_VERSION"), "witness": "witnessable-unaided" });
        }
        document
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

/// `GET /.well-known/openwop`. `OpenWOP-Version: 2` gets the v2 projection, no header or
/// major 1 the v1 document, any other major `406`. With the test seams enabled, the
/// capability overlay is applied and the answer is not cached.
pub(crate) async fn well_known(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let v2 = match crate::v2::requested_major(&headers) {
        None | Some(Ok(1)) => false,
        Some(Ok(2)) => true,
        Some(_) => return crate::v2::unsupported_version().into_response(),
    };
    let (rendered, cache) = if state.services.test_seams {
        let document = match state.services.capability_overlay().await {
            Ok(overlay) => state.discovery.with_overlay(&overlay),
            Err(error) => return crate::error::ApiError::from(error).into_response(),
        };
        (Rendered::of(&if v2 { Discovery::v2(&document) } else { document }), "no-store")
    } else {
        (state.discovery.rendered[usize::from(v2)].clone(), "public, max-age=300")
    };
    let mut response = if matches_none_of(&headers, &rendered.tag) {
        ([(header::CONTENT_TYPE, "application/json")], rendered.body).into_response()
    } else {
        StatusCode::NOT_MODIFIED.into_response()
    };
    let response_headers = response.headers_mut();
    response_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response_headers.insert(header::VARY, HeaderValue::from_static("OpenWOP-Version"));
    response_headers.insert(header::ETAG, rendered.tag);
    if v2 {
        response_headers.insert(crate::v2::VERSION_HEADER, HeaderValue::from_static("2.0"));
    }
    response
}

/// The strong entity tag of `body`: the first 128 bits of its SHA-256, quoted.
fn entity_tag(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    format!("\"{}\"", hex::encode(&digest[..16]))
}

/// `false` when `If-None-Match` matches `tag` (so the answer is `304`).
fn matches_none_of(headers: &HeaderMap, tag: &HeaderValue) -> bool {
    let tag = tag.to_str().expect("a hex tag is text");
    let mut candidates = headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|value| value.to_str().ok());
    !candidates.any(|list| {
        list.split(',').map(str::trim).any(|candidate| candidate == "*" || candidate.trim_start_matches("W/") == tag)
    })
}

/// `GET /v1/openapi.json`.
pub(crate) async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_and_budgets_are_advertised_and_the_mock_agent_only_with_seams_on() {
        let nodes = NodeRegistry::new();
        let production = Discovery::new(&HostLimits::default(), &[], &nodes, false);
        let document = production.document();
        assert_eq!(document["agents"]["supported"], true);
        assert_eq!(
            document["agents"]["reasoning"],
            json!({"verbosity": "summary", "tokenLimit": 512, "streaming": true})
        );
        assert_eq!(document["budget"]["enforce"], "hard");
        assert!(document.get("conformance").is_none(), "no mock agent claim without seams");
        let seams = Discovery::new(&HostLimits::default(), &[], &nodes, true);
        assert_eq!(seams.document()["conformance"], json!({"mockAgent": true}));
    }

    #[test]
    fn parallel_fan_out_is_advertised_with_every_join_mode_and_its_ceilings() {
        let discovery = Discovery::new(&HostLimits::default(), &[], &NodeRegistry::new(), false);
        let document = discovery.document();
        assert_eq!(document["orchestrator"]["fanOutSupported"], true);
        let dispatch = &document["dispatch"];
        assert_eq!(dispatch["fanOutSupported"], true);
        assert_eq!(dispatch["fanOutPolicies"], json!(["sequential", "reject", "parallel"]));
        assert_eq!(dispatch["joinModes"], json!(["wait-all", "quorum", "first", "race"]));
        assert_eq!(dispatch["onChildFailureModes"], json!(["collect", "fail-fast", "absorb"]));
        assert_eq!((dispatch["maxFanOut"].as_u64(), dispatch["maxChildren"].as_u64()), (Some(64), Some(1_000)));
        let node_types = document["nodeTypes"].as_array().expect("nodeTypes");
        assert!(node_types.contains(&json!("vendor.trellis.forEach")), "{node_types:?}");
    }
}
