//! Run budgets (RFC 0084) end to end on the embedded host: `configurable.budget` checked at
//! creation (a refused request persists nothing), and enforced on `core.ai.callPrompt` calls
//! answered by the `usage-only` mock provider — the fail path (`cap.breached` then
//! `run.failed{budget_exhausted}`), the interrupt path (an allowance on the approval lets the
//! next call out) and the model policy (`budget_model_denied`). Payloads are checked against
//! the official schemas when `OPENWOP_REFERENCE_DIR` is set.

mod common;

use std::time::Duration;

use common::{serve_args, start, types, Client, Reference, KEY};
use serde_json::{json, Value};
use trellis::host::EmbeddedHost;

const WITHIN: Duration = Duration::from_secs(10);

fn call(id: &str) -> Value {
    json!({"id": id, "typeId": "core.ai.callPrompt", "config": {"prompt": "hello"}})
}

fn workflow(id: &str, nodes: &[&str]) -> Value {
    let edges: Vec<Value> = nodes
        .windows(2)
        .map(|pair| json!({"id": format!("{}-{}", pair[0], pair[1]), "sourceNodeId": pair[0], "targetNodeId": pair[1]}))
        .collect();
    json!({"id": id, "name": id, "nodes": nodes.iter().map(|id| call(id)).collect::<Vec<_>>(), "edges": edges})
}

/// `configurable` with the `usage-only` mock (each call: 60 + 40 tokens of `mock-usage-v1`)
/// and `budget`.
fn configurable(budget: Value) -> Value {
    json!({
        "mockProvider": {"id": "usage-only", "config": {"usage": {"promptTokens": 60, "completionTokens": 40}, "model": "mock-usage-v1"}},
        "budget": budget,
    })
}

async fn host() -> (EmbeddedHost, Client) {
    let mut args = serve_args(None);
    // The mock provider needs a test-scope key on a host with its seams on.
    args.test_seams = true;
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    (host, client)
}

async fn register(client: &Client, document: Value) {
    let (status, body) = client.request("POST", "/v1/workflows", Some(document)).await;
    assert_eq!(status, 201, "{body}");
}

fn of_type<'a>(events: &'a [Value], event_type: &str) -> Vec<&'a Value> {
    events.iter().filter(|event| event["type"] == event_type).collect()
}

fn check_schemas(events: &[Value]) {
    let Some(reference) = Reference::load("budget_events_match_the_official_schemas") else { return };
    let payloads = |name: &str| format!("run-event-payloads.schema.json#/$defs/{name}");
    for (event_type, schema) in [
        ("budget.reserved", payloads("budgetReserved")),
        ("budget.consumed", payloads("budgetConsumed")),
        ("budget.threshold.crossed", payloads("budgetThresholdCrossed")),
        ("budget.exhausted", payloads("budgetExhausted")),
        ("cap.breached", payloads("capBreached")),
    ] {
        for event in of_type(events, event_type) {
            reference.assert_valid(&schema, &event["payload"]);
        }
    }
    for event in events {
        reference.assert_valid("run-event.schema.json", event);
    }
}

#[tokio::test]
async fn a_bad_budget_is_refused_at_creation_naming_the_field_and_nothing_is_persisted() {
    let (host, client) = host().await;
    register(&client, workflow("budget-one", &["ask"])).await;
    for (budget, field) in [
        (json!({"maxTokens": 0}), "configurable.budget.maxTokens"),
        (json!({"maxCostUsd": -1}), "configurable.budget.maxCostUsd"),
        (json!({"onExhaustion": "pause"}), "configurable.budget.onExhaustion"),
        (json!({"maxWallTimeMs": 1000}), "configurable.budget.maxWallTimeMs"),
        (json!({"maxTokens": 10, "surprise": true}), "configurable.budget.surprise"),
    ] {
        let body = json!({"workflowId": "budget-one", "configurable": configurable(budget.clone())});
        let (status, error) = client.request("POST", "/v1/runs", Some(body)).await;
        assert_eq!(status, 400, "{budget}: {error}");
        assert_eq!(error["error"], "validation_error", "{error}");
        assert_eq!(error["details"]["field"], field, "{error}");
    }
    let (status, listing) = client.request("GET", "/v1/runs", None).await;
    assert_eq!(status, 200);
    assert_eq!(listing["runs"].as_array().map(Vec::len), Some(0), "a refused create persists nothing: {listing}");
    host.stop().await;
}

