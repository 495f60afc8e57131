//! The loop-until-done pattern (`examples/workflows/patterns/loop-until-done.json`,
//! docs/patterns/loop-until-done.md): a worker agent `round` and a judge agent `judge` in a
//! loop only the judge ends, bounded by `settings.maxLoopbackIterations: 3` (4 rounds). Each
//! scenario of `fixtures/loop-until-done.json` ends differently, and the snapshot alone tells
//! which:
//!
//! - `happy`: the judge is satisfied after round 2: completed, `outputs.outcome = done`, 4 calls.
//! - `round-limit`: never satisfied: after round 4 the back-edge is past its limit, the judge
//!   fails `loopback_limit_exceeded` into the failure route: completed,
//!   `outputs.outcome = round-limit`, 8 calls.
//! - `budget`: the same loop with `configurable.budget {maxTokens: 400, onExhaustion: fail}`
//!   and 150 tokens a reply: round 2's answer exhausts it: failed, `error.code =
//!   budget_exhausted`, `cap.breached {kind: budget-tokens}`, 3 calls.

use serde_json::{json, Value};

use super::{failure_code, payloads, Env};
use crate::fake_model::ModelRequest;

/// The pattern's id (and its fixture's name).
const PATTERN: &str = "loop-until-done";

/// The example request every scenario runs with.
const REQUEST: &str = "Find out why checkout latency doubled last week.";

/// Words of the worker's instructions (and of no other prompt).
const WORKER: &str = "You work on a request in rounds";

/// The budget of the `budget` scenario: two replies of 150 tokens stay under it, the third
/// reaches it.
const MAX_TOKENS: u64 = 400;

/// Plays every scenario of the fixture.
pub async fn check(env: &mut Env<'_>) {
    done_at_round_two(env).await;
    round_limit(env).await;
    budget(env).await;
}

/// Starts the loop on [`REQUEST`] with `configurable` after scripting `scenario`; the run id and
/// its terminal snapshot.
async fn play(env: &mut Env<'_>, scenario: &str, configurable: Value) -> (String, Value) {
    env.script(PATTERN, scenario);
    let run = env.start(PATTERN, json!({ "inputs": { "request": REQUEST }, "configurable": configurable })).await;
    let snapshot = env.terminal(&run).await;
    (run, snapshot)
}

/// The user prompts of the worker's requests, in the order they were sent (the loop is
/// sequential).
fn worker_prompts(requests: &[ModelRequest]) -> Vec<String> {
    requests
        .iter()
        .filter(|request| request.messages().iter().any(|message| message.to_string().contains(WORKER)))
        .map(|request| request.last_user_text().unwrap_or_default())
        .collect()
}

/// Every scripted answer was used, and the model got `calls` requests.
fn calls(env: &Env<'_>, scenario: &str, calls: usize) {
    assert_eq!(env.model_requests().len(), calls, "{scenario}: model calls");
    assert_eq!(env.model.pending_routed(), 0, "{scenario}: every scripted answer is used");
}

async fn done_at_round_two(env: &mut Env<'_>) {
    let (run, snapshot) = play(env, "happy", json!({})).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let variables = &snapshot["variables"];
    assert_eq!(snapshot["outputs"]["outcome"], "done", "{snapshot}");
    assert_eq!(snapshot["outputs"]["result"], variables["round"]["data"], "the last round's answer: {snapshot}");
    assert_eq!(snapshot["outputs"]["verdict"]["done"], true, "{snapshot}");
    // Round 1 renders the declared defaults; round 2 sees round 1's notes and the feedback.
    let prompts = worker_prompts(&env.model_requests());
    assert_eq!(prompts.len(), 2, "two rounds of {run}: {prompts:?}");
    assert!(prompts[0].contains("(none yet"), "round 1 starts from the defaults: {}", prompts[0]);
    assert!(
        prompts[1].contains("on 12 May") && prompts[1].contains("a date is not a cause"),
        "round 2: {}",
        prompts[1]
    );
    assert!(payloads(&env.events(&run).await, "workflow.loopback-limit").is_empty(), "no bound reached");
    calls(env, "happy", 4);
}

async fn round_limit(env: &mut Env<'_>) {
    let (run, snapshot) = play(env, "round-limit", json!({})).await;
    assert_eq!(snapshot["status"], "completed", "the failure route completes the run: {snapshot}");
    assert!(snapshot.get("error").is_none(), "{snapshot}");
    assert_eq!(snapshot["outputs"]["outcome"], "round-limit", "{snapshot}");
    let variables = &snapshot["variables"];
    assert_eq!(snapshot["outputs"]["result"], variables["round"]["data"], "round 4's notes: {snapshot}");
    assert_eq!(variables["judge"]["error"]["code"], "loopback_limit_exceeded", "{snapshot}");
    let events = env.events(&run).await;
    let limits = payloads(&events, "workflow.loopback-limit");
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert_eq!(
        (&limits[0]["nodeId"], &limits[0]["iterations"], &limits[0]["limit"]),
        (&json!("round"), &json!(4), &json!(3))
    );
    assert_eq!(worker_prompts(&env.model_requests()).len(), 4, "four rounds");
    calls(env, "round-limit", 8);
}

async fn budget(env: &mut Env<'_>) {
    let budget = json!({ "budget": { "maxTokens": MAX_TOKENS, "onExhaustion": "fail" } });
    let (run, snapshot) = play(env, "budget", budget).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(failure_code(&snapshot), Some("budget_exhausted"), "{snapshot}");
    assert!(snapshot.get("outputs").is_none(), "no outcome: {snapshot}");
    // The answer that exhausted the budget is not applied: round 1's notes are the last.
    let notes = snapshot["variables"]["round"]["data"]["notes"].as_str().unwrap_or_default();
    assert!(notes.contains("on 12 May") && !notes.contains("TLS"), "round 1's notes: {snapshot}");
    let events = env.events(&run).await;
    let breaches = payloads(&events, "cap.breached");
    assert_eq!(breaches.len(), 1, "{breaches:?}");
    assert_eq!(breaches[0]["kind"], "budget-tokens", "{breaches:?}");
    assert!(payloads(&events, "workflow.loopback-limit").is_empty(), "the budget ends it before the bound");
    assert_eq!(snapshot["metrics"]["openwopCost"]["tokens"], json!({ "input": 300, "output": 150 }), "{snapshot}");
    calls(env, "budget", 3);
}
