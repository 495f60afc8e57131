//! Parallel fan-out end to end (issue 19), through the public HTTP API only: a
//! `vendor.trellis.forEach` whose children call a loopback [`TestServer`] (the window's bound
//! read from the server's peak of requests in flight, every item's request seen, the results
//! in item order), `core.dispatch` with `fanOutPolicy: parallel` under a scripted supervisor
//! (wait-all collect, quorum, first, race, fail-fast; the losers' child runs cancelled), a
//! cancel mid-loop (every child ends, no request after it settled) and a SIGKILL of a `trellis
//! serve` process mid-loop (after the restart every child run exists exactly once). Nothing
//! leaves 127.0.0.1; nothing asserts on timing (the delays only keep children in flight).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{assert_log_well_formed, serve_args, start, Client, KEY};
use serde_json::{json, Value};
use trellis_testkit::host::ServeProcess;
use trellis_testkit::http_server::{Reply, TestServer};

/// Generous bound for a run of this suite on a loaded two-core machine.
const DEADLINE: Duration = Duration::from_secs(20);
/// The loop's child workflow: one `core.http.request` to `/item/<item>` on the port it is given.
const ITEM_WORKFLOW: &str = "fan-item";

async fn register(client: &Client, workflow: Value) {
    let (status, body) = client.request("POST", "/v1/workflows", Some(workflow)).await;
    assert!(status == 201 || status == 200, "{body}");
}

/// The child each item runs: `GET /item/{{item}}` (no retry), its outputs in variable `fetch`.
fn item_workflow() -> Value {
    json!({"id": ITEM_WORKFLOW, "name": ITEM_WORKFLOW, "version": "1",
        "variables": [{"name": "port", "type": "number"}, {"name": "item", "type": "string"},
                      {"name": "index", "type": "number"}],
        "nodes": [{"id": "fetch", "typeId": "core.http.request",
                   "config": {"url": "http://127.0.0.1:{{variables.port}}/item/{{variables.item}}", "timeoutMs": 3000},
                   "settings": {"maxRetries": 0}}],
        "edges": []})
}

/// A parent looping `fan-item` over its `things` input with `maxConcurrency`.
fn loop_workflow(id: &str, max_concurrency: u32) -> Value {
    json!({"id": id, "name": id, "version": "1",
        "variables": [{"name": "port", "type": "number", "required": true},
                      {"name": "things", "type": "array", "required": true}],
        "nodes": [{"id": "each", "typeId": "vendor.trellis.forEach",
                   "config": {"items": "things", "workflowId": ITEM_WORKFLOW, "maxConcurrency": max_concurrency,
                              "inputMapping": {"port": "port"}}},
                  {"id": "after", "typeId": "core.noop"}],
        "edges": [{"id": "e", "sourceNodeId": "each", "targetNodeId": "after"}]})
}

fn items(count: usize) -> Vec<String> {
    (0..count).map(|n| format!("item-{n:02}")).collect()
}

/// One route per item, each answering `{"item": …}` after `delay`.
fn route_items(server: &TestServer, items: &[String], delay: Duration) {
    for item in items {
        server.route(&format!("/item/{item}"), vec![Reply::json(200, &json!({"item": item})).delay(delay)]);
    }
}

/// How many times each item's path was requested.
fn requests_per_item(server: &TestServer) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for request in server.requests() {
        if let Some(item) = request.path().strip_prefix("/item/") {
            *seen.entry(item.to_owned()).or_default() += 1;
        }
    }
    seen
}

fn item_requests(server: &TestServer) -> usize {
    server.requests().iter().filter(|request| request.path().starts_with("/item/")).count()
}

/// `results` holds one completed entry per item, in item order, each with its own child run
/// and the body its request got back; returns the child run ids in item order.
fn check_results(results: &Value, items: &[String]) -> Vec<String> {
    let results = results.as_array().unwrap_or_else(|| panic!("results is an array: {results}"));
    assert_eq!(results.len(), items.len(), "one result per item");
    let mut children = Vec::new();
    for (index, (result, item)) in results.iter().zip(items).enumerate() {
        assert_eq!(
            (result["index"].as_u64(), result["status"].as_str()),
            (Some(index as u64), Some("completed")),
            "{result}"
        );
        assert_eq!(result["outputs"]["item"], json!(item), "result {index} is its item's: {result}");
        assert_eq!(result["outputs"]["fetch"]["body"], json!({"item": item}), "result {index}: {result}");
        children.push(result["childRunId"].as_str().unwrap_or_else(|| panic!("a child run id: {result}")).to_owned());
    }
    let distinct: BTreeSet<&String> = children.iter().collect();
    assert_eq!(distinct.len(), children.len(), "a child run per item: {children:?}");
    children
}

