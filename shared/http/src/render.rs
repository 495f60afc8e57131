//! Wire renderings of the stored model: the `RunSnapshot` and the `RunEventDoc`.

use serde_json::{json, Value};
use trellis_core::engine::ENGINE_VERSION;
use trellis_core::timefmt::rfc3339;
use trellis_core::{RunEvent, RunState};

/// `eventLogSchemaVersion` of every run.
pub(crate) const EVENT_LOG_SCHEMA_VERSION: u32 = 2;

/// The `RunEventDoc` of `event` in `run_id`'s log. The event id is derived from the run and
/// sequence, so it is stable across re-reads.
pub(crate) fn event_doc(run_id: &str, event: &RunEvent) -> Value {
    let mut doc = json!({
        "eventId": format!("{run_id}:{}", event.sequence),
        "runId": run_id,
        "type": event.event_type,
        "payload": event.payload,
        "timestamp": rfc3339(event.timestamp),
        "sequence": event.sequence,
        "schemaVersion": 1,
        "engineVersion": ENGINE_VERSION,
    });
    if let Some(node_id) = &event.node_id {
        doc["nodeId"] = json!(node_id);
    }
    if let Some(cause) = event.causation {
        doc["causationId"] = json!(format!("{run_id}:{cause}"));
    }
    doc
}

/// The `RunSnapshot` of `run`.
pub(crate) fn snapshot(run: &RunState) -> Value {
    let mut doc = json!({
        "runId": run.run_id,
        "workflowId": run.workflow.id,
        "workflowVersion": run.workflow.version,
        "status": run.status.as_str(),
        "owner": { "tenant": run.tenant },
        "createdAt": rfc3339(run.created_at),
        "inputs": run.inputs,
        "variables": run.variables,
        "engineVersion": ENGINE_VERSION,
        "eventLogSchemaVersion": EVENT_LOG_SCHEMA_VERSION,
        "eventsUrl": events_url(&run.run_id),
    });
    if let Some(started) = run.started_at {
        doc["startedAt"] = json!(rfc3339(started));
    }
    if let Some(ended) = run.ended_at {
        doc["completedAt"] = json!(rfc3339(ended));
        doc["endedAt"] = json!(rfc3339(ended));
    }
    if !run.status.is_terminal() {
        if let Some(node) = run.current_node() {
            doc["currentNodeId"] = json!(node);
        }
    }
    if let Some(error) = &run.error {
        doc["error"] = json!(error);
    }
    if !run.outputs.is_empty() {
        // As on `run.completed`; a supervisor's terminate is under `outputs.terminate`.
        doc["outputs"] = json!(run.outputs);
    }
    if !run.tags.is_empty() {
        doc["tags"] = json!(run.tags);
    }
    for (field, value) in [("metadata", &run.metadata), ("configurable", &run.configurable)] {
        if let Some(value) = value {
            doc[field] = value.clone();
        }
    }
    if let Some(scope) = &run.scope_id {
        doc["scopeId"] = json!(scope);
    }
    if let Some(parent) = &run.parent {
        doc["parentRunId"] = json!(parent.run_id);
        doc["parentNodeId"] = json!(parent.node_id);
    }
    let children: Vec<Value> = if run.child_runs.is_empty() {
        // Runs recorded before the child-run list kept their children on the nodes.
        run.nodes
            .iter()
            .filter_map(|(node_id, node)| {
                let child = node.child_run_id.as_ref()?;
                let status = node.child_status.map_or("pending", |status| status.as_str());
                Some(json!({ "runId": child, "nodeId": node_id, "status": status }))
            })
            .collect()
    } else {
        run.child_runs
            .iter()
            .map(|child| {
                json!({ "runId": child.run_id, "nodeId": child.node_id, "workflowId": child.workflow_id,
                        "status": child.status.as_str() })
            })
            .collect()
    };
    if !children.is_empty() {
        doc["childRuns"] = json!(children);
    }
    if let Some(orchestrator) = &run.orchestrator {
        doc["runOrchestrator"] = json!({ "agentId": orchestrator.agent_id });
    }
    doc
}

/// `/v1/runs/{runId}`.
pub(crate) fn status_url(run_id: &str) -> String {
    format!("/v1/runs/{run_id}")
}

/// The run's event stream (SSE; `/poll` beside it for long-polling).
pub(crate) fn events_url(run_id: &str) -> String {
    format!("/v1/runs/{run_id}/events")
}
