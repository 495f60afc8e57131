//! The six agent-workflow patterns shipped in `examples/workflows/patterns/`, checked on any
//! backend: each submodule plays its pattern's fixture scenarios (the model answers of
//! `examples/workflows/patterns/fixtures/<pattern>.json`, served by the content-routed
//! [`FakeModel`]) through a [`Driver`] and asserts the documented outcome — the embedded host's
//! suite (`tests/e2e_patterns.rs`) and the emulated AWS stack's
//! (`shared/aws/tests/emulated_patterns.rs`) call the same functions, so both backends are held
//! to one behaviour.
//!
//! A pattern module exposes `pub async fn check(env: &mut Env<'_>)`, which runs every
//! scenario of its fixture and asserts the run's status, outputs and the number of model calls.

pub mod adversarial_verification;
pub mod classify_and_act;
pub mod fan_out_and_synthesize;
pub mod generate_and_filter;
pub mod loop_until_done;
pub mod tournament;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::fake_model::fixture::Fixture;
use crate::fake_model::{FakeModel, ModelRequest};
use crate::http_server::TestServer;
use crate::script::{is_terminal, Runner};
use crate::Driver;

/// How long a pattern run may take to reach what a check waits for (the emulated stack pumps
/// its queues step by step; a pattern makes up to a dozen model calls and starts children).
pub const PATTERN_DEADLINE: Duration = Duration::from_secs(60);

/// The pattern ids, in the order of the docs.
pub const PATTERNS: [&str; 6] = [
    "classify-and-act",
    "fan-out-and-synthesize",
    "adversarial-verification",
    "generate-and-filter",
    "tournament",
    "loop-until-done",
];

/// `examples/workflows/patterns` of this repository.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/workflows/patterns")
}

/// Every definition of [`dir`] (its top-level `*.json` files, sorted by name).
pub fn definitions() -> Vec<Value> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("examples/workflows/patterns")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_file() && path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).expect("pattern definition");
            serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        })
        .collect()
}

/// The model fixture of `pattern` (`fixtures/<pattern>.json` under [`dir`]).
pub fn fixture(pattern: &str) -> Fixture {
    let path = dir().join("fixtures").join(format!("{pattern}.json"));
    Fixture::load(&path).unwrap_or_else(|error| panic!("{error}"))
}

/// What a pattern check needs: the backend, the fake model it is configured with, and a local
/// HTTP server for the patterns' HTTP actions (the host must allow 127.0.0.1).
pub struct Env<'a> {
    /// The backend.
    pub driver: &'a mut dyn Driver,
    /// The model provider every host provider of the check points at.
    pub model: &'a FakeModel,
    /// Receives the patterns' HTTP calls.
    pub http: &'a TestServer,
}

