//! Property tests of the HTTP surface through `oneshot` (the fault campaign's fuzz half):
//! mutated workflow definitions for `POST /v1/workflows`, mutated create bodies for
//! `POST /v1/runs`, arbitrary query strings for `GET /v1/runs` and `…/events/poll`, and
//! arbitrary resume values for interrupt resolution. For every request: no panic, no 5xx,
//! every non-2xx answer is the `{error, message, details?}` envelope, and a refused request
//! persists nothing (every table's row count is unchanged).
//!
//! The generators are structured, so they get past the JSON parser to the validators: they
//! start from valid documents and apply one to four mutations at a random place — a value
//! of the wrong type, a huge or fractional number, a long string, odd unicode, a field
//! removed, an array element duplicated (repeated ids), deep nesting. 256 cases per property
//! by default; `PROPTEST_CASES` overrides.

mod support;

use axum::body::Body;
use axum::http::StatusCode;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};
use support::{harness, is_envelope, Harness};

// ----- generators ---------------------------------------------------------------------

/// A value that is likely wrong wherever it lands.
fn odd_value() -> impl Strategy<Value = Value> {
    let numbers = prop::sample::select(vec![
        1e19,
        -1e19,
        1e308,
        -1.0,
        -0.0,
        0.5,
        1.5,
        4_294_967_296.0,
        9_007_199_254_740_993.0,
        2_592_000_001.0,
        86_400_001.0,
    ])
    .prop_map(|n| json!(n));
    let texts = prop::sample::select(vec![
        "",
        "\u{0}",
        "\u{202e}gnp.exe",
        "e\u{301}\u{301}\u{301}",
        "😀🧪",
        "\u{FEFF}id",
        "a/b~c",
        "../../etc",
        "%00%ff",
        "[",
        "a{4294967296}",
        "(?:\\w{1000}){1000}",
        "https://example.com/schema.json",
        "#/$defs/missing",
        "core.subWorkflow",
        "core.approvalGate",
        "regex",
        "expression",
        "static",
        "variable",
        "\u{10FFFF}",
    ])
    .prop_map(|s| json!(s));
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        numbers,
        texts,
        any::<String>().prop_map(Value::from),
        (1usize..20_000).prop_map(|n| json!("x".repeat(n))),
        Just(json!([])),
        Just(json!({})),
        Just(json!({ "$ref": "https://example.com/remote.json" })),
        Just(json!({ "type": "strnig" })),
        Just(json!({ "type": "regex", "left": "x", "right": "[" })),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(|bytes| json!(bytes)),
    ]
}

/// One change to a document, at the place chosen by an [`Index`] over its JSON pointers.
#[derive(Debug, Clone)]
enum Mutation {
    Replace(Index, Value),
    Remove(Index),
    Duplicate(Index),
    Nest(Index, usize),
    Rename(Index, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<Index>(), odd_value()).prop_map(|(at, value)| Mutation::Replace(at, value)),
        2 => any::<Index>().prop_map(Mutation::Remove),
        2 => any::<Index>().prop_map(Mutation::Duplicate),
        1 => (any::<Index>(), 1usize..300).prop_map(|(at, depth)| Mutation::Nest(at, depth)),
        1 => (any::<Index>(), any::<String>()).prop_map(|(at, name)| Mutation::Rename(at, name)),
    ]
}

/// Every JSON pointer in `value` but the root.
fn pointers(value: &Value, at: &str, found: &mut Vec<String>) {
    let children: Vec<(String, &Value)> = match value {
        Value::Object(map) => map.iter().map(|(k, v)| (k.replace('~', "~0").replace('/', "~1"), v)).collect(),
        Value::Array(items) => items.iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect(),
        _ => return,
    };
    for (segment, child) in children {
        let here = format!("{at}/{segment}");
        found.push(here.clone());
        pointers(child, &here, found);
    }
}

fn split(pointer: &str) -> (&str, String) {
    let cut = pointer.rfind('/').unwrap_or(0);
    (&pointer[..cut], pointer[cut + 1..].replace("~1", "/").replace("~0", "~"))
}

