//! `core.ai.callPrompt` and run budgets on the emulated AWS stack and on the embedded host,
//! against one fake model provider on 127.0.0.1 (the testkit's), with the same scripted
//! replies for both: a structured answer validated; an invalid answer repaired once, then
//! failed `response_schema_invalid`; a 429 retried per the node's `settings.retry`; a streamed
//! answer in batched `output.chunk` events, in order (and, on the API function's `messages`
//! stream, one `ai.message.chunk` frame per token); `provider.usage` before `node.completed`;
//! a budget breach under `fail` and under `interrupt` (the `usage-only` mock). Each scenario's
//! whole event sequence (the `debug` log) is the same on both backends. Without the emulators
//! the suite is ignored.

mod support;

use serde_json::{json, Value};
use support::{embedded_host_with, require_emulators, stack_with, types, AwsDriver, KEY};
use trellis_testkit::fake_model::{FakeModel, ModelReply};
use trellis_testkit::script::Runner;
use trellis_testkit::{Driver, HttpDriver};

/// The providers document both hosts get: an OpenAI-compatible and an Anthropic provider,
/// both served by `fake`.
fn providers(fake: &FakeModel) -> Value {
    json!([
        {"id": "fake", "kind": "openai", "baseUrl": fake.openai_base_url(), "models": ["fake-model"], "default": true},
        {"id": "claude", "kind": "anthropic", "baseUrl": fake.anthropic_base_url(), "models": ["claude-fake"]},
    ])
}

fn workflow(id: &str, nodes: Value) -> Value {
    let edges: Vec<Value> = nodes
        .as_array()
        .unwrap()
        .windows(2)
        .enumerate()
        .map(|(index, pair)| json!({"id": format!("e{index}"), "sourceNodeId": pair[0]["id"], "targetNodeId": pair[1]["id"]}))
        .collect();
    json!({"id": id, "name": id, "version": "1", "nodes": nodes, "edges": edges})
}

