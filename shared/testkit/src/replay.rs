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

/// `(type, nodeId)` of each event: the part of a log that two runs of one workflow (a run and
/// its replay, or the same scenario on two backends) share.
pub fn shape(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (e["type"].as_str().unwrap_or_default().to_owned(), e["nodeId"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// Starts `workflow_id` with `inputs` and waits for it to end; its id.
async fn run_to_end(driver: &mut dyn Driver, workflow_id: &str, inputs: Value) -> String {
    let body = json!({"workflowId": workflow_id, "inputs": inputs});
    let (status, created) = driver.call("POST", "/v1/runs", Some(body), true).await;
    assert_eq!(status, 201, "{created}");
    let run_id = created["runId"].as_str().expect("a run id").to_owned();
    Runner::new(driver).await_terminal(&run_id).await;
    run_id
}

/// Forks `source` with `body`; the `201` body.
pub async fn fork(driver: &mut dyn Driver, source: &str, body: Value) -> Value {
    let (status, forked) = driver.call("POST", &format!("/v1/runs/{source}:fork"), Some(body), true).await;
    assert_eq!(status, 201, "{forked}");
    forked
}

/// Every row of replay §6.1 on a finished `conformance-multi-node` run: a replay and a branch
/// fork from 0 complete with the source's log shape, a fork's body names its source, mode
/// and point; a branch at `node.completed(b) + 1` keeps the tail (`replay-fork-arbitrary`);
/// two replays have the same shape (`replayDeterminism`); a negative or fractional
/// `fromSeq`, a branch without one and a replay with an overlay are `400` naming the field;
/// `99999` is `422 fork_point_invalid`; an unknown run is `404`; no key is `401`.
pub async fn fork_rows(driver: &mut dyn Driver) {
    let source = run_to_end(driver, "conformance-multi-node", json!({})).await;
    let source_events = Runner::new(driver).events(&source).await;

    let replay = fork(driver, &source, json!({"mode": "replay", "fromSeq": 0})).await;
    assert_eq!((replay["sourceRunId"].as_str(), replay["mode"].as_str()), (Some(source.as_str()), Some("replay")));
    assert_eq!(replay["fromSeq"], 0);
    let replay_id = replay["runId"].as_str().expect("a run id").to_owned();
    assert_ne!(replay_id, source);
    assert!(replay["eventsUrl"].as_str().is_some_and(|url| url.contains(&replay_id)), "{replay}");
    let done = Runner::new(driver).await_terminal(&replay_id).await;
    assert_eq!(done["status"], "completed");
    let replay_events = Runner::new(driver).events(&replay_id).await;
    assert_eq!(shape(&replay_events), shape(&source_events), "a replay re-tells the source");
    for (copy, original) in replay_events.iter().zip(&source_events) {
        assert_eq!(copy["sequence"], original["sequence"]);
        if copy["type"] == "run.started" || copy["type"] == "node.started" {
            assert_eq!(copy["payload"], original["payload"], "the copied prefix is the source's");
        }
    }
    let second = fork(driver, &source, json!({"mode": "replay"})).await;
    let second_id = second["runId"].as_str().unwrap().to_owned();
    Runner::new(driver).await_terminal(&second_id).await;
    assert_eq!(
        shape(&Runner::new(driver).events(&second_id).await),
        shape(&replay_events),
        "replays are deterministic"
    );

    let branch = fork(driver, &source, json!({"mode": "branch", "fromSeq": 0, "runOptionsOverlay": {}})).await;
    let branch_id = branch["runId"].as_str().unwrap().to_owned();
    assert_eq!(Runner::new(driver).await_terminal(&branch_id).await["status"], "completed");

    let after_b = source_events
        .iter()
        .find(|e| e["type"] == "node.completed" && e["nodeId"] == "b")
        .and_then(|e| e["sequence"].as_u64())
        .expect("b completed")
        + 1;
    let arbitrary = fork(driver, &source, json!({"mode": "branch", "fromSeq": after_b})).await;
    let arbitrary_id = arbitrary["runId"].as_str().unwrap().to_owned();
    Runner::new(driver).await_terminal(&arbitrary_id).await;
    let tail = Runner::new(driver).events(&arbitrary_id).await;
    assert_eq!(shape(&tail), shape(&source_events), "the tail after b matches the source's, and so does the prefix");

    // An overlay applies to a branch; its run options show in `run.started`, where the branch
    // departs from its source (recorded once, then execution goes on).
    let tagged =
        fork(driver, &source, json!({"mode": "branch", "fromSeq": after_b, "runOptionsOverlay": {"tags": ["from-b"]}}))
            .await;
    let tagged_id = tagged["runId"].as_str().unwrap().to_owned();
    let snapshot = Runner::new(driver).await_terminal(&tagged_id).await;
    assert_eq!((snapshot["status"].as_str(), &snapshot["tags"]), (Some("completed"), &json!(["from-b"])), "{snapshot}");
    let tagged_events = Runner::new(driver).events(&tagged_id).await;
    let diverged: Vec<&Value> = tagged_events.iter().filter(|e| e["type"] == "replay.diverged").collect();
    assert_eq!(diverged.len(), 1, "{tagged_events:?}");
    assert_eq!(
        (diverged[0]["payload"]["atSequence"].as_u64(), diverged[0]["payload"]["divergenceKind"].as_str()),
        (Some(0), Some("output"))
    );

    for (body, field) in [
        (json!({"mode": "branch", "fromSeq": -1}), "fromSeq"),
        (json!({"mode": "replay", "fromSeq": 1.5}), "fromSeq"),
        (json!({"mode": "branch"}), "fromSeq"),
        (
            json!({"mode": "replay", "fromSeq": 0, "runOptionsOverlay": {"configurable": {"recursionLimit": 50}}}),
            "runOptionsOverlay",
        ),
        (json!({"fromSeq": 0}), "mode"),
    ] {
        let (status, refused) = driver.call("POST", &format!("/v1/runs/{source}:fork"), Some(body.clone()), true).await;
        assert_eq!((status, refused["error"].as_str()), (400, Some("validation_error")), "{body}: {refused}");
        assert_eq!(refused["details"]["field"], field, "{refused}");
    }
    let (status, past) = driver
        .call("POST", &format!("/v1/runs/{source}:fork"), Some(json!({"mode": "replay", "fromSeq": 99999})), true)
        .await;
    assert_eq!((status, past["error"].as_str()), (422, Some("fork_point_invalid")), "{past}");
    let (status, unknown) = driver
        .call("POST", "/v1/runs/openwop-conformance-no-such-run-id:fork", Some(json!({"mode": "replay"})), true)
        .await;
    assert_eq!(status, 404, "{unknown}");
    let (status, _) =
        driver.call("POST", &format!("/v1/runs/{source}:fork"), Some(json!({"mode": "replay"})), false).await;
    assert_eq!(status, 401);
}

/// A replay of a run cancelled before its side-effecting node: the hold re-runs live, the
/// fork records `replay.diverged` where the source was cancelled, and the effect node fails
/// closed with `replay_source_missing` without completing (`replay-side-effect-suppression`).
pub async fn unreached_effect_fails_closed(driver: &mut dyn Driver) {
    let body = json!({"workflowId": "conformance-replay-side-effect", "inputs": {"delayMs": 400}});
    let (status, created) = driver.call("POST", "/v1/runs", Some(body), true).await;
    assert_eq!(status, 201, "{created}");
    let source = created["runId"].as_str().unwrap().to_owned();
    let (status, cancelled) = driver.call("POST", &format!("/v1/runs/{source}:cancel"), Some(json!({})), true).await;
    assert_eq!(status, 200, "{cancelled}");
    Runner::new(driver).await_terminal(&source).await;
    let source_events = Runner::new(driver).events(&source).await;
    assert!(!source_events.iter().any(|e| e["type"] == "node.completed" && e["nodeId"] == "effect"));

    let forked = fork(driver, &source, json!({"mode": "replay"})).await;
    let fork_id = forked["runId"].as_str().unwrap().to_owned();
    let done = Runner::new(driver).await_terminal(&fork_id).await;
    assert_eq!(done["status"], "failed", "{done}");
    let events = Runner::new(driver).events(&fork_id).await;
    let effect: Vec<&Value> = events.iter().filter(|e| e["nodeId"] == "effect").collect();
    assert!(!effect.iter().any(|e| e["type"] == "node.completed"), "a replay performed the effect: {effect:?}");
    assert!(
        effect.iter().any(|e| e["type"] == "node.failed" && e["payload"]["error"]["code"] == "replay_source_missing"),
        "{effect:?}"
    );
    let diverged: Vec<&Value> = events.iter().filter(|e| e["type"] == "replay.diverged").collect();
    assert_eq!(diverged.len(), 1, "one divergence is recorded: {events:?}");
    let payload = &diverged[0]["payload"];
    assert_eq!(payload["sourceRunId"], source.as_str());
    let at = payload["atSequence"].as_u64().expect("atSequence");
    let at = usize::try_from(at).unwrap();
    assert_ne!(
        source_events.get(at).map(|e| &e["type"]),
        events.get(at).map(|e| &e["type"]),
        "the source was cancelled where the fork went on: {events:?}"
    );
    assert!(["output", "type-mismatch", "extra", "missing"].contains(&payload["divergenceKind"].as_str().unwrap()));
}

/// A two-node noop chain, `settings.retention` as given (or none).
pub fn retention_workflow(id: &str, retention: Option<&str>) -> Value {
    let mut workflow = json!({"id": id, "name": id,
           "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}],
           "edges": [{"id": "e", "sourceNodeId": "a", "targetNodeId": "b"}]});
    if let Some(retention) = retention {
        workflow["settings"] = json!({"retention": retention});
    }
    workflow
}

async fn register(driver: &mut dyn Driver, workflow: Value) {
    let (status, body) = driver.call("POST", "/v1/workflows", Some(workflow), true).await;
    assert!(status == 201 || status == 200, "{body}");
}

async fn listed(driver: &mut dyn Driver, workflow_id: &str) -> Vec<String> {
    let (status, body) = driver.call("GET", &format!("/v1/runs?workflowId={workflow_id}&limit=100"), None, true).await;
    assert_eq!(status, 200, "{body}");
    body["runs"].as_array().into_iter().flatten().filter_map(|run| run["runId"].as_str().map(str::to_owned)).collect()
}

/// Retention, delete and prune, the same on every backend: a run past its retention
/// (`configurable.retention`, and a workflow's `settings.retention`) is gone from reads, the
/// event log, lists and diffs, and a fork of it is `410 history_expired` naming the source,
/// the fork point and the boundary (a rerun of it `410` too); a live run is not rerun (`409`)
/// and is deleted only with `force`; a parent goes
/// with its child; a prune preview lists exactly what the same prune then deletes, the
/// newest `keep` stay; bad requests are `400` naming the field. Returns the expired run.
pub async fn retention_scenario(driver: &mut dyn Driver) -> String {
    register(driver, retention_workflow("retention-kept", None)).await;
    register(driver, retention_workflow("retention-brief", Some("1s"))).await;
    let (status, refused) =
        driver.call("POST", "/v1/workflows", Some(retention_workflow("retention-bad", Some("1w"))), true).await;
    assert_eq!((status, refused["details"]["path"].as_str()), (400, Some("/settings/retention")), "{refused}");

    let brief = run_to_end(driver, "retention-brief", json!({})).await;
    let (status, created) = driver
        .call(
            "POST",
            "/v1/runs",
            Some(json!({"workflowId": "retention-kept", "configurable": {"retention": "1s"}})),
            true,
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let per_run = created["runId"].as_str().unwrap().to_owned();
    Runner::new(driver).await_terminal(&per_run).await;
    let kept = run_to_end(driver, "retention-kept", json!({})).await;
    let (status, bad) = driver
        .call(
            "POST",
            "/v1/runs",
            Some(json!({"workflowId": "retention-kept", "configurable": {"retention": "soon"}})),
            true,
        )
        .await;
    assert_eq!((status, bad["details"]["field"].as_str()), (400, Some("configurable.retention")), "{bad}");

    tokio::time::sleep(std::time::Duration::from_millis(1_300)).await;
    for expired in [&brief, &per_run] {
        let (status, _) = driver.call("GET", &format!("/v1/runs/{expired}"), None, true).await;
        assert_eq!(status, 404, "{expired} is past its retention");
        let (status, _) = driver.call("GET", &format!("/v1/runs/{expired}/events/poll?timeout=0"), None, true).await;
        assert_eq!(status, 404, "its events are gone too");
        let (status, _) = driver.call("GET", &format!("/v1/runs/{kept}:diff?against={expired}"), None, true).await;
        assert_eq!(status, 404);
    }
    assert!(listed(driver, "retention-brief").await.is_empty(), "an expired run is not listed");
    assert_eq!(listed(driver, "retention-kept").await, std::slice::from_ref(&kept), "only the kept run is listed");
    let (status, gone) = driver
        .call("POST", &format!("/v1/runs/{brief}:fork"), Some(json!({"mode": "replay", "fromSeq": 1})), true)
        .await;
    assert_eq!((status, gone["error"].as_str()), (410, Some("history_expired")), "{gone}");
    assert_eq!(
        (gone["details"]["sourceRunId"].as_str(), gone["details"]["fromSeq"].as_u64()),
        (Some(brief.as_str()), Some(1))
    );
    assert!(gone["details"]["retentionBoundary"].is_string(), "{gone}");
    let (status, gone) = driver.call("POST", &format!("/v1/runs/{brief}:rerun"), Some(json!({})), true).await;
    assert_eq!((status, gone["error"].as_str()), (410, Some("history_expired")), "a rerun of it too: {gone}");
    let (status, _) = driver.call("GET", &format!("/v1/runs/{kept}"), None, true).await;
    assert_eq!(status, 200, "a run without a retention stays");

    // Delete: a live run only with force; a parent with its child.
    let (status, created) = driver
        .call("POST", "/v1/runs", Some(json!({"workflowId": "conformance-delay", "inputs": {"delayMs": 60000}})), true)
        .await;
    assert_eq!(status, 201, "{created}");
    let live = created["runId"].as_str().unwrap().to_owned();
    let (status, refused) = driver.call("POST", &format!("/v1/runs/{live}:rerun"), Some(json!({})), true).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("run_state_conflict")), "a run not ended: {refused}");
    let (status, refused) = driver.call("DELETE", &format!("/v1/runs/{live}"), None, true).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("run_state_conflict")), "{refused}");
    let (status, deleted) = driver.call("DELETE", &format!("/v1/runs/{live}?force=true"), None, true).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["deleted"], json!([live.clone()]));
    let (status, _) = driver.call("GET", &format!("/v1/runs/{live}"), None, true).await;
    assert_eq!(status, 404);
    let parent = run_to_end(driver, "conformance-subworkflow-parent", json!({})).await;
    let events = Runner::new(driver).events(&parent).await;
    let child = events
        .iter()
        .find_map(|e| e["payload"]["childRunId"].as_str().map(str::to_owned))
        .expect("the parent dispatched a child");
    let (status, deleted) = driver.call("DELETE", &format!("/v1/runs/{parent}"), None, true).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["deleted"], json!([parent.clone(), child.clone()]), "the child goes with its parent");
    assert!(deleted["bytes"].as_u64().is_some_and(|bytes| bytes > 0));
    let (status, _) = driver.call("GET", &format!("/v1/runs/{child}"), None, true).await;
    assert_eq!(status, 404);
    let (status, _) = driver.call("DELETE", &format!("/v1/runs/{parent}"), None, true).await;
    assert_eq!(status, 404, "deleted is gone");

    // Prune: the preview is what the prune deletes; the newest `keep` stay.
    register(driver, retention_workflow("prune-chain", None)).await;
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(run_to_end(driver, "prune-chain", json!({})).await);
    }
    let request = json!({"workflowId": "prune-chain", "keep": 2, "dryRun": true});
    let (status, preview) = driver.call("POST", "/v1/runs:prune", Some(request), true).await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!((preview["dryRun"].as_bool(), preview["deleted"].as_u64()), (Some(true), Some(0)));
    let previewed: Vec<&str> =
        preview["candidates"].as_array().unwrap().iter().filter_map(|c| c["runId"].as_str()).collect();
    assert_eq!(
        previewed,
        runs[..3].iter().rev().map(String::as_str).collect::<Vec<_>>(),
        "the oldest three, newest first"
    );
    assert_eq!(preview["protectedRuns"], 2);
    assert_eq!(listed(driver, "prune-chain").await.len(), 5, "a preview deletes nothing");
    let (status, pruned) =
        driver.call("POST", "/v1/runs:prune", Some(json!({"workflowId": "prune-chain", "keep": 2})), true).await;
    assert_eq!(status, 200, "{pruned}");
    assert_eq!(pruned["deleted"], 3);
    assert_eq!(pruned["candidates"], preview["candidates"], "the prune deletes exactly what its preview listed");
    assert_eq!(pruned["bytes"], preview["bytes"]);
    let mut left = listed(driver, "prune-chain").await;
    left.sort();
    let mut newest = runs[3..].to_vec();
    newest.sort();
    assert_eq!(left, newest);
    for (body, field) in [
        (json!({"keep": -1}), "keep"),
        (json!({"olderThanDays": 0}), "olderThanDays"),
        (json!({"status": "running"}), "status"),
    ] {
        let (status, refused) = driver.call("POST", "/v1/runs:prune", Some(body), true).await;
        assert_eq!((status, refused["details"]["field"].as_str()), (400, Some(field)), "{refused}");
    }
    let (status, _) = driver.call("POST", "/v1/runs:prune", Some(json!({"dryRun": true})), false).await;
    assert_eq!(status, 401);
    brief
}