fn apply(document: &mut Value, change: &Mutation) {
    let mut all = Vec::new();
    pointers(document, "", &mut all);
    if all.is_empty() {
        if let Mutation::Replace(_, value) = change {
            *document = value.clone();
        }
        return;
    }
    let pick = |at: &Index| all[at.index(all.len())].clone();
    match change {
        Mutation::Replace(at, value) => {
            if let Some(slot) = document.pointer_mut(&pick(at)) {
                *slot = value.clone();
            }
        }
        Mutation::Nest(at, depth) => {
            if let Some(slot) = document.pointer_mut(&pick(at)) {
                let mut nested = slot.take();
                for level in 0..*depth {
                    nested = if level % 2 == 0 { json!([nested]) } else { json!({ "n": nested }) };
                }
                *slot = nested;
            }
        }
        Mutation::Remove(at) | Mutation::Duplicate(at) | Mutation::Rename(at, _) => {
            let pointer = pick(at);
            let (parent, key) = split(&pointer);
            let Some(parent) = document.pointer_mut(parent) else { return };
            match (parent, change) {
                (Value::Object(map), Mutation::Remove(_)) => {
                    map.remove(&key);
                }
                (Value::Object(map), Mutation::Rename(_, name)) => {
                    if let Some(value) = map.remove(&key) {
                        map.insert(name.clone(), value);
                    }
                }
                (Value::Object(map), Mutation::Duplicate(_)) => {
                    if let Some(value) = map.get(&key).cloned() {
                        map.insert(format!("{key}2"), value);
                    }
                }
                (Value::Array(items), Mutation::Remove(_)) => {
                    if let Ok(index) = key.parse::<usize>() {
                        items.remove(index);
                    }
                }
                (Value::Array(items), Mutation::Duplicate(_) | Mutation::Rename(..)) => {
                    if let Some(item) = key.parse::<usize>().ok().and_then(|index| items.get(index).cloned()) {
                        items.push(item);
                    }
                }
                _ => {}
            }
        }
    }
}

/// A valid document from `bases` with one to four mutations applied.
fn mutated(bases: Vec<Value>) -> impl Strategy<Value = Value> {
    (prop::sample::select(bases), prop::collection::vec(mutation(), 1..=4)).prop_map(|(mut document, changes)| {
        for change in &changes {
            apply(&mut document, change);
        }
        document
    })
}

fn definitions() -> Vec<Value> {
    let example = |text: &str| serde_json::from_str::<Value>(text).unwrap();
    vec![
        example(include_str!("../../../examples/workflows/expense-approval.json")),
        example(include_str!("../../../examples/workflows/fan-out.json")),
        example(include_str!("../../../examples/workflows/order-review.json")),
        example(include_str!("../../../examples/workflows/reminder.json")),
        json!({ "id": "every-part", "name": "Every part", "version": "1",
            "nodes": [
                { "id": "wait", "typeId": "core.delay", "config": { "delayMs": 10 },
                  "inputs": { "delayMs": { "type": "variable", "variableName": "delayMs" } } },
                { "id": "ask", "typeId": "core.clarificationGate", "config": { "timeoutMs": 1000, "questions": [
                    { "id": "colour", "question": "Colour?", "schema": { "type": "string", "pattern": "^[a-z]+$" } }] } },
                { "id": "gate", "typeId": "core.approvalGate",
                  "config": { "requiredApprovals": 2, "approversList": ["ann", "bob"], "timeoutMs": 5000 } },
                { "id": "child", "typeId": "core.subWorkflow", "config": { "workflowId": "chain", "onChildFailure": "absorb" } },
                { "id": "event", "typeId": "core.interrupt", "config": { "kind": "external-event",
                    "data": { "eventType": "paid", "correlation": { "order": "o-1" } },
                    "resumeSchema": { "type": "object", "properties": { "amount": { "type": "number" } } } } },
            ],
            "edges": [
                { "id": "e1", "sourceNodeId": "wait", "targetNodeId": "ask",
                  "condition": { "type": "regex", "left": "tier", "right": "^g(old)?$" } },
                { "id": "e2", "sourceNodeId": "ask", "targetNodeId": "gate" },
                { "id": "e3", "sourceNodeId": "gate", "targetNodeId": "child",
                  "condition": { "type": "equals", "left": "output.action", "right": "accept" } },
                { "id": "e4", "sourceNodeId": "child", "targetNodeId": "event" },
            ],
            "variables": [{ "name": "delayMs", "type": "number", "defaultValue": 5 },
                          { "name": "tier", "type": "string", "defaultValue": "gold" }],
            "configurableSchema": { "type": "object", "$defs": { "n": { "type": "integer" } },
                "properties": { "n": { "$ref": "#/$defs/n" } } } }),
    ]
}

fn create_bodies() -> Vec<Value> {
    vec![
        json!({ "workflowId": "chain" }),
        json!({ "workflowId": "typed", "inputs": { "count": 3 } }),
        json!({ "workflowId": "chain", "inputs": { "note": "x" }, "tags": ["a", "b"], "metadata": { "k": "v" },
                "configurable": { "recursionLimit": 10, "runTimeoutMs": 60000 } }),
        json!({ "workflowId": "gated", "configurable": { "escalationThreshold": 0.5 } }),
    ]
}

