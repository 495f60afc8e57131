//! `POST /v1/workflows` refuses a definition that could never run — with `400
//! validation_error`, `details.path` a JSON pointer to the offending part, a message naming
//! the rule, and nothing stored. Durations are integers from 0 to the host's run-duration
//! ceiling (`limits.maxRunDurationMs`).

mod support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use support::{harness, is_envelope};

fn workflow(nodes: Value) -> Value {
    json!({ "id": "candidate", "name": "Candidate", "nodes": nodes })
}

fn node(type_id: &str, config: Value) -> Value {
    json!([{ "id": "n", "typeId": type_id, "config": config }])
}

fn with(mut document: Value, key: &str, value: Value) -> Value {
    document[key] = value;
    document
}

fn two_nodes_with_condition(condition: Value) -> Value {
    json!({ "id": "candidate", "name": "Candidate",
        "nodes": [{ "id": "a", "typeId": "core.noop" }, { "id": "b", "typeId": "core.noop" }],
        "edges": [{ "id": "ab", "sourceNodeId": "a", "targetNodeId": "b", "condition": condition }] })
}

/// `(what, document, expected details.path, a word the message must contain)`.
fn never_runnable() -> Vec<(&'static str, Value, &'static str, &'static str)> {
    let long_id = "n".repeat(100_000);
    let ceiling = trellis_core::limits::HostLimits::default().max_run_duration_ms;
    vec![
        (
            "a question schema that does not compile",
            workflow(node(
                "core.clarificationGate",
                json!({ "questions": [
                { "id": "q", "question": "Q?", "schema": { "type": "strnig" } }] }),
            )),
            "/nodes/0/config/questions/0/schema",
            "schema",
        ),
        (
            "a core.interrupt clarification question schema that does not compile",
            workflow(node(
                "core.interrupt",
                json!({ "kind": "clarification", "data": { "questions": [
                { "id": "q", "question": "Q?", "schema": { "minimum": "zero" } }] } }),
            )),
            "/nodes/0/config/data/questions/0/schema",
            "schema",
        ),
        (
            "an invalid configurableSchema",
            with(workflow(node("core.noop", json!({}))), "configurableSchema", json!({ "type": 12 })),
            "/configurableSchema",
            "schema",
        ),
        (
            "a remote $ref in configurableSchema",
            with(
                workflow(node("core.noop", json!({}))),
                "configurableSchema",
                json!({ "properties": { "x": { "$ref": "https://example.com/s.json" } } }),
            ),
            "/configurableSchema/properties/x/$ref",
            "remote",
        ),
        (
            "an unbalanced regex",
            two_nodes_with_condition(json!({ "type": "regex", "left": "x", "right": "[" })),
            "/edges/0/condition/right",
            "regex",
        ),
        (
            "a regex repetition beyond the parser's range",
            two_nodes_with_condition(json!({ "type": "regex", "left": "x", "right": "a{4294967296}" })),
            "/edges/0/condition/right",
            "regex",
        ),
        (
            "a regex too large once compiled",
            two_nodes_with_condition(json!({ "type": "regex", "left": "x", "right": "(?:\\w{1000}){1000}" })),
            "/edges/0/condition/right",
            "regex",
        ),
        (
            "a regex condition without a string pattern",
            two_nodes_with_condition(json!({ "type": "regex", "left": "x", "right": 5 })),
            "/edges/0/condition/right",
            "regex",
        ),
        (
            "core.subWorkflow without workflowId",
            workflow(node("core.subWorkflow", json!({}))),
            "/nodes/0/config/workflowId",
            "workflowId",
        ),
        (
            "duplicate edge ids",
            json!({ "id": "candidate", "name": "Candidate",
                "nodes": [{ "id": "a", "typeId": "core.noop" }, { "id": "b", "typeId": "core.noop" },
                          { "id": "c", "typeId": "core.noop" }],
                "edges": [{ "id": "e", "sourceNodeId": "a", "targetNodeId": "b" },
                          { "id": "e", "sourceNodeId": "b", "targetNodeId": "c" }] }),
            "/edges/1/id",
            "edge id",
        ),
        (
            "duplicate variable names",
            with(
                workflow(node("core.noop", json!({}))),
                "variables",
                json!([{ "name": "v", "type": "string" }, { "name": "v", "type": "number" }]),
            ),
            "/variables/1/name",
            "variable",
        ),
        (
            "requiredApprovals beyond the approvers list",
            workflow(node("core.approvalGate", json!({ "requiredApprovals": 3, "approversList": ["ann", "bob"] }))),
            "/nodes/0/config/requiredApprovals",
            "approversList",
        ),
        (
            "a node id of 100,000 characters",
            workflow(json!([{ "id": long_id, "typeId": "core.noop" }])),
            "/nodes/0/id",
            "256",
        ),
        (
            "an edge id of 300 characters",
            json!({ "id": "candidate", "name": "Candidate",
                "nodes": [{ "id": "a", "typeId": "core.noop" }, { "id": "b", "typeId": "core.noop" }],
                "edges": [{ "id": "e".repeat(300), "sourceNodeId": "a", "targetNodeId": "b" }] }),
            "/edges/0/id",
            "256",
        ),
        // Item 6: durations.
        (
            "config.delayMs of 1e19",
            workflow(node("core.delay", json!({ "delayMs": 1e19 }))),
            "/nodes/0/config/delayMs",
            "delayMs",
        ),
        (
            "config.delayMs above the run-duration ceiling",
            workflow(node("core.delay", json!({ "delayMs": ceiling + 1 }))),
            "/nodes/0/config/delayMs",
            "delayMs",
        ),
        (
            "a negative config.durationMs",
            workflow(node("core.delay", json!({ "durationMs": -1 }))),
            "/nodes/0/config/durationMs",
            "durationMs",
        ),
        ("a fractional config.ms", workflow(node("core.delay", json!({ "ms": 1.5 }))), "/nodes/0/config/ms", "integer"),
        (
            "a literal input delayMs of 1e19",
            workflow(json!([{ "id": "n", "typeId": "core.delay", "inputs": { "delayMs": 1e19 } }])),
            "/nodes/0/inputs/delayMs",
            "delayMs",
        ),
        (
            "a static input delayMs above the ceiling",
            workflow(json!([{ "id": "n", "typeId": "core.delay",
                "inputs": { "delayMs": { "type": "static", "value": ceiling + 1 } } }])),
            "/nodes/0/inputs/delayMs/value",
            "delayMs",
        ),
        (
            "an approval timeoutMs of 1e19",
            workflow(node("core.approvalGate", json!({ "timeoutMs": 1e19 }))),
            "/nodes/0/config/timeoutMs",
            "timeoutMs",
        ),
        (
            "a clarification timeoutMs above the ceiling",
            workflow(node(
                "core.clarificationGate",
                json!({ "timeoutMs": ceiling + 1,
                "questions": [{ "id": "q", "question": "Q?" }] }),
            )),
            "/nodes/0/config/timeoutMs",
            "timeoutMs",
        ),
        (
            "an interrupt timeoutMs of 1e19",
            workflow(node(
                "core.interrupt",
                json!({ "kind": "custom", "timeoutMs": 1e19,
                "data": { "customKind": "x" } }),
            )),
            "/nodes/0/config/timeoutMs",
            "timeoutMs",
        ),
    ]
}

