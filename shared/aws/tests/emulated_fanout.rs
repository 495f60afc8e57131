//! Parallel fan-out (issue 19) on the emulated AWS stack, against the embedded host: a
//! `vendor.trellis.forEach` over 50 items and a `core.dispatch` with `fanOutPolicy: parallel`
//! give the same runs on both backends (each child's log, the parent's log up to the order of
//! its per-child events, the join's counts, the results), and the window is never wider than
//! `maxConcurrency`; the join modes (quorum cancelling its losers, fail-fast) and a cancel in
//! the middle of a fan-out leave no child running.
//!
//! A per-child event of the parent (`node.dispatched`, `trellis.loop.itemStarted|itemFinished`)
//! comes when its child starts or ends, so their order follows the children's timing, which
//! the two backends do not share: they are compared as a multiset, keyed by child index.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use trellis_testkit::replay::shape;

mod support;

use support::{embedded_host, require_emulators, stack, EmbeddedClient, Stack};

/// How long a whole fan-out may take on the emulated stack (the pump plays one message at a
/// time per queue).
const FAN_OUT_DEADLINE: Duration = Duration::from_secs(120);
/// The forEach's items.
const ITEMS: usize = 50;
/// The forEach's window.
const LOOP_WIDTH: usize = 5;
/// The parallel dispatch's window.
const DISPATCH_WIDTH: usize = 3;
/// The dispatch's workers and the index of the one that fails.
const WORKERS: usize = 10;
const FAILING_WORKER: usize = 4;

/// The events of a parent that come once per child.
const PER_CHILD: [&str; 3] = ["node.dispatched", "trellis.loop.itemStarted", "trellis.loop.itemFinished"];

/// A child run: a noop, then an identity echoing its item.
fn item_child() -> Value {
    json!({"id": "fan-item", "name": "fan item",
        "nodes": [{"id": "work", "typeId": "core.noop"},
                  {"id": "echo", "typeId": "core.identity",
                   "inputs": {"payload": {"type": "variable", "variableName": "item"}}}],
        "edges": [{"id": "e", "sourceNodeId": "work", "targetNodeId": "echo"}]})
}

fn for_each(id: &str, items: usize, workflow_id: &str, extra: Value) -> Value {
    let items: Vec<Value> = (0..items).map(|k| json!({"n": k, "label": format!("item-{k}")})).collect();
    let mut config = json!({"items": items, "workflowId": workflow_id, "maxConcurrency": LOOP_WIDTH});
    for (key, value) in extra.as_object().into_iter().flatten() {
        config[key] = value.clone();
    }
    json!({"id": id, "name": id,
        "nodes": [{"id": "loop", "typeId": "vendor.trellis.forEach", "config": config},
                  {"id": "after", "typeId": "core.noop"}],
        "edges": [{"id": "e", "sourceNodeId": "loop", "targetNodeId": "after"}]})
}

/// A supervisor deciding `workers` once, and a parallel dispatch with `dispatch` as config.
fn dispatcher(id: &str, workers: &[&str], dispatch: Value) -> Value {
    let inputs: Vec<Value> = (0..workers.len()).map(|k| json!({"item": format!("w{k}"), "index": k})).collect();
    let plan = json!([{"kind": "next-worker", "nextWorkerIds": workers, "nextWorkerInputs": inputs}]);
    json!({"id": id, "name": id, "version": "1",
        "nodes": [{"id": "supervisor", "typeId": "core.orchestrator.supervisor", "config": {"mockDispatchPlan": plan}},
                  {"id": "dispatch", "typeId": "core.dispatch", "config": dispatch}],
        "edges": [{"id": "e1", "sourceNodeId": "supervisor", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "supervisor"}]})
}

const FAIL: &str = "conformance-dispatch-deterministic-fail-child";
const SLOW: &str = "conformance-dispatch-cancellable-child";

fn collect_workers() -> Vec<&'static str> {
    (0..WORKERS).map(|k| if k == FAILING_WORKER { FAIL } else { "fan-item" }).collect()
}