// ----- the checks every answer must pass ----------------------------------------------

thread_local! {
    /// Answers seen by the current property, by `status code`: printed at its end (run with
    /// `--nocapture`) to show the generators reach the validators, not just the parser.
    static SEEN: std::cell::RefCell<std::collections::BTreeMap<String, usize>> = Default::default();
}

fn report(property: &str) {
    let seen = SEEN.with(|seen| std::mem::take(&mut *seen.borrow_mut()));
    let total: usize = seen.values().sum();
    eprintln!("{property}: {total} requests: {seen:?}");
}

/// Sends a request and checks the answer; returns its status and body.
async fn checked(h: &Harness, method: &str, uri: &str, body: Option<Body>) -> Result<(StatusCode, Value), String> {
    let before = h.counts();
    let (status, answer) = h.call(method, uri, body).await;
    let detail = ["rule", "reason", "keyword", "parameter", "field"]
        .iter()
        .find_map(|field| answer["details"][*field].as_str())
        .or_else(|| answer["details"]["violations"][0]["keyword"].as_str())
        .unwrap_or("");
    let key = format!("{} {} {detail}", status.as_u16(), answer["error"].as_str().unwrap_or(""));
    SEEN.with(|seen| *seen.borrow_mut().entry(key).or_default() += 1);
    if status.is_server_error() {
        return Err(format!("{method} {uri:.200} answered {status}: {answer:.400}"));
    }
    if !status.is_success() {
        if !is_envelope(&answer) {
            return Err(format!("{method} {uri:.200} answered {status} without the envelope: {answer:.400}"));
        }
        let after = h.counts();
        if after != before {
            return Err(format!("{method} {uri:.200} was refused ({status}) but persisted: {before:?} -> {after:?}"));
        }
    }
    Ok((status, answer))
}

/// Runs `property` over `strategy` for `PROPTEST_CASES` (default 256) cases on one runtime
/// and one harness.
fn run_property<S: Strategy>(
    strategy: S,
    property: impl Fn(&tokio::runtime::Runtime, &Harness, S::Value) -> Result<(), String>,
) where
    S::Value: std::fmt::Debug,
{
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let h = runtime.block_on(harness());
    let mut runner = TestRunner::new(Config { failure_persistence: None, ..Config::default() });
    let result = runner.run(&strategy, |value| property(&runtime, &h, value).map_err(TestCaseError::fail));
    report(std::thread::current().name().unwrap_or("property"));
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

// ----- the properties -----------------------------------------------------------------

#[test]
fn mutated_definitions_are_registered_or_refused_cleanly() {
    run_property((mutated(definitions()), any::<u32>()), |runtime, h, (mut document, salt)| {
        // A fresh id unless a mutation broke it, so one acceptance does not make the next a
        // version conflict and the validators behind it stay reachable.
        if document.get("id").and_then(Value::as_str).is_some_and(|id| id.len() < 100) {
            document["id"] = json!(format!("p-{salt}"));
        }
        runtime.block_on(async {
            checked(h, "POST", "/v1/workflows", Some(Body::from(document.to_string()))).await.map(|_| ())
        })
    });
}

#[test]
fn mutated_create_bodies_create_a_run_or_are_refused_cleanly() {
    run_property(mutated(create_bodies()), |runtime, h, body| {
        runtime.block_on(async { checked(h, "POST", "/v1/runs", Some(Body::from(body.to_string()))).await.map(|_| ()) })
    });
}

fn query_pair() -> impl Strategy<Value = (String, String)> {
    let keys = prop::sample::select(vec![
        "limit",
        "cursor",
        "status",
        "workflowId",
        "timeout",
        "lastSequence",
        "afterSequence",
        "after",
        "since",
        "tag",
        "tags",
        "sort",
        "order",
        "createdAfter",
        "createdBefore",
        "parentRunId",
        "limit[]",
        "",
        "%zz",
        "a\u{0}b",
    ]);
    let values = prop_oneof![
        prop::sample::select(vec![
            "0",
            "1",
            "-1",
            "100",
            "1000000",
            "18446744073709551616",
            "9223372036854775808",
            "1e3",
            "0x10",
            "running",
            "completed",
            "waiting-approval",
            "chain",
            "",
            " ",
            "%",
            "%zz",
            "%00",
            "%FF%FE",
            "😀",
            "eyJ4IjoxfQ",
            "AAAA",
            "run-0",
            "true",
            "null",
            "[]",
            "{}",
        ])
        .prop_map(str::to_owned),
        any::<String>(),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        (1usize..5000).prop_map(|n| "9".repeat(n)),
    ];
    (keys.prop_map(str::to_owned), values)
}

/// Percent-encodes everything but RFC 3986 unreserved characters (and keeps a literal `%`
/// when the value is meant to be a malformed escape).
fn encode(text: &str, raw: bool) -> String {
    if raw {
        return text.chars().filter(|c| c.is_ascii_graphic() && *c != '#' && *c != '&').collect();
    }
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (byte as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Encoded `key=value` pairs.
fn query() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec((query_pair(), any::<bool>()), 0..6).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|((key, value), raw)| {
                let (key, mut value) = (encode(&key, raw), encode(&value, raw));
                // A poll that may wait would only measure the clock: keep waits at zero.
                let sent = if raw { value.clone() } else { decode(&value) };
                if key == "timeout" && sent.trim().parse::<u64>().is_ok_and(|n| n > 0) {
                    value = "0".into();
                }
                (key, value)
            })
            .collect()
    })
}

