//! The JSON event list (`Accept: application/json` on `GET /v1/runs/{runId}/events`) is
//! paged like the poll route: `limit` events after `lastSequence` (or `Last-Event-ID`), and
//! `isComplete` only when the run is terminal and the page leaves nothing behind.

mod support;

use serde_json::{json, Value};
use support::{Harness, Setup, KEY};
use trellis_core::engine::{Effect, Input};
use trellis_core::ports::LocalQueue;

/// One request with the all-scopes key asking for JSON; the answer's body, which must be JSON.
async fn call(h: &Harness, method: &str, uri: &str, body: Option<Value>) -> Value {
    let headers = [("accept", "application/json"), ("content-type", "application/json")];
    let answer = h.send(method, uri, Some(KEY), &headers, body).await;
    serde_json::from_str(&answer.text).unwrap()
}

#[tokio::test]
async fn the_json_event_list_is_paged_and_says_when_it_is_incomplete() {
    let h = Setup { workflows: &["chain"], ..Setup::default() }.build().await;
    let (store, services) = (&h.store, &h.services);
    let created = call(&h, "POST", "/v1/runs", Some(json!({"workflowId": "chain"}))).await;
    let run_id = created["runId"].as_str().expect("created").to_owned();
    // Run it to the end, as the worker would.
    loop {
        let tasks = store.claim_due(4_102_444_800_000, 1_000, 10).await.unwrap();
        if tasks.is_empty() {
            break;
        }
        for task in tasks {
            if let Effect::Step { node_id, activation, .. } = task.effect {
                let step = Input::Step { node_id, activation };
                services.advance(None, &run_id, step, &trellis_core::service::NoHooks).await.unwrap().unwrap();
            }
            store.ack(&task.id).await.unwrap();
        }
    }
    let all = call(&h, "GET", &format!("/v1/runs/{run_id}/events?streamMode=debug"), None).await;
    assert_eq!((all["runStatus"].as_str(), all["isComplete"].as_bool()), (Some("completed"), Some(true)), "{all}");
    let total = all["events"].as_array().unwrap().len();
    assert!(total > 3, "{all}");

    let mut seen = Vec::new();
    let mut cursor = -1;
    loop {
        let uri = format!("/v1/runs/{run_id}/events?streamMode=debug&limit=2&lastSequence={cursor}");
        let page = call(&h, "GET", &uri, None).await;
        let events = page["events"].as_array().unwrap();
        assert!(events.len() <= 2, "{page}");
        seen.extend(events.iter().map(|event| event["sequence"].as_i64().unwrap()));
        cursor = page["lastEventSeq"].as_i64().unwrap();
        if page["isComplete"] == json!(true) {
            break;
        }
        assert!(seen.len() < total, "a page before the end must not say isComplete: {page}");
        assert!(seen.len() <= total, "more pages than events: {page}");
    }
    assert_eq!(seen, (0..total as i64).collect::<Vec<_>>(), "every event once, in order");
    let first = call(&h, "GET", &format!("/v1/runs/{run_id}/events?streamMode=debug&limit=2"), None).await;
    assert_eq!(first["isComplete"], json!(false), "a truncated page of a terminal run is not complete: {first}");
    let refused = call(&h, "GET", &format!("/v1/runs/{run_id}/events?limit=0"), None).await;
    assert_eq!(refused["error"], "validation_error", "{refused}");
}
