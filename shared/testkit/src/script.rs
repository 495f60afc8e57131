//! The script format and its runner. A script (one entry of the fixture table or of the
//! scenario list) is
//!
//! ```json
//! { "id": "label", "workflowId": "w (defaults to id)", "request": { "inputs": {} },
//!   "observeRunning": false, "cancelWhenRunning": false,
//!   "steps": [ … ],
//!   "expect": { "status", "errorCode", "eventTypes", "completedNodeOrder", "variables",
//!               "events": [{type, payload}], "child": { "status", "events" } } }
//! ```
//!
//! Steps, each on the run or (with `"target": "child"`) on its first child run:
//!
//! - `{"await": "<status>", "currentNodeId"?, "interrupt"? (subset of the snapshot's),
//!   "saveToken"? (keep the interrupt token under a name)}` — waits (5 s at most);
//! - `{"awaitEvent": "<type>"}` — waits for an event type in the log;
//! - `{"resolve": "<nodeId>", "via": "run" | "token" | "legacy", "resumeValue", "token"?
//!   (a saved token; default: the snapshot's), "expectHttp"? (200), "error"?, "outcome"?}`;
//! - `{"inspect": true, "token"?, "expectHttp"?, "error"?}` — `GET /v1/interrupts/{token}`;
//! - `{"cancel": {body}}`, `{"pause": {body}}`, `{"resume": {body}}` with `expectHttp`
//!   (200 / 202 / 202) and `error`;
//! - `{"http": {"method", "path", "body"?}, "bearer"? (true), "expectHttp"? (200), "error"?,
//!   "answer"?}` — any request; `{runId}` in the path is the run (or target child).
//!
//! A script with `"create": false` creates no run: only its steps are played. `expect` may
//! also hold `decidedKinds` (the `runOrchestrator.decided` kinds, in order), `childCount`, and
//! `children: [{index, workflowId?, status?, inputs?, variables?, absent?: [names]}]` checked
//! on the run's `childRuns` in order (`absent`: neither in the child's inputs nor variables).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{Driver, SPEC_DEADLINE};

/// What a script left behind.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The run.
    pub run_id: String,
    /// Its terminal status.
    pub status: String,
    /// Its event types, in order.
    pub event_types: Vec<String>,
}

/// `expected` is contained in `actual` (objects by key, arrays of the same length element by
/// element, everything else by equality).
pub fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(actual), Value::Object(expected)) => {
            expected.iter().all(|(key, value)| actual.get(key).is_some_and(|found| contains(found, value)))
        }
        (Value::Array(actual), Value::Array(expected)) => {
            actual.len() == expected.len() && actual.iter().zip(expected).all(|(found, value)| contains(found, value))
        }
        _ => actual == expected,
    }
}

/// The event types of a log.
pub fn types(events: &[Value]) -> Vec<String> {
    events.iter().map(|event| event["type"].as_str().unwrap_or_default().to_owned()).collect()
}

/// Sequences are 0, 1, 2, … with no gap or duplicate, and exactly one terminal event, last.
pub fn assert_log_well_formed(events: &[Value]) {
    for (expected, event) in events.iter().enumerate() {
        assert_eq!(event["sequence"], json!(expected), "gap or duplicate: {:?}", types(events));
    }
    let terminal: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e["type"].as_str(), Some("run.completed" | "run.failed" | "run.cancelled")))
        .map(|(i, _)| i)
        .collect();
    if let Some(&last) = terminal.last() {
        assert_eq!(terminal.len(), 1, "more than one terminal event: {:?}", types(events));
        assert_eq!(last, events.len() - 1, "terminal event is not last: {:?}", types(events));
    }
}

/// Whether `status` is a terminal run status.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// Runs scripts against one driver.
pub struct Runner<'a> {
    driver: &'a mut dyn Driver,
    tokens: HashMap<String, String>,
}

impl<'a> Runner<'a> {
    /// A runner on `driver`.
    pub fn new(driver: &'a mut dyn Driver) -> Self {
        Self { driver, tokens: HashMap::new() }
    }