fn workflows() -> Vec<Value> {
    let schema = json!({
        "type": "object", "additionalProperties": false, "required": ["answer", "confidence"],
        "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    });
    let retry = json!({"retry": {"maxAttempts": 3, "initialIntervalMs": 10, "backoffCoefficient": 1.0}});
    vec![
        workflow(
            "ai-structured",
            json!([{"id": "ask", "typeId": "core.ai.callPrompt",
                    "config": {"prompt": "Answer {{variables.q}}", "responseSchema": schema}}]),
        ),
        workflow(
            "ai-retried",
            json!([{"id": "ask", "typeId": "core.ai.callPrompt", "config": {"prompt": "hi"}, "settings": retry}]),
        ),
        workflow(
            "ai-streamed",
            json!([{"id": "ask", "typeId": "core.ai.callPrompt", "config": {"provider": "claude", "prompt": "tell", "stream": true}}]),
        ),
        workflow(
            "ai-two-calls",
            json!([
                {"id": "first", "typeId": "core.ai.callPrompt", "config": {"prompt": "one"}},
                {"id": "second", "typeId": "core.ai.callPrompt", "config": {"prompt": "two"}},
            ]),
        ),
    ]
}

/// Both backends, on one fake provider.
struct Pair {
    fake: FakeModel,
    aws: support::Stack,
    host: trellis::host::EmbeddedHost,
    base: String,
    _dir: std::path::PathBuf,
}

async fn pair() -> Pair {
    let fake = FakeModel::start().await;
    let document = providers(&fake);
    let aws = stack_with(Default::default(), document.to_string()).await;
    let dir = std::env::temp_dir().join(format!("trellis-emulated-ai-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("providers.json");
    std::fs::write(&file, document.to_string()).unwrap();
    let ai = trellis::args::AiArgs { providers_file: Some(file), ..Default::default() };
    let (host, client) = embedded_host_with(false, &workflows(), ai).await;
    for definition in workflows() {
        assert_eq!(aws.api("POST", "/v1/workflows", Some(definition)).await.0, 201);
    }
    Pair { fake, aws, host, base: client.base, _dir: dir }
}

/// The whole log of `run_id` as the `debug` mode serves it, through `driver`.
async fn debug_log(driver: &mut dyn trellis_testkit::Driver, run_id: &str) -> Vec<Value> {
    let (status, page) =
        driver.call("GET", &format!("/v1/runs/{run_id}/events/poll?timeout=0&streamMode=debug"), None, true).await;
    assert_eq!(status, 200, "{page}");
    page["events"].as_array().cloned().unwrap_or_default()
}

/// Plays `script` on AWS, then on the embedded host, each time with `replies` scripted on the
/// fake first; asserts both ran the same event sequence; returns the AWS log and snapshot.
async fn both(pair: &mut Pair, script: Value, replies: impl Fn() -> Vec<ModelReply>) -> (Vec<Value>, Value) {
    pair.fake.script(replies());
    let mut aws = AwsDriver(&mut pair.aws);
    let on_aws = Runner::new(&mut aws).run(&script).await;
    let aws_log = debug_log(&mut aws, &on_aws.run_id).await;
    let (_, aws_snapshot) = aws.call("GET", &format!("/v1/runs/{}", on_aws.run_id), None, true).await;
    pair.fake.script(replies());
    let mut embedded = HttpDriver::new(&pair.base, KEY);
    let on_embedded = Runner::new(&mut embedded).run(&script).await;
    let embedded_log = debug_log(&mut embedded, &on_embedded.run_id).await;
    assert_eq!(
        (on_aws.status.as_str(), types(&aws_log)),
        (on_embedded.status.as_str(), types(&embedded_log)),
        "{}: AWS and embedded differ",
        script["id"]
    );
    (aws_log, aws_snapshot)
}

fn position(log: &[Value], event_type: &str) -> usize {
    log.iter().position(|event| event["type"] == event_type).unwrap_or_else(|| panic!("no {event_type}"))
}

fn count(log: &[Value], event_type: &str) -> usize {
    log.iter().filter(|event| event["type"] == event_type).count()
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn model_calls_behave_the_same_on_aws_as_embedded() {
    require_emulators();
    let mut pair = pair().await;

    // A structured answer: validated, parsed into the node's variables.
    let script = json!({"id": "structured", "workflowId": "ai-structured", "request": {"inputs": {"q": "why"}},
                        "expect": {"status": "completed"}});
    let answer = json!({"answer": "because", "confidence": 0.9});
    let (log, snapshot) = both(&mut pair, script, || vec![ModelReply::json(&answer)]).await;
    assert_eq!(snapshot["variables"]["ask"]["data"], answer, "{snapshot}");
    assert_eq!(count(&log, "provider.usage"), 1);
    assert!(position(&log, "provider.usage") < position(&log, "node.completed"));
    assert_eq!(snapshot["metrics"]["openwopCost"]["provider"], "fake", "{snapshot}");

    // An invalid answer gets one repair turn; still invalid, the node fails with the code.
    let script = json!({"id": "repair", "workflowId": "ai-structured", "request": {"inputs": {"q": "why"}},
                        "expect": {"status": "failed"}});
    let (log, snapshot) =
        both(&mut pair, script, || vec![ModelReply::malformed_json(), ModelReply::malformed_json()]).await;
    assert_eq!(count(&log, "provider.usage"), 2, "the repair turn is a second invocation");
    let failed = &log[position(&log, "node.failed")];
    assert_eq!(failed["payload"]["error"]["code"], "response_schema_invalid", "{failed}");
    assert_eq!(snapshot["status"], "failed");

    // A 429 is retried under the node's policy, then the call succeeds.
    let script = json!({"id": "retried", "workflowId": "ai-retried", "expect": {"status": "completed"}});
    let (log, _) = both(&mut pair, script, || vec![ModelReply::rate_limited(1), ModelReply::text("fine")]).await;
    let retried = &log[position(&log, "node.retried")];
    assert_eq!(retried["payload"]["lastError"]["code"], "provider_quota_exhausted", "{retried}");
    assert_eq!(count(&log, "node.started"), 2);

    // A streamed answer (Anthropic's wire format): batched chunks, in order, the last closing.
    let tokens: Vec<String> = (0..40).map(|index| format!("t{index} ")).collect();
    let script = json!({"id": "streamed", "workflowId": "ai-streamed", "expect": {"status": "completed"}});
    let (log, snapshot) = both(&mut pair, script, || vec![ModelReply::tokens(tokens.clone())]).await;
    let chunks: Vec<&Value> = log.iter().filter(|event| event["type"] == "output.chunk").collect();
    assert!(
        !chunks.is_empty() && chunks.len() < tokens.len(),
        "batched: {} events for {} tokens",
        chunks.len(),
        tokens.len()
    );
    let parts: Vec<String> = chunks
        .iter()
        .flat_map(|event| event["payload"]["chunk"]["parts"].as_array().cloned().unwrap_or_default())
        .map(|part| part.as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(parts.concat(), tokens.concat(), "every token, in order");
    assert_eq!(chunks.last().unwrap()["payload"]["chunk"]["isLast"], true);
    assert!(position(&log, "provider.usage") < position(&log, "node.completed"));
    assert_eq!(snapshot["variables"]["ask"]["text"], tokens.concat());
    // The same batches on the API function's `messages` stream: one frame per token, in order.
    let run_id = snapshot["runId"].as_str().unwrap().to_owned();
    let path = format!("/v1/runs/{run_id}/events?streamMode=messages");
    let (status, body) = pair.aws.request_bytes("GET", &path, None, true, Some("text/event-stream")).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    let frames: Vec<Value> = text
        .split("\n\n")
        .filter(|frame| frame.contains("event: ai.message.chunk"))
        .map(|frame| serde_json::from_str(frame.split_once("data: ").unwrap().1).unwrap())
        .collect();
    assert_eq!(frames.len(), tokens.len(), "{text}");
    let streamed: Vec<&str> = frames.iter().map(|frame| frame["chunk"].as_str().unwrap()).collect();
    assert_eq!(streamed, tokens.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(frames.last().unwrap()["isLast"], true);
    assert!(frames[..frames.len() - 1].iter().all(|frame| frame["isLast"] == false));

    pair.host.stop().await;
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn budgets_stop_a_run_the_same_way_on_aws_as_embedded() {
    require_emulators();
    let mut pair = pair().await;
    let usage = json!({"id": "usage-only", "config": {"usage": {"promptTokens": 40, "completionTokens": 20}}});

    // Under `fail`: the first call spends the budget; cap.breached, then run.failed.
    let budget = json!({"maxTokens": 50, "onExhaustion": "fail"});
    let script = json!({"id": "budget-fail", "workflowId": "ai-two-calls",
                        "request": {"configurable": {"mockProvider": usage, "budget": budget}},
                        "expect": {"status": "failed", "errorCode": "budget_exhausted"}});
    let (log, _) = both(&mut pair, script, Vec::new).await;
    assert_eq!(position(&log, "budget.reserved"), position(&log, "run.started") + 1);
    assert!(position(&log, "budget.exhausted") < position(&log, "cap.breached"));
    assert_eq!(log[position(&log, "cap.breached")]["payload"]["kind"], "budget-tokens");
    assert!(position(&log, "cap.breached") < position(&log, "run.failed"));

    // Under `interrupt`: the second call waits for approval; an allowance lets it run.
    let budget = json!({"maxTokens": 50, "onExhaustion": "interrupt"});
    let script = json!({
        "id": "budget-interrupt", "workflowId": "ai-two-calls",
        "request": {"configurable": {"mockProvider": usage, "budget": budget}},
        "steps": [
            {"await": "waiting-approval", "currentNodeId": "second"},
            {"resolve": "second", "resumeValue": {"action": "accept", "data": {"budget": {"maxTokens": 100}}}},
        ],
        "expect": {"status": "completed"},
    });
    let (log, _) = both(&mut pair, script, Vec::new).await;
    assert_eq!(count(&log, "budget.reserved"), 2, "the allowance is a second reservation");
    assert_eq!(count(&log, "provider.usage"), 2);

    pair.host.stop().await;
}
