//! The parallel fan-out seam (`POST /v1/host/sample/dispatch/fanout`, RFC 0118) through the
//! router with `oneshot`: a `wait-all` join met by three children with its merge order, a
//! failed child making it `partial`, `fail-fast` making it `failed`, the `order` extension, a
//! refused config, and the gate.

mod support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use support::{assert_envelope, Harness, Setup};

const FAN_OUT: &str = "/v1/host/sample/dispatch/fanout";

async fn harness(test_seams: bool) -> Harness {
    Setup { workflows: &["chain"], test_seams, extensions: &["conformance-noop"], ..Setup::default() }.build().await
}

fn three_workers(config: Value) -> Value {
    json!({ "nextWorkerIds": ["worker.a", "worker.b", "worker.c"], "config": config })
}

fn child_ids(answer: &Value) -> Vec<Value> {
    answer["children"].as_array().expect("children").iter().map(|child| child["childRunId"].clone()).collect()
}

fn statuses(answer: &Value) -> Vec<Value> {
    answer["children"].as_array().expect("children").iter().map(|child| child["childStatus"].clone()).collect()
}

#[tokio::test]
async fn wait_all_is_satisfied_by_three_children_merged_in_the_order_they_ended() {
    let h = harness(true).await;
    let before = h.run_counts();
    let body = three_workers(json!({ "fanOutPolicy": "parallel", "joinPolicy": { "mode": "wait-all" } }));
    let (status, answer) = h.post_as(FAN_OUT, "tester-key", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["joinOutcome"], "satisfied", "{answer}");
    let workflows: Vec<&Value> = answer["children"].as_array().unwrap().iter().map(|c| &c["workflowId"]).collect();
    assert_eq!(workflows, [&json!("worker.a"), &json!("worker.b"), &json!("worker.c")], "{answer}");
    assert_eq!(statuses(&answer), [json!("completed"), json!("completed"), json!("completed")]);
    assert_eq!(answer["mergeOrder"], json!(child_ids(&answer)), "children end in start order: {answer}");
    let events: Vec<&str> = answer["events"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(events.contains(&"core.dispatch.fanOut") && events.contains(&"core.dispatch.join"), "{events:?}");
    assert_eq!(events.iter().filter(|kind| **kind == "node.dispatched").count(), 3, "{events:?}");
    assert_eq!(h.run_counts(), before, "the seam persists no run, event or task");

    // `order` (a Trellis extension) sets the finishing order, so the merge order.
    let mut body = three_workers(json!({}));
    body["order"] = json!([2, 0, 1]);
    let (status, answer) = h.post_as(FAN_OUT, "tester-key", body).await;
    assert_eq!((status, &answer["joinOutcome"]), (StatusCode::OK, &json!("satisfied")), "{answer}");
    let ids = child_ids(&answer);
    assert_eq!(answer["mergeOrder"], json!([ids[2], ids[0], ids[1]]), "{answer}");
}

#[tokio::test]
async fn a_failed_child_under_collect_makes_the_join_partial() {
    let h = harness(true).await;
    let mut body = three_workers(json!({ "joinPolicy": { "mode": "wait-all", "onChildFailure": "collect" } }));
    body["fail"] = json!([1]);
    let (status, answer) = h.post_as(FAN_OUT, "tester-key", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["joinOutcome"], "partial", "{answer}");
    assert_eq!(statuses(&answer), [json!("completed"), json!("failed"), json!("completed")], "{answer}");
    assert_eq!(answer["children"][1]["error"]["code"], "child_failed", "{answer}");
    assert_eq!(answer["mergeOrder"].as_array().unwrap().len(), 3, "{answer}");
}

#[tokio::test]
async fn a_failed_child_under_fail_fast_fails_the_join_and_cancels_the_rest() {
    let h = harness(true).await;
    let config = json!({ "joinPolicy": { "mode": "wait-all", "onChildFailure": "fail-fast" }, "maxConcurrency": 3 });
    let mut body = three_workers(config);
    body["fail"] = json!([0]);
    let (status, answer) = h.post_as(FAN_OUT, "tester-key", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["joinOutcome"], "failed", "{answer}");
    assert_eq!(statuses(&answer), [json!("failed"), json!("cancelled"), json!("cancelled")], "{answer}");
    assert_eq!(answer["cancelledCount"], 2, "the losers are cancelled: {answer}");
    let ids = child_ids(&answer);
    assert_eq!(answer["mergeOrder"][0], ids[0], "the failed child ended first: {answer}");
}

#[tokio::test]
async fn a_config_the_dispatch_node_refuses_is_a_validation_error_naming_the_rule() {
    let h = harness(true).await;
    let refused = [
        (json!({ "joinPolicy": { "mode": "most" } }), "joinPolicy.mode"),
        (json!({ "joinPolicy": { "mode": "quorum" } }), "joinPolicy.quorum"),
        (json!({ "maxConcurrency": 0 }), "maxConcurrency"),
        (json!({ "fanOutPolicy": "sequential" }), "parallel"),
        (json!({ "bogus": true }), "bogus"),
    ];
    for (config, rule) in refused {
        let (status, answer) = h.post_as(FAN_OUT, "tester-key", three_workers(config.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{config}: {answer}");
        assert_envelope(&answer, "validation_error");
        assert!(answer["message"].as_str().unwrap().contains(rule), "{config}: {answer}");
    }
    let quorum = json!({ "joinPolicy": { "mode": "quorum", "quorum": 4 } });
    let (status, answer) = h.post_as(FAN_OUT, "tester-key", three_workers(quorum)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a quorum above the worker count: {answer}");
    assert_envelope(&answer, "validation_error");
    for bad in [json!({ "nextWorkerIds": [] }), json!({ "nextWorkerIds": ["a"], "fail": [5] }), json!({ "x": 1 })] {
        let (status, answer) = h.post_as(FAN_OUT, "tester-key", bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {answer}");
        assert_envelope(&answer, "validation_error");
    }
}

#[tokio::test]
async fn the_fan_out_seam_is_gated_like_the_others() {
    let body = json!({ "nextWorkerIds": ["a", "b"] });
    let (status, answer) = harness(false).await.post_as(FAN_OUT, "tester-key", body.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert_envelope(&answer, "not_found");
    let (status, answer) = harness(true).await.post_as(FAN_OUT, "alice-key", body).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "`*` does not grant test:seams: {answer}");
    assert_envelope(&answer, "forbidden");
}
