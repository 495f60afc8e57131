//! End to end against a real listener: the embedded host in this process, a real HTTP
//! client. Spec deadlines (5 s to complete, 5 s to cancel) are checked as bounded waits; the
//! diff of two runs.

mod common;

use std::time::Duration;

use common::{assert_log_well_formed, serve_args, start, types, write_keys_file, Client, Reference, KEY};
use serde_json::{json, Value};

const SPEC_DEADLINE: Duration = Duration::from_secs(5);

/// `GET /v1/runs/{runId}:diff?against=` (replay §6.5): the testkit's scenario, which the
/// emulated AWS suite plays too.
#[tokio::test]
async fn two_runs_are_diffed_by_event_and_by_state() {
    let host = start(serve_args(None)).await;
    let mut driver = trellis_testkit::HttpDriver::new(format!("http://{}", host.addr), KEY);
    let (one, two) = trellis_testkit::replay::diff_scenario(&mut driver).await;
    // `trellis runs diff` shows the same for people.
    let output = common::trellis_cli(&format!("http://{}", host.addr), KEY, &["runs", "diff", &one, &two]).await;
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{shown}{}", String::from_utf8_lossy(&output.stderr));
    assert!(shown.contains("part at event 0") && shown.contains("run.started"), "{shown}");
    assert!(shown.contains("variables differ: x"), "{shown}");
    host.stop().await;
}

#[tokio::test]
async fn noop_completes_within_five_seconds() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let run_id = client.create(json!({"workflowId": "conformance-noop"})).await;
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "completed");
    let events = client.events(&run_id).await;
    assert_eq!(types(&events), ["run.started", "node.started", "node.completed", "run.completed"]);
    assert_log_well_formed(&events);
    host.stop().await;
}

#[tokio::test]
async fn multi_node_emits_node_events_in_order() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let run_id = client.create(json!({"workflowId": "conformance-multi-node"})).await;
    client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    let events = client.events(&run_id).await;
    let node_events: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("node."))
        .map(|e| (e["type"].as_str().unwrap().to_owned(), e["nodeId"].as_str().unwrap().to_owned()))
        .collect();
    let expected: Vec<(String, String)> = ["a", "b", "c"]
        .iter()
        .flat_map(|n| [("node.started".to_owned(), n.to_string()), ("node.completed".to_owned(), n.to_string())])
        .collect();
    assert_eq!(node_events, expected);
    assert_eq!(events.first().unwrap()["type"], "run.started");
    assert_eq!(events.last().unwrap()["type"], "run.completed");
    assert_log_well_formed(&events);
    host.stop().await;
}

#[tokio::test]
async fn failing_workflow_ends_failed_with_an_error_object() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let run_id = client.create(json!({"workflowId": "conformance-failure"})).await;
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "failed");
    assert_eq!(
        snapshot["error"],
        json!({"code": "conformance_test_failure", "message": "Intentional conformance failure"})
    );
    let events = client.events(&run_id).await;
    assert_eq!(types(&events), ["run.started", "node.started", "node.failed", "run.failed"]);
    assert_eq!(events[2]["payload"]["error"]["code"], "conformance_test_failure");
    assert_eq!(events[3]["payload"]["failedNodeId"], "fail");
    host.stop().await;
}

#[tokio::test]
async fn cancel_mid_delay_reaches_cancelled_within_five_seconds() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let run_id = client.create(json!({"workflowId": "conformance-cancellable", "inputs": {"delayMs": 60000}})).await;
    client.wait_status(&run_id, "running", SPEC_DEADLINE).await;
    // Wait until the delay node is parked, so the cancel runs inside the request.
    let started = std::time::Instant::now();
    while !types(&client.events(&run_id).await).contains(&"node.started".to_owned()) {
        assert!(started.elapsed() < SPEC_DEADLINE);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, body) =
        client.request("POST", &format!("/v1/runs/{run_id}/cancel"), Some(json!({"reason": "test"}))).await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "cancelled", "a parked run is cancelled inside the request");
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], "cancelled");
    let events = client.events(&run_id).await;
    assert_eq!(types(&events)[events.len() - 2..], ["node.cancelled", "run.cancelled"]);
    assert_log_well_formed(&events);
    let (_, again) = client.request("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
    assert_eq!(again, json!({"runId": run_id, "status": "cancelled", "alreadyTerminal": true}));
    host.stop().await;
}

#[tokio::test]
async fn cancel_right_after_create_goes_through_cancelling_and_finishes_within_five_seconds() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let mut saw_cancelling = false;
    for _ in 0..20 {
        let run_id =
            client.create(json!({"workflowId": "conformance-cancellable", "inputs": {"delayMs": 60000}})).await;
        let (status, body) = client.request("POST", &format!("/v1/runs/{run_id}:cancel"), None).await;
        assert_eq!(status, 200);
        assert!(matches!(body["status"].as_str(), Some("cancelling" | "cancelled")), "{body}");
        saw_cancelling |= body["status"] == "cancelling";
        let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
        assert_eq!(snapshot["status"], "cancelled");
        assert_log_well_formed(&client.events(&run_id).await);
    }
    eprintln!("cancelling observed: {saw_cancelling}");
    host.stop().await;
}

