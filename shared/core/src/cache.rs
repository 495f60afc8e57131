//! The result cache of a rerun (`POST /v1/runs/{id}:rerun`, see `service::rerun`): a new
//! run of a finished run's pinned workflow, with its inputs or new ones, whose cacheable
//! activities take the source's completed result instead of executing again when nothing
//! that decides it changed.
//!
//! - **Cacheable**: an activity whose kind says so for its config ([`crate::activity::Activity::cacheable`]:
//!   a model call, an HTTP `GET`/`HEAD`) or whose node sets `settings.cacheable: true`; a node
//!   may also set `false`. Pure nodes are computed by the engine from their inputs: they are
//!   re-executed, which gives the same result (the engine is deterministic) for less than a
//!   lookup would cost.
//! - **The key** ([`key`]): SHA-256 (lowercase hex) of the JCS canonical JSON of
//!   `{recipe, tenant, workflow (content hash), nodeId, occurrence (the node's activation),
//!   request (the prepared request: the node's resolved config and inputs), requestIdentity
//!   (the §6.4 identity of a model call, `requestKey`)}` — namespaced by tenant. The engine
//!   records it on the `node.started` of every cacheable activity's first attempt.
//! - **The cache** is the source run's log: an attempt 0 of a rerun's cacheable activity whose
//!   key equals the one the source recorded for that node takes the outputs of the source's
//!   `node.completed` that followed ([`recorded`]); a source node that failed, was cancelled or
//!   never finished is no hit. A hit records `trellis.node.replayed` (debug mode) and the
//!   provider is not called — no `provider.usage`, no cost. A rerun of a rerun finds the
//!   results its source replayed in that source's log, so a chain keeps its hits.
//! - **Children** of a rerun rerun the source's children (by their deterministic ids).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::ai::identity;
use crate::event::{types, RunEvent};
use crate::run::WorkflowRef;

/// The recipe id hashed into every key.
pub const RECIPE: &str = "trellis-result-cache-v1";
/// The debug event a cache hit records.
pub const NODE_REPLAYED: &str = "trellis.node.replayed";
/// Where the engine records an activity's key (`node.started` payload).
pub const KEY_FIELD: &str = "cacheKey";

/// Where a rerun's cacheable activities may take their results from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheLink {
    /// The run rerun (whose log is the cache).
    pub source_run_id: String,
}

/// The key of an activity's result: see the module docs.
pub fn key(tenant: &str, workflow: &WorkflowRef, node_id: &str, activation: u32, request: &Value) -> String {
    let identity = request.get("requestKey").cloned().unwrap_or(Value::Null);
    identity::digest(&json!({
        "recipe": RECIPE,
        "tenant": tenant,
        "workflow": workflow.content_hash,
        "nodeId": node_id,
        "occurrence": activation,
        "request": request,
        "requestIdentity": identity,
    }))
}

/// A result found in a source run's log.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The outputs the source's node completed with.
    pub outputs: Map<String, Value>,
    /// The sequence of that `node.completed`.
    pub sequence: u64,
}

/// The result the source's `events` hold for `node_id` under `cache_key`: the outputs of the
/// `node.completed` following a first-attempt `node.started` that recorded the key, unless
/// the node failed, was cancelled or started anew before completing.
pub fn recorded(events: &[RunEvent], node_id: &str, cache_key: &str) -> Option<Hit> {
    let start = events.iter().position(|event| {
        event.event_type == types::NODE_STARTED
            && event.node_id.as_deref() == Some(node_id)
            && event.payload.get(KEY_FIELD).and_then(Value::as_str) == Some(cache_key)
    })?;
    for event in events[start + 1..].iter().filter(|event| event.node_id.as_deref() == Some(node_id)) {
        match event.event_type.as_str() {
            types::NODE_COMPLETED => {
                let outputs = event.payload.get("outputs").and_then(Value::as_object).cloned().unwrap_or_default();
                return Some(Hit { outputs, sequence: event.sequence });
            }
            types::NODE_STARTED if event.payload.get("attempt").and_then(Value::as_u64).unwrap_or(0) == 0 => {
                return None
            }
            types::NODE_FAILED | types::NODE_CANCELLED | types::NODE_SKIPPED => return None,
            _ => {}
        }
    }
    None
}

/// The `trellis.node.replayed` payload of a hit.
pub fn replayed_payload(node_id: &str, source_run_id: &str, cache_key: &str, source_sequence: u64) -> Value {
    json!({
        "nodeId": node_id,
        "sourceRunId": source_run_id,
        "sourceSequence": source_sequence,
        "cacheKey": cache_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence: u64, event_type: &str, node: &str, payload: Value) -> RunEvent {
        RunEvent {
            sequence,
            event_type: event_type.to_owned(),
            node_id: Some(node.to_owned()),
            payload,
            timestamp: 0,
            causation: None,
        }
    }

    fn workflow() -> WorkflowRef {
        WorkflowRef { id: "w".into(), version: "1".into(), content_hash: "h1".into(), namespace: "t".into() }
    }

    #[test]
    fn the_key_names_tenant_workflow_node_occurrence_and_request() {
        let request = json!({"method": "GET", "url": "http://x/a"});
        let base = key("t", &workflow(), "n", 1, &request);
        assert_eq!(base.len(), 64);
        assert_eq!(base, key("t", &workflow(), "n", 1, &json!({"url": "http://x/a", "method": "GET"})));
        assert_ne!(base, key("u", &workflow(), "n", 1, &request), "per tenant");
        let other = WorkflowRef { content_hash: "h2".into(), ..workflow() };
        assert_ne!(base, key("t", &other, "n", 1, &request), "per workflow version");
        assert_ne!(base, key("t", &workflow(), "m", 1, &request), "per node");
        assert_ne!(base, key("t", &workflow(), "n", 2, &request), "per occurrence");
        assert_ne!(base, key("t", &workflow(), "n", 1, &json!({"method": "GET", "url": "http://x/b"})));
    }

    #[test]
    fn only_a_completion_after_the_keyed_start_is_a_hit() {
        let started = |seq, key: &str, attempt| {
            event(seq, types::NODE_STARTED, "n", json!({"nodeId": "n", "attempt": attempt, "cacheKey": key}))
        };
        let completed = |seq| event(seq, types::NODE_COMPLETED, "n", json!({"outputs": {"v": seq}}));
        let retried = event(2, types::NODE_STARTED, "n", json!({"nodeId": "n", "attempt": 1}));
        let log = [started(1, "k", 0), retried, completed(3)];
        assert_eq!(
            recorded(&log, "n", "k"),
            Some(Hit { outputs: json!({"v": 3}).as_object().unwrap().clone(), sequence: 3 })
        );
        assert_eq!(recorded(&log, "n", "other"), None);
        assert_eq!(recorded(&log, "m", "k"), None);
        let failed = [started(1, "k", 0), event(2, types::NODE_FAILED, "n", json!({}))];
        assert_eq!(recorded(&failed, "n", "k"), None);
        assert_eq!(recorded(&[started(1, "k", 0)], "n", "k"), None, "never finished");
        let restarted = [started(1, "k", 0), started(2, "k2", 0), completed(3)];
        assert_eq!(recorded(&restarted, "n", "k"), None);
    }
}