/// A fork answers an interrupt as its source was answered (replay §6.2): a replay of an
/// approved `conformance-approval` run completes with the same log shape and no new answer,
/// without `replay.diverged`; a replay of a quorum casts the source's votes again; a branch
/// departing before the answer waits for a live one.
pub async fn interrupts_short_circuit(driver: &mut dyn Driver) {
    let (status, created) =
        driver.call("POST", "/v1/runs", Some(json!({"workflowId": "conformance-approval"})), true).await;
    assert_eq!(status, 201, "{created}");
    let source = created["runId"].as_str().unwrap().to_owned();
    Runner::new(driver).await_snapshot(&source, "waiting-approval", |s| s["status"] == "waiting-approval").await;
    let body = json!({"resumeValue": {"action": "accept"}});
    let (status, answer) = driver.call("POST", &format!("/v1/runs/{source}/interrupts/gate"), Some(body), true).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(Runner::new(driver).await_terminal(&source).await["status"], "completed");
    let source_events = Runner::new(driver).events(&source).await;

    let replayed = fork(driver, &source, json!({"mode": "replay"})).await;
    let replayed = replayed["runId"].as_str().unwrap().to_owned();
    assert_eq!(Runner::new(driver).await_terminal(&replayed).await["status"], "completed", "answered from the log");
    let events = Runner::new(driver).events(&replayed).await;
    assert_eq!(shape(&events), shape(&source_events), "{events:?}");
    let resolved = |events: &[Value]| {
        events.iter().find(|e| e["type"] == "interrupt.resolved").map(|e| e["payload"]["resumeValue"].clone())
    };
    assert_eq!(resolved(&events), resolved(&source_events));

    // A quorum: the source's votes (a duplicate among them) are cast again one by one.
    let (status, created) =
        driver.call("POST", "/v1/runs", Some(json!({"workflowId": "conformance-interrupt-quorum"})), true).await;
    assert_eq!(status, 201, "{created}");
    let quorum = created["runId"].as_str().unwrap().to_owned();
    Runner::new(driver).await_snapshot(&quorum, "waiting-approval", |s| s["status"] == "waiting-approval").await;
    for voter in ["approver-1", "approver-2", "approver-2", "approver-3"] {
        let body = json!({"resumeValue": {"action": "accept", "voter": voter}});
        let (status, answer) =
            driver.call("POST", &format!("/v1/runs/{quorum}/interrupts/gate"), Some(body), true).await;
        assert_eq!(status, 200, "{answer}");
    }
    assert_eq!(Runner::new(driver).await_terminal(&quorum).await["status"], "completed");
    let quorum_events = Runner::new(driver).events(&quorum).await;
    let replayed_quorum = fork(driver, &quorum, json!({"mode": "replay"})).await;
    let replayed_quorum = replayed_quorum["runId"].as_str().unwrap().to_owned();
    assert_eq!(Runner::new(driver).await_terminal(&replayed_quorum).await["status"], "completed");
    let events = Runner::new(driver).events(&replayed_quorum).await;
    assert_eq!(shape(&events), shape(&quorum_events), "every vote again, then the close: {events:?}");
    let closed_by = |events: &[Value]| {
        events.iter().find(|e| e["type"] == "interrupt.resolved").map(|e| e["payload"]["resolvedBy"].clone())
    };
    assert_eq!(closed_by(&events), Some(json!("quorum:3-of-3")));

    let asked =
        source_events.iter().find(|e| e["type"] == "interrupt.requested").unwrap()["sequence"].as_u64().unwrap();
    let branch = fork(driver, &source, json!({"mode": "branch", "fromSeq": asked + 1})).await;
    let branch = branch["runId"].as_str().unwrap().to_owned();
    Runner::new(driver).await_snapshot(&branch, "waiting-approval", |s| s["status"] == "waiting-approval").await;
    let body = json!({"resumeValue": {"action": "reject"}});
    let (status, answer) = driver.call("POST", &format!("/v1/runs/{branch}/interrupts/gate"), Some(body), true).await;
    assert_eq!(status, 200, "the branch takes a new answer: {answer}");
    let done = Runner::new(driver).await_terminal(&branch).await;
    assert_ne!(done["status"], "running", "{done}");
}
