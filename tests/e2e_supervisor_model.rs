//! The model-backed `core.orchestrator.supervisor` on the embedded host, end to end, against
//! the testkit's fake model on 127.0.0.1. The scenarios (and their event type sequences) are
//! the testkit's ([`trellis_testkit::supervisor_model`]), the same the emulated AWS suite
//! plays: decisions answered by the model, validated and dispatched; a low-confidence
//! decision held for ratification, dispatched after `accept`; an answer invalid twice (one
//! repair turn) failing `response_schema_invalid`; a terminate with an unmet criterion
//! reported as a give-up; a token budget breached by the supervisor's own calls; a tool-call
//! budget breached by an agent node before the supervisor. The shipped
//! example `research-supervisor` runs to its documented outcome.

mod common;

use std::path::{Path, PathBuf};

use common::{serve_args, start, Client, KEY};
use serde_json::{json, Value};
use trellis::host::EmbeddedHost;
use trellis_testkit::fake_model::{FakeModel, ModelReply};
use trellis_testkit::script::Runner;
use trellis_testkit::supervisor_model::{self, scenarios, Scenario};
use trellis_testkit::HttpDriver;

fn providers_file(dir: &Path, fake: &FakeModel) -> PathBuf {
    let path = dir.join("providers.json");
    std::fs::write(&path, supervisor_model::providers(fake).to_string()).unwrap();
    path
}

async fn host(fake: &FakeModel, dir: &Path, workflows: Vec<PathBuf>) -> (EmbeddedHost, Client) {
    let mut args = serve_args(None);
    args.ai.providers_file = Some(providers_file(dir, fake));
    args.http_allow_private_nets = String::new();
    args.workflows = workflows;
    let host = start(args).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    (host, client)
}

fn scenario(id: &str) -> Scenario {
    scenarios().into_iter().find(|s| s.script["id"] == id).unwrap()
}

/// Plays scenario `id`; returns the run's snapshot and its debug log.
async fn play(client: &Client, fake: &FakeModel, id: &str) -> (Value, Vec<Value>) {
    let scenario = scenario(id);
    fake.clear_requests();
    fake.script(scenario.replies.clone());
    let mut driver = HttpDriver::new(&client.base, KEY);
    let finished = Runner::new(&mut driver).run(&scenario.script).await;
    let snapshot = client.snapshot(&finished.run_id).await;
    (snapshot, client.debug_events(&finished.run_id).await)
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|event| event["type"] == kind).collect()
}

#[tokio::test]
async fn a_model_backed_supervisor_decides_holds_repairs_gives_up_and_stays_in_budget() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    let (host, client) = host(&fake, dir.path(), Vec::new()).await;
    for workflow in supervisor_model::workflows() {
        let (status, body) = client.request("POST", "/v1/workflows", Some(workflow)).await;
        assert_eq!(status, 201, "{body}");
    }
    let discovery = client.discovery().await;
    assert_eq!(discovery["agents"]["orchestrator"], true, "{discovery}");

    // Decisions from the model: recorded, dispatched with their per-item inputs; each tick
    // sees the run so far (the previous decisions and workers' results).
    let (snapshot, events) = play(&client, &fake, "sm-dispatch").await;
    let decided = of_type(&events, "runOrchestrator.decided");
    assert_eq!(
        decided[0]["payload"]["decision"],
        json!({"kind": "next-worker", "nextWorkerIds": ["sm-research"],
               "nextWorkerInputs": [{"topic": "Rayleigh scattering"}], "confidence": 0.9})
    );
    assert_eq!(snapshot["childRuns"][0]["workflowId"], "sm-research", "{snapshot}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "one model call per tick");
    let third = requests[2].last_user_text().unwrap();
    assert!(third.contains("Rayleigh scattering") && third.contains("short wavelengths"), "{third}");
    assert!(third.contains("\"tick\": 3"), "{third}");
    assert!(requests[0].last_user_text().unwrap().contains("why is the sky blue?"));
    assert_eq!(of_type(&events, "provider.usage").len(), 3);
    assert_eq!(snapshot["outputs"]["terminate"]["goalSatisfied"], true, "{snapshot}");
    assert!(snapshot["metrics"]["openwopCost"]["usd"].as_f64().is_some_and(|usd| usd > 0.0), "{snapshot}");

    // CP-1: the model's confidence 0.4 is below 0.7: held, then dispatched after accept.
    let (_, events) = play(&client, &fake, "sm-low-confidence").await;
    let suspended = of_type(&events, "node.suspended");
    assert_eq!(suspended[0]["payload"]["reason"], "low-confidence");
    assert_eq!(suspended[0]["payload"]["observed"], 0.4);
    let resolved = events.iter().position(|e| e["type"] == "interrupt.resolved").unwrap();
    let first_decided = events.iter().position(|e| e["type"] == "runOrchestrator.decided").unwrap();
    assert!(resolved < first_decided, "nothing is recorded before the ratification");

    // Invalid twice: one repair turn naming the violation, then response_schema_invalid.
    let (snapshot, events) = play(&client, &fake, "sm-invalid").await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].last_user_text().unwrap().contains("/decision/nextWorkerIds/0"));
    assert_eq!(snapshot["error"]["code"], "response_schema_invalid", "{snapshot}");
    assert_eq!(of_type(&events, "node.failed")[0]["payload"]["error"]["details"]["repairTurns"], 1);

    // A terminate with an unmet criterion completes as a give-up, never as success.
    let (snapshot, _) = play(&client, &fake, "sm-give-up").await;
    assert_eq!(
        snapshot["outputs"]["terminate"],
        json!({"goalSatisfied": false, "reason": "no sources found",
               "successCriteria": [{"key": "answered", "met": false}]}),
        "{snapshot}"
    );

    // The supervisor's own calls count against the run's token budget.
    let (_, events) = play(&client, &fake, "sm-budget").await;
    let breach = of_type(&events, "cap.breached");
    assert_eq!(breach[0]["payload"]["kind"], "budget-tokens", "{breach:?}");
    assert_eq!(breach[0]["payload"]["nodeId"], "supervisor");

    // A tool call of an agent node of the same run counts against its `maxToolCalls`: the
    // second call breaches before it is made, and the supervisor is never asked.
    let (snapshot, events) = play(&client, &fake, "sm-tool-budget").await;
    let breach = of_type(&events, "cap.breached");
    assert_eq!(breach[0]["payload"]["kind"], "budget-tool-calls", "{breach:?}");
    assert_eq!(breach[0]["payload"]["nodeId"], "gather", "{breach:?}");
    assert_eq!(of_type(&events, "agent.toolCalled").len(), 2);
    assert_eq!(of_type(&events, "agent.toolReturned").len(), 1, "the breaching call never ran");
    assert_eq!(snapshot["childRuns"][0]["workflowId"], "sm-research", "{snapshot}");
    assert_eq!(fake.requests().len(), 2, "two agent turns; no supervisor tick");
    host.stop().await;
}

