//! `core.subWorkflow` on the embedded host: child runs with their own id and log, linked to
//! the parent; output and input mapping; failure policies; cancellation cascading down.

mod common;

use std::time::{Duration, Instant};

use common::{assert_log_well_formed, serve_args, start, types, Client, KEY};
use serde_json::{json, Value};

const SPEC_DEADLINE: Duration = Duration::from_secs(5);

async fn register(client: &Client, definition: Value) {
    let (status, body) = client.request("POST", "/v1/workflows", Some(definition)).await;
    assert!(status == 201 || status == 200, "{body}");
}

fn parent(id: &str, child: &str, config: Value) -> Value {
    let mut config = config;
    config["workflowId"] = json!(child);
    json!({"id": id, "name": id, "version": "1",
        "nodes": [{"id": "call", "typeId": "core.subWorkflow", "config": config}, {"id": "after", "typeId": "core.noop"}],
        "edges": [{"id": "e", "sourceNodeId": "call", "targetNodeId": "after"}],
        "variables": [{"name": "seed", "type": "string", "defaultValue": "from-parent"}]})
}

async fn child_of(client: &Client, run_id: &str) -> String {
    let started = Instant::now();
    loop {
        let snapshot = client.snapshot(run_id).await;
        if let Some(child) = snapshot["childRuns"][0]["runId"].as_str() {
            return child.to_owned();
        }
        assert!(started.elapsed() < SPEC_DEADLINE, "no child run: {snapshot}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_child_run_has_its_own_log_and_links_to_its_parent() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let run_id = client.create(json!({"workflowId": "conformance-subworkflow-parent"})).await;
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed");
    assert_eq!(snapshot["variables"]["childOutcome"], "child-completed");
    let child = snapshot["childRuns"][0]["runId"].as_str().unwrap().to_owned();
    assert_eq!(snapshot["childRuns"][0]["status"], "completed");
    assert_ne!(child, run_id);
    let child_snapshot = client.snapshot(&child).await;
    assert_eq!(
        (child_snapshot["parentRunId"].as_str(), child_snapshot["parentNodeId"].as_str()),
        (Some(run_id.as_str()), Some("subwf-call"))
    );
    let child_events = client.events(&child).await;
    assert_log_well_formed(&child_events);
    assert_eq!(child_events[0]["runId"], json!(child));
    let parent_events = client.events(&run_id).await;
    assert_log_well_formed(&parent_events);
    let dispatched = parent_events.iter().find(|e| e["type"] == "node.dispatched").unwrap();
    assert_eq!(dispatched["payload"]["childRunId"], json!(child));
    let completed =
        parent_events.iter().find(|e| e["type"] == "node.completed" && e["nodeId"] == "subwf-call").unwrap();
    assert_eq!(completed["payload"]["outputs"], json!({"childRunId": child, "childStatus": "completed"}));
    host.stop().await;
}

#[tokio::test]
async fn input_mapping_seeds_the_child_over_its_defaults() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    register(&client, json!({"id": "echo-child", "name": "echo", "version": "1",
        "nodes": [{"id": "echo", "typeId": "core.identity", "inputs": {"greeting": {"type": "variable", "variableName": "greeting"}}}],
        "variables": [{"name": "greeting", "type": "string", "defaultValue": "baked-in"}, {"name": "other", "type": "string", "defaultValue": "kept"}]})).await;
    register(
        &client,
        parent(
            "mapper",
            "echo-child",
            json!({"inputMapping": {"greeting": "seed", "other": "unset"},
        "outputMapping": {"echoed": "greeting", "missing": "nothing"}}),
        ),
    )
    .await;
    let run_id = client.create(json!({"workflowId": "mapper", "inputs": {"seed": "hello"}})).await;
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed");
    assert_eq!(snapshot["variables"]["echoed"], "hello");
    assert!(snapshot["variables"].get("missing").is_none(), "an unset child variable is not mapped");
    let child = client.snapshot(snapshot["childRuns"][0]["runId"].as_str().unwrap()).await;
    assert_eq!(child["variables"]["greeting"], "hello", "the mapping overrides the default");
    assert_eq!(child["variables"]["other"], "kept", "an unset parent variable keeps the child's default, never null");
    host.stop().await;
}

#[tokio::test]
async fn a_failing_child_fails_the_parent_or_is_absorbed() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    register(&client, parent("strict", "conformance-failure", json!({"onChildFailure": "fail-parent"}))).await;
    register(&client, parent("lenient", "conformance-failure", json!({"onChildFailure": "absorb"}))).await;
    register(&client, parent("orphan", "no-such-workflow", json!({}))).await;

    let strict = client.create(json!({"workflowId": "strict"})).await;
    let snapshot = client.wait_terminal(&strict, SPEC_DEADLINE).await;
    assert_eq!(
        (snapshot["status"].as_str(), snapshot["error"]["code"].as_str()),
        (Some("failed"), Some("child_failed"))
    );
    assert_eq!(
        types(&client.events(&strict).await),
        ["run.started", "node.started", "node.dispatched", "node.failed", "run.failed"]
    );

    let lenient = client.create(json!({"workflowId": "lenient"})).await;
    let snapshot = client.wait_terminal(&lenient, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed");
    let events = client.events(&lenient).await;
    let call = events.iter().find(|e| e["type"] == "node.completed" && e["nodeId"] == "call").unwrap();
    assert_eq!(call["payload"]["outputs"]["childStatus"], "failed");

    let orphan = client.create(json!({"workflowId": "orphan"})).await;
    let snapshot = client.wait_terminal(&orphan, SPEC_DEADLINE).await;
    assert_eq!(snapshot["error"]["code"], "unknown_child_workflow");
    host.stop().await;
}

#[tokio::test]
async fn cancelling_a_parent_cancels_its_running_child_within_five_seconds() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    register(&client, parent("waits", "conformance-cancellable", json!({}))).await;
    let run_id = client.create(json!({"workflowId": "waits"})).await;
    let child = child_of(&client, &run_id).await;
    client.wait_status(&child, "running", SPEC_DEADLINE).await;
    let (status, body) = client.request("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("cancelled")), "a parent waiting on a child is parked");
    let child_snapshot = client.wait_terminal(&child, SPEC_DEADLINE).await;
    assert_eq!(child_snapshot["status"], "cancelled");
    let child_events = client.events(&child).await;
    let last = child_events.last().unwrap();
    assert_eq!(
        (last["payload"]["reason"].as_str(), last["payload"]["parentRunId"].as_str()),
        (Some("parent-cancelled"), Some(run_id.as_str()))
    );
    assert_log_well_formed(&child_events);
    assert_eq!(client.snapshot(&run_id).await["status"], "cancelled");
    host.stop().await;
}

#[tokio::test]
async fn a_workflow_that_calls_itself_stops_at_the_depth_limit() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    register(
        &client,
        json!({"id": "ouroboros", "name": "calls itself", "version": "1",
        "nodes": [{"id": "again", "typeId": "core.subWorkflow", "config": {"workflowId": "ouroboros"}}]}),
    )
    .await;
    let run_id = client.create(json!({"workflowId": "ouroboros"})).await;
    let snapshot = client.wait_terminal(&run_id, Duration::from_secs(30)).await;
    assert_eq!(
        (snapshot["status"].as_str(), snapshot["error"]["code"].as_str()),
        (Some("failed"), Some("child_failed"))
    );
    // Walk down the existing children: 32 levels below the top-level run, the next child is
    // refused (never created) and that deepest run failed with the depth limit.
    let mut current = run_id;
    let mut depth = 0;
    loop {
        let snapshot = client.snapshot(&current).await;
        let Some(child) = snapshot["childRuns"][0]["runId"].as_str() else { break };
        let (status, _) = client.request("GET", &format!("/v1/runs/{child}"), None).await;
        if status == 404 {
            assert_eq!(snapshot["error"]["code"], "subworkflow_depth_exceeded", "{snapshot}");
            break;
        }
        current = child.to_owned();
        depth += 1;
    }
    assert_eq!(depth, 32);
    host.stop().await;
}