fn workflows() -> Vec<Value> {
    vec![
        item_child(),
        for_each("fan-loop", ITEMS, "fan-item", json!({})),
        for_each("fan-loop-slow", 20, SLOW, json!({})),
        dispatcher(
            "fan-collect",
            &collect_workers(),
            json!({"fanOutPolicy": "parallel", "maxConcurrency": DISPATCH_WIDTH,
                   "joinPolicy": {"mode": "wait-all", "onChildFailure": "collect"},
                   "outputMapping": {"lastItem": "item"}}),
        ),
        dispatcher(
            "fan-quorum",
            &["fan-item", SLOW, "fan-item", SLOW, SLOW],
            json!({"fanOutPolicy": "parallel", "joinPolicy": {"mode": "quorum", "quorum": 2}}),
        ),
        dispatcher(
            "fan-fail-fast",
            &[SLOW, FAIL, SLOW, "fan-item", SLOW],
            json!({"fanOutPolicy": "parallel", "joinPolicy": {"onChildFailure": "fail-fast"}}),
        ),
    ]
}

async fn aws_stack() -> Stack {
    require_emulators();
    let stack = stack().await;
    for definition in workflows() {
        let (status, body) = stack.api("POST", "/v1/workflows", Some(definition)).await;
        assert_eq!(status, 201, "{body}");
    }
    stack
}

fn is_terminal(snapshot: &Value) -> bool {
    matches!(snapshot["status"].as_str(), Some("completed" | "failed" | "cancelled"))
}