#[tokio::test]
async fn the_research_supervisor_example_researches_writes_and_terminates() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/workflows");
    let (host, client) = host(&fake, dir.path(), vec![examples]).await;
    let decision = |value: Value| ModelReply::json(&value).usage(50, 10);
    fake.script(vec![
        decision(supervisor_model::dispatch("research-worker", json!({"topic": "tides"}), 0.9)),
        ModelReply::text("The moon's gravity pulls the oceans.").usage(20, 10),
        decision(supervisor_model::dispatch("writer-worker", json!({"notes": "moon gravity"}), 0.9)),
        ModelReply::text("Tides are caused by the moon.").usage(20, 10),
        decision(supervisor_model::terminate("goal-reached", true)),
    ]);
    let run_id =
        client.create(json!({"workflowId": "research-supervisor", "inputs": {"question": "What causes tides?"}})).await;
    let snapshot = client.wait_terminal(&run_id, trellis_testkit::SPEC_DEADLINE * 4).await;
    assert_eq!(snapshot["status"], "completed", "{snapshot}");
    assert_eq!(snapshot["outputs"]["terminate"]["goalSatisfied"], true, "{snapshot}");
    let children: Vec<&str> =
        snapshot["childRuns"].as_array().unwrap().iter().map(|c| c["workflowId"].as_str().unwrap()).collect();
    assert_eq!(children, ["research-worker", "writer-worker"]);
    assert_eq!(snapshot["variables"]["answer"]["text"], "Tides are caused by the moon.", "{snapshot}");
    assert_eq!(fake.request_count(), 5);
    host.stop().await;
}

/// A model-backed supervisor is checked by the host's executor at registration: a template
/// error in `goal` is a `400` naming the field; a Bedrock route on the embedded host (which
/// serves no Bedrock) is `422 capability_required`; the model is never called.
#[tokio::test]
async fn a_model_backed_supervisor_is_checked_at_registration() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    let (host, client) = host(&fake, dir.path(), Vec::new()).await;
    let workflow = |id: &str, config: Value| {
        json!({"id": id, "name": id,
               "nodes": [{"id": "sup", "typeId": "core.orchestrator.supervisor", "config": config},
                         {"id": "dispatch", "typeId": "core.dispatch", "config": {}}],
               "edges": [{"id": "e1", "sourceNodeId": "sup", "targetNodeId": "dispatch"}]})
    };
    let broken = workflow("sm-broken", json!({"route": "fake/fake-model", "goal": "Answer {{variables.question"}));
    let (status, body) = client.request("POST", "/v1/workflows", Some(broken)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["details"]["nodeId"], "sup", "{body}");
    assert!(body["details"]["problem"].as_str().is_some_and(|p| p.contains("`goal`")), "{body}");
    let on_bedrock = workflow("sm-bedrock", json!({"route": "bedrock/amazon.nova-micro-v1:0", "goal": "g"}));
    let (status, body) = client.request("POST", "/v1/workflows", Some(on_bedrock)).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("capability_required")), "{body}");
    assert_eq!(body["details"]["requiredCapability"], "aiProviders.bedrock", "{body}");
    assert_eq!(body["details"]["nodeId"], "sup", "{body}");
    assert_eq!(fake.request_count(), 0);
    host.stop().await;
}
