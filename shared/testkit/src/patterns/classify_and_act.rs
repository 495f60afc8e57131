//! The classify-and-act pattern (`examples/workflows/patterns/classify-and-act.json`,
//! `docs/patterns/classify-and-act.md`): one classifier call routes to exactly one action — a
//! refund behind an approval, a bug ticket filed by a child workflow, or a reply posted to the
//! help desk — and a low-confidence answer waits for a person first. Each scenario asserts the
//! HTTP requests the actions made (exactly the expected ones), which branches were skipped, the
//! outcome and the single model call.

use serde_json::{json, Value};

use super::{payloads, Env};
use crate::http_server::{Reply, SeenRequest};

const PATTERN: &str = "classify-and-act";

/// Plays every scenario of the classify-and-act fixture.
pub async fn check(env: &mut Env<'_>) {
    env.http.route("/refunds", vec![Reply::json(201, &json!({"refundId": "rf-1042"}))]);
    env.http.route("/tickets", vec![Reply::json(201, &json!({"ticketId": "BUG-7"}))]);
    env.http.route("/answers", vec![Reply::json(200, &json!({"delivered": true}))]);
    refund(env).await;
    refund_rejected(env).await;
    bug(env).await;
    question(env).await;
    low_confidence(env).await;
}

/// Starts a run for `message` with the action URLs on the test server.
async fn start(env: &mut Env<'_>, message: &str) -> String {
    let inputs = json!({
        "message": message,
        "refundsUrl": env.http.url("/refunds"),
        "trackerUrl": env.http.url("/tickets"),
        "helpdeskUrl": env.http.url("/answers"),
    });
    env.start(PATTERN, json!({ "inputs": inputs })).await
}

/// The HTTP requests the test server saw after the first `before`.
fn requests_since(env: &Env<'_>, before: usize) -> Vec<SeenRequest> {
    env.http.requests().into_iter().skip(before).collect()
}

/// Asserts the scenario made exactly `expected` model calls and used every scripted answer.
fn assert_model_calls(env: &Env<'_>, scenario: &str, expected: usize) {
    assert_eq!(env.model_requests().len(), expected, "{scenario}: model calls");
    assert_eq!(env.model.pending_routed(), 0, "{scenario}: every scripted answer is used");
}

/// Asserts which action nodes of the run completed and which were skipped.
async fn assert_branches(env: &mut Env<'_>, run_id: &str, completed: &[&str], skipped: &[&str]) {
    let events = env.events(run_id).await;
    let of = |event_type: &str| -> Vec<String> {
        let mut ids: Vec<String> = events
            .iter()
            .filter(|event| event["type"] == event_type)
            .filter_map(|event| event["nodeId"].as_str().map(str::to_owned))
            .filter(|id| {
                ["approve", "refund", "refunded", "declined", "fileBug", "bugFiled", "answer", "answered"]
                    .contains(&id.as_str())
            })
            .collect();
        ids.sort();
        ids
    };
    let mut completed: Vec<String> = completed.iter().map(|id| (*id).to_owned()).collect();
    completed.sort();
    let mut skipped: Vec<String> = skipped.iter().map(|id| (*id).to_owned()).collect();
    skipped.sort();
    assert_eq!(of("node.completed"), completed, "{run_id}: action nodes completed");
    assert_eq!(of("node.skipped"), skipped, "{run_id}: action nodes skipped");
}

/// Asserts `request` is a POST of JSON `body` to `path`.
fn assert_post(request: &SeenRequest, path: &str, body: &Value) {
    assert_eq!(request.method, "POST", "{path}");
    assert_eq!(request.path(), path);
    assert_eq!(&request.json(), body, "{path}: body");
}

async fn refund(env: &mut Env<'_>) {
    assert_eq!(env.script(PATTERN, "refund"), 1);
    let before = env.http.requests().len();
    let message = "I was charged twice for order 1042, please refund one payment";
    let run_id = start(env, message).await;
    env.status(&run_id, "waiting-approval").await;
    assert!(requests_since(env, before).is_empty(), "refund: nothing is sent before the approval");
    env.resolve(&run_id, "approve", json!({"action": "accept"})).await;
    let snapshot = env.terminal(&run_id).await;
    assert_eq!(snapshot["status"], "completed", "refund: {snapshot}");
    assert_eq!(snapshot["outputs"]["outcome"], "refunded", "refund: {snapshot}");
    assert_eq!(snapshot["outputs"]["refundResponse"], json!({"refundId": "rf-1042"}), "refund: {snapshot}");
    let reply = "Sorry about the double charge, we are refunding one payment.";
    let sent = requests_since(env, before);
    assert_eq!(sent.len(), 1, "refund: exactly one action request: {sent:?}");
    assert_post(&sent[0], "/refunds", &json!({"message": message, "reply": reply}));
    assert_branches(
        env,
        &run_id,
        &["approve", "refund", "refunded"],
        &["declined", "fileBug", "bugFiled", "answer", "answered"],
    )
    .await;
    assert_model_calls(env, "refund", 1);
}