#[tokio::test]
async fn a_definition_that_could_never_run_is_refused_with_its_path_and_nothing_is_stored() {
    let h = harness().await;
    let before = h.counts();
    let mut wrong = Vec::new();
    for (index, (what, mut document, path, word)) in never_runnable().into_iter().enumerate() {
        // A distinct id each, so one case wrongly accepted cannot make the next a conflict.
        document["id"] = json!(format!("candidate-{index}"));
        let (status, body) = h.post("/v1/workflows", &document).await;
        let message = body["message"].as_str().unwrap_or_default();
        let refused = status == StatusCode::BAD_REQUEST && is_envelope(&body) && body["error"] == "validation_error";
        if !refused || body["details"]["path"] != path || !message.contains(word) {
            wrong.push(format!("{what}: expected 400 at {path} naming `{word}`, got {status} {body:.300}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} not refused as expected:\n{}",
        wrong.len(),
        never_runnable().len(),
        wrong.join("\n")
    );
    assert_eq!(h.counts(), before, "a refused definition stores nothing");
}

#[tokio::test]
async fn durations_up_to_the_ceiling_and_ids_up_to_256_characters_are_accepted() {
    let h = harness().await;
    let ceiling = trellis_core::limits::HostLimits::default().max_run_duration_ms;
    let document = json!({ "id": "edge-of-range", "name": "Edge of range",
        "nodes": [
            { "id": "d".repeat(256), "typeId": "core.delay", "config": { "delayMs": ceiling } },
            { "id": "gate", "typeId": "core.approvalGate",
              "config": { "timeoutMs": ceiling, "requiredApprovals": 2, "approversList": ["ann", "bob"] } },
            { "id": "ask", "typeId": "core.clarificationGate",
              "config": { "timeoutMs": 0, "questions": [{ "id": "q", "question": "Q?", "schema": { "type": "string", "pattern": "^[a-z]+$" } }] } },
        ],
        "edges": [
            { "id": "e".repeat(256), "sourceNodeId": "d".repeat(256), "targetNodeId": "gate",
              "condition": { "type": "regex", "left": "x", "right": "^(a|b)+$" } },
            { "id": "gate-ask", "sourceNodeId": "gate", "targetNodeId": "ask" },
        ],
        "configurableSchema": { "type": "object", "$defs": { "n": { "type": "number" } },
            "properties": { "n": { "$ref": "#/$defs/n" } } },
    });
    let (status, body) = h.post("/v1/workflows", &document).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn every_bundled_example_still_registers() {
    let h = harness().await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workflows");
    // The examples, then the agent-workflow patterns (their child workflows included).
    let mut paths = Vec::new();
    for folder in [dir.clone(), dir.join("patterns")] {
        let mut found: Vec<_> = std::fs::read_dir(&folder).unwrap().map(|entry| entry.unwrap().path()).collect();
        found.retain(|path| path.is_file() && path.extension().is_some_and(|ext| ext == "json"));
        found.sort();
        assert!(!found.is_empty(), "no examples under {}", folder.display());
        paths.extend(found);
    }
    for path in paths {
        let document: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let (status, body) = h.post("/v1/workflows", &document).await;
        assert_eq!(status, StatusCode::CREATED, "{}: {body}", path.display());
    }
}
