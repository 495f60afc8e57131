//! The adversarial-verification pattern (`examples/workflows/patterns/adversarial-verification.json`,
//! `docs/patterns/adversarial-verification.md`): a producer answers, a verifier attacks the
//! answer and may send it back (a back-edge bounded by `settings.maxLoopbackIterations: 2`).
//! The scenarios: accepted first time (2 model calls), revised once (4), never accepted — three
//! rounds, then `loopback_limit_exceeded` into the failure route, outcome `unverified` (6).

use serde_json::{json, Value};

use super::{payloads, Env};

const PATTERN: &str = "adversarial-verification";
const QUESTION: &str = "Is 1 a prime number?";

/// Plays every scenario of the adversarial-verification fixture.
pub async fn check(env: &mut Env<'_>) {
    accept_first(env).await;
    revise_once(env).await;
    always_revise(env).await;
}

async fn run(env: &mut Env<'_>, scenario: &str, expected_calls: usize) -> (String, Value) {
    assert_eq!(env.script(PATTERN, scenario), expected_calls, "{scenario}: scripted replies");
    let run_id = env.start(PATTERN, json!({ "inputs": { "question": QUESTION } })).await;
    let snapshot = env.terminal(&run_id).await;
    assert_eq!(snapshot["status"], "completed", "{scenario}: {snapshot}");
    assert_eq!(env.model_requests().len(), expected_calls, "{scenario}: model calls");
    assert_eq!(env.model.pending_routed(), 0, "{scenario}: every scripted answer is used");
    (run_id, snapshot)
}

/// The user message of each model request, in order (the producer's and verifier's calls
/// alternate: the loop is sequential).
fn prompts(env: &Env<'_>) -> Vec<String> {
    env.model_requests().iter().map(|request| request.last_user_text().unwrap_or_default()).collect()
}

async fn accept_first(env: &mut Env<'_>) {
    let (run_id, snapshot) = run(env, "accept-first", 2).await;
    let answer = "No. A prime has exactly two distinct positive divisors; 1 has only one, so it is not prime.";
    assert_eq!(snapshot["outputs"]["outcome"], "verified", "{snapshot}");
    assert_eq!(snapshot["outputs"]["answer"], answer, "{snapshot}");
    assert_eq!(snapshot["outputs"]["review"]["verdict"], "accept", "{snapshot}");
    let prompts = prompts(env);
    assert!(prompts[0].contains("none yet, this is the first draft"), "round 1 renders the default: {prompts:?}");
    assert!(prompts[1].contains(answer), "the verifier sees the answer: {prompts:?}");
    let events = env.events(&run_id).await;
    assert!(payloads(&events, "workflow.loopback-limit").is_empty());
}

async fn revise_once(env: &mut Env<'_>) {
    let (_, snapshot) = run(env, "revise-once", 4).await;
    let answer = "No. A prime has exactly two distinct positive divisors; 1 has only one, so it is not prime.";
    assert_eq!(snapshot["outputs"]["outcome"], "verified", "{snapshot}");
    assert_eq!(snapshot["outputs"]["answer"], answer, "{snapshot}");
    assert_eq!(snapshot["outputs"]["review"]["verdict"], "accept", "{snapshot}");
    let prompts = prompts(env);
    assert!(prompts[2].contains("a prime needs exactly two distinct positive divisors"), "{prompts:?}");
}

async fn always_revise(env: &mut Env<'_>) {
    let (run_id, snapshot) = run(env, "always-revise", 6).await;
    assert_eq!(snapshot["outputs"]["outcome"], "unverified", "{snapshot}");
    assert_eq!(
        snapshot["outputs"]["answer"],
        "Draft 3: No, 1 is not prime (Hardy and Wright); some older texts counted it as prime.",
        "{snapshot}"
    );
    let review = json!({"verdict": "revise", "critique": "Round 3: the history is there but undated."});
    let last = &snapshot["outputs"]["lastVerify"];
    assert_eq!(last["data"], review, "the last round's critique: {snapshot}");
    assert_eq!(last["error"]["code"], "loopback_limit_exceeded", "{snapshot}");
    let events = env.events(&run_id).await;
    let limits = payloads(&events, "workflow.loopback-limit");
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert_eq!(limits[0]["nodeId"], "produce", "{limits:?}");
    assert_eq!(limits[0]["iterations"], 3, "{limits:?}");
    assert_eq!(limits[0]["limit"], 2, "{limits:?}");
    assert_eq!(snapshot["variables"]["verify"]["error"]["code"], "loopback_limit_exceeded", "{snapshot}");
}
