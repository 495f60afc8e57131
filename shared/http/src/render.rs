//! Wire renderings of the stored model: the `RunSnapshot` (the `RunEventDoc` is written by
//! [`crate::event_json`]).

use serde_json::{json, Value};
use trellis_core::engine::{is_fan_out_record, ENGINE_VERSION};
use trellis_core::run::parse_slot_key;
use trellis_core::timefmt::rfc3339;
use trellis_core::{blob, RunState};

use crate::links::BasePath;

/// `eventLogSchemaVersion` of every run on the v1 wire.
pub(crate) const EVENT_LOG_SCHEMA_VERSION: u32 = 2;
/// `eventLogSchemaVersion` on the v2 wire (its event documents carry `schemaVersion` and an
/// integer `engineVersion`).
pub(crate) const V2_EVENT_LOG_SCHEMA_VERSION: u32 = 3;

/// The protocol a document is rendered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// `/v1/...`.
    V1,
    /// Unversioned paths: tenant-bound run ids, v2 field names.
    V2,
}

/// A run id as the wire shows it: opaque on v1, `tenant/opaque` on v2.
pub(crate) fn wire_run_id(wire: Wire, tenant: &str, run_id: &str) -> String {
    match wire {
        Wire::V1 => run_id.to_owned(),
        Wire::V2 => format!("{tenant}/{run_id}"),
    }
}

/// A tenant-bound id projected into one path segment: every byte outside `[A-Za-z0-9._-]`
/// becomes `~XX` (`acme/r-1` → `acme~2Fr-1`).
pub(crate) fn project_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("~{byte:02X}"));
        }
    }
    out
}

/// The engine version as the v2 wire's integer.
pub(crate) const ENGINE_VERSION_NUMBER: u32 = 1;

