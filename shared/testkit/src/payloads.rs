//! The large-payload scenario (`trellis_core::blob`), played the same way on every backend: a
//! child run fetches a 5 MB JSON document with an HTTP node whose body cap is raised
//! (`config.maxResponseBodyBytes`), its parent maps the response into a variable and POSTs
//! the body on. The value round-trips through the snapshots, the events and the blob route,
//! and reaches the second request whole.

use serde_json::{json, Value};

use crate::http_server::{Reply, TestServer};
use crate::script::Runner;
use crate::Driver;

/// The parent workflow's id.
pub const PARENT: &str = "payload-parent";
/// The child workflow's id.
pub const CHILD: &str = "payload-child";

/// The document the server serves at `/big`: about 5 MB of JSON.
pub fn big_document() -> Value {
    let rows: Vec<Value> = (0..40_000)
        .map(|index| json!({"index": index, "text": format!("row {index:06} {}", "y".repeat(100))}))
        .collect();
    json!({"kind": "big", "rows": rows})
}

/// The child (one GET with an 8 MiB cap) and the parent (the child, then a POST of its body).
pub fn workflows(server: &TestServer) -> [Value; 2] {
    let child = json!({
        "id": CHILD, "name": CHILD, "version": "1",
        "nodes": [{"id": "fetch", "typeId": "core.http.request",
                   "config": {"method": "GET", "url": server.url("/big"), "maxResponseBodyBytes": 8_388_608, "timeoutMs": 20_000}}],
        "edges": [],
    });
    let parent = json!({
        "id": PARENT, "name": PARENT, "version": "1",
        "nodes": [
            {"id": "call", "typeId": "core.subWorkflow",
             "config": {"workflowId": CHILD, "outputMapping": {"fetched": "fetch"}}},
            {"id": "forward", "typeId": "core.http.request",
             "config": {"method": "POST", "url": server.url("/echo"), "body": "{{variables.fetched.body}}", "timeoutMs": 20_000}},
        ],
        "edges": [{"id": "e", "sourceNodeId": "call", "targetNodeId": "forward"}],
    });
    [child, parent]
}

/// Scripts the server: `/big` serves [`big_document`], `/echo` answers `204`.
pub fn serve(server: &TestServer) -> Value {
    let document = big_document();
    server.route("/big", vec![Reply::json(200, &document)]);
    server.route("/echo", vec![Reply::status(204)]);
    document
}

/// What the scenario leaves for the backend's own checks.
#[derive(Debug, Clone)]
pub struct Played {
    /// The parent run.
    pub parent: String,
    /// The child run.
    pub child: String,
    /// The reference the body is stored under.
    pub reference: String,
}

/// The reference object at `value`, asserting that it is one (of a value over 256 KiB,
/// addressed by its SHA-256); its `ref`.
fn reference_at(value: &Value, what: &str) -> String {
    let inner = &value["$trellisBlob"];
    assert!(
        inner["ref"].is_string() && inner["size"].as_u64().is_some_and(|size| size > 256 * 1024),
        "{what}: {value:.300}"
    );
    assert_eq!(inner["ref"], inner["sha256"], "{what}");
    inner["ref"].as_str().unwrap_or_default().to_owned()
}

/// Plays the scenario (the workflows registered, [`serve`] scripted): both runs complete, the
/// document's rows show as one reference in the child's and the parent's snapshot and in the
/// child's `node.completed`, the blob route of either run returns them, the parent's POST
/// carried the whole document, and a reference the run does not hold is `404`.
pub async fn scenario(driver: &mut dyn Driver, server: &TestServer, document: &Value) -> Played {
    let (_, discovery) = driver.call("GET", "/.well-known/openwop", None, false).await;
    assert_eq!(
        discovery["runs"]["payloads"],
        json!({"inlineMaxBytes": 262_144, "maxValueBytes": 67_108_864, "blobs": true, "reference": "$trellisBlob"})
    );
    let (status, created) = driver.call("POST", "/v1/runs", Some(json!({"workflowId": PARENT})), true).await;
    assert_eq!(status, 201, "{created}");
    let parent = created["runId"].as_str().expect("run id").to_owned();
    let mut runner = Runner::new(driver);
    let snapshot = runner
        .await_snapshot_within(&parent, "completed", std::time::Duration::from_secs(60), |snapshot| {
            snapshot["status"].as_str().is_some_and(crate::script::is_terminal)
        })
        .await;
    assert_eq!(snapshot["status"], "completed", "{snapshot:.2000}");
    // Spilling descends: the document's `rows` go apart, its `kind` and the status stay inline.
    let fetched = &snapshot["variables"]["fetched"];
    let reference = reference_at(&fetched["body"]["rows"], "the parent's variable");
    assert_eq!((fetched["status"].as_u64(), fetched["body"]["kind"].as_str()), (Some(200), Some("big")));

    let events = runner.events(&parent).await;
    let dispatched = events.iter().find(|event| event["type"] == "node.dispatched").expect("the child");
    let child = dispatched["payload"]["childRunId"].as_str().expect("child id").to_owned();
    let child_snapshot = runner.await_terminal(&child).await;
    assert_eq!(reference_at(&child_snapshot["variables"]["fetch"]["body"]["rows"], "the child's variable"), reference);
    let child_events = runner.events(&child).await;
    let completed = child_events.iter().find(|event| event["type"] == "node.completed").expect("the fetch");
    assert_eq!(reference_at(&completed["payload"]["outputs"]["body"]["rows"], "the child's node.completed"), reference);
    drop(runner);

    for run_id in [&parent, &child] {
        let (status, value) = driver.call("GET", &format!("/v1/runs/{run_id}/blobs/{reference}"), None, true).await;
        assert_eq!(status, 200, "the blob of {run_id}");
        assert!(value == document["rows"], "the blob route answers the value itself");
    }
    let (status, missing) =
        driver.call("GET", &format!("/v1/runs/{parent}/blobs/{}", "0".repeat(64)), None, true).await;
    assert_eq!((status, missing["error"].as_str()), (404, Some("not_found")), "{missing}");
    let (status, _) = driver.call("GET", &format!("/v1/runs/{parent}/blobs/{reference}"), None, false).await;
    assert_eq!(status, 401);

    let forwarded = server.requests_to("/echo");
    assert_eq!(forwarded.len(), 1);
    assert!(&forwarded[0].json() == document, "the POST carried the whole document, read back from its blob");
    Played { parent, child, reference }
}
