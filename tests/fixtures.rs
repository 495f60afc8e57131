//! The fixture expectation table (`conformance/fixture-expectations.json`) run against a
//! live embedded host: every entry's terminal status, error code, event sequence and
//! variables. With `OPENWOP_REFERENCE_DIR`, every official fixture file must load.

mod common;

use std::time::Duration;

use common::{assert_log_well_formed, serve_args, start, types, Client, Reference, KEY};
use serde_json::{json, Value};
use trellis_core::bundled;

const SPEC_DEADLINE: Duration = Duration::from_secs(5);

/// `expected` is contained in `actual` (objects by key, everything else by equality).
fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(actual), Value::Object(expected)) => {
            expected.iter().all(|(key, value)| actual.get(key).is_some_and(|found| contains(found, value)))
        }
        _ => actual == expected,
    }
}

async fn run_entry(client: &Client, entry: &Value) {
    let id = entry["id"].as_str().unwrap();
    let mut request = entry["request"].clone();
    request["workflowId"] = json!(id);
    let expect = &entry["expect"];
    let run_id = client.create(request).await;
    if expect["observeRunning"] == true {
        client.wait_status(&run_id, "running", SPEC_DEADLINE).await;
    }
    if entry["cancelWhenRunning"] == true {
        let started = std::time::Instant::now();
        while !types(&client.events(&run_id).await).iter().any(|t| t == "node.started") {
            assert!(started.elapsed() < SPEC_DEADLINE, "{id}: node never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (status, _) = client.request("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
        assert_eq!(status, 200, "{id}");
    }
    let snapshot = client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    assert_eq!(snapshot["status"], expect["status"], "{id}: {snapshot}");
    if let Some(code) = expect.get("errorCode") {
        assert_eq!(&snapshot["error"]["code"], code, "{id}: {snapshot}");
        assert!(snapshot["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{id}");
    }
    let events = client.events(&run_id).await;
    assert_log_well_formed(&events);
    if let Some(expected) = expect.get("eventTypes") {
        assert_eq!(json!(types(&events)), *expected, "{id}");
    }
    if let Some(order) = expect.get("completedNodeOrder") {
        let completed: Vec<Value> =
            events.iter().filter(|e| e["type"] == "node.completed").map(|e| e["nodeId"].clone()).collect();
        assert_eq!(json!(completed), *order, "{id}");
    }
    if let Some(variables) = expect.get("variables") {
        assert!(contains(&snapshot["variables"], variables), "{id}: {}", snapshot["variables"]);
    }
    for wanted in expect.get("events").and_then(Value::as_array).into_iter().flatten() {
        let found = events
            .iter()
            .any(|event| event["type"] == wanted["type"] && contains(&event["payload"], &wanted["payload"]));
        assert!(found, "{id}: no {wanted} in {events:?}");
    }
    if id == "conformance-run-duration-breach" {
        let breach = events.iter().find(|e| e["type"] == "cap.breached").unwrap();
        assert!(breach["payload"]["observed"].as_u64().unwrap() > 1000, "observed must exceed the limit");
    }
}

#[tokio::test]
async fn every_expectation_table_entry_holds_and_is_advertised() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let table: Value = serde_json::from_str(bundled::EXPECTATIONS).unwrap();
    let entries = table["fixtures"].as_array().unwrap();
    assert!(!entries.is_empty());
    let discovery: Value = reqwest::get(format!("{base}/.well-known/openwop")).await.unwrap().json().await.unwrap();
    let advertised: Vec<Value> = entries.iter().map(|entry| entry["id"].clone()).collect();
    assert_eq!(discovery["fixtures"], json!(advertised), "discovery advertises exactly the table");
    for entry in entries {
        run_entry(&client, entry).await;
    }
    host.stop().await;
}

#[tokio::test]
async fn every_official_fixture_file_loads() {
    let Some(reference) = Reference::load("every_official_fixture_file_loads") else { return };
    let fixtures_dir = reference.dir.join("fixtures");
    let mut args = serve_args(None);
    args.fixtures_dir = Some(fixtures_dir.clone());
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let mut checked = 0;
    for entry in std::fs::read_dir(&fixtures_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let document: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let id = document["id"].as_str().unwrap();
        let (status, stored) = client.request("GET", &format!("/v1/workflows/{id}"), None).await;
        assert_eq!(status, 200, "{} did not load", path.display());
        assert_eq!(stored, document, "{id} is served verbatim");
        checked += 1;
    }
    assert!(checked >= 9, "only {checked} fixture files found");
    for (name, text) in bundled::FIXTURES {
        let official: Value = serde_json::from_str(&std::fs::read_to_string(fixtures_dir.join(name)).unwrap()).unwrap();
        let vendored: Value = serde_json::from_str(text).unwrap();
        assert_eq!(vendored, official, "vendored {name} differs from the official copy");
    }
    host.stop().await;
}
