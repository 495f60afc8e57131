//! The fixture expectation table (`conformance/fixture-expectations.json`) and the scripted
//! scenarios (`conformance/scenarios.json`) run against a live embedded host through the
//! testkit's script runner: steps (awaits, resolutions, cancels, pauses) and every entry's
//! terminal status, error code, event sequence and variables. With `OPENWOP_REFERENCE_DIR`,
//! every official fixture file must load. The emulated AWS suite runs the same scripts.

mod common;

use common::{serve_args, start, Client, Reference, KEY};
use serde_json::{json, Value};
use trellis_core::bundled;
use trellis_testkit::script::Runner;
use trellis_testkit::HttpDriver;

/// `conformance/scenarios.json`: scripted scenarios beyond the fixture table.
const SCENARIOS: &str = include_str!("../conformance/scenarios.json");

/// Bundled fixtures the reference copy does not hold: Trellis's own
/// `conformance-replay-effect`, and `conformance-replay-side-effect`, vendored from a newer
/// catalog than the reference snapshot (conformance/fixtures/NOTICE.md).
const NOT_IN_REFERENCE: [&str; 2] = ["conformance-replay-effect.json", "conformance-replay-side-effect.json"];

#[tokio::test]
async fn every_expectation_table_entry_holds_and_is_advertised() {
    let mut args = serve_args(None);
    args.test_seams = true;
    let host = start(args).await;
    let base = format!("http://{}", host.addr);
    let table: Value = serde_json::from_str(bundled::EXPECTATIONS).unwrap();
    let entries = table["fixtures"].as_array().unwrap();
    assert!(!entries.is_empty());
    let discovery: Value = reqwest::get(format!("{base}/.well-known/openwop")).await.unwrap().json().await.unwrap();
    let advertised: Vec<Value> = entries.iter().map(|entry| entry["id"].clone()).collect();
    assert_eq!(discovery["fixtures"], json!(advertised), "discovery advertises exactly the table");
    let mut driver = HttpDriver::new(&base, KEY);
    let mut runner = Runner::new(&mut driver);
    for entry in entries {
        runner.run(entry).await;
    }
    host.stop().await;
}

#[tokio::test]
async fn every_scripted_scenario_holds() {
    let mut args = serve_args(None);
    args.test_seams = true;
    let host = start(args).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let scenarios: Value = serde_json::from_str(SCENARIOS).unwrap();
    for workflow in scenarios["workflows"].as_array().unwrap() {
        let (status, body) = client.request("POST", "/v1/workflows", Some(workflow.clone())).await;
        assert_eq!(status, 201, "{body}");
    }
    let mut driver = HttpDriver::new(&base, KEY);
    let mut runner = Runner::new(&mut driver);
    for scenario in scenarios["scenarios"].as_array().unwrap() {
        runner.run(scenario).await;
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
        let path = fixtures_dir.join(name);
        if !path.exists() && NOT_IN_REFERENCE.contains(name) {
            continue;
        }
        let official: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let vendored: Value = serde_json::from_str(text).unwrap();
        assert_eq!(vendored, official, "vendored {name} differs from the official copy");
    }
    host.stop().await;
}