#[tokio::test]
async fn long_poll_returns_when_the_next_event_lands() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let run_id = client.create(json!({"workflowId": "conformance-delay", "inputs": {"delayMs": 400}})).await;
    let started = std::time::Instant::now();
    let mut cursor = -1i64;
    let mut seen = Vec::new();
    loop {
        let (status, page) = client
            .request("GET", &format!("/v1/runs/{run_id}/events/poll?lastSequence={cursor}&timeout=10"), None)
            .await;
        assert_eq!(status, 200);
        let events = page["events"].as_array().unwrap().clone();
        if let Some(last) = events.last() {
            cursor = last["sequence"].as_i64().unwrap();
        }
        seen.extend(events);
        if page["isComplete"] == true {
            break;
        }
        assert!(started.elapsed() < SPEC_DEADLINE, "long-poll did not deliver the terminal event");
    }
    assert_eq!(types(&seen), ["run.started", "node.started", "node.completed", "run.completed"]);
    assert_log_well_formed(&seen);
    host.stop().await;
}

#[tokio::test]
async fn tenants_are_isolated_across_keys_from_a_keys_file() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys_file(
        dir.path(),
        &[("acme-key", "acme", &["*"]), ("globex-key", "globex", &["runs:read", "runs:cancel"])],
    );
    let mut args = serve_args(None);
    args.keys_file = Some(keys);
    let host = start(args).await;
    let base = format!("http://{}", host.addr);
    let acme = Client::new(&base, "acme-key");
    let globex = Client::new(&base, "globex-key");
    let run_id = acme.create(json!({"workflowId": "conformance-cancellable", "inputs": {"delayMs": 60000}})).await;
    for (method, path) in [("GET", format!("/v1/runs/{run_id}")), ("POST", format!("/v1/runs/{run_id}/cancel"))] {
        let (status, body) = globex.request(method, &path, None).await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_eq!(body["error"], "not_found");
    }
    assert_eq!(acme.snapshot(&run_id).await["status"], "running");
    let (status, body) = globex.request("POST", "/v1/runs", Some(json!({"workflowId": "conformance-noop"}))).await;
    assert_eq!((status, body["details"]["scopeRequired"].as_str()), (403, Some("runs:create")));
    host.stop().await;
}

#[tokio::test]
async fn invalid_definitions_in_a_workflow_directory_are_refused_and_valid_ones_served() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, value: Value| std::fs::write(dir.path().join(name), value.to_string()).unwrap();
    write(
        "cyclic.json",
        json!({"id": "cyclic", "name": "Cyclic",
        "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}],
        "edges": [{"id": "1", "sourceNodeId": "a", "targetNodeId": "b"}, {"id": "2", "sourceNodeId": "b", "targetNodeId": "a"}]}),
    );
    write(
        "dangling.json",
        json!({"id": "dangling", "name": "Dangling", "nodes": [{"id": "a", "typeId": "core.noop"}],
        "edges": [{"id": "1", "sourceNodeId": "a", "targetNodeId": "ghost"}]}),
    );
    write(
        "good.json",
        json!({"id": "good", "name": "Good", "nodes": [{"id": "a", "typeId": "core.identity",
        "inputs": {"payload": {"type": "variable", "variableName": "payload"}}}]}),
    );
    std::fs::write(dir.path().join("broken.json"), "{ not json").unwrap();
    let mut args = serve_args(None);
    args.workflows = vec![dir.path().to_path_buf()];
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    for id in ["cyclic", "dangling"] {
        let (status, body) = client.request("GET", &format!("/v1/workflows/{id}"), None).await;
        assert_eq!((status, body["error"].as_str()), (404, Some("not_found")), "{id}");
        let (status, _) = client.request("POST", "/v1/runs", Some(json!({"workflowId": id}))).await;
        assert_eq!(status, 404, "{id}");
    }
    let run_id = client.create(json!({"workflowId": "good", "inputs": {"payload": {"k": 1}}})).await;
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["variables"]["payload"], json!({"k": 1}));
    host.stop().await;
}

