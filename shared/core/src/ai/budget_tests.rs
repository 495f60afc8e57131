//! The budget policy's checks (what run creation refuses, with the field and the rule), the
//! model lists' globs, and the consumption arithmetic with its once-per-dimension events.

use serde_json::{json, Value};

use super::*;

fn parse(budget: Value) -> Result<Option<BudgetPolicy>, BudgetRefusal> {
    BudgetPolicy::parse(Some(&json!({ "budget": budget })))
}

fn refused_field(budget: Value) -> String {
    parse(budget).expect_err("refused").field
}

#[test]
fn a_full_policy_parses_with_its_defaults() {
    assert_eq!(BudgetPolicy::parse(None), Ok(None));
    assert_eq!(BudgetPolicy::parse(Some(&json!({"recursionLimit": 5}))), Ok(None));
    let policy = parse(json!({})).unwrap().unwrap();
    assert_eq!((policy.threshold_percent, policy.on_exhaustion), (DEFAULT_THRESHOLD_PERCENT, OnExhaustion::Fail));
    let policy = parse(json!({
        "maxTokens": 100, "maxCostUsd": 0.5, "maxToolCalls": 3, "maxRetries": 0,
        "modelAllow": ["claude-*"], "modelDeny": ["claude-opus*"], "thresholdPercent": 50,
        "onExhaustion": "interrupt"
    }))
    .unwrap()
    .unwrap();
    assert_eq!(
        policy.limits,
        Limits { max_tokens: Some(100), max_cost_usd: Some(0.5), max_tool_calls: Some(3), max_retries: Some(0) }
    );
    assert_eq!(policy.on_exhaustion, OnExhaustion::Interrupt);
    assert_eq!(
        policy.limits.effective_budget(),
        json!({"maxTokens": 100, "maxCostUsd": 0.5, "maxToolCalls": 3, "maxRetries": 0})
    );
}

#[test]
fn every_bad_value_is_refused_naming_its_field_and_rule() {
    let cases = [
        (json!({"maxTokens": 0}), "configurable.budget.maxTokens"),
        (json!({"maxTokens": 1.5}), "configurable.budget.maxTokens"),
        (json!({"maxTokens": "10"}), "configurable.budget.maxTokens"),
        (json!({"maxCostUsd": -0.01}), "configurable.budget.maxCostUsd"),
        (json!({"maxToolCalls": 0}), "configurable.budget.maxToolCalls"),
        (json!({"maxRetries": -1}), "configurable.budget.maxRetries"),
        (json!({"modelAllow": "gpt-*"}), "configurable.budget.modelAllow"),
        (json!({"modelDeny": ["a", "a"]}), "configurable.budget.modelDeny"),
        (json!({"modelDeny": [1]}), "configurable.budget.modelDeny"),
        (json!({"thresholdPercent": 101}), "configurable.budget.thresholdPercent"),
        (json!({"thresholdPercent": -1}), "configurable.budget.thresholdPercent"),
        (json!({"onExhaustion": "pause"}), "configurable.budget.onExhaustion"),
        (json!({"enforce": "advisory"}), "configurable.budget.enforce"),
        (json!({"maxWallTimeMs": 1000}), "configurable.budget.maxWallTimeMs"),
        (json!({"runTimeoutMs": 1000}), "configurable.budget.runTimeoutMs"),
        (json!(5), "configurable.budget"),
    ];
    for (budget, field) in cases {
        assert_eq!(refused_field(budget.clone()), field, "{budget}");
    }
    let wall = parse(json!({"maxWallTimeMs": 1000})).unwrap_err();
    assert!(wall.message.contains("wall time") && wall.message.contains("runTimeoutMs"), "{}", wall.message);
    let unknown = parse(json!({"maxSteps": 3})).unwrap_err();
    assert!(unknown.message.contains("no field `maxSteps`"), "{}", unknown.message);
    let low = parse(json!({"maxTokens": 0})).unwrap_err();
    assert!(low.message.contains("integer ≥ 1"), "{}", low.message);
    assert!(parse(json!({"maxCostUsd": 0, "maxRetries": 0, "thresholdPercent": 0})).is_ok(), "the minimums hold");
}

#[test]
fn globs_match_any_run_and_deny_wins_over_allow() {
    assert!(glob_matches("claude-*", "claude-3-haiku"));
    assert!(glob_matches("*", ""));
    assert!(glob_matches("gpt-*-mini", "gpt-4o-mini"));
    assert!(glob_matches("a*b*c", "aXXbYYc"));
    assert!(!glob_matches("gpt-*-mini", "gpt-4o"));
    assert!(!glob_matches("claude", "claude-3"));
    let policy = parse(json!({"modelAllow": ["claude-*", "gpt-4o"], "modelDeny": ["claude-opus*"]})).unwrap().unwrap();
    assert!(policy.permits(Some("claude-3-haiku")));
    assert!(policy.permits(Some("gpt-4o")));
    assert!(!policy.permits(Some("claude-opus-4")), "deny wins over a matching allow");
    assert!(!policy.permits(Some("gpt-4o-mini")), "not on the allowlist");
    assert!(!policy.permits(None), "no model under an allowlist is refused");
    let deny_only = parse(json!({"modelDeny": ["*-preview"]})).unwrap().unwrap();
    assert!(deny_only.permits(Some("gpt-5")) && deny_only.permits(None));
    assert!(!deny_only.permits(Some("gpt-5-preview")));
}

