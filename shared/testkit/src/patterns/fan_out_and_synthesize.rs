//! The fan-out-and-synthesize pattern (`examples/workflows/patterns/fan-out-and-synthesize.json`,
//! `docs/patterns/fan-out-and-synthesize.md`): a `vendor.trellis.forEach` runs one analyst child
//! per angle, then a synthesizer agent reads every result. Scenario `happy`: all four analysts
//! answer; `analyst-fails`: one analyst's provider call is refused, the loop isolates that child
//! and the synthesis still runs over the partial results. Each asserts the run's outputs and
//! variables, the synthesizer's prompt (it renders every result, failed ones included), the
//! loop's counts and exactly five model calls. The analysts' calls are parallel, so nothing here
//! depends on the order they arrive in.

use serde_json::{json, Value};

use super::{message_text, payloads, scripted_json, Env};
use crate::fake_model::ModelRequest;

const PATTERN: &str = "fan-out-and-synthesize";
const REQUEST: &str = "Should we move the nightly reports job from cron on one VM to the managed scheduler?";
const ANGLES: [&str; 4] = ["scope", "evidence", "risks", "recommendation"];
const MARKER: &str = "You are the synthesizer";

/// Plays every scenario of the fan-out-and-synthesize fixture.
pub async fn check(env: &mut Env<'_>) {
    happy(env).await;
    analyst_fails(env).await;
}

/// Runs the pattern with the default angles; the terminal snapshot and the model requests.
async fn run(env: &mut Env<'_>, scenario: &str) -> (String, Value, Vec<ModelRequest>) {
    assert_eq!(env.script(PATTERN, scenario), 5, "{scenario}: scripted replies");
    let run_id = env.start(PATTERN, json!({ "inputs": { "request": REQUEST } })).await;
    let snapshot = env.terminal(&run_id).await;
    assert_eq!(snapshot["status"], "completed", "{scenario}: {snapshot}");
    let requests = env.model_requests();
    assert_eq!(requests.len(), 5, "{scenario}: model calls (4 analysts + the synthesizer)");
    assert_eq!(env.model.pending_routed(), 0, "{scenario}: every scripted answer is used");
    // One analyst call per angle, whatever the order they arrived in.
    let mut angles: Vec<String> = requests
        .iter()
        .map(|request| message_text(request, "user"))
        .filter_map(|text| text.strip_prefix("Your angle: ").map(|rest| rest.lines().next().unwrap_or("").to_owned()))
        .collect();
    angles.sort();
    let mut expected: Vec<String> = ANGLES.iter().map(|angle| (*angle).to_owned()).collect();
    expected.sort();
    assert_eq!(angles, expected, "{scenario}: one analyst call per angle");
    for request in requests.iter().filter(|request| message_text(request, "user").starts_with("Your angle: ")) {
        assert!(message_text(request, "user").contains(REQUEST), "{scenario}: the request reaches every analyst");
    }
    (run_id, snapshot, requests)
}

/// The findings the synthesizer's prompt rendered (the JSON after its results line).
fn synthesizer_findings(scenario: &str, requests: &[ModelRequest]) -> Value {
    let synthesizer: Vec<&ModelRequest> =
        requests.iter().filter(|request| message_text(request, "system").contains(MARKER)).collect();
    assert_eq!(synthesizer.len(), 1, "{scenario}: one synthesizer call");
    let prompt = message_text(synthesizer[0], "user");
    assert!(prompt.contains(REQUEST), "{scenario}: the synthesizer sees the request: {prompt}");
    let (_, rendered) = prompt.split_once("did not answer):\n").unwrap_or_else(|| panic!("{scenario}: {prompt}"));
    serde_json::from_str(rendered).unwrap_or_else(|error| panic!("{scenario}: findings are JSON ({error}): {prompt}"))
}