/// Polls until `run_id` is terminal (a 404 panics: the run must exist).
async fn terminal_status(client: &Client, run_id: &str, within: Duration) -> String {
    let started = Instant::now();
    loop {
        let (status, snapshot) = client.request("GET", &format!("/v1/runs/{run_id}"), None).await;
        assert_eq!(status, 200, "run {run_id} exists: {snapshot}");
        if let Some(end @ ("completed" | "failed" | "cancelled")) = snapshot["status"].as_str() {
            return end.to_owned();
        }
        assert!(started.elapsed() < within, "run {run_id} not terminal within {within:?}: {snapshot}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The child run ids the loop `node` started, from its debug `trellis.loop.itemStarted`
/// events, by index (an index started twice panics).
async fn loop_children(client: &Client, run_id: &str, node: &str) -> BTreeMap<u64, String> {
    let mut started = BTreeMap::new();
    for event in client.debug_events(run_id).await {
        if event["type"] == "trellis.loop.itemStarted" && event["payload"]["nodeId"] == node {
            let index = event["payload"]["index"].as_u64().expect("an index");
            let child = event["payload"]["childRunId"].as_str().expect("a child run id").to_owned();
            assert!(started.insert(index, child).is_none(), "item {index} started once");
        }
    }
    started
}

#[tokio::test]
async fn for_each_keeps_at_most_max_concurrency_requests_in_flight_and_gathers_results_in_item_order() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let server = TestServer::start().await;
    let things = items(50);
    route_items(&server, &things, Duration::from_millis(150));
    register(&client, item_workflow()).await;
    register(&client, loop_workflow("fan-loop", 5)).await;

    let run_id =
        client.create(json!({"workflowId": "fan-loop", "inputs": {"port": server.port(), "things": things}})).await;
    let snapshot = client.wait_terminal(&run_id, DEADLINE).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");

    let peak = server.peak_in_flight();
    assert!(peak <= 5, "at most maxConcurrency requests at once, saw {peak}");
    assert!(peak >= 2, "the window is used: the peak was {peak}");
    let seen = requests_per_item(&server);
    assert_eq!(item_requests(&server), 50, "exactly one request per item: {seen:?}");
    assert_eq!(seen.keys().cloned().collect::<Vec<_>>(), things, "every item requested: {seen:?}");
    assert!(seen.values().all(|count| *count == 1), "each item exactly once: {seen:?}");

    let children = check_results(&snapshot["variables"]["results"], &things);
    let started = loop_children(&client, &run_id, "each").await;
    assert_eq!(started.values().cloned().collect::<Vec<_>>(), children, "the results name the children started");
    let child = client.snapshot(&children[7]).await;
    assert_eq!(
        (child["status"].as_str(), child["parentRunId"].as_str(), child["parentNodeId"].as_str()),
        (Some("completed"), Some(run_id.as_str()), Some("each#7")),
        "{child}"
    );
    let events = client.events(&run_id).await;
    assert_log_well_formed(&events);
    let done = events.iter().find(|e| e["type"] == "node.completed" && e["payload"]["nodeId"] == "each").unwrap();
    assert_eq!(
        done["payload"]["outputs"],
        json!({"itemCount": 50, "completedCount": 50, "failedCount": 0, "cancelledCount": 0})
    );
    host.stop().await;
}

/// A supervisor that dispatches `workers` in parallel with `join`, then terminates.
fn dispatch_workflow(id: &str, workers: &[&str], join: Value) -> Value {
    json!({"id": id, "name": id, "version": "1",
        "variables": [{"name": "winner", "type": "string", "defaultValue": "none"}],
        "nodes": [{"id": "s", "typeId": "core.orchestrator.supervisor", "config": {"mockDispatchPlan": [
                      {"kind": "next-worker", "nextWorkerIds": workers}, {"kind": "terminate", "reason": "done"}]}},
                  {"id": "d", "typeId": "core.dispatch",
                   "config": {"fanOutPolicy": "parallel", "joinPolicy": join, "outputMapping": {"winner": "label"}}}],
        "edges": [{"id": "e1", "sourceNodeId": "s", "targetNodeId": "d"}, {"id": "e2", "sourceNodeId": "d", "targetNodeId": "s"}]})
}

/// A worker that waits `delay_ms` and leaves `label` = its own id.
fn worker(id: &str, delay_ms: u64) -> Value {
    json!({"id": id, "name": id, "version": "1",
        "variables": [{"name": "label", "type": "string", "defaultValue": id},
                      {"name": "delayMs", "type": "number", "defaultValue": delay_ms}],
        "nodes": [{"id": "wait", "typeId": "core.delay", "inputs": {"delayMs": {"type": "variable", "variableName": "delayMs"}}}],
        "edges": []})
}

/// What one parallel dispatch left: its events, the dispatch node's outputs (or error) and the
/// children's final statuses by child run id.
struct Dispatched {
    snapshot: Value,
    fan_out: Value,
    dispatched: Vec<String>,
    join: Value,
    /// `d`'s `node.completed` outputs or `node.failed` error.
    result: Value,
    child_status: BTreeMap<String, String>,
}

async fn run_dispatch(client: &Client, workflow: &str) -> Dispatched {
    let run_id = client.create(json!({"workflowId": workflow})).await;
    let snapshot = client.wait_terminal(&run_id, DEADLINE).await;
    let events = client.events(&run_id).await;
    assert_log_well_formed(&events);
    let of = |kind: &str| events.iter().filter(|e| e["type"] == kind).cloned().collect::<Vec<_>>();
    let fan_out = of("core.dispatch.fanOut");
    assert_eq!(fan_out.len(), 1, "one fan-out: {events:?}");
    let join = of("core.dispatch.join");
    assert_eq!(join.len(), 1, "one join: {events:?}");
    let decided = of("runOrchestrator.decided");
    let cause = decided.first().map(|e| e["eventId"].clone()).unwrap_or_default();
    let dispatched = of("node.dispatched");
    for event in fan_out.iter().chain(&join).chain(&dispatched) {
        assert_eq!(event["causationId"], cause, "caused by the decision: {event}");
    }
    let dispatched: Vec<String> =
        dispatched.iter().map(|e| e["payload"]["childRunId"].as_str().expect("a child run id").to_owned()).collect();
    let ended = events
        .iter()
        .find(|e| matches!(e["type"].as_str(), Some("node.completed" | "node.failed")) && e["payload"]["nodeId"] == "d")
        .unwrap_or_else(|| panic!("d ended: {events:?}"));
    let result = if ended["type"] == "node.completed" {
        ended["payload"]["outputs"].clone()
    } else {
        ended["payload"]["error"].clone()
    };
    let mut child_status = BTreeMap::new();
    for child in &dispatched {
        child_status.insert(child.clone(), terminal_status(client, child, DEADLINE).await);
    }
    Dispatched {
        snapshot,
        fan_out: fan_out[0]["payload"].clone(),
        dispatched,
        join: join[0]["payload"].clone(),
        result,
        child_status,
    }
}

impl Dispatched {
    /// The `children` listing of `d`'s outputs: `(workflowId, childRunId, childStatus)` in index order.
    fn children(&self, listing: &Value) -> Vec<(String, String, String)> {
        listing
            .as_array()
            .unwrap_or_else(|| panic!("children listed: {}", self.result))
            .iter()
            .map(|child| {
                let text = |field: &str| child[field].as_str().unwrap_or_default().to_owned();
                (text("workflowId"), text("childRunId"), text("childStatus"))
            })
            .collect()
    }

    fn merge_order(&self) -> Vec<String> {
        self.join["mergeOrder"]
            .as_array()
            .expect("mergeOrder")
            .iter()
            .map(|id| id.as_str().unwrap().to_owned())
            .collect()
    }

    fn statuses(&self) -> Vec<&str> {
        self.dispatched.iter().map(|child| self.child_status[child].as_str()).collect()
    }
}

#[tokio::test]
async fn parallel_dispatch_joins_by_mode_and_cancels_the_losers() {
    let mut args = serve_args(None);
    // Scripted plans are honoured for a test-scope key on a host with its seams on.
    args.test_seams = true;
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    register(&client, worker("w-quick", 10)).await;
    register(&client, worker("w-medium", 600)).await;
    register(&client, worker("w-slow", 30_000)).await;
    let collect = json!({"mode": "wait-all", "onChildFailure": "collect"});
    register(&client, dispatch_workflow("fan-wait-all", &["w-medium", "w-quick", "w-medium"], collect)).await;
    let quorum = json!({"mode": "quorum", "quorum": 2});
    register(&client, dispatch_workflow("fan-quorum", &["w-quick", "w-slow", "w-quick"], quorum)).await;
    register(&client, dispatch_workflow("fan-first", &["w-slow", "w-quick", "w-slow"], json!({"mode": "first"}))).await;
    let race = json!({"mode": "race", "onChildFailure": "collect"});
    register(&client, dispatch_workflow("fan-race", &["w-slow", "conformance-failure"], race)).await;

    // wait-all, collect: every child completes; outputs mapped in merge order (the last to end wins).
    let all = run_dispatch(&client, "fan-wait-all").await;
    assert_eq!(all.snapshot["status"], "completed", "{}", all.snapshot);
    assert_eq!(
        all.fan_out,
        json!({"fanOutPolicy": "parallel", "childCount": 3, "maxConcurrency": 3, "joinMode": "wait-all"})
    );
    assert_eq!(all.dispatched.len(), 3, "one node.dispatched per child");
    assert_eq!(all.statuses(), ["completed"; 3]);
    assert_eq!(
        (&all.join["joinOutcome"], &all.join["completedCount"], &all.join["failedCount"], &all.join["cancelledCount"]),
        (&json!("satisfied"), &json!(3), &json!(0), &json!(0))
    );
    let order = all.merge_order();
    assert_eq!(order.iter().collect::<BTreeSet<_>>(), all.dispatched.iter().collect::<BTreeSet<_>>(), "{order:?}");
    let listed = all.children(&all.result["children"]);
    let last = listed.iter().find(|(_, child, _)| Some(child) == order.last()).expect("the last merged is listed");
    assert_eq!(all.snapshot["variables"]["winner"], json!(last.0), "the child merged last wins the mapping");
    assert_eq!((&all.result["decision"], &all.result["joinOutcome"]), (&json!("next-worker"), &json!("satisfied")));
    assert!(all.result.get("mergeOrder").is_none(), "the merge order is the join event's, not an output");
    let expected: Vec<_> = ["w-medium", "w-quick", "w-medium"]
        .iter()
        .zip(&all.dispatched)
        .map(|(workflow, child)| ((*workflow).to_owned(), child.clone(), "completed".to_owned()))
        .collect();
    assert_eq!(listed, expected, "children in index order");

    // quorum 2 of 3: the two quick ones meet it, the slow one is a loser and ends cancelled.
    let quorum = run_dispatch(&client, "fan-quorum").await;
    assert_eq!(quorum.snapshot["status"], "completed", "{}", quorum.snapshot);
    assert_eq!(quorum.fan_out["joinMode"], "quorum");
    assert_eq!(quorum.statuses(), ["completed", "cancelled", "completed"]);
    assert_eq!(
        (&quorum.join["joinOutcome"], &quorum.join["completedCount"], &quorum.join["cancelledCount"]),
        (&json!("satisfied"), &json!(2), &json!(1)),
        "losers cancelled by the join do not make it partial"
    );
    assert_eq!(quorum.merge_order().last(), Some(&quorum.dispatched[1]), "the loser is merged last");
    let listed = quorum.children(&quorum.result["children"]);
    assert_eq!(listed[1].2, "cancelled", "{listed:?}");
    assert_eq!(quorum.snapshot["variables"]["winner"], "w-quick");

    // first: the first completed child meets it, both slow ones are cancelled.
    let first = run_dispatch(&client, "fan-first").await;
    assert_eq!(first.snapshot["status"], "completed", "{}", first.snapshot);
    assert_eq!(first.statuses(), ["cancelled", "completed", "cancelled"]);
    assert_eq!(
        (&first.join["joinOutcome"], &first.join["completedCount"], &first.join["cancelledCount"]),
        (&json!("satisfied"), &json!(1), &json!(2))
    );
    assert_eq!(first.merge_order()[0], first.dispatched[1]);

    // race: the first child to end meets it whatever its status: here a failure, so partial.
    let race = run_dispatch(&client, "fan-race").await;
    assert_eq!(race.snapshot["status"], "completed", "{}", race.snapshot);
    assert_eq!(race.statuses(), ["cancelled", "failed"]);
    assert_eq!(
        (&race.join["joinOutcome"], &race.join["failedCount"], &race.join["cancelledCount"]),
        (&json!("partial"), &json!(1), &json!(1))
    );
    assert_eq!(race.snapshot["variables"]["winner"], "none", "a failed child is not harvested");
    host.stop().await;
}

#[tokio::test]
async fn parallel_dispatch_fail_fast_fails_the_run_and_leaves_no_child_running() {
    let mut args = serve_args(None);
    args.test_seams = true;
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let server = TestServer::start().await;
    server.route("/boom", vec![Reply::text(500, "down")]);
    // A child failing on an HTTP 500 (no retry), next to long delays that must be cancelled.
    register(
        &client,
        json!({"id": "w-http-500", "name": "w-http-500", "version": "1",
            "nodes": [{"id": "call", "typeId": "core.http.request",
                       "config": {"url": server.url("/boom"), "timeoutMs": 3000}, "settings": {"maxRetries": 0}}],
            "edges": []}),
    )
    .await;
    register(&client, worker("w-slow", 30_000)).await;
    register(&client, worker("w-quick", 10)).await;
    let fail_fast = json!({"mode": "wait-all", "onChildFailure": "fail-fast"});
    register(&client, dispatch_workflow("fan-fail-fast", &["w-slow", "w-http-500", "w-quick", "w-slow"], fail_fast))
        .await;
    register(
        &client,
        dispatch_workflow(
            "fan-fail-fast-core",
            &["w-slow", "conformance-failure"],
            json!({"onChildFailure": "fail-fast"}),
        ),
    )
    .await;

    for (workflow, failing) in [("fan-fail-fast", 1), ("fan-fail-fast-core", 1)] {
        let ran = run_dispatch(&client, workflow).await;
        assert_eq!(
            (ran.snapshot["status"].as_str(), ran.snapshot["error"]["code"].as_str()),
            (Some("failed"), Some("fan_out_join_failed")),
            "{workflow}: {}",
            ran.snapshot
        );
        assert_eq!(ran.result["code"], "fan_out_join_failed", "{workflow}: {}", ran.result);
        assert_eq!(ran.join["joinOutcome"], "failed");
        assert_eq!(ran.child_status[&ran.dispatched[failing]], "failed", "{workflow}");
        for (index, child) in ran.dispatched.iter().enumerate().filter(|(index, _)| *index != failing) {
            let status = ran.child_status[child].as_str();
            assert!(matches!(status, "cancelled" | "completed"), "{workflow}: child {index} ended {status}");
        }
        assert_eq!(ran.child_status[&ran.dispatched[0]], "cancelled", "{workflow}: the slow child is cancelled");
        let listed = ran.children(&ran.result["details"]["children"]);
        assert_eq!(listed.len(), ran.dispatched.len(), "{workflow}: {listed:?}");
        for ((_, child, status), dispatched) in listed.iter().zip(&ran.dispatched) {
            assert_eq!(child, dispatched);
            assert_eq!(status, &ran.child_status[child], "{workflow}: the listing says how {child} ended");
        }
    }
    assert_eq!(server.requests_to("/boom").len(), 1, "no retry of the 500");
    host.stop().await;
}

#[tokio::test]
async fn cancelling_a_run_mid_for_each_ends_every_child_and_stops_the_requests() {
    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let server = TestServer::start().await;
    let things = items(20);
    route_items(&server, &things, Duration::from_millis(1500));
    register(&client, item_workflow()).await;
    register(&client, loop_workflow("fan-cancel", 5)).await;
    let run_id =
        client.create(json!({"workflowId": "fan-cancel", "inputs": {"port": server.port(), "things": things}})).await;
    let started = Instant::now();
    while server.in_flight() < 2 {
        assert!(started.elapsed() < DEADLINE, "no child request in flight: {:?}", server.requests());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, body) = client.request("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
    assert_eq!(status, 200, "{body}");
    let snapshot = client.wait_terminal(&run_id, DEADLINE).await;
    assert_eq!(snapshot["status"], "cancelled", "{snapshot}");

    let children = loop_children(&client, &run_id, "each").await;
    assert!(!children.is_empty() && children.len() < things.len(), "cancelled mid-loop: {children:?}");
    let created: BTreeSet<String> =
        runs_of(&client, ITEM_WORKFLOW).await.iter().map(|run| run["runId"].as_str().unwrap().to_owned()).collect();
    assert_eq!(created, children.values().cloned().collect(), "the loop's events name every child run created");
    let mut ends = BTreeMap::new();
    for child in children.values() {
        let end = terminal_status(&client, child, DEADLINE).await;
        assert!(matches!(end.as_str(), "cancelled" | "completed"), "child {child} ended {end}");
        *ends.entry(end).or_insert(0) += 1;
    }
    assert!(ends.get("cancelled").is_some_and(|n| *n >= 1), "children in flight were cancelled: {ends:?}");

    // Settled: longer than one scripted delay passes and no request arrives.
    let settled = item_requests(&server);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(item_requests(&server), settled, "no request after the cancel settled");
    assert!(settled <= children.len(), "no item requested without a child run: {settled} for {}", children.len());
    for child in children.values() {
        let status = client.snapshot(child).await["status"].clone();
        assert!(status == "cancelled" || status == "completed", "child {child} stays ended: {status}");
    }
    host.stop().await;
}

async fn spawn_serve(data_dir: &Path) -> ServeProcess {
    trellis_testkit::host::spawn(Path::new(env!("CARGO_BIN_EXE_trellis")), data_dir, KEY, None).await
}

/// Every run of `workflow_id` the host lists (all pages).
async fn runs_of(client: &Client, workflow_id: &str) -> Vec<Value> {
    let mut runs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/runs?workflowId={workflow_id}&limit=100");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let (status, page) = client.request("GET", &path, None).await;
        assert_eq!(status, 200, "{page}");
        runs.extend(page["runs"].as_array().cloned().unwrap_or_default());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return runs,
        }
    }
}

#[tokio::test]
async fn a_host_killed_mid_for_each_finishes_it_after_restart_with_one_child_run_per_item() {
    let server = TestServer::start().await;
    let things = items(30);
    route_items(&server, &things, Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let first = spawn_serve(dir.path()).await;
    let client = Client::new(&first.base, KEY);
    register(&client, item_workflow()).await;
    register(&client, loop_workflow("fan-crash", 5)).await;
    let run_id =
        client.create(json!({"workflowId": "fan-crash", "inputs": {"port": server.port(), "things": things}})).await;
    let started = Instant::now();
    while item_requests(&server) < 10 {
        assert!(started.elapsed() < DEADLINE, "the loop never got going: {:?}", requests_per_item(&server));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut first = first;
    first.child.kill().await.expect("SIGKILL the host");
    let before = item_requests(&server);
    assert!(before < things.len(), "killed mid-loop ({before} requests)");

    let second = spawn_serve(dir.path()).await;
    let client = Client::new(&second.base, KEY);
    // A child whose request was in flight at the kill reruns it once its lease runs out.
    let snapshot = client.wait_terminal(&run_id, Duration::from_secs(60)).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");

    // At-least-once: an HTTP call in flight at the kill may be made again by the restarted
    // host, so item requests are counted ≥ 1; the child *runs* are exactly once.
    let seen = requests_per_item(&server);
    assert_eq!(seen.keys().cloned().collect::<Vec<_>>(), things, "every item requested at least once: {seen:?}");
    let children = check_results(&snapshot["variables"]["results"], &things);
    let listed = runs_of(&client, ITEM_WORKFLOW).await;
    let mut listed_ids: Vec<String> = listed.iter().map(|run| run["runId"].as_str().unwrap().to_owned()).collect();
    listed_ids.sort();
    let mut expected = children.clone();
    expected.sort();
    assert_eq!(listed_ids, expected, "exactly one child run per item, no other");
    for (index, child) in children.iter().enumerate() {
        let child_snapshot = client.snapshot(child).await;
        assert_eq!(
            (child_snapshot["status"].as_str(), child_snapshot["parentNodeId"].as_str()),
            (Some("completed"), Some(format!("each#{index}").as_str())),
            "{child_snapshot}"
        );
        assert_log_well_formed(&client.events(child).await);
    }
    let started = loop_children(&client, &run_id, "each").await;
    assert_eq!(started.values().cloned().collect::<Vec<_>>(), children, "each item started once");
    assert_log_well_formed(&client.events(&run_id).await);
    let mut second = second;
    second.child.kill().await.expect("stop the host");
}