    /// `GET /v1/runs/{run_id}`.
    pub async fn snapshot(&mut self, run_id: &str) -> Value {
        let (status, body) = self.driver.call("GET", &format!("/v1/runs/{run_id}"), None, true).await;
        assert_eq!(status, 200, "snapshot of {run_id}: {body}");
        body
    }

    /// The run's whole log.
    pub async fn events(&mut self, run_id: &str) -> Vec<Value> {
        let path = format!("/v1/runs/{run_id}/events/poll?timeout=0");
        let (status, body) = self.driver.call("GET", &path, None, true).await;
        assert_eq!(status, 200, "events of {run_id}: {body}");
        body["events"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until the run's snapshot satisfies `done` (5 s at most). A run that does not
    /// exist yet (a child whose creation is still queued) is waited for too.
    pub async fn await_snapshot(&mut self, run_id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.await_snapshot_within(run_id, what, SPEC_DEADLINE, done).await
    }

    /// [`Runner::await_snapshot`], waiting at most `within`.
    pub async fn await_snapshot_within(
        &mut self,
        run_id: &str,
        what: &str,
        within: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let started = Instant::now();
        loop {
            let (status, snapshot) = self.driver.call("GET", &format!("/v1/runs/{run_id}"), None, true).await;
            assert!(status == 200 || status == 404, "snapshot of {run_id}: {snapshot}");
            if status == 200 && done(&snapshot) {
                return snapshot;
            }
            assert!(started.elapsed() < within, "{run_id}: no {what} within {within:?}: {snapshot}");
            self.driver.tick().await;
        }
    }

    /// Waits until the run is terminal.
    pub async fn await_terminal(&mut self, run_id: &str) -> Value {
        self.await_snapshot(run_id, "terminal status", |s| s["status"].as_str().is_some_and(is_terminal)).await
    }

    async fn await_event(&mut self, run_id: &str, event_type: &str) {
        let started = Instant::now();
        loop {
            let path = format!("/v1/runs/{run_id}/events/poll?timeout=0");
            let (status, body) = self.driver.call("GET", &path, None, true).await;
            assert!(status == 200 || status == 404, "events of {run_id}: {body}");
            let events = body["events"].as_array().cloned().unwrap_or_default();
            if types(&events).iter().any(|t| t == event_type) {
                return;
            }
            assert!(started.elapsed() < SPEC_DEADLINE, "{run_id}: no {event_type} within {SPEC_DEADLINE:?}");
            self.driver.tick().await;
        }
    }

    async fn child_of(&mut self, run_id: &str) -> String {
        let snapshot = self.await_snapshot(run_id, "child run", |s| s["childRuns"][0]["runId"].is_string()).await;
        snapshot["childRuns"][0]["runId"].as_str().unwrap_or_default().to_owned()
    }

    /// Creates the script's run and waits until it reads `status`; returns its id.
    pub async fn run_until(&mut self, script: &Value, status: &str) -> String {
        let run_id = self.create(script).await;
        self.await_snapshot(&run_id, status, |s| s["status"] == status).await;
        run_id
    }

    async fn create(&mut self, script: &Value) -> String {
        let label = script["id"].as_str().expect("script id");
        let workflow = script["workflowId"].as_str().unwrap_or(label);
        let mut request = script.get("request").cloned().unwrap_or_else(|| json!({}));
        request["workflowId"] = json!(workflow);
        let (status, created) = self.driver.call("POST", "/v1/runs", Some(request), true).await;
        assert_eq!(status, 201, "{label}: {created}");
        created["runId"].as_str().expect("runId").to_owned()
    }

    /// Creates the script's run, plays its steps and checks its expectations.
    pub async fn run(&mut self, script: &Value) -> Finished {
        let label = script["id"].as_str().expect("script id");
        if script["create"] == false {
            for step in script["steps"].as_array().into_iter().flatten() {
                self.step(label, "", step).await;
            }
            return Finished { run_id: String::new(), status: String::new(), event_types: Vec::new() };
        }
        let run_id = self.create(script).await;
        let expect = &script["expect"];
        if expect["observeRunning"] == true || script["observeRunning"] == true {
            self.await_snapshot(&run_id, "running", |s| s["status"] == "running").await;
        }
        if script["cancelWhenRunning"] == true {
            self.await_event(&run_id, "node.started").await;
            let (status, body) = self.driver.call("POST", &format!("/v1/runs/{run_id}/cancel"), None, true).await;
            assert_eq!(status, 200, "{label}: {body}");
        }
        for step in script["steps"].as_array().into_iter().flatten() {
            self.step(label, &run_id, step).await;
        }
        let snapshot = self.await_terminal(&run_id).await;
        let events = self.events(&run_id).await;
        check(label, expect, &snapshot, &events);
        if let Some(child_expect) = expect.get("child") {
            let child = self.child_of(&run_id).await;
            let child_snapshot = self.await_terminal(&child).await;
            let child_events = self.events(&child).await;
            check(&format!("{label} (child)"), child_expect, &child_snapshot, &child_events);
        }
        let children = snapshot["childRuns"].as_array().cloned().unwrap_or_default();
        if let Some(count) = expect.get("childCount") {
            assert_eq!(json!(children.len()), *count, "{label}: childRuns {children:?}");
        }
        for wanted in expect.get("children").and_then(Value::as_array).into_iter().flatten() {
            let index = wanted["index"].as_u64().unwrap_or(0) as usize;
            let child = children.get(index).unwrap_or_else(|| panic!("{label}: no child {index} in {children:?}"));
            if let Some(workflow) = wanted.get("workflowId") {
                assert_eq!(&child["workflowId"], workflow, "{label}: child {index}");
            }
            let child_id = child["runId"].as_str().expect("child runId").to_owned();
            let child_snapshot = self.await_terminal(&child_id).await;
            let context = format!("{label}: child {index} {child_snapshot}");
            if let Some(status) = wanted.get("status") {
                assert_eq!(&child_snapshot["status"], status, "{context}");
            }
            for field in ["inputs", "variables"] {
                if let Some(subset) = wanted.get(field) {
                    assert!(contains(&child_snapshot[field], subset), "{context}: {field}");
                }
            }
            for name in wanted.get("absent").and_then(Value::as_array).into_iter().flatten() {
                let name = name.as_str().expect("variable name");
                let present = |field: &str| child_snapshot[field].get(name).is_some();
                assert!(!present("inputs") && !present("variables"), "{context}: `{name}` must be absent (never null)");
            }
        }
        Finished {
            run_id,
            status: snapshot["status"].as_str().unwrap_or_default().to_owned(),
            event_types: types(&events),
        }
    }

    async fn step(&mut self, label: &str, run_id: &str, step: &Value) {
        let target = if step["target"] == "child" { self.child_of(run_id).await } else { run_id.to_owned() };
        let context = format!("{label}: step {step}");
        if let Some(wanted) = step["await"].as_str() {
            let snapshot = self.await_snapshot(&target, wanted, |s| s["status"] == wanted).await;
            if let Some(node) = step.get("currentNodeId") {
                assert_eq!(&snapshot["currentNodeId"], node, "{context}: {snapshot}");
            }
            if let Some(interrupt) = step.get("interrupt") {
                assert!(contains(&snapshot["interrupt"], interrupt), "{context}: {snapshot}");
            }
            if let Some(name) = step["saveToken"].as_str() {
                let token = snapshot["interrupt"]["interruptToken"].as_str().expect("an interrupt token");
                self.tokens.insert(name.to_owned(), token.to_owned());
            }
            return;
        }
        if let Some(event_type) = step["awaitEvent"].as_str() {
            return self.await_event(&target, event_type).await;
        }
        let (method, path, body, bearer, default_status) = if let Some(node) = step["resolve"].as_str() {
            let value = step["resumeValue"].clone();
            match step["via"].as_str().unwrap_or("run") {
                "token" => {
                    let token = self.token(&target, step).await;
                    ("POST", format!("/v1/interrupts/{token}"), Some(json!({ "resumeValue": value })), false, 200)
                }
                "legacy" => ("POST", format!("/v1/runs/{target}/approvals/{node}"), Some(value), true, 200),
                _ => (
                    "POST",
                    format!("/v1/runs/{target}/interrupts/{node}"),
                    Some(json!({ "resumeValue": value })),
                    true,
                    200,
                ),
            }
        } else if step.get("inspect").is_some() {
            let token = self.token(&target, step).await;
            ("GET", format!("/v1/interrupts/{token}"), None, false, 200)
        } else if let Some(body) = step.get("cancel") {
            ("POST", format!("/v1/runs/{target}/cancel"), Some(body.clone()), true, 200)
        } else if let Some(body) = step.get("pause") {
            ("POST", format!("/v1/runs/{target}:pause"), Some(body.clone()), true, 202)
        } else if let Some(body) = step.get("resume") {
            ("POST", format!("/v1/runs/{target}:resume"), Some(body.clone()), true, 202)
        } else if let Some(request) = step.get("http") {
            let method = match request["method"].as_str().unwrap_or("GET") {
                "POST" => "POST",
                "GET" => "GET",
                other => panic!("{context}: method {other} is not scripted"),
            };
            let path = request["path"].as_str().expect("http path").replace("{runId}", &target);
            (method, path, request.get("body").cloned(), step["bearer"] != false, 200)
        } else {
            panic!("{context}: unknown step");
        };
        let (status, answer) = self.driver.call(method, &path, body, bearer).await;
        let expected = step["expectHttp"].as_u64().unwrap_or(default_status);
        assert_eq!(u64::from(status), expected, "{context}: {answer}");
        if let Some(code) = step.get("error") {
            assert_eq!(&answer["error"], code, "{context}: {answer}");
        }
        if status >= 400 {
            assert!(
                answer["error"].is_string() && answer["message"].is_string(),
                "{context}: not an envelope: {answer}"
            );
        }
        if let Some(outcome) = step.get("outcome") {
            assert_eq!(&answer["outcome"], outcome, "{context}: {answer}");
        }
        if let Some(fields) = step.get("answer") {
            assert!(contains(&answer, fields), "{context}: {answer}");
        }
    }

    /// The token a step names (saved earlier), else the target's current one.
    async fn token(&mut self, target: &str, step: &Value) -> String {
        if let Some(name) = step["token"].as_str() {
            return self.tokens.get(name).cloned().unwrap_or_else(|| name.to_owned());
        }
        let snapshot = self.snapshot(target).await;
        snapshot["interrupt"]["interruptToken"].as_str().unwrap_or_else(|| panic!("no token: {snapshot}")).to_owned()
    }
}

/// Checks a terminal run against an `expect` block.
fn check(label: &str, expect: &Value, snapshot: &Value, events: &[Value]) {
    assert_log_well_formed(events);
    if let Some(status) = expect.get("status") {
        assert_eq!(&snapshot["status"], status, "{label}: {snapshot}");
    }
    if let Some(code) = expect.get("errorCode") {
        assert_eq!(&snapshot["error"]["code"], code, "{label}: {snapshot}");
        assert!(snapshot["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{label}");
    }
    if let Some(expected) = expect.get("eventTypes") {
        assert_eq!(json!(types(events)), *expected, "{label}");
    }
    if let Some(kinds) = expect.get("decidedKinds") {
        let decided: Vec<Value> = events
            .iter()
            .filter(|e| e["type"] == "runOrchestrator.decided")
            .map(|e| e["payload"]["decision"]["kind"].clone())
            .collect();
        assert_eq!(json!(decided), *kinds, "{label}");
    }
    if let Some(order) = expect.get("completedNodeOrder") {
        let completed: Vec<Value> =
            events.iter().filter(|e| e["type"] == "node.completed").map(|e| e["nodeId"].clone()).collect();
        assert_eq!(json!(completed), *order, "{label}");
    }
    if let Some(variables) = expect.get("variables") {
        assert!(contains(&snapshot["variables"], variables), "{label}: {}", snapshot["variables"]);
    }
    for wanted in expect.get("events").and_then(Value::as_array).into_iter().flatten() {
        let found = events.iter().any(|event| {
            event["type"] == wanted["type"]
                && wanted.get("nodeId").is_none_or(|node| &event["nodeId"] == node)
                && wanted.get("payload").is_none_or(|payload| contains(&event["payload"], payload))
        });
        assert!(found, "{label}: no {wanted} in {:?}", types(events));
    }
}