/// Asserts the loop's `trellis.loop.finished` event: its outcome and counts.
async fn assert_loop_finished(env: &mut Env<'_>, run_id: &str, outcome: &str, completed: u64, failed: u64) {
    let events = env.events(run_id).await;
    let finished = payloads(&events, "trellis.loop.finished");
    assert_eq!(finished.len(), 1, "{run_id}: one loop.finished: {finished:?}");
    assert_eq!(finished[0]["nodeId"], "analyze");
    assert_eq!(finished[0]["outcome"], outcome, "{run_id}: {finished:?}");
    assert_eq!(finished[0]["completedCount"], completed, "{run_id}: {finished:?}");
    assert_eq!(finished[0]["failedCount"], failed, "{run_id}: {finished:?}");
}

async fn happy(env: &mut Env<'_>) {
    let scenario = "happy";
    let (run_id, snapshot, requests) = run(env, scenario).await;
    let synthesis = scripted_json(PATTERN, scenario, MARKER);
    let outputs = &snapshot["outputs"];
    assert_eq!(
        outputs,
        &json!({ "synthesis": synthesis, "itemCount": 4, "completedCount": 4, "failedCount": 0 }),
        "{scenario}: {snapshot}"
    );
    assert_eq!(snapshot["variables"]["synthesize"]["data"], synthesis, "{scenario}: {snapshot}");
    // Every result kept only the angle and the analyst's answer, in item order.
    let findings = snapshot["variables"]["findings"].as_array().expect("findings").clone();
    assert_eq!(findings.len(), 4, "{scenario}: {snapshot}");
    for (index, (result, angle)) in findings.iter().zip(ANGLES).enumerate() {
        assert_eq!(result["index"], index, "{scenario}: {result}");
        assert_eq!(result["status"], "completed", "{scenario}: {result}");
        let expected =
            json!({ "item": angle, "analysis": scripted_json(PATTERN, scenario, &format!("Your angle: {angle}")) });
        assert_eq!(result["outputs"], expected, "{scenario}: {result}");
    }
    assert_eq!(synthesizer_findings(scenario, &requests), json!(findings), "{scenario}: the synthesizer's input");
    assert_loop_finished(env, &run_id, "satisfied", 4, 0).await;
}

async fn analyst_fails(env: &mut Env<'_>) {
    let scenario = "analyst-fails";
    let (run_id, snapshot, requests) = run(env, scenario).await;
    let synthesis = scripted_json(PATTERN, scenario, MARKER);
    assert_eq!(
        snapshot["outputs"],
        json!({ "synthesis": synthesis, "itemCount": 4, "completedCount": 3, "failedCount": 1 }),
        "{scenario}: {snapshot}"
    );
    assert!(
        synthesis["gaps"].as_array().is_some_and(|gaps| gaps.iter().any(|gap| gap.as_str().unwrap().contains("risks"))),
        "{scenario}: the failed angle is a gap"
    );
    let findings = snapshot["variables"]["findings"].as_array().expect("findings").clone();
    assert_eq!(findings.len(), 4, "{scenario}: {snapshot}");
    for (index, (result, angle)) in findings.iter().zip(ANGLES).enumerate() {
        assert_eq!(result["index"], index, "{scenario}: {result}");
        if angle == "risks" {
            assert_eq!(result["status"], "failed", "{scenario}: {result}");
            // The loop records the child's failure; the message carries the provider's code.
            assert_eq!(result["error"]["code"], "child_failed", "{scenario}: {result}");
            let message = result["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("provider_request_rejected"), "{scenario}: {result}");
            assert!(result.get("outputs").is_none(), "{scenario}: a failed item has no outputs: {result}");
        } else {
            assert_eq!(result["status"], "completed", "{scenario}: {result}");
            assert_eq!(result["outputs"]["item"], angle, "{scenario}: {result}");
        }
    }
    // The synthesizer saw the failed item too, and is asked to name it as a gap.
    let rendered = synthesizer_findings(scenario, &requests);
    assert_eq!(rendered, json!(findings), "{scenario}: the synthesizer's input");
    assert_eq!(rendered[2]["status"], "failed", "{scenario}: {rendered}");
    assert_loop_finished(env, &run_id, "partial", 3, 1).await;
}