#[tokio::test]
async fn wire_documents_match_the_official_schemas() {
    let Some(reference) = Reference::load("wire_documents_match_the_official_schemas") else { return };
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    reference.assert_invalid("error-envelope.schema.json", &json!({"error": "x", "message": "m", "requestId": "r"}));
    reference.assert_invalid(
        "run-event.schema.json",
        &json!({"eventId": "e", "runId": "r", "type": "core.bad", "payload": {}, "timestamp": "t", "sequence": 0}),
    );
    let discovery: Value = reqwest::get(format!("{base}/.well-known/openwop")).await.unwrap().json().await.unwrap();
    reference.assert_valid("capabilities.schema.json", &discovery);
    for workflow in ["conformance-multi-node", "conformance-failure", "conformance-identity"] {
        let inputs = if workflow == "conformance-identity" { json!({"payload": {"a": 1}}) } else { json!({}) };
        let run_id = client.create(json!({"workflowId": workflow, "inputs": inputs})).await;
        let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
        reference.assert_valid("run-snapshot.schema.json", &snapshot);
        for event in client.events(&run_id).await {
            reference.assert_valid("run-event.schema.json", &event);
        }
    }
    let cancellable = client.create(json!({"workflowId": "conformance-cancellable"})).await;
    client.request("POST", &format!("/v1/runs/{cancellable}/cancel"), None).await;
    reference.assert_valid("run-snapshot.schema.json", &client.snapshot(&cancellable).await);
    for (method, path, body) in [
        ("POST", "/v1/runs", Some(json!({"workflowId": 1}))),
        ("POST", "/v1/runs", Some(json!({"workflowId": "ghost"}))),
        ("GET", "/v1/runs/ghost", None),
        ("GET", "/v1/nowhere", None),
        ("DELETE", "/v1/runs", None),
    ] {
        let (status, envelope) = client.request(method, path, body).await;
        assert!(status >= 400);
        reference.assert_valid("error-envelope.schema.json", &envelope);
    }
    let (status, unauthenticated) = Client::new(&base, "nope").request("GET", "/v1/runs/x", None).await;
    assert_eq!(status, 401);
    reference.assert_valid("error-envelope.schema.json", &unauthenticated);
    host.stop().await;
}

#[tokio::test]
async fn shipped_examples_run() {
    let mut args = serve_args(None);
    args.workflows = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/workflows")];
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let node_types = |events: &[Value], node: &str| -> Vec<String> {
        events.iter().filter(|e| e["nodeId"] == node).map(|e| e["type"].as_str().unwrap().to_owned()).collect()
    };

    let large = client.create(json!({"workflowId": "order-review", "inputs": {"amount": 5000, "tier": "large"}})).await;
    let small = client.create(json!({"workflowId": "order-review", "inputs": {"amount": 20}})).await;
    let fan = client.create(json!({"workflowId": "fan-out"})).await;
    let reminder = client.create(json!({"workflowId": "reminder", "inputs": {"delayMs": 100, "message": "hi"}})).await;
    for run_id in [&large, &small, &fan, &reminder] {
        assert_eq!(client.wait_terminal(run_id, SPEC_DEADLINE).await["status"], "completed", "{run_id}");
        assert_log_well_formed(&client.events(run_id).await);
    }
    let events = client.events(&large).await;
    assert_eq!(node_types(&events, "fast-track"), ["node.skipped"]);
    assert_eq!(node_types(&events, "manual-review"), ["node.started", "node.completed"]);
    assert_eq!(node_types(&events, "record"), ["node.started", "node.completed"]);
    let events = client.events(&small).await;
    assert_eq!(node_types(&events, "manual-review"), ["node.skipped"]);
    assert_eq!(node_types(&events, "fast-track"), ["node.started", "node.completed"]);
    let events = client.events(&fan).await;
    let join_start = events.iter().position(|e| e["type"] == "node.started" && e["nodeId"] == "join").unwrap();
    for branch in ["quick", "slow", "echo"] {
        let done = events.iter().position(|e| e["type"] == "node.completed" && e["nodeId"] == branch).unwrap();
        assert!(done < join_start, "{branch} must finish before the join starts");
    }
    assert_eq!(client.snapshot(&reminder).await["variables"]["message"], "hi");

    let expense = client.create(json!({"workflowId": "expense-approval"})).await;
    client.wait_status(&expense, "waiting-input", SPEC_DEADLINE).await;
    let answer = |purpose: &str| json!({"resumeValue": {"answers": {"purpose": purpose}}});
    let (status, _) = client.request("POST", &format!("/v1/runs/{expense}/interrupts/ask"), Some(answer("x"))).await;
    assert_eq!(status, 400, "the question's schema wants three characters or more");
    let (status, _) =
        client.request("POST", &format!("/v1/runs/{expense}/interrupts/ask"), Some(answer("team dinner"))).await;
    assert_eq!(status, 200);
    client.wait_status(&expense, "waiting-approval", SPEC_DEADLINE).await;
    for voter in ["ana", "ben"] {
        let vote = json!({"resumeValue": {"action": "accept", "voter": voter}});
        assert_eq!(client.request("POST", &format!("/v1/runs/{expense}/interrupts/approve"), Some(vote)).await.0, 200);
    }
    assert_eq!(client.wait_terminal(&expense, SPEC_DEADLINE).await["status"], "completed");
    assert_eq!(node_types(&client.events(&expense).await, "book"), ["node.started", "node.completed"]);
    host.stop().await;
}