#[tokio::test]
async fn an_exhausted_token_budget_breaches_the_cap_and_fails_the_run() {
    let (host, client) = host().await;
    register(&client, workflow("budget-two", &["first", "second"])).await;
    let body = json!({"workflowId": "budget-two", "configurable": configurable(json!({"maxTokens": 150}))});
    let run_id = client.create(body).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "budget_exhausted", "{snapshot}");
    let events = client.debug_events(&run_id).await;
    let budget: Vec<String> = types(&events)
        .into_iter()
        .filter(|t| t.starts_with("budget.") || t == "cap.breached" || t == "provider.usage" || t == "run.failed")
        .collect();
    assert_eq!(
        budget,
        [
            "budget.reserved",
            "provider.usage",
            "budget.consumed",
            "provider.usage",
            "budget.consumed",
            "budget.threshold.crossed",
            "budget.exhausted",
            "cap.breached",
            "run.failed"
        ]
    );
    assert_eq!(
        of_type(&events, "budget.reserved")[0]["payload"],
        json!({"effectiveBudget": {"maxTokens": 150}, "scope": "run"})
    );
    assert_eq!(
        of_type(&events, "cap.breached")[0]["payload"],
        json!({"kind": "budget-tokens", "limit": 150, "observed": 200, "nodeId": "second"})
    );
    check_schemas(&events);
    host.stop().await;
}

#[tokio::test]
async fn under_interrupt_an_allowance_on_the_approval_lets_the_next_call_out() {
    let (host, client) = host().await;
    register(&client, workflow("budget-three", &["first", "second"])).await;
    let budget = json!({"maxTokens": 100, "onExhaustion": "interrupt"});
    let run_id = client.create(json!({"workflowId": "budget-three", "configurable": configurable(budget)})).await;
    let waiting = client.wait_status(&run_id, "waiting-approval", WITHIN).await;
    assert_eq!(waiting["currentNodeId"], "second", "{waiting}");
    let path = format!("/v1/runs/{run_id}/interrupts/second");
    let resume = json!({"resumeValue": {"action": "accept", "data": {"budget": {"maxTokens": 100}}}});
    let (status, body) = client.request("POST", &path, Some(resume)).await;
    assert_eq!(status, 200, "{body}");
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    let events = client.debug_events(&run_id).await;
    let reserved: Vec<Value> =
        of_type(&events, "budget.reserved").iter().map(|e| e["payload"]["effectiveBudget"].clone()).collect();
    assert_eq!(reserved, [json!({"maxTokens": 100}), json!({"maxTokens": 200})]);
    assert_eq!(of_type(&events, "provider.usage").len(), 2, "the held call went out after the allowance");
    assert_eq!(of_type(&events, "budget.exhausted").len(), 2, "once per reservation");
    assert!(of_type(&events, "cap.breached").is_empty(), "no breach under interrupt: {:?}", types(&events));
    check_schemas(&events);
    host.stop().await;
}

#[tokio::test]
async fn a_denied_model_fails_the_node_before_the_call() {
    let (host, client) = host().await;
    register(&client, workflow("budget-four", &["ask"])).await;
    let budget = json!({"modelAllow": ["mock-*"], "modelDeny": ["mock-usage-*"]});
    let run_id = client.create(json!({"workflowId": "budget-four", "configurable": configurable(budget)})).await;
    let snapshot = client.wait_terminal(&run_id, WITHIN).await;
    assert_eq!(snapshot["status"], "failed", "{snapshot}");
    assert_eq!(snapshot["error"]["code"], "budget_model_denied", "{snapshot}");
    assert_eq!(snapshot["error"]["details"], json!({"model": "mock-usage-v1"}), "{snapshot}");
    let events = client.debug_events(&run_id).await;
    assert!(of_type(&events, "provider.usage").is_empty(), "no call went out: {:?}", types(&events));
    host.stop().await;
}
