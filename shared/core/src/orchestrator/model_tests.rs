//! The model-backed supervisor's config, answer schema, answers and prompt.

use serde_json::json;

use super::*;

fn config(value: Value) -> ModelConfig {
    ModelConfig::parse(value.as_object().unwrap()).unwrap()
}

fn sample() -> ModelConfig {
    config(json!({"route": "local/llama", "goal": "g", "workers": ["a", {"id": "b", "description": "bee"}],
        "successCriteria": [{"key": "done", "description": "it is done"}]}))
}

#[test]
fn a_route_names_provider_and_model_and_plans_win_over_it() {
    let parsed = sample();
    assert_eq!((parsed.provider.as_deref(), parsed.model.as_deref()), (Some("local"), Some("llama")));
    assert_eq!(parsed.workers[1].description.as_deref(), Some("bee"));
    let split = config(json!({"provider": "p", "model": "m", "goal": "g"}));
    assert_eq!((split.provider.as_deref(), split.model.as_deref()), (Some("p"), Some("m")));
    for bad in [
        json!({"route": "nomodel", "goal": "g"}),
        json!({"route": "p/m"}),
        json!({"route": "p/m", "provider": "p", "goal": "g"}),
        json!({"route": "p/m", "goal": "g", "surprise": 1}),
        json!({"route": "p/m", "goal": "g", "workers": [""]}),
        json!({"route": "p/m", "goal": "g", "successCriteria": [{"key": "k"}, {"key": "k"}]}),
        json!({"route": "p/m", "goal": "g", "temperature": 3}),
        json!({"route": "p/m", "goal": "g", "maxTokens": 0}),
        json!({"route": "p/m", "goal": "g", "stream": "yes"}),
        json!({"route": "p/m", "goal": "g", "timeoutMs": 0}),
    ] {
        assert!(ModelConfig::parse(bad.as_object().unwrap()).is_err(), "{bad}");
    }
    assert!(routed(json!({"route": "p/m"}).as_object().unwrap()));
    assert!(!routed(json!({"route": "p/m", "mockDispatchPlan": []}).as_object().unwrap()));
    assert!(routed(json!({"goal": "g"}).as_object().unwrap()), "the host's default provider");
    assert!(!routed(json!({"agentId": "sup", "iterationCap": 3}).as_object().unwrap()));
}

#[test]
fn answers_become_proposals_with_nulls_dropped_and_inputs_decoded() {
    let config = sample();
    let answer = json!({"decision": {"kind": "next-worker", "nextWorkerIds": ["b"],
        "nextWorkerInputs": ["{\"topic\": \"rust\"}"], "confidence": 0.8}});
    let proposal = read_answer(&config, &answer).unwrap();
    assert_eq!(
        proposal.decision.to_value(),
        json!({"kind": "next-worker", "nextWorkerIds": ["b"], "nextWorkerInputs": [{"topic": "rust"}], "confidence": 0.8})
    );
    assert_eq!(proposal.confidence, Some(0.8));
    let ask = read_answer(&config, &json!({"decision": {"kind": "ask-user", "prompt": "which?"}})).unwrap();
    assert_eq!((ask.decision.kind(), ask.confidence), ("ask-user", None));
    let give_up = json!({"decision": {"kind": "terminate", "reason": "stuck", "confidence": null,
        "successCriteria": [{"key": "done", "met": false}]}});
    assert_eq!(read_answer(&config, &give_up).unwrap().decision.kind(), "terminate");
    let bad = [
        (
            json!({"decision": {"kind": "next-worker", "nextWorkerIds": ["c"], "nextWorkerInputs": null,
            "confidence": null}}),
            "/decision/nextWorkerIds/0",
        ),
        (
            json!({"decision": {"kind": "next-worker", "nextWorkerIds": ["a"], "nextWorkerInputs": ["[1]"],
            "confidence": null}}),
            "/decision/nextWorkerInputs/0",
        ),
        (
            json!({"decision": {"kind": "next-worker", "nextWorkerIds": ["a"], "nextWorkerInputs": null,
            "confidence": 3}}),
            "/decision",
        ),
        (
            json!({"decision": {"kind": "terminate", "reason": null, "confidence": null, "successCriteria": []}}),
            "/decision/successCriteria",
        ),
        (json!({"answer": 1}), "/decision"),
    ];
    for (answer, path) in bad {
        let violations = read_answer(&config, &answer).unwrap_err();
        assert_eq!(violations[0]["path"], path, "{answer}");
    }
}

#[test]
fn the_schema_lists_the_catalog_and_the_prompt_carries_goal_workers_history_and_criteria() {
    let config = sample();
    let schema = answer_schema(&config);
    let variants = schema["properties"]["decision"]["anyOf"].as_array().unwrap();
    assert_eq!(variants.len(), 3);
    assert_eq!(variants[0]["properties"]["nextWorkerIds"]["items"]["enum"], json!(["a", "b"]));
    assert_eq!(
        variants[2]["properties"]["successCriteria"]["anyOf"][0]["items"]["properties"]["key"]["enum"],
        json!(["done"])
    );
    for answer in [
        json!({"decision": {"kind": "ask-user", "prompt": "which?"}}),
        json!({"decision": {"kind": "next-worker", "nextWorkerIds": ["a"], "nextWorkerInputs": null, "confidence": null}}),
    ] {
        assert_eq!(crate::schema::check_against(&schema, &answer), Ok(()), "{answer}");
    }
    assert!(crate::schema::check_against(&schema, &json!({"decision": {"kind": "ask-user"}})).is_err());
    let history = vec![
        json!({"decision": {"kind": "next-worker", "nextWorkerIds": ["a"]}}),
        worker_entry("a", "run-1", "completed", &json!({"long": "x".repeat(MAX_OUTPUT_CHARS)})),
    ];
    let context = context(2, &history, Some(&json!("blue")));
    assert_eq!(context["history"], json!(history), "entries are shown as recorded, never cut again");
    assert_eq!(context["history"][1]["outputsTruncated"]["totalChars"], MAX_OUTPUT_CHARS + 11);
    let small = worker_entry("a", "run-1", "completed", &json!({"short": 1}));
    assert_eq!(small, json!({"workerId": "a", "childRunId": "run-1", "status": "completed", "outputs": {"short": 1}}));
    let (system, user) = prompt(&config, &context);
    assert!(system.contains("exactly one decision"));
    for expected in ["\"goal\": \"g\"", "\"bee\"", "\"done\"", "\"userAnswer\": \"blue\"", "\"tick\": 2"] {
        assert!(user.contains(expected), "{expected} in {user}");
    }
}
