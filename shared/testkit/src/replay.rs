//! Replay scenarios played against any backend through [`Driver`]: the diff of two runs
//! (`GET /v1/runs/{runId}:diff?against=`, replay §6.5).

use serde_json::{json, Value};

use crate::script::Runner;
use crate::Driver;

/// The workflow the diff scenario runs: a two-node noop chain over a required input `x`.
pub fn diff_workflow() -> Value {
    json!({"id": "diff-chain", "name": "diff-chain",
           "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}],
           "edges": [{"id": "e", "sourceNodeId": "a", "targetNodeId": "b"}],
           "variables": [{"name": "x", "type": "number", "required": true}]})
}

async fn finished_run(driver: &mut dyn Driver, x: u64) -> String {
    let (status, created) =
        driver.call("POST", "/v1/runs", Some(json!({"workflowId": "diff-chain", "inputs": {"x": x}})), true).await;
    assert_eq!(status, 201, "{created}");
    let run_id = created["runId"].as_str().expect("a run id").to_owned();
    Runner::new(driver).await_terminal(&run_id).await;
    run_id
}

/// A run diffed against itself is identical; runs with other inputs part at `run.started`
/// (`eventDiffs[0].seq == divergedAtSeq`); `against` missing is `400` naming it; an unknown run
/// is `404`. Registers [`diff_workflow`] first; returns the two runs.
pub async fn diff_scenario(driver: &mut dyn Driver) -> (String, String) {
    let (status, body) = driver.call("POST", "/v1/workflows", Some(diff_workflow()), true).await;
    assert!(status == 201 || status == 200, "{body}");
    let one = finished_run(driver, 1).await;
    let two = finished_run(driver, 2).await;

    let (status, same) = driver.call("GET", &format!("/v1/runs/{one}:diff?against={one}"), None, true).await;
    assert_eq!(status, 200, "{same}");
    assert_eq!((same["a"].as_str(), same["b"].as_str()), (Some(one.as_str()), Some(one.as_str())));
    assert_eq!(same["divergedAtSeq"], Value::Null, "{same}");
    assert_eq!(same["eventDiffs"], json!([]));
    assert_eq!(same["truncated"], false);

    let (status, parted) = driver.call("GET", &format!("/v1/runs/{one}:diff?against={two}"), None, true).await;
    assert_eq!(status, 200, "{parted}");
    assert_eq!(parted["divergedAtSeq"], 0, "the inputs differ from run.started on: {parted}");
    assert_eq!(parted["eventDiffs"][0]["seq"], parted["divergedAtSeq"]);
    assert_eq!(parted["eventDiffs"][0]["op"], "changed");
    assert_eq!(parted["eventDiffs"][0]["aEvent"]["type"], "run.started");
    assert_eq!(parted["eventDiffs"][0]["bEvent"]["runId"], two.as_str());
    assert_eq!(parted["stateDiff"]["variables"]["changed"], json!(["x"]), "{parted}");

    let (status, missing) = driver.call("GET", &format!("/v1/runs/{one}:diff"), None, true).await;
    assert_eq!((status, missing["error"].as_str()), (400, Some("validation_error")), "{missing}");
    assert_eq!(missing["details"]["field"], "against");
    let (status, unknown) = driver.call("GET", &format!("/v1/runs/{one}:diff?against=run-nope"), None, true).await;
    assert_eq!(status, 404, "{unknown}");
    let (status, _) = driver.call("GET", &format!("/v1/runs/{one}:diff?against={two}"), None, false).await;
    assert_eq!(status, 401, "runs:read is required");
    (one, two)
}
