//! The tournament pattern (`examples/workflows/patterns/tournament.json`, its child
//! `tournament-match.json`, docs/patterns/tournament.md): four contestants answer in parallel,
//! two semi-finals and a final (child runs of `tournament-match`) judge them pairwise to one
//! champion. Scenarios of `fixtures/tournament.json`:
//!
//! - `happy`: the judges pick 1 and 3, then 3: the champion is contestant 3's whole output;
//!   7 model calls, 3 completed matches.
//! - `other-judge`: the same answers, other verdicts (2 and 4, then 2): contestant 2 wins — the
//!   bracket follows the judge's answers and nothing else.
//! - `judge-off-schema`: the final's judge answers `tie` twice (the first answer and the repair
//!   turn): the final's child run fails `response_schema_invalid`, the node `final` fails
//!   `child_failed`, and so the run; 8 model calls.

use serde_json::{json, Value};

use super::{failure_code, Env};

/// The pattern's id (and its fixture's name).
const PATTERN: &str = "tournament";

/// The example request every scenario runs with.
const REQUEST: &str = "How should we move our nightly batch jobs off the old cron server?";

/// Model calls of a tournament that completes: four contestants and three matches.
const COMPLETE_CALLS: usize = 7;

/// Plays every scenario of the fixture.
pub async fn check(env: &mut Env<'_>) {
    champion_is(env, "happy", "contestant-3", ["contestant-1", "contestant-3"]).await;
    champion_is(env, "other-judge", "contestant-2", ["contestant-2", "contestant-4"]).await;
    judge_off_schema(env).await;
}

/// Starts a tournament on [`REQUEST`] after scripting `scenario`; its terminal snapshot.
async fn play(env: &mut Env<'_>, scenario: &str) -> (String, Value) {
    env.script(PATTERN, scenario);
    let run = env.start(PATTERN, json!({ "inputs": { "request": REQUEST } })).await;
    let snapshot = env.terminal(&run).await;
    (run, snapshot)
}

/// The child run that node `node_id` started (from `childRuns` of the run's snapshot).
fn child_of<'s>(snapshot: &'s Value, node_id: &str) -> &'s Value {
    let children = snapshot["childRuns"].as_array().unwrap_or_else(|| panic!("no childRuns: {snapshot}"));
    children
        .iter()
        .find(|child| child["nodeId"] == node_id)
        .unwrap_or_else(|| panic!("no child run of {node_id}: {snapshot}"))
}

/// `scenario` completes with `champion`'s whole output as `outputs.champion`, the finalists
/// being `finalists`.
async fn champion_is(env: &mut Env<'_>, scenario: &str, champion: &str, finalists: [&str; 2]) {
    let (run, snapshot) = play(env, scenario).await;
    assert_eq!(snapshot["status"], "completed", "{scenario}: {snapshot}");
    let variables = &snapshot["variables"];
    let expected = &variables[champion];
    assert!(
        expected["text"].as_str().is_some_and(|text| !text.is_empty()),
        "{scenario}: {champion} answered: {snapshot}"
    );
    assert_eq!(snapshot["outputs"], json!({ "champion": expected }), "{scenario}: the champion is {champion}");
    assert_eq!(variables["finalistA"], variables[finalists[0]], "{scenario}: semi-final 1 goes to {}", finalists[0]);
    assert_eq!(variables["finalistB"], variables[finalists[1]], "{scenario}: semi-final 2 goes to {}", finalists[1]);
    for node in ["semi-final-1", "semi-final-2", "final"] {
        let child = child_of(&snapshot, node);
        assert_eq!(
            (child["workflowId"].as_str(), child["status"].as_str()),
            (Some("tournament-match"), Some("completed"))
        );
    }
    assert_eq!(env.model_requests().len(), COMPLETE_CALLS, "{scenario}: model calls of {run}");
    assert_eq!(env.model.pending_routed(), 0, "{scenario}: every scripted answer is used");
}

/// The final's judge answers outside its schema twice: the run fails, the match says why.
async fn judge_off_schema(env: &mut Env<'_>) {
    let (run, snapshot) = play(env, "judge-off-schema").await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(failure_code(&snapshot), Some("child_failed"), "{snapshot}");
    assert!(snapshot.get("outputs").is_none(), "a failed tournament has no champion: {snapshot}");
    for node in ["semi-final-1", "semi-final-2"] {
        assert_eq!(child_of(&snapshot, node)["status"], "completed", "{node}: {snapshot}");
    }
    let final_match = child_of(&snapshot, "final");
    assert_eq!(final_match["status"], "failed", "{snapshot}");
    let child_run = final_match["runId"].as_str().expect("the final's runId").to_owned();
    assert_eq!(snapshot["error"]["details"]["childRunId"], json!(child_run), "{snapshot}");
    let child = env.snapshot(&child_run).await;
    assert_eq!(failure_code(&child), Some("response_schema_invalid"), "the final's match: {child}");
    // Four contestants, two semi-final judges, the final's judge twice (its repair turn).
    assert_eq!(env.model_requests().len(), COMPLETE_CALLS + 1, "model calls of {run}");
    assert_eq!(env.model.pending_routed(), 0, "every scripted answer is used");
}
