//! Wire behaviour the official scenarios probe, through the router with `oneshot`: the
//! capability-toggle probe (`{name: <any>, value: null}` is a no-op), the per-item dispatch seam
//! (`POST /v1/host/sample/dispatch/per-item`), the concurrent-claim seam
//! (`POST /v1/host/sample/test/idempotency/concurrent-claim`) and the check of `callbackUrl`
//! on run creation.

mod support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use support::{assert_envelope, Harness, Setup};

/// `chain` and the `conformance-noop` extension, seams as asked.
async fn harness(test_seams: bool) -> Harness {
    Setup { workflows: &["chain"], test_seams, extensions: &["conformance-noop"], ..Setup::default() }.build().await
}

const TOGGLE: &str = "/v1/host/sample/test/capability-toggle";
const PER_ITEM: &str = "/v1/host/sample/dispatch/per-item";
const CLAIM: &str = "/v1/host/sample/test/idempotency/concurrent-claim";

#[tokio::test]
async fn the_toggle_probe_clears_an_absent_entry_as_a_no_op() {
    let h = harness(true).await;
    let (status, answer) = h.post_as(TOGGLE, "tester-key", json!({"name": "__probe__", "value": null})).await;
    assert_eq!((status, &answer["overlay"]), (StatusCode::OK, &json!({})), "{answer}");
    // Switching an unknown name on or off is still refused, as is a body without `value`.
    let (status, answer) = h.post_as(TOGGLE, "tester-key", json!({"name": "__probe__", "value": true})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&answer, "validation_error");
    let (status, _) = h.post_as(TOGGLE, "tester-key", json!({"name": "__probe__"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // A set switch survives the probe.
    h.post_as(TOGGLE, "tester-key", json!({"name": "dispatch.perItemInput", "value": false})).await;
    let (status, answer) = h.post_as(TOGGLE, "tester-key", json!({"name": "__probe__", "value": null})).await;
    assert_eq!((status, &answer["overlay"]), (StatusCode::OK, &json!({"dispatch.perItemInput": false})));
}

fn contact_ids(answer: &Value) -> Vec<Value> {
    answer["children"].as_array().unwrap().iter().map(|child| child["inputs"]["contactId"].clone()).collect()
}

#[tokio::test]
async fn the_per_item_seam_projects_each_item_into_its_child() {
    let h = harness(true).await;
    let before = h.run_counts();
    let items = json!([{"contactId": "c-1"}, {"contactId": "c-2"}]);
    let ids = json!(["conformance.child", "conformance.child"]);
    let (status, answer) =
        h.post_as(PER_ITEM, "tester-key", json!({"nextWorkerIds": ids, "nextWorkerInputs": items})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(contact_ids(&answer), [json!("c-1"), json!("c-2")]);
    assert_eq!(answer["children"][1]["workflowId"], "conformance.child");

    let mapped = json!({"nextWorkerIds": ids, "nextWorkerInputs": items,
                        "inputMapping": {"contactId": "from-mapping", "region": "us"}});
    let (status, answer) = h.post_as(PER_ITEM, "tester-key", mapped).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(contact_ids(&answer), [json!("c-1"), json!("c-2")], "the per-item value wins");
    assert!(answer["children"].as_array().unwrap().iter().all(|c| c["inputs"]["region"] == "us"), "{answer}");

    let replay = json!({"nextWorkerIds": ids, "nextWorkerInputs": items, "replay": true});
    let (status, answer) = h.post_as(PER_ITEM, "tester-key", replay).await;
    assert_eq!((status, &answer["replayed"]), (StatusCode::OK, &json!(true)), "{answer}");
    assert_eq!(contact_ids(&answer), [json!("c-1"), json!("c-2")]);

    let mismatch = json!({"nextWorkerIds": ids, "nextWorkerInputs": [{"contactId": "c-1"}]});
    let (status, answer) = h.post_as(PER_ITEM, "tester-key", mismatch.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_envelope(&answer, "validation_error");
    assert_eq!(answer["details"]["children"], json!([]), "{answer}");

    h.post_as(TOGGLE, "tester-key", json!({"name": "dispatch.perItemInput", "value": false})).await;
    let (status, answer) =
        h.post_as(PER_ITEM, "tester-key", json!({"nextWorkerIds": ids, "nextWorkerInputs": items})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "fail-closed while switched off: {answer}");
    assert_envelope(&answer, "validation_error");
    assert_eq!(h.run_counts(), before, "the seam persists no run, event or task");

    let (status, answer) = h.post_as(PER_ITEM, "tester-key", json!({"nextWorkerIds": "x"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&answer, "validation_error");
}

#[tokio::test]
async fn the_concurrent_claim_seam_lets_exactly_one_executor_through() {
    let h = harness(true).await;
    let before = h.run_counts();
    for executors in [2, 5] {
        let (status, answer) = h.post_as(CLAIM, "tester-key", json!({"executors": executors})).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["attempted"], executors);
        assert_eq!(answer["delivered"], 1, "{answer}");
        let minted = answer["mintedIds"].as_array().unwrap();
        assert_eq!(minted.len(), executors);
        assert!(minted.iter().all(|id| *id == answer["logicalInvocationId"]), "{answer}");
    }
    let (_, first) = h.post_as(CLAIM, "tester-key", json!({"executors": 2})).await;
    let (_, second) = h.post_as(CLAIM, "tester-key", json!({"executors": 2})).await;
    assert_ne!(first["logicalInvocationId"], second["logicalInvocationId"], "each probe is its own effect");
    assert_eq!(h.run_counts(), before, "the claims are released afterwards");
    for bad in [json!({"executors": 1}), json!({"executors": 1000}), json!({"executors": "2"})] {
        let (status, answer) = h.post_as(CLAIM, "tester-key", bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_envelope(&answer, "validation_error");
    }
}

#[tokio::test]
async fn the_new_seams_are_gated_like_the_others() {
    let off = harness(false).await;
    let on = harness(true).await;
    for (path, body) in [(PER_ITEM, json!({"nextWorkerIds": ["a"]})), (CLAIM, json!({"executors": 2}))] {
        let (status, answer) = off.post_as(path, "tester-key", body.clone()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_envelope(&answer, "not_found");
        let (status, answer) = on.post_as(path, "alice-key", body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: `*` does not grant test:seams");
        assert_envelope(&answer, "forbidden");
    }
}

#[tokio::test]
async fn a_callback_url_is_accepted_when_absolute_http_and_refused_by_name_otherwise() {
    let h = harness(false).await;
    let before = h.run_counts();
    for bad in ["/relative/hook", "ftp://example.invalid/hook", "not a url"] {
        let body = json!({"workflowId": "chain", "callbackUrl": bad});
        let (status, answer) = h.post_as("/v1/runs", "alice-key", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {answer}");
        assert_envelope(&answer, "validation_error");
        assert!(answer["message"].as_str().unwrap().contains("callbackUrl"), "{answer}");
        assert_eq!(answer["details"]["field"], "callbackUrl", "{answer}");
    }
    assert_eq!(h.run_counts(), before, "a refused callbackUrl creates no run");
    let body = json!({"workflowId": "chain", "callbackUrl": "https://example.invalid/hook"});
    let (status, answer) = h.post_as("/v1/runs", "alice-key", body).await;
    assert!(status.is_success(), "{answer}");
}

#[tokio::test]
async fn the_per_item_seam_refuses_more_workers_than_it_simulates_instead_of_cutting_the_list() {
    let h = harness(true).await;
    let ids: Vec<&str> = vec!["conformance.child"; 65];
    let (status, answer) = h.post_as(PER_ITEM, "tester-key", json!({"nextWorkerIds": ids})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_envelope(&answer, "validation_error");
    assert_eq!(answer["details"]["limit"], 64, "{answer}");
    let ids: Vec<&str> = vec!["conformance.child"; 64];
    let (status, answer) = h.post_as(PER_ITEM, "tester-key", json!({"nextWorkerIds": ids})).await;
    assert_eq!((status, answer["children"].as_array().map(Vec::len)), (StatusCode::OK, Some(64)), "{answer}");
}
