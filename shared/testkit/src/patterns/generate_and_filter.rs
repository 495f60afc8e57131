//! The generate-and-filter pattern (`examples/workflows/patterns/generate-and-filter.json`,
//! `docs/patterns/generate-and-filter.md`): a `vendor.trellis.forEach` runs one candidate child
//! per style, a scoring agent keeps or rejects each candidate under the run's constraints, and
//! edge conditions end the run in `shortlist` (something kept) or `none-passed`. Scenario
//! `two-kept`: two of four pass; `none-passed`: a stricter constraint rejects them all. Each
//! asserts the outcome, that the filter's reasons are kept in the outputs and variables, the
//! filter's prompt (every candidate and the constraints), the skipped branch and exactly five
//! model calls. The writers' calls are parallel, so nothing here depends on their order.

use serde_json::{json, Value};

use super::{message_text, payloads, scripted_json, Env};
use crate::fake_model::ModelRequest;

const PATTERN: &str = "generate-and-filter";
const REQUEST: &str = "Write a one-line tagline for Trellis, a workflow host.";
const STYLES: [&str; 4] = ["plain", "playful", "formal", "bold"];
const MARKER: &str = "You are the filter";
/// The workflow's default `constraints`.
const DEFAULT_CONSTRAINTS: &str =
    "At most 12 words. No prices or discounts. No exclamation marks. Must name the product.";

/// Plays every scenario of the generate-and-filter fixture.
pub async fn check(env: &mut Env<'_>) {
    two_kept(env).await;
    none_passed(env).await;
}

/// Runs the pattern with `inputs`; asserts what every scenario shares (completed, five calls,
/// one writer per style, the filter's prompt, every candidate kept in item order, where the
/// verdict lands, which end node ran) and returns the snapshot.
async fn run(env: &mut Env<'_>, scenario: &str, inputs: Value, constraints: &str, outcome: &str) -> Value {
    assert_eq!(env.script(PATTERN, scenario), 5, "{scenario}: scripted replies");
    let run_id = env.start(PATTERN, json!({ "inputs": inputs })).await;
    let snapshot = env.terminal(&run_id).await;
    assert_eq!(snapshot["status"], "completed", "{scenario}: {snapshot}");
    let requests = env.model_requests();
    assert_eq!(requests.len(), 5, "{scenario}: model calls (4 writers + the filter)");
    assert_eq!(env.model.pending_routed(), 0, "{scenario}: every scripted answer is used");
    let mut styles: Vec<String> = requests
        .iter()
        .map(|request| message_text(request, "user"))
        .filter_map(|text| text.strip_prefix("Style: ").map(|rest| rest.lines().next().unwrap_or("").to_owned()))
        .collect();
    styles.sort();
    let mut expected: Vec<String> = STYLES.iter().map(|style| (*style).to_owned()).collect();
    expected.sort();
    assert_eq!(styles, expected, "{scenario}: one writer call per style");

    // Every candidate, in item order, holding only the style and the writer's answer.
    let candidates = snapshot["variables"]["candidates"].as_array().expect("candidates").clone();
    assert_eq!(candidates.len(), 4, "{scenario}: {snapshot}");
    for (index, (result, style)) in candidates.iter().zip(STYLES).enumerate() {
        assert_eq!(result["index"], index, "{scenario}: {result}");
        assert_eq!(result["status"], "completed", "{scenario}: {result}");
        let expected = json!({ "item": style, "draft": scripted_json(PATTERN, scenario, &format!("Style: {style}")) });
        assert_eq!(result["outputs"], expected, "{scenario}: {result}");
    }

    // The filter judged all of them under the run's constraints.
    let filter: Vec<&ModelRequest> =
        requests.iter().filter(|request| message_text(request, "system").contains(MARKER)).collect();
    assert_eq!(filter.len(), 1, "{scenario}: one filter call");
    let prompt = message_text(filter[0], "user");
    assert!(prompt.contains(&format!("Constraints: {constraints}\n")), "{scenario}: {prompt}");
    let (_, rendered) = prompt.split_once("the text):\n").unwrap_or_else(|| panic!("{scenario}: {prompt}"));
    let rendered: Value = serde_json::from_str(rendered).unwrap_or_else(|error| panic!("{scenario}: {error}"));
    assert_eq!(rendered, json!(candidates), "{scenario}: the filter's input");

    // The verdict, reasons included, is in the outputs and the variables; one end node ran.
    let verdict = scripted_json(PATTERN, scenario, MARKER);
    assert_eq!(snapshot["outputs"], json!({ "outcome": outcome, "verdict": verdict }), "{scenario}: {snapshot}");
    assert_eq!(snapshot["variables"]["outcome"], outcome, "{scenario}: {snapshot}");
    assert_eq!(snapshot["variables"]["verdict"], verdict, "{scenario}: {snapshot}");
    assert_eq!(snapshot["variables"]["filter"]["data"], verdict, "{scenario}: {snapshot}");
    let events = env.events(&run_id).await;
    let ended: Vec<&str> = events
        .iter()
        .filter(|event| event["type"] == "node.completed")
        .filter_map(|event| event["nodeId"].as_str())
        .filter(|id| ["shortlist", "none-passed"].contains(id))
        .collect();
    assert_eq!(ended, vec![outcome], "{scenario}: the end node that ran");
    let skipped: Vec<&str> = events
        .iter()
        .filter(|event| event["type"] == "node.skipped")
        .filter_map(|event| event["nodeId"].as_str())
        .collect();
    let other = if outcome == "shortlist" { "none-passed" } else { "shortlist" };
    assert_eq!(skipped, vec![other], "{scenario}: the end node skipped");
    let finished = payloads(&events, "trellis.loop.finished");
    assert_eq!(finished.len(), 1, "{scenario}: {finished:?}");
    assert_eq!(finished[0]["outcome"], "satisfied", "{scenario}: {finished:?}");
    assert_eq!(finished[0]["completedCount"], 4, "{scenario}: {finished:?}");
    snapshot
}

