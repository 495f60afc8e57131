//! The rerun scenario (`POST /v1/runs/{id}:rerun`, see `trellis_core::cache`), played the
//! same way on every backend: a 10-node workflow with two model calls, a `GET`, a `POST`, a
//! `POST` marked `settings.cacheable` and pure nodes, against the testkit's fake model and
//! HTTP server, whose request counts say what was called again.

use serde_json::{json, Value};

use crate::fake_model::FakeModel;
use crate::http_server::{Reply, TestServer};
use crate::script::Runner;
use crate::Driver;

/// The scenario's workflow id.
pub const WORKFLOW_ID: &str = "rerun-ten";

/// Ten nodes in a chain: `fetch` (GET `/facts?topic=`), `summary` (a model call over the
/// facts and the topic), `styled` (a model call in the run's tone), `record` (POST
/// `/record`), `publish` (POST `/publish` of the styled text, `settings.cacheable: true`)
/// and five pure nodes between them.
pub fn workflow(server: &TestServer) -> Value {
    let nodes = json!([
        {"id": "begin", "typeId": "core.noop"},
        {"id": "fetch", "typeId": "core.http.request",
         "config": {"method": "GET", "url": server.url("/facts?topic={{variables.topic}}")}},
        {"id": "facts", "typeId": "core.identity"},
        {"id": "summary", "typeId": "core.ai.callPrompt",
         "config": {"prompt": "Summarise {{variables.fetch.body.fact}} about {{variables.topic}}"}},
        {"id": "styled", "typeId": "core.ai.callPrompt", "config": {"prompt": "Say it in a {{variables.tone}} tone"}},
        {"id": "between", "typeId": "core.noop"},
        {"id": "record", "typeId": "core.http.request",
         "config": {"method": "POST", "url": server.url("/record"), "body": {"topic": "{{variables.topic}}"}}},
        {"id": "publish", "typeId": "core.http.request", "settings": {"cacheable": true},
         "config": {"method": "POST", "url": server.url("/publish"), "body": {"text": "{{variables.styled.text}}"}}},
        {"id": "tally", "typeId": "core.identity"},
        {"id": "end", "typeId": "core.noop"},
    ]);
    let edges: Vec<Value> = nodes
        .as_array()
        .expect("nodes")
        .windows(2)
        .enumerate()
        .map(|(index, pair)| json!({"id": format!("e{index}"), "sourceNodeId": pair[0]["id"], "targetNodeId": pair[1]["id"]}))
        .collect();
    json!({
        "id": WORKFLOW_ID, "name": WORKFLOW_ID, "version": "1", "nodes": nodes, "edges": edges,
        "variables": [{"name": "topic", "type": "string"}, {"name": "tone", "type": "string"}],
    })
}

/// Scripts the server's three routes.
pub fn serve(server: &TestServer) {
    server.route("/facts", vec![Reply::json(200, &json!({"fact": "water is wet"}))]);
    server.route("/record", vec![Reply::json(201, &json!({"recorded": true}))]);
    server.route("/publish", vec![Reply::json(201, &json!({"published": true}))]);
}

/// What one run called, and what it took from the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calls {
    /// Provider requests.
    pub model: usize,
    /// Requests to `/facts`, `/record`, `/publish`.
    pub http: [usize; 3],
    /// The nodes a `trellis.node.replayed` names, in order.
    pub replayed: Vec<String>,
}

/// The counters now.
fn counts(model: &FakeModel, server: &TestServer) -> (usize, [usize; 3]) {
    let http = ["/facts", "/record", "/publish"].map(|path| server.requests_to(path).len());
    (model.requests().len(), http)
}