impl Env<'_> {
    /// Registers every pattern definition for the driver's tenant (`POST /v1/workflows`; one
    /// already registered is accepted as it is).
    pub async fn register_all(&mut self) {
        for definition in definitions() {
            let (status, body) = self.driver.call("POST", "/v1/workflows", Some(definition.clone()), true).await;
            assert!(status == 200 || status == 201, "register {}: {status} {body}", definition["id"]);
        }
    }

    /// Serves scenario `scenario` of `pattern`'s fixture on the fake model (every earlier route
    /// and recorded request forgotten); returns the number of replies it scripts.
    pub fn script(&mut self, pattern: &str, scenario: &str) -> usize {
        self.driver.scenario(scenario);
        let fixture = fixture(pattern);
        let routes = fixture.routes(scenario).unwrap_or_else(|error| panic!("{pattern}: {error}"));
        let count = routes.iter().map(|route| route.replies.len()).sum();
        self.model.set_routes(routes);
        self.model.clear_requests();
        count
    }

    /// The model requests received since the last [`Env::script`].
    pub fn model_requests(&self) -> Vec<ModelRequest> {
        self.model.requests()
    }

    /// `POST /v1/runs` with `body` (its `workflowId` set to `workflow_id`); the run's id.
    pub async fn start(&mut self, workflow_id: &str, mut body: Value) -> String {
        if !body.is_object() {
            body = json!({});
        }
        body["workflowId"] = json!(workflow_id);
        let (status, created) = self.driver.call("POST", "/v1/runs", Some(body), true).await;
        assert_eq!(status, 201, "start {workflow_id}: {created}");
        created["runId"].as_str().expect("runId").to_owned()
    }

    /// `GET /v1/runs/{run_id}`.
    pub async fn snapshot(&mut self, run_id: &str) -> Value {
        let (status, body) = self.driver.call("GET", &format!("/v1/runs/{run_id}"), None, true).await;
        assert_eq!(status, 200, "snapshot of {run_id}: {body}");
        body
    }

    /// Waits (at most [`PATTERN_DEADLINE`]) until the run's snapshot satisfies `done`.
    pub async fn wait(&mut self, run_id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        Runner::new(&mut *self.driver).await_snapshot_within(run_id, what, PATTERN_DEADLINE, done).await
    }

    /// Waits until the run is terminal; its snapshot.
    pub async fn terminal(&mut self, run_id: &str) -> Value {
        self.wait(run_id, "terminal status", |s| s["status"].as_str().is_some_and(is_terminal)).await
    }

    /// Waits until the run has status `status`; its snapshot.
    pub async fn status(&mut self, run_id: &str, status: &str) -> Value {
        self.wait(run_id, status, |s| s["status"] == status).await
    }

    /// The run's whole log, the `debug` mode's (every event the run committed).
    pub async fn events(&mut self, run_id: &str) -> Vec<Value> {
        let path = format!("/v1/runs/{run_id}/events/poll?timeout=0&streamMode=debug");
        let (status, body) = self.driver.call("GET", &path, None, true).await;
        assert_eq!(status, 200, "events of {run_id}: {body}");
        body["events"].as_array().cloned().unwrap_or_default()
    }

    /// Resolves the interrupt of `node_id` on `run_id` with `resume_value`
    /// (`POST /v1/runs/{runId}/interrupts/{nodeId}`).
    pub async fn resolve(&mut self, run_id: &str, node_id: &str, resume_value: Value) {
        let path = format!("/v1/runs/{run_id}/interrupts/{node_id}");
        let (status, body) = self.driver.call("POST", &path, Some(json!({ "resumeValue": resume_value })), true).await;
        assert_eq!(status, 200, "resolve {node_id} of {run_id}: {body}");
    }
}

/// The payloads of the events of `event_type` in `events`.
pub fn payloads<'e>(events: &'e [Value], event_type: &str) -> Vec<&'e Value> {
    events.iter().filter(|event| event["type"] == event_type).map(|event| &event["payload"]).collect()
}

/// The error code of the run's `run.failed` (`None` if it did not fail).
pub fn failure_code(snapshot: &Value) -> Option<&str> {
    snapshot["error"]["code"].as_str()
}

/// The text of `request`'s first message of `role` (string content; empty if none).
pub fn message_text(request: &ModelRequest, role: &str) -> String {
    request
        .messages()
        .iter()
        .find(|message| message["role"] == role)
        .and_then(|message| message["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The first scripted `json` answer of the route whose `when` is `when` in scenario `scenario`
/// of `pattern`'s fixture file.
pub fn scripted_json(pattern: &str, scenario: &str, when: &str) -> Value {
    let path = dir().join("fixtures").join(format!("{pattern}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let document: Value = serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let routes = document["scenarios"][scenario]["routes"].as_array().cloned().unwrap_or_default();
    let route = routes
        .into_iter()
        .find(|route| route["when"] == when)
        .unwrap_or_else(|| panic!("{pattern}/{scenario}: no route {when}"));
    route["replies"][0]["json"].clone()
}