/// The `index` of each entry of `list`.
fn indexes(list: &Value) -> Vec<u64> {
    list.as_array().expect("a list").iter().map(|entry| entry["index"].as_u64().expect("index")).collect()
}

async fn two_kept(env: &mut Env<'_>) {
    let scenario = "two-kept";
    let snapshot = run(env, scenario, json!({ "request": REQUEST }), DEFAULT_CONSTRAINTS, "shortlist").await;
    let verdict = &snapshot["outputs"]["verdict"];
    assert_eq!(indexes(&verdict["kept"]), vec![0, 2], "{scenario}: {verdict}");
    assert_eq!(indexes(&verdict["rejected"]), vec![1, 3], "{scenario}: {verdict}");
    assert_eq!(
        verdict["rejected"][0]["reason"], "mentions a discount (20% off) and ends with an exclamation mark",
        "{scenario}: the rejection reasons are kept"
    );
    assert_eq!(verdict["rejected"][1]["reason"], "18 words: over the 12-word limit", "{scenario}: {verdict}");
}

async fn none_passed(env: &mut Env<'_>) {
    let scenario = "none-passed";
    let constraints = "At most 5 words. Must name the product.";
    let inputs = json!({ "request": REQUEST, "constraints": constraints });
    let snapshot = run(env, scenario, inputs, constraints, "none-passed").await;
    let verdict = &snapshot["outputs"]["verdict"];
    assert_eq!(verdict["kept"], json!([]), "{scenario}: {verdict}");
    assert_eq!(indexes(&verdict["rejected"]), vec![0, 1, 2, 3], "{scenario}: {verdict}");
    assert!(
        verdict["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .all(|entry| entry["reason"].as_str().unwrap().contains("5-word")),
        "{scenario}: the rejection reasons are kept: {verdict}"
    );
}