fn types_of(events: &[BudgetEvent]) -> Vec<&'static str> {
    events.iter().map(|(event_type, _)| *event_type).collect()
}

#[test]
fn metered_dimensions_exhaust_on_reaching_the_limit_and_each_event_comes_once() {
    let mut state = BudgetState::new(parse(json!({"maxTokens": 100})).unwrap().unwrap());
    let (events, exhausted) = state.consume(Dimension::Tokens, 50.0);
    assert_eq!((types_of(&events), exhausted), (vec![CONSUMED], false));
    assert_eq!(events[0].1, json!({"dimension": "tokens", "consumed": 50, "limit": 100, "remaining": 50}));
    let (events, _) = state.consume(Dimension::Tokens, 30.0);
    assert_eq!(types_of(&events), [CONSUMED, THRESHOLD_CROSSED]);
    assert_eq!(events[1].1, json!({"dimension": "tokens", "consumed": 80, "limit": 100, "percent": 80.0}));
    let (events, exhausted) = state.consume(Dimension::Tokens, 20.0);
    assert_eq!((types_of(&events), exhausted), (vec![CONSUMED, EXHAUSTED], true));
    assert_eq!(events[1].1, json!({"dimension": "tokens", "consumed": 100, "limit": 100}));
    let (events, exhausted) = state.consume(Dimension::Tokens, 5.0);
    assert_eq!((types_of(&events), exhausted), (vec![CONSUMED], false), "exhausted once");
    assert_eq!(events[0].1["remaining"], 0);
    // An unbounded dimension is tracked but emits nothing.
    assert_eq!(state.consume(Dimension::Cost, 3.0), (vec![], false));
    assert_eq!(state.consumed.cost_usd, 3.0);
}

#[test]
fn counted_dimensions_exhaust_on_exceeding_the_limit_and_a_raise_resets_them() {
    let mut state = BudgetState::new(parse(json!({"maxRetries": 1, "maxCostUsd": 0.5})).unwrap().unwrap());
    let (events, exhausted) = state.consume(Dimension::Retries, 1.0);
    assert_eq!((types_of(&events), exhausted), (vec![CONSUMED, THRESHOLD_CROSSED], false), "one retry is allowed");
    assert!(!state.is_spent(Dimension::Retries));
    let (events, exhausted) = state.consume(Dimension::Retries, 1.0);
    assert_eq!((types_of(&events), exhausted), (vec![CONSUMED, EXHAUSTED], true));
    assert_eq!(state.spent(&Dimension::ALL), Some(Dimension::Retries));
    assert_eq!(
        state.breach(Dimension::Retries, Some("n")),
        json!({"kind": "budget-retries", "limit": 1, "observed": 2, "nodeId": "n"})
    );
    state.raise(&Limits { max_retries: Some(2), max_tokens: Some(10), ..Limits::default() });
    assert_eq!(state.policy.limits.max_retries, Some(3));
    assert_eq!(state.policy.limits.max_tokens, None, "an unbounded dimension stays unbounded");
    assert!(state.spent(&Dimension::ALL).is_none());
    assert_eq!(state.reserve().1, json!({"effectiveBudget": {"maxCostUsd": 0.5, "maxRetries": 3}, "scope": "run"}));
    let (events, _) = state.consume(Dimension::Retries, 2.0);
    assert_eq!(types_of(&events), [CONSUMED, THRESHOLD_CROSSED, EXHAUSTED], "again after the raise");
    let (events, _) = state.consume(Dimension::Cost, 0.25);
    assert_eq!(events[0].1, json!({"dimension": "cost", "consumed": 0.25, "limit": 0.5, "remaining": 0.25}));
}

#[test]
fn a_zero_cost_limit_is_spent_before_any_call_and_the_gate_data_is_content_free() {
    let state = BudgetState::new(parse(json!({"maxCostUsd": 0, "maxTokens": 5})).unwrap().unwrap());
    assert_eq!(state.spent(&[Dimension::Tokens, Dimension::Cost]), Some(Dimension::Cost));
    let data = state.gate_data(Dimension::Cost, "ask");
    assert!(is_gate(&data));
    assert_eq!(data["artifactData"], json!({"dimension": "cost", "consumed": 0.0, "limit": 0.0}));
    let schema = state.gate_resume_schema();
    let allowance_fields = schema["properties"]["data"]["properties"]["budget"]["properties"].as_object().unwrap();
    assert_eq!(allowance_fields.keys().collect::<Vec<_>>(), ["maxCostUsd", "maxTokens"]);
    let resume = json!({"action": "accept", "data": {"budget": {"maxTokens": 7}}});
    assert!(crate::schema::check_against(&schema, &resume).is_ok());
    assert_eq!(allowance(&resume), Limits { max_tokens: Some(7), ..Limits::default() });
    let bad = json!({"action": "accept", "data": {"budget": {"maxRetries": 1}}});
    assert!(crate::schema::check_against(&schema, &bad).is_err(), "only the bounded dimensions may be raised");
    assert!(crate::schema::check_against(&schema, &json!({"action": "refine"})).is_err());
}