/// One backend, as the comparisons read it.
enum Backend<'a> {
    Aws(&'a mut Stack),
    Embedded(&'a EmbeddedClient),
}

impl Backend<'_> {
    async fn create(&mut self, workflow_id: &str) -> String {
        let body = json!({"workflowId": workflow_id});
        match self {
            Backend::Aws(stack) => stack.create(body).await,
            Backend::Embedded(client) => client.create(body).await,
        }
    }

    async fn snapshot(&mut self, run_id: &str) -> Value {
        match self {
            Backend::Aws(stack) => stack.snapshot(run_id).await,
            Backend::Embedded(client) => client.get(&format!("/v1/runs/{run_id}")).await,
        }
    }

    async fn debug_events(&mut self, run_id: &str) -> Vec<Value> {
        match self {
            Backend::Aws(stack) => stack.debug_events(run_id).await,
            Backend::Embedded(client) => client.debug_events(run_id).await,
        }
    }

    /// Drives (AWS) or waits for (embedded) the run until it is terminal.
    async fn finish(&mut self, run_id: &str) -> Value {
        match self {
            Backend::Aws(stack) => stack.pump_until_terminal(run_id, FAN_OUT_DEADLINE, false).await,
            Backend::Embedded(client) => {
                let started = Instant::now();
                loop {
                    let snapshot = client.get(&format!("/v1/runs/{run_id}")).await;
                    if is_terminal(&snapshot) {
                        return snapshot;
                    }
                    assert!(started.elapsed() < FAN_OUT_DEADLINE, "{run_id} not terminal: {snapshot}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Plays the queues once (AWS) or waits a little (embedded).
    async fn tick(&mut self) {
        match self {
            Backend::Aws(stack) => {
                if stack.pump_once(false).await {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Backend::Embedded(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The child run id of every child of `node_id`, by index: the loop's `itemStarted`
/// payloads, else the dispatch's `node.dispatched` events in order (slots start in index
/// order).
fn children_of(events: &[Value], node_id: &str) -> BTreeMap<usize, String> {
    let mut children = BTreeMap::new();
    let mine = events.iter().filter(|e| e["nodeId"] == node_id);
    for event in mine {
        let id = event["payload"]["childRunId"].as_str().unwrap_or_default().to_owned();
        match event["type"].as_str() {
            Some("trellis.loop.itemStarted") => {
                children.insert(event["payload"]["index"].as_u64().unwrap() as usize, id);
            }
            Some("node.dispatched") => {
                let next = children.len();
                children.insert(next, id);
            }
            _ => {}
        }
    }
    children
}

/// A finished parent and its children, as compared across backends.
struct Trace {
    snapshot: Value,
    parent: Vec<Value>,
    /// By child index: its run id and its whole log.
    children: BTreeMap<usize, (String, Vec<Value>)>,
}

impl Trace {
    fn index_of(&self, child_run_id: &str) -> usize {
        let found = self.children.iter().find(|(_, (id, _))| id == child_run_id);
        *found.unwrap_or_else(|| panic!("{child_run_id} is no child")).0
    }

    /// The parent's events that are not per child, as `(type, nodeId)`, in order.
    fn parent_shape(&self) -> Vec<(String, String)> {
        let rest: Vec<Value> =
            self.parent.iter().filter(|e| !PER_CHILD.contains(&e["type"].as_str().unwrap_or(""))).cloned().collect();
        shape(&rest)
    }

    /// The parent's per-child events as `(type, nodeId, child index, child status)`, sorted.
    fn per_child(&self) -> Vec<(String, String, usize, String)> {
        let mut found: Vec<_> = self
            .parent
            .iter()
            .filter(|e| PER_CHILD.contains(&e["type"].as_str().unwrap_or("")))
            .map(|e| {
                let id = e["payload"]["childRunId"].as_str().unwrap_or_default();
                let status = e["payload"]["status"].as_str().or(e["payload"]["childStatus"].as_str());
                (
                    e["type"].as_str().unwrap().to_owned(),
                    e["nodeId"].as_str().unwrap_or_default().to_owned(),
                    self.index_of(id),
                    status.unwrap_or_default().to_owned(),
                )
            })
            .collect();
        found.sort();
        found
    }

    fn event(&self, event_type: &str) -> &Value {
        let found = self.parent.iter().find(|e| e["type"] == event_type);
        found.unwrap_or_else(|| panic!("no {event_type} in {:?}", shape(&self.parent)))
    }

    /// The join's `mergeOrder` as child indices.
    fn merge_order(&self) -> Vec<usize> {
        let order = self.event("core.dispatch.join")["payload"]["mergeOrder"].as_array().cloned().unwrap_or_default();
        order.iter().map(|id| self.index_of(id.as_str().unwrap())).collect()
    }

    /// Most children running at once, by their own logs: from the first event to the
    /// terminal one (an end and a start at the same instant do not overlap).
    fn peak_by_child_logs(&self) -> usize {
        let mut edges: Vec<(String, i32)> = Vec::new();
        for (_, events) in self.children.values() {
            let first = events.first().expect("a child log")["timestamp"].as_str().unwrap().to_owned();
            let last = events.last().unwrap();
            assert!(matches!(last["type"].as_str(), Some("run.completed" | "run.failed" | "run.cancelled")));
            edges.push((first, 1));
            edges.push((last["timestamp"].as_str().unwrap().to_owned(), -1));
        }
        edges.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        let (mut running, mut peak) = (0i32, 0i32);
        for (_, step) in edges {
            running += step;
            peak = peak.max(running);
        }
        peak as usize
    }
}

/// Most loop items running at once, by the parent's log: started minus finished.
fn loop_peak(parent: &[Value]) -> usize {
    let (mut running, mut peak) = (0i64, 0i64);
    for event in parent {
        match event["type"].as_str() {
            Some("trellis.loop.itemStarted") => running += 1,
            Some("trellis.loop.itemFinished") => running -= 1,
            _ => {}
        }
        assert!(running >= 0, "an item finished before it started");
        peak = peak.max(running);
    }
    peak as usize
}

/// Runs `workflow_id` to its end on `backend` and reads it, its children and their logs.
async fn trace(backend: &mut Backend<'_>, workflow_id: &str, node_id: &str) -> Trace {
    let run_id = backend.create(workflow_id).await;
    let snapshot = backend.finish(&run_id).await;
    let parent = backend.debug_events(&run_id).await;
    support::assert_log_well_formed(&parent);
    let mut children = BTreeMap::new();
    for (index, child_id) in children_of(&parent, node_id) {
        let child = backend.finish(&child_id).await;
        assert!(is_terminal(&child), "{child}");
        children.insert(index, (child_id.clone(), backend.debug_events(&child_id).await));
    }
    Trace { snapshot, parent, children }
}

/// Each child's log, the parent's log and its join are the same on both backends.
fn assert_same_runs(aws: &Trace, embedded: &Trace) {
    assert_eq!(aws.snapshot["status"], embedded.snapshot["status"], "{} / {}", aws.snapshot, embedded.snapshot);
    assert_eq!(aws.parent_shape(), embedded.parent_shape(), "the parent's log, per-child events aside");
    assert_eq!(aws.per_child(), embedded.per_child(), "the parent's per-child events");
    assert!(aws.per_child().len() >= aws.children.len(), "one per child at least: {:?}", aws.per_child());
    assert_eq!(aws.children.len(), embedded.children.len());
    for ((index, (_, on_aws)), (_, on_embedded)) in aws.children.iter().zip(embedded.children.values()) {
        assert_eq!(shape(on_aws), shape(on_embedded), "child {index}'s log");
    }
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_for_each_over_fifty_items_gives_the_same_run_on_aws_as_embedded_five_at_a_time() {
    let mut aws = aws_stack().await;
    let (host, client) = embedded_host(false, &workflows()).await;
    let on_aws = trace(&mut Backend::Aws(&mut aws), "fan-loop", "loop").await;
    let on_embedded = trace(&mut Backend::Embedded(&client), "fan-loop", "loop").await;
    host.stop().await;

    assert_eq!(on_aws.snapshot["status"], "completed", "{}", on_aws.snapshot);
    assert_eq!(on_aws.children.len(), ITEMS);
    assert_same_runs(&on_aws, &on_embedded);
    let finished = |trace: &Trace| trace.event("trellis.loop.finished")["payload"].clone();
    assert_eq!(finished(&on_aws), finished(&on_embedded));
    assert_eq!(finished(&on_aws)["completedCount"], json!(ITEMS));
    // The results, in item order, child run ids aside.
    let results = |trace: &Trace| {
        let results = trace.snapshot["variables"]["results"].as_array().cloned().expect("results");
        let ids: Vec<String> = results.iter().map(|r| r["childRunId"].as_str().unwrap().to_owned()).collect();
        let by_index: Vec<String> = trace.children.values().map(|(id, _)| id.clone()).collect();
        assert_eq!(ids, by_index, "result k is child k");
        results
            .into_iter()
            .map(|mut result| {
                result.as_object_mut().unwrap().remove("childRunId");
                result
            })
            .collect::<Vec<_>>()
    };
    let on_aws_results = results(&on_aws);
    assert_eq!(on_aws_results, results(&on_embedded));
    for (k, result) in on_aws_results.iter().enumerate() {
        assert_eq!((result["index"].as_u64(), result["status"].as_str()), (Some(k as u64), Some("completed")));
        assert_eq!(result["outputs"]["item"], json!({"n": k, "label": format!("item-{k}")}), "{result}");
    }
    // The window: never more than five at once, by the parent's log and by the children's.
    assert_eq!(loop_peak(&on_aws.parent), LOOP_WIDTH, "the window is used, never passed");
    assert!(loop_peak(&on_embedded.parent) <= LOOP_WIDTH);
    assert!((2..=LOOP_WIDTH).contains(&on_aws.peak_by_child_logs()), "{}", on_aws.peak_by_child_logs());
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_parallel_dispatch_collecting_a_failure_gives_the_same_run_on_aws_as_embedded() {
    let mut aws = aws_stack().await;
    let (host, client) = embedded_host(false, &workflows()).await;
    let on_aws = trace(&mut Backend::Aws(&mut aws), "fan-collect", "dispatch").await;
    let on_embedded = trace(&mut Backend::Embedded(&client), "fan-collect", "dispatch").await;
    host.stop().await;

    assert_eq!(on_aws.snapshot["status"], "completed", "{}", on_aws.snapshot);
    assert_eq!(on_aws.children.len(), WORKERS);
    assert_same_runs(&on_aws, &on_embedded);
    let fan_out = |trace: &Trace| trace.event("core.dispatch.fanOut")["payload"].clone();
    assert_eq!(fan_out(&on_aws), fan_out(&on_embedded));
    assert_eq!(
        fan_out(&on_aws),
        json!({"fanOutPolicy": "parallel", "childCount": WORKERS, "maxConcurrency": DISPATCH_WIDTH, "joinMode": "wait-all"})
    );
    let counts = |trace: &Trace| {
        let mut join = trace.event("core.dispatch.join")["payload"].clone();
        join.as_object_mut().unwrap().remove("mergeOrder");
        join
    };
    assert_eq!(counts(&on_aws), counts(&on_embedded));
    assert_eq!(
        counts(&on_aws),
        json!({"joinOutcome": "partial", "completedCount": WORKERS - 1, "failedCount": 1, "cancelledCount": 0})
    );
    for trace in [&on_aws, &on_embedded] {
        // Every child once in the merge order; the last completed one's mapping wins.
        let order = trace.merge_order();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..WORKERS).collect::<Vec<_>>(), "{order:?}");
        let last = order.iter().rev().find(|k| **k != FAILING_WORKER).unwrap();
        assert_eq!(trace.snapshot["variables"]["lastItem"], json!(format!("w{last}")), "{}", trace.snapshot);
        // Children by index: the failing worker failed, the others completed.
        for (index, (_, events)) in &trace.children {
            let end = events.last().unwrap()["type"].as_str().unwrap();
            let expected = if *index == FAILING_WORKER { "run.failed" } else { "run.completed" };
            assert_eq!(end, expected, "child {index}");
        }
    }
    let children = |trace: &Trace| {
        let completed = trace.parent.iter().find(|e| e["type"] == "node.completed" && e["nodeId"] == "dispatch");
        let outputs = completed.expect("the dispatch completed")["payload"]["outputs"].clone();
        let listed = outputs["children"].as_array().cloned().unwrap_or_default();
        listed
            .into_iter()
            .map(|child| (child["workflowId"].clone(), child["childStatus"].clone(), child["error"]["code"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(children(&on_aws), children(&on_embedded), "the node's children[], in index order");
    assert_eq!(children(&on_aws).len(), WORKERS);
    assert!((2..=DISPATCH_WIDTH).contains(&on_aws.peak_by_child_logs()), "{}", on_aws.peak_by_child_logs());
    assert!(on_embedded.peak_by_child_logs() <= DISPATCH_WIDTH, "{}", on_embedded.peak_by_child_logs());
}

/// The end of every child of a finished parent, by index, driving the stack until each is.
async fn child_ends(stack: &mut Stack, parent: &[Value], node_id: &str) -> BTreeMap<usize, String> {
    let mut ends = BTreeMap::new();
    for (index, child_id) in children_of(parent, node_id) {
        let child = stack.pump_until_terminal(&child_id, FAN_OUT_DEADLINE, false).await;
        ends.insert(index, child["status"].as_str().unwrap().to_owned());
    }
    ends
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn on_aws_a_quorum_join_cancels_its_losers() {
    let mut aws = aws_stack().await;
    let run_id = aws.create(json!({"workflowId": "fan-quorum"})).await;
    let snapshot = aws.pump_until_terminal(&run_id, FAN_OUT_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let parent = aws.debug_events(&run_id).await;
    let join = &parent.iter().find(|e| e["type"] == "core.dispatch.join").expect("a join")["payload"];
    assert_eq!(join["joinOutcome"], "satisfied", "the losers cancelled by the join do not count: {join}");
    assert_eq!((join["completedCount"].as_u64(), join["cancelledCount"].as_u64()), (Some(2), Some(3)), "{join}");
    let ends = child_ends(&mut aws, &parent, "dispatch").await;
    let expected: BTreeMap<usize, String> =
        [(0, "completed"), (1, "cancelled"), (2, "completed"), (3, "cancelled"), (4, "cancelled")]
            .into_iter()
            .map(|(k, s)| (k, s.to_owned()))
            .collect();
    assert_eq!(ends, expected);
    let completed = parent.iter().find(|e| e["type"] == "node.completed" && e["nodeId"] == "dispatch").unwrap();
    let listed = completed["payload"]["outputs"]["children"].as_array().cloned().unwrap();
    let statuses: Vec<&str> = listed.iter().map(|child| child["childStatus"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["completed", "cancelled", "completed", "cancelled", "cancelled"]);
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn on_aws_a_fail_fast_join_fails_the_run_and_cancels_the_rest() {
    let mut aws = aws_stack().await;
    let run_id = aws.create(json!({"workflowId": "fan-fail-fast"})).await;
    let snapshot = aws.pump_until_terminal(&run_id, FAN_OUT_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "fan_out_join_failed", "{snapshot}");
    let parent = aws.debug_events(&run_id).await;
    let join = &parent.iter().find(|e| e["type"] == "core.dispatch.join").expect("a join")["payload"];
    assert_eq!(join["joinOutcome"], "failed", "{join}");
    assert_eq!(join["failedCount"], 1, "{join}");
    let ends = child_ends(&mut aws, &parent, "dispatch").await;
    assert_eq!(ends.len(), 5, "every worker started (width 5): {ends:?}");
    assert_eq!(ends[&1], "failed");
    for index in [0, 2, 4] {
        assert_eq!(ends[&index], "cancelled", "slow worker {index}: {ends:?}");
    }
    assert!(matches!(ends[&3].as_str(), "completed" | "cancelled"), "{ends:?}");
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn on_aws_cancelling_a_run_mid_fan_out_leaves_no_child_running() {
    let mut aws = aws_stack().await;
    let run_id = aws.create(json!({"workflowId": "fan-loop-slow"})).await;
    // Drive it until the first window's children are all waiting in their delay.
    let started = Instant::now();
    loop {
        let parent = aws.debug_events(&run_id).await;
        let children = children_of(&parent, "loop");
        let mut waiting = 0;
        for child_id in children.values() {
            let events = aws.events(child_id).await;
            waiting += usize::from(events.iter().any(|e| e["type"] == "node.started" && e["nodeId"] == "wait"));
        }
        if waiting == LOOP_WIDTH {
            break;
        }
        assert!(started.elapsed() < FAN_OUT_DEADLINE, "the window never filled: {children:?}");
        Backend::Aws(&mut aws).tick().await;
    }
    let (status, body) = aws.api("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
    assert_eq!(status, 200, "{body}");
    let snapshot = aws.pump_until_terminal(&run_id, FAN_OUT_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "cancelled", "{snapshot}");
    let parent = aws.debug_events(&run_id).await;
    let ends = child_ends(&mut aws, &parent, "loop").await;
    assert_eq!(ends.len(), LOOP_WIDTH, "no child started after the cancel: {ends:?}");
    assert!(ends.values().all(|end| end == "cancelled" || end == "completed"), "{ends:?}");
    // Nothing is left to deliver to a child: the queues drain and every child stays ended.
    for _ in 0..20 {
        Backend::Aws(&mut aws).tick().await;
    }
    let mut backend = Backend::Aws(&mut aws);
    for child_id in children_of(&parent, "loop").values() {
        let child = backend.snapshot(child_id).await;
        assert!(is_terminal(&child), "{child}");
    }
    assert_eq!(children_of(&backend.debug_events(&run_id).await, "loop").len(), LOOP_WIDTH);
}