async fn refund_rejected(env: &mut Env<'_>) {
    assert_eq!(env.script(PATTERN, "refund-rejected"), 1);
    let before = env.http.requests().len();
    let run_id = start(env, "I was charged twice for order 1042, please refund one payment").await;
    env.status(&run_id, "waiting-approval").await;
    env.resolve(&run_id, "approve", json!({"action": "reject"})).await;
    let snapshot = env.terminal(&run_id).await;
    assert_eq!(snapshot["status"], "completed", "refund-rejected: {snapshot}");
    assert_eq!(snapshot["outputs"], json!({"outcome": "refund-declined"}), "refund-rejected: {snapshot}");
    assert_eq!(snapshot["variables"]["approve"]["error"]["code"], "interrupt_rejected", "{snapshot}");
    let sent = requests_since(env, before);
    assert!(sent.is_empty(), "refund-rejected: no action request: {sent:?}");
    assert_branches(env, &run_id, &["declined"], &["refund", "refunded", "fileBug", "bugFiled", "answer", "answered"])
        .await;
    assert_model_calls(env, "refund-rejected", 1);
}

async fn bug(env: &mut Env<'_>) {
    assert_eq!(env.script(PATTERN, "bug"), 1);
    let before = env.http.requests().len();
    let message = "The export button crashes the app on Android 14";
    let run_id = start(env, message).await;
    let snapshot = env.terminal(&run_id).await;
    assert_eq!(snapshot["status"], "completed", "bug: {snapshot}");
    assert_eq!(snapshot["outputs"]["outcome"], "bug-filed", "bug: {snapshot}");
    assert_eq!(snapshot["outputs"]["ticket"], json!({"ticketId": "BUG-7"}), "bug: {snapshot}");
    let sent = requests_since(env, before);
    assert_eq!(sent.len(), 1, "bug: exactly one action request: {sent:?}");
    let ticket = json!({"title": message, "summary": "Thanks, we have filed this with our engineers.",
                        "source": "classify-and-act"});
    assert_post(&sent[0], "/tickets", &ticket);
    assert_branches(
        env,
        &run_id,
        &["fileBug", "bugFiled"],
        &["approve", "refund", "refunded", "declined", "answer", "answered"],
    )
    .await;
    let events = env.events(&run_id).await;
    let child = payloads(&events, "node.completed")
        .into_iter()
        .find_map(|payload| payload["outputs"]["childStatus"].as_str().map(str::to_owned));
    assert_eq!(child.as_deref(), Some("completed"), "bug: the child run completed");
    assert_model_calls(env, "bug", 1);
}

async fn question(env: &mut Env<'_>) {
    assert_eq!(env.script(PATTERN, "question"), 1);
    let before = env.http.requests().len();
    let message = "Do you ship to Norway?";
    let run_id = start(env, message).await;
    let snapshot = env.terminal(&run_id).await;
    assert_eq!(snapshot["status"], "completed", "question: {snapshot}");
    assert_eq!(snapshot["outputs"], json!({"outcome": "answered"}), "question: {snapshot}");
    let sent = requests_since(env, before);
    assert_eq!(sent.len(), 1, "question: exactly one action request: {sent:?}");
    let reply = "Yes, we ship to Norway; delivery takes 3 to 5 working days.";
    assert_post(&sent[0], "/answers", &json!({"message": message, "reply": reply}));
    assert_branches(
        env,
        &run_id,
        &["answer", "answered"],
        &["approve", "refund", "refunded", "declined", "fileBug", "bugFiled"],
    )
    .await;
    assert_model_calls(env, "question", 1);
}

async fn low_confidence(env: &mut Env<'_>) {
    assert_eq!(env.script(PATTERN, "low-confidence"), 1);
    let before = env.http.requests().len();
    let message = "hmm, the thing from last week again?";
    let run_id = start(env, message).await;
    env.status(&run_id, "waiting-approval").await;
    let events = env.events(&run_id).await;
    let suspended = payloads(&events, "node.suspended");
    assert_eq!(suspended.len(), 1, "low-confidence: one suspension: {suspended:?}");
    assert_eq!(suspended[0]["reason"], "low-confidence", "{suspended:?}");
    assert!(requests_since(env, before).is_empty(), "low-confidence: nothing is sent before the accept");
    env.resolve(&run_id, "classify", json!({"action": "accept"})).await;
    let snapshot = env.terminal(&run_id).await;
    assert_eq!(snapshot["status"], "completed", "low-confidence: {snapshot}");
    assert_eq!(snapshot["outputs"], json!({"outcome": "answered"}), "low-confidence: {snapshot}");
    assert_eq!(snapshot["variables"]["classify"]["data"]["confidence"], 0.4, "{snapshot}");
    let sent = requests_since(env, before);
    assert_eq!(sent.len(), 1, "low-confidence: exactly one action request: {sent:?}");
    let reply = "Could you tell us which order or feature you mean?";
    assert_post(&sent[0], "/answers", &json!({"message": message, "reply": reply}));
    assert_model_calls(env, "low-confidence", 1);
}