/// Undoes [`encode`] (non-raw: every escape is a whole byte).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' && index + 2 < bytes.len() {
            if let Ok(byte) = u8::from_str_radix(&text[index + 1..index + 3], 16) {
                out.push(byte);
                index += 3;
                continue;
            }
        }
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn arbitrary_queries_on_the_run_list_and_the_poll_are_answered_cleanly() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let h = runtime.block_on(harness());
    let (status, created) = runtime.block_on(h.post("/v1/runs", &json!({ "workflowId": "chain" })));
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let run_id = created["runId"].as_str().unwrap().to_owned();
    let mut runner = TestRunner::new(Config { failure_persistence: None, ..Config::default() });
    let result = runner.run(&(query(), any::<bool>()), |(pairs, poll)| {
        let mut query: Vec<String> = pairs.iter().map(|(key, value)| format!("{key}={value}")).collect();
        if poll && !pairs.iter().any(|(key, _)| key == "timeout") {
            query.push("timeout=0".into()); // the default wait is 25 s
        }
        let query = query.join("&");
        let uri = if poll { format!("/v1/runs/{run_id}/events/poll?{query}") } else { format!("/v1/runs?{query}") };
        // A query the URI parser refuses never reaches the router; that is not the property.
        if uri.parse::<axum::http::Uri>().is_err() {
            return Ok(());
        }
        runtime.block_on(checked(&h, "GET", &uri, None)).map(|_| ()).map_err(TestCaseError::fail)
    });
    report("queries");
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

fn resume_values() -> Vec<Value> {
    vec![
        json!({ "resumeValue": { "action": "accept" } }),
        json!({ "resumeValue": { "action": "reject", "feedback": "no", "voter": "ann" } }),
        json!({ "resumeValue": { "action": "refine", "refineFeedback": { "note": "x" } } }),
        json!({ "resumeValue": { "answers": { "colour": "red", "count": 3 } } }),
        json!({ "resumeValue": { "answers": [{ "id": "colour", "answer": "red" }, { "id": "count", "answer": 2 }] } }),
    ]
}

#[test]
fn arbitrary_resume_values_resolve_or_are_refused_cleanly() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let h = runtime.block_on(harness());
    let targets = [("gated", "gate"), ("asking", "ask")];
    let runs: Vec<std::cell::RefCell<String>> = targets
        .iter()
        .map(|(workflow, node)| std::cell::RefCell::new(runtime.block_on(h.suspended(workflow, node))))
        .collect();
    let strategy = (mutated(resume_values()), 0..targets.len(), any::<bool>());
    let mut runner = TestRunner::new(Config { failure_persistence: None, ..Config::default() });
    let result = runner.run(&strategy, |(body, target, bare)| {
        let (workflow, node) = targets[target];
        // Half the approval cases go to the legacy route, which takes the value bare.
        let legacy = bare && node == "gate";
        let (body, surface) = match body.get("resumeValue").cloned() {
            Some(value) if legacy => (value, "approvals"),
            _ => (body, "interrupts"),
        };
        let uri = format!("/v1/runs/{}/{surface}/{node}", runs[target].borrow());
        let (status, _) = runtime
            .block_on(checked(&h, "POST", &uri, Some(Body::from(body.to_string()))))
            .map_err(TestCaseError::fail)?;
        if status.is_success() {
            // Resolved (or a vote recorded): suspend a fresh run so later cases reach the judge.
            *runs[target].borrow_mut() = runtime.block_on(h.suspended(workflow, node));
        }
        Ok(())
    });
    report("resume values");
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
