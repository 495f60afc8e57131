//! The model-backed `core.orchestrator.supervisor` on the emulated AWS stack and on the
//! embedded host, against one fake model on 127.0.0.1: the testkit's scenarios
//! ([`trellis_testkit::supervisor_model`]) — decisions from the model dispatched, a
//! low-confidence decision held then accepted, an answer invalid twice failing
//! `response_schema_invalid`, a give-up, a token budget breached by the supervisor, a
//! tool-call budget breached by an agent node of the same run (`cap.breached{kind:
//! budget-tool-calls}`) — each with its expected event type sequence (the scripts'
//! `expect.eventTypes`) on both backends, the same `debug` log's event types, one
//! `provider.usage` per model answer, the same recorded decisions and the same breaches. Without the emulators the suite is ignored.

mod support;

use serde_json::{json, Value};
use support::{embedded_host_with, require_emulators, stack_with, types, AwsDriver, KEY};
use trellis_testkit::fake_model::FakeModel;
use trellis_testkit::script::Runner;
use trellis_testkit::supervisor_model::{providers, scenarios, workflows};
use trellis_testkit::{Driver, HttpDriver};

/// The whole log of `run_id` as the `debug` mode serves it, through `driver`.
async fn debug_log(driver: &mut dyn Driver, run_id: &str) -> Vec<Value> {
    let (status, page) =
        driver.call("GET", &format!("/v1/runs/{run_id}/events/poll?timeout=0&streamMode=debug"), None, true).await;
    assert_eq!(status, 200, "{page}");
    page["events"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
async fn a_model_backed_supervisor_runs_the_same_on_aws_as_embedded() {
    require_emulators();
    let fake = FakeModel::start().await;
    let document = providers(&fake);
    let mut aws = stack_with(Default::default(), document.to_string()).await;
    let dir = std::env::temp_dir().join(format!("trellis-emulated-sm-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("providers.json");
    std::fs::write(&file, document.to_string()).unwrap();
    let ai = trellis::args::AiArgs { providers_file: Some(file), ..Default::default() };
    let (host, client) = embedded_host_with(false, &workflows(), ai).await;
    for definition in workflows() {
        let (status, body) = aws.api("POST", "/v1/workflows", Some(definition)).await;
        assert_eq!(status, 201, "{body}");
    }

    for scenario in scenarios() {
        let id = scenario.script["id"].clone();
        fake.script(scenario.replies.clone());
        let mut on_aws = AwsDriver(&mut aws);
        let aws_run = Runner::new(&mut on_aws).run(&scenario.script).await;
        let aws_log = debug_log(&mut on_aws, &aws_run.run_id).await;
        assert_eq!(fake.pending(), 0, "{id}: every scripted answer was asked for on AWS");

        fake.script(scenario.replies.clone());
        let mut embedded = HttpDriver::new(&client.base, KEY);
        let embedded_run = Runner::new(&mut embedded).run(&scenario.script).await;
        let embedded_log = debug_log(&mut embedded, &embedded_run.run_id).await;
        assert_eq!(
            (aws_run.status.as_str(), types(&aws_log)),
            (embedded_run.status.as_str(), types(&embedded_log)),
            "{id}: AWS and embedded differ"
        );
        // Each answer the fake gave is one model call the host reported, on both backends; the
        // decisions recorded are the same, payload for payload.
        let of = |log: &[Value], kind: &str| -> Vec<Value> {
            log.iter().filter(|e| e["type"] == kind).map(|e| e["payload"].clone()).collect()
        };
        assert_eq!(of(&aws_log, "provider.usage").len(), scenario.replies.len(), "{id}: one usage per model call");
        assert_eq!(of(&aws_log, "runOrchestrator.decided"), of(&embedded_log, "runOrchestrator.decided"), "{id}");
        // A breach names the same dimension and node on both; the agent's breaches the tool calls.
        let breaches = |log: &[Value]| -> Vec<(Value, Value)> {
            of(log, "cap.breached").iter().map(|p| (p["kind"].clone(), p["nodeId"].clone())).collect()
        };
        assert_eq!(breaches(&aws_log), breaches(&embedded_log), "{id}");
        if id == "sm-tool-budget" {
            assert_eq!(breaches(&aws_log), [(json!("budget-tool-calls"), json!("gather"))], "{id}");
        }
    }
    host.stop().await;
    std::fs::remove_dir_all(&dir).ok();
}