/// The snapshot for `wire`. v2: the run id is tenant-bound (and so are parent and child
/// ids), links are unversioned and projected, `owner.subject` names the principal, and
/// `engineVersion` is an integer. Links are prefixed with `base`.
pub(crate) fn snapshot_for(wire: Wire, base: &BasePath, run: &RunState) -> Value {
    let mut doc = snapshot(run);
    if wire == Wire::V1 {
        base.prefix_fields(&mut doc);
        return doc;
    }
    let id = wire_run_id(wire, &run.tenant, &run.run_id);
    doc["runId"] = json!(id);
    doc["eventsUrl"] = json!(format!("/runs/{}/events", project_id(&id)));
    doc["statusUrl"] = json!(format!("/runs/{}", project_id(&id)));
    doc["eventLogSchemaVersion"] = json!(V2_EVENT_LOG_SCHEMA_VERSION);
    doc["engineVersion"] = json!(ENGINE_VERSION_NUMBER);
    doc["owner"] = json!({
        "tenant": run.tenant,
        "subject": {
            "issuer": "trellis",
            "subjectId": run.principal.subject,
            "tenant": run.tenant,
            "lane": "api",
            "kind": run.principal.key_class,
        },
    });
    if let Some(parent) = &run.parent {
        doc["parentRunId"] = json!(wire_run_id(wire, &run.tenant, &parent.run_id));
    }
    if let Some(children) = doc.get_mut("childRuns").and_then(Value::as_array_mut) {
        for child in children {
            if let Some(child_id) = child["runId"].as_str().map(str::to_owned) {
                child["runId"] = json!(wire_run_id(wire, &run.tenant, &child_id));
            }
        }
    }
    base.prefix_fields(&mut doc);
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
        // A value over the inline limit shows as its blob's reference, as stored.
        "inputs": blob::view_members(&run.inputs, blob::INLINE_LIMIT),
        "variables": blob::view_members(&run.variables, blob::INLINE_LIMIT),
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
            // A fan-out's slot is shown as its node.
            doc["currentNodeId"] = json!(parse_slot_key(node).map_or(node, |(node_id, _)| node_id));
        }
    }
    if let Some(error) = &run.error {
        doc["error"] = json!(error);
    }
    if let Some(cost) = &run.ai.cost {
        // The durable rollup of every `provider.usage` (absent until one was recorded).
        doc["metrics"] = json!({ "openwopCost": cost.metrics() });
    }
    if !run.outputs.is_empty() {
        // As on `run.completed`; a supervisor's terminate is under `outputs.terminate`.
        doc["outputs"] = blob::view(&Value::Object(run.outputs.clone()), blob::INLINE_LIMIT);
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
    let mut children: Vec<Value> = if run.child_runs.is_empty() {
        // Runs recorded before the child-run list kept their children on the nodes (fan-out
        // slots are listed below, never as nodes).
        run.nodes
            .iter()
            .filter(|(key, _)| !is_fan_out_record(key))
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
    children.extend(fan_out_children(run));
    if !children.is_empty() {
        doc["childRuns"] = json!(children);
    }
    if let Some(orchestrator) = &run.orchestrator {
        doc["runOrchestrator"] = json!({ "agentId": orchestrator.agent_id });
    }
    doc
}

/// The children of running fan-outs: one per live slot record with a child run, as
/// `{runId, nodeId: <the fan-out node>, index, workflowId, status}`, in node then index order.
fn fan_out_children(run: &RunState) -> Vec<Value> {
    let mut slots: Vec<(&str, u32, Value)> = run
        .nodes
        .iter()
        .filter_map(|(key, slot)| {
            let (node_id, index) = parse_slot_key(key)?;
            let child = slot.child_run_id.as_ref()?;
            let status = slot.child_status.map_or("pending", |status| status.as_str());
            let entry = json!({ "runId": child, "nodeId": node_id, "index": index,
                                "workflowId": slot.child_workflow_id, "status": status });
            Some((node_id, index, entry))
        })
        .collect();
    slots.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    slots.into_iter().map(|(_, _, entry)| entry).collect()
}

/// `/v1/runs/{runId}`.
pub(crate) fn status_url(run_id: &str) -> String {
    format!("/v1/runs/{run_id}")
}

/// The run's event stream (SSE; `/poll` beside it for long-polling).
pub(crate) fn events_url(run_id: &str) -> String {
    format!("/v1/runs/{run_id}/events")
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use trellis_core::run::{ChildRun, NodeState};
    use trellis_core::testing::{chain_workflow, pending_run};
    use trellis_core::RunStatus;

    use super::snapshot;

    fn node(value: Value) -> NodeState {
        serde_json::from_value(value).expect("a node record")
    }

    #[test]
    fn child_runs_list_the_live_slots_of_a_fan_out_once_under_the_fan_out_node() {
        let mut run = pending_run(&chain_workflow(), "run-1", "t");
        run.status = RunStatus::Running;
        run.nodes.insert("fan".into(), node(json!({ "status": "waiting-child", "activation": 1 })));
        for (index, status) in [(1, "running"), (0, "completed")] {
            let slot = json!({ "status": "waiting-child", "activation": 1, "childRunId": format!("run-c{index}"),
                               "childWorkflowId": "worker", "childStatus": status });
            run.nodes.insert(format!("fan#{index}"), node(slot));
        }
        run.nodes.insert("loop#items".into(), node(json!({ "status": "completed", "activation": 1 })));
        let doc = snapshot(&run);
        assert_eq!(
            doc["childRuns"],
            json!([
                { "runId": "run-c0", "nodeId": "fan", "index": 0, "workflowId": "worker", "status": "completed" },
                { "runId": "run-c1", "nodeId": "fan", "index": 1, "workflowId": "worker", "status": "running" },
            ]),
            "slots are listed once (not by the legacy branch), the items record never"
        );
        assert_eq!(doc["currentNodeId"], "fan", "a slot is shown as its node");

        run.child_runs.push(ChildRun {
            run_id: "run-single".into(),
            node_id: "sub".into(),
            workflow_id: "child".into(),
            status: RunStatus::Completed,
        });
        let ids: Vec<Value> =
            snapshot(&run)["childRuns"].as_array().unwrap().iter().map(|c| c["runId"].clone()).collect();
        assert_eq!(ids, [json!("run-single"), json!("run-c0"), json!("run-c1")]);
    }
}
