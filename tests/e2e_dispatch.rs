//! Supervisor-driven dispatch on a live embedded host, checked against the official schemas
//! when `OPENWOP_REFERENCE_DIR` is set: every event of a dispatch loop, a CP-1 ratification, an
//! RFC 0039 escalation and a give-up terminate (envelopes, `runOrchestrator.decided`,
//! `node.dispatched`, `cap.breached`, `run.completed` payloads), and the snapshots.
//! Behaviour itself is scripted in `conformance/` and runs on both backends.

mod common;

use std::time::Duration;

use common::{serve_args, start, Client, Reference, KEY};
use serde_json::{json, Value};

const SPEC_DEADLINE: Duration = Duration::from_secs(5);

#[tokio::test]
async fn dispatch_events_and_snapshots_match_the_official_schemas() {
    let Some(reference) = Reference::load("dispatch_events_and_snapshots_match_the_official_schemas") else { return };
    // The give-up check below is registered by the caller: its plan is honoured only for a
    // test-scope key on a host with its seams on.
    let mut args = serve_args(None);
    args.test_seams = true;
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let payloads = |name: &str| format!("run-event-payloads.schema.json#/$defs/{name}");
    let by_type = [
        ("runOrchestrator.decided", "run-orchestrator-decided-event.schema.json".to_owned()),
        ("node.dispatched", payloads("nodeDispatched")),
        ("node.suspended", payloads("nodeSuspended")),
        ("interrupt.requested", "suspend-request.schema.json".to_owned()),
        ("run.completed", payloads("runCompleted")),
        ("cap.breached", payloads("capBreached")),
    ];
    let give_up = json!({"id": "conformance-give-up-check", "name": "give up",
        "nodes": [{"id": "s", "typeId": "core.orchestrator.supervisor", "config": {"mockDispatchPlan": [
            {"kind": "terminate", "reason": "budget-spent", "successCriteria": [{"key": "k", "met": false}]}]}},
                  {"id": "d", "typeId": "core.dispatch"}],
        "edges": [{"id": "e1", "sourceNodeId": "s", "targetNodeId": "d"}, {"id": "e2", "sourceNodeId": "d", "targetNodeId": "s"}]});
    assert_eq!(client.request("POST", "/v1/workflows", Some(give_up)).await.0, 201);
    let mut checked = 0;
    for (workflow, waits_at) in [
        ("conformance-dispatch-cross-worker-handoff", None),
        ("conformance-orchestrator-low-confidence", Some(("waiting-approval", "supervisor"))),
        ("conformance-multi-agent-confidence-escalation", Some(("waiting-approval", "supervisor"))),
        ("conformance-give-up-check", None),
    ] {
        let run_id = client.create(json!({"workflowId": workflow})).await;
        if let Some((status, node)) = waits_at {
            let snapshot = client.wait_status(&run_id, status, SPEC_DEADLINE).await;
            reference.assert_valid("run-snapshot.schema.json", &snapshot);
            let path = format!("/v1/runs/{run_id}/interrupts/{node}");
            let (answer, body) =
                client.request("POST", &path, Some(json!({"resumeValue": {"action": "accept"}}))).await;
            assert_eq!(answer, 200, "{body}");
        }
        let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
        assert_eq!(snapshot["status"], "completed", "{snapshot}");
        reference.assert_valid("run-snapshot.schema.json", &snapshot);
        for event in client.events(&run_id).await {
            reference.assert_valid("run-event.schema.json", &event);
            if let Some((_, schema)) = by_type.iter().find(|(t, _)| event["type"] == *t) {
                reference.assert_valid(schema, &event["payload"]);
                checked += 1;
            }
            if event["type"] == "runOrchestrator.decided" {
                reference.assert_valid("orchestrator-decision.schema.json", &event["payload"]["decision"]);
            }
        }
        for child in snapshot["childRuns"].as_array().into_iter().flatten() {
            let child: Value = client.snapshot(child["runId"].as_str().unwrap()).await;
            reference.assert_valid("run-snapshot.schema.json", &child);
        }
    }
    assert!(checked >= 15, "only {checked} payloads checked");
    host.stop().await;
}

#[tokio::test]
async fn a_tenant_registered_conformance_workflow_does_not_follow_its_scripted_plan() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let sneaky = json!({"id": "conformance-sneaky", "name": "sneaky",
        "nodes": [{"id": "s", "typeId": "core.orchestrator.supervisor", "config": {"mockDispatchPlan": [
            {"kind": "next-worker", "nextWorkerIds": ["conformance-noop"]}, {"kind": "terminate", "reason": "done"}]}},
                  {"id": "d", "typeId": "core.dispatch"}],
        "edges": [{"id": "e1", "sourceNodeId": "s", "targetNodeId": "d"}, {"id": "e2", "sourceNodeId": "d", "targetNodeId": "s"}]});
    let (status, body) = client.request("POST", "/v1/workflows", Some(sneaky)).await;
    assert_eq!(status, 201, "{body}");
    let run_id = client.create(json!({"workflowId": "conformance-sneaky"})).await;
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "failed", "a tenant's plan is not honoured: {snapshot}");
    assert_eq!(snapshot["error"]["code"], "decision_source_unavailable", "{snapshot}");
    let events = client.events(&run_id).await;
    assert!(events.iter().all(|event| event["type"] != "runOrchestrator.decided"), "no decision was recorded");
    // The same kind of plan in a compiled-in (global) fixture is still honoured.
    let global = client.create(json!({"workflowId": "conformance-orchestrator-terminate"})).await;
    let snapshot = client.wait_terminal(&global, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    host.stop().await;
}
