//! The fixture expectation table and the scripted scenarios (`conformance/`) on the emulated
//! AWS stack and on the embedded host, through the testkit's one script runner: interrupts
//! (run-scoped, by token, legacy), quorum votes, refine, timeouts, cancel cascades and
//! pause/resume behave the same on both backends, event for event. Without the emulator
//! settings the suite says it is skipped.

mod support;

use serde_json::Value;
use support::{embedded_host, emulators_configured, stack, AwsDriver, KEY};
use trellis_testkit::script::Runner;
use trellis_testkit::HttpDriver;

const TABLE: &str = include_str!("../../../conformance/fixture-expectations.json");
const SCENARIOS: &str = include_str!("../../../conformance/scenarios.json");

#[tokio::test]
async fn every_script_gives_the_same_run_on_aws_as_embedded() {
    if !emulators_configured() {
        return;
    }
    let table: Value = serde_json::from_str(TABLE).unwrap();
    let scenarios: Value = serde_json::from_str(SCENARIOS).unwrap();
    let workflows = scenarios["workflows"].as_array().unwrap();
    let mut aws = stack().await;
    for workflow in workflows {
        assert_eq!(aws.api("POST", "/v1/workflows", Some(workflow.clone())).await.0, 201);
    }
    let (host, client) = embedded_host(false, workflows).await;
    let scripts = table["fixtures"].as_array().unwrap().iter().chain(scenarios["scenarios"].as_array().unwrap());
    let mut checked = 0;
    for script in scripts {
        let on_aws = Runner::new(&mut AwsDriver(&mut aws)).run(script).await;
        let mut embedded = HttpDriver::new(&client.base, KEY);
        let on_embedded = Runner::new(&mut embedded).run(script).await;
        assert_eq!(
            (on_aws.status, on_aws.event_types),
            (on_embedded.status, on_embedded.event_types),
            "{}: AWS and embedded differ",
            script["id"]
        );
        checked += 1;
    }
    assert!(checked >= 25, "only {checked} scripts ran");
    host.stop().await;
}

#[tokio::test]
async fn of_racing_resolutions_on_aws_exactly_one_wins() {
    if !emulators_configured() {
        return;
    }
    let mut aws = stack().await;
    let script = serde_json::json!({"id": "race", "workflowId": "conformance-approval"});
    let created = Runner::new(&mut AwsDriver(&mut aws)).run_until(&script, "waiting-approval").await;
    let path = format!("/v1/runs/{created}/interrupts/gate");
    let body = serde_json::json!({"resumeValue": {"action": "accept"}});
    let racers = (0..6).map(|_| aws.api("POST", &path, Some(body.clone())));
    let mut answers: Vec<(u16, Value)> = futures_util::future::join_all(racers).await;
    answers.sort_by_key(|(status, _)| *status);
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses, [200, 409, 409, 409, 409, 409], "{answers:?}");
    assert!(answers[1..].iter().all(|(_, body)| body["error"] == "interrupt_already_resolved"));
    let snapshot = aws.pump_until_terminal(&created, support::SPEC_DEADLINE, false).await;
    assert_eq!(snapshot["status"], "completed");
    let events = aws.events(&created).await;
    assert_eq!(events.iter().filter(|e| e["type"] == "interrupt.resolved").count(), 1);
}