/// Waits for `run_id` to end `completed`; what it called since `before` and what it replayed.
async fn finished(
    driver: &mut dyn Driver,
    run_id: &str,
    model: &FakeModel,
    server: &TestServer,
    before: (usize, [usize; 3]),
) -> (Calls, Value) {
    let snapshot = Runner::new(driver).await_terminal(run_id).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let path = format!("/v1/runs/{run_id}/events/poll?timeout=0&streamMode=debug");
    let (status, page) = driver.call("GET", &path, None, true).await;
    assert_eq!(status, 200, "{page}");
    let replayed = page["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|event| event["type"] == "trellis.node.replayed")
        .map(|event| event["nodeId"].as_str().unwrap_or_default().to_owned())
        .collect();
    let (models, http) = counts(model, server);
    let calls = Calls { model: models - before.0, http: [0, 1, 2].map(|i| http[i] - before.1[i]), replayed };
    (calls, snapshot)
}

/// Reruns `source` with `body`; the `201` body.
pub async fn rerun(driver: &mut dyn Driver, source: &str, body: Value) -> Value {
    let (status, created) = driver.call("POST", &format!("/v1/runs/{source}:rerun"), Some(body), true).await;
    assert_eq!(status, 201, "{created}");
    created
}

/// The scenario (the workflow registered, [`serve`] scripted): a run calls everything; a
/// rerun with nothing changed calls no provider and no `GET`, only the `POST` that is not
/// marked cacheable, with the same outputs; a rerun with a new `tone` calls exactly the model
/// node that reads it and the cacheable `POST` that depends on its answer; `useCache: false`
/// calls everything again. Returns the three run ids (source, unchanged, changed).
pub async fn scenario(driver: &mut dyn Driver, model: &FakeModel, server: &TestServer) -> [String; 3] {
    let (_, discovery) = driver.call("GET", "/.well-known/openwop", None, false).await;
    let advertised = &discovery["runs"]["rerun"];
    assert_eq!((advertised["supported"].as_bool(), advertised["cacheScope"].as_str()), (Some(true), Some("tenant")));
    let before = counts(model, server);
    let body = json!({"workflowId": WORKFLOW_ID, "inputs": {"topic": "water", "tone": "dry"}});
    let (status, created) = driver.call("POST", "/v1/runs", Some(body), true).await;
    assert_eq!(status, 201, "{created}");
    let source = created["runId"].as_str().expect("run id").to_owned();
    let (calls, original) = finished(driver, &source, model, server, before).await;
    assert_eq!(calls, Calls { model: 2, http: [1, 1, 1], replayed: vec![] }, "the source calls everything");

    let before = counts(model, server);
    let same = rerun(driver, &source, json!({})).await;
    assert_eq!((same["sourceRunId"].as_str(), same["useCache"].as_bool()), (Some(source.as_str()), Some(true)));
    let same_id = same["runId"].as_str().expect("run id").to_owned();
    let (calls, snapshot) = finished(driver, &same_id, model, server, before).await;
    assert_eq!(
        calls,
        Calls {
            model: 0,
            http: [0, 1, 0],
            replayed: ["fetch", "summary", "styled", "publish"].map(String::from).to_vec()
        },
        "nothing changed: no provider call, no GET; the plain POST runs again, the cacheable one does not"
    );
    assert_eq!(snapshot["variables"]["styled"], original["variables"]["styled"]);
    assert_eq!(snapshot["variables"]["summary"], original["variables"]["summary"]);
    assert_eq!(snapshot["variables"]["fetch"]["body"], original["variables"]["fetch"]["body"]);

    let before = counts(model, server);
    let changed = rerun(driver, &same_id, json!({"inputs": {"topic": "water", "tone": "warm"}})).await;
    let changed_id = changed["runId"].as_str().expect("run id").to_owned();
    let (calls, snapshot) = finished(driver, &changed_id, model, server, before).await;
    assert_eq!(
        calls,
        Calls { model: 1, http: [0, 1, 1], replayed: ["fetch", "summary"].map(String::from).to_vec() },
        "a new tone: the node reading it and the POST publishing its answer run again, nothing else"
    );
    assert_ne!(snapshot["variables"]["styled"], original["variables"]["styled"]);
    assert_eq!(snapshot["variables"]["summary"], original["variables"]["summary"], "a rerun of a rerun keeps its hits");

    let before = counts(model, server);
    let live = rerun(driver, &source, json!({"useCache": false})).await;
    assert_eq!(live["useCache"], false);
    let (calls, _) = finished(driver, live["runId"].as_str().expect("run id"), model, server, before).await;
    assert_eq!(calls, Calls { model: 2, http: [1, 1, 1], replayed: vec![] }, "without the cache: everything");

    // The rows a caller can get wrong.
    for (body, field) in [
        (json!({"useCache": "yes"}), "useCache"),
        (json!({"inputs": [1]}), "inputs"),
        (json!({"mode": "replay"}), "mode"),
    ] {
        let (status, error) = driver.call("POST", &format!("/v1/runs/{source}:rerun"), Some(body), true).await;
        assert_eq!((status, error["details"]["field"].as_str()), (400, Some(field)), "{error}");
    }
    let (status, error) =
        driver.call("POST", &format!("/v1/runs/{source}:rerun"), Some(json!({"inputs": {"topic": 5}})), true).await;
    assert_eq!(status, 400, "inputs the workflow refuses: {error}");
    let (status, _) = driver.call("POST", "/v1/runs/run-none:rerun", Some(json!({})), true).await;
    assert_eq!(status, 404);
    [source, same_id, changed_id]
}
